"""Seed example: one resident ChipWorker running the same program with several
per-call sizings; the arena cache builds each sizing once (prewarm covers the first)."""

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K


@taskring.program(signature=[IN, IN, OUT])
def vector_add(rt, a, b, out):
    with rt.scope():
        tmp = rt.submit(K.add, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
        rt.submit(K.scale, inputs=[tmp], outputs=[out], scalars=[2.0])


def main():
    a = np.arange(4096, dtype=np.float32).reshape(16, 256)
    b = np.ones_like(a)
    out = np.zeros_like(a)
    sizings = [
        taskring.RunConfig(ring_task_window=128, ring_heap=8 * 1024 * 1024, ring_dep_pool=256),
        taskring.RunConfig(ring_task_window=[256, 128, 64, 0]),  # per ring; 0 = env/default
        taskring.RunConfig(),  # all from PTO2_RING_* or the defaults
    ]
    with taskring.ChipWorker(prewarm=sizings[0], arena_cache_slots=4) as chip:
        for round_ in range(2):
            for cfg in sizings:
                out[:] = 0
                rep = chip.run(vector_add, a, b, out, config=cfg)
                assert np.array_equal(out, 2 * (a + b))
                print(f"round {round_}: window={rep.ring_sizing.task_window} hit={rep.arena_hit} elapsed={rep.elapsed_s * 1e6:.0f} us")
        st = chip.arena_stats
        print(f"arena cache: builds={st.builds} hits={st.hits} misses={st.misses} evictions={st.evictions}")


if __name__ == "__main__":
    main()
