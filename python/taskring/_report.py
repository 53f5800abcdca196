"""`taskring report <output_prefix> [-o FILE.html] [--headroom H]`: one self-contained
HTML page about a run, from what the run wrote under its ``output_prefix``
(docs/report.md).

The report is one module per concept, and this one is its command:

* ``_report_stats``: the scope stats (``scope_stats/scope_stats.jsonl``, required;
  ``enable_scope_stats``) with the advisor's suggestion for them (``_native.SizingAdvice``,
  the same as ``taskring sizing``: the rules are not repeated here);
* ``_report_swimlane``: the swimlane (``merged_swimlane.json``, optional;
  ``enable_chip_swimlane``), busy time per lane;
* ``_report_load``: an output prefix, with its ``chip*/`` subdirectories (L3: each chip
  task's own files, shown as sections of their own);
* ``_report_plots``: the plots (matplotlib, Agg backend, base64 PNG);
* ``_report_html``: the page (CSS inline: no network reference at all).

Their names are importable from here too.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional, Sequence

from ._report_html import CSS, _e, _fmt_int, _fmt_us, _pct, level_class, render_html
from ._report_load import Report, load_report
from ._report_plots import (
    DANGER,
    PLOTS_OMITTED,
    PLOTS_OMITTED_HTML,
    WARN,
    _pct_text,
    _plain,
    _short_site,
    busy_plot,
    have_matplotlib,
    occupancy_plot,
    timeline_plot,
)
from ._report_stats import (
    RESOURCES,
    RINGS,
    ReportError,
    ScopeStats,
    cut_short_line,
    load_scope_stats,
    peak_sites,
    read_scope_stats_text,
)
from ._report_swimlane import MAX_LANES, Lane, aggregate_lanes, load_swimlane
from ._sizing import _sizing_file_arg, sizing_command, suggest_sizing

__all__ = [
    "CSS",
    "DANGER",
    "Lane",
    "MAX_LANES",
    "PLOTS_OMITTED",
    "PLOTS_OMITTED_HTML",
    "RESOURCES",
    "RINGS",
    "Report",
    "ReportError",
    "ScopeStats",
    "USAGE",
    "WARN",
    "_e",
    "_fmt_int",
    "_fmt_us",
    "_pct",
    "_pct_text",
    "_plain",
    "_short_site",
    "_sizing_file_arg",
    "aggregate_lanes",
    "busy_plot",
    "cut_short_line",
    "have_matplotlib",
    "level_class",
    "load_report",
    "load_scope_stats",
    "load_swimlane",
    "main",
    "occupancy_plot",
    "peak_sites",
    "read_scope_stats_text",
    "render_html",
    "sizing_command",
    "suggest_sizing",
    "timeline_plot",
    "write_report",
]


def write_report(prefix: str, output: Optional[str] = None, headroom: Optional[str] = None,
                 warn: Optional[Callable[[str], None]] = None) -> str:
    """Write the page for ``prefix`` (default ``{prefix}/report.html``); returns its path.
    ``warn`` gets each note of the page (what it leaves out, and why)."""
    rep = load_report(prefix, headroom)
    if warn is not None:
        if not have_matplotlib():
            warn(PLOTS_OMITTED)
        for n in rep.notes:
            warn(n)
    out = output or os.path.join(prefix, "report.html")
    page = render_html(rep)
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        raise ReportError(f"cannot write {out}: {e.strerror or e}") from None
    return out


USAGE = """usage: taskring report <output_prefix> [-o FILE.html] [--headroom H]
  One self-contained HTML page about a run (CallConfig.output_prefix / RunConfig.output_dir):
  peak use per ring against capacity, occupancy across scopes, the suggested runtime_env
  (taskring sizing, headroom H, default 1.25) and, with a swimlane, busy time per core.
  Default FILE: <output_prefix>/report.html."""


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    prefix = output = headroom = None
    i = 0
    try:
        while i < len(args):
            a = args[i]
            if a in ("-h", "--help"):
                print(USAGE)
                return 0
            if a in ("-o", "--output", "--headroom"):
                if i + 1 >= len(args):
                    raise ReportError(f"{a} needs a value")
                i += 1
                if a == "--headroom":
                    headroom = args[i]
                else:
                    output = args[i]
            elif a.startswith("--output=") or a.startswith("--headroom="):
                k, v = a.split("=", 1)
                if k == "--headroom":
                    headroom = v
                else:
                    output = v
            elif a.startswith("-") and len(a) > 1:
                raise ReportError(f"unknown option '{a}'")
            elif prefix is not None:
                raise ReportError(f"one output prefix only (got '{a}' too)")
            else:
                prefix = a
            i += 1
        if prefix is None:
            raise ReportError("the output prefix is missing (usage: taskring report <output_prefix> [-o FILE.html])")
        path = write_report(prefix, output, headroom, warn=lambda n: print(f"taskring report: warning: {n}", file=sys.stderr))
    except ReportError as e:
        print(f"taskring report: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0
