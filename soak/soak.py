#!/usr/bin/env python3
"""Soak test of taskring (`make soak`; not part of `make test`).

For `--minutes` (default 5, at most 10) it runs, in random order:

- L2 (`taskring.run` one-shot and resident `ChipWorker`s, recreated now and then):
  random programs — DAGs of builtin kernels (add, sub, mul, copy, scale) and a Python
  kernel over small float32 arrays, in nested scopes (rings 0..3), with runtime
  temporaries and row-half views — under random per-task ring sizes that fit
  (`RunConfig` scalar or per-ring lists, `CallConfig`, `PTO2_RING_*` in the environment,
  or none), from 2-3 threads sharing one `ChipWorker` now and then;
- tight ring sizes (between the minimum and what holds everything: the runtime must
  reclaim as it goes): each run is right or fails with a capacity error, and at L2 the
  failures' `needed` sizes are followed until the program fits (a `needed` no larger than
  what is configured is lost: the hint cannot be followed), and where a failure knows
  no size, its hint to use "auto" for that entry;
- "auto" under changing needs: programs of one name made by one factory (each learns
  for itself: no failure once each has learned), and a need that jumps with the data
  (one failed dispatch per jump: the dispatch after a failure never fails);
- L3 (`taskring.Worker(level=3)`, chips as processes or, for a quarter of the workers, as
  threads; recreated now and then): several such programs per run on random chips,
  chained through shared arrays, each with its own random `CallConfig` (fitting or
  tight);
- injected faults: a Python kernel that raises (L2 and L3), undersized rings (a window of
  4 or a heap of 1024 bytes on a ring that needs more: a capacity `RuntimeFailure` at L2,
  the chip's `chip N (pid P): ...` error at L3), garbage `PTO2_RING_*` values (ignored),
  SIGKILL of a chip (idle or while its task runs: the `chip N (pid P): ...signal 9` error
  within 1 s, the other chips keep working, close() is quick, then a fresh worker), a
  kernel that ends its chip process (`... exited with status 3`), Ctrl-C
  while an L3 run waits (KeyboardInterrupt within 1 s, the worker keeps working) and,
  with `--sigstop`, SIGSTOP of a chip (`not responding`; the other chip's task is done);
  a native kernel that outlives its SCHEDULER_TIMEOUT and writes afterwards (the
  worker's next runs are right or refused, never see its values), Ctrl-C while a
  `ChipWorker` run waits for a long native kernel (KeyboardInterrupt before the kernel
  returns; its array refused until it does), `close()` or `run()` called from a worker's
  own orchestration (RuntimeError at once, the worker still works), and a replay whose
  arguments alias differently from its capture's (refused, nothing written).

Every result is checked against a sequential numpy oracle (outputs downstream of a failed
task must stay untouched). Each run has a timeout (a watchdog thread interrupts it; a run
that cannot be interrupted ends the soak). At the end RSS, file descriptors
(/proc/self/fd), mappings (/proc/self/maps lines), threads and child processes must be back
at their baseline within a tolerance. The last line is
`soak: N runs, M faults injected, L lost` (lost = wrong results, hangs, leaks or unexpected
errors); the exit status is non-zero when L > 0.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import dataclasses
import faulthandler
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
from taskring import IN, OUT, CallConfig, ChipWorker, RunConfig, RuntimeFailure, Worker, shared_array

K = taskring.kernels
FAULT_MSG = "soak: injected kernel fault"
MARK_SLEEP_S = 1.5
CAPACITY = {1: "SCOPE_DEADLOCK", 2: "HEAP_RING_DEADLOCK", 3: "FLOW_CONTROL_DEADLOCK", 4: "DEP_POOL_OVERFLOW"}


# ----- kernels -----------------------------------------------------------------------------


@taskring.kernel
def soak_py_axpy(a, b, out):
    """out = 2a + b (a Python kernel: runs holding the GIL)."""
    out[...] = a * np.float32(2.0) + b


@taskring.kernel
def soak_fail_kernel(a, out):
    raise ValueError(FAULT_MSG)


@taskring.kernel
def soak_exit_kernel(a, out):
    os._exit(3)  # the chip process dies mid-task with status 3


@taskring.kernel
def soak_mark_then_sleep(a, out):
    out[...] = 1.0  # tells the host (shared memory) that the task runs
    time.sleep(MARK_SLEEP_S)


BUILTIN = {"add": K.add, "sub": K.sub, "mul": K.mul, "copy": K.copy, "scale": K.scale, "py_axpy": soak_py_axpy, "fail": soak_fail_kernel}
ARITY = {"add": 2, "sub": 2, "mul": 2, "py_axpy": 2, "copy": 1, "scale": 1, "fail": 1}


def numpy_op(k, xs, alpha):
    if k == "add":
        return xs[0] + xs[1]
    if k == "sub":
        return xs[0] - xs[1]
    if k == "mul":
        return xs[0] * xs[1]
    if k == "py_axpy":
        return xs[0] * np.float32(2.0) + xs[1]
    if k == "copy":
        return xs[0].copy()
    if k == "scale":
        return (xs[0] * np.float32(alpha)).astype(np.float32)
    raise AssertionError(k)


# ----- random programs ---------------------------------------------------------------------
#
# A spec is a tree of items: ("op", kernel, [refs], dst, alpha) or ("scope", [items]).
# A ref / dst is (kind, index, half): kind "in" (program input), "tmp" (runtime output,
# visible in its scope and inner ones), "out" (program output, written exactly once —
# whole or as two row halves — and readable after that); half None (whole), 0 (rows
# [0, h)) or 1 (rows [h, rows)). Nothing is written after it is read (the runtime does not
# track WAR), inputs are never written.


class Spec:
    def __init__(self, name, n_in, n_out, body, fail):
        self.name, self.n_in, self.n_out, self.body, self.fail = name, n_in, n_out, body, fail


def gen_spec(rng, name, fail=False):
    n_in, n_out = rng.randint(1, 3), rng.randint(1, 3)
    state = {"tmp": 0, "outs_left": list(range(n_out)), "written": [], "ops": 0}

    def new_tmp():
        state["tmp"] += 1
        return ("tmp", state["tmp"] - 1, None)

    def op(visible, dst_full):
        k = rng.choice(["add", "sub", "mul", "copy", "scale", "add", "mul", "py_axpy"] if rng.random() < 0.2 else ["add", "sub", "mul", "copy", "scale"])
        refs = [rng.choice(visible) for _ in range(ARITY[k])]
        state["ops"] += 1
        return ("op", k, refs, dst_full, round(rng.uniform(-1.5, 1.5), 3))

    def block(depth, visible):
        items, local = [], []
        for _ in range(rng.randint(2, 7)):
            r = rng.random()
            if depth < 5 and r < 0.3:
                items.append(("scope", block(depth + 1, visible + local + state["written"])))
                continue
            srcs = visible + local + state["written"]
            if state["outs_left"] and r > 0.8:
                j = state["outs_left"].pop()
                if rng.random() < 0.4:  # written as two row halves, from halves
                    for h in (0, 1):
                        it = op([(s[0], s[1], h) for s in srcs], ("out", j, h))
                        items.append(it)
                else:
                    items.append(op(srcs, ("out", j, None)))
                state["written"].append(("out", j, None))
                continue
            t = new_tmp()
            items.append(op(srcs, t))
            local.append(t)
        return items

    ins = [("in", i, None) for i in range(n_in)]
    body = block(0, ins)
    if not any(it[0] == "scope" for it in body):
        body.append(("scope", block(1, ins + state["written"])))
    while state["outs_left"]:
        j = state["outs_left"].pop()
        body.append(op(ins + state["written"], ("out", j, None)))
        state["written"].append(("out", j, None))
    if fail:
        # Replace one op that writes a temporary by the failing kernel.
        cands = []

        def collect(items):
            for idx, it in enumerate(items):
                if it[0] == "scope":
                    collect(it[1])
                elif it[3][0] == "tmp":
                    cands.append((items, idx))

        collect(body)
        if not cands:
            return gen_spec(rng, name, fail)
        items, idx = rng.choice(cands)
        _, _, refs, dst, alpha = items[idx]
        items[idx] = ("op", "fail", refs[:1], dst, alpha)
    return Spec(name, n_in, n_out, body, fail)


def half_rows(x, h):
    m = x.shape[0] // 2
    return x if h is None else (x[0:m] if h == 0 else x[m : x.shape[0]])


def make_program(spec):
    def orch(rt, *args):
        ins, outs, tmps = args[: spec.n_in], args[spec.n_in :], {}

        def get(ref):
            kind, i, h = ref
            base = ins[i] if kind == "in" else (outs[i] if kind == "out" else tmps[i])
            return half_rows(base, h)

        def run(items):
            for it in items:
                if it[0] == "scope":
                    with rt.scope():
                        run(it[1])
                    continue
                _, k, refs, dst, alpha = it
                srcs = [get(r) for r in refs]
                scalars = [alpha] if k == "scale" else []
                if dst[0] == "tmp":
                    t = rt.submit(BUILTIN[k], inputs=srcs, outputs=[rt.spec(srcs[0].shape, srcs[0].dtype)], scalars=scalars)
                    tmps[dst[1]] = t.outputs[0]
                else:
                    rt.submit(BUILTIN[k], inputs=srcs, outputs=[get(dst)], scalars=scalars)

        run(spec.body)

    return taskring.Program(orch, [IN] * spec.n_in + [OUT] * spec.n_out, name=spec.name)


def oracle(spec, ins, outs):
    """Runs `spec` sequentially in numpy on copies; returns (outputs, tainted output
    indices: those downstream of a failing kernel, which must stay untouched)."""
    outs = [o.copy() for o in outs]
    tmps, tainted = {}, set()

    def get(ref):
        kind, i, h = ref
        base = ins[i] if kind == "in" else (outs[i] if kind == "out" else tmps[i])
        return half_rows(base, h)

    def is_tainted(ref):
        return (ref[0], ref[1]) in tainted

    def run(items):
        for it in items:
            if it[0] == "scope":
                run(it[1])
                continue
            _, k, refs, dst, alpha = it
            if k == "fail" or any(is_tainted(r) for r in refs):
                tainted.add((dst[0], dst[1]))
                if dst[0] == "tmp":
                    tmps[dst[1]] = np.zeros_like(get(refs[0]))
                continue
            y = numpy_op(k, [get(r) for r in refs], alpha)
            if dst[0] == "tmp":
                tmps[dst[1]] = y
            else:
                half_rows(outs[dst[1]], dst[2])[...] = y

    run(spec.body)
    return outs, {i for kind, i in tainted if kind == "out"}


def needs(spec, shape):
    """Per ring: total tasks, total temporary bytes, and the most tasks / temporary bytes
    of one scope instance (all retained until that scope ends)."""
    rows, cols = shape
    align = lambda b: (b + 1023) // 1024 * 1024  # noqa: E731 - outputs are 1 KiB-aligned
    full, half = align(rows * cols * 4), align((rows // 2) * cols * 4)
    tasks, heap, scope_tasks, scope_heap = [0] * 4, [0] * 4, [0] * 4, [0] * 4

    def walk(items, depth):
        r = min(depth, 3)
        n = b = 0
        for it in items:
            if it[0] == "scope":
                walk(it[1], depth + 1)
                continue
            n += 1
            if it[3][0] == "tmp":
                b += full  # temporaries are whole-shaped
        tasks[r] += n
        heap[r] += b
        scope_tasks[r] = max(scope_tasks[r], n)
        scope_heap[r] = max(scope_heap[r], b)

    walk(spec.body, 0)
    return tasks, heap, scope_tasks, scope_heap


def pow2_at_least(v):
    p = 1
    while p < v:
        p <<= 1
    return p


def fitting_config(rng, spec, shape):
    """A random ring sizing that holds everything the program allocates (nothing is
    reclaimed), in a random form: RunConfig scalars / per-ring lists, a CallConfig, or
    None (the defaults)."""
    tasks, heap, _, _ = needs(spec, shape)
    win = [pow2_at_least(max(4, t + 2)) << rng.randint(0, 2) for t in tasks]
    hp = [pow2_at_least(max(1024, 2 * b + 8192)) << rng.randint(0, 2) for b in heap]
    dep = [4 * t + 16 + rng.randint(0, 64) for t in tasks]
    form = rng.choice(["none", "scalar", "list", "list", "callconfig", "partial"])
    if form == "none":
        return None
    if form == "scalar":
        return RunConfig(ring_task_window=max(win), ring_heap=max(hp), ring_dep_pool=max(dep))
    if form == "list":
        return RunConfig(ring_task_window=win, ring_heap=hp, ring_dep_pool=dep)
    if form == "partial":  # some fields / rings fall through to the defaults
        z = lambda v: [x if rng.random() < 0.6 else 0 for x in v]  # noqa: E731
        return RunConfig(ring_task_window=z(win) if rng.random() < 0.7 else None, ring_heap=z(hp) if rng.random() < 0.7 else None, ring_dep_pool=z(dep) if rng.random() < 0.7 else None)
    c = CallConfig()
    c.runtime_env.ring_task_window = win
    c.runtime_env.ring_heap = hp
    c.runtime_env.ring_dep_pool = dep
    return c


def tight_config(rng, spec, shape):
    """Random ring sizes between the minimum and what holds everything: the runtime
    must reclaim as it goes. A run under them either is right or fails with a capacity
    error (never a wrong result, a hang or another error)."""
    tasks, heap, _, _ = needs(spec, shape)
    fit = lambda v, tight: v if rng.random() < 0.6 else tight  # noqa: E731
    win = [fit(pow2_at_least(max(4, t + 2)), 1 << rng.randint(2, max(2, pow2_at_least(t + 2).bit_length() - 1))) for t in tasks]
    hp = [fit(pow2_at_least(b + 1024), 1 << rng.randint(10, max(10, pow2_at_least(b + 1024).bit_length() - 1))) for b in heap]
    dep = [fit(4 * t + 16, rng.randint(4, 4 * t + 16)) for t in tasks]
    return RunConfig(ring_task_window=win, ring_heap=hp, ring_dep_pool=dep)


def undersized_config(rng, spec, shape):
    """(config, expected code, ring) with one ring too small for one scope's tasks or
    temporaries (a capacity failure whatever the timing), or None when the program has
    no such scope."""
    _, _, scope_tasks, scope_heap = needs(spec, shape)
    choices = [(1, r) for r in range(4) if scope_tasks[r] >= 4] + [(2, r) for r in range(4) if scope_heap[r] > 1024]
    if not choices:
        return None
    code, r = rng.choice(choices)
    v = [0, 0, 0, 0]
    if code == 1:
        v[r] = 4
        return RunConfig(ring_task_window=v), code, r
    v[r] = 1024
    return RunConfig(ring_heap=v), code, r


def expected_keys(cfg):
    """The non-zero ring entries `cfg` sets: {(field, ring): value}."""
    if cfg is None:
        return {}
    out = {}
    for f in ("ring_task_window", "ring_heap", "ring_dep_pool"):
        v = getattr(cfg.runtime_env, f) if isinstance(cfg, CallConfig) else getattr(cfg, f)
        if v is None:
            continue
        v = list(v) if isinstance(v, (list, tuple)) else [v] * 4
        for r in range(4):
            if v[r]:
                out[(f, r)] = v[r]
    return out


def check_sizing(rs, cfg):
    """None if the reported sizing has every value `cfg` set, else the difference."""
    for (f, r), v in expected_keys(cfg).items():
        got = getattr(rs, f.replace("ring_", ""))[r]
        if got != v or rs.source(f, r) != "call_config":
            return f"{f}[{r}] = {got} ({rs.source(f, r)}), config says {v}"
    return None


# ----- process resources -------------------------------------------------------------------


def children():
    me, kids = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
                fields = s[s.rindex(")") + 2 :].split()
                if int(fields[1]) == me:
                    kids.append((int(d), fields[0]))
            except (OSError, ValueError):
                pass
    return kids


def resources():
    with open("/proc/self/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) * 1024
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    return {"rss": rss, "fds": len(os.listdir("/proc/self/fd")), "maps": maps, "threads": len(os.listdir("/proc/self/task")), "children": len(children())}


def fmt_res(r):
    return f"rss={r['rss'] / 2**20:.1f}MiB fds={r['fds']} maps={r['maps']} threads={r['threads']} children={r['children']}"


# ----- watchdog ----------------------------------------------------------------------------


class Watchdog:
    """Interrupts the main thread (KeyboardInterrupt, which the runtime polls while it
    waits) when a guarded section overruns; if the section still has not returned after
    `grace` seconds, reports and exits (a hang that cannot be interrupted)."""

    def __init__(self, on_fatal, grace=15.0):
        self.lock = threading.Lock()
        self.deadline = self.label = None
        self.fired = False
        self.on_fatal, self.grace = on_fatal, grace
        threading.Thread(target=self._loop, name="soak-watchdog", daemon=True).start()

    def _loop(self):
        while True:
            time.sleep(0.1)
            with self.lock:
                if self.deadline is None:
                    continue
                now = time.monotonic()
                if not self.fired and now > self.deadline:
                    self.fired = True
                    print(f"\nsoak: watchdog: {self.label} overran its timeout; interrupting. Stacks:", file=sys.stderr, flush=True)
                    faulthandler.dump_traceback(all_threads=True)
                    _thread.interrupt_main()
                elif self.fired and now > self.deadline + self.grace:
                    label = self.label
                    self.deadline = None
                    self.on_fatal(label)
                    os._exit(3)

    @contextlib.contextmanager
    def guard(self, label, timeout):
        with self.lock:
            self.label, self.deadline, self.fired = label, time.monotonic() + timeout, False
        try:
            yield self
        finally:
            with self.lock:
                self.deadline = None


class Lost(Exception):
    """A run went wrong (wrong result, unexpected error, missing expected error...)."""


def close_with_timeout(w, timeout=5.0):
    """close() in a thread; returns the seconds it took, or None if it did not return."""
    t0 = time.monotonic()
    th = threading.Thread(target=w.close, daemon=True)
    th.start()
    th.join(timeout)
    return None if th.is_alive() else time.monotonic() - t0


def wait_reaped(pid, timeout=3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid not in [p for p, _ in children()]:
            return True
        time.sleep(0.02)
    return False


# ----- "auto" programs ----------------------------------------------------------------------


def make_chain(n_cell):
    """A program named ``soak_chain`` (every one the factory makes has that name) that
    holds ``n_cell[0]`` tasks live in one scope, each adding zero to the previous
    one's runtime output: the window, the heap and the dependency pool it needs grow
    with ``n_cell[0]`` (data the program reads), and ``out`` ends equal to ``a``."""

    @taskring.program(signature=[IN, IN, OUT], name="soak_chain")
    def soak_chain(rt, a, zero, out):
        with rt.scope():
            prev = a
            for _ in range(n_cell[0]):
                prev = rt.submit(K.add, inputs=[prev, zero], outputs=[rt.spec(a.shape, a.dtype)]).outputs[0]
            rt.submit(K.copy, inputs=[prev], outputs=[out])

    return soak_chain


# ----- the soak ----------------------------------------------------------------------------


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.np_rng = np.random.default_rng(args.seed)
        self.runs = self.faults = 0
        self.lost = []
        self.kinds = Counter()
        self.fault_kinds = Counter()
        self.notes = Counter()
        self.raises = Counter()  # tight L2 runs that fitted, by how many raises it took
        self.sigstop_results = []
        self.chip = None
        self.chip_uses = 0
        self.l3 = None
        self.l3_uses = 0
        # The program pool: built before any L3 worker forks its chips (they inherit it).
        self.specs = [gen_spec(self.rng, f"soak_p{i}") for i in range(args.programs)]
        self.fail_specs = [gen_spec(self.rng, f"soak_f{i}", fail=True) for i in range(4)]
        self.progs = {s.name: make_program(s) for s in self.specs + self.fail_specs}

        @taskring.program(signature=[IN, OUT])
        def soak_long(rt, a, out):
            rt.submit(soak_mark_then_sleep, inputs=[a], outputs=[out])

        self.long_prog = soak_long

        @taskring.program(signature=[IN, OUT])
        def soak_exit(rt, a, out):
            rt.submit(soak_exit_kernel, inputs=[a], outputs=[out])

        self.exit_prog = soak_exit
        self.stuck_prog = None
        self.native = None  # (tr_sleep_fill, tr_copy), built at first use
        self.wd = Watchdog(self.fatal)

    # -- bookkeeping --
    def lose(self, kind, detail):
        self.lost.append((kind, detail))
        if sum(1 for k, _ in self.lost if k == kind) <= 5:  # the first few of each kind in full
            print(f"soak: LOST [{kind}] {detail}", file=sys.stderr, flush=True)

    def summary(self):
        return f"soak: {self.runs} runs, {self.faults} faults injected, {len(self.lost)} lost"

    def fatal(self, label):
        self.lose("hang", f"{label}: not interruptible; soak stopped")
        self.report()
        print(self.summary(), flush=True)

    def shape(self):
        return (2 * self.rng.randint(1, 8), self.rng.choice([16, 32, 48, 64, 128]))

    def arrays(self, spec, shape, shared=False):
        mk = (lambda: shared_array(shape, np.float32)) if shared else (lambda: np.zeros(shape, np.float32))
        ins, outs = [], []
        for _ in range(spec.n_in):
            a = mk()
            a[...] = self.np_rng.uniform(-1, 1, shape).astype(np.float32)
            ins.append(a)
        for _ in range(spec.n_out):
            o = mk()
            o[...] = -7.0  # sentinel
            outs.append(o)
        return ins, outs

    @staticmethod
    def compare(name, got, want, tainted=()):
        for j, (g, w) in enumerate(zip(got, want)):
            g = np.asarray(g)
            if j in tainted:
                if not (g == -7.0).all():
                    raise Lost(f"{name}: output {j} is downstream of the failed task but was written")
            elif not np.allclose(g, w, rtol=1e-4, atol=1e-5):
                bad = np.argwhere(~np.isclose(g, w, rtol=1e-4, atol=1e-5))
                at = tuple(int(i) for i in bad[0])
                raise Lost(f"{name}: output {j} differs from numpy at {len(bad)} places, first {at}: {g[at]} != {w[at]}")

    # -- L2 --
    def l2_executor(self):
        """A resident ChipWorker (recreated every ~20 uses) or None for taskring.run."""
        if self.rng.random() < 0.3:
            return None
        if self.chip is None or self.chip_uses > self.rng.randint(10, 30):
            if self.chip is not None:
                self.chip.close()
            self.chip = ChipWorker(arena_cache_slots=self.rng.randint(1, 4), prewarm=self.rng.random() < 0.5)
            self.chip_uses = 0
        self.chip_uses += 1
        return self.chip

    def l2_run(self, ex, prog, args, cfg):
        return taskring.run(prog, *args, config=cfg) if ex is None else ex.run(prog, *args, config=cfg)

    def l2_random(self):
        spec = self.rng.choice(self.specs)
        shape = self.shape()
        ins, outs = self.arrays(spec, shape)
        want, _ = oracle(spec, ins, outs)
        cfg = fitting_config(self.rng, spec, shape)
        rep = self.l2_run(self.l2_executor(), self.progs[spec.name], ins + outs, cfg)
        self.compare(spec.name, outs, want)
        bad = check_sizing(rep.ring_sizing, cfg)
        if bad:
            raise Lost(f"{spec.name}: report sizing {bad}")

    def l2_tight(self):
        spec = self.rng.choice(self.specs)
        shape = self.shape()
        ins, outs = self.arrays(spec, shape)
        want, _ = oracle(spec, ins, outs)
        cfg = tight_config(self.rng, spec, shape)
        ex = self.l2_executor()
        # Follow the failures' `needed` sizes until the program fits: a failure that says
        # it needs no more than what is configured is inconsistent.
        for attempt in range(10):
            t0 = time.monotonic()
            try:
                self.l2_run(ex, self.progs[spec.name], ins + outs, cfg)
                break
            except RuntimeFailure as e:
                if e.code not in CAPACITY:
                    raise Lost(f"{spec.name} under tight rings {cfg}: {e}")
                if time.monotonic() - t0 > 5:
                    raise Lost(f"{spec.name}: capacity failure took {time.monotonic() - t0:.1f} s")
                self.notes[f"tight rings: {e.name}"] += 1
                field = {1: "ring_task_window", 2: "ring_heap", 3: "ring_task_window", 4: "ring_dep_pool"}[e.code]
                values = list(getattr(cfg, field))
                if e.ring is None:
                    self.notes[f"tight rings: {e.name} without a ring"] += 1
                    return
                if values[e.ring] != "auto" and e.configured != values[e.ring]:
                    raise Lost(f"{spec.name}: {e.name} on ring {e.ring} says configured {e.configured}, but {field}[{e.ring}] is {values[e.ring]}: {e}")
                if e.needed is None:
                    # Only a lower bound was seen: the hint says to raise the entry and
                    # that "auto" learns its size in one dispatch. Follow it.
                    lead = f"runtime_env {field}[{e.ring}] > {e.configured}; "
                    if not e.hint.startswith(lead) or '"auto"' not in e.hint:
                        self.lose("hint", f"{spec.name}: {e.name} on ring {e.ring} without a needed size, hint {e.hint!r}")
                    if values[e.ring] == "auto":
                        raise Lost(f"{spec.name}: {e.name} on ring {e.ring} whose {field} is already auto: {e}")
                    self.notes["tight rings: followed the hint to auto"] += 1
                    values[e.ring] = "auto"
                elif e.needed <= values[e.ring]:
                    # The hint names what is already configured: it cannot be followed.
                    self.lose("hint", f"{spec.name}: {e.name} on ring {e.ring} with {field}[{e.ring}] = {values[e.ring]} says needed {e.needed}: {e}")
                    values[e.ring] *= 2
                else:
                    values[e.ring] = e.needed if field == "ring_dep_pool" else pow2_at_least(e.needed)
                cfg = dataclasses.replace(cfg, **{field: values})
                for o in outs:
                    o[...] = -7.0
        else:
            self.notes["tight rings: still failing after 10 raises"] += 1
            return
        self.notes["tight rings: fitted" if not attempt else "tight rings: fitted after raising to the needed sizes"] += 1
        self.raises[attempt] += 1
        self.compare(spec.name + f" under tight rings {cfg}", outs, want)

    def l2_auto(self):
        """"auto" under changing needs on one resident chip: two programs of one name
        with fixed needs (once each learned, neither fails), and a third whose need
        jumps with the data (a failure is followed by a dispatch that runs)."""
        if getattr(self, "auto_chip", None) is None or self.auto_uses > 40:
            if getattr(self, "auto_chip", None) is not None:
                self.auto_chip.close()
            self.auto_chip = ChipWorker(prewarm=False)
            self.auto_uses = 0
            self.auto_progs = [make_chain([n]) for n in (3, 300)]
            self.auto_learned = set()
            self.jump_cell = [4]
            self.jumper = make_chain(self.jump_cell)
            self.jump_failed = False
        self.auto_uses += 1
        w = self.auto_chip
        auto = RunConfig(ring_task_window="auto", ring_heap="auto", ring_dep_pool="auto")
        a = self.np_rng.uniform(-1, 1, (16,)).astype(np.float32)
        zero = np.zeros_like(a)
        out = np.full_like(a, -7.0)
        if self.rng.random() < 0.5:
            i = self.rng.randrange(2)
            try:
                w.run(self.auto_progs[i], a, zero, out, config=auto)
            except RuntimeFailure as e:
                raise Lost(f"auto: soak_chain #{i} of one name failed after {'learning' if i in self.auto_learned else 'its first dispatch'}: {e}")
            self.auto_learned.add(i)
            self.compare("auto: soak_chain of one name", [out], [a])
            return
        if self.rng.random() < 0.3:
            self.jump_cell[0] = self.rng.choice([2, 8, 60, 400, 1500])
        try:
            w.run(self.jumper, a, zero, out, config=auto)
        except RuntimeFailure as e:
            if e.code not in CAPACITY and e.code != 202:
                raise Lost(f"auto: a jump to {self.jump_cell[0]} live tasks failed with {e}")
            if self.jump_failed:
                self.lose("auto-jump", f"auto: two failed dispatches in a row at {self.jump_cell[0]} live tasks: {e}")
            if "learns its need again" not in str(e):
                self.lose("auto-jump", f"auto: a failure that does not say the next dispatch learns again: {e}")
            self.jump_failed = True
            self.notes["auto: a jump in need failed once"] += 1
            return
        self.jump_failed = False
        self.compare(f"auto: soak_chain at {self.jump_cell[0]} live tasks", [out], [a])

    def l2_kernel_fault(self):
        spec = self.rng.choice(self.fail_specs)
        shape = self.shape()
        ins, outs = self.arrays(spec, shape)
        _, tainted = oracle(spec, ins, outs)
        ex = self.l2_executor()
        try:
            self.l2_run(ex, self.progs[spec.name], ins + outs, fitting_config(self.rng, spec, shape))
        except RuntimeFailure as e:
            if FAULT_MSG not in str(e) or "soak_fail_kernel" not in str(e):
                raise Lost(f"{spec.name}: kernel fault reported as {e!r}")
        else:
            raise Lost(f"{spec.name}: a raising kernel did not fail the run")
        # Outputs downstream of the failed kernel are untouched (the others may or may not
        # have been written before the run stopped).
        for j in tainted:
            if not (outs[j] == -7.0).all():
                raise Lost(f"{spec.name}: output {j} is downstream of the failed kernel but was written")
        self.after_fault_l2(ex)

    def l2_undersized(self):
        for _ in range(20):
            spec = self.rng.choice(self.specs)
            shape = self.shape()
            u = undersized_config(self.rng, spec, shape)
            if u:
                break
        else:
            return self.l2_random()
        cfg, code, ring = u
        ins, outs = self.arrays(spec, shape)
        ex = self.l2_executor()
        t0 = time.monotonic()
        try:
            self.l2_run(ex, self.progs[spec.name], ins + outs, cfg)
        except RuntimeFailure as e:
            if e.code not in CAPACITY or e.ring != ring:
                raise Lost(f"{spec.name}: undersized ring {ring} (expected {CAPACITY[code]}) reported as {e} (code {e.code}, ring {e.ring})")
            if e.code != code:
                self.notes[f"L2: an undersized ring for {CAPACITY[code]} reported as {e.name}"] += 1
            if e.code == code and e.configured != (4 if code == 1 else 1024):
                raise Lost(f"{spec.name}: {e.name} says configured {e.configured}")
        else:
            raise Lost(f"{spec.name}: ring {ring} undersized for {CAPACITY[code]} but the run succeeded")
        if time.monotonic() - t0 > 5:
            raise Lost(f"{spec.name}: capacity failure took {time.monotonic() - t0:.1f} s")
        self.after_fault_l2(ex)

    def l2_threads(self):
        """2-3 threads share one resident ChipWorker (calls are serialised): every result
        is right."""
        if self.chip is None:
            self.l2_executor()
        ex = self.chip or ChipWorker()
        jobs, errors = [], []
        for _ in range(self.rng.randint(2, 3)):
            job = []
            for _ in range(self.rng.randint(1, 3)):
                spec = self.rng.choice(self.specs)
                shape = self.shape()
                ins, outs = self.arrays(spec, shape)
                job.append((spec, ins, outs, oracle(spec, ins, outs)[0], fitting_config(self.rng, spec, shape)))
            jobs.append(job)

        def work(job):
            try:
                for spec, ins, outs, _, cfg in job:
                    ex.run(self.progs[spec.name], *ins, *outs, config=cfg)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(j,)) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.args.run_timeout)
            if t.is_alive():
                raise Lost("a thread sharing a ChipWorker did not finish")
        if ex is not self.chip:
            ex.close()
        if errors:
            raise Lost(f"a thread sharing a ChipWorker failed: {errors[0]!r}")
        for job in jobs:
            for spec, _, outs, want, _ in job:
                self.compare(spec.name + " (threads)", outs, want)

    def l2_env(self):
        """PTO2_RING_* in the process environment (read at every dispatch): a fitting
        value is used where the config leaves a ring at 0; garbage is ignored with a
        warning and the run still works."""
        spec = self.rng.choice(self.specs)
        shape = self.shape()
        ins, outs = self.arrays(spec, shape)
        want, _ = oracle(spec, ins, outs)
        tasks, heap, _, _ = needs(spec, shape)
        fitting = {
            "PTO2_RING_TASK_WINDOW": ("ring_task_window", pow2_at_least(max(4, max(tasks) + 2))),
            "PTO2_RING_HEAP": ("ring_heap", pow2_at_least(max(1024, 2 * max(heap) + 8192))),
            "PTO2_RING_DEP_POOL": ("ring_dep_pool", 4 * max(tasks) + 16),
        }
        var = self.rng.choice(sorted(fitting))
        field, value = fitting[var]
        garbage = self.rng.random() < 0.3
        text = self.rng.choice(["-1", "abc", "3", "1,2", "", "0x10", "99999999999999999999999"]) if garbage else str(value)
        old = os.environ.get(var)
        os.environ[var] = text
        try:
            rep = self.l2_run(self.l2_executor(), self.progs[spec.name], ins + outs, None)
        finally:
            if old is None:
                del os.environ[var]
            else:
                os.environ[var] = old
        self.compare(spec.name + f" ({var}={text!r})", outs, want)
        rs = rep.ring_sizing
        for r in range(4):
            got, src = getattr(rs, field.replace("ring_", ""))[r], rs.source(field, r)
            if (garbage and src != "default") or (not garbage and (src != "env" or got != value)):
                raise Lost(f"{var}={text!r}: {field}[{r}] = {got} from {src}")

    def after_fault_l2(self, ex):
        """The worker that saw a fault runs the next program correctly."""
        spec = self.rng.choice(self.specs)
        shape = self.shape()
        ins, outs = self.arrays(spec, shape)
        want, _ = oracle(spec, ins, outs)
        self.l2_run(ex, self.progs[spec.name], ins + outs, fitting_config(self.rng, spec, shape))
        self.compare(spec.name + " (after a fault)", outs, want)

    def native_kernels(self):
        """`tr_sleep_fill` and `tr_copy` of the native examples' library (built once)."""
        if self.native is None:
            import importlib.util
            import tempfile

            here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "native", "paged_decode.py")
            spec_ = importlib.util.spec_from_file_location("soak_native", here)
            mod = importlib.util.module_from_spec(spec_)
            spec_.loader.exec_module(mod)
            lib = mod.build(os.path.join(tempfile.mkdtemp(prefix="soak-native-"), "libtrkernels.so"))
            self.native = (taskring.load_kernel(lib, "tr_sleep_fill"), taskring.load_kernel(lib, "tr_copy"))
        return self.native

    def l2_interrupt(self):
        """Ctrl-C (SIGINT to the main thread) while a ChipWorker run waits for a native
        kernel that sleeps 1.5 s, then writes its output: KeyboardInterrupt before the
        kernel returns (the output untouched), the worker's next run right, a run over
        the kernel's array refused until it returns, and right after."""
        sleep_fill, _ = self.native_kernels()

        @taskring.program(signature=[OUT])
        def soak_sleep_fill(rt, out):
            rt.submit(sleep_fill, outputs=[out], scalars=[1500.0, 42.0])

        w = ChipWorker(cores=2)
        try:
            out = np.full(self.shape(), -7.0, np.float32)
            main = threading.main_thread().ident
            timer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
            timer.start()
            try:
                w.run(soak_sleep_fill, out)
            except KeyboardInterrupt:
                pass
            else:
                raise Lost("L2 Ctrl-C: the run of a 1.5 s native kernel was not interrupted")
            finally:
                timer.join()
            if not (out == -7.0).all():
                raise Lost("L2 Ctrl-C: KeyboardInterrupt came only after the native kernel returned")
            # A program of one output, run over the kernel's array.
            spec = next((x for x in self.specs if x.n_out == 1), None)
            if spec is None:
                self.after_fault_l2(w)
                return

            def over_out():
                ins = self.arrays(spec, out.shape)[0]
                want, _ = oracle(spec, ins, [out.copy()])
                w.run(self.progs[spec.name], *ins, out)
                return want

            # The kernel sleeps on (1.5 s): a run over its array is refused.
            returned = False
            try:
                over_out()
                returned = True  # a machine so slow that the kernel had returned already
                self.notes["l2_interrupt: the kernel returned before the run over its array"] += 1
            except RuntimeFailure as e:
                if "when an earlier run was interrupted" not in str(e):
                    raise Lost(f"L2 Ctrl-C: a run over the kernel's array failed with {e!r}")
            self.after_fault_l2(w)
            deadline = time.monotonic() + 10
            while not returned and not (out == 42.0).all():  # the kernel returns and writes
                if time.monotonic() > deadline:
                    raise Lost("L2 Ctrl-C: the interrupted native kernel never wrote its output")
                time.sleep(0.02)
            # It returned: its array runs again.
            want = over_out()
            self.compare(spec.name + " (over the returned kernel's array)", [out], want)
        finally:
            close_with_timeout(w)

    def reentry(self):
        """close() or run() on a worker from inside its own orchestration (an L2
        ChipWorker, or the L3 worker with chips as processes or threads): RuntimeError
        at once, the worker left open: its next run is right."""
        call = self.rng.choice(["close", "run"])
        text = f"{call}() was called from inside this worker's own orchestration"
        if self.rng.random() < 0.5:
            w = self.chip or ChipWorker(cores=2)
            inner = self.progs[self.specs[0].name]

            @taskring.program(signature=[OUT])
            def soak_reenter(rt, out):
                rt.submit(K.copy, inputs=[out], outputs=[rt.spec(out.shape, "float32")])
                if call == "close":
                    w.close()
                else:
                    w.run(inner, *self.arrays(self.specs[0], self.shape())[0], *self.arrays(self.specs[0], self.shape())[1])

            try:
                try:
                    w.run(soak_reenter, np.zeros(8, np.float32))
                except RuntimeError as e:
                    if text not in str(e):
                        raise Lost(f"L2 {call}() from its own orchestration raised {e!r}")
                else:
                    raise Lost(f"L2 {call}() from its own orchestration did not raise")
                self.after_fault_l2(w)
            finally:
                if w is not self.chip:
                    close_with_timeout(w)
            return
        w = self.l3_worker()
        tasks = self.l3_plan(w, 1)

        def orch(o, args, cfg):
            t = tasks[0]
            o.submit_next_level(self.handles[t["spec"].name], t["ins"] + t["outs"], t["cfg"], worker=t["worker"])
            if call == "close":
                w.close()
            else:
                w.run(lambda o2, a2, c2: None)

        err, _ = self.l3_error_of_orch(w, orch)
        if err is None or text not in err:
            raise Lost(f"L3 {call}() from its own orchestration: {err!r}")
        self.l3_after_fault(w)

    def l2_stuck_native(self):
        """A native kernel outlives its SCHEDULER_TIMEOUT (300 ms) and writes 42 into its
        runtime output 0.6 s in; the worker's next runs, with the same sizing and with the
        failed run's own output array, must be right or refused, never see the 42."""
        if self.stuck_prog is None:
            sleep_fill, copy = self.native_kernels()

            @taskring.program(signature=[OUT])
            def soak_stuck(rt, out):
                tmp = rt.submit(sleep_fill, outputs=[rt.spec(out.shape, "float32")], scalars=[600.0, 42.0]).outputs[0]
                rt.submit(copy, inputs=[tmp], outputs=[out])

            self.stuck_prog = soak_stuck
        before = os.environ.get("PTO2_SCHEDULER_TIMEOUT_MS")
        os.environ["PTO2_SCHEDULER_TIMEOUT_MS"] = "300"
        try:
            w = ChipWorker(cores=2)
        finally:
            if before is None:
                del os.environ["PTO2_SCHEDULER_TIMEOUT_MS"]
            else:
                os.environ["PTO2_SCHEDULER_TIMEOUT_MS"] = before
        try:
            shape = self.shape()
            out = np.full(shape, -7.0, np.float32)
            t0 = time.monotonic()
            try:
                w.run(self.stuck_prog, out)
            except RuntimeFailure as e:
                if e.name != "SCHEDULER_TIMEOUT" or "tr_sleep_fill" not in str(e):
                    raise Lost(f"stuck native kernel reported as {e!r}")
            else:
                raise Lost("a native kernel past its timeout did not fail the run")
            while time.monotonic() - t0 < 0.9:  # runs while the stale kernel wakes and writes
                spec = self.rng.choice(self.specs)
                ins, outs = self.arrays(spec, shape)
                want, _ = oracle(spec, ins, outs)
                w.run(self.progs[spec.name], *(ins + outs))
                self.compare(spec.name + " (beside a stuck kernel)", outs, want)
            try:
                w.run(self.progs[self.specs[0].name], *self.arrays(self.specs[0], shape)[0], *([out] * self.specs[0].n_out))
            except RuntimeFailure as e:
                if "can still write" not in str(e):
                    raise Lost(f"a run over a stuck kernel's array failed with {e!r}")
            if (out == 42.0).any():
                raise Lost("the stuck kernel wrote into the failed run's output array")
        finally:
            close_with_timeout(w)

    def l2_aliased_replay(self):
        """Replaying a capture with two of its distinct arrays passed as one is refused;
        a replay with the capture's aliasing equals numpy."""
        specs = [s for s in self.specs if s.n_in >= 2]
        if not specs:
            return
        spec = self.rng.choice(specs)
        shape = self.shape()
        if self.chip is None:
            self.l2_executor()
        w = self.chip or ChipWorker()
        ins, outs = self.arrays(spec, shape)
        g = w.capture(self.progs[spec.name], *(ins + outs))
        ins2, outs2 = self.arrays(spec, shape)
        aliased = [ins2[0], ins2[0]] + ins2[2:]
        try:
            g.replay(*(aliased + outs2))
        except ValueError as e:
            if "the same buffer but were distinct buffers at capture" not in str(e):
                raise Lost(f"{spec.name}: aliased replay refused with {e!r}")
        else:
            raise Lost(f"{spec.name}: a replay with aliased arguments ran")
        if not all((o == -7.0).all() for o in outs2):
            raise Lost(f"{spec.name}: a refused replay wrote an output")
        want, _ = oracle(spec, ins2, outs2)
        g.replay(*(ins2 + outs2))
        self.compare(spec.name + " (replay)", outs2, want)

    # -- L3 --
    def l3_worker(self, fresh=False, processes=False):
        """The resident L3 worker (recreated every 15-40 uses); a quarter of them run their
        chips as threads (same protocol) unless `processes` is asked for."""
        if fresh or self.l3 is None or self.l3_uses > self.rng.randint(15, 40) or (processes and not self.l3.chip_processes):
            self.drop_l3()
            procs = processes or self.rng.random() < 0.75
            w = Worker(level=3, device_ids=list(range(self.rng.randint(2, 3))), chip_processes=procs, arena_cache_slots=self.rng.randint(1, 4))
            self.handles = {name: w.register(p) for name, p in self.progs.items()}
            self.handles["long"] = w.register(self.long_prog)
            self.handles["exit"] = w.register(self.exit_prog)
            w.init(prewarm_config=None if self.rng.random() < 0.5 else RunConfig(ring_task_window=1024, ring_heap=1 << 20, ring_dep_pool=4096))
            self.l3, self.l3_uses = w, 0
        self.l3_uses += 1
        return self.l3

    def drop_l3(self):
        if self.l3 is not None:
            w, self.l3 = self.l3, None
            took = close_with_timeout(w)
            if took is None:
                self.lose("hang", "L3 close() did not return within 5 s")
            elif took > 2.5:
                self.lose("slow-close", f"L3 close() took {took:.2f} s")

    def l3_plan(self, w, n_tasks, fault=None, tight=False):
        """Tasks (spec, worker, ins, outs, cfg) chained through shared arrays; `fault` =
        ("kernel" | "undersized", task index) puts a failing task at that index."""
        n_chips = len(w.pids)
        shape = self.shape()
        pool = []  # shared arrays holding final values so far (inputs and earlier outputs)
        tasks = []
        for t in range(n_tasks):
            if fault and fault[1] == t and fault[0] == "kernel":
                spec = self.rng.choice(self.fail_specs)
            else:
                spec = self.rng.choice(self.specs)
            ins = []
            for _ in range(spec.n_in):
                if pool and self.rng.random() < 0.6:
                    ins.append(self.rng.choice(pool))
                else:
                    a = shared_array(shape, np.float32)
                    a[...] = self.np_rng.uniform(-1, 1, shape).astype(np.float32)
                    ins.append(a)
            outs = []
            for _ in range(spec.n_out):
                o = shared_array(shape, np.float32)
                o[...] = -7.0
                outs.append(o)
            pool.extend(outs)
            cfg, expect = fitting_config(self.rng, spec, shape), None
            if tight and self.rng.random() < 0.5:
                cfg = tight_config(self.rng, spec, shape)
            if fault and fault[1] == t and fault[0] == "undersized":
                u = undersized_config(self.rng, spec, shape)
                if u is None:
                    return None
                cfg, code, _ = u
                expect = CAPACITY[code]
            if isinstance(cfg, RunConfig) and self.rng.random() < 0.5:
                cfg = cfg.to_call_config()
            tasks.append({"spec": spec, "worker": self.rng.randrange(n_chips), "ins": ins, "outs": outs, "cfg": cfg, "expect": expect})
        return tasks

    def l3_oracle(self, tasks):
        """Sequential results of every task's outputs (by array identity) and the outputs
        downstream of a failing task."""
        vals, poisoned, untouched = {}, set(), set()
        for t in tasks:
            ins = [vals.get(id(a), np.asarray(a).copy()) for a in t["ins"]]
            downstream = any(id(a) in poisoned for a in t["ins"])  # never runs
            outs, tout = oracle(t["spec"], ins, [np.asarray(o).copy() for o in t["outs"]])
            failing = t["spec"].fail or t["expect"]
            for j, o in enumerate(t["outs"]):
                vals[id(o)] = outs[j]
                if downstream or failing:
                    poisoned.add(id(o))
                if downstream or (t["spec"].fail and j in tout):
                    untouched.add(id(o))
        return vals, untouched

    def l3_submit(self, w, tasks, timeout):
        def orch(o, args, cfg):
            for t in tasks:
                o.submit_next_level(self.handles[t["spec"].name], t["ins"] + t["outs"], t["cfg"], worker=t["worker"])

        h = w.submit(orch)
        if not h.wait(timeout):
            raise Lost(f"L3 run of {len(tasks)} tasks did not finish within {timeout} s")
        return h

    def l3_error_of(self, w, tasks):
        """(error text or None, seconds) of running `tasks` (a hang is an error text too)."""
        t0 = time.monotonic()
        try:
            self.l3_submit(w, tasks, self.args.run_timeout).result()
            err = None
        except (RuntimeError, Lost) as e:
            err = str(e)
        return err, time.monotonic() - t0

    def l3_error_of_orch(self, w, orch):
        """(error text or None, seconds) of running `orch` on `w`."""
        t0 = time.monotonic()
        h = w.submit(orch)
        if not h.wait(self.args.run_timeout):
            return f"the run did not finish within {self.args.run_timeout} s", time.monotonic() - t0
        try:
            h.result()
            return None, time.monotonic() - t0
        except RuntimeError as e:
            return str(e), time.monotonic() - t0

    def l3_random(self, tight=False):
        w = self.l3_worker()
        tasks = self.l3_plan(w, self.rng.randint(1, 6), tight=tight)
        vals, _ = self.l3_oracle(tasks)
        try:
            rep = self.l3_submit(w, tasks, self.args.run_timeout).result()
        except RuntimeError as e:
            # Under tight rings a chip task may fail with a capacity error (only that).
            m = re.match(r"^chip (\d+) \(pid (\d+)\): (\w+) \(code (\d+)\) on ring ", str(e))
            if not (tight and m and int(m.group(4)) in CAPACITY and int(m.group(2)) == w.pids[int(m.group(1))]):
                raise
            self.notes[f"tight rings (L3): {m.group(3)}"] += 1
            return
        if tight:
            self.notes["tight rings (L3): fitted"] += 1
        for t in tasks:
            self.compare(t["spec"].name + f" on chip {t['worker']}", t["outs"], [vals[id(o)] for o in t["outs"]])
        if len(rep.tasks) != len(tasks):
            raise Lost(f"L3 report has {len(rep.tasks)} tasks for {len(tasks)}")
        for t, r in zip(tasks, rep.tasks):
            if r.error is not None or r.worker != t["worker"]:
                raise Lost(f"L3 report task {r.worker}/{r.callable}: error {r.error!r}, expected worker {t['worker']}")
            bad = check_sizing(r.ring_sizing, t["cfg"])
            if bad:
                raise Lost(f"L3 chip {r.worker} {t['spec'].name}: report sizing {bad}")

    def l3_task_fault(self, kind):
        w = self.l3_worker()
        n = self.rng.randint(1, 5)
        tasks = None
        for _ in range(10):
            tasks = self.l3_plan(w, n, (kind, self.rng.randrange(n)))
            if tasks:
                break
        if not tasks:
            return self.l3_random()
        bad = next(t for t in tasks if t["spec"].fail or t["expect"])
        pid = w.pids[bad["worker"]]
        vals, tainted = self.l3_oracle(tasks)
        try:
            self.l3_submit(w, tasks, self.args.run_timeout).result()
        except RuntimeError as e:
            text = str(e)
            # The first error wins: another failing task cannot exist here, so it is ours.
            ok = text.startswith(f"chip {bad['worker']} (pid {pid}): ")
            if kind == "kernel":
                ok = ok and FAULT_MSG in text and "soak_fail_kernel" in text
            else:  # any capacity failure of that chip's task (which one depends on the graph)
                ok = ok and any(f"{n} (code {c}) on ring " in text for c, n in CAPACITY.items())
                if ok and bad["expect"] not in text:
                    self.notes[f"L3: an undersized ring for {bad['expect']} reported as {text.split(': ')[1].split(' on ring')[0]}"] += 1
            if not ok:
                raise Lost(f"L3 {kind} fault on chip {bad['worker']} (pid {pid}) reported as {text!r}")
        else:
            raise Lost(f"L3 {kind} fault on chip {bad['worker']}: the run succeeded")
        for t in tasks:
            for o in t["outs"]:
                if id(o) in tainted and not (np.asarray(o) == -7.0).all():
                    raise Lost(f"L3 {kind} fault: an output downstream of the failed task was written")
        self.l3_after_fault(w)

    def l3_after_fault(self, w, avoid=None):
        """The worker runs a fresh random plan correctly (on chips other than `avoid`)."""
        tasks = self.l3_plan(w, self.rng.randint(1, 3))
        if avoid is not None:
            alive = [i for i in range(len(w.pids)) if i != avoid]
            for t in tasks:
                t["worker"] = self.rng.choice(alive)
        vals, _ = self.l3_oracle(tasks)
        self.l3_submit(w, tasks, self.args.run_timeout).result()
        for t in tasks:
            self.compare(t["spec"].name + " (after a fault)", t["outs"], [vals[id(o)] for o in t["outs"]])

    def l3_interrupt(self):
        """Ctrl-C (SIGINT to the main thread) while `run` waits for a long kernel on a
        chip: KeyboardInterrupt within 1 s, and the worker keeps working."""
        w = self.l3_worker(processes=True)
        victim = self.rng.randrange(len(w.pids))
        a, flag = shared_array(16, np.float32), shared_array(16, np.float32)
        main = threading.main_thread().ident

        def poke():
            deadline = time.monotonic() + 10
            while flag[0] != 1.0 and time.monotonic() < deadline:
                time.sleep(0.005)
            state["sent"] = time.monotonic()
            signal.pthread_kill(main, signal.SIGINT)

        state = {}
        timer = threading.Thread(target=poke, daemon=True)
        timer.start()
        try:
            w.run(lambda o, args, cfg: o.submit_next_level(self.handles["long"], [a, flag], worker=victim))
        except KeyboardInterrupt:
            took = time.monotonic() - state.get("sent", 0)
        else:
            timer.join()
            raise Lost(f"L3 Ctrl-C: the run on chip {victim} was not interrupted")
        timer.join()
        if took > 1.0:
            self.lose("slow-interrupt", f"L3 Ctrl-C: run interrupted {took:.2f} s after SIGINT (contract: within 1 s)")
        self.l3_after_fault(w)

    def l3_exit(self):
        """A kernel ends its chip process (os._exit(3)): `chip N (pid P): the chip
        process exited with status 3`, the other chips keep working, then a fresh worker."""
        w = self.l3_worker(processes=True)
        victim = self.rng.randrange(len(w.pids))
        pid = w.pids[victim]
        a, out = shared_array(16, np.float32), shared_array(16, np.float32)
        err, _ = self.l3_error_of_orch(w, lambda o, args, cfg: o.submit_next_level(self.handles["exit"], [a, out], worker=victim))
        want = f"chip {victim} (pid {pid}): the chip process exited with status 3"
        if err != want:
            raise Lost(f"L3 chip exit reported as {err!r}, expected {want!r}")
        if len(w.pids) > 1:
            self.l3_after_fault(w, avoid=victim)
        self.drop_l3()
        if not wait_reaped(pid):
            raise Lost(f"L3 chip exit: pid {pid} not reaped after close()")
        self.l3_worker(fresh=True)

    def l3_kill(self, mid_task):
        w = self.l3_worker(processes=True)
        victim = self.rng.randrange(len(w.pids))
        pid = w.pids[victim]
        if mid_task:
            a, flag = shared_array(16, np.float32), shared_array(16, np.float32)

            def orch(o, args, cfg):
                o.submit_next_level(self.handles["long"], [a, flag], worker=victim)

            h = w.submit(orch)
            deadline = time.monotonic() + 10
            while flag[0] != 1.0 and time.monotonic() < deadline and not h.done:
                time.sleep(0.005)
            if flag[0] != 1.0:
                raise Lost(f"L3 kill: the long task did not start on chip {victim}")
            os.kill(pid, signal.SIGKILL)
            t0 = time.monotonic()
            if not h.wait(self.args.run_timeout):
                raise Lost(f"L3 kill: death of chip {victim} mid-task not reported within {self.args.run_timeout} s")
            took = time.monotonic() - t0
            err = None
            try:
                h.result()
            except RuntimeError as e:
                err = str(e)
        else:
            os.kill(pid, signal.SIGKILL)
            time.sleep(self.rng.uniform(0, 0.1))
            tasks = self.l3_plan(w, 1)
            tasks[0]["worker"] = victim
            err, took = self.l3_error_of(w, tasks)
        if err is None:
            raise Lost(f"L3 kill: run on killed chip {victim} succeeded")
        if not re.match(rf"^chip {victim} \(pid {pid}\): .*(signal 9\b|SIGKILL)", err):
            raise Lost(f"L3 kill: chip {victim} (pid {pid}) death reported as {err!r}")
        if took > 1.5:
            self.lose("slow-report", f"L3 kill ({'mid-task' if mid_task else 'idle'}): reported after {took:.2f} s (contract: within 1 s)")
        if len(w.pids) > 1:
            self.l3_after_fault(w, avoid=victim)
        self.drop_l3()
        if not wait_reaped(pid):
            raise Lost(f"L3 kill: killed chip pid {pid} not reaped after close()")
        self.l3_worker(fresh=True)

    def l3_sigstop(self):
        w = self.l3_worker(processes=True)
        if len(w.pids) < 2:
            return self.l3_random()
        victim = self.rng.randrange(len(w.pids))
        other = (victim + 1) % len(w.pids)
        pid = w.pids[victim]
        tasks = self.l3_plan(w, 2)
        tasks[0]["worker"], tasks[1]["worker"] = other, victim
        # The two tasks must be independent (the other chip's result is checked).
        spec1 = tasks[1]["spec"]
        tasks[1]["ins"] = [shared_array(tasks[1]["outs"][0].shape, np.float32) for _ in range(spec1.n_in)]
        for a in tasks[1]["ins"]:
            a[...] = self.np_rng.uniform(-1, 1, a.shape).astype(np.float32)
        vals, _ = self.l3_oracle(tasks)
        os.kill(pid, signal.SIGSTOP)
        err, took = self.l3_error_of(w, tasks)
        ok = err is not None and err.startswith(f"chip {victim} (pid {pid}): not responding")
        self.sigstop_results.append((ok, took, err))
        if not ok:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            raise Lost(f"L3 SIGSTOP of chip {victim} (pid {pid}): {'the run succeeded' if err is None else 'reported as ' + repr(err)} after {took:.2f} s")
        self.compare(f"{tasks[0]['spec'].name} on chip {other} next to a stopped chip", tasks[0]["outs"], [vals[id(o)] for o in tasks[0]["outs"]])
        self.drop_l3()  # close() kills the stopped chip
        if not wait_reaped(pid):
            os.kill(pid, signal.SIGKILL)
            raise Lost(f"L3 SIGSTOP: stopped chip pid {pid} not reaped after close()")
        self.l3_worker(fresh=True)

    # -- driver --
    def scenarios(self):
        s = [
            (30, "l2_random", False, self.l2_random),
            (25, "l3_random", False, self.l3_random),
            (10, "l2_tight", False, self.l2_tight),
            (6, "l2_auto", False, self.l2_auto),
            (8, "l3_tight", False, lambda: self.l3_random(tight=True)),
            (6, "l2_kernel_fault", True, self.l2_kernel_fault),
            (6, "l2_undersized", True, self.l2_undersized),
            (5, "l3_kernel_fault", True, lambda: self.l3_task_fault("kernel")),
            (5, "l3_undersized", True, lambda: self.l3_task_fault("undersized")),
            (3, "l3_kill_idle", True, lambda: self.l3_kill(False)),
            (3, "l3_kill_mid_task", True, lambda: self.l3_kill(True)),
            (3, "l3_interrupt", True, self.l3_interrupt),
            (2, "l3_chip_exit", True, self.l3_exit),
            (4, "l2_threads", False, self.l2_threads),
            (4, "l2_env", True, self.l2_env),
            (2, "l2_stuck_native", True, self.l2_stuck_native),
            (3, "l2_aliased_replay", True, self.l2_aliased_replay),
            (2, "l2_interrupt", True, self.l2_interrupt),
            (3, "reentry", True, self.reentry),
        ]
        if self.args.sigstop:
            s.append((3, "l3_sigstop", True, self.l3_sigstop))
        if self.args.only:
            s = [x for x in s if x[1] in self.args.only.split(",")]
        return s

    def warm_up(self):
        """One of each kind of run (libraries, allocator arenas, thread pools settle),
        then everything closed: the resource baseline."""
        for name, fn in (("warm-up l2", self.l2_random), ("warm-up l3", self.l3_random)):
            try:
                with self.wd.guard(name, self.args.run_timeout + 15):
                    fn()
            except Exception as e:  # noqa: BLE001
                self.runs += 1
                self.lose(name, f"{type(e).__name__}: {e}")
        self.chip and self.chip.close()
        self.chip = None
        self.drop_l3()
        gc.collect()
        time.sleep(0.5)
        return resources()

    def settle(self):
        if self.chip is not None:
            self.chip.close()
            self.chip = None
        if getattr(self, "auto_chip", None) is not None:
            self.auto_chip.close()
            self.auto_chip = None
        self.drop_l3()
        self.handles = {}
        gc.collect()
        deadline = time.monotonic() + 3
        while children() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        gc.collect()
        return resources()

    def run(self):
        a = self.args
        print(f"soak: seed {a.seed}, {a.minutes} min, {len(self.specs)} random programs, sigstop {'on' if a.sigstop else 'off'}", flush=True)
        base = self.warm_up()
        print(f"soak: baseline {fmt_res(base)}", flush=True)
        scen = self.scenarios()
        weights = [w for w, *_ in scen]
        start = time.monotonic()
        end = start + a.minutes * 60
        next_progress = start + 30
        self.samples = [(0.0, resources())]
        while time.monotonic() < end:
            _, name, is_fault, fn = self.rng.choices(scen, weights)[0]
            self.runs += 1
            self.kinds[name] += 1
            if is_fault:
                self.faults += 1
            try:
                with self.wd.guard(name, a.run_timeout + 15):
                    fn()
            except Lost as e:
                self.lose(name, str(e))
                self.recover()
            except KeyboardInterrupt:
                if not self.wd.fired:
                    print("soak: interrupted", file=sys.stderr)
                    break
                self.lose("hang", f"{name}: overran {a.run_timeout + 15} s (interrupted)")
                self.recover()
            except Exception as e:  # noqa: BLE001 - every other error is unexpected
                self.lose(name, f"unexpected {type(e).__name__}: {e}\n{traceback.format_exc()}")
                self.recover()
            now = time.monotonic()
            if now >= next_progress:
                r = resources()
                self.samples.append((now - start, r))
                print(f"soak: {now - start:5.0f} s: {self.runs} runs, {self.faults} faults, {len(self.lost)} lost; {fmt_res(r)}", flush=True)
                next_progress = now + 30
        elapsed = time.monotonic() - start
        final = self.settle()
        print(f"soak: after {elapsed:.0f} s, everything closed: {fmt_res(final)}", flush=True)
        tol = {"rss": max(64 << 20, base["rss"] // 2), "fds": 4, "maps": 48, "threads": 2, "children": 0}
        for k, t in tol.items():
            if final[k] > base[k] + t:
                extra = f" {children()}" if k == "children" else ""
                self.lose("leak", f"{k}: {base[k]} at the start, {final[k]} at the end (tolerance +{t}){extra}")
        self.report()
        print(self.summary(), flush=True)
        return 1 if self.lost else 0

    def recover(self):
        """After a lost run: drop the workers (they may be in any state)."""
        if self.chip is not None:
            if close_with_timeout(self.chip) is None:
                self.lose("hang", "ChipWorker close() did not return within 5 s")
            self.chip = None
        self.drop_l3()

    def report(self):
        print("soak: runs by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items())), flush=True)
        if self.sigstop_results:
            ok = sum(1 for r in self.sigstop_results if r[0])
            times = [r[1] for r in self.sigstop_results if r[0]]
            print(f"soak: SIGSTOP detection: {ok}/{len(self.sigstop_results)} reported 'not responding'" + (f" after {min(times):.2f}..{max(times):.2f} s" if times else ""), flush=True)
        for n, c in sorted(self.notes.items()):
            print(f"soak: note: {n} ({c}x)", flush=True)
        if self.raises:
            print("soak: note: tight L2 runs that fitted, by raises needed: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.raises.items())), flush=True)
        if self.lost:
            print("soak: lost by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(k for k, _ in self.lost).items())), flush=True)
        shown = Counter()
        for kind, detail in self.lost:
            shown[kind] += 1
            if shown[kind] <= 3:
                print(f"soak: lost [{kind}] {detail.splitlines()[0][:400] if detail else ''}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5.0, help="how long to soak (default 5, at most 10)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    p.add_argument("--sigstop", action="store_true", help="also inject SIGSTOP of a chip (expects 'not responding')")
    p.add_argument("--run-timeout", type=float, default=30.0, help="seconds one run may take before it counts as a hang")
    p.add_argument("--only", default="", help="comma-separated scenario names to run (default: all)")
    p.add_argument("--programs", type=int, default=24, help="size of the random program pool")
    a = p.parse_args()
    if not 0 < a.minutes <= 10:
        p.error("--minutes must be in (0, 10]")
    if a.seed is None:
        a.seed = int(time.time() * 1000) % (1 << 31)
    sys.exit(Soak(a).run())


if __name__ == "__main__":
    main()
