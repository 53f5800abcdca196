"""Multi-program serving (L3): prefill and decode programs on one prepared worker,
sharing a device-resident KV cache on chip 0, each dispatched with its own ring sizing."""

import numpy as np

import taskring
from taskring import IN, INOUT, OUT, kernels as K

D, CTX = 32, 64


@taskring.program(signature=[IN, OUT])
def fill_cache(rt, x, kv):
    """Prefill: the cache rows are the prompt's projections (here: 0.5 * x)."""
    with rt.scope():
        rt.submit(K.scale, inputs=[x], outputs=[kv], scalars=[0.5])


@taskring.program(signature=[IN, IN, OUT])
def attend(rt, q, kv, out):
    """Decode: out = softmax(q · kvᵀ) · kv, with kvᵀ formed by a Python kernel."""
    kvt = rt.alloc((D, CTX), "float32")
    rt.submit(transpose, inputs=[kv], outputs=[kvt])
    with rt.scope():
        s = rt.submit(K.matmul, inputs=[q, kvt], outputs=[rt.spec((1, CTX), "float32")]).outputs[0]
        p = rt.submit(K.softmax_rows, inputs=[s], outputs=[rt.spec((1, CTX), "float32")]).outputs[0]
        rt.submit(K.matmul, inputs=[p, kv], outputs=[out])


@taskring.kernel(core="aiv")
def transpose(src, dst):
    dst[...] = src.T


def prefill_orch(o, chips, args, cfg):
    x, kv = args
    o.submit_next_level(chips.fill_cache, [x, kv], cfg, worker=0)


def decode_orch(o, chips, args, cfg):
    q, kv, out = args
    o.submit_next_level(chips.attend, [q, kv, out], cfg, worker=0)


dcfg = taskring.DistributedConfig(device_ids=[0, 1], aicpu_thread_num=4)
prefill = taskring.DistributedProgram(prefill_orch, {"fill_cache": fill_cache}, dcfg, signature=[IN, OUT])
decode = taskring.DistributedProgram(decode_orch, {"attend": attend}, dcfg, signature=[IN, IN, OUT])


def main():
    prefill_cfg = taskring.RunConfig(ring_task_window=256, ring_heap=16 << 20)
    decode_cfg = taskring.RunConfig(ring_task_window=[64, 16, 16, 16], ring_heap=1 << 20)
    with prefill.prepare(prefill_cfg, extra_compiled=[decode]) as rt:
        kv = rt.alloc_tensor((CTX, D), np.float32, worker=0)  # lives as long as rt
        x = taskring.shared_array((CTX, D))
        x[:] = np.random.default_rng(3).standard_normal(x.shape)
        q = taskring.shared_array((1, D))
        out = taskring.shared_array((1, D))
        rep = rt.run(prefill, x, kv, config=prefill_cfg)
        print("prefill on chip", rep.tasks[0].worker, "window", rep.tasks[0].ring_sizing.task_window, "arena_hit", rep.tasks[0].arena_hit)
        for step in range(3):
            q[:] = np.random.default_rng(10 + step).standard_normal(q.shape)
            rep = rt.run(decode, q, kv, out, config=decode_cfg)
            s = q @ (0.5 * x).T
            e = np.exp(s - s.max())
            want = (e / e.sum()) @ (0.5 * x)
            assert np.allclose(out, want, atol=1e-4), (out, want)
            print("decode step", step, "window", rep.tasks[0].ring_sizing.task_window, "arena_hit", rep.tasks[0].arena_hit)
        st = rt.arena_stats(0)
        print(f"chip 0 arena cache: builds={st.builds} hits={st.hits} misses={st.misses}")


if __name__ == "__main__":
    main()
