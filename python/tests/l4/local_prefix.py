"""One traced L4 task per host with an `output_prefix` under this node's /tmp (argv[2]):
every rank, once the job's work is done, lists what that prefix holds on its own node and
writes the list to argv[1].<rank>.json (argv[1] is where the test reads; on a shared file
system across nodes). Rank 0 also writes the process names of its L4 timeline."""

import json
import os
import sys

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
PREFIX = sys.argv[2]


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


def host_orch(o, chips, args, cfg):
    o.submit_next_level(chips.copy, list(args), cfg, worker=0)


p = taskring.DistributedProgram(host_orch, chips={"copy": copy}, config=taskring.DistributedConfig(device_ids=[0]), signature=[IN, OUT])
w = taskring.Worker(level=4)
h = w.register(p)
res = {}
if w.init():
    cfg = taskring.CallConfig()
    cfg.enable_chip_swimlane = 1
    cfg.output_prefix = PREFIX
    a = np.ones(16, np.float32)
    outs = [np.zeros(16, np.float32) for _ in range(w.num_hosts)]
    w.run(lambda o, x, c: [o.submit_next_level(h, [a, outs[i]], c, worker=i) for i in range(w.num_hosts)], config=cfg)
    w.close()
    with open(os.path.join(PREFIX, "merged_swimlane.json")) as f:
        tl = json.load(f)
    res["timeline"] = sorted(e["args"]["name"].split(" (pid")[0] for e in tl["traceEvents"] if e.get("name") == "process_name")
res["files"] = sorted(os.path.relpath(os.path.join(r, n), PREFIX) for r, _, ns in os.walk(PREFIX) for n in ns)
res["node"] = os.uname().nodename
with open(f"{sys.argv[1]}.{RANK}.json", "w") as f:
    json.dump(res, f)
