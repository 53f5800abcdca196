#!/usr/bin/env python3
"""Vector example (Simpler's scene-test form): f = (a + b + 1) * (a + b + 2) + (a + b).

A C++ orchestration submits five tasks of three plain C++ kernels, four of them in a
nested scope. Run it with pytest (``pytest -p taskring.simpler.pytest_plugin
test_vector_example.py --platform a2a3sim``) or alone (``python test_vector_example.py -p
a2a3sim``).
"""

import numpy as np
from simpler.task_interface import ArgDirection as D

from simpler_setup import SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

COMMON = ["../common/include"]


@scene_test(level=2, runtime="tensormap_and_ringbuffer")
class TestVectorExample(SceneTestCase):
    CALLABLE = {
        "orchestration": {
            "source": "kernels/orchestration/vector_orch.cpp",
            "function_name": "aicpu_orchestration_entry",
            "signature": [D.IN, D.IN, D.OUT],
        },
        "incores": [
            {"func_id": 0, "source": "kernels/aiv/kernel_add.cpp", "core_type": "aiv", "signature": [D.IN, D.IN, D.OUT], "extra_include_dirs": COMMON},
            {"func_id": 1, "source": "kernels/aiv/kernel_add_scalar.cpp", "core_type": "aiv", "signature": [D.IN, D.OUT], "extra_include_dirs": COMMON},
            {"func_id": 2, "source": "kernels/aiv/kernel_mul.cpp", "core_type": "aiv", "signature": [D.IN, D.IN, D.OUT], "extra_include_dirs": COMMON},
        ],
    }

    CASES = [
        {"name": "default", "platforms": ["a2a3sim", "a2a3"], "params": {"size": 128 * 128}},
        {
            # Small rings: a window of 8 tasks per ring and a 256 KiB heap on the
            # nested scope's ring hold this program's five tasks.
            "name": "small_rings",
            "platforms": ["a2a3sim", "a2a3"],
            "params": {"size": 4096},
            "config": {"runtime_env": {"ring_task_window": 8, "ring_heap": [1 << 16, 1 << 18, 1 << 16, 1 << 16], "ring_dep_pool": 16}},
        },
    ]

    def generate_args(self, params):
        rng = np.random.default_rng(7)
        n = params["size"]
        return TaskArgsBuilder(
            TensorArg("a", rng.uniform(-2, 2, n).astype(np.float32)),
            TensorArg("b", rng.uniform(-2, 2, n).astype(np.float32)),
            TensorArg("f", np.zeros(n, np.float32)),
        )

    def compute_golden(self, args, params):
        s = args.a + args.b
        args.f[:] = (s + 1) * (s + 2) + s


if __name__ == "__main__":
    SceneTestCase.run_module(__name__)
