//! A thread's part of a direct replay: run a task of the graph and complete it, keep the
//! successors it made ready in its own deque, take more from the roots or steal from
//! another thread's deque ([`direct_step`]). The deques are the chip's
//! (`chip::deque`); a core runs this through the chip's `DirectRun` interface, which
//! `DirectJob` implements here, a helping caller calls it directly. See `chip/core.rs`
//! for how a steal fits the abort handshake.

use super::job::{DirectJob, TaskArgsCache};
use crate::chip::abort;
use crate::chip::deque::{can_run, CoreWords, DirectLocal, DirectRun, Thieves};
use crate::engine::shared::EngineShared;
use crate::engine::RuntimeFailure;
use crate::kernel::{CoreKind, KernelRef};
use crate::sync::Ordering::*;
use crate::tensor::{TaskId, Tensor};

/// Report the sinks `local` counted to `job` (`DirectJob::finish_sinks`); the caller
/// waiting for the replay is notified when they were the job's last.
pub(crate) fn report_sinks(local: &mut DirectLocal, eng: &EngineShared, job: &DirectJob<'_>) {
    let n = std::mem::take(&mut local.sinks);
    if n > 0 && job.finish_sinks(n) {
        eng.progress.notify();
    }
}

impl DirectRun for DirectJob<'_> {
    #[inline]
    fn step(
        &self,
        eng: &EngineShared,
        thieves: &Thieves,
        i: u32,
        kind: CoreKind,
        core: Option<CoreWords<'_>>,
        local: &mut DirectLocal,
        budget: u32,
    ) -> Option<u32> {
        direct_step(eng, thieves, self, i, kind, core, local, budget)
    }

    fn task(&self, i: u32) -> (Option<KernelRef>, Vec<Tensor>) {
        (self.head(i).1, self.tensors(i))
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
                    if !kept && local.is_empty() {
                        // The deque gets work: a parked core of a kind that can run it may
                        // steal it (the wake-up is skipped while a core spins).
                        queued |= 1 << crate::engine::shared::queue_index(kind);
                    }
                    kept = true;
                    local.push(s, sk);
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
                    report_sinks(local, eng, job);
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
    if let Some(l) = local.pop() {
        return Some(l);
    }
    while let Some(rs) = job.claim_roots() {
        // The first this thread can run is run next; the others it can run go to its
        // deque (others steal them), the rest to the shared ready queues.
        let mut next = None;
        let mut queued = 0u64;
        let was_empty = local.is_empty();
        for &r in rs.iter().rev() {
            let rk = job.kind(r);
            if !can_run(kind, rk) {
                queued |= eng.push_ready_quiet(TaskId(r as u64), rk);
            } else if let Some(n) = next.replace(r) {
                local.push(n, job.kind(n));
            }
        }
        if was_empty && !local.is_empty() {
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
