"""`python -m taskring sizing`: advice from a real run's scope stats."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, kernels as K


@taskring.program(signature=[IN, OUT])
def steps(rt, x, out):
    with rt.scope():
        prev = x
        for _ in range(6):
            prev = rt.submit(K.scale, inputs=[prev], outputs=[rt.spec(x.shape, x.dtype)], scalars=[1.0]).outputs[0]
        rt.submit(K.copy, inputs=[prev], outputs=[out])


def test_sizing_advice_from_scope_stats(tmp_path):
    x = np.ones(256, np.float32)
    out = np.zeros_like(x)
    cfg = taskring.CallConfig(enable_scope_stats=True, output_prefix=str(tmp_path))
    rep = taskring.run(steps, x, out, config=cfg)
    assert rep.peak.task_window[1] == 7
    path = tmp_path / "scope_stats" / "scope_stats.jsonl"
    r = subprocess.run([sys.executable, "-m", "taskring", "sizing", str(path), "--headroom", "1.0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"ring_task_window": [4, 8, 4, 4]' in r.stdout, r.stdout
    assert "PTO2_RING_TASK_WINDOW=4,8,4,4" in r.stdout
    # The advice runs the program.
    env_line = [l for l in r.stdout.splitlines() if l.startswith("runtime_env")][0]
    advice = eval(env_line.split("=", 1)[1])  # a dict literal printed by the tool
    cfg2 = taskring.CallConfig()
    for k, v in advice.items():
        setattr(cfg2.runtime_env, k, v)
    taskring.run(steps, x, out, config=cfg2)
    assert np.array_equal(out, x)


def test_sizing_bad_file(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("not json\n")
    r = subprocess.run([sys.executable, "-m", "taskring", "sizing", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and "line 1" in r.stderr


# ----- one sizing implementation, crafted files, bad headroom (docs/api.md §6.1) -----------------------

# A crafted fatal header: invalid sizes the run "had" (5, 3000), a heap peak of 2^64 - 1 and a
# scope deadlock that needed a window of 64. `taskring sizing` has one implementation, Rust's
# taskring::dfx::sizing_command, and one command, this package's `taskring` entry point (the
# Rust `taskring` binary of crates/taskring-cli is gone; its sizing tests live here now).
CRAFTED = (
    '{"version":6,"fatal":true,"dropped":0,"total":0,"task_window_max":[5,5,5,5],'
    '"heap_max":[3000,3000,3000,3000],"dep_pool_max":[16,16,16,16],"tensormap_max":0,'
    '"peak_task_window":[0,3,0,0],"peak_heap":[0,18446744073709551615,0,0],"peak_dep_pool":[0,2,0,0],'
    '"failure":{"code":1,"name":"SCOPE_DEADLOCK","ring":1,"resource":"ring_task_window","configured":4,"needed":64}}\n'
)
CRAFTED_ADVICE = (
    "# recorded peaks per ring: task_window=[0, 3, 0, 0] heap=[0, 18446744073709551615, 0, 0] dep_pool=[0, 2, 0, 0]\n"
    "# the run failed: SCOPE_DEADLOCK (code 1) on ring 1, ring_task_window configured 4, needed 64\n"
    "# no valid size fits: ring 1 needs ring_heap >= 18446744073709551615 but the largest valid ring_heap is "
    "9223372036854775808; the advice below caps it there, which is still too small: change the program "
    "(split the scope or the graph)\n"
    "# suggested sizes (headroom 1.00):\n"
    'runtime_env = {"ring_task_window": [8, 64, 8, 8], "ring_heap": [4096, 9223372036854775808, 4096, 4096], "ring_dep_pool": 16}\n'
    "PTO2_RING_TASK_WINDOW=8,64,8,8\n"
    "PTO2_RING_HEAP=4096,9223372036854775808,4096,4096\n"
    "PTO2_RING_DEP_POOL=16\n"
)


def _py_sizing(*args):
    return subprocess.run([sys.executable, "-m", "taskring", "sizing", *args], capture_output=True)


def _bench_binary():
    """The built `taskring-bench` binary (crates/taskring-bench), if there is one."""
    exe = os.environ.get("TASKRING_BENCH")
    if exe and os.path.exists(exe):
        return exe
    repo = pathlib.Path(__file__).resolve().parents[2]
    for p in (repo / "target" / "release" / "taskring-bench", repo / "target" / "debug" / "taskring-bench"):
        if p.exists():
            return str(p)
    return None


def test_sizing_crafted_file_gives_valid_sizes_and_says_what_cannot_fit(tmp_path):
    p = tmp_path / "crafted.jsonl"
    p.write_text(CRAFTED)
    r = _py_sizing(str(p), "--headroom", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == CRAFTED_ADVICE
    # Every suggestion is a valid ring size.
    env_line = [l for l in r.stdout.decode().splitlines() if l.startswith("runtime_env")][0]
    advice = eval(env_line.split("=", 1)[1])
    import taskring

    cfg = taskring.CallConfig()
    for k, v in advice.items():
        setattr(cfg.runtime_env, k, v)
    cfg.validate()


def test_sizing_command_prints_the_rust_function_byte_for_byte(tmp_path):
    # The command adds nothing to taskring::dfx::sizing_command (the native function): the
    # same stdout and stderr bytes and the same exit status, for good and bad arguments.
    from taskring._native import sizing_command

    p = tmp_path / "crafted.jsonl"
    p.write_text(CRAFTED)
    for args in ([str(p)], [str(p), "--headroom", "1"], [str(p), "--headroom", "nan"], ["/nonexistent.jsonl"], []):
        cmd = _py_sizing(*args)
        status, out, err = sizing_command(list(args))
        assert (cmd.returncode, cmd.stdout, cmd.stderr) == (status, out.encode(), err.encode()), args


def test_sizing_headroom_spellings_agree(tmp_path):
    p = tmp_path / "crafted.jsonl"
    p.write_text(CRAFTED)
    a = _py_sizing(str(p), "--headroom", "1")
    b = _py_sizing("--headroom=1", str(p))
    assert a.returncode == b.returncode == 0, b.stderr
    assert a.stdout == b.stdout == CRAFTED_ADVICE.encode()


def test_sizing_without_a_file_exits_2():
    r = _py_sizing()
    assert r.returncode == 2
    assert r.stderr.decode().startswith("taskring sizing: the scope-stats file is missing"), r.stderr


def test_bench_and_taskbench_forward_to_taskring_bench():
    # `taskring taskbench FLAGS` runs `taskring-bench taskbench FLAGS`; `taskring bench NAMES`
    # runs `taskring-bench NAMES` (its usage errors exit 2 without running anything).
    exe = _bench_binary()
    if exe is None:
        pytest.skip("no built taskring-bench binary (cargo build -p taskring-bench; make test-rust builds it)")
    env = dict(os.environ, TASKRING_BENCH=exe)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "taskring", *args], capture_output=True, env=env)

    r = run("taskbench", "-steps", "2", "-width", "2")
    assert r.returncode == 0, r.stderr
    assert b"Total Tasks 4" in r.stdout, r.stdout
    r = run("taskbench", "-steps", "0")
    err = r.stderr.decode()
    assert r.returncode == 2 and err.startswith("taskring-bench taskbench: ") and "-steps must be >= 1" in err, err
    r = run("bench", "b2", "--reps", "1")
    assert r.returncode == 2 and b"--reps must be at least 5" in r.stderr, r.stderr


@pytest.mark.parametrize("h", ["nan", "-1", "0", "0.5", "0.99", "inf", "x"])
def test_sizing_bad_headroom_exits_2(tmp_path, h):
    p = tmp_path / "crafted.jsonl"
    p.write_text(CRAFTED)
    r = _py_sizing(str(p), "--headroom", h)
    assert r.returncode == 2
    assert r.stdout == b""
    assert r.stderr.decode().startswith(
        f"taskring sizing: --headroom must be a finite number >= 1 (a factor on the recorded peaks), got '{h}'\n"
    )


def test_sizing_reports_the_failed_run(tmp_path):
    p = tmp_path / "crafted.jsonl"
    p.write_text(CRAFTED)
    r = _py_sizing(str(p))
    assert r.returncode == 0, r.stderr
    assert "# the run failed: SCOPE_DEADLOCK (code 1) on ring 1, ring_task_window configured 4, needed 64" in r.stdout.decode()
