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
//!
//! Files, one concern each: `options` (how to build a chip, what a dispatch records),
//! `core` (a core thread: run, complete, idle; the orchestrator's help), `run` (a
//! dispatch from arena to report, and the waits), `spin` (the spin phase
//! every wait of `chip` and `node` shares), `report`
//! (what a run says: its report, diagnostics files, a stall's sub-class), `quarantine`
//! (the memory a kernel given up on can still write, set aside), `deque` (the threads'
//! work deques, and [`DirectRun`](deque::DirectRun): what a core asks of a direct
//! replay). Capture and replay, direct replays on these cores included, are the module
//! `replay`, a layer above: it uses the chip, the chip names nothing of it (a direct job
//! reaches the cores as a `DirectRun`, a recorder as the engine's `Recording`, a
//! recorded graph's need as values). This file:
//! the user's types (`CallerTensor`, `Arg`, `Program`) and the `ChipWorker` itself
//! (start, stuck-core replacement, shutdown).

#[doc(hidden)]
pub mod abort;
mod auto;
pub(crate) mod core;
pub(crate) mod deque;
mod options;
pub(crate) mod policy;
mod quarantine;
mod report;
pub(crate) mod run;
pub(crate) mod spin;

pub use auto::{auto_size, AUTO_HEADROOM, AUTO_KEYS};
pub use options::{default_device_memory, ChipOptions, Diagnostics, MAX_CORES, MIN_DEVICE_MEMORY};
pub use report::{DeviceMemory, RunError, RunReport};
pub use run::RunInterrupter;

pub(crate) use auto::PerEntry;

use self::core::{core_loop, Core, CORE_IDLE};
use crate::arena::{ArenaCache, ArenaStats};
use crate::config::RingSizing;
use crate::engine::orch::WaitPolicy;
use crate::engine::shared::{ArenaShared, EngineShared};
use crate::engine::{Orchestrator, RuntimeFailure, Scalar, StatusCode};
use crate::kernel::CoreKind;
use crate::sync::{AtomicBool, AtomicU64, Ordering::*};
use crate::tensor::{DType, TaskId, Tensor};
use crossbeam_utils::CachePadded;
use deque::{DirectLocal, Thieves};
use policy::ChipPolicy;
use std::marker::PhantomData;
// Not in the `sync` facade (it has no pointer atomic): the run's arena and direct job
// are published with Release and read with Acquire, a plain message-passing pair.
use std::sync::atomic::AtomicPtr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A tensor over the caller's memory, handed to a run: a view that outlives the run.
/// (Not Python's `HostTensor`, which is a tensor resident on an L4 host.)
#[derive(Clone, Copy, Debug)]
pub struct CallerTensor<'a> {
    tensor: Tensor,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> CallerTensor<'a> {
    /// A tensor over `data` with `shape` (row-major). Panics if the shape does not
    /// match the slice length.
    pub fn f32(data: &'a mut [f32], shape: &[u32]) -> CallerTensor<'a> {
        let n: u64 = shape.iter().map(|&d| d as u64).product();
        assert_eq!(
            n as usize,
            data.len(),
            "shape {shape:?} does not match {} elements",
            data.len()
        );
        CallerTensor {
            tensor: Tensor::from_raw(data.as_mut_ptr() as u64, shape, DType::F32),
            _borrow: PhantomData,
        }
    }

    /// # Safety
    /// `tensor` must describe memory that is valid for reads and writes, and not used
    /// elsewhere, for `'a` (the duration of the run).
    pub unsafe fn from_raw(tensor: Tensor) -> CallerTensor<'a> {
        CallerTensor {
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
    Tensor(CallerTensor<'a>),
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
///
/// A program has an identity besides its name: what automatic sizing (`chip/auto.rs`)
/// learns belongs to the program, so two programs of one name (two closures made by
/// one factory) learn apart. Clones share the identity.
#[derive(Clone)]
pub struct Program {
    name: String,
    f: Arc<OrchFn>,
    /// The identity: the address of the closure (`new`) or of the object a binding's
    /// closure keeps alive (`with_identity`).
    identity: usize,
}

impl Program {
    pub fn new(
        name: &str,
        f: impl Fn(&mut Orchestrator<'_>, &[Arg<'_>]) -> Result<(), RuntimeFailure>
            + Send
            + Sync
            + 'static,
    ) -> Program {
        let f: Arc<OrchFn> = Arc::new(f);
        Program {
            name: name.to_string(),
            identity: Arc::as_ptr(&f) as *const () as usize,
            f,
        }
    }

    /// A program whose identity is `identity`, the address of an object that `f` keeps
    /// alive (so no other object takes that address while the program lives): for
    /// bindings that wrap the same user function in a new `Program` at each dispatch
    /// (a Python function's `id`), so the dispatches share what automatic sizing learns.
    pub fn with_identity(
        name: &str,
        identity: usize,
        f: impl Fn(&mut Orchestrator<'_>, &[Arg<'_>]) -> Result<(), RuntimeFailure>
            + Send
            + Sync
            + 'static,
    ) -> Program {
        Program {
            name: name.to_string(),
            f: Arc::new(f),
            identity,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program's identity (see the type's doc).
    pub fn identity(&self) -> usize {
        self.identity
    }
}

/// The orchestration of one dispatch: a program's, or a replay's.
pub(crate) type OrchBody<'a> =
    dyn Fn(&mut Orchestrator<'_>, &[Arg<'_>]) -> Result<(), RuntimeFailure> + 'a;

/// Worker ids (a captured graph belongs to its worker).
// A plain counter (std's: a `static` needs a const constructor, which loom's atomics
// lack), not part of any handshake.
static NEXT_WORKER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub(crate) struct ChipShared {
    pub(crate) eng: EngineShared,
    /// Record kernel executions (swimlane) during the current run.
    trace: AtomicBool,
    /// Start of the current run (swimlane timestamps are relative to it).
    trace_t0: parking_lot::Mutex<Option<Instant>>,
    arena: AtomicPtr<ArenaShared>,
    pub(crate) cores: parking_lot::RwLock<Vec<Arc<Core>>>,
    /// The direct replay in progress (a `&dyn DirectRun`, set by the replay for as long
    /// as it runs), or null: then queued task ids are indices into its graph, not ring
    /// slots.
    pub(crate) direct: AtomicPtr<()>,
    /// During a direct replay, bit k: idle cores of queue index k park at once instead
    /// of spinning (`DirectJob::quiet`); 0 otherwise. Read without the job (a core may
    /// look while the job is being removed).
    pub(crate) direct_quiet: std::sync::atomic::AtomicU8,
    /// The stealing ends of the threads' direct-replay deques ([`DirectLocal`]).
    pub(crate) thieves: Thieves,
    /// The run in progress was interrupted ([`RunInterrupter`]): its settle gives up on
    /// the cores still running kernels without waiting out the scheduler timeout.
    /// Cleared when the next run opens.
    pub(crate) interrupted: AtomicBool,
}

/// A resident simulated chip. See the module doc.
///
/// One chip serves many dispatches; each [`run`](Self::run) takes the arena of its own
/// ring sizing from the chip's cache (built once per sizing, then reused).
///
/// ```
/// use taskring::builtin::FILL;
/// use taskring::*;
///
/// let mut chip = ChipWorker::new(ChipOptions { cores: 2, ..ChipOptions::default() }).unwrap();
/// assert_eq!(chip.cores().len(), 2);
///
/// let fill = Program::new("fill", |o, args| {
///     let mut t = TaskArgs::new();
///     t.output_existing(args[0].tensor()?).scalar(args[1].scalar()?);
///     o.submit(FILL, &t).map(|_| ())
/// });
/// let mut out = vec![0.0f32; 16];
/// let args = [
///     Arg::Tensor(CallerTensor::f32(&mut out, &[4, 4])),
///     Arg::Scalar(Scalar::F64(7.0)),
/// ];
/// let sizing = RingSizing::uniform(16, 64 << 10, 64).unwrap();
/// let first = chip.run_with_sizing(&fill, &args, &sizing).unwrap();
/// let again = chip.run_with_sizing(&fill, &args, &sizing).unwrap();
/// assert!(!first.arena_hit && again.arena_hit); // the second run reused the arena
/// assert_eq!(chip.arena_stats().builds, 1);
/// drop(args);
/// assert_eq!(out, vec![7.0f32; 16]);
/// ```
pub struct ChipWorker {
    pub(crate) shared: Arc<ChipShared>,
    threads: Vec<(Arc<Core>, JoinHandle<()>)>,
    pub(crate) kinds: Vec<CoreKind>,
    pub(crate) cache: ArenaCache,
    /// How the orchestrator waits for space (`ChipOptions::backstop`,
    /// `ChipOptions::scheduler_timeout`).
    waits: WaitPolicy,
    pub(crate) scheduler_timeout: Duration,
    /// How this chip's own runs go (`ChipOptions::orchestrator_helps`). The engine of a
    /// next level (`nextlevel::Level`) runs under its level's policy instead.
    pub(crate) policy: ChipPolicy,
    /// This worker's id (unique in the process).
    id: u64,
    /// The orchestrator thread's own ready tasks while it helps a direct replay.
    pub(crate) direct_local: DirectLocal,
    /// Kernels given up on that may still write memory (`chip/quarantine.rs`).
    stuck: Vec<quarantine::Stuck>,
    /// What `"auto"` dispatches learned, by program and argument signature
    /// (`chip/auto.rs`).
    auto: auto::AutoTable,
    /// Bytes of device-resident tensors charged to the device memory
    /// ([`ChipWorker::hold_resident_tensors`]).
    resident_tensors: u64,
}

impl ChipWorker {
    /// This worker's id, unique in the process (a captured graph replays only on the
    /// worker that captured it).
    pub fn worker_id(&self) -> u64 {
        self.id
    }

    /// Start the core threads and prewarm `opts.prewarm`.
    pub fn new(opts: ChipOptions) -> Result<ChipWorker, RuntimeFailure> {
        ChipWorker::start(opts, 0, false)
    }

    /// The engine of a next level (`nextlevel::Level`): its "cores" are dispatch threads
    /// over `lanes` lane queues (core `i` takes only the tasks of lane `i % lanes`; a
    /// kernel names its tasks' lane through `Kernel::ready_queue`), and its ring heaps are
    /// in shared memory (an L3 node's runtime outputs, which its chips read).
    pub(crate) fn next_level_engine(
        opts: ChipOptions,
        lanes: usize,
    ) -> Result<ChipWorker, RuntimeFailure> {
        ChipWorker::start(opts, lanes, true)
    }

    fn start(
        opts: ChipOptions,
        lanes: usize,
        shared_heaps: bool,
    ) -> Result<ChipWorker, RuntimeFailure> {
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
        if opts.device_memory < MIN_DEVICE_MEMORY {
            return Err(RuntimeFailure::new(
                StatusCode::RuntimeSetup,
                None,
                format!(
                    "device_memory must be an int >= {MIN_DEVICE_MEMORY} (bytes), got {}",
                    opts.device_memory
                ),
            ));
        }
        let mut cache = if shared_heaps {
            ArenaCache::new_shared(opts.arena_cache_slots)
        } else {
            ArenaCache::new(opts.arena_cache_slots)
        }
        .with_device_memory(opts.device_memory);
        let slots = cache.slots();
        for s in opts.prewarm.iter().filter(|s| !s.is_auto()).take(slots) {
            cache
                .prewarm(s)
                .map_err(|e| acquire_failure(&e, "prewarm"))?;
        }
        for s in opts.prewarm_if_fits.iter().filter(|s| !s.is_auto()) {
            if cache.stats().resident.len() >= slots {
                break;
            }
            match cache.prewarm(s) {
                Ok(()) => {}
                Err(e @ crate::arena::AcquireError::OutOfMemory { .. }) => eprintln!(
                    "taskring: no arena is built ahead: {e}; each sizing's arena is built at its first dispatch"
                ),
                Err(e) => return Err(acquire_failure(&e, "prewarm")),
            }
        }
        let shared = Arc::new(ChipShared {
            eng: EngineShared::with_lanes(lanes),
            trace: AtomicBool::new(false),
            trace_t0: parking_lot::Mutex::new(None),
            arena: AtomicPtr::new(std::ptr::null_mut()),
            cores: parking_lot::RwLock::new(Vec::with_capacity(cores)),
            direct: AtomicPtr::new(std::ptr::null_mut()),
            direct_quiet: std::sync::atomic::AtomicU8::new(0),
            thieves: Thieves::new(1 + cores),
            interrupted: AtomicBool::new(false),
        });
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        shared.eng.set_cpu_share(&kinds, cpus);
        // Slot 0 of the thieves: the orchestrator's deque (it helps direct replays).
        let (direct_local, stealer) = DirectLocal::new(0);
        shared.thieves.set(0, stealer);
        let mut w = ChipWorker {
            shared,
            threads: Vec::with_capacity(cores),
            kinds: kinds.clone(),
            cache,
            waits: WaitPolicy {
                backstop: opts.backstop,
                scheduler_timeout: opts.scheduler_timeout,
            },
            scheduler_timeout: opts.scheduler_timeout,
            policy: ChipPolicy {
                orchestrator_helps: opts.orchestrator_helps,
            },
            id: NEXT_WORKER_ID.fetch_add(1, Relaxed),
            direct_local,
            stuck: Vec::new(),
            auto: auto::AutoTable::default(),
            resident_tensors: 0,
        };
        for (i, &kind) in kinds.iter().enumerate() {
            w.start_core(i, kind)?;
        }
        Ok(w)
    }

    /// Lane queues of the engine (`ChipWorker::next_level_engine`, at most 61).
    pub(crate) fn lanes(&self) -> usize {
        self.shared.eng.lanes()
    }

    /// Start core thread `i` (a new one, or the replacement of an abandoned one).
    fn start_core(&mut self, i: usize, kind: CoreKind) -> Result<(), RuntimeFailure> {
        let lanes = self.shared.eng.lanes();
        let core = Arc::new(Core {
            kind,
            queue: if lanes > 0 {
                crate::engine::shared::lane_queue(i % lanes)
            } else {
                crate::engine::shared::queue_index(kind)
            },
            lane: parking_lot::Mutex::new(crate::dfx::Lane::default()),
            state: CachePadded::new(AtomicU64::new(CORE_IDLE)),
            progress: CachePadded::new(std::sync::atomic::AtomicU64::new(0)),
        });
        {
            let mut cores = self.shared.cores.write();
            if i < cores.len() {
                cores[i] = core.clone();
            } else {
                cores.push(core.clone());
            }
        }
        let (local, stealer) = DirectLocal::new(1 + i);
        self.shared.thieves.set(1 + i, stealer);
        let sh = self.shared.clone();
        let rec = core.clone();
        let name = format!("taskring-core{i}-{}", kind.name());
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || core_loop(&sh, &core, local))
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

    /// Give up on cores whose kernel never returned (step 4 of the abort handshake, see
    /// `chip/core.rs`: a core that won the race to its completion is not given up on),
    /// and start replacements. Returns the cores given up on, with their tasks.
    fn replace_stuck_cores(&mut self) -> Vec<quarantine::GivenUp> {
        let stuck: Vec<(usize, TaskId, Arc<Core>)> = self
            .shared
            .cores
            .read()
            .iter()
            .enumerate()
            .filter_map(|(i, c)| abort::give_up_task(&c.state).map(|t| (i, t, c.clone())))
            .collect();
        let mut given_up = Vec::with_capacity(stuck.len());
        for (i, task, core) in stuck {
            let thread = self
                .threads
                .iter()
                .find(|(c, _)| Arc::ptr_eq(c, &core))
                .map(|(_, h)| h.thread().id());
            given_up.push(quarantine::GivenUp {
                core: i,
                task,
                thread,
            });
            // A core that cannot be restarted stays abandoned; the chip runs with fewer.
            let _ = self.start_core(i, core.kind);
        }
        given_up
    }

    /// Threads of cores given up on (a kernel that never returned) that still run.
    /// A host whose kernels can be interrupted (Python's) uses it to stop them.
    pub fn abandoned_threads(&self) -> Vec<std::thread::ThreadId> {
        self.threads
            .iter()
            .filter(|(c, t)| abort::is_abandoned(&c.state) && !t.is_finished())
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
    pub(crate) fn trace_start(&self) -> Option<Instant> {
        *self.shared.trace_t0.lock()
    }

    /// Build `sizing`'s arena now if it is not resident.
    pub fn prewarm(&mut self, sizing: &RingSizing) -> Result<(), RuntimeFailure> {
        self.cache
            .prewarm(sizing)
            .map_err(|e| acquire_failure(&e, "prewarm"))
    }

    /// The chip's device memory now, with `sizing`'s arena footprint.
    pub fn device_memory(&self, sizing: &RingSizing) -> DeviceMemory {
        DeviceMemory {
            arena_bytes: crate::arena::device_footprint(sizing),
            used_bytes: self.cache.used_bytes(),
            capacity_bytes: self.cache.capacity(),
        }
    }
}

/// A failure to get an arena as the run's error: DEVICE_OUT_OF_MEMORY when it does not
/// fit the device memory, else RUNTIME_SETUP (`what`: "prewarm" or "arena").
pub(crate) fn acquire_failure(e: &crate::arena::AcquireError, what: &str) -> RuntimeFailure {
    match e {
        crate::arena::AcquireError::OutOfMemory { .. } => {
            RuntimeFailure::new(StatusCode::DeviceOutOfMemory, None, e.to_string())
        }
        crate::arena::AcquireError::Reserve(_) => {
            RuntimeFailure::new(StatusCode::RuntimeSetup, None, format!("{what}: {e}"))
        }
    }
}

impl Drop for ChipWorker {
    fn drop(&mut self) {
        // Before the threads go: a kernel given up on that still runs keeps its arena.
        self.leak_stuck_arenas();
        self.shared.eng.shutdown.store(true, SeqCst);
        self.shared.eng.wake_all_cores();
        for (core, t) in self.threads.drain(..) {
            // An abandoned core may never return from its kernel: do not wait for it.
            if !abort::is_abandoned(&core.state) || t.is_finished() {
                let _ = t.join();
            }
        }
    }
}
