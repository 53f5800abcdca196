"""Chip failures and chip death at L3 (docs/api.md §6): a failing task or orchestration on a
chip, a chip process killed or exiting — each reaches the caller as
`chip {worker} (pid {pid}): ...`, and the other chips keep working."""

import os
import re
import signal
import time

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, Worker, shared_array

from l2_helpers import vector_add
from l3_helpers import N, close, failing_orchestration, inputs, vadd


# ----- chip failures and chip death (§6) -----------------------------------------------------


@taskring.kernel
def kaboom_kernel(a, out):
    raise ZeroDivisionError("kaboom inside the chip")


@taskring.program(signature=[IN, OUT])
def failing(rt, a, out):
    rt.submit(kaboom_kernel, inputs=[a], outputs=[out])


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


def reaped(pid):
    """True when `pid` is no longer our (unreaped) child."""
    try:
        return os.waitpid(pid, os.WNOHANG) != (0, 0)
    except ChildProcessError:
        return True


# (the unraisable warning: see test_node_worker.py::test_chip_thread_orchestration_error_does_not_leak_orchestrator)
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
    with pytest.raises(RuntimeError, match=r"^chip 0 \(pid \d+\): "):
        hd.result()


def test_killed_chip_process(monkeypatch):
    # A chip timeout longer than the suite's watchdog: only the chip's death can end a
    # wait on it (a death not noticed hangs the run, and the watchdog fails the suite).
    monkeypatch.setenv("TASKRING_CHIP_TIMEOUT_MS", "600000")
    w = Worker(level=3, device_ids=[0, 1, 2], chip_processes=True)
    h = w.register(vector_add)
    w.init()
    a, b = inputs(seed=20)
    outs = [shared_array(N) for _ in range(3)]
    w.run(lambda o, args, cfg: [o.submit_next_level(h, [a, b, outs[i]], worker=i) for i in range(3)])
    pids = w.pids
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(RuntimeError) as ei:
        w.run(lambda o, args, cfg: o.submit_next_level(h, [a, b, outs[1]], worker=1))
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
    # close is clean and idempotent, and reaps every chip (it does not wait on the dead one)
    w.close()
    w.close()
    assert w.pids == ()
    assert all(reaped(p) for p in pids)
    with pytest.raises(RuntimeError):
        w.run(lambda o, args, cfg: None)


def test_chip_killed_while_its_task_runs(monkeypatch):
    # Only the chip's death can end the wait: its task would run 2 s more, and the chip
    # timeout is longer than the suite's watchdog.
    monkeypatch.setenv("TASKRING_CHIP_TIMEOUT_MS", "600000")
    with Worker(level=3, device_ids=[0, 1], chip_processes=True) as w:
        hl = w.register(long_running)
        h = w.register(vector_add)
        w.init()
        pids = w.pids
        a, b = inputs(seed=21)
        flag, out = shared_array(N), shared_array(N)
        hd = w.submit(lambda o, args, cfg: o.submit_next_level(hl, [a, flag], worker=1))
        while flag[0] != 1.0:  # the long task runs
            time.sleep(0.005)
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(RuntimeError, match=rf"^chip 1 \(pid {pids[1]}\): .*(signal 9|SIGKILL)"):
            hd.result()
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
