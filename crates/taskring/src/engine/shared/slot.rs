//! One slot's synchronisation state ([`SlotState`]), its states and reference bits, the
//! fanin edge flags, and the fanout list node ([`DepNode`]).
//!
//! A slot's spin lock guards its state transitions, the claims on its task and its
//! fanout list; the completion protocol built on it is argued in `completion.rs`.
//!
//! Readiness: `fanin_count` = WAIT edges + 1; the `+1` is released by the orchestrator
//! after wiring ([`SlotState::begin_wiring`], then [`SlotState::publish`]), so a task
//! cannot become ready while it is still being linked. Whoever's `fetch_add` brings
//! `fanin_refcount` to `fanin_count` pushes the task — exactly once.

use crate::sync::Ordering::*;
#[cfg(loom)]
use crate::sync::UnsafeCell;
use crate::sync::{spin_loop, yield_now, AtomicU32, AtomicU64};

pub const PENDING: u32 = 0;
pub const COMPLETED: u32 = 1;
pub const CONSUMED: u32 = 2;
/// The owning scope's reference in `fanout_count` / `fanout_refcount`.
pub const SCOPE_BIT: u32 = 1 << 31;

/// Fanin edge flags, stored in the top bits of a recorded producer id.
pub const DEP_WAIT: u64 = 1 << 62;
pub const DEP_RETAIN: u64 = 1 << 63;
pub(crate) const DEP_FLAGS: u64 = DEP_WAIT | DEP_RETAIN;

/// One slot's synchronisation state: one cache line; all-zero is a valid (PENDING) value.
#[repr(C, align(64))]
#[derive(Default)]
pub struct SlotState {
    /// Spin lock guarding state transitions, claims and the fanout list.
    lock: AtomicU32,
    pub state: AtomicU32,
    pub fanout_count: AtomicU32,
    pub fanout_refcount: AtomicU32,
    pub fanin_count: AtomicU32,
    pub fanin_refcount: AtomicU32,
    /// Local id of the task occupying this slot (generation check for claims).
    pub local: AtomicU32,
    /// Fanout list head: `(ring << 32) | (index + 1)` into that ring's node pool; 0 = empty.
    pub fanout_head: AtomicU64,
    /// loom only: a cell touched inside every critical section of `lock` and by
    /// `prepare`, so that loom reports any two of them not ordered by happens-before
    /// (a broken spin lock, or a re-prepare racing a late lock holder).
    #[cfg(loom)]
    witness: UnsafeCell<u32>,
}

// safety: atomics only.
#[cfg(not(loom))]
unsafe impl crate::mem::ZeroValid for SlotState {}

#[cfg(loom)]
impl crate::sync::Fresh for SlotState {
    fn fresh() -> SlotState {
        SlotState::default()
    }
}

/// Failed lock attempts before the spin lock yields its time slice (under loom every
/// failed attempt is a scheduling point).
const LOCK_SPINS: u32 = if cfg!(loom) { 0 } else { 64 };

impl SlotState {
    #[inline]
    pub fn lock(&self) {
        let mut spins = 0u32;
        while self
            .lock
            .compare_exchange_weak(0, 1, Acquire, Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < LOCK_SPINS {
                spin_loop();
            } else {
                yield_now();
            }
        }
        self.touch_witness();
    }

    #[cfg(loom)]
    fn touch_witness(&self) {
        // safety: loom-checked cell; the value is irrelevant.
        self.witness
            .with_mut(|w| unsafe { *w = w.read().wrapping_add(1) });
    }
    #[cfg(not(loom))]
    #[inline(always)]
    fn touch_witness(&self) {}
    #[inline]
    pub(crate) fn unlock(&self) {
        self.lock.store(0, Release);
    }

    /// Prepare the slot for local id `local` (orchestrator; the slot is retired).
    ///
    /// No lock: every critical section of the slot's previous task happened before its
    /// consumption (a releaser holds a reference until its release, which checks for
    /// CONSUMED in the same critical section: [`ArenaShared::release_ref`](super::ArenaShared::release_ref);
    /// a completion holds its own), and the consumption before the watermark passed the
    /// slot, which the orchestrator acquired before reusing it. The stores reach the
    /// cores with the task's publication.
    #[inline]
    pub fn prepare(&self, local: u32) {
        self.touch_witness();
        self.state.store(PENDING, Relaxed);
        self.fanout_count.store(SCOPE_BIT, Relaxed);
        self.fanout_refcount.store(0, Relaxed);
        self.fanin_count.store(0, Relaxed);
        self.fanin_refcount.store(0, Relaxed);
        self.fanout_head.store(0, Relaxed);
        self.local.store(local, Relaxed);
    }

    /// Mark an inline-completed task (an `alloc()`) COMPLETED (orchestrator, before
    /// the task is visible to any core).
    #[inline]
    pub fn mark_completed(&self) {
        self.lock();
        self.state.store(COMPLETED, Release);
        self.unlock();
    }

    /// Start wiring this (prepared, unpublished) task with `waits` WAIT edges:
    /// `fanin_count = waits + 1`, the `+1` being held until [`SlotState::publish`].
    #[inline]
    pub fn begin_wiring(&self, waits: u32) {
        self.fanin_count.store(waits + 1, Release);
    }

    /// End of wiring: release the `+1` together with the `done` WAIT edges whose
    /// producers had completed by the time they were linked. Returns true if the task
    /// is ready now (the caller pushes it); otherwise the last producer completion will.
    #[inline]
    pub fn publish(&self, done: u32) -> bool {
        let need = self.fanin_count.load(Relaxed);
        let prev = self.fanin_refcount.fetch_add(done + 1, AcqRel);
        prev + done + 1 == need
    }

    /// [`SlotState::publish`] for a task wired with no WAIT edge: no producer links it,
    /// so nothing else ever touches its `fanin_refcount` and the task is ready at once.
    /// A plain store instead of a locked add (the ready-queue push that follows carries
    /// the release of the payload to the core that pops it).
    #[inline]
    pub(crate) fn publish_unwaited(&self) -> bool {
        debug_assert_eq!(self.fanin_count.load(Relaxed), 1);
        self.fanin_refcount.store(1, Relaxed);
        true
    }

    /// Has the owning scope released its reference?
    #[inline]
    pub(crate) fn scope_released(&self) -> bool {
        self.fanout_refcount.load(Acquire) & SCOPE_BIT != 0
    }

    /// Under the lock: COMPLETED and every reference released -> CONSUMED.
    #[inline]
    pub(super) fn try_consume_locked(&self) -> bool {
        if self.state.load(Relaxed) == COMPLETED
            && self.fanout_refcount.load(Acquire) == self.fanout_count.load(Relaxed)
        {
            self.state.store(CONSUMED, Release);
            true
        } else {
            false
        }
    }
}

/// A fanout list node: `consumer` task id and the next node (same encoding as heads).
#[derive(Clone, Copy)]
pub struct DepNode {
    pub consumer: u64,
    pub next: u64,
}
// safety: plain integers.
unsafe impl crate::mem::ZeroValid for DepNode {}
