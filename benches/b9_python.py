"""B9 python: a 67-task decode step replayed (``ChipWorker.capture`` / ``g.replay``,
docs/api.md §10) against the same program run normally (``w.run``), from Python.

The decode step mirrors ``crates/taskring-bench/src/bench/replay.rs`` (``decode_step``):
the paged-attention decode with 32 KV blocks, q [H=4, D=16], K^T [32·16, 8],
V [32·8, 16], out [4, 16]; ``rt.alloc`` of the scores [4, 256], 32 ``matmul`` in scopes
of their own (a row slice of K^T, writing a column view of the scores), one
``softmax_rows`` into a runtime output, one ``fill`` of ``out`` with 0, 32
``matmul_acc`` chained on ``out`` in scopes of their own: 1 + 32 + 1 + 1 + 32 = 67 tasks.

Kernel sets (each its own program, captured once on the same worker):
  * ``builtin`` — ``taskring.kernels.{matmul, softmax_rows, fill, matmul_acc}``: the bar's case;
  * ``noop`` — the same submits and dependencies with ``taskring.kernels.noop`` (what the
    runtime and the orchestration cost without compute);
  * ``python`` — the same with ``@taskring.kernel`` numpy kernels (matmuls on "aic", as the
    builtins), unless ``--no-python-kernels``.

One ``ChipWorker(cores=2)`` (one AIC + one AIV core), default sizing. Each round times
``--batch`` normal runs (``w.run(step, q, kt, v, out)``) and ``--batch`` replays
(``g.replay(q, kt, v, out)``) of each kernel set, the two blocks in alternating order
from round to round; a round's figure is the median wall time of its block, the case's
figure the median over ``--reps`` rounds. Before timing: the replay's ``out`` equals the
normal run's (``numpy.allclose``) and numpy's own result, for the builtin and Python
kernels, with the graph captured on other arrays of the same shapes (the replay rebases
the views on the new arrays); every timed replay's report says ``replayed``.

Where the time goes (in each round, not part of the bar): the builtin step's Python
orchestration alone (timed inside it) against those runs' wall time, and a run and a
replay of a program with no task (the fixed cost around the graph).

Bar (docs/benchmarks.md, B9): the builtin decode step replayed >= 3x faster than run.

Usage: .venv/bin/python benches/b9_python.py [--reps 7] [--batch 200] [--out-dir bench-results]
Writes bench-results/b9_python.json and prints a one-line summary.
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

import numpy as np

import taskring
from taskring import IN, INOUT, ChipWorker

ROOT = Path(__file__).resolve().parent.parent
K = taskring.kernels

# As bench/replay.rs: 2 x 32 + 3 = 67 tasks.
BLOCKS = 32
HEADS = 4
DIM = 16
BLOCK = 8
BAR = 3.0


def machine() -> dict:
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


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


def series(unit: str, samples: list) -> dict:
    return {
        "unit": unit,
        "samples": samples,
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
    }


# ----- Python kernels (numpy; hold the GIL on the core threads) ------------------------


@taskring.kernel(core="aic", name="py_matmul")
def py_matmul(a, b, c):
    np.matmul(a, b, out=c)


@taskring.kernel(core="aic", name="py_matmul_acc")
def py_matmul_acc(a, b, c):
    c += a @ b


@taskring.kernel(name="py_softmax_rows")
def py_softmax_rows(x, out):
    m = x.max(axis=1, keepdims=True)
    np.exp(x - m, out=out)
    out /= out.sum(axis=1, keepdims=True)


@taskring.kernel(name="py_fill")
def py_fill(out, value):
    out[...] = value


def decode_step(kernels, name: str) -> taskring.Program:
    """The decode step of bench/replay.rs with ``kernels = (qk, softmax, fill, pv)``."""
    qk, softmax, fill, pv = kernels
    width = BLOCK * BLOCKS

    @taskring.program(signature=[IN, IN, IN, INOUT], name=name)
    def step(rt, q, kt, v, out):
        scores = rt.alloc((HEADS, width), "float32")
        for b in range(BLOCKS):
            with rt.scope():
                ktb = kt[b * DIM:(b + 1) * DIM]
                sb = scores.view((HEADS, BLOCK), b * BLOCK, (width, 1))
                rt.submit(qk, inputs=[q, ktb], outputs=[sb])
        p = rt.submit(softmax, inputs=[scores], outputs=[rt.spec((HEADS, width), "float32")]).outputs[0]
        rt.submit(fill, outputs=[out], scalars=[0.0])
        for b in range(BLOCKS):
            with rt.scope():
                pb = p.view((HEADS, BLOCK), b * BLOCK, (width, 1))
                vb = v[b * BLOCK:(b + 1) * BLOCK]
                rt.submit(pv, inputs=[pb, vb], inouts=[out])

    return step


@taskring.program(signature=[IN, IN, IN, INOUT], name="b9_empty")
def empty_step(rt, q, kt, v, out):
    """No task: what a run and a replay cost around the graph."""


def data(seed: int):
    """Host arrays as DecodeData::new in bench/replay.rs."""

    def f(n: int, m: int) -> np.ndarray:
        i = np.arange(n, dtype=np.int64)
        return (((i * m + seed) % 13).astype(np.float32) / np.float32(13.0) - np.float32(0.5)).astype(np.float32)

    q = f(HEADS * DIM, 7).reshape(HEADS, DIM)
    kt = f(BLOCKS * DIM * BLOCK, 5).reshape(BLOCKS * DIM, BLOCK)
    v = f(BLOCKS * BLOCK * DIM, 3).reshape(BLOCKS * BLOCK, DIM)
    out = np.zeros((HEADS, DIM), np.float32)
    return q, kt, v, out


def numpy_decode(q, kt, v) -> np.ndarray:
    scores = np.concatenate([q @ kt[b * DIM:(b + 1) * DIM] for b in range(BLOCKS)], axis=1)
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    return p @ v


def check(name: str, w: ChipWorker, prog, g, with_values: bool) -> None:
    """The replay computes what a normal run computes (graph captured on other arrays)."""
    q, kt, v, out = data(1)
    rep = w.run(prog, q, kt, v, out)
    if rep.tasks != 67 or rep.replayed:
        raise SystemExit(f"b9 python: {name}: normal run reports {rep.tasks} tasks, replayed={rep.replayed}")
    ref = out.copy()
    out[...] = 0.0
    rep = g.replay(q, kt, v, out)
    if rep.tasks != 67 or not rep.replayed:
        raise SystemExit(f"b9 python: {name}: replay reports {rep.tasks} tasks, replayed={rep.replayed}")
    if with_values:
        if not np.allclose(out, ref, rtol=1e-5, atol=1e-6):
            raise SystemExit(f"b9 python: {name}: the replay computes something else than the normal run "
                             f"(max |diff| {np.abs(out - ref).max():.3g})")
        expect = numpy_decode(q, kt, v)
        if not np.allclose(ref, expect, rtol=1e-4, atol=1e-5) or not np.any(ref != 0.0):
            raise SystemExit(f"b9 python: {name}: the normal run does not compute the decode step "
                             f"(max |diff| to numpy {np.abs(ref - expect).max():.3g})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7, help="rounds (the figure is the median of the rounds' medians)")
    ap.add_argument("--batch", type=int, default=200, help="timed runs and timed replays per round and kernel set")
    ap.add_argument("--cores", type=int, default=2, help="chip cores (default 2: one AIC, one AIV)")
    ap.add_argument("--no-python-kernels", action="store_true", help="leave out the Python-kernel case")
    ap.add_argument("--out-dir", default=str(ROOT / "bench-results"))
    args = ap.parse_args()
    if args.reps < 1 or args.batch < 1:
        ap.error("--reps and --batch must be at least 1")
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    t_start = time.time()
    mach = machine()
    print("== b9 python: a 67-task decode step replayed (g.replay) vs run normally (w.run), from Python")
    print(f"   machine: nproc={mach['nproc']} cpu=\"{mach['cpu_model']}\" kernel={mach['kernel']} loadavg={mach['loadavg_start']}")
    print(f"   python {mach['python']}, numpy {mach['numpy']}; reps={args.reps} batch={args.batch}, {args.cores} chip cores")

    sets = {
        "builtin": (K.matmul, K.softmax_rows, K.fill, K.matmul_acc),
        "noop": (K.noop, K.noop, K.noop, K.noop),
    }
    if not args.no_python_kernels:
        sets["python"] = (py_matmul, py_softmax_rows, py_fill, py_matmul_acc)
    progs = {k: decode_step(ks, f"b9_decode_{k}") for k, ks in sets.items()}

    run_s: dict[str, list[float]] = {k: [] for k in sets}
    rep_s: dict[str, list[float]] = {k: [] for k in sets}
    graphs = {}
    with ChipWorker(cores=args.cores) as w:
        for k, prog in progs.items():
            graphs[k] = w.capture(prog, *data(2))
            if graphs[k].tasks != 67:
                raise SystemExit(f"b9 python: {k}: {graphs[k].tasks} tasks recorded, expected 67")
            check(k, w, prog, graphs[k], with_values=(k != "noop"))
        q, kt, v, out = data(1)
        for _ in range(20):  # warm-up
            for k, prog in progs.items():
                w.run(prog, q, kt, v, out)
                graphs[k].replay(q, kt, v, out)
        pc = time.perf_counter
        # Where the time goes (not part of the bar; in every round, after the kernel sets):
        # the builtin step's Python orchestration alone, timed inside its orchestration,
        # with the wall time of those same runs; a run and a replay of a program with no
        # task (the fixed cost around the graph).
        inner = progs["builtin"].orchestration
        orch_s: list = []

        def timed(rt, *a):
            t0 = pc()
            inner(rt, *a)
            orch_s.append(pc() - t0)

        timed_prog = taskring.Program(timed, [IN, IN, IN, INOUT], name="b9_decode_builtin_timed")
        ge = w.capture(empty_step, q, kt, v, out)
        brk: dict[str, list[float]] = {"orchestration": [], "timed_run": [], "empty_run": [], "empty_replay": []}
        calls = (("timed_run", lambda: w.run(timed_prog, q, kt, v, out)),
                 ("empty_run", lambda: w.run(empty_step, q, kt, v, out)),
                 ("empty_replay", lambda: ge.replay(q, kt, v, out)))
        for r in range(args.reps):
            for k, prog in progs.items():
                g = graphs[k]
                order = ("run", "replay") if (r % 2 == 0) else ("replay", "run")
                for what in order:
                    ts = []
                    if what == "run":
                        for _ in range(args.batch):
                            t0 = pc()
                            w.run(prog, q, kt, v, out)
                            ts.append(pc() - t0)
                        run_s[k].append(statistics.median(ts) * 1e3)
                    else:
                        replayed = True
                        for _ in range(args.batch):
                            t0 = pc()
                            rep = g.replay(q, kt, v, out)
                            ts.append(pc() - t0)
                            replayed &= rep.replayed
                        if not replayed:
                            raise SystemExit(f"b9 python: {k}: a timed replay's report says replayed=False")
                        rep_s[k].append(statistics.median(ts) * 1e3)
            orch_s.clear()
            for key, call in calls:
                ts = []
                for _ in range(args.batch):
                    t0 = pc()
                    call()
                    ts.append(pc() - t0)
                brk[key].append(statistics.median(ts) * 1e3)
            brk["orchestration"].append(statistics.median(orch_s) * 1e3)
            if sys.stderr.isatty():
                print(f"\r  [b9 python] {r + 1}/{args.reps}", end="", file=sys.stderr, flush=True)
        if sys.stderr.isatty():
            print("\r" + " " * 30 + "\r", end="", file=sys.stderr)
        edges = {k: g.edges for k, g in graphs.items()}
        # After the timed loop, the builtin graph still computes the decode step.
        out[...] = 0.0
        graphs["builtin"].replay(q, kt, v, out)
        final_ok = bool(np.allclose(out, numpy_decode(q, kt, v), rtol=1e-4, atol=1e-5))
        if not final_ok:
            raise SystemExit("b9 python: after the timed loop the builtin replay no longer computes the decode step")

    cases = []
    speed = {}
    for k in sets:
        rn, rp = series("ms/step", run_s[k]), series("ms/step", rep_s[k])
        sp = rn["median"] / rp["median"]
        per_round = [a / b for a, b in zip(run_s[k], rep_s[k])]
        speed[k] = sp
        case = {
            "name": f"decode_step_{k}",
            "what": f"median ms per step of {args.batch} calls per round, median over {args.reps} rounds ({k} kernels)",
            "kernels": [getattr(x, "name", str(x)) for x in sets[k]],
            "tasks": 67,
            "edges": edges[k],
            "normal_run": rn,
            "replay": rp,
            "speedup": sp,
            "speedup_def": "normal run median / replay median",
            "speedup_per_round": {"samples": per_round, "min": min(per_round), "max": max(per_round)},
        }
        if k == "builtin":
            case["bars"] = [{"text": "replay >= 3x faster than a normal run", "met": sp >= BAR}]
        cases.append(case)
        print(f"   {k:<8} normal run {rn['median']:7.3f} ms (min {rn['min']:.3f}), replay {rp['median']:7.3f} ms "
              f"(min {rp['min']:.3f}): {sp:5.2f}x (rounds {min(per_round):.2f}-{max(per_round):.2f}x)")

    breakdown = {k: series("ms", v) for k, v in brk.items()}
    breakdown["what"] = {
        "orchestration": "the builtin decode step's Python orchestration alone (67 submits, 64 scopes, views), per run",
        "timed_run": "wall time of those same runs (w.run of the builtin step, its orchestration wrapped in a timer)",
        "empty_run": "w.run of a program with no task (the Python wrapper, the dispatch, the settle)",
        "empty_replay": "g.replay of that program's captured (empty) graph",
    }
    print(f"   where the time goes: Python orchestration of the builtin step {breakdown['orchestration']['median']:.3f} ms "
          f"of its run's {breakdown['timed_run']['median']:.3f} ms; "
          f"an empty program run {breakdown['empty_run']['median']:.3f} ms, replayed {breakdown['empty_replay']['median']:.3f} ms")
    b = next(c for c in cases if c["name"] == "decode_step_builtin")
    met = b["speedup"] >= BAR
    extra = "".join(f"; {k} kernels {speed[k]:.2f}x" for k in sets if k != "builtin")
    summary = (
        f"decode step (67 tasks, builtin kernels) {b['replay']['median'] * 1e3:.0f} µs replayed vs "
        f"{b['normal_run']['median'] * 1e3:.0f} µs run: {b['speedup']:.2f}x (bar >= {BAR:.0f}x: {'met' if met else 'missed'})"
        f"{extra}; load {loadavg()}"
    )
    mach["loadavg_end"] = loadavg()
    doc = {
        "schema": 1,
        "bench": "b9_python",
        "title": "a 67-task decode step replayed vs run normally, from Python",
        "command": " ".join([sys.executable] + sys.argv),
        "unix_time": int(time.time()),
        "duration_s": time.time() - t_start,
        "machine": mach,
        "params": {
            "reps": args.reps,
            "batch": args.batch,
            "chip_cores": args.cores,
            "sizing": "default (the worker's; replays use the captured sizing)",
            "decode": {"blocks": BLOCKS, "heads": HEADS, "dim": DIM, "block": BLOCK, "tasks": 67},
            "mirrors": "crates/taskring-bench/src/bench/replay.rs decode_step",
            "order": "per round and kernel set: a block of runs and a block of replays, order alternating by round",
            "checks": "replay out allclose to the normal run's and to numpy (graph captured on other arrays); every timed replay replayed=True",
        },
        "cases": cases,
        "breakdown": breakdown,
        "speedup": b["speedup"],
        "bar": {"text": "the decode step replayed >= 3x faster than run normally (builtin kernels)", "threshold": BAR, "met": met},
        "summary": summary,
        "bars_met": met,
    }
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "b9_python.json"
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False))
    print(f"b9 python: {summary} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
