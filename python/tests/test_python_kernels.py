"""Python kernels on the simulated chip (docs/api.md §3, §6): numpy views of the task's
tensors, argument order, a raising kernel failing its run, and the GIL released while
the runtime waits."""

import threading
import time

import numpy as np
import pytest

import taskring
from taskring import IN, INOUT, OUT, SCALAR, ChipWorker, Program, RunConfig, RuntimeFailure

from l2_helpers import K, check_vector_add, vec_args, vector_add


# ----- Python kernels ---------------------------------------------------------------------------


def test_python_kernel_gets_numpy_views_and_writes_output():
    seen = []

    @taskring.kernel
    def axpy(x, y, out, alpha, n):
        seen.append((type(x), x.shape, x.dtype, y.dtype, out.flags.writeable, type(alpha), type(n), x.ctypes.data))
        out[...] = alpha * x + y + n

    assert isinstance(axpy, taskring.Kernel)
    assert axpy.name == "axpy"

    @taskring.program(signature=[IN, IN, OUT, SCALAR])
    def prog(rt, x, y, out, alpha):
        with rt.scope():
            rt.submit(axpy, inputs=[x, y], outputs=[out], scalars=[alpha, 3])

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.ones((3, 4), np.float32)
    out = np.zeros((3, 4), np.float32)
    rep = prog(x, y, out, 0.5)
    np.testing.assert_allclose(out, 0.5 * x + y + 3)
    assert rep.tasks == 1
    (tx, shape, dtx, dty, writeable, ta, tn, ptr) = seen[0]
    assert tx is np.ndarray and shape == (3, 4) and dtx == np.float32 and dty == np.float32
    assert writeable
    assert ta is float and tn is int
    assert ptr == x.ctypes.data  # host tensors are passed without copying


def test_python_kernel_argument_order_and_dtypes():
    got = []

    @taskring.kernel(core="aic")
    def k(*args):
        got.append([(a.dtype.name, a.shape) if isinstance(a, np.ndarray) else a for a in args])
        args[1][...] += 1  # inout
        args[2][...] = 7  # output

    assert k.core == "aic"

    @taskring.program(signature=[IN, INOUT, OUT, IN])
    def prog(rt, a, io, out, nd):
        rt.submit(k, outputs=[out], no_dep=[nd], scalars=[2.5, -1], inputs=[a], inouts=[io])

    a = np.ones((2, 3), np.float16)
    io = np.zeros(4, np.int32)
    out = np.zeros(5, np.int64)
    nd = np.zeros(2, np.uint8)
    taskring.run(prog, a, io, out, nd)
    assert got == [[("float16", (2, 3)), ("int32", (4,)), ("int64", (5,)), ("uint8", (2,)), 2.5, -1]]
    assert (io == 1).all() and (out == 7).all()


def test_kernel_bad_core():
    with pytest.raises(ValueError):
        taskring.kernel(lambda x: None, core="gpu")


def test_python_kernel_raises_fails_run_and_worker_survives():
    @taskring.kernel
    def exploding_kernel(x, out):
        raise ValueError("boom from the kernel")

    ran = []

    @taskring.kernel
    def after(x, out):
        ran.append(1)

    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        with rt.scope():
            t = rt.submit(exploding_kernel, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)])
            rt.submit(after, inputs=[t.outputs[0]], outputs=[out])

    x = np.ones(8, np.float32)
    o = np.zeros(8, np.float32)
    a, b, out = vec_args(seed=15)
    with ChipWorker() as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(prog, x, o)
        e = ei.value
        assert isinstance(e, RuntimeError)
        assert e.code == 200
        assert "exploding_kernel" in str(e)
        assert "boom from the kernel" in str(e)
        assert str(e) == f"{e.name} (code {e.code}) on ring {e.ring}: {e.description}. Hint: {e.hint}"
        assert ran == []  # dependants never run
        # the next run on the same worker works
        rep = w.run(vector_add, a, b, out)
        check_vector_add(a, b, out)
        assert rep.tasks == 2
        w.run(Program(lambda rt, x, out: rt.submit(K.copy, inputs=[x], outputs=[out]), [IN, OUT]), x, o)
        assert (o == 1).all()


def test_failing_task_error_names_kernel_and_task_id():
    ids = []

    @taskring.kernel
    def broken_kernel(out):
        raise RuntimeError("no")

    @taskring.program(signature=[OUT])
    def prog(rt, out):
        with rt.scope():
            rt.submit(K.fill, outputs=[rt.spec((4,), "float32")], scalars=[0.0])
            ids.append(rt.submit(broken_kernel, outputs=[out]).id)

    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(prog, np.zeros(4, np.float32))
    text = str(ei.value)
    tid = ids[0]
    assert "broken_kernel" in text
    assert (
        f"ring={tid >> 32}, local={tid & 0xFFFFFFFF}" in text or hex(tid) in text or str(tid) in text
    ), text


FAILED_RUN_WITH_PYTHON_KERNEL_ON_A_CORE = r"""
import sys, threading, time
import numpy as np
import taskring

started = threading.Event()

@taskring.kernel
def slow(x):
    started.set()
    time.sleep(0.1)  # releases the GIL; needs it back to return

@taskring.program(signature=[taskring.IN])
def prog(rt, x):
    rt.submit(slow, inputs=[x])
    started.wait(5)  # the kernel is now on a core
    raise KeyError("orchestration fails while a Python kernel runs")

with taskring.ChipWorker() as w:
    try:
        w.run(prog, np.zeros(4, np.float32))
    except KeyError:
        pass
    w.run(taskring.Program(lambda rt, x: None, [taskring.IN]), np.zeros(4, np.float32))
print("OK")
"""


def test_failed_run_does_not_deadlock_with_python_kernel_on_a_core():
    import subprocess
    import sys

    # A deadlocked child never returns: the suite's watchdog ends the wait for it.
    r = subprocess.run([sys.executable, "-c", FAILED_RUN_WITH_PYTHON_KERNEL_ON_A_CORE], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "OK"


# ----- the GIL ------------------------------------------------------------------------------------


def test_gil_released_while_runtime_waits():
    """A chain of Python kernels through ring_task_window=4: the orchestration blocks
    for a slot while the kernels (which need the GIL) have to run. If the runtime kept
    the GIL while waiting, this would deadlock (the watchdog fixture would kill it)."""

    @taskring.kernel
    def inc(x, out):
        time.sleep(0.001)
        out[...] = x + 1

    @taskring.program(signature=[IN, OUT])
    def chain(rt, x, out):
        prev = x
        for _ in range(24):
            with rt.scope():
                rt.submit(inc, inputs=[prev], outputs=[out])
            prev = out

    x = np.zeros(8, np.float32)
    out = np.zeros(8, np.float32)
    rep = taskring.run(chain, x, out, config=RunConfig(ring_task_window=4))
    np.testing.assert_array_equal(out, 24)
    assert rep.tasks == 24
    assert rep.ring_sizing.task_window == (4, 4, 4, 4)
    assert rep.peak.task_window[1] <= 3  # at most window-1 live


def test_gil_released_other_python_threads_progress():
    """While a run waits on a kernel, another Python thread keeps running: the kernel
    ends only after that thread ran (a run holding the GIL while it waits would
    deadlock, and the watchdog fixture would end it)."""
    events = []
    started, ticked = threading.Event(), threading.Event()

    def ticker():
        started.wait()
        events.append("tick")
        ticked.set()

    @taskring.kernel
    def nap(x, out):
        started.set()
        ticked.wait()
        events.append("kernel end")

    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        rt.submit(nap, inputs=[x], outputs=[out])

    th = threading.Thread(target=ticker)
    th.start()
    try:
        events.append("run start")
        taskring.run(prog, np.zeros(2, np.float32), np.zeros(2, np.float32))
        events.append("run end")
    finally:
        started.set()
        th.join()
    assert events == ["run start", "tick", "kernel end", "run end"]
