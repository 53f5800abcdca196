import faulthandler
import os

import pytest


@pytest.fixture(autouse=True)
def _no_ring_env(monkeypatch):
    """Tests start with no PTO2_RING_* in the environment (tests that need them set
    them explicitly)."""
    for k in ("PTO2_RING_TASK_WINDOW", "PTO2_RING_HEAP", "PTO2_RING_DEP_POOL"):
        monkeypatch.delenv(k, raising=False)
    yield


@pytest.fixture(autouse=True)
def _watchdog():
    """A hang must not hang the suite: a run that deadlocks while holding the GIL (or a
    hung chip protocol) cannot be interrupted from Python, so faulthandler's C watchdog
    dumps every thread's stack and exits instead (TASKRING_TEST_WATCHDOG_S, default 60)."""
    faulthandler.dump_traceback_later(float(os.environ.get("TASKRING_TEST_WATCHDOG_S", "60")), exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
