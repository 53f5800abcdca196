"""L3 ring sizing (docs/api.md §4, §2): every L2 task travels with its own `CallConfig` and
the chip reports the sizing it resolved from it (then its own env, then defaults); the
run-level config is never applied implicitly; each chip's arena cache is its own.
Chips as child processes and as threads (`chip_processes=True/False`, same protocol)."""

import os

import pytest

import taskring
from taskring import (
    DEFAULT_RING_DEP_POOL,
    DEFAULT_RING_HEAP,
    DEFAULT_RING_TASK_WINDOW,
    CallConfig,
    RunConfig,
    Worker,
    shared_array,
)

from l2_helpers import DEFAULT_KEY, MiB, vector_add
from l3_helpers import N, cfg_with, close, inputs, sources, vadd


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
