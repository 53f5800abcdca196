#!/usr/bin/env python3
"""PNG plots of the benchmark results in bench-results/ (run by `make bench`).

  b4_ring_curve.png   B4: throughput relative to the default sizing and peak RSS against
                      ring_task_window (chain, stencil, fanout), and the heap curve
  b3_overhead.png     B3: ns per task of taskring (both configurations) and of the
                      hand-rolled executor, per DAG pattern
  b11_device_memory.png
                      B11: device bytes reserved per chip and in total for each way of
                      sizing (global, per task, auto), with the peak use; the title
                      says which ways ran in the tight device memory
  peers.png           peers: ns per task per B3 pattern of taskring (submitted task by task
                      and replayed, both chip configurations), oneTBB flow_graph (built
                      each run, prebuilt) and OpenMP task depend, log scale, with the
                      ratios dynamic / oneTBB built each run and replay / oneTBB prebuilt

B1's METG curves (b1_<pattern>.png) are drawn by benches/taskbench/metg.py itself.
A result file that is missing is skipped with a note; matplotlib is required (it is
pinned in benches/requirements.txt).

usage: python3 benches/plots.py [--dir bench-results]
"""

import argparse
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        print(f"plots.py: {p} missing; skipped", file=sys.stderr)
        return None
    with open(p) as f:
        return json.load(f)


def machine_line(doc):
    m = doc.get("machine", {})
    return f"{m.get('nproc', '?')} CPUs, {m.get('cpu_model', '?')}"


def plot_b4(plt, doc, out):
    curves = doc["params"]["curves"]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.5))
    for name in ("chain", "stencil", "fanout"):
        c = curves.get(name)
        if not c:
            continue
        pts = c["points"]
        w = [p["window"] for p in pts]
        ax1.plot(w, [p["tasks_per_s"] / 1e6 for p in pts], marker="o", label=name)
        ax2.plot(w, [p["peak_rss_mib"] for p in pts], marker="o", label=name)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ring_task_window (all rings)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    ax1.set_ylabel("M tasks/s")
    ax1.set_title("B4 throughput vs task window")
    ax2.set_ylabel("peak RSS of the process (MiB)")
    ax2.set_title("B4 peak RSS vs task window")
    h = curves.get("fanout_heap")
    if h:
        pts = h["points"]
        ax3.plot([p["heap"] for p in pts], [p["tasks_per_s"] / 1e6 for p in pts], marker="o", color="C3")
        ax3.set_xscale("log", base=2)
        ax3.set_xlabel("ring_heap (bytes, all rings)")
        ax3.set_ylabel("M tasks/s")
        ax3.set_title("B4 fan-out with 4 KiB outputs vs heap")
        ax3.grid(True, alpha=0.3)
    fig.suptitle(f"taskring B4 ring curve — {machine_line(doc)}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_b3(plt, doc, out):
    cases = [c for c in doc["cases"] if c.get("baseline") and c["name"] != "warm_1task"]
    names = [c["name"] for c in cases]
    tr = [c["value"]["median"] for c in cases]
    base = [c["baseline"]["value"]["median"] for c in cases]
    helper = [c.get("extra", {}).get("orchestrator_helps", {}).get("ns_per_task", {}).get("median") for c in cases]
    x = range(len(names))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    wd = 0.27
    ax.bar([i - wd for i in x], tr, wd, label="taskring (cores + orchestrator)")
    if all(v is not None for v in helper):
        ax.bar(list(x), helper, wd, label="taskring (cores-1 + helping orchestrator)")
    ax.bar([i + wd for i in x], base, wd, label="hand-rolled executor (build + run)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(names)
    ax.set_ylabel("wall ns per task (median)")
    ax.set_title(f"taskring B3 overhead — {machine_line(doc)}")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_b11(plt, doc, out):
    ways = [c for c in doc["cases"] if c.get("extra", {}).get("chips")]
    if not ways:
        return
    chips = [ch["chip"] for ch in ways[0]["extra"]["chips"]]
    n = len(ways)
    width = 0.8 / n
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1.4]})
    for i, c in enumerate(ways):
        e = c["extra"]
        xs = [x + (i - (n - 1) / 2) * width for x in range(len(chips))]
        mb = [ch["resident_bytes"] / 1e6 for ch in e["chips"]]
        bars = ax1.bar(xs, mb, width, label=e["way"], color=f"C{i}")
        ax1.bar_label(bars, fmt="%.1f", fontsize=8)
        used = [ch["peak_used_bytes"] / 1e6 for ch in e["chips"]]
        ax1.scatter(xs, used, marker="_", s=300, color="black", zorder=3, label="peak used" if i == 0 else None)
        tot = e["total"]["resident_bytes"] / 1e6
        b = ax2.bar([i], [tot], 0.6, color=f"C{i}")
        ax2.bar_label(b, labels=[f"{tot:.0f} MB\n{e['dispatches_per_s']:.0f}/s"], fontsize=8)
    ax1.set_xticks(range(len(chips)), [f"chip {w}" for w in chips])
    ax1.set_ylabel("device bytes reserved (MB)")
    ax1.set_title("B11 reserved per chip (arena cache's resident bytes)")
    ax1.legend()
    ax1.grid(True, axis="y", alpha=0.3)
    ax2.set_xticks(range(n), [c["extra"]["way"] for c in ways])
    ax2.set_ylabel("MB, all chips (label: dispatches/s)")
    ax2.set_title("B11 total")
    ax2.margins(y=0.15)
    ax2.grid(True, axis="y", alpha=0.3)
    tight = next((c for c in doc["cases"] if c["name"] == "tight_device_memory"), None)
    note = ""
    if tight:
        ran = [w["way"] for w in tight.get("extra", {}).get("ways", []) if not w.get("error")]
        note = f"\ntight device memory ({doc['params']['tight_device_memory_bytes'] >> 20} MiB): ran {', '.join(ran) or 'none'}"
    fig.suptitle(f"taskring B11 device memory — {machine_line(doc)}{note}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_peers(plt, doc, out):
    dyn = [c for c in doc["cases"] if not c["name"].endswith("_replay")]
    rep = {c["name"][: -len("_replay")]: c for c in doc["cases"] if c["name"].endswith("_replay")}
    names = [c["name"] for c in dyn if c["name"] in rep]
    if not names:
        return
    by = {c["name"]: c for c in dyn}

    def med(s):
        return s["median"]

    series = [
        ("taskring dynamic", lambda n: med(by[n]["value"])),
        ("taskring dynamic (cores-1 + helping orch.)", lambda n: med(by[n]["extra"]["orchestrator_helps"]["ns_per_task"])),
        ("taskring replay", lambda n: med(rep[n]["value"])),
        ("taskring replay (cores-1 + helping orch.)", lambda n: med(rep[n]["extra"]["orchestrator_helps"]["ns_per_task"])),
        ("oneTBB flow_graph built each run", lambda n: med(by[n]["extra"]["peers"]["tbb_build"])),
        ("oneTBB flow_graph prebuilt", lambda n: med(by[n]["extra"]["peers"]["tbb_prebuilt"])),
        ("OpenMP task depend", lambda n: med(by[n]["extra"]["peers"]["omp"])),
    ]
    colors = ["C0", "#7fb3e0", "C2", "#98d898", "C3", "#f0a0a0", "C4"]
    k = len(series)
    wd = 0.8 / k
    fig, ax = plt.subplots(figsize=(12, 5.5))
    for j, (label, f) in enumerate(series):
        xs = [i + (j - (k - 1) / 2) * wd for i in range(len(names))]
        ax.bar(xs, [f(n) for n in names], wd, label=label, color=colors[j])
    top = max(f(n) for _, f in series for n in names)
    for i, n in enumerate(names):
        ax.text(i, top * 1.6, f"dyn/TBB-built {by[n]['ratio']:.2f}x\nreplay/TBB-prebuilt {rep[n]['ratio']:.2f}x",
                ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(top=top * 6)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("wall ns per empty task (median, log)")
    ax.set_title(f"taskring vs peers on the B3 patterns, {doc['params']['threads']} threads each — {machine_line(doc)}")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.07))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(ROOT, "bench-results"))
    a = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plots.py: matplotlib is not installed (pip install -r benches/requirements.txt)")
    done = []
    for fname, png, fn in (
        ("b4_ring_curve.json", "b4_ring_curve.png", plot_b4),
        ("b3_overhead.json", "b3_overhead.png", plot_b3),
        ("b11.json", "b11_device_memory.png", plot_b11),
        ("peers.json", "peers.png", plot_peers),
    ):
        doc = load(a.dir, fname)
        if doc is None:
            continue
        out = os.path.join(a.dir, png)
        fn(plt, doc, out)
        done.append(out)
    for p in done:
        print(f"plots.py: wrote {os.path.relpath(p, ROOT)}")


if __name__ == "__main__":
    main()
