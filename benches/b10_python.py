"""B10 python: what a kernel costs per task when written in Python, in C (load_kernel),
with numba (a cfunc), or taken from the builtins — seen from a Python program.

One chip core; a Python orchestration submits ``n`` independent tasks of the kernel
(``add`` of two 256-float inputs into a runtime output) in one scope; the figure is the
run's wall time per task, the median over ``--reps`` runs, kernels interleaved. The
Python orchestration's own cost per submit is in every figure alike; the Rust-side
comparison of C against the builtin alone is ``taskring-bench b10``.

Usage: .venv/bin/python benches/b10_python.py [--reps 7] [--n 4000] [--out-dir bench-results]
Writes bench-results/b10_python.json and prints a one-line summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import taskring
from taskring import IN, ChipWorker

ROOT = Path(__file__).resolve().parent.parent


def load_example():
    spec = importlib.util.spec_from_file_location("paged_decode_example", ROOT / "examples/native/paged_decode.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@taskring.kernel(core="aiv")
def py_add(a, b, out):
    np.add(a, b, out=out)


def numba_add():
    try:
        import numba
        from taskring.numba_abi import KERNEL_SIG, tensor_array
    except ImportError:
        return None

    @numba.cfunc(KERNEL_SIG)
    def nb_add(tensors, ntensors, scalars, nscalars, err, errlen):
        a = tensor_array(tensors, 0, numba.float32)
        b = tensor_array(tensors, 1, numba.float32)
        c = tensor_array(tensors, 2, numba.float32)
        for i in range(a.shape[0]):
            c[i] = a[i] + b[i]
        return 0

    return taskring.kernel(nb_add, core="aiv")


def program(k, n):
    @taskring.program(signature=[IN, IN], name="b10")
    def prog(rt, a, b):
        spec = rt.spec((256,), "float32")
        with rt.scope():
            for _ in range(n):
                rt.submit(k, inputs=[a, b], outputs=[spec])

    return prog


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--out-dir", default="bench-results")
    args = ap.parse_args()
    ex = load_example()
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    lib = ex.build(str(Path(args.out_dir).resolve() / "libtrkernels_b10py.so"))
    kernels = {"builtin": taskring.kernels.add, "c_abi": taskring.load_kernel(lib, "tr_add", core="aiv")}
    nb = numba_add()
    if nb is not None:
        kernels["numba"] = nb
    kernels["python"] = py_add
    a, b = np.ones(256, np.float32), np.full(256, 2.0, np.float32)
    progs = {name: program(k, args.n) for name, k in kernels.items()}
    samples = {name: [] for name in kernels}
    with ChipWorker(cores=1) as w:
        for p in progs.values():
            w.run(p, a, b)
        for _ in range(max(args.reps, 5)):
            for name, p in progs.items():
                t0 = time.perf_counter()
                w.run(p, a, b)
                samples[name].append((time.perf_counter() - t0) * 1e9 / args.n)
    med = {k: statistics.median(v) for k, v in samples.items()}
    for k, v in med.items():
        print(f"   {k:<8} {v:>9.1f} ns/task ({v / med['builtin']:.2f}x builtin)", file=sys.stderr)
    doc = {
        "bench": "b10_python",
        "title": "per-task cost of builtin / C-ABI / numba / Python kernels from a Python program (1 core)",
        "params": {"tasks_per_run": args.n, "reps": max(args.reps, 5), "kernel": "add 256 floats"},
        "samples_ns_per_task": samples,
        "median_ns_per_task": med,
        "ratio_to_builtin": {k: v / med["builtin"] for k, v in med.items()},
    }
    out = Path(args.out_dir) / "b10_python.json"
    out.write_text(json.dumps(doc, indent=2))
    parts = ", ".join(f"{k} {v:.0f}" for k, v in med.items())
    print(f"b10 python: ns/task {parts}; python kernel {med['python'] / med['c_abi']:.1f}x the C kernel -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
