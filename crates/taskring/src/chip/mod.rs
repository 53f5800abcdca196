//! L2: a simulated chip — the engine plus core threads that run kernels — and
//! [`ChipWorker`], the resident chip a user dispatches programs to.
//!
//! Core threads (AIC and AIV kinds; by default one per available CPU) pull ready tasks,
//! run their kernels, and do the completion work themselves (fanout release, ready push,
//! consumed check, watermark advance): there is no separate scheduler thread. A core
//! keeps the first consumer its completion made ready and runs it next (no queue round
//! trip on chains). Idle cores spin briefly, yield, then park on a condition variable;
//! pushes wake them. Nothing burns a core while idle.
//!
//! A run: take (or build) the arena of the dispatch's sizing from the chip's
//! [`ArenaCache`], reset it, run the orchestration on the caller's thread inside the root
//! scope (depth 0), close the scopes, wait until every task retired, report. On any
//! failure the run is aborted: cores stop running kernels and discard queued tasks, the
//! caller waits until no core holds a task, and the chip is ready for the next run.

use crate::arena::{ArenaCache, ArenaStats};
use crate::config::{CallConfig, ConfigError, RingSizing};
use crate::engine::orch::{ExecutorProbe, WaitPolicy};
use crate::engine::replay::DirectJob;
use crate::engine::shared::{ArenaShared, EngineShared};
use crate::engine::{Orchestrator, PeakUse, RuntimeFailure, Scalar, StatusCode};
use crate::kernel::{CoreKind, KernelCall};
use crate::tensor::{DType, TaskId, Tensor};
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A host tensor handed to a run: a view over caller memory that outlives the run.
#[derive(Clone, Copy, Debug)]
pub struct HostTensor<'a> {
    tensor: Tensor,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> HostTensor<'a> {
    /// A tensor over `data` with `shape` (row-major). Panics if the shape does not
    /// match the slice length.
    pub fn f32(data: &'a mut [f32], shape: &[u32]) -> HostTensor<'a> {
        let n: u64 = shape.iter().map(|&d| d as u64).product();
        assert_eq!(
            n as usize,
            data.len(),
            "shape {shape:?} does not match {} elements",
            data.len()
        );
        HostTensor {
            tensor: Tensor::from_raw(data.as_mut_ptr() as u64, shape, DType::F32),
            _borrow: PhantomData,
        }
    }

    /// # Safety
    /// `tensor` must describe memory that is valid for reads and writes, and not used
    /// elsewhere, for `'a` (the duration of the run).
    pub unsafe fn from_raw(tensor: Tensor) -> HostTensor<'a> {
        HostTensor {
            tensor,
            _borrow: PhantomData,
        }
    }

    pub fn tensor(&self) -> Tensor {
        self.tensor
    }
}

/// One argument of a program.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    Tensor(HostTensor<'a>),
    Scalar(Scalar),
}

impl Arg<'_> {
    /// The tensor, or an INVALID_ARGS failure naming the position.
    pub fn tensor(&self) -> Result<Tensor, RuntimeFailure> {
        match self {
            Arg::Tensor(t) => Ok(t.tensor),
            Arg::Scalar(_) => Err(RuntimeFailure::invalid_args(
                None,
                "program argument is a scalar, expected a tensor",
            )),
        }
    }
    pub fn scalar(&self) -> Result<Scalar, RuntimeFailure> {
        match self {
            Arg::Scalar(s) => Ok(*s),
            Arg::Tensor(_) => Err(RuntimeFailure::invalid_args(
                None,
                "program argument is a tensor, expected a scalar",
            )),
        }
    }
}

type OrchFn = dyn Fn(&mut Orchestrator<'_>, &[Arg<'_>]) -> Result<(), RuntimeFailure> + Send + Sync;

/// An orchestration: host code that submits tasks.
#[derive(Clone)]
pub struct Program {
    name: String,
    f: Arc<OrchFn>,
}

impl Program {
    pub fn new(
        name: &str,
        f: impl Fn(&mut Orchestrator<'_>, &[Arg<'_>]) -> Result<(), RuntimeFailure>
            + Send
            + Sync
            + 'static,
    ) -> Program {
        Program {
            name: name.to_string(),
            f: Arc::new(f),
        }
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Run the orchestration.
    pub(crate) fn call(
        &self,
        o: &mut Orchestrator<'_>,
        args: &[Arg<'_>],
    ) -> Result<(), RuntimeFailure> {
        (self.f)(o, args)
    }
}

/// The orchestration of one dispatch: a program's, or a replay's.
pub(crate) type OrchBody<'a> =
    dyn Fn(&mut Orchestrator<'_>, &[Arg<'_>]) -> Result<(), RuntimeFailure> + 'a;

/// Worker ids (a captured graph belongs to its worker).
static NEXT_WORKER_ID: AtomicU64 = AtomicU64::new(1);

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// The effective sizing.
    pub ring_sizing: RingSizing,
    /// Highest simultaneous use per ring (slots, heap bytes, dep entries).
    pub peak: PeakUse,
    /// Tasks submitted (including alloc and dummy tasks).
    pub tasks: u64,
    /// The arena was resident (nothing was built).
    pub arena_hit: bool,
    pub arena_build_s: f64,
    pub elapsed_s: f64,
    /// A replay of a captured graph ([`crate::engine::replay::Captured::replay`]).
    pub replayed: bool,
}

/// Why a dispatch did not run or failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Failure(#[from] RuntimeFailure),
}

/// Diagnostics requested for one dispatch.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    /// Write `scope_stats/scope_stats.jsonl` under this prefix.
    pub scope_stats_prefix: Option<std::path::PathBuf>,
    /// Write `deps.json` under this prefix.
    pub deps_prefix: Option<std::path::PathBuf>,
    /// Write `merged_swimlane.json` (Perfetto) under this prefix.
    pub swimlane_prefix: Option<std::path::PathBuf>,
}

impl Diagnostics {
    pub fn from_config(c: &CallConfig) -> Diagnostics {
        let at = |on: bool| {
            (on && !c.output_prefix.is_empty()).then(|| std::path::PathBuf::from(&c.output_prefix))
        };
        Diagnostics {
            scope_stats_prefix: at(c.enable_scope_stats),
            deps_prefix: at(c.enable_dep_gen),
            swimlane_prefix: at(c.enable_chip_swimlane > 0),
        }
    }
}

fn write_stats(
    prefix: &std::path::Path,
    sizing: &RingSizing,
    orch: &crate::engine::OrchState,
    failure: Option<&RuntimeFailure>,
) {
    let Some(stats) = orch.stats.as_ref() else {
        return;
    };
    let peaks = orch.peaks();
    let header = crate::dfx::ScopeStatsHeader {
        version: 6,
        fatal: failure.is_some(),
        dropped: stats.dropped,
        total: stats.samples.len() as u64 + stats.dropped,
        task_window_max: sizing.task_window,
        heap_max: sizing.heap,
        dep_pool_max: sizing.dep_pool,
        tensormap_max: crate::engine::tensormap::TENSORMAP_POOL_ENTRIES as u64,
        peak_task_window: Some(peaks.task_window),
        peak_heap: Some(peaks.heap),
        peak_dep_pool: Some(peaks.dep_pool),
        failure: failure.map(crate::dfx::FailureRecord::from),
    };
    if let Err(e) = crate::dfx::write_scope_stats(prefix, &header, stats) {
        eprintln!(
            "taskring: could not write scope stats under {}: {e}",
            prefix.display()
        );
    }
}

/// How to build a chip.
#[derive(Clone, Debug)]
pub struct ChipOptions {
    /// Core threads (0 = available parallelism).
    pub cores: usize,
    /// How many of them are AIC (cube) cores; default half, at least one when there
    /// are two or more cores.
    pub aic_cores: Option<usize>,
    pub arena_cache_slots: usize,
    /// Sizings to build before `new` returns.
    pub prewarm: Vec<RingSizing>,
    /// Allocation backstop (no progress for this long fails the run). Default 500 ms,
    /// or `TASKRING_ALLOC_TIMEOUT_MS`.
    pub backstop: Duration,
    /// SCHEDULER_TIMEOUT after this long without any task completing while the run
    /// waits for its tasks. Default 10 s, or `PTO2_SCHEDULER_TIMEOUT_MS`.
    pub scheduler_timeout: Duration,
    /// Keep ring heaps in shared memory (an L3 node, whose runtime outputs chips read).
    pub shared_heaps: bool,
    /// The orchestrator thread runs ready tasks whenever it would otherwise wait: for
    /// ring space (task window, heap, pools) and, after the program returns, for the
    /// run's tasks to retire. With `cores = nproc - 1` the chip then uses exactly the
    /// machine's CPUs (no third thread competing with two cores on two CPUs), as an
    /// OpenMP master thread does. Off by default: a kernel that never returns then
    /// hangs the orchestrator itself (no SCHEDULER_TIMEOUT can reclaim it), and kernels
    /// run on the thread that called `run` (not for Python kernels, whose program
    /// holds the GIL). Runs with the swimlane recorded do not help (no lane for it).
    pub orchestrator_helps: bool,
}

fn env_ms(var: &str) -> Option<Duration> {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&v| v > 0)
        .map(Duration::from_millis)
}

impl Default for ChipOptions {
    fn default() -> Self {
        ChipOptions {
            cores: 0,
            aic_cores: None,
            arena_cache_slots: 4,
            prewarm: Vec::new(),
            backstop: env_ms("TASKRING_ALLOC_TIMEOUT_MS").unwrap_or(Duration::from_millis(500)),
            scheduler_timeout: env_ms("PTO2_SCHEDULER_TIMEOUT_MS")
                .unwrap_or(Duration::from_secs(10)),
            shared_heaps: false,
            orchestrator_helps: false,
        }
    }
}

/// Most core threads a chip may have (`ChipOptions::cores`): far above any real chip's
/// core count, and low enough that the threads can always be started.
pub const MAX_CORES: usize = 1024;

/// `Core::state` when the core holds no task.
const CORE_IDLE: u64 = u64::MAX;
/// `Core::state` while the core looks for a task (it may be about to hold one).
const CORE_SEARCHING: u64 = u64::MAX - 1;

/// One core thread's shared record.
struct Core {
    kind: CoreKind,
    /// Kernel executions of the current run (only while the swimlane is recorded).
    lane: parking_lot::Mutex<Vec<crate::dfx::SwimlaneEvent>>,
    /// `CORE_IDLE`, `CORE_SEARCHING`, or the id of the task it runs.
    state: CachePadded<AtomicU64>,
    /// Set when the core was given up on (its kernel never returned): the thread exits
    /// as soon as the kernel returns, touching nothing.
    abandoned: AtomicBool,
}

struct ChipShared {
    eng: EngineShared,
    /// Record kernel executions (swimlane) during the current run.
    trace: AtomicBool,
    /// Start of the current run (swimlane timestamps are relative to it).
    trace_t0: parking_lot::Mutex<Option<Instant>>,
    arena: AtomicPtr<ArenaShared>,
    cores: parking_lot::RwLock<Vec<Arc<Core>>>,
    /// The direct replay in progress (a `DirectJob`), or null: then queued task ids are
    /// indices into its graph, not ring slots.
    direct: AtomicPtr<()>,
}

/// A resident simulated chip. See the module doc.
pub struct ChipWorker {
    shared: Arc<ChipShared>,
    threads: Vec<(Arc<Core>, JoinHandle<()>)>,
    kinds: Vec<CoreKind>,
    cache: ArenaCache,
    policy: WaitPolicy,
    scheduler_timeout: Duration,
    orchestrator_helps: bool,
    /// An L3 node's engine (`ChipOptions::shared_heaps`): its dispatch records each task
    /// when it is submitted, so a scope overflow is not counted on (see `Orchestrator`).
    node_engine: bool,
    /// This worker's id (unique in the process).
    id: u64,
    /// The orchestrator thread's own ready tasks while it helps a direct replay.
    direct_local: Vec<u32>,
}

impl ChipWorker {
    /// This worker's id, unique in the process (a captured graph replays only on the
    /// worker that captured it).
    pub fn worker_id(&self) -> u64 {
        self.id
    }

    /// Start the core threads and prewarm `opts.prewarm`.
    pub fn new(opts: ChipOptions) -> Result<ChipWorker, RuntimeFailure> {
        if opts.cores > MAX_CORES {
            return Err(RuntimeFailure::new(
                StatusCode::RuntimeSetup,
                None,
                format!(
                    "a chip has at most {MAX_CORES} cores (got cores={})",
                    opts.cores
                ),
            ));
        }
        let cores = if opts.cores == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(MAX_CORES)
        } else {
            opts.cores
        };
        let aic = opts
            .aic_cores
            .unwrap_or(if cores >= 2 { cores / 2 } else { 0 })
            .min(cores);
        let kinds: Vec<CoreKind> = (0..cores)
            .map(|i| {
                if cores == 1 {
                    CoreKind::Any
                } else if i < aic {
                    CoreKind::Aic
                } else {
                    CoreKind::Aiv
                }
            })
            .collect();
        let mut cache = if opts.shared_heaps {
            ArenaCache::new_shared(opts.arena_cache_slots)
        } else {
            ArenaCache::new(opts.arena_cache_slots)
        };
        for s in opts.prewarm.iter().take(cache.slots()) {
            cache.prewarm(s).map_err(|e| {
                RuntimeFailure::new(
                    StatusCode::RuntimeSetup,
                    None,
                    format!("prewarm of {s}: {e}"),
                )
            })?;
        }
        let shared = Arc::new(ChipShared {
            eng: EngineShared::default(),
            trace: AtomicBool::new(false),
            trace_t0: parking_lot::Mutex::new(None),
            arena: AtomicPtr::new(std::ptr::null_mut()),
            cores: parking_lot::RwLock::new(Vec::with_capacity(cores)),
            direct: AtomicPtr::new(std::ptr::null_mut()),
        });
        let mut w = ChipWorker {
            shared,
            threads: Vec::with_capacity(cores),
            kinds: kinds.clone(),
            cache,
            policy: WaitPolicy {
                backstop: opts.backstop,
                scheduler_timeout: opts.scheduler_timeout,
            },
            scheduler_timeout: opts.scheduler_timeout,
            orchestrator_helps: opts.orchestrator_helps,
            node_engine: opts.shared_heaps,
            id: NEXT_WORKER_ID.fetch_add(1, Relaxed),
            direct_local: Vec::new(),
        };
        for (i, &kind) in kinds.iter().enumerate() {
            w.start_core(i, kind)?;
        }
        Ok(w)
    }

    /// Start core thread `i` (a new one, or the replacement of an abandoned one).
    fn start_core(&mut self, i: usize, kind: CoreKind) -> Result<(), RuntimeFailure> {
        let core = Arc::new(Core {
            kind,
            lane: parking_lot::Mutex::new(Vec::new()),
            state: CachePadded::new(AtomicU64::new(CORE_IDLE)),
            abandoned: AtomicBool::new(false),
        });
        {
            let mut cores = self.shared.cores.write();
            if i < cores.len() {
                cores[i] = core.clone();
            } else {
                cores.push(core.clone());
            }
        }
        let sh = self.shared.clone();
        let rec = core.clone();
        let name = format!(
            "taskring-core{i}-{}",
            match kind {
                CoreKind::Aic => "aic",
                CoreKind::Aiv => "aiv",
                CoreKind::Any => "any",
            }
        );
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || core_loop(&sh, &core))
            .map_err(|e| {
                RuntimeFailure::new(
                    StatusCode::RuntimeSetup,
                    None,
                    format!("could not start a core thread: {e}"),
                )
            })?;
        self.threads.push((rec, h));
        Ok(())
    }

    /// Give up on cores whose kernel never returned, and start replacements.
    fn replace_stuck_cores(&mut self) {
        let stuck: Vec<(usize, CoreKind)> = self
            .shared
            .cores
            .read()
            .iter()
            .enumerate()
            .filter(|(_, c)| c.state.load(SeqCst) < CORE_SEARCHING)
            .map(|(i, c)| {
                c.abandoned.store(true, SeqCst);
                (i, c.kind)
            })
            .collect();
        for (i, kind) in stuck {
            // A core that cannot be restarted stays abandoned; the chip runs with fewer.
            let _ = self.start_core(i, kind);
        }
    }

    /// Threads of cores given up on (a kernel that never returned) that still run.
    /// A host whose kernels can be interrupted (Python's) uses it to stop them.
    pub fn abandoned_threads(&self) -> Vec<std::thread::ThreadId> {
        self.threads
            .iter()
            .filter(|(c, t)| c.abandoned.load(SeqCst) && !t.is_finished())
            .map(|(_, t)| t.thread().id())
            .collect()
    }

    /// Core kinds, one per core thread.
    pub fn cores(&self) -> &[CoreKind] {
        &self.kinds
    }

    pub fn arena_stats(&self) -> ArenaStats {
        self.cache.stats()
    }

    /// The instant the last run with a swimlane started recording (its file's `ts = 0`;
    /// None before any). An L3 chip hands it to the host, which merges the timelines.
    pub fn trace_start(&self) -> Option<Instant> {
        *self.shared.trace_t0.lock()
    }

    /// Build `sizing`'s arena now if it is not resident.
    pub fn prewarm(&mut self, sizing: &RingSizing) -> Result<(), RuntimeFailure> {
        self.cache.prewarm(sizing).map_err(|e| {
            RuntimeFailure::new(
                StatusCode::RuntimeSetup,
                None,
                format!("prewarm of {sizing}: {e}"),
            )
        })
    }

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

impl Drop for ChipWorker {
    fn drop(&mut self) {
        self.shared.eng.shutdown.store(true, SeqCst);
        self.shared.eng.wake_all_cores();
        for (core, t) in self.threads.drain(..) {
            // An abandoned core may never return from its kernel: do not wait for it.
            if !core.abandoned.load(SeqCst) || t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

pub(crate) fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
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

/// SCHEDULER_TIMEOUT with the stall sub-class (reference §12.3): a task on a core
/// (S1) > a ready task nobody runs (S3) > only waiting tasks (S4).
fn classify_stall(
    sh: &ChipShared,
    a: &ArenaShared,
    timeout: Duration,
    submitted: u64,
    completed: u64,
    orch_done: bool,
) -> RuntimeFailure {
    let cores = sh.cores.read();
    let running: Vec<(usize, TaskId)> = cores
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let s = c.state.load(SeqCst);
            (s < CORE_SEARCHING).then_some((i, TaskId(s)))
        })
        .collect();
    let ready = sh.eng.ready_len() as u64;
    let waiting = submitted.saturating_sub(completed + running.len() as u64 + ready);
    let (label, detail, stuck) = if let Some(&(core, t)) = running.first() {
        ("S1:running-stalled", 1, Some((t, core as i64)))
    } else if ready > 0 {
        ("S3:ready-but-all-idle", 3, None)
    } else if waiting > 0 {
        ("S4:dependency-deadlock", 4, None)
    } else {
        ("unknown:accounting/corruption", 99, None)
    };
    let (stuck_task, stuck_core) = stuck
        .map(|(t, c)| (format!("{t:?}"), c))
        .unwrap_or(("none".into(), -1));
    let ring = stuck.map(|(t, _)| t.ring());
    let kernel = stuck
        .map(|(t, _)| {
            // safety: a task on a core was published and its slot is not reused while
            // it has not completed.
            let p = unsafe { a.rings[t.ring()].payload(t.local()) };
            p.kernel
                .map(|k| format!(" running kernel '{}'", k.name()))
                .unwrap_or_default()
        })
        .unwrap_or_default();
    RuntimeFailure::new(
        StatusCode::SchedulerTimeout,
        ring,
        format!(
            "no task completed for {} ms{}: sub_class={label} (detail={detail}) completed={completed}/{submitted} running={} ready={ready} waiting={waiting} orch_done={} stuck_task_id={stuck_task}{kernel} stuck_core={stuck_core}",
            timeout.as_millis(),
            if orch_done { "" } else { " while the orchestrator waited for ring space" },
            running.len(),
            orch_done as u8
        ),
    )
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

/// Wait until no core holds a task of the run (they finish within a kernel's time), at
/// most `limit`; false if a core still holds one then.
fn wait_cores_idle(sh: &ChipShared, limit: Duration) -> bool {
    let mut spins = 0u32;
    let t0 = Instant::now();
    while sh
        .cores
        .read()
        .iter()
        .any(|c| !c.abandoned.load(SeqCst) && c.state.load(SeqCst) != CORE_IDLE)
    {
        if spins.is_multiple_of(1024) && t0.elapsed() >= limit {
            return false;
        }
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else if spins < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    true
}

/// Call a task's kernel; `Some(message)` if it failed (returned an error or panicked).
fn call_kernel(k: crate::kernel::KernelRef, p: &crate::engine::Payload) -> Option<String> {
    let call = KernelCall {
        tensors: &p.tensors[..p.n_tensors as usize],
        scalars: &p.scalars[..p.n_scalars as usize],
        n_inputs: p.n_inputs as usize,
        scalar_float_mask: p.scalar_float_mask,
    };
    match catch_unwind(AssertUnwindSafe(|| k.0.try_run(&call))) {
        Ok(Ok(())) => None,
        Ok(Err(msg)) => Some(msg),
        Err(e) => Some(panic_text(&e)),
    }
}

/// Most ready tasks a thread keeps to itself during a direct replay (`direct_step`).
const DIRECT_LOCAL: usize = 4096;

/// Run task `i` of a direct replay on this thread and complete it. Returns the task to
/// run next here: the first successor it made ready (of a kind this thread runs), else
/// one of `local`, else a root nobody took yet. Of the other successors it made ready,
/// every second one it can run goes to `local` (this thread's own stack: no atomics, no
/// contention; a fan-out's consumers are split between the shared queue, where other
/// cores take them, and this thread), the rest to the shared ready queues.
/// `abandoned`: the core was given up on while its kernel ran — then nothing of the job
/// is touched any more.
fn direct_step(
    eng: &EngineShared,
    job: &DirectJob<'_>,
    i: u32,
    kind: CoreKind,
    abandoned: Option<&AtomicBool>,
    local: &mut Vec<u32>,
) -> Option<u32> {
    let r = job.run(i);
    if abandoned.is_some_and(|a| a.load(SeqCst)) {
        return None;
    }
    if let Err(msg) = r {
        let (id, k) = job.head(i);
        if let Some(k) = k {
            eng.fail(task_failed(k, id, msg));
        }
        local.clear();
        return None;
    }
    if eng.fatal.load(Acquire) {
        // Dependants of a failed task never run; the rest is dropped too.
        local.clear();
        return None;
    }
    let mut next = None;
    // One wake-up per batch of successors made ready (a fan-out makes many at once).
    let mut queued = 0u8;
    let mut extra = 0usize;
    let last = job.complete(i, |s| {
        let sk = job.kind(s);
        if next.is_none() && can_run(kind, sk) {
            next = Some(s);
        } else if extra % 2 == 1 && local.len() < DIRECT_LOCAL && can_run(kind, sk) {
            extra += 1;
            local.push(s);
        } else {
            extra += 1;
            queued |= eng.push_ready_quiet(TaskId(s as u64), sk);
        }
    });
    if queued != 0 {
        eng.wake_for_queues(queued);
    }
    // Progress for the stall clock only (it looks for a change): a plain increment, an
    // update lost to a race with another core does not matter.
    eng.completed
        .store(eng.completed.load(Relaxed).wrapping_add(1), Relaxed);
    if last {
        eng.progress.notify();
        return None;
    }
    if next.is_none() {
        if let Some(l) = local.pop() {
            return Some(l);
        }
        while let Some(r) = job.claim_root() {
            let rk = job.kind(r);
            if can_run(kind, rk) {
                return Some(r);
            }
            eng.push_ready(TaskId(r as u64), rk);
        }
    }
    next
}

fn task_failed(k: crate::kernel::KernelRef, task: TaskId, msg: String) -> RuntimeFailure {
    RuntimeFailure::new(
        StatusCode::TaskFailed,
        Some(task.ring()),
        format!("kernel '{}' failed in task {:?}: {}", k.name(), task, msg),
    )
}

/// The kinds of task the orchestrator may help with: those some core of the chip can
/// run (a task no core can run stays a SCHEDULER_TIMEOUT, helper or not).
fn help_kind(kinds: &[CoreKind]) -> CoreKind {
    let has = |k: CoreKind| kinds.contains(&k);
    match (
        has(CoreKind::Any) || (has(CoreKind::Aic) && has(CoreKind::Aiv)),
        has(CoreKind::Aic),
    ) {
        (true, _) => CoreKind::Any,
        (false, true) => CoreKind::Aic,
        (false, false) => CoreKind::Aiv,
    }
}

/// The orchestrator's help ([`ChipOptions::orchestrator_helps`]): run one ready task
/// that a core of `kind` could run, on the calling thread, and complete it. Returns
/// whether it ran one.
fn help_one(sh: &ChipShared, arena: &ArenaShared, kind: CoreKind) -> bool {
    let eng = &sh.eng;
    if eng.fatal.load(Acquire) {
        return false;
    }
    let Some(task) = eng.pop_ready(kind) else {
        return false;
    };
    if eng.fatal.load(Acquire) {
        // Dropped, as a core drops what it popped after a failure.
        return false;
    }
    // safety: `task` was published (popped from a ready queue) and belongs to this run
    // (queues are drained between runs).
    let p = unsafe { arena.rings[task.ring()].payload(task.local()) };
    if let Some(k) = p.kernel {
        if let Some(msg) = call_kernel(k, p) {
            eng.fail(task_failed(k, task, msg));
            return true;
        }
    }
    // safety: the task ran (or is a dummy) and is completed exactly once, here.
    unsafe {
        arena.complete(task, eng, |c| {
            eng.push_ready(c, arena.rings[c.ring()].payload(c.local()).kind)
        });
    }
    true
}

#[inline]
fn can_run(core: CoreKind, task: CoreKind) -> bool {
    task == CoreKind::Any || core == CoreKind::Any || core == task
}

fn core_loop(sh: &ChipShared, core: &Core) {
    let kind = core.kind;
    let busy = &core.state;
    let eng = &sh.eng;
    let mut next: Option<TaskId> = None;
    // Ready tasks of a direct replay this core keeps to itself (see `direct_step`).
    let mut local: Vec<u32> = Vec::with_capacity(DIRECT_LOCAL);
    // Idle protocol: one core at a time may spin (bounded; a yield every 32 checks so
    // the orchestrator is not starved on small machines), the others park at once.
    // While a core spins, pushes skip the wake-up syscall (see `Sleep`).
    let mut idle_spins = 0u32;
    let mut spinning = false;
    loop {
        if core.abandoned.load(Relaxed) {
            // Given up on (a replacement core runs in its place): touch nothing more.
            if spinning {
                eng.end_spin(false);
            }
            return;
        }
        let task = match next.take() {
            Some(t) => t,
            None => {
                // Only a failed direct replay leaves tasks here (`direct_step` hands
                // them out before it returns None): they must never meet another run.
                local.clear();
                busy.store(CORE_SEARCHING, SeqCst);
                match eng.pop_ready(kind) {
                    Some(t) => {
                        if spinning {
                            spinning = false;
                            eng.end_spin(true);
                        }
                        t
                    }
                    None => {
                        busy.store(CORE_IDLE, SeqCst);
                        if eng.shutdown.load(Acquire) {
                            if spinning {
                                eng.end_spin(false);
                            }
                            return;
                        }
                        if idle_spins == 0 && !spinning {
                            spinning = eng.try_spin(kind);
                        }
                        idle_spins += 1;
                        if spinning && idle_spins < 2048 {
                            if idle_spins.is_multiple_of(32) {
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        } else if spinning {
                            // Give up spinning; look once more (a push may have skipped
                            // its wake-up while we spun), then park.
                            spinning = false;
                            eng.end_spin(false);
                            idle_spins = 0;
                            // Work of a kind we cannot run may have skipped its wake-up.
                            if eng.ready_len() > 0 {
                                eng.wake_cores();
                            }
                            if !eng.has_ready(kind) {
                                eng.park_core(kind, Duration::from_millis(100));
                            }
                        } else {
                            idle_spins = 0;
                            eng.park_core(kind, Duration::from_millis(100));
                        }
                        continue;
                    }
                }
            }
        };
        idle_spins = 0;
        if eng.fatal.load(Acquire) {
            busy.store(CORE_IDLE, SeqCst);
            continue;
        }
        busy.store(task.0, Relaxed);
        let job = sh.direct.load(Acquire);
        if !job.is_null() {
            // safety: installed for the whole direct replay, removed only after every
            // core went idle; an abandoned core touches nothing after its kernel.
            let job = unsafe { &*(job as *const DirectJob<'static>) };
            next = direct_step(
                eng,
                job,
                task.0 as u32,
                kind,
                Some(&core.abandoned),
                &mut local,
            )
            .map(|s| TaskId(s as u64));
            if core.abandoned.load(SeqCst) {
                return;
            }
            if next.is_none() {
                busy.store(CORE_IDLE, SeqCst);
            }
            continue;
        }
        let arena_ptr = sh.arena.load(Acquire);
        if arena_ptr.is_null() {
            // Defensive: no run is active (queues are drained between runs).
            busy.store(CORE_IDLE, SeqCst);
            next = None;
            continue;
        }
        // safety: the arena pointer is set for the whole run and a queued task belongs
        // to the current run (queues are drained between runs).
        let arena = unsafe { &*arena_ptr };
        let ring = &arena.rings[task.ring()];
        // safety: `task` was published (popped from a ready queue or made ready by us).
        let p = unsafe { ring.payload(task.local()) };
        if let Some(k) = p.kernel {
            let t_start = sh.trace.load(Relaxed).then(Instant::now);
            let err = call_kernel(k, p);
            if let Some(t) = t_start {
                if let Some(t0) = *sh.trace_t0.lock() {
                    let ns = |x: Instant| x.saturating_duration_since(t0).as_nanos() as u64;
                    let idx = sh
                        .cores
                        .read()
                        .iter()
                        .position(|c| std::ptr::eq(&**c, core))
                        .unwrap_or(0) as u32;
                    core.lane.lock().push(crate::dfx::SwimlaneEvent {
                        task: task.0,
                        core: idx,
                        kernel: k.name_static(),
                        start_ns: ns(t),
                        end_ns: ns(Instant::now()),
                    });
                }
            }
            if core.abandoned.load(SeqCst) {
                // The run gave up on this core; its arena may be in use by another run.
                return;
            }
            if let Some(msg) = err {
                eng.fail(task_failed(k, task, msg));
                busy.store(CORE_IDLE, SeqCst);
                continue;
            }
        }
        // safety: the task ran (or is a dummy) and is completed exactly once, here.
        unsafe {
            arena.complete(task, eng, |c| {
                let ck = arena.rings[c.ring()].payload(c.local()).kind;
                if next.is_none() && can_run(kind, ck) {
                    next = Some(c);
                } else {
                    eng.push_ready(c, ck);
                }
            });
        }
        if next.is_none() {
            busy.store(CORE_IDLE, SeqCst);
        }
    }
}
