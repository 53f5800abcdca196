"""The report's scope-stats loader: a run's ``scope_stats/scope_stats.jsonl`` as numpy
columns with the advisor's suggestion for it (``SizingAdvice``, whose recorded peaks are
the report's), a final line cut short left out with a warning, and each peak's scope site.

Line 1 is the metadata (capacities ``task_window_max`` / ``heap_max`` / ``dep_pool_max``
per ring, ``peak_*`` per ring, ``fatal``, ``failure``), then one sample per scope
boundary (``site``, ``phase``, ``depth``, ``ring`` and the ``*_start`` / ``*_end``
counters: retired / allocated, so ``end - start`` is the ring's occupancy at that
boundary).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ._native import RUNTIME_ENV_RING_COUNT, SizingAdvice

RINGS = RUNTIME_ENV_RING_COUNT
# (key in the scope-stats file, label, unit, runtime_env field)
RESOURCES = SizingAdvice.RESOURCES


class ReportError(Exception):
    """Bad input: the command prints it on one line and exits 2."""


_I64 = (1 << 63) - 1


@dataclasses.dataclass
class ScopeStats:
    path: str
    header: Dict[str, Any]
    samples: List[Dict[str, Any]]
    advice: SizingAdvice  # the advisor's, from the same text (``peaks`` are its recorded peaks)
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
        """Peak use per ring: the advisor's recorded peaks (``SizingAdvice.peak``: the
        header's ``peak_*`` when it has them, else the bound from the samples,
        ``end.{res}_end - begin.{res}_start`` per scope)."""
        return list(getattr(self.advice.peak, res))


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


def load_scope_stats(path: str, headroom: Optional[str] = None) -> ScopeStats:
    """The file at ``path`` with the advisor's suggestion for it (``headroom`` as
    ``taskring sizing --headroom`` takes it; default 1.25). ``ReportError`` when it
    cannot be read, or a line or the headroom is bad."""
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
    try:
        advice = SizingAdvice(text, headroom, path)
    except ValueError as e:
        raise ReportError(str(e)) from None
    return ScopeStats(path, header, samples, advice, notes=[warning] if warning else [])


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
