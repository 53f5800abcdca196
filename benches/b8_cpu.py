"""B8's throughput case with the CPU it costs: run under ``taskring launch --hosts 2``.

Rank 0 submits ``TASKS`` independent L4 tasks per run (alternating hosts, each host
task one empty chip task on alternating chips), one untimed run, then ``REPS`` timed
runs; it prints L4 tasks/s and the CPU time per L4 task of every process of the job
(rank 0, each host, each chip), read from ``/proc/<pid>/task/*/stat`` before and after.
Environment: ``TASKS`` (default 4000), ``REPS`` (default 5).

    .venv/bin/taskring launch --hosts 2 benches/b8_cpu.py
"""

from __future__ import annotations

import os
import time
from typing import Dict, Tuple

import taskring
from taskring import SCALAR, kernels as K

SCRIPT = os.path.basename(__file__)


@taskring.program(signature=[])
def empty(rt):
    rt.submit(K.noop)


def one_chip_task(o, chips, args, cfg):
    o.submit_next_level(chips.empty, [], cfg, worker=args[0])


dc = taskring.DistributedConfig(device_ids=[0, 1])
prog = taskring.DistributedProgram(one_chip_task, chips={"empty": empty}, config=dc, signature=[SCALAR])


def job_cpu() -> Tuple[Dict[str, int], Dict[str, str]]:
    """Clock ticks of user + system time per process of this job, and each one's parent."""
    ticks: Dict[str, int] = {}
    parent: Dict[str, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if SCRIPT not in open(f"/proc/{pid}/cmdline").read():
                continue
            parent[pid] = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
            for tid in os.listdir(f"/proc/{pid}/task"):
                f = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                ticks[pid] = ticks.get(pid, 0) + int(f[11]) + int(f[12])
        except OSError:
            continue
    return ticks, parent


w = taskring.Worker(level=4)
h = w.register(prog)
if w.init():
    n, reps = int(os.environ.get("TASKS", "4000")), int(os.environ.get("REPS", "5"))

    def many(o, a, c):
        for i in range(n):
            o.submit_next_level(h, [(i // 2) % 2], None, worker=i % 2)

    w.run(many)
    c0, _ = job_cpu()
    t0 = time.perf_counter()
    for _ in range(reps):
        w.run(many)
    dt = time.perf_counter() - t0
    c1, parent = job_cpu()
    w.close()
    tasks = reps * n
    us = {p: (c1[p] - c0.get(p, 0)) / os.sysconf("SC_CLK_TCK") * 1e6 / tasks for p in c1}
    me = str(os.getpid())
    hosts = [p for p in us if p != me and parent.get(p) == parent.get(me)]
    chips = [p for p in us if parent.get(p) in hosts]
    role = lambda ps: sum(us[p] for p in ps)  # noqa: E731
    print(f"{tasks / dt:.0f} L4 tasks/s; CPU per L4 task: rank 0 {us[me]:.1f} µs, hosts {role(hosts):.1f} µs, chips {role(chips):.1f} µs, all {sum(us.values()):.1f} µs")
