"""Faults an L3 worker survives (docs/api.md §6.1): a stopped chip, Ctrl-C, close() with a run
in flight, the host's death (no orphan chips), fork() of the host, init/close cycles
(no leaks), and several threads on one worker.

Chip process ids come from ``Worker.pids``. Timeouts are shortened through
``TASKRING_CHIP_TIMEOUT_MS`` (read when the worker starts) where the default (2 s) is
not what a test is about."""

import gc
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import taskring
from taskring import IN, OUT, SCALAR, Worker, shared_array

K = taskring.kernels


@taskring.kernel
def _mark_then_nap(out, ms):
    out[0] = 1.0  # tells the host (through shared memory) that the task runs
    time.sleep(ms / 1000.0)
    out[1] = 2.0


@taskring.program(signature=[OUT, SCALAR])
def nap(rt, out, ms):
    rt.submit(_mark_then_nap, outputs=[out], scalars=[ms])


@taskring.program(signature=[IN, OUT])
def cp(rt, a, b):
    rt.submit(K.copy, inputs=[a], outputs=[b])


@taskring.kernel
def _kaboom(out, ms):
    raise ZeroDivisionError("kaboom")


@taskring.program(signature=[OUT, SCALAR])
def failing(rt, out, ms):
    rt.submit(_kaboom, outputs=[out], scalars=[ms])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_gone(pids):
    """Until none of `pids` is alive (a hang is the suite watchdog's)."""
    while any(_alive(p) for p in pids):
        time.sleep(0.01)


def _worker(monkeypatch, timeout_ms=None, n=2):
    if timeout_ms is not None:
        monkeypatch.setenv("TASKRING_CHIP_TIMEOUT_MS", str(timeout_ms))
    w = Worker(level=3, device_ids=list(range(n)))
    h_nap, h_cp = w.register(nap), w.register(cp)
    w.init()
    return w, h_nap, h_cp


def _naps(h, outs_ms_workers):
    def orch(o, _args, _cfg):
        for out, ms, worker in outs_ms_workers:
            o.submit_next_level(h, [out, ms], worker=worker)

    return orch


# ----- a stopped chip ------------------------------------------------------------------------


def test_stopped_chip_fails_its_task_with_the_default_timeout_and_holds_up_no_one(monkeypatch):
    monkeypatch.delenv("TASKRING_CHIP_TIMEOUT_MS", raising=False)
    w, h, _ = _worker(monkeypatch)
    try:
        p0 = w.pids[0]
        o0, o1 = shared_array(2), shared_array(2)
        os.kill(p0, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(RuntimeError) as e:
            w.run(_naps(h, [(o0, 0, 0), (o1, 0, 1)]))
        took = time.monotonic() - t0
        assert str(e.value).startswith(f"chip 0 (pid {p0}): not responding: no heartbeat for "), str(e.value)
        assert "process state T, stopped" in str(e.value)
        # The default timeout (2000 ms of no heartbeat) is what failed it: never earlier.
        # Counted from the chip's last heartbeat, which may precede the run a little.
        stalled_ms = int(re.search(r"no heartbeat for (\d+) ms", str(e.value)).group(1))
        assert stalled_ms >= 2000 and took >= 1.5, (stalled_ms, took)
        # The other chip's task ran meanwhile; the stopped chip's did not.
        assert list(o1) == [1.0, 2.0] and list(o0) == [0.0, 0.0]
        # Continued, the chip answers its old request, then works again.
        os.kill(p0, signal.SIGCONT)
        o2 = shared_array(2)
        w.run(_naps(h, [(o2, 0, 0)]))
        assert list(o0) == [1.0, 2.0] and list(o2) == [1.0, 2.0]
    finally:
        os.kill(w.pids[0], signal.SIGCONT)
        w.close()


def test_a_run_on_the_healthy_chip_from_another_thread_waits_only_for_the_timeout(monkeypatch):
    w, h, _ = _worker(monkeypatch, timeout_ms=500)
    try:
        p0 = w.pids[0]
        os.kill(p0, signal.SIGSTOP)
        o0, o1 = shared_array(2), shared_array(2)
        stuck = w.submit(_naps(h, [(o0, 0, 0)]))
        time.sleep(0.1)
        # Calls are serialised: this one waits its turn, which comes when the stuck run
        # times out (chip 0 stays stopped: waiting for it instead would hang the test).
        rep = w.run(_naps(h, [(o1, 0, 1)]))
        assert rep.tasks[0].error is None and list(o1) == [1.0, 2.0]
        with pytest.raises(RuntimeError, match=rf"^chip 0 \(pid {p0}\): not responding"):
            stuck.result()
    finally:
        os.kill(w.pids[0], signal.SIGCONT)
        w.close()


def test_a_chip_stuck_in_a_kernel_fails_with_its_own_scheduler_timeout(monkeypatch):
    # The chip keeps beating (its watchdog thread runs): its own SCHEDULER_TIMEOUT (from
    # the environment it inherited) names the kernel; the host adds no wait of its own.
    monkeypatch.setenv("PTO2_SCHEDULER_TIMEOUT_MS", "500")
    w, h, _ = _worker(monkeypatch, timeout_ms=200)
    try:
        p0 = w.pids[0]
        o0 = shared_array(2)
        with pytest.raises(RuntimeError) as e:
            w.run(_naps(h, [(o0, 5000, 0)]))
        assert list(o0) == [1.0, 0.0]  # reported while the kernel still ran (it never ends)
        text = str(e.value)
        assert text.startswith(f"chip 0 (pid {p0}): SCHEDULER_TIMEOUT (code 100)"), text
        assert "_mark_then_nap" in text, text
        # The kernel given up on could still write shared memory: the chip process ends
        # after its reply; the other chip works on.
        assert "the chip process exits" in text, text
        with pytest.raises(RuntimeError, match=rf"^chip 0 \(pid {p0}\): the chip process exited with status 117"):
            w.run(_naps(h, [(shared_array(2), 0, 0)]))
        o1 = shared_array(2)
        w.run(_naps(h, [(o1, 0, 1)]))
        assert list(o1) == [1.0, 2.0]
    finally:
        w.close()


def test_close_with_a_run_in_flight_on_a_stopped_chip_returns_before_the_chip_timeout(monkeypatch):
    # A chip timeout longer than the suite's watchdog: close gives up on the stopped chip
    # by itself (closing), or the test hangs and the watchdog fails the suite.
    w, h, _ = _worker(monkeypatch, timeout_ms=600_000)
    pids = w.pids
    os.kill(pids[1], signal.SIGSTOP)
    handle = w.submit(_naps(h, [(shared_array(2), 0, 1)]))
    time.sleep(0.2)
    w.close()
    with pytest.raises(RuntimeError, match=rf"^chip 1 \(pid {pids[1]}\): not responding"):
        handle.result()
    assert not any(_alive(p) for p in pids)


# ----- Ctrl-C --------------------------------------------------------------------------------


def _interrupted_run(w, orch, after=0.3):
    """Run `orch` with SIGINT sent to this (main) thread `after` seconds in; assert the
    run raises KeyboardInterrupt (each caller checks it came before what the run waits
    for: a chip that stays stopped, a kernel that is still running, another run).
    Returns when the run started."""
    main = threading.main_thread().ident
    # A process started in the background may inherit SIGINT ignored: handle it here.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(after, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            w.run(orch)
    finally:
        timer.join()
        signal.signal(signal.SIGINT, old)
    return t0


def test_ctrl_c_interrupts_a_run_waiting_on_a_stopped_chip(monkeypatch):
    # chip 0 stays stopped and its timeout is longer than the suite's watchdog: only
    # Ctrl-C can end the wait
    w, h, _ = _worker(monkeypatch, timeout_ms=600_000)
    try:
        p0 = w.pids[0]
        os.kill(p0, signal.SIGSTOP)
        o0 = shared_array(2)
        _interrupted_run(w, _naps(h, [(o0, 0, 0)]))
        # The worker stays usable: continued, the chip first answers the interrupted task.
        os.kill(p0, signal.SIGCONT)
        o1 = shared_array(2)
        w.run(_naps(h, [(o1, 0, 0), (shared_array(2), 0, 1)]))
        assert list(o0) == [1.0, 2.0] and list(o1) == [1.0, 2.0]
    finally:
        os.kill(w.pids[0], signal.SIGCONT)
        w.close()


def test_ctrl_c_interrupts_a_long_kernel_and_the_next_run_waits_for_it(monkeypatch):
    w, h, _ = _worker(monkeypatch)
    try:
        o0 = shared_array(2)
        t0 = _interrupted_run(w, _naps(h, [(o0, 1500, 0)]))
        assert list(o0) == [1.0, 0.0]  # still running on the chip
        o1 = shared_array(2)
        w.run(_naps(h, [(o1, 0, 0)]))
        assert time.monotonic() - t0 >= 1.5
        assert list(o0) == [1.0, 2.0] and list(o1) == [1.0, 2.0]
    finally:
        w.close()


def test_ctrl_c_while_a_failed_run_waits_for_a_long_task_on_another_chip(monkeypatch):
    monkeypatch.setenv("TASKRING_CHIP_TIMEOUT_MS", "60000")
    w = Worker(level=3, device_ids=[0, 1])
    h, hf = w.register(nap), w.register(failing)
    w.init()
    try:
        o0, o1 = shared_array(2), shared_array(2)

        def orch(o, _a, _c):
            o.submit_next_level(h, [o1, 1200], worker=1)
            # The long task must be under way when the other chip's task fails: the two
            # chips' dispatch threads start in no set order (each chip has its own), and
            # a task not yet started when the run fails is dropped, not waited for.
            time.sleep(0.2)
            o.submit_next_level(hf, [o0, 0], worker=0)

        _interrupted_run(w, orch, after=0.4)
        # Without Ctrl-C the failure is reported once the other chip's task ended.
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"^chip 0 \(pid \d+\): .*kaboom"):
            w.run(orch)
        assert time.monotonic() - t0 >= 1.2
    finally:
        w.close()


def test_ctrl_c_while_waiting_for_another_threads_run(monkeypatch):
    w, h, _ = _worker(monkeypatch)
    try:
        o0, o1 = shared_array(2), shared_array(2)
        other = w.submit(_naps(h, [(o0, 1000, 0)]))
        while o0[0] == 0:
            time.sleep(0.005)
        _interrupted_run(w, _naps(h, [(o1, 0, 1)]))
        assert list(o1) == [0.0, 0.0]  # it never ran
        assert other.result().tasks[0].error is None
    finally:
        w.close()


def test_ctrl_c_in_the_orchestration_itself(monkeypatch):
    w, h, _ = _worker(monkeypatch, timeout_ms=600_000)
    try:
        os.kill(w.pids[0], signal.SIGSTOP)
        o0 = shared_array(2)

        def orch(o, _a, _c):
            o.submit_next_level(h, [o0, 0], worker=0)
            time.sleep(5)  # Python code of the orchestration: interrupted natively

        _interrupted_run(w, orch)
    finally:
        os.kill(w.pids[0], signal.SIGCONT)
        w.close()


def test_arrays_passed_to_a_task_live_until_the_run_ends(monkeypatch):
    w, _, h_cp = _worker(monkeypatch)
    try:
        outs = [shared_array(4) for _ in range(8)]

        def orch(o, _a, _c):
            for i, out in enumerate(outs):
                a = shared_array(4)  # a temporary: only the run keeps it
                a[...] = i
                o.submit_next_level(h_cp, [a, out], worker=i % 2)
            del a
            gc.collect()

        w.run(orch)
        assert [list(o) for o in outs] == [[float(i)] * 4 for i in range(8)]
    finally:
        w.close()


# ----- the host's death -----------------------------------------------------------------------

HOST = r"""
import os, sys, time, taskring
from taskring import OUT, SCALAR, shared_array

mode, ended = sys.argv[1], sys.argv[2]

@taskring.kernel
def mark_then_nap(out, ms):
    out[0] += 1.0
    time.sleep(ms / 1000.0)
    with open(ended, "a") as f:  # one line per task that ran to its end
        f.write("ended\n")

@taskring.program(signature=[OUT, SCALAR])
def naps(rt, out, n):
    ms = 30000 if n == 1 else 75  # 30 s of work for each chip either way
    for _ in range(int(n)):
        rt.submit(mark_then_nap, outputs=[out], scalars=[ms])

w = taskring.Worker(level=3, device_ids=[0, 1])
h = w.register(naps)
w.init()
child = 0
if mode == "forked-child":
    # A child of the host (e.g. a multiprocessing worker) that outlives it must not keep
    # the chips alive.
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
outs = [shared_array(1), shared_array(1)]
n = 1 if mode == "stuck" else 400
w.submit(lambda o, a, c: [o.submit_next_level(h, [outs[i], n], worker=i) for i in (0, 1)])
while not all(o[0] > 0 for o in outs):
    time.sleep(0.005)
print(" ".join(str(p) for p in w.pids), flush=True)
print(child, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("mode", ["stuck", "many-short", "forked-child"])
def test_chips_exit_when_the_host_is_killed_mid_task(mode, tmp_path):
    ended = tmp_path / "ended"
    ended.touch()
    host = subprocess.Popen([sys.executable, "-c", HOST, mode, str(ended)], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        pids = [int(p) for p in host.stdout.readline().split()]
        child = int(host.stdout.readline())
        assert len(pids) == 2 and all(_alive(p) for p in pids), pids
        time.sleep(0.2)  # well inside a task
        host.kill()
        host.wait()
        _wait_gone(pids)
        # They exited on their host's death: before the end of their 30 s of work (the
        # task in flight at the kill never ended), and while the host's forked child lives.
        n_ended = len(ended.read_text().split())
        assert n_ended < (1 if mode == "stuck" else 2 * 400), f"chips {pids} ran {n_ended} tasks to their end after their host died"
        assert not child or _alive(child), "the chips outlived the host's forked child"
    finally:
        host.kill()
        host.wait()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


# ----- fork() of the host ---------------------------------------------------------------------


def test_a_worker_cannot_be_used_after_fork_and_a_new_one_can(monkeypatch):
    # The child raises before any wait on the parent's chips: one would outlast the
    # suite's watchdog (the parent waits for the child).
    w, h, h_cp = _worker(monkeypatch, timeout_ms=600_000)
    parent = os.getpid()
    pids = w.pids
    r, wr = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(r)
            try:
                w.run(_naps(h, [(shared_array(2), 0, 0)]))
            except RuntimeError as e:
                want = f"this Worker was created in process {parent}; it cannot be used after fork()"
                assert str(e) == want, str(e)
            else:
                raise AssertionError("no error")
            try:
                w.arena_stats(0)
            except RuntimeError as e:
                assert "cannot be used after fork()" in str(e)
            w.close()  # forgets the parent's node, touching nothing
            with Worker(level=3, device_ids=[0]) as w2:
                hc = w2.register(cp)
                w2.init()
                a, b = shared_array(4), shared_array(4)
                a[...] = 3.0
                w2.run(lambda o, _a, _c: o.submit_next_level(hc, [a, b], worker=0))
                assert list(b) == [3.0] * 4
            code = 0
        except BaseException as e:  # reported through the pipe
            os.write(wr, repr(e).encode())
        finally:
            os._exit(code)
    os.close(wr)
    _, status = os.waitpid(child, 0)
    msg = os.read(r, 4096).decode()
    os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0, msg
    try:
        assert all(_alive(p) for p in pids)
        o = shared_array(2)
        w.run(_naps(h, [(o, 0, 0), (shared_array(2), 0, 1)]))
        assert list(o) == [1.0, 2.0]
    finally:
        w.close()


# ----- init/close cycles ----------------------------------------------------------------------


def _counts():
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    children = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/children") as f:
                children += len(f.read().split())
        except FileNotFoundError:
            pass
    return maps, len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")), children


def test_init_close_cycles_leak_nothing():
    a, b = shared_array(4), shared_array(4)

    def cycle():
        w = Worker(level=3, device_ids=[0, 1])
        hc = w.register(cp)
        w.init()
        w.run(lambda o, _a, _c: [o.submit_next_level(hc, [a, b], worker=i) for i in (0, 1)])
        w.arena_stats(1)
        pids = w.pids
        w.close()
        return pids

    cycle()  # one-time lazy initialisation
    before = _counts()
    for _ in range(30):
        pids = cycle()
        assert not any(_alive(p) for p in pids)
    after = _counts()
    assert after[0] <= before[0] + 4, f"mappings {before[0]} -> {after[0]}"
    assert after[1:] <= before[1:] and after[1] <= before[1] and after[2] <= before[2] and after[3] <= before[3], (before, after)


# ----- several threads -----------------------------------------------------------------------


def test_threads_share_a_worker_and_close_waits_for_the_run_in_flight(monkeypatch):
    w, h, h_cp = _worker(monkeypatch)
    errors = []

    def body(i):
        try:
            for _ in range(5):
                a, b = shared_array(4), shared_array(4)
                a[...] = i
                w.run(lambda o, _a, _c: o.submit_next_level(h_cp, [a, b], worker=i % 2))
                assert list(b) == [float(i)] * 4
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    o = shared_array(2)
    handle = w.submit(_naps(h, [(o, 400, 0)]))
    while o[0] == 0:
        time.sleep(0.005)
    w.close()  # waits for the run in flight, which completes
    assert list(o) == [1.0, 2.0]
    assert handle.result().tasks[0].error is None
    with pytest.raises(RuntimeError, match="closed|init"):
        w.run(_naps(h, [(o, 0, 0)]))
