"""``ChipWorker``: a resident simulated chip (L2) that keeps its core threads and its
arena cache between runs."""

from __future__ import annotations

from typing import Any, Optional

from . import _native
from ._config import as_call_config, check_device_memory, platform_check
from ._native import ArenaStats, CapturedProgram, RunReport
from ._program import Program


class ChipWorker:
    """A resident simulated chip: its core threads and its arena cache stay between
    runs. ``config`` (RunConfig or CallConfig) is the default of ``run()`` calls made
    without one. ``prewarm=True`` builds the arena of that config's sizing (the default
    sizing when ``config`` is None) before the worker is ready; ``prewarm=<RunConfig or
    CallConfig, or a list of them>`` builds those instead (up to the cache's slots);
    ``prewarm=False`` builds nothing ahead. A sizing with ``"auto"`` entries is not
    prewarmed (its sizes are learned at its first dispatch); a prewarm that does not fit
    the device memory fails, except the default sizing's when nothing was asked for,
    which is then skipped with a warning. ``device_memory`` (bytes) is the chip's
    device memory, against which every cached arena is charged at its device footprint
    (default ``TASKRING_DEVICE_MEMORY`` or 64 GiB)."""

    __module__ = "taskring"

    def __init__(
        self, config: Any = None, *, prewarm: Any = True, arena_cache_slots: int = 4, cores: int = 0, device_memory: Optional[int] = None
    ) -> None:
        if isinstance(arena_cache_slots, bool) or not isinstance(arena_cache_slots, int) or arena_cache_slots < 1:
            raise ValueError(f"arena_cache_slots must be an int >= 1, got {arena_cache_slots!r}")
        self._device_memory = check_device_memory(device_memory)
        platform_check(config)
        self._config = as_call_config(config)
        self._config.validate()
        # The default sizing, built when nothing was asked for, is skipped with a
        # warning where it does not fit the device memory.
        self._prewarm_if_fits = prewarm is True and config is None
        if prewarm is True:
            pre = [self._config]
        elif prewarm is False or prewarm is None:
            pre = []
        elif isinstance(prewarm, (list, tuple)):
            pre = list(prewarm)
        else:
            pre = [prewarm]
        for p in pre:
            platform_check(p)
        self._prewarm = [as_call_config(p) for p in pre]
        for p in self._prewarm:
            p.validate()
        self._slots = arena_cache_slots
        self._cores = cores
        self._chip: Optional[_native.Chip] = None
        self.init()

    def init(self) -> "ChipWorker":
        """Start the chip (idempotent)."""
        if self._chip is None:
            self._chip = _native.Chip(
                cores=self._cores, arena_cache_slots=self._slots, prewarm=self._prewarm, device_memory=self._device_memory,
                prewarm_if_fits=self._prewarm_if_fits,
            )
        return self

    def close(self) -> None:
        """Stop the chip's threads and free its arenas (idempotent)."""
        if self._chip is not None:
            self._chip.close()
            self._chip = None

    def __enter__(self) -> "ChipWorker":
        return self.init()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, prog: Program, *args: Any, config: Any = None) -> RunReport:
        """Dispatch ``prog`` with ``config`` (its own ring sizing), or the worker's."""
        if self._chip is None:
            raise RuntimeError("this ChipWorker is closed")
        if not isinstance(prog, Program):
            raise TypeError(f"run() needs a taskring.Program, got {type(prog).__name__}")
        platform_check(config)
        cc = self._config if config is None else as_call_config(config)
        cc.validate()
        host = prog.check_args(args)
        return self._chip.run(prog.orchestration, prog.name, list(host), cc)

    def capture(self, prog: Program, *args: Any, config: Any = None) -> CapturedProgram:
        """Run ``prog`` once, as ``run`` does, and record its task graph: kernels, scalars,
        views relative to each argument, scopes and dependencies. ``g.replay(*args,
        config=None)`` runs the graph again on this worker without the orchestration
        (arguments of the same shapes and dtypes; docs/api.md §10). The run's report is
        ``g.report``."""
        if self._chip is None:
            raise RuntimeError("this ChipWorker is closed")
        if not isinstance(prog, Program):
            raise TypeError(f"capture() needs a taskring.Program, got {type(prog).__name__}")
        platform_check(config)
        cc = self._config if config is None else as_call_config(config)
        cc.validate()
        host = prog.check_args(args)
        return self._chip.capture(prog.orchestration, prog.name, list(host), cc)

    @property
    def arena_stats(self) -> ArenaStats:
        """The chip's arena-cache counters (RuntimeError when closed)."""
        if self._chip is None:
            raise RuntimeError("this ChipWorker is closed")
        return self._chip.arena_stats()

    @property
    def cores(self) -> int:
        """Number of core threads of the chip (0 when closed)."""
        return self._chip.cores if self._chip is not None else 0
