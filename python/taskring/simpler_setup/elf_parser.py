"""``extract_text_section``: upstream's step from a kernel object to the code a real AICore
loads. taskring's chip (for ``a2a3`` and ``a2a3sim`` alike) loads a kernel as the whole
shared library KernelCompiler built, so a shared library passes through unchanged; this
lets programs that take the step for ``a2a3`` run as they are.
"""

from __future__ import annotations

import os
import struct
from typing import Union

_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3


def extract_text_section(obj_input: Union[str, "os.PathLike[str]", bytes]) -> bytes:
    """The bytes of the shared library ``obj_input`` (a path or the bytes), unchanged.

    FileNotFoundError for a missing path; ValueError for data that is not an ELF shared
    library (taskring has no AICore image to extract from an object file)."""
    if isinstance(obj_input, (bytes, bytearray, memoryview)):
        data = bytes(obj_input)
    else:
        path = os.fspath(obj_input)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Object file not found: {path}")
        with open(path, "rb") as f:
            data = f.read()
    if len(data) < 18 or data[:4] != _ELF_MAGIC:
        raise ValueError("Invalid object file: not an ELF file")
    order = "<" if data[5] == 1 else ">"
    (e_type,) = struct.unpack_from(order + "H", data, 16)
    if e_type != _ET_DYN:
        raise ValueError(
            "taskring runs kernels as shared libraries (KernelCompiler's output); "
            f"this ELF file is of type {e_type}, not a shared library"
        )
    return data
