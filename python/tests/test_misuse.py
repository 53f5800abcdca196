"""Misuse of the L2 API (docs/api.md §2, §3, §6): wrong tensors, dtypes, argument counts
and configs rejected before or at submit, real platforms refused, and handles that do
not outlive their run."""

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, CallConfig, ChipWorker, RunConfig, RuntimeFailure

from l2_helpers import K, check_vector_add, plain_add, vec_args, vector_add


# ----- misuse -------------------------------------------------------------------------------------


def test_wrong_tensor_count_to_builtin():
    @taskring.program(signature=[IN, IN, OUT])
    def bad(rt, a, b, out):
        rt.submit(K.add, inputs=[a], outputs=[out])

    a, b, out = vec_args(seed=16)
    # validated at submit: an orchestration-API argument error (INVALID_ARGS, code 5)
    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(bad, a, b, out)
    assert ei.value.code == 5
    assert "'add'" in str(ei.value)
    assert (out == 0).all()


def test_wrong_dtype_to_builtin():
    a, b, out = vec_args(seed=17)
    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(plain_add, a, b.astype(np.int32), out)
    assert ei.value.code == 5
    assert "dtype" in str(ei.value)


def test_builtin_shape_mismatch_rejected_at_submit():
    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        rt.submit(K.copy, inputs=[x], outputs=[out])

    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(prog, np.zeros(4, np.float32), np.zeros(8, np.float32))
    assert ei.value.code == 5 and "copy" in str(ei.value)


def test_unsupported_host_dtype():
    a, b, out = vec_args(seed=18)
    with pytest.raises(TypeError, match="float64"):
        taskring.run(plain_add, a.astype(np.float64), b, out)


def test_non_contiguous_array():
    a, b, out = vec_args(n=64, seed=19)
    strided = np.zeros(128, np.float32)[::2]
    assert not strided.flags.c_contiguous
    with pytest.raises(ValueError, match="C-contiguous"):
        taskring.run(plain_add, strided, b, out)
    with pytest.raises(ValueError, match="C-contiguous"):
        taskring.run(plain_add, a, b, np.zeros((64, 2), np.float32)[:, 0])


def test_list_instead_of_array():
    a, b, out = vec_args(seed=20)
    with pytest.raises(TypeError):
        taskring.run(plain_add, list(a), b, out)
    with pytest.raises(TypeError):
        plain_add(a, b, out.tolist())


def test_wrong_number_of_program_args():
    a, b, out = vec_args(seed=21)
    with pytest.raises(TypeError):
        taskring.run(plain_add, a, b)
    with pytest.raises(TypeError):
        plain_add(a, b, out, out)
    with ChipWorker(prewarm=False) as w:
        with pytest.raises(TypeError):
            w.run(plain_add, a)
        assert w.arena_stats.builds == 0  # nothing dispatched


def test_invalid_config_rejected_before_dispatch():
    a, b, out = vec_args(seed=22)
    with ChipWorker(prewarm=False) as w:
        with pytest.raises(ValueError, match="output_prefix must be set"):
            w.run(vector_add, a, b, out, config=CallConfig(enable_dep_gen=True))
        bad = CallConfig()
        bad.runtime_env.ring_heap = [0, 1000, 0, 0]
        with pytest.raises(ValueError, match=r"RuntimeEnv: ring_heap\[1\]"):
            w.run(vector_add, a, b, out, config=bad)
        with pytest.raises(ValueError, match=r"RuntimeEnv: ring_heap\[1\]"):
            taskring.run(vector_add, a, b, out, config=bad)
        with pytest.raises(TypeError):
            w.run(vector_add, a, b, out, config="big")
        assert w.arena_stats.builds == 0
        assert (out == 0).all()


@pytest.mark.parametrize("platform", ["a2a3", "a5"])
def test_real_platform_raises_at_dispatch(platform):
    a, b, out = vec_args(seed=23)
    cfg = RunConfig(platform=platform)  # accepted by RunConfig
    for call in (
        lambda: taskring.run(vector_add, a, b, out, config=cfg),
        lambda: vector_add(a, b, out, config=cfg),
    ):
        with pytest.raises(RuntimeError) as ei:
            call()
        assert not isinstance(ei.value, RuntimeFailure)
        assert "sim" in str(ei.value) and "only" in str(ei.value)
    with ChipWorker() as w:
        with pytest.raises(RuntimeError, match="sim"):
            w.run(vector_add, a, b, out, config=cfg)
        w.run(vector_add, a, b, out)
    check_vector_add(a, b, out)


def test_orchestrator_unusable_after_run():
    kept = []

    @taskring.program(signature=[IN])
    def prog(rt, x):
        kept.append((rt, x))

    taskring.run(prog, np.zeros(4, np.float32))
    rt, x = kept[0]
    with pytest.raises(RuntimeError):
        rt.submit(K.noop, inputs=[x])


def test_tensor_handles_do_not_outlive_their_run():
    """A Tensor handle kept past its run is refused (its memory belongs to that run)."""
    kept = []

    @taskring.program(signature=[taskring.IN, taskring.OUT])
    def keep(rt, x, out):
        t = rt.submit(taskring.kernels.copy, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)]).outputs[0]
        kept.append(t)
        kept.append(x)
        rt.submit(taskring.kernels.copy, inputs=[t], outputs=[out])

    @taskring.program(signature=[taskring.IN, taskring.OUT])
    def reuse(rt, x, out):
        rt.submit(taskring.kernels.copy, inputs=[kept[0]], outputs=[out])

    @taskring.program(signature=[taskring.IN, taskring.OUT])
    def reuse_param(rt, x, out):
        rt.submit(taskring.kernels.copy, inputs=[kept[1]], outputs=[out])

    x = np.arange(8, dtype=np.float32)
    out = np.zeros_like(x)
    with taskring.ChipWorker() as w:
        w.run(keep, x, out)
        assert np.array_equal(out, x)
        for prog in (reuse, reuse_param):
            with pytest.raises(ValueError, match="belongs to another run"):
                w.run(prog, x, out)
        w.run(keep, x, out)  # still usable
