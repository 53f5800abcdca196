"""An L2 program: ``Program`` (an orchestration with its signature), the decorator
``program`` and ``run`` (one dispatch on a fresh chip)."""

from __future__ import annotations

import numbers
from typing import Any, Callable, List, Optional, Sequence

from . import _native
from ._config import as_call_config, platform_check
from ._native import RunReport
from ._types import ArgDirection


class Program:
    """An orchestration ``f(rt, *args)`` with its signature (``ArgDirection`` per
    argument). Calling it runs it once: ``prog(*args, config=None)``. The orchestration
    can also be a C++ program, a ``taskring._native.ChipCallable`` (docs/api.md §13)."""

    __module__ = "taskring"

    def __init__(self, orchestration: Callable, signature: Sequence[ArgDirection], name: Optional[str] = None) -> None:
        if not callable(orchestration) and not isinstance(orchestration, _native.ChipCallable):
            raise TypeError("Program: orchestration must be callable or a ChipCallable")
        sig = [ArgDirection(s) for s in signature]
        self.orchestration = orchestration
        self.signature: List[ArgDirection] = sig
        self.name: str = name or str(getattr(orchestration, "__name__", None) or getattr(orchestration, "name", "program"))

    def check_args(self, args: Sequence[Any]) -> List[Any]:
        """Check ``args`` against the signature (a numpy array per IN/OUT/INOUT, an int
        or a float per SCALAR); returns them with scalars as plain ``int``/``float``.
        Raises TypeError on a count or type mismatch."""
        if len(args) != len(self.signature):
            raise TypeError(
                f"{self.name}() takes {len(self.signature)} arguments "
                f"({', '.join(s.name for s in self.signature)}), got {len(args)}"
            )
        out = []
        for i, (a, d) in enumerate(zip(args, self.signature)):
            if d == ArgDirection.SCALAR:
                if isinstance(a, bool) or not isinstance(a, (numbers.Integral, numbers.Real)):
                    raise TypeError(f"{self.name}() argument {i} is SCALAR and must be an int or a float, got {type(a).__name__}")
                out.append(int(a) if isinstance(a, numbers.Integral) else float(a))
            else:
                if type(a).__module__ != "numpy" or not hasattr(a, "__array_interface__"):
                    raise TypeError(f"{self.name}() argument {i} is {d.name} and must be a numpy.ndarray, got {type(a).__name__}")
                out.append(a)
        return out

    def __call__(self, *args: Any, config: Any = None) -> RunReport:
        return run(self, *args, config=config)

    def __repr__(self) -> str:
        return f"Program({self.name!r}, signature=[{', '.join(s.name for s in self.signature)}])"


def program(signature: Sequence[ArgDirection], name: Optional[str] = None) -> Callable[[Callable], Program]:
    """Decorator: ``@taskring.program(signature=[IN, IN, OUT])``."""

    def wrap(f: Callable) -> Program:
        return Program(f, signature, name)

    return wrap


def run(prog: Program, *args: Any, config: Any = None) -> RunReport:
    """Run ``prog`` once on a fresh chip prewarmed with this dispatch's own sizing."""
    if not isinstance(prog, Program):
        raise TypeError(f"run() needs a taskring.Program, got {type(prog).__name__}")
    platform_check(config)
    cc = as_call_config(config)
    cc.validate()
    host = prog.check_args(args)
    chip = _native.Chip(prewarm=[cc])
    try:
        return chip.run(prog.orchestration, prog.name, list(host), cc)
    finally:
        chip.close()


# The public functions keep the package as their module (their documented, pickled path).
program.__module__ = run.__module__ = "taskring"
