"""taskring.scene_test (docs/api.md §5): case-config validation at decoration, per-case
CallConfigs, no environment mutation, golden comparison, pytest ids, standalone
`--case` / `--rounds`."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import taskring
from taskring import IN, INOUT, OUT, kernels as K
from taskring.scene_test import SceneTestCase, scene_test

ROOT = Path(__file__).resolve().parents[2]
SCENES = ROOT / "examples" / "scenes"
VENV_PY = ROOT / ".venv" / "bin" / "python"
PY = str(VENV_PY) if VENV_PY.exists() else sys.executable
RING_VARS = ("PTO2_RING_TASK_WINDOW", "PTO2_RING_HEAP", "PTO2_RING_DEP_POOL")
CFG_ALLOWED = "allowed keys: aicpu_thread_num, device_count, num_sub_workers, runtime_env"
ENV_ALLOWED = "allowed keys: ring_dep_pool, ring_heap, ring_task_window"


@taskring.program(signature=[IN, IN, OUT])
def vadd(rt, a, b, out):
    with rt.scope():
        t = rt.submit(K.add, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
        rt.submit(K.copy, inputs=[t], outputs=[out])


def _args(n=64, seed=0):
    rng = np.random.default_rng(seed)
    # integer-valued floats: sums are exact, so a wrong golden has an exact max_diff
    return {
        "a": rng.integers(-8, 8, (n, 16)).astype(np.float32),
        "b": rng.integers(-8, 8, (n, 16)).astype(np.float32),
        "out": np.zeros((n, 16), np.float32),
    }


class _VAddBase(SceneTestCase):
    PROGRAM = vadd

    def generate_args(self, params):
        return _args(**params)

    def compute_golden(self, args, params):
        args["out"][...] = args["a"] + args["b"]


def decorate(cases, level=2, base=_VAddBase, name="ConfigScene"):
    attrs = {"CASES": cases}
    if level == 3:
        attrs.update(CHIPS={"vadd": vadd}, ORCHESTRATION=staticmethod(lambda o, chips, args, cfg: None))
    return scene_test(level=level)(type(name, (base,), attrs))


def run(cmd, cwd=ROOT):
    return subprocess.run([PY, *map(str, cmd)], capture_output=True, text=True, timeout=60, cwd=cwd)


# ----- validation messages (exact text) --------------------------------------------


@pytest.mark.parametrize(
    "cases, exc, msg",
    [
        (
            [{"name": "c0", "config": {"block_dim": 24}}],
            ValueError,
            f"ConfigScene.CASES[0] ('c0') config has unknown keys: block_dim; {CFG_ALLOWED}",
        ),
        (  # several unknown keys: sorted, ", "-joined; a non-str key rendered with repr
            [{"name": "ok"}, {"name": "c1", "config": {"zeta": 1, "block_dim": 2, "runtime_env": {}, 7: 0}}],
            ValueError,
            f"ConfigScene.CASES[1] ('c1') config has unknown keys: 7, block_dim, zeta; {CFG_ALLOWED}",
        ),
        (
            [{"name": "c0", "config": {"runtime_env": {"ring_heep": 1024}}}],
            ValueError,
            f"ConfigScene.CASES[0] ('c0') config.runtime_env has unknown keys: ring_heep; {ENV_ALLOWED}",
        ),
        (
            [{"name": "c0", "config": {"runtime_env": {"ring_window": 64, "PTO2_RING_HEAP": 1, "ring_heap": 1024}}}],
            ValueError,
            f"ConfigScene.CASES[0] ('c0') config.runtime_env has unknown keys: PTO2_RING_HEAP, ring_window; {ENV_ALLOWED}",
        ),
        ([{"name": "c0", "config": None}], TypeError, "ConfigScene.CASES[0] ('c0') config must be a mapping, got NoneType"),
        ([{"name": "c0", "config": [("runtime_env", {})]}], TypeError, "ConfigScene.CASES[0] ('c0') config must be a mapping, got list"),
        (
            [{"name": "c0", "config": {"runtime_env": None}}],
            TypeError,
            "ConfigScene.CASES[0] ('c0') config.runtime_env must be a mapping, got NoneType",
        ),
        (
            [{"name": "c0", "config": {"runtime_env": 64}}],
            TypeError,
            "ConfigScene.CASES[0] ('c0') config.runtime_env must be a mapping, got int",
        ),
        (  # a missing name shows as "index {i}"
            [{"name": "a"}, {"config": {"block_dim": 24}}],
            ValueError,
            f"ConfigScene.CASES[1] ('index 1') config has unknown keys: block_dim; {CFG_ALLOWED}",
        ),
        ([{"name": "a"}, ("name", "b")], TypeError, "ConfigScene.CASES[1] must be a mapping, got tuple"),
    ],
)
@pytest.mark.parametrize("level", [2, 3])
def test_validation_messages(cases, exc, msg, level):
    with pytest.raises(exc) as ei:
        decorate(cases, level=level)
    assert str(ei.value) == msg


def test_first_failure_wins_in_case_order():
    with pytest.raises(TypeError) as ei:
        decorate([{"name": "x", "config": {"runtime_env": 1}}, {"name": "y", "config": {"bad": 1}}])
    assert str(ei.value) == "ConfigScene.CASES[0] ('x') config.runtime_env must be a mapping, got int"


def test_other_decoration_errors():
    with pytest.raises(ValueError, match=r"^scene_test level must be 2 or 3, got 4$"):
        scene_test(level=4)
    with pytest.raises(TypeError, match=r"ConfigScene.PROGRAM must be a taskring.Program"):
        decorate([{"name": "a"}], base=type("NoProgram", (SceneTestCase,), {}))
    with pytest.raises(ValueError, match=r"same test name 'test_a_b'"):
        decorate([{"name": "a b"}, {"name": "a-b"}])
    with pytest.raises(ValueError, match=r"config.device_count must be an int >= 1, got 0"):
        decorate([{"name": "a", "config": {"device_count": 0}}], level=3)
    with pytest.raises(ValueError, match=r"ConfigScene.CASES is empty"):
        decorate([])


# ----- accepted forms ----------------------------------------------------------------


def test_accepted_forms_and_generated_tests():
    seen = {}

    class Accepting(_VAddBase):
        def on_report(self, case, report):
            seen[case["name"]] = report

    cls = decorate(
        [
            {  # all four keys; scalar and 4-list ring values; a tuple is a 4-list too
                "name": "all keys",
                "params": {"n": 32},
                "config": {
                    "aicpu_thread_num": 4,
                    "device_count": 1,
                    "num_sub_workers": 0,
                    "runtime_env": {"ring_task_window": 64, "ring_heap": [0, 1 << 16, 0, 0], "ring_dep_pool": (32, 0, 0, 64)},
                },
            },
            {"name": "no_config", "params": {"n": 16}},
            {"name": "empty_config", "config": {}, "params": {"n": 16}},
            {"name": "ext", "params": {"n": 16}, "required_sched_phases": ["a"], "manual": False, "config": {"runtime_env": {}}},
        ],
        base=Accepting,
    )
    assert [m for m in vars(cls) if m.startswith("test_")] == ["test_all_keys", "test_no_config", "test_empty_config", "test_ext"]
    inst = cls()
    for m in ("test_all_keys", "test_no_config", "test_empty_config", "test_ext"):
        getattr(inst, m)()
    cls.teardown_class()
    s = seen["all keys"].ring_sizing
    assert s.task_window == (64,) * 4 and all(s.source("ring_task_window", r) == "call_config" for r in range(4))
    assert s.heap[1] == 1 << 16 and s.source("ring_heap", 1) == "call_config" and s.source("ring_heap", 0) == "default"
    assert s.dep_pool == (32, taskring.DEFAULT_RING_DEP_POOL, taskring.DEFAULT_RING_DEP_POOL, 64)
    for n in ("no_config", "empty_config", "ext"):
        rs = seen[n].ring_sizing
        assert all(rs.source(f, r) == "default" for f in ("ring_task_window", "ring_heap", "ring_dep_pool") for r in range(4)), rs


def test_bad_values_fail_the_case_at_run_time_only():
    cls = decorate(
        [
            {"name": "bad_window", "params": {}, "config": {"runtime_env": {"ring_task_window": [64, 100, 0, 0]}}},
            {"name": "bad_threads", "params": {}, "config": {"aicpu_thread_num": 1}},
            {"name": "bad_shape", "params": {}, "config": {"runtime_env": {"ring_heap": [1024, 1024]}}},
            {"name": "good", "params": {}},
        ]
    )
    inst = cls()
    with pytest.raises(ValueError) as ei:
        inst.run_case("bad_window")
    assert str(ei.value) == "RuntimeEnv: ring_task_window[1] must be a power of 2 in [4, 1073741824], got 100"
    with pytest.raises(ValueError, match=r"^aicpu_thread_num must be 0 \(auto\) or in \[2, 8\], got 1$"):
        inst.run_case("bad_threads")
    with pytest.raises(ValueError, match=r"^RuntimeEnv.ring_heap list must contain exactly 4 entries$"):
        inst.run_case("bad_shape")
    inst.run_case("good")
    cls.teardown_class()


# ----- no environment mutation; per-case sizes win over the env ----------------------


def _spy_env_writes(monkeypatch):
    calls = []
    real_put, real_unset = os.putenv, os.unsetenv
    monkeypatch.setattr(os, "putenv", lambda k, v: (calls.append(("put", k)), real_put(k, v)))
    monkeypatch.setattr(os, "unsetenv", lambda k: (calls.append(("unset", k)), real_unset(k)))
    return calls


ENV_CASES = [
    {  # sets the window everywhere, ring-1 heap, ring-0 dep pool; leaves the rest at 0
        "name": "own",
        "params": {},
        "config": {"runtime_env": {"ring_task_window": 64, "ring_heap": [0, 1 << 16, 0, 0], "ring_dep_pool": [64, 0, 0, 0]}},
    },
    {"name": "none", "params": {}},
    {"name": "threads_only", "params": {}, "config": {"aicpu_thread_num": 2}},
]


def _check_env_sources(sizing_of):
    own = sizing_of("own")
    assert own.task_window == (64,) * 4 and all(own.source("ring_task_window", r) == "call_config" for r in range(4))
    assert own.heap == (1 << 20, 1 << 16, 1 << 20, 1 << 20)
    assert [own.source("ring_heap", r) for r in range(4)] == ["env", "call_config", "env", "env"]
    assert own.dep_pool == (64, 128, taskring.DEFAULT_RING_DEP_POOL, taskring.DEFAULT_RING_DEP_POOL)
    assert [own.source("ring_dep_pool", r) for r in range(4)] == ["call_config", "env", "default", "default"]
    for name in ("none", "threads_only"):
        s = sizing_of(name)
        assert s.task_window == (32,) * 4 and all(s.source("ring_task_window", r) == "env" for r in range(4))
        assert s.heap == (1 << 20,) * 4 and all(s.source("ring_heap", r) == "env" for r in range(4))
        assert [s.source("ring_dep_pool", r) for r in range(4)] == ["default", "env", "default", "default"]


def _set_ring_env(monkeypatch):
    monkeypatch.setenv("PTO2_RING_TASK_WINDOW", "32")
    monkeypatch.setenv("PTO2_RING_HEAP", str(1 << 20))
    monkeypatch.setenv("PTO2_RING_DEP_POOL", "0,128,0,0")


def test_l2_no_env_mutation_and_case_sizes_win(monkeypatch):
    _set_ring_env(monkeypatch)
    reports = {}

    class EnvScene(_VAddBase):
        def on_report(self, case, report):
            reports[case["name"]] = report

    cls = decorate(ENV_CASES, base=EnvScene)
    before, before_b = dict(os.environ), dict(os.environb)
    writes = _spy_env_writes(monkeypatch)
    inst = cls()
    for name in cls.case_names():
        inst.run_case(name, rounds=2)
    cls.teardown_class()
    assert writes == []
    assert dict(os.environ) == before and dict(os.environb) == before_b
    _check_env_sources(lambda n: reports[n].ring_sizing)


def test_l3_no_env_mutation_and_case_sizes_win(monkeypatch):
    # chips are forked when the class's worker starts, so the env is set before that
    _set_ring_env(monkeypatch)
    reports = {}

    def orch(o, chips, args, cfg):
        o.submit_next_level(chips.vadd, [args.a, args.b, args.out], cfg, worker=1)

    class EnvL3(_VAddBase):
        CHIPS = {"vadd": vadd}
        ORCHESTRATION = staticmethod(orch)

        def on_report(self, case, report):
            reports[case["name"]] = report

    cases = [dict(c) for c in ENV_CASES]
    cases[0]["config"] = dict(cases[0]["config"], device_count=2)
    cls = scene_test(level=3)(type("EnvL3Scene", (EnvL3,), {"CASES": cases}))
    before, before_b = dict(os.environ), dict(os.environb)
    writes = _spy_env_writes(monkeypatch)
    inst = cls()
    for name in cls.case_names():
        inst.run_case(name)
    cls.teardown_class()
    assert writes == []
    assert dict(os.environ) == before and dict(os.environb) == before_b
    for r in reports.values():
        assert [t.worker for t in r.tasks] == [1]
    _check_env_sources(lambda n: reports[n].tasks[0].ring_sizing)


# ----- golden comparison -----------------------------------------------------------


def test_golden_mismatch_message():
    class Wrong(_VAddBase):
        def compute_golden(self, args, params):
            args["out"][...] = args["a"] + args["b"] + 1

    cls = decorate([{"name": "w", "params": {}}], base=Wrong)
    with pytest.raises(AssertionError) as ei:
        cls().test_w()
    cls.teardown_class()
    assert str(ei.value) == "Golden mismatch on 'out': max_diff=1, rtol=1e-05, atol=1e-05"


def test_tolerances_and_custom_compare():
    calls = []

    class Loose(_VAddBase):
        RTOL, ATOL = 0.0, 0.5

        def compute_golden(self, args, params):
            args["out"][...] = args["a"] + args["b"] + 0.25  # within ATOL

    cls = decorate([{"name": "l", "params": {}}], base=Loose)
    cls().run_case("l")
    cls.teardown_class()

    class Custom(Loose):
        def compare_outputs(self, actual, expected, output_names, params):
            calls.append(list(output_names))
            assert np.array_equal(actual["out"], actual["a"] + actual["b"])

    cls = decorate([{"name": "c", "params": {}}], base=Custom, name="CustomScene")
    cls().run_case("c")
    cls.teardown_class()
    assert calls == [["out"]]  # level 2: the OUT/INOUT arguments


# ----- rounds reset outputs; L3 copies through shared memory -------------------------


@taskring.program(signature=[IN, IN, INOUT])
def accumulate(rt, a, b, c):
    rt.submit(K.matmul_acc, inputs=[a, b], inouts=[c])


class _AccBase(SceneTestCase):
    def generate_args(self, params):
        rng = np.random.default_rng(1)
        return {
            "a": rng.integers(-3, 4, (8, 8)).astype(np.float32),
            "b": rng.integers(-3, 4, (8, 8)).astype(np.float32),
            "c": np.full((8, 8), 5.0, np.float32),
        }

    def compute_golden(self, args, params):
        args["c"] += args["a"] @ args["b"]  # one accumulation on the initial value


def test_rounds_reset_inout_l2_and_l3():
    l2 = scene_test(level=2)(type("AccL2", (_AccBase,), {"PROGRAM": accumulate, "CASES": [{"name": "acc"}]}))
    l2().run_case("acc", rounds=3)
    l2.teardown_class()

    def orch(o, chips, args, cfg):
        o.submit_next_level(chips.acc, list(args.values()), cfg, worker=0)

    l3 = scene_test(level=3)(
        # a plain function as ORCHESTRATION is called without self, like a staticmethod
        type("AccL3", (_AccBase,), {"CHIPS": {"acc": accumulate}, "ORCHESTRATION": orch, "CASES": [{"name": "acc"}]})
    )
    l3().run_case("acc", rounds=3)
    l3.teardown_class()


# ----- a case that kills a chip fails alone ----------------------------------------


@taskring.kernel
def _exit_chip(a, out):
    os._exit(41)  # the chip process ends in the middle of its task


@taskring.program(signature=[IN, OUT])
def exit_chip(rt, a, out):
    rt.submit(_exit_chip, inputs=[a], outputs=[out])


def _dying_orch(o, chips, args, cfg):
    if args.die:
        o.submit_next_level(chips.exit, [args.a, args.out], cfg, worker=0)
    else:
        o.submit_next_level(chips.vadd, [args.a, args.b, args.out], cfg, worker=0)


class _DyingChip(SceneTestCase):
    CHIPS = {"vadd": vadd, "exit": exit_chip}
    ORCHESTRATION = staticmethod(_dying_orch)
    OUTPUTS = ["out"]

    def generate_args(self, params):
        return dict(_args(16), die=bool(params.get("die")))

    def compute_golden(self, args, params):
        args["out"][...] = args["a"] + args["b"] + params.get("bias", 0)


DYING_CASES = [
    {"name": "before", "params": {}},
    {"name": "wrong", "params": {"bias": 1}},  # fails, the worker stays
    {"name": "dies", "params": {"die": True}},  # fails, the worker is replaced
    {"name": "after", "params": {}},
    {"name": "after_again", "params": {}},
]


def test_a_case_that_kills_a_chip_fails_alone():
    cls = scene_test(level=3)(type("DyingScene", (_DyingChip,), {"CASES": DYING_CASES}))
    from taskring.scene_test import _RESOURCES

    inst = cls()
    try:
        inst.test_before()
        pids = _RESOURCES[cls].worker.pids
        with pytest.raises(AssertionError, match=r"^Golden mismatch on 'out'"):
            inst.test_wrong()
        assert _RESOURCES[cls].worker.pids == pids  # a golden mismatch keeps the worker
        with pytest.raises(RuntimeError, match=rf"^chip 0 \(pid {pids[0]}\): the chip process exited with status 41$"):
            inst.test_dies()
        inst.test_after()
        inst.test_after_again()
        assert _RESOURCES[cls].worker.pids != pids  # a new worker
    finally:
        cls.teardown_class()
    assert cls not in _RESOURCES


def test_standalone_a_case_that_kills_a_chip_fails_alone(capsys):
    import io

    from taskring.scene_test import _RESOURCES, run_scene_classes

    cls = scene_test(level=3)(type("DyingStandalone", (_DyingChip,), {"CASES": DYING_CASES}))
    out = io.StringIO()
    assert run_scene_classes([cls], rounds=2, out=out) == 1
    lines = [l.split(" ms")[0].rsplit(" ", 1)[0] if l.startswith("PASS") else l for l in out.getvalue().splitlines()]
    assert [l for l in lines if not l.startswith("FAIL")] == [
        "PASS DyingStandalone::before [round 1/2]",
        "PASS DyingStandalone::before [round 2/2]",
        "PASS DyingStandalone::after [round 1/2]",
        "PASS DyingStandalone::after [round 2/2]",
        "PASS DyingStandalone::after_again [round 1/2]",
        "PASS DyingStandalone::after_again [round 2/2]",
        "3 passed, 2 failed",
    ], out.getvalue()
    fails = [l for l in lines if l.startswith("FAIL")]
    assert fails[0].startswith("FAIL DyingStandalone::wrong [round 1/2]: AssertionError: Golden mismatch on 'out'")
    assert fails[1].startswith("FAIL DyingStandalone::dies [round 1/2]: RuntimeError: chip 0 (pid ")
    assert fails[1].endswith("): the chip process exited with status 41")
    assert cls not in _RESOURCES


SCENE_FILE = '''
import numpy as np
import taskring
from taskring import IN, INOUT, kernels as K
from taskring.scene_test import SceneTestCase, scene_test, main


@taskring.program(signature=[IN, IN, INOUT])
def accumulate(rt, a, b, c):
    rt.submit(K.matmul_acc, inputs=[a, b], inouts=[c])


@scene_test(level=2)
class TestAcc(SceneTestCase):
    PROGRAM = accumulate
    CASES = [{{"name": "ok", "params": {{"bias": 0}}}}, {{"name": "bad", "params": {{"bias": {bias}}}}}]

    def generate_args(self, params):
        a = np.arange(16, dtype=np.float32).reshape(4, 4) % 3
        return {{"a": a, "b": a.T.copy(), "c": np.ones((4, 4), np.float32)}}

    def compute_golden(self, args, params):
        args["c"] += args["a"] @ args["b"] + params["bias"]


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def scene_file(tmp_path):
    def make(bias):
        p = tmp_path / f"test_acc_{bias}.py"
        p.write_text(SCENE_FILE.format(bias=bias))
        return p

    return make


def test_standalone_rounds_reset_between_rounds(scene_file):
    p = scene_file(0)
    r = run([p, "--rounds", "3"])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for case in ("ok", "bad"):
        assert [l.split(" ms")[0].rsplit(" ", 1)[0] for l in lines if f"::{case} " in l] == [
            f"PASS TestAcc::{case} [round {i}/3]" for i in (1, 2, 3)
        ]
    assert lines[-1] == "2 passed, 0 failed"


def test_standalone_golden_mismatch_exit_1_and_pytest_ids(scene_file):
    p = scene_file(2)
    r = run([p])
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL TestAcc::bad [round 1/1]: AssertionError: Golden mismatch on 'c': max_diff=2, rtol=1e-05, atol=1e-05" in r.stdout
    assert r.stdout.splitlines()[-1] == "1 passed, 1 failed"
    # the same file under pytest: one test id per case
    r = run(["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", p.name], cwd=p.parent)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"PASSED {p.name}::TestAcc::test_ok" in r.stdout
    assert f"FAILED {p.name}::TestAcc::test_bad - AssertionError" in r.stdout
    assert "AssertionError: Golden mismatch on 'c': max_diff=2, rtol=1e-05, atol=1e-05" in r.stdout


def test_standalone_case_selects():
    ex = SCENES / "test_vector_add.py"
    r = run([ex, "--case", "per_ring"])
    assert r.returncode == 0, r.stderr
    assert [l.split(" [")[0] for l in r.stdout.splitlines()[:-1]] == ["PASS TestVectorAdd::per_ring"]
    r = run([ex, "--case", "TestVectorAdd::default", "--case", "scalar_rings", "--rounds", "2"])
    assert r.returncode == 0, r.stderr
    assert [l.split(" ms")[0].rsplit(" ", 1)[0] for l in r.stdout.splitlines()[:-1]] == [
        "PASS TestVectorAdd::default [round 1/2]",
        "PASS TestVectorAdd::default [round 2/2]",
        "PASS TestVectorAdd::scalar_rings [round 1/2]",
        "PASS TestVectorAdd::scalar_rings [round 2/2]",
    ]
    r = run([ex, "--case", "TestVectorAdd::"])
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "3 passed, 0 failed"
    r = run([ex, "--case", "nope"])
    assert r.returncode == 2 and "--case nope matched no case" in r.stderr
    r = run([ex, "--list"])
    assert r.stdout.split() == ["TestVectorAdd::default", "TestVectorAdd::scalar_rings", "TestVectorAdd::per_ring"]


@pytest.mark.parametrize("example", ["test_vector_add.py", "test_paged_attention.py", "test_l3_fanout.py"])
def test_examples_run_standalone(example):
    r = run([SCENES / example, "--rounds", "2"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].endswith("passed, 0 failed")


def test_harness_never_touches_os_environ_source():
    # belt and braces: the module has no reference to the process environment at all
    src = Path(taskring.scene_test.__file__).read_text()
    code = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith("#"))
    body = code.split('"""', 2)[2]  # skip the module docstring
    assert "environ" not in body and "putenv" not in body and "getenv" not in body
