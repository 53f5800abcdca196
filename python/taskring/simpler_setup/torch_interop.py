"""``simpler_setup.torch_interop`` on taskring: torch tensors as task arguments."""

from __future__ import annotations

from typing import Any

from ..simpler.task_interface import ChipTensor, DataType, Tensor, numpy_to_datatype


def torch_dtype_to_datatype(dt: Any) -> DataType:
    """The ``DataType`` of a ``torch.dtype`` (KeyError for one with none)."""
    try:
        return numpy_to_datatype(dt)
    except ValueError:
        raise KeyError(dt) from None


def make_chip_tensor_arg(tensor: Any) -> ChipTensor:
    """A ``ChipTensor`` at a contiguous CPU torch tensor's address, with its shape and dtype."""
    try:
        dt = numpy_to_datatype(tensor.dtype)
    except ValueError:
        raise ValueError(f"Unsupported tensor dtype for ChipTensor: {tensor.dtype}") from None
    if tensor.device.type != "cpu":
        raise ValueError(f"make_chip_tensor_arg requires a CPU tensor, got device={tensor.device}.")
    if not tensor.is_contiguous():
        raise ValueError("make_chip_tensor_arg requires a contiguous tensor; call tensor.contiguous() before passing it.")
    return ChipTensor.make(tensor.data_ptr(), tuple(int(s) for s in tensor.shape), dt)


def make_tensor_arg(worker: Any, tensor: Any) -> Tensor:
    """A task argument over a contiguous CPU torch tensor (or a numpy array), used in
    place; shapes and dtype are the tensor's. At level 3 see ``Worker.make_tensor_arg``."""
    device = getattr(tensor, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise ValueError(f"make_tensor_arg requires a CPU tensor, got device={device}.")
    is_contiguous = getattr(tensor, "is_contiguous", None)
    if callable(is_contiguous) and not is_contiguous():
        raise ValueError("make_tensor_arg requires a contiguous tensor; call tensor.contiguous() first.")
    dtype = getattr(tensor, "dtype", None)
    try:
        dt = numpy_to_datatype(dtype)
    except ValueError:
        raise ValueError(f"Unsupported tensor dtype: {dtype}") from None
    return worker.make_tensor_arg(tensor, shapes=tuple(int(s) for s in tensor.shape), dtype=int(dt))


__all__ = ["make_chip_tensor_arg", "make_tensor_arg", "torch_dtype_to_datatype"]
