"""Nothing burns a core while idle (measured here as a guard): an idle
ChipWorker, an idle L3 host and its idle chip processes each use well under 1 % of a core.
CPU time is read from /proc (utime + stime), over a 5 s window after a short settle."""

import os
import time

import pytest

import taskring

TICK = os.sysconf("SC_CLK_TCK")
WINDOW_S = 5.0  # 100 Hz ticks: 1 % of a core is 5 ticks here


def _cpu_s(pid: str = "self") -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_idle_workers_do_not_burn_cpu():
    with taskring.ChipWorker():
        time.sleep(0.3)
        c0, t0 = _cpu_s(), time.monotonic()
        time.sleep(WINDOW_S)
        share = (_cpu_s() - c0) / (time.monotonic() - t0)
    assert share < 0.01, f"an idle ChipWorker used {share:.1%} of a core"

    with taskring.Worker(level=3, device_ids=[0, 1]) as w:
        w.init()
        time.sleep(0.3)
        pids = [str(p) for p in w.pids]
        c0, chips0, t0 = _cpu_s(), [_cpu_s(p) for p in pids], time.monotonic()
        time.sleep(WINDOW_S)
        dt = time.monotonic() - t0
        host = (_cpu_s() - c0) / dt
        chips = [(_cpu_s(p) - c) / dt for p, c in zip(pids, chips0)]
    assert host < 0.01, f"an idle L3 host used {host:.1%} of a core"
    assert all(c < 0.01 for c in chips), f"idle chips used {[f'{c:.1%}' for c in chips]} of a core"
