"""Medians of each hop of an L4 round trip, from the stamps `prof.py` and the
instrumented module wrote under DIR (see `run.sh`). Usage: aggregate.py DIR"""

import collections
import glob
import json
import statistics as st
import sys

d = sys.argv[1]
r0 = json.load(open(f"{d}/r0.json"))
runs = r0["runs"]
n = len(runs)
rust = collections.defaultdict(dict)
for f in glob.glob(f"{d}/h.*"):
    for line in open(f):
        k, i, t = map(int, line.split())
        rust[k][i] = t
seq = {}
for k, v in rust.items():
    # Point 10 (a host's probe found a request) also stamps the closing request.
    m = len(v) - (1 if k == 10 else 0)
    if m >= n:
        seq[k] = [v[i] for i in range(m - n, m)]
seq["py0"], seq["pyend"] = [a for a, _ in runs], [b for _, b in runs]
order = [
    ("py0", "rank 0: w.run (Python)"), (1, "rank 0: Cluster::run"), (2, "rank 0: submit_next_level"),
    (3, "rank 0: submit done"), (4, "rank 0: dispatch thread has it"), (5, "rank 0: request sent"),
    (10, "host: probe found it"), (11, "host: request decoded"),
    (14, "host: L3 run starts"), (15, "host: L3 run ends"), (12, "host: reply being encoded"), (13, "host: reply sent"), (6, "rank 0: reply found"),
    (7, "rank 0: task completed"), (8, "rank 0: engine run over"), ("pyend", "rank 0: w.run returned"),
]
print(f"L3 baseline {r0['res'].get('l3_us', float('nan')):.1f} us; L4 round trip {st.median([b - a for a, b in runs]) / 1e3:.1f} us ({n} runs)")
prev = None
for k, name in order:
    if k not in seq:
        print(f"  (no stamps for {name})")
        continue
    if prev is not None:
        dt = st.median([b - a for a, b in zip(seq[prev[0]], seq[k])]) / 1e3
        print(f"  {prev[1]:>32} -> {name:<32} {dt:7.2f} us")
    prev = (k, name)
print("(a negative step: the later side stamped first, e.g. rank 0 found the reply before the host's send returned)")
