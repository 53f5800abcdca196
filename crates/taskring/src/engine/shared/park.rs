//! Parking: idle cores ([`Sleep`]) and the orchestrator waiting for space
//! ([`Progress`]). Both use one protocol — the sleeper announces itself, fences, then
//! re-checks its condition under the mutex before waiting; the waker makes the condition
//! true, fences, and notifies under the same mutex if it sees a sleeper — so a wake-up
//! cannot be lost (the argument is on [`Sleep`]); every wait also has a timeout.

use crate::sync::Ordering::*;
use crate::sync::{fence, AtomicUsize, Condvar, Mutex};
use crossbeam_utils::CachePadded;
use std::time::Duration;

/// The queue indices whose bits `mask` has, lowest first.
#[inline]
pub(crate) fn queues_of(mask: u64) -> impl Iterator<Item = usize> {
    let mut m = mask;
    std::iter::from_fn(move || {
        (m != 0).then(|| {
            let q = m.trailing_zeros() as usize;
            m &= m - 1;
            q
        })
    })
}

/// Parking for idle cores. A waker that pushed work checks the sleepers after a SeqCst
/// fence; a sleeper registers, fences, re-checks for work under the mutex, then waits.
/// Either the waker sees the sleeper, or the sleeper sees the work. (An orchestrator's
/// submit owes its wake-up instead of making it: a later look without a fence,
/// [`Sleep::parked_for`], decides whether to pay it now through this protocol, and a
/// wait for space or the end of the program always pays it so.)
///
/// One wake-up per push: sleepers wait on the condition variable of their queue index
/// (core kind), and a push wakes one sleeper that can run its task — of its own kind
/// first, then of kind `Any` (a task of `Any` wakes any kind). A core woken from its
/// park that finds a task passes the wake-up on if more work is queued
/// (`Sleep::pass_on`), so a batch pushed with one wake-up still reaches as many cores
/// as it has tasks. (Waking every sleeper per push cost a host's L3 node four futex
/// wake-ups and a fight for this mutex per dispatch on a 2-core machine.)
///
/// Spinners: an idle core may first spin for a while (at most one at a time), counted in
/// `spinning`. A push skips the wake-up while a core spins: the spinner re-checks the
/// queues after it stops spinning (stop, fence, then pop or register as a sleeper and
/// re-check), so the pushed task is seen either way; a spinner that found work wakes a
/// sleeper if more work is queued.
pub struct Sleep {
    /// Parked cores, by queue index of their kind (then one per lane: see
    /// [`EngineShared::with_lanes`](super::EngineShared::with_lanes)).
    sleepers: Box<[AtomicUsize]>,
    /// The spinning core (written as cores start and stop spinning, read by every
    /// wake-up): a cache line of its own, away from the read-mostly fields.
    spin: CachePadded<Spin>,
    /// How many cores may be awake while the orchestrator submits ([`Share`]).
    share: CachePadded<Share>,
    m: Mutex<()>,
    /// One per queue index of the sleepers' kind (or lane).
    cv: Box<[Condvar]>,
}

/// The CPUs the cores share with a submitting orchestrator: a submit's look at its owed
/// wake-ups ([`Sleep::parked_for`]) wakes a core only while fewer than `awake_cap` cores
/// are awake (`cores` minus the parked ones). Unbounded until [`Sleep::set_share`].
struct Share {
    /// Core threads per kind (queue indices 0..3: AIC, AIV, Any).
    cores: [AtomicUsize; LANE0],
    awake_cap: AtomicUsize,
}

impl Default for Share {
    fn default() -> Self {
        Share {
            cores: [0; LANE0].map(AtomicUsize::new),
            awake_cap: AtomicUsize::new(usize::MAX),
        }
    }
}

/// The spinning idle core, if any ([`Sleep`]).
#[derive(Default)]
struct Spin {
    /// Cores spinning (0 or 1).
    spinning: AtomicUsize,
    /// Queue index (core kind) of the spinning core: pushes it cannot take still wake.
    kind: AtomicUsize,
}

impl Sleep {
    /// Parking for cores of `queues` queue indices (3 kinds, then the lanes).
    pub(crate) fn new(queues: usize) -> Sleep {
        Sleep {
            sleepers: (0..queues).map(|_| AtomicUsize::new(0)).collect(),
            spin: CachePadded::new(Spin::default()),
            share: CachePadded::new(Share::default()),
            m: Mutex::new(()),
            cv: (0..queues).map(|_| Condvar::new()).collect(),
        }
    }
}

/// Can a core of queue index `sk` take a task of queue index `q`? A lane's task only a
/// core of that lane; a kind's task a core of its kind, or of kind `Any` (index 2), and
/// a task of kind `Any` every kind's core.
#[inline]
pub(crate) fn queue_takes(sk: usize, q: usize) -> bool {
    if q >= LANE0 || sk >= LANE0 {
        sk == q
    } else {
        sk == 2 || q == 2 || sk == q
    }
}

/// The first lane's queue index (0..3 are the core kinds).
pub(crate) const LANE0: usize = 3;

/// Kinds of cores (queue indices) that can run a task of queue index `q`, in the order
/// a wake-up picks a sleeper: a core of the task's own kind first (an `Any` core can
/// run everything; keep it free for what only it can run).
#[inline]
fn runners(q: usize) -> &'static [usize] {
    match q {
        0 => &[0, 2],
        1 => &[1, 2],
        _ => &[2, 0, 1],
    }
}

impl Sleep {
    /// Cores idle at this moment (parked or spinning; a hint: it may change at once).
    #[inline]
    pub(crate) fn idle(&self) -> usize {
        self.sleepers.iter().map(|s| s.load(Relaxed)).sum::<usize>()
            + self.spin.spinning.load(Relaxed)
    }

    /// Become the (one) spinning core, of queue index `kind`; false if another core
    /// already spins.
    #[inline]
    pub(crate) fn try_spin(&self, kind: usize) -> bool {
        if self
            .spin
            .spinning
            .compare_exchange(0, 1, SeqCst, Relaxed)
            .is_ok()
        {
            self.spin.kind.store(kind, SeqCst);
            true
        } else {
            false
        }
    }

    /// Stop spinning (before looking at the queues one last time).
    #[inline]
    pub(crate) fn end_spin(&self) {
        self.spin.spinning.fetch_sub(1, SeqCst);
        fence(SeqCst);
    }

    /// Core threads of each kind (`cores[k]`: queue index `k`) share `cpus` CPUs with
    /// the orchestrator: a submit's wake-ups keep at most `cpus - 1` cores (at least 1)
    /// awake — unless no awake core can run the task.
    pub(crate) fn set_share(&self, cores: [usize; LANE0], cpus: usize) {
        for (c, n) in self.share.cores.iter().zip(cores) {
            c.store(n, Relaxed);
        }
        self.share
            .awake_cap
            .store(cpus.saturating_sub(1).max(1), Relaxed);
    }

    /// May a submit wake a core for a task of queue index `q` ([`Share`])? Yes while
    /// fewer than the cap are awake, and when no awake core can run the task (an AIV
    /// task while only an AIC core is awake). Plain loads: a core parking or waking at
    /// this moment may be miscounted, which costs a wake-up too many or a late one (the
    /// debt is kept, and paid with a fence when the orchestrator stops submitting).
    #[inline]
    fn room_to_wake(&self, q: usize) -> bool {
        if q >= LANE0 {
            return true;
        }
        let awake = |k: usize| {
            self.share.cores[k]
                .load(Relaxed)
                .saturating_sub(self.sleepers[k].load(Relaxed))
        };
        (0..LANE0).map(awake).sum::<usize>() < self.share.awake_cap.load(Relaxed)
            || !runners(q).iter().any(|&k| awake(k) > 0)
    }

    /// Wake for a task of queue index `kind` (see the type doc).
    #[inline]
    pub(crate) fn wake_for(&self, kind: usize) {
        fence(SeqCst);
        if self.spinner_takes(kind) {
            return;
        }
        self.wake_one(kind);
    }

    /// [`Sleep::wake_for`] for the queues of `mask` (bit `q`: queue index `q`) that
    /// `queued(q)` says still hold a task: the caller pushed to them earlier, and a
    /// queue empty since then was taken from — nobody to wake for it, and no fence
    /// either (the common case while a core spins). A stale look cannot say "empty"
    /// wrongly: the caller's own push is in what it reads.
    #[inline]
    pub(crate) fn wake_for_mask(&self, mask: u64, queued: impl Fn(usize) -> bool) {
        let mut fenced = false;
        for q in queues_of(mask) {
            if !queued(q) {
                continue;
            }
            if !fenced {
                fence(SeqCst);
                fenced = true;
            }
            if !self.spinner_takes(q) && self.any_runner_parked(q) {
                self.wake_one(q);
            }
        }
    }

    /// Is a core spinning that can take a task of queue index `q`?
    #[inline]
    fn spinner_takes(&self, q: usize) -> bool {
        self.spin.spinning.load(Relaxed) > 0 && queue_takes(self.spin.kind.load(Relaxed), q)
    }

    /// Is a core parked that can run a task of one of the queues of `mask` (bit `q`:
    /// queue index `q`)? Plain loads, no fence: a hint.
    #[inline]
    pub(crate) fn parked_for(&self, mask: u64) -> bool {
        queues_of(mask).any(|q| self.any_runner_parked(q) && self.room_to_wake(q))
    }

    /// Is a core parked that can run a task of queue index `q`?
    #[inline]
    fn any_runner_parked(&self, q: usize) -> bool {
        if q >= LANE0 {
            return self.sleepers[q].load(Relaxed) > 0;
        }
        runners(q)
            .iter()
            .any(|&k| self.sleepers[k].load(Relaxed) > 0)
    }

    /// After a wake-up found its task: wake one more core for each queue of `nonempty`
    /// (queue indices with tasks left; see the type doc).
    #[inline]
    pub(crate) fn pass_on(&self, nonempty: impl Fn(usize) -> bool) {
        for q in 0..self.cv.len() {
            if nonempty(q) {
                self.wake_for(q);
            }
        }
    }

    /// Wake every parked core (whatever it waits for).
    #[inline]
    pub fn wake(&self) {
        fence(SeqCst);
        if self.sleepers.iter().any(|s| s.load(Relaxed) > 0) {
            let _g = self.m.lock();
            for cv in &self.cv {
                cv.notify_all();
            }
        }
    }

    #[inline]
    fn wake_one(&self, q: usize) {
        if q >= LANE0 {
            // A lane's task: only a core of that lane runs it.
            if self.sleepers[q].load(Relaxed) > 0 {
                let _g = self.m.lock();
                self.cv[q].notify_one();
            }
            return;
        }
        for &k in runners(q) {
            if self.sleepers[k].load(Relaxed) > 0 {
                let _g = self.m.lock();
                self.cv[k].notify_one();
                return;
            }
        }
    }

    /// Park a core of queue index `kind` until woken (or `timeout`) unless `has_work()`.
    pub fn park(&self, kind: usize, has_work: impl Fn() -> bool, timeout: Duration) {
        self.sleepers[kind].fetch_add(1, SeqCst);
        fence(SeqCst);
        let mut g = self.m.lock();
        if !has_work() {
            self.cv[kind].wait_for(&mut g, timeout);
        }
        drop(g);
        self.sleepers[kind].fetch_sub(1, SeqCst);
    }
}

/// The orchestrator's "something moved" signal (same protocol as [`Sleep`]).
///
/// Two kinds of waiter: [`Progress::wait`] wants every retirement (a submit waiting for
/// ring space), [`Progress::wait_end`] only a ring's last one (the end of a run waits
/// for everything to retire: waking it for each of thousands of retirements cost the
/// cores a futex wake and a fight for this mutex per task). A retirement notifies with
/// [`Progress::notify_advance`], which wakes an end-waiter only when its ring has
/// retired everything; anything else (a failure, a direct replay's last task) notifies
/// every waiter.
#[derive(Default)]
pub struct Progress {
    /// [`NOBODY`], [`ANY_MOVE`] or [`RING_END`].
    waiting: AtomicUsize,
    m: Mutex<()>,
    cv: Condvar,
}

const NOBODY: usize = 0;
/// A waiter for any retirement.
const ANY_MOVE: usize = 1;
/// A waiter for the end of a ring's retirements.
const RING_END: usize = 2;
/// A waiter for a task's completion or its consumers' releases (the orchestration
/// reading or writing tensor data).
const TASK_DONE: usize = 3;

impl Progress {
    /// Is the orchestrator waiting (or about to wait) for a retirement? A plain load: a
    /// waiter that arrives after it is seen at the caller's next look.
    #[inline]
    pub fn has_waiter(&self) -> bool {
        self.waiting.load(Relaxed) != NOBODY
    }

    /// Wake the waiter, whatever it waits for.
    #[inline]
    pub fn notify(&self) {
        fence(SeqCst);
        if self.waiting.load(Relaxed) != NOBODY {
            let _g = self.m.lock();
            self.cv.notify_all();
        }
    }

    /// A ring's watermark moved: wake a waiter for any move, or an end-waiter if
    /// `ring_done()` (the ring retired every task it holds).
    #[inline]
    pub fn notify_advance(&self, ring_done: impl FnOnce() -> bool) {
        fence(SeqCst);
        let w = self.waiting.load(Relaxed);
        if w == ANY_MOVE || w == TASK_DONE || (w == RING_END && ring_done()) {
            let _g = self.m.lock();
            self.cv.notify_all();
        }
    }

    /// Wait until `done()` or `timeout`, woken by any retirement. Returns `done()`'s
    /// last value.
    pub fn wait(&self, done: impl Fn() -> bool, timeout: Duration) -> bool {
        self.wait_as(ANY_MOVE, done, timeout)
    }

    /// Wait until `done()` or `timeout`, woken by any completion
    /// ([`Progress::notify_completion`]) as well as any retirement.
    pub fn wait_completion(&self, done: impl Fn() -> bool, timeout: Duration) -> bool {
        self.wait_as(TASK_DONE, done, timeout)
    }

    /// A task completed (and released what it retained): wake a waiter for completions.
    /// On every completion, so no fence: a waiter that arrives as this looks may sleep
    /// until its timeout (it looks again then).
    #[inline]
    pub fn notify_completion(&self) {
        if self.waiting.load(Relaxed) == TASK_DONE {
            let _g = self.m.lock();
            self.cv.notify_all();
        }
    }

    /// Wait until `done()` or `timeout`, woken only when a ring retired everything (or
    /// by [`Progress::notify`]). `done()` must turn true only at such a moment (e.g.
    /// "every ring retired everything") or through something that calls `notify`.
    pub fn wait_end(&self, done: impl Fn() -> bool, timeout: Duration) -> bool {
        self.wait_as(RING_END, done, timeout)
    }

    fn wait_as(&self, kind: usize, done: impl Fn() -> bool, timeout: Duration) -> bool {
        if done() {
            return true;
        }
        self.waiting.store(kind, SeqCst);
        fence(SeqCst);
        let mut g = self.m.lock();
        let mut ok = done();
        if !ok {
            self.cv.wait_for(&mut g, timeout);
            ok = done();
        }
        drop(g);
        self.waiting.store(NOBODY, SeqCst);
        ok
    }
}
