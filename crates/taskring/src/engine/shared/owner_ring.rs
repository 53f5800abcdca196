//! The orchestrator's own ready ring ([`OwnerRing`]): one producer, any number of
//! consumers, bounded. A ready queue (`ready.rs`) takes the orchestrator's pushes here
//! and every other push in its shared queue.
//!
//! The producer writes entry `tail`, then publishes `tail + 1` (Release); a consumer
//! reads `head`, then `tail` (Acquire: the entries below it are written), the entry at
//! `head`, and claims it by moving `head` on (compare-exchange). The producer reuses an
//! entry only after it has seen `head` pass it, so a consumer that read an entry being
//! overwritten has lost its compare-exchange (`head` moved on, and it never moves back)
//! and retries; the entries are atomics for that one racy read. A push is two plain
//! stores and no locked instruction; a full ring refuses the push (the caller queues the
//! task elsewhere).

use crate::sync::AtomicU64;
use crate::sync::Ordering::*;
use crossbeam_utils::CachePadded;

/// Entries of a ring (a power of two). Under loom two, so that the models wrap around
/// and fill it.
pub(crate) const OWNER_RING: usize = if cfg!(loom) { 2 } else { 1024 };

/// See the module doc.
pub(crate) struct OwnerRing {
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
    /// The producer's last look at `head` (only the producer touches it).
    head_seen: CachePadded<AtomicU64>,
    entries: Box<[AtomicU64]>,
}

impl Default for OwnerRing {
    fn default() -> Self {
        OwnerRing {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            head_seen: CachePadded::new(AtomicU64::new(0)),
            entries: (0..OWNER_RING).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl OwnerRing {
    /// Push `v`; false if the ring is full.
    ///
    /// # Safety
    /// One producer: pushes of different threads must be ordered by happens-before.
    #[inline]
    pub(crate) unsafe fn push(&self, v: u64) -> bool {
        let t = self.tail.load(Relaxed);
        if t - self.head_seen.load(Relaxed) >= OWNER_RING as u64 {
            let h = self.head.load(Acquire);
            self.head_seen.store(h, Relaxed);
            if t - h >= OWNER_RING as u64 {
                return false;
            }
        }
        self.entries[t as usize & (OWNER_RING - 1)].store(v, Relaxed);
        self.tail.store(t + 1, Release);
        true
    }

    /// Take the oldest entry, if any.
    #[inline]
    pub(crate) fn pop(&self) -> Option<u64> {
        let mut h = self.head.load(Acquire);
        loop {
            if h >= self.tail.load(Acquire) {
                return None;
            }
            let v = self.entries[h as usize & (OWNER_RING - 1)].load(Relaxed);
            match self.head.compare_exchange_weak(h, h + 1, AcqRel, Acquire) {
                Ok(_) => return Some(v),
                Err(now) => h = now,
            }
        }
    }

    /// No entry to take (a hint unless the caller is the producer: then an entry it
    /// pushed is never reported gone before it was taken).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Acquire) >= self.tail.load(Acquire)
    }

    /// Entries to take (a hint).
    #[cfg_attr(loom, allow(dead_code))] // the loom build's ready queues are mutexed deques
    #[inline]
    pub(crate) fn len(&self) -> usize {
        let t = self.tail.load(Acquire);
        t.saturating_sub(self.head.load(Acquire)) as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn fills_refuses_then_takes_in_order() {
        let r = OwnerRing::default();
        for v in 0..OWNER_RING as u64 {
            // safety: this thread is the only producer.
            assert!(unsafe { r.push(v) });
        }
        // safety: as above.
        assert!(!unsafe { r.push(99) }, "a full ring refuses");
        assert_eq!(r.len(), OWNER_RING);
        assert_eq!(r.pop(), Some(0));
        // safety: as above.
        let reused = unsafe { r.push(OWNER_RING as u64) };
        assert!(reused, "a taken entry is reused");
        for v in 1..=OWNER_RING as u64 {
            assert_eq!(r.pop(), Some(v));
        }
        assert!(r.is_empty());
        assert_eq!(r.pop(), None);
    }

    /// One producer, three consumers, many wrap-arounds: every value is taken exactly
    /// once (a refused push is retried, as a full ring's caller queues elsewhere).
    #[test]
    fn every_value_is_taken_once_under_contention() {
        const N: u64 = 200_000;
        let r = Arc::new(OwnerRing::default());
        let done = Arc::new(AtomicBool::new(false));
        let takers: Vec<_> = (0..3)
            .map(|_| {
                let (r, done) = (r.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    loop {
                        match r.pop() {
                            Some(v) => got.push(v),
                            None if done.load(std::sync::atomic::Ordering::Acquire) => {
                                match r.pop() {
                                    Some(v) => got.push(v),
                                    None => return got,
                                }
                            }
                            None => std::hint::spin_loop(),
                        }
                    }
                })
            })
            .collect();
        for v in 0..N {
            // safety: this thread is the only producer.
            while !unsafe { r.push(v) } {
                std::hint::spin_loop();
            }
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        let mut all: Vec<u64> = takers
            .into_iter()
            .flat_map(|t| t.join().expect("taker"))
            .collect();
        all.sort_unstable();
        assert_eq!(all.len() as u64, N);
        assert!(all.iter().enumerate().all(|(i, &v)| v == i as u64));
    }
}
