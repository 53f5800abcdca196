"""The enums of the Python layer: ``ArgDirection`` (and its members ``IN``, ``OUT``,
``INOUT``, ``SCALAR``), ``TensorArgType`` and ``DataType``."""

from __future__ import annotations

import enum


class ArgDirection(enum.IntEnum):
    """How a program uses each of its arguments."""

    __module__ = "taskring"

    IN = 0
    OUT = 1
    INOUT = 2
    SCALAR = 3


IN, OUT, INOUT, SCALAR = ArgDirection.IN, ArgDirection.OUT, ArgDirection.INOUT, ArgDirection.SCALAR


class TensorArgType(enum.IntEnum):
    """Tags of ``TaskArgs.add``: how a task uses a tensor argument (docs/api.md §3.1)."""

    __module__ = "taskring"

    INPUT = 0
    OUTPUT = 1
    INOUT = 2
    OUTPUT_EXISTING = 3
    NO_DEP = 4


class DataType(str, enum.Enum):
    """Element types a tensor can hold (``bfloat16`` needs ``ml_dtypes``)."""

    __module__ = "taskring"

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT32 = "int32"
    INT64 = "int64"
    INT8 = "int8"
    UINT8 = "uint8"
