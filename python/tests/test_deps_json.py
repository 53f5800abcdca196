"""deps.json (docs/api.md §7) through taskring.run with RunConfig(enable_dep_gen=True,
output_dir=...): tasks, tensors and the edges the program implies."""

import json
import random

import numpy as np

import taskring
from taskring import INOUT, IN, RunConfig, TaskArgs, TensorArgType

K = taskring.kernels
R1 = 1 << 32
R2 = 2 << 32


def read(d):
    with open(d / "deps.json") as f:
        return json.load(f)


def edge_set(deps):
    return {(e["pred"], e["succ"], e["source"], tuple(e["flags"])) for e in deps["edges"]}


def test_fields_and_edges(tmp_path):
    ids = {}

    @taskring.program(signature=[IN, INOUT])
    def prog(rt, x, y):
        ta = rt.submit(K.copy, inputs=[x[0:4]], outputs=[rt.spec((4, 16), "float32")])
        a = ta.outputs[0]
        ids["a"] = ta.id
        with rt.scope():
            ids["b"] = rt.submit(K.scale, inputs=[a], outputs=[y[4:8]], scalars=[2.0]).id
            ids["c"] = rt.submit(K.noop, inputs=[y[4:8], y[0:4]], no_dep=[a]).id
            with rt.scope(manual=True):
                ids["d"] = rt.submit(K.noop, inouts=[y[4:8]], deps=[ids["b"]]).id
        args = TaskArgs()
        args.add(y, TensorArgType.INOUT)
        args.add_dep(ids["a"])
        ids["e"] = rt.submit_args(K.noop, args).id
        f = rt.alloc((16,), "float32")
        ids["f"] = f.owner
        ids["g"] = rt.submit(K.noop, inputs=[y[2:3], f], deps=[ids["d"]]).id

    x = np.ones((8, 16), np.float32)
    y = np.zeros((8, 16), np.float32)
    taskring.run(prog, x, y, config=RunConfig(enable_dep_gen=True, output_dir=tmp_path))
    np.testing.assert_array_equal(y[4:8], 2.0)
    deps = read(tmp_path)
    assert sorted(deps) == ["edges", "tasks", "tensors"]

    a, b, c, d, e, f, g = (ids[k] for k in "abcdefg")
    assert (a, e, f, g, b, c, d) == (0, 1, 2, 3, R1, R1 | 1, R2)
    tasks = deps["tasks"]
    assert [t["id"] for t in tasks] == sorted(ids.values())
    assert [(t["kernel"], t["ring"], t["scope"]) for t in tasks] == [
        ("copy", 0, 0), ("noop", 0, 0), ("alloc", 0, 0), ("noop", 0, 0),
        ("scale", 1, 1), ("noop", 1, 1), ("noop", 2, 2),
    ]
    for t in tasks:
        assert sorted(t) == ["args", "id", "kernel", "ring", "scope"]
        for arg in t["args"]:
            assert sorted(arg) == ["dtype", "idx", "offset", "shape", "tag", "tensor"]
            assert arg["dtype"] == "float32"

    def args_of(tid):
        t = next(t for t in tasks if t["id"] == tid)
        return [(x["idx"], x["tag"], x["tensor"], x["shape"], x["offset"]) for x in t["args"]]

    # tensors: 0 = x, 1 = a (runtime output), 2 = y, 3 = f (alloc), in order of first use
    tensors = deps["tensors"]
    assert [(t["id"], t["dtype"], t["numel"]) for t in tensors] == [
        (0, "float32", 128), (1, "float32", 64), (2, "float32", 128), (3, "float32", 16)
    ]
    assert tensors[0]["addr"] == x.ctypes.data and tensors[2]["addr"] == y.ctypes.data
    assert tensors[1]["addr"] != tensors[3]["addr"]
    assert args_of(a) == [(0, "INPUT", 0, [4, 16], 0), (1, "OUTPUT", 1, [4, 16], 0)]
    assert args_of(b) == [(0, "INPUT", 1, [4, 16], 0), (1, "OUTPUT_EXISTING", 2, [4, 16], 64)]
    assert args_of(c) == [(0, "INPUT", 2, [4, 16], 64), (1, "INPUT", 2, [4, 16], 0), (2, "NO_DEP", 1, [4, 16], 0)]
    assert args_of(d) == [(0, "INOUT", 2, [4, 16], 64)]
    assert args_of(e) == [(0, "INOUT", 2, [8, 16], 0)]
    assert args_of(f) == [(0, "OUTPUT", 3, [16], 0)]
    assert args_of(g) == [(0, "INPUT", 2, [1, 16], 32), (1, "INPUT", 3, [16], 0)]

    wr, w = ("wait", "retain"), ("wait",)
    assert edge_set(deps) == {
        (a, b, "tensormap", wr),  # creator of a
        (a, c, "tensormap", wr),  # creator of a (NO_DEP still has it)
        (b, c, "tensormap", w),  # b wrote y[4:8]
        (b, d, "explicit", wr),  # manual scope: nothing inferred; deps= waits and retains
        (a, e, "explicit", wr),  # add_dep
        (b, e, "tensormap", w),  # e's INOUT y covers b's write (d's is not a tensormap write)
        (e, g, "tensormap", w),  # e wrote y (and removed b's entry)
        (f, g, "tensormap", wr),  # creator of f
        (d, g, "explicit", wr),
    }
    # ordered by (succ, pred)
    keys = [(e_["succ"], e_["pred"]) for e_ in deps["edges"]]
    assert keys == sorted(keys) and len(keys) == len(deps["edges"])


def test_edges_match_row_overlap_model(tmp_path):
    """A random program of row-block reads and writes of one host array, with some
    explicit deps: its tensormap edges are exactly the RAW/WAW overlaps of the row
    ranges (WAR not tracked; an INOUT removes the writers it covers)."""
    rng = random.Random(7)
    rows = 16
    ops = []
    for i in range(60):
        lo = rng.randrange(rows)
        hi = rng.randrange(lo + 1, rows + 1)
        kind = rng.choice(["in", "inout", "out"])
        deps = sorted(set(rng.sample(range(i), min(i, rng.choice([0, 0, 1, 2])))))
        ops.append((kind, lo, hi, deps))

    @taskring.program(signature=[INOUT])
    def prog(rt, buf):
        got = []
        for kind, lo, hi, deps in ops:
            v = buf[lo:hi]
            kw = {"in": dict(inputs=[v]), "inout": dict(inouts=[v]), "out": dict(outputs=[v])}[kind]
            got.append(rt.submit(K.noop, deps=[got[j] for j in deps], **kw).id)
        assert got == list(range(len(ops)))

    buf = np.zeros((rows, 4), np.float32)
    taskring.run(prog, buf, config=RunConfig(enable_dep_gen=True, output_dir=tmp_path))
    deps = read(tmp_path)

    want = set()
    writers = []  # (lo, hi, task)
    for t, (kind, lo, hi, explicit) in enumerate(ops):
        for j in explicit:
            want.add((j, t, "explicit", ("wait", "retain")))
        if kind in ("in", "inout"):
            keep = []
            for wl, wh, wt in writers:
                if wh <= lo or hi <= wl:
                    keep.append((wl, wh, wt))
                    continue
                want.add((wt, t, "tensormap", ("wait",)))
                covered = lo <= wl and wh <= hi
                if not (covered and kind == "inout"):
                    keep.append((wl, wh, wt))
            writers = keep
        if kind in ("inout", "out"):
            writers.append((lo, hi, t))
    assert edge_set(deps) == want
    assert [t["id"] for t in deps["tasks"]] == list(range(len(ops)))
    assert all(t["scope"] == 0 and t["ring"] == 0 for t in deps["tasks"])
    tags = {"in": "INPUT", "inout": "INOUT", "out": "OUTPUT_EXISTING"}
    for t, (kind, lo, hi, _) in zip(deps["tasks"], ops):
        assert t["args"] == [{"idx": 0, "tag": tags[kind], "tensor": 0, "shape": [hi - lo, 4], "dtype": "float32", "offset": lo * 4}]
    assert deps["tensors"] == [{"id": 0, "addr": buf.ctypes.data, "dtype": "float32", "numel": rows * 4}]
