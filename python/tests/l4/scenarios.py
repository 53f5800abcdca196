"""L4 scenarios, run under `taskring launch --hosts 2` by test_l4.py: rank 0 writes what it
saw to the JSON file given as argv[1]; the hosts serve. Host 1 (rank 2) has
PTO2_RING_DEP_POOL=512 in its environment (set before init, so its chips inherit it)."""

import json
import os
import sys

import numpy as np

import taskring
from taskring import IN, INOUT, OUT, SCALAR, kernels as K

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
if RANK == 2:
    os.environ["PTO2_RING_DEP_POOL"] = "512"


@taskring.program(signature=[IN, IN, OUT])
def vadd(rt, a, b, out):
    rt.submit(K.add, inputs=[a, b], outputs=[out])


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


@taskring.kernel
def explode(a, out):
    raise ValueError("kernel exploded on purpose")


@taskring.program(signature=[IN, OUT])
def failing(rt, a, out):
    rt.submit(explode, inputs=[a], outputs=[out])


def add_orch(o, chips, args, cfg):
    """Forward to chip 0 as is, to chip 1 with its ring-0 heap doubled (a per-chip tweak)."""
    a, b, out0, out1 = args
    o.submit_next_level(chips.vadd, [a, b, out0], cfg, worker=0)
    c1 = cfg.copy()
    heap = list(c1.runtime_env.ring_heap)
    heap[0] = (heap[0] or (1 << 20)) * 2
    c1.runtime_env.ring_heap = heap
    o.submit_next_level(chips.vadd, [a, b, out1], c1, worker=1)


def echo_orch(o, chips, args, cfg):
    """No chip task: write the cfg this host received into the outputs."""
    ints, prefix = args
    env = cfg.runtime_env
    vals = [cfg.aicpu_thread_num, cfg.enable_chip_swimlane, int(cfg.enable_scope_stats), int(cfg.enable_dep_gen)]
    vals += list(env.ring_task_window) + list(env.ring_heap) + list(env.ring_dep_pool)
    ints[: len(vals)] = np.array(vals, dtype=np.uint64).view(np.int64)
    raw = cfg.output_prefix.encode()
    ints[16] = len(raw)
    prefix[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)


def chain_orch(o, chips, args, cfg):
    o.submit_next_level(chips.vadd, list(args), cfg, worker=0)


def copy_orch(o, chips, args, cfg):
    o.submit_next_level(chips.copy, list(args), cfg, worker=1)


def fail_orch(o, chips, args, cfg):
    o.submit_next_level(chips.failing, list(args), cfg, worker=1)


def raise_orch(o, chips, args, cfg):
    """The host's own orchestration raises (no chip task): with a message, or without."""
    if args[0]:
        raise ValueError("the host's orchestration raised on purpose")
    raise LookupError()


def named_orch(o, chips, args, cfg):
    """Nothing to forward: the task only has to reach the host and come back."""


# A program name at the frame's limit (256 bytes): rank 0 once sized the task frame
# without it, and such a task failed with "cannot encode the task".
named_orch.__name__ = "n" * 256

dc = taskring.DistributedConfig(device_ids=[0, 1])
two_chips = taskring.DistributedProgram(add_orch, chips={"vadd": vadd}, config=dc, signature=[IN, IN, OUT, OUT])
echo = taskring.DistributedProgram(echo_orch, chips={"vadd": vadd}, config=dc, signature=[OUT, OUT])
chain = taskring.DistributedProgram(chain_orch, chips={"vadd": vadd}, config=dc, signature=[IN, IN, OUT])
copier = taskring.DistributedProgram(copy_orch, chips={"copy": copy}, config=dc, signature=[IN, OUT])
fails = taskring.DistributedProgram(fail_orch, chips={"failing": failing}, config=dc, signature=[IN, OUT])
raises = taskring.DistributedProgram(raise_orch, chips={"vadd": vadd}, config=dc, signature=[SCALAR])
long_named = taskring.DistributedProgram(named_orch, chips={"vadd": vadd}, config=dc, signature=[SCALAR])

w = taskring.Worker(level=4)
H = [w.register(p) for p in (two_chips, echo, chain, copier, fails, raises, long_named)]
if w.init():
    res = {"num_hosts": w.num_hosts}

    # 1. The config at its limits, as the host's orchestration received it (hop 1):
    # every flag on with a real directory, then the longest prefix a frame carries.
    def limits(flags: bool) -> "taskring.CallConfig":
        c = taskring.CallConfig()
        c.aicpu_thread_num = 8
        c.runtime_env.ring_task_window = [4, 2**30, 64, 2**29]
        c.runtime_env.ring_heap = [1024, 2**40, 2**36, 4096]  # the host node builds these (address space only)
        c.runtime_env.ring_dep_pool = [4, 2**31 - 1, 5, 1000]
        if flags:
            c.enable_chip_swimlane = 4
            c.enable_scope_stats = True
            c.enable_dep_gen = True
            c.output_prefix = os.path.join(sys.argv[2], "dfx-é")
        else:
            head = "/nonexistent-é/"
            c.output_prefix = head + "p" * (4096 - len(head.encode()))
        return c

    echoes = []
    for flags in (True, False):
        c = limits(flags)
        sent = [c.aicpu_thread_num, c.enable_chip_swimlane, int(c.enable_scope_stats), int(c.enable_dep_gen)]
        sent += list(c.runtime_env.ring_task_window) + list(c.runtime_env.ring_heap) + list(c.runtime_env.ring_dep_pool)
        for host in range(w.num_hosts):
            ints = np.zeros(17, np.int64)
            prefix = np.zeros(4160, np.uint8)  # the host's prefix: this one + /host{h}
            w.run(lambda o, a, cfg, host=host, ints=ints, prefix=prefix, c=c: o.submit_next_level(H[1], [ints, prefix], c, worker=host))
            got = [int(v) for v in ints[:16].view(np.uint64)]
            echoes.append({"sent": sent, "got": got, "prefix_sent": c.output_prefix, "prefix_got": bytes(prefix[: int(ints[16])]).decode()})
    res["echo"] = echoes

    # 2. Both hops: per-host sizes; each host forwards to its two chips, chip 1 tweaked.
    a = [np.arange(64, dtype=np.float32) + h for h in range(2)]
    b = [np.full(64, 0.5, np.float32) for h in range(2)]
    outs = [[np.zeros(64, np.float32), np.zeros(64, np.float32)] for h in range(2)]

    def orch(o, args, cfg):
        for host in range(w.num_hosts):
            c = taskring.CallConfig()
            c.runtime_env.ring_task_window = [64 << host, 0, 0, 0]
            c.runtime_env.ring_heap = [1 << (20 + host), 0, 0, 0]
            o.submit_next_level(H[0], [a[host], b[host], outs[host][0], outs[host][1]], c, worker=host)

    rep = w.run(orch)
    hops = []
    for t in rep.tasks:
        chips = []
        for ct in t.report.tasks:
            s = ct.ring_sizing
            chips.append({"worker": ct.worker, "window0": s.task_window[0], "heap0": s.heap[0], "dep_pool0": s.dep_pool[0],
                          "src": [s.source("ring_task_window", 0), s.source("ring_heap", 0), s.source("ring_dep_pool", 0), s.source("ring_task_window", 1)]})
        hops.append({"worker": t.worker, "rank": t.rank, "error": t.error, "chips": chips})
    res["hops"] = hops
    res["hops_ok"] = all(np.array_equal(outs[h][k], a[h] + b[h]) for h in range(2) for k in range(2))
    res["report_type"] = [type(rep).__name__, type(rep.tasks[0]).__name__]

    # 3. Dependent L4 tasks across hosts: x_{i+1} = x_i + one on host i % 2.
    xs = [np.full(1000, 1.0, np.float32)] + [np.zeros(1000, np.float32) for _ in range(6)]
    one = np.ones(1000, np.float32)

    def dep_orch(o, args, cfg):
        for i in range(6):
            # chain runs on host worker's chip 0; alternate hosts through two programs
            if i % 2 == 0:
                o.submit_next_level(H[2], [xs[i], one, xs[i + 1]], None, worker=0)
            else:
                o.submit_next_level(H[3], [xs[i], xs[i + 1]], None, worker=1)

    w.run(dep_orch)
    res["chain"] = [float(x[0]) for x in xs]

    # 4. A failing kernel on host 1 fails its task; host 0's task of the same run completes.
    ok_out = np.zeros(64, np.float32)
    bad_out = np.zeros(64, np.float32)

    def fail_run(o, args, cfg):
        o.submit_next_level(H[2], [a[0], b[0], ok_out], None, worker=0)
        o.submit_next_level(H[4], [a[1], bad_out], None, worker=1)

    try:
        w.run(fail_run)
        res["fail"] = None
    except RuntimeError as e:
        res["fail"] = str(e)
    res["fail_other_ok"] = bool(np.array_equal(ok_out, a[0] + b[0]))
    again = np.zeros(64, np.float32)
    w.run(lambda o, x, cfg: o.submit_next_level(H[2], [a[1], b[1], again], None, worker=0))
    res["after_fail_ok"] = bool(np.array_equal(again, a[1] + b[1]))

    # 4b. A host's orchestration that raises fails its task with the exception's text
    # (its type's name when the text is empty); the host keeps serving.
    raised = []
    for with_text in (1, 0):
        try:
            w.run(lambda o, x, cfg, t=with_text: o.submit_next_level(H[5], [t], None, worker=0))
            raised.append(None)
        except RuntimeError as e:
            raised.append(str(e))
    res["raised"] = raised

    try:
        rep = w.run(lambda o, x, cfg: o.submit_next_level(H[6], [1], None, worker=0))
        res["long_name"] = [[t.callable, t.error] for t in rep.tasks]
    except Exception as e:  # noqa: BLE001 - the test shows what went wrong
        res["long_name"] = str(e)

    # 5. Host-resident tensors: written by one run, read by a later one, on host 1.
    kv = w.alloc_tensor((64,), np.float32, worker=1)
    res["kv"] = [kv.worker, list(kv.shape), kv.dtype, kv.nbytes]
    w.run(lambda o, x, cfg: o.submit_next_level(H[3], [a[1], kv], None, worker=1))
    got = np.zeros(64, np.float32)
    # host 1's copier writes on chip 1; read back through a copy into a shipped output
    w.run(lambda o, x, cfg: o.submit_next_level(H[3], [kv, got], None, worker=1))
    res["kv_ok"] = bool(np.array_equal(got, a[1]))
    try:
        w.run(lambda o, x, cfg: o.submit_next_level(H[2], [kv, b[0], got], None, worker=0))
        res["kv_other_host"] = None
    except ValueError as e:
        res["kv_other_host"] = str(e)

    # 6. A 1 MiB and a 4 MiB input, there and back.
    for n in (1 << 18, 1 << 20):
        big = np.random.default_rng(n).random(n, dtype=np.float32)
        back = np.zeros(n, np.float32)
        w.run(lambda o, x, cfg: o.submit_next_level(H[3], [big, back], None, worker=1))
        res[f"big_{n * 4}"] = bool(np.array_equal(big, back))

    # 6b. Several big copies in flight to one host at once (its requests queue behind
    # each other while their inputs and outputs are large).
    bigs = [np.random.default_rng(i).random(1 << 18, dtype=np.float32) for i in range(6)]
    backs = [np.zeros(1 << 18, np.float32) for _ in bigs]

    def many_big(o, x, cfg):
        for i in range(len(bigs)):
            o.submit_next_level(H[3], [bigs[i], backs[i]], None, worker=1)

    w.run(many_big)
    res["big_in_flight"] = all(bool(np.array_equal(x, y)) for x, y in zip(bigs, backs))

    # 7. A malformed task frame (valid header, ids, then a truncated body) fails that task
    # with a clear error; the host keeps serving.
    import struct

    from taskring import _mpi_tools

    body = struct.pack("<QIIH", 77, 29_999, 0, 1) + b"x" + b"\x01\x02"
    frame = b"TRNG" + struct.pack("<HHI", 2, 16, len(body)) + body  # frame version 2
    _mpi_tools.mpi_send_bytes(1, 1, frame)
    seq, status, error, n_out = _mpi_tools.l4_decode_reply(_mpi_tools.mpi_recv_bytes(1, 29_999))
    res["malformed"] = [seq, status, error, n_out]
    after = np.zeros(64, np.float32)
    w.run(lambda o, x, cfg: o.submit_next_level(H[2], [a[0], b[0], after], None, worker=0))
    res["after_malformed_ok"] = bool(np.array_equal(after, a[0] + b[0]))

    # 8. Both hosts and rank 0's own run given one output_prefix, every DFX output on:
    # each host writes under its host{h}/ directory (its chips under host{h}/chip{w}/),
    # and rank 0's L4 timeline has every host.
    dfx = os.path.join(sys.argv[2], "dfx-same")
    dcfg = taskring.CallConfig()
    dcfg.enable_scope_stats = True
    dcfg.enable_chip_swimlane = 1
    dcfg.enable_dep_gen = True
    dcfg.output_prefix = dfx
    douts = [[np.zeros(64, np.float32), np.zeros(64, np.float32)] for h in range(2)]
    w.run(lambda o, x, cfg: [o.submit_next_level(H[0], [a[h], b[h], douts[h][0], douts[h][1]], cfg, worker=h) for h in range(2)], config=dcfg)
    files = {}
    for root, _, names in os.walk(dfx):
        for n in names:
            path = os.path.join(root, n)
            try:
                with open(path) as f:
                    if n.endswith(".jsonl"):
                        [json.loads(line) for line in f if line.strip()]
                    else:
                        json.load(f)
                files[os.path.relpath(path, dfx)] = True
            except ValueError:
                files[os.path.relpath(path, dfx)] = False
    res["dfx_files"] = files
    with open(os.path.join(dfx, "merged_swimlane.json")) as f:
        tl = json.load(f)
    res["dfx_processes"] = sorted(e["args"]["name"] for e in tl["traceEvents"] if e.get("name") == "process_name")
    res["dfx_lanes_with_slices"] = sorted({p["args"]["name"].split(" (pid")[0] for p in tl["traceEvents"] if p.get("name") == "process_name" for e in tl["traceEvents"] if e.get("ph") == "X" and e["pid"] == p["pid"]})
    res["dfx_ok"] = all(np.array_equal(douts[h][k], a[h] + b[h]) for h in range(2) for k in range(2))

    w.close()
    with open(sys.argv[1], "w") as f:
        json.dump(res, f)
