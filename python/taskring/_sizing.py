"""The sizing advisor for Python: ``suggest_sizing`` (the suggestion as a ``RunConfig``)
and ``sizing_command`` (``python -m taskring sizing``). Both stand on the native
advisor (``_native.SizingAdvice`` / ``_native.sizing_command``, Rust's
``taskring::dfx``): nothing here computes or parses a suggestion. What they add is the
file handling the report shares: a final line cut short is left out, with a warning."""

from __future__ import annotations

import os
import warnings
from typing import Any, List, Optional, Sequence, Tuple, Union

from ._config import RunConfig
from ._native import SizingAdvice, sizing_command as native


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
    from ._report_stats import _cut_short_line_of_file, _cut_short_warning

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


def _stats_path(path_or_prefix: Union[str, "os.PathLike[str]"]) -> str:
    p = os.fspath(path_or_prefix)
    if os.path.isdir(p):
        return os.path.join(p, "scope_stats", "scope_stats.jsonl")
    if p.endswith(".html"):  # a report written into its output prefix
        return os.path.join(os.path.dirname(os.path.abspath(p)), "scope_stats", "scope_stats.jsonl")
    return p


def suggest_sizing(path_or_report: Any, headroom: Optional[float] = None) -> RunConfig:
    """The sizing advisor's suggested ring sizes (``taskring sizing``, headroom 1.25 unless
    given) as a ``RunConfig``. ``path_or_report``: a ``scope_stats.jsonl``, a run's
    output prefix (``CallConfig.output_prefix`` / ``RunConfig.output_dir``), or a report
    of ``taskring report``. Raises ``FileNotFoundError`` when there are no scope stats,
    ``ValueError`` when they cannot be read or the headroom is bad; a final line cut
    short is left out with a ``UserWarning``."""
    from ._report_load import Report
    from ._report_stats import ReportError, ScopeStats, read_scope_stats_text

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
    try:
        text, warning = read_scope_stats_text(path)
    except ReportError as e:
        raise ValueError(str(e)) from None
    advice = SizingAdvice(text, None if headroom is None else float(headroom), path)
    if warning is not None:
        warnings.warn(warning, stacklevel=2)  # the caller of taskring.suggest_sizing
    return RunConfig(**advice.runtime_env)


suggest_sizing.__module__ = "taskring"
