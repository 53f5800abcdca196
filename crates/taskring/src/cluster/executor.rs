//! Rank 0's link to its hosts: the executor of the L4 engine, whose tasks are whole L3
//! dispatches on hosts.
//!
//! Each host has a lane (a ready queue of its own) in the engine, served by two dispatch
//! threads: a host's backlog holds up no other host's tasks, and while a host serves one
//! request its next one is already sent. A ready L4 task runs on one of its host's
//! dispatch threads ([`Hosts`], the executor):
//! it encodes the task (its whole `CallConfig`), sends it to the host's rank with tag
//! `TAG_REQUEST`, sends its inputs' bytes straight from the caller's arrays with the
//! task's data tag, then waits (matched probe, backoff) for the reply with that tag and
//! receives the outputs' bytes straight into the caller's arrays. Each dispatch's tag
//! is its sequence number modulo [`transport::DATA_TAGS`]; the reply carries the sequence
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

use super::timeline::{self, TaskSpan};
use super::transport::{self, FIRST_DATA_TAG, TAG_REQUEST};
use super::wire::{self, L4Arg, L4Dir, L4Reply, L4Task, L4Tensor};
use super::{host_prefix, ClusterProgram, HostTaskReport};
use crate::dfx::clock::{gettid, mono_ns};
use crate::kernel::KernelCall;
use crate::nextlevel::args::Slot;
use crate::nextlevel::hook::poll_inline_hook;
use crate::nextlevel::{ArgDir, Dispatched, Executor, NextLevelArg, Rec, RunTrace};
use crate::tensor::Tensor;
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
    backoff: 1,
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
pub(super) struct HostLive {
    /// Why the host is lost, once it is (its tasks fail with this).
    lost: std::sync::OnceLock<String>,
    /// When a pong last came ([`now_ns`]; 0: never).
    heard: AtomicU64,
    /// When the last ping went out (0: never).
    pinged: AtomicU64,
    /// One thread at a time reads the host's liveness messages and pings it.
    busy: Mutex<()>,
    /// The host acknowledged the close frame.
    pub(super) closed: AtomicBool,
}

impl HostLive {
    pub(super) fn lost(&self) -> Option<&String> {
        self.lost.get()
    }

    /// The host is lost for `why`; not responding (`dead`) also means the job cannot
    /// finalize.
    fn set_lost(&self, worker: usize, why: String, dead: bool) {
        if self.lost.set(why.clone()).is_ok() && dead {
            transport::forbid_finalize(format!("{}: {why}", host_prefix(worker)));
        }
    }

    /// Take the host's liveness messages off the queue: pongs, a leaving notice, the
    /// close acknowledgement.
    pub(super) fn drain(&self, worker: usize) {
        while let Some(m) = transport::try_receive(worker as i32 + 1, transport::TAG_LIVE) {
            match m.first() {
                Some(&transport::LIVE_PONG) => self.heard.store(now_ns(), Relaxed),
                Some(&transport::LIVE_CLOSED) => self.closed.store(true, Relaxed),
                Some(&transport::LIVE_LEAVING) => {
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
            transport::send_detached(
                worker as i32 + 1,
                transport::TAG_LIVE,
                &[transport::LIVE_PING],
            );
            self.pinged.store(now, Relaxed);
        }
        false
    }
}

/// One wait (or several in a row) on a host: its start, and the check of the host's
/// liveness between polls.
pub(super) struct Watch<'a> {
    live: &'a HostLive,
    worker: usize,
    timeout: Duration,
    polls: u32,
    since: u64,
}

impl<'a> Watch<'a> {
    pub(super) fn new(hosts: &'a Hosts, worker: usize) -> Self {
        Watch {
            live: &hosts.live[worker],
            worker,
            timeout: hosts.timeout,
            polls: 0,
            since: 0,
        }
    }

    /// Should the wait end because the host is lost? The first polls of a wait (a
    /// reply on its way) only look at the flag.
    pub(super) fn lost(&mut self) -> bool {
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
            poll_inline_hook();
        }
    }

    /// Request `n`'s thread is done waiting (answered, failed or interrupted).
    fn done(&self, n: u64) {
        let mut a = self.answered.lock();
        *a = (*a).max(n + 1);
        self.turn.notify_all();
    }
}

/// Rank 0's hosts as the executor of its engine.
pub(crate) struct Hosts {
    pub(super) hosts: usize,
    pub(super) cancel: AtomicBool,
    /// The next request's sequence number.
    seq: AtomicU64,
    /// Per host, the order of its requests (see [`HostTurn`]).
    turns: Vec<HostTurn>,
    /// Per host, its liveness.
    pub(super) live: Vec<HostLive>,
    /// See [`host_timeout`].
    pub(super) timeout: Duration,
    pub(super) programs: Arc<RwLock<Vec<ClusterProgram>>>,
}

impl Hosts {
    pub(super) fn new(hosts: usize, programs: Vec<ClusterProgram>) -> Hosts {
        Hosts {
            hosts,
            cancel: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            turns: (0..hosts).map(|_| HostTurn::default()).collect(),
            live: (0..hosts).map(|_| HostLive::default()).collect(),
            timeout: host_timeout(),
            programs: Arc::new(RwLock::new(programs)),
        }
    }
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

impl Hosts {
    /// The task frame and the tensors whose bytes go out and come back.
    fn frame(
        &self,
        rec: Rec,
        name: String,
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
                Slot::Tensor {
                    index,
                    dir,
                    resident,
                } => {
                    let t = call.tensors[index];
                    let dir = match dir {
                        ArgDir::In => L4Dir::In,
                        ArgDir::InOut => L4Dir::InOut,
                        _ => L4Dir::Out,
                    };
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
            name,
            config: rec.config,
            args,
        };
        (task, sent, back)
    }

    /// Should a wait give up (the run was cancelled)? On the run's own thread (a lone
    /// dispatch run inline, `help_at_end`) this also lets the run's hook see a Ctrl-C
    /// every 20 ms.
    fn given_up(&self) -> bool {
        poll_inline_hook();
        self.cancel.load(Relaxed)
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
            let (msg, status) = transport::wait_message(
                rank,
                Some(tag),
                REPLY_MAX_SLEEP,
                transport::Backoff::EXPECTED,
                || self.given_up() || watch.lost(),
            )
            .ok_or_else(|| self.why_given_up(watch))?;
            let buf = transport::receive_vec(msg, &status);
            let reply = wire::decode_reply(&buf).map_err(|e| format!("malformed reply: {e}"))?;
            if reply.seq == seq {
                return Ok(reply);
            }
            for _ in 0..reply.n_outputs {
                if let Some((m, s)) = transport::wait_message(
                    rank,
                    Some(tag),
                    REPLY_MAX_SLEEP,
                    transport::Backoff::EXPECTED,
                    || self.given_up() || watch.lost(),
                ) {
                    drop(transport::receive_vec(m, &s));
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
    /// the host's timeline when its config records one (`worker::ships_timeline`).
    fn round_trip(
        &self,
        rec: Rec,
        name: String,
        call: &KernelCall<'_>,
    ) -> Result<(L4Reply, Option<Vec<u8>>), String> {
        let worker = rec.worker;
        let mut watch = Watch::new(self, worker);
        if let Some(why) = watch.live.lost() {
            return Err(why.clone());
        }
        let seq = self.seq.fetch_add(1, Relaxed);
        let tag = FIRST_DATA_TAG + (seq % transport::DATA_TAGS) as i32;
        let rank = worker as i32 + 1;
        let ships_timeline = super::worker::ships_timeline(&rec.config);
        let (task, sent, back) = self.frame(rec, name, seq, tag, call);
        let mut buf = vec![0u8; wire::task_len(&task)];
        let n = wire::encode_task(&task, &mut buf)
            .map_err(|e| format!("cannot encode the task: {e}"))?;
        let turn = &self.turns[worker];
        // The sends give up only on a lost host (never on Ctrl-C: MPI would go on
        // reading the caller's arrays); the frame's buffer is then left to MPI.
        let (k, sent_frame) =
            turn.send(|| transport::send_until(rank, TAG_REQUEST, &buf[..n], || watch.lost()));
        if !sent_frame {
            std::mem::forget(buf);
        }
        let reply = if sent_frame
            && sent.iter().all(|t| {
                // safety: a shipped tensor is a contiguous view (checked at submit)
                // of memory the caller keeps alive for the run; this task reads it,
                // so the engine runs no writer of it until the task ends.
                let bytes = unsafe { bytes_of(t) };
                transport::send_data_until(rank, tag, bytes, &mut || watch.lost())
            }) {
            turn.wait_turn(k, &self.cancel, &|| watch.live.lost().is_some());
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
                transport::receive_data(rank, tag, unsafe { bytes_of_mut(t) }, &mut || {
                    self.given_up() || watch.lost()
                })
                .map_err(|e| match watch.live.lost() {
                    Some(why) => why.clone(),
                    None => e,
                })?;
            }
            if ships_timeline {
                let (m, st) = transport::wait_message(
                    rank,
                    Some(tag),
                    REPLY_MAX_SLEEP,
                    transport::Backoff::EXPECTED,
                    || self.given_up() || watch.lost(),
                )
                .ok_or_else(|| self.why_given_up(&watch))?;
                timeline = Some(transport::receive_vec(m, &st));
            }
        } else {
            // A host that stops serving says so before this reply: its later tasks fail
            // at once.
            watch.live.drain(worker);
        }
        Ok((reply, timeline))
    }
}

impl Executor for Hosts {
    type Traced = TaskSpan;
    type Fault = String;
    type Report = HostTaskReport;

    const KERNEL: &'static str = "host-dispatch";
    const PROGRAM: &'static str = "l4";
    const WORKER_OF: &'static str = "a host of this job";
    const HANDLE: &'static str = "program";
    const WAIT_SPIN: crate::chip::spin::SpinThenPark = WAIT_SPIN;
    const INLINE_WHEN_TRACED: bool = true;

    fn workers(&self) -> usize {
        self.hosts
    }

    fn cancel_flag(&self) -> &AtomicBool {
        &self.cancel
    }

    fn signature(&self, callable: u32) -> Option<Vec<ArgDir>> {
        let p = self.programs.read();
        p.get(callable as usize).map(|p| p.signature.clone())
    }

    fn tensor_arg(
        &self,
        i: usize,
        arg: &NextLevelArg,
        worker: usize,
    ) -> Result<(Tensor, Option<u64>), String> {
        host_tensor(i, arg, worker)
    }

    /// The round trip, then the task's report (and in a traced run its span, with the
    /// host's own timeline).
    fn dispatch(
        &self,
        rec: Rec,
        call: &KernelCall<'_>,
        traced_from: Option<u64>,
    ) -> Dispatched<Self> {
        let t0 = Instant::now();
        let (worker, callable) = (rec.worker, rec.callable);
        let name = self
            .programs
            .read()
            .get(callable as usize)
            .map_or_else(String::new, |p| p.name.clone());
        let span_name = traced_from.map(|_| name.clone());
        let result = self.round_trip(rec, name, call);
        let prefix = host_prefix(worker);
        let mut timeline = None;
        let (report, error) = match result {
            Ok((r, t)) => {
                timeline = t;
                let err = (r.status != 0).then(|| format!("{prefix}: {}", r.error));
                (Some(r.report()), err)
            }
            Err(e) => (None, Some(format!("{prefix}: {e}"))),
        };
        let traced = traced_from.map(|start_ns| TaskSpan {
            worker,
            name: span_name.unwrap_or_default(),
            tid: gettid(),
            start_ns,
            end_ns: mono_ns(),
            error: error.clone(),
            timeline,
        });
        Dispatched {
            report: HostTaskReport {
                worker,
                rank: worker + 1,
                callable,
                report,
                elapsed_s: t0.elapsed().as_secs_f64(),
                error: error.clone(),
            },
            fault: error,
            traced,
        }
    }

    /// Write a traced run's L4 timeline (a failed write is a line on stderr, as at L3).
    fn write_timeline(&self, tr: RunTrace<TaskSpan>, _tasks: &[Rec]) {
        let spans: Vec<TaskSpan> = tr.tasks.into_iter().filter_map(|t| t.dispatch).collect();
        let v = timeline::merge(tr.t0_ns, std::process::id(), &spans);
        if let Err(e) = timeline::write(std::path::Path::new(&tr.prefix), &v) {
            eprintln!(
                "taskring: could not write merged_swimlane.json under {}: {e}",
                tr.prefix
            );
        }
    }
}

/// The rule for tensor argument `i` of an L4 task for host `worker`: a C-contiguous
/// array (its bytes travel), or a tensor resident on that very host.
fn host_tensor(
    i: usize,
    arg: &NextLevelArg,
    worker: usize,
) -> Result<(Tensor, Option<u64>), String> {
    let (view, resident) = match *arg {
        NextLevelArg::Resident { view, id, host } => {
            if host != worker {
                return Err(format!(
                    "argument {i} is a tensor resident on host {host}; it cannot be passed to host {worker}"
                ));
            }
            (view, Some(id))
        }
        NextLevelArg::Tensor(t) => (t, None),
        NextLevelArg::Int(_) | NextLevelArg::Float(_) => {
            return Err(format!("argument {i} must be a tensor"))
        }
    };
    if !view.is_contiguous() {
        return Err(format!(
            "argument {i} must be C-contiguous to travel to a host"
        ));
    }
    Ok((view, resident))
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
