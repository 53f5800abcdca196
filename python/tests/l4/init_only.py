"""Registers one program and calls `init()`; rank 0 runs one task on host 0 and writes
"ran" to argv[1]. Used to start a rank with a made-up or stale MPI environment."""

import sys

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


def host_orch(o, chips, args, cfg):
    o.submit_next_level(chips.copy, list(args), cfg, worker=0)


p = taskring.DistributedProgram(host_orch, chips={"copy": copy}, signature=[IN, OUT])
w = taskring.Worker(level=4)
h = w.register(p)
if w.init():
    a = np.ones(8, np.float32)
    b = np.zeros(8, np.float32)
    w.run(lambda o, x, c: o.submit_next_level(h, [a, b], None, worker=0))
    w.close()
    with open(sys.argv[1], "w") as f:
        f.write("ran")
