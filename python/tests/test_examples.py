"""The examples run and check their own results (each exits non-zero on a mismatch)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def run_example(name):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTO2_RING_")}
    r = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.mark.parametrize("name", ["l2_run.py", "chip_worker_sizings.py", "l3_prefill_decode.py", "l3_demo.py"])
def test_example_runs(name):
    out = run_example(name)
    assert "Ring buffer sizes" in out or "window" in out


def test_l3_serving_sizes_each_program_automatically_and_saves_memory():
    out = run_example("l3_serving.py")
    for name in ("fill_cache", "attend"):
        # the learned sizing of each program, every entry from "auto"
        assert re.search(rf"^  {name}: window=\(.*\) heap=\(.*\) dep_pool=\(.*\) source=auto arena_bytes=\d+", out, re.M), out
        saved = re.search(rf"^  {name}: (\d+) -> (\d+) bytes, saved (\d+) bytes", out, re.M)
        assert saved, out
        glob, own, diff = map(int, saved.groups())
        assert diff == glob - own and diff > 0, out
    assert re.search(r"^global sizing \(elementwise max of the learned sizes", out, re.M), out
    assert "source=call_config" in out


@pytest.mark.skipif(not __import__("taskring")._native.mpi_built(), reason="this build has no MPI (make mpi)")
def test_l4_demo_runs_under_launch():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTO2_RING_", "OMPI_", "PMI_"))}
    r = subprocess.run([sys.executable, "-m", "taskring", "launch", "--hosts", "2", str(EXAMPLES / "l4_demo.py")], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"l4_demo.py failed:\n{r.stdout}\n{r.stderr}"
    assert "results correct: True" in r.stdout
    # Both hops: host 1's chips took ring 0's dep pool from their env, host 0's from the default.
    assert r.stdout.count("dep_pool=EDDD") == 2 and r.stdout.count("dep_pool=DDDD") == 2
    assert "window=(128, 16, 16384, 16384)" in r.stdout and "heap=(2097152, 262144," in r.stdout
