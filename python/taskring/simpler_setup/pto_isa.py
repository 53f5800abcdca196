"""PTO-ISA's headers: ``ensure_pto_isa_root()`` reads ``PTO_ISA_ROOT``.

PTO-ISA (github.com/hw-native-sys/pto-isa) is in no package registry and taskring never
downloads it: point ``PTO_ISA_ROOT`` at a checkout (Simpler's pin of it for upstream's
sources). taskring's own kernels are plain C++ and need none of it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

PTO_ISA_ENV = "PTO_ISA_ROOT"
#: The file that tells a PTO-ISA checkout: ``<root>/include/pto/pto-inst.hpp``.
PTO_ISA_MARKER = Path("include") / "pto" / "pto-inst.hpp"


def find_pto_isa_root() -> Optional[str]:
    """``PTO_ISA_ROOT`` as an absolute path when it is set and holds PTO-ISA's headers,
    else None (no error: for callers to whom PTO-ISA is optional)."""
    raw = os.environ.get(PTO_ISA_ENV, "").strip()
    if not raw:
        return None
    root = Path(raw).expanduser().resolve()
    return str(root) if (root / PTO_ISA_MARKER).is_file() else None


def ensure_pto_isa_root(verbose: bool = False) -> str:
    """The PTO-ISA checkout named by ``PTO_ISA_ROOT``, as an absolute path.

    Raises RuntimeError when ``PTO_ISA_ROOT`` is unset or does not hold
    ``include/pto/pto-inst.hpp``; nothing is downloaded. ``verbose`` is accepted as
    upstream's function takes it and has no effect."""
    del verbose
    raw = os.environ.get(PTO_ISA_ENV, "").strip()
    if not raw:
        raise RuntimeError(
            f"PTO-ISA not available: set {PTO_ISA_ENV} to a checkout of "
            "https://github.com/hw-native-sys/pto-isa (the headers of PTO-ISA kernels); "
            "taskring does not download it"
        )
    root = Path(raw).expanduser().resolve()
    if not (root / PTO_ISA_MARKER).is_file():
        raise RuntimeError(
            f"PTO-ISA not available: {PTO_ISA_ENV}={raw} has no {PTO_ISA_MARKER}; "
            f"set {PTO_ISA_ENV} to the root of a pto-isa checkout"
        )
    return str(root)
