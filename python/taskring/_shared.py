"""Memory that chip processes see: ``shared_array`` (zero-copy L3 and L4 arguments)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence, Union

import numpy as np

from . import _native

if TYPE_CHECKING:
    from numpy.typing import DTypeLike


class _SharedHolder:
    """Keeps a SharedMem alive for as long as an array over it exists."""

    def __init__(self, mem, shape, dtype):
        self.mem = mem
        self.__array_interface__ = {
            "shape": tuple(shape),
            "typestr": np.dtype(dtype).str,
            "data": (mem.address, False),
            "version": 3,
        }


def shared_array(shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32) -> np.ndarray:
    """A zero-filled numpy array in memory that chip processes see (zero-copy L3
    dispatch). Arrays made after a worker's ``init()`` work too: a chip maps the memory
    on first use."""
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"shared_array shape must have at least one dimension and no empty ones, got {shape}")
    dt = np.dtype(dtype)
    _native.SharedMem.itemsize(str(dt))  # a TypeError for a dtype the runtime does not support
    nbytes = int(np.prod(shape)) * dt.itemsize
    mem = _native.SharedMem(nbytes)
    return np.asarray(_SharedHolder(mem, shape, dt))


shared_array.__module__ = "taskring"


def array_over(mem: _native.SharedMem, shape: Sequence[int], dtype: DTypeLike) -> np.ndarray:
    """An array over the shared memory ``mem`` (which it keeps alive)."""
    return np.asarray(_SharedHolder(mem, shape, dtype))


def is_shared(a: np.ndarray) -> bool:
    """Whether ``a`` is (a view of) an array in shared memory (``shared_array`` or
    ``array_over``)."""
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, _SharedHolder) or isinstance(getattr(base, "obj", None), _SharedHolder)
