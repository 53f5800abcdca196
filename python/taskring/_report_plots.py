"""The report's plots, drawn by matplotlib's Agg canvas as base64 PNG (no pyplot: the
caller's backend and figures are left alone); without matplotlib there are none."""

from __future__ import annotations

import base64
import functools
import io
import math
import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._report_stats import RESOURCES, RINGS, ScopeStats
from ._report_swimlane import MAX_LANES, Lane, aggregate_lanes

WARN, DANGER = 50.0, 80.0


def _pct_text(pct: Optional[float]) -> str:
    if pct is None:
        return "-"
    if 0 < pct < 0.1:
        return f"{pct:.2g} %"
    return f"{pct:.1f} %"



def _short_site(site: Optional[str]) -> str:
    if not site:
        return ""
    if site == "root":
        return "root (the run's implicit scope)"
    m = re.match(r"(.*):(\d+)$", site)
    if m:
        return f"{os.path.basename(m.group(1))}:{m.group(2)}"
    return site


def _plain(text: Any) -> str:
    """``text`` for a matplotlib label, shown as it is: every ``$`` escaped (file, scope
    and lane names are the user's; mathtext would parse ``$...$`` in them)."""
    return str(text).replace("$", r"\$")


def _plain_text(plot: Callable[..., Optional[str]]) -> Callable[..., Optional[str]]:
    """Draw ``plot``'s figure with ``text.usetex`` off (a matplotlibrc that turns it on
    would send every label through LaTeX), so only ``_plain``'s escapes apply."""

    @functools.wraps(plot)
    def draw(*args: Any, **kw: Any) -> Optional[str]:
        try:
            import matplotlib
        except ImportError:
            return plot(*args, **kw)  # no plots (``_figure`` returns None)
        with matplotlib.rc_context({"text.usetex": False}):
            return plot(*args, **kw)

    return draw


def _figure(**kw):
    """A matplotlib figure drawn by the Agg canvas (no pyplot: the caller's backend and
    figures are left alone), or None without matplotlib (the page then has no plots)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


#: The page's first line, and a warning of ``taskring report``, when matplotlib is missing.
PLOTS_OMITTED = (
    "matplotlib is not installed in this Python, so this page has no plots (the tables hold every number). "
    "For the plots: pip install 'taskring[report]' (or pip install matplotlib), then make the report again."
)
PLOTS_OMITTED_HTML = (
    '<p class="meta no-plots"><b>Plots omitted:</b> matplotlib is not installed in this Python, so this page has '
    "no plots (the tables hold every number). For the plots: <code>pip install 'taskring[report]'</code> (or "
    "<code>pip install matplotlib</code>), then make the report again.</p>"
)


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _downsample(xs, ys, limit: int = 4000):
    """At most about ``limit`` points, each bucket keeping its maximum (peaks stay visible)."""
    if len(xs) <= limit:
        return xs, ys
    step = math.ceil(len(xs) / limit)
    n = len(xs) // step * step
    idx = np.arange(0, n, step) + ys[:n].reshape(-1, step).argmax(axis=1)
    if n < len(xs):
        idx = np.append(idx, n + int(ys[n:].argmax()))
    return xs[idx], ys[idx]


@_plain_text
def occupancy_plot(stats: ScopeStats, sites: Dict[Tuple[str, int], Optional[str]]) -> Optional[str]:
    """Per resource, each ring's use at every scope boundary of the run, in % of its capacity."""
    if not stats.samples:
        return None
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
    fig = _figure(figsize=(10, 2.4 * len(RESOURCES) + 0.6))
    if fig is None:
        return None
    axes = fig.subplots(len(RESOURCES), 1, sharex=True)
    rings = stats.columns()["ring"]
    for ax, (res, label, unit, _) in zip(axes, RESOURCES):
        caps = stats.capacity(res)
        peaks = stats.peaks(res)
        occ = stats.occupancy(res).astype(np.float64)
        top = 100.0
        for r in range(RINGS):
            xs = np.flatnonzero(rings == r)
            if not len(xs) or caps[r] <= 0:
                continue
            ys = 100.0 * occ[xs] / caps[r]
            if ys.max() == 0 and peaks[r] == 0:
                continue
            xs, ys = _downsample(xs, ys)
            pk = 100.0 * peaks[r] / caps[r]
            site = _short_site(sites.get((res, r)))
            ax.plot(xs, ys, color=colors[r], marker="o" if len(xs) <= 200 else None, ms=3, lw=1.2,
                    label=_plain(f"ring {r}: peak {peaks[r]:,} of {caps[r]:,} {unit} ({_pct_text(pk)})" + (f" @ {site}" if site else "")))
            ax.axhline(pk, color=colors[r], lw=0.8, ls=":")
            top = max(top, pk, float(ys.max()))
        ax.axhspan(WARN, DANGER, color="#f6d860", alpha=0.15, lw=0)
        ax.axhspan(DANGER, max(top, 100.0) * 1.08, color="#e06060", alpha=0.12, lw=0)
        ax.set_ylim(0, max(top, 100.0) * 1.08)
        ax.set_ylabel(f"{label}\n% of capacity")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    from matplotlib.ticker import MaxNLocator

    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].set_xlabel("scope boundary (begin/end samples in run order)")
    fig.suptitle("Ring occupancy at each scope boundary")
    fig.tight_layout()
    return _png(fig)


_OTHER_COLOR = "#c8c8c8"


def _lane_rows(lanes: Sequence[Lane]) -> Tuple[List[Lane], Callable[[Lane], Any], Callable[[Lane], str], str]:
    """A plot's rows (``aggregate_lanes``: the figure's height is bounded), each row's colour
    (one per process, grey for the summed rest), its label and a note for the title."""
    import matplotlib

    rows, rest = aggregate_lanes(lanes)
    procs = {p: i for i, p in enumerate(dict.fromkeys(l.process for l in rows if l.count == 1))}  # file order
    cmap = matplotlib.colormaps["tab10"]

    def color(l: Lane) -> Any:
        return cmap(procs[l.process] % 10) if l.count == 1 else _OTHER_COLOR

    def label(l: Lane) -> str:
        return _plain(f"{l.process} · {l.name}" if len(procs) > 1 and l.count == 1 else l.name)

    note = f" ({len(rows) - 1} busiest of {len(lanes)}; one row for the other {len(rest)})" if rest else ""
    return rows, color, label, note


@_plain_text
def busy_plot(lanes: List[Lane]) -> Optional[str]:
    """Busy time per lane as bars; with more than ``MAX_LANES + 1`` lanes, the busiest
    ``MAX_LANES`` and one bar for the rest (their mean busy time per lane)."""
    if not lanes:
        return None
    fig = _figure(figsize=(10, 0.32 * min(len(lanes), MAX_LANES + 1) + 1.4))
    if fig is None:
        return None
    rows, color, label, note = _lane_rows(lanes)
    vals = [l.busy_us / l.count for l in rows]  # the summed rest: its mean per lane, comparable with one lane
    unit, div = ("ms", 1e3) if max(vals, default=0) >= 1e3 else ("µs", 1.0)
    ax = fig.subplots()
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, [v / div for v in vals], color=[color(l) for l in rows])
    ax.set_yticks(ys)
    ax.set_yticklabels([label(l) + (" (mean per lane)" if l.count > 1 else "") for l in rows], fontsize=8)
    ax.set_xlabel(f"busy time ({unit})")
    ax.set_title("Busy time per core" + note)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


@_plain_text
def timeline_plot(lanes: List[Lane], max_bars: int = 20000) -> Optional[str]:
    """The swimlane itself: every lane's busy intervals on the run's one clock (a static
    picture of what Perfetto shows; at L3 the host's lanes above each chip's). With more
    than ``MAX_LANES + 1`` lanes, the busiest ``MAX_LANES`` and one row for the rest (when
    any of them was busy)."""
    lanes = [l for l in lanes if l.intervals]
    if not lanes:
        return None
    fig = _figure(figsize=(10, 0.34 * min(len(lanes), MAX_LANES + 1) + 1.5))
    if fig is None:
        return None
    rows, color, label, note = _lane_rows(lanes)
    t0 = min(l.first_us for l in rows)
    t1 = max(l.last_us for l in rows)
    unit, div = ("ms", 1e3) if t1 - t0 >= 2e3 else ("µs", 1.0)
    ax = fig.subplots()
    ys = list(range(len(rows)))[::-1]
    step = max(1, sum(len(l.intervals) for l in rows) // max_bars)  # thin huge traces
    for y, l in zip(ys, rows):
        bars = [((s - t0) / div, max((e - s) / div, (t1 - t0) / div * 1e-3)) for s, e in l.intervals[::step]]
        ax.broken_barh(bars, (y - 0.35, 0.7), color=color(l))
    ax.set_yticks(ys)
    ax.set_yticklabels([label(l) for l in rows], fontsize=8)
    ax.set_xlabel(f"time since the first event ({unit})")
    ax.set_title("Swimlane: busy intervals per lane" + note + (f" (every {step}th shown)" if step > 1 else ""))
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return _png(fig)
