"""B1's METG analysis (`benches/taskbench/metg.py`) on synthetic sweeps: the peak is the
median of a driver's best grains, so one fast grain does not move the METG, and a sweep
too noisy to judge is flagged and its bars are not judged. No benchmark runs here."""

import importlib.util
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_spec = importlib.util.spec_from_file_location("metg", os.path.join(ROOT, "benches", "taskbench", "metg.py"))
metg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(metg)

CORES, TASKS = 2, 2000
# -iter of each grain, as the script sweeps them: halving from 2^16, then by sqrt(2).
ITERS = [65536, 32768, 16384, 8192, 5793, 4096, 2896, 2048, 1448, 1024, 724, 512, 362, 256, 181, 128, 91, 64, 45, 32,
         23, 16, 11, 8, 6, 4, 3, 2, 1]
OVERHEAD_S = 1e-6  # per task and core: efficiency 50 % where a task's work is 1 µs


def sweep(peak_gflops, *, jitter=0.0, fast=None, slow_reps=0, busy=0.0, reps=7):
    """One driver's points: each task does `128 * iter + 64` FLOPs at `peak_gflops` over
    the cores, plus OVERHEAD_S per task. `jitter`: the reps' elapsed times spread
    +-jitter around the median; `fast`: {iter: factor} grains whose reps all ran
    `factor` times faster (an outlier); `slow_reps`: that many reps of every grain ran
    twice as long (a machine loaded on and off); `busy`: the fraction of the CPUs other
    processes used before each grain."""
    pts = []
    for it in ITERS:
        flops = TASKS * (128 * it + 64)
        work = flops / (peak_gflops * 1e9)
        elapsed = (work + OVERHEAD_S * TASKS / CORES) / (fast or {}).get(it, 1.0)
        spread = [(2 if k < slow_reps else 1) * (1 + jitter * (2 * k / (reps - 1) - 1)) for k in range(reps)]
        pts.append(metg.make_point(it, TASKS, 0, flops, [elapsed * f for f in spread], CORES, busy=busy))
    return pts


def analyze(pts, **limits):
    return metg.analyze(pts, 0.5, metg.NoiseLimits(**limits), CORES)


def test_robust_peak_is_the_median_of_the_best_grains():
    peak, best = metg.robust_peak([40, 85, 55, 60, 59, 42], 3)
    assert (peak, best) == (60, [85, 60, 59])
    assert metg.robust_peak([7.0], 3) == (7.0, [7.0])


def test_one_fast_grain_does_not_move_the_metg():
    # A loaded machine: every grain at ~50 GFLOP/s except one large grain measured in a
    # quiet moment, 1.7x faster (85 among points at 40-60).
    clean = analyze(sweep(50))
    outlier = analyze(sweep(50, fast={16384: 1.7}))
    assert outlier["single_best_flops_per_s"] > 1.6 * clean["peak_flops_per_s"]
    assert outlier["metg_s"] == clean["metg_s"]
    assert outlier["peak_flops_per_s"] == pytest.approx(clean["peak_flops_per_s"], rel=0.01)
    assert [g["iter"] for g in outlier["above_peak_grains"]] == [16384]
    # The single best point as the peak (what the outlier used to set) moves it by
    # several grains: the test would catch a return to it.
    single, _ = metg.metg_at(sweep(50, fast={16384: 1.7}), outlier["single_best_flops_per_s"], 0.5)
    assert single > 3 * clean["metg_s"]


def test_a_sweep_with_one_fast_grain_is_too_noisy_to_judge():
    # Its METG stands, but the best grains disagree by far more than the 10 % limit.
    noisy = analyze(sweep(50, fast={16384: 1.7}))
    assert any("best 3 grains spread" in n for n in noisy["noise"])
    assert analyze(sweep(50))["noise"] == []


def test_a_quiet_sweep_can_be_judged():
    r = analyze(sweep(110, jitter=0.02))
    assert r["noise"] == []
    assert r["peak_spread"] < 0.05
    lo, hi = r["metg_range_s"]
    assert lo <= r["metg_s"] <= hi
    # Task Bench's own rule agrees within a grain on a clean sweep.
    assert r["metg_taskbench_rule_s"] == pytest.approx(r["metg_s"], rel=0.5)


def test_a_sweep_whose_reps_spread_widely_is_too_noisy_to_judge():
    # 3 of 7 reps of each grain twice as slow: the medians are clean, but the METG at
    # the reps' lower quartile lies 3 grains from the one at their upper quartile.
    r = analyze(sweep(110, slow_reps=3))
    assert any("quartiles lies" in n for n in r["noise"]), r["noise"]
    lo, hi = r["metg_range_s"]
    assert hi / lo > 2
    assert analyze(sweep(110, slow_reps=1))["noise"] == []


def test_a_sweep_measured_on_a_busy_machine_is_too_noisy_to_judge():
    r = analyze(sweep(110, busy=0.6))
    assert any("grains measured while other processes used" in n for n in r["noise"])
    assert analyze(sweep(110, busy=0.6), quiet=0.7)["noise"] == []


def test_metg_walk_ignores_one_isolated_dip():
    pts = [{"granularity_s": g} for g in (8, 4, 2, 1, 0.5, 0.25)]
    assert metg.metg(pts, [1.0, 0.9, 0.4, 0.8, 0.3, 0.2], 0.5)[0] == 1
    assert metg.metg(pts, [1.0, 0.9, 0.4, 0.3, 0.8, 0.2], 0.5)[0] == 4


def test_metg_walk_starts_at_the_first_grain_at_the_threshold():
    # The two largest grains ran while another process held a CPU.
    pts = [{"granularity_s": g} for g in (8, 4, 2, 1, 0.5, 0.25)]
    assert metg.metg(pts, [0.4, 0.3, 0.9, 0.8, 0.3, 0.2], 0.5)[0] == 1
    assert metg.metg(pts, [0.4, 0.3, 0.2, 0.1, 0.1, 0.1], 0.5) == (None, None)


def test_cpu_use_of_other_processes_excludes_our_own():
    # 2 CPUs for 1 s: 1.5 s busy in all, 0.5 s of it ours -> others used half the CPUs.
    assert metg.others_busy((10.0, 3.0), (11.5, 3.5), 1.0, 2) == 0.5
    assert metg.others_busy((10.0, 3.0), (11.0, 4.0), 1.0, 2) == 0.0
    assert metg.others_busy(None, (11.0, 4.0), 1.0, 2) is None
    reading = metg.cpu_ticks()
    assert reading is None or (reading[0] >= 0 and reading[1] >= 0)


def _comparison_inputs(baseline_fast=None):
    """Results of one sweep of taskring and one baseline configuration, as `sweep` in
    metg.py builds them."""
    lim = metg.NoiseLimits()
    res = {}
    for name, family, kw in (("taskring", "taskring", {}),
                             ("taskbench_openmp_bind", "taskbench_openmp", {"fast": baseline_fast})):
        res[name] = {"family": family, "command": [name], "env": {}, "floor_granularity_s": 0.0,
                     **metg.analyze(sweep(100, **kw), 0.5, lim, CORES)}
        res[name]["points"] = sweep(100, **kw)
    return res


def _judge(res_per_sweep):
    sweeps = [{"drivers": r, "comparisons": {"taskbench_openmp": metg.compare(r, "taskbench_openmp", 0.5)}}
              for r in res_per_sweep]
    comparisons = {"taskbench_openmp": metg.aggregate(sweeps, "taskbench_openmp")}
    return metg.judge_bars("fft", comparisons, metg.aggregate_driver(sweeps, "taskring"))


def test_a_bar_resting_on_a_noisy_sweep_is_not_judged():
    [bar] = _judge([_comparison_inputs()])
    assert bar["verdict"] in ("met", "missed") and bar["met"] is not None
    [bar] = _judge([_comparison_inputs(baseline_fast={8192: 1.7})])
    assert bar["verdict"] == "too noisy to judge" and bar["met"] is None
    assert any(n.startswith("taskbench_openmp_bind: ") for n in bar["noise"])


def test_repeated_sweeps_are_judged_on_their_clean_majority():
    clean, noisy = _comparison_inputs(), _comparison_inputs(baseline_fast={8192: 1.7})
    [bar] = _judge([clean, noisy, clean])
    assert bar["verdict"] != "too noisy to judge"
    [bar] = _judge([noisy, clean, noisy])
    assert bar["verdict"] == "too noisy to judge"
