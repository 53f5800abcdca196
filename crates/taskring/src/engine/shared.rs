//! The state shared between the orchestrator thread and the core threads, and the
//! completion protocol that runs on the core threads.
//!
//! Per ring ([`RingShared`]): the slot table (one [`SlotState`] cache line per window
//! entry), the payload table (what a task runs with), the dependency-node pool and the
//! fanin spill pool, and two counters: `current` (next local id, published by the
//! orchestrator) and `last_alive` (the in-order retirement watermark).
//!
//! Reference accounting of a task T (reference §6.4):
//! - `fanout_count` = `SCOPE_BIT` (the owning scope's reference, set when T's slot is
//!   prepared) + one per consumer claim (orchestrator, under T's lock) + one for T's own
//!   completion (taken in completion step 1, under T's lock);
//! - `fanout_refcount` += `SCOPE_BIT` at scope end, += 1 per released claim (a WAIT-only
//!   claim at the end of its consumer's wiring, a RETAIN claim when the consumer is
//!   released after completing), += 1 at the end of T's completion;
//! - T is CONSUMED when COMPLETED and `fanout_refcount == fanout_count`, decided under
//!   T's lock — the same lock the orchestrator's claim takes, so "claim vs consume"
//!   cannot race: a claim either sees CONSUMED (and drops the edge) or happens before.
//!
//! Readiness: `fanin_count` = WAIT edges + 1; the `+1` is released by the orchestrator
//! after wiring, so a task cannot become ready while it is still being linked. Whoever's
//! `fetch_add` brings `fanin_refcount` to `fanin_count` pushes the task — exactly once.
//!
//! Completion of T (core thread), in order:
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
//! consumed by a concurrent last release (its scope ending, a WAIT-only claim released
//! at the end of a wiring) and its slot re-prepared before step 3 read T's fanin record:
//! the completion would read the next task's record and release that task's RETAIN
//! claims a second time.
//!
//! Retirement: a thread that turns a slot CONSUMED advances the ring's watermark over the
//! consumed prefix under the ring's `advance` mutex (blocking, so no advance is lost) and
//! wakes the orchestrator if it is waiting for space. A slot is only reused after the
//! watermark passed it, and the orchestrator resets it (under its lock) before publishing
//! the new id. A CONSUMED check may come late — after another releaser consumed the task
//! and the slot was reused — and then looks at the new task, under the lock: it consumes
//! it only if that is due anyway.
//!
//! Orchestrator side: [`RingShared::prepare`], [`ArenaShared::claim`],
//! [`SlotState::begin_wiring`], [`ArenaShared::link`], [`SlotState::publish`],
//! [`SlotState::mark_completed`] (inline completion) and [`ArenaShared::release_ref`]
//! (scope end, WAIT-only claims).
//!
//! Every atomic, lock and shared cell comes from [`crate::sync`], so a `--cfg loom`
//! build model-checks this module (`tests/loom_core.rs`).
//!
//! Memory ordering: payloads, fanin records and dependency nodes are plain memory written
//! by the orchestrator before the task is published; publication is a release RMW on
//! `fanin_refcount` (or a push onto a ready queue), and readers acquire it.

use crate::engine::Payload;
use crate::kernel::CoreKind;
use crate::mem::ReserveError;
use crate::sync::Ordering::*;
use crate::sync::{
    fence, schedule_hint, spin_loop, yield_now, AtomicBool, AtomicU32, AtomicU64, AtomicUsize,
    Condvar, Mutex, Table, UnsafeCell,
};
use crate::tensor::TaskId;
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;
use std::time::Duration;

pub const PENDING: u32 = 0;
pub const COMPLETED: u32 = 1;
pub const CONSUMED: u32 = 2;
/// The owning scope's reference in `fanout_count` / `fanout_refcount`.
pub const SCOPE_BIT: u32 = 1 << 31;

/// Fanin edge flags, stored in the top bits of a recorded producer id.
pub const DEP_WAIT: u64 = 1 << 62;
pub const DEP_RETAIN: u64 = 1 << 63;
pub const DEP_FLAGS: u64 = DEP_WAIT | DEP_RETAIN;

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
    pub fn unlock(&self) {
        self.lock.store(0, Release);
    }

    /// Prepare the slot for local id `local` (orchestrator; the slot is retired).
    ///
    /// Under the lock: a thread that released a reference on the slot's previous task
    /// may still be on its way into [`ArenaShared::check_consumed`] (another thread
    /// consumed the task meanwhile); its critical section must not overlap the reset.
    #[inline]
    pub fn prepare(&self, local: u32) {
        self.lock();
        self.state.store(PENDING, Relaxed);
        self.fanout_count.store(SCOPE_BIT, Relaxed);
        self.fanout_refcount.store(0, Relaxed);
        self.fanin_count.store(0, Relaxed);
        self.fanin_refcount.store(0, Relaxed);
        self.fanout_head.store(0, Relaxed);
        self.local.store(local, Relaxed);
        self.unlock();
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
    pub fn publish_unwaited(&self) -> bool {
        debug_assert_eq!(self.fanin_count.load(Relaxed), 1);
        self.fanin_refcount.store(1, Relaxed);
        true
    }

    /// Has the owning scope released its reference?
    #[inline]
    pub fn scope_released(&self) -> bool {
        self.fanout_refcount.load(Acquire) & SCOPE_BIT != 0
    }

    /// Under the lock: COMPLETED and every reference released -> CONSUMED.
    #[inline]
    fn try_consume_locked(&self) -> bool {
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

pub type PayloadCell = UnsafeCell<MaybeUninit<Payload>>;

/// One ring's shared tables and counters. See the module doc.
pub struct RingShared {
    pub window: u64,
    pub mask: u32,
    pub slots: Table<SlotState>,
    pub payloads: Table<PayloadCell>,
    pub dep_nodes: Table<UnsafeCell<DepNode>>,
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
unsafe impl Send for RingShared {}

impl RingShared {
    pub fn new(window: u64, dep_pool: u64) -> Result<RingShared, ReserveError> {
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
        &self.slots[(local & self.mask) as usize]
    }

    /// Hint that local id `local` will be submitted soon: prefetch, for writing, its
    /// slot's state line and the payload's first lines (header, inline fanin, the first
    /// tensors). A hint only: the slot may still hold a live task.
    #[inline(always)]
    pub fn prefetch_slot(&self, local: u32) {
        let i = (local & self.mask) as usize;
        crate::mem::prefetch_write(&self.slots[i] as *const SlotState as *const u8, 1);
        crate::mem::prefetch_write(&self.payloads[i] as *const PayloadCell as *const u8, 7);
    }

    /// # Safety
    /// The caller must hold publication of `local` (see the module doc) and no `&mut`.
    #[inline]
    pub unsafe fn payload(&self, local: u32) -> &Payload {
        self.payloads[(local & self.mask) as usize].with(|p| (*p).assume_init_ref())
    }

    /// # Safety
    /// Only the orchestrator, for a slot it prepared and has not yet published.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn payload_mut(&self, local: u32) -> &mut MaybeUninit<Payload> {
        self.payloads[(local & self.mask) as usize].with_mut(|p| &mut *p)
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

    /// Orchestrator, submit step 7: wire `consumer` behind the claimed producer `p`
    /// (a WAIT edge), under `p`'s lock. If `p` has not completed, dependency node `node`
    /// (an index into the pool of `consumer`'s ring, reserved for this submit) is
    /// written and prepended to `p`'s fanout list, and `true` is returned; if `p` has
    /// completed, nothing is linked and `false` is returned (count the edge as done for
    /// [`SlotState::publish`]).
    pub fn link(&self, p: TaskId, consumer: TaskId, node: usize) -> bool {
        let s = self.slot(p);
        s.lock();
        let linked = s.state.load(Acquire) < COMPLETED;
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
    pub fn is_completed(&self, p: TaskId) -> bool {
        let s = self.slot(p);
        let state = s.state.load(Acquire);
        s.local.load(Relaxed) != p.local() || state >= COMPLETED
    }

    /// Release one reference on `p` and retire it if that was the last.
    #[inline]
    pub fn release_ref(&self, p: TaskId, amount: u32, eng: &EngineShared) {
        let s = self.slot(p);
        s.fanout_refcount.fetch_add(amount, AcqRel);
        // If that was not the last reference, another releaser may consume `p` and the
        // orchestrator reuse its slot before our check: then the check sees the new
        // task (under its lock, so it only consumes it if that is due anyway).
        self.check_consumed(p, eng);
    }

    /// CONSUMED check (under the slot lock) and watermark advance.
    #[inline]
    pub fn check_consumed(&self, id: TaskId, eng: &EngineShared) {
        let s = self.slot(id);
        s.lock();
        let consumed = s.try_consume_locked();
        s.unlock();
        if consumed && self.rings[id.ring()].advance() {
            eng.progress.notify();
        }
    }

    /// Run the completion protocol of `id` (module doc, steps 1–3). Consumers that
    /// become ready are handed to `ready`.
    ///
    /// # Safety
    /// `id` must be a published task of this arena that finished running, completed once.
    pub unsafe fn complete(&self, id: TaskId, eng: &EngineShared, mut ready: impl FnMut(TaskId)) {
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
        self.release_ref(id, 1, eng);
    }
}

/// Ready queues (per core kind), the idle-core parking lot, and the orchestrator's
/// progress notification. Lives as long as the chip.
pub struct EngineShared {
    queues: [ReadyQueue; 3],
    sleep: Sleep,
    pub progress: Progress,
    /// A run failed: core threads stop running kernels and discard tasks.
    pub fatal: AtomicBool,
    pub shutdown: AtomicBool,
    /// Tasks completed (all runs); any change is progress for the backstop.
    pub completed: CachePadded<AtomicU64>,
    /// The first failure of the current run.
    pub failure: Mutex<Option<crate::engine::RuntimeFailure>>,
}

/// A ready queue: lock-free `SegQueue` normally; under loom (which cannot see inside
/// crossbeam) a mutex-protected deque, so that a push/pop pair is a modelled
/// happens-before edge.
#[cfg(not(loom))]
#[derive(Default)]
struct ReadyQueue(crossbeam_queue::SegQueue<u64>);

#[cfg(not(loom))]
impl ReadyQueue {
    #[inline]
    fn push(&self, v: u64) {
        self.0.push(v)
    }
    #[inline]
    fn pop(&self) -> Option<u64> {
        self.0.pop()
    }
    #[inline]
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    #[inline]
    fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(loom)]
#[derive(Default)]
struct ReadyQueue(Mutex<std::collections::VecDeque<u64>>);

#[cfg(loom)]
impl ReadyQueue {
    fn push(&self, v: u64) {
        self.0.lock().push_back(v)
    }
    fn pop(&self) -> Option<u64> {
        self.0.lock().pop_front()
    }
    fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
    fn len(&self) -> usize {
        self.0.lock().len()
    }
}

#[inline]
fn queue_index(kind: CoreKind) -> usize {
    match kind {
        CoreKind::Aic => 0,
        CoreKind::Aiv => 1,
        CoreKind::Any => 2,
    }
}

impl Default for EngineShared {
    fn default() -> Self {
        EngineShared {
            queues: [
                ReadyQueue::default(),
                ReadyQueue::default(),
                ReadyQueue::default(),
            ],
            sleep: Sleep::default(),
            progress: Progress::default(),
            fatal: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            completed: CachePadded::new(AtomicU64::new(0)),
            failure: Mutex::new(None),
        }
    }
}

impl EngineShared {
    /// Make `id` available to a core of `kind`.
    #[inline]
    pub fn push_ready(&self, id: TaskId, kind: CoreKind) {
        let q = queue_index(kind);
        self.queues[q].push(id.0);
        self.sleep.wake_for(q);
    }

    /// Queue `id` for a core of `kind` without waking anyone: the caller calls
    /// [`EngineShared::wake_for_queues`] once after a batch. Returns the queue's bit.
    #[inline]
    pub fn push_ready_quiet(&self, id: TaskId, kind: CoreKind) -> u8 {
        let q = queue_index(kind);
        self.queues[q].push(id.0);
        1 << q
    }

    /// Wake for the queues of `mask` (bits from [`EngineShared::push_ready_quiet`]).
    #[inline]
    pub fn wake_for_queues(&self, mask: u8) {
        for q in 0..3 {
            if mask & (1 << q) != 0 {
                self.sleep.wake_for(q);
            }
        }
    }

    /// Wake parked cores (work may be queued that a spinner cannot take).
    pub fn wake_cores(&self) {
        self.sleep.wake();
    }

    /// Take a ready task for a core of `kind`: its own queue first, then `Any`.
    #[inline]
    pub fn pop_ready(&self, kind: CoreKind) -> Option<TaskId> {
        let own = queue_index(kind);
        if own != 2 {
            if let Some(t) = self.queues[own].pop() {
                return Some(TaskId(t));
            }
            return self.queues[2].pop().map(TaskId);
        }
        // A core of kind Any (a one-core chip) runs every kind.
        self.queues[2]
            .pop()
            .or_else(|| self.queues[0].pop())
            .or_else(|| self.queues[1].pop())
            .map(TaskId)
    }

    /// Any task a core of `kind` could take?
    #[inline]
    pub fn has_ready(&self, kind: CoreKind) -> bool {
        let own = queue_index(kind);
        if own == 2 {
            return self.queues.iter().any(|q| !q.is_empty());
        }
        !self.queues[2].is_empty() || !self.queues[own].is_empty()
    }

    /// Drop every queued task (abort).
    pub fn drain_queues(&self) {
        for q in &self.queues {
            while q.pop().is_some() {}
        }
    }

    /// Tasks waiting in the ready queues.
    pub fn ready_len(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }

    pub fn queues_empty(&self) -> bool {
        self.queues.iter().all(|q| q.is_empty())
    }

    /// Park the calling core until work may be there (or `timeout`).
    pub fn park_core(&self, kind: CoreKind, timeout: Duration) {
        self.sleep.park(
            || self.has_ready(kind) || self.shutdown.load(SeqCst),
            timeout,
        )
    }

    /// Try to become the spinning idle core (see [`Sleep`]).
    #[inline]
    pub fn try_spin(&self, kind: CoreKind) -> bool {
        self.sleep.try_spin(queue_index(kind))
    }

    /// Stop spinning; if work is still queued, wake a sleeper for it.
    #[inline]
    pub fn end_spin(&self, found_work: bool) {
        self.sleep.end_spin();
        if found_work && self.queues.iter().any(|q| !q.is_empty()) {
            self.sleep.wake();
        }
    }

    /// Wake every parked core (shutdown).
    pub fn wake_all_cores(&self) {
        self.sleep.wake();
    }

    /// Latch `f` as the run's failure if it is the first, and stop the run.
    pub fn fail(&self, f: crate::engine::RuntimeFailure) {
        {
            let mut slot = self.failure.lock();
            if slot.is_none() {
                *slot = Some(f);
            }
        }
        self.fatal.store(true, SeqCst);
        self.progress.notify();
        self.sleep.wake();
    }
}

/// Parking for idle cores. A waker that pushed work checks `sleepers` after a SeqCst
/// fence; a sleeper registers, fences, re-checks for work under the mutex, then waits.
/// Either the waker sees the sleeper, or the sleeper sees the work.
///
/// Spinners: an idle core may first spin for a while (at most one at a time), counted in
/// `spinning`. A push skips the wake-up while a core spins: the spinner re-checks the
/// queues after it stops spinning (stop, fence, then pop or register as a sleeper and
/// re-check), so the pushed task is seen either way; a spinner that found work wakes a
/// sleeper if more work is queued.
#[derive(Default)]
pub struct Sleep {
    sleepers: AtomicUsize,
    spinning: AtomicUsize,
    /// Queue index (core kind) of the spinning core: pushes it cannot take still wake.
    spinner_kind: AtomicUsize,
    m: Mutex<()>,
    cv: Condvar,
}

impl Sleep {
    /// Become the (one) spinning core, of queue index `kind`; false if another core
    /// already spins.
    #[inline]
    pub fn try_spin(&self, kind: usize) -> bool {
        if self
            .spinning
            .compare_exchange(0, 1, SeqCst, Relaxed)
            .is_ok()
        {
            self.spinner_kind.store(kind, SeqCst);
            true
        } else {
            false
        }
    }

    /// Stop spinning (before looking at the queues one last time).
    #[inline]
    pub fn end_spin(&self) {
        self.spinning.fetch_sub(1, SeqCst);
        fence(SeqCst);
    }

    /// Wake for a task of queue index `kind` (see the type doc).
    #[inline]
    pub fn wake_for(&self, kind: usize) {
        fence(SeqCst);
        if self.spinning.load(Relaxed) > 0 {
            let sk = self.spinner_kind.load(Relaxed);
            if sk == 2 || kind == 2 || sk == kind {
                return;
            }
        }
        self.wake_sleepers();
    }

    /// Wake every parked core (whatever it waits for).
    #[inline]
    pub fn wake(&self) {
        fence(SeqCst);
        self.wake_sleepers();
    }

    #[inline]
    fn wake_sleepers(&self) {
        if self.sleepers.load(Relaxed) > 0 {
            let _g = self.m.lock();
            // All: sleepers are of different core kinds, and one woken for work it
            // cannot take would leave the right one asleep until its park timeout.
            self.cv.notify_all();
        }
    }
    pub fn park(&self, has_work: impl Fn() -> bool, timeout: Duration) {
        self.sleepers.fetch_add(1, SeqCst);
        fence(SeqCst);
        let mut g = self.m.lock();
        if !has_work() {
            self.cv.wait_for(&mut g, timeout);
        }
        drop(g);
        self.sleepers.fetch_sub(1, SeqCst);
    }
}

/// The orchestrator's "something moved" signal (same protocol as [`Sleep`]).
#[derive(Default)]
pub struct Progress {
    waiting: AtomicBool,
    m: Mutex<()>,
    cv: Condvar,
}

impl Progress {
    #[inline]
    pub fn notify(&self) {
        fence(SeqCst);
        if self.waiting.load(Relaxed) {
            let _g = self.m.lock();
            self.cv.notify_all();
        }
    }
    /// Wait until `done()` or `timeout`. Returns `done()`'s last value.
    pub fn wait(&self, done: impl Fn() -> bool, timeout: Duration) -> bool {
        if done() {
            return true;
        }
        self.waiting.store(true, SeqCst);
        fence(SeqCst);
        let mut g = self.m.lock();
        let mut ok = done();
        if !ok {
            self.cv.wait_for(&mut g, timeout);
            ok = done();
        }
        drop(g);
        self.waiting.store(false, SeqCst);
        ok
    }
}
