"""RunConfig: the high-level (PyPTO-style) per-dispatch configuration."""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Union

from ._native import CallConfig

_PLATFORMS = ("sim", "a2a3sim", "a5sim", "a2a3", "a5")
_INT32_MAX = 2**31 - 1
_WINDOW_MAX = 2**30

RingValue = Optional[Union[int, List[int]]]


def _is_int(v) -> bool:
    return type(v) is int


def _pow2(v: int) -> bool:
    return v > 0 and (v & (v - 1)) == 0


def _window_phrase(v) -> Optional[str]:
    """None when v is a valid window, else the rule phrase it breaks."""
    if not _is_int(v) or v < 4 or not _pow2(v):
        return "be a power of 2 >= 4"
    if v > _WINDOW_MAX:
        return f"be a power of 2 >= 4 and <= {_WINDOW_MAX}"
    return None


def _heap_phrase(v) -> Optional[str]:
    # Sizes travel as 64-bit integers: 2**64 and above cannot be a ring.
    if not _is_int(v) or v < 1024 or v >= 2**64 or not _pow2(v):
        return "be a power of 2 >= 1024 (bytes per ring)"
    return None


def _dep_phrase(v) -> Optional[str]:
    if not _is_int(v) or v < 4 or v > _INT32_MAX:
        return "be in [4, INT32_MAX]"
    return None


_RULES = {
    "ring_task_window": _window_phrase,
    "ring_heap": _heap_phrase,
    "ring_dep_pool": _dep_phrase,
}


def _check_ring(field: str, v):
    """Validate one ring field; returns the value to store (tuples become lists)."""
    if v is None:
        return None
    rule = _RULES[field]
    if isinstance(v, (list, tuple)):
        if len(v) != 4:
            raise ValueError(f"{field} must have exactly 4 entries (one per scope-depth ring), got {len(v)}")
        for e in v:
            if _is_int(e) and e == 0:
                continue
            phrase = rule(e)
            if phrase is not None:
                raise ValueError(f"{field} entries must {phrase} (or 0 to keep default), got {e!r}")
        return list(v)
    phrase = rule(v)
    if phrase is not None:
        raise ValueError(f"{field} must {phrase}, got {v!r}")
    return v


@dataclasses.dataclass
class RunConfig:
    """Configuration of one dispatch (high level). Ring fields: ``None`` (unset), an
    int (all four rings) or a list of exactly 4 ints (``0`` = keep the default for
    that ring). Validated on construction and by ``dataclasses.replace``; the first
    failure wins (platform, then ring_task_window, ring_heap, ring_dep_pool, then the
    rest)."""

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
        self.ring_task_window = _check_ring("ring_task_window", self.ring_task_window)
        self.ring_heap = _check_ring("ring_heap", self.ring_heap)
        self.ring_dep_pool = _check_ring("ring_dep_pool", self.ring_dep_pool)
        n = self.aicpu_thread_num
        if n is not None and (not _is_int(n) or not (n == 0 or 2 <= n <= 8)):
            raise ValueError(f"aicpu_thread_num must be 0 (auto) or in [2, 8], got {n!r}")
        s = self.enable_chip_swimlane
        if not isinstance(s, bool) and not (_is_int(s) and 0 <= s <= 4):
            raise ValueError(f"enable_chip_swimlane must be a bool or an int in [0, 4], got {s!r}")
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
        swim = 4 if self.enable_chip_swimlane is True else (0 if self.enable_chip_swimlane is False else self.enable_chip_swimlane)
        if swim:
            cfg.enable_chip_swimlane = swim
        if self.output_dir is not None:
            cfg.output_prefix = self.output_dir
        return cfg


_REAL_PLATFORMS = ("a2a3", "a5")


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
