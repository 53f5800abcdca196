"""L4 over MPI (docs/api.md §9), through `taskring launch` (mpirun on shared memory and
loopback): the config surviving both hops at its limits, env fallback on a host, dependent
tasks across hosts, a failing kernel on one host, host-resident tensors, big transfers,
a killed host rank, and the errors outside a launch. Skipped only when this build has no
MPI (make mpi installs it; CI does)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

import taskring
from taskring import _native

HERE = os.path.dirname(os.path.abspath(__file__))
L4 = os.path.join(HERE, "l4")

needs_mpi = pytest.mark.skipif(not _native.mpi_built(), reason=_native.MPI_MISSING)


# As root (CI), every job runs in a network namespace with only the loopback interface:
# nothing the job opens can be reached from another address (mpirun itself listens on
# every interface of the namespace it runs in).
NETNS = hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None


# Across the nodes of a cluster instead, one rank per node, when python/tests/cluster/run.sh
# (make test-cluster) runs these tests: its hostfile and the launch's extra flags.
HOSTFILE = os.environ.get("TASKRING_TEST_HOSTFILE")
CLUSTER_ARGS = shlex.split(os.environ.get("TASKRING_TEST_LAUNCH_ARGS", ""))


def launch(hosts, script, *args, timeout=120, env=None, flags=()):
    where = ["--hostfile", HOSTFILE, *CLUSTER_ARGS] if HOSTFILE else (["--netns"] if NETNS else [])
    cmd = [sys.executable, "-m", "taskring", "launch", "--hosts", str(hosts), *where, *flags, script, *args]
    env = dict(os.environ, **(env or {}))
    for k in [k for k in env if k.startswith(("OMPI_", "PMI_", "PMIX_"))]:
        del env[k]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    d = tmp_path_factory.mktemp("l4")
    out = d / "res.json"
    p = launch(2, os.path.join(L4, "scenarios.py"), str(out), str(d))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(out.read_text())


@needs_mpi
def test_every_config_field_survives_the_hop_to_each_host(scenarios):
    assert scenarios["num_hosts"] == 2
    assert len(scenarios["echo"]) == 4
    for i, e in enumerate(scenarios["echo"]):
        assert e["got"] == e["sent"]
        # A host's DFX files go to its own directory of the prefix.
        assert e["prefix_got"] == e["prefix_sent"] + f"/host{i % 2}"
    assert len(scenarios["echo"][2]["prefix_sent"].encode()) == 4096


@needs_mpi
def test_both_hops_carry_per_host_sizes_with_a_per_chip_tweak_and_env_fallback(scenarios):
    hops = scenarios["hops"]
    assert [h["worker"] for h in hops] == [0, 1] and [h["rank"] for h in hops] == [1, 2]
    for h in hops:
        assert h["error"] is None
        host = h["worker"]
        c0, c1 = h["chips"]
        assert (c0["worker"], c1["worker"]) == (0, 1)
        assert c0["window0"] == c1["window0"] == 64 << host
        assert c0["heap0"] == 1 << (20 + host)
        assert c1["heap0"] == 2 << (20 + host)  # the host's tweak for chip 1
        for c in (c0, c1):
            assert c["src"][:2] == ["call_config", "call_config"]
            assert c["src"][3] == "default"
            # Host 1's chips inherited PTO2_RING_DEP_POOL=512; host 0 has no such env.
            assert (c["dep_pool0"], c["src"][2]) == ((512, "env") if host == 1 else (16384, "default"))
    assert scenarios["hops_ok"]
    assert scenarios["report_type"] == ["NodeRunReport", "HostTaskReport"]


@needs_mpi
def test_hosts_given_one_output_prefix_write_their_own_directories_and_one_timeline(scenarios):
    files = scenarios["dfx_files"]
    bad = [f for f, ok in files.items() if not ok]
    assert bad == [], bad
    for h in (0, 1):
        for f in ("scope_stats/scope_stats.jsonl", "deps.json", "merged_swimlane.json"):
            assert f"host{h}/{f}" in files, sorted(files)
            for c in (0, 1):
                assert f"host{h}/chip{c}/{f}" in files, sorted(files)
    # Rank 0's own files stay at the prefix; nothing else is there.
    top = sorted(f for f in files if not f.startswith(("host0/", "host1/")))
    assert top == ["deps.json", "merged_swimlane.json", "scope_stats/scope_stats.jsonl"], top
    procs = scenarios["dfx_processes"]
    assert len(procs) == 1 + 2 * 3 and procs[-1].startswith("rank 0 (pid "), procs
    for h in (0, 1):
        assert sum(p.startswith(f"host {h} (rank {h + 1}): host (pid ") for p in procs) == 1, procs
        for c in (0, 1):
            assert sum(p.startswith(f"host {h} (rank {h + 1}): chip {c} (pid ") for p in procs) == 1, procs
    assert len(scenarios["dfx_lanes_with_slices"]) == 7, scenarios["dfx_lanes_with_slices"]
    assert scenarios["dfx_ok"]


@needs_mpi
def test_dependent_tasks_across_hosts_see_each_others_outputs(scenarios):
    assert scenarios["chain"] == [1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]


@needs_mpi
def test_a_failing_kernel_on_one_host_fails_its_task_only(scenarios):
    msg = scenarios["fail"]
    assert msg is not None and msg.startswith("host 1 (rank 2): chip 1 (pid "), msg
    assert "TASK_FAILED" in msg and "kernel exploded on purpose" in msg
    assert scenarios["fail_other_ok"]
    assert scenarios["after_fail_ok"]


@needs_mpi
def test_an_orchestration_raising_on_a_host_fails_its_task_with_the_text(scenarios):
    assert scenarios["raised"] == [
        "host 0 (rank 1): the host's orchestration raised on purpose",
        "host 0 (rank 1): LookupError",
    ]
    assert scenarios["after_fail_ok"]


@needs_mpi
def test_a_program_named_near_the_frame_limit_runs_on_a_host(scenarios):
    assert scenarios["long_name"] == [[6, None]]


@needs_mpi
def test_host_resident_tensors_stay_on_their_host(scenarios):
    assert scenarios["kv"] == [1, [64], "float32", 256]
    assert scenarios["kv_ok"]
    assert scenarios["kv_other_host"] == "submit_next_level: argument 0 is a tensor resident on host 1; it cannot be passed to host 0"


@needs_mpi
def test_big_inputs_travel_there_and_back(scenarios):
    assert scenarios["big_1048576"] and scenarios["big_4194304"]
    # six 1 MiB copies in flight to one host at once
    assert scenarios["big_in_flight"]


@needs_mpi
def test_a_malformed_task_frame_fails_that_task_and_the_host_keeps_serving(scenarios):
    seq, status, error, n_out = scenarios["malformed"]
    assert (seq, status, n_out) == (77, 1, 0)
    assert error.startswith("malformed L4 task frame: frame body truncated at byte"), error
    assert scenarios["after_malformed_ok"]


@needs_mpi
def test_ctrl_c_on_rank_0_interrupts_the_run_and_the_worker_stays_usable(tmp_path):
    out = tmp_path / "res.json"
    p = launch(1, os.path.join(L4, "interrupt.py"), str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["raised"] is not None and res["raised"].startswith("KeyboardInterrupt")
    # after the signal (0.3 s in), before the host's 1.5 s task ended
    assert res["after_s"] >= 0.3 and res["out_at_raise"] == [0.0] * 8, res
    assert res["next_run_ok"]


def _leftovers(marker):
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if marker in l and "ps -eo" not in l]


def _wait_no_leftovers(marker):
    """Until no process of the job is left: chips exit as their host's pipe closes
    (measured: ~10 ms); one that never does is a hang, which the suite's watchdog ends."""
    while _leftovers(marker):
        time.sleep(0.05)


@needs_mpi
@pytest.mark.parametrize("kill_timeout", [0, 1])
def test_a_killed_host_rank_ends_the_job_without_leftovers(tmp_path, kill_timeout):
    death = tmp_path / "death"
    script = os.path.join(L4, "killed_host.py")
    p = launch(2, script, str(death), timeout=60, flags=("--kill-timeout", str(kill_timeout)))
    assert p.returncode != 0
    assert death.exists(), p.stdout[-2000:] + p.stderr[-2000:]
    text = p.stdout + p.stderr
    # mpirun ended the job before rank 0's host timeout (5 s) could say the host is gone
    assert "not responding" not in text, text[-2000:]
    assert "rank 2" in text, text[-2000:]
    assert "should not have" not in text
    # The launcher names the ranks; rank 0, given time between SIGTERM and SIGKILL, says
    # why it ends (at 0 s SIGKILL comes at once, and it may not get to).
    assert f"taskring launch: the job ended with status {p.returncode} (in mpirun's messages, rank 0 orchestrates and rank r is host r-1)" in p.stderr
    if kill_timeout:
        assert "taskring: rank 0 got SIGTERM: the job is being ended (by mpirun when another rank died" in text, text[-2000:]
    _wait_no_leftovers(str(death))


@needs_mpi
@pytest.mark.parametrize("how,status", [("raise", 1), ("exit", 3), ("ok", 0)])
def test_rank_0_failing_after_init_ends_the_job_while_its_host_waits_for_it(tmp_path, how, status):
    # The host waits for a message from rank 0 after serving (as B8's host waits for its
    # bare ping-pong); MPI_Finalize on rank 0 would wait for that host forever.
    ran = tmp_path / "ran"
    p = launch(1, os.path.join(L4, "rank0_raises.py"), how, str(ran), timeout=90)
    assert ran.exists(), p.stdout[-2000:] + p.stderr[-2000:]
    assert p.returncode == status, p.stdout[-2000:] + p.stderr[-2000:]
    aborted = f"taskring: rank 0 is exiting with status {status} (an uncaught exception or sys.exit) with MPI initialised; ending the job with MPI_Abort"
    assert (aborted in p.stderr) == (status != 0), p.stderr[-2000:]
    assert "rank 0 got SIGTERM" not in p.stderr  # the abort is rank 0's own: no news to it
    if how == "raise":
        assert "LookupError: rank 0 fails on purpose" in p.stderr
        assert p.stderr.index("LookupError") < p.stderr.index(aborted)
    _wait_no_leftovers(str(ran))


@needs_mpi
def test_a_stopped_host_is_not_responding_within_the_timeout_and_the_job_ends(tmp_path):
    out = tmp_path / "res.json"
    p = launch(2, os.path.join(L4, "stopped_host.py"), str(out), "1000", timeout=90)
    assert out.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(out.read_text())
    # A host busy for 2.5 timeouts (half of it holding the GIL) answers its pings.
    assert res["busy_ok"] and res["busy_s"] >= 2.4, res
    err = res["stopped_error"]
    assert err is not None and err.startswith("host 1 (rank 2): not responding: no answer to pings for "), res
    assert "TASKRING_HOST_TIMEOUT_MS=1000" in err
    # The host timeout decided it, never earlier (a stop never noticed, or a close that
    # waits for the stopped host, hangs the job: the launch's timeout fails the test).
    assert int(re.search(r"no answer to pings for (\d+) ms", err).group(1)) >= 1000, err
    assert res["other_ok"] and res["after_ok"], res
    assert res["later_error"] == err, res  # the verdict kept, not a new wait on the host
    # A stopped rank cannot finalize: rank 0 ends the job with MPI_Abort.
    assert p.returncode != 0
    assert "ending the job with MPI_Abort" in p.stderr, p.stderr[-2000:]
    _wait_no_leftovers(str(out))


@needs_mpi
def test_a_host_ended_by_systemexit_or_keyboardinterrupt_fails_its_tasks_and_the_job_ends(tmp_path):
    out = tmp_path / "res.json"
    p = launch(3, os.path.join(L4, "leaving_host.py"), str(out), timeout=90)
    assert out.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["exit"][0] == "host 0 (rank 1): SystemExit: 3; the host stopped serving", res
    assert res["exit_others_ok"]
    # the verdict kept (a new wait on the host would end in "not responding")
    assert res["exit_later"][0] == "host 0 (rank 1): stopped serving (SystemExit: 3)", res
    # SIGINT while the host waits for requests: rank 0 learns it at its next task there
    # (after a fifth of the host timeout, 5 s by default), from the host, not by timing out.
    assert res["sigint"][0] == "host 1 (rank 2): stopped serving (KeyboardInterrupt)", res
    assert res["sigint_other"][0] is None and res["sigint_other_ok"], res
    assert res["interrupt"][0] == "host 2 (rank 3): KeyboardInterrupt; the host stopped serving", res
    assert res["interrupt_later"][0] == "host 2 (rank 3): stopped serving (KeyboardInterrupt)", res
    _wait_no_leftovers(str(out))


@needs_mpi
def test_ring_and_taskring_variables_of_the_launching_shell_reach_every_rank(tmp_path):
    # Across nodes, remote ranks start with ssh's environment: the launcher forwards these.
    env = {"PTO2_RING_HEAP": "1048576,0,0,0", "TASKRING_HOST_TIMEOUT_MS": "7000", "TASKRING_TEST_MARK": "x y"}
    p = launch(2, os.path.join(L4, "dump_env.py"), str(tmp_path / "env"), env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for rank in range(3):
        got = json.loads((tmp_path / f"env.{rank}.json").read_text())
        assert {k: got.get(k) for k in env} == env, rank


@needs_mpi
def test_an_output_prefix_on_a_node_local_file_system_leaves_each_hosts_files_on_its_node(tmp_path):
    # One machine: one /tmp, everything in one place. Across nodes: each host's directory
    # on its own node, rank 0's L4 timeline (shipped back over MPI) complete on rank 0's.
    prefix = f"/tmp/taskring-local-prefix-{os.getpid()}-{time.time_ns()}"
    try:
        p = launch(2, os.path.join(L4, "local_prefix.py"), str(tmp_path / "ls"), prefix)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        got = [json.loads((tmp_path / f"ls.{r}.json").read_text()) for r in range(3)]
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
    timeline = ["host 0 (rank 1): chip 0", "host 0 (rank 1): host", "host 1 (rank 2): chip 0", "host 1 (rank 2): host", "rank 0"]
    assert got[0]["timeline"] == timeline
    hosts = [{f for f in g["files"] if f.startswith(f"host{h}/")} for h, g in enumerate(got[1:])]
    assert all(hosts) and "host0/merged_swimlane.json" in hosts[0], got
    if len({g["node"] for g in got}) == 1:
        assert all(set(g["files"]) == set(got[0]["files"]) for g in got)
    else:
        assert [f for f in got[0]["files"] if f.startswith("host")] == [], got[0]
        assert [g["files"] for g in got[1:]] == [sorted(h) for h in hosts], got
    assert "merged_swimlane.json" in got[0]["files"]


@needs_mpi
@pytest.mark.skipif(HOSTFILE is not None, reason="a launch across nodes uses their network, not a namespace of its own")
@pytest.mark.skipif(not NETNS, reason="needs root, unshare and ip for a network namespace")
def test_a_job_under_netns_sees_only_the_loopback_interface(tmp_path):
    out = tmp_path / "net.txt"
    p = launch(1, os.path.join(L4, "interfaces.py"), str(out))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    ifaces = out.read_text().split()
    assert ifaces == ["lo"], ifaces


def test_init_outside_an_mpi_launch_says_how_to_launch():
    code = (
        "import taskring\n"
        "w = taskring.Worker(level=4)\n"
        "try:\n"
        "    w.init()\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60).stdout
    if _native.mpi_built():
        assert "needs an MPI launch with at least 2 ranks" in out and "taskring launch --hosts N" in out
    else:
        assert "built without MPI" in out


def test_level4_arguments_are_checked():
    with pytest.raises(TypeError, match="arena_cache_slots and chip_processes"):
        taskring.Worker(level=4, device_ids=[0])
    w = taskring.Worker(level=4)
    with pytest.raises(TypeError, match="DistributedProgram"):
        w.register(object())
    unsigned = taskring.DistributedProgram(lambda o, c, a, cfg: None, chips={})
    with pytest.raises(ValueError, match="needs signature"):
        w.register(unsigned)
    with pytest.raises(RuntimeError, match="init"):
        w.run(lambda o, a, c: None)


def test_an_l4_program_name_over_256_utf8_bytes_is_rejected_at_register():
    def named(name):
        def orch(o, chips, args, cfg):
            pass

        orch.__name__ = name
        return taskring.DistributedProgram(orch, chips={}, signature=[taskring.SCALAR])

    w = taskring.Worker(level=4)
    assert w.register(named("n" * 256)) == 0
    assert w.register(named("é" * 128)) == 1  # 256 bytes of UTF-8
    with pytest.raises(ValueError, match=r"is 257 bytes in UTF-8; an L4 program name is at most 256 bytes \(UTF-8\)"):
        w.register(named("n" * 257))
    with pytest.raises(ValueError, match=r"is 258 bytes in UTF-8; .*at most 256 bytes"):
        w.register(named("é" * 129))  # 129 characters, 258 bytes
    with pytest.raises(ValueError, match="UTF-8"):
        w.register(named("\udc80"))
    # A name changed after register() is checked again at init().
    p = named("ok")
    w2 = taskring.Worker(level=4)
    w2.register(p)
    p.name = "x" * 300
    with pytest.raises(ValueError, match="is 300 bytes in UTF-8"):
        w2.init()


def test_launch_command_line(tmp_path):
    from taskring._launch import isolated

    assert isolated(["mpirun", "x"])[:3] == ["unshare", "--net", "--"] and isolated(["mpirun", "x"])[-2:] == ["mpirun", "x"]
    from taskring._launch import command

    cmd = command(2, ["app.py", "--x"], python="py")
    assert cmd[:3] == ["mpirun", "-np", "3"]
    assert "--oversubscribe" in cmd and cmd[-3:] == ["py", "app.py", "--x"]
    joined = " ".join(cmd)
    assert "--mca btl self,vader" in joined
    assert "--mca oob_tcp_if_include lo" in joined and "--mca btl_tcp_if_include lo" in joined
    assert " ".join(cmd).count("--mca odls_base_sigkill_timeout 0") == 1
    r = subprocess.run([sys.executable, "-m", "taskring", "launch", "--hosts", "0", "x.py"], capture_output=True, text=True)
    assert r.returncode == 2 and "--hosts must be at least 1" in r.stderr
    r = subprocess.run([sys.executable, "-m", "taskring", "launch", "--hosts", "1", str(tmp_path / "nope.py")], capture_output=True, text=True)
    assert r.returncode == 2 and "no such script" in r.stderr


def test_launch_across_the_nodes_of_a_hostfile_forwards_the_ring_and_taskring_variables(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# rank 0 first\nnode-a slots=4\n\nnode-b slots=4\nnode-c\n")
    script = tmp_path / "app.py"
    script.write_text("")

    def dry(*flags, env=None):
        env = dict({k: v for k, v in os.environ.items() if not k.startswith(("PTO2_RING_", "TASKRING_"))}, **(env or {}))
        r = subprocess.run([sys.executable, "-m", "taskring", "launch", *flags, "--dry-run", str(script), "--x"], capture_output=True, text=True, env=env, cwd=tmp_path)
        return r.returncode, r.stdout.split(), r.stderr

    env = {"PTO2_RING_HEAP": "1048576", "TASKRING_HOST_TIMEOUT_MS": "9000", "TASKRING_LAUNCH_GRACE_S": "2", "OTHER": "1"}
    code, cmd, _ = dry("--hostfile", "hosts", "--iface", "10.0.0.0/8", "--env", "OTHER", "--kill-timeout", "2", "--mca", "pml", "ob1", env=env)
    assert code == 0
    joined = " ".join(cmd)
    # One rank per node: rank 0 and a host on each node after the first.
    assert cmd[:3] == ["mpirun", "-np", "3"] and f"--hostfile {hostfile} --map-by node --bind-to none" in joined
    assert "--mca btl self,vader,tcp" in joined and "--oversubscribe" not in cmd
    assert "--mca btl_tcp_if_include 10.0.0.0/8 --mca oob_tcp_if_include 10.0.0.0/8" in joined
    assert "--mca odls_base_sigkill_timeout 2" in joined and "--mca pml ob1" in joined
    forwarded = sorted(cmd[i + 1] for i, a in enumerate(cmd) if a == "-x")
    assert forwarded == ["OTHER", "PTO2_RING_HEAP", "TASKRING_HOST_TIMEOUT_MS"]  # not the launcher's own
    assert cmd[-2:] == [str(script), "--x"] and cmd[-3] == sys.executable

    code, cmd, _ = dry("--hostfile", str(hostfile), "--hosts", "5")
    assert code == 0 and cmd[:3] == ["mpirun", "-np", "6"] and "-x" not in cmd and "btl_tcp_if_include" not in cmd
    (tmp_path / "one").write_text("node-a\n")
    for flags, text in [
        (("--hostfile", "one"), "names 1 node(s); it needs 2 or more"),
        (("--hostfile", "nope"), "cannot read the hostfile nope"),
        (("--hostfile", "hosts", "--netns"), "--netns is for a launch on this machine"),
        (("--hosts", "2", "--iface", "lo"), "--iface goes with --hostfile"),
        (("--hosts", "2", "--kill-timeout", "-1"), "--kill-timeout must be at least 0"),
        ((), "give --hosts N (or --hostfile FILE)"),
    ]:
        code, _, err = dry(*flags)
        assert code == 2 and text in err, (flags, err)
