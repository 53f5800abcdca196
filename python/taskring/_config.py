"""RunConfig: the high-level (PyPTO-style) per-dispatch configuration."""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Union

from ._native import CallConfig, Chip

_PLATFORMS = ("sim", "a2a3sim", "a5sim", "a2a3", "a5")
_RING_FIELDS = ("ring_task_window", "ring_heap", "ring_dep_pool")

# The rules and messages of the ring fields, aicpu_thread_num and enable_chip_swimlane
# live in Rust (taskring::config::run_config): _check_field(field, value) raises
# ValueError with the docs/api.md §1.1 text. (A private native helper, so not in _native.pyi.)
_check_field = getattr(CallConfig, "_check_run_config_field")

RingValue = Optional[Union[int, str, List[Union[int, str]]]]


def _is_int(v) -> bool:
    return type(v) is int


@dataclasses.dataclass
class RunConfig:
    """Configuration of one dispatch (high level). Ring fields: ``None`` (unset), an
    int (all four rings) or a list of exactly 4 ints (``0`` = keep the default for
    that ring); ``"auto"`` (any case, surrounding whitespace ignored; kept as
    ``"auto"``), alone or as a list entry, lets the chip size that resource to the
    program's measured need (docs/api.md §12). Validated on construction and by
    ``dataclasses.replace``; the first failure wins (platform, then ring_task_window,
    ring_heap, ring_dep_pool, then the rest)."""

    platform: str = "sim"
    device_id: int = 0
    aicpu_thread_num: Optional[int] = None
    ring_task_window: RingValue = None
    ring_heap: RingValue = None
    ring_dep_pool: RingValue = None
    enable_scope_stats: bool = False
    enable_chip_swimlane: Union[bool, int] = 0
    enable_dep_gen: bool = False
    output_dir: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.platform, str) or self.platform not in _PLATFORMS:
            raise ValueError(
                f"Invalid platform {self.platform!r}. Expected 'sim', 'a2a3sim', 'a5sim', 'a2a3', or 'a5'."
            )
        for field in _RING_FIELDS:
            # The checked value: auto spelled "auto", a tuple stored back as a list.
            setattr(self, field, _check_field(field, getattr(self, field)))
        _check_field("aicpu_thread_num", self.aicpu_thread_num)
        _check_field("enable_chip_swimlane", self.enable_chip_swimlane)
        if not _is_int(self.device_id) or self.device_id < 0:
            raise ValueError(f"device_id must be a non-negative int, got {self.device_id!r}")
        for flag in ("enable_scope_stats", "enable_dep_gen"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if self.output_dir is not None:
            if not isinstance(self.output_dir, (str, bytes, os.PathLike)):
                raise TypeError(f"output_dir must be a str or an os.PathLike, got {type(self.output_dir).__name__}")
            # bytes and path objects name the directory they stand for (not "b'/tmp'").
            self.output_dir = os.fsdecode(os.fspath(self.output_dir))

    def to_call_config(self, base: Optional[CallConfig] = None) -> CallConfig:
        """A fresh CallConfig: a copy of ``base`` (or the default) with this config's
        non-None ring fields written into its ``runtime_env``, and its thread count and
        diagnostics applied."""
        cfg = base.copy() if base is not None else CallConfig()
        env = cfg.runtime_env
        if self.ring_task_window is not None:
            env.ring_task_window = self.ring_task_window
        if self.ring_heap is not None:
            env.ring_heap = self.ring_heap
        if self.ring_dep_pool is not None:
            env.ring_dep_pool = self.ring_dep_pool
        if self.aicpu_thread_num is not None:
            cfg.aicpu_thread_num = self.aicpu_thread_num
        if self.enable_scope_stats:
            cfg.enable_scope_stats = True
        if self.enable_dep_gen:
            cfg.enable_dep_gen = True
        if self.enable_chip_swimlane:
            cfg.enable_chip_swimlane = self.enable_chip_swimlane  # the setter maps True to 4
        if self.output_dir is not None:
            cfg.output_prefix = self.output_dir
        return cfg


_REAL_PLATFORMS = ("a2a3", "a5")


MIN_DEVICE_MEMORY = Chip.MIN_DEVICE_MEMORY


def check_device_memory(v: object) -> Optional[int]:
    """A chip's device memory in bytes (None: the process default, ``TASKRING_DEVICE_MEMORY``
    or 64 GiB)."""
    if v is None:
        return None
    if not _is_int(v) or v < MIN_DEVICE_MEMORY or v >= 1 << 64:  # type: ignore[operator]
        raise ValueError(f"device_memory must be an int >= {MIN_DEVICE_MEMORY} (bytes), got {v!r}")
    return int(v)  # type: ignore[call-overload]


def platform_check(config: object) -> None:
    """Dispatches on a real Ascend platform are not possible in this build."""
    if isinstance(config, RunConfig) and config.platform in _REAL_PLATFORMS:
        raise RuntimeError(
            f"platform {config.platform!r} needs an Ascend device and driver; this build runs the 'sim' "
            "platform only (use 'sim', 'a2a3sim' or 'a5sim')"
        )


def as_call_config(config: Union[RunConfig, CallConfig, None]) -> CallConfig:
    """``config`` (a RunConfig, a CallConfig or None) as a CallConfig (a RunConfig on a
    real platform raises RuntimeError: this build runs the sim platform only)."""
    platform_check(config)
    if config is None:
        return CallConfig()
    if isinstance(config, CallConfig):
        return config
    if isinstance(config, RunConfig):
        return config.to_call_config()
    raise TypeError(f"config must be a RunConfig, a CallConfig or None, got {type(config).__name__}")
