"""A/B of two builds of taskring-bench (e.g. main's and a change's) in one run: ROUNDS
rounds, each running both binaries once with `--reps 5`, in alternating order
(old-new, new-old, ...); per case each round's two medians are paired, and the median
and range of the per-round ratios new/old are printed as a Markdown table (for ns/task a
ratio under 1 is faster, for tasks/s over 1). Default benchmarks: b3 b6 b9.

Usage: python3 benches/ab.py OLD_BINARY NEW_BINARY ROUNDS [benchmark ...]
(the binaries run in the current directory, so run it from the repository's root)
"""
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

old, new, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
benches = sys.argv[4:] or ["b3", "b6", "b9"]
res = {"old": [], "new": []}
tmp = Path(tempfile.mkdtemp(prefix="ab-"))
for r in range(rounds):
    order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
    for tag, exe in order:
        d = tmp / f"{tag}{r}"
        subprocess.run([exe, *benches, "--reps", "5", "--out-dir", str(d)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        vals = {}
        for p in d.glob("*.json"):
            doc = json.loads(p.read_text())
            for c in doc.get("cases", []):
                if "value" in c:
                    vals[(doc["bench"], c["name"], c["value"]["unit"])] = c["value"]["median"]
        res[tag].append(vals)
    print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)

print("| bench | case | unit | old median | new median | new/old: median of rounds (min–max) |")
print("|---|---|---|---|---|---|")
for key in sorted(res["old"][0]):
    o = [v[key] for v in res["old"] if key in v]
    n = [v[key] for v in res["new"] if key in v]
    if len(o) != len(n) or not o:
        continue
    ratios = [b / a for a, b in zip(o, n) if a]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {statistics.median(o):.4g} | {statistics.median(n):.4g} | "
          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f}) |")
