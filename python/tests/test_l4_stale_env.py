"""An MPI rank's variables in the environment without a running MPI job (exported by hand,
or left in a shell from a launch that has ended): `Worker(level=4).init()` says so with a
RuntimeError at once, on rank 0 and on a host, and leaves no process behind — it never
waits for ranks that do not exist."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from taskring import _native

HERE = os.path.dirname(os.path.abspath(__file__))
L4 = os.path.join(HERE, "l4")
NETNS = hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None

pytestmark = pytest.mark.skipif(not _native.mpi_built(), reason=_native.MPI_MISSING)


def _clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "PMIX_"))}


def _job_processes(marker):
    found = []
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read()
        except OSError:
            continue
        if marker.encode() + b"\0" in args:
            found.append(int(d))
    return found


def _run_init(tmp_path, extra_env, bound_s=20):
    """Runs l4/init_only.py outside any launch with `extra_env` added; returns its
    stderr. A run that hangs (MPI_Init waiting for a launch that is not there) fails the
    test after `bound_s`."""
    env = _clean_env()
    env.update(extra_env)
    out = tmp_path / "ran"
    try:
        p = subprocess.run([sys.executable, os.path.join(L4, "init_only.py"), str(out)], env=env, capture_output=True, text=True, timeout=bound_s)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"init() with a stale MPI environment did not return within {bound_s} s: {(e.stderr or b'')[-2000:]!r}")
    finally:
        time.sleep(0.2)  # chips leave ~10 ms after their host
        left = _job_processes(str(out))
        for pid in left:
            os.kill(pid, 9)
    assert left == [], "processes left behind"
    assert p.returncode != 0 and not out.exists()
    return p.stderr


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_variable_without_an_mpi_launch_is_an_error(tmp_path, rank):
    err = _run_init(tmp_path, {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": "3"})
    assert "RuntimeError: Worker(level=4): this process is MPI rank" in err, err[-3000:]
    assert f"OMPI_COMM_WORLD_RANK={rank}" in err and "not part of a running MPI job" in err, err[-3000:]
    assert "none of the variables mpirun sets" in err, err[-3000:]
    assert "taskring launch --hosts N" in err


@pytest.mark.parametrize(
    "env",
    [
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3", "PMIX_RANK": "1", "PMIX_NAMESPACE": "77"},
        {"PMI_RANK": "1", "PMI_SIZE": "2"},
        {"PMI_RANK": "0", "PMI_SIZE": "2"},
    ],
    ids=["ompi+pmix-host", "pmi-host", "pmi-rank0"],
)
def test_rank_variables_that_mpi_disagrees_with_are_an_error(tmp_path, env):
    # The variables look like a launch's, but MPI_Init makes the process a job of its own
    # (rank 0 of 1): the rank and size MPI gives are checked against the environment's.
    err = _run_init(tmp_path, env)
    assert "not part of a running MPI job" in err and "MPI_Init made it rank 0 of 1" in err, err[-3000:]


def test_the_environment_of_a_launch_that_has_ended_is_an_error(tmp_path):
    # A rank's whole environment, kept after its launch ended (a shell started by mpirun,
    # a saved env): its PMIx server is gone.
    cmd = [sys.executable, "-m", "taskring", "launch", "--hosts", "1", *(["--netns"] if NETNS else []), os.path.join(L4, "dump_env.py"), str(tmp_path / "env")]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=60)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    stale = json.loads((tmp_path / "env.1.json").read_text())
    stale = {k: v for k, v in stale.items() if k.startswith(("OMPI_", "PMI_", "PMIX_"))}
    assert stale["OMPI_COMM_WORLD_RANK"] == "1" and "PMIX_SERVER_TMPDIR" in stale
    err = _run_init(tmp_path, stale)
    assert "not part of a running MPI job" in err and "PMIX_SERVER_TMPDIR" in err and "no longer exists" in err, err[-3000:]
