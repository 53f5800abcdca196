#!/usr/bin/env python3
"""Soak test of SUB workers (`make soak`; not part of `make test`).

For `--minutes` (default 1, at most 10) it runs, in random order, through Simpler's
Python face (`taskring.simpler.worker.Worker`):

- L3 SUB-only workers (`Worker(level=3, num_sub_workers=1..3)`, recreated now and then):
  random DAGs of SUB tasks over `taskring.shared_array`s — element-wise numpy ops
  (add, sub, mul, 2a+b, scale, copy) writing fresh outputs (OUTPUT_EXISTING), chains
  accumulating into one array (INOUT), and fan-outs submitted as one
  `submit_sub_group` — checked against a sequential numpy oracle; now and then with a
  callable registered after `init()` (sent with its tasks);
- injected faults: a SUB callable that raises mid-DAG (the RuntimeError names
  `sub_worker`, the exception's type and message; no task downstream of it has run:
  their outputs are untouched; then the same worker runs a clean program right),
  SIGKILL of a SUB process while its task runs or while it is idle (the run fails with
  `sub_worker N (pid P): the process was killed by signal 9`, N its index in
  `host_pids`; the worker's live SUB workers, if any, run the next program right; an
  idly killed one may be passed over without a failure; close() is quick, the process
  is reaped, a fresh worker works), a SUB
  callable that calls `os._exit(3)` (`... exited with status 3`);
- L4 by composition (`Worker(level=4, num_sub_workers=0|1)` with one
  `Worker(level=3, num_sub_workers=1)` added): an L3 orchestration that submits a
  chain of SUB tasks, with the L4's own SUB task after it; and an L3 SUB failure, which
  reaches the L4 caller as a RuntimeError naming `child_worker` and `sub_worker`, after
  which the L4 worker runs a clean program right.

Each run has a timeout (a watchdog thread interrupts it; a run that cannot be
interrupted ends the soak). At the end RSS, file descriptors (/proc/self/fd), mappings,
/dev/shm entries, threads and child processes must be back at their baseline within a
tolerance. The last line is `sub soak: N runs, M faults injected, L lost` (lost = wrong
results, hangs, leaks or unexpected errors); the exit status is non-zero when L > 0.

Usage: .venv/bin/python soak/sub_soak.py [--minutes 1] [--seed S] [--run-timeout 30]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import re
import signal
import sys
import threading
import time
import traceback
from collections import Counter

import numpy as np

import taskring
from taskring.simpler.task_interface import TaskArgs, TensorArgType
from taskring.simpler.worker import Worker

IN, OUTX, INOUT = TensorArgType.INPUT, TensorArgType.OUTPUT_EXISTING, TensorArgType.INOUT
FAULT_MSG = "sub soak: injected SUB fault"
SENTINEL = np.float32(-7777.0)
MARK_SLEEP_S = 2.0
OPS = {0: ("add", 2), 1: ("sub", 2), 2: ("mul", 2), 3: ("axpy", 2), 4: ("scale", 1), 5: ("copy", 1)}
ACC = 6  # INOUT: acc += x


def apply_op(op, xs, alpha):
    """The op, as the SUB callable and the oracle both compute it (float32)."""
    if op == 0:
        return xs[0] + xs[1]
    if op == 1:
        return xs[0] - xs[1]
    if op == 2:
        return xs[0] * xs[1]
    if op == 3:
        return xs[0] * np.float32(2.0) + xs[1]
    if op == 4:
        return xs[0] * np.float32(alpha / 4.0)
    if op == 5:
        return xs[0].copy()
    raise AssertionError(op)


# ----- SUB callables (module level: the SUB processes fork with them) -----------------------


def sub_op(args):
    """Scalars: op, alpha. Tensors: inputs..., then the output (ACC: the accumulator)."""
    op, alpha = args.scalar(0), args.scalar(1)
    n = len(args)
    out = args[n - 1].numpy()
    if op == ACC:
        out += args[0].numpy()
        return
    out[...] = apply_op(op, [args[i].numpy() for i in range(n - 1)], alpha)


def sub_raise(args):
    raise ValueError(f"{FAULT_MSG} {args.scalar(0)}")


def sub_mark_sleep(args):
    """Tensor 0 (int64[1]): this process's pid, so the host knows the task runs."""
    args[0].numpy()[0] = os.getpid()
    time.sleep(MARK_SLEEP_S)
    args[1].numpy()[...] = 1.0


def sub_exit(args):
    os._exit(3)


# ----- resources, watchdog (soak/soak.py's, with /dev/shm counted too) -----------------------

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak  # noqa: E402
from soak import Lost, Watchdog, children, close_with_timeout, wait_reaped  # noqa: E402


def resources():
    r = soak.resources()
    r["shm"] = len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else 0
    return r


def fmt_res(r):
    return f"{soak.fmt_res(r)} shm={r['shm']}"


# ----- random DAGs --------------------------------------------------------------------------
#
# A plan: arrays (index -> initial values; inputs random, the rest SENTINEL) and a list of
# steps, each a list of tasks submitted together (one task: submit_sub; several:
# submit_sub_group of independent tasks). A task: {"fn": name, "ins": [i...], "out": j,
# "op": k, "alpha": a}. Outputs are written once (OUTPUT_EXISTING), except accumulators
# (op ACC, INOUT), written by a chain of tasks and read by none before the chain ends.
# Nothing is written after it is read.


def gen_plan(rng, np_rng, shape):
    n_in = rng.randint(1, 3)
    init = [np_rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(n_in)]
    readable = list(range(n_in))
    steps = []
    acc = None  # (array index, tasks left in its chain)

    def fresh():
        init.append(np.full(shape, SENTINEL, np.float32))
        return len(init) - 1

    for _ in range(rng.randint(2, 9)):
        if acc is not None:
            j, left = acc
            steps.append([{"fn": "op", "ins": [rng.choice(readable)], "out": j, "op": ACC, "alpha": 0}])
            acc = (j, left - 1) if left > 1 else None
            if acc is None:
                readable.append(j)
            continue
        kind = rng.random()
        if kind < 0.15:
            j = fresh()
            init[j][...] = 0.0
            acc = (j, rng.randint(1, 3))
            continue
        width = rng.randint(2, 4) if kind < 0.45 else 1
        step, outs = [], []
        for _ in range(width):
            op = rng.randrange(6)
            ins = [rng.choice(readable) for _ in range(OPS[op][1])]
            j = fresh()
            outs.append(j)
            step.append({"fn": "op", "ins": ins, "out": j, "op": op, "alpha": rng.randint(1, 8)})
        steps.append(step)
        readable += outs
    if acc is not None:
        readable.append(acc[0])
    return init, steps


def tasks_of(steps):
    return [t for s in steps for t in s]


def oracle(init, steps):
    """Each array's states in order of its writes: states[j][k] after k writes."""
    vals = [a.copy() for a in init]
    states = [[a.copy()] for a in init]
    for t in tasks_of(steps):
        j = t["out"]
        if t["op"] == ACC:
            vals[j] = vals[j] + vals[t["ins"][0]]
        else:
            vals[j] = apply_op(t["op"], [vals[i] for i in t["ins"]], t["alpha"])
        states[j].append(vals[j].copy())
    return states


def downstream(steps, bad):
    """Indices (in tasks_of order) of the tasks after task `bad` by a dependency (read
    after write, write after write), and those before it (its ancestors)."""
    ts = tasks_of(steps)
    after = {bad}
    for k in range(bad + 1, len(ts)):
        if any(ts[p]["out"] in ts[k]["ins"] or ts[p]["out"] == ts[k]["out"] for p in after):
            after.add(k)
    before = set()
    frontier = [bad]
    while frontier:
        k = frontier.pop()
        for p in range(k):
            if p not in before and (ts[p]["out"] in ts[k]["ins"] or ts[p]["out"] == ts[k]["out"]):
                before.add(p)
                frontier.append(p)
    return after - {bad}, before


# ----- the soak ----------------------------------------------------------------------------


class SubSoak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.np_rng = np.random.default_rng(args.seed)
        self.runs = self.faults = 0
        self.lost = []
        self.kinds = Counter()
        self.notes = Counter()
        self.kill_report_s = []
        self.w = None
        self.w_uses = 0
        self.l4 = None
        self.wd = Watchdog(self.fatal)

    # -- bookkeeping --
    def lose(self, kind, detail):
        self.lost.append((kind, detail))
        if sum(1 for k, _ in self.lost if k == kind) <= 5:
            print(f"sub soak: LOST [{kind}] {detail}", file=sys.stderr, flush=True)

    def summary(self):
        return f"sub soak: {self.runs} runs, {self.faults} faults injected, {len(self.lost)} lost"

    def fatal(self, label):
        self.lose("hang", f"{label}: not interruptible; soak stopped")
        self.report()
        print(self.summary(), flush=True)

    def shape(self):
        return (self.rng.randint(1, 8), self.rng.choice([8, 32, 64, 256]))

    # -- workers --
    def l3(self, fresh=False):
        if self.w is not None and (fresh or self.w_uses >= self.rng.randint(8, 40)):
            self.drop_l3()
        if self.w is None:
            w = Worker(level=3, num_sub_workers=self.rng.randint(1, 3))
            w.h = {  # type: ignore[attr-defined]
                "op": w.register(sub_op),
                "raise": w.register(sub_raise),
                "mark": w.register(sub_mark_sleep),
                "exit": w.register(sub_exit),
            }
            w.init()
            self.w, self.w_uses = w, 0
        self.w_uses += 1
        return self.w

    def drop_l3(self, label="L3"):
        w, self.w = self.w, None
        if w is not None:
            took = close_with_timeout(w)
            if took is None:
                self.lose("hang", f"{label}: close() did not return within 5 s")
            elif took > 2.0:
                self.lose("slow-close", f"{label}: close() took {took:.2f} s")

    def drop_l4(self):
        w, self.l4 = self.l4, None
        if w is not None and close_with_timeout(w) is None:
            self.lose("hang", "L4: close() did not return within 5 s")

    # -- one program on an L3 worker --
    def submit_plan(self, w, arrs, steps, handles=None):
        handles = handles or {}

        def task_args(t):
            ta = TaskArgs()
            for i in t["ins"]:
                ta.add_tensor(w.make_tensor_arg(arrs[i]), IN)
            ta.add_tensor(w.make_tensor_arg(arrs[t["out"]]), INOUT if t["op"] == ACC else OUTX)
            ta.add_scalar(t["op"])
            ta.add_scalar(t["alpha"])
            return ta

        def orch(o, args, cfg):
            for step in steps:
                fn = handles.get(step[0]["fn"], w.h[step[0]["fn"]])
                if len(step) == 1 and self.rng.random() < 0.8:
                    o.submit_sub(fn, task_args(step[0]))
                else:
                    o.submit_sub_group(fn, [task_args(t) for t in step])

        return orch

    def shared(self, init):
        arrs = []
        for a in init:
            s = taskring.shared_array(a.shape, np.float32)
            s[...] = a
            arrs.append(s)
        return arrs

    def check(self, label, arrs, states):
        for j, (got, st) in enumerate(zip(arrs, states)):
            if not np.array_equal(got, st[-1]):
                raise Lost(f"{label}: array {j} differs from the numpy oracle (max err {np.nanmax(np.abs(got - st[-1])):.3g})")

    def l3_random(self):
        w = self.l3()
        init, steps = gen_plan(self.rng, self.np_rng, self.shape())
        handles = {}
        if self.rng.random() < 0.1:
            # A callable registered after init(): its pickled form goes with its tasks.
            k = self.rng.randint(0, 1 << 20)

            def late_op(args, _k=k):
                sub_op(args)

            handles["op"] = w.register(late_op)
            self.notes["callable registered after init()"] += 1
        arrs = self.shared(init)
        w.run(self.submit_plan(w, arrs, steps, handles))
        self.check(f"L3 DAG ({len(tasks_of(steps))} tasks, {w.num_sub_workers} SUB)", arrs, oracle(init, steps))

    def expect_error(self, w, orch):
        t0 = time.monotonic()
        try:
            w.run(orch)
        except RuntimeError as e:
            return str(e), time.monotonic() - t0
        return None, time.monotonic() - t0

    def l3_raise(self):
        w = self.l3()
        init, steps = gen_plan(self.rng, self.np_rng, self.shape())
        ts = tasks_of(steps)
        bad = self.rng.randrange(len(ts))
        token = self.rng.randint(1, 1 << 30)
        # The failing task keeps its tensors (so its dependencies are the same) and
        # passes the token as its first scalar; it is submitted alone, the tasks of its
        # group (independent of it) each on their own.
        regroup = []
        for s in steps:
            if any(t is ts[bad] for t in s):
                regroup += [[dict(t, fn="raise", op=token) if t is ts[bad] else t] for t in s]
            else:
                regroup.append(s)
        states = oracle(init, steps)
        after, before = downstream(steps, bad)
        arrs = self.shared(init)
        writes = Counter()
        lo, hi = Counter(), Counter()
        for k, t in enumerate(ts):
            if k == bad:
                continue
            if k in before:
                lo[t["out"]] = writes[t["out"]] + 1
            if k not in after:
                hi[t["out"]] = writes[t["out"]] + 1
            writes[t["out"]] += 1
        # The failing task does not write its output.
        err, took = self.expect_error(w, self.submit_plan(w, arrs, regroup))
        if err is None:
            raise Lost("L3 SUB raise: the run succeeded")
        if not re.search(rf"\bsub_worker\b.*\bValueError: {re.escape(FAULT_MSG)} {token % (1 << 64)}\b", err):
            raise Lost(f"L3 SUB raise: reported as {err!r}")
        # Each array: a state between its writers that must have run and those that may.
        for j, a in enumerate(arrs):
            ok = states[j][lo[j] : hi[j] + 1]
            if not any(np.array_equal(a, st) for st in ok):
                dn = [k for k in after if ts[k]["out"] == j]
                raise Lost(f"L3 SUB raise: array {j} (writers downstream of the failure: {dn}) is in none of its {len(ok)} allowed states")
        self.notes["raise: downstream tasks checked not run"] += len(after)
        self.after_fault(w)

    def after_fault(self, w):
        """The same worker runs a clean program right."""
        init, steps = gen_plan(self.rng, self.np_rng, self.shape())
        arrs = self.shared(init)
        w.run(self.submit_plan(w, arrs, steps))
        self.check("clean program after a SUB failure", arrs, oracle(init, steps))

    def l3_kill(self, mid_task):
        w = self.l3()
        pids = list(w._node.host_pids)
        mark = taskring.shared_array((1,), np.int64)
        done = taskring.shared_array((4,), np.float32)
        init, steps = gen_plan(self.rng, self.np_rng, self.shape())
        arrs = self.shared(init)

        def orch(o, args, cfg):
            ta = TaskArgs()
            ta.add_tensor(w.make_tensor_arg(mark), OUTX)
            ta.add_tensor(w.make_tensor_arg(done), OUTX)
            o.submit_sub(w.h["mark"], ta)
            self.submit_plan(w, arrs, steps)(o, args, cfg)

        if mid_task:
            killed = {}

            def killer():
                deadline = time.monotonic() + 10
                while mark[0] == 0 and time.monotonic() < deadline:
                    time.sleep(0.002)
                if mark[0]:
                    killed["pid"], killed["t"] = int(mark[0]), time.monotonic()
                    os.kill(int(mark[0]), signal.SIGKILL)

            th = threading.Thread(target=killer, daemon=True)
            th.start()
            err, _ = self.expect_error(w, orch)
            th.join(11)
            if "pid" not in killed:
                raise Lost("L3 SUB kill: the marking task never ran")
            pid, took = killed["pid"], time.monotonic() - killed["t"]
        else:
            pid = self.rng.choice(pids)
            os.kill(pid, signal.SIGKILL)
            time.sleep(self.rng.choice([0, 0.01, 0.1]))
            # With other SUB workers alive, runs may succeed on them (the dead one is
            # passed over once known dead); with one SUB worker the run must fail.
            for attempt in range(4):
                t0 = time.monotonic()
                err, _ = self.expect_error(w, orch)
                took = time.monotonic() - t0
                if err is not None:
                    break
                self.check("L3 DAG beside a killed SUB process", arrs, oracle(init, steps))
                self.notes["idle kill: a run succeeded on the live SUB workers"] += 1
                arrs[:] = self.shared(init)
                mark[0] = 0
        if err is None and not mid_task and len(pids) > 1:
            self.notes["idle kill: every run succeeded on the live SUB workers"] += 1
            self.drop_l3("L3 after SUB kill")
            return
        if err is None:
            raise Lost(f"L3 SUB kill ({'mid-task' if mid_task else 'idle'}): the run succeeded")
        m = re.search(r"sub_worker (\d+) \(pid (\d+)\): the process was killed by signal 9\b", err)
        if not m or int(m.group(2)) != pid or pids[int(m.group(1))] != pid:
            raise Lost(f"L3 SUB kill of pid {pid} (host_pids {pids}): reported as {err!r}")
        if mid_task and done[0] != 0:
            raise Lost("L3 SUB kill: the killed task's output was written")
        if not mid_task and done[0] != 0:
            # The marking task ran on another SUB worker: the run ended after it.
            self.notes["idle kill: the run ended after a task running on another SUB worker"] += 1
        elif mid_task:
            self.kill_report_s.append(took)
        if took > (1.5 if mid_task or done[0] == 0 else MARK_SLEEP_S + 1.5):
            self.lose("slow-report", f"L3 SUB kill ({'mid-task' if mid_task else 'idle'}): reported after {took:.2f} s")
        if len(pids) > 1:
            self.after_fault(w)  # the live SUB workers take the next run
            self.notes["kill: the same worker's live SUB workers ran the next program"] += 1
        t0 = time.monotonic()
        self.drop_l3("L3 after SUB kill")
        if time.monotonic() - t0 > 2.0:
            return
        for p in pids:
            if not wait_reaped(p):
                raise Lost(f"L3 SUB kill: SUB pid {p} not reaped after close()")
        self.after_fault(self.l3(fresh=True))

    def l3_exit(self):
        w = self.l3()
        pids = list(w._node.host_pids)
        init, steps = gen_plan(self.rng, self.np_rng, self.shape())
        arrs = self.shared(init)
        cut = self.rng.randint(0, len(steps))

        def orch(o, args, cfg):
            self.submit_plan(w, arrs, steps[:cut])(o, args, cfg)
            o.submit_sub(w.h["exit"])
            self.submit_plan(w, arrs, steps[cut:])(o, args, cfg)

        err, _ = self.expect_error(w, orch)
        if err is None:
            raise Lost("L3 SUB exit: the run succeeded")
        m = re.search(r"sub_worker (\d+) \(pid (\d+)\): the process exited with status 3\b", err)
        if not m or pids[int(m.group(1))] != int(m.group(2)):
            raise Lost(f"L3 SUB exit (host_pids {pids}): reported as {err!r}")
        self.drop_l3("L3 after SUB exit")
        for p in pids:
            if not wait_reaped(p):
                raise Lost(f"L3 SUB exit: SUB pid {p} not reaped after close()")
        self.after_fault(self.l3(fresh=True))

    # -- L4 by composition --
    def l4_worker(self):
        if self.l4 is not None and self.rng.random() < 0.25:
            self.drop_l4()
        if self.l4 is None:
            w4 = Worker(level=4, num_sub_workers=self.rng.randint(0, 1))
            c = Worker(level=3, num_sub_workers=1)
            hop, hraise = c.register(sub_op), c.register(sub_raise)

            def l3_chain(o, args, cfg):
                # args: x (INPUT), y (OUTPUT_EXISTING); scalars op, alpha, fail token.
                x, y = args.tensor(0), args.tensor(1)
                op, alpha, token = args.scalar(0), args.scalar(1), args.scalar(2)
                ta = TaskArgs()
                ta.add_tensor(x, IN)
                ta.add_tensor(y, OUTX)
                ta.add_scalar(op)
                ta.add_scalar(alpha)
                o.submit_sub(hop, ta)
                if token:
                    tb = TaskArgs()
                    tb.add_tensor(y, INOUT)
                    tb.add_scalar(token)
                    o.submit_sub(hraise, tb)
                for _ in range(2):
                    tc = TaskArgs()
                    tc.add_tensor(y, INOUT)
                    tc.add_scalar(ACC)  # y += y
                    tc.add_scalar(0)
                    o.submit_sub(hop, tc)

            w4.add_worker(c)
            w4.h = {"l3": w4.register(l3_chain), "op": w4.register(sub_op)}  # type: ignore[attr-defined]
            w4.init()
            self.l4 = w4
        return self.l4

    def l4_run(self, fail):
        w4 = self.l4_worker()
        shape = self.shape()
        x = taskring.shared_array(shape, np.float32)
        x[...] = self.np_rng.uniform(-1, 1, shape).astype(np.float32)
        y = taskring.shared_array(shape, np.float32)
        z = taskring.shared_array(shape, np.float32)
        y[...] = SENTINEL
        z[...] = SENTINEL
        op = self.rng.choice([4, 5])
        alpha = self.rng.randint(1, 8)
        token = self.rng.randint(1, 1 << 30) if fail else 0

        def orch(o, args, cfg):
            ta = TaskArgs()
            ta.add_tensor(w4.make_tensor_arg(x), IN)
            ta.add_tensor(w4.make_tensor_arg(y), OUTX)
            ta.add_scalar(op)
            ta.add_scalar(alpha)
            ta.add_scalar(token)
            o.submit_next_level(w4.h["l3"], ta, worker=0)
            if w4.num_sub_workers:
                tb = TaskArgs()
                tb.add_tensor(w4.make_tensor_arg(y), IN)
                tb.add_tensor(w4.make_tensor_arg(z), OUTX)
                tb.add_scalar(5)
                tb.add_scalar(0)
                o.submit_sub(w4.h["op"], tb)

        y1 = apply_op(op, [x], alpha)
        want_y = y1 * np.float32(2.0) * np.float32(2.0)
        if not fail:
            w4.run(orch)
            if not np.array_equal(y, want_y):
                raise Lost("L4: the L3 SUB chain's output differs from numpy")
            if w4.num_sub_workers and not np.array_equal(z, want_y):
                raise Lost("L4: the L4 SUB task's output differs from numpy")
            return
        err, _ = self.expect_error(w4, orch)
        if err is None:
            raise Lost("L4: an L3 SUB failure: the run succeeded")
        if "child_worker" not in err or "sub_worker" not in err or f"{FAULT_MSG} {token}" not in err:
            raise Lost(f"L4: an L3 SUB failure reported as {err!r}")
        if not np.array_equal(y, y1):
            raise Lost("L4: the L3 tasks after the failed SUB task ran (or the one before did not)")
        if w4.num_sub_workers and not np.all(z == SENTINEL):
            raise Lost("L4: the L4 SUB task downstream of the failed L3 task ran")
        self.l4_run(False)

    # -- driver --
    def scenarios(self):
        return [
            (40, "l3_random", False, self.l3_random),
            (10, "l3_raise", True, self.l3_raise),
            (5, "l3_kill_mid_task", True, lambda: self.l3_kill(True)),
            (3, "l3_kill_idle", True, lambda: self.l3_kill(False)),
            (4, "l3_exit", True, self.l3_exit),
            (6, "l4_random", False, lambda: self.l4_run(False)),
            (3, "l4_sub_raise", True, lambda: self.l4_run(True)),
        ]

    def settle(self):
        self.drop_l3()
        self.drop_l4()
        gc.collect()
        deadline = time.monotonic() + 3
        while children() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        gc.collect()
        return resources()

    def warm_up(self):
        for name, fn in (("warm-up l3", self.l3_random), ("warm-up l4", lambda: self.l4_run(False))):
            try:
                with self.wd.guard(name, self.args.run_timeout + 15):
                    fn()
            except Exception as e:  # noqa: BLE001
                self.runs += 1
                self.lose(name, f"{type(e).__name__}: {e}")
        return self.settle()

    def run(self):
        a = self.args
        print(f"sub soak: seed {a.seed}, {a.minutes} min", flush=True)
        base = self.warm_up()
        print(f"sub soak: baseline {fmt_res(base)}", flush=True)
        scen = self.scenarios()
        weights = [w for w, *_ in scen]
        start = time.monotonic()
        end = start + a.minutes * 60
        next_progress = start + 30
        while time.monotonic() < end:
            _, name, is_fault, fn = self.rng.choices(scen, weights)[0]
            self.runs += 1
            self.kinds[name] += 1
            if is_fault:
                self.faults += 1
            try:
                with self.wd.guard(name, a.run_timeout):
                    fn()
            except Lost as e:
                self.lose(name, str(e))
                self.recover()
            except KeyboardInterrupt:
                if not self.wd.fired:
                    print("sub soak: interrupted", file=sys.stderr)
                    break
                self.lose("hang", f"{name}: overran {a.run_timeout} s (interrupted)")
                self.recover()
            except Exception as e:  # noqa: BLE001 - every other error is unexpected
                self.lose(name, f"unexpected {type(e).__name__}: {e}\n{traceback.format_exc()}")
                self.recover()
            now = time.monotonic()
            if now >= next_progress:
                print(f"sub soak: {now - start:5.0f} s: {self.runs} runs, {self.faults} faults, {len(self.lost)} lost; {fmt_res(resources())}", flush=True)
                next_progress = now + 30
        elapsed = time.monotonic() - start
        final = self.settle()
        print(f"sub soak: after {elapsed:.0f} s, everything closed: {fmt_res(final)}", flush=True)
        tol = {"rss": max(64 << 20, base["rss"] // 2), "fds": 4, "maps": 48, "shm": 0, "threads": 2, "children": 0}
        for k, t in tol.items():
            if final[k] > base[k] + t:
                extra = f" {children()}" if k == "children" else ""
                self.lose("leak", f"{k}: {base[k]} at the start, {final[k]} at the end (tolerance +{t}){extra}")
        self.report()
        print(self.summary(), flush=True)
        return 1 if self.lost else 0

    def recover(self):
        self.drop_l3()
        self.drop_l4()

    def report(self):
        print("sub soak: runs by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items())), flush=True)
        if self.kill_report_s:
            ks = sorted(self.kill_report_s)
            print(f"sub soak: SIGKILL reported after {ks[0] * 1e3:.1f}..{ks[-1] * 1e3:.1f} ms ({len(ks)} kills)", flush=True)
        for n, c in sorted(self.notes.items()):
            print(f"sub soak: note: {n} ({c}x)", flush=True)
        if self.lost:
            print("sub soak: lost by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(k for k, _ in self.lost).items())), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=1.0, help="how long to soak (default 1, at most 10)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    p.add_argument("--run-timeout", type=float, default=30.0, help="seconds one run may take before it counts as a hang")
    a = p.parse_args()
    if not 0 < a.minutes <= 10:
        p.error("--minutes must be in (0, 10]")
    if a.seed is None:
        a.seed = int(time.time() * 1000) % (1 << 31)
    sys.exit(SubSoak(a).run())


if __name__ == "__main__":
    main()
