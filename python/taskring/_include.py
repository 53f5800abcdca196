"""Where taskring's C and C++ headers are: ``include_dir()``.

The headers (``pto2/`` for PTO2 orchestrations and kernels, ``pto2_incore/``,
``pto2_stdfloat/``, ``taskring_kernel.h``) live in the repository's ``include/``. An
installed wheel carries them inside the package (``taskring/include``, copied there by the
build backend); an editable install or a source checkout finds them beside the ``python/``
directory.
"""

from __future__ import annotations

from pathlib import Path

_MARKER = Path("pto2") / "pto_orchestration_api.h"


def include_dir() -> str:
    """The directory holding taskring's headers (``pto2/``, ``pto2_incore/``, ...).

    Raises RuntimeError when neither the installed package nor the source tree has them."""
    here = Path(__file__).resolve().parent
    candidates = (here / "include", here.parent.parent / "include")
    for c in candidates:
        if (c / _MARKER).is_file():
            return str(c)
    raise RuntimeError(
        "taskring's C++ headers were not found (looked for "
        + " and ".join(str(c / _MARKER) for c in candidates)
        + "); reinstall taskring"
    )
