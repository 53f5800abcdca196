"""Rank 0 fails after `init()` and one L4 task, while host 0, once it stops serving,
waits for a message from rank 0 that never comes (as B8's host waits for its bare
ping-pong). The job must end: rank 0's exit ends it. argv[1]: how rank 0 fails —
``raise`` (an uncaught exception), ``exit`` (``sys.exit(3)``) or ``ok`` (a clean exit
after telling the host; the job ends with status 0). argv[2]: a file rank 0 writes
before it fails."""

import sys

import taskring
from taskring import SCALAR, _mpi_tools

TAG = 30_002  # the tag of B8's bare exchange: no L4 message uses it


def host_orch(o, chips, args, cfg):
    pass


w = taskring.Worker(level=4)
h = w.register(taskring.DistributedProgram(host_orch, chips={}, signature=[SCALAR]))
how = sys.argv[1]
if w.init():
    w.run(lambda o, x, c: o.submit_next_level(h, [1], None, worker=0))
    with open(sys.argv[2], "w") as f:
        f.write("ran")
    if how == "raise":
        raise LookupError("rank 0 fails on purpose")
    if how == "exit":
        sys.exit(3)
    w.close()
    _mpi_tools.mpi_send_bytes(1, TAG, b"bye")
else:
    _mpi_tools.mpi_recv_bytes(0, TAG)
