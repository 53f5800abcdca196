"""Seed example, L3: a prepared DistributedWorker serving dispatches with different ring
sizes (prefill with a larger window, decode with a smaller one), and the one-shot path."""

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K


@taskring.program(signature=[IN, IN, OUT])
def layer(rt, x, w, out):
    with rt.scope():
        rt.submit(K.matmul, inputs=[x, w], outputs=[out])


def orchestration(o, chips, args, cfg):
    x, w, out = args
    half = x.shape[0] // 2
    # Every chip task of this dispatch gets the dispatch's config.
    o.submit_next_level(chips.layer, [x[:half], w, out[:half]], cfg, worker=0)
    o.submit_next_level(chips.layer, [x[half:], w, out[half:]], cfg, worker=1)


compiled = taskring.DistributedProgram(
    orchestration,
    chips={"layer": layer},
    config=taskring.DistributedConfig(device_ids=[0, 1], aicpu_thread_num=4),
    signature=[taskring.IN, taskring.IN, taskring.OUT],
)


def main():
    prefill_cfg = taskring.RunConfig(ring_task_window=256)
    decode_cfg = taskring.RunConfig(ring_task_window=64)
    host_x = taskring.shared_array((64, 32))
    weight = taskring.shared_array((32, 16))
    host_out = taskring.shared_array((64, 16))
    host_x[:] = np.random.default_rng(2).standard_normal(host_x.shape)
    weight[:] = 0.5
    with compiled.prepare(prefill_cfg) as rt:  # one-time setup + prewarm on every chip
        for cfg in (prefill_cfg, decode_cfg):
            rep = rt(host_x, weight, host_out, config=cfg)
            assert np.allclose(host_out, host_x @ weight, atol=1e-5)
            print("task windows per chip:", [t.ring_sizing.task_window for t in rep.tasks])
    # The one-shot path honours the override too (plain numpy arrays are copied).
    a = np.ones((8, 32), np.float32)
    c = np.zeros((8, 16), np.float32)
    rep = compiled(a, np.full((32, 16), 2.0, np.float32), c, config=taskring.RunConfig(ring_heap=8 * 1024 * 1024))
    assert np.allclose(c, 64.0)
    print("one-shot heaps per chip (window default):", [t.ring_sizing.heap for t in rep.tasks])


if __name__ == "__main__":
    main()
