"""The report's swimlane loader: busy time per lane of a Chrome trace file
(``merged_swimlane.json``: ``ts`` / ``dur`` in microseconds; ``X`` or ``B``/``E`` events
are busy time of the lane ``(pid, tid)``; ``process_name`` / ``thread_name`` metadata
name chips and cores), and the lanes a table or plot shows one by one."""

from __future__ import annotations

import dataclasses
import heapq
import math
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._report_stats import ReportError, _json


@dataclasses.dataclass
class Lane:
    process: str
    name: str
    busy_us: float
    tasks: int
    first_us: float
    last_us: float
    intervals: List[Tuple[float, float]] = dataclasses.field(default_factory=list)
    count: int = 1  # the lanes this row stands for (``aggregate_lanes``: more than one)


def _merge_sorted(intervals: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """The union of intervals sorted by start, as disjoint intervals (touching ones joined)."""
    out: List[Tuple[float, float]] = []
    for s, e in intervals:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def load_swimlane(path: str, process_label: Optional[str] = None, unnamed: str = "process") -> List[Lane]:
    """Busy time per lane of a Chrome trace file (overlapping events of a lane counted once).
    ``process_label`` names every lane's process; else a ``process_name`` metadata event,
    else ``unnamed`` (with the pid when the file has several unnamed ones)."""
    try:
        with open(path, "rb") as f:
            data = _json(f.read())  # (bytes: UTF-8, -16 or -32, as JSON allows)
    except (OSError, ValueError) as e:
        raise ReportError(f"{path}: not a Chrome trace: {e}") from None
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ReportError(f"{path}: not a Chrome trace (no traceEvents list)")
    pnames: Dict[Any, str] = {}
    tnames: Dict[Tuple[Any, Any], str] = {}
    spans: Dict[Tuple[Any, Any], List[Tuple[float, float]]] = {}
    open_b: Dict[Tuple[Any, Any], List[float]] = {}
    for ev in events:
        if not isinstance(ev, dict):
            continue
        ph, key = ev.get("ph"), (str(ev.get("pid", 0)), str(ev.get("tid", 0)))
        if ph == "M":
            args = ev.get("args")
            name = args.get("name") if isinstance(args, dict) else None
            if ev.get("name") == "process_name" and name is not None:
                pnames[key[0]] = str(name)
            elif ev.get("name") == "thread_name" and name is not None:
                tnames[key] = str(name)
            continue
        ts = _finite(ev.get("ts", 0.0))
        if ts is None:
            continue
        if ph == "X":
            end = ts + max(0.0, _finite(ev.get("dur", 0.0)) or 0.0)
            spans.setdefault(key, []).append((ts, end if math.isfinite(end) else ts))
        elif ph == "B":
            open_b.setdefault(key, []).append(ts)
        elif ph == "E" and open_b.get(key):
            b = open_b[key].pop()
            spans.setdefault(key, []).append((b, max(b, ts)))
    lanes = []
    keys = set(spans) | set(tnames)
    unnamed_pids = {k[0] for k in keys if k[0] not in pnames}
    for key in sorted(keys, key=lambda k: (_natural(k[0]), _natural(k[1]))):
        iv = sorted(spans.get(key, []))  # each lane's events sorted once: the work is linear in the events
        proc = process_label or pnames.get(key[0]) or (unnamed if len(unnamed_pids) == 1 else f"{unnamed} {key[0]}")
        lanes.append(
            Lane(
                proc,
                tnames.get(key, f"lane {key[1]}"),
                sum(e - s for s, e in _merge_sorted(iv)),
                len(iv),
                iv[0][0] if iv else math.nan,
                max((e for _, e in iv), default=math.nan),
                iv,
            )
        )
    return lanes


MAX_LANES = 32
"""Lanes (and processes) the page shows one by one; the rest are summed into one row."""


def aggregate_lanes(lanes: Sequence[Lane], limit: int = MAX_LANES) -> Tuple[List[Lane], List[Lane]]:
    """``(rows, rest)``: at most ``limit + 1`` rows for a table or plot. With more lanes than
    that, the ``limit`` busiest (in their order in ``lanes``) and, last, one row
    ``other N lanes`` for the ``rest``: busy time and tasks summed, first start and last end
    of them all, intervals their union (when any of them was busy). Else every lane and no
    rest."""
    if len(lanes) <= limit + 1:
        return list(lanes), []
    keep = set(heapq.nsmallest(limit, range(len(lanes)), key=lambda i: (-lanes[i].busy_us, i)))
    rows = [l for i, l in enumerate(lanes) if i in keep]
    rest = [l for i, l in enumerate(lanes) if i not in keep]
    procs = dict.fromkeys(l.process for l in rest)
    firsts = [l.first_us for l in rest if not math.isnan(l.first_us)]
    lasts = [l.last_us for l in rest if not math.isnan(l.last_us)]
    rows.append(Lane(
        next(iter(procs)) if len(procs) == 1 else f"{len(procs)} processes",
        f"other {len(rest)} lanes",
        sum(l.busy_us for l in rest),
        sum(l.tasks for l in rest),
        min(firsts, default=math.nan),
        max(lasts, default=math.nan),
        _merge_sorted(sorted(iv for l in rest for iv in l.intervals)),
        count=len(rest),
    ))
    return rows, rest


def _finite(v: Any) -> Optional[float]:
    """``v`` as a finite float, else None (a trace's numbers may be anything)."""
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]
