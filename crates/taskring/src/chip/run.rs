//! A run on a [`ChipWorker`]: take the arena of the dispatch's sizing, run the
//! orchestration inside the root scope, wait until every task retired (or a failure),
//! settle the cores, report. A direct replay (`replay::direct`) runs the same way
//! without orchestration.

use super::core::{help_kind, help_one, wait_cores_idle};
use super::deque::DirectRun;
use super::policy::{Help, RunPolicy};
use super::quarantine::{GivenUp, GivenUpWhy, Stuck};
use super::report::classify_stall;
use super::spin::SpinThenPark;
use super::{Arg, ChipShared, ChipWorker, Diagnostics, OrchBody, Program, RunError, RunReport};
use crate::arena::{Acquired, Arena, ArenaCache};
use crate::config::{CallConfig, RingSizing};
use crate::engine::orch::ExecutorProbe;
use crate::engine::recording::Recording;
use crate::engine::shared::ArenaShared;
use crate::engine::{Orchestrator, RuntimeFailure, StatusCode};
use crate::kernel::panic_text;
use crate::kernel::CoreKind;
use crate::sync::Ordering::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ends the run in progress on a chip at once, from the run's own blocking hook (a
/// Python caller's Ctrl-C, seen when the hook takes the interpreter back) or from
/// another thread; between runs it does nothing.
///
/// The run fails with EXPLICIT_ORCH_FATAL (`the run was interrupted: {why}`): the
/// chip's waits end, queued tasks are dropped, and a core whose kernel has not returned
/// within `INTERRUPT_GRACE` (20 ms) is given up on as after SCHEDULER_TIMEOUT (replaced;
/// its task's memory set aside until the kernel returns, `chip/quarantine.rs`), so the
/// caller gets control back without waiting for the kernel.
#[derive(Clone)]
pub struct RunInterrupter {
    sh: Arc<ChipShared>,
}

impl RunInterrupter {
    /// Interrupt the run in progress; `why` ends its error's text.
    pub fn interrupt(&self, why: &str) {
        self.sh.interrupted.store(true, SeqCst);
        self.sh.eng.fail(RuntimeFailure::new(
            StatusCode::ExplicitOrchFatal,
            None,
            format!("the run was interrupted: {why}"),
        ));
    }
}

/// How long the settle of an interrupted run waits for the cores' kernels to return
/// before it gives up on those still running: a short kernel finishes and nothing is
/// set aside; a long one is left to run on.
const INTERRUPT_GRACE: Duration = Duration::from_millis(20);

/// How often a run that waits for its tasks hands the caller's thread back to the
/// blocking hook (`hook(false)`, then `hook(true)` again): a Python caller runs its
/// signal handlers then, so Ctrl-C reaches it within this while a long kernel runs.
pub(crate) const HOOK_TICK: Duration = Duration::from_millis(50);

impl ChipWorker {
    /// A handle that interrupts this chip's run in progress ([`RunInterrupter`]).
    pub fn interrupter(&self) -> RunInterrupter {
        RunInterrupter {
            sh: self.shared.clone(),
        }
    }

    /// Dispatch `program` with `config`: validate it, resolve its sizing against the
    /// process environment now, run ([`ChipWorker::run_with_hook`] without a hook).
    pub fn run(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        config: &CallConfig,
    ) -> Result<RunReport, RunError> {
        self.run_with_hook(program, args, config, None)
    }

    /// As [`ChipWorker::run`], with a blocking hook: `hook(true)` before the runtime
    /// blocks the caller's thread and `hook(false)` after (e.g. to release an
    /// interpreter lock), and `hook(false)`, `hook(true)` every 50 ms while it waits (a
    /// Python caller runs its signal handlers there; see [`RunInterrupter`]).
    pub fn run_with_hook(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        config: &CallConfig,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<RunReport, RunError> {
        self.dispatch(self.policy, program, args, config, hook)
    }

    /// Dispatch `program` on an explicit sizing. A sizing whose entries break their
    /// rules (its public fields changed after it was built) is refused with
    /// INVALID_ARGS and the message of [`RingSizing::from_values`]; nothing runs.
    pub fn run_with_sizing(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        sizing: &RingSizing,
    ) -> Result<RunReport, RuntimeFailure> {
        sizing
            .validate()
            .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))?;
        let diag = Diagnostics::default();
        self.cycle(
            self.policy,
            Dispatch::program(program, args, sizing, None, &diag),
        )
    }

    /// A dispatch with `config` under `policy` (this chip's own, or the policy of the
    /// next level whose engine this is): validate the config, resolve its sizing
    /// against the process environment now, learn `"auto"` sizes where the policy does
    /// (`chip/auto.rs`), run the cycle.
    pub(crate) fn dispatch<P: RunPolicy>(
        &mut self,
        policy: P,
        program: &Program,
        args: &[Arg<'_>],
        config: &CallConfig,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<RunReport, RunError> {
        config.validate()?;
        let sizing = RingSizing::resolve_from_process(&config.runtime_env)?;
        let diag = Diagnostics::from_config(config);
        if sizing.is_auto() && P::LEARNS_SIZING {
            return Ok(self.run_auto(policy, program, args, sizing, hook, &diag)?);
        }
        Ok(self.cycle(
            policy,
            Dispatch::program(program, args, &sizing, hook, &diag),
        )?)
    }

    /// After a run: on a failure drop what is queued (and, on SCHEDULER_TIMEOUT, give up
    /// on the stuck cores); wait until no core holds a task of the run — with the hook's
    /// release on, since a core may be running a kernel that needs what it releases (a
    /// Python kernel needs the GIL) — giving up on cores that never get there; then no
    /// core can push any more: drop what an aborted run left queued, so no stale task
    /// meets the next run. A core that won the race to its completion (step 4 in
    /// `chip/core.rs`) is never given up on: the wait goes on until it is done.
    ///
    /// A core given up on keeps running its kernel: its task's memory is set aside
    /// (`chip/quarantine.rs`) — `sizing`'s arena, and the tensors of its task, read from
    /// the ring payload or, in a direct replay, from `job`.
    pub(crate) fn settle(
        &mut self,
        failure: Option<&RuntimeFailure>,
        blocking_hook: Option<&dyn Fn(bool)>,
        sizing: &RingSizing,
        job: Option<&dyn DirectRun>,
    ) {
        if failure.is_some() {
            self.shared.eng.drain_queues();
        }
        let mut given_up: Vec<(GivenUp, GivenUpWhy)> = Vec::new();
        if failure.is_some_and(|e| e.code == StatusCode::SchedulerTimeout) {
            let stuck = self.replace_stuck_cores();
            given_up.extend(stuck.into_iter().map(|g| (g, GivenUpWhy::SchedulerTimeout)));
        }
        if let Some(h) = blocking_hook {
            h(true);
        }
        // Wait in slices, the hook ticking between them: an interrupt (Ctrl-C seen by
        // the hook) cuts the wait for a long kernel short (`RunInterrupter`).
        let mut since = Instant::now();
        loop {
            let interrupted = self.shared.interrupted.load(SeqCst);
            let limit = if interrupted {
                INTERRUPT_GRACE
            } else {
                self.scheduler_timeout
            };
            if wait_cores_idle(&self.shared, HOOK_TICK.min(limit)) {
                break;
            }
            if since.elapsed() >= limit {
                // A kernel of the failed run never returned: give up on its core. A
                // core that is completing its task instead (it won the race) is not
                // given up on (the arena is not handed on under it): look again until
                // it is done.
                let why = if interrupted {
                    GivenUpWhy::Interrupted
                } else {
                    GivenUpWhy::SchedulerTimeout
                };
                let stuck = self.replace_stuck_cores();
                given_up.extend(stuck.into_iter().map(|g| (g, why)));
                since = Instant::now();
            }
            tick(blocking_hook);
        }
        if let Some(h) = blocking_hook {
            h(false);
        }
        self.shared.eng.drain_queues();
        for (g, why) in &given_up {
            let why = *why;
            let stuck = match job {
                Some(job) => {
                    let (k, tensors) = job.task(g.task.0 as u32);
                    Stuck::new(g, why, k.as_ref().map(|k| k.name()), &tensors, sizing)
                }
                None => {
                    let Some((arena, ())) = self.cache.acquire_resident(sizing) else {
                        continue;
                    };
                    // safety: the task was running on the core given up on: it was
                    // published and has not completed, so its slot is not reused.
                    let p = unsafe { arena.shared.rings[g.task.ring()].payload(g.task.local()) };
                    Stuck::new(
                        g,
                        why,
                        p.kernel.as_ref().map(|k| k.name()),
                        &p.tensors[..p.n_tensors as usize],
                        sizing,
                    )
                }
            };
            self.stuck.push(stuck);
        }
    }

    /// The heap addresses of `sizing`'s arena (built if it is not resident).
    pub(crate) fn heap_bases(&mut self, sizing: &RingSizing) -> Result<[u64; 4], RuntimeFailure> {
        let (arena, _) = acquire_arena(&mut self.cache, sizing)?;
        Ok([0, 1, 2, 3].map(|r| arena.orch.heap_base(r)))
    }

    /// The run cycle, which every orchestrated dispatch goes through (a program's, a
    /// capture's, a learning one's, a replay's through the rings) under `policy`, in
    /// five steps: take and arm the arena ([`arm_arena`]), open the run ([`open_run`]:
    /// cores see the arena), orchestrate ([`orchestrate`], inside the root scope; the
    /// orchestrator asks the executor's side of the run, [`CoreProbe`]), wait until
    /// every task retired ([`wait_retired`]), close the run ([`ChipWorker::settle`],
    /// [`close_run`]) and write the diagnostics asked for.
    pub(crate) fn cycle<P: RunPolicy>(
        &mut self,
        policy: P,
        d: Dispatch<'_>,
    ) -> Result<RunReport, RuntimeFailure> {
        let Dispatch {
            name,
            body,
            args,
            sizing,
            hook,
            diag,
            mut record,
            replayed,
        } = d;
        let t0 = Instant::now();
        self.check_stuck(args, hook)?;
        let (arena, acq) = acquire_arena(&mut self.cache, sizing)?;
        arm_arena(arena, diag, record.as_deref_mut());
        let sh = &*self.shared;
        let tracing = diag.swimlane_prefix.is_some();
        let completed_at_start = open_run(sh, &arena.shared, tracing, self.scheduler_timeout);
        let probe = CoreProbe::<P> {
            sh,
            arena: &arena.shared,
            completed_at_start,
            // With lanes (a next level's engine) the help takes any lane's task.
            kind: if sh.eng.lanes() > 0 {
                CoreKind::Any
            } else {
                help_kind(&self.kinds)
            },
            // A traced run does not help (the swimlane has no lane for this thread).
            help: if tracing { Help::Never } else { policy.help() },
            hook,
            policy: std::marker::PhantomData,
        };
        let mut o = Orchestrator::new(
            &sh.eng,
            &arena.shared,
            &mut arena.orch,
            *sizing,
            self.waits,
            &probe,
        );
        o.blocking_hook = hook;
        let result = orchestrate(&mut o, name, body, args);
        // The help below, and spinning cores, see the program's last batch of ready
        // tasks (the orchestrator's ring publishes in batches).
        o.publish_ready();
        // The program's last ready tasks woke no core yet (`Orchestrator::wake_debt`):
        // run what this thread can itself first (the whole program, when it was one
        // task), and wake cores only for what is left.
        if result.is_ok() && probe.helps() {
            // More than one task queued: the cores work beside this thread.
            if sh.eng.ready_len() > 1 {
                o.pay_wakes();
            }
            let fatal = || sh.eng.fatal.load(Acquire);
            while !fatal() && probe.help() {}
        }
        // Dropping the orchestrator pays what is still owed (for tasks left queued).
        drop(o);
        // A failure is latched at once, so the cores stop.
        let result = latch(sh, result);
        if let Some(c) = record {
            *c = arena.orch.take_capture();
        }
        let (peak, tasks) = (arena.orch.peaks(), arena.orch.tasks());

        let result = result.and_then(|()| {
            wait_retired(
                sh,
                &arena.shared,
                hook,
                probe.helps().then_some(&probe),
                self.scheduler_timeout,
                tasks,
                completed_at_start,
            )
        });
        let result = latch(sh, result);
        self.settle(result.as_ref().err(), hook, sizing, None);
        close_run(&self.shared);
        self.write_diagnostics(diag, sizing, result.as_ref().err());
        self.set_aside_arenas();
        result.map_err(partly_written)?;
        Ok(RunReport {
            ring_sizing: *sizing,
            peak,
            tasks,
            arena_hit: acq.hit,
            arena_build_s: acq.build_s,
            elapsed_s: t0.elapsed().as_secs_f64(),
            replayed,
            device_memory: self.device_memory(sizing),
        })
    }
}

/// What one run cycle runs ([`ChipWorker::cycle`]).
pub(crate) struct Dispatch<'d> {
    /// The program's name (a panic of the orchestration names it).
    pub(crate) name: &'d str,
    pub(crate) body: &'d OrchBody<'d>,
    pub(crate) args: &'d [Arg<'d>],
    pub(crate) sizing: &'d RingSizing,
    /// The caller's blocking hook ([`ChipWorker::run_with_hook`]).
    pub(crate) hook: Option<&'d dyn Fn(bool)>,
    pub(crate) diag: &'d Diagnostics,
    /// A recorder to install for the run (a capture, or a dispatch that learns its
    /// sizes): it is put back when the orchestration returned.
    pub(crate) record: Option<&'d mut Option<Box<dyn Recording>>>,
    /// A replay through the rings (its report says `replayed`).
    pub(crate) replayed: bool,
}

impl<'d> Dispatch<'d> {
    /// A run of `program`, recording nothing.
    pub(crate) fn program(
        program: &'d Program,
        args: &'d [Arg<'d>],
        sizing: &'d RingSizing,
        hook: Option<&'d dyn Fn(bool)>,
        diag: &'d Diagnostics,
    ) -> Dispatch<'d> {
        Dispatch {
            name: &program.name,
            body: &*program.f,
            args,
            sizing,
            hook,
            diag,
            record: None,
            replayed: false,
        }
    }
}

/// What a failed run's text says of its outputs: tasks that ran before the failure
/// wrote theirs (the caller's arrays included); nothing is rolled back.
pub(crate) const PARTLY_WRITTEN: &str = "the run's outputs may be partly written";

/// A failed run's error, saying that its outputs may be partly written (once: an L3
/// node's failure may carry a chip's that says it already).
pub(crate) fn partly_written(mut e: RuntimeFailure) -> RuntimeFailure {
    if !e.detail.contains(PARTLY_WRITTEN) {
        if !e.detail.is_empty() {
            e.detail.push_str("; ");
        }
        e.detail.push_str(PARTLY_WRITTEN);
    }
    e
}

/// The arena of `sizing` from the chip's cache (built if it is not resident), or
/// RUNTIME_SETUP when its memory cannot be reserved.
pub(crate) fn acquire_arena<'c>(
    cache: &'c mut ArenaCache,
    sizing: &RingSizing,
) -> Result<(&'c mut Arena, Acquired), RuntimeFailure> {
    cache
        .acquire(sizing)
        .map_err(|e| super::acquire_failure(&e, "arena"))
}

/// Step 1 of a run: reset the arena and switch on what the dispatch records (scope
/// stats, `deps.json`, a capture).
fn arm_arena(
    arena: &mut Arena,
    diag: &Diagnostics,
    capture: Option<&mut Option<Box<dyn Recording>>>,
) {
    arena.reset();
    if diag.scope_stats_prefix.is_some() {
        arena.orch.enable_stats();
    }
    if diag.deps_prefix.is_some() {
        arena.orch.enable_deps();
    }
    if let Some(c) = capture {
        arena.orch.install_capture(c.take());
    }
}

/// Step 2 of a run: start the swimlane (`tracing`), publish `arena` to the cores and
/// lift the fatal flag. Returns the completion count at the start (the stall report
/// counts from it).
///
/// Queues were drained when the previous run ended, after its cores went idle; a core
/// may still have popped a stale task just before that drain — it drops it when it sees
/// the fatal flag, which is still up. So: wait for that, then publish the arena, then
/// lift the flag.
fn open_run(sh: &ChipShared, arena: &ArenaShared, tracing: bool, timeout: Duration) -> u64 {
    if tracing {
        for c in sh.cores.read().iter() {
            c.lane.lock().clear();
        }
        *sh.trace_t0.lock() = Some(Instant::now());
    }
    sh.trace.store(tracing, SeqCst);
    sh.eng.drain_queues();
    wait_cores_idle(sh, timeout);
    sh.arena
        .store(arena as *const ArenaShared as *mut ArenaShared, Release);
    sh.interrupted.store(false, SeqCst);
    super::abort::reopen(&sh.eng);
    sh.eng.open_for_cores();
    sh.eng.completed.load(SeqCst)
}

/// Step 3 of a run: the orchestration `body` inside the root scope (depth 0); a panic
/// of it is EXPLICIT_ORCH_FATAL. The scopes are closed whatever happened.
fn orchestrate(
    o: &mut Orchestrator<'_>,
    name: &str,
    body: &OrchBody<'_>,
    args: &[Arg<'_>],
) -> Result<(), RuntimeFailure> {
    let mut r = o.begin_scope(false);
    if r.is_ok() {
        r = match catch_unwind(AssertUnwindSafe(|| body(o, args))) {
            Ok(r) => r,
            Err(p) => Err(RuntimeFailure::new(
                StatusCode::ExplicitOrchFatal,
                None,
                format!(
                    "orchestration of program '{name}' panicked: {}",
                    panic_text(&p)
                ),
            )),
        };
    }
    o.close_all_scopes();
    r
}

/// The run's outcome as the engine latched it: the first failure wins (a core's may
/// have come before the one `r` carries).
fn latch(sh: &ChipShared, r: Result<(), RuntimeFailure>) -> Result<(), RuntimeFailure> {
    r.map_err(|e| {
        sh.eng.fail(e);
        sh.eng.failure.lock().clone().expect("failure latched")
    })
}

/// Step 5 of a run (after [`ChipWorker::settle`]): the cores no longer see the arena
/// and stop recording.
fn close_run(sh: &ChipShared) {
    sh.arena.store(std::ptr::null_mut(), Release);
    sh.eng.close_for_cores();
    sh.trace.store(false, SeqCst);
}

/// How a run waits for its last tasks to retire before it parks on the engine's
/// progress signal: 32 spin hints (the tail of a run is usually a microsecond away on
/// another CPU), then yields (on a busy machine the core that must finish the tail may
/// need this CPU: a 1-task L2 run's tail takes 8–9 µs of pure spinning there). With
/// these spins B3's warm 1-task run is 0.9–1.1 µs; yielding from the first look costs
/// it 0.4 µs. Then 8 yields and park: a chip whose task runs a long kernel on its core
/// must not take the CPU from another chip's (see `MAILBOX_SPIN`).
const RETIRE_SPIN: SpinThenPark = SpinThenPark {
    checks: 40,
    spin_checks: 32,
    yield_every: 0,
    backoff: 1,
};

/// How a helping orchestrator whose program has ended looks for ready tasks between two
/// it runs (`wait_retired`): up to 256 looks, backing off to 8 spin hints, yielding on
/// every 16th (the cores may need this CPU).
const HELP_SPIN: SpinThenPark = SpinThenPark {
    checks: 256,
    spin_checks: u32::MAX,
    yield_every: 16,
    backoff: 8,
};

/// Between two slices of a wait with the hook's release on: hand the thread back to the
/// hook and take it again ([`HOOK_TICK`]).
pub(crate) fn tick(hook: Option<&dyn Fn(bool)>) {
    if let Some(h) = hook {
        h(false);
        h(true);
    }
}

/// Wait until every ring's watermark reached its last submitted task (or a failure,
/// or `timeout` without any task completing: SCHEDULER_TIMEOUT with its sub-class).
fn wait_retired<H: ExecutorProbe>(
    sh: &ChipShared,
    a: &ArenaShared,
    hook: Option<&dyn Fn(bool)>,
    help: Option<&H>,
    timeout: Duration,
    submitted: u64,
    completed_at_start: u64,
) -> Result<(), RuntimeFailure> {
    let all_retired = || {
        a.rings
            .iter()
            .all(|r| r.last_alive.load(Acquire) == r.current.load(Acquire))
    };
    let fatal = || sh.eng.fatal.load(Acquire);
    if let Some(h) = help {
        // Help while there is work: when nothing is ready, look for a while — a core's
        // completion makes the next tasks ready within microseconds (a stencil's next
        // step), and the wait below is woken only by the end of the run. A look that
        // finds a task this thread may not run (or that a core took first) ends the
        // help.
        loop {
            if all_retired() || fatal() {
                break;
            }
            if h.help() {
                continue;
            }
            let more = HELP_SPIN.spin(|| all_retired() || fatal() || sh.eng.ready_len() > 0);
            if !more || all_retired() || fatal() || !h.help() {
                break;
            }
        }
    }
    if !RETIRE_SPIN.spin(|| all_retired() || fatal()) {
        if let Some(h) = hook {
            h(true);
        }
        let mut seen = sh.eng.completed.load(Relaxed);
        let mut since = Instant::now();
        while !all_retired() && !fatal() {
            // Tasks may have become ready since (their producers ran on the cores).
            if let Some(h) = help {
                if h.help() {
                    seen = sh.eng.completed.load(Relaxed);
                    since = Instant::now();
                    continue;
                }
            }
            // Woken when a ring retired everything (or on a failure): not per task.
            sh.eng
                .progress
                .wait_end(|| all_retired() || fatal(), HOOK_TICK.min(timeout));
            tick(hook);
            let c = sh.eng.completed.load(Relaxed);
            if c != seen {
                seen = c;
                since = Instant::now();
            } else if since.elapsed() >= timeout && !all_retired() {
                sh.eng.fail(classify_stall(
                    sh,
                    a,
                    timeout,
                    submitted,
                    c - completed_at_start,
                    true,
                ));
            }
        }
        if let Some(h) = hook {
            h(false);
        }
    }
    if fatal() {
        return Err(sh.eng.failure.lock().clone().expect("failure latched"));
    }
    Ok(())
}

/// The executor's side of one run cycle, as its orchestrator asks it
/// ([`ExecutorProbe`]): the cores' state for the backstop, sampled only while the
/// orchestrator waits for ring space (a core's `state` already says which task it runs,
/// so the cores' hot path pays nothing for it); the help the run's policy gives.
struct CoreProbe<'a, P: RunPolicy> {
    sh: &'a ChipShared,
    arena: &'a ArenaShared,
    completed_at_start: u64,
    /// The kinds of task the orchestrator's thread may run.
    kind: CoreKind,
    /// Which ready tasks it runs while it waits (the policy's; none in a traced run).
    help: Help,
    hook: Option<&'a dyn Fn(bool)>,
    policy: std::marker::PhantomData<P>,
}

impl<P: RunPolicy> CoreProbe<'_, P> {
    /// Does the orchestrator's thread run ready tasks while it waits?
    fn helps(&self) -> bool {
        self.help != Help::Never
    }
}

impl<P: RunPolicy> ExecutorProbe for CoreProbe<'_, P> {
    fn busy(&self) -> bool {
        self.sh.eng.ready_len() > 0
            || self
                .sh
                .cores
                .read()
                .iter()
                .any(|c| super::abort::task_of(c.state.load(SeqCst)).is_some())
    }
    fn stall(&self, timeout: Duration, submitted: u64) -> RuntimeFailure {
        let completed = self.sh.eng.completed.load(SeqCst) - self.completed_at_start;
        classify_stall(self.sh, self.arena, timeout, submitted, completed, false)
    }
    #[inline]
    fn help(&self) -> bool {
        match self.help {
            Help::Never => false,
            Help::Bounded => help_one(self.sh, self.arena, self.kind, true),
            Help::Any => help_one(self.sh, self.arena, self.kind, false),
        }
    }
    /// A next level's orchestrator, once its program has nothing more to submit, runs
    /// a queued dispatch itself (with the hook's release around it: a chip round trip
    /// must not hold a Python caller's GIL) instead of waiting for a dispatch thread to
    /// take it and for its completion.
    fn help_at_end(&self) -> bool {
        if !P::HELPS_AT_END {
            return false;
        }
        // Only a lone queued dispatch: with more, the dispatch threads are at work on
        // every lane, and this thread would only wait for a chip's turn beside the
        // lane's own thread (B6's 2000-task runs lost ~10 % that way).
        let eng = &self.sh.eng;
        if !eng.has_ready(self.kind) || eng.ready_len() > 1 {
            return false;
        }
        if let Some(h) = self.hook {
            h(true);
        }
        let ran = help_one(self.sh, self.arena, self.kind, false);
        if let Some(h) = self.hook {
            h(false);
        }
        ran
    }
    fn counts_scope_overflow(&self) -> bool {
        P::COUNTS_SCOPE_OVERFLOW
    }
    fn cores(&self) -> (usize, usize) {
        let cores = self.sh.cores.read();
        let count = |k: CoreKind| {
            cores
                .iter()
                .filter(|c| c.kind == k || c.kind == CoreKind::Any)
                .count()
        };
        (count(CoreKind::Aic), count(CoreKind::Aiv))
    }
}
