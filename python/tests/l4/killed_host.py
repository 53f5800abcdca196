"""Host 1 (rank 2) kills itself (SIGKILL) in the middle of an L4 task; the job must end
(mpirun's abort), and no chip process may be left. argv[1]: a file where the dying host
writes its time of death."""

import os
import signal
import sys
import time

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


def host_orch(o, chips, args, cfg):
    if os.environ.get("OMPI_COMM_WORLD_RANK") == "2":
        with open(sys.argv[1], "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    o.submit_next_level(chips.copy, list(args), cfg, worker=0)


prog = taskring.DistributedProgram(host_orch, chips={"copy": copy}, config=taskring.DistributedConfig(device_ids=[0, 1]), signature=[IN, OUT])
w = taskring.Worker(level=4)
h = w.register(prog)
if w.init():
    a = np.ones(16, np.float32)
    outs = [np.zeros(16, np.float32) for _ in range(2)]
    w.run(lambda o, x, cfg: [o.submit_next_level(h, [a, outs[i]], None, worker=i) for i in range(2)])
    print("rank 0: the run returned; it should not have", flush=True)
    w.close()
