//! The abort handshake's steps (argued in the module doc of `chip/core.rs`), each a
//! function over [`crate::sync`] atomics and the engine's [`EngineShared`]: the chip's
//! core threads and its run call exactly these, and `tests/loom_chip.rs` drives the same
//! functions on loom threads. Public (hidden) only for that model.

use crate::engine::shared::EngineShared;
use crate::kernel::CoreKind;
use crate::sync::{AtomicBool, AtomicU64, Ordering::*};
use crate::tensor::TaskId;

/// A core's state word when the core holds no task.
pub const CORE_IDLE: u64 = u64::MAX;
/// A core's state word while the core looks for a task (it may be about to hold one).
pub const CORE_SEARCHING: u64 = u64::MAX - 1;

/// Step 2, core side: say SEARCHING (SeqCst) *before* looking at the ready queues, then
/// pop; on an empty look say IDLE again. Returns the popped task.
#[inline]
pub fn search(state: &AtomicU64, eng: &EngineShared, kind: CoreKind) -> Option<TaskId> {
    state.store(CORE_SEARCHING, SeqCst);
    let t = eng.pop_ready(kind);
    if t.is_none() {
        state.store(CORE_IDLE, SeqCst);
    }
    t
}

/// Step 1, core side: may the core run `task`, which it holds (popped, or made ready by
/// its last completion)? Not once it read `fatal` up: the task is dropped and the core
/// says IDLE. Otherwise the state word names the task.
#[inline]
pub fn admit(state: &AtomicU64, eng: &EngineShared, task: TaskId) -> bool {
    if eng.fatal.load(Acquire) {
        state.store(CORE_IDLE, SeqCst);
        return false;
    }
    state.store(task.0, Relaxed);
    true
}

/// Step 4, core side: read right after a kernel returns; true: the run gave up on this
/// core, which then touches nothing more.
#[inline]
pub fn given_up(abandoned: &AtomicBool) -> bool {
    abandoned.load(SeqCst)
}

/// Step 2, core side: the core holds no task any more (its task completed with no next
/// task to keep, or failed).
#[inline]
pub fn release(state: &AtomicU64) {
    state.store(CORE_IDLE, SeqCst);
}

/// Step 3, the caller's look at one core (SeqCst loads): does it hold a task the caller
/// must wait for? An abandoned core is not waited for.
#[inline]
pub fn holds_task(state: &AtomicU64, abandoned: &AtomicBool) -> bool {
    !abandoned.load(SeqCst) && state.load(SeqCst) != CORE_IDLE
}

/// Step 4, caller side: give up on a core whose state word still names a task (SeqCst
/// store of `abandoned`); true if it did.
#[inline]
pub fn give_up_if_stuck(state: &AtomicU64, abandoned: &AtomicBool) -> bool {
    if state.load(SeqCst) < CORE_SEARCHING {
        abandoned.store(true, SeqCst);
        true
    } else {
        false
    }
}

/// Step 5, caller side (after the drain, the wait for IDLE and the arena's publication):
/// clear the failure, then lift `fatal` (SeqCst).
#[inline]
pub fn reopen(eng: &EngineShared) {
    *eng.failure.lock() = None;
    eng.fatal.store(false, SeqCst);
}
