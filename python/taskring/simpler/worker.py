"""``simpler.worker.Worker`` on taskring: level 2 (one chip in this process) and level 3
(chips as child processes of this one, taskring's L3 node), with upstream's lifecycle
(``register`` -> ``init`` -> ``run`` -> ``close``) and device-memory verbs (``malloc``,
``free``, ``copy_to``, ``copy_from``), charged to the chip's device memory."""

from __future__ import annotations

import ctypes
import operator
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _native
from .._config import check_device_memory
from .._errors import RuntimeFailure
from .._shared import array_over
from .callable_identity import CallableHandle
from .task_interface import (
    CallConfig,
    ChipCallable,
    DataType,
    TaskArgs,
    Tensor,
    as_array,
    get_element_size,
    numpy_to_datatype,
    to_native_config,
    view_of,
)

RUNTIME = "tensormap_and_ringbuffer"
PLATFORMS = ("a2a3sim", "a2a3")
# An L3 chip program is registered once per scalar count a task may pass (taskring's
# chip tasks take at most 16 scalars), so a submit finds the one its arguments match.
_MAX_SCALARS = 16
_ALIGN = 64

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
    if isinstance(obj, Buffer):
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

    def __init__(self, o: _native.NodeOrchestrator, worker: "Worker") -> None:
        self._o = o
        self._worker = worker

    def _resolve(self, handle: Any, api: str) -> int:
        if isinstance(handle, ChipCallable):
            raise TypeError(
                f"orch.{api} now takes a CallableHandle, not a ChipCallable. Register the callable before "
                "init() via `handle = worker.register(chip_callable)` and pass `handle` here."
            )
        if not isinstance(handle, CallableHandle):
            raise TypeError(f"orch.{api} expects a CallableHandle returned by Worker.register")
        slot = self._worker._slots.get(handle.hashid)
        if slot is None or handle._owner_id != self._worker._owner_id:
            raise KeyError(f"orch.{api}: {handle.hashid} is not registered on this Worker")
        return slot

    def _args(self, slot: int, args: Optional[TaskArgs]) -> Tuple[int, List[Any]]:
        if args is None:
            args = TaskArgs()
        if not isinstance(args, TaskArgs):
            raise TypeError(f"args must be a TaskArgs, got {type(args).__name__}")
        n = args.scalar_count()
        if n > _MAX_SCALARS:
            raise ValueError(f"a chip task takes at most {_MAX_SCALARS} scalars, got {n}")
        return slot * (_MAX_SCALARS + 1) + n, args._host_args()

    def submit_next_level(self, handle: Any, args: Optional[TaskArgs] = None, config: Any = None, *, worker: Any) -> int:
        """Run the registered chip program ``handle`` with ``args`` on chip ``worker``
        (the index in ``device_ids``) with ``config`` (a default CallConfig when None;
        the run's config is not inherited). Dependencies between tasks come from the
        tensors they share, with the directions of the callable's signature."""
        w = _check_worker_arg(worker)
        slot = self._resolve(handle, "submit_next_level")
        cfg = to_native_config(config)
        native, host = self._args(slot, args)
        return self._o.submit_next_level(native, host, cfg, worker=w)

    def submit_next_level_group(self, handle: Any, args_list: Sequence[TaskArgs], config: Any = None, *, workers: Sequence[Any]) -> List[int]:
        """``args_list[i]`` on ``workers[i]``, each as ``submit_next_level``."""
        ws = [_check_worker_arg(w) for w in workers]
        if len(ws) != len(args_list):
            raise ValueError("workers length must match args_list length")
        if len(set(ws)) != len(ws):
            raise ValueError("workers must not contain duplicate NEXT_LEVEL worker ids")
        slot = self._resolve(handle, "submit_next_level_group")
        cfg = to_native_config(config)
        return [self._o.submit_next_level(*self._args(slot, a), cfg, worker=w) for a, w in zip(args_list, ws)]

    def scope(self, manual: bool = False) -> Any:
        """``with orch.scope():`` — a nested scope of the run."""
        return self._o.scope(manual)

    def scope_begin(self, manual: bool = False) -> None:
        self._o.begin_scope(manual)

    def scope_end(self) -> None:
        self._o.end_scope()


class Worker:
    """``Worker(level=2, platform=, runtime="tensormap_and_ringbuffer", device_id=0)`` or
    ``Worker(level=3, ..., device_ids=[...], num_sub_workers=0)``. taskring's own keys:
    ``device_memory`` (bytes per chip), ``chip_cores``, ``arena_cache_slots``,
    ``chip_processes`` (L3; False runs the chips as threads of this process). Other
    keys are ignored, as upstream ignores them."""

    _next_owner = 0

    def __init__(self, level: int = 2, **config: Any) -> None:
        if level not in (2, 3):
            raise ValueError(f"Worker: level {level} not supported")
        if "platform" not in config:
            raise KeyError("platform")
        self.level = level
        self.platform = _check_platform(config["platform"])
        runtime = config.get("runtime", RUNTIME)
        if runtime != RUNTIME:
            raise ValueError(f"Worker: runtime {runtime!r} is not supported; taskring runs {RUNTIME!r}")
        self.runtime = runtime
        if level == 2:
            self.device_ids = [int(config.get("device_id", 0))]
        else:
            ids = config.get("device_ids") or []
            if not ids:
                raise ValueError("Worker(level=3) needs device_ids=[...] (one chip per entry)")
            self.device_ids = [int(d) for d in ids]
        self.num_sub_workers = int(config.get("num_sub_workers", 0))
        if self.num_sub_workers:
            raise ValueError("Worker: num_sub_workers (Python SUB workers) are not supported here; use 0")
        self._device_memory = check_device_memory(config.get("device_memory"))
        self._chip_cores = int(config.get("chip_cores", 0))
        self._slots_n = int(config.get("arena_cache_slots", 4))
        self._chip_processes = bool(config.get("chip_processes", True))
        self._callables: List[ChipCallable] = []
        self._slots: Dict[str, int] = {}
        Worker._next_owner += 1
        self._owner_id = f"taskring-worker-{id(self):x}-{Worker._next_owner}"
        self._chip: Optional[_native.Chip] = None
        self._node: Optional[_native.Node] = None
        self._closed = False
        self._buffers: Dict[int, Buffer] = {}  # base -> live buffer
        self._committed = [0] * len(self.device_ids)  # bytes of live buffers per chip
        self._owners: Dict[int, int] = {}  # address -> chip of device tensors (L3)
        self._rehomed: Dict[int, Any] = {}  # id(torch tensor) -> its shared memory (L3)

    # -- registration ----------------------------------------------------------------------
    def register(self, target: Any, *, workers: Optional[List[int]] = None) -> CallableHandle:
        """Register a ``ChipCallable``; returns its handle (for ``run`` at level 2 and
        ``orch.submit_next_level`` at level 3). At level 3 before ``init()``: the chip
        processes know what exists when they start."""
        if workers is not None:
            raise TypeError("Worker.register: workers= applies to remote callables only")
        if not isinstance(target, ChipCallable):
            if self.level == 2:
                raise TypeError("Worker.register: level 2 only supports ChipCallable targets")
            raise TypeError("Worker.register: Python callables (SUB workers) are not supported here; register a ChipCallable")
        if self._closed:
            raise RuntimeError("Worker is closed; create a new Worker")
        hashid = "sha256:" + target._digest
        _ = target._native  # load the libraries now: a bad one fails here, naming itself
        if hashid not in self._slots:
            if self.level == 3 and self._node is not None:
                raise RuntimeError(
                    "Worker.register: at level 3 a ChipCallable must be registered before init() "
                    "(the chip processes know the programs that exist when they start)"
                )
            self._slots[hashid] = len(self._callables)
            self._callables.append(target)
        h = CallableHandle(hashid, "CHIP_CALLABLE", "LOCAL_CHIP")
        h._handle_id = self._slots[hashid]
        h._owner_id = self._owner_id
        return h

    # -- life ------------------------------------------------------------------------------
    def init(self, prewarm_config: Optional[CallConfig] = None) -> None:
        """Start the chip(s); with ``prewarm_config`` each builds the arena of that
        config's ring sizing first (validated before anything starts)."""
        if self._closed:
            raise RuntimeError("Worker is closed; create a new Worker")
        if self._chip is not None or self._node is not None:
            raise RuntimeError("Worker already initialized")
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
            return
        callables: List[Tuple[Any, str, Sequence[int]]] = []
        for cc in self._callables:
            sig = [int(s) for s in cc._native_signature()]
            for k in range(_MAX_SCALARS + 1):
                callables.append((cc._native, cc.func_name, sig + [3] * k))
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
        )

    def close(self) -> None:
        """Stop the chip(s) and release the buffers (idempotent)."""
        self._closed = True
        if self._chip is not None:
            self._chip.close()
            self._chip = None
        if self._node is not None:
            self._node.close()
            self._node = None
        for b in self._buffers.values():
            b.closed = True
        self._buffers.clear()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _ready(self) -> None:
        if self._closed:
            raise RuntimeError("Worker is closed; create a new Worker")
        if self._chip is None and self._node is None:
            raise RuntimeError("Worker.init() has not been called")

    # -- running ---------------------------------------------------------------------------
    def run(self, callable: Any, args: Any = None, config: Any = None) -> Any:
        """Level 2: run the registered ``callable`` (a handle) with ``args`` (TaskArgs)
        and ``config`` on the chip; returns taskring's ``RunReport``. Level 3: call
        ``callable(orch, args, config)`` and wait for every task it submitted; returns
        taskring's ``NodeRunReport``. ``config`` None is a default CallConfig."""
        self._ready()
        if self.level == 2:
            slot = self._resolve(callable)
            cc = self._callables[slot]
            if args is None:
                args = TaskArgs()
            if not isinstance(args, TaskArgs):
                raise TypeError(f"Worker.run: args must be a TaskArgs, got {type(args).__name__}")
            assert self._chip is not None
            return self._chip.run(cc._native, cc.func_name, args._host_args(), to_native_config(config))
        if not callable_(callable):
            raise TypeError("Worker.run at level 3 takes an orchestration function f(orch, args, config)")
        cfg = CallConfig() if config is None else config
        native_cfg = to_native_config(cfg)
        assert self._node is not None
        return self._node.run(lambda o: callable(Orchestrator(o, self), args, cfg), native_cfg)

    def submit(self, callable: Any, args: Any = None, config: Any = None) -> Any:
        """``run`` in the background; returns a handle with ``done``, ``wait()``, ``result()``."""
        from .._handle import RunHandle

        return RunHandle(lambda: self.run(callable, args, config))

    def _resolve(self, handle: Any) -> int:
        if isinstance(handle, ChipCallable):
            raise TypeError("Worker.run takes a CallableHandle; register the ChipCallable first (handle = worker.register(cc))")
        if not isinstance(handle, CallableHandle):
            raise TypeError("Worker.run expects a CallableHandle returned by Worker.register")
        slot = self._slots.get(handle.hashid)
        if slot is None or handle._owner_id != self._owner_id:
            raise KeyError(f"{handle.hashid} is not registered on this Worker")
        return slot

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
        if self.level != 3:
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

    def free(self, handle: Buffer) -> None:
        """Release a buffer of ``malloc`` / ``alloc_child_tensor``."""
        if not isinstance(handle, Buffer) or self._buffers.get(handle.base) is not handle:
            raise ValueError("Worker.free: not a live buffer of this Worker")
        del self._buffers[handle.base]
        self._owners.pop(handle.base, None)
        handle.closed = True
        if self._chip is not None or self._node is not None:
            self._release(handle.owner_worker_id, handle.nbytes)

    def _device_bytes(self, handle: Any, api: str, nbytes: int) -> np.ndarray:
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
        return self._capacity(int(worker_id))[0]

    def device_memory_info(self, worker_id: int = 0) -> Tuple[int, int]:
        """``(free, total)`` bytes of chip ``worker_id``'s device memory."""
        used, cap = self._capacity(int(worker_id))
        return max(0, cap - used), cap

    # -- host tensors ----------------------------------------------------------------------
    def make_tensor_arg(self, tensor: Any, shapes: Optional[Sequence[int]] = None, dtype: Any = None, *, strides: Optional[Sequence[int]] = None) -> Tensor:
        """A task argument over a host tensor, used in place. At level 3 the chips are
        other processes: a numpy array must come from ``taskring.shared_array``; a torch
        tensor is moved, once, into memory the chips share (its data is copied there and
        the tensor then refers to it, so later writes by chips show in it)."""
        if self.level == 3 and type(tensor).__module__.startswith("torch") and hasattr(tensor, "set_"):
            self._rehome_torch(tensor)
        a = as_array(tensor)
        if dtype is not None and numpy_to_datatype(a.dtype) != DataType(int(dtype)):
            raise ValueError(f"make_tensor_arg: dtype {DataType(int(dtype)).name} does not match the tensor's {a.dtype}")
        if shapes is not None and tuple(int(s) for s in shapes) != tuple(a.shape):
            a = a.reshape(tuple(int(s) for s in shapes))
        return Tensor(a)

    def _rehome_torch(self, t: Any) -> None:
        import torch  # the tensor is torch's

        key = id(t)
        cur = self._rehomed.get(key)
        if cur is not None and cur[1] == t.data_ptr():
            return
        if not t.is_contiguous():
            raise ValueError("make_tensor_arg requires a contiguous tensor; call tensor.contiguous() first.")
        n = max(1, t.numel() * t.element_size())
        mem = _native.SharedMem(n)
        raw = array_over(mem, (n,), np.uint8)
        dst = torch.from_numpy(raw)
        dst[: t.numel() * t.element_size()].copy_(t.detach().reshape(-1).view(torch.uint8))
        with torch.no_grad():
            t.set_(dst.untyped_storage(), 0, t.size(), t.stride())
        self._rehomed[key] = (raw, t.data_ptr(), t)


def callable_(f: Any) -> bool:
    return callable(f)


__all__ = ["Buffer", "Orchestrator", "Worker"]
