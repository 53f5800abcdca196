"""The L2 orchestration API (docs/api.md §3): views and row slices, `alloc`, `TaskArgs`,
task ids and explicit deps, dependencies inferred from tensors (also through overlapping
views), manual scopes, nested scopes mapped to rings, and exceptions from the
orchestration."""

import time

import numpy as np
import pytest

import taskring
from taskring import (
    IN,
    INOUT,
    OUT,
    SCALAR,
    ChipWorker,
    Program,
    RunConfig,
    TaskArgs,
    TensorArgType,
)

from l2_helpers import K, check_vector_add, vec_args, vector_add


# ----- orchestration features ----------------------------------------------------------------------


def test_views_and_row_slices():
    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        assert x.shape == (4, 8) and x.dtype == "float32"
        assert x[0:2].shape == (2, 8)
        assert x[1].shape == (1, 8)
        assert x.view((2, 8), offset=16).shape == (2, 8)
        with rt.scope():
            # rows 0..1 of x, scaled, into rows 2..3 of out
            rt.submit(K.scale, inputs=[x[0:2]], outputs=[out[2:4]], scalars=[3.0])
            # rows 2..3 of x (a view by offset) into rows 0..1 of out (a view of shape (16,))
            rt.submit(K.copy, inputs=[x.view((16,), offset=16)], outputs=[out.view((16,))])

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.zeros((4, 8), np.float32)
    taskring.run(prog, x, out)
    np.testing.assert_array_equal(out[2:4], 3 * x[0:2])
    np.testing.assert_array_equal(out[0:2], x[2:4])


def test_row_slice_out_of_range():
    @taskring.program(signature=[IN])
    def prog(rt, x):
        assert x[3:9].shape == (1, 2)  # Python slice semantics: clamped
        with pytest.raises(ValueError):
            x[4:6]
        with pytest.raises(ValueError):
            x[2:1]
        with pytest.raises(ValueError):
            x[0:4:2]

    taskring.run(prog, np.zeros((4, 2), np.float32))


def test_alloc():
    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        with rt.scope():
            t = rt.alloc(x.shape, x.dtype)
            assert isinstance(t, taskring.Tensor)
            assert t.shape == x.shape
            rt.submit(K.add, inputs=[x, x], outputs=[t])
            rt.submit(K.copy, inputs=[t], outputs=[out])

    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = np.zeros_like(x)
    rep = taskring.run(prog, x, out)
    np.testing.assert_array_equal(out, 2 * x)
    assert rep.peak.heap[1] >= x.nbytes


def test_submit_args_with_task_args():
    ids = []

    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        with rt.scope():
            a = TaskArgs()
            a.add(x, TensorArgType.INPUT)
            a.add(rt.spec(x.shape, x.dtype), TensorArgType.OUTPUT)
            a.add_scalar(5.0)
            assert len(a) == 2
            t = rt.submit_args(K.scale, a)
            ids.append(t.id)
            b = TaskArgs()
            b.add(t.outputs[0], TensorArgType.INPUT)
            b.add(out, TensorArgType.OUTPUT_EXISTING)
            rt.submit_args(K.copy, b)

    x = np.arange(16, dtype=np.float32)
    out = np.zeros_like(x)
    rep = taskring.run(prog, x, out)
    np.testing.assert_array_equal(out, 5 * x)
    assert rep.tasks == 2
    assert ids[0] >> 32 == 1  # ring 1 (depth 1)


def test_task_args_tags_checked():
    @taskring.program(signature=[IN])
    def prog(rt, x):
        a = TaskArgs()
        with pytest.raises(TypeError):
            a.add(x, TensorArgType.OUTPUT)  # OUTPUT takes a spec
        with pytest.raises(TypeError):
            a.add(rt.spec((4,), "float32"), TensorArgType.INPUT)

    taskring.run(prog, np.zeros(4, np.float32))


def test_task_ids_and_explicit_deps():
    order = []

    @taskring.kernel
    def slow(x, out):
        time.sleep(0.05)
        order.append("slow")
        out[...] = 1

    @taskring.kernel(core="aic")  # another core than `slow`: only the dep orders them
    def fast(x, out):
        order.append("fast")
        out[...] = 2

    @taskring.program(signature=[IN, OUT, OUT])
    def prog(rt, x, o1, o2):
        t1 = rt.submit(slow, inputs=[x], outputs=[o1])
        assert t1.id == 0  # ring 0, local 0
        with rt.scope():
            # no tensor in common with t1: the order comes only from deps=
            t2 = rt.submit(fast, inputs=[x], outputs=[o2], deps=[t1.id])
            assert t2.id >> 32 == 1 and t2.ring == 1

    x = np.zeros(4, np.float32)
    o1 = np.zeros(4, np.float32)
    o2 = np.zeros(4, np.float32)
    taskring.run(prog, x, o1, o2)
    assert order == ["slow", "fast"]


def test_inferred_dependency_raw():
    order = []

    @taskring.kernel
    def produce(x, out):
        time.sleep(0.05)
        order.append("produce")
        out[...] = x + 1

    @taskring.kernel(core="aic")
    def consume(x, out):
        order.append("consume")
        out[...] = x * 10

    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        with rt.scope():
            t = rt.submit(produce, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)])
            rt.submit(consume, inputs=[t.outputs[0]], outputs=[out])

    x = np.arange(4, dtype=np.float32)
    out = np.zeros_like(x)
    taskring.run(prog, x, out)
    assert order == ["produce", "consume"]
    np.testing.assert_array_equal(out, (x + 1) * 10)


def test_inferred_dependencies_through_overlapping_views():
    """RAW and WAW through overlap of row slices of one host tensor (docs/api.md §3.1):
    INOUT and OUTPUT_EXISTING writers are recorded, INPUT readers and INOUT writers
    look them up."""
    log = []

    @taskring.kernel
    def slow_write(out, value):
        time.sleep(0.05)
        out[...] = value
        log.append(("write", value))

    @taskring.kernel(core="aic")  # another core than slow_write: only the inferred dep orders them
    def fast_write(out, value):
        out[...] = value
        log.append(("write", value))

    @taskring.kernel(core="aic")
    def read_rows(x, out):
        out[...] = x
        log.append(("read",))

    @taskring.program(signature=[INOUT, OUT])
    def prog(rt, buf, snap):
        with rt.scope():
            rt.submit(slow_write, inouts=[buf[0:2]], scalars=[1.0])
            rt.submit(fast_write, inouts=[buf[1:3]], scalars=[2.0])  # WAW on row 1
        with rt.scope():
            rt.submit(slow_write, outputs=[buf[3:4]], scalars=[5.0])
            rt.submit(read_rows, inputs=[buf[2:4]], outputs=[snap])  # RAW on row 3

    buf = np.zeros((4, 4), np.float32)
    snap = np.zeros((2, 4), np.float32)
    taskring.run(prog, buf, snap)
    np.testing.assert_array_equal(buf[:, 0], [1, 2, 2, 5])
    np.testing.assert_array_equal(snap[:, 0], [2, 5])
    assert log == [("write", 1.0), ("write", 2.0), ("write", 5.0), ("read",)]


def test_manual_scope_uses_only_explicit_deps():
    log = []

    @taskring.kernel
    def first(x, out):
        log.append("first-start")
        time.sleep(0.2)
        out[...] = x + 1
        log.append("first-end")

    # another core kind than `first`, so the two could run at the same time
    @taskring.kernel(core="aic")
    def second(x, out):
        log.append("second")
        out[...] = x * 2

    @taskring.program(signature=[IN, OUT, SCALAR])
    def prog(rt, x, out, with_deps):
        with rt.scope(manual=True):
            assert rt.depth == 1
            t1 = rt.submit(first, inputs=[x], outputs=[out])
            rt.submit(second, inputs=[out], outputs=[out], deps=[t1.id] if with_deps else [])

    x = np.ones(4, np.float32)
    out = np.zeros(4, np.float32)
    taskring.run(prog, x, out, 1)
    assert log.index("second") > log.index("first-end")
    np.testing.assert_array_equal(out, 4)
    # without deps= nothing orders the two tasks in a manual scope
    log.clear()
    taskring.run(prog, x, out, 0)
    assert log.index("second") < log.index("first-end")


def test_nested_scopes_map_to_rings():
    seen = []

    @taskring.program(signature=[IN])
    def prog(rt, x):
        def level(d):
            t = rt.submit(K.fill, outputs=[rt.spec((4,), "float32")], scalars=[1.0])
            seen.append((rt.depth, t.ring, t.id >> 32))
            if d < 5:
                with rt.scope():
                    level(d + 1)

        level(0)

    rep = taskring.run(prog, np.zeros(4, np.float32), config=RunConfig(ring_heap=[0, 0, 0, 4096]))
    assert seen == [(0, 0, 0), (1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 3, 3), (5, 3, 3)]
    assert rep.tasks == 6
    assert rep.peak.task_window[3] == 3  # depths 3, 4, 5 share ring 3
    assert rep.peak.heap[3] == 3 * 1024


def test_orchestration_exception_propagates_unchanged():
    class MyError(Exception):
        pass

    err = MyError("from the orchestration")

    def orch(rt, a, b, out):
        with rt.scope():
            rt.submit(K.add, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)])
            raise err

    prog = Program(orch, [IN, IN, OUT], name="raiser")
    a, b, out = vec_args(seed=24)
    with ChipWorker() as w:
        with pytest.raises(MyError) as ei:
            w.run(prog, a, b, out)
        assert ei.value is err
        with pytest.raises(KeyError):
            w.run(Program(lambda rt, a, b, out: {}["missing"], [IN, IN, OUT]), a, b, out)
        rep = w.run(vector_add, a, b, out)
        check_vector_add(a, b, out)
        assert rep.tasks == 2
    with pytest.raises(MyError):
        taskring.run(prog, a, b, out)
