"""The builtin kernels (f32, run in Rust on core threads).

Tensor arguments in order (inputs first, then outputs); scalars after:

- ``noop`` — any tensors; does nothing.
- ``busy_wait`` — scalar ``iterations``; spins, touches no tensor.
- ``copy(x) -> out``; ``fill() -> out`` with scalar ``value``.
- ``add/sub/mul(a, b) -> out`` (same shapes); ``scale(x) -> out`` with scalar ``alpha``;
  ``exp(x) -> out``.
- ``matmul(a[M,K], b[K,N]) -> c[M,N]``; ``matmul_acc(a, b) -> c`` accumulates (c INOUT).
- ``rowmax/rowsum(x[M,N]) -> out[M]``; ``softmax_rows(x[M,N]) -> out[M,N]``.
"""

from ._native import builtin_kernels as _builtin_kernels

_k = _builtin_kernels()
noop = _k["noop"]
busy_wait = _k["busy_wait"]
copy = _k["copy"]
fill = _k["fill"]
add = _k["add"]
sub = _k["sub"]
mul = _k["mul"]
scale = _k["scale"]
exp = _k["exp"]
matmul = _k["matmul"]
matmul_acc = _k["matmul_acc"]
rowmax = _k["rowmax"]
rowsum = _k["rowsum"]
softmax_rows = _k["softmax_rows"]
del _k

__all__ = [
    "noop", "busy_wait", "copy", "fill", "add", "sub", "mul", "scale", "exp",
    "matmul", "matmul_acc", "rowmax", "rowsum", "softmax_rows",
]
