"""Print the latest benchmark results (bench-results/*.json) as the Markdown table of
docs/performance.md: one row per bar, with the figure, the baseline and the ratio.

Usage: python3 benches/summarize.py [bench-results] [--all]
(--all: also the cases that carry no bar, e.g. every point of B4's curves)
"""

import json
import sys
from pathlib import Path


def fmt(x: float) -> str:
    a = abs(x)
    if a >= 1e6:
        return f"{x / 1e6:.2f} M"
    if a >= 1e4:
        return f"{x / 1e3:.1f} k"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--all"]
    show_all = "--all" in sys.argv[1:]
    d = Path(args[0] if args else "bench-results")
    docs = sorted(d.glob("b*.json"))
    if not docs:
        print(f"no results in {d}", file=sys.stderr)
        return 1
    print("| bench | case | figure | baseline (same run) | ratio | bar | met |")
    print("|---|---|---|---|---|---|---|")
    machines = set()
    for p in docs:
        doc = json.loads(p.read_text())
        if "cases" not in doc:  # B1 (metg.py) writes its own summary format
            continue
        m = doc["machine"]
        machines.add(f"nproc={m['nproc']}, {m['cpu_model']}, kernel {m['kernel']}")
        for c in doc["cases"]:
            v = c["value"]
            base = c.get("baseline")
            bfig = f"{fmt(base['value']['median'])} {base['value']['unit']} ({base['name'].split(' (')[0].split(':')[0]})" if base else "—"
            ratio = f"{c['ratio']:.2f}" if c.get("ratio") is not None else "—"
            bars = c.get("bars") or []
            if not bars and not show_all:
                continue
            for i, b in enumerate(bars or [None]):
                fig = f"{fmt(v['median'])} {v['unit']}"
                print(
                    f"| {doc['bench']} | {c['name']} | {fig} | {bfig if i == 0 else '″'} | {ratio if i == 0 else '″'} | "
                    f"{b['text'] if b else '—'} | {('yes' if b['met'] else '**no**') if b else '—'} |"
                )
    print()
    for m in sorted(machines):
        print(f"Machine: {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
