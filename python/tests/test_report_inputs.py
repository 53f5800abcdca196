"""`taskring report` and `taskring sizing` on awkward inputs: names with `$` in the plots,
files that are not UTF-8 or nested too deeply, and a scope-stats file whose final line is
cut short (both commands leave it out, with a warning)."""

import json
import subprocess
import sys

import pytest

import taskring
from taskring import _report

HEAD = {"version": 6, "fatal": False, "dropped": 0, "total": 4, "task_window_max": [16, 8, 8, 8],
        "heap_max": [4096] * 4, "dep_pool_max": [100] * 4, "tensormap_max": 0}
PEAKS = {"peak_task_window": [0, 7, 0, 0], "peak_heap": [0, 3072, 0, 0], "peak_dep_pool": [0, 0, 0, 0]}
DEEP = b"[" * 100000 + b"]" * 100000


def _sample(site, phase, w0, w1, h0=0, h1=0):
    return {"site": site, "phase": phase, "depth": 1, "ring": 1, "task_window_start": w0, "task_window_end": w1,
            "heap_start": h0, "heap_end": h1, "dep_pool_start": 0, "dep_pool_end": 0, "tensormap": 0}


def _stats_text(site="/u/a.py:3", peaks=True):
    head = dict(HEAD, **PEAKS) if peaks else HEAD
    samples = [_sample(site, "begin", 0, 0), _sample(site, "end", 0, 2, 0, 3072),
               _sample("/u/b.py:9", "begin", 2, 2, 3072, 3072), _sample("/u/b.py:9", "end", 2, 9, 3072, 4096)]
    return "".join(json.dumps(x) + "\n" for x in [head, *samples])


def _prefix(path, stats, swimlane=None):
    (path / "scope_stats").mkdir(parents=True)
    (path / "scope_stats" / "scope_stats.jsonl").write_bytes(stats.encode() if isinstance(stats, str) else stats)
    if swimlane is not None:
        (path / "merged_swimlane.json").write_bytes(swimlane.encode() if isinstance(swimlane, str) else swimlane)
    return path


def _trace(process, lane):
    return json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": process}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "chip 1"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0, "args": {"name": lane}},
        {"ph": "X", "name": "k", "pid": 1, "tid": 0, "ts": 0.0, "dur": 10.0},
        {"ph": "X", "name": "k", "pid": 2, "tid": 0, "ts": 2.0, "dur": 5.0},
    ]})


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "taskring", *map(str, args)], capture_output=True, text=True)


def _one_line_exit_2(r, command="report"):
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    assert r.stderr.startswith(f"taskring {command}: ") and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


# ----- `$` in names that reach a plot ------------------------------------------------------------

DOLLARS = ["$\\frac{$", "a$b$c", "$x^{2$", "cost: $5", "\\$", "a\\$b$c$", "$$", "x_$y$"]


@pytest.mark.parametrize("text", DOLLARS)
def test_plain_labels_are_shown_as_they_are(text):
    pytest.importorskip("matplotlib")
    from matplotlib.text import Text

    t = _report._plain(text)
    assert Text(text=t)._preprocess_math(t) == (text, False)


def test_report_of_names_with_dollar_signs(tmp_path):
    pytest.importorskip("matplotlib")
    prefix = _prefix(tmp_path / "run $\\frac{$ 1", _stats_text(site="/u/$\\sqrt{$x.py:3"),
                     _trace("chip $\\alpha{$", "core $\\frac{1}{$"))
    r = _cli("report", prefix)
    assert r.returncode == 0, r.stderr
    text = (prefix / "report.html").read_text(encoding="utf-8")
    assert text.count('<img class="plot"') == 3  # occupancy, swimlane, busy time
    assert "$\\sqrt{$x.py:3" in text and "core $\\frac{1}{$" in text


def test_report_plots_with_usetex_on(tmp_path):
    # A matplotlibrc with text.usetex would send "%" and "_" through LaTeX (which may not even be installed).
    mpl = pytest.importorskip("matplotlib")
    prefix = _prefix(tmp_path / "run_1", _stats_text(site="/u/a_b.py:3"), _trace("chip_0", "core 0 %"))
    with mpl.rc_context({"text.usetex": True}):
        assert _report.main([str(prefix)]) == 0
    assert (prefix / "report.html").read_text(encoding="utf-8").count('<img class="plot"') == 3


# ----- bad files: one line on stderr, exit 2 -----------------------------------------------------


def test_report_of_stats_that_are_not_utf8(tmp_path):
    bad = _stats_text().encode().replace(b"/u/b.py", b"/u/\xff.py")
    err = _one_line_exit_2(_cli("report", _prefix(tmp_path / "p", bad)))
    assert ": not UTF-8 text (line 4: " in err, err
    # taskring sizing says so too
    _one_line_exit_2(_cli("sizing", tmp_path / "p" / "scope_stats" / "scope_stats.jsonl"), "sizing")


@pytest.mark.parametrize("line", [0, 2])
def test_report_of_stats_nested_too_deeply(tmp_path, line):
    lines = _stats_text().encode().splitlines(keepends=True)
    lines[line] = DEEP + b"\n"
    err = _one_line_exit_2(_cli("report", _prefix(tmp_path / "p", b"".join(lines))))
    assert "nested too deeply" in err, err


def test_report_of_a_swimlane_nested_too_deeply(tmp_path):
    # The swimlane is optional: the page is written without it and says why, as stderr does.
    prefix = _prefix(tmp_path / "p", _stats_text(), DEEP)
    r = _cli("report", prefix)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("taskring report: warning: "), r.stderr
    assert "merged_swimlane.json: not a Chrome trace: nested too deeply" in r.stderr
    text = (prefix / "report.html").read_text(encoding="utf-8")
    assert "<b>Not shown:</b>" in text and "nested too deeply" in text
    with pytest.raises(_report.ReportError, match="nested too deeply"):
        _report.load_swimlane(str(prefix / "merged_swimlane.json"))


def test_report_of_a_swimlane_with_numbers_out_of_range(tmp_path):
    # Integers no float holds, infinities, an end before its begin: those events are left out
    # (or count as instants); the other lanes are read.
    trace = '{"traceEvents": [' + ", ".join([
        '{"ph": "X", "pid": 1, "tid": 0, "ts": 1%s, "dur": 5}' % ("0" * 400),
        '{"ph": "X", "pid": 1, "tid": 0, "ts": 10, "dur": 1%s}' % ("0" * 400),
        '{"ph": "X", "pid": 1, "tid": 0, "ts": 1e308, "dur": 1e308}',
        '{"ph": "X", "pid": 1, "tid": 0, "ts": "inf", "dur": 5}',
        '{"ph": "B", "pid": 1, "tid": 1, "ts": 50}', '{"ph": "E", "pid": 1, "tid": 1, "ts": 40}',
        '{"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 20}',
    ]) + "]}"
    prefix = _prefix(tmp_path / "p", _stats_text(), trace)
    r = _cli("report", prefix)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lanes = {l.name: l for l in _report.load_swimlane(str(prefix / "merged_swimlane.json"))}
    assert lanes["lane 0"].tasks == 2 and lanes["lane 0"].busy_us == 0.0  # two instants
    assert lanes["lane 1"].tasks == 1 and lanes["lane 1"].busy_us == 0.0
    assert lanes["lane 2"].busy_us == 20.0


# ----- a final line cut short: `sizing` and `report` both leave it out, with a warning -------------

CUTS = [
    pytest.param(lambda t: t[:-30], id="mid-line"),
    pytest.param(lambda t: t[:-1] + "{", id="stray-brace"),
    pytest.param(lambda t: _cut_in_character(t), id="mid-character"),
]


def _cut_in_character(text):
    """The text's bytes with a two-byte character in its last line, cut after the first byte."""
    head, last = text[:-1].rsplit("\n", 1)
    data = (head + "\n" + last.replace("/u/b.py", "/u/\u00e9.py")).encode()
    return data[: data.rindex("\u00e9".encode()) + 1]


@pytest.mark.parametrize("peaks", [True, False], ids=["header-peaks", "samples-only"])
@pytest.mark.parametrize("cut", CUTS)
def test_sizing_and_report_leave_out_a_final_line_cut_short(tmp_path, peaks, cut):
    full = _stats_text(peaks=peaks)
    data = cut(full)
    data = data.encode() if isinstance(data, str) else data
    assert not data.endswith(b"\n")
    whole = full.encode()[: data.rfind(b"\n") + 1]  # the file without its last line
    prefix = _prefix(tmp_path / "p", data)
    path = prefix / "scope_stats" / "scope_stats.jsonl"
    (tmp_path / "whole.jsonl").write_bytes(whole)
    warning = f"{path}: line 5 is cut short (no newline at its end and not JSON); it is left out"

    s = _cli("sizing", path, "--headroom", "1")
    ref = _cli("sizing", tmp_path / "whole.jsonl", "--headroom", "1")
    assert s.returncode == ref.returncode == 0, s.stderr + ref.stderr
    assert s.stdout == ref.stdout
    assert s.stderr == f"taskring sizing: warning: {warning}\n"

    r = _cli("report", prefix, "--headroom", "1")
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"taskring report: warning: {warning}\n"
    text = (prefix / "report.html").read_text(encoding="utf-8")
    env_line = next(l for l in s.stdout.splitlines() if l.startswith("runtime_env = "))
    assert _report._e(env_line) in text  # the page's suggestion is the command's
    assert "<b>Not shown:</b>" in text and "line 5 is cut short" in text
    assert "3 samples" in text

    with pytest.warns(UserWarning, match="line 5 is cut short"):
        rc = taskring.suggest_sizing(prefix, headroom=1)
    assert rc.ring_task_window == taskring.suggest_sizing(str(tmp_path / "whole.jsonl"), headroom=1).ring_task_window


def test_a_final_line_without_newline_that_parses_is_read(tmp_path):
    prefix = _prefix(tmp_path / "p", _stats_text(peaks=False)[:-1])
    path = prefix / "scope_stats" / "scope_stats.jsonl"
    s = _cli("sizing", path)
    assert s.returncode == 0 and s.stderr == "" and "task_window=[0, 7, 0, 0]" in s.stdout
    r = _cli("report", prefix)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "4 samples" in (prefix / "report.html").read_text(encoding="utf-8")


def test_a_bad_line_that_is_not_the_last_is_still_an_error(tmp_path):
    # Only a final line without a newline can be a writer stopped mid-line.
    lines = _stats_text(peaks=False).splitlines(keepends=True)
    for bad in (lines[:2] + ["{\"site\": \n"] + lines[2:], lines[:-1] + [lines[-1][:-30] + "\n"]):
        prefix = _prefix(tmp_path / str(len(list(tmp_path.iterdir()))), "".join(bad))
        err = _one_line_exit_2(_cli("report", prefix))
        assert "line " in err
        _one_line_exit_2(_cli("sizing", prefix / "scope_stats" / "scope_stats.jsonl"), "sizing")


def test_a_cut_header_is_an_error(tmp_path):
    prefix = _prefix(tmp_path / "p", _stats_text().splitlines()[0][:-20])
    assert "line 1 is not scope-stats metadata" in _one_line_exit_2(_cli("report", prefix))
    _one_line_exit_2(_cli("sizing", prefix / "scope_stats" / "scope_stats.jsonl"), "sizing")


def test_sizing_file_argument_is_found_as_the_command_parses_it(tmp_path):
    f = _report._sizing_file_arg
    assert f(["x.jsonl"]) == 0
    assert f(["--headroom", "1.5", "x.jsonl"]) == 2
    assert f(["--headroom=1.5", "x.jsonl"]) == 1
    assert f(["x.jsonl", "--headroom", "2"]) == 0
    assert f(["x", "y"]) is None and f([]) is None and f(["-h", "x"]) is None
    assert f(["-", "--bogus"]) == 0  # "-" is a file name; the native command rejects --bogus
