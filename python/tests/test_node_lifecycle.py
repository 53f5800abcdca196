"""Chip processes exit when the host process dies (they read EOF on the host pipe; see
test_faults_l3.py for a host killed in the middle of a task)."""

import os
import subprocess
import sys
import time

SCRIPT = r"""
import os, taskring
from taskring import IN, OUT, kernels as K

@taskring.program(signature=[IN, OUT])
def cp(rt, a, b):
    rt.submit(K.copy, inputs=[a], outputs=[b])

w = taskring.Worker(level=3, device_ids=[0, 1])
w.register(cp)
w.init()
print(" ".join(str(p) for p in w.pids), flush=True)
os._exit(0)  # die without closing anything
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except FileNotFoundError:
        return False
    return False


def test_chips_exit_when_the_host_dies():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    pids = [int(p) for p in r.stdout.split()]
    assert len(pids) == 2 and all(p != os.getpid() for p in pids)
    # Chips that outlived their host would keep this waiting: the suite's watchdog ends it.
    while any(_alive(p) for p in pids):
        time.sleep(0.01)
