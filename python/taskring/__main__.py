"""`taskring` / `python -m taskring`: command-line tools.

- ``taskring sizing <scope_stats.jsonl> [--headroom 1.25]`` — suggested ring sizes
  from a run's scope stats (``CallConfig.enable_scope_stats``); a final line cut short
  (no newline at its end, not JSON) is left out with a warning, as by ``report``.
- ``taskring report <output_prefix> [-o FILE.html]`` — one self-contained HTML page of a
  run's diagnostics (ring use against capacity, occupancy, suggested sizes, busy time).
- ``taskring launch --hosts N script.py [args]`` — an L4 job on this machine (mpirun
  with N + 1 ranks on shared memory and loopback), or ``--hostfile FILE`` across nodes
  (see ``taskring._launch``).
- ``taskring bench b8`` — B8 (L4 over MPI), run through ``taskring launch --hosts 2``.
- ``taskring bench <b1..b10|all> [--reps N] ...`` / ``taskring taskbench <flags>`` — the
  benchmarks, run by the repository's Rust ``taskring-bench`` binary as
  ``taskring-bench <names> ...`` / ``taskring-bench taskbench <flags>`` (``$TASKRING_BENCH``,
  else ``taskring-bench`` on ``PATH``, else ``cargo run --release -p taskring-bench``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import List, Optional


def _sizing(argv: List[str]) -> int:
    # The one implementation is Rust's taskring::dfx::sizing_command: its output byte for
    # byte and its exit status. A final line cut short is left out of the file it reads,
    # with a warning on stderr, as `taskring report` does (taskring._sizing.sizing_command).
    from ._sizing import sizing_command

    status, out, err = sizing_command(list(argv))
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    return status


def _bench_tool(argv: List[str]) -> int:
    # `taskring bench NAMES...` is `taskring-bench NAMES...`; `taskring taskbench FLAGS` is
    # `taskring-bench taskbench FLAGS` (crates/taskring-bench).
    args = argv[1:] if argv[0] == "bench" else argv
    exe = os.environ.get("TASKRING_BENCH") or shutil.which("taskring-bench")
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if exe:
        return subprocess.call([exe, *args])
    if os.path.exists(os.path.join(repo, "crates", "taskring-bench")):
        return subprocess.call(["cargo", "run", "-q", "--release", "-p", "taskring-bench", "--", *args], cwd=repo)
    print(
        "taskring: 'bench' and 'taskbench' are run by the repository's Rust tool taskring-bench "
        "(cargo run --release -p taskring-bench, or set TASKRING_BENCH to its path)",
        file=sys.stderr,
    )
    return 2


def _bench_l4(argv: List[str]) -> int:
    # B8 is an MPI job: the repository's benches/b8_l4.py under `taskring launch`.
    from ._launch import main as _launch

    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    script = os.path.join(repo, "benches", "b8_l4.py")
    if not os.path.exists(script):
        print("taskring: B8 is the repository's benches/b8_l4.py (run it from a checkout)", file=sys.stderr)
        return 2
    return _launch(["--hosts", "2", script, *argv])


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "sizing":
        return _sizing(rest)
    if cmd == "report":
        from ._report import main as _report

        return _report(rest)
    if cmd == "launch":
        from ._launch import main as _launch

        return _launch(rest)
    if cmd == "bench" and rest[:1] == ["b8"]:
        return _bench_l4(rest[1:])
    if cmd in ("bench", "taskbench"):
        return _bench_tool(argv)
    print(f"taskring: unknown command {cmd!r}; expected sizing, report, launch, bench or taskbench", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
