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
//! elsewhere.

use super::model;

use crate::engine::shared::owner_ring::OwnerRing;
use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::*;

/// Values 1..=N pushed by the producer; `taken` collects a bit per value.
const N: u64 = 3;

fn take_some(r: &OwnerRing, taken: &AtomicU32, tries: usize) {
    for _ in 0..tries {
        if let Some(v) = r.pop() {
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
