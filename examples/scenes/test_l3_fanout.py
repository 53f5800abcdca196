"""Scene test (level 3): per-task ring sizing in one L3 dispatch.

The orchestration fans an axpy out to one chip per output; every chip task gets its own
config derived from the case's ``cfg`` with a different window (``16 << worker``), so
the case's other fields (heap, dep pool, thread count) reach every task while the
window differs per task. ``on_report`` checks each ``ChipTaskReport``'s ring_sizing.

The class's one Worker(level=3) has ``max(device_count)`` chips over its cases.
"""

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K
from taskring.scene_test import SceneTestCase, main, scene_test


@taskring.program(signature=[IN, IN, OUT])
def axpy(rt, x, y, out):
    """out = 2 * x + y, through a runtime temporary in a scope (ring 1)."""
    with rt.scope():
        t = rt.submit(K.scale, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)], scalars=[2.0]).outputs[0]
        rt.submit(K.add, inputs=[t, y], outputs=[out])


def window_of(worker: int) -> int:
    return 16 << worker


def fanout(o, chips, args, cfg):
    outs = [k for k in args if k.startswith("out")]
    for worker, name in enumerate(outs):
        o.submit_next_level(chips.axpy, [args.x, args.y, args[name]], cfg.derive(ring_task_window=window_of(worker)), worker=worker)


@scene_test(level=3)
class TestL3Fanout(SceneTestCase):
    CHIPS = {"axpy": axpy}
    ORCHESTRATION = staticmethod(fanout)
    CASES = [
        {"name": "two_chips", "params": {"chips": 2, "n": 256}, "config": {"device_count": 2}},
        {
            "name": "three_chips_small_heap",
            "params": {"chips": 3, "n": 512},
            "config": {"device_count": 3, "runtime_env": {"ring_heap": [0, 1 << 12, 0, 0], "ring_dep_pool": 64}},
        },
    ]

    def generate_args(self, params):
        rng = np.random.default_rng(params["n"])
        shape = (params["n"] // 64, 64)
        args = {"x": rng.standard_normal(shape).astype(np.float32), "y": rng.standard_normal(shape).astype(np.float32)}
        for i in range(params["chips"]):
            args[f"out{i}"] = np.zeros(shape, np.float32)
        return args

    def compute_golden(self, args, params):
        for i in range(params["chips"]):
            args[f"out{i}"][...] = 2 * args["x"] + args["y"]

    def on_report(self, case, report):
        env = (case.get("config") or {}).get("runtime_env", {})
        assert sorted(t.worker for t in report.tasks) == list(range(case["params"]["chips"]))
        for t in report.tasks:
            s = t.ring_sizing
            assert t.error is None
            assert s.task_window == (window_of(t.worker),) * 4, (t.worker, s)
            assert all(s.source("ring_task_window", r) == "call_config" for r in range(4))
            if "ring_heap" in env:  # the case's fields survive the derive on every task
                assert s.heap[1] == env["ring_heap"][1] and s.source("ring_heap", 1) == "call_config"
                assert s.dep_pool == (env["ring_dep_pool"],) * 4
            assert t.peak.task_window[1] < s.task_window[1]


if __name__ == "__main__":
    main()
