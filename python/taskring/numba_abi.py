"""Writing taskring kernels with numba (docs/api.md §11): ``@numba.cfunc(KERNEL_SIG)`` compiles
a function to the C ABI of ``include/taskring_kernel.h``; ``taskring.kernel(f)`` turns
it into a kernel that runs on core threads at native speed, without the GIL.

    import numba, taskring
    from taskring.numba_abi import KERNEL_SIG, tensor_array, scalar_f64

    @numba.cfunc(KERNEL_SIG)
    def add_scalar(tensors, ntensors, scalars, nscalars, err, errlen):
        a = tensor_array(tensors, 0, numba.float32)     # input 0, flat
        out = tensor_array(tensors, 1, numba.float32)   # output 1, flat
        for i in range(a.shape[0]):
            out[i] = a[i] + scalar_f64(scalars, 0)
        return 0

    k = taskring.kernel(add_scalar)

The arguments are typed pointers over the ABI's structs: a ``tr_tensor`` is 12 int64
words (data, dtype|ndim, shape[5], strides[5]), a ``tr_scalar`` 2 words (kind, value).
``tensor_array`` gives the elements a tensor spans as a flat array (index it with
``tensor_stride`` for a strided view); ``tensor_shape``/``tensor_stride`` read the rest.
numba is optional: importing this module without it raises ``ImportError`` saying so.
"""

from __future__ import annotations

try:
    import numba
    from numba import types
    from numba.extending import intrinsic
except ImportError as e:  # pragma: no cover - exercised only without numba
    raise ImportError(
        "taskring.numba_abi needs numba (pip install numba); native kernels can also be "
        "loaded from a C library with taskring.load_kernel"
    ) from e

import numpy as np

_WORDS = 12  # int64 words per tr_tensor
_MAX_DIMS = 5

#: ``int32(tensors, ntensors, scalars, nscalars, err, errlen)`` of the ABI.
KERNEL_SIG = types.int32(
    types.CPointer(types.int64), types.int32, types.CPointer(types.int64), types.int32, types.CPointer(types.uint8), types.uintp
)


@intrinsic
def _as_pointer(typingctx, addr, dtype):
    """An int address as a typed pointer (``dtype`` a numba number type)."""
    elem = dtype.dtype if isinstance(dtype, types.NumberClass) else dtype
    sig = types.CPointer(elem)(addr, dtype)

    def codegen(context, builder, signature, args):
        ptr_ty = context.get_value_type(signature.return_type)
        return builder.inttoptr(args[0], ptr_ty)

    return sig, codegen


@numba.njit(inline="always")
def _word(tensors, i, w):
    return numba.carray(tensors, ((i + 1) * _WORDS,))[i * _WORDS + w]


@numba.njit(inline="always")
def tensor_ndim(tensors, i):
    """Number of dimensions of tensor ``i``."""
    return (_word(tensors, i, 1) >> 32) & 0xFFFFFFFF


@numba.njit(inline="always")
def tensor_dtype(tensors, i):
    """ABI dtype code of tensor ``i`` (0 f32, 1 f16, 2 bf16, 3 i32, 4 i64, 5 i8, 6 u8)."""
    return _word(tensors, i, 1) & 0xFFFFFFFF


@numba.njit(inline="always")
def tensor_shape(tensors, i, d):
    return _word(tensors, i, 2 + d)


@numba.njit(inline="always")
def tensor_stride(tensors, i, d):
    return _word(tensors, i, 2 + _MAX_DIMS + d)


@numba.njit(inline="always")
def tensor_extent(tensors, i):
    """Elements spanned by tensor ``i``: 1 + sum((shape_d - 1) * stride_d)."""
    n = 1
    for d in range(tensor_ndim(tensors, i)):
        n += (tensor_shape(tensors, i, d) - 1) * tensor_stride(tensors, i, d)
    return n


@numba.njit(inline="always")
def tensor_array(tensors, i, dtype):
    """The elements tensor ``i`` spans, as a flat array of ``dtype`` (the caller's
    promise: it is the tensor's dtype)."""
    return numba.carray(_as_pointer(_word(tensors, i, 0), dtype), (tensor_extent(tensors, i),))


@numba.njit(inline="always")
def scalar_f64(scalars, i):
    """Scalar ``i`` as a float (an int64 scalar is converted)."""
    words = numba.carray(scalars, ((i + 1) * 2,))
    if words[2 * i] & 0xFFFFFFFF == 1:
        return words.view(np.float64)[2 * i + 1]
    return float(words[2 * i + 1])


@numba.njit(inline="always")
def scalar_i64(scalars, i):
    """Scalar ``i`` as an int (a float scalar is truncated)."""
    words = numba.carray(scalars, ((i + 1) * 2,))
    if words[2 * i] & 0xFFFFFFFF == 1:
        return np.int64(words.view(np.float64)[2 * i + 1])
    return words[2 * i + 1]


__all__ = [
    "KERNEL_SIG",
    "scalar_f64",
    "scalar_i64",
    "tensor_array",
    "tensor_dtype",
    "tensor_extent",
    "tensor_ndim",
    "tensor_shape",
    "tensor_stride",
]
