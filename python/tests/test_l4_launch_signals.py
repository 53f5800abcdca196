"""`taskring launch` stopped by a signal while its L4 job runs (SIGTERM, SIGHUP, Ctrl-C,
SIGKILL): the launcher hands the signal to mpirun, waits for the job to end (escalating to
SIGKILL after its grace period), and itself dies of that signal; no process of the job and
none of its shared-memory files (`/dev/shm/vader_segment.*`) or its PMIx directory is
left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from taskring import _native

HERE = os.path.dirname(os.path.abspath(__file__))
BUSY = os.path.join(HERE, "l4", "busy_job.py")
NETNS = hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None

pytestmark = [
    pytest.mark.skipif(not _native.mpi_built(), reason=_native.MPI_MISSING),
    pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.path.isdir("/proc"), reason="Linux only"),
]


def _job_processes(marker):
    """Pids of live processes whose command line names `marker` (mpirun, the ranks, and
    the chips a host forked all carry the job's arguments)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read()
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() + b"\0" in args and state != "Z":
            found.append(int(d))
    return found


def _segments(jobid):
    """The job's Open MPI shared-memory files: vader_segment.<node>.<jobid in hex>.<rank>."""
    tag = f"{jobid:x}"
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("vader_segment.") and n.rsplit(".", 2)[-2:-1] == [tag])


def _start(tmp_path, hosts, mode, grace_s=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "PMIX_"))}
    if grace_s is not None:
        env["TASKRING_LAUNCH_GRACE_S"] = str(grace_s)
    cmd = [sys.executable, "-m", "taskring", "launch", "--hosts", str(hosts), *(["--netns"] if NETNS else []), BUSY, str(tmp_path), mode]
    log = open(tmp_path / "launch.log", "w")
    # Its own session, as a job started from a shell is its own process group: Ctrl-C
    # is then a SIGINT to that group.
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 40
    want = ["rank0.json"] + [f"host{r}" for r in range(1, hosts + 1)]
    while not all((tmp_path / n).exists() for n in want):
        if p.poll() is not None or time.monotonic() > deadline:
            _kill_leftovers(str(tmp_path), None)
            pytest.fail(f"the job did not start (exit {p.poll()}): " + (tmp_path / "launch.log").read_text()[-3000:])
        time.sleep(0.05)
    return p, json.loads((tmp_path / "rank0.json").read_text())


def _kill_leftovers(marker, info):
    """What a failing test must not leave behind for the rest of the suite."""
    for pid in _job_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if info is not None:
        for n in _segments(info["jobid"]):
            try:
                os.unlink(os.path.join("/dev/shm", n))
            except FileNotFoundError:
                pass
        if info["pmix_dir"] and os.path.basename(info["pmix_dir"]).startswith("pid."):
            shutil.rmtree(info["pmix_dir"], ignore_errors=True)


def _stop_and_check(tmp_path, p, info, sig, to_group, bound_s):
    marker = str(tmp_path)
    try:
        assert _segments(info["jobid"]), "the running job has its shared-memory files"
        t0 = time.monotonic()
        if to_group:
            os.killpg(p.pid, sig)  # what a terminal does on Ctrl-C
        else:
            os.kill(p.pid, sig)
        try:
            p.wait(timeout=bound_s + 10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launcher did not exit within {bound_s + 10} s of {sig.name}")
        took = time.monotonic() - t0
        log = (tmp_path / "launch.log").read_text()
        # The launcher returns once mpirun is gone; the chips leave as their host's pipe
        # closes (~10 ms; one that never does is a hang, which the suite's watchdog ends).
        while _job_processes(marker):
            time.sleep(0.05)
        assert _segments(info["jobid"]) == [], log[-3000:]
        if info["pmix_dir"]:
            assert not os.path.exists(info["pmix_dir"]), info["pmix_dir"]
        assert "should not have" not in log
        assert p.returncode == -sig, (p.returncode, log[-3000:])  # it died of the signal
        assert took < bound_s, (took, log[-3000:])
        return took
    finally:
        _kill_leftovers(marker, info)


# SIGKILL cannot be handed on: mpirun gets SIGTERM from the kernel as the launcher dies.
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=["SIGTERM", "SIGHUP", "SIGKILL"])
def test_a_signal_to_the_launcher_ends_the_whole_job_and_its_files(tmp_path, sig):
    p, info = _start(tmp_path, 2, "plain")
    _stop_and_check(tmp_path, p, info, sig, to_group=False, bound_s=5.0)


def test_ctrl_c_ends_the_job_and_leaves_dev_shm_as_it_was(tmp_path):
    p, info = _start(tmp_path, 2, "plain")
    _stop_and_check(tmp_path, p, info, signal.SIGINT, to_group=True, bound_s=5.0)


def test_a_job_that_outlasts_the_grace_period_is_killed_and_its_files_removed(tmp_path):
    # Every rank ignores SIGTERM, so mpirun would need ~1 s more (its own SIGKILL); the
    # launcher's grace is shorter: it kills the job itself and removes the job's files.
    p, info = _start(tmp_path, 1, "deaf", grace_s=0.3)
    _stop_and_check(tmp_path, p, info, signal.SIGTERM, to_group=False, bound_s=3.0)


def test_a_pmix_directory_left_by_an_mpirun_that_crashed_is_removed(tmp_path):
    # An mpirun that dies in its own finalize leaves /tmp/ompi.<node>.<uid>/pid.<its pid>.
    fake = tmp_path / "mpirun"
    fake.write_text('#!/bin/sh\nmkdir -p "$TMPDIR/ompi.node.0/pid.$$"\nexit 245\n')
    fake.chmod(0o755)
    other = tmp_path / "ompi.node.0" / "pid.1"
    other.mkdir(parents=True)
    script = tmp_path / "job.py"
    script.write_text("pass\n")
    env = dict(os.environ, TASKRING_MPIRUN=str(fake), TMPDIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "taskring", "launch", "--hosts", "1", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 245, r.stderr
    assert sorted(p.name for p in (tmp_path / "ompi.node.0").iterdir()) == ["pid.1"]  # only its own went
