"""`taskring report <output_prefix> [-o FILE.html] [--headroom H]`: one self-contained
HTML page about a run, from what the run wrote under its ``output_prefix``.

Inputs (docs/api.md §7):

* ``scope_stats/scope_stats.jsonl`` (required; ``enable_scope_stats``): line 1 is the
  metadata (capacities ``task_window_max`` / ``heap_max`` / ``dep_pool_max`` per ring,
  ``peak_*`` per ring, ``fatal``, ``failure``), then one sample per scope boundary
  (``site``, ``phase``, ``depth``, ``ring`` and the ``*_start`` / ``*_end`` counters:
  retired / allocated, so ``end - start`` is the ring's occupancy at that boundary).
* ``merged_swimlane.json`` (optional; ``enable_chip_swimlane``): Chrome trace events,
  ``ts`` / ``dur`` in microseconds; ``X`` (or ``B``/``E``) events are busy time of the
  lane ``(pid, tid)``; ``process_name`` / ``thread_name`` metadata name chips and cores.
* ``chip*/`` subdirectories (L3: each chip task's own DFX files) are shown as sections
  of their own (their scope stats, their swimlane as that chip's cores).

The suggested sizes come from the ONE sizing implementation (the native
``sizing_command``, the same as ``taskring sizing``): its output is parsed here, the
rules are not repeated.

The page has no network reference at all: CSS inline, plots as base64 PNG (matplotlib,
Agg backend).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import heapq
import html
import io
import json
import math
import os
import re
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

RINGS = 4
# (key in the scope-stats file, label, unit, runtime_env field)
RESOURCES = (
    ("task_window", "task window", "slots", "ring_task_window"),
    ("heap", "heap", "bytes", "ring_heap"),
    ("dep_pool", "dep pool", "entries", "ring_dep_pool"),
)
WARN, DANGER = 50.0, 80.0


class ReportError(Exception):
    """Bad input: the command prints it on one line and exits 2."""


# ----- scope stats ------------------------------------------------------------------------------


_I64 = (1 << 63) - 1


@dataclasses.dataclass
class ScopeStats:
    path: str
    header: Dict[str, Any]
    samples: List[Dict[str, Any]]
    notes: List[str] = dataclasses.field(default_factory=list)  # what was left out of the file
    _cols: Optional[Dict[str, Any]] = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def fatal(self) -> bool:
        return bool(self.header.get("fatal"))

    @property
    def failure(self) -> Optional[Dict[str, Any]]:
        f = self.header.get("failure")
        return f if isinstance(f, dict) else None

    def capacity(self, res: str) -> List[int]:
        return _ring4(self.header.get(f"{res}_max"))

    def columns(self) -> Dict[str, Any]:
        """The samples as numpy columns (counters saturated at 2**63 - 1): ``ring``,
        ``{res}_start`` / ``{res}_end``, and the matched scopes' sample indices
        ``begin`` / ``end`` (scopes nest: a stack)."""
        if self._cols is None:
            n = len(self.samples)
            cols: Dict[str, Any] = {"ring": np.fromiter((_ring_of(x) for x in self.samples), np.int64, n)}
            for res, *_ in RESOURCES:
                for k in ("start", "end"):
                    key = f"{res}_{k}"
                    cols[key] = np.fromiter((_num(x, key) for x in self.samples), np.int64, n)
            open_: List[int] = []
            begin, end = [], []
            for i, x in enumerate(self.samples):
                ph = x.get("phase")
                if ph == "begin":
                    open_.append(i)
                elif ph == "end" and open_:
                    begin.append(open_.pop())
                    end.append(i)
            cols["begin"] = np.array(begin, dtype=np.int64)
            cols["end"] = np.array(end, dtype=np.int64)
            self._cols = cols
        return self._cols

    def occupancy(self, res: str):
        """Each sample's ring use: allocated minus retired (numpy array)."""
        c = self.columns()
        return np.maximum(c[f"{res}_end"] - c[f"{res}_start"], 0)

    def reach(self, res: str):
        """Per matched scope, the bound of its ring's use: ``end.allocated - begin.retired``."""
        c = self.columns()
        return np.maximum(c[f"{res}_end"][c["end"]] - c[f"{res}_start"][c["begin"]], 0)

    @property
    def scopes(self) -> int:
        return len(self.columns()["end"])

    def peaks(self, res: str) -> List[int]:
        """Peak use per ring: the header's ``peak_*`` when it has them, else derived from the
        samples as the advisor does (``end.{res}_end - begin.{res}_start`` per scope)."""
        p = self.header.get(f"peak_{res}")
        if isinstance(p, list) and len(p) == RINGS:
            return _ring4(p)
        c = self.columns()
        reach, rings = self.reach(res), c["ring"][c["end"]]
        return [int(reach[rings == r].max()) if (rings == r).any() else 0 for r in range(RINGS)]


def _ring4(v: Any) -> List[int]:
    if isinstance(v, list) and len(v) == RINGS and all(isinstance(x, int) for x in v):
        return list(v)
    return [0] * RINGS


def _ring_of(s: Dict[str, Any]) -> int:
    r = s.get("ring", 0)
    return min(r, RINGS - 1) if type(r) is int and r >= 0 else 0


def _num(s: Dict[str, Any], key: str) -> int:
    v = s.get(key, 0)
    return min(v, _I64) if type(v) is int and v > 0 else 0


def _json(text: Union[str, bytes]) -> Any:
    """``json.loads``, with nesting too deep for the parser as a ``ValueError`` too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _is_cut_short(offset: int, tail: bytes) -> bool:
    """Whether the final line ``tail`` (from ``offset``, after the last newline) is cut
    short: not empty and not JSON, in a file that has a line before it (a cut header
    leaves nothing to read: that is the reader's error)."""
    if offset == 0 or not tail.strip():
        return False
    try:
        _json(tail)
    except ValueError:  # (also not UTF-8: a multi-byte character cut in two)
        return True
    return False


def cut_short_line(data: bytes) -> Optional[Tuple[int, int]]:
    """``(offset, line number)`` of the final line of a scope-stats file's bytes when it is
    cut short: no newline at its end and not JSON, as a writer stopped mid-line leaves it.
    None when the file ends with a newline, its last line parses, or it has one line only."""
    offset = data.rfind(b"\n") + 1
    if _is_cut_short(offset, data[offset:]):
        return offset, data.count(b"\n") + 1
    return None


_CHUNK = 1 << 16


def _cut_short_line_of_file(path: str) -> Optional[Tuple[int, int]]:
    """``cut_short_line`` of a file, reading its end only (and, when cut, counting lines)."""
    chunk = _CHUNK
    with open(path, "rb") as f:
        pos = f.seek(0, os.SEEK_END)
        parts: List[bytes] = []
        while pos > 0:
            step = min(pos, chunk)
            pos -= step
            f.seek(pos)
            part = f.read(step)
            nl = part.rfind(b"\n")
            if nl >= 0:
                parts.append(part[nl + 1 :])
                pos += nl + 1
                break
            parts.append(part)
        if not _is_cut_short(pos, b"".join(reversed(parts))):
            return None
        f.seek(0)
        lines, left = 1, pos
        while left > 0:
            part = f.read(min(left, chunk))
            if not part:
                break
            lines += part.count(b"\n")
            left -= len(part)
        return pos, lines


def _cut_short_warning(path: str, line: int) -> str:
    return f"{path}: line {line} is cut short (no newline at its end and not JSON); it is left out"


def read_scope_stats_text(path: str) -> Tuple[str, Optional[str]]:
    """The text of a scope-stats file and a warning when a final line cut short is left
    out of it (``cut_short_line``; ``taskring sizing`` leaves it out too). ``ReportError``
    when the file cannot be read or is not UTF-8."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ReportError(f"cannot read {path}: {e.strerror or e}") from None
    warning = None
    cut = cut_short_line(data)
    if cut is not None:
        data, warning = data[: cut[0]], _cut_short_warning(path, cut[1])
    try:
        return data.decode("utf-8"), warning
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ReportError(f"{path}: not UTF-8 text (line {line}: {e.reason} at byte {e.start})") from None


def load_scope_stats(path: str) -> ScopeStats:
    text, warning = read_scope_stats_text(path)
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines:
        raise ReportError(f"{path}: empty scope-stats file")
    try:
        header = _json(lines[0])
    except ValueError as e:
        raise ReportError(f"{path}: line 1 is not scope-stats metadata: {e}") from None
    if not isinstance(header, dict) or "task_window_max" not in header:
        raise ReportError(f"{path}: line 1 is not scope-stats metadata")
    samples = []
    for i, l in enumerate(lines[1:], start=2):
        try:
            s = _json(l)
        except ValueError as e:
            raise ReportError(f"{path}: line {i}: {e}") from None
        if isinstance(s, dict):
            samples.append(s)
    return ScopeStats(path, header, samples, notes=[warning] if warning else [])


def peak_sites(stats: ScopeStats) -> Dict[Tuple[str, int], Optional[str]]:
    """``(resource, ring) -> site`` of the scope where the ring's peak happened.

    A ring's use is known at its scopes' boundaries. Within a scope it is at least what
    was seen at its begin or end and at most ``end.allocated - begin.retired``. The peak's
    scope is the first one whose boundaries saw the recorded peak; when none did (it was
    passed and reclaimed between two boundaries), one whose bounds hold the peak, the
    one that saw the most, then the tightest bound.
    """
    c = stats.columns()
    bi, ei = c["begin"], c["end"]
    rings = c["ring"][ei]
    order = np.arange(len(ei))
    out: Dict[Tuple[str, int], Optional[str]] = {}
    for res, *_ in RESOURCES:
        peaks = stats.peaks(res)
        occ = stats.occupancy(res)
        seen = np.maximum(occ[bi], occ[ei])
        reach = stats.reach(res)
        for r in range(RINGS):
            m = np.flatnonzero(rings == r)
            if peaks[r] <= 0 or not len(m):
                out[(res, r)] = None
                continue
            pk = min(peaks[r], _I64)
            saw = seen[m] >= pk
            holds = saw | (reach[m] >= pk)
            # np.lexsort: the last key is the primary one; the best is the last row.
            k = np.lexsort((-order[m], -reach[m], seen[m], holds, saw))[-1]
            # No scope's bounds hold the peak: the samples do not match the header; no site.
            out[(res, r)] = str(stats.samples[ei[m[k]]].get("site")) if holds[k] else None
    return out


# ----- the one sizing implementation ------------------------------------------------------------


@dataclasses.dataclass
class Sizing:
    status: int
    stdout: str
    stderr: str
    comments: List[str]
    runtime_env: Optional[Dict[str, Any]]
    runtime_env_line: Optional[str]
    env_lines: List[str]


def _sizing_file_arg(args: Sequence[str]) -> Optional[int]:
    """The index of the file among ``taskring sizing`` arguments (None: help, or not
    exactly one file; the native command then says what is wrong)."""
    found: List[int] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--help"):
            return None
        if a == "--headroom":
            i += 1
        elif not (a.startswith("-") and len(a) > 1):
            found.append(i)
        i += 1
    return found[0] if len(found) == 1 else None


def sizing_command(args: Sequence[str]) -> Tuple[int, str, str]:
    """``taskring sizing <args>``: ``(exit status, stdout, stderr)`` of the native
    ``sizing_command`` (the one implementation), given the file without a final line cut
    short (``cut_short_line``: left out, as ``taskring report`` does, and said on stderr)."""
    from ._native import sizing_command as native

    args = [str(a) for a in args]
    k = _sizing_file_arg(args)
    if k is None:
        return native(args)
    path = args[k]
    try:
        cut = _cut_short_line_of_file(path) if os.path.isfile(path) else None
    except OSError:
        cut = None  # the native command says why it cannot read the file
    if cut is None:
        return native(args)
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix="scope_stats.", suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as dst, open(path, "rb") as src:
            left = cut[0]
            while left > 0:
                part = src.read(min(left, 1 << 20))
                if not part:
                    break
                dst.write(part)
                left -= len(part)
        status, out, err = native(args[:k] + [tmp] + args[k + 1 :])
    finally:
        os.unlink(tmp)
    warning = f"taskring sizing: warning: {_cut_short_warning(path, cut[1])}\n"
    return status, out.replace(tmp, path), warning + err.replace(tmp, path)


def run_sizing(path: str, headroom: Optional[str] = None) -> Sizing:
    """``taskring sizing <path>`` (``sizing_command``), its output parsed."""
    args = [str(path)] + ([f"--headroom={headroom}"] if headroom is not None else [])
    status, out, err = sizing_command(args)
    comments, env_lines = [], []
    renv, renv_line = None, None
    for line in out.splitlines():
        if line.startswith("#"):
            comments.append(line.lstrip("# ").rstrip())
        elif line.startswith("runtime_env = "):
            renv_line = line
            try:
                renv = json.loads(line.split("=", 1)[1])
            except ValueError:
                renv = None
        elif line.startswith("PTO2_RING_"):
            env_lines.append(line)
    return Sizing(status, out, err, comments, renv, renv_line, env_lines)


_SIZING_WARNING = "taskring sizing: warning: "


def _sizing_warnings(s: Sizing) -> List[str]:
    return [l[len(_SIZING_WARNING):] for l in s.stderr.splitlines() if l.startswith(_SIZING_WARNING)]


def _sizing_error(s: Sizing) -> str:
    """The first line of the sizing command's error, without its prefix and warnings."""
    lines = [l for l in s.stderr.splitlines() if l.strip() and not l.startswith(_SIZING_WARNING)]
    return lines[0].replace("taskring sizing: ", "", 1) if lines else ""


def _stats_path(path_or_prefix: Union[str, "os.PathLike[str]"]) -> str:
    p = os.fspath(path_or_prefix)
    if os.path.isdir(p):
        return os.path.join(p, "scope_stats", "scope_stats.jsonl")
    if p.endswith(".html"):  # a report written into its output prefix
        return os.path.join(os.path.dirname(os.path.abspath(p)), "scope_stats", "scope_stats.jsonl")
    return p


def suggest_sizing(path_or_report: Any, headroom: Optional[float] = None):
    """The advisor's suggested ring sizes as a ``RunConfig`` (see ``taskring.suggest_sizing``)."""
    from ._config import RunConfig

    if isinstance(path_or_report, Report):
        path = path_or_report.stats.path
    elif isinstance(path_or_report, ScopeStats):
        path = path_or_report.path
    elif isinstance(path_or_report, (str, os.PathLike)):
        path = _stats_path(path_or_report)
    else:
        raise TypeError(f"suggest_sizing() takes a path (scope_stats.jsonl or output prefix), got {type(path_or_report).__name__}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no scope stats at {path} (run with enable_scope_stats=True and an output_prefix)")
    s = run_sizing(path, None if headroom is None else repr(float(headroom)))
    if s.status != 0 or s.runtime_env is None:
        raise ValueError(_sizing_error(s) or s.stdout.strip() or f"taskring sizing gave no suggestion for {path}")
    for w in _sizing_warnings(s):
        warnings.warn(w, stacklevel=3)  # the caller of taskring.suggest_sizing
    return RunConfig(**{k: s.runtime_env[k] for k in ("ring_task_window", "ring_heap", "ring_dep_pool")})


# ----- swimlane ---------------------------------------------------------------------------------


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


# ----- the page ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    """What one output prefix holds (``load_report``)."""

    prefix: str
    stats: ScopeStats
    sizing: Sizing
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
    stats = load_scope_stats(sp)
    sizing = run_sizing(sp, headroom)
    if sizing.status != 0:
        raise ReportError(_sizing_error(sizing) or "taskring sizing failed")
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
    return Report(prefix, stats, sizing, peak_sites(stats), lanes, sw if os.path.isfile(sw) else None, chips, _title or "run", notes)


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


def _pct_text(pct: Optional[float]) -> str:
    if pct is None:
        return "-"
    if 0 < pct < 0.1:
        return f"{pct:.2g} %"
    return f"{pct:.1f} %"


def level_class(pct: Optional[float]) -> str:
    if pct is None:
        return "na"
    return "danger" if pct >= DANGER else "warn" if pct >= WARN else "ok"


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
    s = rep.sizing
    out = []
    if s.comments:
        out.append("<ul class=\"advisor\">" + "".join(f"<li>{_e(c)}</li>" for c in s.comments) + "</ul>")
    if s.runtime_env is not None:
        renv = s.runtime_env
        py = ("cfg = taskring.CallConfig()\n"
              + "".join(f"cfg.runtime_env.{k} = {renv[k]!r}\n" for k in renv)
              + "# or, high level:\n"
              + "config = taskring.RunConfig(" + ", ".join(f"{k}={renv[k]!r}" for k in renv) + ")\n"
              + "# or, in a scene-test case's config:\n"
              + (s.runtime_env_line or ""))
        out.append("<p>Python (<code>CallConfig.runtime_env</code> / <code>RunConfig</code>):</p>")
        out.append(f'<pre class="runtime-env">{_e(py)}</pre>')
    if s.env_lines:
        out.append("<p>Environment (<code>PTO2_RING_*</code>, read by the process that runs the chip):</p>")
        out.append(f'<pre class="env-lines">{_e(chr(10).join(s.env_lines))}</pre>')
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
