"""B1's analysis of METG sweeps (used by metg.py, which runs them): per grain the points,
each driver's robust peak, the METG with its range over the repetitions' quartiles and by
Task Bench's own rule, the noise tests that make a sweep too noisy to judge, the
comparisons of taskring against each baseline with own and common peaks, the aggregation
over repeated sweeps, and the bars' verdicts. Pure functions of the measured points:
python/tests/test_metg.py runs them on synthetic sweeps."""

import math
import statistics

# Per pattern: (comparison, peak, kind, value, description). kind "ratio": taskring's
# METG over the baseline's; "abs": taskring's METG in seconds (own peak).
BARS = {
    "trivial": [
        ("openmp", "own", "abs", 1e-6, "METG(50%) <= 1 us"),
        ("taskbench_openmp", "common", "ratio", 0.8, "METG(50%) <= 0.8x Task Bench's OpenMP, common peak"),
    ],
    "stencil_1d": [
        ("openmp", "own", "ratio", 1.0, "METG(50%) <= 1.0x the in-repo OpenMP driver"),
        ("taskbench_openmp", "common", "ratio", 0.8, "METG(50%) <= 0.8x Task Bench's OpenMP, common peak"),
    ],
    "fft": [("taskbench_openmp", "common", "ratio", 0.8, "METG(50%) <= 0.8x Task Bench's OpenMP, common peak")],
    "nearest": [("taskbench_openmp", "common", "ratio", 0.8, "METG(50%) <= 0.8x Task Bench's OpenMP, common peak")],
}


def metg_index(effs, threshold):
    """Index of the METG grain in `effs` (efficiencies, largest grain first), or None.
    Walk from the largest grain down; the METG grain is the smallest one still
    >= threshold before two consecutive grains fall below it (one isolated dip is treated
    as noise: libgomp's default spin policy and a shared machine both produce single slow
    medians). Grains below the threshold before the first one at or above it do not end
    the walk: large grains run at the peak unless something else held the CPUs."""
    last, below = None, 0
    for k, e in enumerate(effs):
        if e >= threshold:
            last, below = k, 0
        elif last is not None:
            below += 1
            if below >= 2:
                break
    return last


def metg(points, effs, threshold):
    """(METG, log-interpolated crossing) for `effs`, the efficiency of each of `points`
    (the METG grain of `metg_index`)."""
    last = metg_index(effs, threshold)
    if last is None:
        return None, None
    g = points[last]["granularity_s"]
    if last + 1 >= len(points):
        return g, g  # never fell below the threshold in the sweep
    e0, e1 = effs[last], effs[last + 1]
    x0, x1 = math.log(points[last]["granularity_s"]), math.log(points[last + 1]["granularity_s"])
    f = (e0 - threshold) / (e0 - e1) if e0 != e1 else 0.0
    return g, math.exp(x0 + f * (x1 - x0))


def metg_at(points, peak, threshold, key="flops_per_s"):
    return metg(points, [p[key] / peak for p in points], threshold)


class NoiseLimits:
    """When a driver's sweep is too noisy to judge (the defaults of the command line's
    --peak-top, --peak-spread, --metg-grains, --quiet and --busy-grains)."""

    def __init__(self, peak_top=3, peak_spread=0.10, metg_grains=2, quiet=0.3, busy_grains=0.25):
        self.peak_top = peak_top  # grains whose median rate makes the peak
        self.peak_spread = peak_spread  # largest (best - worst) / peak among them
        self.metg_grains = metg_grains  # largest distance, in grains, of the quartile METGs
        self.quiet = quiet  # a grain is "busy" when other processes used more of the CPUs
        self.busy_grains = busy_grains  # largest fraction of busy grains


def make_point(it, tasks, deps, flops, elapsed_all, cores, busy=None, waited=0.0, loadavg=None, during=None):
    """One grain of one driver: the median elapsed time of its reps and what follows from
    it, plus the rates at the reps' lower and upper quartile (the grain's spread)."""
    m = statistics.median(elapsed_all)
    rates = sorted(flops / e for e in elapsed_all)
    if len(rates) > 1:
        q = statistics.quantiles(rates, n=4, method="inclusive")
        q1, q3 = q[0], q[2]
    else:
        q1 = q3 = rates[0]
    rate = flops / m
    return {
        "iter": it,
        "tasks": tasks,
        "dependencies": deps,
        "flops": flops,
        "elapsed_s_median": m,
        "elapsed_s_all": list(elapsed_all),
        "flops_per_s": rate,
        "flops_per_s_q1": q1,
        "flops_per_s_q3": q3,
        "rep_spread": (q3 - q1) / rate,
        "granularity_s": m * cores / tasks,
        "best_flops_per_s": flops / min(elapsed_all),
        "best_granularity_s": min(elapsed_all) * cores / tasks,
        "machine_busy_before": busy,
        "machine_busy_during": during,
        "loadavg_before": loadavg,
        "waited_s": waited,
    }


def robust_peak(rates, top):
    """(peak, best): the median of the `top` highest of `rates` (one per grain), and
    those rates, highest first. One fast grain on a loaded machine does not set it."""
    best = sorted(rates, reverse=True)[:max(1, top)]
    return statistics.median(best), best


def taskbench_rule_metg(points, peak, threshold, cores):
    """METG by Task Bench's own rule (scripts/chart_metg.py at the pinned commit): the
    efficiency of each grain's *mean* elapsed time against `peak`, the smallest
    granularity of any grain at or above `threshold` (no walk: a late fast grain counts),
    interpolated linearly toward the next grain when that one is finer. Upstream divides
    by a fixed peak of the machine; here `peak` is the driver's."""
    g, e = [], []
    for p in points:
        mean = statistics.fmean(p["elapsed_s_all"])
        g.append(mean * cores / p["tasks"])
        e.append(p["flops"] / mean / peak)
    above = [k for k in range(len(points)) if e[k] >= threshold]
    if not above:
        return None
    k = min(above, key=lambda i: g[i])
    if k + 1 < len(points) and g[k + 1] < g[k] and e[k] != e[k + 1]:
        f = (e[k] - threshold) / (e[k] - e[k + 1])
        return g[k] + f * (g[k + 1] - g[k])
    return g[k]


def analyze(points, threshold, lim, cores):
    """One driver's sweep: its robust peak, each grain's efficiency, its METG, the METG's
    range over the reps' quartiles, and why the sweep is too noisy to judge (an empty
    list: it can be judged)."""
    rates = [p["flops_per_s"] for p in points]
    peak, best = robust_peak(rates, lim.peak_top)
    for p in points:
        p["efficiency"] = p["flops_per_s"] / peak
    m, mi, rng, apart = metg_with_range(points, peak, threshold)
    spread = (best[0] - best[-1]) / peak
    noise = []
    if spread > lim.peak_spread:
        noise.append(f"its best {len(best)} grains spread {spread:.0%} of its peak (> {lim.peak_spread:.0%})")
    if apart is None:
        noise.append("a quartile of its reps never reaches the threshold")
    elif apart > lim.metg_grains:
        noise.append(f"its METG at the reps' quartiles lies {apart} grains apart "
                     f"({fmt_us(rng[0])} to {fmt_us(rng[1])}; > {lim.metg_grains})")
    busy = [p for p in points if grain_busy(p) is not None and grain_busy(p) > lim.quiet]
    if len(busy) > lim.busy_grains * len(points):
        noise.append(f"{len(busy)} of {len(points)} grains measured while other processes used "
                     f"> {lim.quiet:.0%} of the CPUs")
    return {
        "peak_flops_per_s": peak,
        "peak_best_flops_per_s": best,
        "peak_spread": spread,
        "single_best_flops_per_s": max(rates),
        "above_peak_grains": [{"iter": p["iter"], "flops_per_s": p["flops_per_s"]}
                              for p in points if p["flops_per_s"] > peak * (1 + lim.peak_spread)],
        "metg_s": m,
        "metg_interpolated_s": mi,
        "metg_range_s": rng,
        "metg_taskbench_rule_s": taskbench_rule_metg(points, peak, threshold, cores),
        "noise": noise,
    }


def metg_with_range(points, peak, threshold):
    """(METG, its log-interpolated crossing, its range, the range in grains) of one
    driver's points against `peak`. The range is [finer, coarser]: the METG grain if
    every grain ran at its reps' upper quartile FLOP/s, and at their lower quartile;
    the distance is None when a quartile never reaches the threshold."""
    m, mi = metg_at(points, peak, threshold)
    k_lo = metg_index([p["flops_per_s_q3"] / peak for p in points], threshold)
    k_hi = metg_index([p["flops_per_s_q1"] / peak for p in points], threshold)
    apart = None if k_lo is None or k_hi is None else abs(k_lo - k_hi)
    return m, mi, quartile_range(points, k_lo, k_hi), apart


def quartile_range(points, k_lo, k_hi):
    """[finer, coarser] granularity of the METG grains `k_lo` and `k_hi` (None where a
    quartile never reaches the threshold)."""
    gs = [points[k]["granularity_s"] for k in (k_lo, k_hi) if k is not None]
    if len(gs) < 2:
        return [gs[0] if gs else None, None]
    return [min(gs), max(gs)]


def grain_busy(p):
    """The larger fraction of the CPUs other processes used just before and while the
    grain was measured (None when neither was measured)."""
    b = [x for x in (p.get("machine_busy_before"), p.get("machine_busy_during")) if x is not None]
    return max(b) if b else None


def busy_summary(points):
    """(median, max) of `grain_busy` over the grains."""
    b = [grain_busy(p) for p in points if grain_busy(p) is not None]
    return (statistics.median(b), max(b)) if b else (None, None)


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}x"


def fmt_us(s):
    return "n/a" if s is None else f"{s * 1e6:.2f} us"


def fmt_range(r, ratio=False):
    """"[lo-hi]" of a METG range (µs) or a ratio range; "[lo-open]" where a side is open."""
    if not r or (r[0] is None and r[1] is None):
        return "[n/a]"
    f = (lambda x: "open" if x is None else f"{x:.2f}") if ratio else \
        (lambda x: "open" if x is None else f"{x * 1e6:.2f}")
    return f"[{f(r[0])}-{f(r[1])}]"


def fmt_peak(d):
    """A driver's peak and how far apart the grains it is the median of lie."""
    return f"{d['peak_flops_per_s'] / 1e9:.1f} GFLOP/s, best grains within {d['peak_spread']:.1%}"


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def ratio(x, y):
    return (x / y) if (x and y) else None


def compare(res, family, threshold):
    """taskring against each configuration of `family`, with own peaks and with the
    common peak of each pair, and why the comparison is too noisy to judge (either
    sweep's noise): {config: {"own": {...}, "common": {...}}}."""
    tr = res["taskring"]
    out = {}
    for name, r in res.items():
        if r["family"] != family:
            continue
        noise = [f"taskring: {x}" for x in tr["noise"]] + [f"{name}: {x}" for x in r["noise"]]
        common = max(tr["peak_flops_per_s"], r["peak_flops_per_s"])
        mt, mti, rt, _ = metg_with_range(tr["points"], common, threshold)
        mb, mbi, rb, _ = metg_with_range(r["points"], common, threshold)
        out[name] = {
            "own": {"taskring_s": tr["metg_s"], "baseline_s": r["metg_s"],
                    "taskring_interpolated_s": tr["metg_interpolated_s"],
                    "baseline_interpolated_s": r["metg_interpolated_s"],
                    "taskring_range_s": tr["metg_range_s"], "baseline_range_s": r["metg_range_s"],
                    "noise": noise},
            "common": {"peak_flops_per_s": common, "taskring_s": mt, "baseline_s": mb,
                       "taskring_interpolated_s": mti, "baseline_interpolated_s": mbi,
                       "taskring_range_s": rt, "baseline_range_s": rb, "noise": noise},
        }
    return out


def judged_sweeps(noises):
    """(indices of the sweeps the figures are taken from, noisy?): the clean sweeps when
    they are a majority, else all of them, marked too noisy to judge."""
    clean = [k for k, n in enumerate(noises) if not n]
    if 2 * len(clean) > len(noises):
        return clean, False
    return list(range(len(noises))), True


def merge_ranges(ranges):
    """The widest [finer, coarser] over several METG ranges (None when one is open)."""
    los = [r[0] for r in ranges]
    his = [r[1] for r in ranges]
    return [None if None in los else min(los), None if None in his else max(his)]


def ratio_range(tr_range, bl_range):
    """[lowest, highest] taskring / baseline METG ratio over the two quartile ranges."""
    (t0, t1), (b0, b1) = tr_range, bl_range
    return [ratio(t0, b1), ratio(t1, b0)]


def aggregate(sweeps, family):
    """One family's comparisons over the sweeps: per configuration and peak definition
    the medians over the judged sweeps (`judged_sweeps`), and per peak definition the
    baseline configuration with the lowest median METG among those that can be judged
    (among all when none can)."""
    configs = sweeps[0]["comparisons"].get(family, {})
    if not configs:
        return None
    agg = {}
    for name in configs:
        agg[name] = {}
        for peak in ("own", "common"):
            per = [sw["comparisons"][family][name][peak] for sw in sweeps]
            used, noisy = judged_sweeps([c["noise"] for c in per])
            c = {k: med([per[i][k] for i in used]) for k in configs[name][peak]
                 if k not in ("noise", "taskring_range_s", "baseline_range_s")}
            c["taskring_range_s"] = merge_ranges([per[i]["taskring_range_s"] for i in used])
            c["baseline_range_s"] = merge_ranges([per[i]["baseline_range_s"] for i in used])
            c["noisy"] = noisy
            c["sweeps_judged"] = len(used) if not noisy else 0
            c["noise_per_sweep"] = [p["noise"] for p in per]
            agg[name][peak] = c
    out = {"configs": agg}
    for peak in ("own", "common"):
        scored = [n for n in agg if agg[n][peak]["baseline_s"] and not agg[n][peak]["noisy"]] \
            or [n for n in agg if agg[n][peak]["baseline_s"]]
        best = min(scored, key=lambda n: agg[n][peak]["baseline_s"]) if scored else next(iter(agg))
        c = agg[best][peak]
        out[peak] = {"baseline": best, **c, "ratio": ratio(c["taskring_s"], c["baseline_s"]),
                     "ratio_range": ratio_range(c["taskring_range_s"], c["baseline_range_s"]),
                     "ratio_per_sweep": [ratio(sw["comparisons"][family][best][peak]["taskring_s"],
                                               sw["comparisons"][family][best][peak]["baseline_s"]) for sw in sweeps]}
    return out


def aggregate_driver(sweeps, name):
    """One driver over the sweeps: medians over the judged sweeps (`judged_sweeps`)."""
    per = [sw["drivers"][name] for sw in sweeps]
    used, noisy = judged_sweeps([d["noise"] for d in per])
    pick = lambda k: med([per[i][k] for i in used])
    return {
        "metg_s": pick("metg_s"),
        "metg_interpolated_s": pick("metg_interpolated_s"),
        "metg_range_s": merge_ranges([per[i]["metg_range_s"] for i in used]),
        "metg_taskbench_rule_s": pick("metg_taskbench_rule_s"),
        "metg_per_sweep_s": [d["metg_s"] for d in per],
        "peak_flops_per_s": pick("peak_flops_per_s"),
        "peak_spread": pick("peak_spread"),
        "single_best_flops_per_s": pick("single_best_flops_per_s"),
        "floor_granularity_s": pick("floor_granularity_s"),
        "noisy": noisy,
        "sweeps_judged": 0 if noisy else len(used),
        "noise_per_sweep": [d["noise"] for d in per],
        "command": per[0]["command"],
        "env": per[0]["env"],
    }


def judge_bars(pattern, comparisons, taskring):
    """Each bar of `pattern`: {"desc", "value", "verdict", "met", "noise"}. The verdict is
    "met", "missed", "not measured" (no such baseline in this run) or "too noisy to
    judge" (a sweep it rests on is; `met` is then None, as for "not measured")."""
    bars = []
    for family, peak, kind, val, desc in BARS.get(pattern, []):
        c = comparisons.get(family)
        if kind == "abs":
            got, noisy = taskring["metg_s"], taskring["noisy"]
            noise = numbered([[f"taskring: {x}" for x in n] for n in taskring["noise_per_sweep"]])
        elif c is None:
            bars.append({"desc": desc, "value": None, "verdict": "not measured", "met": None, "noise": []})
            continue
        else:
            got, noisy = c[peak]["ratio"], c[peak]["noisy"]
            noise = numbered(c[peak]["noise_per_sweep"])
        if noisy:
            verdict, met = "too noisy to judge", None
        else:
            met = got is not None and got <= val
            verdict = "met" if met else "missed"
        bars.append({"desc": desc, "value": got, "verdict": verdict, "met": met, "noise": noise})
    return bars


def numbered(noise_per_sweep):
    """One list of the sweeps' noise reasons, each prefixed by its sweep's number when
    there are several sweeps."""
    if len(noise_per_sweep) == 1:
        return list(noise_per_sweep[0])
    return [f"sweep {k + 1}: {x}" for k, n in enumerate(noise_per_sweep) for x in n]
