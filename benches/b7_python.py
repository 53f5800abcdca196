"""B7 python: the Python-side cost of one ``rt.submit`` against the same loop in the
Rust API (B2, measured in the same run by ``taskring-bench b2 --json``).

The loop mirrors B2: the orchestration holds every core with a gate kernel (a Python
kernel blocking on a ``threading.Event``, which releases the GIL), waits until they
run, then times ``n`` submits of the builtin ``noop`` kernel in one ``rt.scope()`` with
two numpy-backed inputs (program arguments) and one runtime output spec, then opens the
gates. Nothing completes while the loop runs.

One difference: B2's chip has one core; here the chip has two (one AIC, one AIV) and
each gets a gate (``@taskring.kernel(core="aic")`` and ``core="aiv"``).
With every core held, the orchestrator's work per submit is the same.

Cases (ns per submit, the median over ``--reps`` runs):
  * ``submit_2in_1spec``: ``rt.submit(noop, inputs=[a, b], outputs=[spec])`` with the
    spec made once before the loop — the bar's case (same as B2's ``2in_1out``);
  * ``submit_2in_1spec_inline``: the spec made per call (``rt.spec(a.shape, a.dtype)``);
  * ``submit_no_args``: ``rt.submit(noop)``;
  * ``python_loop``: the empty ``for`` loop alone (for reference).

Usage: .venv/bin/python benches/b7_python.py [--reps 7] [--n 16000] [--taskring PATH]
Writes bench-results/b7_python.json and prints a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

import taskring
from taskring import IN, ChipWorker, Program

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = ""
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "loadavg_start": load,
    }


def series(unit: str, samples: list) -> dict:
    return {
        "unit": unit,
        "samples": samples,
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
    }


def rust_b2(binary: str | None, reps: int) -> dict:
    """Run B2 in Rust and return its JSON document."""
    if binary is None:
        cand = ROOT / "target" / "release" / "taskring-bench"
        cmd = [str(cand)] if cand.exists() else ["cargo", "run", "--release", "-q", "-p", "taskring-bench", "--"]
    else:
        cmd = [binary]
    cmd += ["b2", "--json", "--reps", str(reps)]
    print(f"   running {' '.join(cmd)}", file=sys.stderr)
    out = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def measure(n: int, reps: int) -> dict:
    started = [threading.Event(), threading.Event()]
    release = threading.Event()

    @taskring.kernel(core="aic", name="gate_aic")
    def gate_aic():
        started[0].set()
        release.wait()

    @taskring.kernel(core="aiv", name="gate_aiv")
    def gate_aiv():
        started[1].set()
        release.wait()

    noop = taskring.kernels.noop
    result: dict = {}

    def make(case: str) -> Program:
        def orch(rt, a, b):
            for e in started:
                e.clear()
            release.clear()
            rt.submit(gate_aic)
            rt.submit(gate_aiv)
            for e in started:
                if not e.wait(10):
                    raise RuntimeError("a gate kernel did not start")
            spec = rt.spec(a.shape, a.dtype)
            try:
                with rt.scope():
                    t0 = time.perf_counter_ns()
                    if case == "submit_2in_1spec":
                        for _ in range(n):
                            rt.submit(noop, inputs=[a, b], outputs=[spec])
                    elif case == "submit_2in_1spec_inline":
                        for _ in range(n):
                            rt.submit(noop, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)])
                    elif case == "submit_no_args":
                        for _ in range(n):
                            rt.submit(noop)
                    else:
                        for _ in range(n):
                            pass
                    result[case] = (time.perf_counter_ns() - t0) / n
            finally:
                release.set()

        return Program(orch, [IN, IN], name=f"b7_{case}")

    cases = ["submit_2in_1spec", "submit_2in_1spec_inline", "submit_no_args", "python_loop"]
    progs = {c: make(c) for c in cases}
    a = np.ones(16, dtype=np.float32)
    b = np.full(16, 2.0, dtype=np.float32)
    samples = {c: [] for c in cases}
    with ChipWorker(cores=2) as w:
        for c in cases:  # warm-up
            w.run(progs[c], a, b)
        for r in range(reps):
            for c in cases:
                w.run(progs[c], a, b)
                samples[c].append(result[c])
            if sys.stderr.isatty():
                print(f"\r  [b7] {r + 1}/{reps}", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print("\r" + " " * 30 + "\r", end="", file=sys.stderr)
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7, help="runs per case (median; at least 5)")
    ap.add_argument("--n", type=int, default=16000, help="submits per run, in one scope (at most 16383)")
    ap.add_argument("--taskring-bench", "--taskring", dest="taskring", default=None,
                    help="path of the taskring-bench binary (default: target/release/taskring-bench, else cargo run)")
    ap.add_argument("--out-dir", default=str(ROOT / "bench-results"))
    args = ap.parse_args()
    if args.reps < 5:
        ap.error("--reps must be at least 5")
    sys.stdout.reconfigure(line_buffering=True)
    t_start = time.time()
    mach = machine()
    print("== b7 python: Python-side submit cost per task vs the same loop in the Rust API (B2)")
    print(f"   machine: nproc={mach['nproc']} cpu=\"{mach['cpu_model']}\" kernel={mach['kernel']} loadavg={mach['loadavg_start']}")
    print(f"   python {mach['python']}, numpy {mach['numpy']}; reps={args.reps} n={args.n}, 2 chip cores (each held by a gate)")
    sys.stdout.flush()

    py = measure(args.n, args.reps)
    b2 = rust_b2(args.taskring, args.reps)
    rust_case = next(c for c in b2["cases"] if c["name"] == "2in_1out")
    rust_noargs = next(c for c in b2["cases"] if c["name"] == "no_args")
    rust = rust_case["value"]["median"]

    out_cases = []
    for name, samples in py.items():
        s = series("ns/task", samples)
        case = {"name": name, "what": f"ns per call, mean over one run's {args.n} calls in one scope", "value": s}
        if name in ("submit_2in_1spec", "submit_2in_1spec_inline"):
            case["baseline"] = {"name": "the same loop in the Rust API (taskring-bench b2, case 2in_1out)", "value": rust_case["value"]}
            case["ratio_def"] = "Python ns/task / Rust ns/task"
            case["ratio"] = s["median"] / rust
        if name == "submit_no_args":
            case["baseline"] = {"name": "the same loop in the Rust API (taskring-bench b2, case no_args)", "value": rust_noargs["value"]}
            case["ratio_def"] = "Python ns/task / Rust ns/task"
            case["ratio"] = s["median"] / rust_noargs["value"]["median"]
        if name == "submit_2in_1spec":
            case["bars"] = [{"text": "≤ 1.5 µs/task", "met": s["median"] <= 1500.0}]
        out_cases.append(case)
        extra = f"  ({case['ratio']:.2f}x Rust)" if "ratio" in case else ""
        print(f"   {name:<26} {s['median']:8.0f} ns/task (min {s['min']:.0f}, max {s['max']:.0f}){extra}")
    print(f"   Rust API (B2 2in_1out, same run): {rust:.0f} ns/task; no_args {rust_noargs['value']['median']:.0f} ns/task")

    main_py = statistics.median(py["submit_2in_1spec"])
    met = main_py <= 1500.0
    summary = (
        f"Python rt.submit 2in+1spec {main_py:.0f} ns/task (bar ≤ 1.5 µs: {'met' if met else 'missed'}), "
        f"Rust {rust:.0f} ns/task, ratio {main_py / rust:.2f}"
    )
    mach["loadavg_end"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    doc = {
        "schema": 1,
        "bench": "b7_python",
        "title": "Python-side submit cost per task vs the same loop in the Rust API",
        "command": " ".join([sys.executable] + sys.argv),
        "unix_time": int(time.time()),
        "duration_s": time.time() - t_start,
        "machine": mach,
        "params": {"reps": args.reps, "submits_per_run": args.n, "chip_cores": 2, "gates": "one AIC + one AIV Python kernel", "kernel": "noop", "inputs": "2 numpy float32[16] program arguments", "output": "rt.spec((16,), float32)"},
        "cases": out_cases,
        "rust_b2": {"summary": b2["summary"], "machine": b2["machine"]},
        "summary": summary,
        "bars_met": met,
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "b7_python.json"
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False))
    print(f"b7 python: {summary} [bars {'met' if met else 'NOT all met'}] -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
