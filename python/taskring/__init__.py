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
import os
import sys
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
    DeviceMemory,
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
from ._config import RunConfig, as_call_config, check_device_memory, platform_check
from ._node import (
    DistributedConfig,
    DistributedProgram,
    DistributedWorker,
    RunHandle,
    Worker,
    shared_array,
)
from ._native import ChipTaskReport, HostTaskReport, HostTensor, NodeOrchestrator, NodeRunReport
from ._native import CapturedProgram
from . import kernels

__all__ = [
    "CapturedProgram",
    "ChipTaskReport",
    "DistributedConfig",
    "DistributedProgram",
    "DistributedWorker",
    "HostTaskReport",
    "HostTensor",
    "NodeOrchestrator",
    "NodeRunReport",
    "RunHandle",
    "Worker",
    "shared_array",
    "ArenaStats",
    "ArgDirection",
    "DeviceMemory",
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
    "load_kernel",
    "program",
    "resolve_ring_sizing",
    "run",
    "suggest_sizing",
]


class ArgDirection(enum.IntEnum):
    """How a program uses each of its arguments."""

    IN = 0
    OUT = 1
    INOUT = 2
    SCALAR = 3


IN, OUT, INOUT, SCALAR = ArgDirection.IN, ArgDirection.OUT, ArgDirection.INOUT, ArgDirection.SCALAR


class TensorArgType(enum.IntEnum):
    """Tags of ``TaskArgs.add``: how a task uses a tensor argument (docs/api.md §3.1)."""

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
        if type(f).__module__.startswith("numba") and hasattr(f, "address"):
            return _numba_kernel(f, core, name)
        if not callable(f):
            raise TypeError(f"kernel() needs a function, got {type(f).__name__}")
        if core not in ("aiv", "aic"):
            raise ValueError(f"core must be 'aiv' or 'aic', got {core!r}")
        return _native.make_python_kernel(f, name or f.__name__, core)

    if func is not None:
        return wrap(func)
    return wrap


def _tensor_rules(tensors: Optional[Sequence[str]]) -> Optional[List[tuple]]:
    """``["float32[2]", "int32", "*[1]", "*"]`` -> ``[(dtype or None, ndim or None), ...]``."""
    if tensors is None:
        return None
    if isinstance(tensors, str):
        raise TypeError("tensors must be a list of rules like 'float32[2]', not one string")
    rules = []
    for i, r in enumerate(tensors):
        if not isinstance(r, str):
            raise TypeError(f"tensors[{i}] must be a str like 'float32[2]', got {type(r).__name__}")
        dtype, _, rest = r.partition("[")
        ndim = None
        if rest:
            if not rest.endswith("]") or not rest[:-1].isdigit():
                raise ValueError(f"tensors[{i}]: {r!r} is not a rule like 'float32[2]', 'float32', '*[2]' or '*'")
            ndim = int(rest[:-1])
        rules.append((None if dtype == "*" else dtype, ndim))
    return rules


def load_kernel(
    path: Any,
    symbol: str,
    *,
    core: str = "aiv",
    name: Optional[str] = None,
    tensors: Optional[Sequence[str]] = None,
    scalars: Optional[int] = None,
) -> Kernel:
    """Load the C function ``symbol`` of the shared library at ``path`` as a kernel
    (the ABI of ``include/taskring_kernel.h``; docs/api.md §11). It runs on core threads
    without the GIL. ``tensors`` (e.g. ``["float32[2]", "float32[2]", "*"]``, one rule
    per tensor argument: dtype or ``*``, optional ``[ndim]``) and ``scalars`` (a count)
    make a signature checked at every submit, so a mismatch is INVALID_ARGS at submit
    instead of undefined behaviour in the kernel. A missing or unloadable library is an
    ``OSError``, a missing symbol a ``ValueError``. Loading the same symbol again
    returns the same kernel (cheap to call inside an orchestration, e.g. in a chip
    process after ``init()``)."""
    if not isinstance(symbol, str):
        raise TypeError(f"symbol must be a str, got {type(symbol).__name__}")
    if scalars is not None and (isinstance(scalars, bool) or not isinstance(scalars, int) or scalars < 0):
        raise ValueError(f"scalars must be an int >= 0, got {scalars!r}")
    rules = _tensor_rules(tensors)
    key = (os.path.abspath(os.fsdecode(path)), symbol, core, name, None if rules is None else tuple(rules), scalars)
    k = _LOADED.get(key)
    if k is None:
        k = _native.load_native_kernel(os.fsdecode(path), symbol, core, name, rules, scalars)
        _LOADED[key] = k
    return k


_LOADED: dict = {}


def _numba_kernel(f: Any, core: str, name: Optional[str]) -> Kernel:
    """A ``numba.cfunc`` compiled with ``taskring.numba_abi.KERNEL_SIG``."""
    sig = getattr(f, "_sig", None)
    if sig is None or len(sig.args) != 6 or str(sig.return_type) != "int32":
        raise TypeError(
            "a numba cfunc kernel must have the taskring ABI signature "
            "int32(tensors, ntensors, scalars, nscalars, err, errlen); use taskring.numba_abi.KERNEL_SIG"
        )
    _catch_numba_exceptions()
    return _native.native_kernel_from_address(f.address, name or f.__name__, core, f)


def _catch_numba_exceptions() -> None:
    """A numba cfunc that raises does not return non-zero: its wrapper hands the
    exception to ``sys.unraisablehook`` (on the kernel's own thread) and returns 0. This
    hook, installed once in front of the one in place, gives an exception raised inside
    a running numba kernel to the runtime, which fails the kernel's task with its text;
    any other goes on to the previous hook."""
    if getattr(sys.unraisablehook, "_taskring", False):
        return
    previous = sys.unraisablehook

    def hook(u: Any) -> None:
        if u.exc_type is not None and _native.report_kernel_raised(f"{u.exc_type.__name__}: {u.exc_value}"):
            return
        previous(u)

    hook._taskring = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


class Program:
    """An orchestration ``f(rt, *args)`` with its signature (``ArgDirection`` per
    argument). Calling it runs it once: ``prog(*args, config=None)``."""

    def __init__(self, orchestration: Callable, signature: Sequence[ArgDirection], name: Optional[str] = None) -> None:
        if not callable(orchestration):
            raise TypeError("Program: orchestration must be callable")
        sig = [ArgDirection(s) for s in signature]
        self.orchestration = orchestration
        self.signature: List[ArgDirection] = sig
        self.name: str = name or str(getattr(orchestration, "__name__", "program"))

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


def suggest_sizing(path_or_report: Any, headroom: Optional[float] = None) -> RunConfig:
    """The sizing advisor's suggested ring sizes (``taskring sizing``, headroom 1.25 unless
    given) as a ``RunConfig``. ``path_or_report``: a ``scope_stats.jsonl``, a run's
    output prefix (``CallConfig.output_prefix`` / ``RunConfig.output_dir``), or a report
    of ``taskring report``. Raises ``FileNotFoundError`` when there are no scope stats."""
    from ._report import suggest_sizing as _suggest

    return _suggest(path_or_report, headroom)


class ChipWorker:
    """A resident simulated chip: its core threads and its arena cache stay between
    runs. ``config`` (RunConfig or CallConfig) is the default of ``run()`` calls made
    without one. ``prewarm=True`` builds the arena of that config's sizing (the default
    sizing when ``config`` is None) before the worker is ready; ``prewarm=<RunConfig or
    CallConfig, or a list of them>`` builds those instead (up to the cache's slots);
    ``prewarm=False`` builds nothing ahead. ``device_memory`` (bytes) is the chip's
    device memory, against which every cached arena is charged at its device footprint
    (default ``TASKRING_DEVICE_MEMORY`` or 64 GiB)."""

    def __init__(
        self, config: Any = None, *, prewarm: Any = True, arena_cache_slots: int = 4, cores: int = 0, device_memory: Optional[int] = None
    ) -> None:
        if isinstance(arena_cache_slots, bool) or not isinstance(arena_cache_slots, int) or arena_cache_slots < 1:
            raise ValueError(f"arena_cache_slots must be an int >= 1, got {arena_cache_slots!r}")
        self._device_memory = check_device_memory(device_memory)
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
            self._chip = _native.Chip(
                cores=self._cores, arena_cache_slots=self._slots, prewarm=self._prewarm, device_memory=self._device_memory
            )
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

    def capture(self, prog: Program, *args: Any, config: Any = None) -> CapturedProgram:
        """Run ``prog`` once, as ``run`` does, and record its task graph: kernels, scalars,
        views relative to each argument, scopes and dependencies. ``g.replay(*args,
        config=None)`` runs the graph again on this worker without the orchestration
        (arguments of the same shapes and dtypes; docs/api.md §10). The run's report is
        ``g.report``."""
        if self._chip is None:
            raise RuntimeError("this ChipWorker is closed")
        if not isinstance(prog, Program):
            raise TypeError(f"capture() needs a taskring.Program, got {type(prog).__name__}")
        _platform_check(config)
        cc = self._config if config is None else _call_config(config)
        cc.validate()
        host = prog.check_args(args)
        return self._chip.capture(prog.orchestration, prog.name, list(host), cc)

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


from . import scene_test  # noqa: E402  (docs/api.md §5; imported last: it builds on the names above)
