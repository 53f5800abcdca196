#!/usr/bin/env python3
"""L4 soak of taskring (the L4 part of `make soak`; not part of `make test`).

For `--minutes` (default 1, at most 10) it starts `taskring launch` jobs one after the
other (2 or 3 hosts with 1 or 2 chips each, `--netns` as root, like the test suite),
each under a hard timeout. In each job rank 0:

- does random L4 runs: 1 to 2N+1 L4 tasks on random hosts, each a random "recipe" (a
  DistributedProgram whose host orchestration is an L3 dispatch of 1-3 small programs
  of builtin kernels — the random DAGs of `soak.py`, in nested scopes — on its chips,
  chained through the task's own arrays and intermediates that are `shared_array`s or
  node allocations `o.alloc`), with a random per-task `CallConfig` (per-ring sizes that
  fit, partly left to the defaults, or none) that the host forwards to chip 0 as is and
  to chip 1 with its ring heaps doubled; L4 tasks of one run read each other's outputs
  (dependencies rank 0 infers from the arrays), now and then through a host-resident
  tensor (`alloc_tensor`). Every output is checked against a numpy oracle and every chip
  task's reported sizing against what its config says;
- injects now and then a kernel that raises on a chip (the host's task fails naming
  the host, the chip and the error; the host keeps serving);
- then, in most jobs, injects one fault that takes a host out for the rest of the job:
  its orchestration raising `SystemExit` (`host H (rank R): SystemExit: 3; the host
  stopped serving`) or `KeyboardInterrupt`, by a request of scalars or with arrays;
  SIGINT to the idle host rank (`stopped serving (KeyboardInterrupt)`); SIGSTOP of the
  host rank while its task runs or while it is idle (`host H (rank R): not responding`
  within TASKRING_HOST_TIMEOUT_MS, 1000 ms here). The other hosts' tasks of that run are
  right (or, not yet dispatched, untouched), the lost host's later tasks fail at once
  with its error, the remaining hosts keep doing random runs, and close() is quick.

After each job the wrapper checks its exit status (0, or non-zero with `ending the job
with MPI_Abort` after a SIGSTOP), that no process of the job is left (`pgrep -f`) and no
file of it in /dev/shm (Open MPI's segments named with the job's id) nor its PMIx
directory (what is left is reported, then removed). The last line is `soak-l4: N runs, M faults injected, L lost` (lost = wrong
results, wrong or missing errors, hangs, bad exit statuses, leftovers); the exit status
is non-zero when L > 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.abspath(__file__)
SHM = "/dev/shm"
HOST_TIMEOUT_MS = 1000
# Faults that take a host out for the rest of the job (one per job, or none).
HOST_FAULTS = ("systemexit", "keyboardinterrupt", "sigint", "sigstop-busy", "sigstop-idle")
SENTINEL = -7.0


# ===== one job (every rank runs this under taskring launch) ===============================


def uses_python_kernel(spec):
    def walk(items):
        return any(walk(it[1]) if it[0] == "scope" else it[1] == "py_axpy" for it in items)

    return walk(spec.body)


class Recipe:
    """One DistributedProgram's host orchestration: `steps` of (spec, chip, input refs,
    output refs); a ref is ("x", i) the task's input i, ("y", k) its output k (written by
    one step, readable by later ones) or ("t", j) intermediate j (a shared array or a
    node allocation, `alloc`)."""

    def __init__(self, name, n_in, n_out, n_t, steps, alloc, fail=False):
        self.name, self.n_in, self.n_out, self.n_t, self.steps, self.alloc, self.fail = name, n_in, n_out, n_t, steps, alloc, fail


def gen_recipe(rng, name, specs, chips, fail_spec=None):
    n_in = rng.randint(1, 3)
    steps, produced = [], []
    n_t = n_y = 0
    n_steps = 1 if fail_spec else rng.randint(1, 3)
    for s in range(n_steps):
        spec = fail_spec or rng.choice(specs)
        ins = [rng.choice(produced) if produced and rng.random() < 0.6 else ("x", rng.randrange(n_in)) for _ in range(spec.n_in)]
        outs = []
        for _ in range(spec.n_out):
            if s == n_steps - 1 or rng.random() < 0.35:
                outs.append(("y", n_y))
                n_y += 1
            else:
                outs.append(("t", n_t))
                n_t += 1
        produced += outs
        steps.append((spec, rng.randrange(chips), ins, outs))
    return Recipe(name, n_in, n_y, n_t, steps, alloc=rng.random() < 0.5, fail=fail_spec is not None)


def chip_config(cfg, chip):
    """What a host forwards to `chip`: its task's cfg, for chips > 0 with every ring heap
    that is set doubled (a per-chip tweak)."""
    if cfg is None or chip == 0:
        return cfg
    c = cfg.copy()
    c.runtime_env.ring_heap = [2 * h if h else 0 for h in c.runtime_env.ring_heap]
    return c


def make_host_orch(recipe, taskring):
    def orch(o, chips, args, cfg):
        xs, ys = args[: recipe.n_in], args[recipe.n_in :]
        shape = xs[0].shape
        if recipe.alloc:
            ts = [o.alloc(shape, "float32") for _ in range(recipe.n_t)]
        else:
            ts = [taskring.shared_array(shape, np.float32) for _ in range(recipe.n_t)]

        def get(r):
            return xs[r[1]] if r[0] == "x" else (ys[r[1]] if r[0] == "y" else ts[r[1]])

        for spec, chip, ins, outs in recipe.steps:
            o.submit_next_level(getattr(chips, spec.name), [get(r) for r in ins] + [get(r) for r in outs], chip_config(cfg, chip), worker=chip)

    orch.__name__ = recipe.name
    return orch


def recipe_oracle(l23, recipe, xs):
    """The recipe's outputs for inputs `xs`, step by step in numpy."""
    vals = {("x", i): x for i, x in enumerate(xs)}
    for spec, _, ins, outs in recipe.steps:
        got, _ = l23.oracle(spec, [vals[r] for r in ins], [np.full(xs[0].shape, SENTINEL, np.float32) for _ in outs])
        for r, v in zip(outs, got):
            vals[r] = v
    return [vals[("y", k)] for k in range(recipe.n_out)]


def l4_config(rng, l23, recipe, shape, CallConfig):
    """A random CallConfig whose rings hold everything of every step (nothing reclaimed)
    and the host's own L3 run (its chip tasks and node allocations on ring 0), or None."""
    tasks, heap = [0] * 4, [0] * 4
    for spec, *_ in recipe.steps:
        t, h, _, _ = l23.needs(spec, shape)
        tasks = [max(a, b) for a, b in zip(tasks, t)]
        heap = [max(a, b) for a, b in zip(heap, h)]
    full = (shape[0] * shape[1] * 4 + 1023) // 1024 * 1024
    # A node allocation is a task of the host's ring 0 too (an output-only one).
    tasks[0] = max(tasks[0], len(recipe.steps) + (recipe.n_t if recipe.alloc else 0))
    if recipe.alloc:
        heap[0] = max(heap[0], recipe.n_t * full)
    win = [l23.pow2_at_least(max(4, t + 2)) << rng.randint(0, 2) for t in tasks]
    hp = [l23.pow2_at_least(max(1024, 2 * b + 8192)) << rng.randint(0, 2) for b in heap]
    dep = [4 * t + 16 + rng.randint(0, 64) for t in tasks]
    form = rng.choice(["none", "list", "list", "partial", "same"])
    if form == "none":
        return None
    if form == "same":
        win, hp, dep = [max(win)] * 4, [max(hp)] * 4, [max(dep)] * 4
    if form == "partial":  # some rings fall through to the chip's defaults
        z = lambda v: [x if rng.random() < 0.6 else 0 for x in v]  # noqa: E731
        win, hp, dep = z(win), z(hp), z(dep)
    c = CallConfig()
    c.runtime_env.ring_task_window = win
    c.runtime_env.ring_heap = hp
    c.runtime_env.ring_dep_pool = dep
    return c


class Lost(Exception):
    pass


def job(a):
    """One job: every rank builds the same programs (seeded); hosts serve inside init(),
    rank 0 soaks and writes what it saw to `a.child` (JSON, rewritten after every run)."""
    import taskring
    from taskring import IN, OUT, SCALAR, CallConfig

    sys.path.insert(0, HERE)
    import soak as l23  # the random programs, their oracle and ring needs

    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    rng = random.Random(a.seed)
    specs = []
    while len(specs) < 16:
        s = l23.gen_spec(rng, f"l4soak_p{len(specs)}")
        if not uses_python_kernel(s):
            specs.append(s)
    fail_specs = []
    while len(fail_specs) < 2:
        s = l23.gen_spec(rng, f"l4soak_f{len(fail_specs)}", fail=True)
        if not uses_python_kernel(s):
            fail_specs.append(s)
    progs = {s.name: l23.make_program(s) for s in specs + fail_specs}
    recipes = [gen_recipe(rng, f"l4soak_recipe{i}", specs, a.chips) for i in range(12)]
    fail_recipes = [gen_recipe(rng, f"l4soak_fail{i}", specs, a.chips, fail_spec=s) for i, s in enumerate(fail_specs)]

    @taskring.program(signature=[IN, OUT])
    def l4soak_copy(rt, x, out):
        rt.submit(taskring.kernels.copy, inputs=[x], outputs=[out])

    def copy_orch(o, chips, args, cfg):
        o.submit_next_level(chips.l4soak_copy, list(args), cfg, worker=o.chips - 1)

    def nap_orch(o, chips, args, cfg):
        time.sleep(args[0] / 1000)
        o.submit_next_level(chips.l4soak_copy, list(args[1:]), cfg, worker=0)

    def leave_orch(o, chips, args, cfg):
        if args[0] == 0:
            time.sleep(0.3)  # the other hosts' tasks of the run are under way by then
            raise SystemExit(3)
        raise KeyboardInterrupt

    def pid_orch(o, chips, args, cfg):
        args[0][0] = os.getpid()

    dc = taskring.DistributedConfig(device_ids=list(range(a.chips)))
    cc = {"l4soak_copy": l4soak_copy}
    dprogs = []
    for r in recipes + fail_recipes:
        p = taskring.DistributedProgram(make_host_orch(r, taskring), chips={s.name: progs[s.name] for s, *_ in r.steps}, config=dc, signature=[IN] * r.n_in + [OUT] * r.n_out)
        dprogs.append(p)
    extra = {
        "copy": taskring.DistributedProgram(copy_orch, chips=cc, config=dc, signature=[IN, OUT]),
        "nap": taskring.DistributedProgram(nap_orch, chips=cc, config=dc, signature=[SCALAR, IN, OUT]),
        "leave_scalars": taskring.DistributedProgram(leave_orch, chips=cc, config=dc, signature=[SCALAR]),
        "leave_arrays": taskring.DistributedProgram(leave_orch, chips=cc, config=dc, signature=[SCALAR, IN, OUT]),
        "pid": taskring.DistributedProgram(pid_orch, chips=cc, config=dc, signature=[OUT]),
    }
    for k, p in extra.items():
        p.name = f"l4soak_{k}"
    w = taskring.Worker(level=4, arena_cache_slots=rng.randint(1, 4))
    handles = [w.register(p) for p in dprogs]
    H = {k: w.register(p) for k, p in extra.items()}
    for r, h in zip(recipes + fail_recipes, handles):
        r.handle = h
    try:
        if not w.init():
            return 0  # a host: served until rank 0 closed
    except (SystemExit, KeyboardInterrupt) as e:
        # The injected fault ended this host's serving loop (its chips are closed); the
        # process leaves normally, MPI_Finalize waiting for the rest of the job.
        print(f"soak-l4: host rank {rank} left serving: {type(e).__name__} (injected)", file=sys.stderr, flush=True)
        return 0
    return Rank0(a, w, H, recipes, fail_recipes, l23, CallConfig, FAULT_MSG=l23.FAULT_MSG).soak()


class Rank0:
    def __init__(self, a, w, H, recipes, fail_recipes, l23, CallConfig, FAULT_MSG):
        self.a, self.w, self.H, self.l23 = a, w, H, l23
        self.recipes, self.fail_recipes, self.CallConfig, self.fault_msg = recipes, fail_recipes, CallConfig, FAULT_MSG
        self.rng = random.Random(a.seed * 7919 + 1)
        self.np_rng = np.random.default_rng(a.seed)
        self.n = w.num_hosts
        self.alive = set(range(self.n))
        self.runs = self.faults = 0
        self.lost, self.kinds, self.notes = [], Counter(), Counter()
        self.fault = {"kind": a.fault}
        self.resident = {}  # (host, shape) -> HostTensor
        self.pids = []
        self.wd = l23.Watchdog(self.fatal)

    # -- bookkeeping --
    def save(self, done=False):
        res = {
            "runs": self.runs, "faults": self.faults, "lost": self.lost, "kinds": dict(self.kinds), "notes": dict(self.notes),
            "fault": self.fault, "pids": self.pids, "done": done,
            "jobid": os.environ.get("OMPI_MCA_ess_base_jobid", ""), "pmix": os.environ.get("PMIX_SERVER_TMPDIR", ""),
        }
        tmp = self.a.child + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f)
        os.replace(tmp, self.a.child)

    def lose(self, kind, detail):
        self.lost.append([kind, detail])
        print(f"soak-l4: LOST [{kind}] {detail}", file=sys.stderr, flush=True)

    def fatal(self, label):
        self.lose("hang", f"{label}: not interruptible; job stopped")
        self.save()

    def guarded(self, name, fn, fault=False):
        self.runs += 1
        self.kinds[name] += 1
        if fault:
            self.faults += 1
        try:
            with self.wd.guard(name, self.a.run_timeout):
                fn()
        except Lost as e:
            self.lose(name, str(e))
        except KeyboardInterrupt:
            if not self.wd.fired:
                raise
            self.lose("hang", f"{name}: overran {self.a.run_timeout} s (interrupted)")
        except Exception as e:  # noqa: BLE001 - every other error is unexpected
            self.lose(name, f"unexpected {type(e).__name__}: {e}\n{traceback.format_exc()}")
        self.save()

    # -- building blocks --
    def shape(self):
        return (2 * self.rng.randint(1, 8), self.rng.choice([16, 32, 48, 64, 128]))

    def fresh(self, shape):
        return self.np_rng.uniform(-1, 1, shape).astype(np.float32)

    def plan(self, hosts, n_tasks, shape, chain=True):
        """Tasks {recipe, host, ins, outs, cfg, want}: inputs fresh or (chain) earlier
        tasks' outputs; `want` from the oracle in submission order."""
        tasks, pool, value = [], [], {}
        for _ in range(n_tasks):
            r = self.rng.choice(self.recipes)
            ins = [self.rng.choice(pool) if chain and pool and self.rng.random() < 0.5 else self.fresh(shape) for _ in range(r.n_in)]
            outs = [np.full(shape, SENTINEL, np.float32) for _ in range(r.n_out)]
            want = recipe_oracle(self.l23, r, [value.get(id(x), x) for x in ins])
            for o_, v in zip(outs, want):
                value[id(o_)] = v
            pool += outs
            tasks.append({"r": r, "host": self.rng.choice(hosts), "ins": ins, "outs": outs, "cfg": l4_config(self.rng, self.l23, r, shape, self.CallConfig), "want": want})
        return tasks

    def submit(self, o, t):
        o.submit_next_level(t["r"].handle, t["ins"] + t["outs"], t["cfg"], worker=t["host"])

    def check(self, t, rep=None, may_be_untouched=False):
        """Outputs equal the oracle (or, `may_be_untouched`, all still the sentinel); the
        host's report has one chip task per step, on the step's chip, sized as its
        config says."""
        r = t["r"]
        if may_be_untouched and all((o_ == SENTINEL).all() for o_ in t["outs"]):
            self.notes["a task of a failed run was not dispatched"] += 1
            return
        for k, (got, want) in enumerate(zip(t["outs"], t["want"])):
            if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                bad = np.argwhere(~np.isclose(got, want, rtol=1e-4, atol=1e-5))
                at = tuple(int(i) for i in bad[0])
                raise Lost(f"{r.name} on host {t['host']}: output {k} differs from numpy at {len(bad)} places, first {at}: {got[at]} != {want[at]}")
        if rep is None:
            return
        if rep.error is not None or rep.worker != t["host"] or rep.rank != t["host"] + 1:
            raise Lost(f"{r.name}: report says host {rep.worker} rank {rep.rank} error {rep.error!r}, sent to host {t['host']}")
        cts = rep.report.tasks
        if [ct.worker for ct in cts] != [chip for _, chip, _, _ in r.steps]:
            raise Lost(f"{r.name}: chip tasks on {[ct.worker for ct in cts]}, steps on {[c for _, c, _, _ in r.steps]}")
        for ct in cts:
            bad = self.l23.check_sizing(ct.ring_sizing, chip_config(t["cfg"], ct.worker))
            if bad:
                raise Lost(f"{r.name} on host {t['host']} chip {ct.worker}: reported sizing {bad}")

    # -- runs --
    def random_run(self):
        hosts = sorted(self.alive)
        tasks = self.plan(hosts, self.rng.randint(1, 2 * len(hosts) + 1), self.shape())
        rep = self.w.run(lambda o, x, c: [self.submit(o, t) for t in tasks])
        if len(rep.tasks) != len(tasks):
            raise Lost(f"{len(rep.tasks)} task reports for {len(tasks)} L4 tasks")
        for t, tr in zip(tasks, rep.tasks):
            self.check(t, tr)

    def resident_run(self):
        """x -> a host-resident tensor -> out on one host, in one run (the dependency
        goes through the HostTensor), beside random tasks; then out again from the
        tensor in a later run."""
        hosts = sorted(self.alive)
        h = self.rng.choice(hosts)
        shape = self.shape()
        kv = self.resident.get((h, shape))
        if kv is None:
            kv = self.resident[(h, shape)] = self.w.alloc_tensor(shape, np.float32, worker=h)
        x, out, again = self.fresh(shape), np.full(shape, SENTINEL, np.float32), np.full(shape, SENTINEL, np.float32)
        others = self.plan(hosts, self.rng.randint(0, 2), shape, chain=False)

        def orch(o, _x, _c):
            for t in others:
                self.submit(o, t)
            o.submit_next_level(self.H["copy"], [x, kv], None, worker=h)
            o.submit_next_level(self.H["copy"], [kv, out], None, worker=h)

        self.w.run(orch)
        if not np.array_equal(out, x):
            raise Lost(f"host {h}: a copy through a host-resident tensor in one run differs")
        for t in others:
            self.check(t)
        self.w.run(lambda o, _x, _c: o.submit_next_level(self.H["copy"], [kv, again], None, worker=h))
        if not np.array_equal(again, x):
            raise Lost(f"host {h}: a host-resident tensor read in a later run differs")

    def kernel_fault_run(self):
        """A chip kernel raises: that host's task fails naming host, chip and error; the
        other tasks of the run are right (or not dispatched); the host keeps serving."""
        hosts = sorted(self.alive)
        h = self.rng.choice(hosts)
        shape = self.shape()
        r = self.rng.choice(self.fail_recipes)
        others = self.plan(hosts, self.rng.randint(0, 2), shape, chain=False)
        bad = {"r": r, "host": h, "ins": [self.fresh(shape) for _ in range(r.n_in)], "outs": [np.full(shape, SENTINEL, np.float32) for _ in range(r.n_out)], "cfg": None}
        try:
            self.w.run(lambda o, _x, _c: [self.submit(o, t) for t in others + [bad]])
        except RuntimeError as e:
            s = str(e)
            if not s.startswith(f"host {h} (rank {h + 1}): chip {r.steps[0][1]} (pid ") or self.fault_msg not in s:
                raise Lost(f"host {h}: a raising kernel reported as {s!r}")
        else:
            raise Lost(f"host {h}: a raising kernel did not fail the run")
        for t in others:
            self.check(t, may_be_untouched=True)
        after = self.plan([h], 1, shape)
        rep = self.w.run(lambda o, _x, _c: self.submit(o, after[0]))
        self.check(after[0], rep.tasks[0])

    def work(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            x = self.rng.random()
            if x < 0.08:
                self.guarded("kernel-fault", self.kernel_fault_run, fault=True)
            elif x < 0.2:
                self.guarded("resident", self.resident_run)
            else:
                self.guarded("random", self.random_run)

    # -- the host fault --
    def expect_error(self, fn, prefix, label, within):
        t0 = time.monotonic()
        try:
            fn()
        except RuntimeError as e:
            took = time.monotonic() - t0
            s = str(e)
            if not s.startswith(prefix):
                raise Lost(f"{label}: error {s!r}, expected it to start with {prefix!r}")
            if took > within:
                raise Lost(f"{label}: the error came after {took:.2f} s (limit {within} s): {s}")
            return s, took
        raise Lost(f"{label}: the run succeeded")

    def host_fault(self):
        kind = self.a.fault
        hosts = sorted(self.alive)
        h = self.rng.choice(hosts)
        who = f"host {h} (rank {h + 1})"
        pid = self.pids[h]
        shape = self.shape()
        others = self.plan([x for x in hosts if x != h], self.rng.randint(0, 2), shape, chain=False) if len(hosts) > 1 else []
        x, out = self.fresh(shape), np.full(shape, SENTINEL, np.float32)
        self.fault.update(host=h)
        timeout_s = HOST_TIMEOUT_MS / 1000

        def run_with(sub):
            self.w.run(lambda o, _x, _c: ([self.submit(o, t) for t in others], sub(o)))

        if kind in ("systemexit", "keyboardinterrupt"):
            code = 0 if kind == "systemexit" else 1
            arrays = self.rng.random() < 0.5
            self.fault.update(request="arrays" if arrays else "scalars")
            args = [code, x, out] if arrays else [code]
            prog = self.H["leave_arrays" if arrays else "leave_scalars"]
            why = "SystemExit: 3" if code == 0 else "KeyboardInterrupt"
            err, took = self.expect_error(lambda: run_with(lambda o: o.submit_next_level(prog, args, None, worker=h)), f"{who}: {why}; the host stopped serving", kind, 10.0)
            if err != f"{who}: {why}; the host stopped serving":
                raise Lost(f"{kind}: error {err!r}")
            later = f"{who}: stopped serving ({why})"
            later_within = 0.5
        elif kind == "sigint":
            os.kill(pid, signal.SIGINT)
            time.sleep(0.3)
            later = f"{who}: stopped serving (KeyboardInterrupt)"
            # Rank 0 learns it when a wait on the host reaches the ping interval.
            err, took = self.expect_error(lambda: run_with(lambda o: o.submit_next_level(self.H["copy"], [x, out], None, worker=h)), later, kind, 2.5)
            if err != later:
                raise Lost(f"{kind}: error {err!r}")
            later_within = 0.5
        else:  # sigstop-busy / sigstop-idle
            prefix = f"{who}: not responding: no answer to pings for "
            stopped = {}

            def stop():
                stopped["at"] = time.monotonic()
                os.kill(pid, signal.SIGSTOP)

            if kind == "sigstop-busy":
                timer = threading.Timer(0.3, stop)
                timer.start()
                sub = lambda o: o.submit_next_level(self.H["nap"], [2000, x, out], None, worker=h)  # noqa: E731
            else:
                stop()
                sub = lambda o: o.submit_next_level(self.H["copy"], [x, out], None, worker=h)  # noqa: E731
            t0 = time.monotonic()
            err, _ = self.expect_error(lambda: run_with(sub), prefix, kind, 2.5 + 3 * timeout_s)
            took = time.monotonic() - max(t0, stopped.get("at", t0))
            if f"TASKRING_HOST_TIMEOUT_MS={HOST_TIMEOUT_MS}" not in err:
                raise Lost(f"{kind}: error {err!r} does not name the timeout")
            if took > timeout_s + 2.0:
                raise Lost(f"{kind}: detected {took:.2f} s after the stop (timeout {timeout_s} s)")
            later, later_within = err, 0.5
        self.fault.update(error=err, detected_s=round(took, 3))
        self.alive.discard(h)
        for t in others:
            self.check(t, may_be_untouched=True)
        # The lost host's later tasks fail at once with its error.
        y = np.full(shape, SENTINEL, np.float32)
        err2, took2 = self.expect_error(lambda: self.w.run(lambda o, _x, _c: o.submit_next_level(self.H["copy"], [x, y], None, worker=h)), later, kind + " (a later task)", later_within)
        if err2 != later:
            raise Lost(f"{kind}: a later task failed with {err2!r}, expected {later!r}")
        self.fault.update(later_s=round(took2, 3))

    def soak(self):
        a = self.a
        self.pids = [0] * self.n
        bufs = [np.zeros(1, np.int64) for _ in range(self.n)]
        self.w.run(lambda o, _x, _c: [o.submit_next_level(self.H["pid"], [bufs[i]], None, worker=i) for i in range(self.n)])
        self.pids = [int(b[0]) for b in bufs]
        self.save()
        if a.fault == "none":
            self.work(a.seconds)
        else:
            self.work(a.seconds * 0.7)
            self.guarded(a.fault, self.host_fault, fault=True)
            if self.alive:
                self.work(max(1.5, a.seconds * 0.3))
        took = self.l23.close_with_timeout(self.w, timeout=10.0)
        if took is None:
            self.lose("hang", "close() did not return within 10 s")
        else:
            self.fault["close_s"] = round(took, 3)
            if took > 3.0:
                self.lose("slow-close", f"close() took {took:.2f} s after {a.fault}")
        self.save(done=True)
        return 0


# ===== the wrapper (not under MPI): launches one job after another ========================


def shm_names():
    try:
        return set(os.listdir(SHM))
    except OSError:
        return set()


def pgrep(pattern):
    p = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
    return [int(x) for x in p.stdout.split() if int(x) != os.getpid()]


def describe(pids):
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid}: {cmdline[:160]}")
        except OSError:
            out.append(f"{pid}: (gone)")
    return out


class Wrapper:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.runs = self.faults = 0
        self.lost = []
        self.notes = Counter()
        self.fault_kinds = Counter()
        self.jobtags = set()
        self.netns = os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None

    def lose(self, kind, detail):
        self.lost.append((kind, detail))
        print(f"soak-l4: LOST [{kind}] {detail}", file=sys.stderr, flush=True)

    def launch(self, i, tmp, seconds, fault):
        hosts, chips = self.rng.choice([2, 3]), self.rng.choice([1, 2])
        seed = self.rng.randrange(1 << 30)
        result = os.path.join(tmp, f"job{i}.json")
        cmd = [sys.executable, "-m", "taskring", "launch", "--hosts", str(hosts), *(["--netns"] if self.netns else []), SCRIPT,
               "--child", result, "--seed", str(seed), "--seconds", f"{seconds:.1f}", "--fault", fault, "--chips", str(chips), "--run-timeout", str(self.a.run_timeout)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "PMIX_"))}
        env["TASKRING_HOST_TIMEOUT_MS"] = str(HOST_TIMEOUT_MS)
        label = f"job {i} ({hosts} hosts x {chips} chip{'s' if chips > 1 else ''}, seed {seed}, {seconds:.0f} s, fault {fault})"
        shm_before = shm_names()
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        hard = seconds + self.a.launch_slack
        try:
            out, err = p.communicate(timeout=hard)
            timed_out = False
        except KeyboardInterrupt:  # the terminal's Ctrl-C reached the launcher too: it ends the job
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
            raise
        except subprocess.TimeoutExpired:
            timed_out = True
            p.send_signal(signal.SIGTERM)  # the launcher ends the job (grace 5 s, then SIGKILL)
            try:
                out, err = p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
        elapsed = time.monotonic() - t0
        tail = (out[-1500:] + "\n" + err[-2500:]).strip()
        if timed_out:
            self.lose("job-timeout", f"{label}: still running after {hard:.0f} s; ended with SIGTERM. Output:\n{tail}")

        res = None
        try:
            with open(result) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            self.lose("no-result", f"{label}: rank 0 wrote no result ({e}); exit status {p.returncode}. Output:\n{tail}")
        if res is not None:
            self.runs += res["runs"]
            self.faults += res["faults"]
            for kind, detail in res["lost"]:
                self.lost.append((kind, f"{label}: {detail}"))
            for k, v in res["notes"].items():
                self.notes[k] += v
            self.fault_kinds["kernel-fault"] += res["kinds"].get("kernel-fault", 0)
            if fault != "none":
                self.fault_kinds[fault] += res["kinds"].get(fault, 0)
            if res["lost"]:
                print(f"soak-l4: {label}: {len(res['lost'])} lost, first [{res['lost'][0][0]}] {res['lost'][0][1][:600]}", file=sys.stderr, flush=True)
            if not res["done"] and not timed_out:
                self.lose("incomplete", f"{label}: rank 0 did not finish; exit status {p.returncode}. Output:\n{tail}")
            if res.get("jobid", "").isdigit():
                self.jobtags.add(f"{int(res['jobid']):x}")
        # Exit status: 0, except after a SIGSTOP (a stopped rank cannot finalize: MPI_Abort).
        if not timed_out:
            if fault.startswith("sigstop"):
                if p.returncode == 0 or "ending the job with MPI_Abort" not in err:
                    self.lose("exit-status", f"{label}: exit status {p.returncode} after a SIGSTOP, expected non-zero with 'ending the job with MPI_Abort'. Output:\n{tail}")
            elif p.returncode != 0:
                self.lose("exit-status", f"{label}: exit status {p.returncode}. Output:\n{tail}")

        # Nothing of the job is left: processes (its ranks and chips have `result` in
        # their command line), its shared-memory segments, its PMIx directory.
        left = pgrep(result)
        deadline = time.monotonic() + 3.0
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = pgrep(result)
        if left:
            self.lose("leftover-process", f"{label}: processes left 3 s after the job ended: {describe(left)}")
            for pid in left:  # ours: started by this launch
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        tag = f"{int(res['jobid']):x}" if res and res.get("jobid", "").isdigit() else None
        new = sorted(shm_names() - shm_before)
        mine = [n for n in new if tag and n.startswith("vader_segment.") and n.rsplit(".", 2)[-2] == tag]
        if mine:
            self.lose("leftover-shm", f"{label}: /dev/shm files of the job left: {mine}")
            for n in mine:  # reported; removed so that they do not pile up
                try:
                    os.unlink(os.path.join(SHM, n))
                except OSError:
                    pass
        for n in new:
            if n not in mine:
                self.notes[f"/dev/shm/{n} appeared during a job, named with another job's id (not this soak's)"] += 1
        pmix = (res or {}).get("pmix", "")
        if pmix and os.path.basename(pmix.rstrip("/")).startswith("pid.") and os.path.exists(pmix):
            crashed = " (mpirun crashed: 'Segmentation fault' in its output)" if "Segmentation fault" in err else ""
            self.lose("leftover-pmix", f"{label}: the job's PMIx directory {pmix} is left, exit status {p.returncode}{crashed}. Output:\n{tail}")
            shutil.rmtree(pmix, ignore_errors=True)  # reported; removed so that it does not pile up

        f = (res or {}).get("fault", {})
        what = ""
        if fault != "none" and "error" in f:
            what = f", {f['error'][:90]!r} after {f.get('detected_s')} s, later tasks {f.get('later_s')} s"
        print(f"soak-l4: {label}: {(res or {}).get('runs', 0)} runs, {(res or {}).get('faults', 0)} faults{what}, "
              f"close {f.get('close_s')} s, exit status {p.returncode}, {elapsed:.1f} s in all", flush=True)

    def run(self):
        a = self.a
        from taskring import _native

        if not _native.mpi_built():
            print(f"soak-l4: this build of taskring has no MPI: {_native.MPI_MISSING}", flush=True)
            return 2
        print(f"soak-l4: seed {a.seed}, {a.minutes} min, TASKRING_HOST_TIMEOUT_MS={HOST_TIMEOUT_MS}{', --netns' if self.netns else ''}", flush=True)
        shm_start = shm_names()
        tmp = tempfile.mkdtemp(prefix="taskring-l4soak-")
        start = time.monotonic()
        end = start + a.minutes * 60
        plan = []
        i = 0
        try:
            while True:
                left = end - time.monotonic()
                if left < 8 and i > 0:
                    break
                if not plan:
                    plan = list(HOST_FAULTS) + ["none"]
                    self.rng.shuffle(plan)
                fault = plan.pop()
                # Rank 0's own time; a job's start and end take ~2-4 s more.
                seconds = max(4.0, min(left - 4, self.rng.uniform(8, 16)))
                self.launch(i, tmp, seconds, fault)
                i += 1
        except KeyboardInterrupt:
            print("soak-l4: interrupted", file=sys.stderr, flush=True)
        # Across the whole soak: no process of any job, no segment of any job.
        time.sleep(0.3)
        left = pgrep("l4_soak.py --child")
        if left:
            self.lose("leftover-process", f"processes of the soak's jobs left at the end: {describe(left)}")
        new = sorted(shm_names() - shm_start)
        mine = [n for n in new if n.startswith("vader_segment.") and n.rsplit(".", 2)[-2] in self.jobtags]
        if mine:
            self.lose("leftover-shm", f"/dev/shm files of the soak's jobs left at the end: {mine}")
        shutil.rmtree(tmp, ignore_errors=True)
        for k, v in sorted(self.notes.items()):
            print(f"soak-l4: note: {k} ({v}x)", flush=True)
        print("soak-l4: faults by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(self.fault_kinds.items())), flush=True)
        if self.lost:
            print("soak-l4: lost by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(k for k, _ in self.lost).items())), flush=True)
            shown = Counter()
            for kind, detail in self.lost:
                shown[kind] += 1
                if shown[kind] <= 3:
                    print(f"soak-l4: lost [{kind}] {detail[:700]}", flush=True)
        print(f"soak-l4: {self.runs} runs, {self.faults} faults injected, {len(self.lost)} lost", flush=True)
        return 1 if self.lost else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=1.0, help="how long to soak (default 1, at most 10)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    p.add_argument("--run-timeout", type=float, default=30.0, help="seconds one L4 run may take before it counts as a hang")
    p.add_argument("--launch-slack", type=float, default=60.0, help="seconds a job may take beyond its soak time before it is ended")
    # One job, under taskring launch (set by the wrapper):
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--fault", default="none", choices=("none",) + HOST_FAULTS, help=argparse.SUPPRESS)
    p.add_argument("--chips", type=int, default=1, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        if "OMPI_COMM_WORLD_RANK" not in os.environ:
            p.error("--child runs under taskring launch")
        sys.exit(job(a))
    if not 0 < a.minutes <= 10:
        p.error("--minutes must be in (0, 10]")
    if a.seed is None:
        a.seed = int(time.time() * 1000) % (1 << 31)
    sys.exit(Wrapper(a).run())


if __name__ == "__main__":
    main()
