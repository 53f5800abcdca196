"""A host rank stopped (SIGSTOP), under `taskring launch --hosts 2` with
TASKRING_HOST_TIMEOUT_MS=argv[2] on rank 0: a host busy in a task longer than the timeout
(sleeping, then spinning in Python with the GIL) is not lost; host 1, stopped while its
task runs (it stops itself), is reported `not responding` within about the timeout, its later tasks fail at
once, host 0's tasks of the same run and of later runs complete, and close() returns. Rank
0 writes what it saw to argv[1]; the job then ends with MPI_Abort (a stopped rank cannot
finalize)."""

import json
import os
import signal
import sys
import threading
import time

import numpy as np

if os.environ.get("OMPI_COMM_WORLD_RANK") == "0":
    os.environ["TASKRING_HOST_TIMEOUT_MS"] = sys.argv[2]

import taskring  # noqa: E402
from taskring import IN, OUT, SCALAR, kernels as K  # noqa: E402


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


def host_orch(o, chips, args, cfg):
    """args[0][0] < 0: first sleep, then spin holding the GIL, -args[0][0] s in all;
    args[0][1] == 1: write this host's pid into the output."""
    a, out = args
    if a[0] < 0:
        end = time.monotonic() - float(a[0])
        time.sleep(-float(a[0]) / 2)
        while time.monotonic() < end:
            pass
    o.submit_next_level(chips.copy, [a, out], cfg, worker=0)


def signal_later(o, chips, args, cfg):
    """The host sends itself signal args[0] in args[1] s (a host on another node is out of
    rank 0's reach)."""
    threading.Timer(float(args[1]), os.kill, (os.getpid(), int(args[0]))).start()


prog = taskring.DistributedProgram(host_orch, chips={"copy": copy}, signature=[IN, OUT])
later = taskring.DistributedProgram(signal_later, chips={"copy": copy}, signature=[SCALAR, SCALAR])
w = taskring.Worker(level=4)
h, hs = w.register(prog), w.register(later)
if w.init():
    timeout_s = int(sys.argv[2]) / 1000
    res = {}

    def task(worker, seconds=0.0):
        a = np.arange(8, dtype=np.float32) + 1
        if seconds:
            a[0] = -seconds
        out = np.zeros(8, np.float32)
        return (lambda o: o.submit_next_level(h, [a, out], None, worker=worker)), a, out

    # A host busy for 2.5 timeouts, half of it holding the GIL, is not lost.
    sub, a, out = task(0, 2.5 * timeout_s)
    t0 = time.monotonic()
    w.run(lambda o, x, c: sub(o))
    res["busy_s"] = time.monotonic() - t0
    res["busy_ok"] = bool(np.array_equal(a, out))

    # Host 1 stopped while its task runs; host 0's task of the same run completes.
    sub0, a0, out0 = task(0, 0.5)
    sub1, a1, out1 = task(1, 2.0)
    w.run(lambda o, x, c: o.submit_next_level(hs, [int(signal.SIGSTOP), 0.3], None, worker=1))
    stopped = {"at": time.monotonic() + 0.3}  # at the latest
    try:
        w.run(lambda o, x, c: (sub0(o), sub1(o)))
        res["stopped_error"] = None
    except RuntimeError as e:
        res["stopped_error"] = str(e)
    res["detected_after_s"] = time.monotonic() - stopped["at"]
    res["other_ok"] = bool(np.array_equal(a0, out0))

    # The lost host's later tasks fail at once; host 0 keeps working.
    sub1, a1, out1 = task(1)
    t0 = time.monotonic()
    try:
        w.run(lambda o, x, c: sub1(o))
        res["later_error"] = None
    except RuntimeError as e:
        res["later_error"] = str(e)
    res["later_s"] = time.monotonic() - t0
    sub0, a0, out0 = task(0)
    w.run(lambda o, x, c: sub0(o))
    res["after_ok"] = bool(np.array_equal(a0, out0))

    t0 = time.monotonic()
    w.close()
    res["close_s"] = time.monotonic() - t0
    with open(sys.argv[1], "w") as f:
        json.dump(res, f)
