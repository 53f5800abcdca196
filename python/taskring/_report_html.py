"""The report's page: one self-contained HTML document (CSS inline, plots as base64 PNG,
no network reference at all)."""

from __future__ import annotations

import heapq
import html
import math
import os
from typing import Any, Dict, List, Optional

from ._report_load import Report
from ._report_plots import (
    DANGER,
    PLOTS_OMITTED_HTML,
    WARN,
    _pct_text,
    _short_site,
    busy_plot,
    have_matplotlib,
    occupancy_plot,
    timeline_plot,
)
from ._report_stats import RESOURCES, RINGS
from ._report_swimlane import MAX_LANES, Lane, aggregate_lanes


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _fmt_int(v: int, unit: str) -> str:
    if unit == "bytes":
        for k, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if v >= k:
                x = v / k
                return f"{v:,} ({x:.3g} {name})"
    return f"{v:,}"


def _fmt_us(us: float) -> str:
    if math.isnan(us):
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.2f} µs"


def _pct(peak: int, cap: int) -> Optional[float]:
    return 100.0 * peak / cap if cap > 0 else None


def level_class(pct: Optional[float]) -> str:
    if pct is None:
        return "na"
    return "danger" if pct >= DANGER else "warn" if pct >= WARN else "ok"


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1150px}
h1{font-size:1.5em;margin-bottom:4px} h2{font-size:1.2em;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:3px}
h3{font-size:1.05em;margin-bottom:4px}
.meta{color:#666;font-size:.9em}
table{border-collapse:collapse;margin:6px 0 14px 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0} td.l,th.l{text-align:left}
tr.ok td.pct{background:#e3f4e3} tr.warn td.pct{background:#fbeaa5} tr.danger td.pct{background:#f5b3b3;font-weight:bold}
tr.na td{color:#999} tr.failed td{outline:2px solid #b00020}
.bar{display:inline-block;height:9px;background:#4c72b0;vertical-align:middle}
tr.warn .bar{background:#d9a400} tr.danger .bar{background:#c0392b}
.failure{border:3px solid #b00020;background:#fdecee;padding:10px 14px;margin:12px 0;border-radius:4px}
.failure h2{color:#b00020;border:none;margin:0 0 6px 0}
pre{background:#f6f8fa;border:1px solid #ddd;padding:8px;overflow-x:auto;font-size:.9em}
img{max-width:100%} .legend span{padding:1px 6px;margin-right:6px}
.legend .ok{background:#e3f4e3} .legend .warn{background:#fbeaa5} .legend .danger{background:#f5b3b3}
"""


def _ring_tables(rep: Report, hid: str) -> List[str]:
    st = rep.stats
    f = st.failure
    out = []
    for res, label, unit, field in RESOURCES:
        caps, peaks = st.capacity(res), st.peaks(res)
        out.append(f'<h3 id="{hid}-{res}">{_e(label.capitalize())} ({_e(unit)}) — <code>{field}</code></h3>')
        out.append(f'<table class="rings" data-resource="{res}"><thead><tr><th class="l">ring</th><th>peak</th><th>capacity</th>'
                   f'<th>use</th><th class="l">level</th><th class="l">scope site of the peak</th></tr></thead><tbody>')
        for r in range(RINGS):
            pct = _pct(peaks[r], caps[r])
            failed = bool(f is not None and f.get("ring") == r and f.get("resource") == field)
            cls = "danger" if failed else level_class(pct)  # the resource the run failed on
            site = rep.sites.get((res, r))
            bar = f'<span class="bar" style="width:{min(pct or 0, 100):.0f}px"></span> ' if pct is not None else ""
            needed = f.get("needed") if f is not None else None
            note = f" — failed here: needed {needed}" if failed and needed is not None else (" — failed here" if failed else "")
            out.append(
                f'<tr class="{cls}{" failed" if failed else ""}" data-ring="{r}"><td class="l">{r}</td><td>{_e(_fmt_int(peaks[r], unit))}</td>'
                f'<td>{_e(_fmt_int(caps[r], unit))}</td><td class="pct">{bar}{_pct_text(pct)}</td>'
                f'<td class="l">{cls}{_e(note)}</td><td class="l site" title="{_e(site or "")}">{_e(_short_site(site))}</td></tr>'
            )
        out.append("</tbody></table>")
    return out


def _failure_box(rep: Report) -> List[str]:
    f = rep.stats.failure
    if not rep.stats.fatal:
        return []
    out = ['<div class="failure" id="failure"><h2>This run FAILED</h2>']
    if f:
        out.append(
            f"<p><b>{_e(f.get('name'))}</b> (code {_e(f.get('code'))}) on ring {_e(f.get('ring', '-'))}"
            + (f", <code>{_e(f.get('resource'))}</code> configured {_e(f.get('configured'))}, needed {_e(f.get('needed', '-'))}" if f.get("resource") else "")
            + ".</p>"
        )
    else:
        out.append("<p>The scope stats are marked <code>fatal</code> (no failure record).</p>")
    out.append("<p>The peaks below cover only the part of the run that happened before the failure; "
               "the suggestion is a next step: run again with it and re-read the report.</p></div>")
    return out


def _sizing_block(rep: Report) -> List[str]:
    a = rep.stats.advice
    out = []
    if a.notes:
        out.append("<ul class=\"advisor\">" + "".join(f"<li>{_e(c)}</li>" for c in a.notes) + "</ul>")
    renv = a.runtime_env
    py = ("cfg = taskring.CallConfig()\n"
          + "".join(f"cfg.runtime_env.{k} = {renv[k]!r}\n" for k in renv)
          + "# or, high level:\n"
          + "config = taskring.RunConfig(" + ", ".join(f"{k}={renv[k]!r}" for k in renv) + ")\n"
          + "# or, in a scene-test case's config:\n"
          + a.runtime_env_line)
    out.append("<p>Python (<code>CallConfig.runtime_env</code> / <code>RunConfig</code>):</p>")
    out.append(f'<pre class="runtime-env">{_e(py)}</pre>')
    out.append("<p>Environment (<code>PTO2_RING_*</code>, read by the process that runs the chip):</p>")
    out.append(f'<pre class="env-lines">{_e(chr(10).join(a.env_lines))}</pre>')
    return out


def _swimlane_block(lanes: List[Lane], path: Optional[str], limit: int = MAX_LANES) -> List[str]:
    if not lanes:
        return []
    out = ['<h2 id="swimlane">Busy time per core</h2>']
    if path:
        out.append(f'<p class="meta">From <code>{_e(path)}</code> (open it in Perfetto for the timeline).</p>')
    # One pass over the lanes: per process (in file order: the host first at L3) its lanes,
    # tasks, busy time, first start and last end.
    per: Dict[str, List[float]] = {}
    for l in lanes:
        a = per.setdefault(l.process, [0, 0, 0.0, math.inf, -math.inf])
        a[0] += 1
        a[1] += l.tasks
        a[2] += l.busy_us
        if not math.isnan(l.first_us):
            a[3] = min(a[3], l.first_us)
        if not math.isnan(l.last_us):
            a[4] = max(a[4], l.last_us)
    span = {p: (a[4] - a[3]) if a[3] <= a[4] else 0.0 for p, a in per.items()}
    procs = list(per)
    if len(procs) > limit + 1:
        keep = set(heapq.nsmallest(limit, procs, key=lambda p: -per[p][2]))
        shown, rest_p = [p for p in procs if p in keep], [p for p in procs if p not in keep]
    else:
        shown, rest_p = procs, []
    rows, rest = aggregate_lanes(lanes, limit)
    if rest or rest_p:
        out.append(f'<p class="meta aggregated"><b>{len(lanes)} lanes in {len(procs)} processes:</b> '
                   + (f"the {len(rows) - 1} busiest lanes are shown one by one and the other {len(rest)} are summed "
                      f"in one row (<i>other {len(rest)} lanes</i>) in the lane table and the plots"
                      if rest else "every lane is shown")
                   + (f"; the {len(shown)} busiest processes are shown one by one and the other {len(rest_p)} are "
                      f"summed in one row (<i>other {len(rest_p)} processes</i>)" if rest_p else "; every process is shown")
                   + ". The totals cover every lane.</p>")
    out.append('<p class="meta">Span = first event start to last event end of the process (a chip\'s own file '
               'has its own clock). Busy = time inside events on the lane.</p>')
    out.append('<table class="chips"><thead><tr><th class="l">process</th><th>lanes</th><th>tasks</th><th>busy</th>'
               '<th>span</th><th>busy / (lanes × span)</th></tr></thead><tbody>')

    def util(busy: float, lane_span: float) -> str:
        return f"{100 * busy / lane_span:.1f} %" if lane_span > 0 else "-"

    for p in shown:
        n, tasks, busy = per[p][:3]
        out.append(f'<tr><td class="l">{_e(p)}</td><td>{int(n)}</td><td>{int(tasks)}</td><td>{_e(_fmt_us(busy))}</td>'
                   f'<td>{_e(_fmt_us(span[p]))}</td><td>{util(busy, n * span[p])}</td></tr>')
    if rest_p:
        n, tasks, busy = (sum(per[p][k] for p in rest_p) for k in range(3))
        out.append(f'<tr class="other"><td class="l">other {len(rest_p)} processes</td><td>{int(n)}</td><td>{int(tasks)}</td>'
                   f'<td>{_e(_fmt_us(busy))}</td><td>-</td><td>{util(busy, sum(per[p][0] * span[p] for p in rest_p))}</td></tr>')
    out.append("</tbody></table>")
    out.append('<table class="cores"><thead><tr><th class="l">process</th><th class="l">core</th><th>tasks</th><th>busy</th><th>busy / span</th></tr></thead><tbody>')
    for l in rows:
        sp = span[l.process] if l.count == 1 else sum(span[x.process] for x in rest)
        cls = ' class="other"' if l.count > 1 else ""
        out.append(f'<tr{cls}><td class="l">{_e(l.process)}</td><td class="l">{_e(l.name)}</td><td>{l.tasks}</td>'
                   f'<td>{_e(_fmt_us(l.busy_us))}</td><td>{util(l.busy_us, sp)}</td></tr>')
    out.append("</tbody></table>")
    tl = timeline_plot(lanes)
    if tl:
        out.append(f'<img class="plot" alt="swimlane timeline" src="{tl}">')
    img = busy_plot(lanes)
    if img:
        out.append(f'<img class="plot" alt="busy time per core" src="{img}">')
    return out


def _device_memory_line(hd: dict) -> List[str]:
    """The arena's device footprint and the tensormap's peak, when the file has them."""
    parts = []
    b = hd.get("arena_device_bytes")
    if isinstance(b, int) and not isinstance(b, bool) and b >= 0:
        parts.append(f"this sizing's arena takes <b>{b / (1 << 20):.1f} MiB</b> ({b} bytes) of the chip's device memory")
    p, cap = hd.get("peak_tensormap"), hd.get("tensormap_max")
    if isinstance(p, int) and isinstance(cap, int) and not isinstance(p, bool) and cap > 0:
        parts.append(f"the tensormap held at most {p} of its {cap} entries ({100 * p / cap:.0f} %)")
    return [f'<p class="meta">Device memory: {"; ".join(parts)}.</p>'] if parts else []


def _stats_section(rep: Report, hid: str, level: int) -> List[str]:
    st = rep.stats
    h = "h2" if level == 2 else "h3"
    out = _failure_box(rep)
    hd = st.header
    out.append(f'<p class="meta">Scope stats <code>{_e(st.path)}</code>: version {_e(hd.get("version"))}, '
               f'{len(st.samples)} samples, {st.scopes} scopes'
               + (f', <b>{_e(hd.get("dropped"))} samples dropped</b>' if hd.get("dropped") else "") + ".</p>")
    out.append(f'<{h} id="{hid}-rings">Peak use per ring</{h}>')
    out.append('<p class="legend">Use = peak / capacity: <span class="ok">below 50 %</span><span class="warn">warn ≥ 50 %</span>'
               '<span class="danger">danger ≥ 80 %</span> (a task window of N slots holds at most N − 1 live tasks).</p>')
    out += _ring_tables(rep, hid)
    out += _device_memory_line(hd)
    img = occupancy_plot(st, rep.sites)
    if img:
        out.append(f'<{h} id="{hid}-occupancy">Occupancy across the run\'s scopes</{h}>')
        out.append(f'<img class="plot" alt="ring occupancy per scope boundary" src="{img}">')
    out.append(f'<{h} id="{hid}-suggestion">Suggested <code>runtime_env</code></{h}>')
    out += _sizing_block(rep)
    return out


def render_html(rep: Report) -> str:
    title = f"taskring report — {os.path.basename(os.path.abspath(rep.prefix))}"
    body = [f"<h1>{_e(title)}</h1>", f'<p class="meta">Output prefix <code>{_e(os.path.abspath(rep.prefix))}</code>'
            f'{" — <b>FAILED RUN</b>" if rep.stats.fatal else ""}</p>']
    if not have_matplotlib():
        body.append(PLOTS_OMITTED_HTML)
    for n in rep.notes:
        body.append(f'<p class="meta"><b>Not shown:</b> {_e(n)}</p>')
    body += _stats_section(rep, "run", 2)
    body += _swimlane_block(rep.lanes, rep.swimlane_path)
    for c in rep.chips:
        body.append(f'<h2 id="{_e(c.title.replace(" ", ""))}">{_e(c.title.capitalize())}: its task\'s scope stats '
                    f'(<code>{_e(os.path.relpath(c.prefix, rep.prefix))}/</code>)</h2>')
        body += _stats_section(c, c.title.replace(" ", ""), 3)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")
