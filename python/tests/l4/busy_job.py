"""A job that keeps running until it is stopped from outside: every host runs a task that
sleeps for two minutes. argv[1] is a directory where rank 0 writes `rank0.json` (its pid,
the job's id and PMIx directory) once MPI is up, and each host writes `host{rank}` when
its task started. With argv[2] == "deaf", every rank ignores SIGTERM (so that mpirun's
own shutdown is slow and the launcher has to end the job itself)."""

import json
import os
import signal
import sys
import time

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K

OUT_DIR = sys.argv[1]
if sys.argv[2:3] == ["deaf"]:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


def host_orch(o, chips, args, cfg):
    rank = os.environ["OMPI_COMM_WORLD_RANK"]
    with open(os.path.join(OUT_DIR, f"host{rank}.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(OUT_DIR, f"host{rank}.tmp"), os.path.join(OUT_DIR, f"host{rank}"))
    time.sleep(120)
    o.submit_next_level(chips.copy, list(args), cfg, worker=0)


prog = taskring.DistributedProgram(host_orch, chips={"copy": copy}, config=taskring.DistributedConfig(device_ids=[0, 1]), signature=[IN, OUT])
w = taskring.Worker(level=4)
h = w.register(prog)
if w.init():
    info = {
        "pid": os.getpid(),
        "jobid": int(os.environ["OMPI_MCA_ess_base_jobid"]),
        "pmix_dir": os.environ.get("PMIX_SERVER_TMPDIR"),
    }
    with open(os.path.join(OUT_DIR, "rank0.tmp"), "w") as f:
        json.dump(info, f)
    os.rename(os.path.join(OUT_DIR, "rank0.tmp"), os.path.join(OUT_DIR, "rank0.json"))
    a = np.ones(16, np.float32)
    outs = [np.zeros(16, np.float32) for _ in range(w.num_hosts)]
    w.run(lambda o, x, cfg: [o.submit_next_level(h, [a, outs[i]], None, worker=i) for i in range(len(outs))])
    print("rank 0: the run returned; it should not have", flush=True)
    w.close()
