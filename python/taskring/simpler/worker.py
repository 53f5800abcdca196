"""``simpler.worker.Worker`` on taskring: level 2 (one chip in this process) and level 3
(chips as child processes of this one, taskring's L3 node), with upstream's lifecycle
(``register`` -> ``init`` -> ``run`` -> ``close``) and device-memory verbs (``malloc``,
``free``, ``copy_to``, ``copy_from``), charged to the chip's device memory."""

from __future__ import annotations

import ctypes
import hashlib
import operator
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _native
from .._config import check_device_memory
from .._errors import RuntimeFailure
from .._shared import array_over
from .buffer import mapped_args
from .callable_identity import CallableHandle
from .task_interface import (
    MAX_REGISTERED_CALLABLE_IDS,
    CallConfig,
    ChipCallable,
    DataType,
    TaskArgs,
    Tensor,
    TensorArgType,
    as_array,
    get_element_size,
    numpy_to_datatype,
    to_native_config,
    view_of,
)

RUNTIME = "tensormap_and_ringbuffer"
PLATFORMS = ("a2a3sim", "a2a3")
# taskring's chip tasks take at most 16 scalars.
_MAX_SCALARS = 16
_ALIGN = 64
# A host worker's task whose last tensor is its callable, pickled (see Worker._host_task).
_LATE = 1 << 31
# ArgDirection of each TensorArgType (OUTPUT_EXISTING writes a buffer in place: after its
# readers and writers, as INOUT; NO_DEP is read as an INPUT).
_TAG_DIR = {0: 0, 1: 1, 2: 2, 3: 2, 4: 0}

_warned_a2a3 = False
_warn_lock = threading.Lock()


def _check_platform(platform: Any) -> str:
    global _warned_a2a3
    if platform not in PLATFORMS:
        raise ValueError(f"Worker: platform {platform!r} is not supported; taskring runs {', '.join(map(repr, PLATFORMS))}")
    if platform == "a2a3":
        with _warn_lock:
            if not _warned_a2a3:
                _warned_a2a3 = True
                warnings.warn(
                    "platform 'a2a3' runs on taskring's simulated a2a3 chip: no Ascend device is used",
                    RuntimeWarning,
                    stacklevel=3,
                )
    return platform


def _oom(asked: int, free: int, cap: int) -> RuntimeFailure:
    return RuntimeFailure(
        202,
        "DEVICE_OUT_OF_MEMORY",
        None,
        f"{asked} more bytes of device buffers do not fit: {free} of {cap} bytes are free",
        "free device memory: free buffers that are no longer needed, give dispatches a smaller runtime_env, "
        "or raise device_memory",
    )


class Buffer:
    """Device memory from ``Worker.malloc`` / ``alloc_child_tensor``: ``nbytes``, ``base``
    (its address), ``owner_worker_id``; ``tensor(shapes, dtype, strides=None,
    byte_offset=0)`` names a view of it as a task argument."""

    __slots__ = ("nbytes", "base", "owner_worker_id", "closed", "_mem", "__weakref__")

    def __init__(self, mem: np.ndarray, owner_worker_id: int = 0) -> None:
        self._mem = mem
        self.nbytes = int(mem.nbytes)
        self.base = int(mem.__array_interface__["data"][0])
        self.owner_worker_id = owner_worker_id
        self.closed = False

    def tensor(self, shapes: Sequence[int], dtype: Any, strides: Optional[Sequence[int]] = None, byte_offset: int = 0) -> Tensor:
        if self.closed:
            raise ValueError("Buffer: cannot view a released buffer")
        return Tensor(view_of(self._mem, shapes, dtype, strides, byte_offset), buffer=self, byte_offset=byte_offset)

    def numpy(self) -> np.ndarray:
        """The buffer's bytes (uint8, no copy)."""
        return self._mem

    def __repr__(self) -> str:
        return f"Buffer(nbytes={self.nbytes}, base=0x{self.base:x}, owner_worker_id={self.owner_worker_id})"


def _host_bytes(obj: Any, api: str, writing: bool) -> np.ndarray:
    """The host side of a copy as uint8 bytes over its memory (no copy)."""
    from .buffer import Buffer as HostBuffer

    if isinstance(obj, (Buffer, HostBuffer)):
        return obj._mem
    if isinstance(obj, (np.ndarray, Tensor)) or hasattr(obj, "data_ptr") or hasattr(obj, "__array_interface__") or hasattr(obj, "__dlpack__"):
        a = as_array(obj)
        if not a.flags.c_contiguous:
            raise ValueError(f"Worker.{api}: the host tensor must be contiguous")
        if writing and not a.flags.writeable:
            raise TypeError(f"Worker.{api}: the host tensor must be writable")
        return a.reshape(-1).view(np.uint8)
    mv = memoryview(obj)
    if mv.readonly and writing:
        raise TypeError("copy_to/copy_from host buffer must be a torch tensor or a writable buffer")
    if mv.readonly:
        return np.frombuffer(mv, dtype=np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * mv.nbytes).from_buffer(obj))


def _check_worker_arg(worker: Any) -> int:
    if isinstance(worker, bool):
        raise TypeError("worker must be an integer NEXT_LEVEL worker id")
    try:
        w = operator.index(worker)
    except TypeError:
        raise TypeError("worker must be an integer NEXT_LEVEL worker id") from None
    if w < 0:
        raise ValueError("worker must be a non-negative NEXT_LEVEL worker id")
    return w


class Orchestrator:
    """What an L3 orchestration function gets as ``orch``: ``submit_next_level``,
    ``submit_next_level_group``, ``scope()``; valid while its run lasts."""

    def __init__(self, o: Optional[_native.NodeOrchestrator], worker: "Worker") -> None:
        self._o = o
        self._worker = worker

    def _resolve(self, handle: Any, api: str, python: bool = False) -> int:
        """The slot of ``handle``: a chip program's, or with ``python`` a Python callable's."""
        if isinstance(handle, ChipCallable):
            raise TypeError(
                f"orch.{api} now takes a CallableHandle, not a ChipCallable. Register the callable before "
                "init() via `handle = worker.register(chip_callable)` and pass `handle` here."
            )
        if not isinstance(handle, CallableHandle):
            raise TypeError(f"orch.{api} expects a CallableHandle returned by Worker.register")
        w = self._worker
        if handle._owner_id != w._owner_id:
            raise KeyError(f"CallableHandle {handle.hashid} does not belong to this Worker")
        want = "LOCAL_PYTHON" if python else "LOCAL_CHIP"
        if handle.target_namespace != want:
            raise TypeError(f"cannot run {handle.target_namespace}; expected {want} for {handle.hashid}")
        return w._live_slot(handle, w._py_slots if python else w._slots)

    def _native(self, api: str) -> _native.NodeOrchestrator:
        if self._o is None:
            raise ValueError(f"orch.{api}: this Worker has no chips, SUB workers or next-level workers to run a task")
        return self._o

    def submit_sub(self, handle: Any, args: Optional[TaskArgs] = None) -> int:
        """Run the registered Python callable ``handle`` on a SUB worker (the least busy
        one) with ``args`` (TaskArgs; None = none): it is called as ``fn(args)`` with
        ``MappedArgs``. Dependencies with chip and other SUB tasks come from the
        tensors they share, with the directions of their tags."""
        slot = self._resolve(handle, "submit_sub", python=True)
        w = self._worker
        if w.num_sub_workers == 0:
            raise ValueError("orch.submit_sub: this Worker has no SUB workers (num_sub_workers=0)")
        cid, host, dirs = w._host_task(slot, args, "orch.submit_sub", tags=False)
        return self._native("submit_sub").submit_host(cid, host, dirs, None, None)

    def submit_sub_group(self, handle: Any, args_list: Sequence[Optional[TaskArgs]]) -> List[int]:
        """``args_list[i]`` each as ``submit_sub``, on different SUB workers while there
        are idle ones."""
        slot = self._resolve(handle, "submit_sub_group", python=True)
        args_list = list(args_list)
        if not args_list:
            raise ValueError("Orchestrator: args_list must not be empty")
        w = self._worker
        if w.num_sub_workers == 0:
            raise ValueError("orch.submit_sub_group: this Worker has no SUB workers (num_sub_workers=0)")
        o = self._native("submit_sub_group")
        return [o.submit_host(*w._host_task(slot, a, "orch.submit_sub_group", tags=False), None, None) for a in args_list]

    def _args(self, slot: int, args: Optional[TaskArgs]) -> Tuple[int, List[Any], List[int]]:
        """A chip task's program, arguments and their directions (from the tensors'
        tags, as upstream's L3 reads them)."""
        if args is None:
            args = TaskArgs()
        if not isinstance(args, TaskArgs):
            raise TypeError(f"args must be a TaskArgs, got {type(args).__name__}")
        n = args.scalar_count()
        if n > _MAX_SCALARS:
            raise ValueError(f"a chip task takes at most {_MAX_SCALARS} scalars, got {n}")
        return slot, args._host_args(), [_TAG_DIR[int(t)] for t in args._tags] + [3] * n

    def submit_next_level(self, handle: Any, args: Optional[TaskArgs] = None, config: Any = None, *, worker: Any) -> int:
        """Run the registered chip program ``handle`` with ``args`` on chip ``worker``
        (the index in ``device_ids``) with ``config`` (a default CallConfig when None;
        the run's config is not inherited). Dependencies between tasks come from the
        tensors they share, with the directions of the callable's signature."""
        w = _check_worker_arg(worker)
        if self._worker.level >= 4:
            return self._submit_child(handle, args, config, w, "submit_next_level")
        slot = self._resolve(handle, "submit_next_level")
        cfg = to_native_config(config)
        native, host, dirs = self._args(slot, args)
        return self._native("submit_next_level").submit_next_level(native, host, cfg, worker=w, dirs=dirs)

    def _submit_child(self, handle: Any, args: Any, config: Any, w: int, api: str) -> int:
        """Level 4: the L3 orchestration ``handle`` on next-level worker ``w``, with
        ``config`` whole."""
        slot = self._resolve(handle, api, python=True)
        if args is not None and not isinstance(args, TaskArgs):
            raise TypeError("NEXT_LEVEL submit expects TaskArgs")
        wk = self._worker
        if w >= len(wk._children):
            raise ValueError(f"Orchestrator: target worker {w} is not a registered worker")
        cfg = to_native_config(config)
        cid, host, dirs = wk._host_task(slot, args, f"orch.{api}", tags=True)
        return self._native(api).submit_host(cid, host, dirs, cfg, wk.num_sub_workers + w)

    def submit_next_level_group(self, handle: Any, args_list: Sequence[TaskArgs], config: Any = None, *, workers: Sequence[Any]) -> List[int]:
        """``args_list[i]`` on ``workers[i]``, each as ``submit_next_level``."""
        ws = [_check_worker_arg(w) for w in workers]
        if len(ws) != len(args_list):
            raise ValueError("workers length must match args_list length")
        if len(set(ws)) != len(ws):
            raise ValueError("workers must not contain duplicate NEXT_LEVEL worker ids")
        if self._worker.level >= 4:
            return [self._submit_child(handle, a, config, w, "submit_next_level_group") for a, w in zip(args_list, ws)]
        slot = self._resolve(handle, "submit_next_level_group")
        cfg = to_native_config(config)
        o = self._native("submit_next_level_group")
        ids = []
        for a, w in zip(args_list, ws):
            native, host, dirs = self._args(slot, a)
            ids.append(o.submit_next_level(native, host, cfg, worker=w, dirs=dirs))
        return ids

    def alloc_child_tensor(self, worker_id: int, shapes: Sequence[int], dtype: Any) -> Buffer:
        """``Worker.alloc_child_tensor`` from inside the orchestration."""
        return self._worker.alloc_child_tensor(worker_id, shapes, dtype)

    def free(self, handle: Buffer) -> None:
        """``Worker.free`` from inside the orchestration."""
        self._worker.free(handle)

    def copy_to(self, dst: Buffer, src: Any) -> None:
        self._worker.copy_to(dst, src)

    def copy_from(self, dst: Any, src: Buffer) -> None:
        self._worker.copy_from(dst, src)

    def scope(self, manual: bool = False) -> Any:
        """``with orch.scope():`` — a nested scope of the run."""
        return self._native("scope").scope(manual)

    def scope_begin(self, manual: bool = False) -> None:
        self._native("scope_begin").begin_scope(manual)

    def scope_end(self) -> None:
        self._native("scope_end").end_scope()


class Worker:
    """``Worker(level=2, platform=, runtime="tensormap_and_ringbuffer", device_id=0)``,
    ``Worker(level=3, ..., device_ids=[...], num_sub_workers=M)`` or
    ``Worker(level=4, num_sub_workers=M)`` with ``add_worker(Worker(level=3, ...))``.
    ``platform`` is needed where there are chips. taskring's own keys:
    ``device_memory`` (bytes per chip), ``chip_cores``, ``arena_cache_slots``,
    ``chip_processes`` (L3; False runs the chips as threads of this process). Other
    keys are ignored, as upstream ignores them."""

    _next_owner = 0

    def __init__(self, level: int = 2, **config: Any) -> None:
        if level not in (2, 3, 4):
            raise ValueError(f"Worker: level {level} not supported")
        self.level = level
        self._config = config
        ids = [int(config.get("device_id", 0))] if level == 2 else [int(d) for d in (config.get("device_ids") or [])]
        self.device_ids = ids
        if level == 2 or (level == 3 and ids):
            if "platform" not in config:
                raise KeyError("platform")
            self.platform: Optional[str] = _check_platform(config["platform"])
        else:
            self.platform = config.get("platform")
        runtime = config.get("runtime", RUNTIME)
        if runtime != RUNTIME:
            raise ValueError(f"Worker: runtime {runtime!r} is not supported; taskring runs {RUNTIME!r}")
        self.runtime = runtime
        self.num_sub_workers = int(config.get("num_sub_workers", 0))
        if self.num_sub_workers < 0:
            raise ValueError(f"Worker: num_sub_workers must be >= 0, got {self.num_sub_workers}")
        if level == 2 and self.num_sub_workers:
            raise ValueError("Worker: num_sub_workers needs level >= 3 (SUB workers belong to a host)")
        self._device_memory = check_device_memory(config.get("device_memory"))
        self._chip_cores = int(config.get("chip_cores", 0))
        self._slots_n = int(config.get("arena_cache_slots", 4))
        self._chip_processes = bool(config.get("chip_processes", True))
        self._callables: List[ChipCallable] = []
        self._slots: Dict[str, int] = {}
        # Python callables (SUB tasks, L3 orchestrations run below an L4) and, for those
        # registered after init(), their pickled form in shared memory (sent with
        # their tasks to workers forked before them).
        self._py: List[Any] = []
        self._py_slots: Dict[str, int] = {}
        self._py_late: Dict[int, np.ndarray] = {}
        # Live handles (handle id -> hashid) and each callable's count of them.
        self._live: Dict[int, str] = {}
        self._refs: Dict[str, int] = {}
        self._next_handle = 0
        self._children: List["Worker"] = []
        self._parent: Optional["Worker"] = None
        self._in_child = False  # a next-level worker's copy in its own process
        self._prewarm: Optional[CallConfig] = None
        Worker._next_owner += 1
        self._owner_id = f"taskring-worker-{id(self):x}-{Worker._next_owner}"
        self._chip: Optional[_native.Chip] = None
        self._node: Optional[_native.Node] = None
        self._started = False  # init() succeeded (also with nothing to start)
        self._closed = False
        self.last_report: Any = None
        self._buffers: Dict[int, Buffer] = {}  # base -> live buffer
        self._committed = [0] * len(self.device_ids)  # bytes of live buffers per chip
        self._owners: Dict[int, int] = {}  # address -> chip of device tensors (L3)
        self._rehomed: Dict[int, Any] = {}  # id(torch tensor) -> its shared memory (L3)
        # Set in a host worker's process: the Python callables it has loaded.
        self._loaded: Dict[int, Any] = {}
        # create_buffer's: this Worker's owner id, the last buffer id, the live buffers.
        self._oid: Optional[bytes] = None
        self._next_buffer_id = 0
        self._host_buffers: List[Any] = []

    # -- registration ----------------------------------------------------------------------
    def register(self, target: Any, *, workers: Optional[List[int]] = None) -> CallableHandle:
        """Register a ``ChipCallable`` (levels 2 and 3: ``run`` at level 2,
        ``orch.submit_next_level`` at level 3) or, at levels 3 and 4, any Python
        callable (pickled with cloudpickle): a SUB callable ``fn(args)`` for
        ``orch.submit_sub``, or at level 4 an L3 orchestration ``fn(orch, args, config)``
        for ``orch.submit_next_level``. Before or after ``init()`` (a chip program
        registered after it is loaded by every chip process then)."""
        if workers is not None:
            raise TypeError("Worker.register: workers= is only supported for RemoteCallable")
        if self._closed:
            raise RuntimeError("Worker.register: worker is closed")
        if isinstance(target, ChipCallable):
            hashid, payload = "sha256:" + target._digest, b""
        elif self.level == 2:
            raise TypeError("Worker.register: level 2 only supports ChipCallable targets")
        elif not callable(target):
            raise TypeError("Worker.register: non-ChipCallable target must be callable")
        else:
            import cloudpickle  # a dependency of taskring; imported when first needed

            payload = cloudpickle.dumps(target)
            hashid = "sha256:" + hashlib.sha256(b"SPYC" + payload).hexdigest()
        held = hashid in self._slots or hashid in self._py_slots
        if not held and len(self._slots) + len(self._py_slots) >= MAX_REGISTERED_CALLABLE_IDS:
            raise RuntimeError(
                f"Worker.register: callable capacity exhausted (MAX_REGISTERED_CALLABLE_IDS={MAX_REGISTERED_CALLABLE_IDS}); "
                "unregister unused callables before registering more"
            )
        if isinstance(target, ChipCallable):
            return self._register_chip(target, hashid)
        return self._register_python(target, hashid, payload)

    def unregister(self, handle: Any) -> None:
        """Drop ``handle``: it runs nothing after this. A callable stays registered while
        another handle of it lives; registering it again after its last handle is gone
        gives a new handle."""
        if not isinstance(handle, CallableHandle):
            raise TypeError("Worker.unregister expects a CallableHandle returned by Worker.register")
        if handle._owner_id != self._owner_id:
            raise KeyError(f"CallableHandle {handle.hashid} does not belong to this Worker")
        if self._live.pop(handle._handle_id, None) is None:
            raise KeyError(f"CallableHandle {handle.hashid} is not live on this Worker")
        self._refs[handle.hashid] -= 1
        if self._refs[handle.hashid] == 0:
            del self._refs[handle.hashid]
            # Its slot is not reused: chips and SUB workers keep what they loaded.
            self._slots.pop(handle.hashid, None)
            self._py_slots.pop(handle.hashid, None)

    def _live_slot(self, handle: CallableHandle, slots: Dict[str, int]) -> int:
        """The slot of a live handle of this Worker, or KeyError."""
        if handle._owner_id != self._owner_id:
            raise KeyError(f"CallableHandle {handle.hashid} does not belong to this Worker")
        slot = slots.get(handle.hashid)
        if slot is None or handle._handle_id not in self._live:
            raise KeyError(f"CallableHandle {handle.hashid} is not live on this Worker")
        return slot

    def _register_chip(self, target: ChipCallable, hashid: str) -> CallableHandle:
        if self.level >= 4:
            raise TypeError("Worker.register: a ChipCallable runs on an L3 Worker's chips; register it there")
        _ = target._native  # load the libraries now: a bad one fails here, naming itself
        if hashid not in self._slots:
            if self.level == 3 and self._started:
                if self._node is None:
                    raise ValueError("Worker.register(): LOCAL_CHIP callable has no eligible dispatch target (needs a chip device (device_ids))")
                # Every chip process loads it (from the paths its libraries were loaded from here).
                slot = self._node.register(target._native, target.func_name, [int(s) for s in target._native_signature()])
                assert slot == len(self._callables)
            self._slots[hashid] = len(self._callables)
            self._callables.append(target)
        return self._handle(hashid, "CHIP_CALLABLE", "LOCAL_CHIP", self._slots[hashid])

    def _register_python(self, target: Any, hashid: str, payload: bytes) -> CallableHandle:
        if hashid not in self._py_slots:
            if self._started and self.num_sub_workers == 0 and not self._children:
                raise RuntimeError("Worker.register: no Python-capable child workers are configured for dynamic Python callable registration")
            slot = len(self._py)
            self._py_slots[hashid] = slot
            self._py.append(target)
            if self._started:
                # Workers already forked learn it from its first tasks (see _host_task).
                mem = _native.SharedMem(len(payload))
                arr = array_over(mem, (len(payload),), np.uint8)
                arr[:] = np.frombuffer(payload, dtype=np.uint8)
                self._py_late[slot] = arr
        return self._handle(hashid, "PYTHON_SERIALIZED", "LOCAL_PYTHON", self._py_slots[hashid])

    def _handle(self, hashid: str, kind: str, ns: str, slot: int) -> CallableHandle:
        """A new live handle of the callable ``hashid`` (one per registration)."""
        h = CallableHandle(hashid, kind, ns)
        self._next_handle += 1
        h._handle_id = self._next_handle
        h._owner_id = self._owner_id
        self._live[h._handle_id] = hashid
        self._refs[hashid] = self._refs.get(hashid, 0) + 1
        return h

    def add_worker(self, worker: "Worker") -> int:
        """Level 4: add an L3 Worker (NEW, not yet ``init()``-ed) as next-level worker;
        returns its id for ``orch.submit_next_level(..., worker=id)``. ``init()`` starts
        it in a process of its own."""
        if self.level < 4:
            raise RuntimeError("Worker.add_worker() requires level >= 4")
        if self.device_ids:
            raise RuntimeError("Worker.add_worker() cannot be combined with device_ids on the same Worker")
        if worker is self:
            raise ValueError("Worker.add_worker() cannot add a Worker to itself")
        if not isinstance(worker, Worker):
            raise TypeError(f"Worker.add_worker() takes a Worker, got {type(worker).__name__}")
        if self._started or self._closed:
            raise RuntimeError("Worker.add_worker() must be called before init()")
        if self._parent is not None:
            raise RuntimeError("Worker.add_worker() cannot mutate a Worker already attached as a child")
        if worker._started or worker._closed:
            raise RuntimeError("Child worker must be NEW (not started/failed/closed) before add_worker()")
        if worker._parent is not None:
            raise RuntimeError("Child worker is already attached to another parent")
        if worker.level != 3:
            raise ValueError(f"Worker.add_worker(): taskring composes level 3 Workers under level 4, got level {worker.level}")
        worker._parent = self
        self._children.append(worker)
        return len(self._children) - 1

    # -- life ------------------------------------------------------------------------------
    def init(self, prewarm_config: Optional[CallConfig] = None) -> None:
        """Start the chip(s), SUB workers and next-level workers; with
        ``prewarm_config`` each chip builds the arena of that config's ring sizing first
        (validated before anything starts)."""
        if self._closed:
            raise RuntimeError("Worker is closed; create a new Worker")
        if self._started:
            raise RuntimeError("Worker already initialized")
        if self._parent is not None and not self._in_child:
            raise RuntimeError("Worker.init(): a Worker attached as a child is initialized by its parent")
        cfg = to_native_config(prewarm_config)
        cfg.validate()
        if self.level == 2:
            self._chip = _native.Chip(
                cores=self._chip_cores,
                arena_cache_slots=self._slots_n,
                prewarm=[cfg],
                device_memory=self._device_memory,
                prewarm_if_fits=prewarm_config is None,
            )
            self._started = True
            return
        if self.level >= 4 and self.device_ids:
            raise RuntimeError("Worker level >= 4 must use add_worker(); device_ids are only supported on L3 Workers")
        for hashid in self._py_slots:
            if self.num_sub_workers == 0 and not self._children:
                raise RuntimeError(
                    f"Worker.init(): registered LOCAL_PYTHON callable {hashid[7:23]} has no eligible dispatch target "
                    "(needs a SUB or next-level child)"
                )
        for hashid in self._slots:
            if not self.device_ids:
                raise RuntimeError(
                    f"Worker.init(): registered LOCAL_CHIP callable {hashid[7:23]} has no eligible dispatch target "
                    "(needs a chip device (device_ids))"
                )
        self._prewarm = prewarm_config
        labels = [f"sub_worker {i}" for i in range(self.num_sub_workers)]
        labels += [f"child_worker {i} (level 3)" for i in range(len(self._children))]
        if self.device_ids or labels:
            # Each submit gives its arguments' directions (the tags of its TaskArgs).
            callables: List[Tuple[Any, str, Sequence[int]]] = [
                (cc._native, cc.func_name, [int(s) for s in cc._native_signature()]) for cc in self._callables
            ]
            self._node = _native.Node(
                list(self.device_ids),
                callables,
                self._owners,
                chip_processes=self._chip_processes,
                arena_cache_slots=self._slots_n,
                chip_cores=self._chip_cores,
                prewarm=cfg,
                device_memory=self._device_memory,
                prewarm_if_fits=prewarm_config is None,
                host_labels=labels or None,
                host_pool=self.num_sub_workers,
                host_entry=self._host_entry,
                host_start=self._host_start,
                host_stop=self._host_stop,
            )
        self._started = True

    def close(self) -> None:
        """Stop the chip(s), SUB workers and next-level workers and release the buffers
        (idempotent; also for a Worker never started)."""
        self._closed = True
        if self._chip is not None:
            self._chip.close()
            self._chip = None
        if self._node is not None:
            self._node.close()
            self._node = None
        for c in self._children:
            c._closed = True
        for b in self._buffers.values():
            b.closed = True
        self._buffers.clear()
        for hb in self._host_buffers:
            hb.closed = True
            if hb.shm is not None:
                hb.shm.close()
        self._host_buffers.clear()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _ready(self) -> None:
        if self._closed:
            raise RuntimeError("Worker is closed; create a new Worker")
        if not self._started:
            raise RuntimeError("Worker.submit: requires an initialized (READY) worker (Worker.init() has not been called)")

    # -- running ---------------------------------------------------------------------------
    def run(self, callable: Any, args: Any = None, config: Any = None) -> None:
        """Level 2: run the registered ``callable`` (a handle) with ``args`` (TaskArgs)
        and ``config`` on the chip. Levels 3 and 4: call ``callable(orch, args,
        config)`` and wait for every task it submitted. ``config`` None is a default
        CallConfig. Returns None, as upstream; taskring's report of the run (a
        ``RunReport`` at level 2, a ``NodeRunReport`` above) is ``last_report``."""
        self._ready()
        if self.level == 2:
            slot = self._resolve(callable)
            cc = self._callables[slot]
            if args is None:
                args = TaskArgs()
            if not isinstance(args, TaskArgs):
                raise TypeError(f"Worker.run: args must be a TaskArgs, got {type(args).__name__}")
            assert self._chip is not None
            self.last_report = self._chip.run(cc._native, cc.func_name, args._host_args(), to_native_config(config))
            return None
        if not callable_(callable):
            raise TypeError(f"Worker.run at level {self.level} takes an orchestration function f(orch, args, config)")
        cfg = CallConfig() if config is None else config
        native_cfg = to_native_config(cfg)
        if self._node is None:
            # Nothing to run tasks on: the orchestration still runs (and any submit says why).
            callable(Orchestrator(None, self), args, cfg)
            self.last_report = None
            return None
        self.last_report = self._node.run(lambda o: callable(Orchestrator(o, self), args, cfg), native_cfg)
        return None

    def submit(self, callable: Any, args: Any = None, config: Any = None) -> Any:
        """``run`` in the background; returns a handle with ``done``, ``wait()``, ``result()``."""
        from .._handle import RunHandle

        return RunHandle(lambda: self.run(callable, args, config))

    # -- host workers (SUB workers, next-level workers) ---------------------------------------
    def _host_task(self, slot: int, args: Optional[TaskArgs], api: str, tags: bool) -> Tuple[int, List[Any], List[int]]:
        """A host worker's task for Python callable ``slot``: its number (bit 31: the last
        tensor is the callable, pickled, for workers forked before it was registered),
        arguments and their directions. With ``tags`` the tensors' tags follow the
        scalars (an L3 child rebuilds its TaskArgs with them)."""
        if args is None:
            args = TaskArgs()
        if not isinstance(args, TaskArgs):
            raise TypeError(f"{api}: args must be a TaskArgs, got {type(args).__name__}")
        host = args._host_args()
        dirs: List[int] = []
        for i, t in enumerate(args._tensors):
            if isinstance(t.buffer, Buffer) or t._array.__array_interface__["data"][0] in self._owners:
                raise ValueError(
                    f"{api}: argument {i} is a DEVICE-space tensor (DEVICE_MALLOC); a Python sub-worker runs on the host "
                    "and can only take HOST-space tensors"
                )
            dirs.append(_TAG_DIR[int(args._tags[i])])
        dirs += [3] * args.scalar_count()
        if tags:
            host += [int(t) for t in args._tags]
            dirs += [3] * len(args._tags)
        cid = slot
        late = self._py_late.get(slot)
        if late is not None:
            host.insert(len(args._tensors), late)
            dirs.insert(len(args._tensors), 0)
            cid |= _LATE
        return cid, host, dirs

    def _py_callable(self, cid: int, args: List[Any]) -> Tuple[Any, List[Any]]:
        """In a host worker: the callable of task ``cid`` and its own arguments."""
        slot = cid & ~_LATE
        if cid & _LATE:
            n = sum(1 for a in args if isinstance(a, tuple))
            payload = args.pop(n - 1)
            if slot >= len(self._py) and slot not in self._loaded:
                import cloudpickle

                addr, nbytes = payload[0], payload[1]
                self._loaded[slot] = cloudpickle.loads(ctypes.string_at(addr, nbytes))
        fn = self._loaded.get(slot) if slot >= len(self._py) else self._py[slot]
        if fn is None:
            raise RuntimeError(f"callable {slot} is not registered in this worker")
        return fn, args

    def _host_entry(self, i: int, cid: int, args: List[Any], cfg: Optional[_native.CallConfig]) -> Optional[str]:
        """A host worker's task, in its process: ``None``, or the failure's text."""
        m = self.num_sub_workers
        who = "sub_worker" if i < m else "child_worker level=3"
        try:
            fn, args = self._py_callable(cid, args)
            if i < m:
                fn(mapped_args(args))
                return None
            child = self._children[i - m]
            assert cfg is not None  # a next-level task carries its config
            child.run(fn, _child_args(args), CallConfig._from_native(cfg))
            return None
        except BaseException as e:  # noqa: BLE001 - every failure is the task's
            return f"{who}: {type(e).__name__}: {e}"

    def _host_start(self, i: int) -> None:
        """A host worker's start, in its process: a next-level worker starts its own
        chips and workers here."""
        if i >= self.num_sub_workers:
            child = self._children[i - self.num_sub_workers]
            child._in_child = True
            child.init(self._prewarm)

    def _host_stop(self, i: int) -> None:
        if i >= self.num_sub_workers:
            self._children[i - self.num_sub_workers].close()

    def _resolve(self, handle: Any) -> int:
        if isinstance(handle, ChipCallable):
            raise TypeError("Worker.run takes a CallableHandle; register the ChipCallable first (handle = worker.register(cc))")
        if not isinstance(handle, CallableHandle):
            raise TypeError("Worker.run expects a CallableHandle returned by Worker.register")
        return self._live_slot(handle, self._slots)

    # -- device memory ---------------------------------------------------------------------
    def _capacity(self, worker: int) -> Tuple[int, int]:
        """(bytes in use, capacity) of chip ``worker``'s device memory."""
        self._ready()
        st = self._chip.arena_stats() if self._chip is not None else self._node.arena_stats(worker)  # type: ignore[union-attr]
        used = st.resident_bytes + st.held_bytes
        if not self._native_hold():
            used += self._committed[worker]  # buffers the chip was not told of
        return used, st.capacity_bytes

    def _native_hold(self) -> bool:
        """Whether the chip itself is told of the buffers (and so evicts idle arenas for them)."""
        return self._node is not None or hasattr(self._chip, "hold")

    def _charge(self, worker: int, nbytes: int) -> None:
        total = self._committed[worker] + nbytes
        if self._node is not None:
            self._node.hold(worker, total)  # DEVICE_OUT_OF_MEMORY from the chip when it cannot
        else:
            hold = getattr(self._chip, "hold", None)
            if hold is not None:
                hold(total)
            else:
                used, cap = self._capacity(worker)
                if nbytes > cap - used:
                    raise _oom(nbytes, cap - used, cap)
        self._committed[worker] = total

    def _release(self, worker: int, nbytes: int) -> None:
        total = self._committed[worker] - nbytes
        if self._node is not None:
            self._node.hold(worker, total)
        else:
            hold = getattr(self._chip, "hold", None)
            if hold is not None:
                hold(total)
        self._committed[worker] = total

    def malloc(self, size: int) -> Buffer:
        """Level 2: ``size`` bytes of the chip's device memory (DEVICE_OUT_OF_MEMORY when
        they do not fit); name a task argument with ``buf.tensor(shapes, dtype)``."""
        if self.level != 2:
            raise TypeError("worker.malloc is L2-only; at L3+ use worker.alloc_child_tensor(worker_id, ...)")
        self._ready()
        n = int(size)
        if n <= 0:
            raise ValueError(f"Worker.malloc: size must be positive, got {n}")
        self._charge(0, n)
        raw = np.zeros(n + _ALIGN, dtype=np.uint8)
        off = (-raw.__array_interface__["data"][0]) % _ALIGN
        buf = Buffer(raw[off : off + n], 0)
        self._buffers[buf.base] = buf
        return buf

    def alloc_child_tensor(self, worker_id: int, shapes: Sequence[int], dtype: Any) -> Buffer:
        """Level 3: device memory on chip ``worker_id`` for ``shapes`` x ``dtype``
        (passing it to another chip's task is a ValueError)."""
        if self.level == 2:
            raise TypeError("alloc_child_tensor is for level 3 workers; at level 2 use worker.malloc(nbytes)")
        self._ready()
        w = int(worker_id)
        if not 0 <= w < len(self.device_ids):
            raise IndexError(f"worker_id {w} out of range (have {len(self.device_ids)} chips)")
        n = get_element_size(dtype)
        for s in shapes:
            n *= int(s)
        self._charge(w, n)
        mem = _native.SharedMem(n)
        buf = Buffer(array_over(mem, (n,), np.uint8), w)
        self._owners[buf.base] = w
        self._buffers[buf.base] = buf
        return buf

    def _check_chip_worker_id(self, w: Any) -> None:
        """Above level 2, chip ``w`` (a device buffer's owner) is one this Worker has, or IndexError."""
        if self.level != 2 and isinstance(w, int) and not 0 <= w < len(self.device_ids):
            raise IndexError(f"worker_id {w} out of range (have {len(self.device_ids)} chips)")

    def free(self, handle: Buffer) -> None:
        """Release a buffer of ``malloc`` / ``alloc_child_tensor``."""
        self._check_chip_worker_id(getattr(handle, "owner_worker_id", None))
        if not isinstance(handle, Buffer) or self._buffers.get(handle.base) is not handle:
            raise ValueError("Worker.free: not a live buffer of this Worker")
        del self._buffers[handle.base]
        self._owners.pop(handle.base, None)
        handle.closed = True
        if self._chip is not None or self._node is not None:
            self._release(handle.owner_worker_id, handle.nbytes)

    def _device_bytes(self, handle: Any, api: str, nbytes: int) -> np.ndarray:
        self._check_chip_worker_id(getattr(handle, "owner_worker_id", None))
        if not isinstance(handle, Buffer) or self._buffers.get(handle.base) is not handle:
            raise ValueError(f"Worker.{api}: expected a live device Buffer of this Worker")
        if nbytes > handle.nbytes:
            raise ValueError(f"Worker.{api}: {nbytes} bytes exceeds the {handle.nbytes}-byte backing")
        return handle._mem

    def copy_to(self, dst: Buffer, src: Any) -> None:
        """Host -> device: the bytes of ``src`` (a tensor, array or writable buffer) into ``dst``."""
        host = _host_bytes(src, "copy_to", writing=False)
        dev = self._device_bytes(dst, "copy_to", host.nbytes)
        dev[: host.nbytes] = host

    def copy_from(self, dst: Any, src: Buffer) -> None:
        """Device -> host: ``src``'s bytes into ``dst`` (a tensor, array or writable buffer)."""
        host = _host_bytes(dst, "copy_from", writing=True)
        dev = self._device_bytes(src, "copy_from", host.nbytes)
        host[:] = dev[: host.nbytes]

    def committed_device_memory(self, worker_id: int = 0) -> int:
        """Bytes of chip ``worker_id``'s device memory in use: cached arenas, held
        memory and live buffers."""
        self._check_chip_worker_id(int(worker_id))
        return self._capacity(int(worker_id))[0]

    def device_memory_info(self, worker_id: int = 0) -> Tuple[int, int]:
        """``(free, total)`` bytes of chip ``worker_id``'s device memory."""
        self._check_chip_worker_id(int(worker_id))
        used, cap = self._capacity(int(worker_id))
        return max(0, cap - used), cap

    def create_buffer(self, nbytes: int) -> Any:
        """A shared host ``Buffer`` of ``nbytes`` owned by this Worker (``simpler.buffer``:
        HOST, POSIX_SHM, READWRITE; ``identity`` with this Worker's owner id and the next
        ``buffer_id``): memory its chips, SUB and child workers map, used in place
        (``buffer.shm.buf``, ``buffer.tensor(shapes, dtype)``). Released at ``close()``."""
        from .buffer import mint_owner_instance_id, shared_buffer

        if self.level < 2:
            raise TypeError("create_buffer requires a level >= 2 Worker")
        self._ready()
        n = int(nbytes)
        if n <= 0:
            raise ValueError(f"Worker.create_buffer: nbytes must be positive, got {n}")
        if self._oid is None:
            self._oid = mint_owner_instance_id()
        mem = _native.SharedMem(n)
        self._next_buffer_id += 1
        b = shared_buffer(mem, array_over(mem, (n,), np.uint8), self._oid, self._next_buffer_id)
        self._host_buffers.append(b)
        return b

    # -- host tensors ----------------------------------------------------------------------
    def make_tensor_arg(self, tensor: Any, shapes: Optional[Sequence[int]] = None, dtype: Any = None, *, strides: Optional[Sequence[int]] = None) -> Tensor:
        """A task argument over a host tensor, used in place. Above level 2 the workers
        are other processes: a numpy array must come from ``taskring.shared_array``; a
        torch tensor is moved, once, into memory they share (its data is copied there and
        the tensor then refers to it, so later writes by workers show in it). As
        upstream's, a torch tensor that was not ``share_memory_()``-ed is an input only
        (its buffer grants READ: tagging it as written is a ValueError)."""
        read_only = False
        if self.level >= 3 and type(tensor).__module__.startswith("torch") and hasattr(tensor, "set_"):
            read_only = not self._rehome_torch(tensor)
        a = as_array(tensor)
        if dtype is not None and numpy_to_datatype(a.dtype) != DataType(int(dtype)):
            raise ValueError(f"make_tensor_arg: dtype {DataType(int(dtype)).name} does not match the tensor's {a.dtype}")
        if shapes is not None and tuple(int(s) for s in shapes) != tuple(a.shape):
            a = a.reshape(tuple(int(s) for s in shapes))
        return Tensor(a, buffer=_READ_ONLY if read_only else None)

    def _rehome_torch(self, t: Any) -> bool:
        """Move torch tensor ``t`` into shared memory (once); whether it was shared
        (``share_memory_()``) before."""
        import torch  # the tensor is torch's

        key = id(t)
        cur = self._rehomed.get(key)
        if cur is not None and cur[1] == t.data_ptr():
            return bool(cur[3])
        if _native.SharedMem.holds(t.data_ptr(), max(1, t.numel() * t.element_size())):
            return True  # in memory the workers map already (e.g. over taskring.shared_array)
        shared = bool(t.is_shared())
        if not t.is_contiguous():
            raise ValueError("make_tensor_arg requires a contiguous tensor; call tensor.contiguous() first.")
        n = max(1, t.numel() * t.element_size())
        mem = _native.SharedMem(n)
        raw = array_over(mem, (n,), np.uint8)
        dst = torch.from_numpy(raw)
        dst[: t.numel() * t.element_size()].copy_(t.detach().reshape(-1).view(torch.uint8))
        with torch.no_grad():
            t.set_(dst.untyped_storage(), 0, t.size(), t.stride())
        self._rehomed[key] = (raw, t.data_ptr(), t, shared)
        return shared


def callable_(f: Any) -> bool:
    return callable(f)


class _Grant:
    """The access a host tensor's memory grants, as a ``simpler.buffer`` buffer names it."""

    __slots__ = ("access",)

    def __init__(self, access: int) -> None:
        self.access = access


_READ_ONLY = _Grant(0)  # AccessMode.READ


def _child_args(args: List[Any]) -> TaskArgs:
    """An L3 child's TaskArgs from its task's native arguments: tensors over the
    memory they name in this process (tags after the scalars, one per tensor)."""
    tensors = [a for a in args if isinstance(a, tuple)]
    scalars = [a for a in args if not isinstance(a, tuple)]
    tags = scalars[len(scalars) - len(tensors) :]
    scalars = scalars[: len(scalars) - len(tensors)]
    ta = TaskArgs()
    for (addr, nbytes, shape, strides, dtype), tag in zip(tensors, tags):
        from .task_interface import datatype_to_numpy, numpy_to_datatype

        dt = datatype_to_numpy(numpy_to_datatype(dtype))
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(addr))
        arr = np.ndarray(tuple(shape), dtype=dt, buffer=raw, strides=tuple(s * dt.itemsize for s in strides))
        ta.add_tensor(Tensor(arr), TensorArgType(int(tag)))
    for v in scalars:
        ta.add_scalar(int(v) % (1 << 64))
    return ta


__all__ = ["Buffer", "Orchestrator", "Worker"]
