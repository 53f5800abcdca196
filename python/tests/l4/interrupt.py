"""Ctrl-C on rank 0 while its run waits for a slow host: the run raises KeyboardInterrupt
before the host's task ends, and the worker stays usable (the next run completes after the
host finished the interrupted task). Rank 0 writes what it saw to argv[1]."""

import json
import os
import signal
import sys
import threading
import time

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


def host_orch(o, chips, args, cfg):
    if args[0][0] < 0:  # the slow task
        time.sleep(1.5)
    o.submit_next_level(chips.copy, list(args), cfg, worker=0)


p = taskring.DistributedProgram(host_orch, chips={"copy": copy}, signature=[IN, OUT])
w = taskring.Worker(level=4)
h = w.register(p)
if w.init():
    res = {}
    slow_in = np.full(8, -1.0, np.float32)
    slow_out = np.zeros(8, np.float32)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        w.run(lambda o, a, c: o.submit_next_level(h, [slow_in, slow_out], None, worker=0))
        res["raised"] = None
    except KeyboardInterrupt as e:
        res["raised"] = f"KeyboardInterrupt: {e}"
    res["after_s"] = time.monotonic() - t0
    # Raised before the host's task ended: its result is not back.
    res["out_at_raise"] = slow_out.tolist()
    ok_in = np.arange(8, dtype=np.float32)
    ok_out = np.zeros(8, np.float32)
    w.run(lambda o, a, c: o.submit_next_level(h, [ok_in, ok_out], None, worker=0))
    res["next_run_ok"] = bool(np.array_equal(ok_in, ok_out))
    w.close()
    with open(sys.argv[1], "w") as f:
        json.dump(res, f)
