"""Native kernels' own failures reach the user with their reasons: a numba kernel that
raises fails its task with the exception's text; a library that cannot be loaded says
the loader's reason (a missing dependency by name)."""

import os
import subprocess

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, ChipWorker, RuntimeFailure


def test_a_library_with_a_missing_dependency_names_it(tmp_path):
    cc = os.environ.get("CC", "cc")
    dep, lib = tmp_path / "libtrdep.so", tmp_path / "libuser.so"
    (tmp_path / "dep.c").write_text("int tr_dep_value(void) { return 3; }\n")
    (tmp_path / "user.c").write_text(
        "#include <stddef.h>\n#include <stdint.h>\nint tr_dep_value(void);\n"
        "int32_t k(const void *t, int32_t nt, const void *s, int32_t ns, char *e, size_t n) "
        "{ return tr_dep_value() - 3; }\n"
    )
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(dep), str(tmp_path / "dep.c")], check=True)
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "user.c"), f"-L{tmp_path}", "-ltrdep"], check=True
    )
    os.remove(dep)
    with pytest.raises(OSError) as ei:
        taskring.load_kernel(str(lib), "k")
    assert f"cannot load native kernel library {lib}" in str(ei.value)
    assert "libtrdep.so: cannot open shared object file" in str(ei.value)


def test_a_numba_kernel_that_raises_fails_its_task():
    nb = pytest.importorskip("numba")
    from taskring.numba_abi import KERNEL_SIG, tensor_array

    @nb.cfunc(KERNEL_SIG)
    def picky(tensors, ntensors, scalars, nscalars, err, errlen):
        a = tensor_array(tensors, 0, nb.float32)
        out = tensor_array(tensors, 1, nb.float32)
        if a[0] < 0:
            raise ValueError("negative input")
        for i in range(a.shape[0]):
            out[i] = a[i] * 2
        return 0

    k = taskring.kernel(picky)

    @taskring.program(signature=[IN, OUT])
    def prog(rt, a, out):
        rt.submit(k, inputs=[a], outputs=[out])

    with ChipWorker(cores=1) as w:
        out = np.zeros(4, np.float32)
        with pytest.raises(RuntimeFailure) as ei:
            w.run(prog, -np.ones(4, np.float32), out)
        assert ei.value.name == "TASK_FAILED" and "picky" in str(ei.value)
        assert "raised ValueError: negative input" in str(ei.value)
        w.run(prog, np.ones(4, np.float32), out)  # usable, and a clean call is not blamed
        assert (out == 2.0).all()
