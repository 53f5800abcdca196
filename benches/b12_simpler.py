"""B12 simpler: wall time per run and per task of the Simpler-form example programs,
through Simpler's Python face and through taskring's own Python API, in the same run.

Each program of ``examples/simpler/`` (the vector example, the paged-attention decode and
the L3 per-task ``runtime_env`` demo) is compiled once with
``taskring.simpler_setup.KernelCompiler`` (its cache makes a re-run compile nothing),
then run two ways on the same libraries and the same arrays:

- ``simpler``: ``taskring.simpler.worker.Worker(level=2, platform="a2a3sim")``,
  ``register(ChipCallable)``, ``run(handle, TaskArgs, CallConfig)``; at level 3 the
  example's orchestration function, ``orch.submit_next_level`` per L2 task;
- ``taskring``: ``taskring.ChipWorker().run(taskring.Program(native ChipCallable,
  signature), *arrays)``; at level 3 ``taskring.Worker(level=3)`` with
  ``o.submit_next_level`` and the same per-task ring sizing.

One warm-up run of each, then ``--reps`` rounds, the two faces interleaved in each
round; the figure is the median wall time of ``run`` (and that divided by the tasks the
run's report counts). Every run's output is checked against numpy once at the end.

For scale: upstream Simpler's own a2a3 simulator, recorded on this kind of machine (2
CPUs; built from the ``6ebaf771`` snapshot), takes about 61 ms of host time per run of its 5-task
vector example and 76 ms per run of its 13-task paged attention (medians of 20). Those
are recorded figures of upstream's simulator on its own sources, not measured here; the
bar is >= 100x faster per run. ``--upstream DIR`` (a Simpler checkout, with
``PTO_ISA_ROOT`` set) also runs upstream's own vector example sources, PTO-ISA kernels
and all, through both faces, so the comparison is on the same program and kernels.

Usage: .venv/bin/python benches/b12_simpler.py [--reps 50] [--out-dir bench-results] [--upstream DIR]
Writes bench-results/b12_simpler.json and prints a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import taskring
from taskring import _native
from taskring.simpler.task_interface import ArgDirection, CallConfig, ChipCallable, CoreCallable, TaskArgs, TensorArgType
from taskring.simpler.worker import Worker as SimplerWorker
from taskring.simpler_setup.kernel_compiler import KernelCompiler

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples" / "simpler"
COMMON = str(EX / "common" / "include")
RUNTIME = "tensormap_and_ringbuffer"
PLATFORM = "a2a3sim"

# Upstream's simulator (built from the 6ebaf771 snapshot on a 2-CPU machine), recorded: host ms per run, median of 20.
UPSTREAM_RECORDED_MS = {"vector_example": 61.0, "paged_attention": 76.0}
UPSTREAM_RECORDED_TASKS = {"vector_example": 5, "paged_attention": 13}
BAR = 100.0

D = ArgDirection
# Simpler's ArgDirection -> taskring's (0 IN, 1 OUT, 2 INOUT, 3 SCALAR).
TR_DIR = {D.IN: 0, D.OUT: 1, D.INOUT: 2}
TAG = {D.IN: TensorArgType.INPUT, D.OUT: TensorArgType.OUTPUT_EXISTING, D.INOUT: TensorArgType.INOUT}


def f32_bits(x: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", x))[0])


class Built:
    """One C++ program compiled once: Simpler's ChipCallable and taskring's native one
    over the same library bytes."""

    def __init__(self, kc: KernelCompiler, orch: str, sig: List[Any], incores: List[tuple], pto_isa_root: Optional[str] = None) -> None:
        inc = list(kc.get_orchestration_include_dirs(RUNTIME)) + [COMMON]
        kids_s, kids_n = [], []
        for func_id, src, core, ksig in incores:
            binary = kc.compile_incore(src, core_type=core, pto_isa_root=pto_isa_root, extra_include_dirs=inc)
            kids_s.append((func_id, CoreCallable.build(signature=ksig, binary=binary, core_type=core)))
            kids_n.append((func_id, _native.CoreCallable(binary, core, [TR_DIR[d] for d in ksig])))
        obin = kc.compile_orchestration(RUNTIME, orch, extra_include_dirs=[COMMON])
        self.sig = sig
        self.simpler = ChipCallable.build(signature=sig, func_name="aicpu_orchestration_entry", binary=obin, children=kids_s)
        native = _native.ChipCallable(obin, "aicpu_orchestration_entry", [TR_DIR[d] for d in sig], kids_n)
        self.native = native


def task_args(w: SimplerWorker, sig: List[Any], arrays: List[np.ndarray], scalars: List[int]) -> TaskArgs:
    args = TaskArgs()
    for d, a in zip(sig, arrays):
        args.add_tensor(w.make_tensor_arg(a), TAG[d])
    for s in scalars:
        args.add_scalar(s)
    return args


# -- level-2 examples ----------------------------------------------------------------------


def vector_case(kc: KernelCompiler) -> Dict[str, Any]:
    k = EX / "vector_example" / "kernels"
    b = Built(
        kc,
        str(k / "orchestration" / "vector_orch.cpp"),
        [D.IN, D.IN, D.OUT],
        [
            (0, str(k / "aiv" / "kernel_add.cpp"), "aiv", [D.IN, D.IN, D.OUT]),
            (1, str(k / "aiv" / "kernel_add_scalar.cpp"), "aiv", [D.IN, D.OUT]),
            (2, str(k / "aiv" / "kernel_mul.cpp"), "aiv", [D.IN, D.IN, D.OUT]),
        ],
    )
    rng = np.random.default_rng(7)
    n = 128 * 128
    a, bb = rng.uniform(-2, 2, n).astype(np.float32), rng.uniform(-2, 2, n).astype(np.float32)
    s = a + bb
    return {"built": b, "arrays": lambda: [a, bb, np.zeros(n, np.float32)], "scalars": [], "golden": {2: (s + 1) * (s + 2) + s}, "params": {"size": n}}


def upstream_vector_case(kc: KernelCompiler, upstream: str) -> Dict[str, Any]:
    k = Path(upstream) / "examples" / "a2a3" / "tensormap_and_ringbuffer" / "vector_example" / "kernels"
    root = os.environ.get("PTO_ISA_ROOT")
    b = Built(
        kc,
        str(k / "orchestration" / "example_orchestration.cpp"),
        [D.IN, D.IN, D.OUT],
        [
            (0, str(k / "aiv" / "kernel_add.cpp"), "aiv", [D.IN, D.IN, D.OUT]),
            (1, str(k / "aiv" / "kernel_add_scalar.cpp"), "aiv", [D.IN, D.OUT]),
            (2, str(k / "aiv" / "kernel_mul.cpp"), "aiv", [D.IN, D.IN, D.OUT]),
        ],
        pto_isa_root=root,
    )
    n = 128 * 128  # upstream's own case: a = 2, b = 3, so f = 47
    return {
        "built": b,
        "arrays": lambda: [np.full(n, 2.0, np.float32), np.full(n, 3.0, np.float32), np.zeros(n, np.float32)],
        "scalars": [],
        "golden": {2: np.full(n, 47.0, np.float32)},
        "params": {"size": n, "sources": str(k), "pto_isa_root": root},
    }


def paged_case(kc: KernelCompiler) -> Dict[str, Any]:
    k = EX / "paged_attention" / "kernels"
    sig = [D.IN, D.IN, D.IN, D.IN, D.IN, D.OUT]
    b = Built(
        kc,
        str(k / "orchestration" / "paged_attention_orch.cpp"),
        sig,
        [
            (0, str(k / "aic" / "qk_matmul.cpp"), "aic", [D.IN, D.IN, D.OUT]),
            (1, str(k / "aiv" / "softmax_prepare.cpp"), "aiv", [D.IN, D.OUT, D.OUT, D.OUT]),
            (2, str(k / "aic" / "pv_matmul.cpp"), "aic", [D.IN, D.IN, D.OUT]),
            (3, str(k / "aiv" / "online_update.cpp"), "aiv", [D.IN, D.IN, D.IN, D.INOUT, D.INOUT, D.INOUT, D.OUT]),
        ],
    )
    # The example's decode_2x4 case.
    params = {"heads": 4, "head_dim": 16, "block_size": 16, "num_blocks": 8, "context_lens": [40, 25]}
    rng = np.random.default_rng(11)
    h, d, bs, nb = params["heads"], params["head_dim"], params["block_size"], params["num_blocks"]
    lens = np.array(params["context_lens"], np.int32)
    batch = len(lens)
    max_blocks = int(-(-lens.max() // bs))
    table = rng.permutation(nb)[: batch * max_blocks].reshape(batch, max_blocks).astype(np.int32)
    q = rng.standard_normal((batch, h, d)).astype(np.float32)
    kcache = rng.standard_normal((nb, bs, d)).astype(np.float32)
    vcache = rng.standard_normal((nb, bs, d)).astype(np.float32)
    scale = float(1.0 / np.sqrt(d))
    want = np.zeros((batch, h, d), np.float32)
    for r, ctx in enumerate(lens):
        kk = np.concatenate([kcache[blk] for blk in table[r]])[:ctx]
        vv = np.concatenate([vcache[blk] for blk in table[r]])[:ctx]
        s = (q[r] @ kk.T) * np.float32(scale)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want[r] = (p / p.sum(axis=1, keepdims=True)) @ vv
    return {
        "built": b,
        "arrays": lambda: [q, kcache, vcache, table, lens, np.zeros((batch, h, d), np.float32)],
        "scalars": [f32_bits(scale)],
        "golden": {5: want},
        "params": params,
    }


def bench_l2(case: Dict[str, Any], reps: int) -> Dict[str, Any]:
    b: Built = case["built"]
    arrays_s, arrays_t = case["arrays"](), case["arrays"]()
    scalars = case["scalars"]
    prog = taskring.Program(b.native, [taskring.ArgDirection(TR_DIR[d]) for d in b.sig] + [taskring.SCALAR] * len(scalars))
    samples: Dict[str, List[float]] = {"simpler": [], "taskring": []}
    tasks: Dict[str, int] = {}
    with SimplerWorker(level=2, platform=PLATFORM) as sw, taskring.ChipWorker() as tw:
        h = sw.register(b.simpler)
        sw.init()
        args = task_args(sw, b.sig, arrays_s, scalars)
        cfg = CallConfig()
        tr_args = list(arrays_t) + list(scalars)
        faces: Dict[str, Callable[[], Any]] = {
            "simpler": lambda: sw.run(h, args, cfg),
            "taskring": lambda: tw.run(prog, *tr_args),
        }
        for name, f in faces.items():  # warm-up
            tasks[name] = int(f().tasks)
        for _ in range(reps):
            for name, f in faces.items():
                t0 = time.perf_counter()
                f()
                samples[name].append((time.perf_counter() - t0) * 1e3)
    err = {}
    for name, arrs in (("simpler", arrays_s), ("taskring", arrays_t)):
        err[name] = max(float(np.max(np.abs(arrs[i] - want))) for i, want in case["golden"].items())
    return {"samples_ms": samples, "tasks": tasks, "max_abs_err": err}


# -- level 3: the per-task runtime_env demo ------------------------------------------------


def l3_case(kc: KernelCompiler) -> Dict[str, Any]:
    sys.path.insert(0, str(EX / "per_task_runtime_env"))
    import per_task_specs as specs  # the example's L2 tasks and its per-task CallConfig

    k = EX / "vector_example" / "kernels" / "aiv"
    b = Built(
        kc,
        str(EX / "per_task_runtime_env" / "kernels" / "orchestration" / "tiled_add_orch.cpp"),
        [D.IN, D.IN, D.OUT],
        [(0, str(k / "kernel_add.cpp"), "aiv", [D.IN, D.IN, D.OUT]), (1, str(k / "kernel_add_scalar.cpp"), "aiv", [D.IN, D.OUT])],
    )
    return {"built": b, "specs": specs}


def bench_l3(case: Dict[str, Any], reps: int) -> Dict[str, Any]:
    b: Built = case["built"]
    specs = case["specs"]
    L2 = specs.L2_TASKS
    shape = (specs.ROWS, specs.COLS)
    n_chips = 1 + max(t["worker"] for t in L2)

    def host() -> List[List[np.ndarray]]:
        out = []
        for t in L2:
            a, bb, o = taskring.shared_array(shape), taskring.shared_array(shape), taskring.shared_array(shape)
            a[:], bb[:] = t["a"], t["b"]
            out.append([a, bb, o])
        return out

    host_s, host_t = host(), host()
    tr_cfgs = [taskring.RunConfig(**{f: t[f] for f in specs.RING_FIELDS if f in t}) for t in L2]
    samples: Dict[str, List[float]] = {"simpler": [], "taskring": []}
    tasks: Dict[str, Any] = {}
    sw = SimplerWorker(level=3, platform=PLATFORM, runtime=RUNTIME, device_ids=list(range(n_chips)), num_sub_workers=0)
    tw = taskring.Worker(level=3, device_ids=list(range(n_chips)))
    try:
        h = sw.register(b.simpler)
        sw.init()
        th = tw.register(taskring.Program(b.native, [taskring.ArgDirection(TR_DIR[d]) for d in b.sig]))
        tw.init()
        targs = [task_args(sw, b.sig, arrs, []) for arrs in host_s]

        def orch_s(orch: Any, _args: Any, cfg: Any) -> None:
            for i, spec in enumerate(L2):
                orch.submit_next_level(h, targs[i], specs.l2_config(cfg, spec, CallConfig), worker=spec["worker"])

        def orch_t(o: Any, _args: Any, _cfg: Any) -> None:
            for i, spec in enumerate(L2):
                o.submit_next_level(th, host_t[i], tr_cfgs[i], worker=spec["worker"])

        faces: Dict[str, Callable[[], Any]] = {
            "simpler": lambda: sw.run(orch_s, args=None, config=CallConfig()),
            "taskring": lambda: tw.run(orch_t),
        }
        for name, f in faces.items():  # warm-up
            rep = f()
            tasks[name] = {"l2_tasks": len(rep.tasks), "chip_tasks": int(sum(t.tasks for t in rep.tasks))}
        for _ in range(reps):
            for name, f in faces.items():
                t0 = time.perf_counter()
                f()
                samples[name].append((time.perf_counter() - t0) * 1e3)
    finally:
        sw.close()
        tw.close()
    err = {}
    for name, hs in (("simpler", host_s), ("taskring", host_t)):
        err[name] = max(float(np.max(np.abs(o - (a + bb + 1)))) for a, bb, o in hs)
    return {"samples_ms": samples, "tasks": tasks, "max_abs_err": err, "params": {"l2_tasks": len(L2), "chips": n_chips, "tile": list(shape)}}

UPSTREAM_NOTE = (
    "upstream_sim_recorded_ms_per_run are recorded figures of upstream Simpler's own a2a3 simulator "
    "on its own sources (built from the 6ebaf771 snapshot, medians of 20 on a 2-CPU machine), not measured in this run"
)


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


def machine() -> Dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "loadavg_start": loadavg(),
    }


def series(unit: str, samples: List[float]) -> Dict[str, Any]:
    return {"unit": unit, "samples": samples, "median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def cases_of(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The common case format of benches/summarize.py: per example the Simpler face's
    µs per run against taskring's own API in the same run (and, with --all, per task)."""
    out = []
    for name, r in results.items():
        us = {k: [x * 1e3 for x in v] for k, v in r["samples_ms"].items()}
        case: Dict[str, Any] = {
            "name": f"{name} per run",
            "what": "wall time of Worker.run through taskring.simpler, µs",
            "value": series("µs/run", us["simpler"]),
            "baseline": {"name": "taskring's Python API", "value": series("µs/run", us["taskring"])},
            "ratio": r["simpler_over_taskring"],
            "extra": {"reported": True, "tasks_per_run": r["tasks"]},
        }
        if "speedup_vs_upstream_sim" in r:
            x = r["speedup_vs_upstream_sim"]["simpler"]
            up = r["upstream_sim_recorded_ms_per_run"]
            ntask = r["upstream_sim_recorded_tasks"]
            if name.startswith("upstream_"):
                text = f"≥ {BAR:.0f}× faster per run than upstream's simulator on the same program and kernels ({up:.0f} ms, recorded): {x:.0f}×"
                case["bars"] = [{"text": text, "met": x >= BAR}]
            else:
                text = f"for scale: upstream's simulator, its own {ntask}-task example, {up:.0f} ms/run (recorded): {x:.0f}×"
                case["bars"] = [{"text": text, "met": None}]
        out.append(case)
        per = {k: [x * 1e3 / max(1, _ntasks(r["tasks"][k])) for x in v] for k, v in r["samples_ms"].items()}
        out.append(
            {
                "name": f"{name} per task",
                "what": "wall time of Worker.run over the tasks its report counts, µs",
                "value": series("µs/task", per["simpler"]),
                "baseline": {"name": "taskring's Python API", "value": series("µs/task", per["taskring"])},
                "ratio": statistics.median(per["simpler"]) / statistics.median(per["taskring"]),
            }
        )
    return out


def _ntasks(t: Any) -> int:
    return int(t["chip_tasks"]) if isinstance(t, dict) else int(t)


def summarize(name: str, r: Dict[str, Any]) -> Dict[str, Any]:
    med = {k: statistics.median(v) for k, v in r["samples_ms"].items()}
    lo = {k: min(v) for k, v in r["samples_ms"].items()}
    hi = {k: max(v) for k, v in r["samples_ms"].items()}
    ntasks = {k: _ntasks(v) for k, v in r["tasks"].items()}
    per_task_us = {k: med[k] * 1e3 / ntasks[k] for k in med}
    out = dict(r)
    out.update(
        {
            "median_ms_per_run": med,
            "min_ms_per_run": lo,
            "max_ms_per_run": hi,
            "median_us_per_task": per_task_us,
            "simpler_over_taskring": med["simpler"] / med["taskring"],
        }
    )
    base = name.replace("upstream_", "")
    if base in UPSTREAM_RECORDED_MS:
        up = UPSTREAM_RECORDED_MS[base]
        out["upstream_sim_recorded_ms_per_run"] = up
        out["upstream_sim_recorded_tasks"] = UPSTREAM_RECORDED_TASKS[base]
        out["speedup_vs_upstream_sim"] = {k: up / v for k, v in med.items()}
        if name.startswith("upstream_"):  # the same program and kernels: the bar
            out["meets_bar"] = up / med["simpler"] >= BAR
        else:  # the repo's own kernels: for scale only
            out["for_scale_only"] = True
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out-dir", default="bench-results")
    ap.add_argument("--upstream", default=None, help="a Simpler checkout: also run its own vector example sources (needs PTO_ISA_ROOT)")
    args = ap.parse_args()
    reps = max(args.reps, 5)
    mach = machine()
    kc = KernelCompiler(platform=PLATFORM)
    t0 = time.perf_counter()
    cases = {"vector_example": vector_case(kc), "paged_attention": paged_case(kc)}
    if args.upstream:
        if not os.environ.get("PTO_ISA_ROOT"):
            print("b12 simpler: --upstream needs PTO_ISA_ROOT (the PTO-ISA headers of Simpler's pin)", file=sys.stderr)
            return 2
        cases["upstream_vector_example"] = upstream_vector_case(kc, args.upstream)
    l3 = l3_case(kc)
    compile_s = time.perf_counter() - t0
    results: Dict[str, Any] = {}
    for name, case in cases.items():
        r = bench_l2(case, reps)
        r["params"] = case["params"]
        results[name] = summarize(name, r)
    results["per_task_runtime_env_l3"] = summarize("per_task_runtime_env_l3", bench_l3(l3, reps))
    for name, r in results.items():
        m, pt = r["median_ms_per_run"], r["median_us_per_task"]
        up = f", upstream sim (recorded) {r['upstream_sim_recorded_ms_per_run']:.0f} ms = {r['speedup_vs_upstream_sim']['simpler']:.0f}x" if "speedup_vs_upstream_sim" in r else ""
        print(
            f"   {name:<26} simpler {m['simpler'] * 1e3:8.1f} us/run ({pt['simpler']:.1f} us/task), "
            f"taskring {m['taskring'] * 1e3:8.1f} us/run ({pt['taskring']:.1f} us/task), "
            f"ratio {r['simpler_over_taskring']:.2f}{up}; max err {max(r['max_abs_err'].values()):.1e}",
            file=sys.stderr,
        )
    doc = {
        "bench": "b12_simpler",
        "title": "wall time per Worker.run of the Simpler-form examples: Simpler's Python face vs taskring's Python API",
        "unix_time": int(time.time()),
        "machine": mach,
        "params": {"reps": reps, "platform": PLATFORM, "compile_s": compile_s, "upstream": args.upstream},
        "upstream_sim_note": UPSTREAM_NOTE,
        "bar": f">= {BAR:.0f}x faster per run than upstream's simulator on the same program and kernels",
        "cases": cases_of(results),
        "results": results,
    }
    mach["loadavg_end"] = loadavg()
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    out = Path(args.out_dir) / "b12_simpler.json"
    out.write_text(json.dumps(doc, indent=2))
    parts = "; ".join(
        f"{n} {r['median_ms_per_run']['simpler'] * 1e3:.0f} us/run simpler, {r['median_ms_per_run']['taskring'] * 1e3:.0f} taskring"
        + (f" ({r['speedup_vs_upstream_sim']['simpler']:.0f}x upstream sim, recorded)" if "speedup_vs_upstream_sim" in r else "")
        for n, r in results.items()
    )
    bad = [n for n, r in results.items() if max(r["max_abs_err"].values()) > 1e-3]
    print(f"b12 simpler: {parts}{'; WRONG RESULTS: ' + ', '.join(bad) if bad else ''} -> {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
