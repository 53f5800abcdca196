//! L3: a host running one engine whose tasks are whole L2 dispatches, each shipped with
//! its own `CallConfig` to a chip — a child process (default) or a thread.
//!
//! One engine, two executors (ARCHITECTURE.md §1): the node is a [`ChipWorker`] whose
//! "kernel" is the chip dispatch: a core thread of the node that picks a ready L3 task
//! encodes it into its chip's mailbox ([`frame`], [`mailbox`]), waits for the reply and
//! completes the task. Dependencies between L2 tasks are inferred by the node's
//! tensormap from their tensor arguments, exactly as at L2.
//!
//! Life of a node:
//! 1. [`Node::new`] creates one mailbox per chip, then forks the chip processes (before
//!    the node starts any thread of its own; programs registered so far are inherited),
//!    or starts chip threads. Each chip builds its `ChipWorker`, prewarms the
//!    `prewarm` sizing and reports READY or FAILED; `new` waits for all with one
//!    deadline and rolls everything back on any failure.
//! 2. [`Node::run`] runs an orchestration on the caller's thread; each
//!    `submit_next_level` copies the task's whole `CallConfig` into the node's task
//!    table; the chip resolves its sizing from it (then its own environment, then the
//!    defaults) and answers with a [`ChipTaskReport`].
//! 3. A chip whose task fails fails the run with `chip {worker} (pid {pid}): ...`; a chip
//!    process that dies is noticed within a wait slice (50 ms) and reported with its
//!    exit status; the other chips keep working.
//! 4. [`Node::close`] (or drop) asks every chip to exit, reaps it (SIGKILL after a grace
//!    period), and unmaps the mailboxes. A chip process whose host dies notices it
//!    (its parent changes) within half a second and exits.

pub mod frame;
pub mod mailbox;
pub mod shm;

use crate::chip::{Arg, ChipOptions, ChipWorker, HostTensor, Program, RunError};
use crate::config::{CallConfig, RingSizing};
use crate::engine::{Orchestrator, PeakUse, RuntimeFailure, Scalar, StatusCode, TaskArgs, TaskOutputs, TensorSpec};
use crate::tensor::TaskId;
use crate::kernel::{Kernel, KernelCall, KernelRef};
use crate::tensor::Tensor;
use frame::{ReplyFrame, TaskFrame, WireArg, WireReport, WireTensor};
use mailbox::{futex_wake, wait_until, Mailbox, STATE_FAILED, STATE_READY, STATE_SHUTDOWN, STATE_STARTING};
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a program uses each argument (its signature).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgDir {
    In,
    Out,
    InOut,
    Scalar,
}

/// A program chips can run, with its signature.
#[derive(Clone)]
pub struct ChipCallable {
    pub program: Program,
    pub signature: Vec<ArgDir>,
}

/// Hooks around `fork()` (an embedding interpreter's before/after-fork calls).
pub trait ForkHooks {
    fn before(&self) {}
    fn after_parent(&self) {}
    fn after_child(&self) {}
}

/// No hooks (pure Rust hosts).
pub struct NoForkHooks;
impl ForkHooks for NoForkHooks {}

/// A hook called around the runtime's blocking waits (see `ChipWorker::run_with_hook`).
pub type BlockingHook = Arc<dyn Fn(bool) + Send + Sync>;

/// How to build a node.
#[derive(Clone)]
pub struct NodeOptions {
    pub device_ids: Vec<u32>,
    /// Chips as child processes (true) or as threads of this process.
    pub chip_processes: bool,
    pub arena_cache_slots: usize,
    /// Core threads per chip (0 = available parallelism).
    pub chip_cores: usize,
    /// Dispatch threads of the node (0 = two per chip).
    pub node_cores: usize,
    /// Sizing every chip builds before it reports ready (validated first).
    pub prewarm: Option<CallConfig>,
    /// Deadline for all chips to report ready.
    pub init_timeout: Duration,
    /// Used by chips around their blocking waits (e.g. releasing an interpreter lock).
    pub blocking_hook: Option<BlockingHook>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            device_ids: vec![0],
            chip_processes: true,
            arena_cache_slots: 4,
            chip_cores: 0,
            node_cores: 0,
            prewarm: None,
            init_timeout: Duration::from_secs(30),
            blocking_hook: None,
        }
    }
}

/// What a chip reported for one L2 task.
#[derive(Clone, Debug, PartialEq)]
pub struct ChipTaskReport {
    pub worker: usize,
    pub callable: u32,
    /// The sizing the chip resolved (None if the task failed before that).
    pub ring_sizing: Option<RingSizing>,
    pub peak: PeakUse,
    pub tasks: u64,
    pub arena_hit: bool,
    pub arena_build_s: f64,
    pub elapsed_s: f64,
    pub error: Option<String>,
}

/// What one L3 run did.
#[derive(Clone, Debug)]
pub struct NodeRunReport {
    /// One report per L2 task, in submission order.
    pub tasks: Vec<ChipTaskReport>,
    pub elapsed_s: f64,
}

/// Why a node could not start or a run failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    Config(String),
    /// A chip's own failure, `chip {worker} (pid {pid}): ...`.
    #[error("{0}")]
    Chip(String),
    #[error("{0}")]
    Failure(RuntimeFailure),
}

/// One chip endpoint (host side).
struct Chip {
    worker: usize,
    pid: i32,
    mailbox: Arc<Mailbox>,
    /// Request number; held for a whole round trip (one task in flight per chip).
    seq: Mutex<u32>,
    dead: Mutex<Option<String>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Chip {
    fn prefix(&self) -> String {
        format!("chip {} (pid {})", self.worker, self.pid)
    }

    /// Has the chip died? Records why.
    fn check_dead(&self) -> Option<String> {
        let mut d = self.dead.lock();
        if d.is_some() {
            return d.clone();
        }
        if self.pid > 0 && self.pid as u32 != std::process::id() {
            let mut status = 0;
            // safety: non-blocking reap of our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                let why = if libc::WIFSIGNALED(status) {
                    format!("the chip process was killed by signal {}", libc::WTERMSIG(status))
                } else {
                    format!("the chip process exited with status {}", libc::WEXITSTATUS(status))
                };
                *d = Some(format!("{}: {why}", self.prefix()));
            }
        } else {
            let t = self.thread.lock();
            if t.as_ref().is_none_or(|t| t.is_finished()) {
                *d = Some(format!("{}: the chip thread ended", self.prefix()));
            }
        }
        d.clone()
    }

    /// One round trip with a task.
    fn call(&self, task: &TaskFrame) -> Result<ReplyFrame, String> {
        self.round_trip(|buf| frame::encode_task(task, buf))
    }

    /// One round trip with the request `encode` writes.
    fn round_trip(&self, encode: impl FnOnce(&mut [u8]) -> Result<usize, frame::FrameError>) -> Result<ReplyFrame, String> {
        let mut seq = self.seq.lock();
        if let Some(d) = self.check_dead() {
            return Err(d);
        }
        let h = self.mailbox.header();
        // safety: we hold the chip's lock and no request is in flight.
        let n = encode(unsafe { self.mailbox.req_buf() }).map_err(|e| format!("{}: cannot encode the request: {e}", self.prefix()))?;
        *seq = seq.wrapping_add(1);
        let want = *seq;
        h.req_len.store(n as u32, Relaxed);
        h.req_seq.store(want, Release);
        futex_wake(&h.req_seq);
        let ok = wait_until(&h.resp_seq, || h.resp_seq.load(Acquire) == want, || self.check_dead().is_some(), Duration::from_millis(50));
        if !ok {
            return Err(self.check_dead().unwrap_or_else(|| format!("{}: no reply", self.prefix())));
        }
        let len = (h.resp_len.load(Acquire) as usize).min(mailbox::FRAME_BYTES);
        // safety: the chip wrote the reply before publishing resp_seq (acquired above).
        let buf = unsafe { &self.mailbox.resp_buf()[..len] };
        frame::decode_reply(buf).map_err(|e| format!("{}: bad reply frame: {e}", self.prefix()))
    }
}

/// Where a program argument is in the dispatched task.
#[derive(Clone, Copy, Debug)]
enum ArgRef {
    /// Index in the task's tensors (canonical order: inputs, inouts, outputs).
    Tensor(usize),
    Int(i64),
    Float(f64),
}

#[derive(Clone, Debug)]
struct L3Task {
    worker: usize,
    callable: u32,
    config: CallConfig,
    args: Vec<ArgRef>,
}

#[derive(Default)]
struct RunState {
    tasks: Vec<L3Task>,
    reports: Vec<Option<ChipTaskReport>>,
    first_chip_error: Option<String>,
}

struct NodeShared {
    chips: Vec<Chip>,
    run: Mutex<RunState>,
}

/// The node's executor: ships a ready L3 task to its chip and waits for the reply.
struct Dispatch {
    node: Arc<NodeShared>,
}

impl Dispatch {
    fn wire_tensor(t: &Tensor) -> Result<WireTensor, String> {
        let bytes = t.extent() * t.dtype.size_bytes() as u64;
        let addr = t.data_ptr() as u64;
        let (region, region_bytes, off) = shm::locate(addr, bytes)
            .ok_or_else(|| "a tensor argument is not in shared memory (use taskring.shared_array or a node allocation)".to_string())?;
        Ok(WireTensor {
            dtype: t.dtype,
            ndims: t.ndims,
            region,
            region_bytes,
            offset_bytes: off,
            shape: t.shape,
            strides: t.strides,
        })
    }
}

impl Kernel for Dispatch {
    fn name(&self) -> &str {
        "chip-dispatch"
    }
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        let idx = call.scalar_i64(0) as usize;
        let task = self.node.run.lock().tasks[idx].clone();
        let chip = &self.node.chips[task.worker];
        let mut args = Vec::with_capacity(task.args.len());
        for a in &task.args {
            args.push(match *a {
                ArgRef::Tensor(i) => WireArg::Tensor(Self::wire_tensor(&call.tensors[i]).map_err(|e| format!("{}: {e}", chip.prefix()))?),
                ArgRef::Int(v) => WireArg::Int(v),
                ArgRef::Float(v) => WireArg::Float(v),
            });
        }
        let frame = TaskFrame { callable: task.callable, config: task.config.clone(), args };
        let reply = chip.call(&frame);
        let mut st = self.node.run.lock();
        let (report, err) = match reply {
            Ok(r) => {
                let err = (r.status != 0).then(|| format!("{}: {}", chip.prefix(), r.error));
                (report_of(task.worker, task.callable, r.report.as_ref(), err.clone()), err)
            }
            Err(e) => (report_of(task.worker, task.callable, None, Some(e.clone())), Some(e)),
        };
        if idx < st.reports.len() {
            st.reports[idx] = Some(report);
        }
        match err {
            None => Ok(()),
            Some(e) => {
                if st.first_chip_error.is_none() {
                    st.first_chip_error = Some(e.clone());
                }
                Err(e)
            }
        }
    }
}

fn report_of(worker: usize, callable: u32, r: Option<&WireReport>, error: Option<String>) -> ChipTaskReport {
    let mut rep = ChipTaskReport {
        worker,
        callable,
        ring_sizing: None,
        peak: PeakUse::default(),
        tasks: 0,
        arena_hit: false,
        arena_build_s: 0.0,
        elapsed_s: 0.0,
        error,
    };
    if let Some(r) = r {
        rep.ring_sizing = RingSizing::from_key_and_sources(r.sizing, r.sources).ok();
        rep.peak = PeakUse {
            task_window: [r.peak[0], r.peak[1], r.peak[2], r.peak[3]],
            heap: [r.peak[4], r.peak[5], r.peak[6], r.peak[7]],
            dep_pool: [r.peak[8], r.peak[9], r.peak[10], r.peak[11]],
        };
        rep.tasks = r.tasks;
        rep.arena_hit = r.arena_hit;
        rep.arena_build_s = r.arena_build_s;
        rep.elapsed_s = r.elapsed_s;
    }
    rep
}

/// One argument of `submit_next_level`.
#[derive(Clone, Copy, Debug)]
pub enum NodeArg {
    Tensor(Tensor),
    Int(i64),
    Float(f64),
}

/// The orchestration API of an L3 run.
pub struct NodeOrchestrator<'a, 'r> {
    o: &'a mut Orchestrator<'r>,
    node: &'a NodeShared,
    callables: &'a RwLock<Vec<ChipCallable>>,
    dispatch: KernelRef,
}

impl<'r> NodeOrchestrator<'_, 'r> {
    /// The underlying engine orchestrator (scopes, alloc).
    pub fn engine(&mut self) -> &mut Orchestrator<'r> {
        self.o
    }

    pub fn chips(&self) -> usize {
        self.node.chips.len()
    }

    /// Submit the L2 task `callable(args)` to chip `worker`, run there with `config`.
    pub fn submit_next_level(&mut self, callable: u32, args: &[NodeArg], config: &CallConfig, worker: usize) -> Result<TaskId, RuntimeFailure> {
        let bad = |msg: String| RuntimeFailure::invalid_args(None, format!("submit_next_level: {msg}"));
        if worker >= self.node.chips.len() {
            return Err(bad(format!("worker {worker} is not a chip of this node (it has {})", self.node.chips.len())));
        }
        config.validate().map_err(|e| bad(e.message))?;
        let sig = {
            let c = self.callables.read();
            c.get(callable as usize).map(|c| c.signature.clone()).ok_or_else(|| bad(format!("unknown callable handle {callable}")))?
        };
        if sig.len() != args.len() {
            return Err(bad(format!("the program takes {} arguments, got {}", sig.len(), args.len())));
        }
        // Tensors in canonical order: inputs, inouts, outputs.
        let group = |d: ArgDir| match d {
            ArgDir::In => 0,
            ArgDir::InOut => 1,
            ArgDir::Out => 2,
            ArgDir::Scalar => 3,
        };
        let mut counts = [0usize; 4];
        for d in &sig {
            counts[group(*d)] += 1;
        }
        let starts = [0, counts[0], counts[0] + counts[1]];
        let mut seen = [0usize; 3];
        let mut refs = Vec::with_capacity(args.len());
        let mut ta = TaskArgs::new();
        for (i, (d, a)) in sig.iter().zip(args).enumerate() {
            match (d, a) {
                (ArgDir::Scalar, NodeArg::Int(v)) => refs.push(ArgRef::Int(*v)),
                (ArgDir::Scalar, NodeArg::Float(v)) => refs.push(ArgRef::Float(*v)),
                (ArgDir::Scalar, NodeArg::Tensor(_)) => return Err(bad(format!("argument {i} is SCALAR but a tensor was given"))),
                (_, NodeArg::Tensor(t)) => {
                    if Dispatch::wire_tensor(t).is_err() {
                        return Err(bad(format!("argument {i} is not in shared memory (use taskring.shared_array or a node allocation)")));
                    }
                    let g = group(*d);
                    refs.push(ArgRef::Tensor(starts[g] + seen[g]));
                    seen[g] += 1;
                    match d {
                        ArgDir::In => ta.input(*t),
                        ArgDir::InOut => ta.inout(*t),
                        _ => ta.output_existing(*t),
                    };
                }
                (_, _) => return Err(bad(format!("argument {i} must be a tensor"))),
            }
        }
        let idx = {
            let mut st = self.node.run.lock();
            st.tasks.push(L3Task { worker, callable, config: config.clone(), args: refs });
            st.reports.push(None);
            st.tasks.len() - 1
        };
        ta.scalar(Scalar::I64(idx as i64));
        self.o.submit(self.dispatch, &ta).map(|r| r.id)
    }

    /// An allocation in the node's (shared) memory, alive until the current scope ends.
    pub fn alloc(&mut self, spec: TensorSpec) -> Result<TaskOutputs, RuntimeFailure> {
        self.o.alloc(&[spec])
    }
}

/// Asks chips for their arena statistics (usable while a run is in flight: a chip
/// answers between two of its tasks).
#[derive(Clone)]
pub struct ChipStatsHandle {
    shared: Arc<NodeShared>,
}

impl ChipStatsHandle {
    /// Chip `worker`'s arena-cache statistics.
    pub fn chip_arena_stats(&self, worker: usize) -> Result<crate::arena::ArenaStats, NodeError> {
        let chip = self.shared.chips.get(worker).ok_or_else(|| NodeError::Config(format!("worker {worker} is not a chip of this node")))?;
        let r = chip.round_trip(frame::encode_stats_request).map_err(NodeError::Chip)?;
        let st = r.stats.ok_or_else(|| NodeError::Chip(format!("{}: {}", chip.prefix(), r.error)))?;
        Ok(crate::arena::ArenaStats { builds: st.builds, hits: st.hits, misses: st.misses, evictions: st.evictions, resident: st.resident, build_s: st.build_s })
    }
}

/// A host with chips. See the module doc.
pub struct Node {
    shared: Arc<NodeShared>,
    callables: Arc<RwLock<Vec<ChipCallable>>>,
    engine: Option<ChipWorker>,
    dispatch: KernelRef,
    closed: bool,
}

/// What a chip (process or thread) needs to serve tasks.
struct ChipContext {
    host_pid: i32,
    in_process: bool,
    opts: NodeOptions,
    callables: Arc<RwLock<Vec<ChipCallable>>>,
}

/// Write a start-up failure into the reply buffer and publish FAILED.
fn report_start_failure(mb: &Mailbox, text: &str) {
    let r = ReplyFrame { status: StatusCode::RuntimeSetup.code(), error: text.to_string(), report: None, stats: None };
    // safety: the chip side owns the reply buffer while starting.
    if let Ok(n) = frame::encode_reply(&r, unsafe { mb.resp_buf() }) {
        mb.header().resp_len.store(n as u32, Release);
    }
    mb.header().state.store(STATE_FAILED, Release);
    futex_wake(&mb.header().state);
}

/// A chip's life: build, prewarm, report, serve until shutdown. Returns an exit code.
fn chip_main(ctx: ChipContext, mb: &Mailbox) -> i32 {
    let h = mb.header();
    let mut sizings = vec![];
    if let Some(c) = &ctx.opts.prewarm {
        match RingSizing::resolve_from_process(&c.runtime_env) {
            Ok(s) => sizings.push(s),
            Err(e) => {
                report_start_failure(mb, &e.message);
                return 1;
            }
        }
    }
    let copts = ChipOptions { cores: ctx.opts.chip_cores, arena_cache_slots: ctx.opts.arena_cache_slots, prewarm: sizings, ..ChipOptions::default() };
    let mut chip = match ChipWorker::new(copts) {
        Ok(c) => c,
        Err(e) => {
            report_start_failure(mb, &e.to_string());
            return 1;
        }
    };
    h.state.store(STATE_READY, Release);
    futex_wake(&h.state);
    let mut regions = shm::RegionMap::new(ctx.host_pid, ctx.in_process);
    let host_gone = || !ctx.in_process && unsafe { libc::getppid() } != ctx.host_pid;
    let mut served = 0u32;
    loop {
        let ok = wait_until(
            &h.req_seq,
            || h.req_seq.load(Acquire) != served || h.state.load(Acquire) == STATE_SHUTDOWN,
            || host_gone() || h.state.load(Acquire) == STATE_SHUTDOWN,
            Duration::from_millis(500),
        );
        if !ok || h.state.load(Acquire) == STATE_SHUTDOWN {
            return 0;
        }
        served = h.req_seq.load(Acquire);
        let len = (h.req_len.load(Acquire) as usize).min(mailbox::FRAME_BYTES);
        // safety: the host wrote the request before publishing req_seq (acquired above)
        // and does not touch it until we reply.
        let req = unsafe { &mb.req_buf()[..len] };
        let reply = serve(&ctx, &mut chip, &mut regions, req);
        // safety: we own the reply buffer until we publish resp_seq.
        let n = match frame::encode_reply(&reply, unsafe { mb.resp_buf() }) {
            Ok(n) => n,
            Err(e) => frame::encode_reply(&ReplyFrame { status: StatusCode::RuntimeSetup.code(), error: format!("cannot encode the reply: {e}"), report: None, stats: None }, unsafe { mb.resp_buf() }).unwrap_or(0),
        };
        h.resp_len.store(n as u32, Release);
        h.resp_seq.store(served, Release);
        futex_wake(&h.resp_seq);
    }
}

/// Run one task frame on this chip.
fn serve(ctx: &ChipContext, chip: &mut ChipWorker, regions: &mut shm::RegionMap, req: &[u8]) -> ReplyFrame {
    let fail = |status: StatusCode, e: String| ReplyFrame { status: status.code(), error: e, report: None, stats: None };
    if let Ok(frame::KIND_STATS) = frame::request_kind(req) {
        let st = chip.arena_stats();
        return ReplyFrame {
            status: 0,
            error: String::new(),
            report: None,
            stats: Some(frame::WireStats { builds: st.builds, hits: st.hits, misses: st.misses, evictions: st.evictions, build_s: st.build_s, resident: st.resident }),
        };
    }
    let task = match frame::decode_task(req) {
        Ok(t) => t,
        Err(e) => return fail(StatusCode::InvalidArgs, format!("bad task frame: {e}")),
    };
    let callable = match ctx.callables.read().get(task.callable as usize) {
        Some(c) => c.clone(),
        None => return fail(StatusCode::InvalidArgs, format!("unknown callable {} (registered after this chip started?)", task.callable)),
    };
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(task.args.len());
    for (i, a) in task.args.iter().enumerate() {
        match a {
            WireArg::Int(v) => args.push(Arg::Scalar(Scalar::I64(*v))),
            WireArg::Float(v) => args.push(Arg::Scalar(Scalar::F64(*v))),
            WireArg::Tensor(w) => {
                let base = match regions.resolve(w.region, w.region_bytes) {
                    Ok(b) => b,
                    Err(e) => return fail(StatusCode::InvalidArgs, format!("argument {i}: {e}")),
                };
                let esize = w.dtype.size_bytes() as u64;
                if w.offset_bytes % esize != 0 {
                    return fail(StatusCode::InvalidArgs, format!("argument {i}: misaligned offset"));
                }
                let mut t = Tensor::from_raw(base, &[1], w.dtype);
                t.buf_bytes = w.region_bytes;
                t.offset = w.offset_bytes / esize;
                t.ndims = w.ndims;
                t.shape = w.shape;
                t.strides = w.strides;
                if let Err(e) = t.validate() {
                    return fail(StatusCode::InvalidArgs, format!("argument {i}: {e}"));
                }
                // safety: the region is mapped for this chip's lifetime and the host
                // keeps the buffer alive while the task runs.
                args.push(Arg::Tensor(unsafe { HostTensor::from_raw(t) }));
            }
        }
    }
    let r = match &ctx.opts.blocking_hook {
        Some(h) => chip.run_with_hook(&callable.program, &args, &task.config, &**h),
        None => chip.run(&callable.program, &args, &task.config),
    };
    match r {
        Ok(rep) => {
            let s = rep.ring_sizing;
            let p = rep.peak;
            let mut peak = [0u64; 12];
            peak[..4].copy_from_slice(&p.task_window);
            peak[4..8].copy_from_slice(&p.heap);
            peak[8..].copy_from_slice(&p.dep_pool);
            ReplyFrame {
                status: 0,
                error: String::new(),
                report: Some(WireReport {
                    sizing: s.key(),
                    sources: s.source_codes(),
                    peak,
                    tasks: rep.tasks,
                    arena_hit: rep.arena_hit,
                    arena_build_s: rep.arena_build_s,
                    elapsed_s: rep.elapsed_s,
                }),
                stats: None,
            }
        }
        Err(RunError::Config(e)) => fail(StatusCode::InvalidArgs, e.message),
        Err(RunError::Failure(f)) => ReplyFrame { status: f.code.code(), error: f.to_string(), report: None, stats: None },
    }
}

impl Node {
    /// Start the chips (see the module doc). `callables` are the programs chips can
    /// run; in process mode a chip knows those registered before this call.
    pub fn new(opts: NodeOptions, callables: Arc<RwLock<Vec<ChipCallable>>>, hooks: &dyn ForkHooks) -> Result<Node, NodeError> {
        if opts.device_ids.is_empty() {
            return Err(NodeError::Config("device_ids must not be empty".into()));
        }
        if let Some(c) = &opts.prewarm {
            c.validate().map_err(|e| NodeError::Config(e.message))?;
        }
        let host_pid = std::process::id() as i32;
        let mut chips: Vec<Chip> = Vec::with_capacity(opts.device_ids.len());
        for worker in 0..opts.device_ids.len() {
            let mb = match Mailbox::new() {
                Ok(m) => Arc::new(m),
                Err(e) => {
                    shutdown_chips(&chips);
                    return Err(NodeError::Config(format!("mailbox: {e}")));
                }
            };
            let ctx = ChipContext { host_pid, in_process: !opts.chip_processes, opts: opts.clone(), callables: callables.clone() };
            let (pid, thread) = if opts.chip_processes {
                hooks.before();
                // safety: fork; the child runs only `chip_main` and then `_exit`s, never
                // returning into the caller's code or running destructors.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    hooks.after_child();
                    // A lock another host thread held at fork() stays locked in the
                    // child: std's stderr lock is one the default panic hook takes, so a
                    // panicking kernel could hang the chip. Panics are reported through
                    // their payload (the task's error text); print nothing here.
                    std::panic::set_hook(Box::new(|_| {}));
                    // No PR_SET_PDEATHSIG: it fires when the forking *thread* exits, not
                    // the host process. The chip polls getppid() between requests.
                    unsafe {
                        if libc::getppid() != host_pid {
                            libc::_exit(1);
                        }
                    }
                    let code = chip_main(ctx, &mb);
                    unsafe { libc::_exit(code) };
                }
                hooks.after_parent();
                if pid < 0 {
                    let e = std::io::Error::last_os_error();
                    shutdown_chips(&chips);
                    return Err(NodeError::Config(format!("fork of chip {worker}: {e}")));
                }
                (pid, None)
            } else {
                let m = mb.clone();
                let t = match std::thread::Builder::new().name(format!("taskring-chip{worker}")).spawn(move || {
                    chip_main(ctx, &m);
                }) {
                    Ok(t) => t,
                    Err(e) => {
                        shutdown_chips(&chips);
                        return Err(NodeError::Config(format!("chip thread: {e}")));
                    }
                };
                (host_pid, Some(t))
            };
            chips.push(Chip { worker, pid, mailbox: mb, seq: Mutex::new(0), dead: Mutex::new(None), thread: Mutex::new(thread) });
        }
        // Wait for every chip, with one deadline.
        let deadline = Instant::now() + opts.init_timeout;
        for c in &chips {
            let h = c.mailbox.header();
            let ok = wait_until(
                &h.state,
                || h.state.load(Acquire) != STATE_STARTING,
                || Instant::now() >= deadline || c.check_dead().is_some(),
                Duration::from_millis(20),
            );
            let state = h.state.load(Acquire);
            if !ok || state != STATE_READY {
                let why = if state == STATE_FAILED {
                    let len = (h.resp_len.load(Acquire) as usize).min(mailbox::FRAME_BYTES);
                    // safety: the chip published FAILED after writing its reason.
                    let buf = unsafe { &c.mailbox.resp_buf()[..len] };
                    frame::decode_reply(buf).map(|r| r.error).unwrap_or_else(|e| e.to_string())
                } else if let Some(d) = c.check_dead() {
                    d
                } else {
                    format!("not ready within {} ms", opts.init_timeout.as_millis())
                };
                shutdown_chips(&chips);
                let text = if why.starts_with("chip ") { why } else { format!("{}: {why}", c.prefix()) };
                return Err(NodeError::Chip(text));
            }
        }
        let shared = Arc::new(NodeShared { chips, run: Mutex::new(RunState::default()) });
        let node_cores = if opts.node_cores == 0 { 2 * opts.device_ids.len() } else { opts.node_cores };
        let engine = match ChipWorker::new(ChipOptions {
            cores: node_cores,
            aic_cores: Some(0),
            arena_cache_slots: opts.arena_cache_slots,
            shared_heaps: true,
            // One node task is a whole L2 dispatch: no L2-sized timeouts here (a dead
            // chip is caught by waitpid; a chip's own hangs by the chip's timeouts).
            backstop: Duration::from_secs(365 * 24 * 3600),
            scheduler_timeout: Duration::from_secs(365 * 24 * 3600),
            ..ChipOptions::default()
        }) {
            Ok(e) => e,
            Err(e) => {
                shutdown_chips(&shared.chips);
                return Err(NodeError::Failure(e));
            }
        };
        let dispatch = KernelRef::leak(Dispatch { node: shared.clone() });
        Ok(Node { shared, callables, engine: Some(engine), dispatch, closed: false })
    }

    /// Process ids of the chips (the host's own pid for chip threads).
    pub fn chip_pids(&self) -> Vec<i32> {
        self.shared.chips.iter().map(|c| c.pid).collect()
    }

    /// Number of chips.
    pub fn chips(&self) -> usize {
        self.shared.chips.len()
    }

    /// Chip `worker`'s arena-cache statistics (asked of the chip).
    pub fn chip_arena_stats(&self, worker: usize) -> Result<crate::arena::ArenaStats, NodeError> {
        self.stats_handle().chip_arena_stats(worker)
    }

    /// A handle that can ask chips for their statistics while a run is in flight.
    pub fn stats_handle(&self) -> ChipStatsHandle {
        ChipStatsHandle { shared: self.shared.clone() }
    }


    /// The node's own engine (its L3 arena cache):
    pub fn engine(&self) -> Option<&ChipWorker> {
        self.engine.as_ref()
    }

    /// Run `orch` (L3 orchestration) with the node's own sizing from `config`.
    pub fn run(
        &mut self,
        orch: impl Fn(&mut NodeOrchestrator<'_, '_>) -> Result<(), RuntimeFailure> + Send + Sync + 'static,
        config: &CallConfig,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<NodeRunReport, NodeError> {
        let t0 = Instant::now();
        let engine = self.engine.as_mut().ok_or_else(|| NodeError::Config("the node is closed".into()))?;
        *self.shared.run.lock() = RunState::default();
        let shared = self.shared.clone();
        let callables = self.callables.clone();
        let dispatch = self.dispatch;
        let program = Program::new("l3", move |o, _| {
            let mut no = NodeOrchestrator { o, node: &shared, callables: &callables, dispatch };
            orch(&mut no)
        });
        let r = match hook {
            Some(h) => engine.run_with_hook(&program, &[], config, h),
            None => engine.run(&program, &[], config),
        };
        let mut st = self.shared.run.lock();
        match r {
            Ok(_) => Ok(NodeRunReport {
                tasks: st.reports.drain(..).map(|r| r.expect("every L2 task reported")).collect(),
                elapsed_s: t0.elapsed().as_secs_f64(),
            }),
            Err(RunError::Config(e)) => Err(NodeError::Config(e.message)),
            Err(RunError::Failure(f)) => match st.first_chip_error.take() {
                Some(text) if f.code == StatusCode::TaskFailed => Err(NodeError::Chip(text)),
                _ => Err(NodeError::Failure(f)),
            },
        }
    }

    /// Stop every chip and the node's engine (idempotent).
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        // Chips first: an in-flight round trip then returns at once (the chip is dead),
        // so the node's cores can be joined.
        shutdown_chips(&self.shared.chips);
        self.engine = None;
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.close();
    }
}

/// Ask every chip to exit and reap it (SIGKILL after a grace period).
fn shutdown_chips(chips: &[Chip]) {
    for c in chips {
        let h = c.mailbox.header();
        h.state.store(STATE_SHUTDOWN, Release);
        futex_wake(&h.req_seq);
        futex_wake(&h.state);
    }
    let grace = Instant::now() + Duration::from_secs(2);
    for c in chips {
        if let Some(t) = c.thread.lock().take() {
            let _ = t.join();
            *c.dead.lock() = Some(format!("{}: closed", c.prefix()));
            continue;
        }
        if c.pid <= 0 || c.dead.lock().is_some() {
            continue;
        }
        loop {
            let mut status = 0;
            // safety: reaping our own child.
            let r = unsafe { libc::waitpid(c.pid, &mut status, libc::WNOHANG) };
            if r == c.pid || r < 0 {
                break;
            }
            if Instant::now() >= grace {
                unsafe {
                    libc::kill(c.pid, libc::SIGKILL);
                    libc::waitpid(c.pid, &mut status, 0);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        *c.dead.lock() = Some(format!("{}: closed", c.prefix()));
    }
}
