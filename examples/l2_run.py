"""Seed example, L2: one dispatch with its own ring sizing (`taskring.run`)."""

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K


@taskring.program(signature=[IN, IN, OUT])
def my_program(rt, a, b, c):
    # c = softmax_rows(a @ b), one row block per scope.
    rows = a.shape[0]
    for r in range(0, rows, 16):
        with rt.scope():
            s = rt.submit(K.matmul, inputs=[a[r:r + 16], b], outputs=[rt.spec((16, b.shape[1]), "float32")]).outputs[0]
            rt.submit(K.softmax_rows, inputs=[s], outputs=[c[r:r + 16]])


def main():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    c = np.zeros((128, 32), np.float32)
    report = taskring.run(
        my_program,
        a, b, c,
        config=taskring.RunConfig(
            ring_task_window=128,  # 128 in-flight task slots per ring
            ring_heap=8 * 1024 * 1024,  # 8 MiB output heap per ring
            ring_dep_pool=256,  # 256 dependency-edge entries per ring
        ),
    )
    s = a @ b
    e = np.exp(s - s.max(axis=1, keepdims=True))
    assert np.allclose(c, e / e.sum(axis=1, keepdims=True), atol=1e-5)
    print(report.ring_sizing)
    print("peak:", report.peak, "tasks:", report.tasks, f"elapsed {report.elapsed_s * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
