//! A direct replay on a chip: open it (the cores see the job), help with its tasks on
//! the caller's thread, wait for its end (or its stall), settle and report.

use super::job::DirectJob;
use super::step::{direct_step, report_sinks};
use crate::chip::core::{help_kind, wait_cores_idle};
use crate::chip::deque::{can_run, DirectLocal, DirectRun};
use crate::chip::policy::{Help, RunPolicy};
use crate::chip::run::{acquire_arena, partly_written, tick, HOOK_TICK};
use crate::chip::spin::SpinThenPark;
use crate::chip::{ChipShared, ChipWorker, RunReport};
use crate::config::RingSizing;
use crate::engine::{PeakUse, RuntimeFailure, StatusCode};
use crate::kernel::CoreKind;
use crate::sync::Ordering::*;
use crate::tensor::TaskId;
use std::time::{Duration, Instant};

impl ChipWorker {
    /// A direct replay (see `replay`): the graph's tasks run on the cores with
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
        let (arena, acq) = acquire_arena(&mut self.cache, sizing)?;
        arena.reset();
        // A caller that helps takes the first root itself: a graph of one root (a chain)
        // then runs on it from the start, not on a core woken for it (in B9 a core,
        // awake from the run before, often won the race for that root and ran the chain
        // with a core's per-task state word and progress counter: 17-20 instead of
        // 12-14 ns per task).
        let helps = self.direct_helps(job);
        let cores = self
            .kinds
            .len()
            .min(job.roots().saturating_sub(helps as usize));
        // What the cores read while the replay runs (`ChipShared::direct` points here,
        // until the store of null below).
        let run: &dyn DirectRun = job;
        open_direct(&self.shared, job, &run, cores, self.scheduler_timeout);
        self.wait_direct(job, blocking_hook);
        let sh = &*self.shared;
        let result = if sh.eng.fatal.load(Acquire) {
            Err(sh.eng.failure.lock().clone().expect("failure latched"))
        } else {
            Ok(())
        };
        self.settle(result.as_ref().err(), blocking_hook, sizing, Some(job));
        self.shared.direct.store(std::ptr::null_mut(), Release);
        self.shared.direct_quiet.store(0, Relaxed);
        self.set_aside_arenas();
        result.map_err(partly_written)?;
        Ok(RunReport {
            ring_sizing: *sizing,
            peak,
            tasks: job.tasks() as u64,
            arena_hit: acq.hit,
            arena_build_s: acq.build_s,
            elapsed_s: t0.elapsed().as_secs_f64(),
            replayed: true,
            device_memory: self.device_memory(sizing),
        })
    }

    /// Does the caller run tasks of the direct replay `job` while it waits? As in a
    /// run's wait, by the chip's policy: with `orchestrator_helps`, else only when every
    /// kernel of the graph is bounded.
    fn direct_helps(&self, job: &DirectJob<'_>) -> bool {
        match self.policy.help() {
            Help::Any => true,
            Help::Bounded => job.all_bounded(),
            Help::Never => false,
        }
    }

    /// Wait until a direct replay is done or failed: help with its tasks when the
    /// orchestrator helps or every kernel of the graph is bounded (then only while a
    /// core is idle), spin ([`DIRECT_SPIN`]), then park on the engine's progress signal
    /// with the hook's release on; no task completing for the scheduler timeout fails
    /// the replay (SCHEDULER_TIMEOUT, [`ChipWorker::direct_stall`]).
    fn wait_direct(&mut self, job: &DirectJob<'_>, blocking_hook: Option<&dyn Fn(bool)>) {
        let sh = &*self.shared;
        let help_kind = help_kind(&self.kinds);
        let helps = self.direct_helps(job);
        let fatal = || sh.eng.fatal.load(Acquire);
        self.direct_local.clear();
        let mut hooked = false;
        // The stall clock: the cores' direct-replay progress, and this thread's help.
        let progress = || {
            sh.cores
                .read()
                .iter()
                .map(|c| c.progress.load(Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        let mut seen = progress();
        let mut since = Instant::now();
        let mut spins = 0u32;
        // The first look takes the root `run_direct` left for this thread, whatever
        // the cores do (no core would take it before it ran out of work).
        let mut first = true;
        while !job.done() && !fatal() {
            // Without `orchestrator_helps`, only while a core is idle: with every core
            // busy a third thread on their CPUs only slows them (B9 `independent`:
            // 20 -> 44-55 ns per task when it helped throughout).
            let all_in = self.policy.help() == Help::Any;
            let stay = || all_in || sh.eng.idle_cores() > 0;
            if helps
                && (std::mem::take(&mut first) || stay())
                && help_direct(sh, job, help_kind, &mut self.direct_local, &stay)
            {
                since = Instant::now();
                continue;
            }
            if spins < DIRECT_SPIN.checks {
                spins += 1;
                DIRECT_SPIN.pause(spins);
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
                HOOK_TICK.min(self.scheduler_timeout),
            );
            tick(blocking_hook);
            let c = progress();
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
                crate::chip::abort::task_of(core.state.load(SeqCst)).map(|t| (c, t.0 as u32))
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
}

/// Open a direct replay: wait until no core holds a task of the previous run, clear
/// its failure, install `job` (`run`, the job as the cores run it: queued task ids are
/// now indices into its graph) and queue one root per core (`cores`); the cores take
/// the others as they go.
fn open_direct(
    sh: &ChipShared,
    job: &DirectJob<'_>,
    run: &&dyn DirectRun,
    cores: usize,
    timeout: Duration,
) {
    sh.eng.drain_queues();
    // What a failed replay left in the deques (a core given up on leaves its own): a
    // core stealing it now still reads `fatal` set and drops it; after the wait below
    // none is left to steal.
    sh.thieves.drain();
    wait_cores_idle(sh, timeout);
    sh.interrupted.store(false, SeqCst);
    crate::chip::abort::reopen(&sh.eng);
    let quiet = job.quiet();
    sh.direct_quiet.store(
        (0..3).filter(|&k| quiet[k]).fold(0u8, |m, k| m | 1 << k),
        Relaxed,
    );
    sh.direct
        .store(run as *const &dyn DirectRun as *mut (), Release);
    for _ in 0..cores {
        match job.claim_root() {
            Some(i) => sh.eng.push_ready(TaskId(i as u64), job.kind(i)),
            None => break,
        }
    }
}

/// The orchestrator's help in a direct replay: take a root nobody took yet (or else a
/// ready task) that a core of `kind` could run and run it, and the chain of successors
/// it makes ready here ([`direct_step`]) while `stay()`; then the rest goes back to the
/// cores. Returns whether it ran one.
fn help_direct(
    sh: &ChipShared,
    job: &DirectJob<'_>,
    kind: CoreKind,
    local: &mut DirectLocal,
    stay: &dyn Fn() -> bool,
) -> bool {
    let eng = &sh.eng;
    // Roots nobody took yet first: a root queued for a core at the opening is that
    // core's only way in (cores claim further roots only after a task of their own),
    // so taking it from the queue would leave the core idle.
    let mut t = job.claim_root();
    if let Some(r) = t.filter(|&r| !can_run(kind, job.kind(r))) {
        eng.push_ready(TaskId(r as u64), job.kind(r));
        t = None;
    }
    if t.is_none() {
        t = eng.pop_ready(kind).map(|t| t.0 as u32);
    }
    if t.is_none() {
        t = sh.thieves.steal(0, kind, eng);
    }
    let Some(mut i) = t else {
        return false;
    };
    // `stay()` is asked every 16 tasks (it reads the sleep counters: a tenth of the
    // instructions of a chain's task when asked each time).
    while let Some(n) = direct_step(eng, &sh.thieves, job, i, kind, None, local, 16) {
        if !stay() {
            // Hand the rest to the cores: the next task and this thread's own stack;
            // and report the sinks counted here.
            eng.push_ready(TaskId(n as u64), job.kind(n));
            local.hand_back(eng);
            report_sinks(local, eng, job);
            break;
        }
        i = n;
    }
    true
}

/// How a direct replay's caller waits before it parks: a short replay is over within
/// microseconds, so spin, yielding on every 16th look (the cores may need this CPU), and
/// sleep only after 2000 looks (a wake-up costs microseconds).
const DIRECT_SPIN: SpinThenPark = SpinThenPark {
    checks: 2000,
    spin_checks: u32::MAX,
    yield_every: 16,
    backoff: 1,
};
