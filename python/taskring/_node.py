"""L3: a host with several chips (docs/api.md §4) — `Worker` (low level), `shared_array`,
`RunHandle`, and the PyPTO-style `DistributedConfig` / `DistributedProgram` /
`DistributedWorker`."""

from __future__ import annotations

import dataclasses
import threading
import types
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._native import ArenaStats, CallConfig, NodeRunReport
from ._config import RunConfig, check_device_memory, platform_check

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from . import Program

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


class _SharedHolder:
    """Keeps a SharedMem alive for as long as an array over it exists."""

    def __init__(self, mem, shape, dtype):
        self.mem = mem
        self.__array_interface__ = {
            "shape": tuple(shape),
            "typestr": np.dtype(dtype).str,
            "data": (mem.address, False),
            "version": 3,
        }


def shared_array(shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32) -> np.ndarray:
    """A zero-filled numpy array in memory that chip processes see (zero-copy L3
    dispatch). Arrays made after a worker's ``init()`` work too: a chip maps the memory
    on first use."""
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"shared_array shape must have at least one dimension and no empty ones, got {shape}")
    dt = np.dtype(dtype)
    _native.dtype_itemsize(str(dt))
    nbytes = int(np.prod(shape)) * dt.itemsize
    mem = _native.SharedMem(nbytes)
    return np.asarray(_SharedHolder(mem, shape, dt))


class RunHandle:
    """A run in flight (``Worker.submit``): ``done``, ``wait(timeout)``, ``result(timeout)``."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._result: Any = None
        self._error: Optional[BaseException] = None
        self._done = threading.Event()

        def body():
            try:
                self._result = fn()
            except BaseException as e:  # handed to the caller by result()
                self._error = e
            finally:
                self._done.set()

        self._thread = threading.Thread(target=body, name="taskring-run", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        """Whether the run has finished (successfully or not)."""
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait up to ``timeout`` seconds (forever when None); returns ``done``."""
        return self._done.wait(timeout)

    def result(self, timeout: Optional[float] = None) -> Any:
        """The run's return value, waiting up to ``timeout`` seconds (TimeoutError when
        it has not finished); re-raises the run's exception."""
        if not self._done.wait(timeout):
            raise TimeoutError("the run has not finished")
        if self._error is not None:
            raise self._error
        return self._result


from ._config import as_call_config as _call_config


_PROGRAM_CLASS: Any = None


def _program_class() -> Any:
    """``taskring.Program`` (defined after this module is imported; looked up once: an
    import statement on every run cost ~1 µs)."""
    global _PROGRAM_CLASS
    if _PROGRAM_CLASS is None:
        from . import Program

        _PROGRAM_CLASS = Program
    return _PROGRAM_CLASS


class Worker:
    """Simpler-style worker. ``Worker(level=3, device_ids=[0, 1, 2])`` forks one chip
    process per device id at ``init()`` (``chip_processes=False`` runs chips as threads
    of this process, with the same protocol). ``Worker(level=2, device_id=0)`` is the
    one-chip form. Programs are registered with ``register(program)`` — before
    ``init()`` when chips are processes (they inherit what exists when forked)."""

    def __init__(self, level: int = 2, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(_WORKER_KWARGS))
        if unknown:
            raise TypeError(f"Worker() got unexpected keyword(s) {', '.join(unknown)}; allowed: {', '.join(_WORKER_KWARGS)}")
        if level not in (2, 3, 4):
            raise ValueError(f"Worker level must be 2, 3 or 4, got {level!r}")
        self.level = level
        self._l4: Optional[Any] = None
        self._node: Optional[_native.Node] = None
        self._chip: Optional[_native.Chip] = None
        if level == 4:
            # L4 (docs/api.md §9): hosts are the other MPI ranks; see taskring._cluster.
            from ._cluster import L4Worker

            allowed = {"level", "arena_cache_slots", "chip_processes", "platform"}
            extra = sorted(set(kwargs) - allowed)
            if extra:
                raise TypeError(f"Worker(level=4) takes arena_cache_slots and chip_processes, not {', '.join(extra)}")
            self._l4 = L4Worker(arena_cache_slots=kwargs.get("arena_cache_slots", 4), chip_processes=bool(kwargs.get("chip_processes", True)))
            self.device_ids = []
            return
        platform = kwargs.get("platform", "sim")
        if platform not in ("sim", "a2a3sim", "a5sim"):
            if platform in ("a2a3", "a5"):
                raise RuntimeError(f"platform {platform!r} needs an Ascend device and driver; this build runs the 'sim' platform only")
            raise ValueError(f"Invalid platform {platform!r}. Expected 'sim', 'a2a3sim', 'a5sim', 'a2a3', or 'a5'.")
        if level == 3:
            ids = kwargs.get("device_ids")
            if ids is None:
                raise TypeError("Worker(level=3) needs device_ids=[...]")
        else:
            ids = [kwargs.get("device_id", 0)]
        ids = list(ids)
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
        self._programs: List[Any] = []
        self._node = None
        self._chip = None
        self._owners: Dict[int, int] = {}
        self._keep: List[np.ndarray] = []
        self._held: Dict[int, int] = {}  # device-resident bytes per chip

    # -- programs -----------------------------------------------------------------
    def register(self, program: "Program") -> int:
        """Register a ``Program``; returns its handle for ``submit_next_level``."""
        from . import Program

        if self._l4 is not None:
            return self._l4.register(program)
        if not isinstance(program, Program):
            raise TypeError(f"register() needs a taskring.Program, got {type(program).__name__}")
        if self._node is not None:
            h = self._node.register(program.orchestration, program.name, [int(s) for s in program.signature])
            self._programs.append(program)
            return h
        self._programs.append(program)
        return len(self._programs) - 1

    # -- life ----------------------------------------------------------------------
    def init(self, prewarm_config: Any = None) -> Any:
        """Start the chips (idempotent): each builds its arena for ``prewarm_config``
        (validated first) before this returns. Returns the worker. At level 4: on rank 0
        returns True; on a host it serves rank 0's tasks until rank 0 closes, then
        returns False."""
        if self._l4 is not None:
            return self._l4.init(prewarm_config)
        if self._node is not None or self._chip is not None:
            return self
        # Without a prewarm config every chip builds the default sizing's arena.
        cfg = _call_config(prewarm_config)
        cfg.validate()
        if self.level == 2:
            self._chip = _native.Chip(
                cores=self.chip_cores, arena_cache_slots=self.arena_cache_slots, prewarm=[cfg], device_memory=self.device_memory
            )
            return self
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
        )
        return self

    def close(self) -> None:
        """Stop every chip (idempotent). At level 3 it waits for a run in flight on
        another thread, which gives up on chips that do not answer; those are killed
        (it returns within about a second then). In a child of ``os.fork()`` it only
        forgets the parent's worker."""
        if self._l4 is not None:
            self._l4.close()
        if self._node is not None:
            self._node.close()
            self._node = None
        if self._chip is not None:
            self._chip.close()
            self._chip = None

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def pids(self) -> Tuple[int, ...]:
        """Process ids of the chips (level 3; ``()`` before ``init()`` and at level 2)."""
        return self._node.pids if self._node is not None else ()

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
        ``RunReport``."""
        cfg = _call_config(config)
        cfg.validate()
        if self._l4 is not None:
            return self._l4.run(orch, args, cfg)
        if self.level == 2:
            if self._chip is None:
                raise RuntimeError("Worker.init() has not been called (or the worker is closed)")
            prog = orch if isinstance(orch, _program_class()) else self._programs[orch]
            host = prog.check_args(list(args or ()))
            return self._chip.run(prog.orchestration, prog.name, host, cfg)
        if self._node is None:
            raise RuntimeError("Worker.init() has not been called (or the worker is closed)")
        return self._node.run(lambda o: orch(o, args, cfg), cfg)

    def submit(self, orch: Any, args: Any = None, config: Any = None) -> RunHandle:
        """``run`` in the background; returns a ``RunHandle``."""
        return RunHandle(lambda: self.run(orch, args, config))

    @property
    def num_hosts(self) -> int:
        """Level 4: the number of hosts (MPI ranks 1..N; known from the launch)."""
        return self._l4.num_hosts if self._l4 is not None else 0

    def alloc_tensor(self, shape: Union[int, Sequence[int]], dtype: DTypeLike = np.float32, worker: int = 0) -> Any:
        """Level 4 (rank 0, after ``init()``): a tensor that lives on host ``worker``
        (zero-filled there at its first use, kept across tasks, freed when the job
        ends); passing it to another host's task is a ValueError."""
        if self._l4 is None:
            raise RuntimeError("alloc_tensor on a Worker is for level 4; at level 3 use DistributedWorker.alloc_tensor")
        return self._l4.alloc_tensor(shape, dtype, worker)

    def arena_stats(self, worker: int = 0) -> ArenaStats:
        """That chip's ``ArenaStats``."""
        if self.level == 2:
            if self._chip is None:
                raise RuntimeError("the worker is not initialised")
            return self._chip.arena_stats()
        if self._node is None:
            raise RuntimeError("the worker is not initialised")
        return self._node.arena_stats(worker)

    def _device_tensor(self, shape: Union[int, Sequence[int]], dtype: DTypeLike, worker: int) -> np.ndarray:
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


# ----- high level (PyPTO-style) -----------------------------------------------------


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
        from . import ArgDirection, Program

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
            if isinstance(a, np.ndarray) and not _is_shared(a):
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


def _is_shared(a: np.ndarray) -> bool:
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, _SharedHolder) or isinstance(getattr(base, "obj", None), _SharedHolder)


class DistributedWorker:
    """A resident L3 worker for one or more DistributedPrograms (see ``prepare``)."""

    def __init__(self, programs: Sequence[DistributedProgram], prewarm: Any = None, chip_processes: bool = True) -> None:
        if not programs:
            raise ValueError("DistributedWorker needs at least one program")
        self.programs = list(programs)
        base = self.programs[0].config
        self._baseline = base
        self._worker = Worker(
            level=3,
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
            if isinstance(a, np.ndarray) and not _is_shared(a):
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
