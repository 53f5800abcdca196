"""Capture and replay from Python (docs/api.md §10): a replay computes what a normal run
computes (builtin and Python kernels), argument checks, exact_config, failures."""

import numpy as np
import pytest

import taskring
from taskring import IN, INOUT, OUT, SCALAR

K = taskring.kernels


@taskring.kernel
def _axpb(x, y, a):
    """y = a * x + 1 (a Python kernel, holds the GIL)."""
    y[...] = a * x + 1.0


@taskring.kernel
def _fail_if_negative(x, y):
    if x.min() < 0:
        raise ValueError("negative input")
    y[...] = x


@taskring.program(signature=[IN, IN, OUT])
def step(rt, a, b, out):
    """A small decode-like step: scoped runtime outputs, row views, a Python kernel."""
    with rt.scope():
        s = rt.submit(K.add, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
        top = rt.submit(K.scale, inputs=[s[0:2]], outputs=[rt.spec((2, 8), a.dtype)], scalars=[2.0]).outputs[0]
        rt.submit(K.copy, inputs=[top], outputs=[out[0:2]])
        rt.submit(_axpb, inputs=[s[2:4]], outputs=[out[2:4]], scalars=[3.0])


def _data(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2)] + [np.zeros((4, 8), np.float32)]


def test_replay_equals_a_normal_run_with_python_kernels():
    with taskring.ChipWorker() as w:
        a, b, out = _data(1)
        g = w.capture(step, a, b, out)
        assert isinstance(g, taskring.CapturedProgram)
        assert g.tasks == 4 and g.edges >= 3
        assert g.report.replayed is False and g.report.tasks == 4
        assert g.ring_needs.task_window[1] >= 1
        for seed in range(2, 6):
            a2, b2, out2 = _data(seed)
            ref = np.zeros_like(out2)
            rep_n = w.run(step, a2, b2, ref)
            assert rep_n.replayed is False
            rep = g.replay(a2, b2, out2)
            assert rep.replayed is True and rep.tasks == 4
            np.testing.assert_array_equal(out2, ref)
        s = a2 + b2
        np.testing.assert_allclose(out2[0:2], 2 * s[0:2], rtol=1e-6)
        np.testing.assert_allclose(out2[2:4], 3 * s[2:4] + 1, rtol=1e-6)


def test_replay_checks_arguments():
    with taskring.ChipWorker() as w:
        a, b, out = _data(1)
        g = w.capture(step, a, b, out)
        with pytest.raises(ValueError, match="argument 1: shape"):
            g.replay(a, np.zeros((4, 4), np.float32), out)
        with pytest.raises(ValueError, match="argument 2: dtype int32"):
            g.replay(a, b, np.zeros((4, 8), np.int32))
        with pytest.raises(ValueError, match="captured with 3 arguments"):
            g.replay(a, b)
        # Other arrays of the captured shapes are fine.
        g.replay(*_data(7))


def test_replay_belongs_to_its_worker():
    w = taskring.ChipWorker()
    a, b, out = _data(1)
    g = w.capture(step, a, b, out)
    w.close()
    with pytest.raises(ValueError, match="closed"):
        g.replay(a, b, out)
    w.init()  # a new chip: the graph is not its
    with pytest.raises(ValueError, match="closed"):
        g.replay(a, b, out)
    w.close()


@taskring.program(signature=[INOUT, SCALAR])
def chain(rt, x, n):
    with rt.scope():
        for _ in range(n):
            t = rt.submit(K.scale, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)], scalars=[1.0]).outputs[0]
            rt.submit(K.copy, inputs=[t], outputs=[x])


def test_exact_config_holds_and_smaller_fails():
    with taskring.ChipWorker() as w:
        x = np.ones((4, 8), np.float32)
        g = w.capture(chain, x, 8)
        assert g.tasks == 16
        exact = g.exact_config()
        assert isinstance(exact, taskring.CallConfig)
        env = exact.runtime_env
        assert env.ring_task_window[1] == 32  # 16 live tasks in the scope + 1
        assert env.ring_heap[1] == 8 * 1024
        for _ in range(5):
            rep = g.replay(x, 8, config=exact)
            assert rep.replayed and rep.ring_sizing.task_window[1] == 32
        small = g.exact_config()
        small.runtime_env.ring_task_window = [32, 16, 32, 32]
        with pytest.raises(taskring.RuntimeFailure) as e:
            g.replay(x, 8, config=small)
        assert e.value.code == 1  # SCOPE_DEADLOCK
        small = g.exact_config()
        small.runtime_env.ring_heap = [1024, 4096, 1024, 1024]
        with pytest.raises(taskring.RuntimeFailure) as e:
            g.replay(x, 8, config=small)
        assert e.value.code == 2  # HEAP_RING_DEADLOCK
        g.replay(x, 8, config=exact)


@taskring.program(signature=[IN, OUT])
def guarded(rt, x, y):
    with rt.scope():
        t = rt.submit(K.scale, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)], scalars=[1.0]).outputs[0]
        rt.submit(_fail_if_negative, inputs=[t], outputs=[y])


def test_a_failing_python_kernel_fails_the_replay_and_the_worker_stays_usable():
    with taskring.ChipWorker() as w:
        x = np.ones((2, 8), np.float32)
        y = np.zeros((2, 8), np.float32)
        g = w.capture(guarded, x, y)
        with pytest.raises(taskring.RuntimeFailure) as e:
            g.replay(-x, y)
        assert e.value.code == 200 and "_fail_if_negative" in str(e.value)
        y2 = np.zeros_like(y)
        assert g.replay(2 * x, y2).replayed
        np.testing.assert_array_equal(y2, 2 * x)
        assert not w.run(guarded, x, y).replayed
