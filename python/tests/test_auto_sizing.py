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
        assert "auto: ring_task_window[1] grows from 8 to 64, and the next dispatch of this program with these arguments learns its need again" in str(ei.value)
        rep = w.run(data_dependent, out, config=cfg)  # learns again, on the defaults
        assert rep.ring_sizing.task_window[1] == taskring.DEFAULT_RING_TASK_WINDOW
        rep = w.run(data_dependent, out, config=cfg)
        assert rep.ring_sizing.task_window[1] == 64  # 40 live + 1, x 1.25 -> 64


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


# ----- what is learned belongs to the program, not to its name -----------------------------


def make_step(live):
    """A factory: every program it makes is named ``step``."""

    @taskring.program(signature=[OUT])
    def step(rt, out):
        with rt.scope():
            for i in range(live):
                rt.submit(K.scale, inputs=[out], outputs=[rt.spec(out.shape, out.dtype)], scalars=[float(i)])

    return step


def test_two_programs_of_one_name_learn_apart():
    small, big = make_step(2), make_step(200)
    assert small.name == big.name == "step"
    out = np.ones(16, np.float32)
    with ChipWorker(prewarm=False) as w:
        for _ in range(2):
            w.run(small, out, config=AUTO)
        # the big one learns for itself: no failure on the small one's sizes
        w.run(big, out, config=AUTO)
        rep = w.run(big, out, config=AUTO)
        assert rep.ring_sizing.task_window[1] == 256  # 201 x 1.25 -> 256
        assert w.run(small, out, config=AUTO).ring_sizing.task_window[1] == 4


def test_two_programs_of_one_name_learn_apart_at_l3():
    small, big = make_step(2), make_step(200)
    with taskring.Worker(level=3, device_ids=[0]) as w:
        hs, hb = w.register(small), w.register(big)
        w.init(RunConfig(ring_task_window=16, ring_heap=1 << 16, ring_dep_pool=64))
        out = taskring.shared_array((16,))

        def orch(o, args, cfg):
            o.submit_next_level(hs, [out], AUTO, worker=0)
            o.submit_next_level(hb, [out], AUTO, worker=0)

        w.run(orch)
        rep = w.run(orch)
        assert [t.ring_sizing.task_window[1] for t in rep.tasks] == [4, 256]


# ----- scalar values do not split the key unless they change the graph ----------------------


@taskring.program(signature=[IN, OUT, SCALAR])
def scaled(rt, a, out, step):
    with rt.scope():
        t = rt.submit(K.scale, inputs=[a], outputs=[rt.spec(a.shape, a.dtype)], scalars=[float(step)]).outputs[0]
        rt.submit(K.copy, inputs=[t], outputs=[out])


def test_a_step_counter_does_not_make_every_dispatch_a_learning_one():
    a = np.ones(16, np.float32)
    out = np.zeros_like(a)
    with ChipWorker(prewarm=False) as w:
        w.run(scaled, a, out, 0, config=AUTO)
        learned = w.run(scaled, a, out, 1, config=AUTO).ring_sizing
        builds = w.arena_stats.builds
        for step in range(2, 40):
            rep = w.run(scaled, a, out, step, config=AUTO)
            assert rep.arena_hit and rep.ring_sizing.key() == learned.key()
            np.testing.assert_array_equal(out, a * step)
        assert w.arena_stats.builds == builds


N_TASKS = [4]


@taskring.program(signature=[OUT, SCALAR])
def n_live(rt, out, n):
    with rt.scope():
        for i in range(n):
            rt.submit(K.scale, inputs=[out], outputs=[rt.spec(out.shape, out.dtype)], scalars=[float(i)])


def test_scalars_that_change_the_graph_split_the_key_after_one_failure():
    out = np.ones(16, np.float32)
    cfg = RunConfig(ring_task_window="auto")
    with ChipWorker(prewarm=False) as w:
        w.run(n_live, out, 4, config=cfg)
        assert w.run(n_live, out, 4, config=cfg).ring_sizing.task_window[1] == 8
        with pytest.raises(RuntimeFailure) as ei:
            w.run(n_live, out, 40, config=cfg)
        assert "the next dispatch of this program with these scalar values learns its need again" in str(ei.value)
        # from now on each set of scalar values learns for itself: no more failures
        for n in (40, 400, 4, 100, 40):
            w.run(n_live, out, n, config=cfg)
        assert w.run(n_live, out, 4, config=cfg).ring_sizing.task_window[1] == 8
        assert w.run(n_live, out, 400, config=cfg).ring_sizing.task_window[1] == 512


# ----- a jump in need costs one failed dispatch, whatever the resource ----------------------


@taskring.program(signature=[OUT])
def wide(rt, out):
    """LIVE[0] tasks live at once in one scope, each with a 4 KiB runtime output and two
    producers: the window, the heap and the dependency pool all grow with LIVE[0]."""
    with rt.scope():
        made = [out, out]
        for _ in range(LIVE[0]):
            made.append(rt.submit(K.add, inputs=made[-2:], outputs=[rt.spec(out.shape, out.dtype)]).outputs[0])


@pytest.mark.parametrize("jump", [40, 400, 4000])
def test_a_jump_in_need_costs_one_failed_dispatch(jump):
    out = np.ones(1024, np.float32)
    with ChipWorker(prewarm=False) as w:
        LIVE[0] = 4
        try:
            w.run(wide, out, config=AUTO)
            w.run(wide, out, config=AUTO)
            LIVE[0] = jump
            failures = 0
            for _ in range(6):
                try:
                    w.run(wide, out, config=AUTO)
                    break
                except RuntimeFailure as e:
                    assert "learns its need again" in str(e), str(e)
                    failures += 1
            assert failures == 1
            w.run(wide, out, config=AUTO)  # and the learned sizing holds it
        finally:
            LIVE[0] = 4


# ----- the learned sizing comes down again after a spike ------------------------------------


def test_the_learned_sizing_shrinks_after_a_run_of_smaller_needs():
    out = np.ones(16, np.float32)
    cfg = RunConfig(ring_task_window="auto")
    with ChipWorker(prewarm=False) as w:
        try:
            LIVE[0] = 4
            w.run(data_dependent, out, config=cfg)
            small = w.run(data_dependent, out, config=cfg).ring_sizing.task_window[1]
            LIVE[0] = 400
            with pytest.raises(RuntimeFailure):
                w.run(data_dependent, out, config=cfg)
            w.run(data_dependent, out, config=cfg)  # learns the spike
            LIVE[0] = 4
            sizes = [w.run(data_dependent, out, config=cfg).ring_sizing.task_window[1] for _ in range(40)]
            assert sizes[0] == 512 and sizes[-1] == small == 8
            # once down, it stays down
            assert sizes.index(small) < 40 and all(s == small for s in sizes[sizes.index(small):])
        finally:
            LIVE[0] = 4


# ----- capture, replay and prewarm with auto -------------------------------------------------


def test_capture_and_replay_with_auto_use_the_learned_sizing_on_a_small_chip():
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    want = np.zeros_like(a)
    taskring.run(scaled_sum, a, want)
    with ChipWorker(prewarm=False, device_memory=64 << 20) as w:
        w.run(scaled_sum, a, np.zeros_like(a), config=AUTO)
        learned = w.run(scaled_sum, a, np.zeros_like(a), config=AUTO).ring_sizing
        assert learned.task_window[1] == 32
        out = np.zeros_like(a)
        g = w.capture(scaled_sum, a, out, config=AUTO)
        np.testing.assert_array_equal(out, want)
        assert g.report.ring_sizing.key() == learned.key()
        out2 = np.zeros_like(a)
        rep = g.replay(a, out2, config=AUTO)
        np.testing.assert_array_equal(out2, want)
        assert rep.ring_sizing.key() == learned.key()


def test_capture_with_auto_first_teaches_the_chip():
    a = np.ones((16, 16), np.float32)
    with ChipWorker(prewarm=False, device_memory=64 << 20) as w:
        g = w.capture(scaled_sum, a, np.zeros_like(a), config=AUTO)
        assert g.report.device_memory.arena_bytes <= 64 << 20
        rep = w.run(scaled_sum, a, np.zeros_like(a), config=AUTO)
        assert rep.ring_sizing.task_window[1] == 32  # learned from the capture's graph


def test_auto_prewarms_build_nothing_and_a_default_prewarm_that_cannot_fit_warns(capfd):
    a = np.ones((4, 4), np.float32)
    with ChipWorker(AUTO, device_memory=16 << 20) as w:
        assert w.arena_stats.resident == [] and w.arena_stats.builds == 0
        w.run(scaled_sum, a, np.zeros_like(a))
    with ChipWorker(device_memory=16 << 20) as w:  # the default prewarm: 1.19 GB
        assert w.arena_stats.resident == []
        w.run(scaled_sum, a, np.zeros_like(a), config=AUTO)
    err = capfd.readouterr().err
    assert err.count("taskring: no arena is built ahead: the arena for this sizing") == 1, err
    # a prewarm that was asked for and cannot fit still fails
    with pytest.raises(RuntimeFailure) as ei:
        ChipWorker(RunConfig(ring_heap=1 << 28), device_memory=16 << 20)
    assert ei.value.name == "DEVICE_OUT_OF_MEMORY"
    rep = taskring.run(scaled_sum, a, np.zeros_like(a), config=AUTO)
    assert rep.ring_sizing.source("ring_heap", 0) == "auto"


def test_l3_auto_prewarm_on_a_small_device():
    with taskring.Worker(level=3, device_ids=[0], device_memory=16 << 20) as w:
        h = w.register(scaled_sum)
        w.init(AUTO)
        assert w.arena_stats(0).resident == []
        a = taskring.shared_array((16, 16))
        out = taskring.shared_array((16, 16))
        a[:] = 1.0
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, out], AUTO, worker=0))
    with taskring.Worker(level=3, device_ids=[0], device_memory=16 << 20) as w:
        w.register(scaled_sum)
        w.init()  # the default prewarm does not fit: a warning, not a failure
        assert w.arena_stats(0).resident == []


def test_the_report_does_not_count_a_dropped_learning_arena():
    a = np.ones((4, 4), np.float32)
    with ChipWorker(prewarm=False) as w:
        rep = w.run(scaled_sum, a, np.zeros_like(a), config=AUTO)
        assert rep.device_memory.used_bytes == w.arena_stats.resident_bytes == 0
        rep = w.run(scaled_sum, a, np.zeros_like(a), config=AUTO)
        assert rep.device_memory.used_bytes == w.arena_stats.resident_bytes == rep.device_memory.arena_bytes


@taskring.program(signature=[OUT, SCALAR])
def live_with_a_step(rt, out, step):
    """LIVE[0] tasks live at once (data); ``step`` changes nothing of the graph."""
    with rt.scope():
        for i in range(LIVE[0]):
            rt.submit(K.scale, inputs=[out], outputs=[rt.spec(out.shape, out.dtype)], scalars=[float(step)])


def test_a_step_counter_that_meets_a_jump_in_need_goes_back_to_one_key():
    out = np.ones(16, np.float32)
    cfg = RunConfig(ring_task_window="auto")
    with ChipWorker(prewarm=False) as w:
        try:
            LIVE[0] = 4
            w.run(live_with_a_step, out, 0, config=cfg)
            w.run(live_with_a_step, out, 1, config=cfg)
            LIVE[0] = 40
            failures = 0
            sizes = []
            for step in range(2, 40):
                try:
                    sizes.append(w.run(live_with_a_step, out, step, config=cfg).ring_sizing.task_window[1])
                except RuntimeFailure:
                    failures += 1
            # the jump costs a failure or two (one per key the counter's values were
            # split into), and a handful of learning dispatches before the values are
            # taken not to shape the graph; then one learned sizing for every step
            assert failures <= 2
            assert sizes[-20:] == [64] * 20
        finally:
            LIVE[0] = 4


def test_a_capture_with_auto_replays_on_the_graphs_need_and_keeps_no_learning_arena():
    a = np.arange(256, dtype=np.float32).reshape(16, 16)
    want = np.zeros_like(a)
    taskring.run(scaled_sum, a, want)
    with ChipWorker(prewarm=False) as w:
        g = w.capture(scaled_sum, a, np.zeros_like(a), config=AUTO)  # the key's first dispatch
        assert g.report.ring_sizing.task_window[1] == taskring.DEFAULT_RING_TASK_WINDOW
        assert w.arena_stats.resident == [] and g.report.device_memory.used_bytes == 0
        out = np.zeros_like(a)
        rep = g.replay(a, out)  # no config: the captured graph's own need
        np.testing.assert_array_equal(out, want)
        assert rep.ring_sizing.task_window[1] == 32 and rep.ring_sizing.heap[1] == 16 * 1024


def test_an_auto_failure_still_ends_with_the_partly_written_note():
    out = np.ones(16, np.float32)
    cfg = RunConfig(ring_task_window="auto")
    with ChipWorker(prewarm=False) as w:
        try:
            LIVE[0] = 4
            w.run(data_dependent, out, config=cfg)
            LIVE[0] = 40
            with pytest.raises(RuntimeFailure) as ei:
                w.run(data_dependent, out, config=cfg)
        finally:
            LIVE[0] = 4
    d = ei.value.description
    assert "; auto: ring_task_window[1] grows from 8 to 64" in d
    assert d.endswith("; the run's outputs may be partly written"), d
