"""Device memory through the Python face: ChipWorker(device_memory=...), the report's
DeviceMemory, ArenaStats byte counts, DEVICE_OUT_OF_MEMORY with the worker still usable,
DistributedConfig / Worker(level=3) passing it to every chip."""

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, ChipWorker, RunConfig, RuntimeFailure
from taskring import kernels as K


@taskring.program(signature=[IN, OUT])
def copy(rt, a, out):
    rt.submit(K.copy, inputs=[a], outputs=[out])


SMALL = RunConfig(ring_task_window=16, ring_heap=1 << 16, ring_dep_pool=64)
BIG = RunConfig(ring_task_window=16, ring_heap=1 << 28, ring_dep_pool=64)


def test_the_report_gives_the_arena_and_the_chips_device_memory():
    with ChipWorker(SMALL, device_memory=64 << 20) as w:
        a, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
        rep = w.run(copy, a, out)
        dm = rep.device_memory
        assert isinstance(dm, taskring.DeviceMemory)
        assert dm.capacity_bytes == 64 << 20
        assert 4 * (1 << 16) < dm.arena_bytes == dm.used_bytes < 64 << 20
        st = w.arena_stats
        assert (st.resident_bytes, st.held_bytes, st.capacity_bytes) == (dm.arena_bytes, 0, 64 << 20)


def test_an_arena_larger_than_the_device_is_device_out_of_memory():
    with ChipWorker(SMALL, device_memory=64 << 20) as w:
        a, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
        w.run(copy, a, out)
        with pytest.raises(RuntimeFailure) as ei:
            w.run(copy, a, out * 0, config=BIG)
        e = ei.value
        assert (e.name, e.code) == ("DEVICE_OUT_OF_MEMORY", 202)
        assert "needs" in str(e) and f"of {64 << 20} are free" in str(e) and "(idle)" in str(e)
        assert "smaller runtime_env" in e.hint
        rep = w.run(copy, a, out)  # usable, and its arena was not evicted
        assert rep.arena_hit


@pytest.mark.parametrize("bad", [0, 1000, -1, 1.5, "1G", True, 1 << 64])
def test_device_memory_is_validated_at_the_call(bad):
    with pytest.raises(ValueError, match=r"^device_memory must be an int >= 1048576 \(bytes\), got "):
        ChipWorker(device_memory=bad)
    with pytest.raises(ValueError, match=r"^DistributedConfig.device_memory must be an int >= 1048576"):
        taskring.DistributedConfig(device_memory=bad)


def test_the_environment_sets_the_default(monkeypatch):
    monkeypatch.setenv("TASKRING_DEVICE_MEMORY", str(48 << 20))
    with ChipWorker(SMALL) as w:
        assert w.arena_stats.capacity_bytes == 48 << 20


def test_l3_chips_get_their_device_memory():
    with taskring.Worker(level=3, device_ids=[0, 1], device_memory=64 << 20) as w:
        h = w.register(copy)
        w.init(SMALL)
        a, out = taskring.shared_array(8), taskring.shared_array(8)
        a[:] = 1.0

        def orch(o, args, cfg):
            o.submit_next_level(h, [a, out], SMALL, worker=0)

        rep = w.run(orch)
        assert (out == 1.0).all()
        assert rep.tasks[0].arena_bytes > 0
        assert w.arena_stats(0).capacity_bytes == 64 << 20

        def big(o, args, cfg):
            o.submit_next_level(h, [a, out], BIG, worker=1)

        with pytest.raises(RuntimeError, match=r"^chip 1 \(pid \d+\): DEVICE_OUT_OF_MEMORY \(code 202\)"):
            w.run(big)
        w.run(orch)  # usable


def test_scope_stats_and_the_report_give_the_arena_and_the_tensormap(tmp_path):
    import json
    import subprocess
    import sys

    cfg = RunConfig(enable_scope_stats=True, output_dir=str(tmp_path), ring_task_window=16, ring_heap=1 << 16, ring_dep_pool=64)
    with ChipWorker() as w:
        rep = w.run(copy, np.ones(8, np.float32), np.zeros(8, np.float32), config=cfg)
    with open(tmp_path / "scope_stats" / "scope_stats.jsonl") as f:
        head = json.loads(f.readline())
    assert head["arena_device_bytes"] == rep.device_memory.arena_bytes
    # the tensormap's pool follows the windows: 4 x 16 slots x 16 tensors -> 1024 entries
    assert head["tensormap_max"] == 1024 and head["peak_tensormap"] >= 1
    r = subprocess.run([sys.executable, "-m", "taskring", "report", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "report.html").read_text()
    assert f"({rep.device_memory.arena_bytes} bytes) of the chip's device memory" in page
    assert "the tensormap held at most" in page


def test_device_resident_tensors_are_charged_to_their_chip():
    @taskring.program(signature=[IN, OUT])
    def cp(rt, a, out):
        rt.submit(K.copy, inputs=[a], outputs=[out])

    def orch(o, chips, args, cfg):
        o.submit_next_level(chips.cp, [args[0], args[1]], SMALL, worker=0)

    dprog = taskring.DistributedProgram(
        orch, {"cp": cp}, taskring.DistributedConfig(device_ids=[0], device_memory=64 << 20), signature=[IN, OUT]
    )
    w = dprog.prepare(SMALL)
    try:
        kv = w.alloc_tensor((1 << 20,), np.float32, worker=0)  # 4 MiB, resident on chip 0
        st = w.arena_stats(0)
        assert st.held_bytes == kv.nbytes and st.capacity_bytes == 64 << 20
        with pytest.raises(RuntimeError, match=r"^chip 0 \(pid \d+\): DEVICE_OUT_OF_MEMORY \(code 202\): ") as ei:
            w.alloc_tensor((16 << 20,), np.float32, worker=0)  # 64 MiB more
        # The text names the tensor's own bytes (not the running total), the free bytes
        # and what holds them, and says what is short of memory (not a ring sizing).
        text = str(ei.value)
        assert "67108864 more bytes of device-resident tensors do not fit: " in text, text
        assert "of 67108864 bytes are free (held: " in text and "device-resident tensors: 4194304 bytes" in text, text
        assert "ring sizing does not fit" not in text and "on ring None" not in text, text
        assert w.arena_stats(0).held_bytes == kv.nbytes  # nothing charged for the refused one
        a, out = taskring.shared_array(8), taskring.shared_array(8)
        a[:] = 2.0
        w.run(dprog, a, out)
        assert (out == 2.0).all()
    finally:
        w.close()
