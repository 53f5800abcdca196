//! The four rings of an arena ([`ArenaShared`]) and the operations on a task's
//! references: the orchestrator's claims and links, reference release, and the
//! completion protocol that runs on the core threads.
//!
//! Reference accounting of a task T (as in upstream's completion path):
//! - `fanout_count` = `SCOPE_BIT` (the owning scope's reference, set when T's slot is
//!   prepared) + one per consumer claim (orchestrator, under T's lock: a RETAIN edge; a
//!   WAIT-only edge takes no reference, `fanin.rs`) + one for T's own completion (taken
//!   in completion step 1, under T's lock);
//! - `fanout_refcount` += `SCOPE_BIT` at scope end, += 1 per released claim (when the
//!   consumer is released after completing), += 1 at the end of T's completion;
//! - T is CONSUMED when COMPLETED and `fanout_refcount == fanout_count`, decided under
//!   T's lock — the same lock the orchestrator's claim takes, so "claim vs consume"
//!   cannot race: a claim either sees CONSUMED (and drops the edge) or happens before.
//!
//! Completion of T (core thread, [`ArenaShared::complete`]), in order:
//! 1. under T's lock: state = COMPLETED, take the completion's own reference, snapshot
//!    `fanout_head` (no node is prepended after this: the orchestrator wires under the
//!    same lock and checks the state);
//! 2. walk the fanout list, releasing one fanin reference of each consumer (each
//!    consumer's `fanin_count` is read *before* the release: after it, the consumer may
//!    run, retire and its slot hold a later task);
//! 3. release T's RETAIN claims on its producers (read from T's payload / spill
//!    entries), then the completion's own reference, which may consume T.
//!
//! Without the completion's own reference, T — COMPLETED since step 1 — could be
//! consumed by a concurrent last release (its scope ending, a consumer's RETAIN claim
//! released) and its slot re-prepared before step 3 read T's fanin record:
//! the completion would read the next task's record and release that task's RETAIN
//! claims a second time.

use super::ready::EngineShared;
use super::retire::RingShared;
use super::slot::{
    DepNode, SlotState, COMPLETED, CONSUMED, DEP_FLAGS, DEP_RETAIN, DEP_WAIT, SCOPE_BIT,
};
use crate::sync::schedule_hint;
use crate::sync::Ordering::*;
use crate::tensor::TaskId;

/// The four rings of one arena.
pub struct ArenaShared {
    pub rings: [RingShared; 4],
}

/// What [`ArenaShared::claim`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// No reference taken: the producer is gone (`live == false`: CONSUMED, or its slot
    /// already holds a later task), or it has completed and the edge only asks to wait
    /// (`live == true`).
    Skipped { live: bool },
    /// One reference taken on the producer (`fanout_count += 1`). `pending`: a WAIT
    /// edge whose producer had not completed yet (it needs a dependency node).
    Claimed { pending: bool },
}

impl ArenaShared {
    /// Orchestrator, submit step 4: claim producer `p` for an edge with `flags`
    /// (`DEP_WAIT` / `DEP_RETAIN`), under `p`'s lock — so a claim and `p`'s CONSUMED
    /// transition cannot interleave.
    pub fn claim(&self, p: TaskId, flags: u64) -> Claim {
        let s = self.slot(p);
        s.lock();
        let state = s.state.load(Acquire);
        let gone = s.local.load(Relaxed) != p.local() || state > COMPLETED;
        let completed = state == COMPLETED;
        let r = if !gone && (flags & DEP_RETAIN != 0 || !completed) {
            s.fanout_count
                .store(s.fanout_count.load(Relaxed) + 1, Relaxed);
            Claim::Claimed {
                pending: flags & DEP_WAIT != 0 && !completed,
            }
        } else {
            Claim::Skipped { live: !gone }
        };
        s.unlock();
        r
    }

    /// Orchestrator, submit step 4 for a WAIT-only edge: where producer `p` stands,
    /// without a lock or a reference (a WAIT-only edge needs none: only the
    /// orchestrator re-prepares a slot, so `p`'s slot holds `p` or nothing until the
    /// submit's `link`, which decides under the lock). `None`: gone (CONSUMED, or its slot
    /// holds a later task); `Some(true)`: completed; `Some(false)`: not yet.
    #[inline]
    pub fn peek(&self, p: TaskId) -> Option<bool> {
        let s = self.slot(p);
        let state = s.state.load(Acquire);
        if s.local.load(Relaxed) != p.local() || state > COMPLETED {
            None
        } else {
            Some(state == COMPLETED)
        }
    }

    /// Orchestrator, submit step 7: wire `consumer` behind the producer `p` (a WAIT
    /// edge; claimed if it also retains), under `p`'s lock. If `p` has not completed,
    /// dependency node `node` (an index into the pool of `consumer`'s ring, reserved for
    /// this submit) is written and prepended to `p`'s fanout list, and `true` is
    /// returned; if `p` has completed or is gone (a WAIT-only edge holds no reference:
    /// `p` may have been consumed since `peek`), nothing is linked and `false` is
    /// returned (count the edge as done for [`SlotState::publish`]).
    #[inline(always)]
    pub fn link(&self, p: TaskId, consumer: TaskId, node: usize) -> bool {
        let s = self.slot(p);
        s.lock();
        let linked = s.local.load(Relaxed) == p.local() && s.state.load(Acquire) < COMPLETED;
        if linked {
            let cell = &self.rings[consumer.ring()].dep_nodes[node];
            let next = s.fanout_head.load(Relaxed);
            // safety: the node is reserved for this submit and only read after this
            // lock is released by a completion that snapshots the head under it.
            cell.with_mut(|n| unsafe {
                *n = DepNode {
                    consumer: consumer.0,
                    next,
                }
            });
            s.fanout_head.store(
                ((consumer.ring() as u64) << 32) | (node as u64 + 1),
                Release,
            );
        }
        s.unlock();
        linked
    }

    #[inline]
    pub fn slot(&self, id: TaskId) -> &SlotState {
        self.rings[id.ring()].slot(id.local())
    }

    /// Has `p` completed (or been retired, its slot reused)? A plain read, no lock: a
    /// `true` is final, a `false` may be stale (the caller then treats `p` as pending).
    #[inline]
    pub(crate) fn is_completed(&self, p: TaskId) -> bool {
        let s = self.slot(p);
        let state = s.state.load(Acquire);
        s.local.load(Relaxed) != p.local() || state >= COMPLETED
    }

    /// Have all of `p`'s consumers released it (its retaining consumers finished; a
    /// consumed or reused slot counts)? `p` must have completed for a `true`; the
    /// reference of the scope `p` was submitted in does not count. A plain read: a
    /// `true` is final, a `false` may be stale.
    pub(crate) fn consumers_done(&self, p: TaskId) -> bool {
        let s = self.slot(p);
        let state = s.state.load(Acquire);
        if s.local.load(Relaxed) != p.local() || state >= CONSUMED {
            return true;
        }
        state >= COMPLETED
            && (s.fanout_refcount.load(Acquire) & !SCOPE_BIT)
                >= (s.fanout_count.load(Acquire) & !SCOPE_BIT)
    }

    /// Release one reference on `p` and retire it if that was the last.
    ///
    /// The release and the CONSUMED check are one critical section of `p`'s lock: every
    /// access of a releaser to the slot ends before the last release consumes `p`, so
    /// nothing touches the slot once it is consumed, and re-preparing it needs no lock
    /// ([`SlotState::prepare`]). (One locked instruction per release, not two.)
    #[inline]
    pub fn release_ref(&self, p: TaskId, amount: u32, eng: &EngineShared) {
        if self.release_ref_held(p, amount) {
            self.retired(p.ring(), eng);
        }
    }

    /// [`ArenaShared::release_ref`] without the watermark advance: returns true if the
    /// release consumed `p`; the caller then owes [`ArenaShared::retired`] of `p`'s ring.
    #[inline]
    pub(crate) fn release_ref_held(&self, p: TaskId, amount: u32) -> bool {
        let s = self.slot(p);
        s.lock();
        s.fanout_refcount
            .store(s.fanout_refcount.load(Relaxed) + amount, Release);
        let consumed = s.try_consume_locked();
        s.unlock();
        consumed
    }

    /// A task of ring `ring` was consumed: advance the ring's watermark over the
    /// consumed prefix, and wake the orchestrator if it waits for space. One call
    /// covers every consumption before it (the advance scans), so a thread that
    /// consumed several tasks may make it once, after the last.
    #[inline]
    pub fn retired(&self, ring: usize, eng: &EngineShared) {
        let ring = &self.rings[ring];
        if ring.advance() {
            eng.progress
                .notify_advance(|| ring.last_alive.load(Acquire) == ring.current.load(Acquire));
        }
    }

    /// [`ArenaShared::retired`] of every ring whose bit is set in `rings` (bit `r`: ring
    /// `r`), for a thread that consumed tasks of several rings and advances once after.
    #[inline]
    pub fn retired_rings(&self, rings: u8, eng: &EngineShared) {
        let mut m = rings;
        while m != 0 {
            self.retired(m.trailing_zeros() as usize, eng);
            m &= m - 1;
        }
    }

    /// Run the completion protocol of `id` (module doc, steps 1–3). Consumers that
    /// become ready are handed to `ready`.
    ///
    /// # Safety
    /// `id` must be a published task of this arena that finished running, completed once.
    // Inline: the core loop's hot path (it was inlined into it while this module and
    // the chip's shared a codegen unit; a separate module must not cost a call).
    #[inline]
    pub unsafe fn complete(&self, id: TaskId, eng: &EngineShared, ready: impl FnMut(TaskId)) {
        // safety: the caller's contract.
        if unsafe { self.complete_held(id, eng, ready) } {
            self.retired(id.ring(), eng);
        }
    }

    /// [`ArenaShared::complete`], except that when the completion's own release
    /// consumes `id` the watermark is not advanced: returns true then, and the caller
    /// owes [`ArenaShared::retired`] of `id`'s ring — before it lets go of the run (the
    /// arena may be reused after), and as soon as the orchestrator waits for space
    /// ([`Progress::has_waiter`](super::park::Progress::has_waiter)). A core completing
    /// tasks back to back advances once for all of them instead of once each (an advance
    /// is several SeqCst atomics on lines the other threads write).
    ///
    /// # Safety
    /// As [`ArenaShared::complete`].
    #[inline]
    pub unsafe fn complete_held(
        &self,
        id: TaskId,
        eng: &EngineShared,
        mut ready: impl FnMut(TaskId),
    ) -> bool {
        let ring = &self.rings[id.ring()];
        let s = ring.slot(id.local());
        s.lock();
        s.state.store(COMPLETED, Release);
        // The completion's own reference: `id` cannot turn CONSUMED (and its slot,
        // payload and spill entries cannot be reused) before this function is done.
        s.fanout_count
            .store(s.fanout_count.load(Relaxed) + 1, Relaxed);
        let mut node = s.fanout_head.load(Relaxed);
        s.unlock();
        while node != 0 {
            let r = (node >> 32) as usize;
            let idx = (node as u32 - 1) as usize;
            // safety: the node was written under our lock before we snapshotted the head,
            // and cannot be reclaimed before its consumer retires, which needs this release.
            let n = self.rings[r].dep_nodes[idx].with(|p| *p);
            node = n.next;
            let c = TaskId(n.consumer);
            let cs = self.slot(c);
            // Read `fanin_count` before releasing: once our reference is released, the
            // consumer may be made ready by another producer, run, retire and have its
            // slot re-prepared for a later task, whose count we would read instead.
            let need = cs.fanin_count.load(Acquire);
            let prev = cs.fanin_refcount.fetch_add(1, AcqRel);
            schedule_hint();
            if prev + 1 == need {
                ready(c);
            }
        }
        eng.completed.fetch_add(1, Relaxed);
        // Release RETAIN claims on producers.
        let p = ring.payload(id.local());
        let n_inline = (p.n_fanin as usize).min(crate::engine::FANIN_INLINE);
        for i in 0..p.n_fanin as usize {
            let e = if i < n_inline {
                p.fanin_inline[i]
            } else {
                let sp = &ring.spill;
                sp[((p.fanin_spill_start + (i - n_inline) as u64) % sp.len() as u64) as usize]
                    .with(|p| *p)
            };
            if e & DEP_RETAIN != 0 {
                self.release_ref(TaskId(e & !DEP_FLAGS), 1, eng);
            }
        }
        let consumed = self.release_ref_held(id, 1);
        eng.progress.notify_completion();
        consumed
    }
}
