"""Hosts that stop serving on their own, under `taskring launch --hosts 3`: host 0's
orchestration raises SystemExit (a request of scalars, served natively), host 2's raises
KeyboardInterrupt (a request with arrays, served by the Python side), host 1 gets SIGINT
while it waits for requests. Each time rank 0's run fails naming the host and the
exception, the host's later tasks fail at once, the other hosts keep working, and the job
ends. Rank 0 writes what it saw to argv[1]."""

import json
import os
import signal
import sys
import time

import numpy as np

import taskring
from taskring import IN, OUT, SCALAR, kernels as K


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


def exit_orch(o, chips, args, cfg):
    time.sleep(0.3)  # the other hosts' tasks of the run are under way by then
    raise SystemExit(3)


def interrupt_orch(o, chips, args, cfg):
    raise KeyboardInterrupt


def copy_orch(o, chips, args, cfg):
    o.submit_next_level(chips.copy, list(args), cfg, worker=0)


def pid_orch(o, chips, args, cfg):
    args[0][0] = os.getpid()


c = {"copy": copy}
programs = [
    taskring.DistributedProgram(exit_orch, chips=c, signature=[SCALAR]),
    taskring.DistributedProgram(interrupt_orch, chips=c, signature=[IN, OUT]),
    taskring.DistributedProgram(copy_orch, chips=c, signature=[IN, OUT]),
    taskring.DistributedProgram(pid_orch, chips=c, signature=[OUT]),
]
w = taskring.Worker(level=4)
EXIT, INTERRUPT, COPY, PID = [w.register(p) for p in programs]
if w.init():
    res = {}

    def attempt(orch):
        t0 = time.monotonic()
        try:
            w.run(lambda o, x, cfg: orch(o))
            err = None
        except RuntimeError as e:
            err = str(e)
        return err, time.monotonic() - t0

    def copies(hosts):
        pairs = [(np.arange(8, dtype=np.float32) + h, np.zeros(8, np.float32)) for h in hosts]
        return (lambda o: [o.submit_next_level(COPY, [a, b], None, worker=h) for h, (a, b) in zip(hosts, pairs)]), pairs

    def ok(pairs):
        return all(bool(np.array_equal(a, b)) for a, b in pairs)

    pids = [np.zeros(1, np.int64) for _ in range(3)]
    w.run(lambda o, x, cfg: [o.submit_next_level(PID, [pids[i]], None, worker=i) for i in range(3)])

    # 1. SystemExit in host 0's orchestration; hosts 1 and 2 work in the same run (a
    # failed run waits for the tasks under way, as at L3; one not yet dispatched when the
    # failure comes does not run).
    sub, pairs = copies([1, 2])
    res["exit"] = attempt(lambda o: (o.submit_next_level(EXIT, [1], None, worker=0), sub(o)))
    res["exit_others_ok"] = ok(pairs)
    res["exit_later"] = attempt(lambda o: o.submit_next_level(EXIT, [1], None, worker=0))

    # 2. SIGINT to host 1 while it waits for requests.
    os.kill(int(pids[1][0]), signal.SIGINT)
    time.sleep(0.5)
    sub, pairs = copies([1])
    res["sigint"] = attempt(sub)
    sub, pairs = copies([2])
    res["sigint_other"] = attempt(sub)
    res["sigint_other_ok"] = ok(pairs)

    # 3. KeyboardInterrupt in host 2's orchestration (a request with arrays).
    a, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    res["interrupt"] = attempt(lambda o: o.submit_next_level(INTERRUPT, [a, b], None, worker=2))
    sub, pairs = copies([2])
    res["interrupt_later"] = attempt(sub)

    t0 = time.monotonic()
    w.close()
    res["close_s"] = time.monotonic() - t0
    with open(sys.argv[1], "w") as f:
        json.dump(res, f)
