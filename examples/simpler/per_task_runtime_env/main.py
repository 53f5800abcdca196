#!/usr/bin/env python3
"""L3 demo: one orchestration dispatches several L2 tasks to the node's chips, each with
its OWN ring sizing (``CallConfig.runtime_env``), written with Simpler's Python API on
taskring (``make demo-simpler``).

The C++ program (``kernels/orchestration/tiled_add_orch.cpp`` with the vector example's
add and add_scalar kernels) computes out = a + b + 1 row tile by row tile, each tile in a
nested scope. Each ``submit_next_level`` gets a CallConfig of its own: two tasks size all
four rings with one value each, a third sizes each ring separately and leaves the
dependency pool to the chip's environment / the default. Every chip reports the sizing it
bound and where each value came from; the results are checked against numpy.

Run:  python examples/simpler/per_task_runtime_env/main.py [-p a2a3sim] [-d 0]
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import taskring.simpler  # noqa: E402

taskring.simpler.install()  # the names `simpler` and `simpler_setup`, as upstream spells them

from per_task_specs import COLS, L2_TASKS, ROWS, l2_config  # noqa: E402
from simpler.task_interface import ArgDirection, CallConfig, ChipCallable, CoreCallable, TaskArgs, TensorArgType  # noqa: E402
from simpler.worker import Worker  # noqa: E402
from simpler_setup.kernel_compiler import KernelCompiler  # noqa: E402
from simpler_setup.torch_interop import make_tensor_arg  # noqa: E402

from taskring import shared_array  # noqa: E402

KERNELS = os.path.join(HERE, "..", "vector_example", "kernels", "aiv")
COMMON = os.path.join(HERE, "..", "common", "include")
RUNTIME = "tensormap_and_ringbuffer"
SOURCE_CODE = {"call_config": "C", "env": "E", "default": "D", "auto": "A"}


def build_chip_callable(platform: str) -> ChipCallable:
    """The C++ orchestration and its two kernels, compiled and bound by func_id."""
    kc = KernelCompiler(platform=platform)
    include_dirs = list(kc.get_orchestration_include_dirs(RUNTIME)) + [COMMON]
    kernels = []
    for func_id, name, sig in ((0, "kernel_add", [ArgDirection.IN, ArgDirection.IN, ArgDirection.OUT]), (1, "kernel_add_scalar", [ArgDirection.IN, ArgDirection.OUT])):
        binary = kc.compile_incore(os.path.join(KERNELS, f"{name}.cpp"), core_type="aiv", extra_include_dirs=include_dirs)
        kernels.append((func_id, CoreCallable.build(signature=sig, binary=binary, core_type="aiv")))
    orch = kc.compile_orchestration(RUNTIME, os.path.join(HERE, "kernels", "orchestration", "tiled_add_orch.cpp"))
    sig = [ArgDirection.IN, ArgDirection.IN, ArgDirection.OUT]
    return ChipCallable.build(signature=sig, func_name="aicpu_orchestration_entry", binary=orch, children=kernels)


def run(platform: str, device_id: int) -> int:
    n_chips = 1 + max(t["worker"] for t in L2_TASKS)
    print(f"[per_task_runtime_env] {len(L2_TASKS)} L2 tasks on {n_chips} chips (device ids {device_id}..{device_id + n_chips - 1})")
    # Inputs and outputs in memory the chip processes share: results appear in place.
    host_a = [shared_array((ROWS, COLS)) for _ in L2_TASKS]
    host_b = [shared_array((ROWS, COLS)) for _ in L2_TASKS]
    host_out = [shared_array((ROWS, COLS)) for _ in L2_TASKS]
    for i, t in enumerate(L2_TASKS):
        host_a[i][:] = t["a"]
        host_b[i][:] = t["b"]

    worker = Worker(level=3, platform=platform, runtime=RUNTIME, device_ids=list(range(device_id, device_id + n_chips)), num_sub_workers=0)
    handle = worker.register(build_chip_callable(platform))
    worker.init()
    try:

        def orch_fn(orch, _args, cfg):
            for i, spec in enumerate(L2_TASKS):
                args = TaskArgs()
                args.add_tensor(make_tensor_arg(worker, host_a[i]), TensorArgType.INPUT)
                args.add_tensor(make_tensor_arg(worker, host_b[i]), TensorArgType.INPUT)
                args.add_tensor(make_tensor_arg(worker, host_out[i]), TensorArgType.OUTPUT_EXISTING)
                task_cfg = l2_config(cfg, spec, CallConfig)
                print(f"[per_task_runtime_env] submit {spec['label']!r} to chip {spec['worker']}: {task_cfg.runtime_env!r}")
                orch.submit_next_level(handle, args, task_cfg, worker=spec["worker"])

        worker.run(orch_fn, args=None, config=CallConfig())
        report = worker.last_report
        tasks = list(getattr(report, "tasks", None) or [])
        for spec, t in zip(L2_TASKS, tasks):
            s = t.ring_sizing
            src = {f: "".join(SOURCE_CODE[s.source(f, r)] for r in range(4)) for f in ("ring_task_window", "ring_heap", "ring_dep_pool")}
            print(f"[per_task_runtime_env] {spec['label']}: chip {t.worker}, {t.tasks} tasks, window={s.task_window} heap={s.heap} dep_pool={s.dep_pool}")
            print(f"    source per ring (C=call_config, E=env, D=default): window={src['ring_task_window']} heap={src['ring_heap']} dep_pool={src['ring_dep_pool']}")
        ok = True
        for i, spec in enumerate(L2_TASKS):
            diff = float(np.max(np.abs(host_out[i] - (host_a[i] + host_b[i] + 1))))
            print(f"[per_task_runtime_env] {spec['label']}: max |out - expected| = {diff:.3e}")
            ok = ok and diff <= 1e-5
    finally:
        worker.close()
    print("[per_task_runtime_env] all golden checks PASSED" if ok else "[per_task_runtime_env] golden check FAILED")
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-p", "--platform", default="a2a3sim", choices=["a2a3sim", "a2a3"])
    p.add_argument("-d", "--device", type=int, default=0, help="the first chip's device id")
    cli = p.parse_args()
    return run(cli.platform, cli.device)


if __name__ == "__main__":
    sys.exit(main())
