//! L3: a host running one engine whose tasks are whole L2 dispatches, each shipped with
//! its own `CallConfig` to a chip — a child process (default) or a thread.
//!
//! One engine, two executors (`docs/architecture.md`): the node is the next-level engine
//! (shared with L4's rank 0: argument checks, the run, lanes, the hook) with its chips as
//! the executor. A dispatch thread of the node that picks a ready L3 task encodes it into
//! its chip's mailbox (`wire`, `mailbox`), waits for the reply and completes the
//! task. Dependencies between L2 tasks are inferred by the node's tensormap from their
//! tensor arguments, exactly as at L2.
//!
//! The rooms (the same names as L4's in `cluster`): `driver` ([`Node`],
//! [`NodeOrchestrator`], [`NodeHandle`]), `executor` (the chips as the engine's executor:
//! one dispatch's encode, round trip and completion), `transport` (the host's side of one
//! chip: round trip, liveness, shutdown), `worker` (the chip process: watchdog, start-up,
//! serving), `spawn` (starting chips), `timeline` and [`trace`] (a traced run's merged
//! timeline), `wire` (the frames) and `mailbox` (the shared-memory slot they travel in).
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
//!   the mailbox's `heartbeat` word every 20 ms (`mailbox::HEARTBEAT`), whatever its
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

mod driver;
mod executor;
pub(crate) mod mailbox;
/// Shared memory lives in [`crate::mem::shm`] (the arena's heaps use it at L2); the node
/// and the Python face keep reaching it here.
pub use crate::mem::shm;
mod spawn;
mod timeline;
pub mod trace;
mod transport;
pub(crate) mod wire;
mod worker;

pub use crate::nextlevel::{ArgDir, NextLevelArg};
pub use driver::{Node, NodeHandle, NodeOrchestrator};
pub(crate) use executor::report_of;
pub use worker::chip_dir;
pub(crate) use worker::wire_report;

use crate::chip::{Program, RunReport};
use crate::config::{CallConfig, ConfigError};
use crate::engine::RuntimeFailure;
use std::time::Duration;

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
    /// Sizing every chip builds before it reports ready (validated first); one that
    /// does not fit a chip's device memory fails its start, unless `prewarm_if_fits`.
    pub prewarm: Option<CallConfig>,
    /// A `prewarm` that does not fit a chip's device memory is skipped with a warning
    /// (the default sizing a worker builds when it is given no prewarm of its own).
    pub prewarm_if_fits: bool,
    /// Deadline for all chips to report ready.
    pub init_timeout: Duration,
    /// Used by chips around their blocking waits (e.g. releasing an interpreter lock).
    pub blocking_hook: Option<crate::nextlevel::hook::BlockingHook>,
    /// A chip process whose heartbeat stands still this long is `not responding` (the
    /// task waiting on it fails). Default 2 s, or `TASKRING_CHIP_TIMEOUT_MS`.
    pub chip_timeout: Duration,
    /// Every chip's device memory (`ChipOptions::device_memory`). Default 64 GiB, or
    /// `TASKRING_DEVICE_MEMORY`.
    pub device_memory: u64,
    /// Host worker processes beside the chips (none by default).
    pub host: Option<HostWorkers>,
    /// How a chip process rebuilds a program registered after it started, from the
    /// bytes [`NodeHandle::register_late`] sends it (None: such programs are refused).
    pub late_callable: Option<LateCallable>,
}

/// Rebuilds, in a chip process, a program from its description.
pub type LateCallable = std::sync::Arc<dyn Fn(&[u8]) -> Result<ChipCallable, String> + Send + Sync>;

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            device_ids: vec![0],
            chip_processes: true,
            arena_cache_slots: 4,
            chip_cores: 0,
            node_cores: 0,
            prewarm: None,
            prewarm_if_fits: false,
            init_timeout: Duration::from_secs(30),
            blocking_hook: None,
            chip_timeout: std::env::var("TASKRING_CHIP_TIMEOUT_MS")
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&v| v > 0)
                .map(Duration::from_millis)
                .unwrap_or(Duration::from_secs(2)),
            device_memory: crate::chip::default_device_memory(),
            host: None,
            late_callable: None,
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

/// A worker's own failure: the worker (its index in the node and pid) and what it or the
/// host said about it (its error text, or why the host stopped waiting for it). A chip's
/// reads `chip {worker} (pid {pid}): {text}`; a host worker's text is whole (its entry's
/// own words, e.g. `sub_worker: ValueError: ...`, or `sub_worker 1 (pid P): ...` from the
/// host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChipFault {
    pub worker: usize,
    pub pid: i32,
    pub text: String,
    /// `text` is the whole message (a host worker's).
    pub whole: bool,
}

impl std::fmt::Display for ChipFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.whole {
            f.write_str(&self.text)
        } else {
            write!(f, "chip {} (pid {}): {}", self.worker, self.pid, self.text)
        }
    }
}

impl std::error::Error for ChipFault {}

/// One argument of a host worker's task, resolved in the worker's process: a tensor
/// (its data address valid there) or a scalar.
#[derive(Clone, Copy, Debug)]
pub enum HostArg {
    Tensor(crate::tensor::Tensor),
    Int(i64),
    Float(f64),
}

/// One task of a host worker, as its entry sees it.
pub struct HostCall<'a> {
    /// The host worker's index (0 for the first one, after the chips).
    pub worker: usize,
    /// The caller's own callable number (the node does not interpret it).
    pub callable: u32,
    pub args: &'a [HostArg],
    /// The task's whole config.
    pub config: &'a CallConfig,
}

/// What a host worker process runs for each task: `Err` is the whole failure text.
pub type HostEntry = std::sync::Arc<dyn Fn(&HostCall<'_>) -> Result<(), String> + Send + Sync>;
/// What a host worker process runs once at start (its index), before it reports ready,
/// and once at shutdown.
pub type HostHook = std::sync::Arc<dyn Fn(usize) -> Result<(), String> + Send + Sync>;

/// A node's host workers: processes forked beside the chips that run the caller's own
/// code for each task (SUB workers, next-level workers). Host worker `i` is node worker
/// `chips + i`; the first `pool` of them are a pool a task may leave the choice of
/// worker to ([`NodeOrchestrator::submit_host`]).
#[derive(Clone)]
pub struct HostWorkers {
    /// What each is called in a failure, e.g. `sub_worker 0`.
    pub labels: Vec<String>,
    pub pool: usize,
    pub entry: HostEntry,
    pub start: Option<HostHook>,
    pub stop: Option<HostHook>,
}

impl NodeError {
    pub(crate) fn start(
        worker: usize,
        what: impl Into<String>,
        reason: impl std::fmt::Display,
    ) -> Self {
        NodeError::Start {
            worker,
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigErrorKind;
    use parking_lot::RwLock;
    use std::sync::Arc;

    fn new_node(opts: NodeOptions) -> Result<Node, NodeError> {
        Node::new(opts, Arc::new(RwLock::new(Vec::new())), &NoForkHooks)
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
            whole: false,
        });
        assert_eq!(
            e.to_string(),
            "chip 2 (pid 4242): not responding: no heartbeat for 2000 ms (process state T, stopped)"
        );
    }
}
