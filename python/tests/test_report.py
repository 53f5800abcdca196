"""`taskring report <output_prefix>`: the HTML page of a real run's diagnostics, checked as
text and in a real browser (headless Chromium), and `taskring.suggest_sizing`.

TASKRING_REPORT_SCREENSHOT=path writes the browser test's screenshot there too (that is
how docs/img/report.png is made).
"""

import html.parser
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, kernels as K
from taskring import _report
from taskring._native import sizing_command

HERE = os.path.abspath(__file__)


def _line_of(marker):
    """The line number of the line of this file that ends with `# <marker>`."""
    with open(HERE, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if line.rstrip().endswith(f"# {marker}"):
                return i
    raise AssertionError(marker)


@taskring.program(signature=[IN, OUT])
def pipeline(rt, x, out):
    for _ in range(3):
        with rt.scope():  # SITE-OUTER
            prev = x
            for _ in range(6):
                prev = rt.submit(K.scale, inputs=[prev], outputs=[rt.spec(x.shape, x.dtype)], scalars=[1.0]).outputs[0]
            with rt.scope():  # SITE-INNER
                p2 = prev
                for _ in range(3):
                    p2 = rt.submit(K.scale, inputs=[p2], outputs=[rt.spec(x.shape, x.dtype)], scalars=[1.0]).outputs[0]
            rt.submit(K.copy, inputs=[prev], outputs=[out])


# Ring 1 holds 7 tasks per outer scope in a window of 8: 7 / 8 = 87.5 % (danger). The
# inner scope's 3 tasks in a window of 16 stay below 50 % (ok) and the heaps reach 75 %
# (warn) unless tasks pile up: the checks read the expected levels from the recorded peaks.
TIGHT = dict(ring_task_window=[16, 8, 16, 16], ring_heap=[4096, 8192, 4096, 4096], ring_dep_pool=[16, 16, 16, 16])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    x = np.ones(256, np.float32)
    out = np.zeros_like(x)
    ok = base / "ok"
    taskring.run(pipeline, x, out, config=taskring.RunConfig(**TIGHT, enable_scope_stats=True, enable_chip_swimlane=True, output_dir=str(ok)))
    assert np.array_equal(out, x)
    failed = base / "failed"
    with pytest.raises(taskring.RuntimeFailure) as ei:
        taskring.run(pipeline, x, out, config=taskring.RunConfig(ring_task_window=4, enable_scope_stats=True, output_dir=str(failed)))
    assert ei.value.name == "SCOPE_DEADLOCK"
    # The command line, default output file (printed), the page's text.
    r = subprocess.run([sys.executable, "-m", "taskring", "report", str(ok)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(ok / "report.html")
    assert _report.main([str(failed)]) == 0
    return {"ok": ok, "failed": failed}


class Page(html.parser.HTMLParser):
    """Tables (class, rows of (tr class, cells)), images, links and the title of a page."""

    def __init__(self, text):
        super().__init__()
        self.tables, self.imgs, self.refs, self.title = [], [], [], ""
        self._cell = None
        self._in_title = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("src", "href"):
            if k in a:
                self.refs.append(a[k])
        if tag == "table":
            self.tables.append({"class": a.get("class", ""), "resource": a.get("data-resource"), "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append({"class": a.get("class", ""), "cells": []})
        elif tag in ("td", "th") and self.tables and self.tables[-1]["rows"]:
            self._cell = []
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "title":
            self._in_title = True

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1]["cells"].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_title:
            self.title += data


def _page(prefix, name="report.html"):
    text = (prefix / name).read_text(encoding="utf-8")
    return text, Page(text)


def _ring_rows(page, resource):
    """The first table of `resource`: {ring: (row class, cells)} (header row left out)."""
    t = next(t for t in page.tables if t["resource"] == resource)
    return {int(r["cells"][0]): (r["class"], r["cells"]) for r in t["rows"][1:]}


def _header(prefix):
    with open(prefix / "scope_stats" / "scope_stats.jsonl", encoding="utf-8") as f:
        return json.loads(f.readline())


def test_report_rings_levels_and_sites(runs):
    text, page = _page(runs["ok"])
    h = _header(runs["ok"])
    assert page.title.startswith("taskring report")
    outer, inner = f"test_report.py:{_line_of('SITE-OUTER')}", f"test_report.py:{_line_of('SITE-INNER')}"
    for res, _, _, _ in _report.RESOURCES:
        rows = _ring_rows(page, res)
        assert sorted(rows) == [0, 1, 2, 3]
        for r in range(4):
            cls, cells = rows[r]
            peak, cap = h[f"peak_{res}"][r], h[f"{res}_max"][r]
            pct = 100.0 * peak / cap
            want = "danger" if pct >= 80 else "warn" if pct >= 50 else "ok"
            assert cls.split()[0] == want, (res, r, cls, pct)
            assert cells[1].split()[0] == f"{peak:,}" and cells[2].split()[0] == f"{cap:,}", cells
            assert cells[3].endswith(" %"), cells
            # The site is the user's `with rt.scope()` line (never taskring's own code).
            site = cells[5]
            if r == 1 and peak:
                assert site == outer, (res, cells)
            elif r == 2 and peak:
                assert site == inner, (res, cells)
            elif not peak:
                assert site == "", cells
    # Ring 1's window: 7 live tasks of 8 slots, the danger level.
    cls, cells = _ring_rows(page, "task_window")[1]
    assert cls == "danger" and cells[3] == "87.5 %", cells
    # Full paths of the sites are in the title attribute (hover).
    assert f'title="{HERE}:{_line_of("SITE-OUTER")}"' in text
    assert "FAILED" not in text


def test_report_suggestion_is_the_advisors(runs):
    text, _ = _page(runs["ok"])
    status, out, _ = sizing_command([str(runs["ok"] / "scope_stats" / "scope_stats.jsonl")])
    assert status == 0
    renv_line = next(l for l in out.splitlines() if l.startswith("runtime_env = "))
    env = [l for l in out.splitlines() if l.startswith("PTO2_RING_")]
    assert len(env) == 3
    import html as h

    for line in [renv_line, *env]:
        assert h.escape(line, quote=True) in text, line
    assert "cfg.runtime_env.ring_task_window = " in text and "taskring.RunConfig(ring_task_window=" in text
    # suggest_sizing: the same numbers as a RunConfig, from the prefix or the file, and they run.
    renv = json.loads(renv_line.split("=", 1)[1])
    for src in (runs["ok"], str(runs["ok"] / "scope_stats" / "scope_stats.jsonl"), runs["ok"] / "report.html"):
        rc = taskring.suggest_sizing(src)
        assert isinstance(rc, taskring.RunConfig)
        assert (rc.ring_task_window, rc.ring_heap, rc.ring_dep_pool) == (renv["ring_task_window"], renv["ring_heap"], renv["ring_dep_pool"])
    x = np.ones(256, np.float32)
    out_arr = np.zeros_like(x)
    taskring.run(pipeline, x, out_arr, config=taskring.suggest_sizing(runs["ok"]))
    assert np.array_equal(out_arr, x)
    # The failed run's suggestion holds what the failure needed.
    assert taskring.suggest_sizing(runs["failed"], headroom=1).ring_task_window[1] >= 8
    with pytest.raises(FileNotFoundError):
        taskring.suggest_sizing(runs["ok"] / "scope_stats")
    with pytest.raises(TypeError):
        taskring.suggest_sizing(3)


def test_report_is_self_contained(runs):
    for prefix in (runs["ok"], runs["failed"]):
        text, page = _page(prefix)
        for bad in ("http://", "https://", 'src="//', "href=\"//", "url(", "<script", "<link", "@import"):
            assert bad not in text, (prefix, bad)
        assert page.imgs, "no plot"
        for ref in page.refs:
            assert ref.startswith("data:image/png;base64,"), ref[:80]


def test_report_busy_time_per_core(runs):
    text, page = _page(runs["ok"])
    with open(runs["ok"] / "merged_swimlane.json", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    lanes = [e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"]
    kernel_events = [e for e in events if e.get("ph") == "X"]
    assert lanes and kernel_events
    cores = next(t for t in page.tables if t["class"] == "cores")
    rows = [r["cells"] for r in cores["rows"][1:]]
    assert [r[1] for r in rows] == lanes
    assert sum(int(r[2]) for r in rows) == len(kernel_events) == 3 * 10
    busiest = max(rows, key=lambda r: int(r[2]))
    assert busiest[3].endswith(("µs", "ms", " s")) and busiest[4].endswith("%")
    assert any(i.get("alt") == "busy time per core" for i in page.imgs)
    assert any(i.get("alt") == "ring occupancy per scope boundary" for i in page.imgs)


def test_report_failed_run(runs):
    text, page = _page(runs["failed"])
    # Shown first and prominently: the failure box comes before every table.
    assert 'class="failure"' in text and text.index('class="failure"') < text.index("<table")
    assert "This run FAILED" in text and "SCOPE_DEADLOCK" in text
    h = _header(runs["failed"])
    assert h["fatal"] and h["failure"]["name"] == "SCOPE_DEADLOCK"
    needed = h["failure"]["needed"]
    cls, cells = _ring_rows(page, "task_window")[1]
    assert "failed" in cls and cls.split()[0] == "danger", cls
    assert f"needed {needed}" in cells[4]
    assert cells[5] == f"test_report.py:{_line_of('SITE-OUTER')}"
    assert "<li>the run failed: SCOPE_DEADLOCK (code 1) on ring 1" in text  # the advisor's own line


def test_report_bad_input_and_output_option(runs, tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "taskring", "report", *args], capture_output=True, text=True)

    r = cli(str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("taskring report: no such directory")
    (tmp_path / "empty").mkdir()
    assert _report.main([str(tmp_path / "empty")]) == 2
    (tmp_path / "bad" / "scope_stats").mkdir(parents=True)
    (tmp_path / "bad" / "scope_stats" / "scope_stats.jsonl").write_text("not json\n")
    assert _report.main([str(tmp_path / "bad")]) == 2
    assert _report.main([]) == 2
    assert _report.main([str(runs["ok"]), "--bogus"]) == 2
    out = tmp_path / "elsewhere.html"
    assert _report.main([str(runs["ok"]), "-o", str(out), "--headroom", "1"]) == 0
    assert out.read_text(encoding="utf-8").count("(headroom 1.00)") == 1
    r = cli("--help")
    assert r.returncode == 0 and "usage: taskring report" in r.stdout


def test_report_l3_chips(tmp_path):
    """L3: the host's scope stats and swimlane, and each chip task's own files under chip{i}/."""
    x = taskring.shared_array((256,))
    x[:] = 1
    outs = [taskring.shared_array((256,)) for _ in range(2)]
    w = taskring.Worker(level=3, device_ids=[0, 1])
    h = w.register(pipeline)
    w.init()
    try:
        def orch(o, args, cfg):
            for i in range(2):
                c = taskring.RunConfig(**TIGHT, enable_scope_stats=True, enable_chip_swimlane=True, output_dir=str(tmp_path / f"chip{i}")).to_call_config()
                o.submit_next_level(h, [x, outs[i]], c, worker=i)

        w.run(orch, args=None, config=taskring.CallConfig(enable_scope_stats=True, enable_chip_swimlane=True, output_prefix=str(tmp_path)))
    finally:
        w.close()
    assert _report.main([str(tmp_path)]) == 0
    text, page = _page(tmp_path)
    procs = [r["cells"][0] for r in next(t for t in page.tables if t["class"] == "chips")["rows"][1:]]
    assert any(p.startswith("chip 0") for p in procs) and any(p.startswith("chip 1") for p in procs), procs
    for i in range(2):
        assert f'id="chip{i}"' in text
    # Each chip section has its ring tables, with the chip program's site.
    ring_tables = [t for t in page.tables if t["resource"] == "task_window"]
    assert len(ring_tables) == 3
    for t in ring_tables[1:]:
        row1 = t["rows"][2]
        assert row1["class"] == "danger" and row1["cells"][5] == f"test_report.py:{_line_of('SITE-OUTER')}"


# ----- in a real browser ---------------------------------------------------------------------------


def _chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        why = "chromium not found (make browser installs Debian's chromium as root)"
        print(f"test_report: browser check skipped: {why}")
        pytest.skip(why)
    return exe


def _browser(exe, profile, *args, timeout=60):
    # A profile of its own: runs of this test at the same time do not share one.
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, "HOME": os.environ.get("HOME", "/tmp")},
    )


def test_report_in_headless_chromium(runs, tmp_path):
    exe = _chromium()
    url = (runs["ok"] / "report.html").as_uri()
    shot = tmp_path / "report.png"
    r = _browser(exe, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,1600", url)
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as im:
        im = im.convert("RGB")
        assert im.size == (1200, 1600)
        colors = im.getcolors(maxcolors=1 << 20)
    # Not blank: text, tables and the plot give many colours and plenty of non-white pixels,
    # and the danger cell's background (#f5b3b3) is drawn.
    assert len(colors) > 500, len(colors)
    white = sum(n for n, c in colors if c == (255, 255, 255))
    assert white < 0.9 * 1200 * 1600
    assert sum(n for n, c in colors if c == (0xF5, 0xB3, 0xB3)) > 200
    if os.environ.get("TASKRING_REPORT_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["TASKRING_REPORT_SCREENSHOT"])
    r = _browser(exe, tmp_path / "profile", "--dump-dom", url)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = Page(r.stdout)
    assert dom.title.startswith("taskring report")
    rows = _ring_rows(dom, "task_window")
    assert rows[1][0] == "danger" and rows[1][1][3] == "87.5 %"
    assert any(t["class"] == "cores" for t in dom.tables)


# ----- crafted inputs: a header without peaks, a merged multi-chip trace ----------------------------


def test_report_crafted_header_without_peaks_and_merged_chip_trace(tmp_path):
    """Peaks derived from the samples as the advisor does, the site of each; a merged trace
    (docs/api.md §7: one Perfetto process per chip) grouped per chip, B/E events counted, and
    overlapping events of one lane counted once."""
    head = {"version": 6, "fatal": False, "dropped": 0, "total": 6, "task_window_max": [16, 8, 8, 8],
            "heap_max": [4096] * 4, "dep_pool_max": [100] * 4, "tensormap_max": 0}

    def s(site, phase, depth, w0, w1, h0=0, h1=0):
        return {"site": site, "phase": phase, "depth": depth, "ring": min(depth, 3), "task_window_start": w0,
                "task_window_end": w1, "heap_start": h0, "heap_end": h1, "dep_pool_start": 0, "dep_pool_end": 0, "tensormap": 0}

    samples = [s("root", "begin", 0, 0, 0), s("/u/a.py:3", "begin", 1, 0, 0), s("/u/a.py:3", "end", 1, 0, 2, 0, 3072),
               s("/u/a.py:9", "begin", 1, 2, 2, 3072, 3072), s("/u/a.py:9", "end", 1, 2, 9, 3072, 4096), s("root", "end", 0, 0, 0)]
    (tmp_path / "scope_stats").mkdir()
    (tmp_path / "scope_stats" / "scope_stats.jsonl").write_text("\n".join(json.dumps(x) for x in [head, *samples]) + "\n")
    trace = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "chip 0 (pid 7)"}},
        {"ph": "M", "name": "process_name", "pid": 8, "args": {"name": "chip 1 (pid 8)"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 0, "args": {"name": "core 0"}},
        {"ph": "X", "name": "k", "pid": 7, "tid": 0, "ts": 0.0, "dur": 10.0},
        {"ph": "X", "name": "k", "pid": 7, "tid": 0, "ts": 5.0, "dur": 10.0},
        {"ph": "B", "name": "k", "pid": 8, "tid": 3, "ts": 100.0},
        {"ph": "E", "name": "k", "pid": 8, "tid": 3, "ts": 130.0},
        {"ph": "s", "name": "flow", "pid": 7, "tid": 0, "ts": 1.0, "id": 1},
    ]}
    (tmp_path / "merged_swimlane.json").write_text(json.dumps(trace))
    assert _report.main([str(tmp_path)]) == 0
    text, page = _page(tmp_path)
    rows = _ring_rows(page, "task_window")
    # Ring 1: the second scope reached end 9 - begin 2 = 7 of 8 slots.
    assert rows[1][0] == "danger" and rows[1][1][1] == "7" and rows[1][1][3] == "87.5 %" and rows[1][1][5] == "a.py:9"
    # Heap: the first scope's 3 KiB (75 %) is ring 1's peak, the second added 1 KiB to a reclaimed ring.
    heap = _ring_rows(page, "heap")[1]
    assert heap[0] == "warn" and heap[1][1].startswith("3,072") and heap[1][5] == "a.py:3"
    chips = {r["cells"][0]: r["cells"] for r in next(t for t in page.tables if t["class"] == "chips")["rows"][1:]}
    assert set(chips) == {"chip 0 (pid 7)", "chip 1 (pid 8)"}
    assert chips["chip 0 (pid 7)"][2] == "2" and chips["chip 0 (pid 7)"][3] == "15.00 µs"  # union of 0..10 and 5..15
    assert chips["chip 1 (pid 8)"][2] == "1" and chips["chip 1 (pid 8)"][3] == "30.00 µs"
    assert "lane 3" in text  # a lane without a thread_name
