//! The host's side of one chip: its mailbox round trip (request, reply, late replies of
//! given-up requests), the watch of its life (death by `waitpid`, heartbeat, stop), the
//! host pipe whose end tells a chip process that its host is gone, and shutdown.

use super::mailbox::{self, futex_wake, Mailbox, STATE_SHUTDOWN};
use super::trace;
use super::wire::{self, ReplyFrame, TaskFrame};
use super::worker::STUCK_KERNEL_EXIT;
use super::ChipFault;
use crate::nextlevel::hook::poll_inline_hook;
use parking_lot::Mutex;
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
/// A gap this long between two looks at a chip's heartbeat is no evidence of a stall
/// (the host was idle, or was itself stopped): the watch starts over.
const WATCH_GAP: Duration = Duration::from_millis(250);
/// While the node is closing, a chip whose heartbeat stood still this long is given up.
const CLOSE_STALL: Duration = Duration::from_millis(100);
/// How long `close` lets chips exit before it SIGKILLs them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// One chip endpoint (host side).
pub(super) struct Chip {
    pub(super) worker: usize,
    /// A host worker's name in failures (`sub_worker 0`); None for a chip.
    pub(super) label: Option<String>,
    pub(super) pid: i32,
    /// A child process (heartbeat, host pipe), or a thread of this process.
    pub(super) process: bool,
    pub(super) mailbox: Arc<Mailbox>,
    /// Request number; held for a whole round trip (one task in flight per chip).
    /// `resp_seq != *seq` means a request was given up on and its reply is still due.
    pub(super) seq: Mutex<u32>,
    /// Why the chip is gone (dead or closed), once known.
    pub(super) dead: Mutex<Option<String>>,
    /// Bytes of device-resident tensors the chip was told it holds (`chip_hold`).
    pub(super) held: std::sync::atomic::AtomicU64,
    /// When `check_dead` last found the chip alive (`trace::mono_ns`; 0: never): the
    /// dispatch path asks again only after [`ALIVE_RECHECK`] (see `dead_before_post`).
    pub(super) alive_at: std::sync::atomic::AtomicU64,
    pub(super) thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Write end of the chip's host pipe (-1 when closed or for a chip thread).
    pub(super) pipe: AtomicI32,
    pub(super) beat: Mutex<Beat>,
}

/// The host's watch of a chip's heartbeat.
pub(super) struct Beat {
    pub(super) value: u32,
    pub(super) since: Instant,
    pub(super) looked: Instant,
    /// Seen stopped (state T) during the current stall.
    pub(super) stopped: bool,
}

/// What waits on chips consult: the run's cancel flag, close, the chip timeout.
pub(super) struct Ctl {
    pub(super) cancel: AtomicBool,
    pub(super) closing: AtomicBool,
    pub(super) timeout: Duration,
}

impl Chip {
    pub(super) fn prefix(&self) -> String {
        match &self.label {
            Some(l) => format!("{l} (pid {})", self.pid),
            None => format!("chip {} (pid {})", self.worker, self.pid),
        }
    }

    /// A failure of this chip, saying `text` (a host worker's names it by its label).
    pub(super) fn fault(&self, text: impl Into<String>) -> ChipFault {
        let text = text.into();
        match &self.label {
            Some(_) => ChipFault {
                worker: self.worker,
                pid: self.pid,
                text: format!("{}: {text}", self.prefix()),
                whole: true,
            },
            None => ChipFault {
                worker: self.worker,
                pid: self.pid,
                text,
                whole: false,
            },
        }
    }

    /// A host worker's own failure text, whole (its entry's words).
    pub(super) fn own_fault(&self, text: String) -> ChipFault {
        match &self.label {
            Some(_) => ChipFault {
                worker: self.worker,
                pid: self.pid,
                text,
                whole: true,
            },
            None => self.fault(text),
        }
    }

    /// What the process is called in why it died.
    fn noun(&self) -> &'static str {
        if self.label.is_some() {
            "the process"
        } else {
            "the chip process"
        }
    }

    pub(super) fn interrupted(&self) -> ChipFault {
        self.fault("interrupted")
    }

    /// Has the chip died? Records why.
    pub(super) fn check_dead(&self) -> Option<ChipFault> {
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
    pub(super) fn dead_before_post(&self) -> Option<ChipFault> {
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
    pub(super) fn why_dead(&self) -> Option<String> {
        if self.process {
            let mut status = 0;
            // safety: non-blocking reap of our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                let why = if libc::WIFSIGNALED(status) {
                    format!(
                        "{} was killed by signal {}",
                        self.noun(),
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
                        "{} exited with status {}",
                        self.noun(),
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
    pub(super) fn stalled_for(&self) -> Duration {
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
    pub(super) fn give_up(&self, ctl: &Ctl) -> Option<ChipFault> {
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
    pub(super) fn wait(
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
    pub(super) fn turn(&self, ctl: &Ctl) -> Result<parking_lot::MutexGuard<'_, u32>, ChipFault> {
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
    pub(super) fn await_reply(&self, ctl: &Ctl, want: u32) -> Result<(), ChipFault> {
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
    pub(super) fn call<T>(
        &self,
        ctl: &Ctl,
        task: &TaskFrame,
        stamp: bool,
        after: impl FnOnce(u64) -> T,
    ) -> Result<(ReplyFrame, T), ChipFault> {
        self.round_trip_then(ctl, |buf| wire::encode_task(task, buf), stamp, after)
    }

    /// One round trip with the request `encode` writes.
    pub(super) fn round_trip(
        &self,
        ctl: &Ctl,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, wire::FrameError>,
    ) -> Result<ReplyFrame, ChipFault> {
        self.round_trip_then(ctl, encode, false, |_| ())
            .map(|(r, ())| r)
    }

    /// One round trip, then `after(posted_ns)` (when the request was posted, on
    /// `CLOCK_MONOTONIC`, if `stamp`; else 0) with the chip's turn still held.
    pub(super) fn round_trip_then<T>(
        &self,
        ctl: &Ctl,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, wire::FrameError>,
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
        let r = wire::decode_reply(buf).map_err(|e| self.fault(format!("bad reply frame: {e}")))?;
        Ok((r, after(posted)))
    }

    /// The Perfetto pid of this chip on the L3 timeline: its own pid, or (a chip
    /// thread, which shares the host's) a number no process can have (pids are below
    /// 2^22 on Linux).
    pub(super) fn lane_pid(&self) -> u64 {
        if self.process {
            self.pid as u64
        } else {
            (1 << 30) + self.worker as u64
        }
    }

    /// Wait up to `budget` for the late reply of a request given up on earlier. True
    /// when none is due any more, or the chip is dead or not responding (its next
    /// request then fails with that).
    pub(super) fn settle(&self, ctl: &Ctl, budget: Duration) -> bool {
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
    pub(super) fn close_pipe(&self) {
        let fd = self.pipe.swap(-1, AcqRel);
        if fd >= 0 {
            host_pipes::unregister(fd);
            // safety: our own fd, closed once (swapped out above).
            unsafe { libc::close(fd) };
        }
    }
}

/// The state letter of process `pid` (`/proc/<pid>/stat`), e.g. 'T' when stopped.
pub(super) fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s[s.rfind(')')? + 1..].trim_start().chars().next()
}

/// Process-wide registry of the write ends of chips' host pipes. The host must be the
/// only holder of each (a chip reads EOF when the host dies), so every child of
/// `fork()` — chips of this and other nodes, and a user's `os.fork()` — closes all of
/// them first thing, in an atfork handler (fd numbers in a fixed array of atomics: the
/// handler takes no lock and allocates nothing).
pub(super) mod host_pipes {
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

/// Ask every chip to exit and reap it; chips that do not answer are killed (a stopped
/// chip at once, any other after [`SHUTDOWN_GRACE`]).
pub(super) fn shutdown_chips(chips: &[Chip]) {
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
