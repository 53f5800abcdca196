import faulthandler
import os
import sys

import pytest


@pytest.fixture(autouse=True)
def _no_ring_env(monkeypatch):
    """Tests start with no PTO2_RING_* in the environment (tests that need them set
    them explicitly)."""
    for k in ("PTO2_RING_TASK_WINDOW", "PTO2_RING_HEAP", "PTO2_RING_DEP_POOL"):
        monkeypatch.delenv(k, raising=False)
    yield


@pytest.fixture(autouse=True)
def _watchdog(request):
    """A hang must not hang the suite: a run that deadlocks while holding the GIL (or a
    hung chip protocol) cannot be interrupted from Python, so faulthandler's C watchdog
    dumps every thread's stack and exits instead (TASKRING_TEST_WATCHDOG_S, default 60).
    The stacks go to the terminal's stderr: pytest's capture of it is lost at that exit."""
    capturing = getattr(request.config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
    stderr = getattr(getattr(capturing, "err", None), "targetfd_save", None)
    out = stderr if isinstance(stderr, int) else sys.stderr
    faulthandler.dump_traceback_later(float(os.environ.get("TASKRING_TEST_WATCHDOG_S", "60")), exit=True, file=out)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(params=[True, False], ids=["chip-procs", "chip-threads"])
def chip_processes(request):
    """An L3 node's chips as child processes and as threads (same protocol)."""
    return request.param


@pytest.fixture
def make_worker(chip_processes):
    """make(n_chips, programs, prewarm=None, **kw) -> (worker, handles) of an L3 Worker;
    closed at teardown."""
    from taskring import Worker

    from l2_helpers import vector_add

    made = []

    def make(n=3, programs=(vector_add,), prewarm=None, **kw):
        w = Worker(level=3, device_ids=list(range(n)), chip_processes=chip_processes, **kw)
        handles = [w.register(p) for p in programs]
        w.init(prewarm_config=prewarm)
        made.append(w)
        return w, handles

    yield make
    for w in made:
        w.close()
