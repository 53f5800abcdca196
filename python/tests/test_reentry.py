"""A worker called from inside its own orchestration (docs/api.md §6.1): `close()`, `run()`
and the other calls that need the worker while its run holds it raise `RuntimeError` at
once instead of waiting for the run that is calling them. At L2 (`ChipWorker`,
`Worker(level=2)`) and at L3, with chips as processes and as threads; the worker stays
usable afterwards.

Each call runs on a daemon thread joined with a generous limit: a call that waited for
itself would never end, and the test fails instead of hanging."""

import threading

import numpy as np
import pytest

import taskring
from taskring import OUT, ChipWorker, Worker, shared_array

K = taskring.kernels

REFUSED = (
    r"^{call} was called from inside this worker's own orchestration: it would wait for the run in "
    r"progress, which waits for the orchestration to return; call it after run\(\) returns$"
)


def _ends(fn, limit_s=60.0):
    """Run `fn()` on a daemon thread; its result or exception, or fail if it never ends."""
    box = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), "the call waited for itself"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _fill_then(call):
    """A program that fills its output, then makes `call()` (the re-entrant call)."""

    @taskring.program(signature=[OUT])
    def fill_then(rt, out):
        rt.submit(K.fill, outputs=[out], scalars=[3.0])
        call()

    return fill_then


@pytest.mark.parametrize("call", ["close()", "run()", "capture()", "arena_stats"])
def test_a_chip_worker_called_from_its_own_orchestration_raises(call):
    w = ChipWorker(prewarm=False, cores=2)
    inner = np.zeros(4, np.float32)

    @taskring.program(signature=[OUT])
    def plain(rt, out):
        rt.submit(K.fill, outputs=[out], scalars=[1.0])

    calls = {
        "close()": lambda: w.close(),
        "run()": lambda: w.run(plain, inner),
        "capture()": lambda: w.capture(plain, inner),
        "arena_stats": lambda: w.arena_stats,
    }
    prog = _fill_then(calls[call])
    out = np.zeros(4, np.float32)
    try:
        with pytest.raises(RuntimeError, match=REFUSED.format(call=call.replace("(", r"\(").replace(")", r"\)"))):
            _ends(lambda: w.run(prog, out))
        assert (inner == 0).all()
        # The worker is open and usable.
        w.run(plain, out)
        assert (out == 1.0).all()
        assert w.arena_stats.builds >= 1
    finally:
        w.close()


def test_a_chip_worker_answers_cores_and_closed_from_its_own_orchestration():
    w = ChipWorker(prewarm=False, cores=2)
    seen = []

    @taskring.program(signature=[OUT])
    def ask(rt, out):
        seen.append((w.cores, w._chip.closed))
        rt.submit(K.fill, outputs=[out], scalars=[1.0])

    try:
        _ends(lambda: w.run(ask, np.zeros(4, np.float32)))
        assert seen == [(2, False)]
    finally:
        w.close()


def test_a_level_2_worker_closed_from_its_own_orchestration_raises():
    w = Worker(level=2)
    h = w.register(_fill_then(lambda: w.close()))
    w.init()
    try:
        with pytest.raises(RuntimeError, match=REFUSED.format(call=r"close\(\)")):
            _ends(lambda: w.run(h, [np.zeros(4, np.float32)]))
        out = np.zeros(4, np.float32)
        w.run(_fill_then(lambda: None), [out])
        assert (out == 3.0).all()
    finally:
        w.close()


@pytest.mark.parametrize("chip_processes", [True, False], ids=["processes", "threads"])
@pytest.mark.parametrize("call", ["close()", "run()"])
def test_an_l3_worker_called_from_its_own_orchestration_raises(chip_processes, call):
    @taskring.program(signature=[OUT])
    def fill(rt, out):
        rt.submit(K.fill, outputs=[out], scalars=[5.0])

    w = Worker(level=3, device_ids=[0], chip_processes=chip_processes)
    h = w.register(fill)
    w.init()
    try:
        out = shared_array(4)

        def orch(o, _args, _cfg):
            o.submit_next_level(h, [out], worker=0)
            if call == "close()":
                w.close()
            else:
                w.run(lambda o2, _a, _c: None)

        with pytest.raises(RuntimeError, match=REFUSED.format(call=call.replace("(", r"\(").replace(")", r"\)"))):
            _ends(lambda: w.run(orch))
        # Not closed: the next run works.
        out2 = shared_array(4)
        rep = _ends(lambda: w.run(lambda o, _a, _c: o.submit_next_level(h, [out2], worker=0)))
        assert rep.tasks[0].error is None and list(out2) == [5.0] * 4
    finally:
        w.close()


def test_a_distributed_worker_closed_from_its_own_orchestration_raises():
    @taskring.program(signature=[OUT])
    def fill(rt, out):
        rt.submit(K.fill, outputs=[out], scalars=[6.0])

    holder = {}

    def orch(o, chips, args, cfg):
        o.submit_next_level(chips.fill, [args[0]], cfg, worker=0)
        holder["rt"].close()

    prog = taskring.DistributedProgram(orch, {"fill": fill}, taskring.DistributedConfig(device_ids=[0]), signature=[OUT])
    rt = prog.prepare(chip_processes=False)
    holder["rt"] = rt
    try:
        out = shared_array(4)
        with pytest.raises(RuntimeError, match=REFUSED.format(call=r"close\(\)")):
            _ends(lambda: rt(out))
        assert rt.arena_stats(0).capacity_bytes > 0
    finally:
        rt.close()
