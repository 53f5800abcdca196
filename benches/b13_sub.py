"""B13 sub: the round trip of a SUB task (submit -> done) through Simpler's Python face,
against the round trip of a chip task (B6's case from Python), in one run; and SUB
task throughput with 1 and 2 SUB workers.

In one Python process, on resident workers started once:

- ``sub_rt``: ``taskring.simpler.worker.Worker(level=3, num_sub_workers=1)``, one
  registered empty callable, ``w.run(lambda o, a, c: o.submit_sub(h))``: the wall time
  of one ``run`` (the orchestration, the submit, the SUB process calling the callable,
  the completion back to the waiting run);
- ``chip_rt`` (the baseline): taskring's own L3 API, ``taskring.Worker(level=3,
  device_ids=[0])`` with one registered empty program (``@taskring.program(signature=[])``,
  no task of its own), ``w.run(lambda o, a, c: o.submit_next_level(h, [], worker=0))``:
  one chip task on a chip process, B6's round trip with Python on both ends;
- ``sub_tput_1`` / ``sub_tput_2``: ``--tasks`` (2000) independent empty SUB tasks in one
  run of a ``Worker(level=3, num_sub_workers=1 | 2)``: tasks per second.

A SUB task and a chip task in one run of ``Worker(level=3, platform="a2a3sim",
device_ids=[0], num_sub_workers=1)`` is not measured: a chip task of Simpler's face is a
``ChipCallable``, compiled C++ (``simpler_setup.KernelCompiler``), which this benchmark
does not build.

One warm-up block of each, then ``--reps`` rounds with the variants interleaved in each
round: per round ``--batch`` (100) round trips of each kind and one throughput run of
each; the figures are medians over all round trips (``--reps`` x ``--batch``, 2000 by
default) and over the throughput runs, with min and max beside them.

Usage: .venv/bin/python benches/b13_sub.py [--reps 20 --batch 100 --tasks 2000] [--out-dir bench-results]
Writes bench-results/b13_sub.json and prints a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import taskring
from taskring.simpler.worker import Worker as SimplerWorker


def empty_sub(args: Any) -> None:
    """The SUB task's callable: nothing."""


@taskring.program(signature=[])
def empty_chip(rt: Any) -> None:
    """The chip task's program: no task of its own."""


def loadavg() -> float:
    return os.getloadavg()[0]


def machine() -> Dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "platform": platform.platform(), "python": platform.python_version(), "loadavg_start": loadavg()}


def stats(xs: List[float]) -> Dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def timed(fn: Callable[[], None], n: int) -> List[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20, help="rounds (default 20, at least 5)")
    ap.add_argument("--batch", type=int, default=100, help="round trips of each kind per round")
    ap.add_argument("--tasks", type=int, default=2000, help="SUB tasks of a throughput run")
    ap.add_argument("--out-dir", default="bench-results")
    args = ap.parse_args()
    reps, batch, n_tasks = max(args.reps, 5), max(args.batch, 1), max(args.tasks, 1)
    mach = machine()

    sub1 = SimplerWorker(level=3, num_sub_workers=1)
    h1 = sub1.register(empty_sub)
    sub1.init()
    sub2 = SimplerWorker(level=3, num_sub_workers=2)
    h2 = sub2.register(empty_sub)
    sub2.init()
    chip = taskring.Worker(level=3, device_ids=[0])
    hc = chip.register(empty_chip)
    chip.init()
    try:
        cases: Dict[str, Callable[[], None]] = {
            "sub_rt": lambda: sub1.run(lambda o, a, c: o.submit_sub(h1)),
            "chip_rt": lambda: chip.run(lambda o, a, c: o.submit_next_level(hc, [], worker=0)),
        }

        def many(w: SimplerWorker, h: Any) -> Callable[[], None]:
            def orch(o: Any, a: Any, c: Any) -> None:
                for _ in range(n_tasks):
                    o.submit_sub(h)

            return lambda: w.run(orch)

        tput = {"sub_tput_1": many(sub1, h1), "sub_tput_2": many(sub2, h2)}
        for fn in cases.values():  # warm-up
            timed(fn, batch)
        for fn in tput.values():
            fn()
        rt: Dict[str, List[float]] = {k: [] for k in cases}
        tp: Dict[str, List[float]] = {k: [] for k in tput}
        for rnd in range(reps):
            order = list(cases) if rnd % 2 == 0 else list(reversed(cases))
            for k in order:
                rt[k] += timed(cases[k], batch)
            for k in tput if rnd % 2 == 0 else reversed(list(tput)):
                t = timed(tput[k], 1)[0]
                tp[k].append(n_tasks / t)
    finally:
        sub1.close()
        sub2.close()
        chip.close()

    results: Dict[str, Any] = {k: {"unit": "us/run", **{s: v * 1e6 if s != "n" else v for s, v in stats(xs).items()}} for k, xs in rt.items()}
    results.update({k: {"unit": "tasks/s", **stats(xs)} for k, xs in tp.items()})
    ratio = results["sub_rt"]["median"] / results["chip_rt"]["median"]
    mach["loadavg_end"] = loadavg()
    doc = {
        "bench": "b13_sub",
        "title": "SUB task round trip (submit -> done) against the chip round trip of B6, in one run; SUB task throughput",
        "unix_time": int(time.time()),
        "machine": mach,
        "params": {"reps": reps, "batch": batch, "tasks": n_tasks},
        "not_measured": "a SUB and a chip task in one run of simpler's Worker(level=3, platform='a2a3sim'): its chip task is compiled C++",
        "results": results,
        "sub_rt_over_chip_rt": ratio,
        "samples": {"rt_us": {k: [x * 1e6 for x in xs] for k, xs in rt.items()}, "tput_tasks_per_s": tp},
    }
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    out = Path(args.out_dir) / "b13_sub.json"
    out.write_text(json.dumps(doc, indent=2))
    r = results
    print(
        f"b13 sub: SUB round trip {r['sub_rt']['median']:.1f} us/run ({r['sub_rt']['min']:.1f}-{r['sub_rt']['max']:.0f}), "
        f"chip round trip {r['chip_rt']['median']:.1f} us/run ({r['chip_rt']['min']:.1f}-{r['chip_rt']['max']:.0f}), ratio {ratio:.2f}; "
        f"{n_tasks} SUB tasks: {r['sub_tput_1']['median'] / 1e3:.1f} k tasks/s with 1 SUB worker, "
        f"{r['sub_tput_2']['median'] / 1e3:.1f} k with 2 -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
