"""What the tests of single-chip runs (L2) share: two small programs, their inputs and
expected result, and run configs with the ring sizing each resolves to."""

import numpy as np

import taskring
from taskring import (
    DEFAULT_RING_DEP_POOL,
    DEFAULT_RING_HEAP,
    DEFAULT_RING_TASK_WINDOW,
    IN,
    OUT,
    RunConfig,
)

K = taskring.kernels
MiB = 1024 * 1024
DEFAULT_KEY = (DEFAULT_RING_TASK_WINDOW,) * 4 + (DEFAULT_RING_HEAP,) * 4 + (DEFAULT_RING_DEP_POOL,) * 4


@taskring.program(signature=[IN, IN, OUT])
def vector_add(rt, a, b, out):
    """out = 2 * (a + b), through a runtime temporary in a scope (ring 1)."""
    with rt.scope():  # depth 1 -> ring 1
        tmp = rt.submit(K.add, inputs=[a, b], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
        rt.submit(K.scale, inputs=[tmp], outputs=[out], scalars=[2.0])


@taskring.program(signature=[IN, IN, OUT])
def plain_add(rt, a, b, out):
    rt.submit(K.add, inputs=[a, b], outputs=[out])


def vec_args(n=64, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return a, b, np.zeros(n, np.float32)


def check_vector_add(a, b, out):
    np.testing.assert_allclose(out, (a + b) * 2.0, rtol=1e-6)


SIZED = RunConfig(ring_task_window=128, ring_heap=8 * MiB, ring_dep_pool=256)
LISTED = RunConfig(ring_task_window=[64, 128, 0, 0], ring_heap=[0, 4 * MiB, 0, 0])


def assert_sized(rs):
    assert rs.task_window == (128,) * 4
    assert rs.heap == (8 * MiB,) * 4
    assert rs.dep_pool == (256,) * 4
    for f in ("ring_task_window", "ring_heap", "ring_dep_pool"):
        assert all(rs.source(f, r) == "call_config" for r in range(4))


def assert_listed(rs):
    assert rs.task_window == (64, 128, DEFAULT_RING_TASK_WINDOW, DEFAULT_RING_TASK_WINDOW)
    assert rs.heap == (DEFAULT_RING_HEAP, 4 * MiB, DEFAULT_RING_HEAP, DEFAULT_RING_HEAP)
    assert rs.dep_pool == (DEFAULT_RING_DEP_POOL,) * 4
    assert [rs.source("ring_task_window", r) for r in range(4)] == ["call_config", "call_config", "default", "default"]
    assert [rs.source("ring_heap", r) for r in range(4)] == ["default", "call_config", "default", "default"]


def assert_default(rs):
    assert rs.key() == DEFAULT_KEY
    assert all(rs.source(f, r) == "default" for f in ("ring_task_window", "ring_heap", "ring_dep_pool") for r in range(4))
