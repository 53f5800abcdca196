"""The builtin kernels (f32, run in Rust on core threads): ``taskring.kernels.add`` etc.

Tensor arguments in order (inputs first, then outputs); scalars after:

- ``noop`` — any tensors; does nothing.
- ``busy_wait`` — scalar ``iterations``; spins, touches no tensor.
- ``copy(x) -> out``; ``fill() -> out`` with scalar ``value``.
- ``add/sub/mul(a, b) -> out`` (same shapes); ``scale(x) -> out`` with scalar ``alpha``;
  ``exp(x) -> out``.
- ``matmul(a[M,K], b[K,N]) -> c[M,N]``; ``matmul_acc(a, b) -> c`` accumulates (c INOUT).
- ``rowmax/rowsum(x[M,N]) -> out[M]``; ``softmax_rows(x[M,N]) -> out[M,N]``.

The names are not listed here: they come from the Rust builtin table
(``_native.builtin_kernels()``), in its order, as this module's attributes, ``__all__``
and ``dir()``. For a type checker every attribute is a ``Kernel`` (see ``__getattr__``).
"""

from __future__ import annotations

from ._native import Kernel, builtin_kernels as _builtin_kernels

_BUILTINS: dict[str, Kernel] = _builtin_kernels()

globals().update(_BUILTINS)

__all__ = list(_BUILTINS)


def __getattr__(name: str) -> Kernel:
    """Only reached for a name that is not a builtin (PEP 562); its return type tells a type
    checker that ``kernels.add`` and ``from taskring.kernels import add`` are ``Kernel``s."""
    builtins = ", ".join(__all__)
    raise AttributeError(f"taskring.kernels has no builtin kernel {name!r} (builtins: {builtins})")


def __dir__() -> list[str]:
    return list(__all__)
