//! The orchestrator's own ready ring ([`OwnerRing`]): one producer, any number of
//! consumers, bounded. A ready queue (`ready.rs`) takes the orchestrator's pushes here
//! and every other push in its shared queue.
//!
//! The producer writes entry `written`, then counts it (`written + 1`, Release); every
//! `batch` entries, and when asked ([`OwnerRing::publish`]), it publishes its count
//! (`tail`, Release). A consumer reads `head`, then a bound (Acquire: the entries below
//! it are written) — `tail` normally ([`OwnerRing::pop`]), `written` when it gives up
//! waiting for a publication ([`OwnerRing::pop_written`]) — the entry at `head`, and
//! claims it by moving `head` on (compare-exchange). The producer reuses an entry only
//! after it has seen `head` pass it, so a consumer that read an entry being overwritten
//! has lost its compare-exchange (`head` moved on, and it never moves back) and
//! retries; the entries are atomics for that one racy read. A push is two or three
//! plain stores and no locked instruction; a full ring refuses the push (the caller
//! queues the task elsewhere).
//!
//! Why publish in batches: a core that takes each task the moment it is pushed works
//! on the cache lines the orchestrator is writing (the slot, the ready entry, the
//! producer's state that the next submit reads), and both threads wait for each other's
//! lines on every task. A batch is taken while the orchestrator writes the next one.
//! On 2 vCPUs B3's patterns run in 0.73× (fan-out) to 0.91× (wavefront) the time they
//! take when every push is published (`docs/performance.md`).

use crate::sync::AtomicU64;
use crate::sync::Ordering::*;
use crossbeam_utils::CachePadded;

/// Entries of a ring (a power of two). Under loom two, so that the models wrap around
/// and fill it.
pub(crate) const OWNER_RING: usize = if cfg!(loom) { 2 } else { 1024 };

/// See the module doc.
pub(crate) struct OwnerRing {
    head: CachePadded<AtomicU64>,
    /// Entries published: consumers take below it.
    tail: CachePadded<AtomicU64>,
    /// The producer's own line: what it wrote, and its last look at `head`.
    mine: CachePadded<Mine>,
    entries: Box<[AtomicU64]>,
}

struct Mine {
    /// Entries written (`tail` lags it by less than `batch`); consumers read it only
    /// in [`OwnerRing::pop_written`].
    written: AtomicU64,
    /// The producer's last look at `head`.
    head_seen: AtomicU64,
    /// Pushes per publication, a power of two (1: every push publishes).
    batch_mask: u64,
}

impl Default for OwnerRing {
    /// A ring that publishes every push.
    fn default() -> Self {
        OwnerRing::with_batch(1)
    }
}

impl OwnerRing {
    /// A ring that publishes every `batch` pushes (rounded up to a power of two, at
    /// most the ring's size) and on [`OwnerRing::publish`].
    pub(crate) fn with_batch(batch: usize) -> OwnerRing {
        let batch = batch.clamp(1, OWNER_RING).next_power_of_two() as u64;
        OwnerRing {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            mine: CachePadded::new(Mine {
                written: AtomicU64::new(0),
                head_seen: AtomicU64::new(0),
                batch_mask: batch - 1,
            }),
            entries: (0..OWNER_RING).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Push `v`; false if the ring is full.
    ///
    /// # Safety
    /// One producer: pushes of different threads must be ordered by happens-before.
    #[inline]
    pub(crate) unsafe fn push(&self, v: u64) -> bool {
        let m = &*self.mine;
        let t = m.written.load(Relaxed);
        if t - m.head_seen.load(Relaxed) >= OWNER_RING as u64 {
            let h = self.head.load(Acquire);
            m.head_seen.store(h, Relaxed);
            if t - h >= OWNER_RING as u64 {
                return false;
            }
        }
        self.entries[t as usize & (OWNER_RING - 1)].store(v, Relaxed);
        m.written.store(t + 1, Release);
        if (t + 1) & m.batch_mask == 0 {
            self.tail.store(t + 1, Release);
        }
        true
    }

    /// Publish every entry written. Returns whether any was unpublished.
    ///
    /// # Safety
    /// Called by the producer (ordered by happens-before with its pushes).
    #[inline]
    pub(crate) unsafe fn publish(&self) -> bool {
        let w = self.mine.written.load(Relaxed);
        if self.tail.load(Relaxed) == w {
            return false;
        }
        self.tail.store(w, Release);
        true
    }

    /// Take the oldest published entry, if any.
    #[inline]
    pub(crate) fn pop(&self) -> Option<u64> {
        self.pop_below(&self.tail)
    }

    /// Take the oldest entry written, published or not (a consumer that waited long
    /// enough for a publication).
    #[inline]
    pub(crate) fn pop_written(&self) -> Option<u64> {
        self.pop_below(&self.mine.written)
    }

    #[inline]
    fn pop_below(&self, bound: &AtomicU64) -> Option<u64> {
        let mut h = self.head.load(Acquire);
        loop {
            if h >= bound.load(Acquire) {
                return None;
            }
            let v = self.entries[h as usize & (OWNER_RING - 1)].load(Relaxed);
            match self.head.compare_exchange_weak(h, h + 1, AcqRel, Acquire) {
                Ok(_) => return Some(v),
                Err(now) => h = now,
            }
        }
    }

    /// No published entry to take (a hint unless the caller is the producer: then an
    /// entry it published is never reported gone before it was taken).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Acquire) >= self.tail.load(Acquire)
    }

    /// Published entries to take (a hint).
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

    #[test]
    fn a_batch_is_published_whole_or_on_demand() {
        let r = OwnerRing::with_batch(4);
        for v in 0..3 {
            // safety: this thread is the only producer.
            assert!(unsafe { r.push(v) });
        }
        assert!(r.is_empty(), "three of a batch of four are not published");
        assert_eq!(r.pop(), None);
        assert_eq!(r.pop_written(), Some(0), "but they are written");
        // safety: as above.
        assert!(unsafe { r.push(3) });
        assert_eq!(r.len(), 3, "the fourth push publishes the batch");
        assert_eq!(r.pop(), Some(1));
        // safety: as above.
        assert!(unsafe { r.push(4) });
        assert_eq!((r.pop(), r.pop()), (Some(2), Some(3)));
        assert_eq!(r.pop(), None);
        // safety: as above.
        assert!(unsafe { r.publish() }, "an unpublished entry was there");
        assert_eq!(r.pop(), Some(4));
        // safety: as above.
        assert!(!unsafe { r.publish() }, "nothing left to publish");
        assert!(r.is_empty());
    }

    /// One producer, three consumers, many wrap-arounds: every value is taken exactly
    /// once (a refused push is retried, as a full ring's caller queues elsewhere).
    #[test]
    fn every_value_is_taken_once_under_contention() {
        const N: u64 = 200_000;
        let r = Arc::new(OwnerRing::with_batch(8));
        let done = Arc::new(AtomicBool::new(false));
        let takers: Vec<_> = (0..3)
            .map(|k| {
                let (r, done) = (r.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    // One taker takes unpublished entries too.
                    let pop = if k == 0 {
                        OwnerRing::pop_written
                    } else {
                        OwnerRing::pop
                    };
                    loop {
                        match pop(&r) {
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
        // safety: as above.
        unsafe { r.publish() };
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
