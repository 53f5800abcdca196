"""L3 at the high level (PyPTO style, docs/api.md §4.2): ``DistributedConfig``,
``DistributedProgram`` and the resident ``DistributedWorker`` over a ``Worker(level=3)``."""

from __future__ import annotations

import dataclasses
import types
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from ._config import RunConfig, check_device_memory, platform_check
from ._handle import RunHandle
from ._native import ArenaStats, CallConfig, NodeRunReport
from ._program import Program
from ._shared import is_shared, shared_array
from ._types import ArgDirection
from ._worker import _L3Worker

if TYPE_CHECKING:
    from numpy.typing import DTypeLike


@dataclasses.dataclass
class DistributedConfig:
    """Chips and threads of a distributed program."""

    device_ids: List[int] = dataclasses.field(default_factory=lambda: [0])
    num_sub_workers: int = 0
    aicpu_thread_num: int = 0
    #: Every chip's device memory in bytes (None: ``TASKRING_DEVICE_MEMORY`` or 64 GiB).
    device_memory: Optional[int] = None

    def __post_init__(self) -> None:
        ids = self.device_ids
        if isinstance(ids, tuple):
            ids = list(ids)
            self.device_ids = ids
        if not isinstance(ids, list) or not ids:
            raise ValueError("DistributedConfig.device_ids must not be empty")
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in ids):
            raise ValueError(f"DistributedConfig.device_ids must be non-negative device indices, got {ids}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"DistributedConfig.device_ids must be distinct, got {ids}")
        n = self.num_sub_workers
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"DistributedConfig.num_sub_workers must be non-negative, got {n}")
        t = self.aicpu_thread_num
        if isinstance(t, bool) or not isinstance(t, int) or t == 1 or t < 0:
            raise ValueError(f"DistributedConfig.aicpu_thread_num must be 0 (architecture default) or at least 2, got {t}")
        try:
            check_device_memory(self.device_memory)
        except ValueError as e:
            raise ValueError(f"DistributedConfig.{e}") from None


class DistributedProgram:
    """``orchestration(o, chips, args, cfg)`` over ``chips`` (name -> Program).
    ``dprog(*args, config=None)`` runs once (plain numpy arrays are copied into shared
    memory and back); ``dprog.prepare(config)`` returns a resident ``DistributedWorker``."""

    def __init__(self, orchestration: Callable, chips: Dict[str, Any], config: Optional[DistributedConfig] = None, signature: Sequence[Any] = ()) -> None:
        if not callable(orchestration):
            raise TypeError("DistributedProgram: orchestration must be callable")
        for k, v in chips.items():
            if not isinstance(v, Program):
                raise TypeError(f"DistributedProgram: chips[{k!r}] must be a taskring.Program")
        self.orchestration = orchestration
        self.chips = dict(chips)
        self.config = config or DistributedConfig()
        self.signature = [ArgDirection(s) for s in signature]
        self.name = getattr(orchestration, "__name__", "distributed")

    def prepare(self, config: Any = None, *, extra_compiled: Sequence["DistributedProgram"] = (), chip_processes: bool = True) -> "DistributedWorker":
        """A resident ``DistributedWorker`` for this program (and ``extra_compiled``),
        its chips prewarmed with ``config``."""
        return DistributedWorker([self, *extra_compiled], prewarm=config, chip_processes=chip_processes)

    def __call__(self, *args: Any, config: Any = None) -> NodeRunReport:
        shared = []
        for a in args:
            if isinstance(a, np.ndarray) and not is_shared(a):
                s = shared_array(a.shape, a.dtype)
                s[...] = a
                shared.append(s)
            else:
                shared.append(a)
        with self.prepare(config) as w:
            rep = w(*shared, config=config)
        for a, s in zip(args, shared):
            if isinstance(a, np.ndarray) and s is not a:
                a[...] = s
        return rep


class DistributedWorker:
    """A resident L3 worker for one or more DistributedPrograms (see ``prepare``)."""

    def __init__(self, programs: Sequence[DistributedProgram], prewarm: Any = None, chip_processes: bool = True) -> None:
        if not programs:
            raise ValueError("DistributedWorker needs at least one program")
        self.programs = list(programs)
        base = self.programs[0].config
        self._baseline = base
        self._worker = _L3Worker(
            device_ids=list(base.device_ids),
            num_sub_workers=base.num_sub_workers,
            chip_processes=chip_processes,
            device_memory=base.device_memory,
        )
        self._handles: Dict[int, types.SimpleNamespace] = {}
        for p in self.programs:
            ns = types.SimpleNamespace()
            for name, prog in p.chips.items():
                setattr(ns, name, self._worker.register(prog))
            self._handles[id(p)] = ns
        self._worker.init(prewarm_config=prewarm)

    def _dispatch_config(self, program: DistributedProgram, config: Any) -> CallConfig:
        """A fresh CallConfig per dispatch: the program's thread count, plus the
        non-None ring fields and the diagnostics (``enable_*``, ``output_dir``) of the
        dispatch's RunConfig."""
        cfg = CallConfig(aicpu_thread_num=program.config.aicpu_thread_num)
        if config is None:
            return cfg
        platform_check(config)
        if isinstance(config, RunConfig):
            # Of a dispatch's RunConfig, L3 takes the ring fields (its thread count
            # and platform do not apply to the chips' tasks) ...
            for field in ("ring_task_window", "ring_heap", "ring_dep_pool"):
                value = getattr(config, field)
                if value is not None:
                    setattr(cfg.runtime_env, field, value)
            # And its diagnostics (docs/api.md §7): the run writes its outputs under
            # ``output_dir`` (one merged swimlane for the host and every chip), and each
            # chip task given this config its own under ``output_dir/chip{worker}/``.
            diag = config.to_call_config()
            for field in ("enable_scope_stats", "enable_dep_gen", "enable_chip_swimlane", "output_prefix"):
                setattr(cfg, field, getattr(diag, field))
        elif isinstance(config, CallConfig):
            cfg = config.copy()
        elif config is not None:
            raise TypeError(f"config must be a RunConfig, a CallConfig or None, got {type(config).__name__}")
        return cfg

    def run(self, program: DistributedProgram, *args: Any, config: Any = None) -> NodeRunReport:
        """Run ``program`` once with ``args`` (arrays from ``taskring.shared_array`` or
        ``alloc_tensor``). ``config`` (RunConfig: its ring fields; CallConfig: as is)
        becomes the ``cfg`` handed to the orchestration and sizes the node's own rings."""
        if id(program) not in self._handles:
            raise ValueError(f"{program.name} was not prepared on this worker")
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray) and not is_shared(a):
                raise TypeError(f"argument {i}: host arrays passed to a prepared worker must come from taskring.shared_array")
        cfg = self._dispatch_config(program, config)
        chips = self._handles[id(program)]
        return self._worker.run(lambda o, _a, c: program.orchestration(o, chips, tuple(args), c), None, cfg)

    def __call__(self, *args: Any, config: Any = None) -> NodeRunReport:
        if len(self.programs) != 1:
            raise TypeError("calling a multi-program DistributedWorker is ambiguous; use rt.run(program, ...)")
        return self.run(self.programs[0], *args, config=config)

    def submit(self, program: DistributedProgram, *args: Any, config: Any = None) -> RunHandle:
        """``run`` in the background; returns a ``RunHandle``."""
        return RunHandle(lambda: self.run(program, *args, config=config))

    def alloc_tensor(self, shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32, worker: int = 0) -> np.ndarray:
        """A device tensor in chip ``worker``'s memory, alive as long as this worker
        (e.g. a KV cache shared by its programs). Passing it to another chip's task is
        a ValueError."""
        if isinstance(worker, bool) or not isinstance(worker, int):
            raise TypeError("worker must be an int")
        if not 0 <= worker < len(self._worker.device_ids):
            raise ValueError(f"worker {worker} is not a chip of this worker")
        return self._worker._device_tensor(shape, dtype, worker)

    def arena_stats(self, worker: int = 0) -> ArenaStats:
        """Chip ``worker``'s ``ArenaStats``."""
        return self._worker.arena_stats(worker)

    def close(self) -> None:
        """Stop every chip (idempotent)."""
        self._worker.close()

    def __enter__(self) -> "DistributedWorker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
