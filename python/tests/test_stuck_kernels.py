"""A native kernel that outlives its SCHEDULER_TIMEOUT and writes afterwards: no later
run may succeed over memory it can still write (docs/faults.md). At L2 its arena is set
aside and runs over its buffers are refused until it returns; at L3 its chip process
ends."""

import importlib.util
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, SCALAR, ChipWorker, RuntimeFailure

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "native", "paged_decode.py")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("paged_decode_example_stuck", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build(str(tmp_path_factory.mktemp("native") / "libtrkernels.so"))


def test_a_stale_native_kernel_never_writes_into_a_later_run(lib, monkeypatch):
    monkeypatch.setenv("PTO2_SCHEDULER_TIMEOUT_MS", "1000")
    sleep_fill = taskring.load_kernel(lib, "tr_sleep_fill")
    fill = taskring.load_kernel(lib, "tr_fill")
    spin = taskring.load_kernel(lib, "tr_spin_ms")
    copy = taskring.load_kernel(lib, "tr_copy")

    @taskring.program(signature=[OUT])
    def first(rt, out):
        # a runtime output the kernel writes 1.3 s later, after the run gave up on it
        tmp = rt.submit(sleep_fill, outputs=[rt.spec((256,), "float32")], scalars=[1300.0, 42.0]).outputs[0]
        rt.submit(copy, inputs=[tmp], outputs=[out])

    @taskring.program(signature=[OUT])
    def second(rt, out):
        # another program on the same sizing: a runtime output at the same heap offset,
        # alive across the moment the stale kernel writes
        tmp = rt.submit(fill, outputs=[rt.spec((256,), "float32")], scalars=[7.0]).outputs[0]
        rt.submit(spin, inouts=[tmp], scalars=[700.0])
        rt.submit(copy, inputs=[tmp], outputs=[out])

    with ChipWorker(cores=2) as w:
        out1, out2 = np.zeros(256, np.float32), np.zeros(256, np.float32)
        with pytest.raises(RuntimeFailure) as ei:
            w.run(first, out1)
        assert ei.value.name == "SCHEDULER_TIMEOUT" and "tr_sleep_fill" in str(ei.value)
        rep = w.run(second, out2)
        assert (out2 == 7.0).all(), out2[:4]
        assert not rep.arena_hit  # the stuck kernel's arena was set aside
        time.sleep(0.3)
        assert (out1 == 0).all()  # the kernel wrote into its own set-aside output only


def test_a_run_over_a_stuck_native_kernels_array_is_refused(lib, monkeypatch):
    monkeypatch.setenv("PTO2_SCHEDULER_TIMEOUT_MS", "1000")
    sleep_fill = taskring.load_kernel(lib, "tr_sleep_fill")
    fill = taskring.load_kernel(lib, "tr_fill")

    @taskring.program(signature=[OUT])
    def late(rt, out):
        rt.submit(sleep_fill, outputs=[out], scalars=[2600.0, 42.0])

    @taskring.program(signature=[OUT, SCALAR])
    def fill_with(rt, out, v):
        rt.submit(fill, outputs=[out], scalars=[v])

    with ChipWorker(cores=2) as w:
        x, y = np.zeros(64, np.float32), np.zeros(64, np.float32)
        with pytest.raises(RuntimeFailure, match="SCHEDULER_TIMEOUT"):
            w.run(late, x)
        with pytest.raises(RuntimeFailure) as ei:
            w.run(fill_with, x[8:16], 1.0)
        assert ei.value.name == "SCHEDULER_TIMEOUT"
        assert "argument 0 overlaps memory that kernel 'tr_sleep_fill'" in str(ei.value)
        assert "has not returned" in str(ei.value)
        w.run(fill_with, y, 2.0)  # other memory runs
        assert (y == 2.0).all()
        _wait_for(lambda: (x == 42.0).all())
        w.run(fill_with, x, 3.0)  # the kernel returned: x is free again
        assert (x == 3.0).all()


def test_a_stuck_native_kernel_at_l3_ends_its_chip(lib, monkeypatch):
    monkeypatch.setenv("PTO2_SCHEDULER_TIMEOUT_MS", "1000")
    sleep_fill = taskring.load_kernel(lib, "tr_sleep_fill")

    @taskring.program(signature=[OUT, SCALAR])
    def late(rt, out, ms):
        rt.submit(sleep_fill, outputs=[out], scalars=[ms, 42.0])

    with taskring.Worker(level=3, device_ids=[0, 1]) as w:
        h = w.register(late)
        w.init()
        o = taskring.shared_array(64)
        with pytest.raises(RuntimeError, match=r"^chip 0 \(pid \d+\): SCHEDULER_TIMEOUT.*the chip process exits"):
            w.run(lambda orch, args, cfg: orch.submit_next_level(h, [o, 2500.0], worker=0))
        with pytest.raises(RuntimeError, match=r"^chip 0 \(pid \d+\): .*status 117 .*gave up on"):
            w.run(lambda orch, args, cfg: orch.submit_next_level(h, [o, 1.0], worker=0))
        w.run(lambda orch, args, cfg: orch.submit_next_level(h, [o, 1.0], worker=1))
        assert (o == 42.0).all()
        o[:] = 5.0
        time.sleep(1.8)  # past the moment the stale kernel would have written
        assert (o == 5.0).all()


# ----- Ctrl-C during a long native kernel at L2 -----------------------------------------------


def _sigint_after(seconds):
    """SIGINT to this (main) thread `seconds` from now; returns the timer and the old
    handler (a process started in the background may inherit SIGINT ignored)."""
    main = threading.main_thread().ident
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    return timer, old


def _wait_for(cond):
    """Until `cond()` holds (a kernel that never returns: the suite's watchdog ends it)."""
    while not cond():
        time.sleep(0.02)


@pytest.mark.parametrize("where", ["wait", "orchestration"])
def test_ctrl_c_during_a_long_native_kernel_at_l2_raises_before_the_kernel_returns(lib, where):
    """Ctrl-C while the run waits for a native kernel (or while its orchestration still
    runs Python, after submitting it) raises KeyboardInterrupt at once: the kernel, which
    writes its output only when it returns, has not returned yet. The kernel is set
    aside as after SCHEDULER_TIMEOUT (docs/api.md §6.1): runs over its memory are refused
    until it returns, other runs go ahead."""
    sleep_fill = taskring.load_kernel(lib, "tr_sleep_fill")
    fill = taskring.load_kernel(lib, "tr_fill")

    @taskring.program(signature=[OUT])
    def late(rt, out):
        rt.submit(sleep_fill, outputs=[out], scalars=[4000.0, 42.0])
        if where == "orchestration":
            time.sleep(30)  # Ctrl-C arrives here: the orchestration raises

    @taskring.program(signature=[OUT, SCALAR])
    def fill_with(rt, out, v):
        rt.submit(fill, outputs=[out], scalars=[v])

    with ChipWorker(cores=2, prewarm=False) as w:
        x, y = np.zeros(64, np.float32), np.zeros(64, np.float32)
        refs = sys.getrefcount(x)
        timer, old = _sigint_after(0.5)
        try:
            with pytest.raises(KeyboardInterrupt):
                w.run(late, x)
        finally:
            timer.join()
            signal.signal(signal.SIGINT, old)
        assert (x == 0).all()  # raised before the kernel returned
        # The worker keeps the kernel's array referenced while the kernel can write it
        # (numpy cannot free it and hand its memory to another array).
        assert sys.getrefcount(x) == refs + 1
        with pytest.raises(RuntimeFailure) as ei:
            w.run(fill_with, x[8:16], 1.0)
        assert ei.value.name == "SCHEDULER_TIMEOUT"
        assert "argument 0 overlaps memory that kernel 'tr_sleep_fill'" in str(ei.value)
        assert "when an earlier run was interrupted" in str(ei.value)
        del ei  # its traceback holds the refused run's arguments (a view of x)
        w.run(fill_with, y, 2.0)  # other memory runs, on a replaced core
        assert (y == 2.0).all()
        _wait_for(lambda: (x == 42.0).all())
        w.run(fill_with, x, 3.0)  # the kernel returned: x is free again
        assert (x == 3.0).all()
        assert sys.getrefcount(x) == refs  # and let go


def test_ctrl_c_during_a_replay_of_a_long_native_kernel_raises_before_the_kernel_returns(lib):
    """A replay (docs/api.md §10) is interrupted the same way as a run: KeyboardInterrupt
    before its native kernel returns, the kernel set aside, the worker usable."""
    sleep_fill = taskring.load_kernel(lib, "tr_sleep_fill")

    @taskring.program(signature=[OUT])
    def late(rt, out):
        rt.submit(sleep_fill, outputs=[out], scalars=[2000.0, 42.0])

    with ChipWorker(cores=2, prewarm=False) as w:
        g = w.capture(late, np.zeros(64, np.float32))  # runs it once: 2 s
        x = np.zeros(64, np.float32)
        timer, old = _sigint_after(0.5)
        try:
            with pytest.raises(KeyboardInterrupt):
                g.replay(x)
        finally:
            timer.join()
            signal.signal(signal.SIGINT, old)
        assert (x == 0).all()  # raised before the kernel returned
        _wait_for(lambda: (x == 42.0).all())
        g.replay(x)  # the kernel returned: x replays again
        assert (x == 42.0).all()
