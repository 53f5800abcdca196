"""``simpler.task_interface`` on taskring: the names Simpler's Python programs import
(``ArgDirection``, ``DataType``, ``TensorArgType``, ``CallConfig``, ``RuntimeEnv``,
``CoreCallable``, ``ChipCallable``, ``TaskArgs``, ``Tensor``, ``ChipTensor`` /
``ContinuousTensor``, ``scalar_to_uint64``, ...), with upstream's values, signatures and
messages, over taskring's native objects.

Tensors are host memory used in place: a ``Tensor`` is a view (shape, strides, dtype,
byte offset) of a buffer (``Worker.malloc``, ``Worker.make_tensor_arg``) or of any
numpy array, torch CPU tensor, or object with ``__dlpack__`` / ``__array_interface__``.
"""

from __future__ import annotations

import ctypes
import enum
import hashlib
import math
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _native
from .._types import TensorArgType

RUNTIME_ENV_RING_COUNT = 4
MAX_TENSOR_DIMS = 5
_RING_FIELDS = ("ring_task_window", "ring_heap", "ring_dep_pool")
# The native callables (taskring._native.CoreCallable / ChipCallable).
_NativeCore = _native.CoreCallable
_NativeChip = _native.ChipCallable
_INT32_MAX = 2**31 - 1
_U64 = 2**64


# ----- enums ------------------------------------------------------------------------------


class DataType(enum.IntEnum):
    """Element types, with upstream's wire values."""

    FLOAT32 = 0
    FLOAT16 = 1
    INT32 = 2
    INT16 = 3
    INT8 = 4
    UINT8 = 5
    BFLOAT16 = 6
    INT64 = 7
    UINT64 = 8
    UINT16 = 9
    UINT32 = 10
    FP8E4M3FN = 12
    FP8E8M0 = 13
    FP4E2M1 = 14


_ELEMENT_SIZE = {
    DataType.FLOAT32: 4,
    DataType.FLOAT16: 2,
    DataType.INT32: 4,
    DataType.INT16: 2,
    DataType.INT8: 1,
    DataType.UINT8: 1,
    DataType.BFLOAT16: 2,
    DataType.INT64: 8,
    DataType.UINT64: 8,
    DataType.UINT16: 2,
    DataType.UINT32: 4,
    DataType.FP8E4M3FN: 1,
    DataType.FP8E8M0: 1,
    DataType.FP4E2M1: 1,
}

# numpy names of the dtypes numpy itself has; the ml_dtypes ones are looked up lazily.
_NUMPY_NAMES = {
    DataType.FLOAT32: "float32",
    DataType.FLOAT16: "float16",
    DataType.INT32: "int32",
    DataType.INT16: "int16",
    DataType.INT8: "int8",
    DataType.UINT8: "uint8",
    DataType.INT64: "int64",
    DataType.UINT64: "uint64",
    DataType.UINT16: "uint16",
    DataType.UINT32: "uint32",
}
_ML_DTYPES_NAMES = {
    DataType.BFLOAT16: "bfloat16",
    DataType.FP8E4M3FN: "float8_e4m3fn",
    DataType.FP8E8M0: "float8_e8m0fnu",
    DataType.FP4E2M1: "float4_e2m1fn",
}


def _datatype(dtype: Any) -> DataType:
    """A DataType from a DataType, its int value, a numpy dtype or a torch dtype."""
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        try:
            return DataType(int(dtype))
        except ValueError:
            raise ValueError(f"unknown DataType value {int(dtype)}") from None
    return numpy_to_datatype(dtype)


def get_element_size(dtype: Any) -> int:
    """Bytes of one element of ``dtype``."""
    return _ELEMENT_SIZE[_datatype(dtype)]


def get_dtype_name(dtype: Any) -> str:
    """Upstream's name of ``dtype`` (``"FLOAT32"``, ...)."""
    return _datatype(dtype).name


def datatype_to_numpy(dtype: Any) -> np.dtype:
    """The numpy dtype of a DataType (bfloat16 and the fp8/fp4 types need ``ml_dtypes``)."""
    dt = _datatype(dtype)
    if dt in _NUMPY_NAMES:
        return np.dtype(_NUMPY_NAMES[dt])
    try:
        import ml_dtypes  # optional
    except ImportError:
        raise TypeError(f"DataType.{dt.name} needs the ml_dtypes package for numpy arrays (pip install ml_dtypes)") from None
    return np.dtype(getattr(ml_dtypes, _ML_DTYPES_NAMES[dt]))


_DT_CACHE: Dict[Any, DataType] = {}


def numpy_to_datatype(dtype: Any) -> DataType:
    """The DataType of a numpy dtype (or its name), or of a torch dtype."""
    try:
        return _DT_CACHE[dtype]
    except (KeyError, TypeError):
        pass
    dt = _lookup_datatype(dtype)
    try:
        _DT_CACHE[dtype] = dt
    except TypeError:
        pass
    return dt


def _lookup_datatype(dtype: Any) -> DataType:
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch.") :]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            pass
    for dt, n in _NUMPY_NAMES.items():
        if n == name:
            return dt
    for dt, n in _ML_DTYPES_NAMES.items():
        if n == name:
            return dt
    if name == "float4_e2m1fn_x2":  # torch's packed E2M1 (2 values a byte)
        return DataType.FP4E2M1
    raise ValueError(f"Unsupported dtype {dtype}; no DataType matches it")


class ArgDirection(enum.IntEnum):
    """A callable's signature entries, with upstream's values (SCALAR 0, IN 1, OUT 2,
    INOUT 3; taskring's own ``taskring.ArgDirection`` numbers them differently)."""

    SCALAR = 0
    IN = 1
    OUT = 2
    INOUT = 3


def arg_direction_name(direction: Any) -> str:
    """The name of an ArgDirection (``"IN"``, ...)."""
    return ArgDirection(int(direction)).name


# upstream ArgDirection -> taskring's (0 IN, 1 OUT, 2 INOUT, 3 SCALAR)
_TO_TASKRING_DIR = {ArgDirection.SCALAR: 3, ArgDirection.IN: 0, ArgDirection.OUT: 1, ArgDirection.INOUT: 2}


def _directions(signature: Sequence[Any], what: str) -> List[ArgDirection]:
    out = []
    for i, d in enumerate(signature):
        try:
            out.append(ArgDirection(int(d)))
        except (TypeError, ValueError):
            raise TypeError(f"{what}: signature entry {i} must be an ArgDirection, got {d!r}") from None
    return out


# ----- CallConfig and RuntimeEnv ------------------------------------------------------------


def _ring_property(name: str) -> Any:
    """A ``RuntimeEnv`` ring field: reads back as a 4-list; set from an int (broadcast)
    or a list of 4."""

    def get(self: "RuntimeEnv") -> List[int]:
        return list(self._v[name])

    def put(self: "RuntimeEnv", value: Any) -> None:
        self._v[name] = self._ring_values(name, value)

    return property(get, put)


class RuntimeEnv:
    """Per-ring ring sizes of one call: ``ring_task_window``, ``ring_heap``,
    ``ring_dep_pool``, each set from an int (broadcast to the 4 rings) or a list of 4
    ints and read back as a list of 4; 0 = unset for that ring."""

    __slots__ = ("_v",)

    def __init__(self) -> None:
        self._v: Dict[str, List[int]] = {f: [0] * RUNTIME_ENV_RING_COUNT for f in _RING_FIELDS}

    @staticmethod
    def _ring_values(name: str, value: Any) -> List[int]:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= int(value) < _U64:
            return [int(value)] * RUNTIME_ENV_RING_COUNT
        if isinstance(value, (list, tuple)) and all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= int(x) < _U64 for x in value
        ):
            if len(value) != RUNTIME_ENV_RING_COUNT:
                raise ValueError(f"RuntimeEnv.{name} list must contain exactly {RUNTIME_ENV_RING_COUNT} entries")
            return [int(x) for x in value]
        raise ValueError(f"RuntimeEnv.{name} must be an int (broadcast) or a list of {RUNTIME_ENV_RING_COUNT} ints")

    ring_task_window = _ring_property("ring_task_window")
    ring_heap = _ring_property("ring_heap")
    ring_dep_pool = _ring_property("ring_dep_pool")

    def any(self) -> bool:
        return any(x for f in _RING_FIELDS for x in self._v[f])

    def validate(self) -> None:
        for r in range(RUNTIME_ENV_RING_COUNT):
            tw, heap, dep = (self._v[f][r] for f in _RING_FIELDS)
            if tw and not (4 <= tw <= _INT32_MAX and tw & (tw - 1) == 0):
                raise ValueError("RuntimeEnv: ring_task_window must be a power of 2 in [4, INT32_MAX]")
            if heap and heap < 1024:
                raise ValueError("RuntimeEnv: ring_heap must be >= 1024 (bytes per ring)")
            if dep and not 4 <= dep <= _INT32_MAX:
                raise ValueError("RuntimeEnv: ring_dep_pool must be in [4, INT32_MAX]")

    def _lists(self) -> str:
        return ", ".join(f"{f}=[{', '.join(str(x) for x in self._v[f])}]" for f in _RING_FIELDS)

    def __repr__(self) -> str:
        return f"RuntimeEnv({self._lists()})"

    def _to_native(self) -> _native.RuntimeEnv:
        # taskring's rings hold a power-of-2 heap: a heap that is not one runs with the
        # next power of 2 up (never less than asked for).
        heap: Any = [0 if h == 0 else 1 << (h - 1).bit_length() for h in self._v["ring_heap"]]
        return _native.RuntimeEnv(
            ring_task_window=tuple(self._v["ring_task_window"]), ring_heap=heap, ring_dep_pool=tuple(self._v["ring_dep_pool"])
        )


def _flag_int(name: str, value: Any, true_value: int, hi: int) -> int:
    if isinstance(value, bool):
        return true_value if value else 0
    if not isinstance(value, (int, np.integer)):
        raise TypeError(f"CallConfig.{name} must be a bool or an int, got {type(value).__name__}")
    return max(0, min(hi, int(value)))


class CallConfig:
    """Configuration of one call (upstream's fields): ``aicpu_thread_num``,
    ``enable_chip_swimlane`` (True = 4, clamped to [0, 4]), ``enable_dump_args`` (True =
    1, clamped to [0, 3]), ``enable_pmu``, ``enable_dep_gen``, ``enable_scope_stats``,
    ``output_prefix`` and ``runtime_env`` (by reference: ``cfg.runtime_env.ring_heap = x``
    writes through). ``validate()`` raises ValueError with upstream's texts."""

    __slots__ = (
        "aicpu_thread_num",
        "_swimlane",
        "_dump_args",
        "enable_pmu",
        "_dep_gen",
        "_scope_stats",
        "_prefix",
        "_env",
    )

    def __init__(self) -> None:
        self.aicpu_thread_num = 0
        self._swimlane = 0
        self._dump_args = 0
        self.enable_pmu = 0
        self._dep_gen = False
        self._scope_stats = False
        self._prefix = ""
        self._env = RuntimeEnv()

    @property
    def enable_chip_swimlane(self) -> int:
        return self._swimlane

    @enable_chip_swimlane.setter
    def enable_chip_swimlane(self, value: Any) -> None:
        self._swimlane = _flag_int("enable_chip_swimlane", value, 4, 4)

    @property
    def enable_dump_args(self) -> int:
        return self._dump_args

    @enable_dump_args.setter
    def enable_dump_args(self, value: Any) -> None:
        self._dump_args = _flag_int("enable_dump_args", value, 1, 3)

    @property
    def enable_dep_gen(self) -> bool:
        return self._dep_gen

    @enable_dep_gen.setter
    def enable_dep_gen(self, value: Any) -> None:
        self._dep_gen = bool(value)

    @property
    def enable_scope_stats(self) -> bool:
        return self._scope_stats

    @enable_scope_stats.setter
    def enable_scope_stats(self, value: Any) -> None:
        self._scope_stats = bool(value)

    @property
    def output_prefix(self) -> str:
        return self._prefix

    @output_prefix.setter
    def output_prefix(self, value: Any) -> None:
        s = str(value)
        n = len(s.encode())
        if n >= 1024:
            raise ValueError(f"CallConfig.output_prefix length {n} exceeds buffer (1023 bytes)")
        self._prefix = s

    @property
    def runtime_env(self) -> RuntimeEnv:
        return self._env

    @runtime_env.setter
    def runtime_env(self, value: RuntimeEnv) -> None:
        if not isinstance(value, RuntimeEnv):
            raise TypeError(f"CallConfig.runtime_env must be a RuntimeEnv, got {type(value).__name__}")
        for f in _RING_FIELDS:
            setattr(self._env, f, getattr(value, f))

    def validate(self) -> None:
        diag = (self._swimlane, self._dump_args, self.enable_pmu, self._dep_gen, self._scope_stats)
        if any(diag) and not self._prefix:
            raise ValueError(
                "CallConfig: output_prefix must be set whenever any of enable_chip_swimlane / enable_dump_args / "
                "enable_pmu / enable_dep_gen / enable_scope_stats is enabled"
            )
        self._env.validate()

    def __repr__(self) -> str:
        s = (
            f"CallConfig(aicpu_thread_num={self.aicpu_thread_num}, enable_chip_swimlane={self._swimlane}, "
            f"enable_dump_args={self._dump_args}, enable_pmu={self.enable_pmu}, enable_dep_gen={self._dep_gen}, "
            f"enable_scope_stats={self._scope_stats}"
        )
        if self._env.any():
            for f in _RING_FIELDS:
                s += f", runtime_env.{f}=[{', '.join(str(x) for x in self._env._v[f])}]"
        if self._prefix:
            s += f", output_prefix={self._prefix!r}"
        return s + ")"

    @classmethod
    def _from_native(cls, n: _native.CallConfig) -> "CallConfig":
        """This module's CallConfig for taskring's ``n`` (as a task carries it to a
        worker below)."""
        c = cls()
        c.aicpu_thread_num = int(n.aicpu_thread_num)
        c._swimlane = int(n.enable_chip_swimlane)
        c._dep_gen = bool(n.enable_dep_gen)
        c._scope_stats = bool(n.enable_scope_stats)
        c._prefix = str(n.output_prefix)
        env = n.runtime_env
        for f in _RING_FIELDS:
            c._env._v[f] = [int(x) for x in getattr(env, f)]
        return c

    def _to_native(self) -> _native.CallConfig:
        """taskring's CallConfig for this one (dump_args and pmu have no taskring
        output; they are kept only on this side)."""
        return _native.CallConfig(
            aicpu_thread_num=int(self.aicpu_thread_num),
            runtime_env=self._env._to_native(),
            enable_scope_stats=self._scope_stats,
            enable_chip_swimlane=self._swimlane,
            enable_dep_gen=self._dep_gen,
            output_prefix=self._prefix,
        )


def to_native_config(config: Any) -> _native.CallConfig:
    """``config`` (this module's CallConfig, taskring's, or None) as taskring's,
    validated by upstream's rules first."""
    if config is None:
        return _native.CallConfig()
    if isinstance(config, CallConfig):
        config.validate()
        return config._to_native()
    if isinstance(config, _native.CallConfig):
        return config
    raise TypeError(f"config must be a CallConfig or None, got {type(config).__name__}")


# ----- callables ------------------------------------------------------------------------------


def _binary(binary: Any, what: str) -> bytes:
    if isinstance(binary, (bytes, bytearray, memoryview)):
        return bytes(binary)
    raise TypeError(f"{what}.build: binary must be bytes (a shared library), got {type(binary).__name__}")


CORE_MAX_TENSOR_ARGS = 32
CHIP_MAX_TENSOR_ARGS = 256


def _check_count(signature: Sequence[Any], cap: int) -> None:
    if len(signature) > cap:
        raise ValueError(f"make_callable: requested tensor count {len(signature)} exceeds supported tensor count {cap}")


class _Signed:
    """A callable's signature and library bytes."""

    __slots__ = ("_sig", "_binary", "_loaded", "_buf")

    def __init__(self, signature: Sequence[Any], binary: bytes, what: str) -> None:
        self._sig = _directions(signature, what)
        self._binary = binary
        self._loaded: Any = None
        self._buf: Any = None

    def sig(self, i: int) -> ArgDirection:
        if not 0 <= i < len(self._sig):
            raise IndexError(f"signature index {i} out of range (sig_count {len(self._sig)})")
        return self._sig[i]

    @property
    def sig_count(self) -> int:
        return len(self._sig)

    @property
    def binary_size(self) -> int:
        return len(self._binary)

    def _native_signature(self) -> List[int]:
        """The signature in taskring's numbering (0 IN, 1 OUT, 2 INOUT, 3 SCALAR)."""
        return [_TO_TASKRING_DIR[d] for d in self._sig]

    def buffer_ptr(self) -> int:
        """The address of the callable's bytes (kept alive by the callable)."""
        if self._buf is None:
            self._buf = ctypes.create_string_buffer(self._serialized(), max(1, len(self._serialized())))
        return ctypes.addressof(self._buf)

    def buffer_size(self) -> int:
        return len(self._serialized())

    def _serialized(self) -> bytes:
        raise NotImplementedError


class CoreCallable(_Signed):
    """A kernel: a shared library exporting ``kernel_entry``, its signature and core
    type. The library is loaded when a chip first needs it (``Worker.register``)."""

    __slots__ = ("core_type",)

    def __init__(self, signature: Sequence[Any], binary: bytes, core_type: str) -> None:
        _check_count(signature, CORE_MAX_TENSOR_ARGS)
        super().__init__(signature, binary, "CoreCallable.build")
        if core_type not in ("aiv", "aic"):
            raise ValueError(f"CoreCallable.build: core_type must be 'aic' or 'aiv', got {core_type!r}")
        self.core_type = core_type

    @staticmethod
    def build(signature: Sequence[Any], binary: Any, core_type: str = "aiv") -> "CoreCallable":
        """Build a kernel callable from its signature and library bytes (``core_type``
        ``"aiv"`` or ``"aic"``; the task's core is the one the orchestration submits it to)."""
        return CoreCallable(signature, _binary(binary, "CoreCallable"), core_type)

    @property
    def _native(self) -> Any:
        if self._loaded is None:
            self._loaded = _NativeCore(self._binary, self.core_type, self._native_signature())
        return self._loaded

    def _serialized(self) -> bytes:
        return struct.pack("<ii", len(self._sig), len(self._binary)) + bytes(int(d) for d in self._sig) + self._binary

    def __repr__(self) -> str:
        return f"CoreCallable(sig_count={self.sig_count}, binary_size={self.binary_size})"


class ChipCallable(_Signed):
    """An orchestration: a shared library with the entry ``func_name``, its signature and
    its kernels by func_id. The libraries are loaded when a chip first needs them
    (``Worker.register``)."""

    __slots__ = ("_func_name", "_config_name", "_children", "_digest")

    def __init__(
        self,
        signature: Sequence[Any],
        func_name: str,
        binary: bytes,
        children: Sequence[Tuple[int, CoreCallable]],
        config_name: str,
    ) -> None:
        _check_count(signature, CHIP_MAX_TENSOR_ARGS)
        super().__init__(signature, binary, "ChipCallable.build")
        self._func_name = str(func_name)
        self._config_name = str(config_name)
        kids: List[Tuple[int, CoreCallable]] = []
        for c in children:
            fid, core = c
            if not isinstance(core, CoreCallable):
                raise TypeError(f"ChipCallable.build: children must be (func_id, CoreCallable) pairs, got {type(core).__name__}")
            kids.append((int(fid), core))
        self._children = kids
        self._digest = hashlib.sha256(self._serialized()).hexdigest()

    @staticmethod
    def build(
        signature: Sequence[Any],
        func_name: str,
        binary: Any,
        children: Sequence[Tuple[int, CoreCallable]] = (),
        config_name: str = "",
    ) -> "ChipCallable":
        """Build an orchestration callable from its signature, entry name, library bytes
        and ``(func_id, CoreCallable)`` children."""
        return ChipCallable(signature, func_name, _binary(binary, "ChipCallable"), children, config_name)

    @property
    def _native(self) -> Any:
        if self._loaded is None:
            self._loaded = _NativeChip(
                self._binary, self._func_name, self._native_signature(), [(f, k._native) for f, k in self._children]
            )
        return self._loaded

    def _serialized(self) -> bytes:
        head = struct.pack("<iii", len(self._sig), len(self._binary), len(self._children))
        names = self._func_name.encode() + b"\0" + self._config_name.encode() + b"\0"
        out = head + bytes(int(d) for d in self._sig) + names + self._binary
        for f, k in self._children:
            out += b"\0" * (-len(out) % 64) + struct.pack("<i", f) + k._serialized()
        return out

    @property
    def func_name(self) -> str:
        return self._func_name

    @property
    def config_name(self) -> str:
        return self._config_name

    @property
    def child_count(self) -> int:
        return len(self._children)

    def _child_index(self, i: int) -> int:
        if not 0 <= i < len(self._children):
            raise IndexError(f"child index {i} out of range (child_count {len(self._children)})")
        return i

    def child_func_id(self, i: int) -> int:
        return self._children[self._child_index(i)][0]

    def child(self, i: int) -> CoreCallable:
        return self._children[self._child_index(i)][1]

    def child_offset(self, i: int) -> int:
        """The 64-byte aligned offset of child ``i`` in the callable's bytes."""
        self._child_index(i)
        off = 12 + len(self._sig) + len(self._func_name) + len(self._config_name) + 2 + len(self._binary)
        for j, (_, k) in enumerate(self._children):
            off += -off % 64
            if j == i:
                return off
            off += 4 + len(k._serialized())
        raise AssertionError("unreachable")

    def __repr__(self) -> str:
        return (
            f'ChipCallable(func_name="{self._func_name}", config_name="{self._config_name}", '
            f"sig_count={self.sig_count}, binary_size={self.binary_size}, child_count={self.child_count})"
        )


# ----- tensors --------------------------------------------------------------------------------


def _torch_array(t: Any) -> np.ndarray:
    """A torch CPU tensor's memory as a numpy array (no copy)."""
    if t.device.type != "cpu":
        raise ValueError(f"a tensor argument must be a CPU tensor, got device={t.device}")
    if not t.is_contiguous():
        raise ValueError("a tensor argument must be contiguous; call tensor.contiguous() first")
    t = t.detach()
    name = str(t.dtype)
    if name in ("torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e8m0fnu"):
        import torch  # the tensor is torch's

        dt = datatype_to_numpy(numpy_to_datatype(t.dtype))
        raw = t.view(torch.int16 if dt.itemsize == 2 else torch.uint8).numpy()
        return raw.view(dt)
    return t.numpy()


def as_array(obj: Any) -> np.ndarray:
    """``obj`` as a numpy array over the same memory (no copy): a numpy array, a
    ``Tensor`` of this module, a torch CPU tensor, or an object with
    ``__array_interface__`` or ``__dlpack__``."""
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, Tensor):
        return obj._array
    if isinstance(obj, ChipTensor):
        return obj.numpy()
    if type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr"):
        return _torch_array(obj)
    if hasattr(obj, "__array_interface__"):
        return np.asarray(obj)
    if hasattr(obj, "__dlpack__"):
        return np.from_dlpack(obj)
    raise TypeError(
        f"a tensor argument must be a Tensor, a numpy array, a torch tensor or an object with __dlpack__ or "
        f"__array_interface__, got {type(obj).__name__}"
    )


class Tensor:
    """A task's tensor argument: a view (``shapes``, ``strides`` in elements, ``dtype`` as
    the DataType's int, ``byte_offset``) of a buffer's memory, used in place."""

    __slots__ = ("buffer", "byte_offset", "dtype", "_array", "__weakref__")

    def __init__(self, array: np.ndarray, buffer: Any = None, byte_offset: int = 0) -> None:
        self.dtype = int(numpy_to_datatype(array.dtype))
        self._array = array
        self.buffer = buffer
        self.byte_offset = byte_offset

    @property
    def shapes(self) -> Tuple[int, ...]:
        return tuple(int(s) for s in self._array.shape)

    @property
    def strides(self) -> Tuple[int, ...]:
        item = self._array.dtype.itemsize
        return tuple(int(s) // item for s in self._array.strides)

    @property
    def ndims(self) -> int:
        return self._array.ndim

    @property
    def data(self) -> int:
        """The address of the view's first element."""
        return int(self._array.__array_interface__["data"][0])

    def nbytes(self) -> int:
        return int(self._array.nbytes)

    def numpy(self) -> np.ndarray:
        """The view as a numpy array (no copy)."""
        return self._array

    def __repr__(self) -> str:
        return (
            f"Tensor(byte_offset={self.byte_offset}, shapes=({', '.join(map(str, self.shapes))}), "
            f"strides=({', '.join(map(str, self.strides))}), dtype={DataType(self.dtype).name})"
        )


def view_of(mem: np.ndarray, shapes: Sequence[int], dtype: Any, strides: Optional[Sequence[int]] = None, byte_offset: int = 0) -> np.ndarray:
    """A numpy view of the bytes ``mem`` (uint8) as ``shapes`` x ``dtype`` from
    ``byte_offset`` (``strides`` in elements; row-major when None)."""
    dt = datatype_to_numpy(dtype)
    shapes = tuple(int(s) for s in shapes)
    if not shapes or len(shapes) > MAX_TENSOR_DIMS:
        raise ValueError(f"Tensor ndims must be in [1, {MAX_TENSOR_DIMS}], got {len(shapes)}")
    if byte_offset % dt.itemsize:
        raise ValueError(f"Tensor byte_offset {byte_offset} is not a multiple of the {dt.itemsize}-byte element size")
    if strides is None:
        el = [1] * len(shapes)
        for i in range(len(shapes) - 2, -1, -1):
            el[i] = el[i + 1] * shapes[i + 1]
    else:
        el = [int(s) for s in strides]
        if len(el) != len(shapes):
            raise ValueError("Tensor shapes and strides must have equal length")
    extent = byte_offset + (1 + sum((s - 1) * st for s, st in zip(shapes, el))) * dt.itemsize
    if extent > mem.nbytes:
        raise ValueError(f"Tensor view of {extent} bytes does not fit its {mem.nbytes}-byte buffer")
    return np.ndarray(shapes, dtype=dt, buffer=mem, offset=byte_offset, strides=tuple(s * dt.itemsize for s in el))


class ChipTensor:
    """A contiguous tensor at a raw host address (upstream's ``ChipTensor.make``; the
    former ``ContinuousTensor``)."""

    __slots__ = ("data", "shapes", "dtype", "child_memory")

    def __init__(self) -> None:
        self.data = 0
        self.shapes: Tuple[int, ...] = ()
        self.dtype = DataType.FLOAT32
        self.child_memory = False

    @staticmethod
    def make(data: int, shapes: Sequence[int], dtype: Any, child_memory: bool = False) -> "ChipTensor":
        shapes = tuple(int(s) for s in shapes)
        if not shapes or len(shapes) > MAX_TENSOR_DIMS:
            raise ValueError("ChipTensor.make: shapes length must be in [1, MAX_TENSOR_DIMS]")
        t = ChipTensor()
        t.data, t.shapes, t.dtype, t.child_memory = int(data), shapes, _datatype(dtype), bool(child_memory)
        return t

    @property
    def ndims(self) -> int:
        return len(self.shapes)

    @property
    def strides(self) -> Tuple[int, ...]:
        """Row-major element strides (a ChipTensor is contiguous)."""
        el = [1] * len(self.shapes)
        for i in range(len(self.shapes) - 2, -1, -1):
            el[i] = el[i + 1] * self.shapes[i + 1]
        return tuple(el)

    @property
    def start_offset(self) -> int:
        return 0

    @property
    def is_contiguous(self) -> bool:
        return True

    def nbytes(self) -> int:
        return math.prod(self.shapes) * get_element_size(self.dtype)

    def numpy(self) -> np.ndarray:
        """The memory at ``data`` as a numpy array (no copy)."""
        n = self.nbytes()
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(self.data))
        return raw.view(datatype_to_numpy(self.dtype)).reshape(self.shapes)

    def __repr__(self) -> str:
        mem = ", child_memory=True" if self.child_memory else ""
        return f"ChipTensor(data=0x{self.data:x}, shapes=({', '.join(map(str, self.shapes))}), dtype={self.dtype.name}{mem})"


ContinuousTensor = ChipTensor


class ChipStorageTaskArgs:
    """Arguments of a direct chip call: ``ChipTensor``s, then 64-bit scalars."""

    __slots__ = ("_tensors", "_scalars")

    def __init__(self) -> None:
        self._tensors: List[ChipTensor] = []
        self._scalars: List[int] = []

    def add_tensor(self, t: ChipTensor) -> None:
        if self._scalars:
            raise RuntimeError("TaskArgs: cannot add tensor after scalar")
        self._tensors.append(t)

    def add_scalar(self, s: int) -> None:
        self._scalars.append(int(s) & (_U64 - 1))

    def tensor(self, i: int) -> ChipTensor:
        if not 0 <= i < len(self._tensors):
            raise IndexError("ChipStorageTaskArgs tensor index out of range")
        return self._tensors[i]

    def scalar(self, i: int) -> int:
        if not 0 <= i < len(self._scalars):
            raise IndexError("ChipStorageTaskArgs scalar index out of range")
        return self._scalars[i]

    def tensor_count(self) -> int:
        return len(self._tensors)

    def scalar_count(self) -> int:
        return len(self._scalars)

    def clear(self) -> None:
        self._tensors.clear()
        self._scalars.clear()

    def __len__(self) -> int:
        return len(self._tensors) + len(self._scalars)


# ----- TaskArgs -------------------------------------------------------------------------------

# The bytes of a buffer owner's id (``simpler.buffer.mint_owner_instance_id``).
OWNER_INSTANCE_ID_BYTES = 8
# Most distinct callables one Worker holds (chip programs and Python callables).
MAX_REGISTERED_CALLABLE_IDS = 64

# What each TensorArgType asks of its buffer: (read, write). OUTPUT (a fresh result) and
# NO_DEP ask nothing.
_TAG_NEEDS = {0: (True, False), 1: (False, False), 2: (True, True), 3: (False, True), 4: (False, False)}
# What a buffer's AccessMode grants: READ, WRITE, READWRITE.
_GRANTS = {0: (True, False), 1: (False, True), 2: (True, True)}
_WRITES = (1, 2, 3)


def _granted(t: "Tensor", tag: int) -> bool:
    """Whether ``t``'s buffer grants what ``tag`` asks (a buffer that names no access
    grants everything)."""
    access = getattr(t.buffer, "access", None)
    if access is None:
        return True
    have = _GRANTS[int(access)]
    need = _TAG_NEEDS[int(tag)]
    return all(h or not n for h, n in zip(have, need))


def _byte_bounds(a: np.ndarray) -> Tuple[int, int]:
    """``[first, one past last)`` byte address of ``a``'s elements."""
    lo = hi = int(a.__array_interface__["data"][0])
    for n, st in zip(a.shape, a.strides):
        if n > 1:
            (lo, hi) = (lo + (n - 1) * st, hi) if st < 0 else (lo, hi + (n - 1) * st)
    return lo, hi + a.itemsize


def _identity(t: "Tensor") -> Any:
    """The buffer a tensor's bytes belong to, for the overlap check: a named buffer's
    identity, else host memory (one address space)."""
    b = t.buffer
    oid = getattr(b, "owner_instance_id", None)
    return (oid, getattr(b, "buffer_id", None)) if oid is not None else None


class TaskArgs:
    """A task's arguments: tensors (each with a ``TensorArgType`` tag, default INPUT),
    then 64-bit scalars."""

    __slots__ = ("_tensors", "_tags", "_scalars", "__weakref__")

    def __init__(self) -> None:
        self._tensors: List[Tensor] = []
        self._tags: List[TensorArgType] = []
        self._scalars: List[int] = []

    def add_tensor(self, t: Any, tag: Any = TensorArgType.INPUT) -> None:
        """Add a tensor (a ``Tensor``, or anything ``as_array`` takes) with its tag."""
        if self._scalars:
            raise RuntimeError("TaskArgs: cannot add tensor after scalar")
        if not isinstance(t, Tensor):
            t = Tensor(as_array(t))
        tag = TensorArgType(int(tag))
        if not _granted(t, tag):
            raise ValueError("TaskArgs.add_tensor: arg TensorArgType requires access not granted by the buffer")
        self._tensors.append(t)
        self._tags.append(tag)

    def add_scalar(self, s: Any) -> None:
        """Add a 64-bit scalar (an int, as its uint64 bits; floats: see ``scalar_to_uint64``)."""
        if isinstance(s, float):
            raise TypeError("TaskArgs.add_scalar takes a uint64; convert a float with scalar_to_uint64")
        v = int(s)
        if not 0 <= v < _U64:
            if -(2**63) <= v < 0:
                v &= _U64 - 1
            else:
                raise OverflowError(f"TaskArgs.add_scalar: {v} does not fit 64 bits")
        self._scalars.append(v)

    def tensor(self, i: int) -> Tensor:
        if not 0 <= i < len(self._tensors):
            raise IndexError("TaskArgs tensor index out of range")
        return self._tensors[i]

    def scalar(self, i: int) -> int:
        if not 0 <= i < len(self._scalars):
            raise IndexError("TaskArgs scalar index out of range")
        return self._scalars[i]

    def tag(self, i: int) -> TensorArgType:
        if not 0 <= i < len(self._tensors):
            raise IndexError("TaskArgs tag index out of range")
        return self._tags[i]

    def set_tag(self, i: int, tag: Any) -> None:
        if not 0 <= i < len(self._tensors):
            raise IndexError("TaskArgs set_tag index out of range")
        self._tags[i] = TensorArgType(int(tag))

    def tensor_count(self) -> int:
        return len(self._tensors)

    def scalar_count(self) -> int:
        return len(self._scalars)

    def clear(self) -> None:
        self._tensors.clear()
        self._tags.clear()
        self._scalars.clear()

    def __len__(self) -> int:
        return len(self._tensors) + len(self._scalars)

    def check_submit(self) -> None:
        """What a submit checks of its arguments (upstream's rules): every tag within
        its buffer's grant, and no two tensors of which one is written sharing bytes of
        one buffer."""
        spans = []
        for t, tag in zip(self._tensors, self._tags):
            if not _granted(t, tag):
                raise ValueError("submit: an argument's TensorArgType requests access the backing does not grant")
            lo, hi = _byte_bounds(t._array)
            spans.append((_identity(t), lo, hi, int(tag) in _WRITES))
        for i, (ida, lo_a, hi_a, wa) in enumerate(spans):
            for idb, lo_b, hi_b, wb in spans[i + 1 :]:
                if (wa or wb) and ida == idb and lo_a < hi_b and lo_b < hi_a:
                    raise ValueError(
                        "submit: two arguments of one task write overlapping bytes of the same buffer; "
                        "give them disjoint ranges, or order them as separate tasks"
                    )

    def _host_args(self) -> List[Any]:
        """The arguments as taskring's chip takes them (checked as a submit checks
        them): numpy arrays, then scalars as int64 (the same 64 bits)."""
        self.check_submit()
        out: List[Any] = [t._array for t in self._tensors]
        out.extend(v - _U64 if v >= 2**63 else v for v in self._scalars)
        return out


def scalar_to_uint64(value: Any) -> int:
    """A scalar as a uint64: a float as its IEEE single-precision bits, a ctypes
    ``c_float``/``c_double`` as its bits, any other value as ``int(value)`` mod 2**64."""
    if isinstance(value, float):
        return int(struct.unpack("<I", struct.pack("<f", value))[0])
    if isinstance(value, ctypes._SimpleCData):
        if isinstance(value, (ctypes.c_float, ctypes.c_double)):
            ut = ctypes.c_uint32 if isinstance(value, ctypes.c_float) else ctypes.c_uint64
            return int(ut.from_buffer_copy(value).value)
        return int(value.value) & (_U64 - 1)
    return int(value) & (_U64 - 1)


__all__ = [
    "ArgDirection",
    "CallConfig",
    "ChipCallable",
    "ChipStorageTaskArgs",
    "ChipTensor",
    "ContinuousTensor",
    "CoreCallable",
    "DataType",
    "MAX_REGISTERED_CALLABLE_IDS",
    "MAX_TENSOR_DIMS",
    "OWNER_INSTANCE_ID_BYTES",
    "RUNTIME_ENV_RING_COUNT",
    "RuntimeEnv",
    "TaskArgs",
    "Tensor",
    "TensorArgType",
    "arg_direction_name",
    "get_dtype_name",
    "get_element_size",
    "scalar_to_uint64",
]
