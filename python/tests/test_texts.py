"""What a user reads (docs/api.md §1, §4, §6, §12): failure texts point only at what the
text itself shows, a failure of no ring does not say "on ring None", auto is spelled one
way everywhere and shown as auto, reprs show what they hold, and one worker state has one
message."""

import pickle

import numpy as np
import pytest

import taskring
from taskring import OUT, CallConfig, ChipWorker, RunConfig, RuntimeEnv, RuntimeFailure, Worker, resolve_ring_sizing

K = taskring.kernels


# ----- RuntimeFailure texts ---------------------------------------------------------------------


def test_a_failure_of_no_ring_leaves_out_the_ring():
    f = RuntimeFailure(202, "DEVICE_OUT_OF_MEMORY", None, "desc", "hint")
    assert str(f) == "DEVICE_OUT_OF_MEMORY (code 202): desc. Hint: hint"
    assert str(pickle.loads(pickle.dumps(f))) == str(f)
    assert str(RuntimeFailure(2, "HEAP_RING_DEADLOCK", 0, "d", "h")) == "HEAP_RING_DEADLOCK (code 2) on ring 0: d. Hint: h"


def test_device_out_of_memory_from_the_chip_reads_without_ring_none():
    @taskring.program(signature=[OUT])
    def fill(rt, out):
        rt.submit(K.fill, outputs=[out], scalars=[1.0])

    with ChipWorker(prewarm=False, device_memory=16 << 20) as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(fill, np.zeros(4, np.float32), config=RunConfig(ring_heap=64 << 20))
    e = ei.value
    assert e.name == "DEVICE_OUT_OF_MEMORY" and e.ring is None
    assert str(e).startswith("DEVICE_OUT_OF_MEMORY (code 202): "), str(e)
    assert "on ring None" not in str(e)


def test_hints_point_only_at_what_the_text_shows(monkeypatch):
    @taskring.program(signature=[OUT])
    def big(rt, out):
        with rt.scope():
            a = rt.submit(K.fill, outputs=[rt.spec((4096,), "float32")], scalars=[1.0]).outputs[0]
            rt.submit(K.copy, inputs=[a], outputs=[out])

    with ChipWorker(prewarm=False) as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(big, np.zeros(4096, np.float32), config=RunConfig(ring_heap=1024))
    e = ei.value
    assert e.name == "HEAP_RING_DEADLOCK"
    assert "line above" not in e.hint and "Ring buffer sizes:" not in e.hint, e.hint
    # What the hint points at is in the description.
    assert "the description names the ring's configured ring_heap" in e.hint
    assert "ring 1's ring_heap=1024 bytes" in e.description

    @taskring.kernel
    def never(out):  # spins until the run gives up on it (then a TimeoutError stops it)
        while True:
            pass

    @taskring.program(signature=[OUT])
    def stuck(rt, out):
        rt.submit(never, outputs=[out])

    monkeypatch.setenv("PTO2_SCHEDULER_TIMEOUT_MS", "200")
    with ChipWorker(prewarm=False, cores=1) as w:
        with pytest.raises(RuntimeFailure) as ei:
            w.run(stuck, np.zeros(4, np.float32))
    e = ei.value
    assert e.name == "SCHEDULER_TIMEOUT" and "sub_class=S1" in e.description
    assert "line below" not in e.hint and "the description's sub_class=" in e.hint, e.hint


def test_resident_tensors_that_do_not_fit_name_their_own_bytes_and_no_ring_sizing():
    @taskring.program(signature=[OUT])
    def fill(rt, out):
        rt.submit(K.fill, outputs=[out], scalars=[1.0])

    def orch(o, chips, args, cfg):
        o.submit_next_level(chips.fill, [args[0]], cfg, worker=0)

    dprog = taskring.DistributedProgram(
        orch, {"fill": fill}, taskring.DistributedConfig(device_ids=[0], device_memory=32 << 20), signature=[OUT]
    )
    small = RunConfig(ring_task_window=16, ring_heap=64 << 10, ring_dep_pool=64)
    with dprog.prepare(small, chip_processes=False) as w:
        w.alloc_tensor((1 << 20,), np.float32, worker=0)  # 4 MiB
        w.alloc_tensor((1 << 20,), np.float32, worker=0)  # 4 MiB more: 8 MiB held
        with pytest.raises(RuntimeError) as ei:
            w.alloc_tensor((8 << 20,), np.float32, worker=0)  # 32 MiB more
    text = str(ei.value)
    assert "DEVICE_OUT_OF_MEMORY (code 202): " in text, text
    assert "33554432 more bytes of device-resident tensors do not fit" in text, text
    assert "device-resident tensors: 8388608 bytes" in text, text  # what is held already
    assert "41943040" not in text, text  # not the running total
    assert "this dispatch's ring sizing" not in text, text


# ----- RingSizing.source ------------------------------------------------------------------------


@pytest.mark.parametrize("attr", ["task_window", "heap", "dep_pool"])
def test_ring_sizing_source_takes_the_attribute_name_too(attr):
    s = resolve_ring_sizing(RunConfig(**{"ring_" + attr: "auto"}), env={})
    assert getattr(s, attr)  # the attribute of that name exists
    assert s.source(attr, 0) == s.source("ring_" + attr, 0) == "auto"
    assert s.source(attr, 1) == "auto"
    with pytest.raises(ValueError, match=r"expected ring_task_window, ring_heap or ring_dep_pool \(or task_window, heap or dep_pool\)"):
        s.source("window", 0)


# ----- auto: one spelling rule, shown as auto -----------------------------------------------------


SPELLINGS = ["auto", "AUTO", "Auto", "auto ", " auto", "\tAuTo\n"]
NOT_AUTO = ["autox", "au to", "", "automatic"]


@pytest.mark.parametrize("word", SPELLINGS)
def test_every_entry_point_takes_the_same_spellings_of_auto(word):
    cfg = RunConfig(ring_heap=word, ring_dep_pool=[0, word, 0, 0])
    assert cfg.ring_heap == "auto" and cfg.ring_dep_pool == [0, "auto", 0, 0]
    assert RuntimeEnv(ring_heap=word).ring_heap == [RuntimeEnv.AUTO] * 4
    assert CallConfig().derive(ring_heap=[word, 0, 0, 0]).runtime_env.ring_heap == [RuntimeEnv.AUTO, 0, 0, 0]
    s = resolve_ring_sizing(env={"PTO2_RING_HEAP": word})
    assert [s.source("heap", r) for r in range(4)] == ["auto"] * 4


@pytest.mark.parametrize("word", NOT_AUTO)
def test_every_entry_point_refuses_the_same_words_and_says_auto(word, capfd):
    with pytest.raises(ValueError, match=r"^ring_heap must be a power of 2 >= 1024 \(bytes per ring\), or 'auto', got "):
        RunConfig(ring_heap=word)
    with pytest.raises(ValueError, match=r"^ring_heap entries must .*, or 'auto' \(or 0 to keep default\), got "):
        RunConfig(ring_heap=[0, word, 0, 0])
    with pytest.raises(ValueError, match=r"^RuntimeEnv.ring_heap must be an int or 'auto' \(broadcast\), or a list of 4 of them$"):
        RuntimeEnv(ring_heap=word)
    s = resolve_ring_sizing(env={"PTO2_RING_HEAP": word})
    assert s.source("heap", 0) == "default"
    assert "must be a non-negative integer or auto" in capfd.readouterr().err


def test_repr_shows_auto():
    cfg = RunConfig(ring_heap="auto", ring_task_window=[16, "auto", 0, 0]).to_call_config()
    r = repr(cfg)
    assert "18446744073709551615" not in r, r
    assert "runtime_env.ring_task_window=[16, 'auto', 0, 0], runtime_env.ring_heap=['auto', 'auto', 'auto', 'auto']" in r, r
    env = cfg.runtime_env
    assert repr(env) == "RuntimeEnv(ring_task_window=[16, 'auto', 0, 0], ring_heap=['auto', 'auto', 'auto', 'auto'], ring_dep_pool=[0, 0, 0, 0])"
    # The repr is a RuntimeEnv's own constructor call.
    assert eval(repr(env), {"RuntimeEnv": RuntimeEnv}) == env


# ----- ArenaStats and worker state --------------------------------------------------------------


def test_arena_stats_repr_shows_the_byte_counts():
    with ChipWorker(prewarm=False, device_memory=64 << 20) as w:
        st = w.arena_stats
        r = repr(st)
    assert f"resident_bytes={st.resident_bytes}" in r and f"held_bytes={st.held_bytes}" in r, r
    assert "capacity_bytes=67108864" in r, r


@pytest.mark.parametrize("chip_processes", [True, False], ids=["processes", "threads"])
def test_arena_stats_of_a_closed_l3_worker_says_what_every_call_says(chip_processes):
    w = Worker(level=3, device_ids=[0], chip_processes=chip_processes)
    text = r"^Worker\.init\(\) has not been called \(or the worker is closed\)$"
    with pytest.raises(RuntimeError, match=text):
        w.arena_stats(0)
    w.init()
    w.close()
    with pytest.raises(RuntimeError, match=text):
        w.arena_stats(0)
    with pytest.raises(RuntimeError, match=text):
        w.run(lambda o, a, c: None)
    l2 = Worker(level=2)
    with pytest.raises(RuntimeError, match=text):
        l2.arena_stats()
