"""``RunHandle``: a run in flight on a thread of its own (``Worker.submit``,
``DistributedWorker.submit``)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional


class RunHandle:
    """A run in flight (``Worker.submit``): ``done``, ``wait(timeout)``, ``result(timeout)``."""

    __module__ = "taskring"

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._result: Any = None
        self._error: Optional[BaseException] = None
        self._done = threading.Event()

        def body():
            try:
                self._result = fn()
            except BaseException as e:  # handed to the caller by result()
                self._error = e
            finally:
                self._done.set()

        self._thread = threading.Thread(target=body, name="taskring-run", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        """Whether the run has finished (successfully or not)."""
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait up to ``timeout`` seconds (forever when None); returns ``done``."""
        return self._done.wait(timeout)

    def result(self, timeout: Optional[float] = None) -> Any:
        """The run's return value, waiting up to ``timeout`` seconds (TimeoutError when
        it has not finished); re-raises the run's exception."""
        if not self._done.wait(timeout):
            raise TimeoutError("the run has not finished")
        if self._error is not None:
            raise self._error
        return self._result
