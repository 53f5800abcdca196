"""Simpler-style task arguments at L3 (docs/api.md §4.1.1): `TaskArgs` with `add_tensor` /
`add_scalar` passed to `submit_next_level`, ordered by the program's signature, tags
checked against it."""


import numpy as np
import pytest

import taskring
from taskring import IN, INOUT, OUT, SCALAR, TaskArgs, TensorArgType, shared_array

K = taskring.kernels
N = 32


@taskring.program(signature=[IN, OUT, SCALAR])
def scaled(rt, a, out, alpha):
    rt.submit(K.scale, inputs=[a], outputs=[out], scalars=[alpha])


@taskring.program(signature=[IN, INOUT])
def accumulate(rt, a, acc):
    rt.submit(K.add, inputs=[a, acc], outputs=[acc])


@pytest.fixture(scope="module")
def worker():
    w = taskring.Worker(level=3, device_ids=[0, 1])
    handles = (w.register(scaled), w.register(accumulate))
    w.init()
    yield w, handles
    w.close()


def test_task_args_as_upstream_writes_them(worker):
    w, (h_scaled, h_acc) = worker
    a = shared_array(N)
    a[:] = np.arange(N)
    out, acc = shared_array(N), shared_array(N)
    acc[:] = 1.0

    def orch(o, args, cfg):
        ta = TaskArgs()
        ta.add_tensor(a)  # tag defaults to INPUT
        ta.add_tensor(out, TensorArgType.OUTPUT_EXISTING)
        ta.add_scalar(2.0)
        c = taskring.CallConfig()
        c.runtime_env.ring_task_window = [128, 64, 32, 16]
        o.submit_next_level(h_scaled, ta, c, worker=1)
        tb = TaskArgs()
        tb.add_tensor(out, TensorArgType.INPUT)  # depends on the first task through `out`
        tb.add_tensor(acc, TensorArgType.INOUT)
        o.submit_next_level(h_acc, tb, worker=0)

    rep = w.run(orch)
    np.testing.assert_array_equal(out, np.arange(N) * 2.0)
    np.testing.assert_array_equal(acc, np.arange(N) * 2.0 + 1.0)
    assert rep.tasks[0].ring_sizing.task_window == (128, 64, 32, 16)


def test_output_tag_and_no_dep_and_views(worker):
    w, (h_scaled, _) = worker
    buf = shared_array(2 * N)
    buf[:N] = 3.0

    def orch(o, args, cfg):
        ta = TaskArgs()
        ta.add_tensor(buf[:N], TensorArgType.NO_DEP)  # NO_DEP is accepted for IN
        ta.add_tensor(buf[N:], TensorArgType.OUTPUT)
        ta.add_scalar(-1)
        o.submit_next_level(h_scaled, ta, worker=0)

    w.run(orch)
    assert (buf[N:] == -3.0).all()


@pytest.mark.parametrize(
    "tags,message",
    [
        ((TensorArgType.OUTPUT_EXISTING, TensorArgType.OUTPUT_EXISTING), "argument 0: tag OUTPUT_EXISTING does not agree with the program's signature, which has IN there"),
        ((TensorArgType.INPUT, TensorArgType.INPUT), "argument 1: tag INPUT does not agree with the program's signature, which has OUT there"),
        ((TensorArgType.INPUT, TensorArgType.INOUT), "argument 1: tag INOUT does not agree with the program's signature, which has OUT there"),
    ],
)
def test_tags_must_agree_with_the_signature(worker, tags, message):
    w, (h_scaled, _) = worker
    a, out = shared_array(N), shared_array(N)

    def orch(o, args, cfg):
        ta = TaskArgs()
        ta.add_tensor(a, tags[0])
        ta.add_tensor(out, tags[1])
        ta.add_scalar(1.0)
        o.submit_next_level(h_scaled, ta, worker=0)

    with pytest.raises(ValueError, match=message):
        w.run(orch)


def test_counts_must_match_the_signature(worker):
    w, (h_scaled, _) = worker
    a = shared_array(N)

    def orch(o, args, cfg):
        ta = TaskArgs()
        ta.add_tensor(a)
        o.submit_next_level(h_scaled, ta, worker=0)

    with pytest.raises(ValueError, match=r"TaskArgs has 1 tensors and 0 scalars; the program's signature \[IN, OUT, SCALAR\] takes 2 and 1"):
        w.run(orch)


def test_a_plain_numpy_array_says_to_use_shared_array(worker):
    w, (h_scaled, _) = worker
    out = shared_array(N)

    def orch(o, args, cfg):
        ta = TaskArgs()
        ta.add_tensor(np.zeros(N, np.float32))
        ta.add_tensor(out, TensorArgType.OUTPUT_EXISTING)
        ta.add_scalar(1.0)
        o.submit_next_level(h_scaled, ta, worker=0)

    with pytest.raises(TypeError, match="taskring.shared_array"):
        w.run(orch)


def test_at_l2_add_tensor_is_add():
    @taskring.program(signature=[IN, OUT])
    def prog(rt, a, out):
        ta = TaskArgs()
        ta.add_tensor(a)
        ta.add_tensor(out, TensorArgType.OUTPUT_EXISTING)
        rt.submit_args(K.copy, ta)

    a, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    taskring.run(prog, a, out)
    np.testing.assert_array_equal(out, a)

    @taskring.program(signature=[IN, OUT])
    def host_array_at_l2(rt, a, out):
        ta = TaskArgs()
        ta.add_tensor(np.zeros(8, np.float32))
        rt.submit_args(K.copy, ta)

    with pytest.raises(TypeError, match="TaskArgs entry 0: a INPUT argument of a kernel must be a taskring Tensor"):
        taskring.run(host_array_at_l2, a, out)


def test_an_int_scalar_beyond_int64_is_a_value_error(worker):
    w, (h_scaled, _) = worker
    a, out = shared_array(N), shared_array(N)
    with pytest.raises(ValueError, match=r"argument 2: scalar 18446744073709551616 does not fit int64"):
        w.run(lambda o, args, cfg: o.submit_next_level(h_scaled, [a, out, 2**64], worker=0))
