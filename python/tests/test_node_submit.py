"""What an L3 orchestration submits (docs/api.md §4, §2 `shared_array`): dependencies between
L2 tasks inferred from their tensors (also through overlapping views and node-allocated
intermediates), scalars, and the arguments and configs validated at submit."""

import time

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, CallConfig, RuntimeFailure, shared_array

from l2_helpers import vector_add
from l3_helpers import N, cfg_with, close, inputs, scaled, vadd


# ----- dependencies between L2 tasks ---------------------------------------------------------


@taskring.kernel
def _slow_add2(a, b, out):
    time.sleep(0.05)
    out[...] = (a + b) * 2


@taskring.program(signature=[IN, IN, OUT])
def slow_vector_add(rt, a, b, out):
    """Same result as vector_add, but late: a dependant that did not wait reads zeros."""
    rt.submit(_slow_add2, inputs=[a, b], outputs=[out])


@taskring.kernel
def _very_slow_add2(a, b, out):
    time.sleep(0.4)
    out[...] = (a + b) * 2


@taskring.program(signature=[IN, IN, OUT])
def very_slow_vector_add(rt, a, b, out):
    rt.submit(_very_slow_add2, inputs=[a, b], outputs=[out])


def test_dependency_chain_across_chips(make_worker):
    w, (hs, h) = make_worker(3, programs=(slow_vector_add, vector_add))
    a, b = inputs(seed=8)
    c, d, e = shared_array(N), shared_array(N), shared_array(N)

    def orch(o, args, cfg):
        o.submit_next_level(hs, [a, b, c], worker=0)  # slow producer
        o.submit_next_level(h, [c, b, d], worker=1)  # reads c: waits for chip 0
        o.submit_next_level(h, [d, a, e], worker=2)  # reads d: waits for chip 1

    rep = w.run(orch)
    close(c, vadd(a, b))
    close(d, vadd(vadd(a, b), b))
    close(e, vadd(vadd(vadd(a, b), b), a))
    assert [t.worker for t in rep.tasks] == [0, 1, 2]
    assert [t.callable for t in rep.tasks] == [hs, h, h]


def test_dependency_through_overlapping_views_from_buffer_start(make_worker):
    """A task reading a whole buffer waits for a writer of a view starting at the same
    address (the slow one here)."""
    w, (hs, h) = make_worker(2, programs=(slow_vector_add, vector_add))
    a, b = inputs(seed=9)
    mid, out = shared_array(N), shared_array(N)
    half = N // 2

    def orch(o, args, cfg):
        o.submit_next_level(hs, [a[:half], b[:half], mid[:half]], worker=0)
        o.submit_next_level(h, [mid, a, out], worker=1)

    w.run(orch)
    close(mid[:half], vadd(a[:half], b[:half]))
    close(out[:half], vadd(vadd(a[:half], b[:half]), a[:half]))


def test_dependency_through_overlapping_views_at_offset(make_worker):
    """Chip 1 slowly writes the second half of `mid`; the whole of `mid` is read on chip
    2 right after chip 0's (fast) first half: without the dependency on chip 1's task
    the second half is read as zeros."""
    w, (hs, h) = make_worker(3, programs=(very_slow_vector_add, vector_add))
    a, b = inputs(seed=9)
    mid, out = shared_array(N), shared_array(N)
    half = N // 2

    def orch(o, args, cfg):
        o.submit_next_level(h, [a[:half], b[:half], mid[:half]], worker=0)
        o.submit_next_level(hs, [a[half:], b[half:], mid[half:]], worker=1)
        o.submit_next_level(h, [mid, a, out], worker=2)  # overlaps both halves

    w.run(orch)
    close(mid, vadd(a, b))
    close(out, vadd(vadd(a, b), a))


def test_node_alloc_as_intermediate(make_worker):
    w, (hs, h) = make_worker(2, programs=(slow_vector_add, vector_add))
    a, b = inputs(seed=10)
    out = shared_array(N)
    seen = []

    def orch(o, args, cfg):
        t = o.alloc((N,), np.float32)
        seen.append((tuple(t.shape), str(t.dtype)))
        o.submit_next_level(hs, [a, b, t], worker=0)
        o.submit_next_level(h, [t, b, out], worker=1)

    w.run(orch)
    assert seen == [((N,), "float32")]
    close(out, vadd(vadd(a, b), b))

    def scoped(o, args, cfg):
        o.begin_scope()
        t = o.alloc([N], "float32")
        o.submit_next_level(hs, [a, a, t], worker=1)
        o.submit_next_level(h, [t, a, out], worker=0)
        o.end_scope()

    out[:] = 0
    w.run(scoped)
    close(out, vadd(vadd(a, a), a))


def test_l3_orchestrator_scope_context_manager(make_worker):
    w, (h,) = make_worker(1)
    a, b = inputs(seed=11)
    out = shared_array(N)

    def orch(o, args, cfg):
        with o.scope():
            t = o.alloc((N,), np.float32)
            o.submit_next_level(h, [a, b, t], worker=0)
            o.submit_next_level(h, [t, b, out], worker=0)

    w.run(orch)
    close(out, vadd(vadd(a, b), b))


def test_submit_next_level_group(make_worker):
    w, (h,) = make_worker(2)
    a, b = inputs(seed=12)
    o0, o1 = shared_array(N), shared_array(N)
    rep = w.run(lambda o, args, cfg: o.submit_next_level_group(h, [[a, b, o0], [b, a, o1]], cfg_with(ring_task_window=64), workers=[0, 1]))
    close(o0, vadd(a, b))
    close(o1, vadd(a, b))
    assert sorted(t.worker for t in rep.tasks) == [0, 1]
    assert all(t.ring_sizing.task_window == (64,) * 4 for t in rep.tasks)


def test_scalar_arguments_reach_the_chip(make_worker):
    w, (h,) = make_worker(2, programs=(scaled,))
    a, _ = inputs(seed=13)
    o0, o1 = shared_array(N), shared_array(N)

    def orch(o, args, cfg):
        o.submit_next_level(h, [a, o0, 3.0], worker=0)
        o.submit_next_level(h, [a, o1, -0.5], worker=1)

    w.run(orch)
    close(o0, np.asarray(a) * 3.0)
    close(o1, np.asarray(a) * -0.5)
    with pytest.raises(TypeError, match="bool"):
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, o0, True], worker=0))


# ----- validation at submit ------------------------------------------------------------------


def test_worker_argument_validation(make_worker):
    w, (h,) = make_worker(3)
    a, b = inputs(seed=14)
    out = shared_array(N)

    def submit_to(worker):
        return lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=worker)

    with pytest.raises(TypeError, match="worker must be an int"):
        w.run(submit_to(True))
    with pytest.raises(TypeError, match="worker must be an int"):
        w.run(submit_to(1.0))
    with pytest.raises(ValueError, match=r"worker must be >= 0, got -1"):
        w.run(submit_to(-1))
    with pytest.raises(ValueError, match=r"worker 7 is not a chip"):
        w.run(submit_to(7))
    with pytest.raises(ValueError, match=r"worker 3 is not a chip"):
        w.run(submit_to(3))
    with pytest.raises(TypeError):
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out]))  # worker is required
    assert not out.any()  # nothing ran
    rep = w.run(submit_to(2))  # the worker is fine afterwards
    assert rep.tasks[0].worker == 2


@pytest.mark.parametrize(
    "rings,message",
    [
        (dict(ring_heap=1000), "RuntimeEnv: ring_heap[0] must be a power of 2 >= 1024 (bytes per ring), got 1000"),
        (dict(ring_task_window=[4, 3, 0, 0]), "RuntimeEnv: ring_task_window[1] must be a power of 2 in [4, 1073741824], got 3"),
        (dict(ring_dep_pool=[0, 0, 2, 0]), "RuntimeEnv: ring_dep_pool[2] must be in [4, 2147483647], got 2"),
    ],
)
def test_task_config_validated_at_submit(make_worker, rings, message):
    w, (h,) = make_worker(1)
    a, b = inputs(seed=15)
    out = shared_array(N)
    with pytest.raises(ValueError) as ei:
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], cfg_with(**rings), worker=0))
    assert str(ei.value) == message
    assert not out.any()
    with pytest.raises(TypeError, match="config must be a CallConfig, a RunConfig or None"):
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], {"ring_heap": 1024}, worker=0))
    w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=0))
    close(out, vadd(a, b))


def test_diagnostics_without_prefix_rejected_at_submit(make_worker):
    w, (h,) = make_worker(1)
    a, b = inputs(seed=16)
    out = shared_array(N)
    with pytest.raises(ValueError, match="output_prefix must be set"):
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], CallConfig(enable_dep_gen=True), worker=0))


def test_plain_numpy_array_rejected_at_submit(make_worker):
    """A numpy array that is not from shared_array: chips cannot see it — a TypeError
    naming the argument, raised at submit (nothing runs)."""
    w, (h,) = make_worker(2)
    a, b = inputs(seed=17)
    out = shared_array(N)
    private = np.ones(N, np.float32)
    for args, idx in (([private, b, out], 0), ([a, b, np.zeros(N, np.float32)], 2)):
        with pytest.raises(TypeError) as ei:
            w.run(lambda o, _a, cfg: o.submit_next_level(h, args, worker=1))
        assert f"argument {idx} is not in shared memory" in str(ei.value)
        assert "shared_array" in str(ei.value)
    assert not out.any()
    # other argument mistakes
    with pytest.raises(ValueError, match="C-contiguous"):
        w.run(lambda o, _a, cfg: o.submit_next_level(h, [a, b, shared_array(2 * N)[::2]], worker=0))
    with pytest.raises(TypeError, match="argument 2: expected a numpy array from taskring.shared_array"):
        w.run(lambda o, _a, cfg: o.submit_next_level(h, [a, b, [0.0] * N], worker=0))
    with pytest.raises(RuntimeFailure, match="the program takes 3 arguments, got 2"):
        w.run(lambda o, _a, cfg: o.submit_next_level(h, [a, b], worker=0))
    with pytest.raises(RuntimeFailure, match="unknown callable handle 9"):
        w.run(lambda o, _a, cfg: o.submit_next_level(9, [a, b, out], worker=0))
    w.run(lambda o, _a, cfg: o.submit_next_level(h, [a, b, out], worker=0))
    close(out, vadd(a, b))


def test_orchestration_exception_propagates_unchanged(make_worker):
    w, (h,) = make_worker(1)

    class Mine(Exception):
        pass

    def orch(o, args, cfg):
        raise Mine("from the L3 orchestration")

    with pytest.raises(Mine, match="from the L3 orchestration"):
        w.run(orch)
    assert w.run(lambda o, args, cfg: None).tasks == []


def test_shared_array_made_after_init_and_orch_args(make_worker):
    w, (h,) = make_worker(2)
    made_late = [shared_array((N,), np.float32) for _ in range(3)]
    assert all(not x.any() for x in made_late)  # zero-filled
    made_late[0][:] = np.arange(N)
    made_late[1][:] = 1.0

    def orch(o, args, cfg):
        x, y, z = args
        o.submit_next_level(h, [x, y, z], worker=1)

    w.run(orch, args=made_late)
    close(made_late[2], vadd(np.arange(N), 1.0))


def test_shared_array_validation():
    a = shared_array((2, 3), np.int32)
    assert a.shape == (2, 3) and a.dtype == np.int32 and a.flags.c_contiguous and not a.any()
    assert shared_array(5).dtype == np.float32
    with pytest.raises(ValueError):
        shared_array((0,))
    with pytest.raises(ValueError):
        shared_array(())
    with pytest.raises(TypeError):
        shared_array(4, np.complex64)
