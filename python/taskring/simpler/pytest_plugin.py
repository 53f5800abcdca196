"""pytest plugin: ``pytest -p taskring.simpler.pytest_plugin`` runs upstream Simpler's
tests and examples on taskring. Importing it calls ``taskring.simpler.install()``
(before any test file is collected); it adds upstream's options (``--platform``,
``--device``, ``--case``, ``--manual``, ``--rounds``, ``--skip-golden``, the
diagnostics flags, ...), markers (``platforms``, ``runtime``, ``device_count``,
``manual``) and fixtures (``st_platform``, ``st_device_ids``)."""

from __future__ import annotations

from typing import Any, Iterator, List

import pytest

from . import install
from .worker import PLATFORMS, RUNTIME

install()


def parse_device_range(spec: str) -> List[int]:
    """``"0"``, ``"4-7"``, ``"0,2,5"`` or ``"0,2-4,7"`` as a sorted list of ids."""
    ids: set = set()
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            ids.update(range(int(lo), int(hi) + 1))
        else:
            ids.add(int(part))
    return sorted(ids)


def pytest_addoption(parser: Any) -> None:
    g = parser.getgroup("simpler", "upstream Simpler's options (taskring.simpler)")
    g.addoption("--platform", action="store", default=None, help="Target platform (a2a3sim or a2a3; both run taskring's simulated chip)")
    g.addoption("--device", action="store", default="0", help="Device ID or range (e.g., 0, 4-7, 0,2,5)")
    g.addoption(
        "--case",
        action="append",
        default=None,
        help="Case selector; repeatable. Forms: 'Foo' (any class), 'ClassA::Foo', 'ClassA::' (whole class).",
    )
    g.addoption(
        "--manual",
        action="store",
        choices=["exclude", "include", "only"],
        default="exclude",
        help="Manual test handling: exclude (default), include, only",
    )
    g.addoption("--runtime", action="store", default=None, help="Only run tests for this runtime")
    g.addoption("--level", action="store", type=int, default=None, choices=[2, 3, 4], help="Only run scene tests of this level")
    g.addoption("--exclude-level", action="store", type=int, default=None, choices=[2, 3, 4], help="Exclude scene tests of this level")
    g.addoption("--max-parallel", action="store", default="auto", help="Accepted for compatibility; tests run in this process")
    g.addoption("--rounds", type=int, default=1, help="Run each case N times (default: 1)")
    g.addoption("--skip-golden", action="store_true", default=False, help="Skip golden comparison (benchmark mode)")
    g.addoption("--enable-chip-swimlane", nargs="?", const=4, default=0, type=int, metavar="PERF_LEVEL", help="Enable the chip swimlane (bare flag = 4)")
    g.addoption("--dump-args", nargs="?", const=1, type=int, default=0, help="Dump per-task args (no output on taskring)")
    g.addoption("--enable-dep-gen", action="store_true", default=False, help="Write deps.json (disabled when --rounds > 1)")
    g.addoption("--enable-pmu", nargs="?", const=2, default=0, type=int, metavar="EVENT_TYPE", help="PMU collection (no output on taskring)")
    g.addoption("--enable-scope-stats", action="store_true", default=False, help="Write <output_prefix>/scope_stats/scope_stats.jsonl")
    g.addoption("--enable-swimlane-overhead", action="store_true", default=False, help="Overhead counter tracks in the swimlane")
    g.addoption("--require-pto-isa", action="store_true", default=False, help="Fail at once when PTO_ISA_ROOT is not set")
    g.addoption("--pto-session-timeout", action="store", type=int, default=0, help="Accepted for compatibility")


def pytest_configure(config: Any) -> None:
    for line in (
        "platforms(list): supported platforms for standalone ST functions",
        "runtime(name): the runtime a test needs",
        "requires_hardware: test needs Ascend toolchain and real device",
        "device_count(n): number of NPU devices needed",
        "manual(platforms=None): test runs only when --manual is include or only on selected platforms",
    ):
        config.addinivalue_line("markers", line)
    platform = config.getoption("--platform")
    if platform is not None and platform not in PLATFORMS:
        raise pytest.UsageError(f"--platform {platform!r} is not supported; taskring runs {', '.join(PLATFORMS)}")
    if config.getoption("--require-pto-isa"):
        from ..simpler_setup.pto_isa import ensure_pto_isa_root  # type: ignore[import-not-found]

        ensure_pto_isa_root()


def _is_manual(item: Any, platform: Any) -> bool:
    m = item.get_closest_marker("manual")
    if m is None:
        return False
    plats = m.kwargs.get("platforms", m.args[0] if m.args else None)
    return plats is None or platform in plats


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    platform = config.getoption("--platform")
    manual = config.getoption("--manual")
    runtime = config.getoption("--runtime")
    level, exclude_level = config.getoption("--level"), config.getoption("--exclude-level")
    for item in items:
        item_level = getattr(getattr(item, "cls", None), "_st_level", None)
        if item_level is not None:
            if level is not None and int(item_level) != level:
                item.add_marker(pytest.mark.skip(reason=f"scene test of level {int(item_level)} (--level {level})"))
            if exclude_level is not None and int(item_level) == exclude_level:
                item.add_marker(pytest.mark.skip(reason=f"scene test of level {int(item_level)} (--exclude-level {exclude_level})"))
        m = item.get_closest_marker("platforms")
        if m is not None and m.args and platform is not None and platform not in m.args[0]:
            item.add_marker(pytest.mark.skip(reason=f"not for platform {platform}"))
        r = item.get_closest_marker("runtime")
        if r is not None and r.args:
            if r.args[0] != RUNTIME:
                item.add_marker(pytest.mark.skip(reason=f"runtime {r.args[0]!r}: taskring runs {RUNTIME!r} only"))
            elif runtime is not None and runtime != r.args[0]:
                item.add_marker(pytest.mark.skip(reason=f"--runtime {runtime}"))
        if item.get_closest_marker("requires_hardware") is not None:
            item.add_marker(pytest.mark.skip(reason="needs an Ascend device; taskring simulates the chip"))
        cls: Any = getattr(item, "cls", None)
        if item_level is not None and isinstance(getattr(cls, "CASES", None), list):
            # A scene class: its cases say on which platforms and in which --manual mode it
            # runs (test_run picks the matching ones); none matching skips the class.
            if platform is not None and not any(_scene_case_runs(c, platform, manual) for c in cls.CASES):
                item.add_marker(pytest.mark.skip(reason=f"no case of {cls.__name__} for platform {platform} (--manual {manual})"))
            continue
        is_manual = _is_manual(item, platform)
        if manual == "exclude" and is_manual:
            item.add_marker(pytest.mark.skip(reason="manual test (run with --manual include)"))
        elif manual == "only" and not is_manual:
            item.add_marker(pytest.mark.skip(reason="not a manual test (--manual only)"))


def _scene_case_runs(case: Any, platform: str, manual: str) -> bool:
    from ..simpler_setup.scene_test import is_manual_for_platform

    if not isinstance(case, dict) or platform not in case.get("platforms", ()):
        return False
    is_manual = is_manual_for_platform(case.get("manual"), platform)
    return manual == "include" or is_manual == (manual == "only")


@pytest.fixture(scope="session")
def st_platform(request: Any) -> str:
    """The platform of ``--platform``."""
    p = request.config.getoption("--platform")
    if not p:
        pytest.skip("--platform required for ST tests")
    return p


@pytest.fixture(scope="session")
def device_pool(request: Any) -> List[int]:
    """The device ids of ``--device``."""
    return parse_device_range(request.config.getoption("--device"))


@pytest.fixture()
def st_device_ids(request: Any, device_pool: List[int]) -> Iterator[List[int]]:
    """Device ids for one test (``@pytest.mark.device_count(n)`` asks for n)."""
    marker = request.node.get_closest_marker("device_count")
    n = marker.args[0] if marker else 1
    if n > len(device_pool):
        pytest.fail(f"need {n} devices")
    yield list(device_pool[:n])
