"""``taskring launch --hosts N script.py [args]``: an L4 job on this machine.

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

For a real cluster, run ``mpirun`` yourself with a hostfile, e.g. ``mpirun -np 5
--hostfile hosts --map-by node --bind-to none python app.py`` (one rank per node: rank
0 on the first, and a host per node after it; ``--mca btl_tcp_if_include <iface>`` to
choose the network).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from typing import List, Optional

LOCAL_MCA = ["--mca", "btl", "self,vader", "--mca", "oob_tcp_if_include", "lo", "--mca", "btl_tcp_if_include", "lo"]


def command(hosts: int, target: List[str], mpirun: str = "mpirun", python: Optional[str] = None) -> List[str]:
    """The mpirun command line for ``hosts`` hosts running ``target`` (a script and its
    arguments, or ``-m module ...``)."""
    return [mpirun, "-np", str(hosts + 1), "--oversubscribe", "--bind-to", "none", *LOCAL_MCA, python or sys.executable, *target]


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
    p = argparse.ArgumentParser(prog="taskring launch", description="Run an L4 script on this machine: mpirun with N+1 ranks (shared memory and loopback only).")
    p.add_argument("--hosts", type=int, required=True, help="number of hosts (MPI ranks 1..N); rank 0 orchestrates")
    p.add_argument("--mpirun", default=os.environ.get("TASKRING_MPIRUN", "mpirun"), help="the mpirun to use (default: mpirun on PATH)")
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    p.add_argument("--netns", action="store_true", help="run the job in a new network namespace with only the loopback interface (root, Linux)")
    p.add_argument("target", nargs=argparse.REMAINDER, help="script.py [args] or -m module [args]")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    target = a.target[1:] if a.target[:1] == ["--"] else a.target
    if not target:
        print("taskring launch: give the script to run: taskring launch --hosts N script.py [args]", file=sys.stderr)
        return 2
    if a.hosts < 1:
        print(f"taskring launch: --hosts must be at least 1, got {a.hosts}", file=sys.stderr)
        return 2
    if target[0] != "-m" and not os.path.exists(target[0]):
        print(f"taskring launch: no such script: {target[0]}", file=sys.stderr)
        return 2
    cmd = command(a.hosts, target, mpirun=a.mpirun)
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
    try:
        return subprocess.call(cmd, env=environment())
    except KeyboardInterrupt:
        return 130
