"""taskring: a PTO2-style tensormap-and-ringbuffer task runtime on a simulated chip,
with per-task ring sizing.

Two layers, as upstream has them:

* low level (Simpler-style): ``CallConfig``, ``RuntimeEnv``, ``TaskArgs``,
  ``TensorArgType``, the orchestrator ``rt`` handed to a program;
* high level (PyPTO-style): ``RunConfig``, ``run``, ``program`` / ``Program``,
  ``kernel``, ``ChipWorker``.

All behaviour lives in the Rust core (``taskring._native``); this module is glue.
"""

from __future__ import annotations

import dataclasses
import enum
import numbers
from typing import Any, Callable, List, Optional, Sequence, Union, overload

from . import _native
from ._errors import RuntimeFailure
from ._native import (
    DEFAULT_RING_DEP_POOL,
    DEFAULT_RING_HEAP,
    DEFAULT_RING_TASK_WINDOW,
    RUNTIME_ENV_RING_COUNT,
    ArenaStats,
    CallConfig,
    Kernel,
    Orchestrator,
    PeakUse,
    RingSizing,
    RunReport,
    RuntimeEnv,
    Task,
    TaskArgs,
    Tensor,
    TensorSpec,
    resolve_ring_sizing,
)
from ._config import RunConfig, as_call_config, platform_check
from ._node import (
    DistributedConfig,
    DistributedProgram,
    DistributedWorker,
    RunHandle,
    Worker,
    shared_array,
)
from ._native import ChipTaskReport, NodeOrchestrator, NodeRunReport
from . import kernels

__all__ = [
    "ChipTaskReport",
    "DistributedConfig",
    "DistributedProgram",
    "DistributedWorker",
    "NodeOrchestrator",
    "NodeRunReport",
    "RunHandle",
    "Worker",
    "shared_array",
    "ArenaStats",
    "ArgDirection",
    "CallConfig",
    "ChipWorker",
    "DataType",
    "DEFAULT_RING_DEP_POOL",
    "DEFAULT_RING_HEAP",
    "DEFAULT_RING_TASK_WINDOW",
    "IN",
    "INOUT",
    "Kernel",
    "OUT",
    "Orchestrator",
    "PeakUse",
    "Program",
    "RingSizing",
    "RUNTIME_ENV_RING_COUNT",
    "RunConfig",
    "RunReport",
    "RuntimeEnv",
    "RuntimeFailure",
    "SCALAR",
    "Task",
    "TaskArgs",
    "Tensor",
    "TensorArgType",
    "TensorSpec",
    "kernel",
    "kernels",
    "program",
    "resolve_ring_sizing",
    "run",
]


class ArgDirection(enum.IntEnum):
    """How a program uses each of its arguments."""

    IN = 0
    OUT = 1
    INOUT = 2
    SCALAR = 3


IN, OUT, INOUT, SCALAR = ArgDirection.IN, ArgDirection.OUT, ArgDirection.INOUT, ArgDirection.SCALAR


class TensorArgType(enum.IntEnum):
    """Tags of ``TaskArgs.add`` (reference §5.1)."""

    INPUT = 0
    OUTPUT = 1
    INOUT = 2
    OUTPUT_EXISTING = 3
    NO_DEP = 4


class DataType(str, enum.Enum):
    """Element types a tensor can hold (``bfloat16`` needs ``ml_dtypes``)."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT32 = "int32"
    INT64 = "int64"
    INT8 = "int8"
    UINT8 = "uint8"


@overload
def kernel(func: Callable[..., Any], *, core: str = "aiv", name: Optional[str] = None) -> Kernel: ...
@overload
def kernel(func: None = None, *, core: str = "aiv", name: Optional[str] = None) -> Callable[[Callable[..., Any]], Kernel]: ...
def kernel(
    func: Optional[Callable[..., Any]] = None, *, core: str = "aiv", name: Optional[str] = None
) -> Union[Kernel, Callable[[Callable[..., Any]], Kernel]]:
    """Turn ``f(*arrays, *scalars)`` into a kernel. It receives numpy views of its
    tensors (inputs, inouts, outputs, no_dep — in that order) and then its scalars, and
    runs on a core thread holding the GIL (the slow path, for tests and prototyping).
    An exception in it fails its task (``RuntimeFailure`` code 200 naming the kernel).

    Usable as ``@kernel`` or ``@kernel(core="aic")``."""

    def wrap(f: Callable) -> Kernel:
        if not callable(f):
            raise TypeError(f"kernel() needs a function, got {type(f).__name__}")
        if core not in ("aiv", "aic"):
            raise ValueError(f"core must be 'aiv' or 'aic', got {core!r}")
        return _native.make_python_kernel(f, name or f.__name__, core)

    if func is not None:
        return wrap(func)
    return wrap


class Program:
    """An orchestration ``f(rt, *args)`` with its signature (``ArgDirection`` per
    argument). Calling it runs it once: ``prog(*args, config=None)``."""

    def __init__(self, orchestration: Callable, signature: Sequence[ArgDirection], name: Optional[str] = None) -> None:
        if not callable(orchestration):
            raise TypeError("Program: orchestration must be callable")
        sig = [ArgDirection(s) for s in signature]
        self.orchestration = orchestration
        self.signature: List[ArgDirection] = sig
        self.name: str = name or getattr(orchestration, "__name__", "program")

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


_platform_check = platform_check


_call_config = as_call_config


def run(prog: Program, *args: Any, config: Any = None) -> RunReport:
    """Run ``prog`` once on a fresh chip prewarmed with this dispatch's own sizing."""
    if not isinstance(prog, Program):
        raise TypeError(f"run() needs a taskring.Program, got {type(prog).__name__}")
    _platform_check(config)
    cc = _call_config(config)
    cc.validate()
    host = prog.check_args(args)
    chip = _native.Chip(prewarm=[cc])
    try:
        return chip.run(prog.orchestration, prog.name, list(host), cc)
    finally:
        chip.close()


class ChipWorker:
    """A resident simulated chip: its core threads and its arena cache stay between
    runs. ``config`` (RunConfig or CallConfig) is the default of ``run()`` calls made
    without one. ``prewarm=True`` builds the arena of that config's sizing (the default
    sizing when ``config`` is None) before the worker is ready; ``prewarm=<RunConfig or
    CallConfig, or a list of them>`` builds those instead (up to the cache's slots);
    ``prewarm=False`` builds nothing ahead."""

    def __init__(self, config: Any = None, *, prewarm: Any = True, arena_cache_slots: int = 4, cores: int = 0) -> None:
        if isinstance(arena_cache_slots, bool) or not isinstance(arena_cache_slots, int) or arena_cache_slots < 1:
            raise ValueError(f"arena_cache_slots must be an int >= 1, got {arena_cache_slots!r}")
        _platform_check(config)
        self._config = _call_config(config)
        self._config.validate()
        if prewarm is True:
            pre = [self._config]
        elif prewarm is False or prewarm is None:
            pre = []
        elif isinstance(prewarm, (list, tuple)):
            pre = list(prewarm)
        else:
            pre = [prewarm]
        for p in pre:
            _platform_check(p)
        self._prewarm = [_call_config(p) for p in pre]
        for p in self._prewarm:
            p.validate()
        self._slots = arena_cache_slots
        self._cores = cores
        self._chip: Optional[_native.Chip] = None
        self.init()

    def init(self) -> "ChipWorker":
        """Start the chip (idempotent)."""
        if self._chip is None:
            self._chip = _native.Chip(cores=self._cores, arena_cache_slots=self._slots, prewarm=self._prewarm)
        return self

    def close(self) -> None:
        """Stop the chip's threads and free its arenas (idempotent)."""
        if self._chip is not None:
            self._chip.close()
            self._chip = None

    def __enter__(self) -> "ChipWorker":
        return self.init()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, prog: Program, *args: Any, config: Any = None) -> RunReport:
        """Dispatch ``prog`` with ``config`` (its own ring sizing), or the worker's."""
        if self._chip is None:
            raise RuntimeError("this ChipWorker is closed")
        if not isinstance(prog, Program):
            raise TypeError(f"run() needs a taskring.Program, got {type(prog).__name__}")
        _platform_check(config)
        cc = self._config if config is None else _call_config(config)
        cc.validate()
        host = prog.check_args(args)
        return self._chip.run(prog.orchestration, prog.name, list(host), cc)

    @property
    def arena_stats(self) -> ArenaStats:
        """The chip's arena-cache counters (RuntimeError when closed)."""
        if self._chip is None:
            raise RuntimeError("this ChipWorker is closed")
        return self._chip.arena_stats()

    @property
    def cores(self) -> int:
        """Number of core threads of the chip (0 when closed)."""
        return self._chip.cores if self._chip is not None else 0


from . import scene_test  # noqa: E402  (API.md §5; imported last: it builds on the names above)
