//! Parking: idle cores ([`Sleep`]) and the orchestrator waiting for space
//! ([`Progress`]). Both use one protocol — the sleeper announces itself, fences, then
//! re-checks its condition under the mutex before waiting; the waker makes the condition
//! true, fences, and notifies under the same mutex if it sees a sleeper — so a wake-up
//! cannot be lost (the argument is on [`Sleep`]); every wait also has a timeout.

use crate::sync::Ordering::*;
use crate::sync::{fence, AtomicBool, AtomicUsize, Condvar, Mutex};
use std::time::Duration;

/// Parking for idle cores. A waker that pushed work checks `sleepers` after a SeqCst
/// fence; a sleeper registers, fences, re-checks for work under the mutex, then waits.
/// Either the waker sees the sleeper, or the sleeper sees the work.
///
/// Spinners: an idle core may first spin for a while (at most one at a time), counted in
/// `spinning`. A push skips the wake-up while a core spins: the spinner re-checks the
/// queues after it stops spinning (stop, fence, then pop or register as a sleeper and
/// re-check), so the pushed task is seen either way; a spinner that found work wakes a
/// sleeper if more work is queued.
#[derive(Default)]
pub struct Sleep {
    sleepers: AtomicUsize,
    spinning: AtomicUsize,
    /// Queue index (core kind) of the spinning core: pushes it cannot take still wake.
    spinner_kind: AtomicUsize,
    m: Mutex<()>,
    cv: Condvar,
}

impl Sleep {
    /// Cores idle at this moment (parked or spinning; a hint: it may change at once).
    #[inline]
    pub(crate) fn idle(&self) -> usize {
        self.sleepers.load(Relaxed) + self.spinning.load(Relaxed)
    }

    /// Become the (one) spinning core, of queue index `kind`; false if another core
    /// already spins.
    #[inline]
    pub(crate) fn try_spin(&self, kind: usize) -> bool {
        if self
            .spinning
            .compare_exchange(0, 1, SeqCst, Relaxed)
            .is_ok()
        {
            self.spinner_kind.store(kind, SeqCst);
            true
        } else {
            false
        }
    }

    /// Stop spinning (before looking at the queues one last time).
    #[inline]
    pub(crate) fn end_spin(&self) {
        self.spinning.fetch_sub(1, SeqCst);
        fence(SeqCst);
    }

    /// Wake for a task of queue index `kind` (see the type doc).
    #[inline]
    pub(crate) fn wake_for(&self, kind: usize) {
        fence(SeqCst);
        if self.spinning.load(Relaxed) > 0 {
            let sk = self.spinner_kind.load(Relaxed);
            if sk == 2 || kind == 2 || sk == kind {
                return;
            }
        }
        self.wake_sleepers();
    }

    /// Wake every parked core (whatever it waits for).
    #[inline]
    pub fn wake(&self) {
        fence(SeqCst);
        self.wake_sleepers();
    }

    #[inline]
    fn wake_sleepers(&self) {
        if self.sleepers.load(Relaxed) > 0 {
            let _g = self.m.lock();
            // All: sleepers are of different core kinds, and one woken for work it
            // cannot take would leave the right one asleep until its park timeout.
            self.cv.notify_all();
        }
    }
    pub fn park(&self, has_work: impl Fn() -> bool, timeout: Duration) {
        self.sleepers.fetch_add(1, SeqCst);
        fence(SeqCst);
        let mut g = self.m.lock();
        if !has_work() {
            self.cv.wait_for(&mut g, timeout);
        }
        drop(g);
        self.sleepers.fetch_sub(1, SeqCst);
    }
}

/// The orchestrator's "something moved" signal (same protocol as [`Sleep`]).
#[derive(Default)]
pub struct Progress {
    waiting: AtomicBool,
    m: Mutex<()>,
    cv: Condvar,
}

impl Progress {
    #[inline]
    pub fn notify(&self) {
        fence(SeqCst);
        if self.waiting.load(Relaxed) {
            let _g = self.m.lock();
            self.cv.notify_all();
        }
    }
    /// Wait until `done()` or `timeout`. Returns `done()`'s last value.
    pub fn wait(&self, done: impl Fn() -> bool, timeout: Duration) -> bool {
        if done() {
            return true;
        }
        self.waiting.store(true, SeqCst);
        fence(SeqCst);
        let mut g = self.m.lock();
        let mut ok = done();
        if !ok {
            self.cv.wait_for(&mut g, timeout);
            ok = done();
        }
        drop(g);
        self.waiting.store(false, SeqCst);
        ok
    }
}
