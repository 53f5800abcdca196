"""A replay's arguments must share memory as the capture's did: the captured graph has
the edges of that aliasing only. A different pattern is a ValueError naming the pair,
never a different answer; a scalar where the capture had one says so."""

import numpy as np
import pytest

import taskring
from taskring import IN, INOUT, OUT, SCALAR
from taskring import kernels as K


@taskring.program(signature=[INOUT, IN, OUT])
def writer_then_reader(rt, p, q, r):
    rt.submit(K.scale, inputs=[p], outputs=[p], scalars=[2.0])  # writes p
    rt.submit(K.copy, inputs=[q], outputs=[r])  # reads q


def test_a_replay_whose_arguments_alias_differently_is_refused():
    with taskring.ChipWorker() as w:
        p, q, r = np.ones(64, np.float32), np.full(64, 5.0, np.float32), np.zeros(64, np.float32)
        g = w.capture(writer_then_reader, p, q, r)
        y, r2 = np.ones(64, np.float32), np.zeros(64, np.float32)
        with pytest.raises(ValueError) as ei:
            g.replay(y, y, r2)
        assert "arguments 0 and 1 are the same buffer but were distinct buffers at capture" in str(ei.value)
        assert (y == 1).all() and (r2 == 0).all()  # nothing ran
        # the same aliasing as the capture replays, and equals a normal run
        ref = np.zeros(64, np.float32)
        a, b = np.ones(64, np.float32), np.full(64, 3.0, np.float32)
        w.run(writer_then_reader, a.copy(), b.copy(), ref)
        g.replay(a, b, r2)
        np.testing.assert_array_equal(r2, ref)

        # captured aliased, replayed distinct: refused as well
        z = np.ones(64, np.float32)
        g2 = w.capture(writer_then_reader, z, z, r)
        with pytest.raises(ValueError, match="arguments 0 and 1 are distinct buffers but were the same buffer at capture"):
            g2.replay(p, q, r2)
        z2, out_n, out_r = np.ones(64, np.float32), np.zeros(64, np.float32), np.zeros(64, np.float32)
        z3 = z2.copy()
        w.run(writer_then_reader, z3, z3, out_n)
        g2.replay(z2, z2, out_r)
        np.testing.assert_array_equal(out_r, out_n)


@taskring.program(signature=[IN, OUT, SCALAR])
def scaled(rt, a, out, s):
    rt.submit(K.scale, inputs=[a], outputs=[out], scalars=[s])


def test_a_replay_given_a_non_number_where_a_scalar_was_captured_says_so():
    with taskring.ChipWorker() as w:
        a, y = np.ones(8, np.float32), np.zeros(8, np.float32)
        g = w.capture(scaled, a, y, 2.0)
        with pytest.raises(TypeError, match=r"argument 2: program 'scaled' was captured with a scalar here .* got str"):
            g.replay(a, y, "x")
