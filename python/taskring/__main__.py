"""`taskring` / `python -m taskring`: command-line tools.

- ``taskring sizing <scope_stats.jsonl> [--headroom 1.25]`` — suggested ring sizes
  from a run's scope stats (``CallConfig.enable_scope_stats``).
- ``taskring report <output_prefix> [-o FILE.html]`` — one self-contained HTML page of a
  run's diagnostics (ring use against capacity, occupancy, suggested sizes, busy time).
- ``taskring bench ...`` / ``taskring taskbench ...`` — run by the Rust ``taskring``
  binary of the repository (``cargo run --release -p taskring-cli -- ...``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Optional


def _sizing(argv: List[str]) -> int:
    # One implementation with the Rust `taskring sizing` (taskring::dfx::sizing_command):
    # same arguments, same output byte for byte, same exit status.
    from ._native import sizing_command

    status, out, err = sizing_command(list(argv))
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    return status


def _rust_tool(argv: List[str]) -> int:
    exe = os.environ.get("TASKRING_CLI")  # path of a built Rust `taskring` binary
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if exe:
        return subprocess.call([exe, *argv])
    if os.path.exists(os.path.join(repo, "crates", "taskring-cli")):
        return subprocess.call(["cargo", "run", "-q", "--release", "-p", "taskring-cli", "--", *argv], cwd=repo)
    print("taskring: 'bench' and 'taskbench' are run by the repository's Rust tool (cargo run -p taskring-cli)", file=sys.stderr)
    return 2


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
    if cmd in ("bench", "taskbench"):
        return _rust_tool(argv)
    print(f"taskring: unknown command {cmd!r}; expected sizing, report, bench or taskbench", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
