"""SUB workers and L4 by composition (docs/api.md §14) through upstream's names: Python
callables on forked SUB workers in one DAG with chip tasks, and level 4 Workers that run L3
orchestrations in L3 Workers of their own processes."""

import os
import signal
import struct
import threading
import time

import numpy as np
import pytest

import taskring
import taskring.simpler

taskring.simpler.install()

from simpler.buffer import MappedArgs, mint_owner_instance_id, wrap_fork_inherited  # noqa: E402
from simpler.task_interface import CallConfig, DataType, TaskArgs, TensorArgType  # noqa: E402
from simpler.worker import Worker  # noqa: E402
from test_simpler_face import expected_out, libs, pipeline, pipeline_args  # noqa: E402,F401

OUT = TensorArgType.OUTPUT_EXISTING
IN = TensorArgType.INPUT


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def shm_entries():
    return set(os.listdir("/dev/shm"))


def child_pids():
    """This process's child processes (each thread's)."""
    pids = set()
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except FileNotFoundError:
            pass
    return pids


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """After each test (its Workers closed): no child process and nothing new in /dev/shm."""
    shm, kids = shm_entries(), child_pids()
    yield
    assert child_pids() <= kids
    assert shm_entries() <= shm


def ta(*tensors, scalars=()):
    args = TaskArgs()
    for t, tag in tensors:
        args.add_tensor(t, tag)
    for s in scalars:
        args.add_scalar(s)
    return args


# ----- SUB callables (module level: cloudpickle sends them by reference) ------------------


def fill_rows(args: MappedArgs):
    """args[0] (R x C float32) = row index * scalar(0) + column index."""
    a = args[0].numpy()
    k = args.scalar(0)
    a[...] = np.arange(a.shape[0])[:, None] * k + np.arange(a.shape[1])[None, :]


def row_sums(args):
    """args[1] = the row sums of args[0]."""
    args[1].numpy()[...] = args[0].numpy().sum(axis=1)


def fail_on_row(args):
    raise ValueError(f"bad row {args.scalar(0)}")


def record_pid(args):
    """Writes this process's pid at args[0][scalar(0)], then waits (up to 5 s) until
    every slot has a pid: the group's members run at the same time."""
    pids = args[0].numpy()
    pids[args.scalar(0)] = os.getpid()
    t = time.monotonic() + 5
    while (pids == 0).any() and time.monotonic() < t:
        time.sleep(0.001)


def describe(args):
    """args[0] (int64) = the MappedArgs as this process sees them."""
    out = args[0].numpy()
    x = args[1]
    out[:6] = [len(args), args.tensor_count(), args.scalar_count(), args.scalar(0) == (1 << 64) - 5, x.dtype, x.nbytes]
    out[6] = int(bytes(x.buffer[:4]) == struct.pack("<f", 1.5))


# ----- SUB workers at level 3 --------------------------------------------------------------


def test_sub_then_chip_then_sub_is_one_dag_checked_against_numpy(libs):  # noqa: F811
    R, C = 4, 6
    a, b, out, t_out, misc = (taskring.shared_array(s) for s in ((R, C), (R, C), (R, C), (C, R), (R * C,)))
    sums = taskring.shared_array(R)
    b[...] = 0.5
    with Worker(level=3, platform="a2a3sim", device_ids=[0], num_sub_workers=2) as w:
        fill = w.register(fill_rows)
        chip = w.register(pipeline(libs))
        summ = w.register(row_sums)
        w.init()

        def orch(o, args, cfg):
            # The chip task reads `a`, which the first SUB writes; the second SUB reads
            # the chip's `out`: three tasks in a chain through the tensors they share.
            o.submit_sub(fill, ta((w.make_tensor_arg(a), OUT), scalars=[10]))
            o.submit_next_level(chip, pipeline_args(*(w.make_tensor_arg(x) for x in (a, b, out, t_out, misc)), 2.0), worker=0)
            o.submit_sub(summ, ta((w.make_tensor_arg(out), IN), (w.make_tensor_arg(sums), OUT)))

        assert w.run(orch) is None
        want_a = np.arange(R)[:, None] * 10.0 + np.arange(C)[None, :]
        np.testing.assert_allclose(a, want_a)
        np.testing.assert_allclose(out, expected_out(want_a, b, 2.0))
        np.testing.assert_allclose(sums, expected_out(want_a, b, 2.0).sum(axis=1), rtol=1e-6)
        tasks = w.last_report.tasks
        assert len(tasks) == 3 and tasks[1].ring_sizing is not None and tasks[0].ring_sizing is None


def test_a_sub_failure_fails_the_run_skips_what_depends_on_it_and_the_worker_stays_usable():
    a = taskring.shared_array((3, 4))
    sums = taskring.shared_array(3)
    sums[...] = -1
    with Worker(level=3, num_sub_workers=1) as w:
        boom = w.register(fail_on_row)
        fill = w.register(fill_rows)
        summ = w.register(row_sums)
        w.init()

        def failing(o, args, cfg):
            o.submit_sub(boom, ta((w.make_tensor_arg(a), OUT), scalars=[3]))
            o.submit_sub(summ, ta((w.make_tensor_arg(a), IN), (w.make_tensor_arg(sums), OUT)))

        with pytest.raises(RuntimeError) as e:
            w.run(failing)
        assert "sub_worker: ValueError: bad row 3" in str(e.value)
        assert (sums == -1).all()  # downstream of the failure: never ran

        def good(o, args, cfg):
            o.submit_sub(fill, ta((w.make_tensor_arg(a), OUT), scalars=[1]))
            o.submit_sub(summ, ta((w.make_tensor_arg(a), IN), (w.make_tensor_arg(sums), OUT)))

        w.run(good)
        np.testing.assert_allclose(sums, (np.arange(3)[:, None] + np.arange(4)[None, :]).sum(axis=1))


def test_a_sub_killed_with_sigkill_is_reported_and_the_other_sub_takes_the_next_run():
    out = taskring.shared_array(1, np.int64)
    before = shm_entries()
    w = Worker(level=3, num_sub_workers=2)
    nap = w.register(lambda args: time.sleep(30))
    pid_of = w.register(lambda args: args[0].numpy().__setitem__(0, os.getpid()))
    w.init()
    pids = list(w._node.host_pids)
    assert len(pids) == 2 and all(alive(p) for p in pids)

    def kill_when_busy():
        time.sleep(0.3)
        os.kill(pids[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_when_busy)
    try:
        killer.start()
        with pytest.raises(RuntimeError) as e:
            w.run(lambda o, a, c: o.submit_sub(nap))  # on SUB worker 0 (both idle: the first)
        killer.join()
        assert f"sub_worker 0 (pid {pids[0]}): the process was killed by signal 9" in str(e.value)
        w.run(lambda o, a, c: o.submit_sub(pid_of, ta((w.make_tensor_arg(out), OUT))))
        assert out[0] == pids[1]  # the live one
    finally:
        w.close()
    assert not any(alive(p) for p in pids)
    assert shm_entries() == before


def test_a_sub_group_runs_its_members_on_different_sub_workers_at_once():
    pids = taskring.shared_array(3, np.int64)
    with Worker(level=3, num_sub_workers=3) as w:
        h = w.register(record_pid)
        w.init()
        w.run(lambda o, a, c: o.submit_sub_group(h, [ta((w.make_tensor_arg(pids[i : i + 1]), OUT), scalars=[0]) for i in range(3)]))
        assert sorted(pids.tolist()) == sorted(w._node.host_pids)


def test_a_group_then_a_dependent_task_through_a_fork_inherited_buffer():
    # A buffer only named (never read): the dependency is the tensormap's, by address.
    marks = taskring.shared_array(2, np.int32)
    ptr = wrap_fork_inherited(0xDEADBEEF00, 1, mint_owner_instance_id(), buffer_id=7)
    order = []
    with Worker(level=3, num_sub_workers=2) as w:
        first = w.register(lambda args: (time.sleep(0.2), marks.__setitem__(0, 1)))
        then = w.register(lambda args: marks.__setitem__(1, 2 if marks[0] == 1 else -1))
        w.init()

        def orch(o, args, cfg):
            t = ptr.tensor(shapes=(1,), dtype=DataType.UINT8)
            order.append(o.submit_sub_group(first, [ta((t, TensorArgType.OUTPUT)), ta((t, TensorArgType.OUTPUT))]))
            o.submit_sub(then, ta((t, IN)))

        w.run(orch)
    assert marks.tolist() == [1, 2]
    assert len(order[0]) == 2


def test_a_sub_callable_sees_upstreams_mapped_args():
    info = taskring.shared_array(8, np.int64)
    x = taskring.shared_array((2, 3))
    x[...] = 1.5
    with Worker(level=3, num_sub_workers=1) as w:
        h = w.register(describe)
        w.init()
        w.run(lambda o, a, c: o.submit_sub(h, ta((w.make_tensor_arg(info), OUT), (w.make_tensor_arg(x), IN), scalars=[(1 << 64) - 5, 3])))
    assert info[:7].tolist() == [2, 2, 2, 1, int(DataType.FLOAT32), 24, 1]  # scalar(0): the uint64 it was


def test_registering_after_init_reaches_the_forked_workers():
    out = taskring.shared_array(2, np.int64)
    with Worker(level=3, num_sub_workers=2) as w:
        w.register(fill_rows)
        w.init()
        late = w.register(lambda args: args[0].numpy().__setitem__(slice(None), [41, 42]))
        assert w.register(fill_rows).hashid != late.hashid
        for _ in range(3):  # both SUB workers, more than once
            out[...] = 0
            w.run(lambda o, a, c: o.submit_sub(late, ta((w.make_tensor_arg(out), OUT))))
            assert out.tolist() == [41, 42]


def test_submit_sub_guards_say_upstreams_words(libs):  # noqa: F811
    w = Worker(level=3, platform="a2a3sim", device_ids=[0], num_sub_workers=1)
    chip = w.register(pipeline(libs))
    sub = w.register(fill_rows)
    w.init()
    try:
        buf = w.alloc_child_tensor(0, (4,), DataType.FLOAT32)
        errors = []

        def orch(o, args, cfg):
            for call in (
                lambda: o.submit_sub(42),
                lambda: o.submit_sub(chip),
                lambda: o.submit_sub_group(sub, []),
                lambda: o.submit_sub(sub, ta((buf.tensor(shapes=(4,), dtype=DataType.FLOAT32), IN))),
                lambda: o.submit_sub(sub, "not TaskArgs"),
            ):
                try:
                    call()
                except (TypeError, ValueError) as e:
                    errors.append(f"{type(e).__name__}: {e}")

        w.run(orch)
        assert errors == [
            "TypeError: orch.submit_sub expects a CallableHandle returned by Worker.register",
            f"TypeError: cannot run LOCAL_CHIP; expected LOCAL_PYTHON for {chip.hashid}",
            "ValueError: Orchestrator: args_list must not be empty",
            "ValueError: orch.submit_sub: argument 0 is a DEVICE-space tensor (DEVICE_MALLOC); a Python sub-worker runs "
            "on the host and can only take HOST-space tensors",
            "TypeError: orch.submit_sub: args must be a TaskArgs, got str",
        ]
    finally:
        w.close()
    w2 = Worker(level=3)
    w2.register(fill_rows)
    with pytest.raises(RuntimeError, match=r"has no eligible dispatch target \(needs a SUB or next-level child\)"):
        w2.init()
    w2.close()
    with pytest.raises(TypeError, match="non-ChipCallable target must be callable"):
        Worker(level=3, num_sub_workers=1).register(42)


# ----- level 4 ----------------------------------------------------------------------------


def scale_l3(orch, args, cfg):
    """An L3 orchestration run below an L4: args[0] = args[1] * scalar(0) on a SUB, and the
    config it got recorded in args[2]."""
    seen = args.tensor(2)._array
    seen[0] = cfg.runtime_env.ring_task_window[0]
    seen[1] = cfg.aicpu_thread_num
    orch.submit_sub(orch._worker._scale, args)


def scale(args):
    args[0].numpy()[...] = args[1].numpy() * args.scalar(0)


def test_l4_runs_l3_orchestrations_in_l3_workers_with_each_tasks_config_whole():
    n = 3
    outs = [taskring.shared_array(8) for _ in range(n)]
    ins = [taskring.shared_array(8) for _ in range(n)]
    seen = [taskring.shared_array(2, np.int64) for _ in range(n)]
    before = shm_entries()
    l3s = [Worker(level=3, num_sub_workers=1) for _ in range(2)]
    for w3 in l3s:
        w3._scale = w3.register(scale)
    w4 = Worker(level=4, num_sub_workers=1)
    h = w4.register(scale_l3)
    ids = [w4.add_worker(w3) for w3 in l3s]
    assert ids == [0, 1]
    w4.init()
    try:
        for i in range(n):
            ins[i][...] = np.arange(8) + i

        def orch(o, args, cfg):
            for i in range(n):
                c = CallConfig()
                c.runtime_env.ring_task_window = 16 << i
                c.aicpu_thread_num = i + 2
                a = ta((w4.make_tensor_arg(outs[i]), OUT), (w4.make_tensor_arg(ins[i]), IN), (w4.make_tensor_arg(seen[i]), OUT), scalars=[i + 2])
                o.submit_next_level(h, a, c, worker=i % 2)

        assert w4.run(orch) is None
        for i in range(n):
            np.testing.assert_allclose(outs[i], (np.arange(8) + i) * (i + 2))
            assert seen[i].tolist() == [16 << i, i + 2]
        pids = list(w4._node.host_pids)
        assert len(pids) == 3
    finally:
        w4.close()
    assert not any(alive(p) for p in pids)
    assert shm_entries() == before


def test_an_l3_sub_failure_reaches_the_l4_caller_through_each_level():
    class SentinelError(ValueError):
        pass

    def boom(args):
        raise SentinelError("l3-sub-boom")

    l3 = Worker(level=3, num_sub_workers=1)
    sub = l3.register(boom)
    w4 = Worker(level=4)
    h = w4.register(lambda orch, args, cfg: orch.submit_sub(sub))
    wid = w4.add_worker(l3)
    w4.init()
    try:
        for _ in range(2):  # the failure does not wedge the L4 worker
            with pytest.raises(RuntimeError) as e:
                w4.run(lambda o, a, c: o.submit_next_level(h, TaskArgs(), CallConfig(), worker=wid))
            assert "child_worker level=3: RuntimeError: sub_worker: SentinelError: l3-sub-boom" in str(e.value)
        with pytest.raises(ValueError, match="target worker 3 is not a registered worker"):
            w4.run(lambda o, a, c: o.submit_next_level(h, TaskArgs(), worker=3))
    finally:
        w4.close()


def test_l4_lifecycle_guards():
    with pytest.raises(RuntimeError, match="requires level >= 4"):
        Worker(level=3).add_worker(Worker(level=3))
    w4 = Worker(level=4)
    child = Worker(level=3)
    w4.add_worker(child)
    with pytest.raises(RuntimeError, match="Child worker is already attached to another parent"):
        Worker(level=4).add_worker(child)
    with pytest.raises(RuntimeError, match="a Worker attached as a child is initialized by its parent"):
        child.init()
    w4.init()
    with pytest.raises(RuntimeError, match="must be called before init"):
        w4.add_worker(Worker(level=3))
    w4.close()
    w4.close()  # idempotent
    with pytest.raises(RuntimeError, match="device_ids are only supported on L3"):
        Worker(level=4, device_ids=[0]).init()


def test_two_workers_in_one_process_run_side_by_side():
    outs = [taskring.shared_array((2, 2)) for _ in range(2)]
    ws = [Worker(level=3, num_sub_workers=1) for _ in range(2)]
    hs = [w.register(fill_rows) for w in ws]
    for w in ws:
        w.init()
    try:
        errors = []

        def go(i):
            try:
                for k in range(20):
                    ws[i].run(lambda o, a, c: o.submit_sub(hs[i], ta((ws[i].make_tensor_arg(outs[i]), OUT), scalars=[k + i])))
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for i in range(2):
            np.testing.assert_allclose(outs[i], np.arange(2)[:, None] * (19 + i) + np.arange(2)[None, :])
    finally:
        for w in ws:
            w.close()


def test_l4_task_tensors_reach_the_chips_of_an_l3_child(libs):  # noqa: F811
    R, C = 4, 6
    a, b, out, t_out, misc = (taskring.shared_array(s) for s in ((R, C), (R, C), (R, C), (C, R), (R * C,)))
    a[...] = np.arange(R * C).reshape(R, C)
    b[...] = 3.0
    l3 = Worker(level=3, platform="a2a3sim", device_ids=[0])
    chip = l3.register(pipeline(libs))
    w4 = Worker(level=4)
    # The L3 orchestration hands the L4 task's tensors on to a chip of its own, with the
    # config the L4 task carries.
    h = w4.register(lambda orch, args, cfg: orch.submit_next_level(chip, args, cfg, worker=0))
    wid = w4.add_worker(l3)
    w4.init()
    try:
        cfg = CallConfig()
        cfg.runtime_env.ring_task_window = 64
        w4.run(lambda o, _a, _c: o.submit_next_level(h, pipeline_args(*(w4.make_tensor_arg(x) for x in (a, b, out, t_out, misc)), 1.5), cfg, worker=wid))
        np.testing.assert_allclose(out, expected_out(a, b, 1.5))
        np.testing.assert_allclose(t_out, (a + a + b).T)
    finally:
        w4.close()


def test_create_buffer_is_shared_host_memory_owned_by_the_worker():
    from simpler.buffer import AddressSpace, BackendKind

    with Worker(level=3, platform="a2a3sim", device_ids=[0], num_sub_workers=1) as w:
        h = w.register(fill_rows)
        w.init()
        b0, b1 = w.create_buffer(48), w.create_buffer(64)
        # A host buffer is the host side of a device copy too.
        b1.shm.buf[:] = bytes(range(64))
        dev = w.alloc_child_tensor(0, (16,), DataType.FLOAT32)
        w.copy_to(dev, b1)
        back = bytearray(64)
        w.copy_from(back, dev)
        assert bytes(back) == bytes(range(64))
        w.free(dev)
        assert (b0.backend_kind, b0.address_space, b0.nbytes) == (BackendKind.POSIX_SHM, AddressSpace.HOST, 48)
        assert b0.identity.owner_instance_id == b1.identity.owner_instance_id and b0.identity.buffer_id != b1.identity.buffer_id
        w.run(lambda o, a, c: o.submit_sub(h, ta((b0.tensor(shapes=(3, 4), dtype=DataType.FLOAT32), OUT), scalars=[2])))
        got = np.frombuffer(b0.shm.buf, dtype=np.float32).reshape(3, 4)
        np.testing.assert_allclose(got, np.arange(3)[:, None] * 2 + np.arange(4)[None, :])
    assert b0.closed and b0.shm.buf is None


def test_a_worker_holds_at_most_64_callables():
    from simpler.task_interface import MAX_REGISTERED_CALLABLE_IDS

    w = Worker(level=3, num_sub_workers=1)
    fns = [eval(f"lambda args: {i}") for i in range(MAX_REGISTERED_CALLABLE_IDS + 1)]
    handles = [w.register(f) for f in fns[:-1]]
    assert len({h.hashid for h in handles}) == MAX_REGISTERED_CALLABLE_IDS == 64
    assert w.register(fns[0]).hashid == handles[0].hashid  # one held already
    with pytest.raises(RuntimeError, match=r"callable capacity exhausted \(MAX_REGISTERED_CALLABLE_IDS=64\)"):
        w.register(fns[-1])
    w.close()


def test_unregister_drops_one_handle_and_the_last_one_drops_the_callable():
    out = taskring.shared_array((2, 2))
    with Worker(level=3, num_sub_workers=1) as w:
        first = w.register(fill_rows)
        w.init()
        second = w.register(fill_rows)  # the same callable: another handle of it
        assert second.hashid == first.hashid and second._handle_id != first._handle_id

        def go(h, k):
            return lambda o, a, c: o.submit_sub(h, ta((w.make_tensor_arg(out), OUT), scalars=[k]))

        w.unregister(first)
        with pytest.raises(KeyError, match="is not live on this Worker"):
            w.run(go(first, 1))
        with pytest.raises(KeyError, match="is not live on this Worker"):
            w.unregister(first)
        w.run(go(second, 2))
        np.testing.assert_allclose(out, [[0, 1], [2, 3]])
        w.unregister(second)
        with pytest.raises(KeyError, match="is not live on this Worker"):
            w.run(go(second, 3))
        third = w.register(fill_rows)  # registered anew, after init
        w.run(go(third, 4))
        np.testing.assert_allclose(out, [[0, 1], [4, 5]])
        with pytest.raises(TypeError, match="Worker.unregister expects a CallableHandle returned by Worker.register"):
            w.unregister("h")
