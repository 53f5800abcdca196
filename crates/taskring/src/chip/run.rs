//! A run on a [`ChipWorker`]: take the arena of the dispatch's sizing, run the
//! orchestration inside the root scope, wait until every task retired (or a failure),
//! settle the cores, report. A direct replay runs the same way without orchestration.

use super::core::{
    can_run, direct_step, help_kind, help_one, panic_text, wait_cores_idle, CORE_SEARCHING,
};
use super::report::{classify_stall, write_stats};
use super::{Arg, ChipShared, ChipWorker, Diagnostics, OrchBody, Program, RunError, RunReport};
use crate::config::{CallConfig, RingSizing};
use crate::engine::orch::ExecutorProbe;
use crate::engine::replay::DirectJob;
use crate::engine::shared::ArenaShared;
use crate::engine::{Orchestrator, PeakUse, RuntimeFailure, StatusCode};
use crate::kernel::CoreKind;
use crate::tensor::TaskId;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

impl ChipWorker {
    /// Dispatch `program` with `config`: validate it, resolve its sizing against the
    /// process environment now, run.
    pub fn run(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        config: &CallConfig,
    ) -> Result<RunReport, RunError> {
        config.validate()?;
        let sizing = RingSizing::resolve_from_process(&config.runtime_env)?;
        let diag = Diagnostics::from_config(config);
        Ok(self.run_inner(program, args, &sizing, None, &diag)?)
    }

    /// As [`ChipWorker::run`], calling `hook(true)` before the runtime blocks the
    /// caller's thread and `hook(false)` after (e.g. to release an interpreter lock).
    pub fn run_with_hook(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        config: &CallConfig,
        hook: &dyn Fn(bool),
    ) -> Result<RunReport, RunError> {
        config.validate()?;
        let sizing = RingSizing::resolve_from_process(&config.runtime_env)?;
        let diag = Diagnostics::from_config(config);
        Ok(self.run_inner(program, args, &sizing, Some(hook), &diag)?)
    }

    /// Dispatch `program` on an explicit sizing.
    pub fn run_with_sizing(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        sizing: &RingSizing,
    ) -> Result<RunReport, RuntimeFailure> {
        self.run_inner(program, args, sizing, None, &Diagnostics::default())
    }

    /// After a run: on a failure drop what is queued (and, on SCHEDULER_TIMEOUT, give up
    /// on the stuck cores); wait until no core holds a task of the run — with the hook's
    /// release on, since a core may be running a kernel that needs what it releases (a
    /// Python kernel needs the GIL) — giving up on cores that never get there; then no
    /// core can push any more: drop what an aborted run left queued, so no stale task
    /// meets the next run.
    fn settle(&mut self, failure: Option<&RuntimeFailure>, blocking_hook: Option<&dyn Fn(bool)>) {
        if failure.is_some() {
            self.shared.eng.drain_queues();
        }
        if failure.is_some_and(|e| e.code == StatusCode::SchedulerTimeout) {
            self.replace_stuck_cores();
        }
        if let Some(h) = blocking_hook {
            h(true);
        }
        let idle = wait_cores_idle(&self.shared, self.scheduler_timeout);
        if let Some(h) = blocking_hook {
            h(false);
        }
        if !idle {
            // A kernel of the failed run never returned: give up on its core.
            self.replace_stuck_cores();
        }
        self.shared.eng.drain_queues();
    }

    /// The heap addresses of `sizing`'s arena (built if it is not resident).
    pub(crate) fn heap_bases(&mut self, sizing: &RingSizing) -> Result<[u64; 4], RuntimeFailure> {
        let (arena, _) = self.cache.acquire(sizing).map_err(|e| {
            RuntimeFailure::new(
                StatusCode::RuntimeSetup,
                None,
                format!("arena for {sizing}: {e}"),
            )
        })?;
        Ok([0, 1, 2, 3].map(|r| arena.orch.heap_base(r)))
    }

    /// A direct replay (see `engine::replay`): the graph's tasks run on the cores with
    /// predecessor counters, no rings; `job`'s output blocks are in `sizing`'s arena
    /// ([`ChipWorker::heap_bases`]); `peak` is what the report says the rings hold.
    pub(crate) fn run_direct(
        &mut self,
        sizing: &RingSizing,
        blocking_hook: Option<&dyn Fn(bool)>,
        peak: PeakUse,
        job: &DirectJob<'_>,
    ) -> Result<RunReport, RuntimeFailure> {
        let t0 = Instant::now();
        let (arena, acq) = self.cache.acquire(sizing).map_err(|e| {
            RuntimeFailure::new(
                StatusCode::RuntimeSetup,
                None,
                format!("arena for {sizing}: {e}"),
            )
        })?;
        arena.reset();
        let tasks = job.tasks() as u64;
        let sh = &*self.shared;
        sh.eng.drain_queues();
        wait_cores_idle(sh, self.scheduler_timeout);
        *sh.eng.failure.lock() = None;
        sh.eng.fatal.store(false, SeqCst);
        sh.direct
            .store(job as *const DirectJob<'_> as *mut (), Release);
        // One root per core to start with; cores take the others as they go.
        for _ in 0..self.kinds.len() {
            match job.claim_root() {
                Some(i) => sh.eng.push_ready(TaskId(i as u64), job.kind(i)),
                None => break,
            }
        }
        let help_kind = help_kind(&self.kinds);
        let fatal = || sh.eng.fatal.load(Acquire);
        self.direct_local.clear();
        let mut hooked = false;
        let mut seen = sh.eng.completed.load(Relaxed);
        let mut since = Instant::now();
        let mut spins = 0u32;
        while !job.done() && !fatal() {
            if self.orchestrator_helps {
                let mut t = sh.eng.pop_ready(help_kind).map(|t| t.0 as u32);
                if t.is_none() {
                    t = job.claim_root();
                    if let Some(r) = t.filter(|&r| !can_run(help_kind, job.kind(r))) {
                        sh.eng.push_ready(TaskId(r as u64), job.kind(r));
                        t = None;
                    }
                }
                if let Some(mut i) = t {
                    while let Some(n) =
                        direct_step(&sh.eng, job, i, help_kind, None, &mut self.direct_local)
                    {
                        i = n;
                    }
                    continue;
                }
            }
            // A short replay is over within microseconds: spin, then yield (the cores may
            // need this CPU), and sleep only after that (a wake-up costs microseconds).
            if spins < 2000 {
                spins += 1;
                if spins.is_multiple_of(16) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            if !hooked {
                if let Some(h) = blocking_hook {
                    h(true);
                }
                hooked = true;
            }
            sh.eng.progress.wait(
                || job.done() || fatal(),
                Duration::from_millis(50).min(self.scheduler_timeout),
            );
            let c = sh.eng.completed.load(Relaxed);
            if c != seen {
                (seen, since) = (c, Instant::now());
            } else if since.elapsed() >= self.scheduler_timeout && !job.done() {
                sh.eng.fail(self.direct_stall(job));
            }
        }
        if hooked {
            if let Some(h) = blocking_hook {
                h(false);
            }
        }
        let result = if fatal() {
            Err(sh.eng.failure.lock().clone().expect("failure latched"))
        } else {
            Ok(())
        };
        self.settle(result.as_ref().err(), blocking_hook);
        let sh = &*self.shared;
        sh.direct.store(std::ptr::null_mut(), Release);
        result?;
        Ok(RunReport {
            ring_sizing: *sizing,
            peak,
            tasks,
            arena_hit: acq.hit,
            arena_build_s: acq.build_s,
            elapsed_s: t0.elapsed().as_secs_f64(),
            replayed: true,
        })
    }

    /// SCHEDULER_TIMEOUT of a direct replay in which no task completed for the timeout.
    fn direct_stall(&self, job: &DirectJob<'_>) -> RuntimeFailure {
        let running = self
            .shared
            .cores
            .read()
            .iter()
            .enumerate()
            .find_map(|(c, core)| {
                let s = core.state.load(SeqCst);
                (s < CORE_SEARCHING).then_some((c, s as u32))
            });
        let (label, what) = match running {
            Some((c, i)) => {
                let (id, k) = job.head(i);
                (
                    "S1:running-stalled",
                    format!(
                        " stuck_task_id={id:?}{} stuck_core={c}",
                        k.map(|k| format!(" running kernel '{}'", k.name()))
                            .unwrap_or_default()
                    ),
                )
            }
            None if self.shared.eng.ready_len() > 0 => ("S3:ready-but-all-idle", String::new()),
            None => ("S4:dependency-deadlock", String::new()),
        };
        RuntimeFailure::new(
            StatusCode::SchedulerTimeout,
            running.map(|(_, i)| job.head(i).0.ring()),
            format!(
                "no task completed for {} ms in a replay: sub_class={label}{what}",
                self.scheduler_timeout.as_millis()
            ),
        )
    }

    pub(crate) fn run_inner(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        sizing: &RingSizing,
        blocking_hook: Option<&dyn Fn(bool)>,
        diag: &Diagnostics,
    ) -> Result<RunReport, RuntimeFailure> {
        self.run_body(
            &program.name,
            &*program.f,
            args,
            sizing,
            blocking_hook,
            diag,
            None,
            false,
        )
    }

    /// One dispatch of the orchestration `body`. `capture`: a recorder to install for
    /// the run (it is put back when the orchestration returned); `replayed` marks the
    /// report.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_body(
        &mut self,
        name: &str,
        body: &OrchBody<'_>,
        args: &[Arg<'_>],
        sizing: &RingSizing,
        blocking_hook: Option<&dyn Fn(bool)>,
        diag: &Diagnostics,
        mut capture: Option<&mut Option<Box<crate::engine::replay::Recorder>>>,
        replayed: bool,
    ) -> Result<RunReport, RuntimeFailure> {
        let t0 = Instant::now();
        let sh = &*self.shared;
        let (arena, acq) = self.cache.acquire(sizing).map_err(|e| {
            RuntimeFailure::new(
                StatusCode::RuntimeSetup,
                None,
                format!("arena for {sizing}: {e}"),
            )
        })?;
        arena.reset();
        if diag.scope_stats_prefix.is_some() {
            arena.orch.enable_stats();
        }
        if diag.deps_prefix.is_some() {
            arena.orch.enable_deps();
        }
        if let Some(c) = capture.as_deref_mut() {
            arena.orch.install_capture(c.take());
        }
        let tracing = diag.swimlane_prefix.is_some();
        if tracing {
            for c in sh.cores.read().iter() {
                c.lane.lock().clear();
            }
            *sh.trace_t0.lock() = Some(Instant::now());
        }
        sh.trace.store(tracing, SeqCst);
        // Queues were drained when the previous run ended, after its cores went idle;
        // a core may still have popped a stale task just before that drain — it drops
        // it when it sees the fatal flag, which is still up. Wait for that, then
        // publish the arena, then lift the flag.
        sh.eng.drain_queues();
        wait_cores_idle(sh, self.scheduler_timeout);
        sh.arena.store(
            &arena.shared as *const ArenaShared as *mut ArenaShared,
            Release,
        );
        *sh.eng.failure.lock() = None;
        sh.eng.fatal.store(false, SeqCst);
        let completed_at_start = sh.eng.completed.load(SeqCst);

        let help_kind = help_kind(&self.kinds);
        let help_fn = || help_one(sh, &arena.shared, help_kind);
        let help: Option<&dyn Fn() -> bool> = if self.orchestrator_helps && !tracing {
            Some(&help_fn)
        } else {
            None
        };
        let probe = CoreProbe {
            sh,
            arena: &arena.shared,
            completed_at_start,
        };
        let (result, peak, tasks) = {
            let mut o = Orchestrator::new(
                &sh.eng,
                &arena.shared,
                &mut arena.orch,
                *sizing,
                self.policy,
            );
            o.blocking_hook = blocking_hook;
            o.helper = help;
            o.probe = Some(&probe);
            o.count_scope_overflow = !self.node_engine;
            let mut r = o.begin_scope(false);
            if r.is_ok() {
                r = match catch_unwind(AssertUnwindSafe(|| body(&mut o, args))) {
                    Ok(r) => r,
                    Err(p) => Err(RuntimeFailure::new(
                        StatusCode::ExplicitOrchFatal,
                        None,
                        format!(
                            "orchestration of program '{}' panicked: {}",
                            name,
                            panic_text(&p)
                        ),
                    )),
                };
            }
            o.close_all_scopes();
            drop(o);
            if let Some(c) = capture {
                *c = arena.orch.take_capture();
            }
            if let Err(e) = &r {
                sh.eng.fail(e.clone());
            }
            (r, arena.orch.peaks(), arena.orch.tasks())
        };

        let submitted = tasks;
        let result = result.and_then(|()| {
            wait_retired(
                sh,
                &arena.shared,
                blocking_hook,
                help,
                self.scheduler_timeout,
                submitted,
                completed_at_start,
            )
        });
        let result = match result {
            Ok(()) => Ok(()),
            Err(e) => {
                sh.eng.fail(e);
                Err(sh.eng.failure.lock().clone().expect("failure latched"))
            }
        };
        self.settle(result.as_ref().err(), blocking_hook);
        let sh = &*self.shared;
        sh.arena.store(std::ptr::null_mut(), Release);
        sh.trace.store(false, SeqCst);
        if let Some(prefix) = &diag.scope_stats_prefix {
            // The arena is idle now; its orchestrator state holds the samples.
            let (arena, _) = self
                .cache
                .acquire_resident(sizing)
                .expect("the run's arena is resident");
            write_stats(prefix, sizing, &arena.orch, result.as_ref().err());
        }
        if let Some(prefix) = &diag.deps_prefix {
            let (arena, _) = self
                .cache
                .acquire_resident(sizing)
                .expect("the run's arena is resident");
            if let Err(e) = crate::dfx::write_deps(prefix, arena.orch.deps.as_deref()) {
                eprintln!(
                    "taskring: could not write deps.json under {}: {e}",
                    prefix.display()
                );
            }
        }
        if let Some(prefix) = &diag.swimlane_prefix {
            let cores = self.shared.cores.read();
            let mut events = vec![];
            let mut names = vec![];
            for (i, c) in cores.iter().enumerate() {
                names.push(format!(
                    "core {i} ({})",
                    match c.kind {
                        CoreKind::Aic => "AIC",
                        CoreKind::Aiv => "AIV",
                        CoreKind::Any => "any",
                    }
                ));
                events.extend(c.lane.lock().drain(..));
            }
            if let Err(e) = crate::dfx::write_swimlane(prefix, &events, &names) {
                eprintln!(
                    "taskring: could not write merged_swimlane.json under {}: {e}",
                    prefix.display()
                );
            }
        }
        result?;
        Ok(RunReport {
            ring_sizing: *sizing,
            peak,
            tasks,
            arena_hit: acq.hit,
            arena_build_s: acq.build_s,
            elapsed_s: t0.elapsed().as_secs_f64(),
            replayed,
        })
    }
}

/// Wait until every ring's watermark reached its last submitted task (or a failure,
/// or `timeout` without any task completing: SCHEDULER_TIMEOUT with its sub-class).
fn wait_retired(
    sh: &ChipShared,
    a: &ArenaShared,
    hook: Option<&dyn Fn(bool)>,
    help: Option<&dyn Fn() -> bool>,
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
        while !all_retired() && !fatal() && h() {}
    }
    for _ in 0..200 {
        if all_retired() || fatal() {
            break;
        }
        std::hint::spin_loop();
    }
    if !all_retired() && !fatal() {
        if let Some(h) = hook {
            h(true);
        }
        let mut seen = sh.eng.completed.load(Relaxed);
        let mut since = Instant::now();
        while !all_retired() && !fatal() {
            // Tasks may have become ready since (their producers ran on the cores).
            if let Some(h) = help {
                if h() {
                    seen = sh.eng.completed.load(Relaxed);
                    since = Instant::now();
                    continue;
                }
            }
            sh.eng.progress.wait(
                || all_retired() || fatal(),
                Duration::from_millis(50).min(timeout),
            );
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

/// The chip's answer to the orchestrator's backstop (see `ExecutorProbe`): sampled
/// only while the orchestrator waits for ring space. A core's `state` already says
/// which task it runs, so the cores' hot path pays nothing for it.
struct CoreProbe<'a> {
    sh: &'a ChipShared,
    arena: &'a ArenaShared,
    completed_at_start: u64,
}

impl ExecutorProbe for CoreProbe<'_> {
    fn busy(&self) -> bool {
        self.sh.eng.ready_len() > 0
            || self
                .sh
                .cores
                .read()
                .iter()
                .any(|c| c.state.load(SeqCst) < CORE_SEARCHING)
    }
    fn stall(&self, timeout: Duration, submitted: u64) -> RuntimeFailure {
        let completed = self.sh.eng.completed.load(SeqCst) - self.completed_at_start;
        classify_stall(self.sh, self.arena, timeout, submitted, completed, false)
    }
}
