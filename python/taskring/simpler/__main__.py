"""``python -m taskring.simpler FILE [ARGS...]``: run a Simpler program or scene-test file
as ``python FILE ARGS...`` would, with upstream's module names (``simpler``,
``simpler_setup``, ...) installed first — e.g. ``python -m taskring.simpler
test_vector_example.py -p a2a3sim --case default --rounds 3``."""

from __future__ import annotations

import os
import runpy
import sys

from . import install


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if argv else 2)
    install()
    path = argv[0]
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
