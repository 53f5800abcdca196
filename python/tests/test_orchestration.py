"""Running real programs on the simulated chip (docs/api.md §2, §3, §6): results against
numpy, per-call ring sizing in the reports, the arena cache, Python kernels, capacity
failures, misuse, and the GIL being released while the runtime waits."""

import os
import threading
import time

import numpy as np
import pytest

import taskring
from taskring import (
    DEFAULT_RING_DEP_POOL,
    DEFAULT_RING_HEAP,
    DEFAULT_RING_TASK_WINDOW,
    IN,
    INOUT,
    OUT,
    SCALAR,
    CallConfig,
    ChipWorker,
    Program,
    RunConfig,
    RuntimeEnv,
    RuntimeFailure,
    TaskArgs,
    TensorArgType,
)

K = taskring.kernels
MiB = 1024 * 1024
DEFAULT_KEY = (DEFAULT_RING_TASK_WINDOW,) * 4 + (DEFAULT_RING_HEAP,) * 4 + (DEFAULT_RING_DEP_POOL,) * 4


@taskring.program(signature=[IN, IN, OUT])
def vector_add(rt, a, b, out):
    with rt.scope():  # depth 1 -> ring 1
        tmp = rt.submit(K.add, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
        rt.submit(K.scale, inputs=[tmp], outputs=[out], scalars=[2.0])


@taskring.program(signature=[IN, IN, OUT])
def plain_add(rt, a, b, out):
    rt.submit(K.add, inputs=[a, b], outputs=[out])


def vec_args(n=64, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return a, b, np.zeros(n, np.float32)


def check_vector_add(a, b, out):
    np.testing.assert_allclose(out, (a + b) * 2.0, rtol=1e-6)


SIZED = RunConfig(ring_task_window=128, ring_heap=8 * MiB, ring_dep_pool=256)
LISTED = RunConfig(ring_task_window=[64, 128, 0, 0], ring_heap=[0, 4 * MiB, 0, 0])


def assert_sized(rs):
    assert rs.task_window == (128,) * 4
    assert rs.heap == (8 * MiB,) * 4
    assert rs.dep_pool == (256,) * 4
    for f in ("ring_task_window", "ring_heap", "ring_dep_pool"):
        assert all(rs.source(f, r) == "call_config" for r in range(4))


def assert_listed(rs):
    assert rs.task_window == (64, 128, DEFAULT_RING_TASK_WINDOW, DEFAULT_RING_TASK_WINDOW)
    assert rs.heap == (DEFAULT_RING_HEAP, 4 * MiB, DEFAULT_RING_HEAP, DEFAULT_RING_HEAP)
    assert rs.dep_pool == (DEFAULT_RING_DEP_POOL,) * 4
    assert [rs.source("ring_task_window", r) for r in range(4)] == ["call_config", "call_config", "default", "default"]
    assert [rs.source("ring_heap", r) for r in range(4)] == ["default", "call_config", "default", "default"]


def assert_default(rs):
    assert rs.key() == DEFAULT_KEY
    assert all(rs.source(f, r) == "default" for f in ("ring_task_window", "ring_heap", "ring_dep_pool") for r in range(4))


# ----- a real program -------------------------------------------------------------------------


def test_run_vector_add():
    a, b, out = vec_args()
    rep = taskring.run(vector_add, a, b, out)
    check_vector_add(a, b, out)
    assert isinstance(rep, taskring.RunReport)
    assert rep.tasks == 2
    assert rep.arena_hit is True  # one-shot: prewarmed with this dispatch's own sizing
    assert rep.elapsed_s >= 0 and rep.arena_build_s >= 0
    assert_default(rep.ring_sizing)
    # both tasks ran in the scope at depth 1 -> ring 1
    assert rep.peak.task_window[1] >= 1
    assert rep.peak.heap[1] >= a.nbytes  # the runtime output of `add`
    assert len(rep.peak.task_window) == len(rep.peak.heap) == len(rep.peak.dep_pool) == 4


@pytest.mark.parametrize("cfg,check", [(SIZED, assert_sized), (LISTED, assert_listed), (None, assert_default)])
def test_run_with_run_config(cfg, check):
    a, b, out = vec_args(seed=1)
    rep = taskring.run(vector_add, a, b, out, config=cfg)
    check_vector_add(a, b, out)
    check(rep.ring_sizing)
    assert rep.arena_hit is True


@pytest.mark.parametrize("cfg,check", [(SIZED, assert_sized), (LISTED, assert_listed), (None, assert_default)])
def test_program_call_with_config(cfg, check):
    a, b, out = vec_args(seed=2)
    rep = vector_add(a, b, out, config=cfg)
    check_vector_add(a, b, out)
    check(rep.ring_sizing)


def test_run_with_call_config():
    a, b, out = vec_args(seed=3)
    cc = CallConfig()
    cc.runtime_env.ring_heap = [0, 2 * MiB, 0, 0]
    rep = taskring.run(vector_add, a, b, out, config=cc)
    check_vector_add(a, b, out)
    assert rep.ring_sizing.heap[1] == 2 * MiB
    assert rep.ring_sizing.source("ring_heap", 1) == "call_config"
    assert rep.ring_sizing.source("ring_heap", 0) == "default"


@pytest.mark.parametrize("platform", ["a2a3sim", "a5sim", "sim"])
def test_sim_aliases_run(platform):
    a, b, out = vec_args(seed=4)
    taskring.run(vector_add, a, b, out, config=RunConfig(platform=platform))
    check_vector_add(a, b, out)


def test_chip_worker_per_call_sizing():
    a, b, out = vec_args(seed=5)
    with ChipWorker() as w:
        assert w.arena_stats.builds == 1  # prewarm=True: the default sizing
        runs = [
            (SIZED, assert_sized),
            (RunConfig(ring_task_window=[64, 128, 0, 0], ring_heap=[0, 4 * MiB, 0, 0]), assert_listed),
            (None, assert_default),
            (SIZED, assert_sized),
            (CallConfig(runtime_env=RuntimeEnv(ring_task_window=[64, 128, 0, 0], ring_heap=[0, 4 * MiB, 0, 0])), assert_listed),
        ]
        hits = []
        for cfg, check in runs:
            out[:] = 0
            rep = w.run(vector_add, a, b, out, config=cfg)
            check_vector_add(a, b, out)
            check(rep.ring_sizing)
            hits.append(rep.arena_hit)
        assert hits == [False, False, True, True, True]
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses, st.evictions) == (3, 3, 2, 0)
        assert len(st.resident) == 3
        assert st.build_s >= 0


def test_chip_worker_env_read_at_every_dispatch(monkeypatch):
    a, b, out = vec_args(seed=6)
    with ChipWorker() as w:
        monkeypatch.setenv("PTO2_RING_TASK_WINDOW", "0,256,0,0")
        rep = w.run(vector_add, a, b, out)
        assert rep.ring_sizing.task_window[1] == 256
        assert rep.ring_sizing.source("ring_task_window", 1) == "env"
        assert rep.ring_sizing.source("ring_task_window", 0) == "default"
        rep = w.run(vector_add, a, b, out, config=RunConfig(ring_task_window=[0, 512, 0, 0]))
        assert rep.ring_sizing.task_window[1] == 512
        assert rep.ring_sizing.source("ring_task_window", 1) == "call_config"
        monkeypatch.delenv("PTO2_RING_TASK_WINDOW")
        rep = w.run(vector_add, a, b, out)
        assert_default(rep.ring_sizing)
        assert rep.arena_hit is True  # the prewarmed default arena
    assert "PTO2_RING_TASK_WINDOW" not in os.environ  # never written by the project
    check_vector_add(a, b, out)


def test_bad_env_var_at_dispatch_warns_and_runs(monkeypatch, capfd):
    a, b, out = vec_args(seed=7)
    monkeypatch.setenv("PTO2_RING_HEAP", "1000")
    capfd.readouterr()
    rep = taskring.run(vector_add, a, b, out)
    check_vector_add(a, b, out)
    assert rep.ring_sizing.heap == (DEFAULT_RING_HEAP,) * 4
    err = capfd.readouterr().err
    assert "PTO2_RING_HEAP" in err and "1000" in err


# ----- arena cache ------------------------------------------------------------------------------


def test_prewarm_then_same_sizing_builds_nothing():
    a, b, out = vec_args(seed=8)
    with ChipWorker(prewarm=SIZED) as w:
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses) == (1, 0, 0)
        for _ in range(3):
            rep = w.run(vector_add, a, b, out, config=SIZED)
            assert rep.arena_hit is True
            assert rep.arena_build_s == 0
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses, st.evictions) == (1, 3, 0, 0)
        check_vector_add(a, b, out)


def test_prewarm_list_and_explicit_default_hits_default_arena():
    a, b, out = vec_args(seed=9)
    explicit_default = RunConfig(ring_task_window=DEFAULT_RING_TASK_WINDOW, ring_heap=DEFAULT_RING_HEAP)
    with ChipWorker(prewarm=[RunConfig(), SIZED]) as w:
        assert w.arena_stats.builds == 2
        assert w.run(vector_add, a, b, out, config=explicit_default).arena_hit is True
        assert w.run(vector_add, a, b, out, config=SIZED).arena_hit is True
        assert w.run(vector_add, a, b, out).arena_hit is True
        assert w.arena_stats.builds == 2


def test_prewarm_false_builds_on_first_dispatch():
    a, b, out = vec_args(seed=10)
    with ChipWorker(prewarm=False) as w:
        assert w.arena_stats.builds == 0
        assert w.arena_stats.resident == []
        assert w.run(vector_add, a, b, out).arena_hit is False
        assert w.run(vector_add, a, b, out).arena_hit is True
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses) == (1, 1, 1)


def test_single_slot_alternating_sizings_rebuilds_every_time():
    a, b, out = vec_args(seed=11)
    c1 = RunConfig(ring_task_window=128)
    c2 = RunConfig(ring_task_window=256)
    with ChipWorker(prewarm=False, arena_cache_slots=1) as w:
        for i, c in enumerate([c1, c2, c1, c2, c1]):
            rep = w.run(vector_add, a, b, out, config=c)
            assert rep.arena_hit is False
            check_vector_add(a, b, out)
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses, st.evictions) == (5, 0, 5, 4)
        assert len(st.resident) == 1
        # the same sizing twice in a row is a hit even with one slot
        assert w.run(vector_add, a, b, out, config=c1).arena_hit is True


def test_lru_eviction_with_two_slots():
    a, b, out = vec_args(seed=12)
    cs = [RunConfig(ring_task_window=w) for w in (64, 128, 256)]
    with ChipWorker(prewarm=False, arena_cache_slots=2) as w:
        for c in cs:
            w.run(vector_add, a, b, out, config=c)
        st = w.arena_stats
        assert (st.builds, st.evictions) == (3, 1)
        assert w.run(vector_add, a, b, out, config=cs[2]).arena_hit is True
        assert w.run(vector_add, a, b, out, config=cs[1]).arena_hit is True
        assert w.run(vector_add, a, b, out, config=cs[0]).arena_hit is False  # evicted


def test_arena_stats_resident_are_keys_most_recent_first():
    a, b, out = vec_args(seed=13)
    with ChipWorker(prewarm=False) as w:
        r1 = w.run(vector_add, a, b, out, config=SIZED)
        r2 = w.run(vector_add, a, b, out)
        assert w.arena_stats.resident == [r2.ring_sizing.key(), r1.ring_sizing.key()]


def test_arena_stats_resident_order_by_value():
    # The same check as above, independent of the container type of a key.
    a, b, out = vec_args(seed=13)
    with ChipWorker(prewarm=False) as w:
        r1 = w.run(vector_add, a, b, out, config=SIZED)
        r2 = w.run(vector_add, a, b, out)
        res = [tuple(k) for k in w.arena_stats.resident]
        assert res == [r2.ring_sizing.key(), r1.ring_sizing.key()]
        w.run(vector_add, a, b, out, config=SIZED)
        assert [tuple(k) for k in w.arena_stats.resident] == [r1.ring_sizing.key(), r2.ring_sizing.key()]


def test_chip_worker_init_close_idempotent():
    a, b, out = vec_args(seed=14)
    w = ChipWorker()
    w.init()
    w.init()
    w.run(vector_add, a, b, out)
    w.close()
    w.close()
    with pytest.raises(RuntimeError):
        w.run(vector_add, a, b, out)
    w.init()
    out[:] = 0
    w.run(vector_add, a, b, out)
    check_vector_add(a, b, out)
    w.close()


# ----- Python kernels ---------------------------------------------------------------------------


def test_python_kernel_gets_numpy_views_and_writes_output():
    seen = []

    @taskring.kernel
    def axpy(x, y, out, alpha, n):
        seen.append((type(x), x.shape, x.dtype, y.dtype, out.flags.writeable, type(alpha), type(n), x.ctypes.data))
        out[...] = alpha * x + y + n

    assert isinstance(axpy, taskring.Kernel)
    assert axpy.name == "axpy"

    @taskring.program(signature=[IN, IN, OUT, SCALAR])
    def prog(rt, x, y, out, alpha):
        with rt.scope():
            rt.submit(axpy, inputs=[x, y], outputs=[out], scalars=[alpha, 3])

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.ones((3, 4), np.float32)
    out = np.zeros((3, 4), np.float32)
    rep = prog(x, y, out, 0.5)
    np.testing.assert_allclose(out, 0.5 * x + y + 3)
    assert rep.tasks == 1
    (tx, shape, dtx, dty, writeable, ta, tn, ptr) = seen[0]
    assert tx is np.ndarray and shape == (3, 4) and dtx == np.float32 and dty == np.float32
    assert writeable
    assert ta is float and tn is int
    assert ptr == x.ctypes.data  # host tensors are passed without copying


def test_python_kernel_argument_order_and_dtypes():
    got = []

    @taskring.kernel(core="aic")
    def k(*args):
        got.append([(a.dtype.name, a.shape) if isinstance(a, np.ndarray) else a for a in args])
        args[1][...] += 1  # inout
        args[2][...] = 7  # output

    assert k.core == "aic"

    @taskring.program(signature=[IN, INOUT, OUT, IN])
    def prog(rt, a, io, out, nd):
        rt.submit(k, outputs=[out], no_dep=[nd], scalars=[2.5, -1], inputs=[a], inouts=[io])

    a = np.ones((2, 3), np.float16)
    io = np.zeros(4, np.int32)
    out = np.zeros(5, np.int64)
    nd = np.zeros(2, np.uint8)
    taskring.run(prog, a, io, out, nd)
    assert got == [[("float16", (2, 3)), ("int32", (4,)), ("int64", (5,)), ("uint8", (2,)), 2.5, -1]]
    assert (io == 1).all() and (out == 7).all()


def test_kernel_bad_core():
    with pytest.raises(ValueError):
        taskring.kernel(lambda x: None, core="gpu")


def test_python_kernel_raises_fails_run_and_worker_survives():
    @taskring.kernel
    def exploding_kernel(x, out):
        raise ValueError("boom from the kernel")

    ran = []

    @taskring.kernel
    def after(x, out):
        ran.append(1)

    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        with rt.scope():
            t = rt.submit(exploding_kernel, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)])
            rt.submit(after, inputs=[t.outputs[0]], outputs=[out])

    x = np.ones(8, np.float32)
    o = np.zeros(8, np.float32)
    a, b, out = vec_args(seed=15)
    with ChipWorker() as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(prog, x, o)
        e = ei.value
        assert isinstance(e, RuntimeError)
        assert e.code == 200
        assert "exploding_kernel" in str(e)
        assert "boom from the kernel" in str(e)
        assert str(e) == f"{e.name} (code {e.code}) on ring {e.ring}: {e.description}. Hint: {e.hint}"
        assert ran == []  # dependants never run
        # the next run on the same worker works
        rep = w.run(vector_add, a, b, out)
        check_vector_add(a, b, out)
        assert rep.tasks == 2
        w.run(Program(lambda rt, x, out: rt.submit(K.copy, inputs=[x], outputs=[out]), [IN, OUT]), x, o)
        assert (o == 1).all()


# ----- capacity failures --------------------------------------------------------------------------


@taskring.program(signature=[IN, OUT])
def eight_in_one_scope(rt, x, out):
    with rt.scope():
        for _ in range(7):
            rt.submit(K.copy, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)])
        rt.submit(K.copy, inputs=[x], outputs=[out])


def test_scope_deadlock_code_1():
    x = np.ones(16, np.float32)
    out = np.zeros(16, np.float32)
    t0 = time.monotonic()
    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(eight_in_one_scope, x, out, config=RunConfig(ring_task_window=4))
    assert time.monotonic() - t0 < 5  # reported, not hung on
    e = ei.value
    assert e.code == 1
    assert e.name == "SCOPE_DEADLOCK"
    assert e.ring == 1
    assert e.configured == 4
    assert e.needed is not None and e.needed > 4 and (e.needed & (e.needed - 1)) == 0
    assert str(e).startswith("SCOPE_DEADLOCK (code 1) on ring 1: ")
    # the same program fits with a window of 16
    taskring.run(eight_in_one_scope, x, out, config=RunConfig(ring_task_window=16))
    assert (out == 1).all()


@taskring.program(signature=[IN, OUT])
def big_output(rt, x, out):
    with rt.scope():
        t = rt.submit(K.fill, outputs=[rt.spec((8192,), "float32")], scalars=[1.0])  # 32 KiB
        rt.submit(K.copy, inputs=[t.outputs[0][0:1].view((16,))], outputs=[out])


def test_heap_deadlock_code_2():
    x = np.ones(16, np.float32)
    out = np.zeros(16, np.float32)
    with ChipWorker() as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(big_output, x, out, config=RunConfig(ring_heap=1024))
        e = ei.value
        assert e.code == 2
        assert e.name == "HEAP_RING_DEADLOCK"
        assert e.ring == 1
        assert e.configured == 1024
        # 32 KiB for this task's outputs is a lower bound of what holds the run: said in
        # the description, not given as `needed`
        assert e.needed is None and "a ring_heap of at least 32768 bytes is needed" in e.description
        assert str(e) == f"{e.name} (code {e.code}) on ring {e.ring}: {e.description}. Hint: {e.hint}"
        # same worker, enough heap
        w.run(big_output, x, out, config=RunConfig(ring_heap=[0, 64 * 1024, 0, 0]))
        assert (out == 1).all()


# ----- misuse -------------------------------------------------------------------------------------


def test_wrong_tensor_count_to_builtin():
    @taskring.program(signature=[IN, IN, OUT])
    def bad(rt, a, b, out):
        rt.submit(K.add, inputs=[a], outputs=[out])

    a, b, out = vec_args(seed=16)
    # validated at submit: an orchestration-API argument error (INVALID_ARGS, code 5)
    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(bad, a, b, out)
    assert ei.value.code == 5
    assert "'add'" in str(ei.value)
    assert (out == 0).all()


def test_wrong_dtype_to_builtin():
    a, b, out = vec_args(seed=17)
    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(plain_add, a, b.astype(np.int32), out)
    assert ei.value.code == 5
    assert "dtype" in str(ei.value)


def test_unsupported_host_dtype():
    a, b, out = vec_args(seed=18)
    with pytest.raises(TypeError, match="float64"):
        taskring.run(plain_add, a.astype(np.float64), b, out)


def test_non_contiguous_array():
    a, b, out = vec_args(n=64, seed=19)
    strided = np.zeros(128, np.float32)[::2]
    assert not strided.flags.c_contiguous
    with pytest.raises(ValueError, match="C-contiguous"):
        taskring.run(plain_add, strided, b, out)
    with pytest.raises(ValueError, match="C-contiguous"):
        taskring.run(plain_add, a, b, np.zeros((64, 2), np.float32)[:, 0])


def test_list_instead_of_array():
    a, b, out = vec_args(seed=20)
    with pytest.raises(TypeError):
        taskring.run(plain_add, list(a), b, out)
    with pytest.raises(TypeError):
        plain_add(a, b, out.tolist())


def test_wrong_number_of_program_args():
    a, b, out = vec_args(seed=21)
    with pytest.raises(TypeError):
        taskring.run(plain_add, a, b)
    with pytest.raises(TypeError):
        plain_add(a, b, out, out)
    with ChipWorker(prewarm=False) as w:
        with pytest.raises(TypeError):
            w.run(plain_add, a)
        assert w.arena_stats.builds == 0  # nothing dispatched


def test_invalid_config_rejected_before_dispatch():
    a, b, out = vec_args(seed=22)
    with ChipWorker(prewarm=False) as w:
        with pytest.raises(ValueError, match="output_prefix must be set"):
            w.run(vector_add, a, b, out, config=CallConfig(enable_dep_gen=True))
        bad = CallConfig()
        bad.runtime_env.ring_heap = [0, 1000, 0, 0]
        with pytest.raises(ValueError, match=r"RuntimeEnv: ring_heap\[1\]"):
            w.run(vector_add, a, b, out, config=bad)
        with pytest.raises(ValueError, match=r"RuntimeEnv: ring_heap\[1\]"):
            taskring.run(vector_add, a, b, out, config=bad)
        with pytest.raises(TypeError):
            w.run(vector_add, a, b, out, config="big")
        assert w.arena_stats.builds == 0
        assert (out == 0).all()


@pytest.mark.parametrize("platform", ["a2a3", "a5"])
def test_real_platform_raises_at_dispatch(platform):
    a, b, out = vec_args(seed=23)
    cfg = RunConfig(platform=platform)  # accepted by RunConfig
    for call in (
        lambda: taskring.run(vector_add, a, b, out, config=cfg),
        lambda: vector_add(a, b, out, config=cfg),
    ):
        with pytest.raises(RuntimeError) as ei:
            call()
        assert not isinstance(ei.value, RuntimeFailure)
        assert "sim" in str(ei.value) and "only" in str(ei.value)
    with ChipWorker() as w:
        with pytest.raises(RuntimeError, match="sim"):
            w.run(vector_add, a, b, out, config=cfg)
        w.run(vector_add, a, b, out)
    check_vector_add(a, b, out)


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


def test_orchestrator_unusable_after_run():
    kept = []

    @taskring.program(signature=[IN])
    def prog(rt, x):
        kept.append((rt, x))

    taskring.run(prog, np.zeros(4, np.float32))
    rt, x = kept[0]
    with pytest.raises(RuntimeError):
        rt.submit(K.noop, inputs=[x])


def test_gil_released_while_runtime_waits():
    """A chain of Python kernels through ring_task_window=4: the orchestration blocks
    for a slot while the kernels (which need the GIL) have to run. If the runtime kept
    the GIL while waiting, this would deadlock (the watchdog fixture would kill it)."""

    @taskring.kernel
    def inc(x, out):
        time.sleep(0.001)
        out[...] = x + 1

    @taskring.program(signature=[IN, OUT])
    def chain(rt, x, out):
        prev = x
        for _ in range(24):
            with rt.scope():
                rt.submit(inc, inputs=[prev], outputs=[out])
            prev = out

    x = np.zeros(8, np.float32)
    out = np.zeros(8, np.float32)
    t0 = time.monotonic()
    rep = taskring.run(chain, x, out, config=RunConfig(ring_task_window=4))
    assert time.monotonic() - t0 < 20
    np.testing.assert_array_equal(out, 24)
    assert rep.tasks == 24
    assert rep.ring_sizing.task_window == (4, 4, 4, 4)
    assert rep.peak.task_window[1] <= 3  # at most window-1 live


def test_gil_released_other_python_threads_progress():
    """While a run waits on a slow kernel, another Python thread keeps running."""
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.005)

    @taskring.kernel
    def nap(x, out):
        time.sleep(0.2)

    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        rt.submit(nap, inputs=[x], outputs=[out])

    th = threading.Thread(target=ticker)
    th.start()
    try:
        time.sleep(0.02)
        before = len(ticks)
        taskring.run(prog, np.zeros(2, np.float32), np.zeros(2, np.float32))
        during = len(ticks) - before
    finally:
        stop.set()
        th.join()
    assert during >= 5


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


def test_heap_full_by_one_scope_is_reported():
    @taskring.program(signature=[IN])
    def prog(rt, x):
        with rt.scope():
            for _ in range(5):
                rt.submit(K.fill, outputs=[rt.spec((256,), "float32")], scalars=[1.0])  # 1 KiB each

    t0 = time.monotonic()
    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(prog, np.zeros(4, np.float32), config=RunConfig(ring_heap=4096))
    assert time.monotonic() - t0 < 5
    e = ei.value
    assert (e.code, e.name, e.ring, e.configured) == (2, "HEAP_RING_DEADLOCK", 1, 4096)
    assert e.needed is None and "ring_heap of at least 8192 bytes would be needed" in e.description


def test_dep_pool_overflow_code_4():
    # Producers are builtin busy-waits (no GIL needed): all six are still pending or
    # running when the seventh task asks for six dependency entries.
    @taskring.program(signature=[IN])
    def prog(rt, x):
        with rt.scope():
            ts = [rt.submit(K.busy_wait, scalars=[20_000_000]) for _ in range(6)]
            rt.submit(K.noop, inputs=[x], deps=[t.id for t in ts])

    with ChipWorker() as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(prog, np.zeros(4, np.float32), config=RunConfig(ring_dep_pool=4))
        e = ei.value
        assert (e.code, e.name, e.ring, e.configured) == (4, "DEP_POOL_OVERFLOW", 1, 4)
        assert e.needed is None and "ring_dep_pool of at least 6 entries" in e.description, e.description
        rep = w.run(prog, np.zeros(4, np.float32), config=RunConfig(ring_dep_pool=64))
        assert rep.tasks == 7


FAILED_RUN_WITH_PYTHON_KERNEL_ON_A_CORE = r"""
import sys, threading, time
import numpy as np
import taskring

started = threading.Event()

@taskring.kernel
def slow(x):
    started.set()
    time.sleep(0.1)  # releases the GIL; needs it back to return

@taskring.program(signature=[taskring.IN])
def prog(rt, x):
    rt.submit(slow, inputs=[x])
    started.wait(5)  # the kernel is now on a core
    raise KeyError("orchestration fails while a Python kernel runs")

with taskring.ChipWorker() as w:
    try:
        w.run(prog, np.zeros(4, np.float32))
    except KeyError:
        pass
    w.run(taskring.Program(lambda rt, x: None, [taskring.IN]), np.zeros(4, np.float32))
print("OK")
"""


def test_failed_run_does_not_deadlock_with_python_kernel_on_a_core():
    import subprocess
    import sys

    try:
        r = subprocess.run([sys.executable, "-c", FAILED_RUN_WITH_PYTHON_KERNEL_ON_A_CORE], capture_output=True, text=True, timeout=6)
    except subprocess.TimeoutExpired:
        pytest.fail("the failed run deadlocked (no return within 6 s)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "OK"


def test_failing_task_error_names_kernel_and_task_id():
    ids = []

    @taskring.kernel
    def broken_kernel(out):
        raise RuntimeError("no")

    @taskring.program(signature=[OUT])
    def prog(rt, out):
        with rt.scope():
            rt.submit(K.fill, outputs=[rt.spec((4,), "float32")], scalars=[0.0])
            ids.append(rt.submit(broken_kernel, outputs=[out]).id)

    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(prog, np.zeros(4, np.float32))
    text = str(ei.value)
    tid = ids[0]
    assert "broken_kernel" in text
    assert (
        f"ring={tid >> 32}, local={tid & 0xFFFFFFFF}" in text or hex(tid) in text or str(tid) in text
    ), text


def test_builtin_kernels_against_numpy():
    @taskring.program(signature=[IN, IN, IN] + [OUT] * 9 + [INOUT] + [OUT] * 3)
    def prog(rt, a, b, m, o_copy, o_fill, o_add, o_sub, o_mul, o_scale, o_exp, o_mm, o_soft, o_acc, o_rmax, o_rsum, o_noop):
        rt.submit(K.noop, inputs=[a], outputs=[o_noop])
        rt.submit(K.busy_wait, scalars=[100])
        rt.submit(K.copy, inputs=[a], outputs=[o_copy])
        rt.submit(K.fill, outputs=[o_fill], scalars=[3.5])
        rt.submit(K.add, inputs=[a, b], outputs=[o_add])
        rt.submit(K.sub, inputs=[a, b], outputs=[o_sub])
        rt.submit(K.mul, inputs=[a, b], outputs=[o_mul])
        rt.submit(K.scale, inputs=[a], outputs=[o_scale], scalars=[-2.0])
        rt.submit(K.exp, inputs=[a], outputs=[o_exp])
        rt.submit(K.matmul, inputs=[a, m], outputs=[o_mm])
        rt.submit(K.softmax_rows, inputs=[a], outputs=[o_soft])
        rt.submit(K.matmul_acc, inputs=[a, m], inouts=[o_acc])
        rt.submit(K.rowmax, inputs=[a], outputs=[o_rmax])
        rt.submit(K.rowsum, inputs=[a], outputs=[o_rsum])

    rng = np.random.default_rng(42)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal((4, 8)).astype(np.float32)
    m = rng.standard_normal((8, 3)).astype(np.float32)
    outs = [np.zeros((4, 8), np.float32) for _ in range(7)] + [np.zeros((4, 3), np.float32), np.zeros((4, 8), np.float32)]
    acc = np.ones((4, 3), np.float32)
    rmax, rsum, onoop = np.zeros(4, np.float32), np.zeros(4, np.float32), np.full(4, 9, np.float32)
    rep = taskring.run(prog, a, b, m, *outs, acc, rmax, rsum, onoop)
    assert rep.tasks == 14
    o_copy, o_fill, o_add, o_sub, o_mul, o_scale, o_exp, o_mm, o_soft = outs
    close = lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
    close(o_copy, a)
    close(o_fill, np.full_like(a, 3.5))
    close(o_add, a + b)
    close(o_sub, a - b)
    close(o_mul, a * b)
    close(o_scale, -2.0 * a)
    close(o_exp, np.exp(a))
    close(o_mm, a @ m)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    close(o_soft, e / e.sum(axis=1, keepdims=True))
    close(acc, 1 + a @ m)
    close(rmax, a.max(axis=1))
    close(rsum, a.sum(axis=1))
    assert (onoop == 9).all()


def test_builtin_shape_mismatch_rejected_at_submit():
    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        rt.submit(K.copy, inputs=[x], outputs=[out])

    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(prog, np.zeros(4, np.float32), np.zeros(8, np.float32))
    assert ei.value.code == 5 and "copy" in str(ei.value)


def test_data_types():
    assert [d.value for d in taskring.DataType] == ["float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8"]

    @taskring.kernel
    def plus_one(x, out):
        out[...] = x + 1

    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        rt.submit(plus_one, inputs=[x], outputs=[out])

    for dt in ("float32", "float16", "int32", "int64", "int8", "uint8"):
        x = np.arange(6, dtype=dt).reshape(2, 3)
        out = np.zeros_like(x)
        taskring.run(prog, x, out)
        np.testing.assert_array_equal(out, x + 1)


def test_shared_array():
    a = taskring.shared_array((2, 8), "float32")
    assert isinstance(a, np.ndarray) and a.shape == (2, 8) and a.dtype == np.float32
    a[...] = 1
    b = taskring.shared_array((2, 8), "float32")
    b[...] = 2
    out = taskring.shared_array((2, 8), "float32")
    taskring.run(vector_add, a, b, out)
    np.testing.assert_array_equal(out, 6)


def test_tensor_handles_do_not_outlive_their_run():
    """A Tensor handle kept past its run is refused (its memory belongs to that run)."""
    kept = []

    @taskring.program(signature=[taskring.IN, taskring.OUT])
    def keep(rt, x, out):
        t = rt.submit(taskring.kernels.copy, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)]).outputs[0]
        kept.append(t)
        kept.append(x)
        rt.submit(taskring.kernels.copy, inputs=[t], outputs=[out])

    @taskring.program(signature=[taskring.IN, taskring.OUT])
    def reuse(rt, x, out):
        rt.submit(taskring.kernels.copy, inputs=[kept[0]], outputs=[out])

    @taskring.program(signature=[taskring.IN, taskring.OUT])
    def reuse_param(rt, x, out):
        rt.submit(taskring.kernels.copy, inputs=[kept[1]], outputs=[out])

    x = np.arange(8, dtype=np.float32)
    out = np.zeros_like(x)
    with taskring.ChipWorker() as w:
        w.run(keep, x, out)
        assert np.array_equal(out, x)
        for prog in (reuse, reuse_param):
            with pytest.raises(ValueError, match="belongs to another run"):
                w.run(prog, x, out)
        w.run(keep, x, out)  # still usable
