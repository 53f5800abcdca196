#!/usr/bin/env python3
"""Per-task ring sizing at level 3 (Simpler's scene-test form).

A Python orchestration submits several L2 tasks of one C++ program to the node's two
chips. ``TestPerTaskRuntimeEnv`` gives each task its OWN ``CallConfig.runtime_env``
(derived from the case's config); ``TestCaseRuntimeEnv`` hands every task the case's
``config`` as it is, so the case's ``runtime_env`` sizes them all. Each chip binds its
rings from the config that travelled with the task; ``on_report`` checks the sizing
every chip resolved, ring by ring.
"""

import numpy as np
from per_task_specs import COLS, L2_TASKS, RING_FIELDS, ROWS, l2_config
from simpler.task_interface import ArgDirection as D
from simpler.task_interface import CallConfig, TaskArgs, TensorArgType

from simpler_setup import SceneTestCase, TaskArgsBuilder, TensorArg, scene_test
from simpler_setup.scene_test import _rehosted_ref

KERNELS = "../vector_example/kernels/aiv"
COMMON = ["../common/include"]
IN_OUT = [D.IN, D.IN, D.OUT]
RESOLVED = {"ring_task_window": "task_window", "ring_heap": "heap", "ring_dep_pool": "dep_pool"}

TILED_ADD = {
    "name": "tiled_add",
    "orchestration": {
        "source": "kernels/orchestration/tiled_add_orch.cpp",
        "function_name": "aicpu_orchestration_entry",
        "signature": IN_OUT,
    },
    "incores": [
        {"func_id": 0, "source": f"{KERNELS}/kernel_add.cpp", "core_type": "aiv", "signature": IN_OUT, "extra_include_dirs": COMMON},
        {"func_id": 1, "source": f"{KERNELS}/kernel_add_scalar.cpp", "core_type": "aiv", "signature": [D.IN, D.OUT], "extra_include_dirs": COMMON},
    ],
}


def _task_args(callables, task_args, i):
    args = TaskArgs()
    args.add_tensor(_rehosted_ref(task_args, f"a{i}"), TensorArgType.INPUT)
    args.add_tensor(_rehosted_ref(task_args, f"b{i}"), TensorArgType.INPUT)
    args.add_tensor(_rehosted_ref(task_args, f"out{i}"), TensorArgType.OUTPUT_EXISTING)
    return callables.keep(args)


def per_task(orch, callables, task_args, config):
    """Each L2 task with its own ring sizing."""
    for i, spec in enumerate(L2_TASKS):
        cfg = l2_config(config, spec, CallConfig)
        orch.submit_next_level(callables.tiled_add, _task_args(callables, task_args, i), cfg, worker=spec["worker"])


def same_for_all(orch, callables, task_args, config):
    """Every L2 task with the case's config."""
    for i, spec in enumerate(L2_TASKS):
        orch.submit_next_level(callables.tiled_add, _task_args(callables, task_args, i), config, worker=spec["worker"])


class _TiledAdd(SceneTestCase):
    def generate_args(self, params):
        specs = []
        for i, t in enumerate(L2_TASKS):
            specs += [
                TensorArg(f"a{i}", np.full((ROWS, COLS), t["a"], np.float32)),
                TensorArg(f"b{i}", np.full((ROWS, COLS), t["b"], np.float32)),
                TensorArg(f"out{i}", np.zeros((ROWS, COLS), np.float32)),
            ]
        return TaskArgsBuilder(*specs)

    def compute_golden(self, args, params):
        for i in range(len(L2_TASKS)):
            getattr(args, f"out{i}")[:] = getattr(args, f"a{i}") + getattr(args, f"b{i}") + 1

    def sizing_of(self, case, spec):
        raise NotImplementedError

    def on_report(self, case, report):
        """Ring by ring: a size the task's config gave is the one the chip used."""
        assert len(report.tasks) == len(L2_TASKS)
        for t, spec in zip(report.tasks, L2_TASKS):
            assert t.worker == spec["worker"]
            want = self.sizing_of(case, spec)
            for field in RING_FIELDS:
                given = want.get(field, 0)
                per_ring = given if isinstance(given, list) else [given] * 4
                resolved = getattr(t.ring_sizing, RESOLVED[field])
                for ring in range(4):
                    src = t.ring_sizing.source(field, ring)
                    if per_ring[ring]:
                        assert (src, resolved[ring]) == ("call_config", per_ring[ring]), (spec["label"], field, ring)
                    else:
                        assert src != "call_config", (spec["label"], field, ring)


@scene_test(level=3, runtime="tensormap_and_ringbuffer")
class TestPerTaskRuntimeEnv(_TiledAdd):
    CALLABLE = {"orchestration": per_task, "callables": [TILED_ADD]}
    CASES = [{"name": "per_task", "platforms": ["a2a3sim", "a2a3"], "config": {"device_count": 2}, "params": {}}]

    def sizing_of(self, case, spec):
        return spec


@scene_test(level=3, runtime="tensormap_and_ringbuffer")
class TestCaseRuntimeEnv(_TiledAdd):
    CALLABLE = {"orchestration": same_for_all, "callables": [TILED_ADD]}
    CASES = [
        {
            "name": "case_sizing",
            "platforms": ["a2a3sim", "a2a3"],
            "config": {"device_count": 2, "runtime_env": {"ring_task_window": 32, "ring_heap": [1 << 20, 1 << 19, 1 << 18, 1 << 18]}},
            "params": {},
        },
        {"name": "defaults", "platforms": ["a2a3sim", "a2a3"], "config": {"device_count": 2}, "params": {}},
    ]

    def sizing_of(self, case, spec):
        return case["config"].get("runtime_env", {})


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
