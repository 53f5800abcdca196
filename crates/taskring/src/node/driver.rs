//! The host of an L3 node: [`Node`] (start, run, close), its orchestration API and the
//! handle other threads use while a run is in flight.

use super::executor::Chips;
use super::mailbox::futex_wake;
use super::spawn::{chip_lanes, host_count, node_engine_options, start_chip, wait_chips_ready};
use super::transport::{shutdown_chips, Chip, Ctl};
use super::wire;
use super::{ChipCallable, ChipFault, ForkHooks, NodeError, NodeOptions, NodeRunReport};
use crate::chip::ChipWorker;
use crate::config::CallConfig;
use crate::engine::{Orchestrator, RuntimeFailure, TaskOutputs, TensorSpec};
use crate::nextlevel::{ArgDir, Level, LevelError, NextLevelArg, Orch, Shared};
use crate::tensor::TaskId;
use parking_lot::RwLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Instant;

/// The orchestration API of an L3 run.
pub struct NodeOrchestrator<'a, 'r> {
    g: Orch<'a, 'r, Chips>,
}

impl<'r> NodeOrchestrator<'_, 'r> {
    /// The underlying engine orchestrator (scopes, alloc).
    pub fn engine(&mut self) -> &mut Orchestrator<'r> {
        self.g.o
    }

    pub fn chips(&self) -> usize {
        self.g.sh.exec.n_chips
    }

    /// Host workers of the node (`NodeOptions::host`).
    pub fn host_workers(&self) -> usize {
        self.g.sh.exec.chips.len() - self.g.sh.exec.n_chips
    }

    /// Submit the L2 task `callable(args)` to chip `worker`, run there with `config`.
    pub fn submit_next_level(
        &mut self,
        callable: u32,
        args: &[NextLevelArg],
        config: &CallConfig,
        worker: usize,
    ) -> Result<TaskId, RuntimeFailure> {
        self.submit_next_level_with(callable, None, args, config, worker)
    }

    /// [`NodeOrchestrator::submit_next_level`] with the directions of the arguments
    /// given (`dirs`) instead of the program's signature.
    pub fn submit_next_level_with(
        &mut self,
        callable: u32,
        dirs: Option<&[ArgDir]>,
        args: &[NextLevelArg],
        config: &CallConfig,
        worker: usize,
    ) -> Result<TaskId, RuntimeFailure> {
        let chips = self.chips();
        if worker >= chips {
            return Err(RuntimeFailure::invalid_args(
                None,
                format!("submit_next_level: worker {worker} is not a chip of this node (it has {chips})"),
            ));
        }
        self.g.submit_with(callable, dirs, args, config, worker)
    }

    /// Submit a task to a host worker: `worker` (an index among the host workers), or
    /// with None the pool's least busy one. `callable` is the host workers' own number
    /// for what to run; `dirs` say how the task uses each argument (dependencies with
    /// chip and host tasks come from the tensors they share). The task runs with
    /// `config` whole.
    pub fn submit_host(
        &mut self,
        callable: u32,
        dirs: &[ArgDir],
        args: &[NextLevelArg],
        config: &CallConfig,
        worker: Option<usize>,
    ) -> Result<TaskId, RuntimeFailure> {
        let x = &self.g.sh.exec;
        let hosts = x.chips.len() - x.n_chips;
        let i = match worker {
            Some(i) if i < hosts => i,
            Some(i) => {
                return Err(RuntimeFailure::invalid_args(
                    None,
                    format!("submit: host worker {i} does not exist (the node has {hosts})"),
                ))
            }
            None => x.pick_pooled().ok_or_else(|| {
                RuntimeFailure::invalid_args(None, "submit: the node has no pooled host workers")
            })?,
        };
        x.load[i].fetch_add(1, Relaxed);
        let r = self
            .g
            .submit_with(callable, Some(dirs), args, config, x.n_chips + i);
        if r.is_err() {
            self.g.sh.exec.load[i].fetch_sub(1, Relaxed);
        }
        r
    }

    /// An allocation in the node's (shared) memory, alive until the current scope ends.
    pub fn alloc(&mut self, spec: TensorSpec) -> Result<TaskOutputs, RuntimeFailure> {
        self.g.o.alloc(&[spec])
    }
}

/// A handle on a node usable from other threads while a run is in flight: chip
/// statistics (a chip answers between two of its tasks), cancelling the run, and
/// announcing a close.
#[derive(Clone)]
pub struct NodeHandle {
    shared: Arc<Shared<Chips>>,
    creator: u32,
}

impl NodeHandle {
    /// One request to chip `worker` whose reply carries its arena-cache counters: the
    /// chip and the counters, or the chip's failure.
    fn chip_stats_request(
        &self,
        worker: usize,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, wire::FrameError>,
    ) -> Result<(&Chip, wire::WireStats), NodeError> {
        if std::process::id() != self.creator {
            return Err(NodeError::Forked(self.creator));
        }
        let chip = self
            .shared
            .exec
            .chips
            .get(worker)
            .filter(|_| worker < self.shared.exec.n_chips)
            .ok_or(NodeError::NoSuchChip(worker))?;
        let r = chip
            .round_trip(&self.shared.exec.ctl, encode)
            .map_err(NodeError::Chip)?;
        let st = r
            .stats
            .ok_or_else(|| NodeError::Chip(chip.fault(r.error)))?;
        Ok((chip, st))
    }

    /// The counters of a chip's reply, with the device memory the host knows of.
    fn arena_stats_of(&self, chip: &Chip, st: wire::WireStats) -> crate::arena::ArenaStats {
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
            capacity_bytes: self.shared.exec.device_memory,
        }
    }

    /// Chip `worker`'s arena-cache statistics.
    pub fn chip_arena_stats(&self, worker: usize) -> Result<crate::arena::ArenaStats, NodeError> {
        let (chip, st) = self.chip_stats_request(worker, wire::encode_stats_request)?;
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
            self.chip_stats_request(worker, |b| wire::encode_hold_request(b, bytes))?;
        chip.held.store(bytes, Relaxed);
        Ok(self.arena_stats_of(chip, st))
    }

    /// Register program `index`, described by `desc`, on every chip process (each
    /// rebuilds it with `NodeOptions::late_callable`): for a program registered after
    /// the chips started. Chip threads share the host's registry and are not asked. The
    /// first chip that refuses is the error; a retry of the same index overwrites it on
    /// the chips that took it.
    pub fn register_late(&self, index: u32, desc: &[u8]) -> Result<(), NodeError> {
        if std::process::id() != self.creator {
            return Err(NodeError::Forked(self.creator));
        }
        let x = &self.shared.exec;
        for chip in x.chips[..x.n_chips].iter().filter(|c| c.process) {
            let r = chip
                .round_trip(&x.ctl, |b| wire::encode_register_request(b, index, desc))
                .map_err(NodeError::Chip)?;
            if r.status != 0 {
                return Err(NodeError::Chip(chip.fault(r.error)));
            }
        }
        Ok(())
    }

    /// Cancel the run in flight: every dispatch waiting on a chip gives up at once and
    /// the run fails with [`NodeError::Interrupted`] (see the module doc). The flag is
    /// cleared when the next run starts.
    pub fn cancel(&self) {
        self.shared.cancel();
        for c in &self.shared.exec.chips {
            futex_wake(&c.mailbox.header().resp_seq);
        }
    }

    /// Announce that the node is about to close (from another thread than the run's):
    /// dispatches stop waiting for chips that do not answer, and no new run starts.
    pub fn request_close(&self) {
        self.shared.exec.ctl.closing.store(true, SeqCst);
    }
}

/// A host with chips. See the module doc.
pub struct Node {
    level: Level<Chips>,
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

impl Node {
    /// Start the chips (see the module doc). `callables` are the programs chips can
    /// run; in process mode a chip knows those registered before this call.
    pub fn new(
        opts: NodeOptions,
        callables: Arc<RwLock<Vec<ChipCallable>>>,
        hooks: &dyn ForkHooks,
    ) -> Result<Node, NodeError> {
        let hosts = host_count(&opts);
        if opts.device_ids.is_empty() && hosts == 0 {
            return Err(NodeError::NoDevices);
        }
        let lanes = chip_lanes(&opts) + hosts;
        if lanes > crate::engine::shared::MAX_LANES {
            return Err(NodeError::start(
                0,
                "the node's dispatch lanes",
                format!(
                    "{lanes} lanes (chips' and one per host worker) are more than {}",
                    crate::engine::shared::MAX_LANES
                ),
            ));
        }
        if let Some(c) = &opts.prewarm {
            c.validate()?;
        }
        let host_pid = std::process::id() as i32;
        let n_chips = opts.device_ids.len();
        let mut chips: Vec<Chip> = Vec::with_capacity(n_chips + hosts);
        for worker in 0..n_chips + hosts {
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
        let exec = Chips {
            chips,
            ctl,
            device_memory: opts.device_memory,
            callables,
            n_chips,
            chip_lanes: chip_lanes(&opts),
            pool: opts.host.as_ref().map_or(0, |h| h.pool.min(hosts)),
            load: (0..hosts)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            cursor: std::sync::atomic::AtomicUsize::new(0),
        };
        let level = Level::new(exec, node_engine_options(&opts)).map_err(|(e, x)| {
            shutdown_chips(&x.chips);
            NodeError::Failure(e)
        })?;
        Ok(Node {
            level,
            closed: false,
            creator: std::process::id(),
            creator_forks: forks(),
        })
    }

    /// Process ids of the chips (the host's own pid for chip threads).
    pub fn chip_pids(&self) -> Vec<i32> {
        let x = &self.level.sh.exec;
        x.chips[..x.n_chips].iter().map(|c| c.pid).collect()
    }

    /// Number of chips.
    pub fn chips(&self) -> usize {
        self.level.sh.exec.n_chips
    }

    /// Process ids of the host workers (`NodeOptions::host`).
    pub fn host_pids(&self) -> Vec<i32> {
        let x = &self.level.sh.exec;
        x.chips[x.n_chips..].iter().map(|c| c.pid).collect()
    }

    /// Chip `worker`'s arena-cache statistics (asked of the chip).
    pub fn chip_arena_stats(&self, worker: usize) -> Result<crate::arena::ArenaStats, NodeError> {
        self.handle().chip_arena_stats(worker)
    }

    /// A handle usable from other threads while a run is in flight (statistics,
    /// cancel, close announcement).
    pub fn handle(&self) -> NodeHandle {
        NodeHandle {
            shared: self.level.sh.clone(),
            creator: self.creator,
        }
    }

    /// The node's own engine (its L3 arena cache):
    pub fn engine(&self) -> Option<&ChipWorker> {
        self.level.engine()
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
        if self.level.sh.exec.ctl.closing.load(Acquire) {
            return Err(NodeError::Closed);
        }
        let orch =
            move |g: &mut Orch<'_, '_, Chips>| orch(&mut NodeOrchestrator { g: g.reborrow() });
        let tasks = self.level.run(orch, config, hook)?;
        Ok(NodeRunReport {
            tasks,
            elapsed_s: t0.elapsed().as_secs_f64(),
        })
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
            self.level.forget();
            return;
        }
        let x = &self.level.sh.exec;
        x.ctl.closing.store(true, SeqCst);
        // Chips first (no run is in flight: `close` takes the node).
        shutdown_chips(&x.chips);
        self.level.close();
    }
}

impl From<LevelError<ChipFault>> for NodeError {
    fn from(e: LevelError<ChipFault>) -> Self {
        match e {
            LevelError::Closed => NodeError::Closed,
            LevelError::Interrupted(why) => NodeError::Interrupted(why),
            LevelError::Config(e) => NodeError::Config(e),
            LevelError::Worker(fault) => NodeError::Chip(fault),
            LevelError::Failure(f) => NodeError::Failure(f),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.close();
    }
}
