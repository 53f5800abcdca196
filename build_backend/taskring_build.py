"""The PEP 517 build backend of ``pip install .``: maturin's, building L4 when it can.

L4 (``Worker(level=4)``, docs/api.md §9) is the cargo feature ``mpi`` of
``crates/taskring-py``: it links Open MPI through the ``mpi`` crate, whose build needs
libclang (bindgen). This backend looks for them as the Makefile's ``MPI_FEATURES`` does
(``mpicc`` and ``mpirun`` on ``PATH`` and a ``/usr/lib/llvm-*/lib/libclang*.so*``) and,
when all are there, adds ``--features mpi`` to the arguments maturin's backend passes to
``maturin pep517`` (``MATURIN_PEP517_ARGS``, or the ``maturin.build-args`` /
``build-args`` config setting when one is given). Otherwise the package builds without
L4 and the build says so, with what to install (pip shows a build's output with ``-v``).

``TASKRING_MPI=0`` builds without L4 whatever is installed; ``TASKRING_MPI=1`` asks for
it even when the look-up finds nothing (the build then fails where the missing piece is
needed).

A wheel carries taskring's C and C++ headers (the repository's ``include/``: the PTO2
headers that ``taskring.simpler_setup.KernelCompiler`` builds against) as
``taskring/include``: ``build_wheel`` copies them into the package for the build and
removes the copy after. An editable install reads them from the source tree. Every other
hook is maturin's own.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import shutil
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional

import maturin
from maturin import (  # noqa: F401  (hooks of this backend, as maturin has them)
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)

#: Debian's packages that bring what L4 needs (as the Makefile's ``make mpi`` installs).
MPI_PACKAGES = "openmpi-bin libopenmpi-dev libclang-dev"
LIBCLANG_GLOB = "/usr/lib/llvm-*/lib/libclang*.so*"
_BUILD_ARGS_KEYS = ("maturin.build-args", "build-args")


def mpi_missing() -> List[str]:
    """What of Open MPI and libclang the L4 build needs is not found (empty: all found)."""
    missing = [f"{tool} on PATH" for tool in ("mpicc", "mpirun") if shutil.which(tool) is None]
    if not glob.glob(LIBCLANG_GLOB):
        missing.append(f"libclang ({LIBCLANG_GLOB})")
    return missing


def _names_mpi(args: List[str]) -> bool:
    """Whether maturin arguments already ask for the ``mpi`` feature."""
    for i, a in enumerate(args):
        value = None
        if a in ("--features", "-F") and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--features="):
            value = a.split("=", 1)[1]
        if value is not None and "mpi" in value.replace(",", " ").split():
            return True
    return "--all-features" in args


def with_l4(args: List[str], say: bool = True) -> List[str]:
    """``args`` (maturin's ``pep517`` arguments) with ``--features mpi`` when L4 is to be
    built; says which it is on stderr when ``say``."""
    if _names_mpi(args):
        return args
    wanted = os.environ.get("TASKRING_MPI", "").strip()
    missing = mpi_missing()
    if wanted == "0":
        if say:
            _say("building without L4 (Worker(level=4)): TASKRING_MPI=0")
        return args
    if wanted == "1" or not missing:
        if say:
            found = "TASKRING_MPI=1" if missing else "Open MPI (mpicc, mpirun) and libclang found"
            _say(f"{found}: building with L4 (Worker(level=4); cargo feature mpi)")
        return [*args, "--features", "mpi"]
    if say:
        _say(
            f"building WITHOUT L4 (Worker(level=4)): not found: {', '.join(missing)}. "
            f"For L4 install Open MPI and libclang (Debian/Ubuntu, as root: apt-get install -y {MPI_PACKAGES}), "
            "then install taskring again; everything else works without them"
        )
    return args


def _say(text: str) -> None:
    print(f"taskring build: {text}", file=sys.stderr, flush=True)


def _pep517_args(config_settings: Optional[Mapping[str, Any]]) -> List[str]:
    """The arguments maturin's backend would pass: the ``build-args`` setting when given,
    else ``MATURIN_PEP517_ARGS``."""
    given = None
    for key in _BUILD_ARGS_KEYS:
        if config_settings and config_settings.get(key) is not None:
            given = config_settings[key]
            break
    if given is None:
        return shlex.split(os.environ.get("MATURIN_PEP517_ARGS", ""))
    return shlex.split(given) if isinstance(given, str) else [str(a) for a in given]


def _settings(config_settings: Optional[Mapping[str, Any]], say: bool) -> Optional[Dict[str, Any]]:
    """The config settings to hand to maturin's hook, the maturin arguments (with L4's
    feature when it is built) set in ``MATURIN_PEP517_ARGS`` — where maturin reads them
    when no ``build-args`` setting is given, which these settings then no longer hold."""
    args = with_l4(_pep517_args(config_settings), say)
    os.environ["MATURIN_PEP517_ARGS"] = shlex.join(args)
    rest = {k: v for k, v in (config_settings or {}).items() if k not in _BUILD_ARGS_KEYS}
    return rest or None


#: The headers' directory in the source tree, and where a wheel has them.
HEADERS_SOURCE = "include"
HEADERS_IN_PACKAGE = os.path.join("python", "taskring", "include")


@contextlib.contextmanager
def headers_in_package(root: str = ".") -> Iterator[Optional[str]]:
    """``<root>/include`` copied to ``<root>/python/taskring/include`` while the block
    runs (yields the copy's path; None, and no copy, when there is no ``include`` or the
    package already has one)."""
    src = os.path.join(root, HEADERS_SOURCE)
    dst = os.path.join(root, HEADERS_IN_PACKAGE)
    if not os.path.isdir(src) or os.path.lexists(dst):
        yield None
        return
    shutil.copytree(src, dst)
    try:
        yield dst
    finally:
        shutil.rmtree(dst, ignore_errors=True)


def build_wheel(
    wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None, metadata_directory: Optional[str] = None
) -> str:
    settings = _settings(config_settings, True)
    with headers_in_package():
        return maturin.build_wheel(wheel_directory, settings, metadata_directory)


def build_editable(
    wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None, metadata_directory: Optional[str] = None
) -> str:
    return maturin.build_editable(wheel_directory, _settings(config_settings, True), metadata_directory)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Mapping[str, Any]] = None) -> str:
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, _settings(config_settings, False))


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: Optional[Mapping[str, Any]] = None) -> str:
    return maturin.prepare_metadata_for_build_editable(metadata_directory, _settings(config_settings, False))
