//! The caller's hook around a next-level run's blocking waits (how a Python caller
//! releases the GIL and sees Ctrl-C), and the waits that call it.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A hook called around the runtime's blocking waits (see `ChipWorker::run_with_hook`).
pub(crate) type BlockingHook = Arc<dyn Fn(bool) + Send + Sync>;

/// How often the caller of a next-level run calls its blocking hook while it waits.
pub(crate) const HOOK_SLICE: Duration = Duration::from_millis(50);

/// A run's hook and when a wait last called it.
type PolledHook = (&'static dyn Fn(bool), Instant);

thread_local! {
    /// The hook of the run whose orchestrator thread is running dispatches itself
    /// ([`help_at_end`]), which that thread is inside the blocking part of, and when it
    /// was last called ([`poll_inline_hook`]).
    static INLINE_HOOK: std::cell::Cell<Option<PolledHook>> =
        const { std::cell::Cell::new(None) };
}

/// How often a wait inside an inline dispatch lets the run's hook look at its caller.
const INLINE_POLL: Duration = Duration::from_millis(20);

/// Once a run's program has nothing more to submit, run the dispatches still queued on
/// this thread (`help`: `Orchestrator::help_at_end`, which releases the hook around each)
/// until none is left or `cancelled()`: a one-task run then costs no hand-off to a
/// dispatch thread and back. Meanwhile the waits of those dispatches call `hook`
/// between slices ([`poll_inline_hook`]), as the run's own wait would.
pub(crate) fn help_at_end(
    help: Option<&dyn Fn() -> bool>,
    hook: Option<&'static dyn Fn(bool)>,
    cancelled: impl Fn() -> bool,
) {
    let Some(help) = help else {
        return;
    };
    // Cleared on every way out, a panic included: the hook does not outlive the run.
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            INLINE_HOOK.with(|c| c.set(None));
        }
    }
    let _clear = Clear;
    INLINE_HOOK.with(|c| c.set(hook.map(|h| (h, Instant::now()))));
    while !cancelled() {
        if !help() {
            break;
        }
    }
}

/// In a wait of a dispatch run by [`help_at_end`]: at most every [`INLINE_POLL`], leave
/// and re-enter the hook's blocking part (a Python caller's Ctrl-C is seen there and
/// cancels the run). Elsewhere (a dispatch thread) nothing.
pub(crate) fn poll_inline_hook() {
    INLINE_HOOK.with(|c| {
        if let Some((h, last)) = c.get() {
            if last.elapsed() >= INLINE_POLL {
                h(false);
                h(true);
                c.set(Some((h, Instant::now())));
            }
        }
    });
}

/// The run's hook, carried into the (`'static`) program of one run.
#[derive(Clone, Copy)]
pub(crate) struct HookRef(Option<&'static dyn Fn(bool)>);
// safety: the hook is only called on the thread that runs the program, which is the
// thread that called the run (the engine runs the orchestration on its caller), so the
// value never takes the hook to another thread in use.
unsafe impl Send for HookRef {}
// safety: as for Send: every copy is used on the calling thread only.
unsafe impl Sync for HookRef {}

impl HookRef {
    /// The hook as `'static` for the program of one run.
    ///
    /// # Safety
    /// The program (and so every copy of this value) must not outlive `hook`: the
    /// engine runs the program on the calling thread and keeps nothing of it after the
    /// run returns.
    pub(crate) unsafe fn erase(hook: Option<&dyn Fn(bool)>) -> HookRef {
        // safety: see the function's contract.
        HookRef(
            hook.map(|h| unsafe { std::mem::transmute::<&dyn Fn(bool), &'static dyn Fn(bool)>(h) }),
        )
    }

    pub(crate) fn get(self) -> Option<&'static dyn Fn(bool)> {
        self.0
    }
}

/// `f()` as a blocking wait of the calling thread: between `hook(true)` and `hook(false)`.
pub(crate) fn blocking<R>(hook: Option<&dyn Fn(bool)>, f: impl FnOnce() -> R) -> R {
    if let Some(h) = hook {
        h(true);
    }
    let r = f();
    if let Some(h) = hook {
        h(false);
    }
    r
}

/// Wait until `over(state)`: look (`spin`) first, then block on `cv` in slices of at
/// most [`HOOK_SLICE`], calling the hook around each slice (how a Python caller sees
/// Ctrl-C).
pub(crate) fn wait_over<S>(
    state: &Mutex<S>,
    cv: &Condvar,
    over: impl Fn(&S) -> bool,
    spin: crate::chip::spin::SpinThenPark,
    hook: Option<&dyn Fn(bool)>,
) {
    if spin.spin(|| over(&state.lock())) {
        return;
    }
    while !blocking(hook, || {
        let mut st = state.lock();
        if !over(&st) {
            cv.wait_for(&mut st, HOOK_SLICE);
        }
        over(&st)
    }) {}
}
