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
import threading
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


def signal_later(o, chips, args, cfg):
    """The host sends itself signal args[0] in args[1] s (a host on another node is out of
    rank 0's reach)."""
    threading.Timer(float(args[1]), os.kill, (os.getpid(), int(args[0]))).start()


c = {"copy": copy}
programs = [
    taskring.DistributedProgram(exit_orch, chips=c, signature=[SCALAR]),
    taskring.DistributedProgram(interrupt_orch, chips=c, signature=[IN, OUT]),
    taskring.DistributedProgram(copy_orch, chips=c, signature=[IN, OUT]),
    taskring.DistributedProgram(signal_later, chips=c, signature=[SCALAR, SCALAR]),
]
w = taskring.Worker(level=4)
EXIT, INTERRUPT, COPY, LATER = [w.register(p) for p in programs]
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

    # 1. SystemExit in host 0's orchestration; hosts 1 and 2 work in the same run (a
    # failed run waits for the tasks under way, as at L3; one not yet dispatched when the
    # failure comes does not run).
    sub, pairs = copies([1, 2])
    res["exit"] = attempt(lambda o: (o.submit_next_level(EXIT, [1], None, worker=0), sub(o)))
    res["exit_others_ok"] = ok(pairs)
    res["exit_later"] = attempt(lambda o: o.submit_next_level(EXIT, [1], None, worker=0))

    # 2. SIGINT to host 1 while it waits for requests (it sends it itself, 0.2 s after a
    # task that returns at once).
    w.run(lambda o, x, cfg: o.submit_next_level(LATER, [int(signal.SIGINT), 0.2], None, worker=1))
    time.sleep(0.7)
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
