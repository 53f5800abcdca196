"""taskring.simpler_setup.scene_test (docs/api.md §13.3): scene tests in Simpler's form —
CALLABLE of C++ sources, CASES with config, TaskArgsBuilder, goldens, --case / --rounds,
levels 2 and 3, under pytest (the plugin) and standalone. The repo's examples under
examples/simpler are the programs."""

import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from taskring.simpler_setup import Scalar, SceneTestCase, TaskArgsBuilder, TensorArg, scene_test

# The module (the package's name `scene_test` is the decorator, as upstream has it).
st = importlib.import_module("taskring.simpler_setup.scene_test")
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "simpler"
VENV_PY = ROOT / ".venv" / "bin" / "python"
PY = str(VENV_PY) if VENV_PY.exists() else sys.executable
CFG_ALLOWED = "allowed keys: aicpu_thread_num, device_count, num_sub_workers, runtime_env"
ENV_ALLOWED = "allowed keys: ring_dep_pool, ring_heap, ring_task_window"
# Runs a scene-test file as `python file.py ARGS` would, with the upstream module names
# installed first.
STANDALONE = ["-m", "taskring.simpler"]


def decorate(cases, name="ConfigScene", level=2):
    return scene_test(level=level, runtime="tensormap_and_ringbuffer")(type(name, (SceneTestCase,), {"CASES": cases}))


def run(args, cwd=ROOT, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("PTO2_RING_")}
    e.update(env or {})
    return subprocess.run([PY, *map(str, args)], capture_output=True, text=True, timeout=240, cwd=cwd, env=e)


# ----- case config validation: Simpler's messages ---------------------------------------


@pytest.mark.parametrize(
    "cases, exc, msg",
    [
        ([{"name": "c0", "config": {"block_dim": 24}}], ValueError, f"ConfigScene.CASES[0] ('c0') config has unknown keys: block_dim; {CFG_ALLOWED}"),
        (
            [{"name": "ok"}, {"name": "c1", "config": {"zeta": 1, "block_dim": 2}}],
            ValueError,
            f"ConfigScene.CASES[1] ('c1') config has unknown keys: block_dim, zeta; {CFG_ALLOWED}",
        ),
        ([{"name": "e", "config": {"runtime_env": {"ring_heep": 1024}}}], ValueError, f"ConfigScene.CASES[0] ('e') config.runtime_env has unknown keys: ring_heep; {ENV_ALLOWED}"),
        ([{"name": "n", "config": None}], TypeError, "ConfigScene.CASES[0] ('n') config must be a mapping, got NoneType"),
        ([{"config": {"runtime_env": None}}], TypeError, "ConfigScene.CASES[0] ('index 0') config.runtime_env must be a mapping, got NoneType"),
        ([["not", "a", "mapping"]], TypeError, "ConfigScene.CASES[0] must be a mapping, got list"),
    ],
)
def test_case_config_is_checked_at_decoration(cases, exc, msg):
    with pytest.raises(exc) as e:
        decorate(cases)
    assert str(e.value) == msg


def test_every_config_key_and_extension_keys_are_accepted():
    cls = decorate(
        [
            {
                "name": "all",
                "platforms": ["a2a3sim"],
                "config": {
                    "aicpu_thread_num": 4,
                    "device_count": 2,
                    "num_sub_workers": 1,
                    "runtime_env": {"ring_task_window": 64, "ring_heap": [1 << 20, 0, 0, 0], "ring_dep_pool": 128},
                },
                "required_sched_phases": ["x"],  # case-level keys of extensions are free
            },
            {"name": "bare", "platforms": ["a2a3sim"]},
        ]
    )
    assert cls._st_level == 2 and cls._st_runtime == "tensormap_and_ringbuffer"


def test_unsupported_level_is_a_value_error():
    with pytest.raises(ValueError, match=r"Unsupported scene test level 5; expected one of: 2, 3, 4"):
        scene_test(level=5, runtime="tensormap_and_ringbuffer")


def test_callable_paths_are_relative_to_the_test_file():
    @scene_test(level=2, runtime="tensormap_and_ringbuffer")
    class Paths(SceneTestCase):
        CALLABLE = {
            "orchestration": {"source": "k/orch.cpp", "function_name": "f", "signature": []},
            "incores": [{"func_id": 0, "source": "k/a.cpp", "core_type": "aiv", "extra_include_dirs": ["inc", "/abs", "$HOME/x"]}],
        }
        CASES = []

    here = Path(__file__).resolve().parent
    assert Paths.CALLABLE["orchestration"]["source"] == str(here / "k/orch.cpp")
    inc = Paths.CALLABLE["incores"][0]
    assert inc["source"] == str(here / "k/a.cpp")
    assert inc["extra_include_dirs"] == [str(here / "inc"), "/abs", "$HOME/x"]


# ----- TaskArgsBuilder ---------------------------------------------------------------------


def test_task_args_builder_order_names_and_clone():
    a = np.arange(4, dtype=np.float32)
    args = TaskArgsBuilder(TensorArg("a", a), TensorArg("out", np.zeros(4, np.float32)), Scalar("alpha", 1.5))
    assert [s.name for s in args.specs] == ["a", "out", "alpha"]
    assert args.tensor_names() == ["a", "out"]
    assert args.a is a and args.alpha == 1.5
    g = args.clone()
    g.out[:] = 7
    assert not args.out.any() and g.a is not a and np.array_equal(g.a, a)
    with pytest.raises(ValueError, match="Cannot add tensor after scalar"):
        args.add_tensor("late", np.zeros(1))
    with pytest.raises(ValueError, match="duplicate argument name 'a'"):
        args.add_scalar("a", 1)
    with pytest.raises(ValueError, match="argument name 'clone' conflicts with builder attributes/methods"):
        TaskArgsBuilder(TensorArg("clone", a))
    with pytest.raises(AttributeError, match="TaskArgsBuilder has no argument 'nope'"):
        args.nope


def test_scalars_travel_as_upstream_packs_them():
    import ctypes

    assert st._scalar_to_uint64(1.0) == 0x3F800000  # a Python float is an f32
    assert st._scalar_to_uint64(ctypes.c_double(1.0)) == 0x3FF0000000000000
    assert st._scalar_to_uint64(-1) == (1 << 64) - 1
    assert st._scalar_to_uint64(ctypes.c_int32(7)) == 7


def test_golden_mismatch_names_the_output():
    a = TaskArgsBuilder(TensorArg("f", np.array([1.0, 2.0], np.float32)))
    b = TaskArgsBuilder(TensorArg("f", np.array([1.0, 2.5], np.float32)))
    st._compare_outputs(a, a.clone(), ["f"], 1e-5, 1e-5)
    with pytest.raises(AssertionError, match=r"^Golden mismatch on 'f': max_diff=0.5, rtol=1e-05, atol=1e-05$"):
        st._compare_outputs(a, b, ["f"], 1e-5, 1e-5)


# ----- case selection ------------------------------------------------------------------------


def _sel_classes():
    A = decorate([{"name": "x", "platforms": ["a2a3sim"]}, {"name": "m", "platforms": ["a2a3sim"], "manual": True}], name="A")
    B = decorate([{"name": "x", "platforms": ["a2a3"]}, {"name": "y", "platforms": ["a2a3sim"], "manual": ["a2a3"]}], name="B")
    return A, B


@pytest.mark.parametrize(
    "selectors, manual, picked",
    [
        ([], "exclude", [("A", "x"), ("B", "y")]),
        ([], "include", [("A", "x"), ("A", "m"), ("B", "y")]),
        ([], "only", [("A", "m")]),
        (["x"], "exclude", [("A", "x")]),  # B::x is not on a2a3sim
        (["B::"], "exclude", [("B", "y")]),
        (["::y", "A::x"], "exclude", [("A", "x"), ("B", "y")]),
    ],
)
def test_case_selection(selectors, manual, picked):
    sel = [st._parse_case_selector(s) for s in selectors]
    got = st._select_cases(list(_sel_classes()), "a2a3sim", sel, manual)
    assert [(c.__name__, case["name"]) for c, case in got] == picked


@pytest.mark.parametrize(
    "selectors, msg",
    [
        (["C::x"], "--case: unknown class 'C'. Available: A, B"),
        (["nope"], "--case: case 'nope' not found in any class"),
        (["A::m"], "--case: no cases matched [A::m] for platform=a2a3sim (matches are manual; pass --manual include or only)"),
    ],
)
def test_case_selection_errors(selectors, msg):
    with pytest.raises(ValueError) as e:
        st._select_cases(list(_sel_classes()), "a2a3sim", [st._parse_case_selector(s) for s in selectors], "exclude")
    assert str(e.value) == msg
def test_importing_the_module_under_upstreams_name_keeps_the_decorator():
    code = (
        "import taskring.simpler as s; s.install()\n"
        "from simpler_setup.scene_test import _rehosted_ref, SceneTestCase\n"
        "import simpler_setup\n"
        "from simpler_setup import scene_test\n"
        "import sys\n"
        "assert callable(scene_test) and not isinstance(scene_test, type(sys)), scene_test\n"
        "assert sys.modules['simpler_setup.scene_test'] is sys.modules['taskring.simpler_setup.scene_test']\n"
        "print('ok')\n"
    )
    r = run(["-c", code])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


# ----- the examples, end to end ----------------------------------------------------------------


def test_standalone_case_selection_and_rounds():
    f = EXAMPLES / "vector_example" / "test_vector_example.py"
    r = run([*STANDALONE, f, "-p", "a2a3sim", "--case", "small_rings", "--rounds", "3"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "TestVectorExample::small_rings PASSED" in r.stdout and "::default" not in r.stdout
    assert "1 passed, 0 failed" in r.stdout
    r = run([*STANDALONE, f, "-p", "a2a3sim", "--case", "nope"])
    assert r.returncode == 2 and "--case: case 'nope' not found in any class" in r.stderr


def test_standalone_level3_runs_each_task_with_its_own_sizing():
    f = EXAMPLES / "per_task_runtime_env" / "test_per_task_runtime_env.py"
    r = run([*STANDALONE, f, "-p", "a2a3"])
    assert r.returncode == 0, r.stdout + r.stderr
    for label in ("TestPerTaskRuntimeEnv::per_task", "TestCaseRuntimeEnv::case_sizing", "TestCaseRuntimeEnv::defaults"):
        assert f"{label} PASSED" in r.stdout, r.stdout


def test_demo_prints_each_tasks_sizing_and_checks_results():
    r = run([EXAMPLES / "per_task_runtime_env" / "main.py"])
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "small: chip 0, 8 tasks, window=(16, 16, 16, 16)" in out
    assert "large: chip 1, 8 tasks, window=(128, 128, 128, 128)" in out
    # per_ring sizes each ring and leaves the dependency pool to the default
    assert "window=CCCC heap=CCCC dep_pool=DDDD" in out
    assert out.count("max |out - expected| = 0.000e+00") == 3 and "all golden checks PASSED" in out


def test_a_wrong_golden_fails_its_case_and_names_the_output(tmp_path):
    src = EXAMPLES / "vector_example"
    (tmp_path / "test_wrong.py").write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(src)!r})
            import test_vector_example as base
            from simpler_setup import SceneTestCase, scene_test

            @scene_test(level=2, runtime="tensormap_and_ringbuffer")
            class TestWrong(base.TestVectorExample):
                CALLABLE = base.TestVectorExample.CALLABLE
                CASES = [
                    {{"name": "off_by_one", "platforms": ["a2a3sim"], "params": {{"size": 256}}}},
                    {{"name": "unchecked", "platforms": ["a2a3sim"], "params": {{"size": 256}}, "skip_golden": True}},
                ]

                def compute_golden(self, args, params):
                    super().compute_golden(args, params)
                    args.f[3] += 1

            if __name__ == "__main__":
                SceneTestCase.run_module(__name__)
            """
        )
    )
    r = run([*STANDALONE, tmp_path / "test_wrong.py", "-p", "a2a3sim"])
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"TestWrong::off_by_one FAILED: AssertionError: Golden mismatch on 'f': max_diff=1\.0", r.stdout), r.stdout
    assert "TestWrong::unchecked PASSED" in r.stdout and "1 passed, 1 failed" in r.stdout


def test_diagnostics_flags_write_taskrings_outputs_per_case(tmp_path):
    f = EXAMPLES / "vector_example" / "test_vector_example.py"
    r = run([*STANDALONE, f, "-p", "a2a3sim", "--case", "default", "--enable-scope-stats", "--enable-dep-gen"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (case_dir,) = (tmp_path / "outputs").iterdir()
    assert case_dir.name.startswith("TestVectorExample_default_")
    assert (case_dir / "scope_stats" / "scope_stats.jsonl").stat().st_size > 0
    assert (case_dir / "deps.json").stat().st_size > 0
    # More than one round: every diagnostic is off (a warning says so), nothing is written.
    r = run([*STANDALONE, f, "-p", "a2a3sim", "--case", "small_rings", "--rounds", "2", "--enable-scope-stats"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "scope_stats disabled: --rounds > 1" in r.stderr
    assert len(list((tmp_path / "outputs").iterdir())) == 1


def test_paged_attention_golden_is_attention_over_each_requests_blocks():
    from taskring.simpler_setup.goldens import paged_attention as pa

    rng = np.random.default_rng(3)
    batch, heads, dim, block, blocks = 3, 4, 8, 4, 9
    q = rng.standard_normal((batch, heads, dim)).astype(np.float32)
    k = rng.standard_normal((blocks, block, 1, dim)).astype(np.float32)
    v = rng.standard_normal((blocks, block, 1, dim)).astype(np.float32)
    table = rng.permutation(blocks).reshape(batch, 3).astype(np.int32)
    lens = np.array([9, 4, 12], np.int32)
    got = pa.paged_attention(q, k, v, table, lens, scale=0.5)
    for b in range(batch):
        kk = np.concatenate([k[t, :, 0] for t in table[b]])[: lens[b]]
        vv = np.concatenate([v[t, :, 0] for t in table[b]])[: lens[b]]
        s = q[b] @ kk.T * 0.5
        p = np.exp(s - s.max(axis=1, keepdims=True))
        np.testing.assert_allclose(got[b], (p / p.sum(axis=1, keepdims=True)) @ vv, rtol=1e-5, atol=1e-6)
    # bf16 rounding of p: to nearest, ties to even, on the upper 16 bits
    x = np.array([1.0, 1.00390625, 1.01171875, 3.14159], np.float32)
    assert pa._round_to(x, "bfloat16").tolist() == [1.0, 1.0, 1.015625, 3.140625]


def test_under_pytest_case_selection_rounds_and_skips():
    f = EXAMPLES / "vector_example" / "test_vector_example.py"
    base = ["-m", "pytest", "-q", "-p", "taskring.simpler.pytest_plugin", "-p", "no:cacheprovider", f, "-rs"]
    r = run([*base, "--platform", "a2a3sim", "--case", "TestVectorExample::small_rings", "--rounds", "2"])
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
    # cases of another class only: this class's test is skipped, saying why
    r = run([*base, "--platform", "a2a3sim", "--case", "TestOther::"])
    assert r.returncode == 0 and "No cases matched TestVectorExample (platform=a2a3sim, manual=exclude)" in r.stdout, r.stdout + r.stderr


def test_manual_modes_under_pytest_follow_the_cases():
    # test_vector_example's cases are not manual: --manual only skips the class, saying why;
    # include runs them.
    f = EXAMPLES / "vector_example" / "test_vector_example.py"
    base = ["-m", "pytest", "-q", "-p", "taskring.simpler.pytest_plugin", "-p", "no:cacheprovider", f, "-rs", "--platform", "a2a3sim"]
    r = run([*base, "--manual", "only"])
    assert r.returncode == 0 and "no case of TestVectorExample for platform a2a3sim (--manual only)" in r.stdout, r.stdout + r.stderr
    r = run([*base, "--manual", "include"])
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
