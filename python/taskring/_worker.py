"""``Worker`` (Simpler style, docs/api.md §4.1 and §9): ``Worker(level=N, ...)`` is an
instance of the class of level N — ``_L2Worker`` (one chip), ``_L3Worker`` (a host with
several chips, in this module) or ``_L4Worker`` (hosts over MPI, in ``_cluster``). A
level's class declares its level (``class _L3Worker(Worker, level=3)``) and so becomes
the one ``Worker(level=3)`` makes; the package imports every module that defines one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np

from . import _native
from ._config import as_call_config, check_device_memory
from ._handle import RunHandle
from ._native import ArenaStats
from ._program import Program
from ._shared import shared_array

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

_WORKER_KWARGS = (
    "level",
    "device_id",
    "device_ids",
    "platform",
    "num_sub_workers",
    "arena_cache_slots",
    "chip_processes",
    "chip_cores",
    "device_memory",
)


class Worker:
    """Simpler-style worker. ``Worker(level=3, device_ids=[0, 1, 2])`` forks one chip
    process per device id at ``init()`` (``chip_processes=False`` runs chips as threads
    of this process, with the same protocol). ``Worker(level=2, device_id=0)`` is the
    one-chip form. Programs are registered with ``register(program)`` — before
    ``init()`` when chips are processes (they inherit what exists when forked).
    ``Worker(level=4)``: hosts are the other MPI ranks (docs/api.md §9)."""

    __module__ = "taskring"

    #: The class of each level (filled by ``__init_subclass__``).
    _LEVELS: ClassVar[Dict[int, Type["Worker"]]] = {}
    level: int
    device_ids: List[int]

    def __init_subclass__(cls, level: Optional[int] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if level is not None:
            cls.level = level
            Worker._LEVELS[level] = cls

    def __new__(cls, level: int = 2, **kwargs: Any) -> "Worker":
        unknown = sorted(set(kwargs) - set(_WORKER_KWARGS))
        if unknown:
            raise TypeError(f"Worker() got unexpected keyword(s) {', '.join(unknown)}; allowed: {', '.join(_WORKER_KWARGS)}")
        if cls is not Worker:
            return super().__new__(cls)
        if level not in (2, 3, 4):
            raise ValueError(f"Worker level must be 2, 3 or 4, got {level!r}")
        return super().__new__(Worker._LEVELS[level])

    # -- programs -----------------------------------------------------------------
    def register(self, program: Any) -> int:
        """Register a ``Program`` (at level 4 a ``DistributedProgram``); returns its
        handle for ``submit_next_level``."""
        raise NotImplementedError

    # -- life ----------------------------------------------------------------------
    def init(self, prewarm_config: Any = None) -> Any:
        """Start the chips (idempotent): each builds its arena for ``prewarm_config``
        (validated first) before this returns. Returns the worker. At level 4: on rank 0
        returns True; on a host it serves rank 0's tasks until rank 0 closes, then
        returns False."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop every chip (idempotent). At level 3 it waits for a run in flight on
        another thread, which gives up on chips that do not answer; those are killed
        (it returns within about a second then). In a child of ``os.fork()`` it only
        forgets the parent's worker."""
        raise NotImplementedError

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def pids(self) -> Tuple[int, ...]:
        """Process ids of the chips (level 3; ``()`` before ``init()`` and at level 2)."""
        return ()

    # -- running -------------------------------------------------------------------
    def run(self, orch: Any, args: Any = None, config: Any = None) -> Any:
        """Level 3: run ``orch(o, args, cfg)`` (``cfg`` = ``config`` as a CallConfig;
        it sizes the node's own rings and is never applied to chip tasks implicitly).
        Returns a ``NodeRunReport``. A chip that stops answering (no heartbeat for
        ``TASKRING_CHIP_TIMEOUT_MS``, default 2000) fails the run with ``chip {worker}
        (pid {pid}): not responding ...``; Ctrl-C interrupts the wait within 1 s
        (``KeyboardInterrupt``; the worker stays usable — the next run first waits for
        chips still busy with the interrupted tasks). Level 2: ``run(handle_or_program,
        args, config)`` runs a registered program on the chip and returns a
        ``RunReport``. Level 4 (rank 0): ``orch(o, args, cfg)`` over the hosts; returns
        a ``NodeRunReport`` of ``HostTaskReport``s."""
        cfg = as_call_config(config)
        cfg.validate()
        return self._run(orch, args, cfg)

    def _run(self, orch: Any, args: Any, cfg: _native.CallConfig) -> Any:
        """``run`` with its config converted and validated."""
        raise NotImplementedError

    def submit(self, orch: Any, args: Any = None, config: Any = None) -> RunHandle:
        """``run`` in the background; returns a ``RunHandle``."""
        return RunHandle(lambda: self.run(orch, args, config))

    @property
    def num_hosts(self) -> int:
        """Level 4: the number of hosts (MPI ranks 1..N; known from the launch)."""
        return 0

    def alloc_tensor(self, shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32, worker: int = 0) -> Any:
        """Level 4 (rank 0, after ``init()``): a tensor that lives on host ``worker``
        (zero-filled there at its first use, kept across tasks, freed when the job
        ends); passing it to another host's task is a ValueError."""
        raise RuntimeError("alloc_tensor on a Worker is for level 4; at level 3 use DistributedWorker.alloc_tensor")

    def arena_stats(self, worker: int = 0) -> ArenaStats:
        """That chip's ``ArenaStats``."""
        raise RuntimeError("Worker.init() has not been called (or the worker is closed)")


class _ChipsWorker(Worker):
    """Levels 2 and 3: chips of this machine, named by device ids, and the programs
    registered for them."""

    def __init__(self, level: Any = None, **kwargs: Any) -> None:
        # ``level`` is this class's own: ``Worker.__new__`` chose the class by it.
        platform = kwargs.get("platform", "sim")
        if platform not in ("sim", "a2a3sim", "a5sim"):
            if platform in ("a2a3", "a5"):
                raise RuntimeError(f"platform {platform!r} needs an Ascend device and driver; this build runs the 'sim' platform only")
            raise ValueError(f"Invalid platform {platform!r}. Expected 'sim', 'a2a3sim', 'a5sim', 'a2a3', or 'a5'.")
        ids = list(self._requested_ids(kwargs))
        if not ids:
            raise ValueError("device_ids must not be empty")
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in ids):
            raise ValueError(f"device_ids must be non-negative device indices, got {ids}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"device_ids must be distinct, got {ids}")
        self.device_ids = ids
        self.num_sub_workers = kwargs.get("num_sub_workers", 0)
        self.arena_cache_slots = kwargs.get("arena_cache_slots", 4)
        self.chip_processes = bool(kwargs.get("chip_processes", True))
        self.chip_cores = kwargs.get("chip_cores", 0)
        self.device_memory = check_device_memory(kwargs.get("device_memory"))
        self._programs: List[Program] = []

    def _requested_ids(self, kwargs: Dict[str, Any]) -> Sequence[Any]:
        """The device ids the keywords ask for (checked by the caller)."""
        raise NotImplementedError

    def _check_program(self, program: Any) -> Program:
        if not isinstance(program, Program):
            raise TypeError(f"register() needs a taskring.Program, got {type(program).__name__}")
        return program


class _L2Worker(_ChipsWorker, level=2):
    """``Worker(level=2, device_id=0)``: one chip, run in this process."""

    def __init__(self, level: int = 2, **kwargs: Any) -> None:
        super().__init__(level, **kwargs)
        self._chip: Optional[_native.Chip] = None

    def _requested_ids(self, kwargs: Dict[str, Any]) -> Sequence[Any]:
        return [kwargs.get("device_id", 0)]

    def register(self, program: Any) -> int:
        self._programs.append(self._check_program(program))
        return len(self._programs) - 1

    def init(self, prewarm_config: Any = None) -> "_L2Worker":
        if self._chip is not None:
            return self
        # Without a prewarm config the chip builds the default sizing's arena where it
        # fits the device memory (a warning where it does not).
        cfg = as_call_config(prewarm_config)
        cfg.validate()
        self._chip = _native.Chip(
            cores=self.chip_cores,
            arena_cache_slots=self.arena_cache_slots,
            prewarm=[cfg],
            device_memory=self.device_memory,
            prewarm_if_fits=prewarm_config is None,
        )
        return self

    def close(self) -> None:
        if self._chip is not None:
            self._chip.close()
            self._chip = None

    def _run(self, orch: Any, args: Any, cfg: _native.CallConfig) -> _native.RunReport:
        if self._chip is None:
            raise RuntimeError("Worker.init() has not been called (or the worker is closed)")
        prog = orch if isinstance(orch, Program) else self._programs[orch]
        host = prog.check_args(list(args or ()))
        return self._chip.run(prog.orchestration, prog.name, host, cfg)

    def arena_stats(self, worker: int = 0) -> ArenaStats:
        if self._chip is None:
            raise RuntimeError("Worker.init() has not been called (or the worker is closed)")
        return self._chip.arena_stats()


class _L3Worker(_ChipsWorker, level=3):
    """``Worker(level=3, device_ids=[...])``: a host whose chips are child processes
    (or threads, ``chip_processes=False``) served by the native node."""

    def __init__(self, level: int = 3, **kwargs: Any) -> None:
        super().__init__(level, **kwargs)
        self._node: Optional[_native.Node] = None
        self._owners: Dict[int, int] = {}
        self._keep: List[np.ndarray] = []
        self._held: Dict[int, int] = {}  # device-resident bytes per chip

    def _requested_ids(self, kwargs: Dict[str, Any]) -> Sequence[Any]:
        ids = kwargs.get("device_ids")
        if ids is None:
            raise TypeError("Worker(level=3) needs device_ids=[...]")
        return ids

    def register(self, program: Any) -> int:
        program = self._check_program(program)
        if self._node is not None:
            h = self._node.register(program.orchestration, program.name, [int(s) for s in program.signature])
            self._programs.append(program)
            return h
        self._programs.append(program)
        return len(self._programs) - 1

    def init(self, prewarm_config: Any = None) -> "_L3Worker":
        if self._node is not None:
            return self
        # Without a prewarm config every chip builds the default sizing's arena where it
        # fits the chip's device memory (a warning where it does not).
        cfg = as_call_config(prewarm_config)
        cfg.validate()
        callables: List[Tuple[Callable[..., object], str, Sequence[int]]] = [
            (p.orchestration, p.name, [int(s) for s in p.signature]) for p in self._programs
        ]
        self._node = _native.Node(
            list(self.device_ids),
            callables,
            self._owners,
            chip_processes=self.chip_processes,
            arena_cache_slots=self.arena_cache_slots,
            chip_cores=self.chip_cores,
            prewarm=cfg,
            device_memory=self.device_memory,
            prewarm_if_fits=prewarm_config is None,
        )
        return self

    def close(self) -> None:
        if self._node is not None:
            self._node.close()
            self._node = None

    @property
    def pids(self) -> Tuple[int, ...]:
        return self._node.pids if self._node is not None else ()

    def _run(self, orch: Any, args: Any, cfg: _native.CallConfig) -> _native.NodeRunReport:
        if self._node is None:
            raise RuntimeError("Worker.init() has not been called (or the worker is closed)")
        return self._node.run(lambda o: orch(o, args, cfg), cfg)

    def arena_stats(self, worker: int = 0) -> ArenaStats:
        if self._node is None:
            raise RuntimeError("Worker.init() has not been called (or the worker is closed)")
        return self._node.arena_stats(worker)

    def _device_tensor(self, shape: Union[int, Sequence[int]], dtype: DTypeLike, worker: int) -> np.ndarray:
        """A shared array owned by chip ``worker``, kept as long as this worker
        (``DistributedWorker.alloc_tensor``)."""
        a = shared_array(shape, dtype)
        if self._node is not None:
            # Charged to the chip's device memory (DEVICE_OUT_OF_MEMORY from the chip
            # when it cannot hold it; nothing is charged then).
            held = self._held.get(worker, 0) + int(a.nbytes)
            self._node.hold(worker, held)
            self._held[worker] = held
        self._owners[a.__array_interface__["data"][0]] = worker
        self._keep.append(a)
        return a
