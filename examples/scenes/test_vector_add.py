"""Scene test: vector add under three sizings (defaults, one scalar window for all
rings, per-ring lists). Each case gets its own CallConfig; `on_report` checks that the
chip ran each case with that case's sizes.

    pytest examples/scenes/test_vector_add.py
    python examples/scenes/test_vector_add.py [--case NAME] [--rounds N]
"""

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K
from taskring.scene_test import SceneTestCase, main, scene_test


@taskring.program(signature=[IN, IN, OUT])
def vector_add(rt, a, b, out):
    """out = (a + b) * 2 through a runtime temporary in an inner scope (ring 1)."""
    with rt.scope():
        tmp = rt.submit(K.add, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
        rt.submit(K.scale, inputs=[tmp], outputs=[out], scalars=[2.0])


@scene_test(level=2)
class TestVectorAdd(SceneTestCase):
    PROGRAM = vector_add
    RTOL = 1e-6
    ATOL = 1e-6
    CASES = [
        {"name": "default", "params": {"rows": 64, "cols": 128}},
        {
            "name": "scalar_rings",
            "params": {"rows": 64, "cols": 128},
            "config": {"runtime_env": {"ring_task_window": 64, "ring_heap": 1 << 16, "ring_dep_pool": 64}},
        },
        {
            "name": "per_ring",
            "params": {"rows": 32, "cols": 256},
            "config": {
                "aicpu_thread_num": 2,
                "runtime_env": {"ring_task_window": [16, 8, 0, 0], "ring_heap": [0, 1 << 15, 0, 0]},
            },
        },
    ]

    def generate_args(self, params):
        rng = np.random.default_rng(0)
        shape = (params["rows"], params["cols"])
        return {
            "a": rng.standard_normal(shape).astype(np.float32),
            "b": rng.standard_normal(shape).astype(np.float32),
            "out": np.zeros(shape, np.float32),
        }

    def compute_golden(self, args, params):
        args["out"][...] = (args["a"] + args["b"]) * 2

    def on_report(self, case, report):
        env = (case.get("config") or {}).get("runtime_env", {})
        sizing = report.ring_sizing
        for field, got in (("ring_task_window", sizing.task_window), ("ring_heap", sizing.heap), ("ring_dep_pool", sizing.dep_pool)):
            want = env.get(field, 0)
            want = want if isinstance(want, list) else [want] * 4
            for ring in range(4):
                if want[ring]:  # set by the case: the case wins
                    assert got[ring] == want[ring], (case["name"], field, ring, got)
                    assert sizing.source(field, ring) == "call_config"
                else:  # left to the env / default
                    assert sizing.source(field, ring) != "call_config"
        assert report.tasks == 2
        # the ring-1 temporary fits the configured ring-1 heap
        assert report.peak.heap[1] <= sizing.heap[1]


if __name__ == "__main__":
    main()
