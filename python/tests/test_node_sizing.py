"""L3: a host with several chips (docs/api.md §4, §2 `shared_array`, §6 errors at L3).

Low level (`Worker(level=3)`, the L3 orchestrator `o`, `RunHandle`) with chips as child
processes and as threads (`chip_processes=True/False`, same protocol), then the
PyPTO-style high level (`DistributedConfig`, `DistributedProgram`, `DistributedWorker`).

What is checked: every L2 task travels with its own `CallConfig` and the chip reports the
sizing it resolved from it (then its own env, then defaults); the run-level config is
never applied implicitly; dependencies between L2 tasks are inferred from tensors; chip
failures and chip death reach the caller as `chip {worker} (pid {pid}): ...`; the chips'
arena caches; argument and config validation at submit."""

import dataclasses
import gc
import os
import re
import signal
import sys
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
    OUT,
    SCALAR,
    CallConfig,
    DistributedConfig,
    DistributedProgram,
    DistributedWorker,
    RunConfig,
    RunHandle,
    RuntimeFailure,
    Worker,
    shared_array,
)

K = taskring.kernels
MiB = 1024 * 1024
N = 64
FIELDS = ("ring_task_window", "ring_heap", "ring_dep_pool")
DEFAULT_KEY = (DEFAULT_RING_TASK_WINDOW,) * 4 + (DEFAULT_RING_HEAP,) * 4 + (DEFAULT_RING_DEP_POOL,) * 4


# ----- programs the chips run ------------------------------------------------------------------


@taskring.program(signature=[IN, IN, OUT])
def vector_add(rt, a, b, out):
    """out = 2 * (a + b), through a runtime temporary in a scope (ring 1)."""
    with rt.scope():
        tmp = rt.submit(K.add, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
        rt.submit(K.scale, inputs=[tmp], outputs=[out], scalars=[2.0])


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


@taskring.program(signature=[IN, OUT, SCALAR])
def scaled(rt, a, out, alpha):
    rt.submit(K.scale, inputs=[a], outputs=[out], scalars=[alpha])


@taskring.kernel
def kaboom_kernel(a, out):
    raise ZeroDivisionError("kaboom inside the chip")


@taskring.program(signature=[IN, OUT])
def failing(rt, a, out):
    rt.submit(kaboom_kernel, inputs=[a], outputs=[out])


@taskring.program(signature=[IN, OUT])
def failing_orchestration(rt, a, out):
    raise LookupError("the chip's own orchestration failed")


@taskring.kernel
def _mark_then_sleep(a, out):
    out[0] = 1.0  # tells the host (through shared memory) that the task is running
    time.sleep(2.0)


@taskring.program(signature=[IN, OUT])
def long_running(rt, a, out):
    rt.submit(_mark_then_sleep, inputs=[a], outputs=[out])


@taskring.kernel
def _exit_process(a, out):
    os._exit(3)


@taskring.program(signature=[IN, OUT])
def exits(rt, a, out):
    rt.submit(_exit_process, inputs=[a], outputs=[out])


# ----- helpers ---------------------------------------------------------------------------------


def sarr(values, dtype=np.float32):
    a = shared_array(len(values), dtype)
    a[:] = values
    return a


def inputs(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return sarr(rng.standard_normal(n).astype(np.float32)), sarr(rng.standard_normal(n).astype(np.float32))


def vadd(a, b):
    return (np.asarray(a) + np.asarray(b)) * 2.0


def close(x, y):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def sources(rs, field):
    return [rs.source(field, r) for r in range(4)]


def cfg_with(**rings):
    c = CallConfig()
    for k, v in rings.items():
        setattr(c.runtime_env, k, v)
    return c


def reaped(pid):
    """True when `pid` is no longer our (unreaped) child."""
    try:
        return os.waitpid(pid, os.WNOHANG) != (0, 0)
    except ChildProcessError:
        return True


@pytest.fixture(params=[True, False], ids=["chip-procs", "chip-threads"])
def chip_processes(request):
    return request.param


@pytest.fixture
def make_worker(chip_processes):
    """make(n_chips, programs, prewarm=None, **kw) -> (worker, handles); closed at teardown."""
    made = []

    def make(n=3, programs=(vector_add,), prewarm=None, **kw):
        w = Worker(level=3, device_ids=list(range(n)), chip_processes=chip_processes, **kw)
        handles = [w.register(p) for p in programs]
        w.init(prewarm_config=prewarm)
        made.append(w)
        return w, handles

    yield make
    for w in made:
        w.close()


# ----- per-task CallConfig ---------------------------------------------------------------------


def test_each_l2_task_carries_its_own_call_config(make_worker, chip_processes):
    w, (h,) = make_worker(3)
    assert len(w.pids) == 3
    if chip_processes:
        assert len(set(w.pids)) == 3 and os.getpid() not in w.pids
    else:
        assert w.pids == (os.getpid(),) * 3
    ab = [inputs(seed=i) for i in range(3)]
    outs = [shared_array(N) for _ in range(3)]
    configs = [cfg_with(ring_task_window=[128, 64, 32, 16]), cfg_with(ring_task_window=16), CallConfig()]
    ids = []

    def orch(o, args, cfg):
        assert o.chips == 3
        for i in range(3):
            ids.append(o.submit_next_level(h, [ab[i][0], ab[i][1], outs[i]], configs[i], worker=i))

    rep = w.run(orch)
    assert isinstance(rep, taskring.NodeRunReport)
    assert rep.elapsed_s >= 0
    assert len(ids) == 3 and len(set(ids)) == 3 and all(isinstance(i, int) for i in ids)
    assert len(rep.tasks) == 3
    for i, t in enumerate(rep.tasks):  # in submission order
        assert isinstance(t, taskring.ChipTaskReport)
        assert t.worker == i
        assert t.callable == h
        assert t.error is None
        assert t.elapsed_s >= 0
        assert len(t.peak.task_window) == len(t.peak.heap) == len(t.peak.dep_pool) == 4
        assert t.peak.task_window[1] >= 1  # the program's tasks ran in its scope (ring 1)
        close(outs[i], vadd(*ab[i]))
    s0, s1, s2 = (t.ring_sizing for t in rep.tasks)
    assert s0.task_window == (128, 64, 32, 16)
    assert sources(s0, "ring_task_window") == ["call_config"] * 4
    assert s1.task_window == (16,) * 4
    assert sources(s1, "ring_task_window") == ["call_config"] * 4
    assert s2.key() == DEFAULT_KEY
    for s in (s0, s1, s2):
        assert s.heap == (DEFAULT_RING_HEAP,) * 4 and s.dep_pool == (DEFAULT_RING_DEP_POOL,) * 4
        assert sources(s, "ring_heap") == sources(s, "ring_dep_pool") == ["default"] * 4
    assert sources(s2, "ring_task_window") == ["default"] * 4
    # the configs handed to submit are untouched
    assert configs[0].runtime_env.ring_task_window == [128, 64, 32, 16]
    assert configs[2] == CallConfig()


def test_run_level_config_is_not_applied_to_chip_tasks(make_worker):
    w, (h,) = make_worker(2)
    a, b = inputs(seed=1)
    out0, out1 = shared_array(N), shared_array(N)
    seen = []

    def orch(o, args, cfg):
        seen.append(cfg)
        o.submit_next_level(h, [a, b, out0], worker=0)  # config=None: defaults
        o.submit_next_level(h, [a, b, out1], CallConfig(), worker=1)

    rep = w.run(orch, config=RunConfig(ring_task_window=8, ring_heap=1 * MiB))
    # the orchestration sees the run config (it sizes the node's own rings) ...
    assert isinstance(seen[0], CallConfig)
    assert seen[0].runtime_env.ring_task_window == [8] * 4
    assert seen[0].runtime_env.ring_heap == [MiB] * 4
    # ... but the chips resolve the tasks' own (default) configs
    for t in rep.tasks:
        assert t.ring_sizing.task_window == (16384,) * 4
        assert t.ring_sizing.key() == DEFAULT_KEY
        assert sources(t.ring_sizing, "ring_task_window") == ["default"] * 4
    close(out0, vadd(a, b))
    close(out1, vadd(a, b))

    # passing the run config on explicitly is what makes it reach a chip
    rep = w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out0], cfg, worker=1), config=RunConfig(ring_task_window=8))
    assert rep.tasks[0].ring_sizing.task_window == (8,) * 4
    assert sources(rep.tasks[0].ring_sizing, "ring_task_window") == ["call_config"] * 4


def test_task_config_is_copied_at_submit(make_worker):
    w, (h,) = make_worker(2)
    a, b = inputs(seed=2)
    outs = [shared_array(N), shared_array(N)]
    c = cfg_with(ring_task_window=128)

    def orch(o, args, cfg):
        o.submit_next_level(h, [a, b, outs[0]], c, worker=0)
        c.runtime_env.ring_task_window = 256  # after the first submit: must not reach it
        o.submit_next_level(h, [a, b, outs[1]], c, worker=1)

    rep = w.run(orch)
    assert rep.tasks[0].ring_sizing.task_window == (128,) * 4
    assert rep.tasks[1].ring_sizing.task_window == (256,) * 4


def test_run_config_accepted_as_task_config(make_worker):
    w, (h,) = make_worker(1)
    a, b = inputs(seed=3)
    out = shared_array(N)
    rc = RunConfig(ring_heap=[0, 4 * MiB, 0, 0], ring_dep_pool=256)
    rep = w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], rc, worker=0))
    rs = rep.tasks[0].ring_sizing
    assert rs.heap == (DEFAULT_RING_HEAP, 4 * MiB, DEFAULT_RING_HEAP, DEFAULT_RING_HEAP)
    assert sources(rs, "ring_heap") == ["default", "call_config", "default", "default"]
    assert rs.dep_pool == (256,) * 4
    close(out, vadd(a, b))


# ----- per-chip environment ------------------------------------------------------------------


def test_chip_env_precedence(make_worker, monkeypatch, chip_processes):
    monkeypatch.setenv("PTO2_RING_HEAP", str(2 * MiB))
    w, (h,) = make_worker(2)
    if chip_processes:
        # chip processes inherited the variable at fork; the host's env no longer matters
        monkeypatch.delenv("PTO2_RING_HEAP")
    a, b = inputs(seed=4)
    out0, out1 = shared_array(N), shared_array(N)

    def orch(o, args, cfg):
        o.submit_next_level(h, [a, b, out0], CallConfig(), worker=0)  # ring_heap 0 -> env
        o.submit_next_level(h, [a, b, out1], cfg_with(ring_heap=[0, 4 * MiB, 0, 0]), worker=1)

    rep = w.run(orch)
    s0, s1 = rep.tasks[0].ring_sizing, rep.tasks[1].ring_sizing
    assert s0.heap == (2 * MiB,) * 4
    assert sources(s0, "ring_heap") == ["env"] * 4
    assert sources(s0, "ring_task_window") == ["default"] * 4
    assert s1.heap == (2 * MiB, 4 * MiB, 2 * MiB, 2 * MiB)
    assert sources(s1, "ring_heap") == ["env", "call_config", "env", "env"]
    close(out0, vadd(a, b))
    close(out1, vadd(a, b))


def test_chip_process_env_is_its_own(monkeypatch):
    """A chip process reads its own environment (inherited at fork) at every dispatch: a
    variable set in the host after init() does not reach it; a per-ring list works."""
    monkeypatch.setenv("PTO2_RING_TASK_WINDOW", "0,256,0,0")
    with Worker(level=3, device_ids=[0], chip_processes=True) as w:
        h = w.register(vector_add)
        w.init()
        monkeypatch.setenv("PTO2_RING_HEAP", str(2 * MiB))  # after the fork
        a, b = inputs(seed=5)
        out = shared_array(N)
        rep = w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=0))
        rs = rep.tasks[0].ring_sizing
        assert rs.task_window == (DEFAULT_RING_TASK_WINDOW, 256, DEFAULT_RING_TASK_WINDOW, DEFAULT_RING_TASK_WINDOW)
        assert sources(rs, "ring_task_window") == ["default", "env", "default", "default"]
        assert rs.heap == (DEFAULT_RING_HEAP,) * 4
        assert sources(rs, "ring_heap") == ["default"] * 4
        close(out, vadd(a, b))


def test_chip_thread_env_read_at_every_dispatch(monkeypatch):
    with Worker(level=3, device_ids=[0], chip_processes=False) as w:
        h = w.register(vector_add)
        w.init()
        a, b = inputs(seed=6)
        out = shared_array(N)
        run = lambda: w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=0)).tasks[0].ring_sizing
        monkeypatch.setenv("PTO2_RING_DEP_POOL", "512")
        assert run().dep_pool == (512,) * 4
        monkeypatch.delenv("PTO2_RING_DEP_POOL")
        assert run().key() == DEFAULT_KEY


def test_bad_env_in_chip_warns_and_runs(monkeypatch, capfd, chip_processes):
    # A value no other test uses: a bad value is reported once per process (and a chip
    # forked after the host reported it inherits that), so look at everything printed.
    bad = f"abc-{chip_processes}-{os.getpid()}"
    monkeypatch.setenv("PTO2_RING_HEAP", bad)
    with Worker(level=3, device_ids=[0], chip_processes=chip_processes) as w:
        h = w.register(vector_add)
        w.init()
        a, b = inputs(seed=7)
        out = shared_array(N)
        early = capfd.readouterr().err
        rep = w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=0))
        rep2 = w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=0))
        assert rep.tasks[0].ring_sizing.heap == (DEFAULT_RING_HEAP,) * 4 == rep2.tasks[0].ring_sizing.heap
        close(out, vadd(a, b))
    err = early + capfd.readouterr().err
    assert "PTO2_RING_HEAP" in err and bad in err
    assert err.count(bad) <= 2, err  # once in the host, at most once more in the chip process


# ----- dependencies between L2 tasks ---------------------------------------------------------


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


# ----- chip failures and chip death (§6) -----------------------------------------------------


# (the unraisable warning: see test_chip_thread_orchestration_error_does_not_leak_orchestrator)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("program,needle", [(failing, "ZeroDivisionError: kaboom inside the chip"), (failing_orchestration, "LookupError: the chip's own orchestration failed")])
@pytest.mark.parametrize("pause", [False, True], ids=["fast", "failed-before-next-submit"])
def test_chip_task_failure_reaches_caller(make_worker, program, needle, pause):
    w, (h, hf) = make_worker(3, programs=(vector_add, program))
    a, b = inputs(seed=18)
    mid, dependant_out, other_out = shared_array(N), shared_array(N), shared_array(N)
    dependant_out[:] = -7.0

    def orch(o, args, cfg):
        o.submit_next_level(hf, [a, mid], worker=1)
        if pause:
            # The chip fails before the next submit, which then re-raises the run's
            # failure inside the orchestration: the caller still gets the chip's error.
            time.sleep(0.3)
        o.submit_next_level(h, [mid, b, dependant_out], worker=2)  # depends on the failed task

    with pytest.raises(RuntimeError) as ei:
        w.run(orch)
    text = str(ei.value)
    assert text.startswith(f"chip 1 (pid {w.pids[1]}): "), text
    assert needle in text
    if program is failing:
        assert "kaboom_kernel" in text  # names the kernel
    assert (np.asarray(dependant_out) == -7.0).all()  # the dependant never ran
    # the next run works, on the same chip too
    rep = w.run(lambda o, args, cfg: [o.submit_next_level(h, [a, b, other_out], worker=i) for i in (1, 0)])
    assert [t.error for t in rep.tasks] == [None, None]
    close(other_out, vadd(a, b))


def test_chip_failure_through_run_handle(make_worker):
    w, (h, hf) = make_worker(2, programs=(vector_add, failing))
    a, _ = inputs(seed=19)
    out = shared_array(N)
    hd = w.submit(lambda o, args, cfg: o.submit_next_level(hf, [a, out], worker=0))
    assert hd.wait(10)
    with pytest.raises(RuntimeError, match=r"^chip 0 \(pid \d+\): "):
        hd.result()


def test_killed_chip_process():
    w = Worker(level=3, device_ids=[0, 1, 2], chip_processes=True)
    h = w.register(vector_add)
    w.init()
    a, b = inputs(seed=20)
    outs = [shared_array(N) for _ in range(3)]
    w.run(lambda o, args, cfg: [o.submit_next_level(h, [a, b, outs[i]], worker=i) for i in range(3)])
    pids = w.pids
    os.kill(pids[1], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as ei:
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, outs[1]], worker=1))
    assert time.monotonic() - t0 < 1.0
    text = str(ei.value)
    assert text.startswith(f"chip 1 (pid {pids[1]}): "), text
    assert re.search(r"signal 9\b|SIGKILL", text), text
    # it stays dead, with the same report
    with pytest.raises(RuntimeError, match=rf"^chip 1 \(pid {pids[1]}\): .*(signal 9|SIGKILL)"):
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, outs[1]], worker=1))
    with pytest.raises(RuntimeError, match=r"^chip 1 "):
        w.arena_stats(1)
    # the other chips keep working
    for o_ in outs:
        o_[:] = 0
    rep = w.run(lambda o, args, cfg: [o.submit_next_level(h, [a, b, outs[i]], worker=i) for i in (0, 2)])
    assert [t.worker for t in rep.tasks] == [0, 2]
    close(outs[0], vadd(a, b))
    close(outs[2], vadd(a, b))
    assert not outs[1].any()
    assert w.arena_stats(2).builds >= 1
    # close is clean and idempotent, and reaps every chip
    t0 = time.monotonic()
    w.close()
    w.close()
    assert time.monotonic() - t0 < 1.5
    assert w.pids == ()
    assert all(reaped(p) for p in pids)
    with pytest.raises(RuntimeError):
        w.run(lambda o, args, cfg: None)


def test_chip_killed_while_its_task_runs():
    with Worker(level=3, device_ids=[0, 1], chip_processes=True) as w:
        hl = w.register(long_running)
        h = w.register(vector_add)
        w.init()
        pids = w.pids
        a, b = inputs(seed=21)
        flag, out = shared_array(N), shared_array(N)
        hd = w.submit(lambda o, args, cfg: o.submit_next_level(hl, [a, flag], worker=1))
        deadline = time.monotonic() + 5
        while flag[0] != 1.0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert flag[0] == 1.0, "the long task did not start"
        os.kill(pids[1], signal.SIGKILL)
        t0 = time.monotonic()
        assert hd.wait(1.0), "the death of a chip with a task in flight was not reported within 1 s"
        with pytest.raises(RuntimeError, match=rf"^chip 1 \(pid {pids[1]}\): .*(signal 9|SIGKILL)"):
            hd.result()
        assert time.monotonic() - t0 < 1.0
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=0))
        close(out, vadd(a, b))


def test_chip_process_exit_reports_status():
    with Worker(level=3, device_ids=[0, 1], chip_processes=True) as w:
        he = w.register(exits)
        h = w.register(vector_add)
        w.init()
        pid0 = w.pids[0]
        a, b = inputs(seed=22)
        out = shared_array(N)
        with pytest.raises(RuntimeError) as ei:
            w.run(lambda o, args, cfg: o.submit_next_level(he, [a, out], worker=0))
        assert str(ei.value) == f"chip 0 (pid {pid0}): the chip process exited with status 3"
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=1))
        close(out, vadd(a, b))


# ----- arena caches of the chips -------------------------------------------------------------


def test_arena_stats_prewarm_then_dispatch(make_worker):
    w64 = RunConfig(ring_task_window=64)
    w, (h,) = make_worker(2, prewarm=w64)
    key64 = (64,) * 4 + (DEFAULT_RING_HEAP,) * 4 + (DEFAULT_RING_DEP_POOL,) * 4
    for chip in (0, 1):
        st = w.arena_stats(chip)
        assert (st.builds, st.hits, st.misses, st.evictions) == (1, 0, 0, 0)
        assert st.resident == [key64]
    a, b = inputs(seed=23)
    out = shared_array(N)
    run = lambda cfg, chip=0: w.run(lambda o, args, _c: o.submit_next_level(h, [a, b, out], cfg, worker=chip)).tasks[0]

    t = run(cfg_with(ring_task_window=64))  # same sizing: no build
    assert t.arena_hit is True and t.arena_build_s == 0
    st = w.arena_stats(0)
    assert (st.builds, st.hits, st.misses) == (1, 1, 0)

    t = run(cfg_with(ring_task_window=128))  # another sizing: one build
    assert t.arena_hit is False
    st = w.arena_stats(0)
    assert (st.builds, st.hits, st.misses, st.evictions) == (2, 1, 1, 0)
    assert st.resident[0] == (128,) * 4 + key64[4:]
    assert len(st.resident) == 2 and st.build_s >= 0

    assert run(cfg_with(ring_task_window=128)).arena_hit is True
    assert w.arena_stats(0).builds == 2
    st1 = w.arena_stats(1)  # the other chip's cache is its own
    assert (st1.builds, st1.hits, st1.misses) == (1, 0, 0)
    close(out, vadd(a, b))

    with pytest.raises(TypeError):
        w.arena_stats(True)
    with pytest.raises(ValueError):
        w.arena_stats(2)
    with pytest.raises(ValueError):
        w.arena_stats(-1)


def test_arena_cache_slots_per_chip(make_worker):
    w, (h,) = make_worker(1, prewarm=CallConfig(), arena_cache_slots=1)
    a, b = inputs(seed=24)
    out = shared_array(N)
    for win in (64, 128):
        t = w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], cfg_with(ring_task_window=win), worker=0)).tasks[0]
        assert t.arena_hit is False
    st = w.arena_stats(0)
    assert (st.builds, st.misses, st.evictions) == (3, 2, 2)
    assert len(st.resident) == 1


def test_invalid_prewarm_config_rejected_before_fork():
    w = Worker(level=3, device_ids=[0, 1])
    w.register(vector_add)
    with pytest.raises(ValueError) as ei:
        w.init(prewarm_config=cfg_with(ring_heap=1000))
    assert str(ei.value) == "RuntimeEnv: ring_heap[0] must be a power of 2 >= 1024 (bytes per ring), got 1000"
    assert w.pids == ()
    w.close()


# ----- Worker construction and life ----------------------------------------------------------


def test_worker_unknown_kwarg_lists_allowed():
    with pytest.raises(TypeError) as ei:
        Worker(level=3, device_ids=[0], bogus_option=1)
    text = str(ei.value)
    assert "bogus_option" in text
    for k in ("level", "device_ids", "num_sub_workers", "arena_cache_slots", "chip_processes"):
        assert k in text


@pytest.mark.parametrize(
    "kwargs,exc,message",
    [
        (dict(level=3), TypeError, "device_ids"),
        (dict(level=3, device_ids=[]), ValueError, "device_ids must not be empty"),
        (dict(level=3, device_ids=[0, -1]), ValueError, "device_ids must be non-negative device indices, got [0, -1]"),
        (dict(level=3, device_ids=[2, 0, 2]), ValueError, "device_ids must be distinct, got [2, 0, 2]"),
    ],
)
def test_worker_device_ids_validation(kwargs, exc, message):
    with pytest.raises(exc) as ei:
        Worker(**kwargs)
    if exc is ValueError:
        assert str(ei.value) == message
    else:
        assert message in str(ei.value)


def test_worker_life(chip_processes):
    w = Worker(level=3, device_ids=[4, 7], chip_processes=chip_processes)
    h = w.register(vector_add)
    assert w.pids == ()
    with pytest.raises(RuntimeError):
        w.run(lambda o, args, cfg: None)
    assert w.init() is w
    pids = w.pids
    w.init()  # idempotent
    assert w.pids == pids
    if chip_processes:
        with pytest.raises(RuntimeError, match="register programs before init"):
            w.register(scaled)
    else:
        h2 = w.register(scaled)  # chip threads see it at once
        a, _ = inputs(seed=25)
        out = shared_array(N)
        rep = w.run(lambda o, args, cfg: o.submit_next_level(h2, [a, out, 2.0], worker=1))
        assert rep.tasks[0].callable == h2 != h
        close(out, np.asarray(a) * 2.0)
    with pytest.raises(TypeError):
        w.register(lambda rt: None)
    w.close()
    w.close()
    assert w.pids == ()


def test_run_handle(make_worker):
    w, (h,) = make_worker(2)
    a, b = inputs(seed=26)
    out = shared_array(N)
    go, started = threading.Event(), threading.Event()

    def orch(o, args, cfg):
        started.set()
        assert go.wait(10)
        o.submit_next_level(h, [a, b, out], worker=1)

    hd = w.submit(orch)
    assert isinstance(hd, RunHandle)
    assert started.wait(5)
    assert hd.done is False
    assert hd.wait(0.02) is False
    with pytest.raises(TimeoutError):
        hd.result(timeout=0.02)
    go.set()
    rep = hd.result(timeout=10)
    assert hd.done is True and hd.wait() is True
    assert isinstance(rep, taskring.NodeRunReport)
    assert rep.tasks[0].worker == 1
    close(out, vadd(a, b))
    assert hd.result() is rep


class _Unraisable:
    """Collects what Python could not raise (e.g. a PyO3 object dropped on a thread it
    may not be dropped on) while the block runs, then collects garbage."""

    def __enter__(self):
        self.caught = []
        self._hook = sys.unraisablehook
        sys.unraisablehook = lambda u: self.caught.append(f"{u.exc_type.__name__}: {u.exc_value}")
        return self

    def __exit__(self, *exc):
        gc.collect()
        sys.unraisablehook = self._hook


def test_chip_thread_orchestration_error_does_not_leak_orchestrator():
    with _Unraisable() as u:
        w = Worker(level=3, device_ids=[0], chip_processes=False)
        hf = w.register(failing_orchestration)
        w.init()
        a, out = shared_array(N), shared_array(N)
        with pytest.raises(RuntimeError, match="LookupError"):
            w.run(lambda o, args, cfg: o.submit_next_level(hf, [a, out], worker=0))
        w.close()
        del w
    assert u.caught == []


def test_run_handle_error_does_not_leak_orchestrator(make_worker):
    w, (h,) = make_worker(1)

    def bad(o, args, cfg):
        raise KeyError("in the background")

    with _Unraisable() as u:
        hd = w.submit(bad)
        with pytest.raises(KeyError):
            hd.result(timeout=10)
        assert hd.done
        del hd
    assert u.caught == []


def test_worker_readable_while_a_submitted_run_is_in_flight(make_worker):
    w, (h,) = make_worker(2)
    pids = w.pids
    go, started = threading.Event(), threading.Event()

    def orch(o, args, cfg):
        started.set()
        go.wait(10)

    hd = w.submit(orch)
    try:
        assert started.wait(5)
        assert w.pids == pids
        assert w.arena_stats(0).builds == 1  # the default sizing, prewarmed at init
    finally:
        go.set()
        hd.result(10)


@pytest.mark.parametrize("platform", ["a2a3", "a5"])
def test_real_platform_run_config_rejected_at_l3(make_worker, platform):
    w, (h,) = make_worker(1)
    a, b = inputs(seed=27)
    out = shared_array(N)
    with pytest.raises(RuntimeError, match="sim"):
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, out], worker=0), config=RunConfig(platform=platform))
    assert not out.any()


# ----- high level: DistributedConfig / DistributedProgram / DistributedWorker ------------------


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(device_ids=[]), "DistributedConfig.device_ids must not be empty"),
        (dict(device_ids=[-1, 2]), "DistributedConfig.device_ids must be non-negative device indices, got [-1, 2]"),
        (dict(device_ids=[1, 0, 1]), "DistributedConfig.device_ids must be distinct, got [1, 0, 1]"),
        (dict(num_sub_workers=-1), "DistributedConfig.num_sub_workers must be non-negative, got -1"),
        (dict(aicpu_thread_num=1), "DistributedConfig.aicpu_thread_num must be 0 (architecture default) or at least 2, got 1"),
        (dict(aicpu_thread_num=-4), "DistributedConfig.aicpu_thread_num must be 0 (architecture default) or at least 2, got -4"),
    ],
)
def test_distributed_config_validation(kwargs, message):
    with pytest.raises(ValueError) as ei:
        DistributedConfig(**kwargs)
    assert str(ei.value) == message


def test_distributed_config_valid_and_replace():
    c = DistributedConfig()
    assert (c.device_ids, c.num_sub_workers, c.aicpu_thread_num) == ([0], 0, 0)
    c = DistributedConfig(device_ids=[3, 1], num_sub_workers=2, aicpu_thread_num=2)
    assert c.device_ids == [3, 1]
    with pytest.raises(ValueError, match="must be distinct"):
        dataclasses.replace(c, device_ids=[1, 1])


def _split_orch(seen):
    def orch(o, chips, args, cfg):
        seen.append(cfg)
        a, b, out = args
        half = a.shape[0] // 2
        o.submit_next_level(chips.vadd, [a[:half], b[:half], out[:half]], cfg, worker=0)
        o.submit_next_level(chips.vadd, [a[half:], b[half:], out[half:]], cfg, worker=1)

    return orch


def test_distributed_program_one_shot_plain_numpy():
    seen = []
    dc = DistributedConfig(device_ids=[0, 1], aicpu_thread_num=4)
    dp = DistributedProgram(_split_orch(seen), chips={"vadd": vector_add}, config=dc, signature=[IN, IN, OUT])
    rng = np.random.default_rng(28)
    a = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    a0, b0 = a.copy(), b.copy()
    out = np.zeros(N, np.float32)
    rep = dp(a, b, out)
    close(out, vadd(a0, b0))  # copied back into the caller's array
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
    assert isinstance(rep, taskring.NodeRunReport)
    assert [t.worker for t in rep.tasks] == [0, 1]
    assert seen[0].aicpu_thread_num == 4
    assert seen[0].runtime_env.ring_task_window == [0] * 4
    # with a dispatch config
    out[:] = 0
    rep = dp(a, b, out, config=RunConfig(ring_heap=4 * MiB))
    close(out, vadd(a0, b0))
    assert all(t.ring_sizing.heap == (4 * MiB,) * 4 for t in rep.tasks)
    assert dc == DistributedConfig(device_ids=[0, 1], aicpu_thread_num=4)


@pytest.mark.parametrize("procs", [True, False], ids=["chip-procs", "chip-threads"])
def test_prepared_worker_fresh_config_per_dispatch(procs):
    seen = []
    dc = DistributedConfig(device_ids=[0, 1], aicpu_thread_num=4)
    dc_before = dataclasses.replace(dc)
    ids_obj = dc.device_ids
    dp = DistributedProgram(_split_orch(seen), chips={"vadd": vector_add}, config=dc, signature=[IN, IN, OUT])
    a, b = inputs(seed=29)
    out = shared_array(N)
    with dp.prepare(chip_processes=procs) as rt:
        assert isinstance(rt, DistributedWorker)
        rep = rt(a, b, out, config=RunConfig(ring_task_window=64))
        close(out, vadd(a, b))
        cfg = seen[-1]
        assert isinstance(cfg, CallConfig)
        assert cfg.aicpu_thread_num == 4
        assert cfg.runtime_env.ring_task_window == [64] * 4
        assert cfg.runtime_env.ring_heap == [0] * 4 and cfg.runtime_env.ring_dep_pool == [0] * 4
        assert isinstance(rep, taskring.NodeRunReport)
        for t in rep.tasks:
            assert t.ring_sizing.task_window == (64,) * 4
            assert sources(t.ring_sizing, "ring_task_window") == ["call_config"] * 4
            assert sources(t.ring_sizing, "ring_heap") == ["default"] * 4
        # the orchestration scribbles on its config: the next dispatch gets a fresh one
        cfg.runtime_env.ring_heap = 2 * MiB
        cfg.aicpu_thread_num = 8
        rep = rt(a, b, out)
        assert seen[-1] is not cfg
        assert seen[-1].aicpu_thread_num == 4
        assert seen[-1].runtime_env.ring_task_window == [0] * 4 and seen[-1].runtime_env.ring_heap == [0] * 4
        assert all(t.ring_sizing.key() == DEFAULT_KEY for t in rep.tasks)
        rep = rt(a, b, out, config=RunConfig(ring_heap=[0, 2 * MiB, 0, 0]))
        assert seen[-1].runtime_env.ring_heap == [0, 2 * MiB, 0, 0]
        assert seen[-1].runtime_env.ring_task_window == [0] * 4
        assert rep.tasks[1].ring_sizing.heap[1] == 2 * MiB
    # the program's DistributedConfig is never mutated
    assert dc == dc_before and dc.device_ids is ids_obj and dc.device_ids == [0, 1]


def test_prepare_config_only_prewarms():
    dp = DistributedProgram(_split_orch([]), chips={"vadd": vector_add}, config=DistributedConfig(device_ids=[0, 1]), signature=[IN, IN, OUT])
    key256 = (256,) * 4 + (DEFAULT_RING_HEAP,) * 4 + (DEFAULT_RING_DEP_POOL,) * 4
    a, b = inputs(seed=30)
    out = shared_array(N)
    with dp.prepare(RunConfig(ring_task_window=256)) as rt:
        for chip in (0, 1):
            st = rt.arena_stats(chip)
            assert st.builds == 1 and st.resident == [key256]
        rep = rt(a, b, out)  # not stored: this dispatch is default-sized
        assert all(t.ring_sizing.key() == DEFAULT_KEY for t in rep.tasks)
        rep = rt(a, b, out, config=RunConfig(ring_task_window=256))
        assert all(t.arena_hit for t in rep.tasks)
        close(out, vadd(a, b))
        rt.close()
    rt.close()  # idempotent


def test_multi_program_worker():
    seen = []
    dc = DistributedConfig(device_ids=[0, 1])
    dp1 = DistributedProgram(_split_orch(seen), chips={"vadd": vector_add}, config=dc, signature=[IN, IN, OUT])

    def orch2(o, chips, args, cfg):
        a, out, alpha = args
        o.submit_next_level(chips.scale, [a, out, alpha], cfg, worker=1)

    dp2 = DistributedProgram(orch2, chips={"scale": scaled}, config=dc, signature=[IN, OUT, SCALAR])
    other = DistributedProgram(_split_orch([]), chips={"vadd": vector_add}, config=dc, signature=[IN, IN, OUT])
    a, b = inputs(seed=31)
    out, out2 = shared_array(N), shared_array(N)
    with dp1.prepare(extra_compiled=[dp2]) as rt:
        with pytest.raises(TypeError, match="ambiguous"):
            rt(a, b, out)
        rep = rt.run(dp1, a, b, out)
        close(out, vadd(a, b))
        assert len(rep.tasks) == 2
        rep = rt.run(dp2, a, out2, 3.0)
        close(out2, np.asarray(a) * 3.0)
        assert rep.tasks[0].worker == 1
        with pytest.raises(ValueError):
            rt.run(other, a, b, out)
        out[:] = 0
        hd = rt.submit(dp1, a, b, out, config=RunConfig(ring_task_window=32))
        assert isinstance(hd, RunHandle)
        rep = hd.result(timeout=10)
        assert hd.done
        close(out, vadd(a, b))
        assert all(t.ring_sizing.task_window == (32,) * 4 for t in rep.tasks)


def test_prepared_worker_rejects_plain_numpy():
    dp = DistributedProgram(_split_orch([]), chips={"vadd": vector_add}, config=DistributedConfig(device_ids=[0, 1]), signature=[IN, IN, OUT])
    a, b = inputs(seed=32)
    with dp.prepare() as rt:
        with pytest.raises(TypeError, match="shared_array"):
            rt(a, b, np.zeros(N, np.float32))
        with pytest.raises(TypeError, match="shared_array"):
            rt.run(dp, np.asarray(a).copy(), b, shared_array(N))
        out = shared_array(N)
        rt(a[:], b, out)  # a view of a shared array is fine
        close(out, vadd(a, b))


def _kv_orch(o, chips, args, cfg):
    a, b, out, worker = args
    o.submit_next_level(chips.vadd, [a, b, out], cfg, worker=worker)


def test_alloc_tensor_belongs_to_its_chip():
    dp = DistributedProgram(_kv_orch, chips={"vadd": vector_add}, config=DistributedConfig(device_ids=[0, 1]), signature=[IN, IN, OUT, SCALAR])
    a, b = inputs(seed=33)
    with dp.prepare() as rt:
        kv = rt.alloc_tensor((N,), np.float32, worker=0)
        assert kv.shape == (N,) and kv.dtype == np.float32
        with pytest.raises(ValueError, match="chip 0"):
            rt(a, b, kv, 1)
        assert not kv.any()
        rt(a, b, kv, 0)  # on its own chip
        close(kv, vadd(a, b))
        out = shared_array(N)
        rt(kv, b, out, 0)  # still alive for a later dispatch on chip 0
        close(out, vadd(vadd(a, b), b))
        with pytest.raises(ValueError):
            rt.alloc_tensor((4,), np.float32, worker=2)
        with pytest.raises(TypeError):
            rt.alloc_tensor((4,), np.float32, worker=True)


def test_alloc_tensor_view_at_offset_belongs_to_its_chip():
    dp = DistributedProgram(_kv_orch, chips={"vadd": vector_add}, config=DistributedConfig(device_ids=[0, 1]), signature=[IN, IN, OUT, SCALAR])
    a, b = inputs(n=N // 2, seed=34)
    with dp.prepare() as rt:
        kv = rt.alloc_tensor((N,), np.float32, worker=0)
        with pytest.raises(ValueError, match="chip 0"):
            rt(a, b, kv[N // 2 :], 1)
        assert not kv.any()


def test_distributed_real_platform_rejected():
    dp = DistributedProgram(_split_orch([]), chips={"vadd": vector_add}, config=DistributedConfig(device_ids=[0, 1]), signature=[IN, IN, OUT])
    out = np.zeros(N, np.float32)
    with pytest.raises(RuntimeError, match="sim"):
        dp(np.ones(N, np.float32), np.ones(N, np.float32), out, config=RunConfig(platform="a2a3"))
    assert not out.any()
