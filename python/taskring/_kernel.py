"""Kernels made in Python: ``kernel`` (a Python function or a numba cfunc) and
``load_kernel`` (a C function of a shared library, docs/api.md §11)."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, List, Optional, Sequence, Union, overload

from . import _native
from ._native import Kernel


@overload
def kernel(func: Callable[..., Any], *, core: str = "aiv", name: Optional[str] = None) -> Kernel: ...
@overload
def kernel(func: None = None, *, core: str = "aiv", name: Optional[str] = None) -> Callable[[Callable[..., Any]], Kernel]: ...
def kernel(
    func: Optional[Callable[..., Any]] = None, *, core: str = "aiv", name: Optional[str] = None
) -> Union[Kernel, Callable[[Callable[..., Any]], Kernel]]:
    """Turn ``f(*arrays, *scalars)`` into a kernel. It receives numpy views of its
    tensors (inputs, inouts, outputs, no_dep — in that order) and then its scalars, and
    runs on a core thread holding the GIL (the slow path, for tests and prototyping).
    An exception in it fails its task (``RuntimeFailure`` code 200 naming the kernel).

    Usable as ``@kernel`` or ``@kernel(core="aic")``."""

    def wrap(f: Callable) -> Kernel:
        if type(f).__module__.startswith("numba") and hasattr(f, "address"):
            return _numba_kernel(f, core, name)
        if not callable(f):
            raise TypeError(f"kernel() needs a function, got {type(f).__name__}")
        if core not in ("aiv", "aic"):
            raise ValueError(f"core must be 'aiv' or 'aic', got {core!r}")
        return _native.make_python_kernel(f, name or f.__name__, core)

    if func is not None:
        return wrap(func)
    return wrap


def _tensor_rules(tensors: Optional[Sequence[str]]) -> Optional[List[tuple]]:
    """``["float32[2]", "int32", "*[1]", "*"]`` -> ``[(dtype or None, ndim or None), ...]``."""
    if tensors is None:
        return None
    if isinstance(tensors, str):
        raise TypeError("tensors must be a list of rules like 'float32[2]', not one string")
    rules = []
    for i, r in enumerate(tensors):
        if not isinstance(r, str):
            raise TypeError(f"tensors[{i}] must be a str like 'float32[2]', got {type(r).__name__}")
        dtype, _, rest = r.partition("[")
        ndim = None
        if rest:
            if not rest.endswith("]") or not rest[:-1].isdigit():
                raise ValueError(f"tensors[{i}]: {r!r} is not a rule like 'float32[2]', 'float32', '*[2]' or '*'")
            ndim = int(rest[:-1])
        rules.append((None if dtype == "*" else dtype, ndim))
    return rules


def load_kernel(
    path: Any,
    symbol: str,
    *,
    core: str = "aiv",
    name: Optional[str] = None,
    tensors: Optional[Sequence[str]] = None,
    scalars: Optional[int] = None,
) -> Kernel:
    """Load the C function ``symbol`` of the shared library at ``path`` as a kernel
    (the ABI of ``include/taskring_kernel.h``; docs/api.md §11). It runs on core threads
    without the GIL. ``tensors`` (e.g. ``["float32[2]", "float32[2]", "*"]``, one rule
    per tensor argument: dtype or ``*``, optional ``[ndim]``) and ``scalars`` (a count)
    make a signature checked at every submit, so a mismatch is INVALID_ARGS at submit
    instead of undefined behaviour in the kernel. A missing or unloadable library is an
    ``OSError``, a missing symbol a ``ValueError``. Loading the same symbol again
    returns the same kernel (cheap to call inside an orchestration, e.g. in a chip
    process after ``init()``)."""
    if not isinstance(symbol, str):
        raise TypeError(f"symbol must be a str, got {type(symbol).__name__}")
    if scalars is not None and (isinstance(scalars, bool) or not isinstance(scalars, int) or scalars < 0):
        raise ValueError(f"scalars must be an int >= 0, got {scalars!r}")
    rules = _tensor_rules(tensors)
    key = (os.path.abspath(os.fsdecode(path)), symbol, core, name, None if rules is None else tuple(rules), scalars)
    k = _LOADED.get(key)
    if k is None:
        k = _native.load_native_kernel(os.fsdecode(path), symbol, core, name, rules, scalars)
        _LOADED[key] = k
    return k


_LOADED: dict = {}


def _numba_kernel(f: Any, core: str, name: Optional[str]) -> Kernel:
    """A ``numba.cfunc`` compiled with ``taskring.numba_abi.KERNEL_SIG``."""
    sig = getattr(f, "_sig", None)
    if sig is None or len(sig.args) != 6 or str(sig.return_type) != "int32":
        raise TypeError(
            "a numba cfunc kernel must have the taskring ABI signature "
            "int32(tensors, ntensors, scalars, nscalars, err, errlen); use taskring.numba_abi.KERNEL_SIG"
        )
    _catch_numba_exceptions()
    return _native.native_kernel_from_address(f.address, name or f.__name__, core, f)


def _catch_numba_exceptions() -> None:
    """A numba cfunc that raises does not return non-zero: its wrapper hands the
    exception to ``sys.unraisablehook`` (on the kernel's own thread) and returns 0. This
    hook, installed once in front of the one in place, gives an exception raised inside
    a running numba kernel to the runtime, which fails the kernel's task with its text;
    any other goes on to the previous hook."""
    if getattr(sys.unraisablehook, "_taskring", False):
        return
    previous = sys.unraisablehook

    def hook(u: Any) -> None:
        if u.exc_type is not None and _native.report_kernel_raised(f"{u.exc_type.__name__}: {u.exc_value}"):
            return
        previous(u)

    hook._taskring = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


# The public names keep the package as their module (their documented, pickled path).
kernel.__module__ = load_kernel.__module__ = "taskring"
