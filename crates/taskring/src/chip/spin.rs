//! The spin phase of every wait in `chip` and `node`: look at the condition a bounded
//! number of times, pausing between looks, before parking. A wake-up costs microseconds
//! (a futex or condition variable round trip), so a wait that is usually over within
//! microseconds spins first; a yield lets the thread it waits for run on a small
//! machine. What "park" means is each waiter's own (a futex word, a condition variable,
//! the engine's progress signal, a sleep), and so is what it checks between parks.
//!
//! Each waiter names its [`SpinThenPark`] beside its code: the core's idle protocol
//! (`core::Idle::SPIN`, `core::Idle::DISPATCH_SPIN`), the run's wait for retirement
//! (`run::RETIRE_SPIN`), a direct replay's wait (`run::DIRECT_SPIN`), the settle's wait
//! for idle cores (`core::IDLE_CORES_SPIN`), the mailbox's and the node's waits
//! (`node::mailbox::MAILBOX_SPIN`).

/// A spin phase: `checks` looks at a condition, and between two looks a pause — spin
/// hints for the first `spin_checks` pauses, yields after them, and yields on every
/// `yield_every`-th pause (0: never). Pause `n` is `min(n, backoff)` hints or yields: a
/// waiter that has looked long looks less often.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpinThenPark {
    /// Looks at the condition before the waiter parks.
    pub checks: u32,
    /// Pauses that are spin hints before the waiter starts yielding (`u32::MAX`: all).
    pub spin_checks: u32,
    /// Yield on every this many pauses (0: only after `spin_checks`).
    pub yield_every: u32,
    /// Most spin hints (or yields) in one pause (1: one per pause). A core waiting for
    /// work backs off: every look at the ready queues reads lines the orchestrator
    /// writes with each push, and a look per hint made every push wait for those lines;
    /// and where threads outnumber CPUs its yields give the thread it waits for
    /// several turns.
    pub backoff: u32,
}

impl SpinThenPark {
    /// Pause number `n` (counted from 1) of the spin phase.
    #[inline]
    pub(crate) fn pause(&self, n: u32) {
        let times = n.clamp(1, self.backoff.max(1));
        if n > self.spin_checks || (self.yield_every != 0 && n.is_multiple_of(self.yield_every)) {
            (0..times).for_each(|_| std::thread::yield_now());
        } else {
            (0..times).for_each(|_| std::hint::spin_loop());
        }
    }

    /// The spin phase: true as soon as `ready()` holds, false after `checks` looks
    /// without it (the waiter parks then).
    #[inline]
    pub(crate) fn spin(&self, mut ready: impl FnMut() -> bool) -> bool {
        for n in 1..=self.checks {
            if ready() {
                return true;
            }
            self.pause(n);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_looks_checks_times_then_gives_up() {
        let p = SpinThenPark {
            checks: 10,
            spin_checks: 4,
            yield_every: 3,
            backoff: 1,
        };
        let mut looks = 0;
        assert!(!p.spin(|| {
            looks += 1;
            false
        }));
        assert_eq!(looks, 10);
        let mut looks = 0;
        assert!(p.spin(|| {
            looks += 1;
            looks == 3
        }));
        assert_eq!(looks, 3);
    }
}
