"""`taskring report` in a Python without matplotlib (its plots come with the `report`
extra): the page says at its top that the plots are omitted and how to get them, and
the command warns the same; with matplotlib the page has its plots and no such line."""

import json
import subprocess
import sys

import pytest

from taskring import _report

HEAD = {"version": 6, "fatal": False, "dropped": 0, "total": 2, "task_window_max": [16, 8, 8, 8],
        "heap_max": [4096] * 4, "dep_pool_max": [100] * 4, "tensormap_max": 0,
        "peak_task_window": [0, 7, 0, 0], "peak_heap": [0, 3072, 0, 0], "peak_dep_pool": [0, 0, 0, 0]}
TRACE = {"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "chip 0"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "core 0"}},
    {"ph": "X", "name": "k", "pid": 1, "tid": 2, "ts": 0.0, "dur": 5.0},
]}
NO_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; from taskring.__main__ import main; sys.exit(main(sys.argv[1:]))"


def _sample(phase, w0, w1):
    return {"site": "/u/a.py:3", "phase": phase, "depth": 1, "ring": 1, "task_window_start": w0, "task_window_end": w1,
            "heap_start": 0, "heap_end": 3072 if phase == "end" else 0, "dep_pool_start": 0, "dep_pool_end": 0, "tensormap": 0}


@pytest.fixture
def prefix(tmp_path):
    (tmp_path / "scope_stats").mkdir()
    (tmp_path / "scope_stats" / "scope_stats.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in (HEAD, _sample("begin", 0, 0), _sample("end", 0, 7))))
    (tmp_path / "merged_swimlane.json").write_text(json.dumps(TRACE))
    return tmp_path


def _check_notice(page):
    assert '<img class="plot"' not in page
    notice = page.index("<b>Plots omitted:</b>")
    assert notice < page.index("<h2"), "the notice is at the top of the page, before the first section"
    line = page[notice:page.index("</p>", notice)]
    assert "matplotlib is not installed" in line and "<code>pip install 'taskring[report]'</code>" in line, line


def test_page_without_matplotlib_says_plots_are_omitted(prefix, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] or ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # `import matplotlib...` raises ImportError
    assert not _report.have_matplotlib()
    _check_notice(_report.render_html(_report.load_report(str(prefix))))


def test_report_command_without_matplotlib_warns_and_writes_the_notice(prefix):
    r = subprocess.run([sys.executable, "-c", NO_MATPLOTLIB, "report", str(prefix)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "taskring report: warning: matplotlib is not installed" in r.stderr, r.stderr
    assert "pip install 'taskring[report]'" in r.stderr, r.stderr
    _check_notice((prefix / "report.html").read_text(encoding="utf-8"))


def test_page_with_matplotlib_has_plots_and_no_notice(prefix):
    pytest.importorskip("matplotlib")
    page = _report.render_html(_report.load_report(str(prefix)))
    assert "Plots omitted" not in page and '<img class="plot"' in page
