"""``suggest_sizing``: the sizing advisor's ring sizes for a recorded run, as a
``RunConfig`` (the advisor itself is ``taskring._report``, imported on first use)."""

from __future__ import annotations

from typing import Any, Optional

from ._config import RunConfig


def suggest_sizing(path_or_report: Any, headroom: Optional[float] = None) -> RunConfig:
    """The sizing advisor's suggested ring sizes (``taskring sizing``, headroom 1.25 unless
    given) as a ``RunConfig``. ``path_or_report``: a ``scope_stats.jsonl``, a run's
    output prefix (``CallConfig.output_prefix`` / ``RunConfig.output_dir``), or a report
    of ``taskring report``. Raises ``FileNotFoundError`` when there are no scope stats."""
    from ._report import suggest_sizing as _suggest

    return _suggest(path_or_report, headroom)


suggest_sizing.__module__ = "taskring"
