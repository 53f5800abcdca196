//! The chip's per-thread work deques, and what a core asks of a direct replay: a thread
//! keeps the ready tasks it made in a deque of its own ([`DirectLocal`]), which threads
//! out of work steal from ([`Thieves`]); a core runs a direct replay's tasks through
//! [`DirectRun`], the interface a direct job (`replay::job::DirectJob`) implements, so
//! the chip names nothing of the replay. See `chip/core.rs` for how a steal fits the
//! abort handshake.

use crate::engine::shared::{queue_index, queue_kind, queue_takes, EngineShared};
use crate::kernel::{CoreKind, KernelRef};
use crate::sync::AtomicU64;
use crate::tensor::{TaskId, Tensor};
use crossbeam_deque::{Steal, Stealer, Worker};

/// A direct replay as a core runs it: the job the chip publishes while the replay runs
/// (`ChipShared::direct`), implemented by `replay::job::DirectJob`. One call of
/// [`DirectRun::step`] runs a chain of tasks: a core pays one indirect call per chain,
/// not per task.
pub(crate) trait DirectRun: Sync {
    /// Run task `i` on this thread and complete it, then the task it found to run next,
    /// and so on, `budget` tasks at most (`replay::step::direct_step`). Returns the task
    /// to run next here when the budget is spent, else None (out of work, a failure, a
    /// core given up on). `core`: the words of the core running it (None on the
    /// orchestrator's thread); `local`: the thread's deque.
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        eng: &EngineShared,
        thieves: &Thieves,
        i: u32,
        kind: CoreKind,
        core: Option<CoreWords<'_>>,
        local: &mut DirectLocal,
        budget: u32,
    ) -> Option<u32>;

    /// Task `i`'s kernel and tensors at this replay's addresses (cold: what the settle
    /// sets aside of a task whose core was given up on).
    fn task(&self, i: u32) -> (Option<KernelRef>, Vec<Tensor>);
}

/// A ready task in a thread's deque: its index, and the queue index of its core kind
/// above bit 32 (a thief checks the kind without the job, which it may not touch unless
/// it holds a task).
#[inline]
fn pack(i: u32, kind: CoreKind) -> u64 {
    i as u64 | (queue_index(kind) as u64) << 32
}

#[inline]
fn unpack(v: u64) -> (u32, CoreKind) {
    (v as u32, queue_kind((v >> 32) as usize))
}

/// The stealing ends of the deques of a chip's threads: slot 0 the orchestrator's (a
/// replay's caller helps), slot `1 + i` core `i`'s (replaced with the core). Read-locked
/// only by a thread out of work of its own.
pub(crate) struct Thieves(parking_lot::RwLock<Vec<Stealer<u64>>>);

impl Thieves {
    /// `slots` empty deques' stealers (replaced by [`Thieves::set`]).
    pub(crate) fn new(slots: usize) -> Thieves {
        Thieves(parking_lot::RwLock::new(
            (0..slots).map(|_| Worker::new_lifo().stealer()).collect(),
        ))
    }

    /// Slot `slot` steals from `s` from now on.
    pub(crate) fn set(&self, slot: usize, s: Stealer<u64>) {
        let mut v = self.0.write();
        if slot >= v.len() {
            v.resize_with(slot + 1, || Worker::new_lifo().stealer());
        }
        v[slot] = s;
    }

    /// Take one ready task from another thread's deque for a thread of `kind` in slot
    /// `me`; a task of a kind it cannot run goes to the shared ready queues instead.
    pub(crate) fn steal(&self, me: usize, kind: CoreKind, eng: &EngineShared) -> Option<u32> {
        let v = self.0.read();
        let n = v.len();
        loop {
            let mut retry = false;
            // From the next slot on, so thieves do not all start at the same victim.
            for k in 1..n {
                match v[(me + k) % n].steal() {
                    Steal::Success(t) => {
                        let (i, tk) = unpack(t);
                        if can_run(kind, tk) {
                            return Some(i);
                        }
                        eng.push_ready(TaskId(i as u64), tk);
                    }
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                return None;
            }
        }
    }

    /// Does any deque hold a task (a core about to park looks)?
    pub(crate) fn any(&self) -> bool {
        self.0.read().iter().any(|s| !s.is_empty())
    }

    /// Drop every task left in the deques (what a failed replay left, or a core given
    /// up on: it never meets the next replay).
    pub(crate) fn drain(&self) {
        for s in self.0.read().iter() {
            while !matches!(s.steal(), Steal::Empty) {}
        }
    }
}

/// What a core running a direct replay's step shows the other threads (its
/// `chip::core::Core` words): its state word (the abort handshake) and its progress
/// counter (the replay's stall clock).
#[derive(Clone, Copy)]
pub(crate) struct CoreWords<'a> {
    pub(crate) state: &'a AtomicU64,
    pub(crate) progress: &'a std::sync::atomic::AtomicU64,
}

/// A thread's own part of a direct replay: its deque and the sinks it counted.
pub(crate) struct DirectLocal {
    /// Ready tasks it made and kept (LIFO; other threads out of work steal from the
    /// other end through [`Thieves`]). Only tasks this thread can run.
    deque: Worker<u64>,
    /// Its slot in [`Thieves`].
    pub(crate) slot: usize,
    /// Sinks completed here and not yet reported to the job: reported when this thread
    /// runs out of work, not one shared decrement per task (an independent or fan-out
    /// graph is almost all sinks, and every thread decrementing one counter for each
    /// made its cache line travel between the cores).
    pub(crate) sinks: usize,
}

impl DirectLocal {
    /// The part of the thread in slot `slot` of [`Thieves`], and its deque's stealer
    /// (for [`Thieves::set`]).
    pub(crate) fn new(slot: usize) -> (DirectLocal, Stealer<u64>) {
        let deque = Worker::new_lifo();
        let s = deque.stealer();
        (
            DirectLocal {
                deque,
                slot,
                sinks: 0,
            },
            s,
        )
    }

    /// Forget everything (a failed replay: none of it may meet the next one).
    pub(crate) fn clear(&mut self) {
        while self.deque.pop().is_some() {}
        self.sinks = 0;
    }

    /// Is the deque empty?
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.deque.is_empty()
    }

    /// Keep ready task `i` of `kind` (a kind this thread runs).
    #[inline]
    pub(crate) fn push(&mut self, i: u32, kind: CoreKind) {
        self.deque.push(pack(i, kind));
    }

    /// The newest task kept.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<u32> {
        self.deque.pop().map(|t| unpack(t).0)
    }

    /// Hand the kept tasks to the shared ready queues.
    pub(crate) fn hand_back(&mut self, eng: &EngineShared) {
        while let Some(t) = self.deque.pop() {
            let (i, k) = unpack(t);
            eng.push_ready(TaskId(i as u64), k);
        }
    }
}

/// May a core of `core` kind run a task of `task` kind? The ready queues' rule
/// (`queue_takes`) for the kinds' queues.
#[inline]
pub(crate) fn can_run(core: CoreKind, task: CoreKind) -> bool {
    queue_takes(queue_index(core), queue_index(task))
}
