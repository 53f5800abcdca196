"""A ChipWorker's arena cache (docs/api.md §2): prewarming, hits, misses, LRU eviction and
the resident keys in `arena_stats`."""

from taskring import DEFAULT_RING_HEAP, DEFAULT_RING_TASK_WINDOW, ChipWorker, RunConfig

from l2_helpers import SIZED, check_vector_add, vec_args, vector_add


# ----- arena cache ------------------------------------------------------------------------------


def test_prewarm_then_same_sizing_builds_nothing():
    a, b, out = vec_args(seed=8)
    with ChipWorker(prewarm=SIZED) as w:
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses) == (1, 0, 0)
        for _ in range(3):
            rep = w.run(vector_add, a, b, out, config=SIZED)
            assert rep.arena_hit is True
            assert rep.arena_build_s == 0
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses, st.evictions) == (1, 3, 0, 0)
        check_vector_add(a, b, out)


def test_prewarm_list_and_explicit_default_hits_default_arena():
    a, b, out = vec_args(seed=9)
    explicit_default = RunConfig(ring_task_window=DEFAULT_RING_TASK_WINDOW, ring_heap=DEFAULT_RING_HEAP)
    with ChipWorker(prewarm=[RunConfig(), SIZED]) as w:
        assert w.arena_stats.builds == 2
        assert w.run(vector_add, a, b, out, config=explicit_default).arena_hit is True
        assert w.run(vector_add, a, b, out, config=SIZED).arena_hit is True
        assert w.run(vector_add, a, b, out).arena_hit is True
        assert w.arena_stats.builds == 2


def test_prewarm_false_builds_on_first_dispatch():
    a, b, out = vec_args(seed=10)
    with ChipWorker(prewarm=False) as w:
        assert w.arena_stats.builds == 0
        assert w.arena_stats.resident == []
        assert w.run(vector_add, a, b, out).arena_hit is False
        assert w.run(vector_add, a, b, out).arena_hit is True
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses) == (1, 1, 1)


def test_single_slot_alternating_sizings_rebuilds_every_time():
    a, b, out = vec_args(seed=11)
    c1 = RunConfig(ring_task_window=128)
    c2 = RunConfig(ring_task_window=256)
    with ChipWorker(prewarm=False, arena_cache_slots=1) as w:
        for i, c in enumerate([c1, c2, c1, c2, c1]):
            rep = w.run(vector_add, a, b, out, config=c)
            assert rep.arena_hit is False
            check_vector_add(a, b, out)
        st = w.arena_stats
        assert (st.builds, st.hits, st.misses, st.evictions) == (5, 0, 5, 4)
        assert len(st.resident) == 1
        # the same sizing twice in a row is a hit even with one slot
        assert w.run(vector_add, a, b, out, config=c1).arena_hit is True


def test_lru_eviction_with_two_slots():
    a, b, out = vec_args(seed=12)
    cs = [RunConfig(ring_task_window=w) for w in (64, 128, 256)]
    with ChipWorker(prewarm=False, arena_cache_slots=2) as w:
        for c in cs:
            w.run(vector_add, a, b, out, config=c)
        st = w.arena_stats
        assert (st.builds, st.evictions) == (3, 1)
        assert w.run(vector_add, a, b, out, config=cs[2]).arena_hit is True
        assert w.run(vector_add, a, b, out, config=cs[1]).arena_hit is True
        assert w.run(vector_add, a, b, out, config=cs[0]).arena_hit is False  # evicted


def test_arena_stats_resident_are_keys_most_recent_first():
    a, b, out = vec_args(seed=13)
    with ChipWorker(prewarm=False) as w:
        r1 = w.run(vector_add, a, b, out, config=SIZED)
        r2 = w.run(vector_add, a, b, out)
        assert w.arena_stats.resident == [r2.ring_sizing.key(), r1.ring_sizing.key()]


def test_arena_stats_resident_order_by_value():
    # The same check as above, independent of the container type of a key.
    a, b, out = vec_args(seed=13)
    with ChipWorker(prewarm=False) as w:
        r1 = w.run(vector_add, a, b, out, config=SIZED)
        r2 = w.run(vector_add, a, b, out)
        res = [tuple(k) for k in w.arena_stats.resident]
        assert res == [r2.ring_sizing.key(), r1.ring_sizing.key()]
        w.run(vector_add, a, b, out, config=SIZED)
        assert [tuple(k) for k in w.arena_stats.resident] == [r1.ring_sizing.key(), r2.ring_sizing.key()]
