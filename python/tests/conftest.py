import os

import pytest


@pytest.fixture(autouse=True)
def _no_ring_env(monkeypatch):
    """Tests start with no PTO2_RING_* in the environment (tests that need them set
    them explicitly)."""
    for k in ("PTO2_RING_TASK_WINDOW", "PTO2_RING_HEAP", "PTO2_RING_DEP_POOL"):
        monkeypatch.delenv(k, raising=False)
    yield
