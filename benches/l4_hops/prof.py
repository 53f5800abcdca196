"""L4 round trip hop by hop: rank 0 runs N one-task L4 runs (host 0, one empty chip
task) after an L3 baseline; every rank stamps `CLOCK_MONOTONIC` at its steps. Rank 0's
Python stamps are taken here (around `w.run`); the others by the instrumented `_native`
module (`instrument.patch`, env `TR_HOPS`; a host's serving loop is native). Run by
`run.sh`; writes `r0.json` and the module's stamp files under `$HOPS_OUT`.
"""

import json
import os
import statistics as st
import sys
import time

import taskring
from taskring import SCALAR, kernels as K

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
OUT = os.environ.get("HOPS_OUT", "/tmp/l4_hops_out")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
mono = time.monotonic_ns


@taskring.program(signature=[])
def empty(rt):
    rt.submit(K.noop)


def one_chip_task(o, chips, args, cfg):
    o.submit_next_level(chips.empty, [], cfg, worker=args[0])


prog = taskring.DistributedProgram(one_chip_task, chips={"empty": empty}, config=taskring.DistributedConfig(device_ids=[0, 1]), signature=[SCALAR])
res = {}
if RANK == 0:
    with prog.prepare() as dw:
        for _ in range(50):
            dw(0)
        ts = []
        for _ in range(N):
            t0 = mono()
            dw(0)
            ts.append(mono() - t0)
        res["l3_us"] = st.median(ts) / 1e3
# TR_PIN="0:0,1:1,2:1" pins rank r to the CPUs after its colon ("+" between several)
# from here on (rank 0's L3 baseline above stays unpinned; a host's chips, forked by
# init(), inherit its mask).
for item in filter(None, os.environ.get("TR_PIN", "").split(",")):
    r, cpus = item.split(":")
    if int(r) == RANK:
        os.sched_setaffinity(0, {int(c) for c in cpus.split("+")})
w = taskring.Worker(level=4)
H = w.register(prog)
if w.init():
    one = lambda o, a, c: o.submit_next_level(H, [0], None, worker=0)  # noqa: E731
    for _ in range(50):
        w.run(one)
    runs = []
    for _ in range(N):
        t0 = mono()
        w.run(one)
        runs.append((t0, mono()))
    w.close()
    with open(f"{OUT}/r0.json", "w") as f:
        json.dump({"runs": runs, "res": res}, f)
