"""L4 demo (`make demo-l4`, i.e. `taskring launch --hosts 2 examples/l4_demo.py`): two hosts
(MPI ranks 1 and 2) with two chip processes each, on this machine.

Rank 0 gives each host L4 tasks with its own per-ring sizes; each host's L3
orchestration forwards its task to both of its chips, tweaking chip 1's ring-1 heap.
Host 1 also has `PTO2_RING_DEP_POOL=512,0,0,0` in its environment (its chips inherit
it), so ring 0's dependency pool comes from the env there and from the default on host
0. The printout shows, per chip task, the sizing the chip resolved and where each value
came from (C = the task's CallConfig, E = the chip's env, D = default) — across both
hops.
"""

from __future__ import annotations

import os
import time

import numpy as np

import taskring
from taskring import IN, OUT, kernels as K

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
if RANK == 2:
    os.environ["PTO2_RING_DEP_POOL"] = "512,0,0,0"


@taskring.program(signature=[IN, IN, OUT])
def axpy(rt, x, y, out):
    """out = 2 * x + y through a runtime temporary, in a scope (ring 1)."""
    with rt.scope():
        t = rt.submit(K.scale, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)], scalars=[2.0]).outputs[0]
        rt.submit(K.add, inputs=[t, y], outputs=[out])


def host_orch(o, chips, args, cfg):
    """L3 on a host: the L4 task's cfg goes to chip 0 as is, to chip 1 with a bigger
    ring-1 heap (a per-chip tweak); both halves of the work in parallel."""
    x, y, out = args
    half = x.shape[0] // 2
    o.submit_next_level(chips.axpy, [x[:half], y[:half], out[:half]], cfg, worker=0)
    tweaked = cfg.copy()
    heap = list(tweaked.runtime_env.ring_heap)
    heap[1] = max(heap[1], 1 << 16) * 4
    tweaked.runtime_env.ring_heap = heap
    o.submit_next_level(chips.axpy, [x[half:], y[half:], out[half:]], tweaked, worker=1)


step = taskring.DistributedProgram(
    host_orch,
    chips={"axpy": axpy},
    config=taskring.DistributedConfig(device_ids=[0, 1]),
    signature=[IN, IN, OUT],
)

w = taskring.Worker(level=4)
h = w.register(step)  # on every rank, before init()
if w.init():  # rank 0 from here on; the hosts serve inside init() until close()
    n = w.num_hosts
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((64, 128)).astype(np.float32) for _ in range(n)]
    ys = [rng.standard_normal((64, 128)).astype(np.float32) for _ in range(n)]
    outs = [np.zeros((64, 128), np.float32) for _ in range(n)]
    print(f"taskring L4 demo: {n} hosts (MPI ranks 1..{n}) x 2 chips")

    def orch(o, args, cfg):
        for host in range(n):
            c = taskring.CallConfig()
            c.runtime_env.ring_task_window = [64 << host, 16, 0, 0]
            c.runtime_env.ring_heap = [1 << (20 + host), 1 << 16, 0, 0]
            o.submit_next_level(h, [xs[host], ys[host], outs[host]], c, worker=host)

    t0 = time.perf_counter()
    rep = w.run(orch)
    dt = time.perf_counter() - t0
    print(f"one L4 run: {len(rep.tasks)} L4 tasks in {dt * 1e3:.2f} ms")
    for t in rep.tasks:
        print(f"\nhost {t.worker} (rank {t.rank}): {len(t.report.tasks)} chip tasks, {t.elapsed_s * 1e3:.2f} ms seen from rank 0")
        for ct in t.report.tasks:
            s = ct.ring_sizing
            src = {
                f: "".join("CED"[("call_config", "env", "default").index(s.source(f, r))] for r in range(4))
                for f in ("ring_task_window", "ring_heap", "ring_dep_pool")
            }
            print(f"  chip {ct.worker}: {ct.tasks} L2 tasks, arena_hit={ct.arena_hit}")
            print(f"    window={s.task_window} heap={s.heap} dep_pool={s.dep_pool}")
            print(f"    sources per ring (C=call_config, E=env, D=default): window={src['ring_task_window']} heap={src['ring_heap']} dep_pool={src['ring_dep_pool']}")
    ok = all(np.allclose(outs[i], 2 * xs[i] + ys[i], atol=1e-5) for i in range(n))
    print(f"\nresults correct: {ok}")
    w.close()
    if not ok:
        raise SystemExit("results differ from numpy")
