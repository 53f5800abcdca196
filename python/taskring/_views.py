"""numpy views over runtime memory for Python kernels (the slow path)."""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

_DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "int32": np.int32,
    "int64": np.int64,
    "int8": np.int8,
    "uint8": np.uint8,
}


def _dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes  # optional

        return ml_dtypes.bfloat16
    return _DTYPES[name]


def view(addr: int, shape: Sequence[int], strides: Sequence[int], dtype: str) -> np.ndarray:
    """A writeable ndarray over ``addr`` (no copy); ``strides`` in elements."""
    dt = np.dtype(_dtype(dtype))
    extent = 1 + sum((s - 1) * st for s, st in zip(shape, strides))
    buf = (ctypes.c_char * (extent * dt.itemsize)).from_address(addr)
    return np.ndarray(tuple(shape), dtype=dt, buffer=buf, strides=tuple(st * dt.itemsize for st in strides))
