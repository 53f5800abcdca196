"""L4 round trip hop by hop: rank 0 runs N one-task L4 runs (host 0, one empty chip
task) after an L3 baseline; every rank stamps `CLOCK_MONOTONIC` at its steps. Python
stamps are taken here (around `w.run`, and around a host's request, run and reply, by
wrapping the host's serving loop); the Rust ones by the instrumented `_native` module
(`instrument.patch`, env `TR_HOPS`). Run by `run.sh`; writes `r0.json`, `h<rank>.json`
under `$HOPS_OUT`.
"""

import json
import os
import statistics as st
import sys
import time

import taskring
import taskring._cluster as C
from taskring import SCALAR, _native, kernels as K

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
stamps = []
native_reply = _native.host_reply


class Host(C._Host):
    """The serving loop with stamps: request in, run start, run end, reply start/end."""

    def serve(self):
        while True:
            req = _native.host_next_request()
            got = mono()
            if req is None:
                break
            self._one(req)
            stamps.append((got, self._t_run0, self._t_run1, self._t_rep0, self._t_rep1, mono()))
        with open(f"{OUT}/h{RANK}.json", "w") as f:
            json.dump(stamps, f)

    def _run(self, callable, args, cfg):
        self._t_run0 = mono()
        Host.current = self
        r = super()._run(callable, args, cfg)
        self._t_run1 = mono()
        return r


def stamped_reply(*a):
    Host.current._t_rep0 = mono()
    native_reply(*a)
    Host.current._t_rep1 = mono()


class NativeProxy:
    """`_native` for the host loop, with `host_reply` stamped."""

    def __getattr__(self, name):
        return stamped_reply if name == "host_reply" else getattr(_native, name)


C._native = NativeProxy()
C._Host = Host

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
