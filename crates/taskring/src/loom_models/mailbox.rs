//! loom model of the mailbox's wake-up elision (`node::mailbox::publish` and
//! `wait_until_flagged`): a side that publishes a new sequence number calls
//! `futex_wake` only when the other side announced that it may sleep on the word.
//!
//! Run (release):
//!
//! ```text
//! make test-loom (RUSTFLAGS="--cfg loom" cargo test --release -p taskring --lib loom_models::mailbox)
//! ```
//!
//! What is replicated: the mailbox lives in memory shared between processes and uses
//! `std` atomics and the `futex` syscall, which loom cannot see, so the two functions'
//! atomic steps are written out here in the same order with the same orderings (store
//! release, SeqCst fence, relaxed load of the count; count up relaxed, SeqCst fence,
//! acquire load, count down), and the futex is emulated faithfully to its contract: a
//! wait sleeps only if the word still holds the value it was given (read under the
//! futex's lock), a wake wakes every sleeper queued under that lock, neither wakes
//! spuriously and no wait has a timeout — so a lost wake-up is a deadlock, which loom
//! reports. What is checked: (1) every wait ends (no lost wake-up) when the publisher
//! skips its wake-up whenever it saw no sleeper; (2) a request/reply round trip in both
//! directions, each side waiting on the other's word; (3) the count returns to zero.
//! Breaking it (either fence removed) makes loom report the deadlock.

use super::model;

use loom::sync::atomic::{fence, AtomicU32};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::sync::atomic::Ordering::*;

/// A futex word with its wait queue (see the module doc).
#[derive(Default)]
struct Futex {
    word: AtomicU32,
    sleeping: AtomicU32,
    lock: Mutex<()>,
    queue: Condvar,
}

impl Futex {
    /// `FUTEX_WAIT`: sleep only if the word still holds `seen`.
    fn futex_wait(&self, seen: u32) {
        let g = self.lock.lock().unwrap();
        if self.word.load(SeqCst) != seen {
            return;
        }
        drop(self.queue.wait(g).unwrap());
    }

    /// `FUTEX_WAKE` of every sleeper.
    fn futex_wake(&self) {
        let _g = self.lock.lock().unwrap();
        self.queue.notify_all();
    }

    /// `mailbox::publish`.
    fn publish(&self, value: u32) {
        self.word.store(value, Release);
        fence(SeqCst);
        if self.sleeping.load(Relaxed) != 0 {
            self.futex_wake();
        }
    }

    /// `mailbox::wait_until_flagged` past its spin phase, for `word == want`.
    fn wait_for(&self, want: u32) {
        loop {
            self.sleeping.fetch_add(1, Relaxed);
            fence(SeqCst);
            let seen = self.word.load(Acquire);
            let done = seen == want;
            if !done {
                self.futex_wait(seen);
            }
            self.sleeping.fetch_sub(1, Relaxed);
            if done {
                return;
            }
        }
    }
}

#[test]
fn a_skipped_wake_up_is_never_a_lost_one() {
    model(3, || {
        let f = Arc::new(Futex::default());
        let p = f.clone();
        let t = thread::spawn(move || p.publish(1));
        f.wait_for(1);
        t.join().unwrap();
        assert_eq!(f.sleeping.load(Relaxed), 0);
    });
}

#[test]
fn request_and_reply_round_trip() {
    model(2, || {
        let req = Arc::new(Futex::default());
        let resp = Arc::new(Futex::default());
        let (rq, rs) = (req.clone(), resp.clone());
        // The chip: wait for request 1, reply 1, wait for request 2, reply 2.
        let chip = thread::spawn(move || {
            for n in 1..=2 {
                rq.wait_for(n);
                rs.publish(n);
            }
        });
        for n in 1..=2 {
            req.publish(n);
            resp.wait_for(n);
        }
        chip.join().unwrap();
        assert_eq!(req.sleeping.load(Relaxed) + resp.sleeping.load(Relaxed), 0);
    });
}
