"""Running real programs on the simulated chip (docs/api.md §2, §3): results against numpy,
per-call ring sizing in the reports (call config, env, defaults), the builtin kernels, the
data types, `shared_array`, and a ChipWorker's life."""

import os

import numpy as np
import pytest

import taskring
from taskring import (
    DEFAULT_RING_HEAP,
    IN,
    INOUT,
    OUT,
    CallConfig,
    ChipWorker,
    RunConfig,
    RuntimeEnv,
)

from l2_helpers import (
    K,
    LISTED,
    SIZED,
    MiB,
    assert_default,
    assert_listed,
    assert_sized,
    check_vector_add,
    vec_args,
    vector_add,
)


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


# ----- builtin kernels and data types ------------------------------------------------------------


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
