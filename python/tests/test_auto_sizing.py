"""``"auto"`` ring sizes: the first dispatch of a program with given arguments learns its
need while it runs (no kernel runs twice), later ones run on need × headroom; results
equal a normal run; the source is "auto"; a need that grows with the data fails once,
grows the entry and says so."""

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, SCALAR, ChipWorker, RunConfig, RuntimeEnv, RuntimeFailure
from taskring import kernels as K

AUTO = RunConfig(ring_task_window="auto", ring_heap="auto", ring_dep_pool="auto")
FIELDS = ("ring_task_window", "ring_heap", "ring_dep_pool")


@taskring.program(signature=[IN, OUT])
def scaled_sum(rt, a, out):
    with rt.scope():
        parts = [rt.submit(K.scale, inputs=[a], outputs=[rt.spec(a.shape, a.dtype)], scalars=[float(i)]).outputs[0] for i in range(6)]
        acc = parts[0]
        for p in parts[1:]:
            acc = rt.submit(K.add, inputs=[acc, p], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
        rt.submit(K.copy, inputs=[acc], outputs=[out])


def test_auto_learns_the_need_and_equals_a_normal_run():
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    want = np.zeros_like(a)
    taskring.run(scaled_sum, a, want)
    with ChipWorker(prewarm=False) as w:
        reps = []
        for _ in range(3):
            out = np.zeros_like(a)
            reps.append(w.run(scaled_sum, a, out, config=AUTO))
            np.testing.assert_array_equal(out, want)
        first, learned = reps[0].ring_sizing, reps[1].ring_sizing
        for f in FIELDS:
            for r in range(4):
                assert first.source(f, r) == "auto" and learned.source(f, r) == "auto"
        # the first dispatch ran on the defaults; later ones on the learned sizing
        assert tuple(first.task_window) == (taskring.DEFAULT_RING_TASK_WINDOW,) * 4
        # 12 tasks live in the scope: a window above 12, x 1.25, a power of 2
        assert learned.task_window[1] == 32 and learned.task_window[0] == 4
        # 11 runtime outputs of 1 KiB live at once: x 1.25, a power of 2
        assert learned.heap[1] == 16 * 1024 and learned.heap[0] == 1024
        assert reps[2].ring_sizing.key() == learned.key() and reps[2].arena_hit
        assert reps[1].device_memory.arena_bytes * 20 < reps[0].device_memory.arena_bytes
        # only the learned arena stays resident (the first pass built its arena: it is dropped)
        assert learned.key() in w.arena_stats.resident and first.key() not in w.arena_stats.resident


def test_auto_per_ring_entries_and_the_environment(monkeypatch):
    a = np.ones((4, 4), np.float32)
    with ChipWorker() as w:
        cfg = RunConfig(ring_heap=[0, "auto", 0, 0], ring_task_window=64)
        w.run(scaled_sum, a, np.zeros_like(a), config=cfg)
        rep = w.run(scaled_sum, a, np.zeros_like(a), config=cfg)
        s = rep.ring_sizing
        assert s.source("ring_heap", 1) == "auto" and s.source("ring_heap", 0) == "default"
        assert s.source("ring_task_window", 1) == "call_config" and tuple(s.task_window) == (64,) * 4
        assert s.heap[1] < taskring.DEFAULT_RING_HEAP and s.heap[0] == taskring.DEFAULT_RING_HEAP
        monkeypatch.setenv("PTO2_RING_DEP_POOL", "auto")
        rep = w.run(scaled_sum, a, np.zeros_like(a))
        assert rep.ring_sizing.source("ring_dep_pool", 2) == "auto"
    env = RuntimeEnv(ring_heap=RuntimeEnv.AUTO)
    assert list(env.ring_heap) == [RuntimeEnv.AUTO] * 4
    assert RuntimeEnv(ring_heap=[0, "auto", 0, 0]).ring_heap[1] == RuntimeEnv.AUTO


@pytest.mark.parametrize("bad", ["automatic", ["auto", 3, 0, 0], "", "AUTO2"])
def test_other_strings_are_still_refused(bad):
    with pytest.raises(ValueError):
        RunConfig(ring_task_window=bad)


LIVE = [4]  # how many tasks the next dispatch holds at once: data the program reads


@taskring.program(signature=[OUT])
def data_dependent(rt, out):
    with rt.scope():
        for i in range(LIVE[0]):
            rt.submit(K.scale, inputs=[out], outputs=[rt.spec(out.shape, out.dtype)], scalars=[float(i)])


def test_a_need_that_grows_with_the_data_fails_once_and_grows():
    out = np.ones(16, np.float32)
    cfg = RunConfig(ring_task_window="auto")
    with ChipWorker() as w:
        LIVE[0] = 4
        w.run(data_dependent, out, config=cfg)  # learns: 4 live + 1, x 1.25 -> 8
        rep = w.run(data_dependent, out, config=cfg)
        assert rep.ring_sizing.task_window[1] == 8
        LIVE[0] = 40
        with pytest.raises(RuntimeFailure) as ei:
            w.run(data_dependent, out, config=cfg)
        assert ei.value.name == "SCOPE_DEADLOCK"
        assert "auto: ring_task_window[1] grows from 8 to 64 for the next dispatch" in str(ei.value)
        rep = w.run(data_dependent, out, config=cfg)
        assert rep.ring_sizing.task_window[1] == 64


def test_the_learning_dispatch_keeps_a_prewarmed_arena():
    a = np.ones((4, 4), np.float32)
    with ChipWorker() as w:  # prewarms the default sizing
        rep = w.run(scaled_sum, a, np.zeros_like(a), config=AUTO)
        assert rep.arena_hit and taskring.resolve_ring_sizing(None, {}).key() in w.arena_stats.resident


def test_l3_tasks_with_auto_sizing():
    with taskring.Worker(level=3, device_ids=[0, 1]) as w:
        h = w.register(scaled_sum)
        w.init(RunConfig(ring_task_window=16, ring_heap=1 << 16, ring_dep_pool=64))
        a = taskring.shared_array((16, 16))
        a[:] = np.arange(256, dtype=np.float32).reshape(16, 16)
        outs = [taskring.shared_array((16, 16)) for _ in range(2)]
        want = np.zeros((16, 16), np.float32)
        taskring.run(scaled_sum, np.asarray(a), want)

        def orch(o, args, cfg):
            o.submit_next_level(h, [a, outs[0]], AUTO, worker=0)
            # a per-task mix: heap by hand on chip 1, the rest auto
            o.submit_next_level(h, [a, outs[1]], RunConfig(ring_task_window="auto", ring_heap=1 << 16, ring_dep_pool="auto"), worker=1)

        reps = [w.run(orch) for _ in range(2)]
        for o in outs:
            np.testing.assert_array_equal(o, want)
        t0, t1 = reps[1].tasks
        assert t0.ring_sizing.source("ring_heap", 1) == "auto" and t0.ring_sizing.heap[1] == 16 * 1024
        assert t1.ring_sizing.source("ring_heap", 1) == "call_config" and t1.ring_sizing.heap[1] == 1 << 16
        assert t1.ring_sizing.source("ring_task_window", 1) == "auto" and t1.ring_sizing.task_window[1] == 32
        assert t0.arena_bytes < reps[0].tasks[0].arena_bytes  # learned, smaller than the first pass
