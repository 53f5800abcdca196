"""Multi-program serving (L3) with automatic ring sizing: prefill and decode programs on
one prepared worker share a device-resident KV cache on chip 0 and are dispatched with
``"auto"`` ring sizes. The first round of dispatches runs on the defaults while chip 0
learns each program's need; later rounds run on need x 1.25. The example prints the
sizing each program was given and its device footprint, then serves the same work with
one global sizing big enough for both programs (the elementwise max of the learned
sizes) and prints the bytes each dispatch saves."""

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K

D, CTX, CHUNK = 32, 512, 32
DECODE_STEPS = 3
FIELDS = ("ring_task_window", "ring_heap", "ring_dep_pool")
AUTO = taskring.RunConfig(ring_task_window="auto", ring_heap="auto", ring_dep_pool="auto")


@taskring.program(signature=[IN, OUT])
def fill_cache(rt, x, kv):
    """Prefill: the cache rows are the prompt's projections (here: 0.5 * x), computed
    chunk by chunk into runtime outputs that all stay live until the scope ends."""
    with rt.scope():
        for r in range(0, CTX, CHUNK):
            h = rt.submit(K.scale, inputs=[x[r : r + CHUNK]], outputs=[rt.spec((CHUNK, D), "float32")], scalars=[0.5]).outputs[0]
            rt.submit(K.copy, inputs=[h], outputs=[kv[r : r + CHUNK]])


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


def serve(config, rounds):
    """On a fresh prepared worker, prefill once and decode DECODE_STEPS times per round,
    checking every result. Returns each program's chip task reports in dispatch order
    and chip 0's arena stats at the end."""
    reports = {"fill_cache": [], "attend": []}
    with prefill.prepare(config, extra_compiled=[decode]) as rt:
        kv = rt.alloc_tensor((CTX, D), np.float32, worker=0)  # lives as long as rt
        x = taskring.shared_array((CTX, D))
        x[:] = np.random.default_rng(3).standard_normal(x.shape)
        q = taskring.shared_array((1, D))
        out = taskring.shared_array((1, D))
        for _ in range(rounds):
            reports["fill_cache"] += rt.run(prefill, x, kv, config=config).tasks
            for step in range(DECODE_STEPS):
                q[:] = np.random.default_rng(10 + step).standard_normal(q.shape)
                reports["attend"] += rt.run(decode, q, kv, out, config=config).tasks
                s = q @ (0.5 * x).T
                e = np.exp(s - s.max())
                want = (e / e.sum()) @ (0.5 * x)
                assert np.allclose(out, want, atol=1e-4), (out, want)
        return reports, rt.arena_stats(0)


def sizing_text(s):
    return f"window={tuple(s.task_window)} heap={tuple(s.heap)} dep_pool={tuple(s.dep_pool)}"


def main():
    # Round 1 learns on the defaults; round 2 runs on the learned sizings.
    reports, auto_stats = serve(AUTO, rounds=2)
    auto = {name: reps[-1] for name, reps in reports.items()}
    print("auto sizing (RunConfig with 'auto' for every ring field), chip 0:")
    for name, reps in reports.items():
        print(f"  {name} first dispatch (learns, on the defaults): arena_bytes={reps[0].arena_bytes}")
    for name, t in auto.items():
        s = t.ring_sizing
        sources = {s.source(f, r) for f in FIELDS for r in range(4)}
        assert sources == {"auto"}, sources
        print(f"  {name}: {sizing_text(s)} source={'/'.join(sorted(sources))} arena_bytes={t.arena_bytes} arena_hit={t.arena_hit}")

    # One global sizing that fits both programs: the elementwise max of the learned
    # sizes (already valid sizes: windows and heaps are powers of two).
    sizings = [t.ring_sizing for t in auto.values()]
    glob = taskring.RunConfig(
        ring_task_window=[max(s.task_window[r] for s in sizings) for r in range(4)],
        ring_heap=[max(s.heap[r] for s in sizings) for r in range(4)],
        ring_dep_pool=[max(s.dep_pool[r] for s in sizings) for r in range(4)],
    )
    fixed_reports, fixed_stats = serve(glob, rounds=1)
    fixed = {name: reps[-1] for name, reps in fixed_reports.items()}
    gs = fixed["fill_cache"].ring_sizing
    assert all(t.ring_sizing.key() == gs.key() for t in fixed.values())
    assert {gs.source(f, r) for f in FIELDS for r in range(4)} == {"call_config"}
    print("global sizing (elementwise max of the learned sizes, applied to every task):")
    print(f"  {sizing_text(gs)} source=call_config arena_bytes={fixed['fill_cache'].arena_bytes}")
    print("saved per dispatch by auto sizing:")
    for name, t in auto.items():
        g = fixed[name].arena_bytes
        print(f"  {name}: {g} -> {t.arena_bytes} bytes, saved {g - t.arena_bytes} bytes ({100 * (g - t.arena_bytes) / g:.0f}%)")
    # Auto sizing keeps one arena per program in the chip's cache; one global sizing
    # shares a single arena between them.
    print(
        f"chip 0 resident after serving: auto {auto_stats.resident_bytes} bytes in {len(auto_stats.resident)} arenas, "
        f"global {fixed_stats.resident_bytes} bytes in {len(fixed_stats.resident)} arena"
    )


if __name__ == "__main__":
    main()
