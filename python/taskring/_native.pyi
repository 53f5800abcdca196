"""`taskring._native`: the PyO3 module under the Python package `taskring`.

Type stubs for the Rust extension (crates/taskring-py/src/). Read-only attributes are declared
`Final`; classes the module only hands out are `@type_check_only` (not names of it).
Everything with behaviour lives in the Rust crate `taskring`; this module converts
between Python and Rust values and releases the GIL whenever the runtime waits.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
import os
from typing import Any, ClassVar, Final, List, Literal, Optional, Protocol, Tuple, Union, final, type_check_only

import numpy as np
from typing_extensions import Self, TypeAlias

__all__ = [
    "RuntimeEnv", "CallConfig", "RingSizing", "resolve_ring_sizing",
    "RUNTIME_ENV_RING_COUNT", "DEFAULT_RING_TASK_WINDOW", "DEFAULT_RING_HEAP",
    "DEFAULT_RING_DEP_POOL", "sizing_command", "SizingAdvice", "Tensor", "TensorSpec",
    "Kernel", "make_python_kernel", "builtin_kernels", "load_native_kernel",
    "native_kernel_from_address", "report_kernel_raised", "Task", "TaskArgs",
    "Orchestrator", "Chip", "CapturedProgram", "RunReport", "ArenaStats", "DeviceMemory",
    "PeakUse", "SharedMem", "Node", "NodeOrchestrator", "NodeRunReport", "ChipTaskReport",
    "MPI_MISSING", "mpi_built", "Mpi", "HostTaskReport", "HostTensor", "host_serve",
    "Cluster",
]

# ----- helper aliases (stub-only) ------------------------------------------------------

@type_check_only
class _ToCallConfig(Protocol):
    """Anything with `to_call_config()` (e.g. `taskring.RunConfig`)."""

    def to_call_config(self) -> CallConfig: ...

_ConfigLike: TypeAlias = CallConfig | _ToCallConfig | None
"""A CallConfig, anything with `to_call_config()` (RunConfig), or None (defaults)."""

_RingValue: TypeAlias = int | str | list[int | str] | tuple[int | str, ...]
"""An int (broadcast to the 4 rings) or a list/tuple of exactly 4 ints; 0 = unset."""

_Shape: TypeAlias = int | Sequence[int]
"""An int (1-D) or a sequence of 1 to MAX_DIMS ints, each >= 1."""

_DType: TypeAlias = str | np.dtype[Any] | type[np.generic]
"""A dtype name (float32, float16, bfloat16, int32, int64, int8, uint8) or a numpy dtype/type."""

_Scalar: TypeAlias = int | float
"""A task scalar: an int (bools count as ints) or a float."""

_Ring4: TypeAlias = tuple[int, int, int, int]
"""One value per scope-depth ring."""

# ----- constants -------------------------------------------------------------------------

RUNTIME_ENV_RING_COUNT: Final[int]
"""Number of scope-depth rings (ring = `min(scope_depth, 3)`); 4."""
DEFAULT_RING_TASK_WINDOW: Final[int]
"""Built-in default task window per ring (in-flight task slots); 16384."""
DEFAULT_RING_HEAP: Final[int]
"""Built-in default task-output heap per ring, in bytes (256 MiB)."""
DEFAULT_RING_DEP_POOL: Final[int]
"""Built-in default dependency-edge pool entries per ring; 16384."""

# ----- config (config.rs) ------------------------------------------------------------------

@final
class RuntimeEnv:
    """Per-ring ring sizes of one dispatch (0 = unset for that ring)."""

    __hash__: ClassVar[None]  # type: ignore[assignment]
    AUTO: ClassVar[int]
    """The entry meaning "size this resource to the program's measured need" (the string ``"auto"``, in any case with whitespace around it ignored, is accepted too; reprs show it as ``'auto'``)."""

    def __new__(
        cls,
        ring_task_window: _RingValue = 0,
        ring_heap: _RingValue = 0,
        ring_dep_pool: _RingValue = 0,
    ) -> Self:
        """Each an int (broadcast) or 4 ints; `0` = unset (an explicit `None` is rejected)."""

    @property
    def ring_task_window(self) -> list[int]:
        """Task window per ring (a copy; assign an int or 4 ints to change it)."""

    @ring_task_window.setter
    def ring_task_window(self, value: _RingValue) -> None: ...
    @property
    def ring_heap(self) -> list[int]:
        """Task-output heap bytes per ring (a copy; assign an int or 4 ints to change it)."""

    @ring_heap.setter
    def ring_heap(self, value: _RingValue) -> None: ...
    @property
    def ring_dep_pool(self) -> list[int]:
        """Dependency-pool entries per ring (a copy; assign an int or 4 ints to change it)."""

    @ring_dep_pool.setter
    def ring_dep_pool(self, value: _RingValue) -> None: ...
    def copy(self) -> RuntimeEnv:
        """An independent copy."""

    def __eq__(self, value: object, /) -> bool: ...
    def __reduce__(self) -> tuple[type[Self], tuple[list[int], list[int], list[int]]]: ...

@final
class CallConfig:
    """Per-dispatch configuration (low level, Simpler-style)."""

    __hash__: ClassVar[None]  # type: ignore[assignment]

    def __new__(
        cls,
        aicpu_thread_num: int | None = None,
        runtime_env: RuntimeEnv | None = None,
        enable_scope_stats: bool = False,
        enable_chip_swimlane: bool | int | None = None,
        enable_dep_gen: bool = False,
        output_prefix: str = "",
    ) -> Self:
        """Build a config; `runtime_env` is copied in; `enable_chip_swimlane=True` means 4."""

    @property
    def aicpu_thread_num(self) -> int:
        """Scheduler thread count: `0` = auto, else in `[2, 8]` (checked by `validate()`)."""

    @aicpu_thread_num.setter
    def aicpu_thread_num(self, value: int) -> None: ...
    @property
    def runtime_env(self) -> RuntimeEnv:
        """The config's own `RuntimeEnv`, by reference: writes through it change the config."""

    @runtime_env.setter
    def runtime_env(self, value: RuntimeEnv) -> None:
        """Assigning copies the values in."""

    @property
    def enable_scope_stats(self) -> bool:
        """Write `scope_stats/scope_stats.jsonl` under `output_prefix`."""

    @enable_scope_stats.setter
    def enable_scope_stats(self, value: bool) -> None: ...
    @property
    def enable_chip_swimlane(self) -> int:
        """Swimlane trace level in `[0, 4]` (`0` = off); the constructor also takes a bool (True = 4)."""

    @enable_chip_swimlane.setter
    def enable_chip_swimlane(self, value: int) -> None: ...
    @property
    def enable_dep_gen(self) -> bool:
        """Write `deps.json` under `output_prefix`."""

    @enable_dep_gen.setter
    def enable_dep_gen(self, value: bool) -> None: ...
    @property
    def output_prefix(self) -> str:
        """Output directory of the diagnostics; required when any `enable_*` is on."""

    @output_prefix.setter
    def output_prefix(self, value: str) -> None: ...
    def validate(self) -> None:
        """Check the config; raises ValueError with the first rule broken."""

    def copy(self) -> CallConfig:
        """An independent copy (with its own RuntimeEnv)."""

    def __copy__(self) -> CallConfig: ...
    def __deepcopy__(self, _memo: Any) -> CallConfig: ...
    def derive(self, **changes: Any) -> CallConfig:
        """A new config with `changes` applied (ring fields as flat keywords or `runtime_env=`); the original is not modified."""

    def __eq__(self, value: object, /) -> bool: ...
    def __reduce__(self) -> tuple[type[Self], tuple[int, RuntimeEnv, bool, int, bool, str]]: ...

@final
class RingSizing:
    """The resolved, validated sizes of one dispatch."""

    task_window: Final[_Ring4]
    """Resolved task window per ring."""
    heap: Final[_Ring4]
    """Resolved task-output heap bytes per ring."""
    dep_pool: Final[_Ring4]
    """Resolved dependency-pool entries per ring."""

    def source(self, field: str, ring: int) -> Literal["call_config", "env", "default", "auto"]:
        """Where a value came from: "call_config", "env", "default" or "auto" (`field`: ring_task_window, ring_heap or ring_dep_pool, or this class's attribute names task_window, heap, dep_pool; `ring` in [0, 3])."""

    def key(self) -> tuple[int, ...]:
        """The 12-value tuple the arena cache is keyed on."""

    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def resolve_ring_sizing(config: _ConfigLike = None, env: Mapping[str, Any] | None = None) -> RingSizing:
    """Resolve the ring sizing a dispatch with `config` would use, against `env` (a mapping) or the process environment."""

def sizing_command(args: list[str]) -> tuple[int, str, str]:
    """Run `taskring sizing <args>` (the Rust implementation): `(exit status, stdout, stderr)`."""

@final
class SizingAdvice:
    """The advisor's suggested ring sizes for a run's scope stats (`taskring sizing`, typed)."""

    RESOURCES: ClassVar[tuple[tuple[str, str, str, str], ...]]
    """`(key, label, unit, runtime_env field)` of each ring resource of a scope-stats file."""

    def __new__(cls, text: str, headroom: str | float | None = None, path: str | None = None) -> Self:
        """`text`: a whole `scope_stats.jsonl`; `headroom` (default 1.25): a str as `--headroom` takes it, a float checked by the same rule. ValueError for a bad headroom or text that is not scope stats (begun with `path: ` when given)."""

    task_window: Final[_Ring4]
    """The suggested task window per ring."""
    heap: Final[_Ring4]
    """The suggested heap per ring (bytes)."""
    dep_pool: Final[_Ring4]
    """The suggested dependency pool per ring."""
    headroom: Final[float]
    """The factor on the recorded peaks."""
    peak: Final[PeakUse]
    """The recorded peaks per ring the advice is for."""
    unfit: Final[list[tuple[str, int, int, int]]]
    """Needs no valid size holds: `(field, ring, need, largest valid size)`."""
    notes: Final[list[str]]
    """The advisor's notes, one sentence each."""
    runtime_env: Final[dict[str, Any]]
    """The suggestion as `runtime_env` fields: one int per field when the rings agree, else four."""
    runtime_env_line: Final[str]
    """The suggestion as a line `runtime_env = {...}`."""
    env_lines: Final[list[str]]
    """The suggestion as `PTO2_RING_*=...` lines."""

# ----- tensors and kernels (runtime.rs) ------------------------------------------------------

@final
class Tensor:
    """A tensor handle inside an orchestration (a view; never owns memory)."""

    shape: Final[tuple[int, ...]]
    """The view's shape."""
    strides: Final[tuple[int, ...]]
    """The view's strides, in elements."""
    dtype: Final[str]
    """The element type's name (e.g. "float32")."""
    ndim: Final[int]
    """Number of dimensions."""
    offset: Final[int]
    """Offset of the view's first element in its buffer, in elements."""
    owner: Final[int | None]
    """Id of the task that produced this runtime tensor, or None for host tensors."""

    def view(self, shape: _Shape, offset: int | None = None, strides: Sequence[int] | None = None) -> Tensor:
        """A view over the same buffer: `offset` in elements from this view's start, `strides` in elements (row-major when None)."""

    def __getitem__(self, key: int | slice, /) -> Tensor:
        """Row slicing `t[i:j]` (step 1) or one row `t[i]` (keeps the dimension)."""

@final
class TensorSpec:
    """A runtime-allocated output: shape and dtype (tag OUTPUT)."""

    def __new__(cls, shape: _Shape, dtype: _DType) -> Self:
        """A spec for an output of `shape` and `dtype`."""

    shape: Final[tuple[int, ...]]
    """The output's shape."""
    dtype: Final[str]
    """The element type's name (e.g. "float32")."""

@final
class Kernel:
    """A kernel handle (`taskring.kernels.add`, or made by `@taskring.kernel`)."""

    name: Final[str]
    """The kernel's name."""
    core: Final[Literal["aic", "aiv", "any"]]
    """The core kind it runs on: "aic", "aiv" or "any"."""

def load_native_kernel(
    path: str,
    symbol: str,
    core: str = "aiv",
    name: str | None = None,
    tensors: list[tuple[str | None, int | None]] | None = None,
    scalars: int | None = None,
) -> Kernel: ...
def native_kernel_from_address(
    address: int,
    name: str,
    core: str,
    keep: object,
    tensors: list[tuple[str | None, int | None]] | None = None,
    scalars: int | None = None,
) -> Kernel: ...
def report_kernel_raised(text: str) -> bool:
    """An exception raised inside the numba kernel this thread runs: its task fails with it."""

def make_python_kernel(func: Callable[..., object], name: str, core: str = "aiv") -> Kernel:
    """Make a kernel from a Python function (used by `@taskring.kernel`); `core` is "aiv", "aic" or "any"."""

def builtin_kernels() -> dict[str, Kernel]:
    """The builtin kernels by name."""

# ----- the orchestrator (runtime.rs) ----------------------------------------------------------

@final
class Task:
    """A submitted task: its id and its runtime outputs."""

    id: Final[int]
    """The task id (ring and local index packed)."""
    outputs: Final[list[Tensor]]
    """The runtime-allocated outputs (one per TensorSpec), in order."""
    ring: Final[int]
    """The ring the task was submitted on."""

@final
class TaskArgs:
    """Tagged task arguments (low level): `add(tensor_or_spec, tag)`, `add_scalar(x)`, `add_dep(task_id)`."""

    def __new__(cls) -> Self:
        """An empty argument list."""

    def add(self, value: Tensor | TensorSpec | np.ndarray, tag: int) -> None:
        """Add a tensor with a `TensorArgType` tag (0 INPUT, 1 OUTPUT, 2 INOUT, 3 OUTPUT_EXISTING, 4 NO_DEP); at L2 OUTPUT takes a TensorSpec; at L3 arrays a chip can see."""

    def add_tensor(self, value: Tensor | TensorSpec | np.ndarray, tag: int = 0) -> None:
        """Upstream's spelling of `add` (tag INPUT when left out)."""

    def add_scalar(self, v: _Scalar) -> None:
        """Add a scalar (int or float); scalars come after all tensors."""

    def add_dep(self, id: int) -> None:
        """Add an explicit dependency on task `id`."""

    def __len__(self) -> int:
        """Number of tensor arguments added."""

@final
class Orchestrator:
    """The orchestrator handed to a program as `rt`; valid only while its run lasts."""

    def submit(
        self,
        kernel: Kernel,
        *,
        inputs: Iterable[Tensor] | None = None,
        outputs: Iterable[Tensor | TensorSpec] | None = None,
        inouts: Iterable[Tensor] | None = None,
        no_dep: Iterable[Tensor] | None = None,
        scalars: Iterable[_Scalar] | None = None,
        deps: Iterable[Task | int] | None = None,
    ) -> Task:
        """Submit a task; `outputs` entries are existing tensors (OUTPUT_EXISTING) or `rt.spec(shape, dtype)` (OUTPUT)."""

    def submit_args(self, kernel: Kernel, args: TaskArgs) -> Task:
        """Submit with tagged `TaskArgs` (tensors reach the kernel by tag group: inputs, inouts, outputs, no_dep)."""

    def submit_dummy(self, *, deps: Iterable[Task | int] | None = None) -> Task:
        """A dependency-only task (barrier)."""

    def alloc(self, shape: _Shape, dtype: _DType) -> Tensor:
        """An output-only allocation, alive until the current scope ends."""

    @staticmethod
    def spec(shape: _Shape, dtype: _DType) -> TensorSpec:
        """A runtime-output spec for `submit(outputs=[...])`."""

    def begin_scope(self, manual: bool = False, site: str | None = None) -> None:
        """Open a scope; `manual=True` infers no dependencies (only explicit `deps`)."""

    def end_scope(self) -> None:
        """Close the innermost scope."""

    depth: Final[int]
    """Current scope depth (the run's root scope is 0)."""

    def scope(self, manual: bool = False) -> Scope:
        """`with rt.scope(manual=False): ...` — a nested scope (depth + 1; ring min(depth, 3))."""

@final
@type_check_only
class Scope:
    """The context manager returned by `rt.scope()` (not a name of the module)."""

    def __enter__(self) -> None:
        """Open the scope."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        _v: BaseException | None,
        _tb: TracebackType | None,
    ) -> Literal[False]:
        """Close the scope (its error is raised only when no exception is in flight); never suppresses."""

# ----- the chip (runtime.rs) ---------------------------------------------------------------------

@final
class ArenaStats:
    """Counters of a chip's arena cache."""

    builds: Final[int]
    """Arenas built so far."""
    hits: Final[int]
    """Dispatches whose arena was resident."""
    misses: Final[int]
    """Dispatches that had to build their arena."""
    evictions: Final[int]
    """Arenas evicted from the cache."""
    resident: Final[list[tuple[int, ...]]]
    """Keys (12-tuples, as `RingSizing.key()`), most recently used first."""
    build_s: Final[float]
    """Total seconds spent building."""
    resident_bytes: Final[int]
    """Device bytes of the resident arenas."""
    held_bytes: Final[int]
    """Device bytes held outside the cache (arenas set aside for a stuck kernel, device-resident tensors)."""
    capacity_bytes: Final[int]
    """The chip's device memory."""

@final
class DeviceMemory:
    """Device memory as a run report gives it (bytes)."""

    arena_bytes: Final[int]
    """The device footprint of the run's sizing."""
    used_bytes: Final[int]
    """The chip's device memory in use after the run (0 where not reported)."""
    capacity_bytes: Final[int]
    """The chip's device memory (0 where not reported)."""

@final
class PeakUse:
    """Highest simultaneous use per ring."""

    task_window: Final[_Ring4]
    """Peak task-window slots in use per ring."""
    heap: Final[_Ring4]
    """Peak heap bytes in use per ring."""
    dep_pool: Final[_Ring4]
    """Peak dependency-pool entries in use per ring."""

@final
class RunReport:
    """What one L2 run did."""

    ring_sizing: Final[RingSizing]
    """The effective sizing."""
    peak: Final[PeakUse]
    """Highest simultaneous use per ring (slots, heap bytes, dep entries)."""
    tasks: Final[int]
    """Tasks submitted (including alloc and dummy tasks)."""
    arena_hit: Final[bool]
    """The arena was resident (nothing was built)."""
    arena_build_s: Final[float]
    """Seconds spent building the arena (0 on a hit)."""
    elapsed_s: Final[float]
    """Wall time of the run, in seconds."""
    replayed: Final[bool]
    """A replay of a captured program (False for normal runs)."""
    device_memory: Final[DeviceMemory]
    """This sizing's arena footprint and the chip's device memory use after the run."""

@final
class CapturedProgram:
    """A program's task graph recorded by `ChipWorker.capture`; replays on that worker only."""

    tasks: Final[int]
    """Recorded tasks (including alloc and dummy tasks)."""
    edges: Final[int]
    """Recorded dependency edges (one per producer-consumer pair)."""
    ring_needs: Final[PeakUse]
    """The highest use per ring of the recorded run."""
    report: Final[RunReport]
    """The report of the capture run."""
    name: Final[str]
    """The program's name."""

    def exact_config(self) -> CallConfig:
        """A CallConfig whose runtime_env is exactly what the graph needs (replays under it never fail for capacity)."""

    def replay(self, *args: Any, config: _ConfigLike = None) -> RunReport:
        """Replay with arrays of the captured shapes and dtypes (ValueError naming the argument otherwise); config None: the captured sizing."""

@final
class CoreCallable:
    """A C++ kernel library (`kernel_entry`), its core type and signature (docs/api.md §13)."""

    def __new__(cls, binary: Union[bytes, str, os.PathLike[str]], core_type: str = "aiv", signature: Sequence[int] = ...) -> Self: ...
    @property
    def core_type(self) -> str: ...
    @property
    def sig_count(self) -> int: ...

@final
class ChipCallable:
    """A C++ orchestration library with its kernels by func_id (docs/api.md §13); usable
    as a Program's orchestration."""

    def __new__(
        cls,
        binary: Union[bytes, str, os.PathLike[str]],
        func_name: str = "aicpu_orchestration_entry",
        signature: Sequence[int] = ...,
        children: Optional[List[Tuple[int, CoreCallable]]] = None,
    ) -> Self: ...
    @property
    def name(self) -> str: ...
    @property
    def sig_count(self) -> int: ...

@final
class Chip:
    """A resident simulated chip (native part of `taskring.ChipWorker`)."""

    MIN_DEVICE_MEMORY: ClassVar[int]
    """The least device memory a chip can have (bytes)."""

    def __new__(
        cls,
        cores: int = 0,
        arena_cache_slots: int = 4,
        prewarm: Iterable[CallConfig | _ToCallConfig] | None = None,
        aic_cores: int | None = None,
        device_memory: int | None = None,
        prewarm_if_fits: bool = False,
    ) -> Self:
        """`prewarm`: CallConfigs (or RunConfigs) whose sizings are built now."""

    def run(
        self,
        orchestration: Callable[..., object],
        name: str,
        args: list[Any],
        config: _ConfigLike = None,
    ) -> RunReport:
        """Run `orchestration(rt, *args)` with `config`; numpy arrays become Tensors (zero copy), ints and floats pass through. Ctrl-C raises at once (a kernel still running is set aside); called from the chip's own orchestration, this and the other calls that need the chip raise RuntimeError."""

    def capture(
        self,
        orchestration: Callable[..., object],
        name: str,
        args: list[Any],
        config: _ConfigLike = None,
    ) -> CapturedProgram:
        """Run `orchestration(rt, *args)` once, as `run` does, and record its task graph."""

    def hold(self, nbytes: int) -> None:
        """Charge ``nbytes`` of device-resident buffers to the chip's device memory (idle
        arenas evicted to make room; DEVICE_OUT_OF_MEMORY when they cannot fit)."""
    def arena_stats(self) -> ArenaStats:
        """The chip's arena-cache counters."""

    cores: Final[int]
    """Number of core threads (0 once closed)."""

    def close(self) -> None:
        """Stop the chip's threads and free its arenas (idempotent)."""

    closed: Final[bool]
    """Whether `close()` has been called."""

# ----- the L3 node (node.rs) -----------------------------------------------------------------------

@final
class SharedMem:
    """Shared memory that chip processes can map (backs `taskring.shared_array`)."""

    def __new__(cls, nbytes: int) -> Self:
        """Map `nbytes` of zero-filled shared memory."""

    address: Final[int]
    """The mapping's address in this process."""
    nbytes: Final[int]
    """The mapping's size in bytes."""

    @staticmethod
    def itemsize(dtype: str) -> int:
        """The bytes of one element of `dtype` (a name); TypeError for a dtype the runtime does not support."""

    @staticmethod
    def holds(address: int, nbytes: int) -> bool:
        """Whether `[address, address + nbytes)` lies in one shared memory region of this process."""

@final
class ChipTaskReport:
    """What a chip reported for one L2 task."""

    worker: Final[int]
    """The chip (worker index) that ran the task."""
    callable: Final[int]
    """The registered program's handle."""
    ring_sizing: Final[RingSizing | None]
    """The sizing the chip resolved (None if the task failed before that)."""
    peak: Final[PeakUse]
    """Highest simultaneous use per ring."""
    tasks: Final[int]
    """L2 tasks submitted."""
    arena_hit: Final[bool]
    """Whether the arena came from the chip's cache."""
    arena_build_s: Final[float]
    """Seconds spent building the arena (0 on a hit)."""
    elapsed_s: Final[float]
    """Wall time of the L2 run, in seconds."""
    error: Final[str | None]
    """The failure text, or None if the task succeeded."""
    arena_bytes: Final[int]
    """The device footprint of the task's sizing on its chip (0 if it failed before)."""

@final
class NodeRunReport:
    """What one L3 run did: one `ChipTaskReport` per L2 task, in submission order."""

    tasks: Final[list[Any]]
    """One report per task, in submission order: `ChipTaskReport`s at L3, `HostTaskReport`s at L4."""
    elapsed_s: Final[float]
    """Wall time of the run, in seconds."""

@final
class NodeOrchestrator:
    """The orchestrator handed to an L3 orchestration; valid only while its run lasts."""

    def submit_next_level(
        self, handle: int, args: Iterable[Any], config: _ConfigLike = None, *, worker: int, dirs: Sequence[int] | None = None
    ) -> int:
        """Submit the registered program `handle` with `args` to chip `worker` with `config` (never the run's implicitly); `dirs` (ArgDirection values, one per argument) say how the task uses them instead of the program's signature; returns the L3 task id."""

    def begin_scope(self, manual: bool = False, site: str | None = None) -> None:
        """Open a scope (depth + 1)."""

    def end_scope(self) -> None:
        """Close the innermost scope."""

    def alloc(self, shape: _Shape, dtype: _DType) -> Tensor:
        """An allocation in the node's shared memory, alive until the current scope ends."""

    chips: Final[int]
    """Number of chips of the node."""
    host_workers: Final[int]
    """Number of host workers of the node."""

    def submit_host(
        self,
        callable: int,
        args: Iterable[Any],
        dirs: Sequence[int],
        config: _ConfigLike = None,
        worker: int | None = None,
    ) -> int:
        """Submit task `callable` (the host workers' own number) with `args` used as `dirs` say to host worker `worker` (None: the pool's least busy); returns the L3 task id."""

    def scope(self, manual: bool = False) -> NodeScope:
        """`with o.scope(manual=False): ...` — a nested scope of the node's engine."""

    def submit_next_level_group(
        self,
        handle: int,
        args_list: Iterable[Iterable[Any]],
        config: _ConfigLike = None,
        *,
        workers: Iterable[int],
    ) -> list[int]:
        """Submit the same program to several chips (`args_list[i]` runs on `workers[i]`, all with `config`); returns the task ids."""

@final
@type_check_only
class NodeScope:
    """The context manager returned by `o.scope()` at L3 (not a name of the module)."""

    def __enter__(self) -> None:
        """Open the scope."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        _v: BaseException | None,
        _tb: TracebackType | None,
    ) -> Literal[False]:
        """Close the scope (its error is raised only when no exception is in flight); never suppresses."""

@final
class Node:
    """Native part of `taskring.Worker(level=3)`."""

    def __new__(
        cls,
        device_ids: Sequence[int],
        callables: list[tuple[Callable[..., object], str, Sequence[int]]],
        owners: Mapping[int, int],
        chip_processes: bool = True,
        arena_cache_slots: int = 4,
        chip_cores: int = 0,
        prewarm: _ConfigLike = None,
        device_memory: int | None = None,
        prewarm_if_fits: bool = False,
        host_labels: Sequence[str] | None = None,
        host_pool: int = 0,
        host_entry: Callable[[int, int, list[Any], CallConfig | None], str | None] | None = None,
        host_start: Callable[[int], str | None] | None = None,
        host_stop: Callable[[int], str | None] | None = None,
    ) -> Self:
        """`callables`: `(orchestration, name, signature)` triples (handles 0, 1, ...); `owners`: a dict address -> worker of device tensors.

        Host workers (one process each, after the chips; `host_labels[i]` names worker `i` in failures, the first `host_pool` are a pool):
        `host_entry(worker, callable, args, config)` runs each task in its process (tensors as `(address, nbytes, shape, strides, dtype)`
        tuples; `config` None for a pooled worker's task) and returns None or the failure's text; `host_start(worker)` / `host_stop(worker)` run there once.
        """

    def hold(self, worker: int, nbytes: int) -> ArenaStats:
        """Tell chip `worker` it holds `nbytes` of device-resident tensors (charged to its device memory)."""

    def register(self, f: Callable[..., object], name: str, signature: Sequence[int]) -> int:
        """Register one more program; chip processes only know the programs registered before they started."""

    def run(self, orch: Callable[[NodeOrchestrator], object], config: _ConfigLike = None) -> NodeRunReport:
        """Run `orch(o)`; `config` sizes the node's own rings. Called from the run's own orchestration, `run` and `close` raise RuntimeError."""

    def arena_stats(self, worker: int) -> ArenaStats:
        """Chip `worker`'s arena statistics."""

    pids: Final[tuple[int, ...]]
    """Process ids of the chips (this process's pid for each chip when `chip_processes=False`)."""
    chips: Final[int]
    """Number of chips."""
    host_pids: Final[tuple[int, ...]]
    """Process ids of the host workers."""

    def close(self) -> None:
        """Stop every chip (idempotent)."""

# ----- L4 over MPI (cluster.rs) --------------------------------------------------------------------

MPI_MISSING: str
"""What to install when this build has no MPI."""

def mpi_built() -> bool:
    """Whether this build speaks MPI (L4)."""

@final
class Mpi:
    """MPI in this process (`Worker(level=4)`): its launch, initialisation and finalization."""

    @staticmethod
    def launch_env() -> tuple[int, int] | None:
        """`(rank, size)` from the MPI launcher's environment, or None outside an MPI launch."""

    @staticmethod
    def init() -> tuple[int, int]:
        """Initialise MPI (MPI_THREAD_MULTIPLE); returns `(rank, size)` (RuntimeError in a build without MPI)."""

    @staticmethod
    def finalize() -> None:
        """`MPI_Finalize` (idempotent)."""

    @staticmethod
    def finalize_at_exit() -> bool:
        """Finalize MPI at the process's exit, or `MPI_Abort` with a non-zero exit status; False where that cannot be arranged."""

    @staticmethod
    def say_at_sigterm() -> bool:
        """Rank 0 prints why it ends when SIGTERM comes (written by the signal handler); only while SIGTERM has its default action."""

@final
class HostTaskReport:
    """What rank 0 learnt of one L4 task."""

    worker: Final[int]
    """The host (0-based)."""
    rank: Final[int]
    """Its MPI rank (`worker + 1`)."""
    callable: Final[int]
    """The registered DistributedProgram's handle."""
    report: Final[NodeRunReport | None]
    """The host's own report of its L3 run (None when no reply came)."""
    elapsed_s: Final[float]
    """Dispatch to reply, seen from rank 0, in seconds."""
    error: Final[str | None]
    """`host {worker} (rank {rank}): ...`, or None if the task succeeded."""

@final
class HostTensor:
    """A tensor resident on one host (`Worker.alloc_tensor(..., worker=h)` at L4)."""

    def __new__(cls, worker: int, shape: Sequence[int], dtype: str) -> Self:
        """Reserve its stand-in on rank 0."""

    worker: Final[int]
    """The host it lives on."""
    shape: Final[tuple[int, ...]]
    """Its shape."""
    dtype: Final[str]
    """Its numpy dtype name."""
    nbytes: Final[int]
    """Its size in bytes."""
    id: Final[int]
    """Its identity on the host."""

@final
@type_check_only
class HostRequest:
    """One L4 task as a host receives it (`host_serve` hands it out; not a name of the module)."""

    callable: Final[int]
    """The DistributedProgram's handle."""
    name: Final[str]
    """The DistributedProgram's name (checked against the host's)."""
    config: Final[CallConfig]
    """The CallConfig rank 0 sent, whole."""
    args: Final[tuple[Any, ...]]
    """`("shipped", dir, dtype, shape, nbytes)`, `("resident", dir, dtype, shape, id)`, ints and floats."""
    scalars_only: Final[bool]
    """No argument is a tensor (`args` are the orchestration's arguments as they are)."""

    def receive_inputs(self, addrs: Sequence[int]) -> None:
        """Receive the task's shipped inputs into the buffers at `addrs`."""

    def reply(self, report: NodeRunReport | None, error: str | None, addrs: Sequence[int]) -> None:
        """Answer the task (outputs from `addrs` when it succeeded)."""

    def run(self, node: Node, orch: Callable[..., Any], chips: Any, args: tuple[Any, ...], addrs: Sequence[int]) -> None:
        """Run the task on the host's node (`orch(o, chips, args, cfg)`) and answer it with the
        report and the outputs from `addrs`; an exception of the run propagates unanswered."""

def host_serve(node: Node, programs: Sequence[tuple[str, Callable[..., Any], Any]], other: Callable[[HostRequest], None]) -> None:
    """A host's serving loop until rank 0 closes: requests with only scalar arguments run
    here (`orch(o, chips, args, cfg)` for `programs[i] = (name, orch, chips)`); the
    others go to `other(req)`."""

@final
class Cluster:
    """Rank 0 of an L4 job (native part of `Worker(level=4)` there)."""

    def __new__(cls, hosts: int, programs: Sequence[tuple[str, Sequence[int]]], arena_cache_slots: int = 4) -> Self:
        """Rank 0's engine for `hosts` hosts and the registered programs' `(name, signature)`."""

    hosts: Final[int]
    """Number of hosts."""

    def run(self, orch: Callable[..., object], config: _ConfigLike = None, rest: tuple[Any, ...] | None = None) -> NodeRunReport:
        """Run `orch(o, *rest)`; returns a NodeRunReport of HostTaskReports."""

    def close(self) -> None:
        """Tell every host to stop serving (idempotent)."""

@final
@type_check_only
class ClusterOrchestrator:
    """The orchestrator handed to an L4 orchestration; valid only while its run lasts (not a name of the module)."""

    def submit_next_level(self, handle: int, args: Iterable[Any], config: _ConfigLike = None, *, worker: int) -> int:
        """Submit DistributedProgram `handle` with `args` to host `worker`, whose orchestration gets `config` whole."""

    def hosts(self) -> int:
        """Number of hosts."""
