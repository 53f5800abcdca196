//! L3: a host running one engine whose tasks are whole L2 dispatches, each shipped with
//! its own `CallConfig` to a chip — a child process (default) or a thread.
//!
//! One engine, two executors (`docs/architecture.md`): the node is a [`ChipWorker`] whose
//! "kernel" is the chip dispatch: a core thread of the node that picks a ready L3 task
//! encodes it into its chip's mailbox ([`frame`], [`mailbox`]), waits for the reply and
//! completes the task. Dependencies between L2 tasks are inferred by the node's
//! tensormap from their tensor arguments, exactly as at L2.
//!
//! Life of a node:
//! 1. [`Node::new`] creates one mailbox and one *host pipe* per chip, then forks the
//!    chip processes (before the node starts any thread of its own; programs registered
//!    so far are inherited), or starts chip threads. Each chip builds its `ChipWorker`,
//!    prewarms the `prewarm` sizing and reports READY or FAILED; `new` waits for all
//!    with one deadline and rolls everything back on any failure.
//! 2. [`Node::run`] runs an orchestration on the caller's thread; each
//!    `submit_next_level` copies the task's whole `CallConfig` into the node's task
//!    table; the chip resolves its sizing from it (then its own environment, then the
//!    defaults) and answers with a [`ChipTaskReport`].
//! 3. A chip whose task fails fails the run with `chip {worker} (pid {pid}): ...`; a chip
//!    process that dies is noticed within a wait slice (20 ms) and reported with its
//!    exit status; the other chips keep working.
//! 4. [`Node::close`] (or drop) asks every chip to exit and closes the host pipes (a
//!    chip process exits at once when its pipe closes), kills the chips that do not
//!    answer, reaps them (SIGKILL for any left after 1 s), and unmaps the mailboxes. The
//!    whole node (mailboxes, pipes, engine threads and arenas) is freed: init/close
//!    cycles leak nothing.
//!
//! # Outputs for tools (`docs/api.md` §7)
//!
//! - **A chip task's DFX files** (its `CallConfig`'s scope stats, `deps.json`,
//!   swimlane) go to `{its output_prefix}/chip{worker}/` ([`chip_dir`]; a prefix that
//!   already ends in `chip{worker}` is used as it is), so chips given one prefix do not
//!   overwrite each other. Several tasks of one chip in one run write the same files:
//!   the last one's stay.
//! - **The run's own files** (the run's `CallConfig`: the host engine's scope stats and
//!   `deps.json`, whose scopes are the orchestration's) go to the run's `output_prefix`.
//! - **One L3 timeline**: when the run's config asks for a swimlane, the host writes one
//!   `{output_prefix}/merged_swimlane.json` when the run ends (also a failed one). Every
//!   chip task of the run then records its swimlane (its own prefix, else the run's;
//!   `enable_chip_swimlane` at least 1), which the chip writes to its `chip{worker}/`
//!   directory before it replies; with the reply the chip leaves in its mailbox
//!   header the thread that served the task, when, and its swimlane's start on
//!   `CLOCK_MONOTONIC`. The dispatching host thread reads the file while it still
//!   holds the chip's turn (no later task of that chip can overwrite it first). The
//!   file ([`trace`]): the host process (`host (pid P)`: the orchestration thread with
//!   the run and each task's `submit`, and each node thread with the dispatches it
//!   ran), then one process per chip (`chip {worker} (pid P)`: the thread that served
//!   each task, a slice per task, and its core lanes with the kernels); flow arrows
//!   from each submit to its dispatch (id `2i + 1` for L3 task `i`) and from each
//!   dispatch to the chip task it started (id `2i + 2`). One clock for all: every
//!   time is read on `CLOCK_MONOTONIC`, which all processes of the machine share (see
//!   [`trace`]).
//!
//! # Faults (what a node survives)
//!
//! - **Stopped or frozen chip.** Every chip process runs a watchdog thread that bumps
//!   the mailbox's `heartbeat` word every 20 ms ([`mailbox::HEARTBEAT`]), whatever its
//!   cores do. A host thread waiting for a reply (or for its turn on a busy chip) checks
//!   in 20 ms slices: `waitpid` (death), the heartbeat, and the run's cancel flag. When
//!   the heartbeat has not moved for the chip timeout ([`NodeOptions::chip_timeout`]:
//!   `TASKRING_CHIP_TIMEOUT_MS`, default 2000 ms) while the host watched continuously,
//!   the waiting task fails with `chip {w} (pid {pid}): not responding: no heartbeat
//!   for {n} ms (process state ...)` (the state, from `/proc/<pid>/stat`, says e.g.
//!   `T, stopped`). A chip that only runs a long or stuck kernel keeps beating: a
//!   stuck kernel is the chip's own SCHEDULER_TIMEOUT (`PTO2_SCHEDULER_TIMEOUT_MS`,
//!   default 10 s), which the chip reports as its task's failure. A chip stopped and
//!   later continued answers its old request first, then works again (once seen
//!   stopped and then running, it gets a fresh watch: its old heartbeat value is no
//!   evidence until the watchdog has run again). Not detected: a
//!   chip whose own orchestration code never returns (it keeps beating, and no
//!   SCHEDULER_TIMEOUT covers orchestration code) — cancel/Ctrl-C still ends the wait.
//! - **Other chips are not held up**: each chip has its own turn lock and its own
//!   *lane* in the node's engine — a ready queue that only that chip's dispatch thread
//!   takes from (one dispatch thread per chip by default; `node_cores` threads serve
//!   `min(node_cores, chips)` lanes, thread `i` lane `i % lanes`, chip `w` lane
//!   `w % lanes`). A chip's backlog of ready tasks, or a stopped chip, occupies only
//!   its own lane's thread; the other chips' tasks run meanwhile (measured before lanes:
//!   8 ready 50 ms tasks on chip 0 delayed a task on chip 1 by ~250 ms; now not at all,
//!   `tests/node.rs`). With fewer threads than chips, chips sharing a lane wait for
//!   each other.
//! - **A failed run** still waits (with the hook, below) for the dispatches under way
//!   on other chips, so that no chip writes into the caller's memory after `run`
//!   returns — except after an interrupt.
//! - **Interrupt**: [`NodeHandle::cancel`] (Python: `KeyboardInterrupt` — the run's hook
//!   runs the signal handlers at least every 50 ms while the run waits for its chips,
//!   and every 20 ms while a submit waits for ring space) makes every waiting dispatch
//!   give up at once; the run fails with [`NodeError::Interrupted`]. A chip may still
//!   be running the interrupted task: the next run (or that chip's next request) first
//!   waits for its late reply, so the worker stays usable; `close()` does not wait for
//!   it (a chip process exits as its host pipe closes; a chip thread is left to finish
//!   its task if it has not after 1 s).
//! - **`close()` while a run is in flight** (from another thread, after
//!   [`NodeHandle::request_close`]) waits for the run as long as its chips beat (a stuck
//!   kernel ends with the chip's SCHEDULER_TIMEOUT), but dispatches give up on chips
//!   whose heartbeat has not moved for 100 ms or whose process is stopped, and such
//!   chips are SIGKILLed at once: with a stopped chip `close()` returns in ~10 ms.
//! - **Host death**: the host holds the only write end of each chip's pipe (the end is
//!   registered process-wide and closed in every child of `fork()` by an atfork handler,
//!   so neither other chips nor a user's `os.fork()` keep it open). The chip's watchdog
//!   blocks in `poll` on the read end and `_exit`s as soon as it reads EOF — when the
//!   host dies for any reason, also in the middle of a task (measured: ~10 ms).
//!   (`PR_SET_PDEATHSIG` is not used: it fires when the forking *thread* exits, which
//!   a Python host thread may do long before the process.) Chip processes ignore
//!   SIGINT: Ctrl-C in a terminal reaches the whole process group, and only the host
//!   decides what an interrupt means.
//! - **`fork()` of the host**: a node belongs to the process that created it. In a
//!   child every entry point fails at once (`... was created in process {pid}; it
//!   cannot be used after fork()`), and dropping or closing it there touches nothing
//!   the parent owns (no signal, no wait, no fd; the engine's threads, which do not
//!   exist in the child, are not joined).

pub mod frame;
pub mod mailbox;
/// Shared memory lives in [`crate::mem::shm`] (the arena's heaps use it at L2); the node
/// and the Python face keep reaching it here.
pub use crate::mem::shm;
pub mod trace;

use crate::chip::{Arg, ChipOptions, ChipWorker, HostTensor, Program, RunError, RunReport};
use crate::config::{CallConfig, ConfigError, RingSizing};
use crate::engine::{
    Orchestrator, PeakUse, RuntimeFailure, Scalar, StatusCode, TaskArgs, TaskOutputs, TensorSpec,
};
use crate::kernel::{Kernel, KernelCall, KernelRef};
use crate::tensor::TaskId;
use crate::tensor::Tensor;
use frame::{ReplyFrame, TaskFrame, WireArg, WireReport, WireTensor};
use mailbox::{futex_wake, Mailbox, STATE_FAILED, STATE_READY, STATE_SHUTDOWN, STATE_STARTING};
use parking_lot::{Condvar, Mutex, RwLock};
use std::cell::RefCell;
use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicBool, AtomicI32};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a host thread waiting on a chip checks it (death, heartbeat, cancel).
const SLICE: Duration = Duration::from_millis(20);
/// How long a chip found alive before a request is trusted to be alive for the next
/// ones (`Chip::dead_before_post`).
const ALIVE_RECHECK: Duration = Duration::from_millis(1);
/// How often the caller of [`Node::run`] calls its blocking hook while it waits.
const HOOK_SLICE: Duration = Duration::from_millis(50);
/// A gap this long between two looks at a chip's heartbeat is no evidence of a stall
/// (the host was idle, or was itself stopped): the watch starts over.
const WATCH_GAP: Duration = Duration::from_millis(250);
/// While the node is closing, a chip whose heartbeat stood still this long is given up.
const CLOSE_STALL: Duration = Duration::from_millis(100);
/// How long `close` lets chips exit before it SIGKILLs them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

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
pub(crate) type BlockingHook = Arc<dyn Fn(bool) + Send + Sync>;

/// How to build a node.
#[derive(Clone)]
pub struct NodeOptions {
    pub device_ids: Vec<u32>,
    /// Chips as child processes (true) or as threads of this process.
    pub chip_processes: bool,
    pub arena_cache_slots: usize,
    /// Core threads per chip (0 = available parallelism).
    pub chip_cores: usize,
    /// Dispatch threads of the node (0 = one per chip). Thread `i` serves the chips of
    /// lane `i % lanes` (`lanes = min(node_cores, chips)`, chip `w` in lane `w % lanes`).
    pub node_cores: usize,
    /// Sizing every chip builds before it reports ready (validated first).
    pub prewarm: Option<CallConfig>,
    /// Deadline for all chips to report ready.
    pub init_timeout: Duration,
    /// Used by chips around their blocking waits (e.g. releasing an interpreter lock).
    pub blocking_hook: Option<BlockingHook>,
    /// A chip process whose heartbeat stands still this long is `not responding` (the
    /// task waiting on it fails). Default 2 s, or `TASKRING_CHIP_TIMEOUT_MS`.
    pub chip_timeout: Duration,
    /// Every chip's device memory (`ChipOptions::device_memory`). Default 64 GiB, or
    /// `TASKRING_DEVICE_MEMORY`.
    pub device_memory: u64,
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
            chip_timeout: std::env::var("TASKRING_CHIP_TIMEOUT_MS")
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&v| v > 0)
                .map(Duration::from_millis)
                .unwrap_or(Duration::from_secs(2)),
            device_memory: crate::chip::default_device_memory(),
        }
    }
}

/// What a chip reported for one L2 task: who ran it, and the chip's own L2
/// [`RunReport`] of it.
#[derive(Clone, Debug, PartialEq)]
pub struct ChipTaskReport {
    pub worker: usize,
    pub callable: u32,
    /// The chip's report of the run: its resolved sizing, peaks, task count, arena and
    /// times (`replayed` is false: a chip never replays an L3 task). `None` when the task
    /// did not complete — the chip answered with a failure (a failed run sends no
    /// report, whatever it resolved), or no answer came — and then `error` says why.
    pub run: Option<RunReport>,
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
    /// A configuration (the prewarm sizing, a run's [`CallConfig`]) breaks a rule;
    /// [`ConfigError::kind`] names it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// [`NodeOptions::device_ids`] is empty: a node needs at least one chip.
    #[error("device_ids must not be empty")]
    NoDevices,
    /// `worker` is not a chip of this node.
    #[error("worker {0} is not a chip of this node")]
    NoSuchChip(usize),
    /// The node was closed (or is closing); it runs nothing more.
    #[error("the node is closed")]
    Closed,
    /// The OS refused what starting chip `worker` needs: `what` (its mailbox, host pipe,
    /// process or thread) and the OS's reason.
    #[error("{what}: {reason}")]
    Start {
        worker: usize,
        what: String,
        reason: String,
    },
    /// A chip's own failure (`chip {worker} (pid {pid}): {text}`).
    #[error(transparent)]
    Chip(#[from] ChipFault),
    /// The runtime's own failure of a run (a status code and its diagnosis).
    #[error("{0}")]
    Failure(RuntimeFailure),
    /// The run was cancelled ([`NodeHandle::cancel`]).
    #[error("{0}")]
    Interrupted(String),
    /// Used in a child of `fork()`; the node belongs to process `.0`.
    #[error("this node was created in process {0}; it cannot be used after fork()")]
    Forked(u32),
}

/// A chip's own failure: the chip (its worker index and pid) and what it or the host
/// said about it (its error text, or why the host stopped waiting for it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("chip {worker} (pid {pid}): {text}")]
pub struct ChipFault {
    pub worker: usize,
    pub pid: i32,
    pub text: String,
}

impl NodeError {
    fn start(worker: usize, what: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        NodeError::Start {
            worker,
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}

/// One chip endpoint (host side).
struct Chip {
    worker: usize,
    pid: i32,
    /// A child process (heartbeat, host pipe), or a thread of this process.
    process: bool,
    mailbox: Arc<Mailbox>,
    /// Request number; held for a whole round trip (one task in flight per chip).
    /// `resp_seq != *seq` means a request was given up on and its reply is still due.
    seq: Mutex<u32>,
    /// Why the chip is gone (dead or closed), once known.
    dead: Mutex<Option<String>>,
    /// Bytes of device-resident tensors the chip was told it holds (`chip_hold`).
    held: std::sync::atomic::AtomicU64,
    /// When `check_dead` last found the chip alive (`trace::mono_ns`; 0: never): the
    /// dispatch path asks again only after [`ALIVE_RECHECK`] (see `dead_before_post`).
    alive_at: std::sync::atomic::AtomicU64,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Write end of the chip's host pipe (-1 when closed or for a chip thread).
    pipe: AtomicI32,
    beat: Mutex<Beat>,
}

/// The host's watch of a chip's heartbeat.
struct Beat {
    value: u32,
    since: Instant,
    looked: Instant,
    /// Seen stopped (state T) during the current stall.
    stopped: bool,
}

/// What waits on chips consult: the run's cancel flag, close, the chip timeout.
struct Ctl {
    cancel: AtomicBool,
    closing: AtomicBool,
    timeout: Duration,
}

impl Chip {
    fn prefix(&self) -> String {
        format!("chip {} (pid {})", self.worker, self.pid)
    }

    /// A failure of this chip, saying `text`.
    fn fault(&self, text: impl Into<String>) -> ChipFault {
        ChipFault {
            worker: self.worker,
            pid: self.pid,
            text: text.into(),
        }
    }

    fn interrupted(&self) -> ChipFault {
        self.fault("interrupted")
    }

    /// Has the chip died? Records why.
    fn check_dead(&self) -> Option<ChipFault> {
        let mut d = self.dead.lock();
        if d.is_none() {
            *d = self.why_dead();
        }
        d.as_deref().map(|why| self.fault(why))
    }

    /// Before a request is posted: the chip's known death, and a fresh look (a
    /// `waitpid`) only if the last one that found it alive is older than
    /// [`ALIVE_RECHECK`] — one syscall per round trip cost ~0.4 µs of the L3 round
    /// trip's CPU. A chip that died since is still caught at once by the reply's wait
    /// (its `give_up` looks every time before it sleeps).
    fn dead_before_post(&self) -> Option<ChipFault> {
        let now = trace::mono_ns();
        let seen = self.alive_at.load(Relaxed);
        if seen != 0 && now.saturating_sub(seen) < ALIVE_RECHECK.as_nanos() as u64 {
            return self.dead.lock().as_deref().map(|why| self.fault(why));
        }
        let r = self.check_dead();
        if r.is_none() {
            self.alive_at.store(now, Relaxed);
        }
        r
    }

    /// Why the chip is dead, if it is (a reaped process, an ended thread).
    fn why_dead(&self) -> Option<String> {
        if self.process {
            let mut status = 0;
            // safety: non-blocking reap of our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                let why = if libc::WIFSIGNALED(status) {
                    format!(
                        "the chip process was killed by signal {}",
                        libc::WTERMSIG(status)
                    )
                } else if libc::WEXITSTATUS(status) == STUCK_KERNEL_EXIT {
                    format!(
                        "the chip process exited with status {STUCK_KERNEL_EXIT} (the status it \
                         ends with when a kernel it gave up on after SCHEDULER_TIMEOUT has not \
                         returned)"
                    )
                } else {
                    format!(
                        "the chip process exited with status {}",
                        libc::WEXITSTATUS(status)
                    )
                };
                return Some(why);
            }
        } else {
            let t = self.thread.lock();
            if t.as_ref().is_none_or(|t| t.is_finished()) {
                return Some("the chip thread ended".into());
            }
        }
        None
    }

    /// How long the chip's heartbeat has stood still while the host watched it (zero
    /// for a chip thread, which shares the host's fate). A chip seen stopped and then
    /// running again starts a new watch: its watchdog beats within one period of being
    /// continued, and its old value is no evidence until then.
    fn stalled_for(&self) -> Duration {
        if !self.process {
            return Duration::ZERO;
        }
        let v = self.mailbox.header().heartbeat.load(Acquire);
        let now = Instant::now();
        let mut b = self.beat.lock();
        if b.value != v || now.duration_since(b.looked) > WATCH_GAP {
            *b = Beat {
                value: v,
                since: now,
                looked: now,
                stopped: false,
            };
        }
        b.looked = now;
        if now.duration_since(b.since) >= 5 * mailbox::HEARTBEAT {
            let stopped = proc_state(self.pid).is_some_and(|c| c == 'T' || c == 't');
            if b.stopped && !stopped {
                b.since = now;
            }
            b.stopped = stopped;
        }
        now.duration_since(b.since)
    }

    /// Why a host thread waiting on this chip should stop waiting, if it should.
    fn give_up(&self, ctl: &Ctl) -> Option<ChipFault> {
        poll_inline_hook();
        if let Some(d) = self.check_dead() {
            return Some(d);
        }
        if ctl.cancel.load(Acquire) {
            return Some(self.interrupted());
        }
        let stalled = self.stalled_for();
        let closing = ctl.closing.load(Acquire);
        let limit = if closing { CLOSE_STALL } else { ctl.timeout };
        if self.process
            && (stalled >= limit
                || (closing && proc_state(self.pid).is_some_and(|c| c == 'T' || c == 't')))
        {
            let state = match proc_state(self.pid) {
                Some('T') => "T, stopped".to_string(),
                Some('t') => "t, stopped by a tracer".to_string(),
                Some('D') => "D, uninterruptible sleep".to_string(),
                Some(c) => c.to_string(),
                None => "unknown".to_string(),
            };
            return Some(self.fault(format!(
                "not responding: no heartbeat for {} ms (process state {state})",
                stalled.as_millis()
            )));
        }
        None
    }

    /// Wait until `cond` holds, sleeping on `word` in slices (counted in `sleeping` when
    /// its publisher uses [`mailbox::publish`]); `Err(why)` when a wait on
    /// this chip should end ([`Chip::give_up`]) or `until` has passed.
    fn wait(
        &self,
        ctl: &Ctl,
        (word, sleeping): (
            &std::sync::atomic::AtomicU32,
            Option<&std::sync::atomic::AtomicU32>,
        ),
        cond: impl Fn() -> bool,
        until: Option<Instant>,
    ) -> Result<(), Option<ChipFault>> {
        let why = RefCell::new(None);
        let stop = || {
            if until.is_some_and(|u| Instant::now() >= u) {
                return true;
            }
            let r = self.give_up(ctl);
            let stop = r.is_some();
            *why.borrow_mut() = r;
            stop
        };
        if mailbox::wait_until_flagged(word, sleeping, cond, stop, SLICE) {
            Ok(())
        } else {
            Err(why.take())
        }
    }

    /// This chip's turn (its request lock), waiting as long as the chip is alive.
    fn turn(&self, ctl: &Ctl) -> Result<parking_lot::MutexGuard<'_, u32>, ChipFault> {
        loop {
            if let Some(g) = self.seq.try_lock_for(SLICE) {
                return Ok(g);
            }
            if let Some(e) = self.give_up(ctl) {
                return Err(e);
            }
        }
    }

    /// Wait for the reply to request `want`.
    fn await_reply(&self, ctl: &Ctl, want: u32) -> Result<(), ChipFault> {
        let h = self.mailbox.header();
        self.wait(
            ctl,
            (&h.resp_seq, Some(&h.resp_sleeping)),
            || h.resp_seq.load(Acquire) == want,
            None,
        )
        .map_err(|why| why.unwrap_or_else(|| self.fault("no reply")))
    }

    /// One round trip with a task; `after(posted_ns)` runs once the reply is in, while
    /// this host thread still holds the chip's turn (the chip starts nothing else).
    fn call<T>(
        &self,
        ctl: &Ctl,
        task: &TaskFrame,
        stamp: bool,
        after: impl FnOnce(u64) -> T,
    ) -> Result<(ReplyFrame, T), ChipFault> {
        self.round_trip_then(ctl, |buf| frame::encode_task(task, buf), stamp, after)
    }

    /// One round trip with the request `encode` writes.
    fn round_trip(
        &self,
        ctl: &Ctl,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, frame::FrameError>,
    ) -> Result<ReplyFrame, ChipFault> {
        self.round_trip_then(ctl, encode, false, |_| ())
            .map(|(r, ())| r)
    }

    /// One round trip, then `after(posted_ns)` (when the request was posted, on
    /// `CLOCK_MONOTONIC`, if `stamp`; else 0) with the chip's turn still held.
    fn round_trip_then<T>(
        &self,
        ctl: &Ctl,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, frame::FrameError>,
        stamp: bool,
        after: impl FnOnce(u64) -> T,
    ) -> Result<(ReplyFrame, T), ChipFault> {
        let mut seq = self.turn(ctl)?;
        if let Some(d) = self.dead_before_post() {
            return Err(d);
        }
        if ctl.cancel.load(Acquire) {
            return Err(self.interrupted());
        }
        let h = self.mailbox.header();
        // A request given up on (an interrupted run) may still run there: its reply first.
        if h.resp_seq.load(Acquire) != *seq {
            self.await_reply(ctl, *seq)?;
        }
        // safety: we hold the chip's lock and no request is in flight.
        let n = encode(unsafe { self.mailbox.req_buf() })
            .map_err(|e| self.fault(format!("cannot encode the request: {e}")))?;
        *seq = seq.wrapping_add(1);
        let want = *seq;
        h.req_len.store(n as u32, Relaxed);
        let posted = if stamp { trace::mono_ns() } else { 0 };
        mailbox::publish(&h.req_seq, want, &h.req_sleeping);
        self.await_reply(ctl, want)?;
        let len = (h.resp_len.load(Acquire) as usize).min(mailbox::FRAME_BYTES);
        // safety: the chip wrote the reply before publishing resp_seq (acquired above).
        let buf = unsafe { &self.mailbox.resp_buf()[..len] };
        let r =
            frame::decode_reply(buf).map_err(|e| self.fault(format!("bad reply frame: {e}")))?;
        Ok((r, after(posted)))
    }

    /// The Perfetto pid of this chip on the L3 timeline: its own pid, or (a chip
    /// thread, which shares the host's) a number no process can have (pids are below
    /// 2^22 on Linux).
    fn lane_pid(&self) -> u64 {
        if self.process {
            self.pid as u64
        } else {
            (1 << 30) + self.worker as u64
        }
    }

    /// Wait up to `budget` for the late reply of a request given up on earlier. True
    /// when none is due any more, or the chip is dead or not responding (its next
    /// request then fails with that).
    fn settle(&self, ctl: &Ctl, budget: Duration) -> bool {
        let until = Instant::now() + budget;
        let Some(seq) = self.seq.try_lock_for(budget) else {
            return false;
        };
        let h = self.mailbox.header();
        let want = *seq;
        match self.wait(
            ctl,
            (&h.resp_seq, Some(&h.resp_sleeping)),
            || h.resp_seq.load(Acquire) == want,
            Some(until),
        ) {
            Ok(()) => true,
            Err(why) => why.is_some(),
        }
    }

    /// Close the host pipe: a chip process exits as soon as it reads EOF.
    fn close_pipe(&self) {
        let fd = self.pipe.swap(-1, AcqRel);
        if fd >= 0 {
            host_pipes::unregister(fd);
            // safety: our own fd, closed once (swapped out above).
            unsafe { libc::close(fd) };
        }
    }
}

/// The state letter of process `pid` (`/proc/<pid>/stat`), e.g. 'T' when stopped.
fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..].trim_start().chars().next()
}

/// Process-wide registry of the write ends of chips' host pipes. The host must be the
/// only holder of each (a chip reads EOF when the host dies), so every child of
/// `fork()` — chips of this and other nodes, and a user's `os.fork()` — closes all of
/// them first thing, in an atfork handler (fd numbers in a fixed array of atomics: the
/// handler takes no lock and allocates nothing).
mod host_pipes {
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering::*};

    const SLOTS: usize = 1024;
    static FDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
    /// Slots ever used (the handler scans only those).
    static USED: AtomicUsize = AtomicUsize::new(0);
    static ATFORK: std::sync::Once = std::sync::Once::new();

    extern "C" fn close_all_in_child() {
        for s in &FDS[..USED.load(Relaxed).min(SLOTS)] {
            let fd = s.swap(-1, Relaxed);
            if fd >= 0 {
                // safety: an fd of the registry, inherited by this child; close is
                // async-signal-safe.
                unsafe { libc::close(fd) };
            }
        }
    }

    /// A new host pipe `(read end, write end)`, both close-on-exec, the write end
    /// registered.
    pub(crate) fn create() -> std::io::Result<(i32, i32)> {
        ATFORK.call_once(|| {
            // safety: registers a child handler that only closes fds.
            unsafe { libc::pthread_atfork(None, None, Some(close_all_in_child)) };
        });
        let mut fds = [-1i32; 2];
        // safety: a plain syscall with a checked result.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for (i, s) in FDS.iter().enumerate() {
            if s.compare_exchange(-1, fds[1], AcqRel, Relaxed).is_ok() {
                USED.fetch_max(i + 1, AcqRel);
                return Ok((fds[0], fds[1]));
            }
        }
        // safety: our own fresh fds.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        Err(std::io::Error::other(format!(
            "more than {SLOTS} chip processes in this process"
        )))
    }

    /// Forget `fd` (before closing it).
    pub(crate) fn unregister(fd: i32) {
        for s in &FDS[..USED.load(Acquire).min(SLOTS)] {
            if s.compare_exchange(fd, -1, AcqRel, Relaxed).is_ok() {
                return;
            }
        }
    }
}

/// A chip process's watchdog: bumps the heartbeat every [`mailbox::HEARTBEAT`] and
/// `_exit`s the process as soon as the host pipe reads EOF (the host died or closed
/// the node), whatever the chip's other threads are doing.
fn watchdog(mb: Arc<Mailbox>, pipe: i32) {
    let h = mb.header();
    loop {
        let mut p = libc::pollfd {
            fd: pipe,
            events: libc::POLLIN,
            revents: 0,
        };
        // safety: poll on our own fd.
        let r = unsafe { libc::poll(&mut p, 1, mailbox::HEARTBEAT.as_millis() as i32) };
        if r > 0 {
            let mut b = [0u8; 64];
            // safety: read into a local buffer. The host never writes: data or not, a
            // readable pipe here means EOF (or an error) — the host is gone.
            let n = unsafe { libc::read(pipe, b.as_mut_ptr() as *mut libc::c_void, b.len()) };
            if n <= 0
                && !(n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted)
            {
                // safety: ends the process without running anything of it.
                unsafe { libc::_exit(0) };
            }
        }
        h.heartbeat.fetch_add(1, Release);
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
    /// L3 tasks whose dispatch ended (replied, failed or given up).
    finished: usize,
    /// Dispatches under way.
    in_flight: usize,
    first_chip_error: Option<ChipFault>,
    /// The run's timeline while it is recorded (the run's config asks for a swimlane).
    trace: Option<RunTrace>,
}

impl RunState {
    /// A new run's state, keeping the task and report vectors' memory (a run of 20 000
    /// tasks grew them from nothing each time: ~1 KiB of copies and fresh pages per
    /// task), up to [`RunState::KEEP`] entries.
    fn reset(&mut self, trace: Option<RunTrace>) {
        self.tasks.clear();
        self.reports.clear();
        if self.tasks.capacity() > Self::KEEP {
            self.tasks.shrink_to(Self::KEEP);
            self.reports.shrink_to(Self::KEEP);
        }
        self.finished = 0;
        self.in_flight = 0;
        self.first_chip_error = None;
        self.trace = trace;
    }

    /// Task entries whose memory a node keeps between runs.
    const KEEP: usize = 1 << 16;
}

/// What the host records of a run for its timeline (`merged_swimlane.json`).
struct RunTrace {
    /// The run's `output_prefix`.
    prefix: String,
    t0_ns: u64,
    /// The thread that runs the orchestration.
    orch_tid: u64,
    /// One per L3 task, as `RunState::tasks`.
    tasks: Vec<TaskTrace>,
}

/// One L3 task on the timeline.
#[derive(Default)]
struct TaskTrace {
    /// `(start, end)` of its `submit_next_level`.
    submit: Option<(u64, u64)>,
    dispatch: Option<DispatchTrace>,
}

/// A dispatch on a node thread and what its chip reported.
struct DispatchTrace {
    tid: u64,
    thread: String,
    start_ns: u64,
    /// Request posted (after waiting for the chip's turn) and reply seen.
    posted_ns: u64,
    replied_ns: u64,
    /// The chip's side; None when no reply came.
    chip: Option<ChipSide>,
}

/// A chip's side of one task: the thread that served it, when, and its own swimlane.
struct ChipSide {
    tid: u64,
    served_ns: u64,
    replied_ns: u64,
    /// The swimlane's `ts = 0` on the host's clock; the events, or why there are none.
    t0_ns: u64,
    events: Result<trace::ChipTrace, String>,
}

impl RunState {
    /// Nothing more to wait for: every task dispatched, or the run failed and the
    /// dispatches already under way ended.
    fn over(&self) -> bool {
        self.finished >= self.tasks.len()
            || (self.first_chip_error.is_some() && self.in_flight == 0)
    }
}

struct NodeShared {
    chips: Vec<Chip>,
    /// The run in flight records its timeline (`RunState::trace` is set).
    tracing: AtomicBool,
    run: Mutex<RunState>,
    /// Notified when a dispatch ends.
    done: Condvar,
    ctl: Ctl,
    /// Every chip's device memory (`NodeOptions::device_memory`).
    device_memory: u64,
}

/// The node's executor: ships a ready L3 task to its chip and waits for the reply.
/// One per lane (chip `w`'s tasks go to lane `w % lanes`, whose dispatch threads take
/// only them): see [`node_engine_options`].
struct Dispatch {
    node: Arc<NodeShared>,
    lane: usize,
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

/// What the host records of one dispatch's round trip for the timeline: when the request
/// was posted, when the reply was seen, and the chip's side.
type TraceSide = Option<(u64, u64, ChipSide)>;

impl Dispatch {
    /// The config the chip gets: in a traced run every chip records its swimlane (under
    /// the task's own prefix, else the run's; in `chip{worker}/` there), to merge it
    /// after the reply.
    fn chip_config(task: &L3Task, run_prefix: Option<&String>) -> CallConfig {
        let mut config = task.config.clone();
        if let Some(p) = run_prefix {
            config.enable_chip_swimlane = config.enable_chip_swimlane.max(1);
            if config.output_prefix.is_empty() {
                config.output_prefix = p.clone();
            }
        }
        config
    }

    /// The chip's side of a traced dispatch, read while the host still holds the chip's
    /// turn (no later task of that chip can overwrite its swimlane file first).
    fn chip_side(chip: &Chip, swimlane: &std::path::Path, posted_ns: u64) -> (u64, u64, ChipSide) {
        let replied_ns = trace::mono_ns();
        let h = chip.mailbox.header();
        let t0_ns = h.trace_t0_ns.load(Acquire);
        let events = if t0_ns == 0 {
            Err("the chip recorded no swimlane".to_string())
        } else {
            trace::read_chip_trace(swimlane)
        };
        let side = ChipSide {
            tid: h.served_tid.load(Acquire) as u64,
            served_ns: h.served_ns.load(Acquire),
            replied_ns: h.replied_ns.load(Acquire),
            t0_ns,
            events,
        };
        (posted_ns, replied_ns, side)
    }

    /// Record the dispatch's trace, count it finished, store its report; the task's
    /// error (if any) becomes the run's first chip error when it is the first.
    fn record(
        &self,
        idx: usize,
        task: &L3Task,
        reply: Result<(ReplyFrame, TraceSide), ChipFault>,
        start_ns: u64,
    ) -> Result<(), ChipFault> {
        let chip = &self.node.chips[task.worker];
        let (reply, side) = match reply {
            Ok((r, side)) => (Ok(r), side),
            Err(e) => (Err(e), None),
        };
        let mut st = self.node.run.lock();
        if let Some(t) = st.trace.as_mut().and_then(|t| t.tasks.get_mut(idx)) {
            let end_ns = trace::mono_ns();
            let (posted_ns, replied_ns, chip) = match side {
                Some((p, r, c)) => (p, r, Some(c)),
                None => (end_ns, end_ns, None),
            };
            let thread = std::thread::current()
                .name()
                .unwrap_or("node thread")
                .to_string();
            t.dispatch = Some(DispatchTrace {
                tid: trace::gettid(),
                thread,
                start_ns,
                posted_ns,
                replied_ns,
                chip,
            });
        }
        st.finished += 1;
        st.in_flight -= 1;
        let (report, err) = match reply {
            Ok(r) => {
                let err = (r.status != 0).then(|| chip.fault(r.error));
                let text = err.as_ref().map(ChipFault::to_string);
                (
                    report_of(task.worker, task.callable, r.report.as_ref(), text),
                    err,
                )
            }
            Err(e) => (
                report_of(task.worker, task.callable, None, Some(e.to_string())),
                Some(e),
            ),
        };
        if idx < st.reports.len() {
            st.reports[idx] = Some(report);
        }
        if let Some(e) = &err {
            if st.first_chip_error.is_none() {
                st.first_chip_error = Some(e.clone());
            }
        }
        // The run's waiter (`wait_dispatched`) wants only the end: waking it for each
        // of a long run's tasks cost a futex wake and a context switch per task.
        if st.over() {
            self.node.done.notify_all();
        }
        match err {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

impl Kernel for Dispatch {
    fn name(&self) -> &str {
        "chip-dispatch"
    }
    fn ready_queue(&self) -> usize {
        crate::engine::shared::lane_queue(self.lane)
    }
    /// One L3 task's dispatch: claim it (and the run's trace prefix), encode its frame,
    /// the round trip to its chip, then record the trace and the report.
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        let idx = call.scalar_i64(0) as usize;
        // Timestamps only for a traced run (three clock reads per dispatch otherwise).
        let start_ns = if self.node.tracing.load(Relaxed) {
            trace::mono_ns()
        } else {
            0
        };
        let (task, run_prefix) = {
            let mut st = self.node.run.lock();
            st.in_flight += 1;
            (
                st.tasks[idx].clone(),
                st.trace.as_ref().map(|t| t.prefix.clone()),
            )
        };
        let chip = &self.node.chips[task.worker];
        let config = Self::chip_config(&task, run_prefix.as_ref());
        let traced = run_prefix.is_some();
        // Built only for a traced run (two allocations per dispatch otherwise).
        let swimlane = traced
            .then(|| chip_dir(&config.output_prefix, task.worker).join("merged_swimlane.json"));
        let after = |posted_ns: u64| {
            swimlane
                .as_deref()
                .map(|path| Self::chip_side(chip, path, posted_ns))
        };
        let args: Result<Vec<WireArg>, ChipFault> = task
            .args
            .iter()
            .map(|a| match *a {
                ArgRef::Tensor(i) => Self::wire_tensor(&call.tensors[i])
                    .map(WireArg::Tensor)
                    .map_err(|e| chip.fault(e)),
                ArgRef::Int(v) => Ok(WireArg::Int(v)),
                ArgRef::Float(v) => Ok(WireArg::Float(v)),
            })
            .collect();
        let reply = args.and_then(|args| {
            chip.call(
                &self.node.ctl,
                &TaskFrame {
                    callable: task.callable,
                    config,
                    args,
                },
                traced,
                after,
            )
        });
        self.record(idx, &task, reply, start_ns)
            .map_err(|e| e.to_string())
    }
}

pub(crate) fn report_of(
    worker: usize,
    callable: u32,
    r: Option<&WireReport>,
    error: Option<String>,
) -> ChipTaskReport {
    ChipTaskReport {
        worker,
        callable,
        run: r.and_then(run_report_of),
        error,
    }
}

/// The L2 report a chip's wire report stands for; `None` when its sizing is not a
/// valid one (a failed run's report carries zeros there).
fn run_report_of(r: &WireReport) -> Option<RunReport> {
    let ring_sizing = RingSizing::from_key_and_sources(r.sizing, r.sources).ok()?;
    Some(RunReport {
        ring_sizing,
        peak: PeakUse::from_array(r.peak),
        tasks: r.tasks,
        arena_hit: r.arena_hit,
        arena_build_s: r.arena_build_s,
        elapsed_s: r.elapsed_s,
        replayed: false,
        device_memory: crate::chip::DeviceMemory::of_sizing(&ring_sizing),
    })
}

/// Where each argument of a program with signature `sig` goes among its task's
/// tensors, which the engine keeps in canonical order (inputs, inouts, outputs): the
/// index for a tensor argument, None for a scalar. One rule for L3 and L4 tasks.
pub(crate) fn canonical_index(sig: &[ArgDir]) -> Vec<Option<usize>> {
    let group = |d: ArgDir| match d {
        ArgDir::In => Some(0),
        ArgDir::InOut => Some(1),
        ArgDir::Out => Some(2),
        ArgDir::Scalar => None,
    };
    let mut counts = [0usize; 3];
    for g in sig.iter().filter_map(|d| group(*d)) {
        counts[g] += 1;
    }
    let starts = [0, counts[0], counts[0] + counts[1]];
    let mut seen = [0usize; 3];
    sig.iter()
        .map(|d| {
            group(*d).map(|g| {
                seen[g] += 1;
                starts[g] + seen[g] - 1
            })
        })
        .collect()
}

/// An L3 task's engine arguments and where each program argument is among them.
fn node_task_args(
    sig: &[ArgDir],
    args: &[NextLevelArg],
) -> Result<(Vec<ArgRef>, TaskArgs), String> {
    check_arity(sig, args)?;
    let at = canonical_index(sig);
    let mut refs = Vec::with_capacity(args.len());
    let mut ta = TaskArgs::new();
    for (i, (d, a)) in sig.iter().zip(args).enumerate() {
        a.check_direction(i, *d)?;
        let t = match *a {
            NextLevelArg::Int(v) => {
                refs.push(ArgRef::Int(v));
                continue;
            }
            NextLevelArg::Float(v) => {
                refs.push(ArgRef::Float(v));
                continue;
            }
            NextLevelArg::Tensor(t) => t,
            NextLevelArg::Resident { host, .. } => {
                return Err(format!("argument {i} is a tensor resident on L4 host {host}; a chip task takes arrays in shared memory"))
            }
        };
        if Dispatch::wire_tensor(&t).is_err() {
            return Err(format!("argument {i} is not in shared memory (use taskring.shared_array or a node allocation)"));
        }
        refs.push(ArgRef::Tensor(
            at[i].expect("a tensor argument has an index"),
        ));
        match d {
            ArgDir::In => ta.input(t),
            ArgDir::InOut => ta.inout(t),
            _ => ta.output_existing(t),
        };
    }
    Ok((refs, ta))
}

/// One argument of a next-level submit: of an L3 task to a chip
/// ([`NodeOrchestrator::submit_next_level`]) and of an L4 task to a host (rank 0's
/// `ClusterOrchestrator::submit_next_level`). The two wire formats stay their own
/// ([`frame::WireArg`], `cluster::wire::L4Arg`).
#[derive(Clone, Copy, Debug)]
pub enum NextLevelArg {
    /// An array of the caller's: at L3 in shared memory (the chip maps it); at L4 a
    /// C-contiguous rank-0 array, shipped to the host (and back, for an output).
    Tensor(Tensor),
    /// A tensor resident on an L4 host (`alloc_tensor(..., worker=host)`): its stand-in
    /// view on rank 0, its id and its host. Only an L4 submit takes it; an L3 submit
    /// refuses it.
    Resident {
        view: Tensor,
        id: u64,
        host: usize,
    },
    Int(i64),
    Float(f64),
}

impl NextLevelArg {
    /// An int or a float (nothing the run has to keep alive).
    pub fn is_scalar(&self) -> bool {
        matches!(self, NextLevelArg::Int(_) | NextLevelArg::Float(_))
    }

    /// Argument `i` against its direction `d`: a scalar goes only where the signature
    /// says SCALAR, a tensor everywhere else. One rule and one set of messages for L3
    /// and L4 (which tensors a level takes is its own rule).
    pub(crate) fn check_direction(&self, i: usize, d: ArgDir) -> Result<(), String> {
        match (d == ArgDir::Scalar, self.is_scalar()) {
            (true, false) => Err(format!("argument {i} is SCALAR but a tensor was given")),
            (false, true) => Err(format!("argument {i} must be a tensor")),
            _ => Ok(()),
        }
    }
}

/// A next-level submit passes exactly the program's arguments.
pub(crate) fn check_arity(sig: &[ArgDir], args: &[NextLevelArg]) -> Result<(), String> {
    if sig.len() != args.len() {
        return Err(format!(
            "the program takes {} arguments, got {}",
            sig.len(),
            args.len()
        ));
    }
    Ok(())
}

/// The orchestration API of an L3 run.
pub struct NodeOrchestrator<'a, 'r> {
    o: &'a mut Orchestrator<'r>,
    node: &'a NodeShared,
    callables: &'a RwLock<Vec<ChipCallable>>,
    /// The dispatch kernel of each lane.
    dispatch: &'a [KernelRef],
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
    pub fn submit_next_level(
        &mut self,
        callable: u32,
        args: &[NextLevelArg],
        config: &CallConfig,
        worker: usize,
    ) -> Result<TaskId, RuntimeFailure> {
        let start_ns = self.node.tracing.load(Relaxed).then(trace::mono_ns);
        let bad =
            |msg: String| RuntimeFailure::invalid_args(None, format!("submit_next_level: {msg}"));
        if worker >= self.node.chips.len() {
            return Err(bad(format!(
                "worker {worker} is not a chip of this node (it has {})",
                self.node.chips.len()
            )));
        }
        config.validate().map_err(|e| bad(e.message))?;
        let sig = {
            let c = self.callables.read();
            c.get(callable as usize)
                .map(|c| c.signature.clone())
                .ok_or_else(|| bad(format!("unknown callable handle {callable}")))?
        };
        let (refs, mut ta) = node_task_args(&sig, args).map_err(bad)?;
        let idx = {
            let mut st = self.node.run.lock();
            st.tasks.push(L3Task {
                worker,
                callable,
                config: config.clone(),
                args: refs,
            });
            st.reports.push(None);
            if let Some(t) = st.trace.as_mut() {
                t.tasks.push(TaskTrace::default());
            }
            st.tasks.len() - 1
        };
        ta.scalar(Scalar::I64(idx as i64));
        let lane = &self.dispatch[worker % self.dispatch.len()];
        let r = self.o.submit(*lane, &ta).map(|r| r.id);
        let mut st = self.node.run.lock();
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
            t.submit = Some((s, trace::mono_ns()));
        }
        r
    }

    /// An allocation in the node's (shared) memory, alive until the current scope ends.
    pub fn alloc(&mut self, spec: TensorSpec) -> Result<TaskOutputs, RuntimeFailure> {
        self.o.alloc(&[spec])
    }
}

/// A handle on a node usable from other threads while a run is in flight: chip
/// statistics (a chip answers between two of its tasks), cancelling the run, and
/// announcing a close.
#[derive(Clone)]
pub struct NodeHandle {
    shared: Arc<NodeShared>,
    creator: u32,
}

impl NodeHandle {
    /// One request to chip `worker` whose reply carries its arena-cache counters: the
    /// chip and the counters, or the chip's failure.
    fn chip_stats_request(
        &self,
        worker: usize,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, frame::FrameError>,
    ) -> Result<(&Chip, frame::WireStats), NodeError> {
        if std::process::id() != self.creator {
            return Err(NodeError::Forked(self.creator));
        }
        let chip = self
            .shared
            .chips
            .get(worker)
            .ok_or(NodeError::NoSuchChip(worker))?;
        let r = chip
            .round_trip(&self.shared.ctl, encode)
            .map_err(NodeError::Chip)?;
        let st = r
            .stats
            .ok_or_else(|| NodeError::Chip(chip.fault(r.error)))?;
        Ok((chip, st))
    }

    /// The counters of a chip's reply, with the device memory the host knows of.
    fn arena_stats_of(&self, chip: &Chip, st: frame::WireStats) -> crate::arena::ArenaStats {
        crate::arena::ArenaStats {
            builds: st.builds,
            hits: st.hits,
            misses: st.misses,
            evictions: st.evictions,
            resident_bytes: st
                .resident
                .iter()
                .map(crate::arena::key_footprint)
                .fold(0, u64::saturating_add),
            resident: st.resident,
            build_s: st.build_s,
            held_bytes: chip.held.load(Relaxed),
            capacity_bytes: self.shared.device_memory,
        }
    }

    /// Chip `worker`'s arena-cache statistics.
    pub fn chip_arena_stats(&self, worker: usize) -> Result<crate::arena::ArenaStats, NodeError> {
        let (chip, st) = self.chip_stats_request(worker, frame::encode_stats_request)?;
        Ok(self.arena_stats_of(chip, st))
    }

    /// Tell chip `worker` that it holds `bytes` of device-resident tensors (charged to
    /// its device memory); its arena statistics after, or its DEVICE_OUT_OF_MEMORY.
    pub fn chip_hold(
        &self,
        worker: usize,
        bytes: u64,
    ) -> Result<crate::arena::ArenaStats, NodeError> {
        let (chip, st) =
            self.chip_stats_request(worker, |b| frame::encode_hold_request(b, bytes))?;
        chip.held.store(bytes, Relaxed);
        Ok(self.arena_stats_of(chip, st))
    }

    /// Cancel the run in flight: every dispatch waiting on a chip gives up at once and
    /// the run fails with [`NodeError::Interrupted`] (see the module doc). The flag is
    /// cleared when the next run starts.
    pub fn cancel(&self) {
        self.shared.ctl.cancel.store(true, SeqCst);
        for c in &self.shared.chips {
            futex_wake(&c.mailbox.header().resp_seq);
        }
        self.shared.done.notify_all();
    }

    /// Announce that the node is about to close (from another thread than the run's):
    /// dispatches stop waiting for chips that do not answer, and no new run starts.
    pub fn request_close(&self) {
        self.shared.ctl.closing.store(true, SeqCst);
    }
}

/// A host with chips. See the module doc.
pub struct Node {
    shared: Arc<NodeShared>,
    callables: Arc<RwLock<Vec<ChipCallable>>>,
    engine: Option<ChipWorker>,
    /// The engine's chip-dispatch kernels, one per lane (leaked boxes, taken back in
    /// `close`).
    dispatch: Option<Arc<[KernelRef]>>,
    closed: bool,
    /// The process that created the node (see "fork()" in the module doc).
    creator: u32,
    /// [`forks`] when the node was created.
    creator_forks: u64,
}

/// Forks this process went through as a child (a count kept by an atfork handler that
/// the first call registers): a node compares it instead of asking `getpid` on every
/// run.
fn forks() -> u64 {
    static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static ATFORK: std::sync::Once = std::sync::Once::new();
    extern "C" fn in_child() {
        FORKS.fetch_add(1, Relaxed);
    }
    ATFORK.call_once(|| {
        // safety: registers a child handler that only bumps an atomic (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
    FORKS.load(Relaxed)
}

/// What a chip (process or thread) needs to serve tasks.
struct ChipContext {
    /// This chip's index in the node.
    worker: usize,
    host_pid: i32,
    in_process: bool,
    opts: NodeOptions,
    callables: Arc<RwLock<Vec<ChipCallable>>>,
    /// Read end of the host pipe (chip processes; -1 for chip threads).
    pipe: i32,
}

/// Write a start-up failure into the reply buffer and publish FAILED.
fn report_start_failure(mb: &Mailbox, text: &str) {
    let r = ReplyFrame {
        status: StatusCode::RuntimeSetup.code(),
        error: text.to_string(),
        report: None,
        stats: None,
    };
    // safety: the chip side owns the reply buffer while starting.
    if let Ok(n) = frame::encode_reply(&r, unsafe { mb.resp_buf() }) {
        mb.header().resp_len.store(n as u32, Release);
    }
    mb.header().state.store(STATE_FAILED, Release);
    futex_wake(&mb.header().state);
}

/// The node's own engine: its "cores" are dispatch threads (one per chip unless
/// `node_cores` says), its heaps shared with the chips. Each chip has a *lane* (a ready
/// queue of its own; `min(node_cores, chips)` lanes, chip `w` in lane `w % lanes`) and
/// each dispatch thread serves one lane (thread `i` lane `i % lanes`), so a chip's
/// backlog, or a stopped chip, holds up no thread of another lane. One thread per chip:
/// a chip serves one request at a time, and a second thread of the same chip could
/// only wait for the first's turn (its wake-up at every hand-off cost ~5 µs per task,
/// and two threads per chip without lanes were 25–40 % slower with 2 chips).
fn node_engine_options(opts: &NodeOptions) -> ChipOptions {
    let chips = opts.device_ids.len().max(1);
    let node_cores = if opts.node_cores == 0 {
        chips
    } else {
        opts.node_cores
    };
    ChipOptions {
        cores: node_cores,
        lanes: node_cores.min(chips),
        aic_cores: Some(0),
        arena_cache_slots: opts.arena_cache_slots,
        shared_heaps: true,
        // One node task is a whole L2 dispatch: no L2-sized timeouts here (a dead
        // chip is caught by waitpid; a chip's own hangs by the chip's timeouts).
        backstop: Duration::from_secs(365 * 24 * 3600),
        scheduler_timeout: Duration::from_secs(365 * 24 * 3600),
        // The host's own memory, not a device's.
        device_memory: u64::MAX,
        ..ChipOptions::default()
    }
}

/// Start chip `worker`: its mailbox, its host pipe (chip processes), then the chip
/// itself — a forked child ([`fork_chip`]) or a thread of this process. The chip then
/// builds its worker and reports READY or FAILED in its mailbox ([`wait_chips_ready`]).
/// On an error nothing of this chip is left behind (the caller shuts down the others).
fn start_chip(
    worker: usize,
    opts: &NodeOptions,
    callables: &Arc<RwLock<Vec<ChipCallable>>>,
    hooks: &dyn ForkHooks,
    host_pid: i32,
) -> Result<Chip, NodeError> {
    let mb = Arc::new(Mailbox::new().map_err(|e| NodeError::start(worker, "mailbox", e))?);
    let (pipe_r, pipe_w) = if opts.chip_processes {
        host_pipes::create()
            .map_err(|e| NodeError::start(worker, format!("host pipe of chip {worker}"), e))?
    } else {
        (-1, -1)
    };
    let ctx = ChipContext {
        worker,
        host_pid,
        in_process: !opts.chip_processes,
        opts: opts.clone(),
        callables: callables.clone(),
        pipe: pipe_r,
    };
    let (pid, thread) = if opts.chip_processes {
        let pid = fork_chip(ctx, &mb, hooks, (pipe_r, pipe_w))
            .map_err(|e| NodeError::start(worker, format!("fork of chip {worker}"), e))?;
        (pid, None)
    } else {
        let m = mb.clone();
        let t = std::thread::Builder::new()
            .name(format!("taskring-chip{worker}"))
            .spawn(move || {
                chip_main(ctx, &m);
            })
            .map_err(|e| NodeError::start(worker, "chip thread", e))?;
        (host_pid, Some(t))
    };
    let now = Instant::now();
    Ok(Chip {
        worker,
        pid,
        process: opts.chip_processes,
        mailbox: mb,
        seq: Mutex::new(0),
        dead: Mutex::new(None),
        held: std::sync::atomic::AtomicU64::new(0),
        alive_at: std::sync::atomic::AtomicU64::new(0),
        thread: Mutex::new(thread),
        pipe: AtomicI32::new(pipe_w),
        beat: Mutex::new(Beat {
            value: 0,
            since: now,
            looked: now,
            stopped: false,
        }),
    })
}

/// Fork a chip process running `chip_main(ctx)`; returns its pid. `pipe` is the host
/// pipe `(read end, write end)`: the child keeps the read end, the host the write end
/// (both closed here if the fork fails).
fn fork_chip(
    ctx: ChipContext,
    mb: &Arc<Mailbox>,
    hooks: &dyn ForkHooks,
    (pipe_r, pipe_w): (i32, i32),
) -> Result<i32, std::io::Error> {
    let host_pid = ctx.host_pid;
    hooks.before();
    // safety: fork; the child runs only `chip_main` and then `_exit`s, never
    // returning into the caller's code or running destructors.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        hooks.after_child();
        // A lock another host thread held at fork() stays locked in the child: std's
        // stderr lock is one the default panic hook takes, so a panicking kernel could
        // hang the chip. Panics are reported through their payload (the task's error
        // text); print nothing here.
        std::panic::set_hook(Box::new(|_| {}));
        // The atfork handler closed every host pipe's write end here (ours too): the
        // chip's watchdog reads EOF when the host dies (module doc). No
        // PR_SET_PDEATHSIG: it fires when the forking *thread* exits, not the host
        // process. Ctrl-C is the host's to handle.
        // safety: signal with SIG_IGN installs no handler code, getppid has no
        // preconditions, and _exit ends the child without running any host code.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            if libc::getppid() != host_pid {
                libc::_exit(1);
            }
        }
        let code = chip_main(ctx, mb);
        // safety: _exit ends the forked child at once, running no destructors or atexit
        // handlers of the host's state it inherited.
        unsafe { libc::_exit(code) };
    }
    hooks.after_parent();
    // safety: our own fd; the child has its copy.
    unsafe { libc::close(pipe_r) };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        host_pipes::unregister(pipe_w);
        // safety: our own fd.
        unsafe { libc::close(pipe_w) };
        return Err(e);
    }
    Ok(pid)
}

/// Wait until every chip reported READY, with one deadline `init_timeout` from now (a
/// chip that stops beating fails sooner). The error names the first chip that did not
/// (its own FAILED reason when it gave one).
fn wait_chips_ready(chips: &[Chip], ctl: &Ctl, init_timeout: Duration) -> Result<(), NodeError> {
    let deadline = Instant::now() + init_timeout;
    for c in chips {
        let h = c.mailbox.header();
        let r = c.wait(
            ctl,
            (&h.state, None),
            || h.state.load(Acquire) != STATE_STARTING,
            Some(deadline),
        );
        let state = h.state.load(Acquire);
        if r.is_ok() && state == STATE_READY {
            continue;
        }
        let fault = if state == STATE_FAILED {
            let len = (h.resp_len.load(Acquire) as usize).min(mailbox::FRAME_BYTES);
            // safety: the chip published FAILED after writing its reason.
            let buf = unsafe { &c.mailbox.resp_buf()[..len] };
            c.fault(
                frame::decode_reply(buf)
                    .map(|r| r.error)
                    .unwrap_or_else(|e| e.to_string()),
            )
        } else if let Err(Some(e)) = r {
            e
        } else {
            c.fault(format!("not ready within {} ms", init_timeout.as_millis()))
        };
        return Err(NodeError::Chip(fault));
    }
    Ok(())
}

/// A chip's life: build, prewarm, report, serve until shutdown. Returns an exit code.
fn chip_main(ctx: ChipContext, mb: &Arc<Mailbox>) -> i32 {
    // Over 80 lines: a chip's whole life in order (watchdog, worker, prewarm, READY,
    // the serve loop with its heartbeat); each phase is a few lines around a call.
    let h = mb.header();
    if ctx.pipe >= 0 {
        let m = mb.clone();
        let pipe = ctx.pipe;
        if let Err(e) = std::thread::Builder::new()
            .name("taskring-chip-watchdog".into())
            .spawn(move || watchdog(m, pipe))
        {
            report_start_failure(mb, &format!("could not start the watchdog thread: {e}"));
            return 1;
        }
    }
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
    let copts = ChipOptions {
        cores: ctx.opts.chip_cores,
        arena_cache_slots: ctx.opts.arena_cache_slots,
        prewarm: sizings,
        device_memory: ctx.opts.device_memory,
        ..ChipOptions::default()
    };
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
    // safety: getppid has no preconditions and cannot fail.
    let host_gone = || !ctx.in_process && unsafe { libc::getppid() } != ctx.host_pid;
    let mut served = 0u32;
    // The serving thread's id for the timeline, asked once (a syscall per reply cost
    // ~0.5 % of a busy chip's time).
    let tid = trace::gettid() as u32;
    loop {
        let ok = mailbox::wait_until_spun(
            &h.req_seq,
            Some(&h.req_sleeping),
            || h.req_seq.load(Acquire) != served || h.state.load(Acquire) == STATE_SHUTDOWN,
            || host_gone() || h.state.load(Acquire) == STATE_SHUTDOWN,
            Duration::from_millis(500),
            &mailbox::REQUEST_SPIN,
        );
        if !ok || h.state.load(Acquire) == STATE_SHUTDOWN {
            return 0;
        }
        served = h.req_seq.load(Acquire);
        let len = (h.req_len.load(Acquire) as usize).min(mailbox::FRAME_BYTES);
        // safety: the host wrote the request before publishing req_seq (acquired above)
        // and does not touch it until we reply.
        let req = unsafe { &mb.req_buf()[..len] };
        let served_ns = trace::mono_ns();
        let (mut reply, trace_t0_ns) = serve(&ctx, &mut chip, &mut regions, req);
        // A kernel this chip gave up on can still write the host's shared memory,
        // which the host hands to other chips and tasks: the chip process ends after
        // this reply, and its kernel with it.
        let stuck = !ctx.in_process && reply.status != 0 && !chip.stuck_kernels().is_empty();
        if stuck {
            reply.error.push_str(
                "; the chip process exits: a kernel it gave up on could still write shared memory",
            );
        }
        // safety: we own the reply buffer until we publish resp_seq.
        let n = match frame::encode_reply(&reply, unsafe { mb.resp_buf() }) {
            Ok(n) => n,
            Err(e) => frame::encode_reply(
                &ReplyFrame {
                    status: StatusCode::RuntimeSetup.code(),
                    error: format!("cannot encode the reply: {e}"),
                    report: None,
                    stats: None,
                },
                // safety: as above: the reply buffer is ours until we publish resp_seq.
                unsafe { mb.resp_buf() },
            )
            .unwrap_or(0),
        };
        h.resp_len.store(n as u32, Release);
        h.served_tid.store(tid, Relaxed);
        h.served_ns.store(served_ns, Relaxed);
        h.trace_t0_ns.store(trace_t0_ns, Relaxed);
        h.replied_ns.store(trace::mono_ns(), Relaxed);
        mailbox::publish(&h.resp_seq, served, &h.resp_sleeping);
        if stuck {
            // safety: ends this process at once; the host sees it gone.
            unsafe { libc::_exit(STUCK_KERNEL_EXIT) };
        }
    }
}

/// The exit status of a chip process that ended because a kernel it gave up on could
/// still write shared memory (a status kernels are unlikely to choose; the message
/// still gives the number).
const STUCK_KERNEL_EXIT: i32 = 117;

/// Where chip `worker` writes a task's DFX files (scope stats, `deps.json`, its
/// swimlane): `{prefix}/chip{worker}`, so that the chips of a node do not overwrite each
/// other's. A prefix that already ends in that directory is used as it is.
pub fn chip_dir(prefix: &str, worker: usize) -> std::path::PathBuf {
    let p = std::path::Path::new(prefix);
    let name = format!("chip{worker}");
    if p.file_name().is_some_and(|n| n == name.as_str()) {
        p.to_path_buf()
    } else {
        p.join(name)
    }
}

/// Run one request on this chip; with the reply, the start of the swimlane it recorded
/// on `CLOCK_MONOTONIC` (0 for none).
fn serve(
    ctx: &ChipContext,
    chip: &mut ChipWorker,
    regions: &mut shm::RegionMap,
    req: &[u8],
) -> (ReplyFrame, u64) {
    let mut traced = false;
    let r = serve_request(ctx, chip, regions, req, &mut traced);
    let t0 = if traced {
        chip.trace_start().map(trace::instant_ns).unwrap_or(0)
    } else {
        0
    };
    (r, t0)
}

/// Serve one request frame on this chip: arena stats, or one L2 task (its arguments
/// resolved in this chip's mappings, its DFX files sent to the chip's own directory,
/// run, its report or failure as the reply).
fn serve_request(
    ctx: &ChipContext,
    chip: &mut ChipWorker,
    regions: &mut shm::RegionMap,
    req: &[u8],
    traced: &mut bool,
) -> ReplyFrame {
    match frame::request_kind(req) {
        Ok(frame::KIND_STATS) => return stats_reply(chip),
        Ok(frame::KIND_HOLD) => {
            return match frame::decode_hold_request(req) {
                Ok(bytes) => match chip.hold_resident_tensors(bytes) {
                    Ok(()) => stats_reply(chip),
                    Err(f) => failed_reply(f.code, f.to_string()),
                },
                Err(e) => failed_reply(StatusCode::InvalidArgs, format!("bad hold frame: {e}")),
            }
        }
        _ => {}
    }
    let task = match frame::decode_task(req) {
        Ok(t) => t,
        Err(e) => return failed_reply(StatusCode::InvalidArgs, format!("bad task frame: {e}")),
    };
    let callable = match ctx.callables.read().get(task.callable as usize) {
        Some(c) => c.clone(),
        None => {
            return failed_reply(
                StatusCode::InvalidArgs,
                format!(
                    "unknown callable {} (registered after this chip started?)",
                    task.callable
                ),
            )
        }
    };
    let args = match chip_args(regions, &task.args) {
        Ok(a) => a,
        Err(e) => return failed_reply(StatusCode::InvalidArgs, e),
    };
    let config = chip_config(ctx, task.config, traced);
    let r = chip.run_hooked(
        &callable.program,
        &args,
        &config,
        ctx.opts
            .blocking_hook
            .as_deref()
            .map(|h| h as &dyn Fn(bool)),
    );
    match r {
        Ok(rep) => report_reply(&rep),
        Err(RunError::Config(e)) => failed_reply(StatusCode::InvalidArgs, e.message),
        Err(RunError::Failure(f)) => failed_reply(f.code, f.to_string()),
    }
}

/// A reply that carries only a status and its text.
fn failed_reply(status: StatusCode, error: String) -> ReplyFrame {
    ReplyFrame {
        status: status.code(),
        error,
        report: None,
        stats: None,
    }
}

/// The reply to a stats request: this chip's arena cache counters.
fn stats_reply(chip: &ChipWorker) -> ReplyFrame {
    let st = chip.arena_stats();
    ReplyFrame {
        status: 0,
        error: String::new(),
        report: None,
        stats: Some(frame::WireStats {
            builds: st.builds,
            hits: st.hits,
            misses: st.misses,
            evictions: st.evictions,
            build_s: st.build_s,
            resident: st.resident,
        }),
    }
}

/// The reply to a task that ran: its run report on the wire.
fn report_reply(rep: &RunReport) -> ReplyFrame {
    ReplyFrame {
        status: 0,
        error: String::new(),
        report: Some(wire_report(Some(rep))),
        stats: None,
    }
}

/// A task's report on the wire (a chip's reply, a host's reply at L4): the sizing's key
/// and sources and the 12 peak values; all zeros when there is no report.
pub(crate) fn wire_report(rep: Option<&RunReport>) -> WireReport {
    let Some(rep) = rep else {
        return WireReport::default();
    };
    WireReport {
        sizing: rep.ring_sizing.key(),
        sources: rep.ring_sizing.source_codes(),
        peak: rep.peak.to_array(),
        tasks: rep.tasks,
        arena_hit: rep.arena_hit,
        arena_build_s: rep.arena_build_s,
        elapsed_s: rep.elapsed_s,
    }
}

/// A task's arguments in this chip: scalars as they are, tensors resolved in the
/// chip's mappings of the host's regions and validated (bounds, alignment). The error
/// names the argument.
fn chip_args<'a>(regions: &mut shm::RegionMap, wire: &[WireArg]) -> Result<Vec<Arg<'a>>, String> {
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(wire.len());
    for (i, a) in wire.iter().enumerate() {
        match a {
            WireArg::Int(v) => args.push(Arg::Scalar(Scalar::I64(*v))),
            WireArg::Float(v) => args.push(Arg::Scalar(Scalar::F64(*v))),
            WireArg::Tensor(w) => {
                let base = regions
                    .resolve(w.region, w.region_bytes)
                    .map_err(|e| format!("argument {i}: {e}"))?;
                let esize = w.dtype.size_bytes() as u64;
                if w.offset_bytes % esize != 0 {
                    return Err(format!("argument {i}: misaligned offset"));
                }
                let mut t = Tensor::from_raw(base, &[1], w.dtype);
                t.buf_bytes = w.region_bytes;
                t.offset = w.offset_bytes / esize;
                t.ndims = w.ndims;
                t.shape = w.shape;
                t.strides = w.strides;
                t.validate().map_err(|e| format!("argument {i}: {e}"))?;
                // safety: the region is mapped for this chip's lifetime and the host
                // keeps the buffer alive while the task runs.
                args.push(Arg::Tensor(unsafe { HostTensor::from_raw(t) }));
            }
        }
    }
    Ok(args)
}

/// The task's config as this chip runs it: its DFX files go to the chip's own directory
/// (see `chip_dir`), where a stale swimlane must not pass for this task's (`traced`
/// says one will be written).
fn chip_config(ctx: &ChipContext, mut config: CallConfig, traced: &mut bool) -> CallConfig {
    let dfx = config.enable_scope_stats || config.enable_dep_gen || config.enable_chip_swimlane > 0;
    if dfx && !config.output_prefix.is_empty() {
        let dir = chip_dir(&config.output_prefix, ctx.worker);
        if config.enable_chip_swimlane > 0 {
            let _ = std::fs::remove_file(dir.join("merged_swimlane.json"));
            *traced = true;
        }
        config.output_prefix = dir.to_string_lossy().into_owned();
    }
    config
}

impl Node {
    /// Start the chips (see the module doc). `callables` are the programs chips can
    /// run; in process mode a chip knows those registered before this call.
    pub fn new(
        opts: NodeOptions,
        callables: Arc<RwLock<Vec<ChipCallable>>>,
        hooks: &dyn ForkHooks,
    ) -> Result<Node, NodeError> {
        if opts.device_ids.is_empty() {
            return Err(NodeError::NoDevices);
        }
        if let Some(c) = &opts.prewarm {
            c.validate()?;
        }
        let host_pid = std::process::id() as i32;
        let mut chips: Vec<Chip> = Vec::with_capacity(opts.device_ids.len());
        for worker in 0..opts.device_ids.len() {
            match start_chip(worker, &opts, &callables, hooks, host_pid) {
                Ok(c) => chips.push(c),
                Err(e) => {
                    shutdown_chips(&chips);
                    return Err(e);
                }
            }
        }
        let ctl = Ctl {
            cancel: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            timeout: opts.chip_timeout,
        };
        if let Err(e) = wait_chips_ready(&chips, &ctl, opts.init_timeout) {
            shutdown_chips(&chips);
            return Err(e);
        }
        let shared = Arc::new(NodeShared {
            chips,
            tracing: AtomicBool::new(false),
            run: Mutex::new(RunState::default()),
            done: Condvar::new(),
            ctl,
            device_memory: opts.device_memory,
        });
        let engine = match ChipWorker::new(node_engine_options(&opts)) {
            Ok(e) => e,
            Err(e) => {
                shutdown_chips(&shared.chips);
                return Err(NodeError::Failure(e));
            }
        };
        // The kernel holds the shared state, which the node owns: the box is taken back
        // in `close`, after the engine (else each node would stay alive, mailboxes and
        // all, for the life of the process).
        let lanes = engine.lanes();
        let dispatch: Arc<[KernelRef]> = (0..lanes)
            .map(|lane| {
                KernelRef::leak(Dispatch {
                    node: shared.clone(),
                    lane,
                })
            })
            .collect();
        Ok(Node {
            shared,
            callables,
            engine: Some(engine),
            dispatch: Some(dispatch),
            closed: false,
            creator: std::process::id(),
            creator_forks: forks(),
        })
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
        self.handle().chip_arena_stats(worker)
    }

    /// A handle usable from other threads while a run is in flight (statistics,
    /// cancel, close announcement).
    pub fn handle(&self) -> NodeHandle {
        NodeHandle {
            shared: self.shared.clone(),
            creator: self.creator,
        }
    }

    /// The node's own engine (its L3 arena cache):
    pub fn engine(&self) -> Option<&ChipWorker> {
        self.engine.as_ref()
    }

    fn check_process(&self) -> Result<(), NodeError> {
        // Without a syscall: a fork since the node was built shows in the fork count.
        if forks() != self.creator_forks && std::process::id() != self.creator {
            return Err(NodeError::Forked(self.creator));
        }
        Ok(())
    }

    /// Run `orch` (L3 orchestration) with the node's own sizing from `config`. `hook`
    /// is called around every blocking wait of the calling thread (`true` before,
    /// `false` after; at least every 50 ms while the run waits for its chips), e.g. to
    /// release an interpreter lock and look for an interrupt ([`NodeHandle::cancel`]).
    pub fn run(
        &mut self,
        orch: impl Fn(&mut NodeOrchestrator<'_, '_>) -> Result<(), RuntimeFailure>
            + Send
            + Sync
            + 'static,
        config: &CallConfig,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<NodeRunReport, NodeError> {
        let t0 = Instant::now();
        self.check_process()?;
        if self.shared.ctl.closing.load(Acquire) {
            return Err(NodeError::Closed);
        }
        let engine = self.engine.as_mut().ok_or(NodeError::Closed)?;
        let sh = &*self.shared;
        sh.ctl.cancel.store(false, SeqCst);
        settle_late_replies(sh, hook)?;
        // The run's own swimlane is the L3 timeline (merged below); the engine records
        // none of its own.
        let traced = config.enable_chip_swimlane > 0 && !config.output_prefix.is_empty();
        let mut engine_config = config.clone();
        if traced {
            engine_config.enable_chip_swimlane = 0;
        }
        sh.run.lock().reset(traced.then(|| RunTrace {
            prefix: config.output_prefix.clone(),
            t0_ns: trace::mono_ns(),
            orch_tid: trace::gettid(),
            tasks: vec![],
        }));
        sh.tracing.store(traced, SeqCst);
        let shared = self.shared.clone();
        let callables = self.callables.clone();
        let dispatch = self
            .dispatch
            .clone()
            .expect("an open node has its dispatch kernels");
        // safety: the program (and so this reference) lives only during this call; the
        // engine does not keep it past `run_with_hook`.
        let hook_ptr = unsafe { HookRef::erase(hook) };
        let program = Program::new("l3", move |o, _| {
            let mut no = NodeOrchestrator {
                o,
                node: &shared,
                callables: &callables,
                dispatch: &dispatch,
            };
            orch(&mut no)?;
            // Dispatches still queued run here, on this thread: a one-task run then
            // costs no hand-off to a dispatch thread and back. Not in a traced run,
            // whose timeline gives each dispatch a dispatch thread's lane.
            help_at_end(no.o.end_helper.filter(|_| !traced), hook_ptr.get(), || {
                shared.ctl.cancel.load(Acquire)
            });
            // What the help left (a traced run's dispatches, a cancelled run's) goes
            // to the dispatch threads, whose wake-up the submits only owed.
            no.o.pay_wakes();
            // Wait for the dispatched tasks here rather than in the engine: this wait
            // calls the hook every slice (how a Python host sees Ctrl-C).
            wait_dispatched(&shared, hook_ptr.get());
            Ok(())
        });
        let r = engine.run_hooked(&program, &[], &engine_config, hook);
        sh.tracing.store(false, SeqCst);
        let mut st = sh.run.lock();
        if let Some(t) = st.trace.take() {
            self.write_timeline(t, &st.tasks);
        }
        outcome(r, &mut st, sh.ctl.cancel.load(Acquire), t0)
    }

    /// Write the run's merged timeline under its prefix (a failure is reported on
    /// stderr: the run's outcome does not depend on it).
    fn write_timeline(&self, t: RunTrace, tasks: &[L3Task]) {
        let prefix = std::path::PathBuf::from(&t.prefix);
        if let Err(e) = self.timeline(t, tasks).write(&prefix) {
            eprintln!(
                "taskring: could not write merged_swimlane.json under {}: {e}",
                prefix.display()
            );
        }
    }

    /// The run's L3 timeline (see [`trace`]): the host (its orchestration thread with
    /// each task's submit; each dispatch on the node thread that ran it), then each
    /// chip (the thread that served each task, its cores' kernels); a flow from each
    /// submit to its dispatch and from each dispatch to the chip task it started
    /// ([`TaskLane`] adds one task's part).
    fn timeline(&self, t: RunTrace, tasks: &[L3Task]) -> trace::Timeline {
        use serde_json::json;
        let end_ns = trace::mono_ns();
        let host = std::process::id() as u64;
        let names: Vec<String> = self
            .callables
            .read()
            .iter()
            .map(|c| c.program.name().to_string())
            .collect();
        let mut tl = trace::Timeline {
            t0_ns: t.t0_ns,
            ..Default::default()
        };
        tl.processes.push((host, format!("host (pid {host})")));
        for c in &self.shared.chips {
            tl.processes.push((c.lane_pid(), c.prefix()));
        }
        tl.threads.push((host, t.orch_tid, "orchestrator".into()));
        tl.slices.push(trace::Slice {
            pid: host,
            tid: t.orch_tid,
            name: "L3 run".into(),
            start_ns: t.t0_ns,
            end_ns,
            args: json!({"tasks": tasks.len()}),
        });
        // Threads already named on the timeline, by (pid, tid).
        let mut seen = std::collections::HashSet::new();
        for (i, (task, tt)) in tasks.iter().zip(&t.tasks).enumerate() {
            let w = task.worker;
            let prog = names
                .get(task.callable as usize)
                .map(String::as_str)
                .unwrap_or("?");
            let lane = TaskLane {
                i,
                worker: w,
                prog,
                args: json!({"l3_task": i, "worker": w, "program": prog}),
            };
            let Some(at_dispatch) = lane.host_side(&mut tl, &mut seen, host, t.orch_tid, tt) else {
                continue;
            };
            if let Some(c) = tt.dispatch.as_ref().and_then(|d| d.chip.as_ref()) {
                let pid = self.shared.chips[w].lane_pid();
                lane.chip_side(&mut tl, &mut seen, pid, c, at_dispatch);
            }
        }
        tl
    }

    /// Stop every chip and the node's engine (idempotent). In a child of `fork()` it
    /// only forgets the node: everything it refers to is the parent's.
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if self.check_process().is_err() {
            // The engine's threads do not exist here (joining them would hang); the
            // chips, their pipes and processes are the parent's.
            std::mem::forget(self.engine.take());
            std::mem::forget(self.shared.clone());
            return;
        }
        self.shared.ctl.closing.store(true, SeqCst);
        // Chips first (no run is in flight: `close` takes the node).
        shutdown_chips(&self.shared.chips);
        self.engine = None;
        if let Some(ks) = self.dispatch.take() {
            for k in ks.iter() {
                // safety: `k` was leaked from a box in `new`; the engine that could use
                // it is gone and no run is in flight, so nothing refers to it any more.
                drop(unsafe { Box::from_raw(k.0 as *const dyn Kernel as *mut dyn Kernel) });
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.close();
    }
}

/// One L3 task's part of the run's timeline.
struct TaskLane<'a> {
    i: usize,
    worker: usize,
    prog: &'a str,
    args: serde_json::Value,
}

impl TaskLane<'_> {
    /// Its submit on the orchestration thread, its dispatch on a node thread and the flow
    /// between them; the dispatch's end of the next flow (None: it was never dispatched).
    fn host_side(
        &self,
        tl: &mut trace::Timeline,
        seen: &mut std::collections::HashSet<(u64, u64)>,
        host: u64,
        orch_tid: u64,
        tt: &TaskTrace,
    ) -> Option<trace::FlowEnd> {
        let (i, w, prog) = (self.i, self.worker, self.prog);
        if let Some((s, e)) = tt.submit {
            tl.slices.push(trace::Slice {
                pid: host,
                tid: orch_tid,
                name: format!("submit {prog} -> chip {w}"),
                start_ns: s,
                end_ns: e,
                args: self.args.clone(),
            });
        }
        let d = tt.dispatch.as_ref()?;
        if seen.insert((host, d.tid)) {
            tl.threads
                .push((host, d.tid, format!("dispatch ({})", d.thread)));
        }
        let mut dargs = self.args.clone();
        dargs["waited_for_chip_us"] =
            serde_json::json!(d.posted_ns.saturating_sub(d.start_ns) as f64 / 1000.0);
        tl.slices.push(trace::Slice {
            pid: host,
            tid: d.tid,
            name: format!("dispatch {prog} -> chip {w}"),
            start_ns: d.start_ns,
            end_ns: d.replied_ns,
            args: dargs,
        });
        let at_dispatch = trace::FlowEnd {
            pid: host,
            tid: d.tid,
            at_ns: d.posted_ns,
        };
        if let Some((s, e)) = tt.submit {
            let from = trace::FlowEnd {
                pid: host,
                tid: orch_tid,
                at_ns: s + (e - s) / 2,
            };
            tl.flows.push(trace::Flow {
                id: 2 * i as u64 + 1,
                cat: "submit",
                name: "submit".into(),
                from,
                to: at_dispatch,
            });
        }
        Some(at_dispatch)
    }

    /// The chip's slice for the task (on the thread that served it), the flow from the
    /// dispatch, and the chip's own core lanes with their kernels.
    fn chip_side(
        &self,
        tl: &mut trace::Timeline,
        seen: &mut std::collections::HashSet<(u64, u64)>,
        pid: u64,
        c: &ChipSide,
        at_dispatch: trace::FlowEnd,
    ) {
        let (i, w) = (self.i, self.worker);
        if seen.insert((pid, c.tid)) {
            tl.threads
                .push((pid, c.tid, format!("orchestrator (tid {})", c.tid)));
        }
        tl.slices.push(trace::Slice {
            pid,
            tid: c.tid,
            name: self.prog.to_string(),
            start_ns: c.served_ns,
            end_ns: c.replied_ns,
            args: self.args.clone(),
        });
        let to = trace::FlowEnd {
            pid,
            tid: c.tid,
            at_ns: c.served_ns + (c.replied_ns.saturating_sub(c.served_ns) / 2).min(1000),
        };
        tl.flows.push(trace::Flow {
            id: 2 * i as u64 + 2,
            cat: "dispatch",
            name: "dispatch".into(),
            from: at_dispatch,
            to,
        });
        // A chip's file numbers its cores 0, 1, ...: on the timeline each core lane
        // gets a tid of its own (Perfetto keeps a thread by tid; tids are below 2^22).
        let core_tid = |core: u64| (1 << 30) + ((w as u64) << 16) + core;
        match &c.events {
            Ok(ev) => {
                for (tid, name) in &ev.threads {
                    if seen.insert((pid, core_tid(*tid))) {
                        tl.threads.push((pid, core_tid(*tid), name.clone()));
                    }
                }
                for e in &ev.slices {
                    let mut a = e.args.clone();
                    if let Some(m) = a.as_object_mut() {
                        m.insert("l3_task".into(), serde_json::json!(i));
                    }
                    tl.slices.push(trace::Slice {
                        pid,
                        tid: core_tid(e.tid),
                        name: e.name.clone(),
                        start_ns: c.t0_ns + e.start_ns,
                        end_ns: c.t0_ns + e.end_ns,
                        args: a,
                    });
                }
            }
            Err(why) => tl.notes.push((
                pid,
                c.tid,
                c.replied_ns,
                format!("no chip swimlane for L3 task {i}: {why}"),
            )),
        }
    }
}

/// A chip may still run a task of an interrupted run: wait for its late reply first, so
/// that task's writes cannot overlap the next run (the hook is called every slice).
fn settle_late_replies(sh: &NodeShared, hook: Option<&dyn Fn(bool)>) -> Result<(), NodeError> {
    for c in sh
        .chips
        .iter()
        .filter(|c| !c.settle(&sh.ctl, Duration::ZERO))
    {
        while !blocking(hook, || c.settle(&sh.ctl, HOOK_SLICE)) {
            if sh.ctl.cancel.load(Acquire) {
                return Err(NodeError::Interrupted(
                    "interrupted while chips finished an interrupted run".into(),
                ));
            }
        }
    }
    Ok(())
}

/// A node run's outcome: the report, or the error a caller sees (an interrupt first, then
/// a chip's own failure text for TASK_FAILED, else the engine's).
fn outcome(
    r: Result<RunReport, RunError>,
    st: &mut RunState,
    interrupted: bool,
    t0: Instant,
) -> Result<NodeRunReport, NodeError> {
    match r {
        _ if interrupted => Err(NodeError::Interrupted(
            st.first_chip_error
                .take()
                .map_or_else(|| "interrupted".into(), |e| e.to_string()),
        )),
        Ok(_) => Ok(NodeRunReport {
            tasks: st
                .reports
                .drain(..)
                .map(|r| r.expect("every L2 task reported"))
                .collect(),
            elapsed_s: t0.elapsed().as_secs_f64(),
        }),
        Err(RunError::Config(e)) => Err(NodeError::Config(e)),
        Err(RunError::Failure(f)) => match st.first_chip_error.take() {
            Some(fault) if f.code == StatusCode::TaskFailed => Err(NodeError::Chip(fault)),
            _ => Err(NodeError::Failure(f)),
        },
    }
}

/// A run's hook and when a wait last called it.
type PolledHook = (&'static dyn Fn(bool), Instant);

thread_local! {
    /// The hook of the run whose orchestrator thread is running dispatches itself
    /// ([`help_at_end`]), which that thread is inside the blocking part of, and when it
    /// was last called ([`poll_inline_hook`]).
    static INLINE_HOOK: std::cell::Cell<Option<PolledHook>> =
        const { std::cell::Cell::new(None) };
}

/// How often a wait inside an inline dispatch lets the run's hook look at its caller.
const INLINE_POLL: Duration = Duration::from_millis(20);

/// Once a run's program has nothing more to submit, run the dispatches still queued on
/// this thread (`help`: the engine's `end_helper`, which releases the hook around each)
/// until none is left or `cancelled()`: a one-task run then costs no hand-off to a
/// dispatch thread and back. Meanwhile the waits of those dispatches call `hook`
/// between slices ([`poll_inline_hook`]), as the run's own wait would.
pub(crate) fn help_at_end(
    help: Option<&dyn Fn() -> bool>,
    hook: Option<&'static dyn Fn(bool)>,
    cancelled: impl Fn() -> bool,
) {
    let Some(help) = help else {
        return;
    };
    // Cleared on every way out, a panic included: the hook does not outlive the run.
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            INLINE_HOOK.with(|c| c.set(None));
        }
    }
    let _clear = Clear;
    INLINE_HOOK.with(|c| c.set(hook.map(|h| (h, Instant::now()))));
    while !cancelled() {
        if !help() {
            break;
        }
    }
}

/// In a wait of a dispatch run by [`help_at_end`] (a node's, or L4 rank 0's): at most
/// every [`INLINE_POLL`], leave and re-enter the hook's blocking part (a Python
/// caller's Ctrl-C is seen there and cancels the run). Elsewhere (a dispatch thread)
/// nothing.
pub(crate) fn poll_inline_hook() {
    INLINE_HOOK.with(|c| {
        if let Some((h, last)) = c.get() {
            if last.elapsed() >= INLINE_POLL {
                h(false);
                h(true);
                c.set(Some((h, Instant::now())));
            }
        }
    });
}

/// The run's hook, carried into the (`'static`) program of one run (also rank 0's at L4).
#[derive(Clone, Copy)]
pub(crate) struct HookRef(Option<&'static dyn Fn(bool)>);
// safety: the hook is only called on the thread that runs the program, which is the
// thread that called `Node::run` (the engine runs the orchestration on its caller), so
// the value never takes the hook to another thread in use.
unsafe impl Send for HookRef {}
// safety: as for Send: every copy is used on the calling thread only.
unsafe impl Sync for HookRef {}

impl HookRef {
    /// The hook as `'static` for the program of one run.
    ///
    /// # Safety
    /// The program (and so every copy of this value) must not outlive `hook`: the
    /// engine runs the program on the calling thread and keeps nothing of it after the
    /// run returns.
    pub(crate) unsafe fn erase(hook: Option<&dyn Fn(bool)>) -> HookRef {
        // safety: see the function's contract.
        HookRef(
            hook.map(|h| unsafe { std::mem::transmute::<&dyn Fn(bool), &'static dyn Fn(bool)>(h) }),
        )
    }

    pub(crate) fn get(self) -> Option<&'static dyn Fn(bool)> {
        self.0
    }
}

/// `f()` as a blocking wait of the calling thread: between `hook(true)` and `hook(false)`.
fn blocking<R>(hook: Option<&dyn Fn(bool)>, f: impl FnOnce() -> R) -> R {
    if let Some(h) = hook {
        h(true);
    }
    let r = f();
    if let Some(h) = hook {
        h(false);
    }
    r
}

/// Wait until `over(state)`: look (`spin`) first, then block on `cv` in slices of at
/// most 50 ms, calling the hook around each slice (how a Python caller sees Ctrl-C).
/// The run's wait for its dispatches, at L3 and at L4 (rank 0).
pub(crate) fn wait_over<S>(
    state: &Mutex<S>,
    cv: &Condvar,
    over: impl Fn(&S) -> bool,
    spin: crate::chip::spin::SpinThenPark,
    hook: Option<&dyn Fn(bool)>,
) {
    if spin.spin(|| over(&state.lock())) {
        return;
    }
    while !blocking(hook, || {
        let mut st = state.lock();
        if !over(&st) {
            cv.wait_for(&mut st, HOOK_SLICE);
        }
        over(&st)
    }) {}
}

/// Wait until every L3 task of the run was dispatched and answered, or one failed, or
/// the run was cancelled; calls the hook around every slice of at most 50 ms. Woken
/// once, by the dispatch that ends the run (`Dispatch::record`) or by `cancel`.
fn wait_dispatched(sh: &NodeShared, hook: Option<&dyn Fn(bool)>) {
    let over = |st: &RunState| st.over() || sh.ctl.cancel.load(Acquire);
    wait_over(&sh.run, &sh.done, over, mailbox::MAILBOX_SPIN, hook);
}

/// Ask every chip to exit and reap it; chips that do not answer are killed (a stopped
/// chip at once, any other after [`SHUTDOWN_GRACE`]).
fn shutdown_chips(chips: &[Chip]) {
    for c in chips {
        let h = c.mailbox.header();
        h.state.store(STATE_SHUTDOWN, Release);
        futex_wake(&h.req_seq);
        futex_wake(&h.state);
        c.close_pipe();
    }
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    for c in chips {
        if let Some(t) = c.thread.lock().take() {
            // A chip thread still running a task of an interrupted run may not return
            // soon: it is left to finish on its own (it holds its own references).
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if t.is_finished() {
                let _ = t.join();
            }
            *c.dead.lock() = Some("closed".into());
            continue;
        }
        if !c.process || c.dead.lock().is_some() {
            continue;
        }
        // A stopped chip never runs its watchdog: no need to wait for it.
        let mut kill = proc_state(c.pid).is_some_and(|s| s == 'T' || s == 't');
        loop {
            let mut status = 0;
            if kill || Instant::now() >= deadline {
                // safety: killing and reaping our own child.
                unsafe {
                    libc::kill(c.pid, libc::SIGKILL);
                    libc::waitpid(c.pid, &mut status, 0);
                }
                break;
            }
            // safety: reaping our own child.
            let r = unsafe { libc::waitpid(c.pid, &mut status, libc::WNOHANG) };
            if r == c.pid || r < 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
            kill = proc_state(c.pid).is_some_and(|s| s == 'T' || s == 't');
        }
        *c.dead.lock() = Some("closed".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigErrorKind;

    fn new_node(opts: NodeOptions) -> Result<Node, NodeError> {
        Node::new(opts, Arc::new(RwLock::new(Vec::new())), &NoForkHooks)
    }

    #[test]
    fn canonical_index_puts_inputs_then_inouts_then_outputs() {
        use ArgDir::*;
        assert_eq!(
            canonical_index(&[Out, In, Scalar, InOut, In, Out]),
            vec![Some(3), Some(0), None, Some(2), Some(1), Some(4)]
        );
        assert_eq!(canonical_index(&[]), vec![]);
        assert_eq!(canonical_index(&[Scalar, Scalar]), vec![None, None]);
    }

    #[test]
    fn next_level_args_are_checked_with_one_set_of_messages() {
        use ArgDir::*;
        let t = Tensor::from_raw(4096, &[4], crate::tensor::DType::F32);
        let err = |sig: &[ArgDir], args: &[NextLevelArg]| node_task_args(sig, args).err();
        assert_eq!(
            err(&[In, Scalar], &[NextLevelArg::Int(1)]).as_deref(),
            Some("the program takes 2 arguments, got 1")
        );
        assert_eq!(
            err(&[Scalar], &[NextLevelArg::Tensor(t)]).as_deref(),
            Some("argument 0 is SCALAR but a tensor was given")
        );
        assert_eq!(
            err(&[Out], &[NextLevelArg::Float(0.5)]).as_deref(),
            Some("argument 0 must be a tensor")
        );
        let resident = NextLevelArg::Resident {
            view: t,
            id: 7,
            host: 1,
        };
        assert_eq!(
            err(&[Scalar, In], &[NextLevelArg::Int(3), resident]).as_deref(),
            Some("argument 1 is a tensor resident on L4 host 1; a chip task takes arrays in shared memory")
        );
        assert!(!resident.is_scalar() && NextLevelArg::Float(1.0).is_scalar());
    }

    #[test]
    fn errors_before_any_chip_starts_are_typed() {
        let e = new_node(NodeOptions {
            device_ids: vec![],
            ..NodeOptions::default()
        })
        .err()
        .expect("no devices");
        assert!(matches!(e, NodeError::NoDevices));
        assert_eq!(e.to_string(), "device_ids must not be empty");

        let prewarm = CallConfig {
            aicpu_thread_num: 9,
            ..CallConfig::default()
        };
        let e = new_node(NodeOptions {
            prewarm: Some(prewarm),
            ..NodeOptions::default()
        })
        .err()
        .expect("a broken prewarm config");
        let NodeError::Config(c) = &e else {
            panic!("{e:?}")
        };
        assert!(matches!(c.kind(), ConfigErrorKind::AicpuThreadNum { .. }));
        assert_eq!(e.to_string(), c.message);
    }

    #[test]
    fn messages_are_the_python_face_texts() {
        assert_eq!(NodeError::Closed.to_string(), "the node is closed");
        assert_eq!(
            NodeError::NoSuchChip(3).to_string(),
            "worker 3 is not a chip of this node"
        );
        assert_eq!(
            NodeError::start(1, "fork of chip 1", "out of memory").to_string(),
            "fork of chip 1: out of memory"
        );
        let e = NodeError::from(ChipFault {
            worker: 2,
            pid: 4242,
            text: "not responding: no heartbeat for 2000 ms (process state T, stopped)".into(),
        });
        assert_eq!(
            e.to_string(),
            "chip 2 (pid 4242): not responding: no heartbeat for 2000 ms (process state T, stopped)"
        );
    }
}
