"""The main demo (`make run`): one L3 orchestration fans out heterogeneous L2 tasks to
chip processes in one launch, and each L2 task binds its rings from its OWN
CallConfig.runtime_env — a big attention-like decode with a big window and heap beside
small elementwise tasks on small rings. Each chip resolves its sizing itself and
reports it back with its per-ring peaks.
"""

from __future__ import annotations

import time

import numpy as np

import taskring
from taskring import IN, INOUT, OUT, kernels as K

HEADS, DIM, BLOCK, BLOCKS = 8, 64, 16, 32


@taskring.program(signature=[IN, IN, IN, OUT])
def decode(rt, q, kt, v, out):
    """Paged-attention-like decode: scores per KV block, one softmax, PV accumulated."""
    width = BLOCK * BLOCKS
    scores = rt.alloc((HEADS, width), "float32")
    for b in range(BLOCKS):
        with rt.scope():
            sb = scores.view((HEADS, BLOCK), b * BLOCK, (width, 1))
            rt.submit(K.matmul, inputs=[q, kt[b * DIM:(b + 1) * DIM]], outputs=[sb])
    p = rt.submit(K.softmax_rows, inputs=[scores], outputs=[rt.spec((HEADS, width), "float32")]).outputs[0]
    rt.submit(K.fill, outputs=[out], scalars=[0.0])
    for b in range(BLOCKS):
        with rt.scope():
            pb = p.view((HEADS, BLOCK), b * BLOCK, (width, 1))
            rt.submit(K.matmul_acc, inputs=[pb, v[b * BLOCK:(b + 1) * BLOCK]], inouts=[out])


@taskring.program(signature=[IN, IN, OUT])
def axpy(rt, x, y, out):
    """out = 2 * x + y, through a runtime temporary, in a scope (ring 1)."""
    with rt.scope():
        t = rt.submit(K.scale, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)], scalars=[2.0]).outputs[0]
        rt.submit(K.add, inputs=[t, y], outputs=[out])


def reference(q, kt, v):
    s = np.concatenate([q @ kt[b * DIM:(b + 1) * DIM] for b in range(BLOCKS)], axis=1)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v


def main() -> None:
    rng = np.random.default_rng(0)
    q = taskring.shared_array((HEADS, DIM))
    kt = taskring.shared_array((BLOCKS * DIM, BLOCK))
    v = taskring.shared_array((BLOCKS * BLOCK, DIM))
    attn = taskring.shared_array((HEADS, DIM))
    q[:] = rng.standard_normal(q.shape) * 0.1
    kt[:] = rng.standard_normal(kt.shape) * 0.1
    v[:] = rng.standard_normal(v.shape)
    x = taskring.shared_array((64, 256))
    y = taskring.shared_array((64, 256))
    x[:] = rng.standard_normal(x.shape)
    y[:] = rng.standard_normal(y.shape)
    outs = [taskring.shared_array((64, 256)) for _ in range(3)]

    w = taskring.Worker(level=3, device_ids=[0, 1, 2])
    h_decode = w.register(decode)
    h_axpy = w.register(axpy)
    w.init(prewarm_config=taskring.CallConfig())  # every chip builds the default arena
    print(f"taskring L3 demo: 3 chip processes (pids {list(w.pids)})")

    def orchestration(o, args, cfg):
        # The big task: a large window on ring 0/1 and a 64 MiB heap per ring.
        big = taskring.RunConfig(ring_task_window=[1024, 256, 64, 16], ring_heap=64 << 20).to_call_config()
        o.submit_next_level(h_decode, [q, kt, v, attn], big, worker=0)
        # Small elementwise tasks on small rings, each sized differently.
        small = taskring.CallConfig()
        small.runtime_env.ring_task_window = 16
        small.runtime_env.ring_heap = [4096, 1 << 16, 4096, 4096]
        small.runtime_env.ring_dep_pool = 16
        tiny = small.derive(ring_task_window=[8, 4, 4, 4])
        o.submit_next_level(h_axpy, [x, y, outs[0]], small, worker=1)
        o.submit_next_level(h_axpy, [x, outs[0], outs[1]], tiny, worker=2)  # depends on the previous
        o.submit_next_level(h_axpy, [y, x, outs[2]], None, worker=1)  # defaults (or PTO2_RING_* env)

    for round_ in range(2):
        t0 = time.perf_counter()
        rep = w.run(orchestration)
        dt = time.perf_counter() - t0
        print(f"\n== launch {round_ + 1}: {len(rep.tasks)} L2 tasks in {dt * 1e3:.2f} ms ==")
        names = {h_decode: "decode", h_axpy: "axpy"}
        for t in rep.tasks:
            s = t.ring_sizing
            print(f"chip {t.worker} {names[t.callable]:>6}: {t.tasks:3d} tasks, {t.elapsed_s * 1e3:6.3f} ms, arena_hit={t.arena_hit}")
            print(f"    window={s.task_window} heap={s.heap} dep_pool={s.dep_pool}")
            src = {
                f: "".join("CED"[("call_config", "env", "default").index(s.source(f, r))] for r in range(4))
                for f in ("ring_task_window", "ring_heap", "ring_dep_pool")
            }
            print(f"    sources per ring (C=call_config, E=env, D=default): window={src['ring_task_window']} heap={src['ring_heap']} dep_pool={src['ring_dep_pool']}")
            print(f"    peak: slots={t.peak.task_window} heap={t.peak.heap} deps={t.peak.dep_pool}")

    err = float(np.abs(attn - reference(q, kt, v)).max())
    ok = [np.allclose(outs[0], 2 * x + y, atol=1e-5), np.allclose(outs[1], 2 * x + outs[0], atol=1e-5), np.allclose(outs[2], 2 * y + x, atol=1e-5)]
    print(f"\ndecode max|err| = {err:.2e}; axpy results correct: {ok}")
    for i in range(3):
        st = w.arena_stats(i)
        print(f"chip {i} arena cache: builds={st.builds} hits={st.hits} misses={st.misses} resident={len(st.resident)}")
    w.close()
    if err > 1e-3 or not all(ok):
        raise SystemExit("results differ from the reference")


if __name__ == "__main__":
    main()
