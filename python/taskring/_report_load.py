"""What one output prefix holds, for the report: its scope stats with the advisor's
suggestion, its swimlane and, at L3, each chip's own files (``chip*/``)."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Dict, List, Optional, Tuple

from ._report_stats import ReportError, ScopeStats, load_scope_stats, peak_sites
from ._report_swimlane import Lane, _natural, load_swimlane


@dataclasses.dataclass
class Report:
    """What one output prefix holds (``load_report``)."""

    prefix: str
    stats: ScopeStats
    sites: Dict[Tuple[str, int], Optional[str]]
    lanes: List[Lane]
    swimlane_path: Optional[str]
    chips: List["Report"]
    title: str
    notes: List[str] = dataclasses.field(default_factory=list)


def load_report(prefix: str, headroom: Optional[str] = None, *, _title: Optional[str] = None, _chips: bool = True) -> Report:
    """Read an output prefix (``_chips=False``: a chip's own subdirectory, whose swimlane
    the parent reads)."""
    prefix = os.fspath(prefix)
    if not os.path.isdir(prefix):
        raise ReportError(f"no such directory: {prefix}")
    sp = os.path.join(prefix, "scope_stats", "scope_stats.jsonl")
    if not os.path.isfile(sp):
        raise ReportError(f"{prefix} has no scope_stats/scope_stats.jsonl (run with enable_scope_stats=True and this output_prefix)")
    stats = load_scope_stats(sp, headroom)
    sw = os.path.join(prefix, "merged_swimlane.json")
    subs = sorted((d for d in os.listdir(prefix) if re.fullmatch(r"chip\d+", d) and os.path.isdir(os.path.join(prefix, d))), key=_natural) if _chips else []
    # L2: the file's lanes are the chip's cores; L3 (chip subdirectories): the host's lanes.
    chips: List[Report] = []
    notes: List[str] = list(stats.notes)
    lanes: List[Lane] = []
    if os.path.isfile(sw) and _chips:
        try:
            lanes = load_swimlane(sw, unnamed="host" if subs else "chip")
        except ReportError as err:  # the swimlane is optional: say why it is not shown
            notes.append(str(err))
    if subs:
        named = {l.process for l in lanes}
        for d in subs:
            full = os.path.join(prefix, d)
            csw = os.path.join(full, "merged_swimlane.json")
            label = f"chip {d[4:]}"
            # A chip whose lanes are not in the merged file: take its own swimlane.
            if os.path.isfile(csw) and not any(n.startswith(label + " ") or n == label for n in named):
                try:
                    lanes.extend(load_swimlane(csw, process_label=f"{label} ({d}/merged_swimlane.json)"))
                except ReportError as err:
                    notes.append(str(err))
            if os.path.isfile(os.path.join(full, "scope_stats", "scope_stats.jsonl")):
                try:
                    c = load_report(full, headroom, _title=label, _chips=False)
                except ReportError as err:  # one chip's unreadable files do not hide the rest
                    notes.append(f"{d}/: {err}")
                    continue
                chips.append(c)
                notes.extend(f"{d}/: {n}" for n in c.notes)
    return Report(prefix, stats, peak_sites(stats), lanes, sw if os.path.isfile(sw) else None, chips, _title or "run", notes)
