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
use crate::engine::orch::WaitPolicy;
use crate::engine::shared::{ArenaShared, EngineShared};
use crate::engine::{Orchestrator, PeakUse, RuntimeFailure, Scalar, StatusCode};
use crate::kernel::{CoreKind, KernelCall};
use crate::tensor::{DType, TaskId, Tensor};
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::*};
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
        assert_eq!(n as usize, data.len(), "shape {shape:?} does not match {} elements", data.len());
        HostTensor { tensor: Tensor::from_raw(data.as_mut_ptr() as u64, shape, DType::F32), _borrow: PhantomData }
    }

    /// # Safety
    /// `tensor` must describe memory that is valid for reads and writes, and not used
    /// elsewhere, for `'a` (the duration of the run).
    pub unsafe fn from_raw(tensor: Tensor) -> HostTensor<'a> {
        HostTensor { tensor, _borrow: PhantomData }
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
            Arg::Scalar(_) => Err(RuntimeFailure::invalid_args(None, "program argument is a scalar, expected a tensor")),
        }
    }
    pub fn scalar(&self) -> Result<Scalar, RuntimeFailure> {
        match self {
            Arg::Scalar(s) => Ok(*s),
            Arg::Tensor(_) => Err(RuntimeFailure::invalid_args(None, "program argument is a tensor, expected a scalar")),
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
        f: impl Fn(&mut Orchestrator<'_>, &[Arg<'_>]) -> Result<(), RuntimeFailure> + Send + Sync + 'static,
    ) -> Program {
        Program { name: name.to_string(), f: Arc::new(f) }
    }
    pub fn name(&self) -> &str {
        &self.name
    }
}

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
}

/// Why a dispatch did not run or failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Failure(#[from] RuntimeFailure),
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
}

impl Default for ChipOptions {
    fn default() -> Self {
        let backstop = std::env::var("TASKRING_ALLOC_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|&v| v > 0)
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_millis(500));
        ChipOptions { cores: 0, aic_cores: None, arena_cache_slots: 4, prewarm: Vec::new(), backstop }
    }
}

struct ChipShared {
    eng: EngineShared,
    arena: AtomicPtr<ArenaShared>,
    busy: Box<[CachePadded<AtomicBool>]>,
}

/// A resident simulated chip. See the module doc.
pub struct ChipWorker {
    shared: Arc<ChipShared>,
    threads: Vec<JoinHandle<()>>,
    kinds: Vec<CoreKind>,
    cache: ArenaCache,
    policy: WaitPolicy,
}

impl ChipWorker {
    /// Start the core threads and prewarm `opts.prewarm`.
    pub fn new(opts: ChipOptions) -> Result<ChipWorker, RuntimeFailure> {
        let cores = if opts.cores == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            opts.cores
        };
        let aic = opts.aic_cores.unwrap_or(if cores >= 2 { cores / 2 } else { 0 }).min(cores);
        let kinds: Vec<CoreKind> = (0..cores)
            .map(|i| if cores == 1 { CoreKind::Any } else if i < aic { CoreKind::Aic } else { CoreKind::Aiv })
            .collect();
        let mut cache = ArenaCache::new(opts.arena_cache_slots);
        for s in opts.prewarm.iter().take(cache.slots()) {
            cache.prewarm(s).map_err(|e| RuntimeFailure::new(StatusCode::RuntimeSetup, None, format!("prewarm of {s}: {e}")))?;
        }
        let shared = Arc::new(ChipShared {
            eng: EngineShared::default(),
            arena: AtomicPtr::new(std::ptr::null_mut()),
            busy: (0..cores).map(|_| CachePadded::new(AtomicBool::new(false))).collect(),
        });
        let mut threads = Vec::with_capacity(cores);
        for (i, &kind) in kinds.iter().enumerate() {
            let sh = shared.clone();
            let name = format!("taskring-core{i}-{}", match kind { CoreKind::Aic => "aic", CoreKind::Aiv => "aiv", CoreKind::Any => "any" });
            let h = std::thread::Builder::new()
                .name(name)
                .spawn(move || core_loop(&sh, i, kind))
                .map_err(|e| RuntimeFailure::new(StatusCode::RuntimeSetup, None, format!("could not start a core thread: {e}")))?;
            threads.push(h);
        }
        Ok(ChipWorker { shared, threads, kinds, cache, policy: WaitPolicy { backstop: opts.backstop } })
    }

    /// Core kinds, one per core thread.
    pub fn cores(&self) -> &[CoreKind] {
        &self.kinds
    }

    pub fn arena_stats(&self) -> ArenaStats {
        self.cache.stats()
    }

    /// Build `sizing`'s arena now if it is not resident.
    pub fn prewarm(&mut self, sizing: &RingSizing) -> Result<(), RuntimeFailure> {
        self.cache
            .prewarm(sizing)
            .map_err(|e| RuntimeFailure::new(StatusCode::RuntimeSetup, None, format!("prewarm of {sizing}: {e}")))
    }

    /// Dispatch `program` with `config`: validate it, resolve its sizing against the
    /// process environment now, run.
    pub fn run(&mut self, program: &Program, args: &[Arg<'_>], config: &CallConfig) -> Result<RunReport, RunError> {
        config.validate()?;
        let sizing = RingSizing::resolve_from_process(&config.runtime_env)?;
        Ok(self.run_with_sizing(program, args, &sizing)?)
    }

    /// Dispatch `program` on an explicit sizing.
    pub fn run_with_sizing(&mut self, program: &Program, args: &[Arg<'_>], sizing: &RingSizing) -> Result<RunReport, RuntimeFailure> {
        self.run_inner(program, args, sizing, None)
    }

    pub(crate) fn run_inner(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        sizing: &RingSizing,
        blocking_hook: Option<&dyn Fn(bool)>,
    ) -> Result<RunReport, RuntimeFailure> {
        let t0 = Instant::now();
        let sh = &*self.shared;
        let (arena, acq) = self
            .cache
            .acquire(sizing)
            .map_err(|e| RuntimeFailure::new(StatusCode::RuntimeSetup, None, format!("arena for {sizing}: {e}")))?;
        arena.reset();
        sh.eng.fatal.store(false, SeqCst);
        *sh.eng.failure.lock() = None;
        sh.eng.drain_queues();
        sh.arena.store(&arena.shared as *const ArenaShared as *mut ArenaShared, Release);

        let (result, peak, tasks) = {
            let mut o = Orchestrator::new(&sh.eng, &arena.shared, &mut arena.orch, *sizing, self.policy);
            o.blocking_hook = blocking_hook;
            let mut r = o.begin_scope(false);
            if r.is_ok() {
                r = match catch_unwind(AssertUnwindSafe(|| (program.f)(&mut o, args))) {
                    Ok(r) => r,
                    Err(p) => Err(RuntimeFailure::new(
                        StatusCode::ExplicitOrchFatal,
                        None,
                        format!("orchestration of program '{}' panicked: {}", program.name, panic_text(&p)),
                    )),
                };
            }
            o.close_all_scopes();
            drop(o);
            if let Err(e) = &r {
                sh.eng.fail(e.clone());
            }
            (r, arena.orch.peaks(), arena.orch.tasks())
        };

        let result = result.and_then(|()| wait_retired(sh, &arena.shared, blocking_hook));
        let result = match result {
            Ok(()) => Ok(()),
            Err(e) => {
                sh.eng.fail(e);
                Err(sh.eng.failure.lock().clone().expect("failure latched"))
            }
        };
        if result.is_err() {
            sh.eng.drain_queues();
        }
        wait_cores_idle(sh);
        sh.arena.store(std::ptr::null_mut(), Release);
        result?;
        Ok(RunReport {
            ring_sizing: *sizing,
            peak,
            tasks,
            arena_hit: acq.hit,
            arena_build_s: acq.build_s,
            elapsed_s: t0.elapsed().as_secs_f64(),
        })
    }
}

impl Drop for ChipWorker {
    fn drop(&mut self) {
        self.shared.eng.shutdown.store(true, SeqCst);
        self.shared.eng.wake_all_cores();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

/// Wait until every ring's watermark reached its last submitted task (or a failure).
fn wait_retired(sh: &ChipShared, a: &ArenaShared, hook: Option<&dyn Fn(bool)>) -> Result<(), RuntimeFailure> {
    let all_retired = || a.rings.iter().all(|r| r.last_alive.load(Acquire) == r.current.load(Acquire));
    let fatal = || sh.eng.fatal.load(Acquire);
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
        while !all_retired() && !fatal() {
            sh.eng.progress.wait(|| all_retired() || fatal(), Duration::from_millis(50));
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

/// Wait until no core holds a task of the run (they finish within a kernel's time).
fn wait_cores_idle(sh: &ChipShared) {
    let mut spins = 0u32;
    while sh.busy.iter().any(|b| b.load(SeqCst)) {
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else if spins < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[inline]
fn can_run(core: CoreKind, task: CoreKind) -> bool {
    task == CoreKind::Any || core == CoreKind::Any || core == task
}

fn core_loop(sh: &ChipShared, idx: usize, kind: CoreKind) {
    let busy = &sh.busy[idx];
    let eng = &sh.eng;
    let mut next: Option<TaskId> = None;
    let mut idle_spins = 0u32;
    loop {
        let task = match next.take() {
            Some(t) => t,
            None => {
                busy.store(true, SeqCst);
                match eng.pop_ready(kind) {
                    Some(t) => t,
                    None => {
                        busy.store(false, SeqCst);
                        if eng.shutdown.load(Acquire) {
                            return;
                        }
                        idle_spins += 1;
                        if idle_spins < 64 {
                            std::hint::spin_loop();
                        } else if idle_spins < 72 {
                            std::thread::yield_now();
                        } else {
                            eng.park_core(kind, Duration::from_millis(100));
                            idle_spins = 0;
                        }
                        continue;
                    }
                }
            }
        };
        idle_spins = 0;
        if eng.fatal.load(Acquire) {
            busy.store(false, SeqCst);
            continue;
        }
        // safety: the arena pointer is set for the whole run and a queued task belongs
        // to the current run (queues are drained between runs).
        let arena = unsafe { &*sh.arena.load(Acquire) };
        let ring = &arena.rings[task.ring()];
        // safety: `task` was published (popped from a ready queue or made ready by us).
        let p = unsafe { ring.payload(task.local()) };
        if let Some(k) = p.kernel {
            let call = KernelCall {
                tensors: &p.tensors[..p.n_tensors as usize],
                scalars: &p.scalars[..p.n_scalars as usize],
                n_inputs: p.n_inputs as usize,
            };
            if let Err(e) = catch_unwind(AssertUnwindSafe(|| k.0.run(&call))) {
                eng.fail(RuntimeFailure::new(
                    StatusCode::TaskFailed,
                    Some(task.ring()),
                    format!("kernel '{}' failed in task {:?}: {}", k.name(), task, panic_text(&e)),
                ));
                busy.store(false, SeqCst);
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
            busy.store(false, SeqCst);
        }
    }
}
