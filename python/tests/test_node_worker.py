"""An L3 `Worker`'s construction and life (docs/api.md §4): its arguments, init and close,
registering programs, `RunHandle`, and no orchestrator leaked by a failed run."""

import gc
import sys
import threading

import numpy as np
import pytest

import taskring
from taskring import RunConfig, RunHandle, Worker, shared_array

from l2_helpers import vector_add
from l3_helpers import N, close, failing_orchestration, inputs, scaled, vadd


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
