"""``simpler.buffer`` on taskring: what a SUB callable receives (``MappedArgs`` of
``MappedArg``), and buffers over memory a SUB worker inherits through ``fork()``
(``wrap_fork_inherited``), under upstream's names."""

from __future__ import annotations

import ctypes
import enum
import os
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union, overload

import numpy as np

from .task_interface import OWNER_INSTANCE_ID_BYTES, DataType, Tensor, datatype_to_numpy, numpy_to_datatype, view_of

_U64 = 1 << 64


class AccessMode(enum.IntEnum):
    READ = 0
    WRITE = 1
    READWRITE = 2


class AddressSpace(enum.IntEnum):
    HOST = 0
    DEVICE = 1


class BackendKind(enum.IntEnum):
    FORK_SHM = 0
    POSIX_SHM = 1
    VMM_WINDOW = 2
    REMOTE_SIDECAR = 3
    DEVICE_MALLOC = 4
    FORK_COW = 5


def mint_owner_instance_id() -> bytes:
    """A fresh owner id (8 random bytes) for ``wrap_fork_inherited``."""
    return os.urandom(OWNER_INSTANCE_ID_BYTES)


class CanonicalIdentity:
    """Who a buffer is: its owner's id, its number there and its generation."""

    __slots__ = ("owner_instance_id", "buffer_id", "generation")

    def __init__(self, owner_instance_id: bytes, buffer_id: int, generation: int = 1) -> None:
        if len(owner_instance_id) != OWNER_INSTANCE_ID_BYTES:
            raise ValueError(f"CanonicalIdentity: owner_instance_id must be {OWNER_INSTANCE_ID_BYTES} bytes")
        self.owner_instance_id = bytes(owner_instance_id)
        self.buffer_id = int(buffer_id)
        self.generation = int(generation)

    def _key(self) -> Tuple[bytes, int, int]:
        return (self.owner_instance_id, self.buffer_id, self.generation)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CanonicalIdentity) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"CanonicalIdentity({self.owner_instance_id.hex()}, {self.buffer_id}, {self.generation})"


class BufferDescriptor:
    """How a buffer is reached: identity, address space, the access it grants, its
    backend and size (checked when made: a copy-on-write backing grants READ only)."""

    __slots__ = ("identity", "address_space", "access", "backend_kind", "nbytes", "body", "owner_worker_path_id")

    def __init__(
        self,
        identity: CanonicalIdentity,
        address_space: "AddressSpace",
        access: AccessMode,
        backend_kind: BackendKind,
        nbytes: int,
        body: bytes = b"",
        owner_worker_path_id: int = 0,
    ) -> None:
        if BackendKind(int(backend_kind)) == BackendKind.FORK_COW and AccessMode(int(access)) != AccessMode.READ:
            raise ValueError("invalid BufferDescriptor: FORK_COW grants READ only (a child's write would not reach the owner)")
        if int(nbytes) <= 0:
            raise ValueError("invalid BufferDescriptor: nbytes must be positive")
        self.identity = identity
        self.address_space = AddressSpace(int(address_space))
        self.access = AccessMode(int(access))
        self.backend_kind = BackendKind(int(backend_kind))
        self.nbytes = int(nbytes)
        self.body = bytes(body)
        self.owner_worker_path_id = int(owner_worker_path_id)


class Buffer:
    """Host memory named by its address: ``nbytes`` bytes at ``base``.
    ``tensor(shapes, dtype, strides=None, byte_offset=0)`` names a view of it as a task
    argument; taskring reads the bytes only where a task's worker does."""

    __slots__ = ("base", "nbytes", "owner_instance_id", "buffer_id", "access", "backend_kind", "address_space", "owner_worker_id", "shm", "closed", "_mem", "__weakref__")

    def __init__(self, base: int, nbytes: int, owner_instance_id: bytes, buffer_id: int, access: AccessMode, backend_kind: BackendKind, address_space: AddressSpace) -> None:
        if nbytes <= 0:
            raise ValueError(f"Buffer: nbytes must be positive, got {nbytes}")
        self.base = int(base)
        self.nbytes = int(nbytes)
        self.owner_instance_id = bytes(owner_instance_id)
        self.buffer_id = int(buffer_id)
        self.access = AccessMode(int(access))
        self.backend_kind = BackendKind(int(backend_kind))
        self.address_space = AddressSpace(int(address_space))
        self.owner_worker_id = 0
        self.shm: Optional[SharedBacking] = None
        self.closed = False
        # Over the address, never read here: a view names the bytes for the tensormap.
        self._mem = np.ctypeslib.as_array((ctypes.c_uint8 * self.nbytes).from_address(self.base))

    @property
    def identity(self) -> CanonicalIdentity:
        return CanonicalIdentity(self.owner_instance_id, self.buffer_id)

    def to_descriptor(self) -> BufferDescriptor:
        if self.closed:
            raise ValueError("Buffer: cannot derive a descriptor from a released buffer")
        return BufferDescriptor(self.identity, self.address_space, self.access, self.backend_kind, self.nbytes, self.base.to_bytes(8, "little"))

    def tensor(self, shapes: Sequence[int], dtype: Any, strides: Optional[Sequence[int]] = None, byte_offset: int = 0) -> Tensor:
        if self.closed:
            raise ValueError("Buffer: cannot view a released buffer")
        return Tensor(view_of(self._mem, shapes, dtype, strides, byte_offset), buffer=self, byte_offset=byte_offset)

    def close(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return f"Buffer(base=0x{self.base:x}, nbytes={self.nbytes}, {self.address_space.name}, {self.backend_kind.name}, {self.access.name})"


class SharedBacking:
    """The memory behind a ``Worker.create_buffer`` buffer: ``buf``, a writable
    memoryview of its bytes (memory the Worker's children map)."""

    __slots__ = ("buf", "_mem")

    def __init__(self, mem: Any, array: np.ndarray) -> None:
        self._mem = mem
        self.buf: Optional[memoryview] = memoryview(array.data).cast("B")

    def close(self) -> None:
        self.buf = None


def shared_buffer(mem: Any, array: np.ndarray, owner_instance_id: bytes, buffer_id: int) -> Buffer:
    """A HOST, POSIX_SHM, READWRITE buffer over ``array`` (uint8 over the shared memory
    ``mem``, which it keeps alive)."""
    b = Buffer(int(array.__array_interface__["data"][0]), array.nbytes, owner_instance_id, buffer_id, AccessMode.READWRITE, BackendKind.POSIX_SHM, AddressSpace.HOST)
    b.shm = SharedBacking(mem, array)
    return b


def wrap_fork_inherited(
    data_ptr: int,
    nbytes: int,
    owner_instance_id: bytes,
    buffer_id: int,
    owner_worker_path: str = "",
    generation: int = 1,
    access: AccessMode = AccessMode.READ,
    backend_kind: BackendKind = BackendKind.FORK_COW,
) -> Buffer:
    """A buffer over host memory at ``data_ptr`` that SUB workers inherit through
    ``fork()`` (memory mapped shared before ``init()`` is shared with them; other memory
    is their copy of it at ``init()``)."""
    if backend_kind == BackendKind.FORK_COW and access != AccessMode.READ:
        raise ValueError("invalid BufferDescriptor: FORK_COW grants READ only (a child's write would not reach the owner)")
    return Buffer(data_ptr, nbytes, owner_instance_id, buffer_id, access, backend_kind, AddressSpace.HOST)


def wrap_device_malloc(
    device_ptr: int,
    nbytes: int,
    owner_instance_id: bytes,
    buffer_id: int,
    owner_worker_path: str = "",
    generation: int = 1,
    access: AccessMode = AccessMode.READWRITE,
    owner_worker_id: int = 0,
) -> Buffer:
    """A buffer naming device memory of chip ``owner_worker_id`` at ``device_ptr``."""
    b = Buffer(device_ptr, nbytes, owner_instance_id, buffer_id, access, BackendKind.DEVICE_MALLOC, AddressSpace.DEVICE)
    b.owner_worker_id = int(owner_worker_id)
    return b


class MappedArg:
    """One tensor argument as a SUB callable sees it: ``buffer`` (a memoryview of its
    bytes in this process), ``byte_offset`` (0: the view starts the buffer), ``shapes``,
    ``strides`` (elements), ``dtype`` (the DataType's int); ``numpy()`` is the view as an
    array (taskring's addition)."""

    __slots__ = ("address", "nbytes", "byte_offset", "shapes", "strides", "dtype")

    def __init__(self, address: int, nbytes: int, shapes: Sequence[int], strides: Sequence[int], dtype: str) -> None:
        self.address = int(address)
        self.nbytes = int(nbytes)
        self.byte_offset = 0
        self.shapes: Tuple[int, ...] = tuple(int(s) for s in shapes)
        self.strides: Tuple[int, ...] = tuple(int(s) for s in strides)
        self.dtype = int(numpy_to_datatype(np.dtype(dtype) if dtype != "bfloat16" else _bf16()))

    @property
    def buffer(self) -> memoryview:
        return memoryview((ctypes.c_char * self.nbytes).from_address(self.address)).cast("B")

    def numpy(self) -> np.ndarray:
        dt = datatype_to_numpy(DataType(self.dtype))
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * self.nbytes).from_address(self.address))
        return np.ndarray(self.shapes, dtype=dt, buffer=raw, strides=tuple(s * dt.itemsize for s in self.strides))

    def __repr__(self) -> str:
        return f"MappedArg(shapes={self.shapes}, dtype={DataType(self.dtype).name}, nbytes={self.nbytes})"


def _bf16() -> Any:
    return datatype_to_numpy(DataType.BFLOAT16)


class MappedArgs(Sequence[MappedArg]):
    """A SUB task's arguments: ``args[i]`` is tensor ``i`` (a ``MappedArg``), ``len(args)``
    the tensor count, ``scalar(i)`` scalar ``i`` as a uint64."""

    __slots__ = ("_tensors", "_scalars")

    def __init__(self, tensors: List[MappedArg], scalars: List[int]) -> None:
        self._tensors = tensors
        self._scalars = [v % _U64 for v in scalars]

    @overload
    def __getitem__(self, i: int) -> MappedArg: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[MappedArg]: ...
    def __getitem__(self, i: Union[int, slice]) -> Union[MappedArg, Sequence[MappedArg]]:
        return self._tensors[i]

    def __len__(self) -> int:
        return len(self._tensors)

    def __iter__(self) -> Iterator[MappedArg]:
        return iter(self._tensors)

    def tensor_count(self) -> int:
        return len(self._tensors)

    def scalar_count(self) -> int:
        return len(self._scalars)

    def scalar(self, i: int) -> int:
        if not 0 <= i < len(self._scalars):
            raise IndexError("MappedArgs scalar index out of range")
        return self._scalars[i]


def mapped_args(native: List[Any]) -> MappedArgs:
    """A host worker's native arguments (``(address, nbytes, shape, strides, dtype)``
    tuples for tensors, ints and floats for scalars) as ``MappedArgs``."""
    tensors: List[MappedArg] = []
    scalars: List[int] = []
    for a in native:
        if isinstance(a, tuple):
            tensors.append(MappedArg(*a))
        else:
            scalars.append(int(a))
    return MappedArgs(tensors, scalars)


__all__ = [
    "AccessMode",
    "AddressSpace",
    "BackendKind",
    "Buffer",
    "BufferDescriptor",
    "CanonicalIdentity",
    "MappedArg",
    "MappedArgs",
    "OWNER_INSTANCE_ID_BYTES",
    "SharedBacking",
    "mint_owner_instance_id",
    "wrap_device_malloc",
    "wrap_fork_inherited",
]
