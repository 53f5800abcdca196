"""taskring: a PTO2-style tensormap-and-ringbuffer task runtime on a simulated chip,
with per-task ring sizing.

Two layers, as upstream has them:

* low level (Simpler-style): ``CallConfig``, ``RuntimeEnv``, ``TaskArgs``,
  ``TensorArgType``, the orchestrator ``rt`` handed to a program;
* high level (PyPTO-style): ``RunConfig``, ``run``, ``program`` / ``Program``,
  ``kernel``, ``ChipWorker``.

All behaviour lives in the Rust core (``taskring._native``); the Python layer is glue,
one module per concept: ``_types`` (the enums), ``_config`` (``RunConfig``), ``_kernel``,
``_program`` (``Program``, ``run``), ``_chip`` (``ChipWorker``), ``_shared``
(``shared_array``), ``_worker`` (``Worker`` and its level 2 and 3 classes), ``_node``
(the ``Distributed*`` names of L3), ``_cluster`` (L4), ``_report`` and ``_sizing`` (the
run report and the sizing advisor). This module only gathers the public names.
"""

from __future__ import annotations

from . import _native
from ._native import (
    DEFAULT_RING_DEP_POOL,
    DEFAULT_RING_HEAP,
    DEFAULT_RING_TASK_WINDOW,
    RUNTIME_ENV_RING_COUNT,
    ArenaStats,
    CallConfig,
    CapturedProgram,
    ChipTaskReport,
    DeviceMemory,
    HostTaskReport,
    HostTensor,
    Kernel,
    NodeOrchestrator,
    NodeRunReport,
    Orchestrator,
    PeakUse,
    RingSizing,
    RunReport,
    RuntimeEnv,
    Task,
    TaskArgs,
    Tensor,
    TensorSpec,
    resolve_ring_sizing,
)
from ._errors import RuntimeFailure
from ._include import include_dir
from ._config import RunConfig
from ._types import IN, INOUT, OUT, SCALAR, ArgDirection, DataType, TensorArgType
from ._kernel import kernel, load_kernel
from ._program import Program, program, run
from ._sizing import suggest_sizing
from ._chip import ChipWorker
from ._shared import shared_array
from ._handle import RunHandle
from ._worker import Worker
from ._node import DistributedConfig, DistributedProgram, DistributedWorker
from . import _cluster  # defines Worker(level=4)'s class
from . import kernels
from . import scene_test  # docs/api.md §5

__all__ = [
    "CapturedProgram",
    "ChipTaskReport",
    "DistributedConfig",
    "DistributedProgram",
    "DistributedWorker",
    "HostTaskReport",
    "HostTensor",
    "NodeOrchestrator",
    "NodeRunReport",
    "RunHandle",
    "Worker",
    "shared_array",
    "ArenaStats",
    "ArgDirection",
    "DeviceMemory",
    "CallConfig",
    "ChipWorker",
    "DataType",
    "DEFAULT_RING_DEP_POOL",
    "DEFAULT_RING_HEAP",
    "DEFAULT_RING_TASK_WINDOW",
    "IN",
    "INOUT",
    "Kernel",
    "OUT",
    "Orchestrator",
    "PeakUse",
    "Program",
    "RingSizing",
    "RUNTIME_ENV_RING_COUNT",
    "RunConfig",
    "RunReport",
    "RuntimeEnv",
    "RuntimeFailure",
    "SCALAR",
    "Task",
    "TaskArgs",
    "Tensor",
    "TensorArgType",
    "TensorSpec",
    "include_dir",
    "kernel",
    "kernels",
    "load_kernel",
    "program",
    "resolve_ring_sizing",
    "run",
    "suggest_sizing",
]
