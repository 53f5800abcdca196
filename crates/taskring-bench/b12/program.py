"""B12's program in Python, driven by ``taskring-bench b12`` over a pipe.

The same program as ``orchestration.cpp`` beside this file and the Rust one of
``src/bench/cpp_submit.rs``: a gate task holds the chip's only core, then ``n`` submits
of the builtin ``noop`` kernel in one ``rt.scope()``, timed with
``time.perf_counter_ns`` around the loop, then the gate opens. Cases:

* ``2in_1out``: ``rt.submit(noop, inputs=[a, b], outputs=[spec])``;
* ``2in_1inout_chain``: ``rt.submit(noop, inputs=[a, b], inouts=[x])``.

Protocol: the first line written is ``ready`` or ``skip: <why>`` (taskring cannot be
imported, ...). Then for each case name read from stdin, one run, answered by the ns
per submit (or ``error: <text>``). End of input ends the process.

Usage: python program.py --n 2000 --window 4096
"""

from __future__ import annotations

import argparse
import sys
import threading
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, required=True, help="submits per run, in one scope")
    ap.add_argument("--window", type=int, required=True, help="ring_task_window of every ring")
    args = ap.parse_args()
    n = args.n
    try:
        import numpy as np

        import taskring
        from taskring import IN, INOUT, ChipWorker, Program, RunConfig
    except Exception as e:  # noqa: BLE001 (any failure to import is reported, not raised)
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"skip: cannot import taskring: {type(e).__name__}: {first}", flush=True)
        return 0

    started = threading.Event()
    release = threading.Event()

    @taskring.kernel(name="b12_gate")
    def gate() -> None:
        started.set()
        release.wait()

    noop = taskring.kernels.noop
    result: dict = {}

    def make(case: str) -> Program:
        def orch(rt, a, b, x):  # type: ignore[no-untyped-def]
            started.clear()
            release.clear()
            rt.submit(gate)
            try:
                if not started.wait(10):
                    raise RuntimeError("the gate kernel did not start")
                spec = rt.spec(a.shape, a.dtype)
                with rt.scope():
                    if case == "2in_1out":
                        t0 = time.perf_counter_ns()
                        for _ in range(n):
                            rt.submit(noop, inputs=[a, b], outputs=[spec])
                        t1 = time.perf_counter_ns()
                    else:
                        t0 = time.perf_counter_ns()
                        for _ in range(n):
                            rt.submit(noop, inputs=[a, b], inouts=[x])
                        t1 = time.perf_counter_ns()
                result[case] = (t1 - t0) / n
            finally:
                release.set()

        return Program(orch, [IN, IN, INOUT], name=f"b12_{case}")

    progs = {c: make(c) for c in ("2in_1out", "2in_1inout_chain")}
    a = np.ones(16, dtype=np.float32)
    b = np.full(16, 2.0, dtype=np.float32)
    x = np.zeros(16, dtype=np.float32)
    cfg = RunConfig(ring_task_window=args.window)
    try:
        worker = ChipWorker(cfg, cores=1)
    except Exception as e:  # noqa: BLE001
        print(f"skip: cannot start a ChipWorker: {type(e).__name__}: {e}", flush=True)
        return 0
    print("ready", flush=True)
    with worker:
        for line in sys.stdin:
            case = line.strip()
            if not case:
                continue
            try:
                if case not in progs:
                    raise ValueError(f"unknown case {case!r}")
                result.pop(case, None)
                worker.run(progs[case], a, b, x)
                print(f"{result[case]:.3f}", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"error: {type(e).__name__}: {e}".replace("\n", " "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
