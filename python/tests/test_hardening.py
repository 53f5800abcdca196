"""Faults a user meets sooner or later (docs/api.md §2 misaligned arrays, §6.1), at L2 and through the
Python face: misaligned views, one worker shared by threads, fork after init, and the
small validation holes (each pinned so it cannot come back)."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import taskring
from taskring import IN, OUT, ChipWorker, RunConfig

K = taskring.kernels


@taskring.program(signature=[IN, OUT])
def copy_prog(rt, src, out):
    rt.submit(K.copy, inputs=[src], outputs=[out])


@taskring.kernel
def _py_copy(src, out):
    out[...] = src


@taskring.program(signature=[IN, OUT])
def py_copy_prog(rt, src, out):
    rt.submit(_py_copy, inputs=[src], outputs=[out])


# ----- misaligned views (docs/api.md §2) --------------------------------------------------------


@pytest.mark.parametrize("prog", [copy_prog, py_copy_prog], ids=["builtin", "python_kernel"])
@pytest.mark.parametrize("which", ["output", "input"])
def test_misaligned_view_is_rejected_and_nothing_is_touched(prog, which):
    buf = np.full(48, 0xAA, np.uint8)
    odd = buf[1:33].view(np.float32)  # 8 floats starting one byte into buf
    other = np.arange(8, dtype=np.float32)
    src, out = (other, odd) if which == "output" else (odd, other.copy())
    before_buf, before_out = buf.copy(), out.copy()
    idx = 1 if which == "output" else 0
    with pytest.raises(ValueError, match=rf"^argument {idx}: array data is not aligned to its 4-byte elements$"):
        taskring.run(prog, src, out)
    np.testing.assert_array_equal(buf, before_buf)
    np.testing.assert_array_equal(out, before_out)


def test_aligned_view_of_a_byte_buffer_at_an_element_offset_runs():
    buf = np.zeros(40, np.uint8)
    out = buf[4:36].view(np.float32)  # aligned: 4 bytes in
    src = np.arange(8, dtype=np.float32)
    taskring.run(copy_prog, src, out)
    np.testing.assert_array_equal(out, src)
    assert not buf[:4].any() and not buf[36:].any()


def test_views_of_one_buffer_at_unaligned_root_keep_their_bytes():
    # The owner itself starts at an odd address (a uint8 view of a bytes buffer at 1):
    # float views 3 bytes into it are aligned; the runtime must address them exactly.
    raw = np.zeros(80, np.uint8)
    root = np.frombuffer(raw.data, dtype=np.uint8, count=72, offset=1)
    root.flags.writeable or pytest.skip("frombuffer gave a read-only view")
    a = root[3:35].view(np.float32)
    b = root[35:67].view(np.float32)
    a[:] = np.arange(8, dtype=np.float32)
    taskring.run(copy_prog, a, b)
    np.testing.assert_array_equal(b, a)
    assert not raw[:4].any() and not raw[68:].any()


def test_l3_misaligned_shared_array_view_is_rejected():
    with taskring.Worker(level=3, device_ids=[0]) as w:
        h = w.register(copy_prog)
        w.init()
        buf = taskring.shared_array(48, np.uint8)
        buf[:] = 0xAA
        src = taskring.shared_array(8, np.float32)
        odd = buf[1:33].view(np.float32)
        with pytest.raises(ValueError, match=r"^argument 1: array data is not aligned to its 4-byte elements$"):
            w.run(lambda o, args, cfg: o.submit_next_level(h, [src, odd], worker=0))
        assert (buf == 0xAA).all()


# ----- one worker, several threads (docs/api.md §6.1) -------------------------------------------


def test_one_chip_worker_many_threads_are_serialised():
    errors, done = [], []
    with ChipWorker(cores=2) as w:

        def body(t):
            try:
                for i in range(40):
                    src = np.full(16, t * 1000 + i, np.float32)
                    out = np.zeros(16, np.float32)
                    w.run(py_copy_prog if i % 4 == 0 else copy_prog, src, out)
                    np.testing.assert_array_equal(out, src)
                done.append(t)
            except Exception as e:  # noqa: BLE001 - collected and asserted below
                errors.append(repr(e))

        ts = [threading.Thread(target=body, args=(t,)) for t in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert errors == []
    assert sorted(done) == [0, 1, 2, 3]


@taskring.kernel
def _sleep_then_copy(src, out):
    time.sleep(0.3)
    out[...] = src


@taskring.program(signature=[IN, OUT])
def slow_copy_prog(rt, src, out):
    rt.submit(_sleep_then_copy, inputs=[src], outputs=[out])


def test_close_from_another_thread_waits_for_the_run_in_flight():
    w = ChipWorker(cores=1)
    src, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    result = []
    t = threading.Thread(target=lambda: result.append(w.run(slow_copy_prog, src, out)))
    t.start()
    time.sleep(0.1)  # the run is in flight, its kernel sleeping
    w.close()
    t.join()
    assert len(result) == 1 and result[0].tasks == 1
    np.testing.assert_array_equal(out, src)
    with pytest.raises(RuntimeError, match="closed"):
        w.run(copy_prog, src, out)


# ----- fork after init (docs/api.md §6.1) -------------------------------------------------------


def _in_child(fn):
    """Run fn() in a forked child; returns what it wrote (its result or its error). A child
    that hangs hangs this (the suite's watchdog ends it)."""
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            msg = "ok " + str(fn())
        except BaseException as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}"
        os.write(wfd, msg.encode())
        os._exit(0)
    os.close(wfd)
    chunks = []
    while True:
        got = os.read(r, 4096)
        if not got:
            break
        chunks.append(got)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return b"".join(chunks).decode()


def test_chip_worker_used_after_fork_raises_at_once_and_new_workers_work():
    w = ChipWorker(cores=2)
    try:
        src, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
        w.run(copy_prog, src, out)
        parent = os.getpid()

        def use_old():
            # The chip's cores are threads of the parent: a run that waited on them in the
            # child would hang or time out with another error. It raises before waiting.
            try:
                w.run(copy_prog, src, np.zeros(8, np.float32))
            except RuntimeError as e:
                w.close()  # closing in the child forgets the parent's chip quietly
                return str(e)
            return "no error"

        msg = _in_child(use_old)
        assert msg == f"ok this ChipWorker was created in process {parent}; it cannot be used after fork()"

        def use_new():
            with ChipWorker(cores=1) as w2:
                o = np.zeros(8, np.float32)
                w2.run(copy_prog, src, o)
                return float(o.sum())

        assert _in_child(use_new) == f"ok {float(src.sum())}"
        # the parent's worker is untouched by the child
        out2 = np.zeros(8, np.float32)
        w.run(copy_prog, src, out2)
        np.testing.assert_array_equal(out2, src)
    finally:
        w.close()


# ----- small validation holes -------------------------------------------------------------------


def test_run_config_ring_heap_beyond_64_bits_is_rejected_at_construction():
    with pytest.raises(ValueError, match=r"^ring_heap must be a power of 2 >= 1024 \(bytes per ring\), or 'auto', got 18446744073709551616$"):
        RunConfig(ring_heap=2**64)
    with pytest.raises(ValueError, match=r"entries must be a power of 2 >= 1024"):
        RunConfig(ring_heap=[0, 2**65, 0, 0])


@pytest.mark.parametrize("flag", ["enable_scope_stats", "enable_dep_gen"])
@pytest.mark.parametrize("bad", ["yes", None, 1])
def test_run_config_flags_must_be_bools(flag, bad):
    with pytest.raises(TypeError, match=rf"^{flag} must be a bool, got {bad!r}$"):
        RunConfig(**{flag: bad})


def test_run_config_output_dir_bytes_and_paths(tmp_path):
    assert RunConfig(output_dir=b"/tmp/x").output_dir == "/tmp/x"
    assert RunConfig(output_dir=tmp_path).output_dir == str(tmp_path)
    with pytest.raises(TypeError, match="output_dir must be a str or an os.PathLike"):
        RunConfig(output_dir=5)


def test_out_of_range_ints_are_value_errors_not_overflow_errors():
    @taskring.program(signature=[IN, OUT])
    def bad_view(rt, a, out):
        a.view([4], offset=-1)

    a, out = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(ValueError, match=r"offset must be in \[0, 18446744073709551615\], got -1"):
        taskring.run(bad_view, a, out)

    @taskring.program(signature=[IN, OUT])
    def bad_strides(rt, a, out):
        a.view([4], strides=[-2])

    with pytest.raises(ValueError, match=r"strides entries must be in \[1, 4294967295\], got -2"):
        taskring.run(bad_strides, a, out)

    @taskring.program(signature=[IN, OUT])
    def big_scalar(rt, a, out):
        rt.submit(K.scale, inputs=[a], outputs=[out], scalars=[2**64])

    with pytest.raises(ValueError, match=r"scalar 18446744073709551616 does not fit 64 bits"):
        taskring.run(big_scalar, a, out)
    rs = taskring.resolve_ring_sizing(taskring.CallConfig())
    with pytest.raises(ValueError, match=r"^ring must be in \[0, 3\], got -1$"):
        rs.source("ring_heap", -1)


def test_kernel_of_a_non_callable_is_a_type_error():
    with pytest.raises(TypeError, match="kernel\\(\\) needs a function, got int"):
        taskring.kernel(5)


def test_bad_env_value_warns_once_per_process_and_value():
    code = (
        "import numpy as np, taskring\n"
        "from taskring import IN, OUT\n"
        "@taskring.program(signature=[IN, OUT])\n"
        "def p(rt, a, o):\n"
        "    rt.submit(taskring.kernels.copy, inputs=[a], outputs=[o])\n"
        "a, o = np.ones(4, np.float32), np.zeros(4, np.float32)\n"
        "with taskring.ChipWorker() as w:\n"
        "    for _ in range(20):\n"
        "        w.run(p, a, o)\n"
    )
    env = dict(os.environ, PTO2_RING_HEAP="abc")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "PTO2_RING_HEAP" in ln]
    assert len(lines) == 1, r.stderr


# ----- a Python kernel that never returns (item 10 of the hardening issue) ----------------------


@taskring.kernel
def _spin_forever(a, out):
    while True:
        pass


@taskring.program(signature=[IN, OUT])
def spinning(rt, a, out):
    rt.submit(_spin_forever, inputs=[a], outputs=[out])


def test_abandoned_spinning_python_kernel_is_stopped(monkeypatch):
    monkeypatch.setenv("PTO2_SCHEDULER_TIMEOUT_MS", "300")
    w = ChipWorker(cores=1)
    a, out = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(taskring.RuntimeFailure) as ei:
        w.run(spinning, a, out)
    assert ei.value.name == "SCHEDULER_TIMEOUT" and "_spin_forever" in str(ei.value)
    # the worker is usable with its replacement core
    src = np.arange(4, dtype=np.float32)
    w.run(copy_prog, src, out)
    np.testing.assert_array_equal(out, src)
    w.close()
    time.sleep(0.2)  # the interrupted kernel leaves at its next bytecode
    t0, c0 = time.monotonic(), time.process_time()
    time.sleep(1.0)
    burnt = (time.process_time() - c0) / (time.monotonic() - t0)
    assert burnt < 0.2, f"{burnt:.2f} of a core still burnt after close()"


# ----- scope sites are the user's lines (docs/api.md §7) ----------------------------------------


def test_scope_site_is_the_users_line(tmp_path):
    import inspect
    import json

    @taskring.program(signature=[IN, OUT])
    def scoped(rt, a, out):
        with rt.scope():  # SITE
            rt.submit(K.copy, inputs=[a], outputs=[out])

    src, first = inspect.getsourcelines(scoped.orchestration)
    want = f"{__file__}:{first + next(i for i, l in enumerate(src) if '# SITE' in l)}"
    cfg = taskring.CallConfig(enable_scope_stats=True, output_prefix=str(tmp_path))
    for call in (lambda: taskring.run(scoped, np.ones(4, np.float32), np.zeros(4, np.float32), config=cfg),
                 lambda: ChipWorker().run(scoped, np.ones(4, np.float32), np.zeros(4, np.float32), config=cfg)):
        call()
        lines = (tmp_path / "scope_stats" / "scope_stats.jsonl").read_text().splitlines()[1:]
        sites = {json.loads(l)["site"] for l in lines if l.strip()}
        assert want in sites, (want, sites)
        # No site is a line of the taskring package itself (whatever the checkout's folders are named).
        pkg = os.path.dirname(os.path.realpath(taskring.__file__))
        files = [os.path.realpath(s.rsplit(":", 1)[0]) for s in sites if s != "root"]
        assert not [f for f in files if os.path.commonpath([pkg, f]) == pkg], (pkg, sites)


# ----- a heap failure's `needed` is a size that fits or None; its hint leads to a fit ---------


def test_a_heap_failure_says_needed_only_when_it_fits_and_its_hint_leads_to_a_fit():
    @taskring.kernel
    def slow(x, o):
        time.sleep(0.1)
        o[...] = x

    @taskring.program(signature=[IN, OUT])
    def prog(rt, x, out):
        with rt.scope():
            rt.submit(slow, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)])
        with rt.scope():
            y = rt.submit(K.copy, inputs=[x], outputs=[rt.spec(x.shape, x.dtype)]).outputs[0]
            z = rt.submit(K.copy, inputs=[y], outputs=[rt.spec(x.shape, x.dtype)]).outputs[0]
            rt.submit(K.copy, inputs=[z], outputs=[out])

    x, out = np.ones(256, np.float32), np.zeros(256, np.float32)
    with pytest.raises(taskring.RuntimeFailure) as ei:
        taskring.run(prog, x, out, config=RunConfig(ring_heap=[0, 2048, 0, 0]))
    e = ei.value
    assert e.name == "HEAP_RING_DEADLOCK" and e.configured == 2048
    # What is live plus the failing submit is only a lower bound: not given as `needed`.
    assert e.needed is None
    assert e.hint.startswith('runtime_env ring_heap[1] > 2048; the size that holds the run is not known from this failure: "auto" for that entry learns it in one dispatch')
    # Following the hint: one dispatch with "auto" learns the size, the next runs on it.
    with taskring.ChipWorker(prewarm=False) as w:
        w.run(prog, x, out, config=RunConfig(ring_heap=[0, "auto", 0, 0]))
        rep = w.run(prog, x, out, config=RunConfig(ring_heap=[0, "auto", 0, 0]))
        assert rep.ring_sizing.heap[1] > 2048
    np.testing.assert_array_equal(out, x)
