"""Upstream Simpler's Python face on taskring: ``taskring.simpler.task_interface``,
``taskring.simpler.worker.Worker`` and ``taskring.simpler_setup``.

``install()`` makes them importable under upstream's names — ``simpler``,
``simpler.task_interface``, ``simpler.worker``, ``simpler.callable_identity``,
``simpler_setup`` and its submodules, and ``_task_interface`` — so a Simpler program
or test runs with no edit. ``pytest -p taskring.simpler.pytest_plugin`` does it before
collection.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Any, Dict, Optional, Sequence

# upstream name -> taskring module
_ALIASES: Dict[str, str] = {
    "simpler": "taskring.simpler",
    "simpler_setup": "taskring.simpler_setup",
    "_task_interface": "taskring.simpler.task_interface",
}
# The names install() binds at once (the rest, submodules, on first import).
_EAGER = ("simpler", "simpler.task_interface", "simpler.worker", "simpler.callable_identity", "simpler_setup", "_task_interface")


def _target(fullname: str) -> Optional[str]:
    top, _, rest = fullname.partition(".")
    base = _ALIASES.get(top)
    if base is None:
        return None
    return f"{base}.{rest}" if rest else base


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``simpler.X`` / ``simpler_setup.X`` as ``taskring.simpler.X`` /
    ``taskring.simpler_setup.X`` (the same module object under both names)."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        real = _target(fullname)
        if real is None:
            return None
        try:
            if importlib.util.find_spec(real) is None:
                return None
        except ModuleNotFoundError:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=real in ("taskring.simpler", "taskring.simpler_setup"))
        spec.loader_state = real
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return importlib.import_module(spec.loader_state)

    def exec_module(self, module: Any) -> None:
        pass


_finder = _AliasFinder()


def _ours(name: str, module: Any) -> bool:
    real = _target(name)
    return real is not None and getattr(module, "__name__", None) == real


def install() -> None:
    """Register taskring's modules under upstream's names (idempotent). A RuntimeError
    names a module already imported under one of those names from elsewhere (then
    nothing is changed)."""
    for name in _EAGER:
        m = sys.modules.get(name)
        if m is not None and not _ours(name, m):
            where = getattr(m, "__file__", None) or repr(m)
            raise RuntimeError(
                f"taskring.simpler.install(): the module {name!r} is already imported from {where}; "
                "install() must run before anything imports upstream's simpler (e.g. pytest -p taskring.simpler.pytest_plugin)"
            )
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    for name in _EAGER:
        sys.modules[name] = importlib.import_module(_target(name))  # type: ignore[arg-type]
    # Submodules imported already (taskring.simpler_setup imports its scene_test) get
    # their upstream names now: a first import under a new name binds the module on its
    # package, which would hide the package attribute of that name (simpler_setup's
    # ``scene_test`` is the decorator, as upstream's is).
    for upstream, real in _ALIASES.items():
        for name, module in list(sys.modules.items()):
            if name.startswith(real + "."):
                sys.modules.setdefault(upstream + name[len(real) :], module)


def __getattr__(name: str) -> Any:
    # ``simpler.Worker`` and the submodules resolve on first use, as upstream's do.
    if name == "Worker":
        return importlib.import_module(f"{__name__}.worker").Worker
    if name in ("task_interface", "worker", "callable_identity"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Worker", "install"]
