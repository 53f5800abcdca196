"""taskring.RuntimeFailure: a failed run (capacity, kernel, misuse), with its code."""

from __future__ import annotations

from typing import Any, Optional, Tuple


class RuntimeFailure(RuntimeError):
    """A run failed. ``code``/``name``/``description``/``hint`` follow upstream's status
    codes (1 SCOPE_DEADLOCK, 2 HEAP_RING_DEADLOCK, 3 FLOW_CONTROL_DEADLOCK,
    4 DEP_POOL_OVERFLOW, 5 INVALID_ARGS, 7 REQUIRE_SYNC_START_INVALID, 8 TENSOR_WAIT_TIMEOUT,
    11 TENSORMAP_OVERFLOW,
    100 SCHEDULER_TIMEOUT) plus ours (200 TASK_FAILED, 201 RUNTIME_SETUP,
    202 DEVICE_OUT_OF_MEMORY). Capacity failures carry ``resource``, ``configured`` and
    ``needed`` (when known). ``str()`` is ``{name} (code {code}) on ring {ring}:
    {description}. Hint: {hint}``, without `` on ring {ring}`` when ``ring`` is None."""

    def __init__(
        self,
        code: int,
        name: str,
        ring: Optional[int],
        description: str,
        hint: str,
        resource: Optional[str] = None,
        configured: Optional[int] = None,
        needed: Optional[int] = None,
    ) -> None:
        self.code = code
        self.name = name
        self.ring = ring
        self.description = description
        self.hint = hint
        self.resource = resource
        self.configured = configured
        self.needed = needed
        super().__init__(str(self))

    def __str__(self) -> str:
        # A failure of no ring (ring None) leaves out " on ring ...".
        where = "" if self.ring is None else f" on ring {self.ring}"
        return f"{self.name} (code {self.code}){where}: {self.description}. Hint: {self.hint}"

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        return (
            type(self),
            (self.code, self.name, self.ring, self.description, self.hint, self.resource, self.configured, self.needed),
        )
