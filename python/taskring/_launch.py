"""``taskring launch --hosts N script.py [args]``: an L4 job on this machine (or, with
``--hostfile``, across nodes).

It runs Open MPI's ``mpirun`` with N + 1 ranks of this Python (rank 0 orchestrates,
ranks 1..N are hosts 0..N-1) and the flags for one machine: more ranks than cores
(``--oversubscribe``), no core binding (a host's chips are child processes that must
be free to run on any core), and traffic only through shared memory and the loopback
interface (``--mca btl self,vader --mca oob_tcp_if_include lo --mca
btl_tcp_if_include lo``). As root it sets ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` (Open MPI refuses root otherwise).

Open MPI 4.1's ``mpirun`` also opens listening sockets on every interface for its own
bootstrap (``oob tcp``, whatever ``oob_tcp_if_include`` says; no MPI traffic uses them).
``--netns`` runs the whole job in a new network namespace whose only interface is the
loopback (``unshare --net`` as root; Linux), so that nothing the job opens is reachable
from another address — what the test suite does.

``taskring launch --hostfile FILE [--hosts N] script.py [args]`` runs the job across the
nodes of an Open MPI hostfile instead: one rank per node (``--map-by node``; rank 0 on
the first node, host h on node h + 1; N defaults to the nodes after the first), no core
binding, MPI traffic over shared memory within a node and TCP between nodes (``--mca
btl self,vader,tcp``; ``--iface IF`` — an interface name or a CIDR — chooses the network
for it and for Open MPI's bootstrap). Remote ranks are started through ssh, which passes
no variables: every ``PTO2_RING_*`` and ``TASKRING_*`` variable set where the launcher
runs is forwarded with ``mpirun -x`` (``--env NAME`` forwards another). The script and
this Python must exist at the same paths on every node.

When a rank dies, mpirun ends the job: it sends the other ranks SIGCONT, waits
``odls_base_sigkill_timeout`` seconds, sends SIGTERM, and as long again later SIGKILL to
a rank still there. The launcher sets that timeout to ``--kill-timeout`` (0 by default:
the job ends within a fraction of a second; a rank's chips exit as its pipe closes and
its buffers are anonymous memory, so nothing is left for a rank to clean up), and after
a job that ended with a non-zero status says which rank is which host. ``--mca NAME
VALUE`` passes any other Open MPI parameter.

Stopping: mpirun runs in a session of its own, so that a terminal's Ctrl-C (or a hang-up)
reaches only the launcher, which hands SIGINT, SIGTERM or SIGHUP to mpirun once and waits
for it: mpirun stops the ranks and removes the job's files (its shared-memory segments
``/dev/shm/vader_segment.*`` and its PMIx directory), ~0.05 s at ``--kill-timeout 0``.
Past the grace period (``TASKRING_LAUNCH_GRACE_S``, 5 s) or at a second signal, the
launcher SIGKILLs mpirun and every process of the job, and removes what the job left of
those files itself — only the segments named with the job's own id that appeared during
the launch, and the PMIx directory of its own mpirun. Then the launcher dies of the signal it received. mpirun
also gets SIGTERM when the launcher dies of anything else (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import argparse
import glob
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

LOCAL_MCA = ["--mca", "btl", "self,vader", "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"]
# The variables a rank reads (ring sizes, taskring's own settings) that ssh does not pass
# to another node; the launcher's own settings stay here.
FORWARDED_PREFIXES = ("PTO2_RING_", "TASKRING_")
LAUNCHER_ONLY = {"TASKRING_MPIRUN", "TASKRING_LAUNCH_GRACE_S"}


def command(
    hosts: int, target: List[str], mpirun: str = "mpirun", python: Optional[str] = None, kill_timeout_s: int = 0, mca: Sequence[Tuple[str, str]] = ()
) -> List[str]:
    """The mpirun command line for ``hosts`` hosts on this machine running ``target`` (a
    script and its arguments, or ``-m module ...``)."""
    return [mpirun, "-np", str(hosts + 1), "--oversubscribe", "--bind-to", "none", *LOCAL_MCA, *_mca(kill_timeout_s, mca), python or sys.executable, *target]


def cluster_command(
    hosts: int,
    hostfile: str,
    target: List[str],
    env: Dict[str, str],
    mpirun: str = "mpirun",
    python: Optional[str] = None,
    iface: Optional[str] = None,
    kill_timeout_s: int = 0,
    forward: Sequence[str] = (),
    mca: Sequence[Tuple[str, str]] = (),
) -> List[str]:
    """The mpirun command line for ``hosts`` hosts across the nodes of ``hostfile``, one
    rank per node, with the variables of ``env`` that ranks read forwarded (``-x``)."""
    net = ["--mca", "btl", "self,vader,tcp"]
    if iface:
        net += ["--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface]
    names = sorted({k for k in env if k.startswith(FORWARDED_PREFIXES) and k not in LAUNCHER_ONLY} | {k for k in forward if k in env})
    return [
        mpirun,
        "-np",
        str(hosts + 1),
        "--hostfile",
        hostfile,
        "--map-by",
        "node",
        "--bind-to",
        "none",
        *net,
        *_mca(kill_timeout_s, mca),
        *[a for k in names for a in ("-x", k)],
        python or sys.executable,
        *target,
    ]


def _mca(kill_timeout_s: int, mca: Sequence[Tuple[str, str]]) -> List[str]:
    """The kill timeout and the caller's own Open MPI parameters, as mpirun flags."""
    return ["--mca", "odls_base_sigkill_timeout", str(kill_timeout_s), *[a for k, v in mca for a in ("--mca", k, v)]]


def hostfile_nodes(path: str) -> List[str]:
    """The node names of an Open MPI hostfile (the first word of each line that is not
    blank or a comment)."""
    with open(path) as f:
        return [line.split()[0] for line in (raw.split("#", 1)[0] for raw in f) if line.strip()]


def isolated(cmd: List[str]) -> List[str]:
    """``cmd`` in a new network namespace with only the loopback interface, brought up."""
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "taskring-netns", *cmd]


def environment() -> dict:
    env = dict(os.environ)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(
        prog="taskring launch",
        description="Run an L4 script: mpirun with N+1 ranks on this machine (shared memory and loopback only), or across the nodes of a hostfile.",
    )
    p.add_argument("--hosts", type=int, default=None, help="number of hosts (MPI ranks 1..N); rank 0 orchestrates (with --hostfile: the nodes after the first by default)")
    p.add_argument("--hostfile", help="an Open MPI hostfile: one rank per node, rank 0 on the first (TCP between nodes; PTO2_RING_*/TASKRING_* forwarded)")
    p.add_argument("--iface", help="with --hostfile: the network for MPI and Open MPI's bootstrap (an interface name or a CIDR)")
    p.add_argument("--env", action="append", default=[], metavar="NAME", help="with --hostfile: forward this variable too (repeatable)")
    p.add_argument("--kill-timeout", type=int, default=0, metavar="S", help="seconds mpirun gives the other ranks between SIGCONT, SIGTERM and SIGKILL when a rank dies (odls_base_sigkill_timeout; default 0)")
    p.add_argument("--mca", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"), help="another Open MPI parameter for mpirun (repeatable)")
    p.add_argument("--mpirun", default=os.environ.get("TASKRING_MPIRUN", "mpirun"), help="the mpirun to use (default: mpirun on PATH)")
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    p.add_argument("--netns", action="store_true", help="run the job in a new network namespace with only the loopback interface (root, Linux; not with --hostfile)")
    p.add_argument("target", nargs=argparse.REMAINDER, help="script.py [args] or -m module [args]")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    target = a.target[1:] if a.target[:1] == ["--"] else a.target
    if not target:
        print("taskring launch: give the script to run: taskring launch --hosts N script.py [args]", file=sys.stderr)
        return 2
    if a.kill_timeout < 0:
        print(f"taskring launch: --kill-timeout must be at least 0, got {a.kill_timeout}", file=sys.stderr)
        return 2
    if a.hostfile is None:
        for flag, given in (("--iface", a.iface), ("--env", a.env)):
            if given:
                print(f"taskring launch: {flag} goes with --hostfile (a launch on this machine uses the loopback and passes the whole environment)", file=sys.stderr)
                return 2
        if a.hosts is None:
            print("taskring launch: give --hosts N (or --hostfile FILE)", file=sys.stderr)
            return 2
    else:
        if a.netns:
            print("taskring launch: --netns is for a launch on this machine, not with --hostfile", file=sys.stderr)
            return 2
        try:
            nodes = hostfile_nodes(a.hostfile)
        except OSError as e:
            print(f"taskring launch: cannot read the hostfile {a.hostfile}: {e.strerror}", file=sys.stderr)
            return 2
        if a.hosts is None:
            a.hosts = len(nodes) - 1
            if a.hosts < 1:
                print(f"taskring launch: the hostfile {a.hostfile} names {len(nodes)} node(s); it needs 2 or more (rank 0 and a host), or give --hosts N", file=sys.stderr)
                return 2
    if a.hosts < 1:
        print(f"taskring launch: --hosts must be at least 1, got {a.hosts}", file=sys.stderr)
        return 2
    if target[0] != "-m" and not os.path.exists(target[0]):
        print(f"taskring launch: no such script: {target[0]}", file=sys.stderr)
        return 2
    env = environment()
    mca = [(k, v) for k, v in a.mca]
    if a.hostfile is None:
        cmd = command(a.hosts, target, mpirun=a.mpirun, kill_timeout_s=a.kill_timeout, mca=mca)
    else:
        if target[0] != "-m":
            target = [os.path.abspath(target[0]), *target[1:]]  # the same path on every node
        cmd = cluster_command(a.hosts, os.path.abspath(a.hostfile), target, env, mpirun=a.mpirun, iface=a.iface, kill_timeout_s=a.kill_timeout, forward=a.env, mca=mca)
    if a.netns:
        missing = [t for t in ("unshare", "ip") if shutil.which(t) is None]
        if missing:
            print(f"taskring launch: --netns needs {' and '.join(missing)} (util-linux, iproute2)", file=sys.stderr)
            return 2
        cmd = isolated(cmd)
    if a.dry_run:
        print(" ".join(cmd))
        return 0
    if shutil.which(a.mpirun) is None:
        print(
            f"taskring launch: {a.mpirun} not found; L4 needs Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev libclang-dev, or `make mpi` as root)",
            file=sys.stderr,
        )
        return 2
    return run(cmd, env)


STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
SHM = "/dev/shm"


def grace_s() -> float:
    try:
        g = float(os.environ.get("TASKRING_LAUNCH_GRACE_S", "5"))
    except ValueError:
        g = 5.0
    return g if g >= 0 else 5.0


def run(cmd: List[str], env: Dict[str, str]) -> int:
    """Run the job; on SIGINT, SIGTERM or SIGHUP end it (see the module's text) and die
    of that signal. Returns mpirun's exit status otherwise."""
    if threading.current_thread() is not threading.main_thread():
        return subprocess.call(cmd, env=env)  # signals are the main thread's business
    got: List[int] = []
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    previous = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in STOP_SIGNALS}
    old_wakeup = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    try:
        if got:
            return _die_of(got[0])
        job = _Job(cmd, env)
        job.wait(got, rfd)
        if not got:
            job.remove_own_pmix_dir()
            if job.returncode != 0:
                print(f"taskring launch: the job ended with status {job.returncode} (in mpirun's messages, rank 0 orchestrates and rank r is host r-1)", file=sys.stderr)
            return job.returncode
    finally:
        signal.set_wakeup_fd(old_wakeup)
        for s, h in previous.items():
            signal.signal(s, h)
        os.close(rfd)
        os.close(wfd)
    job.remove_leftovers()
    return _die_of(got[0])


def _die_of(signum: int) -> int:
    """End this process by `signum` (its default action), so that whoever started the
    launcher sees what stopped it (a shell loop stops at Ctrl-C). 128 + signum if that
    signal cannot end it."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return 128 + signum


def _end_with_parent() -> Optional[Callable[[], None]]:
    """What mpirun's process runs before its exec so that it gets SIGTERM when the
    launcher dies (Linux's PR_SET_PDEATHSIG); None elsewhere. Looked up here, in the
    launcher, so that the child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    term = int(signal.SIGTERM)
    return lambda: prctl(1, term, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG


class _Job:
    """mpirun (in a new session) and what it takes to end it and clean up after it."""

    def __init__(self, cmd: List[str], env: Dict[str, str]) -> None:
        self.shm_before = _vader_segments()
        self.proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_end_with_parent())
        # The job's ids, learnt from its ranks while they live: Open MPI job ids
        # (vader_segment.<node>.<jobid hex>.<local rank>) and PMIx directories.
        self.jobids: Set[int] = set()
        self.pmix_dirs: Set[str] = set()
        self.returncode = 0

    def wait(self, got: List[int], wakeup_fd: int) -> None:
        """Until mpirun exits. The first signal is handed to mpirun; at the second, or
        when the grace period is over, the job is killed."""
        proc = self.proc
        try:
            pidfd: Optional[int] = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            pidfd = None  # then look every 0.2 s
        deadline: Optional[float] = None
        handed = 0
        try:
            while proc.poll() is None:
                if len(got) > handed:
                    if handed == 0:
                        self.learn_ids()
                        proc.send_signal(got[0])
                        deadline = time.monotonic() + grace_s()
                    handed = len(got)
                    if handed > 1:
                        break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                timeout = None if pidfd is not None else 0.2
                if deadline is not None:
                    left = max(0.0, deadline - time.monotonic())
                    timeout = left if timeout is None else min(timeout, left)
                fds = [wakeup_fd] + ([pidfd] if pidfd is not None else [])
                ready, _, _ = select.select(fds, [], [], timeout)
                if wakeup_fd in ready:
                    os.read(wakeup_fd, 512)
            if proc.poll() is None:
                self.kill()
        finally:
            if pidfd is not None:
                os.close(pidfd)
        self.returncode = proc.returncode if proc.returncode is not None else 1

    def kill(self) -> None:
        """SIGKILL mpirun and every process of the job: mpirun's descendants and the
        process groups they lead (a rank leads its own; its chips are in it), then wait
        for mpirun (bounded)."""
        self.learn_ids()
        tree = _descendants(self.proc.pid)
        groups = {g for g in (_pgid(p) for p in tree) if g in tree and g != os.getpgrp()}
        for g in groups:
            _signal(g, signal.SIGKILL, group=True)
        for p in tree:
            _signal(p, signal.SIGKILL)
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            print(f"taskring launch: mpirun (pid {self.proc.pid}) did not end after SIGKILL", file=sys.stderr)

    def learn_ids(self) -> None:
        for p in _descendants(self.proc.pid):
            env = _environ(p)
            jobid = env.get("OMPI_MCA_ess_base_jobid", "")
            if jobid.isdigit():
                self.jobids.add(int(jobid))
            d = env.get("PMIX_SERVER_TMPDIR")
            # Only the directory of this launch's own mpirun.
            if d and os.path.basename(d.rstrip("/")) == f"pid.{self.proc.pid}":
                self.pmix_dirs.add(d)

    def remove_own_pmix_dir(self) -> None:
        """mpirun ended by itself: a PMIx directory still named with its pid is one it
        did not get to remove (it crashed in its own finalize, as Open MPI 4.1 can after
        MPI_Abort)."""
        base = os.environ.get("TMPDIR") or "/tmp"
        for d in glob.glob(os.path.join(base, "ompi.*", f"pid.{self.proc.pid}")):
            shutil.rmtree(d, ignore_errors=True)

    def remove_leftovers(self) -> None:
        """What a killed job leaves: its shared-memory segments (new since the launch
        and named with its job id) and its mpirun's PMIx directory."""
        tags = {f"{j:x}" for j in self.jobids}
        for name in sorted(_vader_segments() - self.shm_before):
            if name.rsplit(".", 2)[-2] in tags:
                try:
                    os.unlink(os.path.join(SHM, name))
                except OSError:
                    pass
        for d in self.pmix_dirs:
            shutil.rmtree(d, ignore_errors=True)


def _vader_segments() -> Set[str]:
    """This user's Open MPI shared-memory segment files (vader_segment.<node>.<jobid
    hex>.<local rank>)."""
    try:
        names = os.listdir(SHM)
    except OSError:
        return set()
    found = set()
    for n in names:
        parts = n.rsplit(".", 2)
        if n.startswith("vader_segment.") and len(parts) == 3 and parts[2].isdigit():
            try:
                if os.stat(os.path.join(SHM, n)).st_uid == os.getuid():
                    found.add(n)
            except OSError:
                pass
    return found


def _descendants(root: int) -> Set[int]:
    """`root` and its live descendants (Linux /proc; just `root` elsewhere)."""
    children: Dict[int, List[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {root}
    for d in entries:
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out = {root}
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def _environ(pid: int) -> Dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _signal(pid: int, sig: int, group: bool = False) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except OSError:
        pass
