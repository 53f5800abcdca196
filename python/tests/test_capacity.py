"""Capacity failures of a run (docs/api.md §6): a scope that outgrows its task window, a
heap ring too small, a dependency pool overflow — each reported with its code, ring,
configured size and what would be needed, and the worker usable afterwards."""

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, ChipWorker, RunConfig, RuntimeFailure

from l2_helpers import K


# ----- capacity failures --------------------------------------------------------------------------


@taskring.program(signature=[IN, OUT])
def eight_in_one_scope(rt, x, out):
    with rt.scope():
        for _ in range(7):
            rt.submit(K.copy, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)])
        rt.submit(K.copy, inputs=[x], outputs=[out])


def test_scope_deadlock_code_1():
    x = np.ones(16, np.float32)
    out = np.zeros(16, np.float32)
    # Reported, not hung on: a deadlock not seen as one would end in the scheduler's
    # timeout (code 100) or the suite's watchdog, not in code 1.
    with pytest.raises(RuntimeFailure) as ei:
        taskring.run(eight_in_one_scope, x, out, config=RunConfig(ring_task_window=4))
    e = ei.value
    assert e.code == 1
    assert e.name == "SCOPE_DEADLOCK"
    assert e.ring == 1
    assert e.configured == 4
    assert e.needed is not None and e.needed > 4 and (e.needed & (e.needed - 1)) == 0
    assert str(e).startswith("SCOPE_DEADLOCK (code 1) on ring 1: ")
    # the same program fits with a window of 16
    taskring.run(eight_in_one_scope, x, out, config=RunConfig(ring_task_window=16))
    assert (out == 1).all()


@taskring.program(signature=[IN, OUT])
def big_output(rt, x, out):
    with rt.scope():
        t = rt.submit(K.fill, outputs=[rt.spec((8192,), "float32")], scalars=[1.0])  # 32 KiB
        rt.submit(K.copy, inputs=[t.outputs[0][0:1].view((16,))], outputs=[out])


def test_heap_deadlock_code_2():
    x = np.ones(16, np.float32)
    out = np.zeros(16, np.float32)
    with ChipWorker() as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(big_output, x, out, config=RunConfig(ring_heap=1024))
        e = ei.value
        assert e.code == 2
        assert e.name == "HEAP_RING_DEADLOCK"
        assert e.ring == 1
        assert e.configured == 1024
        # 32 KiB for this task's outputs is a lower bound of what holds the run: said in
        # the description, not given as `needed`
        assert e.needed is None and "a ring_heap of at least 32768 bytes is needed" in e.description
        assert str(e) == f"{e.name} (code {e.code}) on ring {e.ring}: {e.description}. Hint: {e.hint}"
        # same worker, enough heap
        w.run(big_output, x, out, config=RunConfig(ring_heap=[0, 64 * 1024, 0, 0]))
        assert (out == 1).all()


def test_heap_full_by_one_scope_is_reported():
    @taskring.program(signature=[IN])
    def prog(rt, x):
        with rt.scope():
            for _ in range(5):
                rt.submit(K.fill, outputs=[rt.spec((256,), "float32")], scalars=[1.0])  # 1 KiB each

    with pytest.raises(RuntimeFailure) as ei:  # code 2, not a timeout (see above)
        taskring.run(prog, np.zeros(4, np.float32), config=RunConfig(ring_heap=4096))
    e = ei.value
    assert (e.code, e.name, e.ring, e.configured) == (2, "HEAP_RING_DEADLOCK", 1, 4096)
    assert e.needed is None and "ring_heap of at least 8192 bytes would be needed" in e.description


def test_dep_pool_overflow_code_4():
    # Producers are builtin busy-waits (no GIL needed): all six are still pending or
    # running when the seventh task asks for six dependency entries.
    @taskring.program(signature=[IN])
    def prog(rt, x):
        with rt.scope():
            ts = [rt.submit(K.busy_wait, scalars=[20_000_000]) for _ in range(6)]
            rt.submit(K.noop, inputs=[x], deps=[t.id for t in ts])

    with ChipWorker() as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(prog, np.zeros(4, np.float32), config=RunConfig(ring_dep_pool=4))
        e = ei.value
        assert (e.code, e.name, e.ring, e.configured) == (4, "DEP_POOL_OVERFLOW", 1, 4)
        assert e.needed is None and "ring_dep_pool of at least 6 entries" in e.description, e.description
        rep = w.run(prog, np.zeros(4, np.float32), config=RunConfig(ring_dep_pool=64))
        assert rep.tasks == 7
