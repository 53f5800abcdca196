//! One ring's shared tables and counters ([`RingShared`]) and the retirement
//! watermark over them.
//!
//! Retirement: a thread that turns a slot CONSUMED advances the ring's watermark
//! (`last_alive`) over the consumed prefix with [`RingShared::advance`] — combining, so
//! nobody waits on a lock and no request is lost (argued at the function) — and wakes the
//! orchestrator if it is waiting for space. A slot is only reused after the watermark
//! passed it, and the orchestrator resets it ([`RingShared::prepare`], without the slot's
//! lock: nothing touches a consumed task's slot, see [`SlotState::prepare`]) before
//! publishing the new id.

use super::slot::{SlotState, CONSUMED};
use crate::engine::Payload;
use crate::mem::ReserveError;
use crate::sync::Ordering::*;
use crate::sync::{AtomicBool, AtomicU32, Table, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;

pub type PayloadCell = UnsafeCell<MaybeUninit<Payload>>;

/// One ring's shared tables and counters. See the module doc of [`super`].
pub struct RingShared {
    #[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
    pub window: u64,
    pub mask: u32,
    pub slots: Table<SlotState>,
    pub payloads: Table<PayloadCell>,
    pub dep_nodes: Table<UnsafeCell<super::DepNode>>,
    pub spill: Table<UnsafeCell<u64>>,
    /// Next local id (published by the orchestrator after preparing the slot).
    pub current: CachePadded<AtomicU32>,
    /// Every local id below this has retired.
    pub last_alive: CachePadded<AtomicU32>,
    /// Watermark advance, combining style (see [`RingShared::advance`]): the flag of
    /// the one thread advancing, and the requests it has yet to serve.
    advancing: CachePadded<AtomicBool>,
    advance_req: CachePadded<AtomicU32>,
}

// safety: the UnsafeCell tables are written only by the orchestrator before publication
// and read by core threads after acquiring the publication (see the module doc).
unsafe impl Sync for RingShared {}
// safety: the struct owns its tables and counters outright (no thread-bound state, no
// borrowed data), so whichever thread holds it last may drop it.
unsafe impl Send for RingShared {}

impl RingShared {
    pub fn new(window: u64, dep_pool: u64) -> Result<RingShared, ReserveError> {
        // `slot`, `payload` and `payload_mut` index by `local & mask` unchecked: the
        // tables have `window` entries and `mask = window - 1` (sizes are validated
        // powers of two).
        assert!(
            window.is_power_of_two(),
            "task window {window} is not a power of two"
        );
        Ok(RingShared {
            window,
            mask: (window - 1) as u32,
            slots: Table::new_huge(window as usize)?,
            payloads: Table::new_huge(window as usize)?,
            dep_nodes: Table::new(dep_pool as usize)?,
            spill: Table::new(dep_pool as usize)?,
            current: CachePadded::new(AtomicU32::new(0)),
            last_alive: CachePadded::new(AtomicU32::new(0)),
            advancing: CachePadded::new(AtomicBool::new(false)),
            advance_req: CachePadded::new(AtomicU32::new(0)),
        })
    }

    #[inline]
    pub fn slot(&self, local: u32) -> &SlotState {
        // safety: `local & mask < window`, the table's length (`RingShared::new`).
        unsafe { self.slots.get_unchecked((local & self.mask) as usize) }
    }

    /// Hint that local id `local` will be submitted soon: prefetch, for writing, its
    /// slot's state line and the payload's first lines (header, inline fanin, the first
    /// tensors). A hint only: the slot may still hold a live task.
    #[inline(always)]
    pub(crate) fn prefetch_slot(&self, local: u32) {
        let i = (local & self.mask) as usize;
        crate::mem::prefetch_write(&self.slots[i] as *const SlotState as *const u8, 1);
        crate::mem::prefetch_write(&self.payloads[i] as *const PayloadCell as *const u8, 7);
    }

    /// # Safety
    /// The caller must hold publication of `local` (see the module doc) and no `&mut`.
    #[inline]
    pub unsafe fn payload(&self, local: u32) -> &Payload {
        // safety: in bounds as in `slot`; the publication is the caller's contract.
        unsafe {
            self.payloads
                .get_unchecked((local & self.mask) as usize)
                .with(|p| (*p).assume_init_ref())
        }
    }

    /// # Safety
    /// Only the orchestrator, for a slot it prepared and has not yet published.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn payload_mut(&self, local: u32) -> &mut MaybeUninit<Payload> {
        // safety: in bounds as in `slot`; exclusive use is the caller's contract.
        unsafe {
            self.payloads
                .get_unchecked((local & self.mask) as usize)
                .with_mut(|p| &mut *p)
        }
    }

    /// Prepare the slot of `local` and publish it as the ring's newest task
    /// (`current = local + 1`). Orchestrator; the slot's previous task has retired.
    #[inline]
    pub fn prepare(&self, local: u32) {
        self.slot(local).prepare(local);
        self.current.store(local + 1, Release);
    }

    pub fn reset(&self) {
        self.current.store(0, Relaxed);
        self.last_alive.store(0, Relaxed);
    }

    /// Is the task at the watermark consumed (an advance would move it)? Plain loads.
    #[inline]
    pub fn head_consumed(&self) -> bool {
        let la = self.last_alive.load(Acquire);
        la < self.current.load(Acquire) && self.slot(la).state.load(Acquire) == CONSUMED
    }

    /// Advance `last_alive` over the consumed prefix (called after consuming a task).
    /// Returns true if this call moved it.
    ///
    /// Combining, without a lock to wait on: every caller posts a request; whoever
    /// raises the `advancing` flag scans for all requests posted so far and keeps
    /// scanning while new ones arrive; a caller that finds the flag up leaves its
    /// request to the holder. After lowering the flag the holder looks at the requests
    /// once more: a request posted while it scanned was either seen by its last scan or
    /// is seen here (all SeqCst: a poster's failed raise reads the flag up, so its
    /// request precedes the holder's lowering and this look), so no advance is lost.
    pub fn advance(&self) -> bool {
        self.advance_req.fetch_add(1, SeqCst);
        let mut moved = false;
        loop {
            // SeqCst on failure too: the argument above needs the failed raise in the
            // single total order (a Relaxed failure would be a store-buffering pattern).
            if self
                .advancing
                .compare_exchange(false, true, SeqCst, SeqCst)
                .is_err()
            {
                return moved;
            }
            while self.advance_req.swap(0, SeqCst) != 0 {
                let start = self.last_alive.load(Relaxed);
                let cur = self.current.load(Acquire);
                let mut la = start;
                while la < cur && self.slot(la).state.load(Acquire) == CONSUMED {
                    la += 1;
                }
                if la != start {
                    self.last_alive.store(la, Release);
                    moved = true;
                }
            }
            self.advancing.store(false, SeqCst);
            if self.advance_req.load(SeqCst) == 0 {
                return moved;
            }
        }
    }
}
