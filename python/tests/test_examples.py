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
