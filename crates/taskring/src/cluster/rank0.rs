//! Rank 0 of an L4 job: the engine whose tasks are whole L3 dispatches on hosts.
//!
//! Each host has a lane (a ready queue of its own) in the engine, served by two dispatch
//! threads: a host's backlog holds up no other host's tasks, and while a host serves one
//! request its next one is already sent. A ready L4 task runs on one of its host's
//! dispatch threads ([`HostDispatch`]):
//! it encodes the task (its whole `CallConfig`), sends it to the host's rank with tag
//! `TAG_REQUEST`, sends its inputs' bytes straight from the caller's arrays with the
//! task's data tag, then waits (matched probe, backoff) for the reply with that tag and
//! receives the outputs' bytes straight into the caller's arrays. Each dispatch's tag
//! is its sequence number modulo [`comm::DATA_TAGS`]; the reply carries the sequence
//! number back, and a reply of an earlier, abandoned dispatch that happens to share the
//! tag (an interrupted run) is received and dropped.
//!
//! Liveness ([`HostLive`]): a wait on a host (a send, its turn, its reply, its outputs)
//! that lasts longer than a fifth of the host timeout (`TASKRING_HOST_TIMEOUT_MS`,
//! default 5 s) pings the host, and again at that interval; the host's watchdog thread
//! answers whatever its task does. A host with no answer for the timeout is lost: the
//! task fails with `host {h} (rank {r}): not responding: ...`, as does every later
//! task for it, and the job ends with `MPI_Abort` when rank 0 finalizes (MPI cannot
//! finalize with a rank missing). A host that stopped serving on its own (its
//! orchestration raised `SystemExit`, a SIGINT) said so: its tasks fail with that
//! reason. A wait shorter than the ping interval costs nothing (no message, a clock
//! read per poll after the first spins).

use super::comm::{self, FIRST_DATA_TAG, TAG_REQUEST};
use super::trace::{self, TaskSpan};
use super::wire::{self, L4Arg, L4Dir, L4Reply, L4Task, L4Tensor};
use super::{host_prefix, ClusterError, ClusterRunReport, HostTaskReport};
use crate::chip::{ChipOptions, ChipWorker, Program, RunError};
use crate::config::CallConfig;
use crate::engine::{Orchestrator, RuntimeFailure, Scalar, StatusCode, TaskArgs};
use crate::kernel::{Kernel, KernelCall, KernelRef};
use crate::node::{canonical_index, check_arity, wait_over, ArgDir, HookRef, NextLevelArg};
use crate::tensor::{TaskId, Tensor};
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How rank 0's orchestration thread waits for its hosts before it blocks: 50 spin hints,
/// then yields — about 0.3 ms in all on this machine.
const WAIT_SPIN: crate::chip::spin::SpinThenPark = crate::chip::spin::SpinThenPark {
    checks: 600,
    spin_checks: 50,
    yield_every: 0,
};
/// Longest sleep of a dispatch thread waiting for its reply.
const REPLY_MAX_SLEEP: Duration = Duration::from_millis(1);

/// How long a host may leave rank 0's pings unanswered: `TASKRING_HOST_TIMEOUT_MS`, else
/// 5 s.
pub fn host_timeout() -> Duration {
    std::env::var("TASKRING_HOST_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&v| v > 0)
        .map(Duration::from_millis)
        .unwrap_or(Duration::from_secs(5))
}

/// Nanoseconds on a process-local monotonic clock (never 0).
fn now_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

/// What rank 0 knows of one host's liveness (see the module doc).
#[derive(Default)]
struct HostLive {
    /// Why the host is lost, once it is (its tasks fail with this).
    lost: std::sync::OnceLock<String>,
    /// When a pong last came ([`now_ns`]; 0: never).
    heard: AtomicU64,
    /// When the last ping went out (0: never).
    pinged: AtomicU64,
    /// One thread at a time reads the host's liveness messages and pings it.
    busy: Mutex<()>,
    /// The host acknowledged the close frame.
    closed: AtomicBool,
}

impl HostLive {
    fn lost(&self) -> Option<&String> {
        self.lost.get()
    }

    /// The host is lost for `why`; not responding (`dead`) also means the job cannot
    /// finalize.
    fn set_lost(&self, worker: usize, why: String, dead: bool) {
        if self.lost.set(why.clone()).is_ok() && dead {
            comm::forbid_finalize(format!("{}: {why}", host_prefix(worker)));
        }
    }

    /// Take the host's liveness messages off the queue: pongs, a leaving notice, the
    /// close acknowledgement.
    fn drain(&self, worker: usize) {
        while let Some(m) = comm::try_receive(worker as i32 + 1, comm::TAG_LIVE) {
            match m.first() {
                Some(&comm::LIVE_PONG) => self.heard.store(now_ns(), Relaxed),
                Some(&comm::LIVE_CLOSED) => self.closed.store(true, Relaxed),
                Some(&comm::LIVE_LEAVING) => {
                    let why = String::from_utf8_lossy(&m[1..]);
                    self.set_lost(worker, format!("stopped serving ({why})"), false);
                }
                _ => {}
            }
        }
    }

    /// A wait on the host that began at `since` is at `now`: ping the host when nothing
    /// was heard of it for the ping interval, and find it lost when nothing was heard for
    /// the timeout. True when the host is lost.
    fn check(&self, worker: usize, since: u64, now: u64, timeout: Duration) -> bool {
        if self.lost().is_some() {
            return true;
        }
        let t = timeout.as_nanos() as u64;
        let every = (t / 5).max(1_000_000);
        if now.saturating_sub(since.max(self.heard.load(Relaxed))) < every {
            return false;
        }
        let Some(_one) = self.busy.try_lock() else {
            return false;
        };
        self.drain(worker);
        if self.lost().is_some() {
            return true;
        }
        let silent = now.saturating_sub(since.max(self.heard.load(Relaxed)));
        if silent >= t {
            self.set_lost(
                worker,
                format!(
                    "not responding: no answer to pings for {} ms (TASKRING_HOST_TIMEOUT_MS={})",
                    silent / 1_000_000,
                    timeout.as_millis()
                ),
                true,
            );
            return true;
        }
        if now.saturating_sub(self.pinged.load(Relaxed)) >= every {
            comm::send_detached(worker as i32 + 1, comm::TAG_LIVE, &[comm::LIVE_PING]);
            self.pinged.store(now, Relaxed);
        }
        false
    }
}

/// One wait (or several in a row) on a host: its start, and the check of the host's
/// liveness between polls.
struct Watch<'a> {
    live: &'a HostLive,
    worker: usize,
    timeout: Duration,
    polls: u32,
    since: u64,
}

impl<'a> Watch<'a> {
    fn new(sh: &'a Shared, worker: usize) -> Self {
        Watch {
            live: &sh.live[worker],
            worker,
            timeout: sh.timeout,
            polls: 0,
            since: 0,
        }
    }

    /// Should the wait end because the host is lost? The first polls of a wait (a
    /// reply on its way) only look at the flag.
    fn lost(&mut self) -> bool {
        if self.live.lost().is_some() {
            return true;
        }
        self.polls = self.polls.saturating_add(1);
        if self.polls <= 64 {
            return false;
        }
        let now = now_ns();
        if self.since == 0 {
            self.since = now;
        }
        self.live.check(self.worker, self.since, now, self.timeout)
    }

    /// Why the host is lost ("lost" when it is not: the caller asked too early).
    fn why(&self) -> String {
        self.live.lost().cloned().unwrap_or_else(|| "lost".into())
    }
}

/// A registered L4 program (a `DistributedProgram`): its name and signature.
#[derive(Clone, Debug)]
pub struct ClusterProgram {
    pub name: String,
    pub signature: Vec<ArgDir>,
}

#[derive(Clone, Copy, Debug)]
enum Slot {
    /// Index in the task's tensors (canonical order), direction, resident id.
    Tensor(usize, L4Dir, Option<u64>),
    Int(i64),
    Float(f64),
}

#[derive(Clone, Debug)]
struct L4Rec {
    worker: usize,
    callable: u32,
    name: String,
    config: CallConfig,
    slots: Vec<Slot>,
}

#[derive(Default)]
struct RunState {
    tasks: Vec<L4Rec>,
    reports: Vec<Option<HostTaskReport>>,
    finished: usize,
    in_flight: usize,
    first_error: Option<String>,
    /// A traced run's timeline (see [`super::trace`]).
    trace: Option<RunTrace>,
}

/// What a traced run records for its L4 timeline.
struct RunTrace {
    /// The run's `output_prefix` (where the timeline goes; tasks without one use it).
    prefix: String,
    t0_ns: u64,
    /// Per L4 task (by index).
    spans: Vec<Option<TaskSpan>>,
}

impl RunState {
    fn over(&self) -> bool {
        self.finished >= self.tasks.len() || (self.first_error.is_some() && self.in_flight == 0)
    }
}

struct Shared {
    hosts: usize,
    run: Mutex<RunState>,
    done: Condvar,
    cancel: AtomicBool,
    seq: AtomicU64,
    /// Per host, the order of its requests (see [`HostTurn`]).
    turns: Vec<HostTurn>,
    /// Per host, its liveness.
    live: Vec<HostLive>,
    /// See [`host_timeout`].
    timeout: Duration,
}

/// A host serves its requests one at a time, in the order they arrive; so of the
/// dispatch threads with a task at the same host, only the one whose request is the
/// oldest unanswered can get a reply soon. The others block here (no CPU) instead of
/// polling MPI. Requests are numbered as they are sent: the request message (never its
/// data) is sent under `sent`'s lock, so the numbers are the host's order of service.
/// A thread polls for its reply once every earlier request of its host was answered
/// (or its thread gave up).
///
/// Why no deadlock: a thread holds `sent` only while its request message goes out,
/// which needs nothing from the other threads (the host takes requests between tasks);
/// `answered` is never held across MPI. A task's data and outputs move outside both
/// locks, and the host serves in the numbers' order, so the thread of the task the host
/// is serving (or sending outputs to) is never blocked here: every earlier request was
/// answered. (Holding the lock across the data sends deadlocked: the next task's input
/// waited for the host, the host for the current task's output to be received, its
/// thread for the lock — `tests/l4/scenarios.py` has six 1 MiB copies in flight.)
#[derive(Default)]
struct HostTurn {
    /// Requests sent.
    sent: Mutex<u64>,
    /// Requests whose dispatch thread is done waiting.
    answered: Mutex<u64>,
    turn: Condvar,
}

impl HostTurn {
    /// Send a request message (`send` runs under the lock; nothing else should); its
    /// number.
    fn send<T>(&self, send: impl FnOnce() -> T) -> (u64, T) {
        let mut n = self.sent.lock();
        let r = send();
        *n += 1;
        (*n - 1, r)
    }

    /// Block until every request before `n` was answered, or `cancel`, or the host is
    /// `lost` (its earlier request's thread found so). On the run's own
    /// thread (a lone dispatch run inline) the run's hook sees a Ctrl-C between slices
    /// (outside the lock).
    fn wait_turn(&self, n: u64, cancel: &AtomicBool, lost: &dyn Fn() -> bool) {
        loop {
            {
                let mut a = self.answered.lock();
                if *a >= n || cancel.load(Relaxed) || lost() {
                    return;
                }
                self.turn.wait_for(&mut a, Duration::from_millis(10));
                if *a >= n || cancel.load(Relaxed) || lost() {
                    return;
                }
            }
            crate::node::poll_inline_hook();
        }
    }

    /// Request `n`'s thread is done waiting (answered, failed or interrupted).
    fn done(&self, n: u64) {
        let mut a = self.answered.lock();
        *a = (*a).max(n + 1);
        self.turn.notify_all();
    }
}

/// The executor: one L4 task's round trip to its host.
struct HostDispatch {
    sh: Arc<Shared>,
    /// Host `h`'s tasks go to lane `h % lanes`: two dispatch threads per host take only
    /// them (one waits for the host's next request while the other's is served).
    lane: usize,
}

/// The bytes of tensor `t`'s view, to send.
///
/// # Safety
/// `t` is a contiguous view (`nbytes` bytes from `data_ptr`) of memory that stays
/// readable for `'a`, and nothing writes it meanwhile.
unsafe fn bytes_of<'a>(t: &Tensor) -> &'a [u8] {
    // safety: the caller's contract: `nbytes` readable bytes at `data_ptr`, unwritten for 'a.
    unsafe { std::slice::from_raw_parts(t.data_ptr(), t.nbytes() as usize) }
}

/// The bytes of tensor `t`'s view, to receive into.
///
/// # Safety
/// `t` is a contiguous view (`nbytes` bytes from `data_ptr`) of memory that stays
/// writable for `'a`, and nothing else reads or writes it meanwhile.
unsafe fn bytes_of_mut<'a>(t: &Tensor) -> &'a mut [u8] {
    // safety: the caller's contract: `nbytes` writable bytes at `data_ptr`, used by
    // nothing else for 'a.
    unsafe { std::slice::from_raw_parts_mut(t.data_ptr(), t.nbytes() as usize) }
}

impl HostDispatch {
    /// The task frame and the tensors whose bytes go out and come back.
    fn frame(
        &self,
        rec: &L4Rec,
        seq: u64,
        tag: i32,
        call: &KernelCall<'_>,
    ) -> (L4Task, Vec<Tensor>, Vec<Tensor>) {
        let mut sent = vec![];
        let mut back = vec![];
        let args = rec
            .slots
            .iter()
            .map(|s| match *s {
                Slot::Tensor(i, dir, resident) => {
                    let t = call.tensors[i];
                    let desc = L4Tensor {
                        dir,
                        dtype: t.dtype,
                        shape: t.shape().iter().map(|&d| d as u64).collect(),
                    };
                    match resident {
                        Some(id) => L4Arg::Resident(desc, id),
                        None => {
                            if dir.sent() {
                                sent.push(t);
                            }
                            if dir.returned() {
                                back.push(t);
                            }
                            L4Arg::Shipped(desc)
                        }
                    }
                }
                Slot::Int(v) => L4Arg::Int(v),
                Slot::Float(v) => L4Arg::Float(v),
            })
            .collect();
        let task = L4Task {
            seq,
            data_tag: tag,
            callable: rec.callable,
            name: rec.name.clone(),
            config: rec.config.clone(),
            args,
        };
        (task, sent, back)
    }

    /// Should a wait give up (the run was cancelled)? On the run's own thread (a lone
    /// dispatch run inline, `help_at_end`) this also lets the run's hook see a Ctrl-C
    /// every 20 ms.
    fn given_up(&self) -> bool {
        crate::node::poll_inline_hook();
        self.sh.cancel.load(Relaxed)
    }

    /// Wait for this dispatch's reply; earlier dispatches' late replies on the same tag
    /// are taken off the queue (with their data) and dropped.
    fn await_reply(
        &self,
        rank: i32,
        tag: i32,
        seq: u64,
        watch: &mut Watch<'_>,
    ) -> Result<L4Reply, String> {
        loop {
            let (msg, status) = comm::wait_message(
                rank,
                Some(tag),
                REPLY_MAX_SLEEP,
                comm::Backoff::EXPECTED,
                || self.given_up() || watch.lost(),
            )
            .ok_or_else(|| self.why_given_up(watch))?;
            let buf = comm::receive_vec(msg, &status);
            let reply = wire::decode_reply(&buf).map_err(|e| format!("malformed reply: {e}"))?;
            if reply.seq == seq {
                return Ok(reply);
            }
            for _ in 0..reply.n_outputs {
                if let Some((m, s)) = comm::wait_message(
                    rank,
                    Some(tag),
                    REPLY_MAX_SLEEP,
                    comm::Backoff::EXPECTED,
                    || self.given_up() || watch.lost(),
                ) {
                    drop(comm::receive_vec(m, &s));
                }
            }
        }
    }

    /// Why a wait gave up: the host is lost, else the run was interrupted.
    fn why_given_up(&self, watch: &Watch<'_>) -> String {
        match watch.live.lost() {
            Some(why) => why.clone(),
            None => "interrupted".into(),
        }
    }

    /// The round trip; Ok(reply) when the host answered (its task may have failed), with
    /// the host's timeline when its config records one (`host::ships_timeline`).
    fn round_trip(
        &self,
        rec: &L4Rec,
        call: &KernelCall<'_>,
    ) -> Result<(L4Reply, Option<Vec<u8>>), String> {
        let mut watch = Watch::new(&self.sh, rec.worker);
        if let Some(why) = watch.live.lost() {
            return Err(why.clone());
        }
        let seq = self.sh.seq.fetch_add(1, Relaxed);
        let tag = FIRST_DATA_TAG + (seq % comm::DATA_TAGS) as i32;
        let rank = rec.worker as i32 + 1;
        let (task, sent, back) = self.frame(rec, seq, tag, call);
        let mut buf = vec![0u8; wire::task_len(&task)];
        let n = wire::encode_task(&task, &mut buf)
            .map_err(|e| format!("cannot encode the task: {e}"))?;
        let turn = &self.sh.turns[rec.worker];
        // The sends give up only on a lost host (never on Ctrl-C: MPI would go on
        // reading the caller's arrays); the frame's buffer is then left to MPI.
        let (k, sent_frame) =
            turn.send(|| comm::send_until(rank, TAG_REQUEST, &buf[..n], || watch.lost()));
        if !sent_frame {
            std::mem::forget(buf);
        }
        let reply = if sent_frame
            && sent.iter().all(|t| {
                // safety: a shipped tensor is a contiguous view (checked at submit)
                // of memory the caller keeps alive for the run; this task reads it,
                // so the engine runs no writer of it until the task ends.
                let bytes = unsafe { bytes_of(t) };
                comm::send_data_until(rank, tag, bytes, &mut || watch.lost())
            }) {
            turn.wait_turn(k, &self.sh.cancel, &|| watch.live.lost().is_some());
            self.await_reply(rank, tag, seq, &mut watch)
        } else {
            Err(watch.why())
        };
        turn.done(k);
        let reply = reply?;
        let mut timeline = None;
        if reply.status == 0 {
            if reply.n_outputs as usize != back.len() {
                return Err(format!(
                    "the host answered with {} outputs; the task has {}",
                    reply.n_outputs,
                    back.len()
                ));
            }
            for t in &back {
                // safety: a shipped tensor is a contiguous view (checked at submit) of
                // memory the caller keeps alive for the run; this task writes it, so the
                // engine runs no other reader or writer of it until the task ends. The
                // slice ends with this call.
                comm::receive_data(rank, tag, unsafe { bytes_of_mut(t) }, &mut || {
                    self.given_up() || watch.lost()
                })
                .map_err(|e| match watch.live.lost() {
                    Some(why) => why.clone(),
                    None => e,
                })?;
            }
            if super::host::ships_timeline(&rec.config) {
                let (m, st) = comm::wait_message(
                    rank,
                    Some(tag),
                    REPLY_MAX_SLEEP,
                    comm::Backoff::EXPECTED,
                    || self.given_up() || watch.lost(),
                )
                .ok_or_else(|| self.why_given_up(&watch))?;
                timeline = Some(comm::receive_vec(m, &st));
            }
        } else {
            // A host that stops serving says so before this reply: its later tasks fail
            // at once.
            watch.live.drain(rec.worker);
        }
        Ok((reply, timeline))
    }
}

impl Kernel for HostDispatch {
    fn name(&self) -> &str {
        "host-dispatch"
    }
    fn ready_queue(&self) -> usize {
        crate::engine::shared::lane_queue(self.lane)
    }
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        let idx = call.scalar_i64(0) as usize;
        let (rec, traced) = {
            let mut st = self.sh.run.lock();
            st.in_flight += 1;
            (st.tasks[idx].clone(), st.trace.is_some())
        };
        let t0 = Instant::now();
        let start_ns = traced.then(crate::node::trace::mono_ns);
        let result = self.round_trip(&rec, call);
        let prefix = host_prefix(rec.worker);
        let mut timeline = None;
        let (report, error) = match result {
            Ok((r, t)) => {
                timeline = t;
                let err = (r.status != 0).then(|| format!("{prefix}: {}", r.error));
                (Some(r.report()), err)
            }
            Err(e) => (None, Some(format!("{prefix}: {e}"))),
        };
        let mut st = self.sh.run.lock();
        if let (Some(start_ns), Some(tr)) = (start_ns, st.trace.as_mut()) {
            tr.spans[idx] = Some(TaskSpan {
                worker: rec.worker,
                name: rec.name.clone(),
                tid: crate::node::trace::gettid(),
                start_ns,
                end_ns: crate::node::trace::mono_ns(),
                error: error.clone(),
                timeline,
            });
        }
        st.finished += 1;
        st.in_flight -= 1;
        st.reports[idx] = Some(HostTaskReport {
            worker: rec.worker,
            rank: rec.worker + 1,
            callable: rec.callable,
            report,
            elapsed_s: t0.elapsed().as_secs_f64(),
            error: error.clone(),
        });
        if let Some(e) = &error {
            if st.first_error.is_none() {
                st.first_error = Some(e.clone());
            }
        }
        // The run's waiter (`wait_dispatched`) wants only the end (see the node's).
        if st.over() {
            self.sh.done.notify_all();
        }
        match error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// The orchestration API of an L4 run (rank 0).
pub struct ClusterOrchestrator<'a, 'r> {
    o: &'a mut Orchestrator<'r>,
    sh: &'a Shared,
    programs: &'a RwLock<Vec<ClusterProgram>>,
    /// The dispatch kernel of each lane.
    dispatch: &'a [KernelRef],
}

impl<'r> ClusterOrchestrator<'_, 'r> {
    /// The underlying engine orchestrator (scopes).
    pub fn engine(&mut self) -> &mut Orchestrator<'r> {
        self.o
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.sh.hosts
    }

    /// Submit the L4 task `callable(args)` to host `worker`, whose L3 orchestration
    /// receives `config` whole.
    pub fn submit_next_level(
        &mut self,
        callable: u32,
        args: &[NextLevelArg],
        config: &CallConfig,
        worker: usize,
    ) -> Result<TaskId, RuntimeFailure> {
        let bad =
            |msg: String| RuntimeFailure::invalid_args(None, format!("submit_next_level: {msg}"));
        if worker >= self.sh.hosts {
            return Err(bad(format!(
                "worker {worker} is not a host of this job (it has {})",
                self.sh.hosts
            )));
        }
        config.validate().map_err(|e| bad(e.message))?;
        let prog = self
            .programs
            .read()
            .get(callable as usize)
            .cloned()
            .ok_or_else(|| bad(format!("unknown program handle {callable}")))?;
        let (slots, ta) = task_args(&prog.signature, args, worker).map_err(bad)?;
        let idx = {
            let mut st = self.sh.run.lock();
            let mut config = config.clone();
            // In a traced run every task records its host's timeline (under its own
            // prefix, else the run's), as every chip task does in a traced L3 run.
            if let Some(tr) = st.trace.as_mut() {
                config.enable_chip_swimlane = config.enable_chip_swimlane.max(1);
                if config.output_prefix.is_empty() {
                    config.output_prefix = tr.prefix.clone();
                }
                tr.spans.push(None);
            }
            st.tasks.push(L4Rec {
                worker,
                callable,
                name: prog.name.clone(),
                config,
                slots,
            });
            st.reports.push(None);
            st.tasks.len() - 1
        };
        let mut ta = ta;
        ta.scalar(Scalar::I64(idx as i64));
        let lane = &self.dispatch[worker % self.dispatch.len()];
        let r = self.o.submit(*lane, &ta).map(|r| r.id);
        if r.is_err() {
            let mut st = self.sh.run.lock();
            st.tasks.truncate(idx);
            st.reports.truncate(idx);
            if let Some(tr) = st.trace.as_mut() {
                tr.spans.truncate(idx);
            }
        }
        r
    }
}

/// The engine arguments of one L4 task (tensors in canonical order: inputs, inouts,
/// outputs) and where each program argument is among them.
fn task_args(
    sig: &[ArgDir],
    args: &[NextLevelArg],
    worker: usize,
) -> Result<(Vec<Slot>, TaskArgs), String> {
    check_arity(sig, args)?;
    let at = canonical_index(sig);
    let mut slots = Vec::with_capacity(args.len());
    let mut ta = TaskArgs::new();
    for (i, (d, a)) in sig.iter().zip(args).enumerate() {
        a.check_direction(i, *d)?;
        let (view, resident) = match *a {
            NextLevelArg::Int(v) => {
                slots.push(Slot::Int(v));
                continue;
            }
            NextLevelArg::Float(v) => {
                slots.push(Slot::Float(v));
                continue;
            }
            NextLevelArg::Tensor(t) => (t, None),
            NextLevelArg::Resident { view, id, host } => {
                if host != worker {
                    return Err(format!(
                        "argument {i} is a tensor resident on host {host}; it cannot be passed to host {worker}"
                    ));
                }
                (view, Some(id))
            }
        };
        if !view.is_contiguous() {
            return Err(format!(
                "argument {i} must be C-contiguous to travel to a host"
            ));
        }
        let dir = match d {
            ArgDir::In => L4Dir::In,
            ArgDir::InOut => L4Dir::InOut,
            _ => L4Dir::Out,
        };
        let index = at[i].expect("a tensor argument has an index");
        slots.push(Slot::Tensor(index, dir, resident));
        match d {
            ArgDir::In => ta.input(view),
            ArgDir::InOut => ta.inout(view),
            _ => ta.output_existing(view),
        };
    }
    Ok((slots, ta))
}

/// Rank 0 of an L4 job (after `comm::init`).
pub struct Cluster {
    sh: Arc<Shared>,
    programs: Arc<RwLock<Vec<ClusterProgram>>>,
    engine: Option<ChipWorker>,
    /// One dispatch kernel per lane (leaked boxes, taken back in `close`).
    dispatch: Option<Arc<[KernelRef]>>,
    closed: bool,
}

impl Cluster {
    /// Rank 0 with `hosts` host ranks; `arena_cache_slots` for its own engine's arenas.
    pub fn new(
        hosts: usize,
        programs: Vec<ClusterProgram>,
        arena_cache_slots: usize,
    ) -> Result<Cluster, ClusterError> {
        if hosts == 0 {
            return Err(ClusterError::Mpi(
                "an L4 job needs at least one host rank".into(),
            ));
        }
        let sh = Arc::new(Shared {
            hosts,
            run: Mutex::new(RunState::default()),
            done: Condvar::new(),
            cancel: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            turns: (0..hosts).map(|_| HostTurn::default()).collect(),
            live: (0..hosts).map(|_| HostLive::default()).collect(),
            timeout: host_timeout(),
        });
        let engine = ChipWorker::new(ChipOptions {
            cores: (2 * hosts).min(crate::chip::MAX_CORES),
            // A lane (ready queue) per host, two dispatch threads on each: a host's
            // backlog holds up no thread of another host.
            lanes: hosts,
            aic_cores: Some(0),
            arena_cache_slots,
            shared_heaps: true,
            // An L4 task is a whole L3 dispatch: no L2-sized timeouts (a dead host ends
            // the MPI job).
            backstop: Duration::from_secs(365 * 24 * 3600),
            scheduler_timeout: Duration::from_secs(365 * 24 * 3600),
            ..ChipOptions::default()
        })
        .map_err(ClusterError::Failure)?;
        // The kernels hold the shared state; their boxes are taken back in `close`.
        let dispatch: Arc<[KernelRef]> = (0..engine.lanes())
            .map(|lane| {
                KernelRef::leak(HostDispatch {
                    sh: sh.clone(),
                    lane,
                })
            })
            .collect();
        Ok(Cluster {
            sh,
            programs: Arc::new(RwLock::new(programs)),
            engine: Some(engine),
            dispatch: Some(dispatch),
            closed: false,
        })
    }

    pub fn hosts(&self) -> usize {
        self.sh.hosts
    }

    /// Ask the run in flight to stop waiting (Ctrl-C); it fails with `Interrupted`.
    pub fn cancel(&self) {
        self.sh.cancel.store(true, SeqCst);
        self.sh.done.notify_all();
    }

    /// A handle to cancel a run from another thread.
    pub fn canceller(&self) -> impl Fn() + Send + Sync + 'static {
        let sh = self.sh.clone();
        move || {
            sh.cancel.store(true, SeqCst);
            sh.done.notify_all();
        }
    }

    /// Run `orch` (the L4 orchestration); `config` sizes rank 0's own rings. `hook` is
    /// called around the caller's blocking waits (`true` before, `false` after; at least
    /// every 50 ms while the run waits for its hosts).
    pub fn run(
        &mut self,
        orch: impl Fn(&mut ClusterOrchestrator<'_, '_>) -> Result<(), RuntimeFailure>
            + Send
            + Sync
            + 'static,
        config: &CallConfig,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<ClusterRunReport, ClusterError> {
        let t0 = Instant::now();
        let engine = self.engine.as_mut().ok_or(ClusterError::Closed)?;
        let sh = self.sh.clone();
        sh.cancel.store(false, SeqCst);
        // A traced run's own swimlane is the L4 timeline (written below); rank 0's engine
        // records none of its own.
        let traced = config.enable_chip_swimlane > 0 && !config.output_prefix.is_empty();
        let mut engine_config = config.clone();
        if traced {
            engine_config.enable_chip_swimlane = 0;
        }
        let config = &engine_config;
        *sh.run.lock() = RunState {
            trace: traced.then(|| RunTrace {
                prefix: config.output_prefix.clone(),
                t0_ns: crate::node::trace::mono_ns(),
                spans: vec![],
            }),
            ..RunState::default()
        };
        let programs = self.programs.clone();
        let dispatch = self
            .dispatch
            .clone()
            .expect("an open cluster has its dispatch kernels");
        // safety: the hook lives for this call; the engine runs the program (and so the
        // wait that calls it) on this thread, before `run_with_hook` returns.
        let hook_ref = unsafe { HookRef::erase(hook) };
        let sh2 = sh.clone();
        let program = Program::new("l4", move |o, _| {
            let mut co = ClusterOrchestrator {
                o,
                sh: &sh2,
                programs: &programs,
                dispatch: &dispatch,
            };
            orch(&mut co)?;
            // A lone dispatch runs here, on this thread: no hand-off to a dispatch thread
            // and back (the node does the same, `Node::run`).
            crate::node::help_at_end(co.o.end_helper, hook_ref.get(), || sh2.cancel.load(Acquire));
            // The submits only owed the dispatch threads their wake-up.
            co.o.pay_wakes();
            wait_dispatched(&sh2, hook_ref.get());
            Ok(())
        });
        let r = engine.run_hooked(&program, &[], config, hook);
        let mut st = sh.run.lock();
        if let Some(tr) = st.trace.take() {
            write_timeline(tr);
        }
        if sh.cancel.load(Acquire) {
            return Err(ClusterError::Interrupted(
                st.first_error
                    .take()
                    .unwrap_or_else(|| "interrupted".into()),
            ));
        }
        match r {
            Ok(_) => Ok(ClusterRunReport {
                tasks: st
                    .reports
                    .drain(..)
                    .map(|r| r.expect("every L4 task reported"))
                    .collect(),
                elapsed_s: t0.elapsed().as_secs_f64(),
            }),
            Err(RunError::Config(e)) => Err(ClusterError::Config(e)),
            Err(RunError::Failure(f)) => match st.first_error.take() {
                Some(text) if f.code == StatusCode::TaskFailed => Err(ClusterError::Host(text)),
                _ => Err(ClusterError::Failure(f)),
            },
        }
    }

    /// Tell every host to stop serving and wait for each to acknowledge, then free the
    /// engine (idempotent). A host that does not answer within the host timeout is
    /// lost (the job then ends with `MPI_Abort` when rank 0 finalizes); one that answers
    /// pings but is still busy (a task of an interrupted run) is not waited for longer.
    /// MPI itself is finalized by the embedding (`comm::finalize`).
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let mut buf = [0u8; 64];
        let n = wire::encode_close(&mut buf).expect("the close frame fits");
        let frame: &'static [u8] = Box::leak(buf[..n].to_vec().into_boxed_slice());
        let sh = &self.sh;
        let mut watches: Vec<Watch<'_>> = (0..sh.hosts).map(|h| Watch::new(sh, h)).collect();
        let mut waiting: Vec<usize> = (0..sh.hosts)
            .filter(|&h| sh.live[h].lost().is_none())
            .collect();
        // The close frame is small: it goes out at once, even to a stopped host.
        waiting.retain(|&h| {
            let w = &mut watches[h];
            comm::send_until(h as i32 + 1, TAG_REQUEST, frame, || w.lost())
        });
        let t0 = Instant::now();
        let mut b = comm::Backoff::new(Duration::from_millis(1), comm::Backoff::EXPECTED);
        while !waiting.is_empty() {
            waiting.retain(|&h| {
                sh.live[h].drain(h);
                !sh.live[h].closed.load(Relaxed) && !watches[h].lost()
            });
            if t0.elapsed() >= sh.timeout {
                break;
            }
            b.snooze();
        }
        self.engine = None;
        if let Some(ks) = self.dispatch.take() {
            for k in ks.iter() {
                // safety: `k` was leaked from a box in `new`; the engine that could use
                // it is gone and no run is in flight (`close` takes the cluster).
                drop(unsafe { Box::from_raw(k.0 as *const dyn Kernel as *mut dyn Kernel) });
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.close();
    }
}

/// Write a traced run's L4 timeline (a failed write is a line on stderr, as at L3).
fn write_timeline(tr: RunTrace) {
    let spans: Vec<TaskSpan> = tr.spans.into_iter().flatten().collect();
    let v = trace::merge(tr.t0_ns, std::process::id(), &spans);
    if let Err(e) = trace::write(std::path::Path::new(&tr.prefix), &v) {
        eprintln!(
            "taskring: could not write merged_swimlane.json under {}: {e}",
            tr.prefix
        );
    }
}

/// Wait until every L4 task was answered, or one failed and the others in flight
/// ended, or the run was cancelled. A reply usually comes within a few hundred
/// microseconds: look (yielding) first, then block, calling the hook every 50 ms.
fn wait_dispatched(sh: &Shared, hook: Option<&dyn Fn(bool)>) {
    let over = |st: &RunState| st.over() || sh.cancel.load(Acquire);
    wait_over(&sh.run, &sh.done, over, WAIT_SPIN, hook);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_later_request_waits_for_the_earlier_ones_to_be_answered() {
        let turn = Arc::new(HostTurn::default());
        let cancel = Arc::new(AtomicBool::new(false));
        let order = Arc::new(Mutex::new(Vec::new()));
        let (a, b) = (turn.send(|| ()).0, turn.send(|| ()).0);
        assert_eq!((a, b), (0, 1));
        turn.wait_turn(a, &cancel, &|| false); // nothing before request 0
        let t = {
            let (turn, cancel, order) = (turn.clone(), cancel.clone(), order.clone());
            std::thread::spawn(move || {
                turn.wait_turn(b, &cancel, &|| false);
                order.lock().push("b polls");
            })
        };
        std::thread::sleep(Duration::from_millis(30));
        order.lock().push("a answered");
        turn.done(a);
        t.join().unwrap();
        assert_eq!(*order.lock(), ["a answered", "b polls"]);
    }

    #[test]
    fn a_cancelled_run_does_not_wait_for_its_turn() {
        let turn = HostTurn::default();
        let cancel = AtomicBool::new(true);
        let (_, b) = (turn.send(|| ()), turn.send(|| ()).0);
        let t0 = Instant::now();
        turn.wait_turn(b, &cancel, &|| false);
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
}
