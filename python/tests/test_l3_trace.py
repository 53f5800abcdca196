"""L3 outputs through the Python face (docs/api.md §7): one ``merged_swimlane.json`` under the
run's ``output_prefix`` with the host's lanes and every chip's lanes (a Perfetto process
per chip named ``chip {worker} (pid {pid})``, flows from each dispatch to the chip task
it started, one clock), each chip task's DFX files under ``{prefix}/chip{worker}/``, and
scope sites at L3 that are the user's lines."""

import json
import os

import numpy as np

import taskring
from taskring import IN, OUT, DistributedConfig, DistributedProgram, kernels as K

HERE = os.path.abspath(__file__)


def _line_of(marker):
    """The number of this file's line that ends with `# <marker>`."""
    with open(HERE, encoding="utf-8") as f:
        return next(i for i, l in enumerate(f, start=1) if l.rstrip().endswith(f"# {marker}"))


@taskring.program(signature=[IN, IN, OUT])
def axpy(rt, x, y, out):
    with rt.scope():  # CHIP-SCOPE
        t = rt.submit(K.scale, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)], scalars=[3.0]).outputs[0]
        rt.submit(K.add, inputs=[t, y], outputs=[out])


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _sites(path):
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return {s["site"] for s in lines[1:] if s["depth"] >= 1}


def _check_timeline(trace, pids, tasks):
    """`tasks`: the chip of each L3 task, in submission order."""
    ev = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    host = os.getpid()
    assert procs[host] == f"host (pid {host})"
    chip_pid = {}
    for w, pid in enumerate(pids):
        (p,) = [p for p, n in procs.items() if n == f"chip {w} (pid {pid})"]
        chip_pid[w] = p
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    x = [e for e in ev if e["ph"] == "X"]
    for i, w in enumerate(tasks):
        mine = [e for e in x if e["args"].get("l3_task") == i]
        (sub,) = [e for e in mine if e["name"].startswith("submit ")]
        (disp,) = [e for e in mine if e["name"].startswith("dispatch ")]
        assert sub["pid"] == disp["pid"] == host
        assert lanes[(host, sub["tid"])] == "orchestrator"
        assert lanes[(host, disp["tid"])].startswith("dispatch (")
        assert disp["name"].endswith(f"-> chip {w}")
        lo, hi = disp["ts"], disp["ts"] + disp["dur"]
        (s,) = [e for e in ev if e["ph"] == "s" and e["id"] == 2 * i + 2]
        (f,) = [e for e in ev if e["ph"] == "f" and e["id"] == 2 * i + 2]
        assert (s["cat"], s["name"]) == (f["cat"], f["name"]) and f["bp"] == "e"
        assert (s["pid"], s["tid"]) == (host, disp["tid"]) and lo <= s["ts"] <= hi
        assert f["pid"] == chip_pid[w]
        on_chip = [e for e in mine if e["pid"] == chip_pid[w]]
        kernels = sorted(e["name"] for e in on_chip if e["tid"] != f["tid"])
        assert kernels == ["add", "scale"], on_chip
        for e in on_chip:  # one clock: the chip's events inside the dispatch's window
            assert lo - 0.002 <= e["ts"] and e["ts"] + e["dur"] <= hi + 0.002, (e, disp)
    assert trace["otherData"]["clock"] == "CLOCK_MONOTONIC"


def test_two_chips_one_timeline_files_per_chip_and_user_sites(tmp_path):
    x = taskring.shared_array((4, 256))
    y = taskring.shared_array((4, 256))
    x[:] = 1
    y[:] = 2
    outs = [taskring.shared_array((4, 256)) for _ in range(2)]
    w = taskring.Worker(level=3, device_ids=[0, 1])
    h = w.register(axpy)
    w.init()
    try:
        def orch(o, args, cfg):
            with o.scope():  # HOST-SCOPE
                for i in range(2):
                    c = taskring.CallConfig(enable_scope_stats=True, enable_dep_gen=True, output_prefix=str(tmp_path))
                    o.submit_next_level(h, [x, y, outs[i]], c, worker=i)

        run_cfg = taskring.CallConfig(enable_scope_stats=True, enable_chip_swimlane=True, output_prefix=str(tmp_path))
        w.run(orch, args=None, config=run_cfg)
        pids = w.pids
    finally:
        w.close()
    for o in outs:
        np.testing.assert_array_equal(o, 5.0)
    _check_timeline(_load(tmp_path / "merged_swimlane.json"), pids, [0, 1])
    for i in range(2):
        d = tmp_path / f"chip{i}"
        for f in ("scope_stats/scope_stats.jsonl", "deps.json", "merged_swimlane.json"):
            assert (d / f).is_file(), d / f
        assert _sites(d / "scope_stats" / "scope_stats.jsonl") == {f"{HERE}:{_line_of('CHIP-SCOPE')}"}
    # The host's own scope: the `with o.scope()` line of this file, not the native module's.
    assert _sites(tmp_path / "scope_stats" / "scope_stats.jsonl") == {f"{HERE}:{_line_of('HOST-SCOPE')}"}


def test_distributed_run_config_output_dir(tmp_path):
    """A DistributedProgram's RunConfig diagnostics reach the run and every chip task."""

    def orch(o, chips, args, cfg):
        x, y, out = args
        for i in range(2):
            o.submit_next_level(chips.axpy, [x[2 * i : 2 * i + 2], y[2 * i : 2 * i + 2], out[2 * i : 2 * i + 2]], cfg, worker=i)

    dp = DistributedProgram(orch, chips={"axpy": axpy}, config=DistributedConfig(device_ids=[0, 1]), signature=[IN, IN, OUT])
    x, y, out = np.ones((4, 256), np.float32), np.full((4, 256), 2, np.float32), np.zeros((4, 256), np.float32)
    cfg = taskring.RunConfig(enable_scope_stats=True, enable_chip_swimlane=True, output_dir=str(tmp_path))
    with dp.prepare(cfg, chip_processes=False) as rt:
        xs, ys, os_ = (taskring.shared_array(a.shape) for a in (x, y, out))
        xs[:], ys[:] = x, y
        rt(xs, ys, os_, config=cfg)
        np.testing.assert_array_equal(os_, 5.0)
    trace = _load(tmp_path / "merged_swimlane.json")
    names = sorted(e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name")
    assert names == sorted([f"host (pid {os.getpid()})"] + [f"chip {i} (pid {os.getpid()})" for i in range(2)])
    _check_timeline(trace, [os.getpid()] * 2, [0, 1])
    for i in range(2):
        assert (tmp_path / f"chip{i}" / "scope_stats" / "scope_stats.jsonl").is_file()
        assert (tmp_path / f"chip{i}" / "merged_swimlane.json").is_file()
