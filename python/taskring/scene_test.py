"""Scene tests: one test class, several cases, each with its own ring sizing (docs/api.md §5).

Declaring a test::

    from taskring.scene_test import SceneTestCase, scene_test, main

    @scene_test(level=2)
    class TestVectorAdd(SceneTestCase):
        PROGRAM = vector_add                     # a taskring.Program (level 2)
        CASES = [
            {"name": "default", "params": {"n": 1024}},
            {"name": "small_rings", "params": {"n": 1024},
             "config": {"runtime_env": {"ring_task_window": 64, "ring_heap": [0, 1 << 16, 0, 0]}}},
        ]
        RTOL = 1e-5
        ATOL = 1e-5

        def generate_args(self, params):         # name -> array, in the program's argument order
            ...
        def compute_golden(self, args, params):  # fill the expected outputs into ``args`` (copies)
            ...

    if __name__ == "__main__":
        main()                                   # python test_x.py [--case NAME] [--rounds N]

Level 3: ``CHIPS = {name: Program}`` and ``ORCHESTRATION(o, chips, args, cfg)`` (a class
attribute, called without ``self``; a plain function in the class body or a
``staticmethod``). ``chips`` is a namespace of the registered handles
(``chips.<name>``); ``args`` is a ``SceneArgs`` (the generated arguments, copied into
``taskring.shared_array``s, by name: ``args["x"]`` or ``args.x``, in order with
``args.values()``); ``cfg`` is the case's ``CallConfig``, to be passed (or a
``cfg.derive(...)`` of it) to ``o.submit_next_level``. The harness never passes it to the
chips itself, and runs the node with no run-level config (as upstream).

Case keys: ``name`` (a missing name shows as ``index {i}`` in messages and ``index_{i}``
in test ids), ``params`` (free-form, handed to the hooks), ``config`` (strict, below),
``skip_golden`` (optional bool); every other key is free for extensions.

``config`` keys (strict; checked when the class is decorated):

- ``aicpu_thread_num`` -> ``CallConfig.aicpu_thread_num``;
- ``runtime_env``: a mapping with ``ring_task_window`` / ``ring_heap`` / ``ring_dep_pool``,
  each a scalar (all four rings) or a list of 4 (``0`` = fall through to the
  ``PTO2_RING_*`` env / the default for that ring); absent keys stay 0;
- ``device_count`` (level 3, int >= 1, default 1) and ``num_sub_workers`` (level 3,
  int >= 0, default 0): the class's one ``Worker(level=3)`` gets
  ``device_ids=range(max device_count)`` and ``num_sub_workers=max(num_sub_workers)``
  over its cases (under pytest: all the class's cases; standalone: the selected ones).
  At level 2 they are type-checked and otherwise ignored.

Errors at decoration (``{Cls}`` = class name, ``{name!r}`` = case name repr, ``{type}`` =
``type(x).__name__``, ``{keys}`` = the offending keys, each rendered with ``str()`` when
it is a ``str`` and ``repr()`` otherwise, sorted by that rendering, joined by ``", "``)::

    TypeError("{Cls}.CASES[{i}] must be a mapping, got {type}")
    TypeError("{Cls}.CASES[{i}] ({name!r}) config must be a mapping, got {type}")
    ValueError("{Cls}.CASES[{i}] ({name!r}) config has unknown keys: {keys}; allowed keys: aicpu_thread_num, device_count, num_sub_workers, runtime_env")
    TypeError("{Cls}.CASES[{i}] ({name!r}) config.runtime_env must be a mapping, got {type}")
    ValueError("{Cls}.CASES[{i}] ({name!r}) config.runtime_env has unknown keys: {keys}; allowed keys: ring_dep_pool, ring_heap, ring_task_window")

(checked in that order per case, cases in order, first failure wins). Ring and thread
*values* are not checked here: the case's ``CallConfig`` is built and
``CallConfig.validate()``-ed when the case runs, so a bad value fails that case only,
with the ``RuntimeEnv`` / ``CallConfig`` messages of docs/api.md §1.2.

Each run (every case, every round) gets a fresh ``CallConfig`` built from its
``config`` only. The harness never reads or writes ``os.environ``: ring entries a case
leaves at 0 are resolved by the runtime (``PTO2_RING_*`` env of the process that runs
the chip, then the defaults), as for any dispatch.

Golden: ``generate_args(params)`` runs once per case; ``compute_golden(args, params)``
gets deep copies of the generated arrays and fills in the expected outputs (it may also
return a mapping of replacements). Compared outputs: level 2 the ``OUT``/``INOUT``
arguments of ``PROGRAM``, level 3 every array argument; ``OUTPUTS = [names]`` overrides.
The default ``compare_outputs(actual, expected, output_names, params)`` applies
``numpy.allclose(actual, expected, rtol=RTOL, atol=ATOL)`` per output and raises
``AssertionError("Golden mismatch on '{name}': max_diff={d:g}, rtol={RTOL}, atol={ATOL}")``
(or ``... on '{name}': shape {actual} != expected {expected}``). ``on_report(case,
report)`` (optional) is called after every run with the case mapping and the
``RunReport`` (level 2) / ``NodeRunReport`` (level 3), before the comparison.
``SKIP_GOLDEN = True`` or a case's ``"skip_golden": True`` skip the comparison.

Rounds: every array argument is restored to its generated value before each round after
the first (so INOUT accumulators start over); each round is compared.

pytest: ``@scene_test`` adds one method ``test_<case name>`` per case (non-identifier
characters become ``_``), so each case is its own test id
(``test_x.py::TestVectorAdd::test_small_rings``). Name the class ``Test...``. The class's
worker is created on its first case and closed by ``teardown_class`` (if you define
your own ``teardown_class``, call ``super().teardown_class()``). After a case fails, the
worker is asked for every chip's arena statistics; when one does not answer (a chip
died or stopped), the worker is closed and the next case gets a new one, so such a case
fails alone (pytest and standalone alike).

Standalone: ``main()`` runs the decorated classes of ``__main__``::

    python test_x.py [--case SEL]... [--rounds N] [--list]

``SEL`` is ``NAME`` (that case in every class), ``Cls::NAME`` or ``Cls::`` (all of a
class). One line per case and round (``PASS Cls::name [round r/N] 1.23 ms`` or
``FAIL Cls::name [round r/N]: Error: text``), then ``N passed, M failed``. Exit code 0
when everything passed, 1 when a case failed, 2 on a usage error (including a
``--case`` that selects nothing).
"""

from __future__ import annotations

import argparse
import atexit
import copy as _copy
import inspect
import re
import sys
import time
import traceback
import types
from typing import Any, Callable, ClassVar, Dict, Iterable, List, Mapping, Optional, Sequence, TextIO, Tuple, Type

import numpy as np

from ._chip import ChipWorker
from ._native import CallConfig
from ._program import Program
from ._shared import shared_array
from ._types import INOUT, OUT
from ._worker import Worker

__all__ = [
    "SceneArgs",
    "SceneTestCase",
    "main",
    "run_module",
    "run_scene_classes",
    "scene_test",
]

_CASE_CONFIG_KEYS = frozenset({"aicpu_thread_num", "runtime_env", "device_count", "num_sub_workers"})
_RUNTIME_ENV_KEYS = frozenset({"ring_task_window", "ring_heap", "ring_dep_pool"})


# ----- validation at decoration ----------------------------------------------------


def _render_keys(keys: Iterable[Any]) -> str:
    shown = sorted(k if isinstance(k, str) else repr(k) for k in keys)
    return ", ".join(shown)


def _case_name(case: Mapping[str, Any], i: int) -> str:
    name = case.get("name")
    return f"index {i}" if name is None else str(name)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _validate_cases(cls: "Type[SceneTestCase]") -> None:
    cname = cls.__name__
    cases = getattr(cls, "CASES", None)
    if isinstance(cases, (str, bytes)) or not isinstance(cases, Sequence):
        raise TypeError(f"{cname}.CASES must be a list of mappings, got {type(cases).__name__}")
    if not cases:
        raise ValueError(f"{cname}.CASES is empty; a scene test needs at least one case")
    allowed_cfg = ", ".join(sorted(_CASE_CONFIG_KEYS))
    allowed_env = ", ".join(sorted(_RUNTIME_ENV_KEYS))
    seen: Dict[str, int] = {}
    for i, case in enumerate(cases):
        if not isinstance(case, Mapping):
            raise TypeError(f"{cname}.CASES[{i}] must be a mapping, got {type(case).__name__}")
        name = _case_name(case, i)
        where = f"{cname}.CASES[{i}] ({name!r})"
        if "config" in case:
            cfg = case["config"]
            if not isinstance(cfg, Mapping):
                raise TypeError(f"{where} config must be a mapping, got {type(cfg).__name__}")
            unknown = [k for k in cfg if k not in _CASE_CONFIG_KEYS]
            if unknown:
                raise ValueError(f"{where} config has unknown keys: {_render_keys(unknown)}; allowed keys: {allowed_cfg}")
            if "runtime_env" in cfg:
                env = cfg["runtime_env"]
                if not isinstance(env, Mapping):
                    raise TypeError(f"{where} config.runtime_env must be a mapping, got {type(env).__name__}")
                unknown = [k for k in env if k not in _RUNTIME_ENV_KEYS]
                if unknown:
                    raise ValueError(
                        f"{where} config.runtime_env has unknown keys: {_render_keys(unknown)}; allowed keys: {allowed_env}"
                    )
            # Harness-owned values (they never reach a CallConfig): checked here.
            if "device_count" in cfg and (not _is_int(cfg["device_count"]) or cfg["device_count"] < 1):
                raise ValueError(f"{where} config.device_count must be an int >= 1, got {cfg['device_count']!r}")
            if "num_sub_workers" in cfg and (not _is_int(cfg["num_sub_workers"]) or cfg["num_sub_workers"] < 0):
                raise ValueError(f"{where} config.num_sub_workers must be an int >= 0, got {cfg['num_sub_workers']!r}")
        if "params" in case and case["params"] is not None and not isinstance(case["params"], Mapping):
            raise TypeError(f"{where} params must be a mapping, got {type(case['params']).__name__}")
        ident = _test_ident(name)
        if ident in seen:
            raise ValueError(
                f"{where} has the same test name 'test_{ident}' as {cname}.CASES[{seen[ident]}]; case names must be distinct"
            )
        seen[ident] = i


def _test_ident(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    return ident or "_"


def _orchestration(cls: "Type[SceneTestCase]") -> Optional[Callable]:
    raw = inspect.getattr_static(cls, "ORCHESTRATION", None)
    if isinstance(raw, (staticmethod, classmethod)):
        return getattr(cls, "ORCHESTRATION")
    return raw


def _validate_class(cls: "Type[SceneTestCase]", level: int) -> None:
    cname = cls.__name__
    if level == 2:
        prog = getattr(cls, "PROGRAM", None)
        if not isinstance(prog, Program):
            raise TypeError(f"{cname}.PROGRAM must be a taskring.Program (level 2), got {type(prog).__name__}")
    else:
        orch = _orchestration(cls)
        if not callable(orch):
            raise TypeError(f"{cname}.ORCHESTRATION must be a callable orch(o, chips, args, cfg) (level 3), got {type(orch).__name__}")
        chips = getattr(cls, "CHIPS", None)
        if not isinstance(chips, Mapping) or not chips:
            raise TypeError(f"{cname}.CHIPS must be a non-empty mapping name -> taskring.Program (level 3), got {type(chips).__name__}")
        for k, v in chips.items():
            if not isinstance(k, str) or not k.isidentifier():
                raise ValueError(f"{cname}.CHIPS key {k!r} must be a Python identifier (it becomes chips.<name>)")
            if not isinstance(v, Program):
                raise TypeError(f"{cname}.CHIPS[{k!r}] must be a taskring.Program, got {type(v).__name__}")


# ----- the decorator ---------------------------------------------------------------


def scene_test(level: int = 2) -> Callable[[type], type]:
    """Class decorator: validate ``CASES`` (see the module doc) and add one
    ``test_<case name>`` method per case."""
    if isinstance(level, bool) or level not in (2, 3):
        raise ValueError(f"scene_test level must be 2 or 3, got {level!r}")

    def wrap(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, SceneTestCase)):
            raise TypeError(f"@scene_test decorates a SceneTestCase subclass, got {cls!r}")
        _validate_cases(cls)
        _validate_class(cls, level)
        cls._scene_level = level
        cls._scene_cases = tuple(cls.CASES)
        for i, case in enumerate(cls._scene_cases):
            attr = f"test_{_test_ident(_case_name(case, i))}"
            existing = cls.__dict__.get(attr)
            if existing is not None and not getattr(existing, "_scene_generated", False):
                raise ValueError(f"{cls.__name__}.{attr} already exists; it would hide the test of CASES[{i}]")
            setattr(cls, attr, _make_test(i, attr))
        return cls

    return wrap


def _make_test(index: int, attr: str) -> Callable:
    def test(self: "SceneTestCase") -> None:
        self.run_case(index)

    test.__name__ = attr
    test.__qualname__ = attr
    test._scene_generated = True  # type: ignore[attr-defined]
    return test


# ----- arguments --------------------------------------------------------------------


class SceneArgs(dict):
    """The arguments of a case by name (in ``generate_args`` order), also as attributes
    (``args.x``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no argument named {name!r}") from None


def _is_array(v: Any) -> bool:
    return isinstance(v, np.ndarray)


def _build_call_config(config: Mapping[str, Any]) -> "CallConfig":
    """A fresh CallConfig from a case's ``config`` (values checked by validate())."""
    cc = CallConfig()
    if "aicpu_thread_num" in config:
        cc.aicpu_thread_num = config["aicpu_thread_num"]
    env = cc.runtime_env  # by reference
    for key, value in (config.get("runtime_env") or {}).items():
        setattr(env, key, list(value) if isinstance(value, tuple) else value)
    cc.validate()
    return cc


# ----- per-class resources ----------------------------------------------------------


class _ClassResources:
    """The one worker of a scene class (a ChipWorker at level 2, a Worker(level=3)),
    sized over ``cases``. ``close()`` ends it; ``start()`` makes a new one."""

    def __init__(self, cls: "Type[SceneTestCase]", cases: Sequence[Mapping[str, Any]]):
        self.cls = cls
        self.cases = tuple(cases)
        self.level = cls._scene_level
        self.chip: Optional[ChipWorker] = None
        self.worker: Optional[Worker] = None
        self.chips: Optional[types.SimpleNamespace] = None
        self.start()

    @property
    def closed(self) -> bool:
        return self.chip is None and self.worker is None

    def start(self) -> None:
        """Create the worker (when there is none)."""
        if not self.closed:
            return
        if self.level == 2:
            self.chip = ChipWorker(prewarm=False)
        else:
            cfgs = [c.get("config") or {} for c in self.cases]
            n = max([c.get("device_count", 1) for c in cfgs] or [1])
            subs = max([c.get("num_sub_workers", 0) for c in cfgs] or [0])
            w = Worker(level=3, device_ids=list(range(n)), num_sub_workers=subs)
            ns = types.SimpleNamespace()
            for name, prog in self.cls.CHIPS.items():
                setattr(ns, name, w.register(prog))
            try:
                w.init()
            except BaseException:
                w.close()
                raise
            self.worker, self.chips = w, ns

    def usable(self) -> bool:
        """Whether the worker still answers: every chip gives its arena statistics (a
        chip that died or stopped answering raises instead)."""
        try:
            if self.chip is not None:
                self.chip.arena_stats
                return True
            if self.worker is not None:
                for i in range(len(self.worker.device_ids)):
                    self.worker.arena_stats(i)
                return True
        except Exception:
            pass
        return False

    def close(self) -> None:
        if self.chip is not None:
            self.chip.close()
            self.chip = None
        if self.worker is not None:
            self.worker.close()
            self.worker = None


_RESOURCES: Dict["Type[SceneTestCase]", _ClassResources] = {}


def _resources(cls: "Type[SceneTestCase]", cases: Optional[Sequence[Mapping[str, Any]]] = None) -> _ClassResources:
    res = _RESOURCES.get(cls)
    if res is None:
        res = _ClassResources(cls, cls._scene_cases if cases is None else cases)
        _RESOURCES[cls] = res
    else:
        res.start()  # a new worker after one a failed case left unusable
    return res


def _close(cls: "Type[SceneTestCase]") -> None:
    res = _RESOURCES.pop(cls, None)
    if res is not None:
        res.close()


@atexit.register
def _close_all() -> None:
    for cls in list(_RESOURCES):
        try:
            _close(cls)
        except Exception:
            pass


# ----- the base class ---------------------------------------------------------------


class SceneTestCase:
    """Base class of scene tests; decorate subclasses with ``@scene_test(level=...)``."""

    CASES: List[Dict[str, Any]] = []
    RTOL: float = 1e-5
    ATOL: float = 1e-5
    SKIP_GOLDEN: bool = False
    OUTPUTS: Optional[Sequence[str]] = None
    PROGRAM: Optional["Program"] = None  # level 2
    CHIPS: Dict[str, "Program"] = {}  # level 3
    ORCHESTRATION: Optional[Callable] = None  # level 3: orch(o, chips, args, cfg)
    # Set by @scene_test:
    _scene_level: ClassVar[int]
    _scene_cases: ClassVar[Tuple[Dict[str, Any], ...]]

    # -- hooks ---------------------------------------------------------------------
    def generate_args(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        """Hook (required): the case's arguments, name -> array or scalar, in the
        program's argument order. Runs once per case."""
        raise NotImplementedError(f"{type(self).__name__}.generate_args(params) is not defined")

    def compute_golden(self, args: Dict[str, Any], params: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
        """Hook (required unless golden is skipped): fill the expected outputs into
        ``args`` (deep copies of the generated ones), or return a mapping of replacements."""
        raise NotImplementedError(f"{type(self).__name__}.compute_golden(args, params) is not defined")

    def compare_outputs(self, actual: Mapping[str, Any], expected: Mapping[str, Any], output_names: Sequence[str], params: Mapping[str, Any]) -> Optional[bool]:
        """Raise AssertionError unless every output in ``output_names`` matches
        (same shape, ``numpy.allclose`` with ``RTOL``/``ATOL``)."""
        rtol, atol = self.RTOL, self.ATOL
        for name in output_names:
            a = np.asarray(actual[name])
            e = np.asarray(expected[name])
            if a.shape != e.shape:
                raise AssertionError(f"Golden mismatch on '{name}': shape {a.shape} != expected {e.shape}")
            if not np.allclose(a, e, rtol=rtol, atol=atol):
                d = float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64)))) if a.size else 0.0
                raise AssertionError(f"Golden mismatch on '{name}': max_diff={d:g}, rtol={rtol}, atol={atol}")
        return None

    def on_report(self, case: Mapping[str, Any], report: Any) -> None:
        """Called after every run of a case with its RunReport / NodeRunReport."""

    # -- pytest (xunit-style class teardown) ---------------------------------------
    @classmethod
    def teardown_class(cls) -> None:
        """pytest class teardown: close the class's worker."""
        _close(cls)

    # -- running -------------------------------------------------------------------
    @classmethod
    def case_names(cls) -> List[str]:
        """The case names in ``CASES`` order (``index {i}`` for an unnamed case)."""
        return [_case_name(c, i) for i, c in enumerate(cls._scene_cases)]

    def run_case(self, case: Any, rounds: int = 1, *, report: Optional[Callable[[int, float], None]] = None) -> None:
        """Run one case (an index or a name) ``rounds`` times; raises on the first
        failure. ``report(round, seconds)`` is called after each passing round."""
        cls = type(self)
        if not hasattr(cls, "_scene_cases"):
            raise TypeError(f"{cls.__name__} is not decorated with @scene_test")
        index = case if _is_int(case) else self._case_index(case)
        case_map = cls._scene_cases[index]
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
        res = _resources(cls)
        params = case_map.get("params") or {}

        gen = self.generate_args(params)
        if not isinstance(gen, Mapping):
            raise TypeError(f"{cls.__name__}.generate_args must return a mapping name -> array, got {type(gen).__name__}")
        host = SceneArgs(gen)
        initial = {k: v.copy() for k, v in host.items() if _is_array(v)}
        outputs = self._output_names(host)
        skip = bool(cls.SKIP_GOLDEN or case_map.get("skip_golden", False))
        expected: Dict[str, Any] = {}
        if not skip:
            expected = SceneArgs({k: (v.copy() if _is_array(v) else _copy.deepcopy(v)) for k, v in host.items()})
            ret = self.compute_golden(expected, params)
            if isinstance(ret, Mapping):
                expected.update(ret)

        shared: Optional[SceneArgs] = None
        if res.level == 3:
            shared = SceneArgs()
            for k, v in host.items():
                if _is_array(v):
                    s = shared_array(v.shape, v.dtype)
                    shared[k] = s
                else:
                    shared[k] = v

        try:
            self._run_rounds(res, case_map, host, initial, shared, expected, outputs, skip, rounds, report)
        except Exception:
            # A case that leaves the worker unusable (a chip died) fails alone: the
            # worker is closed here and the next case gets a new one.
            if not res.usable():
                res.close()
            raise

    def _run_rounds(
        self,
        res: _ClassResources,
        case_map: Mapping[str, Any],
        host: SceneArgs,
        initial: Mapping[str, Any],
        shared: Optional[SceneArgs],
        expected: Mapping[str, Any],
        outputs: Sequence[str],
        skip: bool,
        rounds: int,
        report: Optional[Callable[[int, float], None]],
    ) -> None:
        cls = type(self)
        params = case_map.get("params") or {}
        config = case_map.get("config") or {}
        for r in range(rounds):
            if r > 0:
                for k, v in initial.items():
                    host[k][...] = v
            cfg = _build_call_config(config)  # fresh every run
            t0 = time.perf_counter()
            if res.level == 2:
                assert res.chip is not None and cls.PROGRAM is not None  # checked by @scene_test
                rep = res.chip.run(cls.PROGRAM, *host.values(), config=cfg)
            else:
                orch = _orchestration(cls)
                chips = res.chips
                assert res.worker is not None and orch is not None and shared is not None  # level 3
                for k, v in host.items():
                    if _is_array(v):
                        shared[k][...] = v
                rep = res.worker.run(lambda o, _a, _c: orch(o, chips, shared, cfg))
                for k, v in host.items():
                    if _is_array(v):
                        v[...] = shared[k]
            dt = time.perf_counter() - t0
            self.on_report(case_map, rep)
            if not skip:
                ok = self.compare_outputs(host, expected, outputs, params)
                if ok is False:
                    raise AssertionError(f"{cls.__name__}.compare_outputs reported a mismatch")
            if report is not None:
                report(r, dt)

    def _case_index(self, name: str) -> int:
        names = type(self).case_names()
        if name not in names:
            raise KeyError(f"{type(self).__name__} has no case {name!r} (cases: {', '.join(names)})")
        return names.index(name)

    def _output_names(self, host: Mapping[str, Any]) -> List[str]:
        cls = type(self)
        if cls.OUTPUTS is not None:
            missing = [n for n in cls.OUTPUTS if n not in host]
            if missing:
                raise KeyError(f"{cls.__name__}.OUTPUTS names unknown arguments: {', '.join(missing)}")
            return list(cls.OUTPUTS)
        names = list(host)
        if cls._scene_level == 2:
            assert cls.PROGRAM is not None  # checked by @scene_test
            sig = cls.PROGRAM.signature
            if len(sig) != len(names):
                raise TypeError(
                    f"{cls.__name__}.generate_args returned {len(names)} arguments ({', '.join(names)}); "
                    f"{cls.PROGRAM.name} takes {len(sig)} ({', '.join(s.name for s in sig)})"
                )
            return [n for n, d in zip(names, sig) if d in (OUT, INOUT)]
        return [n for n in names if _is_array(host[n])]


# ----- standalone -------------------------------------------------------------------


def _scene_classes(module: types.ModuleType) -> List["Type[SceneTestCase]"]:
    out = []
    for v in vars(module).values():
        if (
            isinstance(v, type)
            and issubclass(v, SceneTestCase)
            and "_scene_level" in v.__dict__
            and v.__module__ == module.__name__
        ):
            out.append(v)
    return out


def _select(classes: Sequence["Type[SceneTestCase]"], selectors: Sequence[str]) -> Tuple[List[Tuple["Type[SceneTestCase]", List[int]]], List[str]]:
    plan: List[Tuple["Type[SceneTestCase]", List[int]]] = []
    used = set()
    for cls in classes:
        idx = []
        for i, name in enumerate(cls.case_names()):
            hit = not selectors
            for sel in selectors:
                if "::" in sel:
                    cname, _, cname_case = sel.partition("::")
                    ok = cname == cls.__name__ and (cname_case == "" or cname_case == name)
                else:
                    ok = sel == name
                if ok:
                    used.add(sel)
                    hit = True
            if hit:
                idx.append(i)
        if idx:
            plan.append((cls, idx))
    unmatched = [s for s in selectors if s not in used]
    return plan, unmatched


def run_scene_classes(classes: Sequence["Type[SceneTestCase]"], selectors: Sequence[str] = (), rounds: int = 1, out: Optional[TextIO] = None) -> int:
    """Run the selected cases of ``classes`` (standalone mode); returns the exit code
    (0 all passed, 1 a case failed, 2 a selector matched nothing)."""
    out = out or sys.stdout
    plan, unmatched = _select(classes, selectors)
    if unmatched:
        print(f"error: --case {', '.join(unmatched)} matched no case", file=sys.stderr)
        avail = [f"{c.__name__}::{n}" for c in classes for n in c.case_names()]
        print(f"available: {', '.join(avail) or '(none)'}", file=sys.stderr)
        return 2
    passed = failed = 0
    for cls, idx in plan:
        cases = [cls._scene_cases[i] for i in idx]
        try:
            _resources(cls, cases)  # sized over the selected cases
            inst = cls()
            for i in idx:
                cid = f"{cls.__name__}::{_case_name(cls._scene_cases[i], i)}"

                done = [0]  # rounds passed so far

                def line(r: int, dt: float, cid: str = cid, done: list = done) -> None:
                    done[0] = r + 1
                    print(f"PASS {cid} [round {r + 1}/{rounds}] {dt * 1e3:.2f} ms", file=out, flush=True)

                try:
                    inst.run_case(i, rounds, report=line)
                    passed += 1
                except Exception as e:  # one case failing does not stop the others
                    failed += 1
                    print(f"FAIL {cid} [round {done[0] + 1}/{rounds}]: {type(e).__name__}: {e}", file=out, flush=True)
                    if not isinstance(e, AssertionError):
                        traceback.print_exc(file=sys.stderr)
        except Exception as e:
            failed += len(idx)
            print(f"FAIL {cls.__name__}: {type(e).__name__}: {e}", file=out, flush=True)
            traceback.print_exc(file=sys.stderr)
        finally:
            _close(cls)
    print(f"{passed} passed, {failed} failed", file=out, flush=True)
    return 0 if failed == 0 else 1


def run_module(module: Any = "__main__", argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the scene classes of
    ``module``; returns the exit code."""
    mod = sys.modules[module] if isinstance(module, str) else module
    prog = None
    file = getattr(mod, "__file__", None)
    if file:
        prog = str(file).rsplit("/", 1)[-1]
    ap = argparse.ArgumentParser(prog=prog, description="Run the scene tests of this file.")
    ap.add_argument("--case", action="append", default=[], metavar="SEL", help="NAME, Cls::NAME or Cls:: (repeatable)")
    ap.add_argument("--rounds", type=int, default=1, metavar="N", help="run each case N times (outputs reset between rounds)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    try:
        ns = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:
        return int(e.code or 0)
    if ns.rounds < 1:
        print(f"error: --rounds must be >= 1, got {ns.rounds}", file=sys.stderr)
        return 2
    classes = _scene_classes(mod)
    if ns.list:
        for c in classes:
            for n in c.case_names():
                print(f"{c.__name__}::{n}")
        return 0
    return run_scene_classes(classes, ns.case, ns.rounds)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point for ``if __name__ == "__main__": main()`` in a scene test file:
    runs its decorated classes and exits with 0 (all passed), 1 (a case failed) or 2
    (usage error)."""
    sys.exit(run_module("__main__", argv))
