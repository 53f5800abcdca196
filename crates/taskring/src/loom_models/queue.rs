//! loom model of the orchestrator's own ready ring (`engine::shared::owner_ring`): one
//! producer, two consumers, a ring of two entries (its loom size), so that pushes wrap
//! around, fill it and are refused.
//!
//! Run (release):
//!
//! ```text
//! make test-loom (RUSTFLAGS="--cfg loom" cargo test --release -p taskring --lib loom_models::queue)
//! ```
//!
//! What is checked: every value pushed is taken exactly once, with the value pushed (a
//! consumer that read an entry while the producer overwrote it must lose its claim);
//! a refused push (full ring) is retried, as the ready queue's caller queues it
//! elsewhere. With batched publication (a batch of two): a consumer that takes written
//! but unpublished entries (`pop_written`) beside one that takes published ones only
//! still takes every value once, and after the producer's `publish` a published-only
//! consumer finds every value left.

use super::model;

use crate::engine::shared::owner_ring::OwnerRing;
use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::*;

/// Values 1..=N pushed by the producer; `taken` collects a bit per value.
const N: u64 = 3;

fn take_some(r: &OwnerRing, taken: &AtomicU32, tries: usize) {
    take_with(r, taken, tries, OwnerRing::pop)
}

fn take_with(
    r: &OwnerRing,
    taken: &AtomicU32,
    tries: usize,
    pop: impl Fn(&OwnerRing) -> Option<u64>,
) {
    for _ in 0..tries {
        if let Some(v) = pop(r) {
            assert!((1..=N).contains(&v), "a value never pushed: {v}");
            let bit = 1 << v;
            let before = taken.fetch_or(bit, AcqRel);
            assert_eq!(before & bit, 0, "value {v} taken twice");
        } else {
            thread::yield_now();
        }
    }
}

#[test]
fn every_pushed_value_is_taken_once() {
    model(3, || {
        let r = Arc::new(OwnerRing::default());
        let taken = Arc::new(AtomicU32::new(0));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (r, taken) = (r.clone(), taken.clone());
                thread::spawn(move || take_some(&r, &taken, 2))
            })
            .collect();
        for v in 1..=N {
            // safety: this thread is the only producer.
            while !unsafe { r.push(v) } {
                take_some(&r, &taken, 1);
            }
        }
        for c in consumers {
            c.join().unwrap();
        }
        take_some(&r, &taken, N as usize);
        assert_eq!(taken.load(Acquire), ((1 << (N + 1)) - 1) & !1);
        assert!(r.is_empty());
    });
}

#[test]
fn batched_pushes_are_taken_once() {
    model(3, || {
        let r = Arc::new(OwnerRing::with_batch(2));
        let taken = Arc::new(AtomicU32::new(0));
        let consumers: Vec<_> = [OwnerRing::pop, OwnerRing::pop_written]
            .into_iter()
            .map(|pop| {
                let (r, taken) = (r.clone(), taken.clone());
                thread::spawn(move || take_with(&r, &taken, 2, pop))
            })
            .collect();
        for v in 1..=N {
            // safety: this thread is the only producer.
            while !unsafe { r.push(v) } {
                take_some(&r, &taken, 1);
            }
        }
        // safety: as above.
        unsafe { r.publish() };
        for c in consumers {
            c.join().unwrap();
        }
        take_some(&r, &taken, N as usize);
        assert_eq!(taken.load(Acquire), ((1 << (N + 1)) - 1) & !1);
        assert!(r.is_empty());
    });
}
