"""taskring.kernels: the builtins come from the Rust builtin table, once (docs/api.md §2)."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

import taskring
from taskring import _native
from taskring import kernels as K

API_NAMES = [
    "noop", "busy_wait", "copy", "fill", "add", "sub", "mul", "scale", "exp",
    "matmul", "matmul_acc", "rowmax", "rowsum", "softmax_rows",
]


def test_attributes_all_and_dir_are_the_native_table_in_its_order():
    table = _native.builtin_kernels()
    assert list(table) == API_NAMES  # the API's list, in the Rust table's order
    assert K.__all__ == list(table)
    assert sorted(dir(K)) == sorted(table)
    for name, k in table.items():
        got = getattr(K, name)
        assert isinstance(got, taskring.Kernel)
        assert got.name == name
        assert got.core == ("aic" if name.startswith("matmul") else "any"), name
    from taskring.kernels import add, softmax_rows

    assert (add.name, softmax_rows.name) == ("add", "softmax_rows")


def test_unknown_name_is_an_attribute_error_listing_the_builtins():
    with pytest.raises(AttributeError, match=r"no builtin kernel 'nope' \(builtins: noop, busy_wait, "):
        K.nope  # noqa: B018
    with pytest.raises(ImportError):
        from taskring.kernels import nope  # noqa: F401
    assert not hasattr(K, "Add")


def test_every_builtin_is_documented_in_the_module_docstring():
    doc_names = set(re.findall(r"[a-z_]+", K.__doc__ or ""))
    assert set(K.__all__) <= doc_names, set(K.__all__) - doc_names


def test_a_type_checker_sees_each_builtin_as_a_kernel(tmp_path):
    pytest.importorskip("mypy")
    src = tmp_path / "use_kernels.py"
    src.write_text(textwrap.dedent("""\
        import taskring
        from taskring import kernels as K
        from taskring.kernels import matmul_acc
        reveal_type(K.add)
        reveal_type(matmul_acc)
        k: taskring.Kernel = K.softmax_rows
        n: int = K.copy
    """))
    python_dir = os.path.dirname(os.path.dirname(taskring.__file__))
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-version", "3.11", "--ignore-missing-imports",
         "--no-error-summary", "--cache-dir", str(tmp_path / "cache"), str(src)],
        capture_output=True, text=True, env={**os.environ, "MYPYPATH": python_dir},
    ).stdout
    assert out.count('Revealed type is "taskring._native.Kernel"') == 2, out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and ":7: error: Incompatible types" in errors[0], out
