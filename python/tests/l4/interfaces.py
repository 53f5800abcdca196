"""Rank 0 writes the names of the network interfaces it sees (argv[1]) — under
`taskring launch --netns` only `lo` — then the job ends normally."""

import os
import socket
import sys

import numpy as np

import taskring
from taskring import IN


@taskring.program(signature=[IN])
def nothing(rt, a):
    pass


p = taskring.DistributedProgram(lambda o, c, a, cfg: None, chips={"nothing": nothing}, signature=[IN])
w = taskring.Worker(level=4)
w.register(p)
if w.init():
    w.run(lambda o, a, c: o.submit_next_level(0, [np.zeros(4, np.float32)], None, worker=0))
    with open(sys.argv[1], "w") as f:
        f.write(" ".join(sorted(name for _, name in socket.if_nameindex())))
    w.close()
