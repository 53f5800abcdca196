"""Native kernels written by users (docs/api.md §11): a C library built here with the system
compiler, loaded with taskring.load_kernel, run at L2 and L3 without the GIL; their
results against the builtins, their failures, signatures and load errors; numba cfuncs
when numba is installed."""

import faulthandler
import importlib.util
import os
import subprocess

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, SCALAR, ChipWorker, RuntimeFailure

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLE = os.path.join(ROOT, "examples", "native", "paged_decode.py")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("paged_decode_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def lib(example, tmp_path_factory):
    return example.build(str(tmp_path_factory.mktemp("native") / "libtrkernels.so"))


def test_paged_decode_with_c_kernels_matches_the_builtins(example, lib):
    ks = example.native_kernels(lib)
    nb, stride = 24, 5
    q, kt, v = example.inputs(nb, 29)
    outs = []
    with ChipWorker() as w:
        for kernels in (ks, example.BUILTIN):
            out = np.zeros((example.HEADS, example.DIM), np.float32)
            rep = w.run(example.decode_program(kernels), q, kt, v, out, nb, stride)
            assert rep.tasks == 3 * nb + 3  # with the alloc of the score matrix
            outs.append(out)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[0], example.reference(q, kt, v, nb, stride), rtol=1e-4, atol=1e-5)


def test_the_example_script_runs(lib):
    r = subprocess.run([os.sys.executable, EXAMPLE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "native (C)" in r.stdout and "builtin" in r.stdout


def test_load_errors_name_what_is_missing(lib):
    with pytest.raises(OSError, match="cannot load native kernel library /no/such/libk.so"):
        taskring.load_kernel("/no/such/libk.so", "tr_add")
    with pytest.raises(ValueError, match="has no symbol 'tr_nothing'"):
        taskring.load_kernel(lib, "tr_nothing")
    with pytest.raises(ValueError, match="core must be 'aiv', 'aic' or 'any'"):
        taskring.load_kernel(lib, "tr_add", core="gpu")
    with pytest.raises(ValueError, match="is not a rule like"):
        taskring.load_kernel(lib, "tr_add", tensors=["float32[x]"])


def test_loading_twice_gives_the_same_kernel(lib):
    a = taskring.load_kernel(lib, "tr_add")
    assert taskring.load_kernel(lib, "tr_add") is a
    assert a.name == "tr_add" and a.core == "aiv"
    assert taskring.load_kernel(lib, "tr_add", name="my_add").name == "my_add"


def _unary(kernel, scalars=()):
    @taskring.program(signature=[IN, OUT])
    def prog(rt, a, out):
        rt.submit(kernel, inputs=[a], outputs=[out], scalars=list(scalars))

    return prog


def test_a_kernel_error_fails_its_task_with_the_kernels_message(lib):
    fail = taskring.load_kernel(lib, "tr_fail")
    a, out = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with ChipWorker(cores=1) as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(_unary(fail), a, out)
        assert ei.value.code == 200
        assert "tr_fail" in str(ei.value) and "returned 3: bad block: 2 tensors is not what I wanted" in str(ei.value)
        w.run(_unary(taskring.load_kernel(lib, "tr_copy")), np.ones(4, np.float32), out)  # still usable
        assert (out == 1).all()


def test_a_signature_rejects_wrong_arguments_at_submit(lib):
    add = taskring.load_kernel(lib, "tr_add", tensors=["float32[1]"] * 3, scalars=0)
    a, out = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(_unary(add), a, out)
    assert ei.value.name == "INVALID_ARGS" and "takes 3 tensors, got 2" in str(ei.value)
    wrong_dtype = taskring.load_kernel(lib, "tr_copy", tensors=["float32", "int32"], scalars=0)
    with pytest.raises(RuntimeFailure, match="tensor 1 must be int32, got float32"):
        taskring.run(_unary(wrong_dtype), a, out)


MEET_C = r"""
#include <stdatomic.h>
#include "taskring_kernel.h"

/* Counts itself in at tensor 0 (an int32 the meeting kernels share), then spins until
   scalar 0 kernels have: they all return only if they run side by side. */
int32_t tr_meet(const tr_tensor *t, int32_t nt, const tr_scalar *s, int32_t ns, char *err, size_t errlen) {
    (void)nt, (void)ns, (void)err, (void)errlen;
    _Atomic int32_t *n = (_Atomic int32_t *)t[0].data;
    atomic_fetch_add(n, 1);
    while (atomic_load(n) < s[0].v.i) {
    }
    return 0;
}
"""


def test_native_kernels_run_in_parallel_without_the_gil(tmp_path):
    # Two kernels that each wait for the other: run one after the other (a core or the
    # GIL held), the first never returns and the chip's SCHEDULER_TIMEOUT fails the run.
    src = tmp_path / "meet.c"
    src.write_text(MEET_C)
    lib = str(tmp_path / "libmeet.so")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I", os.path.join(ROOT, "include"), "-o", lib, str(src)], check=True)
    meet = taskring.load_kernel(lib, "tr_meet", core="any", tensors=["int32"], scalars=1)

    @taskring.program(signature=[IN])
    def two_meet(rt, count):
        rt.submit(meet, no_dep=[count], scalars=[2])
        rt.submit(meet, no_dep=[count], scalars=[2])

    with ChipWorker(cores=2) as w:
        for _ in range(2):
            count = np.zeros(1, np.int32)
            w.run(two_meet, count)
            assert count[0] == 2


def test_native_kernels_at_l3_loaded_before_and_after_init(lib):
    add = taskring.load_kernel(lib, "tr_add")

    @taskring.program(signature=[IN, IN, OUT])
    def native_add(rt, a, b, out):
        rt.submit(add, inputs=[a, b], outputs=[out])

    @taskring.program(signature=[IN, OUT, SCALAR])
    def late_fill(rt, a, out, v):
        # loaded inside the chip process, after the worker's init()
        rt.submit(taskring.load_kernel(lib, "tr_fill"), outputs=[out], scalars=[v])

    with taskring.Worker(level=3, device_ids=[0, 1]) as w:
        h_add, h_fill = w.register(native_add), w.register(late_fill)
        w.init()
        a, b = taskring.shared_array(64), taskring.shared_array(64)
        a[:], b[:] = np.arange(64), 1.0
        o1, o2 = taskring.shared_array(64), taskring.shared_array(64)

        def orch(o, args, cfg):
            o.submit_next_level(h_add, [a, b, o1], worker=0)
            o.submit_next_level(h_fill, [a, o2, 7.5], worker=1)

        w.run(orch)
        np.testing.assert_array_equal(o1, np.arange(64) + 1.0)
        assert (o2 == 7.5).all()


def test_a_crashing_native_kernel_at_l3_is_a_dead_chip(lib):
    crash = taskring.load_kernel(lib, "tr_crash")

    @taskring.program(signature=[IN, OUT])
    def crashes(rt, a, out):
        rt.submit(crash, inputs=[a], outputs=[out])

    # The chip is forked with pytest's faulthandler on; its crash would print a Python
    # "Fatal error" dump that only looks alarming. The host's report is what is tested.
    was = faulthandler.is_enabled()
    faulthandler.disable()
    try:
        with taskring.Worker(level=3, device_ids=[0]) as w:
            h = w.register(crashes)
            w.init()
            a, out = taskring.shared_array(4), taskring.shared_array(4)
            with pytest.raises(RuntimeError, match=r"^chip 0 \(pid \d+\): .*(signal|SIGSEGV|11)"):
                w.run(lambda o, args, cfg: o.submit_next_level(h, [a, out], worker=0))
    finally:
        if was:
            faulthandler.enable()



def test_numba_cfunc_kernel():
    nb = pytest.importorskip("numba")
    from taskring.numba_abi import KERNEL_SIG, scalar_f64, tensor_array

    @nb.cfunc(KERNEL_SIG)
    def add_scalar(tensors, ntensors, scalars, nscalars, err, errlen):
        if ntensors != 2 or nscalars != 1:
            return 1
        a = tensor_array(tensors, 0, nb.float32)
        out = tensor_array(tensors, 1, nb.float32)
        x = scalar_f64(scalars, 0)
        for i in range(a.shape[0]):
            out[i] = a[i] + x
        return 0

    k = taskring.kernel(add_scalar)
    assert k.name == "add_scalar"
    a, out = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    taskring.run(_unary(k, [2.5]), a, out)
    np.testing.assert_array_equal(out, a + 2.5)
