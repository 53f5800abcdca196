//! The abort handshake's steps (argued in the module doc of `chip/core.rs`), each a
//! function over [`crate::sync`] atomics and the engine's [`EngineShared`]: the chip's
//! core threads and its run call exactly these, and `src/loom_models/chip.rs` drives the same
//! functions on loom threads. Public (hidden) only for that model.
//!
//! A core's state word (`Core::state`) says what the core holds:
//!
//! | value | the core |
//! | --- | --- |
//! | [`CORE_IDLE`] | holds no task |
//! | [`CORE_SEARCHING`] | looks at the ready queues (it may be about to hold a task) |
//! | a task id `t` (RUNNING) | holds `t`: about to run, or running, its kernel |
//! | `t \|` [`CORE_COMPLETING`] | won step 4's race: completes `t` (touches the arena) |
//! | [`CORE_ABANDONED`] | was given up on (step 4): touches nothing more, ever |
//!
//! Only the core writes its word, except for one transition: the run's give-up
//! (`give_up_if_stuck`) CASes RUNNING `t` -> ABANDONED, against the core's own CAS
//! RUNNING `t` -> COMPLETING `t` (`begin_completion`). Task ids are below 2^40 (ring
//! in bits 32..40, slot or graph index below), so the flag never meets an id.

use crate::engine::shared::EngineShared;
use crate::kernel::CoreKind;
use crate::sync::{AtomicU64, Ordering::*};
use crate::tensor::TaskId;

/// A core's state word when the core holds no task.
pub const CORE_IDLE: u64 = u64::MAX;
/// A core's state word while the core looks for a task (it may be about to hold one).
pub const CORE_SEARCHING: u64 = u64::MAX - 1;
/// A core's state word once the run gave up on it (terminal: nobody writes it again).
pub const CORE_ABANDONED: u64 = u64::MAX - 2;
/// The flag a core sets on its task's id in its state word once it won step 4's race:
/// it completes that task (the settle must wait for it).
pub const CORE_COMPLETING: u64 = 1 << 62;

/// The task a state word names, running or completing (None: idle, searching or
/// abandoned). For the stall reports and the orchestrator's probe.
#[inline]
pub fn task_of(state: u64) -> Option<TaskId> {
    (state < CORE_ABANDONED).then_some(TaskId(state & !CORE_COMPLETING))
}

/// Step 2, core side: say SEARCHING (SeqCst) *before* looking at the ready queues, then
/// pop; on an empty look say IDLE again. Returns the popped task.
#[inline]
#[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
pub fn search(state: &AtomicU64, eng: &EngineShared, kind: CoreKind) -> Option<TaskId> {
    search_or(
        state,
        eng,
        crate::engine::shared::queue_index(kind),
        false,
        || None,
    )
}

/// [`search`] for a core of queue index `q` (a kind's or a lane's), and where the ready
/// queues are empty `more()` (a direct replay's steal from another thread's deque), in
/// the same SEARCHING window. `all`: take the orchestrator's unpublished pushes too
/// ([`EngineShared::pop_queue_all`]).
#[inline]
pub fn search_or(
    state: &AtomicU64,
    eng: &EngineShared,
    q: usize,
    all: bool,
    more: impl FnOnce() -> Option<TaskId>,
) -> Option<TaskId> {
    state.store(CORE_SEARCHING, SeqCst);
    let popped = if all {
        eng.pop_queue_all(q)
    } else {
        eng.pop_queue(q)
    };
    let t = popped.or_else(more);
    if t.is_none() {
        state.store(CORE_IDLE, SeqCst);
    }
    t
}

/// Step 1, core side: may the core run `task`, which it holds (popped, or made ready by
/// its last completion)? Not once it read `fatal` up: the task is dropped and the core
/// says IDLE. Otherwise the state word names the task (RUNNING).
///
/// Why Release: a core that completed a task and keeps the next one goes from
/// COMPLETING straight to RUNNING, with no IDLE in between. If the settle gives up on
/// it now (`give_up_if_stuck`'s CAS, an acquire, reads this store), it does not wait
/// for the core; the release makes the last completion's arena accesses happen-before
/// the give-up, hence before the next run resets the arena.
#[inline]
pub fn admit(state: &AtomicU64, eng: &EngineShared, task: TaskId) -> bool {
    if eng.fatal.load(Acquire) {
        state.store(CORE_IDLE, SeqCst);
        return false;
    }
    state.store(task.0, Release);
    true
}

/// Step 4, core side: right after `task`'s kernel returned (at once for a task with no
/// kernel), before anything else touches the arena or the run: CAS RUNNING `task` ->
/// COMPLETING `task`. True: the core won and completes the task (the settle waits for
/// it); false: the run gave up on the core first (the word is ABANDONED), and the core
/// touches nothing more.
///
/// Ordering: the decision needs none — both sides are RMWs on this one word, so its
/// modification order puts exactly one of them first and the other reads its value and
/// fails. A core that won is published by its IDLE store (`release`, SeqCst), which the
/// settle's wait reads (SeqCst load): everything the completion did happens-before the
/// settle returns. SeqCst anyway: it costs the same locked instruction on x86 as any
/// RMW, and it keeps every access to the word in the one total order step 3 argues in.
#[inline]
pub fn begin_completion(state: &AtomicU64, task: TaskId) -> bool {
    state
        .compare_exchange(task.0, task.0 | CORE_COMPLETING, SeqCst, SeqCst)
        .is_ok()
}

/// Step 4, core side: was this core given up on? (Its own word: once it lost the race
/// of [`begin_completion`] it reads ABANDONED, which nobody overwrites.)
#[inline]
pub(crate) fn is_abandoned(state: &AtomicU64) -> bool {
    state.load(SeqCst) == CORE_ABANDONED
}

/// Step 2, core side: the core holds no task any more (its task completed with no next
/// task to keep, or failed).
#[inline]
pub fn release(state: &AtomicU64) {
    state.store(CORE_IDLE, SeqCst);
}

/// Step 3, the caller's look at one core (SeqCst load): does it hold a task the caller
/// must wait for? Searching, running or completing: yes; an abandoned core is not
/// waited for.
#[inline]
pub fn holds_task(state: &AtomicU64) -> bool {
    let s = state.load(SeqCst);
    s != CORE_IDLE && s != CORE_ABANDONED
}

/// Step 4, caller side: give up on a core whose state word still names a RUNNING task:
/// CAS that task -> ABANDONED (SeqCst); true if it did. A core that is completing (it
/// won the race, see [`begin_completion`]), idle or searching is not given up on: the
/// settle waits for it instead.
///
/// Ordering: a failed CAS read a value at least as late as the core's COMPLETING (or a
/// later word of the core); the settle's next looks at the word (`holds_task`) come
/// after it in this thread, so by read-read coherence they never see an older RUNNING
/// or IDLE: the settle sees the core busy until the core's own IDLE store. A CAS that
/// succeeded is first in the word's order, so the core's `begin_completion` fails.
#[inline]
#[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
pub fn give_up_if_stuck(state: &AtomicU64) -> bool {
    give_up_task(state).is_some()
}

/// [`give_up_if_stuck`], returning the task the core was given up on.
#[inline]
pub fn give_up_task(state: &AtomicU64) -> Option<TaskId> {
    let s = state.load(SeqCst);
    (s < CORE_COMPLETING
        && state
            .compare_exchange(s, CORE_ABANDONED, SeqCst, SeqCst)
            .is_ok())
    .then_some(TaskId(s))
}

/// Step 5, caller side (after the drain, the wait for IDLE and the arena's publication):
/// clear the failure, then lift `fatal` (SeqCst).
#[inline]
pub fn reopen(eng: &EngineShared) {
    *eng.failure.lock() = None;
    eng.fatal.store(false, SeqCst);
}
