"""`taskring report` on a swimlane with many lanes: the work and the page stay bounded (the
busiest lanes one by one, the rest summed in one row, said on the page), and a small
swimlane still lists every lane."""

import json
import re
import subprocess
import sys

import pytest

from taskring import _report

HEAD = {"version": 6, "fatal": False, "dropped": 0, "total": 2, "task_window_max": [16, 8, 8, 8],
        "heap_max": [4096] * 4, "dep_pool_max": [100] * 4, "tensormap_max": 0,
        "peak_task_window": [0, 7, 0, 0], "peak_heap": [0, 3072, 0, 0], "peak_dep_pool": [0, 0, 0, 0]}


def _sample(phase, w0, w1):
    return {"site": "/u/a.py:3", "phase": phase, "depth": 1, "ring": 1, "task_window_start": w0, "task_window_end": w1,
            "heap_start": 0, "heap_end": 3072 if phase == "end" else 0, "dep_pool_start": 0, "dep_pool_end": 0, "tensormap": 0}


def _trace(lanes, events, processes):
    """``lanes`` lanes over ``processes`` processes, ``events`` slices each; lane i is busy
    ``i + 1`` µs per slice (the last lanes are the busiest)."""
    ev = [{"ph": "M", "name": "process_name", "pid": p, "args": {"name": f"chip {p}"}} for p in range(processes)]
    for i in range(lanes):
        pid, tid = i % processes, i // processes
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"core {i}"}})
        for k in range(events):
            ev.append({"ph": "X", "name": "k", "pid": pid, "tid": tid, "ts": 10000.0 * k + i % 7, "dur": float(i + 1)})
    return {"traceEvents": ev}


def _prefix(path, trace):
    (path / "scope_stats").mkdir(parents=True)
    (path / "scope_stats" / "scope_stats.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in (HEAD, _sample("begin", 0, 0), _sample("end", 0, 7))))
    (path / "merged_swimlane.json").write_text(json.dumps(trace))
    return path


def _report_page(prefix, timeout):
    r = subprocess.run([sys.executable, "-m", "taskring", "report", str(prefix)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr
    return (prefix / "report.html").read_text(encoding="utf-8")


def _core_rows(page):
    table = page.split('<table class="cores">', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr(?: class=\"other\")?><td class=\"l\">[^<]*</td><td class=\"l\">([^<]*)</td>", table)


@pytest.mark.parametrize("processes", [10, 5000])
def test_report_of_5000_lanes_is_bounded(tmp_path, processes):
    prefix = _prefix(tmp_path / "run", _trace(5000, 3, processes))
    page = _report_page(prefix, timeout=45)  # a hard bound (within the suite's 60 s watchdog): it takes seconds
    n = _report.MAX_LANES
    assert "5000 lanes" in page and f"other {5000 - n} lanes" in page
    assert f"the {n} busiest lanes are shown one by one" in page
    rows = _core_rows(page)
    # The busiest lanes (the last ones), then the rest in one row.
    assert sorted(rows[:-1]) == sorted(f"core {i}" for i in range(5000 - n, 5000))
    assert rows[-1] == f"other {5000 - n} lanes"
    other = page.split('<tr class="other"><td class="l">', 2)[-1]
    assert f"<td>{(5000 - n) * 3}</td>" in other  # its tasks: every other lane's
    if processes > n + 1:
        assert f"other {processes - n} processes" in page
    assert page.count('<img class="plot"') == (3 if _report.have_matplotlib() else 0)


def test_small_swimlane_lists_every_lane(tmp_path):
    prefix = _prefix(tmp_path / "run", _trace(12, 3, 2))
    page = _report_page(prefix, timeout=45)
    assert _core_rows(page) == [f"core {i}" for i in sorted(range(12), key=lambda i: (i % 2, i // 2))]
    assert "aggregated" not in page and "other " not in page


def test_aggregate_lanes():
    lanes = [_report.Lane("chip", f"core {i}", float(i % 50), 2, float(i), float(i) + 1.0, [(float(i), float(i) + 1.0)])
             for i in range(100)]
    rows, rest = _report.aggregate_lanes(lanes, 4)
    assert [l.name for l in rows] == ["core 48", "core 49", "core 98", "core 99", "other 96 lanes"]
    other = rows[-1]
    assert len(rest) == 96 and other.count == 96 and other.process == "chip"
    assert other.tasks == 192 and other.busy_us == sum(l.busy_us for l in rest)
    assert (other.first_us, other.last_us) == (0.0, 98.0)
    assert other.intervals == [(0.0, 48.0), (50.0, 98.0)]  # the union of the rest's intervals
    assert _report.aggregate_lanes(lanes[:5], 4) == (lanes[:5], [])  # one more than the limit: no summed row


def test_plot_height_is_bounded():
    pytest.importorskip("matplotlib")
    import base64
    import io

    from matplotlib.image import imread

    def height(n):
        lanes = [_report.Lane("chip", f"core {i}", 1.0 + i, 1, 0.0, 1.0 + i, [(0.0, 1.0 + i)]) for i in range(n)]
        png = _report.busy_plot(lanes)
        return imread(io.BytesIO(base64.b64decode(png.split(",", 1)[1])), format="png").shape[0]

    assert height(2000) == height(_report.MAX_LANES + 1)
