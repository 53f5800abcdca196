#!/usr/bin/env python3
"""B1: METG(50%) of `taskring-bench taskbench` against Task Bench's own OpenMP build and the
in-repo OpenMP `depend` driver, in the same run.

For each dependence pattern, every driver runs the same Task Bench graph: fixed -steps and
-width, `-kernel compute_bound`, with `-iter` shrinking geometrically from large to small
(halving down to --fine-below, then dividing by --factor). At each grain, each driver runs
--reps times, interleaved (A B C, C B A, ...), and the median elapsed time is kept. Then,
per driver:

  FLOP/s      = Total FLOPs / elapsed
  peak        = the median of the driver's --peak-top (3) best per-grain median FLOP/s
                (its own peak; one fast grain on a loaded machine does not set it)
  efficiency  = FLOP/s / peak
  granularity = elapsed * cores / tasks   (the average task duration, per core)
  METG(50%)   = the smallest granularity at which efficiency is still >= 50%, walking
                from large to small grains until two consecutive grains fall below 50%
                (a single dip is noise); also reported: the log-interpolated crossing,
                the METG by Task Bench's own rule (scripts/chart_metg.py: mean elapsed,
                the finest grain anywhere >= 50%, linear interpolation) against the
                same peak, and the METG range: the METG grain if every grain ran at its
                reps' upper quartile FLOP/s, and at their lower quartile

A sweep is too noisy to judge when its best --peak-top grains lie more than
--peak-spread (10%) of its peak apart, when its two quartile METGs lie more than
--metg-grains (2) grains apart (or one is undefined), or when more than --busy-grains
(25%) of its grains were measured while other processes used more than --quiet of the
CPUs (just before the grain, or while it ran: all CPUs' busy time minus the script's
and its drivers' CPU time). A comparison or bar resting on such a sweep is reported as "too noisy to judge"
instead of met or missed. With --repeat, the figures are medians over the clean sweeps
when they are a majority; otherwise the figure is too noisy to judge.

Each comparison of taskring with a baseline is made twice: with each driver's own peak,
and with a common peak, the larger of the two drivers' peaks, so a driver with a slower
peak does not get a lower bar. With several configurations of a baseline (wait policy,
binding), the comparison uses the one with the lowest METG (the stronger baseline),
under each peak definition.

Drivers:
- taskbench_openmp: Task Bench's own OpenMP driver (`openmp/main` of StanfordLegion/
  task-bench at the pinned commit TASK_BENCH_COMMIT), cloned from --task-bench-git into
  target/taskbench/task-bench-<commit> and built there with upstream's Makefiles
  (`make -C core`: -O3, plus -mavx2 -mfma when /proc/cpuinfo has avx2;
  `make -C openmp main`: -O3 -march=native). --task-bench-git also takes a local clone.
  When the clone or the build fails, the script says why and runs without it.
- openmp: omp_taskbench.c, next to this script, built here with `gcc -O2 -fopenmp` (the
  same flags, patterns, kernels and validation as taskring's driver).
  Both OpenMP drivers run once per libgomp wait policy in --omp-policies (default: the
  default policy and OMP_WAIT_POLICY=passive) and thread binding in --omp-bind (default:
  unbound, and OMP_PROC_BIND=true: one thread per CPU).
- taskring: `taskring-bench taskbench` (default target/release/taskring-bench; --build
  runs `cargo build --release -p taskring-bench` first) with as many threads as the OpenMP
  team: CORES-1 core threads plus the orchestrator thread, which runs ready tasks whenever
  it would otherwise wait (`-helper 1`), each thread on its own CPU (`-pin 1`), ring 1's
  task window sized to the graph. For reference: "taskring_unpinned" (--unpinned, the
  same without -pin) and "taskring_cores_plus_orch" (--cores-plus-orch: CORES core
  threads plus the orchestrator, one thread more than CPUs, unpinned).

All three use the same compute_bound arithmetic (Task Bench's: 16 lanes of 4 doubles,
a = a*a + a, as register-only FMAs with AVX2/FMA) and the same FLOP count. Each grain
checks that every driver reports the same task and FLOP totals.

--kernel-only measures the kernel instead of a sweep: each driver runs `-type trivial
-width 1 -worker 1 -kernel compute_bound -iter --kernel-iter` (one thread executes tasks),
--kernel-reps times interleaved, and the script prints the median GFLOP/s of each and the
ratios (bench-results/b1_kernel.json). taskring runs with a window that holds the whole
graph (its orchestrator submits everything, then sleeps until the end) and, as
"taskring_sized_window", with the driver's own window (its orchestrator then waits for
ring space and is woken by every retirement).

--repeat N runs the whole sweep N times and reports the median METGs over them; each
sweep is kept in the JSON. Before each grain, the script waits (at most --max-wait s)
until other processes use less than --quiet of the CPUs, and records how busy the machine
was and its load average, and how much of the CPUs other processes used while the
grain ran; the summary gives the load average at the start and end and the larger of
those two per grain (median, max). Results go to bench-results/b1_<pattern>.json, plus a PNG plot when matplotlib is
installed. The script prints a one-line summary per pattern.

Bars (docs/benchmarks.md, B1): stencil_1d METG <= 1.0x the in-repo OpenMP driver; trivial
METG <= 1 us; trivial, stencil_1d, fft and nearest METG <= 0.8x Task Bench's OpenMP build
under the common peak.

usage: python3 benches/taskbench/metg.py [PATTERN ...] [--steps 1000] [--width CORES]
       [--radix 3] [--ngraphs 1] [--iter-max 65536] [--iter-min 1] [--fine-below 8192]
       [--factor 1.4142] [--reps 7] [--repeat 1] [--threshold 0.5] [--budget 110]
       [--peak-top 3] [--peak-spread 0.1] [--metg-grains 2] [--busy-grains 0.25]
       [--taskring-bench PATH] [--build] [--task-bench-git URL|DIR] [--no-task-bench]
       [--kernel-only] [--out-dir bench-results]
"""

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)  # metg_analysis.py beside this script, also when loaded by path
from metg_analysis import (  # noqa: E402
    metg,
    metg_at,
    NoiseLimits,
    make_point,
    robust_peak,
    analyze,
    busy_summary,
    fmt_ratio,
    fmt_us,
    fmt_range,
    fmt_peak,
    med,
    ratio,
    compare,
    ratio_range,
    aggregate,
    aggregate_driver,
    judge_bars,
)

TASK_BENCH_GIT = "https://github.com/StanfordLegion/task-bench.git"
TASK_BENCH_COMMIT = "bf4ad1982d4b748bf3fd54e8239e798114e6ade8"
DEFAULT_PATTERNS = ["trivial", "stencil_1d", "fft", "nearest"]

LINE_RE = {
    "tasks": re.compile(r"^Total Tasks (\d+)$", re.M),
    "deps": re.compile(r"^Total Dependencies (\d+)$", re.M),
    "flops": re.compile(r"^Total FLOPs (\d+)$", re.M),
    "elapsed": re.compile(r"^Elapsed Time ([0-9.eE+-]+) seconds$", re.M),
}
FAMILY_TITLE = {"taskbench_openmp": "Task Bench's OpenMP", "openmp": "in-repo OpenMP"}


def machine():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = []
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": cpu,
        "kernel": platform.release(),
        "loadavg": " ".join(load),
    }


def cpu_busy(interval=0.25):
    """Fraction of all CPUs busy over `interval` seconds (/proc/stat), or None."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)
    try:
        t0, i0 = snap()
        time.sleep(interval)
        t1, i1 = snap()
    except (OSError, ValueError):
        return None
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def cpu_ticks():
    """(busy seconds of all CPUs, CPU seconds of this process and its waited-for
    children) now, or None: the difference of two readings is what other processes used."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    t = os.times()
    return (sum(v) - idle) / os.sysconf("SC_CLK_TCK"), t.user + t.system + t.children_user + t.children_system


def others_busy(before, after, wall_s, ncpu):
    """Fraction of all CPUs other processes used between two `cpu_ticks` readings."""
    if before is None or after is None or wall_s <= 0:
        return None
    used = (after[0] - before[0]) - (after[1] - before[1])
    return min(1.0, max(0.0, used / (wall_s * ncpu)))


def wait_quiet(threshold, max_wait):
    """Wait (at most max_wait s) until other processes use < threshold of the CPUs.
    Returns (seconds waited, last busy fraction)."""
    t0 = time.time()
    busy = cpu_busy()
    while busy is not None and busy > threshold and time.time() - t0 < max_wait:
        time.sleep(0.5)
        busy = cpu_busy()
    return time.time() - t0, busy


def build_omp(cc, out_dir):
    src = os.path.join(HERE, "omp_taskbench.c")
    exe = os.path.join(out_dir, "omp_taskbench")
    os.makedirs(out_dir, exist_ok=True)
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        cmd = [cc, "-O2", "-fopenmp", "-o", exe, src]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"metg.py: building the OpenMP baseline failed: {' '.join(cmd)}\n{r.stderr}")
    return exe


def build_task_bench(a, out_dir):
    """Task Bench's OpenMP driver at the pinned commit: (path, None), or (None, why not)."""
    d = os.path.join(out_dir, f"task-bench-{a.task_bench_commit[:12]}")
    exe = os.path.join(d, "openmp", "main")
    if os.path.exists(exe):
        return exe, None
    if shutil.which("git") is None or shutil.which("make") is None:
        return None, "git and make are needed to fetch and build Task Bench"
    if not os.path.isdir(os.path.join(d, ".git")):
        part = d + ".part"
        shutil.rmtree(part, ignore_errors=True)
        os.makedirs(out_dir, exist_ok=True)
        print(f"metg.py: cloning Task Bench from {a.task_bench_git} (commit {a.task_bench_commit[:12]})", file=sys.stderr)
        for cmd in (["git", "clone", "--quiet", "--no-checkout", a.task_bench_git, part],
                    ["git", "-C", part, "checkout", "--quiet", a.task_bench_commit]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                shutil.rmtree(part, ignore_errors=True)
                return None, f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}"
        os.rename(part, d)
    print(f"metg.py: building Task Bench's core library and OpenMP driver in {os.path.relpath(d, ROOT)}", file=sys.stderr)
    for cmd in (["make", "-C", os.path.join(d, "core"), f"CXX={a.cxx}", f"CC={a.cc}"],
                ["make", "-C", os.path.join(d, "openmp"), f"CXX={a.cxx}", "main"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return None, f"{' '.join(cmd)} failed: {r.stderr.strip()[-1000:]}"
    return exe, None


def check_taskring(exe):
    if not os.path.exists(exe):
        sys.exit(f"metg.py: {exe} not found; build it (cargo build --release -p taskring-bench) or pass --build / --taskring-bench")
    r = subprocess.run([exe, "taskbench", "-steps", "2", "-width", "2"], capture_output=True, text=True)
    if r.returncode != 0 or "Total Tasks 4" not in r.stdout:
        sys.exit(f"metg.py: `{exe} taskbench` does not work (is the subcommand wired into main.rs?):\n{r.stderr.strip()[:500]}")


def graph_args(a, pattern, it):
    one = ["-steps", str(a.steps), "-width", str(a.width), "-type", pattern, "-kernel", "compute_bound",
           "-iter", str(it)]
    if pattern in ("nearest", "spread", "random_nearest"):
        one += ["-radix", str(a.radix)]
    args = []
    for g in range(a.ngraphs):
        if g:
            args.append("-and")
        args += one
    return args


def run_one(cmd, env):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"metg.py: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr.strip()[:2000]}")
    out = {}
    for k, rx in LINE_RE.items():
        m = rx.search(r.stdout)
        if not m:
            sys.exit(f"metg.py: no '{k}' line in the output of {' '.join(cmd)}:\n{r.stdout[:2000]}")
        out[k] = float(m.group(1)) if k == "elapsed" else int(m.group(1))
    return out


def iter_values(a):
    vals = []
    v = float(a.iter_max)
    while v > a.fine_below and v >= a.iter_min:
        vals.append(int(round(v)))
        v /= 2
    v = min(v, float(a.fine_below))
    while v >= a.iter_min:
        iv = int(round(v))
        if not vals or iv != vals[-1]:
            vals.append(iv)
        v /= a.factor
    if vals[-1] != a.iter_min:
        vals.append(a.iter_min)
    return vals


def interleaved(drivers, reps, args_of):
    """Each driver `reps` times, in alternating order; {name: [parsed output, ...]}."""
    runs = {name: [] for name in drivers}
    order = list(drivers)
    for rep in range(reps):
        for name in (order if rep % 2 == 0 else order[::-1]):
            cmd, env, _ = drivers[name]
            runs[name].append(run_one(cmd + args_of(name), env))
    return runs


def sweep(a, pattern, drivers, cores, lim):
    iters = iter_values(a)
    data = {name: [] for name in drivers}
    t_start = time.time()
    waited_total = 0.0
    truncated = False
    for it in iters:
        if time.time() - t_start - waited_total > a.budget:
            truncated = True
            break
        waited, busy = wait_quiet(a.quiet, a.max_wait) if a.quiet < 1 else (0.0, cpu_busy())
        waited_total += waited
        load = machine()["loadavg"].split()[:1]
        c0, w0 = cpu_ticks(), time.time()
        runs = interleaved(drivers, a.reps, lambda name: graph_args(a, pattern, it))
        during = others_busy(c0, cpu_ticks(), time.time() - w0, os.cpu_count() or 1)
        totals = {(rs[0]["tasks"], rs[0]["flops"]) for rs in runs.values()}
        if len(totals) != 1:
            sys.exit(f"metg.py: the drivers disagree on the graph's totals at -iter {it}: "
                     + ", ".join(f"{n}: {rs[0]['tasks']} tasks, {rs[0]['flops']} FLOPs" for n, rs in runs.items()))
        for name in drivers:
            rs = runs[name]
            data[name].append(make_point(it, rs[0]["tasks"], rs[0]["deps"], rs[0]["flops"],
                                         [r["elapsed"] for r in rs], cores, busy, waited,
                                         float(load[0]) if load else None, during))
        if a.verbose:
            line = "  ".join(f"{n}: {data[n][-1]['granularity_s'] * 1e6:9.2f} us {data[n][-1]['flops_per_s'] / 1e9:7.2f} GF/s"
                             for n in drivers)
            print(f"  iter {it:>8}  {line}", file=sys.stderr)
    res = {}
    for name, pts in data.items():
        an = analyze(pts, a.threshold, lim, cores)
        # best-of-reps variant (interference only adds time), with the same robust peak
        best_peak, _ = robust_peak([p["best_flops_per_s"] for p in pts], lim.peak_top)
        bpts = [{"granularity_s": p["best_granularity_s"], "best_flops_per_s": p["best_flops_per_s"]} for p in pts]
        mb, _ = metg_at(bpts, best_peak, a.threshold, "best_flops_per_s")
        cmd, env, family = drivers[name]
        res[name] = {
            "family": family,
            "command": cmd,
            "env": {k: v for k, v in env.items() if k.startswith("OMP_")},
            **an,
            "largest_grain_flops_per_s": pts[0]["flops_per_s"],
            "metg_best_of_reps_s": mb,
            "floor_granularity_s": pts[-1]["granularity_s"],
            "points": pts,
        }
    return res, time.time() - t_start, truncated, waited_total


def plot(path, pattern, res, threshold):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, r in res.items():
        xs = [p["granularity_s"] * 1e6 for p in r["points"]]
        ys = [p["efficiency"] for p in r["points"]]
        noisy = ", too noisy to judge" if r["noise"] else ""
        ax.plot(xs, ys, marker="o", ms=3, label=f"{name} (METG {fmt_us(r['metg_s'])}{noisy})")
    ax.axhline(threshold, color="gray", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("task granularity (us) = elapsed x cores / tasks")
    ax.set_ylabel("efficiency (FLOP/s / own peak: median of the best grains)")
    ax.set_title(f"B1 Task Bench {pattern}: efficiency vs task granularity")
    ax.invert_xaxis()
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def kernel_only(a, mach, taskring, tb, omp, base_env):
    """Single-thread compute_bound GFLOP/s of each driver, runs interleaved."""
    env1 = dict(base_env, OMP_NUM_THREADS="1")
    # taskring's window holds the whole graph, so its orchestrator submits every task at
    # once and then sleeps until the end; "taskring_sized_window" keeps the driver's
    # window of 64, where the orchestrator waits for ring space and every retirement
    # wakes it (a cost on the core thread, not the kernel's).
    window = str(max(64, 1 << (a.kernel_steps - 1).bit_length()))
    tr = [taskring, "taskbench", "-worker", "1", "-warmup", "1"]
    drivers = {"taskring": (tr + ["-window", window], env1, "taskring"),
               "taskring_sized_window": (tr, env1, "taskring_ref")}
    if tb:
        drivers["taskbench_openmp"] = ([tb, "-worker", "1"], env1, "taskbench_openmp")
    drivers["openmp"] = ([omp, "-worker", "1", "-warmup", "1"], env1, "openmp")
    graph = ["-steps", str(a.kernel_steps), "-width", "1", "-type", "trivial", "-kernel", "compute_bound",
             "-iter", str(a.kernel_iter)]
    load0 = mach["loadavg"]
    t0 = time.time()
    runs = interleaved(drivers, a.kernel_reps, lambda name: graph)
    out = {}
    for name, rs in runs.items():
        rates = [r["flops"] / r["elapsed"] for r in rs]
        out[name] = {"command": drivers[name][0] + graph, "gflops_median": statistics.median(rates) / 1e9,
                     "gflops_min": min(rates) / 1e9, "gflops_max": max(rates) / 1e9,
                     "gflops_all": [x / 1e9 for x in rates]}
    tr = out["taskring"]["gflops_median"]
    parts = [f"{n} {r['gflops_median']:.1f} ({r['gflops_min']:.1f}-{r['gflops_max']:.1f})" for n, r in out.items()]
    rel = [f"taskring / {n} = {tr / r['gflops_median']:.3f}" for n, r in out.items() if n != "taskring"]
    summary = (f"b1 kernel: compute_bound, one thread, -iter {a.kernel_iter}, median GFLOP/s of {a.kernel_reps} interleaved runs: "
               + ", ".join(parts) + "; " + ", ".join(rel)
               + f"; {mach['cpu_model']}, nproc {mach['nproc']}, load {load0}")
    doc = {
        "schema": 1,
        "bench": "b1_kernel",
        "title": "Task Bench compute_bound kernel, single-thread GFLOP/s of each driver",
        "command": " ".join([sys.executable, os.path.relpath(__file__, ROOT)] + sys.argv[1:]),
        "unix_time": int(t0),
        "duration_s": time.time() - t0,
        "machine": {**mach, "loadavg_start": load0, "loadavg_end": machine()["loadavg"]},
        "params": {"steps": a.kernel_steps, "iter": a.kernel_iter, "reps": a.kernel_reps,
                   "task_bench_commit": a.task_bench_commit if tb else None},
        "drivers": out,
        "summary": summary,
    }
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "b1_kernel.json"), "w") as f:
        json.dump(doc, f, indent=2)
    print(summary, flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("patterns", nargs="*", default=DEFAULT_PATTERNS)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--width", type=int, default=0, help="points per timestep of each graph (default: cores)")
    ap.add_argument("--ngraphs", type=int, default=1, help="concurrent graphs (-and)")
    ap.add_argument("--radix", type=int, default=3, help="radix for nearest / spread / random_nearest (Task Bench's default 3)")
    ap.add_argument("--iter-max", type=int, default=1 << 16)
    ap.add_argument("--iter-min", type=int, default=1)
    ap.add_argument("--factor", type=float, default=math.sqrt(2), help="-iter ratio between grains below --fine-below")
    ap.add_argument("--fine-below", type=int, default=8192, help="-iter halves above this, then shrinks by --factor")
    ap.add_argument("--reps", type=int, default=7, help="runs per driver per grain (median; at least 5)")
    ap.add_argument("--repeat", type=int, default=1, help="whole sweeps per pattern (median METG over them)")
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--budget", type=float, default=110.0,
                    help="seconds of measuring per pattern before smaller grains are skipped (waits excluded)")
    ap.add_argument("--quiet", type=float, default=0.3,
                    help="before each grain, wait until other processes use less than this fraction of the CPUs (1 = never wait)")
    ap.add_argument("--peak-top", type=int, default=3,
                    help="a driver's peak is the median of its best this many per-grain median FLOP/s")
    ap.add_argument("--peak-spread", type=float, default=0.10,
                    help="a sweep whose best --peak-top grains lie further apart than this fraction of its peak is too noisy to judge")
    ap.add_argument("--metg-grains", type=int, default=2,
                    help="a sweep whose METG at the reps' upper and lower quartiles lie more grains apart is too noisy to judge")
    ap.add_argument("--busy-grains", type=float, default=0.25,
                    help="a sweep with more than this fraction of grains measured while other processes used > --quiet of the CPUs is too noisy to judge")
    ap.add_argument("--max-wait", type=float, default=15.0, help="longest wait for a quiet machine per grain (s)")
    ap.add_argument("--cores", type=int, default=0, help="worker threads of every driver (default: CPUs)")
    ap.add_argument("--taskring-bench", "--taskring", dest="taskring",
                    default=os.path.join(ROOT, "target", "release", "taskring-bench"),
                    help="path of the taskring-bench binary (its `taskbench` driver)")
    ap.add_argument("--build", action="store_true", help="cargo build --release -p taskring-bench first")
    ap.add_argument("--cc", default="gcc")
    ap.add_argument("--cxx", default="g++", help="C++ compiler for Task Bench's build")
    ap.add_argument("--task-bench-git", default=TASK_BENCH_GIT,
                    help="where to clone Task Bench from (a URL or a local clone)")
    ap.add_argument("--task-bench-commit", default=TASK_BENCH_COMMIT, help="the Task Bench commit to build")
    ap.add_argument("--no-task-bench", action="store_true", help="run without Task Bench's OpenMP driver")
    ap.add_argument("--omp-policies", default="default,passive",
                    help="libgomp OMP_WAIT_POLICY values to run the OpenMP drivers with (comma-separated; 'default' = unset)")
    ap.add_argument("--omp-bind", default="unset,true",
                    help="OMP_PROC_BIND values to run the OpenMP drivers with (comma-separated; 'unset' = not set)")
    ap.add_argument("--cores-plus-orch", action="store_true",
                    help="also run taskring with one core thread per CPU plus the orchestrator thread")
    ap.add_argument("--unpinned", action="store_true", help="also run taskring's configuration without -pin 1")
    ap.add_argument("--kernel-only", action="store_true",
                    help="measure the single-thread compute_bound rate of each driver instead of a sweep")
    ap.add_argument("--kernel-iter", type=int, default=65536)
    ap.add_argument("--kernel-steps", type=int, default=400)
    ap.add_argument("--kernel-reps", type=int, default=15)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench-results"))
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--strict", action="store_true",
                    help="exit with status 1 when a bar is missed, 2 when none is missed but one is too noisy to judge")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()

    mach = machine()
    cores = a.cores or mach["nproc"]
    if a.peak_top < 1:
        sys.exit("metg.py: --peak-top must be >= 1")
    lim = NoiseLimits(a.peak_top, a.peak_spread, a.metg_grains, a.quiet, a.busy_grains)
    if a.width <= 0:
        a.width = cores
    if a.reps < 5 or a.kernel_reps < 5:
        sys.exit("metg.py: --reps and --kernel-reps must be at least 5 (medians of at least 5 repetitions)")
    if a.repeat < 1:
        sys.exit("metg.py: --repeat must be >= 1")
    if a.build:
        r = subprocess.run(["cargo", "build", "--release", "-q", "-p", "taskring-bench"], cwd=ROOT)
        if r.returncode != 0:
            sys.exit("metg.py: cargo build failed")
    if shutil.which(a.cc) is None:
        sys.exit(f"metg.py: {a.cc} not found")
    build_dir = os.path.join(ROOT, "target", "taskbench")
    omp = build_omp(a.cc, build_dir)
    tb = None
    if not a.no_task_bench:
        tb, why = build_task_bench(a, build_dir)
        if tb is None:
            print(f"metg.py: Task Bench's OpenMP driver is unavailable ({why}); running without it "
                  "(--task-bench-git takes a local clone)", file=sys.stderr)
    check_taskring(a.taskring)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    if a.kernel_only:
        return kernel_only(a, mach, a.taskring, tb, omp, {k: v for k, v in base_env.items() if not k.startswith("PTO2_RING_")})
    base_env["OMP_NUM_THREADS"] = str(cores)
    tr_env = {k: v for k, v in base_env.items() if not k.startswith("PTO2_RING_")}
    # "taskring": as many threads as the OpenMP team: cores-1 core threads plus the
    # orchestrator thread, which runs ready tasks whenever it would wait (-helper 1).
    tr_cores = max(1, cores - 1)
    tr_cmd = [a.taskring, "taskbench", "-worker", str(tr_cores), "-helper", "1", "-warmup", "1"]
    drivers = {"taskring": (tr_cmd + ["-pin", "1"], dict(tr_env), "taskring")}
    if a.unpinned:
        drivers["taskring_unpinned"] = (tr_cmd, dict(tr_env), "taskring_ref")
    if a.cores_plus_orch:
        drivers["taskring_cores_plus_orch"] = ([a.taskring, "taskbench", "-worker", str(cores), "-warmup", "1"],
                                               dict(tr_env), "taskring_ref")
    policies = [p.strip() for p in a.omp_policies.split(",") if p.strip()]
    binds = [b.strip() for b in a.omp_bind.split(",") if b.strip()]
    if not policies or not binds:
        sys.exit("metg.py: --omp-policies and --omp-bind must not be empty")
    families = []
    for family, exe, extra in (("taskbench_openmp", tb, []), ("openmp", omp, ["-warmup", "1"])):
        if exe is None:
            continue
        families.append(family)
        for pol in policies:
            for bind in binds:
                env = dict(base_env)
                name = family
                if pol != "default":
                    env["OMP_WAIT_POLICY"] = pol
                    name += f"_{pol}"
                if bind != "unset":
                    env["OMP_PROC_BIND"] = bind
                    name += "_bind" if bind == "true" else f"_bind_{bind}"
                # (Task Bench's driver takes -worker; it has no warm-up runs.)
                drivers[name] = ([exe, "-worker", str(cores)] + extra, env, family)
    os.makedirs(a.out_dir, exist_ok=True)
    ok, unjudged = True, False
    for pattern in a.patterns:
        load0 = machine()["loadavg"]
        t0 = time.time()
        sweeps = []
        for rep in range(a.repeat):
            res, dur, truncated, waited = sweep(a, pattern, drivers, cores, lim)
            sweeps.append({
                "drivers": res,
                "comparisons": {f: compare(res, f, a.threshold) for f in families},
                "duration_s": dur,
                "truncated_by_budget": truncated,
                "waited_for_quiet_s": waited,
            })
            if a.repeat > 1:
                print(f"  sweep {rep + 1}/{a.repeat} ({pattern}) done in {dur:.0f} s", file=sys.stderr, flush=True)

        agg_drivers = {name: aggregate_driver(sweeps, name) for name in drivers}
        comparisons = {f: aggregate(sweeps, f) for f in families}
        bars = judge_bars(pattern, comparisons, agg_drivers["taskring"])
        for b in bars:
            if b["verdict"] == "missed":
                ok = False
            elif b["verdict"] == "too noisy to judge":
                unjudged = True

        tr = agg_drivers["taskring"]
        load1 = machine()["loadavg"]
        parts = [f"b1 {pattern}: METG(50%) taskring {fmt_us(tr['metg_s'])} {fmt_range(tr['metg_range_s'])} "
                 f"(peak {fmt_peak(tr)})"]
        for family in families:
            c = comparisons[family]
            o, cm = c["own"], c["common"]
            parts.append(
                f"{FAMILY_TITLE[family]}: own peaks {fmt_us(o['baseline_s'])} {fmt_range(o['baseline_range_s'])} "
                f"({o['baseline']}, peak {fmt_peak(agg_drivers[o['baseline']])}) = {fmt_ratio(o['ratio'])} "
                f"{fmt_range(o['ratio_range'], ratio=True)}; common peak {cm['peak_flops_per_s'] / 1e9:.1f}: taskring "
                f"{fmt_us(cm['taskring_s'])} vs {fmt_us(cm['baseline_s'])} ({cm['baseline']}) = {fmt_ratio(cm['ratio'])} "
                f"{fmt_range(cm['ratio_range'], ratio=True)}")
        for ref in ("taskring_unpinned", "taskring_cores_plus_orch"):
            if ref in agg_drivers:
                parts.append(f"{ref} {fmt_us(agg_drivers[ref]['metg_s'])}")
        parts.append("bars: " + ("; ".join(
            f"{b['desc']}: " + (b["verdict"].upper() if b["verdict"] in ("missed", "too noisy to judge") else b["verdict"])
            + (f" ({'; '.join(b['noise'])})" if b["verdict"] == "too noisy to judge" else "")
            for b in bars) or "none"))
        busy = [busy_summary(sw["drivers"]["taskring"]["points"]) for sw in sweeps]
        busy_med = med([b[0] for b in busy])
        busy_max = max((b[1] for b in busy if b[1] is not None), default=None)
        parts.append(f"{a.repeat} sweep(s) x {a.reps} reps, {cores} cores, nproc {mach['nproc']}, {mach['cpu_model']}, "
                     f"load {load0} -> {load1}, CPUs used by others around a grain "
                     + ("not measured" if busy_med is None else f"median {busy_med:.0%}, max {busy_max:.0%}"))
        summary = "; ".join(parts)
        doc = {
            "schema": 2,
            "bench": f"b1_{pattern}",
            "title": f"Task Bench METG(50%) of taskring vs Task Bench's OpenMP build and the in-repo OpenMP driver, pattern {pattern}",
            "command": " ".join([sys.executable, os.path.relpath(__file__, ROOT)] + sys.argv[1:]),
            "unix_time": int(t0),
            "duration_s": time.time() - t0,
            "machine": {**mach, "loadavg_start": load0, "loadavg_end": load1},
            "params": {
                "pattern": pattern,
                "steps": a.steps,
                "width": a.width,
                "ngraphs": a.ngraphs,
                "radix": a.radix if pattern in ("nearest", "spread", "random_nearest") else None,
                "kernel": "compute_bound",
                "iters": iter_values(a),
                "reps": a.reps,
                "repeat": a.repeat,
                "threshold": a.threshold,
                "cores": cores,
                "task_bench_commit": a.task_bench_commit if tb else None,
                "omp_build": f"{a.cc} -O2 -fopenmp",
                "task_bench_build": "upstream Makefiles: core -O3 (-mavx2 -mfma when the CPU has AVX2), openmp -O3 -march=native",
                "quiet_threshold": a.quiet,
                "noise_limits": vars(lim),
                "definitions": {
                    "peak_flops_per_s": f"the median of the driver's {lim.peak_top} highest per-grain median FLOP/s (peak_best_flops_per_s); peak_spread: (highest - lowest of them) / peak",
                    "efficiency": "median FLOP/s / peak (own: the driver's peak; common: the larger of the two compared drivers' peaks)",
                    "granularity_s": "median elapsed x cores / tasks",
                    "metg_s": "smallest granularity with efficiency >= threshold, walking down from the largest grain until two consecutive grains fall below it; with --repeat, the median over the judged sweeps",
                    "metg_range_s": "[finer, coarser]: the METG grain when every grain runs at its reps' upper / lower quartile FLOP/s, against the same peak",
                    "metg_taskbench_rule_s": "Task Bench's own rule (scripts/chart_metg.py): mean elapsed, the smallest granularity of any grain >= threshold, linear interpolation to the next grain; against the same peak",
                    "metg_best_of_reps_s": "the same on the fastest of the reps at each grain (the primary figures use medians)",
                    "machine_busy_before": "fraction of all CPUs busy (other processes) just before the grain was measured",
                    "machine_busy_during": "fraction of all CPUs other processes used while the grain was measured (all CPUs' busy time from /proc/stat minus this script's and its drivers' CPU time)",
                    "noise": f"why a sweep is too noisy to judge: its best grains spread > {lim.peak_spread:.0%} of its peak, its quartile METGs > {lim.metg_grains} grains apart or undefined, or > {lim.busy_grains:.0%} of its grains measured with other processes using > {lim.quiet:.0%} of the CPUs",
                    "judged sweeps": "with --repeat, the clean sweeps when they are a majority (medians over them), else all sweeps, and the figure is too noisy to judge",
                    "comparisons": "per baseline family and peak definition: the configuration with the lowest median METG among those that can be judged, taskring's and its METG, the ratio taskring / baseline and its range over the quartile METGs",
                    "bars": "verdict met / missed / not measured / too noisy to judge (met is then null)",
                },
            },
            "drivers": agg_drivers,
            "comparisons": comparisons,
            "bars": bars,
            "summary": summary,
            "sweeps": sweeps,
        }
        path = os.path.join(a.out_dir, f"b1_{pattern}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)
        if not a.no_plot:
            png = os.path.join(a.out_dir, f"b1_{pattern}.png")
            if not plot(png, pattern, sweeps[-1]["drivers"], a.threshold):
                print("metg.py: matplotlib not available; no plot", file=sys.stderr)
        print(summary, flush=True)
    # Like `taskring-bench`: a missed bar is reported, not an error exit (--strict: exit 1,
    # or 2 when no bar is missed but one is too noisy to judge).
    if not a.strict:
        return 0
    return 1 if not ok else (2 if unjudged else 0)


if __name__ == "__main__":
    sys.exit(main())
