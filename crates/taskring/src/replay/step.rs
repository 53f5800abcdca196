//! A thread's part of a direct replay: run a task of the graph and complete it, keep the
//! successors it made ready in its own deque, take more from the roots or steal from
//! another thread's deque ([`direct_step`]). Core threads and a helping caller both
//! run it; see `chip/core.rs` for how a steal fits the abort handshake.

use super::job::{DirectJob, TaskArgsCache};
use crate::chip::abort;
use crate::engine::shared::{queue_takes, EngineShared};
use crate::engine::RuntimeFailure;
use crate::kernel::CoreKind;
use crate::sync::{AtomicU64, Ordering::*};
use crate::tensor::TaskId;
use crossbeam_deque::{Steal, Stealer, Worker};

/// A ready task of a direct replay in a thread's deque: its index in the graph, and
/// the queue index of its core kind above bit 32 (a thief checks the kind without the
/// job, which it may not touch unless it holds a task).
#[inline]
fn pack(i: u32, kind: CoreKind) -> u64 {
    i as u64 | (crate::engine::shared::queue_index(kind) as u64) << 32
}

#[inline]
fn unpack(v: u64) -> (u32, CoreKind) {
    (
        v as u32,
        crate::engine::shared::queue_kind((v >> 32) as usize),
    )
}

/// The stealing ends of the direct-replay deques of a chip's threads: slot 0 the
/// orchestrator's (a replay's caller helps), slot `1 + i` core `i`'s (replaced with
/// the core). Read-locked only by a thread out of work of its own.
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

/// What a core running [`direct_step`] shows the other threads (its `chip::core::Core`
/// words): its state word (the abort handshake) and its progress counter (the
/// replay's stall clock).
#[derive(Clone, Copy)]
pub(crate) struct CoreWords<'a> {
    pub(crate) state: &'a AtomicU64,
    pub(crate) progress: &'a std::sync::atomic::AtomicU64,
}

/// A thread's own part of a direct replay (`direct_step`).
pub(crate) struct DirectLocal {
    /// Ready tasks it made and kept (LIFO; other threads out of work steal from the
    /// other end through [`Thieves`]). Only tasks this thread can run.
    deque: Worker<u64>,
    /// Its slot in [`Thieves`].
    pub(crate) slot: usize,
    /// Sinks completed here and not yet reported to the job (`DirectJob::finish_sinks`):
    /// reported when this thread runs out of work, not one shared decrement per task
    /// (an independent or fan-out graph is almost all sinks, and every thread
    /// decrementing one counter for each made its cache line travel between the cores).
    sinks: usize,
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

    /// Report the sinks counted here; true if they were the job's last (then the caller
    /// waiting for the replay is notified).
    pub(crate) fn report_sinks(&mut self, eng: &EngineShared, job: &DirectJob<'_>) {
        let n = std::mem::take(&mut self.sinks);
        if n > 0 && job.finish_sinks(n) {
            eng.progress.notify();
        }
    }

    /// Hand the kept tasks to the shared ready queues.
    pub(crate) fn hand_back(&mut self, eng: &EngineShared) {
        while let Some(t) = self.deque.pop() {
            let (i, k) = unpack(t);
            eng.push_ready(TaskId(i as u64), k);
        }
    }
}

/// Run task `i` of a direct replay on this thread and complete it, then the task it
/// found to run next, and so on, `budget` tasks at most. Returns the task to run next
/// here when the budget is spent, or None when this thread ran out of work (it then
/// reported the sinks it counted, `DirectLocal`) or must stop (a failure, a core given
/// up on). The next task: the first successor the completion made ready (of a kind
/// this thread runs), else the newest in its deque, else a root nobody took yet, else
/// one stolen from another thread's deque. The other successors it made ready that it
/// can run go to its deque (no atomics unless another thread steals: a fan-out's
/// consumers are taken from there by the threads out of work, as in the baseline's
/// work-stealing executor), the rest to the shared ready queues; a parked core is
/// woken when its deque gets work. Looping here rather than returning per task saves a
/// chain's task a fifth of its instructions (the call and the caller's loop).
/// `core`: the core running it (None on the orchestrator's thread, which is never
/// given up on and counts no progress: it does not wait while it runs tasks); a core
/// says which task it runs in its state word before each one (`abort::admit`); if it
/// was given up on while a kernel ran (it loses [`abort::begin_completion`]), nothing
/// of the job is touched any more and its state word reads ABANDONED.
#[allow(clippy::too_many_arguments)]
pub(crate) fn direct_step(
    eng: &EngineShared,
    thieves: &Thieves,
    job: &DirectJob<'_>,
    mut i: u32,
    kind: CoreKind,
    core: Option<CoreWords<'_>>,
    local: &mut DirectLocal,
    mut budget: u32,
) -> Option<u32> {
    // Every later task is a successor (checked at capture) or comes from a deque, a
    // root or a steal, all the graph's own.
    assert!(
        (i as usize) < job.tasks(),
        "direct replay: task {i} out of range"
    );
    let mut args = TaskArgsCache::new();
    loop {
        // safety: `i` is a task of the graph (above).
        let r = unsafe { job.run(i, &mut args) };
        if core.is_some_and(|c| !abort::begin_completion(c.state, TaskId(i as u64))) {
            return None;
        }
        if let Err(msg) = r {
            let (id, k) = job.head(i);
            if let Some(k) = k {
                eng.fail(RuntimeFailure::task_failed(k.name(), id, &msg));
            }
            local.clear();
            return None;
        }
        if eng.fatal.load(Acquire) {
            // Dependants of a failed task never run; the rest is dropped too.
            local.clear();
            return None;
        }
        let mut next = None;
        // One wake-up per batch of successors made ready (a fan-out makes many at once).
        let mut queued = 0u64;
        let mut kept = false;
        // safety: as `run`'s.
        let sink = unsafe {
            job.complete(i, |s, sk| {
                if !can_run(kind, sk) {
                    queued |= eng.push_ready_quiet(TaskId(s as u64), sk);
                } else if next.is_none() {
                    next = Some(s);
                } else {
                    if !kept && local.deque.is_empty() {
                        // The deque gets work: a parked core of a kind that can run it may
                        // steal it (the wake-up is skipped while a core spins).
                        queued |= 1 << crate::engine::shared::queue_index(kind);
                    }
                    kept = true;
                    local.deque.push(pack(s, sk));
                }
            })
        };
        if queued != 0 {
            eng.wake_for_queues(queued);
        }
        local.sinks += sink as usize;
        if let Some(c) = core {
            // Progress for the stall clock (only this core writes it).
            c.progress
                .store(c.progress.load(Relaxed).wrapping_add(1), Relaxed);
        }
        let n = match next {
            Some(n) => n,
            None => match find_direct(eng, thieves, job, kind, local) {
                Some(n) => n,
                None => {
                    // Out of work here: the sinks counted here go to the job (the
                    // last report ends the replay).
                    local.report_sinks(eng, job);
                    return None;
                }
            },
        };
        budget -= 1;
        if budget == 0 {
            return Some(n);
        }
        if let Some(c) = core {
            if !abort::admit(c.state, eng, TaskId(n as u64)) {
                return None;
            }
        }
        i = n;
    }
}

/// A direct-replay task for a thread of `kind` out of successors to run: the newest in
/// its deque, else a root nobody took yet, else one stolen from another thread.
#[inline]
fn find_direct(
    eng: &EngineShared,
    thieves: &Thieves,
    job: &DirectJob<'_>,
    kind: CoreKind,
    local: &mut DirectLocal,
) -> Option<u32> {
    if let Some(l) = local.deque.pop() {
        return Some(unpack(l).0);
    }
    while let Some(rs) = job.claim_roots() {
        // The first this thread can run is run next; the others it can run go to its
        // deque (others steal them), the rest to the shared ready queues.
        let mut next = None;
        let mut queued = 0u64;
        let was_empty = local.deque.is_empty();
        for &r in rs.iter().rev() {
            let rk = job.kind(r);
            if !can_run(kind, rk) {
                queued |= eng.push_ready_quiet(TaskId(r as u64), rk);
            } else if let Some(n) = next.replace(r) {
                local.deque.push(pack(n, job.kind(n)));
            }
        }
        if was_empty && !local.deque.is_empty() {
            queued |= 1 << crate::engine::shared::queue_index(kind);
        }
        if queued != 0 {
            eng.wake_for_queues(queued);
        }
        if next.is_some() {
            return next;
        }
    }
    thieves.steal(local.slot, kind, eng)
}

/// May a core of `core` kind run a task of `task` kind? The ready queues' rule
/// (`queue_takes`) for the kinds' queues.
#[inline]
pub(crate) fn can_run(core: CoreKind, task: CoreKind) -> bool {
    use crate::engine::shared::queue_index;
    queue_takes(queue_index(core), queue_index(task))
}
