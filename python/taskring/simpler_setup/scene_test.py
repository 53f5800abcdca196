"""Scene tests in Simpler's form (docs/api.md §13.3): ``@scene_test(level=2|3,
runtime="tensormap_and_ringbuffer")`` on a ``SceneTestCase`` that declares ``CALLABLE``
(C++ sources to compile), ``CASES`` (how to run) and ``generate_args`` /
``compute_golden`` (data and the expected result)::

    from simpler.task_interface import ArgDirection as D
    from simpler_setup import SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

    @scene_test(level=2, runtime="tensormap_and_ringbuffer")
    class TestVector(SceneTestCase):
        CALLABLE = {
            "orchestration": {"source": "kernels/orchestration/orch.cpp",
                              "function_name": "aicpu_orchestration_entry",
                              "signature": [D.IN, D.IN, D.OUT]},
            "incores": [{"func_id": 0, "source": "kernels/aiv/add.cpp", "core_type": "aiv",
                         "signature": [D.IN, D.IN, D.OUT], "extra_include_dirs": ["include"]}],
        }
        CASES = [{"name": "default", "platforms": ["a2a3sim"], "params": {},
                  "config": {"runtime_env": {"ring_task_window": 64}}}]

        def generate_args(self, params): return TaskArgsBuilder(TensorArg("a", ...), ...)
        def compute_golden(self, args, params): args.f[:] = ...

    if __name__ == "__main__":
        SceneTestCase.run_module(__name__)

Sources (and relative ``extra_include_dirs``) are relative to the test file. Level 3:
``CALLABLE = {"orchestration": fn, "callables": [{"name", "orchestration", "incores"} |
{"name", "callable": py_fn}]}``; ``fn(orch, callables, task_args, config)`` reaches each
compiled program's handle as ``callables.<name>`` (its signature as
``callables.<name>_sig``) and passes ``config`` (the case's ``CallConfig``) to
``orch.submit_next_level``.

Case keys: ``name``, ``platforms`` (the case runs where the selected platform is listed),
``manual`` (``True`` or platform names: run only with ``--manual include|only``),
``params`` (handed to the hooks), ``config`` (strict: ``aicpu_thread_num``,
``runtime_env`` with ``ring_task_window`` / ``ring_heap`` / ``ring_dep_pool``,
``device_count``, ``num_sub_workers``; checked at decoration with Simpler's messages),
``skip_golden``. Every run of a case gets a fresh ``CallConfig`` from its ``config`` (and
the diagnostics flags): at level 2 it is the run's config, at level 3 the orchestration
hands it to every L2 task it submits.

Tensors are numpy arrays or torch tensors (CPU); goldens compare with ``allclose`` at
``RTOL`` / ``ATOL``. pytest: ``pytest -p taskring.simpler.pytest_plugin test_x.py
--platform a2a3sim [--case SEL] [--rounds N]``; standalone: ``python test_x.py -p a2a3sim
[--case SEL] [--rounds N]``. Both platforms a2a3sim and a2a3 run taskring's simulated chip.
"""

from __future__ import annotations

import argparse
import atexit
import copy
import inspect
import logging
import os
import sys
import traceback
from collections.abc import Mapping
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..scene_test import _render_keys

logger = logging.getLogger(__name__)

__all__ = [
    "CallableNamespace",
    "Scalar",
    "SceneTestCase",
    "SceneTestLevel",
    "TaskArgsBuilder",
    "TensorArg",
    "scene_level",
    "scene_test",
]

_CASE_CONFIG_KEYS = frozenset({"aicpu_thread_num", "runtime_env", "device_count", "num_sub_workers"})
_RUNTIME_ENV_KEYS = frozenset({"ring_task_window", "ring_heap", "ring_dep_pool"})
SUPPORTED_RUNTIME = "tensormap_and_ringbuffer"

# Compiled ChipCallables of this process, by (module, class, [name,] platform, runtime).
_compile_cache: Dict[tuple, Any] = {}


def clear_compile_cache() -> None:
    """Forget the compiled callables of this process (the on-disk cache stays)."""
    _compile_cache.clear()


# ----- the upstream-facing modules, imported when first needed ----------------------


def _ti() -> Any:
    from ..simpler import task_interface

    return task_interface


def _make_tensor_arg(worker: Any, value: Any) -> Any:
    from .torch_interop import make_tensor_arg

    return make_tensor_arg(worker, value)


def _scalar_to_uint64(value: Any) -> int:
    """A scalar argument's 64 bits: a Python float as f32, a ctypes scalar as its own
    bits (``c_double`` as f64), anything else as an int (two's complement)."""
    import ctypes
    import struct

    if isinstance(value, float):
        return struct.unpack("<I", struct.pack("<f", value))[0]
    if isinstance(value, ctypes._SimpleCData):
        if isinstance(value, (ctypes.c_float, ctypes.c_double)):
            utype = ctypes.c_uint32 if isinstance(value, ctypes.c_float) else ctypes.c_uint64
            return int(utype.from_buffer_copy(value).value)
        return int(value.value) & 0xFFFFFFFFFFFFFFFF
    return int(value) & 0xFFFFFFFFFFFFFFFF


# ----- tensors: numpy or torch -------------------------------------------------------


def _is_torch(v: Any) -> bool:
    return type(v).__module__.startswith("torch") and hasattr(v, "data_ptr")


def _is_tensor(v: Any) -> bool:
    return isinstance(v, np.ndarray) or _is_torch(v)


def _clone(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.copy()
    if _is_torch(v):
        return v.clone()
    return copy.copy(v)


def _copy_into(dst: Any, src: Any) -> None:
    if _is_torch(dst):
        dst.copy_(src)
    else:
        dst[...] = src


def _as_numpy(v: Any) -> np.ndarray:
    if _is_torch(v):
        import torch

        t = v.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    return np.asarray(v)


# ----- levels and argument specs -----------------------------------------------------


class SceneTestLevel(IntEnum):
    CHIP = 2
    NODE = 3
    NETWORK1 = 4


def _normalize_scene_level(level: Any) -> SceneTestLevel:
    try:
        return SceneTestLevel(level)
    except ValueError as e:
        supported = ", ".join(str(int(m)) for m in SceneTestLevel)
        raise ValueError(f"Unsupported scene test level {level!r}; expected one of: {supported}") from e


def scene_level(level: Any) -> Any:
    """Decorator: attach the scene-test level to a class or function."""
    normalized = _normalize_scene_level(level)

    def decorator(obj: Any) -> Any:
        obj._st_level = normalized
        return obj

    return decorator


class TensorArg(NamedTuple):
    """A named tensor argument (numpy array or torch tensor)."""

    name: str
    value: Any


class Scalar(NamedTuple):
    """A named scalar argument (int, float or ctypes scalar; ``float`` travels as f32)."""

    name: str
    value: Any


class TaskArgsBuilder:
    """The arguments of a case, in order (tensors before scalars), by name as attributes
    (``args.a``)."""

    def __init__(self, *specs: Any) -> None:
        self._specs: List[Any] = []
        self._data: Dict[str, Any] = {}
        self._has_scalar = False
        for spec in specs:
            if isinstance(spec, TensorArg):
                self._add_tensor(spec)
            elif isinstance(spec, Scalar):
                self._add_scalar(spec)

    def add_tensor(self, name: str, value: Any) -> None:
        """Add a tensor (before any scalar)."""
        self._add_tensor(TensorArg(name, value))

    def add_scalar(self, name: str, value: Any) -> None:
        """Add a scalar; no tensor may follow."""
        self._add_scalar(Scalar(name, value))

    def _add_tensor(self, spec: TensorArg) -> None:
        self._reject_bad_name(spec.name)
        if self._has_scalar:
            raise ValueError("Cannot add tensor after scalar (tensor-before-scalar ordering required)")
        self._specs.append(spec)
        self._data[spec.name] = spec.value

    def _add_scalar(self, spec: Scalar) -> None:
        self._reject_bad_name(spec.name)
        self._has_scalar = True
        self._specs.append(spec)
        self._data[spec.name] = spec.value

    def _reject_bad_name(self, name: str) -> None:
        if name in self._data:
            raise ValueError(f"TaskArgsBuilder: duplicate argument name {name!r}")
        if hasattr(self, name):
            raise ValueError(f"TaskArgsBuilder: argument name {name!r} conflicts with builder attributes/methods")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"TaskArgsBuilder has no argument '{name}'") from None

    def clone(self) -> "TaskArgsBuilder":
        """A deep copy: tensors cloned, scalars copied."""
        new = TaskArgsBuilder.__new__(TaskArgsBuilder)
        new._specs, new._data, new._has_scalar = [], {}, False
        for spec in self._specs:
            value = _clone(spec.value)
            new._specs.append(type(spec)(spec.name, value))
            new._data[spec.name] = value
            new._has_scalar = new._has_scalar or isinstance(spec, Scalar)
        return new

    @property
    def specs(self) -> List[Any]:
        """The TensorArg / Scalar specs in order."""
        return self._specs

    def tensor_names(self) -> List[str]:
        """The tensor arguments' names, in order."""
        return [s.name for s in self._specs if isinstance(s, TensorArg)]


class CallableNamespace:
    """The compiled programs (and SUB callables) of a level-3 scene by name:
    ``callables.vector_kernel`` (a handle), ``callables.vector_kernel_sig`` (its
    signature); ``keep(obj)`` holds ``obj`` for as long as the namespace lives."""

    def __init__(self, entries: Mapping[str, Any]) -> None:
        self._entries = dict(entries)
        self._keepalive: List[Any] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._entries[name]
        except KeyError:
            raise AttributeError(f"CallableNamespace has no entry '{name}'") from None

    def keep(self, *objs: Any) -> Any:
        if not objs:
            return None
        self._keepalive.extend(objs)
        return objs[0] if len(objs) == 1 else objs


# ----- building TaskArgs from a builder ------------------------------------------------


def _dir_to_tag() -> Dict[Any, Any]:
    ti = _ti()
    D, T = ti.ArgDirection, ti.TensorArgType
    return {D.IN: T.INPUT, D.OUT: T.OUTPUT_EXISTING, D.INOUT: T.INOUT}


def _signature_entry(test_args: TaskArgsBuilder, orch_signature: Sequence[Any], spec: TensorArg, idx: int) -> Any:
    if idx >= len(orch_signature):
        raise ValueError(
            f"TensorArg '{spec.name}' at index {idx} has no matching entry in "
            f"orchestration signature (length {len(orch_signature)}). "
            f"Update CALLABLE['orchestration']['signature'] to match generate_args()."
        )
    return orch_signature[idx]


def _fill_args(
    test_args: TaskArgsBuilder, orch_signature: Sequence[Any], args: Any, add_tensor: Callable[[Any, Any], None]
) -> Tuple[Any, List[str]]:
    """Add ``test_args``' tensors (``add_tensor(spec, direction)``) and scalars to
    ``args``; returns it with the names of the OUT / INOUT tensors."""
    ti = _ti()
    outs = (ti.ArgDirection.OUT, ti.ArgDirection.INOUT)
    output_names: List[str] = []
    idx = 0
    for spec in test_args.specs:
        if isinstance(spec, TensorArg):
            direction = _signature_entry(test_args, orch_signature, spec, idx)
            add_tensor(spec, direction)
            if direction in outs:
                output_names.append(spec.name)
            idx += 1
        elif isinstance(spec, Scalar):
            args.add_scalar(_scalar_to_uint64(spec.value))
    return args, output_names


def _build_args(test_args: TaskArgsBuilder, orch_signature: Sequence[Any], name_tensor: Any) -> Tuple[Any, List[str]]:
    ti = _ti()
    tags = _dir_to_tag()
    args = ti.TaskArgs()
    return _fill_args(
        test_args,
        orch_signature,
        args,
        lambda spec, direction: args.add_tensor(name_tensor(spec), tags.get(direction, ti.TensorArgType.INPUT)),
    )


def _build_l2_ref_args(test_args: TaskArgsBuilder, orch_signature: Sequence[Any], worker: Any) -> Tuple[Any, List[str]]:
    """The ``TaskArgs`` of an L2 run (each tensor used in place) and the names of the
    OUT / INOUT tensors."""
    return _build_args(test_args, orch_signature, lambda spec: _make_tensor_arg(worker, spec.value))


def _build_chip_task_args(test_args: TaskArgsBuilder, orch_signature: Sequence[Any]) -> Tuple[Any, List[str]]:
    """The ``ChipStorageTaskArgs`` of a direct chip run (no tags) and the names of the
    OUT / INOUT tensors."""
    from .torch_interop import make_chip_tensor_arg

    args = _ti().ChipStorageTaskArgs()
    return _fill_args(test_args, orch_signature, args, lambda spec, _direction: args.add_tensor(make_chip_tensor_arg(spec.value)))


def _l3_ref(test_args: TaskArgsBuilder, name: str, worker: Any = None) -> Any:
    """The tensor argument for the L3 tensor ``name`` (its rehosted copy, which the
    chips see)."""
    t = getattr(test_args, name)
    worker = worker if worker is not None else getattr(test_args, "_rehost_worker", None)
    if worker is None:
        raise ValueError(
            f"L3 tensor arg '{name}' has no rehosted handle; rehost the args or pass worker= "
            f"so it can be named via Worker.make_tensor_arg"
        )
    return _make_tensor_arg(worker, t)


def _rehosted_ref(test_args: TaskArgsBuilder, name: str) -> Any:
    """The tensor argument of the rehosted L3 tensor ``name``."""
    return _l3_ref(test_args, name, worker=None)


def _rehosted_ref_for(test_args: TaskArgsBuilder, tensor: Any) -> Any:
    """The tensor argument of a rehosted L3 tensor, found by the tensor itself."""
    for spec in test_args.specs:
        if isinstance(spec, TensorArg) and spec.value is tensor:
            return _l3_ref(test_args, spec.name)
    raise ValueError("tensor is not a rehosted arg (no create_buffer handle with a matching base)")


def _build_l3_task_args(test_args: TaskArgsBuilder, orch_signature: Sequence[Any], worker: Any = None) -> Tuple[Any, List[str]]:
    """The tagged ``TaskArgs`` of an L3 chip task (the tags drive dependencies) and the
    names of its OUT / INOUT tensors."""
    return _build_args(test_args, orch_signature, lambda spec: _l3_ref(test_args, spec.name, worker))


class _RehostedTaskArgs:
    """Moves a builder's host tensors into memory the chip processes see
    (``taskring.shared_array``), keeping dtype, shape and values; the builder then names
    the shared copies (so rounds, dispatch and golden comparison use them). ``release()``
    puts the originals back."""

    def __init__(self, worker: Any, test_args: TaskArgsBuilder) -> None:
        from .._shared import shared_array

        self._test_args = test_args
        self._originals: Dict[str, Any] = {}
        new_specs = []
        for spec in test_args._specs:
            value = spec.value
            if isinstance(spec, TensorArg) and _is_tensor(value) and _numel(value) > 0:
                host = _as_numpy(value)
                shared = shared_array(host.shape, host.dtype)
                shared[...] = host
                view: Any = shared
                if _is_torch(value):
                    import torch

                    view = torch.from_numpy(shared)
                    if value.dtype != view.dtype:
                        view = value.clone()  # a dtype numpy lacks: the chips get it as is
                self._originals[spec.name] = value
                test_args._data[spec.name] = view
                new_specs.append(TensorArg(spec.name, view))
            else:
                new_specs.append(spec)
        test_args._specs = new_specs
        test_args._rehost_worker = worker  # type: ignore[attr-defined]

    def release(self) -> None:
        ta = self._test_args
        for name, orig in self._originals.items():
            ta._data[name] = orig
        ta._specs = [TensorArg(s.name, self._originals[s.name]) if isinstance(s, TensorArg) and s.name in self._originals else s for s in ta._specs]
        self._originals.clear()


def _numel(v: Any) -> int:
    return int(v.numel()) if _is_torch(v) else int(np.asarray(v).size)


# ----- CALLABLE paths and compiling ------------------------------------------------------


def _resolve_callable_paths(cls: type, cls_dir: Path) -> None:
    spec = cls.CALLABLE  # type: ignore[attr-defined]
    if "callables" in spec:
        resolved = []
        for entry in spec["callables"]:
            if "orchestration" in entry:
                entry = dict(entry)
                _resolve_chip_entry_paths(entry, cls_dir)
            resolved.append(entry)
        spec["callables"] = resolved
    else:
        _resolve_chip_entry_paths(spec, cls_dir)


def _resolve_chip_entry_paths(entry: Dict[str, Any], cls_dir: Path) -> None:
    orch = entry.get("orchestration")
    if isinstance(orch, dict) and "source" in orch and not os.path.isabs(orch["source"]):
        entry["orchestration"] = dict(orch, source=str(cls_dir / orch["source"]))
    if "incores" in entry:
        resolved = []
        for k in entry["incores"]:
            k = dict(k)
            if "source" in k and not os.path.isabs(k["source"]):
                k["source"] = str(cls_dir / k["source"])
            if k.get("extra_include_dirs"):
                k["extra_include_dirs"] = [
                    d if "$" in str(d) or os.path.isabs(str(d)) else str((cls_dir / str(d)).resolve()) for d in k["extra_include_dirs"]
                ]
            resolved.append(k)
        entry["incores"] = resolved


def _resolve_incore_include_dirs(dirs: Sequence[Any], incore: Mapping[str, Any]) -> List[str]:
    """An incore's ``extra_include_dirs`` with ``$VAR``s expanded; directories that do not
    exist are dropped (ValueError when a variable is unset or none is left)."""
    name = incore.get("name", incore.get("source", "?"))
    resolved = []
    for raw in dirs:
        expanded = os.path.expandvars(str(raw))
        if "$" in expanded:
            raise ValueError(
                f"incore {name}: extra_include_dirs entry {raw!r} references an environment "
                f"variable that is not set. Export it (e.g. ASCEND_HOME_PATH for CANN headers) before running."
            )
        if Path(expanded).is_dir():
            resolved.append(expanded)
    if not resolved:
        raise ValueError(
            f"incore {name}: none of its {len(dirs)} extra_include_dirs exist on this machine, "
            f"so the SDK they come from is not installed where the test expects. Tried:\n  "
            + "\n  ".join(os.path.expandvars(str(d)) for d in dirs)
        )
    return resolved


def _pto_isa_root() -> Optional[str]:
    """``PTO_ISA_ROOT`` when it is set and valid; None otherwise (plain C++ kernels need
    no PTO-ISA; one that includes it then fails to compile, saying which header is missing)."""
    try:
        from .pto_isa import ensure_pto_isa_root

        return str(ensure_pto_isa_root())
    except (ImportError, RuntimeError):
        return None


def _compile_chip_callable_from_spec(spec: Mapping[str, Any], platform: str, runtime: str, cache_key: tuple) -> Any:
    """Compile a chip entry (orchestration + incores) into a ``ChipCallable`` (kept per
    process by ``cache_key``; KernelCompiler caches the libraries on disk)."""
    if cache_key in _compile_cache:
        return _compile_cache[cache_key]
    from .kernel_compiler import KernelCompiler

    ti = _ti()
    orch = spec["orchestration"]
    kc = KernelCompiler(platform=platform)
    inc_dirs = list(kc.get_orchestration_include_dirs(runtime))
    pto_isa_root = _pto_isa_root()
    orch_binary = kc.compile_orchestration(runtime, orch["source"])
    children = []
    for k in spec.get("incores", []):
        extra = _resolve_incore_include_dirs(k["extra_include_dirs"], k) if k.get("extra_include_dirs") else []
        binary = kc.compile_incore(k["source"], core_type=k["core_type"], pto_isa_root=pto_isa_root, extra_include_dirs=inc_dirs + extra)
        core = ti.CoreCallable.build(signature=list(k.get("signature", [])), binary=binary, core_type=k["core_type"])
        children.append((k["func_id"], core))
    build_kw: Dict[str, Any] = {}
    if orch.get("config_name"):
        build_kw["config_name"] = orch["config_name"]
    chip = ti.ChipCallable.build(
        signature=list(orch.get("signature", [])), func_name=orch["function_name"], binary=orch_binary, children=children, **build_kw
    )
    _compile_cache[cache_key] = chip
    return chip


def l3_compile_cache_key(module: str, qualname: str, name: str, platform: str, runtime: str) -> tuple:
    return (module, qualname, name, platform, runtime)


# ----- @scene_test ------------------------------------------------------------------------


def _validate_case_configs(cls: type) -> None:
    """Check the framework-owned mappings of every case (Simpler's messages)."""
    cfg_allowed = ", ".join(sorted(_CASE_CONFIG_KEYS))
    env_allowed = ", ".join(sorted(_RUNTIME_ENV_KEYS))
    for index, case in enumerate(getattr(cls, "CASES", ())):
        if not isinstance(case, Mapping):
            raise TypeError(f"{cls.__name__}.CASES[{index}] must be a mapping, got {type(case).__name__}")
        where = f"{cls.__name__}.CASES[{index}] ({case.get('name', f'index {index}')!r})"
        config = case.get("config", {})
        if not isinstance(config, Mapping):
            raise TypeError(f"{where} config must be a mapping, got {type(config).__name__}")
        unknown = [k for k in config if k not in _CASE_CONFIG_KEYS]
        if unknown:
            raise ValueError(f"{where} config has unknown keys: {_render_keys(unknown)}; allowed keys: {cfg_allowed}")
        runtime_env = config.get("runtime_env", {})
        if not isinstance(runtime_env, Mapping):
            raise TypeError(f"{where} config.runtime_env must be a mapping, got {type(runtime_env).__name__}")
        unknown = [k for k in runtime_env if k not in _RUNTIME_ENV_KEYS]
        if unknown:
            raise ValueError(f"{where} config.runtime_env has unknown keys: {_render_keys(unknown)}; allowed keys: {env_allowed}")


def scene_test(level: Any, runtime: str = SUPPORTED_RUNTIME) -> Any:
    """Class decorator: the level (2 or 3) and runtime of a ``SceneTestCase``; checks the
    cases' ``config`` and makes ``CALLABLE``'s paths absolute (relative to the test file)."""
    level_decorator = scene_level(level)

    def decorator(cls: type) -> type:
        _validate_case_configs(cls)
        level_decorator(cls)
        cls._st_runtime = runtime  # type: ignore[attr-defined]
        cls_dir = Path(inspect.getfile(cls)).parent
        if "CALLABLE" in cls.__dict__:
            _resolve_callable_paths(cls, cls_dir)
        return cls

    return decorator


# ----- selection -------------------------------------------------------------------------


def _parse_case_selector(value: str) -> Tuple[Optional[str], Optional[str]]:
    """``Foo`` -> (None, "Foo"); ``Cls::Foo`` -> ("Cls", "Foo"); ``Cls::`` -> ("Cls", None)."""
    if "::" in value:
        cls_part, case_part = value.split("::", 1)
        return (cls_part or None, case_part or None)
    return (None, value)


def _match_selectors(cls_name: str, case_name: str, selectors: Sequence[Tuple[Optional[str], Optional[str]]]) -> bool:
    if not selectors:
        return True
    return any((c is None or c == cls_name) and (n is None or n == case_name) for c, n in selectors)


def is_manual_for_platform(manual: Any, platform: Optional[str]) -> bool:
    """Whether a case's ``manual`` applies on ``platform`` (True: everywhere; a name or
    a collection of names: there)."""
    if isinstance(manual, str):
        return manual == platform
    if isinstance(manual, (list, tuple, set, frozenset)):
        return platform in manual
    return bool(manual)


def _case_selected(cls_name: str, case: Mapping[str, Any], platform: str, selectors: Sequence[Any], manual_mode: str) -> bool:
    if platform not in case.get("platforms", ()):
        return False
    if not _match_selectors(cls_name, case.get("name", ""), selectors):
        return False
    is_manual = is_manual_for_platform(case.get("manual"), platform)
    if manual_mode == "exclude" and is_manual:
        return False
    if manual_mode == "only" and not is_manual:
        return False
    return True


def _select_cases(test_classes: Sequence[type], platform: str, selectors: Sequence[Any], manual_mode: str) -> List[Tuple[type, Dict[str, Any]]]:
    """The (class, case) pairs to run; ValueError on an unknown selector or nothing left."""
    class_index = {c.__name__: c for c in test_classes}
    for sel_cls, _ in selectors:
        if sel_cls is not None and sel_cls not in class_index:
            available = ", ".join(sorted(class_index)) or "(none)"
            raise ValueError(f"--case: unknown class '{sel_cls}'. Available: {available}")
    for sel_cls, sel_case in selectors:
        if sel_case is None:
            continue
        scoped = [class_index[sel_cls]] if sel_cls else test_classes
        if not any(case.get("name") == sel_case for c in scoped for case in c.CASES):  # type: ignore[attr-defined]
            raise ValueError(f"--case: case '{sel_case}' not found in {sel_cls or 'any class'}")
    selected = [(cls, case) for cls in test_classes for case in cls.CASES if _case_selected(cls.__name__, case, platform, selectors, manual_mode)]  # type: ignore[attr-defined]
    if not selected:
        if selectors:
            sel_str = ", ".join(f"{c or '*'}::{n or '*'}" for c, n in selectors)
            hint = " (matches are manual; pass --manual include or only)" if manual_mode == "exclude" else ""
            raise ValueError(f"--case: no cases matched [{sel_str}] for platform={platform}{hint}")
        raise ValueError(f"No cases matched platform={platform} (manual={manual_mode})")
    return selected


# ----- diagnostics -------------------------------------------------------------------------


class _Diagnostics(NamedTuple):
    chip_swimlane: int = 0
    dump_args: int = 0
    pmu: int = 0
    dep_gen: bool = False
    scope_stats: bool = False

    def any(self) -> bool:
        return bool(self.chip_swimlane or self.dump_args or self.pmu or self.dep_gen or self.scope_stats)


def _effective_diagnostics(rounds: int, diag: _Diagnostics) -> _Diagnostics:
    """All diagnostics are off when a case runs more than once (a warning for each)."""
    if rounds <= 1:
        return diag
    names = ("chip swimlane", "args dump", "PMU", "dep_gen", "scope_stats")
    for name, on in zip(names, diag):
        if on:
            logger.warning("%s disabled: --rounds > 1", name)
    return _Diagnostics()


def _outputs_dir() -> Path:
    """Where per-case output directories go: ``outputs/`` under the working directory."""
    return Path.cwd() / "outputs"


def _sanitize_for_filename(s: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in s)


def _output_prefix(case_label: str) -> Path:
    """``outputs/<case label>_<timestamp>/`` under the working directory (created)."""
    from datetime import datetime

    prefix = _outputs_dir() / f"{_sanitize_for_filename(case_label)}_{datetime.now().strftime('%Y%m%d_%H%M%S')}"
    prefix.mkdir(parents=True, exist_ok=True)
    return prefix


@contextmanager
def _temporary_env(env_updates: Mapping[str, str]) -> Iterator[None]:
    if not env_updates:
        yield
        return
    old = {k: os.environ.get(k) for k in env_updates}
    os.environ.update(env_updates)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _compare_outputs(test_args: TaskArgsBuilder, golden_args: TaskArgsBuilder, output_names: Sequence[str], rtol: float, atol: float) -> None:
    for name in output_names:
        actual, expected = getattr(test_args, name), getattr(golden_args, name)
        if _is_torch(actual) and _is_torch(expected):
            import torch

            if not torch.allclose(actual, expected, rtol=rtol, atol=atol):
                diff = (actual - expected).abs().max().item()
                raise AssertionError(f"Golden mismatch on '{name}': max_diff={diff}, rtol={rtol}, atol={atol}")
            continue
        a, e = _as_numpy(actual), _as_numpy(expected)
        if a.shape != e.shape or not np.allclose(a, e, rtol=rtol, atol=atol):
            diff = float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64)))) if a.shape == e.shape and a.size else float("inf")
            raise AssertionError(f"Golden mismatch on '{name}': max_diff={diff}, rtol={rtol}, atol={atol}")


# ----- workers -----------------------------------------------------------------------------

# Level-2 workers of this process by (platform, runtime): shared by every class of that
# runtime (as upstream pools them); closed at exit.
_L2_POOL: Dict[Tuple[str, str], Any] = {}


@atexit.register
def _close_pool() -> None:
    while _L2_POOL:
        _, w = _L2_POOL.popitem()
        try:
            w.close()
        except Exception:
            pass


def _pooled_l2_worker(platform: str, runtime: str, device_id: int = 0) -> Any:
    w = _L2_POOL.get((platform, runtime))
    if w is None:
        from ..simpler.worker import Worker

        w = Worker(level=2, device_id=device_id, platform=platform, runtime=runtime)
        w.init()
        _L2_POOL[(platform, runtime)] = w
    return w


def _l3_worker(cls: type, cases: Sequence[Mapping[str, Any]], platform: str, first_device: int = 0) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """A level-3 Worker sized over ``cases`` (devices, SUB workers), with the class's
    callables compiled and registered before ``init()``; returns (worker, SUB handles,
    chip handles)."""
    from ..simpler.worker import Worker

    max_devices = max((int(c.get("config", {}).get("device_count", 1)) for c in cases), default=1)
    max_subs = max((int(c.get("config", {}).get("num_sub_workers", 0)) for c in cases), default=0)
    runtime = cls._st_runtime  # type: ignore[attr-defined]
    w = Worker(level=3, device_ids=list(range(first_device, first_device + max_devices)), num_sub_workers=max_subs, platform=platform, runtime=runtime)
    sub_handles: Dict[str, Any] = {}
    chip_handles: Dict[str, Any] = {}
    try:
        for entry in cls.CALLABLE.get("callables", []):  # type: ignore[attr-defined]
            if "callable" in entry:
                sub_handles[entry["name"]] = w.register(entry["callable"])
            elif "orchestration" in entry:
                name = entry["name"]
                key = l3_compile_cache_key(cls.__module__, cls.__qualname__, name, platform, runtime)
                chip_handles[name] = w.register(_compile_chip_callable_from_spec(entry, platform, runtime, key))
                chip_handles[f"{name}_sig"] = entry["orchestration"].get("signature", [])
        w.init()
    except BaseException:
        w.close()
        raise
    return w, sub_handles, chip_handles


# ----- the base class -----------------------------------------------------------------------


class SceneTestCase:
    """Base class of scene tests (levels 2 and 3); see the module doc."""

    CALLABLE: Dict[str, Any] = {}
    CASES: List[Dict[str, Any]] = []
    RTOL: float = 1e-5
    ATOL: float = 1e-5
    SKIP_GOLDEN: bool = False
    RUNTIME_ENV: Dict[str, Any] = {}

    _st_level: SceneTestLevel
    _st_runtime: str

    def generate_args(self, params: Any) -> TaskArgsBuilder:
        """The case's arguments (tensors before scalars)."""
        raise NotImplementedError

    def compute_golden(self, args: TaskArgsBuilder, params: Any) -> None:
        """Write the expected outputs into ``args`` (a clone of the generated ones)."""
        raise NotImplementedError

    def compare_outputs(self, test_args: TaskArgsBuilder, golden_args: TaskArgsBuilder, output_names: Sequence[str], params: Any) -> None:
        """AssertionError unless every output matches (``allclose`` at RTOL / ATOL)."""
        _compare_outputs(test_args, golden_args, output_names, self.RTOL, self.ATOL)

    def on_report(self, case: Mapping[str, Any], report: Any) -> None:
        """Called after every run of a case with taskring's report of it (a ``RunReport``
        at level 2, a ``NodeRunReport`` at level 3), before the golden comparison."""

    # -- compiling -------------------------------------------------------------------------
    @classmethod
    def compile_chip_callable(cls, platform: str) -> Any:
        """CALLABLE compiled into a ``ChipCallable`` (level 2; kept per process)."""
        key = (cls.__module__, cls.__qualname__, platform, cls._st_runtime)
        return _compile_chip_callable_from_spec(cls.CALLABLE, platform, cls._st_runtime, key)

    @classmethod
    def _compile_l3_callables(cls, platform: str) -> Dict[str, Any]:
        compiled: Dict[str, Any] = {}
        for entry in cls.CALLABLE["callables"]:
            if "orchestration" in entry:
                name = entry["name"]
                key = l3_compile_cache_key(cls.__module__, cls.__qualname__, name, platform, cls._st_runtime)
                compiled[name] = _compile_chip_callable_from_spec(entry, platform, cls._st_runtime, key)
                compiled[f"{name}_sig"] = entry["orchestration"].get("signature", [])
        return compiled

    def build_callable(self, platform: str) -> Any:
        """Level 2: the ChipCallable; level 3: {name: ChipCallable, name_sig: signature}."""
        if self._st_level == 2:
            return self.compile_chip_callable(platform)
        if self._st_level == 3:
            return self._compile_l3_callables(platform)
        raise ValueError(f"Unsupported level: {self._st_level}")

    @classmethod
    def _create_worker(cls, platform: str, device_id: int = 0) -> Any:
        """The level-2 Worker of the standalone path (initialized)."""
        from ..simpler.worker import Worker

        w = Worker(level=2, device_id=device_id, platform=platform, runtime=cls._st_runtime)
        w.init()
        return w

    # -- configs ---------------------------------------------------------------------------
    def _build_config(
        self,
        config_dict: Mapping[str, Any],
        enable_chip_swimlane: int = 0,
        enable_dump_args: int = 0,
        enable_pmu: int = 0,
        enable_dep_gen: bool = False,
        enable_scope_stats: bool = False,
        *,
        output_prefix: str = "",
    ) -> Any:
        """A fresh ``CallConfig`` from a case's ``config`` and the diagnostics flags."""
        config = _ti().CallConfig()
        config.aicpu_thread_num = config_dict.get("aicpu_thread_num", 0)
        runtime_env = config_dict.get("runtime_env", {})
        for key in ("ring_task_window", "ring_heap", "ring_dep_pool"):
            value = runtime_env.get(key, 0)
            setattr(config.runtime_env, key, list(value) if isinstance(value, tuple) else value)
        for field, value in (
            ("enable_chip_swimlane", enable_chip_swimlane),
            ("enable_dump_args", enable_dump_args),
            ("enable_pmu", enable_pmu),
            ("enable_dep_gen", enable_dep_gen),
            ("enable_scope_stats", enable_scope_stats),
        ):
            if value:  # flags left off keep the CallConfig's defaults
                try:
                    setattr(config, field, value)
                except AttributeError:
                    logger.warning("%s is not supported by taskring's CallConfig; ignored", field)
        if output_prefix:
            config.output_prefix = str(output_prefix)
        return config

    def _resolve_env(self) -> Dict[str, str]:
        env = self.RUNTIME_ENV
        if not env:
            return {}
        cls_dir = Path(inspect.getfile(type(self))).parent
        out = {}
        for k, v in env.items():
            s = str(v)
            if (k.endswith("_DIR") or k.endswith("_PATH")) and not Path(s).is_absolute():
                s = str((cls_dir / s).resolve())
            out[k] = s
        return out

    # -- running ---------------------------------------------------------------------------
    def _run_and_validate(self, worker: Any, callable_obj: Any, case: Mapping[str, Any], sub_handles: Optional[Mapping[str, Any]] = None, rounds: int = 1, skip_golden: bool = False, **diag: Any) -> None:
        """Run one case ``rounds`` times on ``worker`` and compare each round with the golden."""
        if self._st_level == 2:
            self._run_and_validate_l2(worker, callable_obj, case, rounds=rounds, skip_golden=skip_golden, **diag)
        elif self._st_level == 3:
            self._run_and_validate_l3(worker, callable_obj, sub_handles or {}, case, rounds=rounds, skip_golden=skip_golden, **diag)
        else:
            raise ValueError(f"Unsupported level: {self._st_level}")

    def _golden(self, test_args: TaskArgsBuilder, params: Any) -> TaskArgsBuilder:
        golden_args = test_args.clone()
        self.compute_golden(golden_args, params)
        return golden_args

    def _run_and_validate_l2(self, worker: Any, callable_obj: Any, case: Mapping[str, Any], rounds: int = 1, skip_golden: bool = False, output_prefix: str = "", **diag: Any) -> None:
        params = case.get("params", {})
        config_dict = case.get("config", {})
        skip_golden = skip_golden or bool(case.get("skip_golden", self.SKIP_GOLDEN))
        orch_sig = self.CALLABLE.get("orchestration", {}).get("signature", [])
        cls = type(self)
        handles = cls.__dict__.get("_st_l2_handles")
        if handles is None:
            handles = {}
            cls._st_l2_handles = handles  # type: ignore[attr-defined]
        handle = handles.get(id(worker))
        if handle is None:
            handle = handles[id(worker)] = worker.register(callable_obj)

        test_args = self.generate_args(params)
        chip_args, output_names = _build_l2_ref_args(test_args, orch_sig, worker)
        golden_args = None if skip_golden else self._golden(test_args, params)
        initial = {n: _clone(getattr(test_args, n)) for n in output_names} if rounds > 1 else {}
        for round_idx in range(rounds):
            if round_idx > 0:
                for name, value in initial.items():
                    _copy_into(getattr(test_args, name), value)
            config = self._build_config(config_dict, output_prefix=output_prefix, **diag)
            with _temporary_env(self._resolve_env()):
                worker.run(handle, chip_args, config=config)
                report = worker.last_report
            if report is not None:
                self.on_report(case, report)
            if golden_args is not None:
                self.compare_outputs(test_args, golden_args, output_names, params)

    def _run_and_validate_l3(self, worker: Any, compiled_callables: Mapping[str, Any], sub_handles: Mapping[str, Any], case: Mapping[str, Any], rounds: int = 1, skip_golden: bool = False, output_prefix: str = "", **diag: Any) -> None:
        if diag.get("enable_chip_swimlane"):
            raise NotImplementedError("L3 profiling is not supported yet (one swimlane file per chip process)")
        params = case.get("params", {})
        config_dict = case.get("config", {})
        skip_golden = skip_golden or bool(case.get("skip_golden", self.SKIP_GOLDEN))
        test_args = self.generate_args(params)
        golden_args = None if skip_golden else self._golden(test_args, params)
        rehosted = _RehostedTaskArgs(worker, test_args)
        try:
            names = test_args.tensor_names()
            initial = {n: _clone(getattr(test_args, n)) for n in names} if rounds > 1 else {}
            ns = CallableNamespace({**compiled_callables, **sub_handles})
            orch_fn = self.CALLABLE["orchestration"]
            for round_idx in range(rounds):
                if round_idx > 0:
                    for name, value in initial.items():
                        _copy_into(getattr(test_args, name), value)
                config = self._build_config(config_dict, output_prefix=output_prefix, **diag)

                def task_orch(orch: Any, _args: Any, _cfg: Any, _ns: Any = ns, _ta: Any = test_args, _config: Any = config) -> None:
                    orch_fn(orch, _ns, _ta, _config)

                with _temporary_env(self._resolve_env()):
                    worker.run(task_orch)
                    report = worker.last_report
                if report is not None:
                    self.on_report(case, report)
                if golden_args is not None:
                    self.compare_outputs(test_args, golden_args, names, params)
        finally:
            rehosted.release()

    # -- pytest ----------------------------------------------------------------------------
    @staticmethod
    def _effective_enable_dep_gen(request: Any) -> bool:
        """``--enable-dep-gen`` as the runs see it (off when ``--rounds`` > 1), for hooks
        of subclasses."""
        opt = request.config.getoption
        return bool(opt("--enable-dep-gen", default=False)) and int(opt("--rounds", default=1) or 1) <= 1

    def _matching_cases(self, st_platform: str, request: Any) -> List[Dict[str, Any]]:
        selectors = [_parse_case_selector(v) for v in (request.config.getoption("--case", default=None) or [])]
        manual_mode = request.config.getoption("--manual", default="exclude") or "exclude"
        return [c for c in self.CASES if _case_selected(type(self).__name__, c, st_platform, selectors, manual_mode)]

    def test_run(self, st_platform: str, st_worker: Any, request: Any) -> None:
        """pytest: run the class's cases selected for the platform (``--case``,
        ``--manual``), each ``--rounds`` times."""
        matched = self._matching_cases(st_platform, request)
        if not matched:
            import pytest

            manual_mode = request.config.getoption("--manual", default="exclude")
            pytest.skip(f"No cases matched {type(self).__name__} (platform={st_platform}, manual={manual_mode})")
        opt = request.config.getoption
        rounds = int(opt("--rounds", default=1) or 1)
        diag = _effective_diagnostics(
            rounds,
            _Diagnostics(
                int(opt("--enable-chip-swimlane", default=0) or 0),
                int(opt("--dump-args", default=0) or 0),
                int(opt("--enable-pmu", default=0) or 0),
                bool(opt("--enable-dep-gen", default=False)),
                bool(opt("--enable-scope-stats", default=False)),
            ),
        )
        if self._st_level == 3:
            callable_obj: Any = dict(getattr(type(self), "_st_chip_handles", {}))
        else:
            callable_obj = self.build_callable(st_platform)
        run_class_cases(
            st_worker,
            self,
            matched,
            callable_obj=callable_obj,
            sub_handles=getattr(type(self), "_st_sub_handles", {}),
            rounds=rounds,
            skip_golden=bool(opt("--skip-golden", default=False)),
            diagnostics=diag,
        )

    # -- standalone ------------------------------------------------------------------------
    @staticmethod
    def run_module(module_name: str) -> None:
        """Standalone entry: ``SceneTestCase.run_module(__name__)`` runs the module's scene
        classes (``-p/--platform``, ``--case``, ``--rounds``, ``--manual``, ``--skip-golden``,
        the diagnostics flags); exits 0 when every case passed, 1 otherwise, 2 on a usage error."""
        sys.exit(_run_module(module_name, sys.argv[1:]))


def run_class_cases(worker: Any, cls_inst: SceneTestCase, cases: Sequence[Mapping[str, Any]], *, callable_obj: Any, sub_handles: Mapping[str, Any], rounds: int, skip_golden: bool, diagnostics: _Diagnostics = _Diagnostics()) -> None:
    """Run ``cases`` of one class on ``worker``; the first failure propagates. With a
    diagnostics flag on, each case writes under its own ``outputs/<Class>_<case>_<time>/``."""
    cls_name = type(cls_inst).__name__
    for case in cases:
        prefix = str(_output_prefix(f"{cls_name}_{case.get('name', '')}")) if diagnostics.any() else ""
        cls_inst._run_and_validate(
            worker,
            callable_obj,
            case,
            sub_handles=sub_handles,
            rounds=rounds,
            skip_golden=skip_golden,
            enable_chip_swimlane=diagnostics.chip_swimlane,
            enable_dump_args=diagnostics.dump_args,
            enable_pmu=diagnostics.pmu,
            enable_dep_gen=diagnostics.dep_gen,
            enable_scope_stats=diagnostics.scope_stats,
            output_prefix=prefix,
        )


def _discover_module_test_classes(module: Any) -> List[type]:
    return [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, SceneTestCase) and v is not SceneTestCase and v.__module__ == module.__name__ and hasattr(v, "_st_level")
    ]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Run the scene tests of this file on taskring's simulated chip.")
    p.add_argument("-p", "--platform", required=True)
    p.add_argument("-d", "--device", default="0", help="first device id (taskring's chips are simulated)")
    p.add_argument("--case", action="append", default=None, help="Foo, Cls::Foo or Cls:: (repeatable)")
    p.add_argument("--manual", choices=["exclude", "include", "only"], default="exclude")
    p.add_argument("--rounds", type=int, default=1, help="run each case N times (outputs reset between rounds)")
    p.add_argument("--skip-golden", action="store_true")
    p.add_argument("--enable-chip-swimlane", nargs="?", const=4, default=0, type=int)
    p.add_argument("--dump-args", nargs="?", const=1, default=0, type=int)
    p.add_argument("--enable-pmu", nargs="?", const=2, default=0, type=int)
    p.add_argument("--enable-dep-gen", action="store_true")
    p.add_argument("--enable-scope-stats", action="store_true")
    p.add_argument("--runtime", default=None)
    p.add_argument("--level", type=int, choices=[2, 3], default=None)
    p.add_argument("-x", "--exitfirst", action="store_true")
    p.add_argument("--max-parallel", default="auto", help="accepted for compatibility; cases run in this process")
    p.add_argument("--log-level", default=None, help="accepted for compatibility")
    return p


def _first_device(raw: str) -> int:
    head = str(raw).split(",")[0].split("-")[0].strip()
    try:
        return int(head)
    except ValueError:
        return 0


def _run_module(module_name: str, argv: Sequence[str]) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    if args.rounds < 1:
        print(f"ERROR: --rounds must be >= 1, got {args.rounds}", file=sys.stderr)
        return 2
    diag = _effective_diagnostics(args.rounds, _Diagnostics(args.enable_chip_swimlane, args.dump_args, args.enable_pmu, args.enable_dep_gen, args.enable_scope_stats))
    module = sys.modules[module_name]
    classes = _discover_module_test_classes(module)
    if args.runtime is not None:
        classes = [c for c in classes if getattr(c, "_st_runtime", None) == args.runtime]
    if args.level is not None:
        classes = [c for c in classes if getattr(c, "_st_level", None) == args.level]
    if not classes:
        print(f"No matching classes (runtime={args.runtime}, level={args.level})", file=sys.stderr)
        return 0
    selectors = [_parse_case_selector(v) for v in (args.case or [])]
    try:
        selected = _select_cases(classes, args.platform, selectors, args.manual)
    except ValueError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 2
    by_cls: Dict[type, List[Dict[str, Any]]] = {}
    for cls, case in selected:
        by_cls.setdefault(cls, []).append(case)
    if diag.chip_swimlane and any(c._st_level == 3 for c in by_cls):  # type: ignore[attr-defined]
        print("ERROR: --enable-chip-swimlane is not supported for L3 tests", file=sys.stderr)
        return 2
    first = _first_device(args.device)
    passed = failed = 0
    for cls, cases in by_cls.items():
        level = cls._st_level  # type: ignore[attr-defined]
        print(f"\n=== Runtime: {cls._st_runtime}  Level: {int(level)} ===")  # type: ignore[attr-defined]
        subs: Dict[str, Any] = {}
        chips: Dict[str, Any] = {}
        try:
            if level == 2:
                worker = cls._create_worker(args.platform, first)  # type: ignore[attr-defined]
            else:
                worker, subs, chips = _l3_worker(cls, cases, args.platform, first)
        except Exception as e:
            print(f"  {cls.__name__} FAILED: {type(e).__name__}: {e}", flush=True)
            failed += len(cases)
            if args.exitfirst:
                return 1
            continue
        try:
            inst = cls()
            callable_obj = chips if level == 3 else None
            for case in cases:
                label = f"{cls.__name__}::{case.get('name')}"
                print(f"  {label} ...", flush=True)
                try:
                    if callable_obj is None:
                        callable_obj = inst.build_callable(args.platform)
                    run_class_cases(worker, inst, [case], callable_obj=callable_obj, sub_handles=subs, rounds=args.rounds, skip_golden=args.skip_golden, diagnostics=diag)
                    print(f"  {label} PASSED", flush=True)
                    passed += 1
                except Exception as e:
                    print(f"  {label} FAILED: {type(e).__name__}: {e}", flush=True)
                    if not isinstance(e, AssertionError):
                        traceback.print_exc(file=sys.stderr)
                    failed += 1
                    if args.exitfirst:
                        return 1
        finally:
            worker.close()
    print(f"\n{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


# ----- the st_worker fixture (pytest) ---------------------------------------------------------

_pytest: Any
try:
    import pytest as _pytest
except ImportError:  # pragma: no cover - standalone runs need no pytest
    _pytest = None

if _pytest is not None:

    def _st_worker(self: SceneTestCase, request: Any, st_platform: str) -> Iterator[Any]:
        """The class's worker: level 2 a pooled ``Worker(level=2)`` per (platform,
        runtime); level 3 a ``Worker(level=3)`` for this test, sized over the class's
        cases, with its callables registered before ``init()``."""
        cls = type(self)
        if not hasattr(cls, "_st_level"):
            _pytest.skip("st_worker requires SceneTestCase")
        first = _first_device(request.config.getoption("--device", default="0") or "0")
        if cls._st_level == 2:
            yield _pooled_l2_worker(st_platform, cls._st_runtime, first)
            return
        w, subs, chips = _l3_worker(cls, cls.CASES, st_platform, first)
        cls._st_sub_handles = subs  # type: ignore[attr-defined]
        cls._st_chip_handles = chips  # type: ignore[attr-defined]
        try:
            yield w
        finally:
            w.close()

    SceneTestCase.st_worker = _pytest.fixture(name="st_worker")(_st_worker)  # type: ignore[attr-defined]
