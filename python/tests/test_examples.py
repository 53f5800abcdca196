"""The examples run and check their own results (each exits non-zero on a mismatch)."""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["l2_run.py", "chip_worker_sizings.py", "l3_prefill_decode.py", "l3_serving.py", "l3_demo.py"])
def test_example_runs(name):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTO2_RING_")}
    r = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr}"
    assert "Ring buffer sizes" in r.stdout or "window" in r.stdout


@pytest.mark.skipif(not __import__("taskring")._native.mpi_built(), reason="this build has no MPI (make mpi)")
def test_l4_demo_runs_under_launch():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTO2_RING_", "OMPI_", "PMI_"))}
    r = subprocess.run([sys.executable, "-m", "taskring", "launch", "--hosts", "2", str(EXAMPLES / "l4_demo.py")], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"l4_demo.py failed:\n{r.stdout}\n{r.stderr}"
    assert "results correct: True" in r.stdout
    # Both hops: host 1's chips took ring 0's dep pool from their env, host 0's from the default.
    assert r.stdout.count("dep_pool=EDDD") == 2 and r.stdout.count("dep_pool=DDDD") == 2
    assert "window=(128, 16, 16384, 16384)" in r.stdout and "heap=(2097152, 262144," in r.stdout
