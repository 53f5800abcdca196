"""What the tests of an L3 node share: the programs its chips run, inputs in shared memory
and their expected result, and a CallConfig with some rings set."""

import numpy as np

import taskring
from taskring import IN, OUT, SCALAR, CallConfig, shared_array

from l2_helpers import K

N = 64


# ----- programs the chips run ------------------------------------------------------------------


@taskring.program(signature=[IN, OUT, SCALAR])
def scaled(rt, a, out, alpha):
    rt.submit(K.scale, inputs=[a], outputs=[out], scalars=[alpha])


@taskring.program(signature=[IN, OUT])
def failing_orchestration(rt, a, out):
    raise LookupError("the chip's own orchestration failed")


# ----- helpers ---------------------------------------------------------------------------------


def sarr(values, dtype=np.float32):
    a = shared_array(len(values), dtype)
    a[:] = values
    return a


def inputs(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return sarr(rng.standard_normal(n).astype(np.float32)), sarr(rng.standard_normal(n).astype(np.float32))


def vadd(a, b):
    return (np.asarray(a) + np.asarray(b)) * 2.0


def close(x, y):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def sources(rs, field):
    return [rs.source(field, r) for r in range(4)]


def cfg_with(**rings):
    c = CallConfig()
    for k, v in rings.items():
        setattr(c.runtime_env, k, v)
    return c
