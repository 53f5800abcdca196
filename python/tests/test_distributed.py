"""The PyPTO-style high level of L3 (docs/api.md §4): `DistributedConfig`,
`DistributedProgram` (one-shot, on plain numpy arrays) and `DistributedWorker` (prepared,
with a fresh config per dispatch, several programs, chip-resident tensors)."""

import dataclasses

import numpy as np
import pytest

import taskring
from taskring import (
    DEFAULT_RING_DEP_POOL,
    DEFAULT_RING_HEAP,
    IN,
    OUT,
    SCALAR,
    CallConfig,
    DistributedConfig,
    DistributedProgram,
    DistributedWorker,
    RunConfig,
    RunHandle,
    shared_array,
)

from l2_helpers import DEFAULT_KEY, MiB, vector_add
from l3_helpers import N, close, inputs, scaled, sources, vadd


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
