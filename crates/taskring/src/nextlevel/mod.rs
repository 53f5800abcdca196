//! The next level: one engine whose tasks are whole dispatches on workers of the level
//! below — L3 (a node: L2 tasks on chip processes, [`crate::node`]) and L4 (rank 0 of a
//! cluster: L3 tasks on host ranks, `crate::cluster`). Everything but the round trip is
//! one piece of code for both:
//!
//! - [`args`]: a submit's arguments, checked with one set of messages, in the engine's
//!   canonical order (inputs, inouts, outputs);
//! - [`Orch`]: the orchestration API of a run (`submit_next_level`), which records each
//!   task ([`Rec`]) in the run's state and submits it to its worker's lane;
//! - [`Lane`]: the engine's kernel, one per lane: a worker `w`'s ready tasks go to lane
//!   `w % lanes`, whose dispatch threads take only them, so a worker's backlog holds up
//!   no other worker. It claims a task, hands it to the level's [`Executor`] for the
//!   round trip, and records the outcome;
//! - [`Level`]: the engine, the lanes' kernels and a run (reset, the caller's hook,
//!   inline help at the end, the wait, the outcome);
//! - [`hook`]: the caller's hook around blocking waits.
//!
//! An [`Executor`] is what differs: the node's ships a task through a chip's shared
//! memory mailbox, rank 0's over MPI to a host.

pub(crate) mod args;
pub(crate) mod hook;

use args::{task_args, Slot};
pub use args::{ArgDir, NextLevelArg};
use hook::{help_at_end, wait_over, HookRef};

use crate::chip::policy::{Help, RunPolicy};
use crate::chip::spin::SpinThenPark;
use crate::chip::{ChipOptions, ChipWorker, Program, RunError};
use crate::config::{CallConfig, ConfigError};
use crate::dfx::clock::{gettid, mono_ns};
use crate::engine::{Orchestrator, RuntimeFailure, Scalar, StatusCode};
use crate::kernel::{Kernel, KernelCall, KernelRef};
use crate::tensor::{TaskId, Tensor};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

/// The engine's timeouts at a next level: a year (none, in effect).
const NO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// What one level does with a task: its workers, its rule for tensor arguments, the round
/// trip of one task and its timeline.
pub(crate) trait Executor: Send + Sync + Sized + 'static {
    /// What a traced dispatch records of itself for the timeline.
    type Traced: Send;
    /// A worker's failure; the run's first one is its error.
    type Fault: Clone + std::fmt::Display + Send;
    /// What the run reports of one task.
    type Report: Send;

    /// The lanes' kernel name.
    const KERNEL: &'static str;
    /// The name of a run's program on the level's own engine.
    const PROGRAM: &'static str;
    /// How a bad worker index is described: `worker {w} is not {WORKER_OF} (it has n)`.
    const WORKER_OF: &'static str;
    /// How a program handle is called in `unknown {HANDLE} handle {h}`.
    const HANDLE: &'static str;
    /// How the run's thread looks for the end of its dispatches before it blocks.
    const WAIT_SPIN: SpinThenPark;
    /// Whether a traced run's dispatches still queued at the end run on the run's thread
    /// (the node gives each dispatch of a traced run a dispatch thread's lane).
    const INLINE_WHEN_TRACED: bool;

    /// Number of workers.
    fn workers(&self) -> usize;
    /// The run's cancel flag (the executor's waits consult it).
    fn cancel_flag(&self) -> &AtomicBool;
    /// The signature of program `callable`, if there is one.
    fn signature(&self, callable: u32) -> Option<Vec<ArgDir>>;
    /// The lane of `worker`'s tasks, of `lanes`.
    fn lane(&self, worker: usize, lanes: usize) -> usize {
        worker % lanes
    }
    /// The level's rule for tensor argument `i` of a task for `worker`: the view the
    /// engine tracks and the id of a host-resident tensor.
    fn tensor_arg(
        &self,
        i: usize,
        arg: &NextLevelArg,
        worker: usize,
    ) -> Result<(Tensor, Option<u64>), String>;
    /// Before a run: e.g. wait for a worker's late reply to an interrupted run. `Err` is
    /// the text of the run's `Interrupted` error.
    fn before_run(&self, _hook: Option<&dyn Fn(bool)>) -> Result<(), String> {
        Ok(())
    }
    /// One task's round trip (`traced_from`: the dispatch's start in a traced run).
    fn dispatch(
        &self,
        rec: Rec,
        call: &KernelCall<'_>,
        traced_from: Option<u64>,
    ) -> Dispatched<Self>;
    /// Write a traced run's timeline (a failure is reported on stderr: the run's outcome
    /// does not depend on it).
    fn write_timeline(&self, trace: RunTrace<Self::Traced>, tasks: &[Rec]);
}

/// What a dispatch ended with.
pub(crate) struct Dispatched<X: Executor> {
    pub(crate) report: X::Report,
    /// The task failed (`report` says so too).
    pub(crate) fault: Option<X::Fault>,
    /// In a traced run, the dispatch's own record.
    pub(crate) traced: Option<X::Traced>,
}

/// One task of a run: its worker, its program and the whole config it carries, and
/// where its arguments are.
#[derive(Clone, Debug)]
pub(crate) struct Rec {
    pub(crate) worker: usize,
    pub(crate) callable: u32,
    /// In a traced run, every task records its worker's timeline too (under its own
    /// prefix, else the run's).
    pub(crate) config: CallConfig,
    pub(crate) slots: Vec<Slot>,
}

/// A traced run's record: its prefix, start, the orchestration's thread and each task's
/// submit and dispatch.
pub(crate) struct RunTrace<D> {
    /// The run's `output_prefix` (where the timeline goes).
    pub(crate) prefix: String,
    pub(crate) t0_ns: u64,
    pub(crate) orch_tid: u64,
    /// One per task, as `RunState::tasks`.
    pub(crate) tasks: Vec<TaskTrace<D>>,
}

/// One task on a traced run's timeline.
pub(crate) struct TaskTrace<D> {
    /// `(start, end)` of its `submit_next_level`.
    pub(crate) submit: Option<(u64, u64)>,
    pub(crate) dispatch: Option<D>,
}

impl<D> Default for TaskTrace<D> {
    fn default() -> Self {
        TaskTrace {
            submit: None,
            dispatch: None,
        }
    }
}

/// The state of the run in flight.
pub(crate) struct RunState<X: Executor> {
    pub(crate) tasks: Vec<Rec>,
    reports: Vec<Option<X::Report>>,
    /// Tasks whose dispatch ended (replied, failed or given up).
    finished: usize,
    /// Dispatches under way.
    in_flight: usize,
    first_fault: Option<X::Fault>,
    /// The run's timeline while it is recorded.
    trace: Option<RunTrace<X::Traced>>,
}

impl<X: Executor> RunState<X> {
    /// Task entries whose memory a level keeps between runs.
    const KEEP: usize = 1 << 16;

    fn new() -> Self {
        RunState {
            tasks: vec![],
            reports: vec![],
            finished: 0,
            in_flight: 0,
            first_fault: None,
            trace: None,
        }
    }

    /// A new run's state, keeping the task and report vectors' memory (a run of 20 000
    /// tasks grew them from nothing each time: ~1 KiB of copies and fresh pages per
    /// task), up to [`RunState::KEEP`] entries.
    fn reset(&mut self, trace: Option<RunTrace<X::Traced>>) {
        self.tasks.clear();
        self.reports.clear();
        if self.tasks.capacity() > Self::KEEP {
            self.tasks.shrink_to(Self::KEEP);
            self.reports.shrink_to(Self::KEEP);
        }
        self.finished = 0;
        self.in_flight = 0;
        self.first_fault = None;
        self.trace = trace;
    }

    /// Nothing more to wait for: every task dispatched, or the run failed and the
    /// dispatches already under way ended.
    fn over(&self) -> bool {
        self.finished >= self.tasks.len() || (self.first_fault.is_some() && self.in_flight == 0)
    }
}

/// What the run's thread, the lanes and the level's handles share.
pub(crate) struct Shared<X: Executor> {
    pub(crate) exec: X,
    /// The run in flight records its timeline (`RunState::trace` is set).
    tracing: AtomicBool,
    pub(crate) run: Mutex<RunState<X>>,
    /// Notified when the run's last dispatch ends, and by `cancel`.
    pub(crate) done: Condvar,
}

impl<X: Executor> Shared<X> {
    /// Cancel the run in flight: the executor's waits give up, the run's wait ends and
    /// the run fails as interrupted. Cleared when the next run starts.
    pub(crate) fn cancel(&self) {
        self.exec.cancel_flag().store(true, SeqCst);
        self.done.notify_all();
    }

    fn cancelled(&self) -> bool {
        self.exec.cancel_flag().load(Acquire)
    }
}

/// The engine's kernel of one lane: a ready task's dispatch.
struct Lane<X: Executor> {
    sh: Arc<Shared<X>>,
    lane: usize,
}

impl<X: Executor> Kernel for Lane<X> {
    fn name(&self) -> &str {
        X::KERNEL
    }
    fn ready_queue(&self) -> usize {
        crate::engine::shared::lane_queue(self.lane)
    }
    /// Claim the task, the round trip, then record its report, fault and trace.
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        let idx = call.scalar_i64(0) as usize;
        // Timestamps only for a traced run (clock reads per dispatch otherwise).
        let start_ns = self.sh.tracing.load(Relaxed).then(mono_ns);
        let rec = {
            let mut st = self.sh.run.lock();
            st.in_flight += 1;
            st.tasks[idx].clone()
        };
        let d = self.sh.exec.dispatch(rec, call, start_ns);
        let text = d.fault.as_ref().map(ToString::to_string);
        let mut st = self.sh.run.lock();
        if let (Some(t), Some(tt)) = (
            d.traced,
            st.trace.as_mut().and_then(|t| t.tasks.get_mut(idx)),
        ) {
            tt.dispatch = Some(t);
        }
        st.finished += 1;
        st.in_flight -= 1;
        if idx < st.reports.len() {
            st.reports[idx] = Some(d.report);
        }
        if let Some(f) = d.fault {
            if st.first_fault.is_none() {
                st.first_fault = Some(f);
            }
        }
        // The run's waiter wants only the end: waking it for each of a long run's tasks
        // cost a futex wake and a context switch per task.
        if st.over() {
            self.sh.done.notify_all();
        }
        text.map_or(Ok(()), Err)
    }
}

/// The orchestration API of a next-level run (the levels' public orchestrators wrap it).
pub(crate) struct Orch<'a, 'r, X: Executor> {
    pub(crate) o: &'a mut Orchestrator<'r>,
    pub(crate) sh: &'a Shared<X>,
    /// The dispatch kernel of each lane.
    dispatch: &'a [KernelRef],
}

impl<'r, X: Executor> Orch<'_, 'r, X> {
    /// The same orchestrator for a shorter borrow.
    pub(crate) fn reborrow(&mut self) -> Orch<'_, 'r, X> {
        Orch {
            o: &mut *self.o,
            sh: self.sh,
            dispatch: self.dispatch,
        }
    }

    /// Submit the task `callable(args)` to `worker`, which runs it with `config` whole;
    /// the directions of its arguments are `dirs`, else `callable`'s signature.
    pub(crate) fn submit_with(
        &mut self,
        callable: u32,
        dirs: Option<&[ArgDir]>,
        args: &[NextLevelArg],
        config: &CallConfig,
        worker: usize,
    ) -> Result<TaskId, RuntimeFailure> {
        let sh = self.sh;
        let start_ns = sh.tracing.load(Relaxed).then(mono_ns);
        let bad =
            |msg: String| RuntimeFailure::invalid_args(None, format!("submit_next_level: {msg}"));
        let workers = sh.exec.workers();
        if worker >= workers {
            return Err(bad(format!(
                "worker {worker} is not {} (it has {workers})",
                X::WORKER_OF
            )));
        }
        config.validate().map_err(|e| bad(e.message))?;
        let sig = match dirs {
            Some(d) => d.to_vec(),
            None => sh
                .exec
                .signature(callable)
                .ok_or_else(|| bad(format!("unknown {} handle {callable}", X::HANDLE)))?,
        };
        let (slots, mut ta) =
            task_args(&sig, args, |i, a| sh.exec.tensor_arg(i, a, worker)).map_err(bad)?;
        let idx = {
            let mut st = sh.run.lock();
            let mut config = config.clone();
            if let Some(t) = st.trace.as_mut() {
                config.enable_chip_swimlane = config.enable_chip_swimlane.max(1);
                if config.output_prefix.is_empty() {
                    config.output_prefix = t.prefix.clone();
                }
                t.tasks.push(TaskTrace::default());
            }
            st.tasks.push(Rec {
                worker,
                callable,
                config,
                slots,
            });
            st.reports.push(None);
            st.tasks.len() - 1
        };
        ta.scalar(Scalar::I64(idx as i64));
        let lane = &self.dispatch[sh.exec.lane(worker, self.dispatch.len())];
        let r = self.o.submit(*lane, &ta).map(|r| r.id);
        let mut st = sh.run.lock();
        if r.is_err() {
            // Never dispatched: not a task of the run (the run waits for its tasks).
            st.tasks.truncate(idx);
            st.reports.truncate(idx);
            if let Some(t) = st.trace.as_mut() {
                t.tasks.truncate(idx);
            }
        } else if let (Some(s), Some(t)) = (
            start_ns,
            st.trace.as_mut().and_then(|t| t.tasks.get_mut(idx)),
        ) {
            t.submit = Some((s, mono_ns()));
        }
        r
    }
}

/// Why a next-level run failed; each level names it in its own error type.
pub(crate) enum LevelError<F> {
    /// The level was closed.
    Closed,
    /// The run was cancelled: the first worker's failure, else `interrupted`.
    Interrupted(String),
    Config(ConfigError),
    /// A worker's own failure ended the run (TASK_FAILED).
    Worker(F),
    Failure(RuntimeFailure),
}

/// How a level's engine is built: its dispatch threads and lanes, its arena cache.
pub(crate) struct LevelOptions {
    /// Dispatch threads (the engine's "cores"); thread `i` serves lane `i % lanes`.
    pub(crate) threads: usize,
    /// Lane queues: a worker `w`'s ready tasks go to lane `w % lanes`.
    pub(crate) lanes: usize,
    pub(crate) arena_cache_slots: usize,
    /// What the engine's arenas are charged against (`ChipOptions::device_memory`).
    pub(crate) device_memory: u64,
}

/// How a level's run cycle goes (`chip::policy`): the orchestrator's thread runs no task
/// while it waits (a task is a whole dispatch on a worker) except, once its program has
/// nothing more to submit, a lone queued dispatch; a scope's overflow fails at once (a
/// task is recorded in the run's state when it is submitted); `"auto"` sizes are not
/// learned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LevelPolicy;

impl RunPolicy for LevelPolicy {
    const HELPS_AT_END: bool = true;
    const COUNTS_SCOPE_OVERFLOW: bool = false;
    const LEARNS_SIZING: bool = false;

    fn help(&self) -> Help {
        Help::Never
    }
}

/// A level's engine, its lanes' kernels and the state they share.
pub(crate) struct Level<X: Executor> {
    pub(crate) sh: Arc<Shared<X>>,
    engine: Option<ChipWorker>,
    policy: LevelPolicy,
    /// One dispatch kernel per lane (leaked boxes, taken back in `close`).
    dispatch: Option<Arc<[KernelRef]>>,
}

impl<X: Executor> Level<X> {
    /// The engine (`opts`: its dispatch threads and lanes) over `exec`; on a failure,
    /// `exec` back with the engine's error.
    pub(crate) fn new(exec: X, opts: LevelOptions) -> Result<Level<X>, (RuntimeFailure, X)> {
        let chip = ChipOptions {
            cores: opts.threads,
            aic_cores: Some(0),
            arena_cache_slots: opts.arena_cache_slots,
            // A task is a whole dispatch of the level below: no L2-sized timeouts (a
            // dead worker is caught by the level's executor; a worker's own hangs by its
            // own timeouts).
            backstop: NO_TIMEOUT,
            scheduler_timeout: NO_TIMEOUT,
            device_memory: opts.device_memory,
            ..ChipOptions::default()
        };
        let engine = match ChipWorker::next_level_engine(chip, opts.lanes) {
            Ok(e) => e,
            Err(e) => return Err((e, exec)),
        };
        let sh = Arc::new(Shared {
            exec,
            tracing: AtomicBool::new(false),
            run: Mutex::new(RunState::new()),
            done: Condvar::new(),
        });
        // The kernels hold the shared state, which the level owns: their boxes are taken
        // back in `close`, after the engine (else each level would stay alive, and its
        // workers' endpoints with it, for the life of the process).
        let dispatch: Arc<[KernelRef]> = (0..engine.lanes())
            .map(|lane| {
                KernelRef::leak(Lane {
                    sh: sh.clone(),
                    lane,
                })
            })
            .collect();
        Ok(Level {
            sh,
            engine: Some(engine),
            policy: LevelPolicy,
            dispatch: Some(dispatch),
        })
    }

    /// The level's own engine (its arena cache); None once closed.
    pub(crate) fn engine(&self) -> Option<&ChipWorker> {
        self.engine.as_ref()
    }

    /// Run `orch`, the level's orchestration, on the calling thread; `config` sizes the
    /// level's own rings. `hook` is called around every blocking wait of the calling
    /// thread (`true` before, `false` after; at least every 50 ms while the run waits
    /// for its workers). The reports of the run's tasks, in submission order.
    pub(crate) fn run(
        &mut self,
        orch: impl Fn(&mut Orch<'_, '_, X>) -> Result<(), RuntimeFailure> + Send + Sync + 'static,
        config: &CallConfig,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<Vec<X::Report>, LevelError<X::Fault>> {
        let policy = self.policy;
        let engine = self.engine.as_mut().ok_or(LevelError::Closed)?;
        let sh = &*self.sh;
        sh.exec.cancel_flag().store(false, SeqCst);
        sh.exec.before_run(hook).map_err(LevelError::Interrupted)?;
        // A traced run's own swimlane is the level's timeline (written below); the
        // engine records none of its own.
        let traced = config.enable_chip_swimlane > 0 && !config.output_prefix.is_empty();
        let mut engine_config = config.clone();
        if traced {
            engine_config.enable_chip_swimlane = 0;
        }
        sh.run.lock().reset(traced.then(|| RunTrace {
            prefix: config.output_prefix.clone(),
            t0_ns: mono_ns(),
            orch_tid: gettid(),
            tasks: vec![],
        }));
        sh.tracing.store(traced, SeqCst);
        let shared = self.sh.clone();
        let dispatch = self
            .dispatch
            .clone()
            .expect("an open level has its dispatch kernels");
        // safety: the program (and so this reference) lives only during this call; the
        // engine runs it on this thread and keeps nothing of it after `dispatch`.
        let hook_ref = unsafe { HookRef::erase(hook) };
        let inline = !traced || X::INLINE_WHEN_TRACED;
        let program = Program::new(X::PROGRAM, move |o, _| {
            let mut g = Orch {
                o,
                sh: &shared,
                dispatch: &dispatch,
            };
            orch(&mut g)?;
            g.o.publish_ready();
            // Dispatches still queued run here, on this thread: a one-task run then
            // costs no hand-off to a dispatch thread and back.
            let o = &*g.o;
            let help = || o.help_at_end();
            help_at_end(
                inline.then_some(&help as &dyn Fn() -> bool),
                hook_ref.get(),
                || shared.cancelled(),
            );
            // What the help left goes to the dispatch threads, whose wake-up the
            // submits only owed.
            g.o.pay_wakes();
            // Wait for the dispatched tasks here rather than in the engine: this wait
            // calls the hook every slice (how a Python caller sees Ctrl-C). Woken once,
            // by the dispatch that ends the run or by `cancel`.
            let over = |st: &RunState<X>| st.over() || shared.cancelled();
            wait_over(
                &shared.run,
                &shared.done,
                over,
                X::WAIT_SPIN,
                hook_ref.get(),
            );
            Ok(())
        });
        let r = engine.dispatch(policy, &program, &[], &engine_config, hook);
        sh.tracing.store(false, SeqCst);
        let mut st = sh.run.lock();
        if let Some(t) = st.trace.take() {
            sh.exec.write_timeline(t, &st.tasks);
        }
        // An interrupt first, then a worker's own failure for TASK_FAILED, else the
        // engine's.
        match r {
            _ if sh.cancelled() => Err(LevelError::Interrupted(
                st.first_fault
                    .take()
                    .map_or_else(|| "interrupted".into(), |f| f.to_string()),
            )),
            Ok(_) => Ok(st
                .reports
                .drain(..)
                .map(|r| r.expect("every task reported"))
                .collect()),
            Err(RunError::Config(e)) => Err(LevelError::Config(e)),
            Err(RunError::Failure(f)) => match st.first_fault.take() {
                Some(fault) if f.code == StatusCode::TaskFailed => Err(LevelError::Worker(fault)),
                _ => Err(LevelError::Failure(f)),
            },
        }
    }

    /// Free the engine and the lanes' kernels (no run may be in flight).
    pub(crate) fn close(&mut self) {
        self.engine = None;
        if let Some(ks) = self.dispatch.take() {
            for k in ks.iter() {
                // safety: `k` was leaked from a box in `new`; the engine that could use
                // it is gone and no run is in flight, so nothing refers to it any more.
                drop(unsafe { Box::from_raw(k.0 as *const dyn Kernel as *mut dyn Kernel) });
            }
        }
    }

    /// Forget everything without freeing it (in a child of `fork()`: the engine's
    /// threads do not exist there, and what the level refers to is the parent's).
    pub(crate) fn forget(&mut self) {
        std::mem::forget(self.engine.take());
        std::mem::forget(self.dispatch.take());
        std::mem::forget(self.sh.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::LevelPolicy;
    use crate::chip::run::Dispatch;
    use crate::chip::{ChipOptions, ChipWorker, Diagnostics, Program};
    use crate::config::RingSizing;
    use crate::engine::{StatusCode, TaskArgs};
    use crate::kernel::builtin::NOOP;
    use std::time::Duration;

    /// A level's engine records each task at submit: there a scope overflow fails at the
    /// overflowing submit, with a lower bound, and nothing after it runs.
    #[test]
    fn a_level_reports_a_scope_deadlock_at_once() {
        let opts = ChipOptions {
            cores: 2,
            backstop: Duration::from_secs(120),
            ..Default::default()
        };
        let mut w = ChipWorker::next_level_engine(opts, 0).unwrap();
        let prog = Program::new("eight_in_one_scope", |o, _| {
            o.scope(|o| {
                for i in 0..8 {
                    if let Err(e) = o.submit(NOOP, &TaskArgs::new()) {
                        assert_eq!(i, 3, "the fourth submit fails");
                        return Err(e);
                    }
                }
                Ok(())
            })
        });
        let sizing = RingSizing::uniform(4, 4096, 16).unwrap();
        let diag = Diagnostics::default();
        let e = w
            .cycle(
                LevelPolicy,
                Dispatch::program(&prog, &[], &sizing, None, &diag),
            )
            .unwrap_err();
        assert_eq!(e.code, StatusCode::ScopeDeadlock, "{e}");
        assert_eq!(e.needed, None, "{e}");
        assert!(
            e.detail
                .contains("submitted at least 4 tasks (the rest of the scope was not counted)"),
            "{e}"
        );
        assert!(
            e.detail
                .contains("a ring_task_window of at least 8 slots is needed"),
            "{e}"
        );
    }
}
