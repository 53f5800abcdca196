#!/usr/bin/env python3
"""B1: METG(50%) of `taskring-bench taskbench` vs the OpenMP `depend` baseline, in the same run.

For each dependence pattern, both drivers run the same Task Bench graph: fixed -steps and
-width, `-kernel compute_bound`, with `-iter` shrinking geometrically from large to small
(halving down to --fine-below, then dividing by --factor). At each grain, each driver runs
--reps times, interleaved (A B, B A, ...), and the median elapsed time is kept. Then, per
driver:

  FLOP/s      = Total FLOPs / elapsed
  efficiency  = FLOP/s / peak. The peak is the best per-grain median FLOP/s of the sweep,
                which is the largest grain's unless something else on the machine slowed
                that grain down (the largest-grain variant is in the JSON as
                efficiency_largest / metg_largest_s)
  granularity = elapsed * cores / tasks   (the average task duration, per core)
  METG(50%)   = the smallest granularity at which efficiency is still >= 50%, walking
                from large to small grains until two consecutive grains fall below 50%
                (a single dip is noise); also reported: the log-interpolated crossing

Drivers:
- OpenMP: omp_taskbench.c, next to this script, built here with `gcc -O2 -fopenmp`. It
  runs once per libgomp wait policy in --omp-policies (default: the default policy and
  OMP_WAIT_POLICY=passive). The ratio and the bar compare taskring with the one with the
  lowest METG, so the baseline is never the weaker configuration.
- taskring: `taskring-bench taskbench` (default target/release/taskring-bench; --build
  runs `cargo build --release -p taskring-bench` first). "taskring" runs with as many threads as
  the OpenMP team: CORES-1 core threads plus the orchestrator thread, which runs ready
  tasks whenever it would otherwise wait (`-helper 1`), ring 1's task window sized to the
  graph. For reference: "taskring_cores_plus_orch" (CORES core threads plus the
  orchestrator, one thread more than CPUs; --no-cores-plus-orch skips it) and
  "taskring_default_window" (the runtime's default ring sizing, `-window 0`;
  --no-default-window skips it). The ratio and the bar use "taskring".

--repeat N runs the whole sweep N times and reports the median METG and ratio over them;
each sweep is kept in the JSON. Before each grain, the script waits (at most --max-wait s)
until other processes use less than --quiet of the CPUs, and records how busy the machine
was. Results go to bench-results/b1_<pattern>.json, plus a PNG plot when matplotlib is
installed. The script prints a one-line summary per pattern.

Bars (docs/benchmarks.md, B1): stencil_1d METG <= 1.0x the OpenMP baseline; trivial METG <= 1 us.

usage: python3 benches/taskbench/metg.py [PATTERN ...] [--steps 1000] [--width CORES]
       [--ngraphs 1] [--iter-max 65536] [--iter-min 1] [--fine-below 8192] [--factor 1.4142]
       [--reps 7] [--repeat 1] [--threshold 0.5] [--budget 110] [--taskring PATH] [--build]
       [--out-dir bench-results]
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

LINE_RE = {
    "tasks": re.compile(r"^Total Tasks (\d+)$", re.M),
    "deps": re.compile(r"^Total Dependencies (\d+)$", re.M),
    "flops": re.compile(r"^Total FLOPs (\d+)$", re.M),
    "elapsed": re.compile(r"^Elapsed Time ([0-9.eE+-]+) seconds$", re.M),
}
BARS = {
    "stencil_1d": ("ratio", 1.0, "METG(50%) <= 1.0x the OpenMP baseline"),
    "trivial": ("abs", 1e-6, "METG(50%) <= 1 us"),
}


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


def metg(points, key_eff, threshold):
    """(METG, log-interpolated crossing). Walk from the largest grain down; the METG is the
    smallest granularity still >= threshold before two consecutive grains fall below it
    (one isolated dip is treated as noise: libgomp's default spin policy and a shared
    machine both produce single slow medians)."""
    last, below = None, 0
    for k, p in enumerate(points):
        if p[key_eff] >= threshold:
            last, below = k, 0
        else:
            below += 1
            if below >= 2:
                break
    if last is None:
        return None, None
    g = points[last]["granularity_s"]
    if last + 1 >= len(points):
        return g, g  # never fell below the threshold in the sweep
    p0, p1 = points[last], points[last + 1]
    e0, e1 = p0[key_eff], p1[key_eff]
    x0, x1 = math.log(p0["granularity_s"]), math.log(p1["granularity_s"])
    f = (e0 - threshold) / (e0 - e1) if e0 != e1 else 0.0
    return g, math.exp(x0 + f * (x1 - x0))


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}x"


def fmt_us(s):
    return "n/a" if s is None else f"{s * 1e6:.2f} us"


def sweep(a, pattern, drivers, cores):
    iters = iter_values(a)
    data = {name: [] for name in drivers}
    t_start = time.time()
    waited_total = 0.0
    truncated = False
    for idx, it in enumerate(iters):
        if time.time() - t_start - waited_total > a.budget:
            truncated = True
            break
        waited, busy = wait_quiet(a.quiet, a.max_wait) if a.quiet < 1 else (0.0, None)
        waited_total += waited
        runs = {name: [] for name in drivers}
        order = list(drivers)
        for rep in range(a.reps):
            for name in (order if rep % 2 == 0 else order[::-1]):
                cmd, env = drivers[name]
                runs[name].append(run_one(cmd + graph_args(a, pattern, it), env))
        for name in drivers:
            rs = runs[name]
            el = [r["elapsed"] for r in rs]
            med = statistics.median(el)
            tasks, flops = rs[0]["tasks"], rs[0]["flops"]
            data[name].append({
                "iter": it,
                "tasks": tasks,
                "dependencies": rs[0]["deps"],
                "flops": flops,
                "elapsed_s_median": med,
                "elapsed_s_all": el,
                "flops_per_s": flops / med,
                "granularity_s": med * cores / tasks,
                "best_flops_per_s": flops / min(el),
                "best_granularity_s": min(el) * cores / tasks,
                "machine_busy_before": busy,
                "waited_s": waited,
            })
        if a.verbose:
            line = "  ".join(f"{n}: {data[n][-1]['granularity_s'] * 1e6:9.2f} us {data[n][-1]['flops_per_s'] / 1e9:7.2f} GF/s"
                             for n in drivers)
            print(f"  iter {it:>8}  {line}", file=sys.stderr)
    res = {}
    for name, pts in data.items():
        peak_largest = pts[0]["flops_per_s"]
        peak_max = max(p["flops_per_s"] for p in pts)
        best_peak = max(p["best_flops_per_s"] for p in pts)
        for p in pts:
            p["efficiency"] = p["flops_per_s"] / peak_max
            p["efficiency_largest"] = p["flops_per_s"] / peak_largest
            p["best_efficiency"] = p["best_flops_per_s"] / best_peak
        m, mi = metg(pts, "efficiency", a.threshold)
        mm, mmi = metg(pts, "efficiency_largest", a.threshold)
        # best-of-reps variant (interference only adds time)
        bpts = [{"granularity_s": p["best_granularity_s"], "e": p["best_efficiency"]} for p in pts]
        mb, _ = metg(bpts, "e", a.threshold)
        cmd, env = drivers[name]
        res[name] = {
            "command": cmd,
            "env": {k: v for k, v in env.items() if k.startswith("OMP_")},
            "peak_flops_per_s": peak_max,
            "largest_grain_flops_per_s": peak_largest,
            "metg_s": m,
            "metg_interpolated_s": mi,
            "metg_largest_s": mm,
            "metg_largest_interpolated_s": mmi,
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
        ax.plot(xs, ys, marker="o", ms=3, label=f"{name} (METG {fmt_us(r['metg_s'])})")
    ax.axhline(threshold, color="gray", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("task granularity (us) = elapsed x cores / tasks")
    ax.set_ylabel("efficiency (FLOP/s / peak)")
    ax.set_title(f"B1 Task Bench {pattern}: efficiency vs task granularity")
    ax.invert_xaxis()
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("patterns", nargs="*", default=["stencil_1d"])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--width", type=int, default=0, help="points per timestep of each graph (default: cores)")
    ap.add_argument("--ngraphs", type=int, default=1, help="concurrent graphs (-and)")
    ap.add_argument("--radix", type=int, default=5, help="radix for nearest / spread / random_nearest")
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
    ap.add_argument("--max-wait", type=float, default=15.0, help="longest wait for a quiet machine per grain (s)")
    ap.add_argument("--cores", type=int, default=0, help="worker threads of both drivers (default: CPUs)")
    ap.add_argument("--taskring-bench", "--taskring", dest="taskring",
                    default=os.path.join(ROOT, "target", "release", "taskring-bench"),
                    help="path of the taskring-bench binary (its `taskbench` driver)")
    ap.add_argument("--build", action="store_true", help="cargo build --release -p taskring-bench first")
    ap.add_argument("--cc", default="gcc")
    ap.add_argument("--omp-policies", default="default,passive",
                    help="libgomp OMP_WAIT_POLICY values to run the baseline with (comma-separated; 'default' = unset)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench-results"))
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--no-default-window", action="store_true",
                    help="skip the taskring run with the runtime's default ring sizing (-window 0)")
    ap.add_argument("--no-cores-plus-orch", action="store_true",
                    help="skip the taskring run with one core thread per CPU plus the orchestrator thread")
    ap.add_argument("--strict", action="store_true", help="exit with status 1 when a bar is missed")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()

    mach = machine()
    cores = a.cores or mach["nproc"]
    if a.width <= 0:
        a.width = cores
    if a.reps < 5:
        sys.exit("metg.py: --reps must be at least 5 (medians of at least 5 repetitions)")
    if a.repeat < 1:
        sys.exit("metg.py: --repeat must be >= 1")
    if a.build:
        r = subprocess.run(["cargo", "build", "--release", "-q", "-p", "taskring-bench"], cwd=ROOT)
        if r.returncode != 0:
            sys.exit("metg.py: cargo build failed")
    if shutil.which(a.cc) is None:
        sys.exit(f"metg.py: {a.cc} not found")
    omp = build_omp(a.cc, os.path.join(ROOT, "target", "taskbench"))
    check_taskring(a.taskring)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    base_env["OMP_NUM_THREADS"] = str(cores)
    tr_env = {k: v for k, v in base_env.items() if not k.startswith("PTO2_RING_")}
    # "taskring": as many threads as the OpenMP team: cores-1 core threads plus the
    # orchestrator thread, which runs ready tasks whenever it would wait (-helper 1).
    # "taskring_cores_plus_orch": one core thread per CPU plus the orchestrator (one
    # thread more than CPUs), without the helper.
    tr_cores = max(1, cores - 1)
    drivers = {"taskring": ([a.taskring, "taskbench", "-worker", str(tr_cores), "-helper", "1", "-warmup", "1"], dict(tr_env))}
    if not a.no_cores_plus_orch:
        drivers["taskring_cores_plus_orch"] = ([a.taskring, "taskbench", "-worker", str(cores), "-warmup", "1"], dict(tr_env))
    if not a.no_default_window:
        drivers["taskring_default_window"] = (
            [a.taskring, "taskbench", "-worker", str(tr_cores), "-helper", "1", "-warmup", "1", "-window", "0"], dict(tr_env))
    omp_names = []
    for pol in [p.strip() for p in a.omp_policies.split(",") if p.strip()]:
        env = dict(base_env)
        name = "openmp" if pol == "default" else f"openmp_{pol}"
        if pol != "default":
            env["OMP_WAIT_POLICY"] = pol
        drivers[name] = ([omp, "-worker", str(cores), "-warmup", "1"], env)
        omp_names.append(name)
    if not omp_names:
        sys.exit("metg.py: --omp-policies is empty")
    os.makedirs(a.out_dir, exist_ok=True)
    ok = True
    for pattern in a.patterns:
        load0 = machine()["loadavg"]
        t0 = time.time()
        sweeps = []
        for r in range(a.repeat):
            res, dur, truncated, waited = sweep(a, pattern, drivers, cores)
            mt = res["taskring"]["metg_s"]
            # the baseline: the OpenMP configuration with the lowest METG
            scored = [n for n in omp_names if res[n]["metg_s"]]
            best = min(scored, key=lambda n: res[n]["metg_s"]) if scored else omp_names[0]
            mo = res[best]["metg_s"]
            sweeps.append({
                "drivers": res,
                "baseline": best,
                "ratio": (mt / mo) if (mt and mo) else None,
                "duration_s": dur,
                "truncated_by_budget": truncated,
                "waited_for_quiet_s": waited,
            })
            if a.repeat > 1:
                print(f"  sweep {r + 1}/{a.repeat} ({pattern}): taskring {fmt_us(mt)} vs {best} {fmt_us(mo)}"
                      f" = {fmt_ratio(sweeps[-1]['ratio'])}", file=sys.stderr, flush=True)

        def med(vals):
            vals = [v for v in vals if v is not None]
            return statistics.median(vals) if vals else None

        agg = {}
        for name in drivers:
            agg[name] = {
                "metg_s": med([sw["drivers"][name]["metg_s"] for sw in sweeps]),
                "metg_interpolated_s": med([sw["drivers"][name]["metg_interpolated_s"] for sw in sweeps]),
                "metg_per_sweep_s": [sw["drivers"][name]["metg_s"] for sw in sweeps],
                "peak_flops_per_s": med([sw["drivers"][name]["peak_flops_per_s"] for sw in sweeps]),
                "floor_granularity_s": med([sw["drivers"][name]["floor_granularity_s"] for sw in sweeps]),
                "command": sweeps[0]["drivers"][name]["command"],
                "env": sweeps[0]["drivers"][name]["env"],
            }
        mt = agg["taskring"]["metg_s"]
        # the baseline: the OpenMP configuration with the lowest median METG
        scored = [n for n in omp_names if agg[n]["metg_s"]]
        best = min(scored, key=lambda n: agg[n]["metg_s"]) if scored else omp_names[0]
        mo = agg[best]["metg_s"]
        ratios = [sw["ratio"] for sw in sweeps]
        ratio = (mt / mo) if (mt and mo) else None
        bar = BARS.get(pattern)
        met = None
        if bar:
            kind, val, desc = bar
            got = ratio if kind == "ratio" else mt
            met = got is not None and got <= val
            ok = ok and met
        bar_txt = f"{bar[2]}: {'met' if met else 'MISSED'}" if bar else "no bar"
        others = ", ".join(f"{n} {fmt_us(agg[n]['metg_s'])}" for n in omp_names + ["taskring_cores_plus_orch", "taskring_default_window"]
                           if n != best and n in agg)
        per_sweep = ""
        if a.repeat > 1:
            per_sweep = " (per sweep: " + ", ".join(fmt_ratio(r) for r in ratios) + ")"
        summary = (
            f"b1 {pattern}: METG(50%) taskring {fmt_us(mt)} vs OpenMP {fmt_us(mo)} ({best}) = "
            f"{fmt_ratio(ratio)}{per_sweep} ({bar_txt}); "
            f"interpolated {fmt_us(agg['taskring']['metg_interpolated_s'])} vs {fmt_us(agg[best]['metg_interpolated_s'])}; "
            f"peak {agg['taskring']['peak_flops_per_s'] / 1e9:.1f} vs {agg[best]['peak_flops_per_s'] / 1e9:.1f} GFLOP/s; "
            f"floor {fmt_us(agg['taskring']['floor_granularity_s'])} vs {fmt_us(agg[best]['floor_granularity_s'])}"
            f"{'; others: ' + others if others else ''}; "
            f"{a.repeat} sweep(s) x {a.reps} reps, {cores} cores, nproc {mach['nproc']}, {mach['cpu_model']}"
        )
        doc = {
            "schema": 1,
            "bench": f"b1_{pattern}",
            "title": f"Task Bench METG(50%) of taskring vs OpenMP depend (libgomp), pattern {pattern}",
            "command": " ".join([sys.executable, os.path.relpath(__file__, ROOT)] + sys.argv[1:]),
            "unix_time": int(t0),
            "duration_s": time.time() - t0,
            "machine": {**mach, "loadavg_start": load0, "loadavg_end": machine()["loadavg"]},
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
                "warmup_runs_per_process": 1,
                "omp_build": f"{a.cc} -O2 -fopenmp",
                "quiet_threshold": a.quiet,
                "definitions": {
                    "efficiency": "median FLOP/s / best per-grain median FLOP/s of the sweep (efficiency_largest: / the largest grain's)",
                    "granularity_s": "median elapsed x cores / tasks",
                    "metg_s": "smallest granularity with efficiency >= threshold, walking down from the largest grain until two consecutive grains fall below it; with --repeat, the median over sweeps",
                    "metg_best_of_reps_s": "the same on the fastest of the reps at each grain (the primary figures use medians)",
                    "machine_busy_before": "fraction of all CPUs busy (other processes) just before the grain was measured",
                    "baseline": "the OpenMP configuration (wait policy) with the lowest METG",
                    "ratio_taskring_over_openmp": "median taskring METG / median METG of the baseline (ratio_per_sweep: the same per sweep)",
                },
            },
            "drivers": agg,
            "baseline": best,
            "ratio_taskring_over_openmp": ratio,
            "ratio_per_sweep": ratios,
            "bar": {"desc": bar[2], "met": met} if bar else None,
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
    # Like `taskring-bench`: a missed bar is reported, not an error exit (--strict: exit 1).
    return 0 if (ok or not a.strict) else 1


if __name__ == "__main__":
    sys.exit(main())
