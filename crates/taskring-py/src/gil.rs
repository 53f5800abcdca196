//! The GIL around waits. An orchestration runs on the caller's thread holding the GIL;
//! whenever the runtime waits (a full ring, the end of a run, a chip's answer) and
//! whenever a Python thread waits for a lock or a message, the GIL is released, so
//! Python kernels on core threads can take it. A thread waiting for a lock, an L3 or L4
//! run, or an MPI message also runs the signal handlers meanwhile, so Ctrl-C interrupts
//! the wait. Host arrays are used in place (zero copy): a run keeps references to them
//! until it returns.

use crate::errors::PendingErr;
use parking_lot::{Mutex, MutexGuard};
use pyo3::prelude::*;
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// How often a thread waiting without the GIL runs the signal handlers.
pub const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// Take `m` for this thread, waiting for it with the GIL released (the holder may be a
/// run that needs the GIL for its Python kernels). While it waits, the signal handlers
/// run every [`SIGNAL_CHECK`]; an exception they raise (Ctrl-C) ends the wait and is
/// returned.
pub fn lock_detached<'a, T: Send>(py: Python<'_>, m: &'a Mutex<T>) -> PyResult<MutexGuard<'a, T>> {
    loop {
        if let Some(g) = m.try_lock() {
            return Ok(g);
        }
        // A guard cannot leave the GIL-free closure: wait there until the holder lets
        // go (or the interval ends), then take the lock here, holding the GIL.
        py.detach(|| m.try_lock_for(SIGNAL_CHECK).map(drop));
        py.check_signals()?;
    }
}

thread_local! {
    static SAVED_THREAD_STATE: Cell<*mut pyo3::ffi::PyThreadState> = const { Cell::new(std::ptr::null_mut()) };
}

/// The runtime's blocking hook for Python: release the GIL around a wait if this
/// thread holds it, take it back after.
pub fn gil_hook(blocking: bool) {
    // safety: PyGILState_Check is callable without the GIL; SaveThread is only called
    // when this thread holds the GIL, and RestoreThread only with the state it saved.
    unsafe {
        if blocking {
            if pyo3::ffi::PyGILState_Check() == 1 {
                SAVED_THREAD_STATE.with(|c| c.set(pyo3::ffi::PyEval_SaveThread()));
            }
        } else {
            let st = SAVED_THREAD_STATE.with(|c| c.replace(std::ptr::null_mut()));
            if !st.is_null() {
                pyo3::ffi::PyEval_RestoreThread(st);
            }
        }
    }
}

/// The blocking hook of an L3 or L4 run on a Python thread: releases the GIL around each
/// wait, and after a wait runs the signal handlers (at least every [`SIGNAL_CHECK`]
/// while the run waits); an exception they raise (Ctrl-C) is kept in the returned slot
/// and `cancel()` stops the run, which then raises it.
pub fn interrupt_hook(
    cancel: impl Fn() + Send + Sync + 'static,
) -> (impl Fn(bool) + Send + Sync + 'static, Arc<PendingErr>) {
    let interrupt: Arc<PendingErr> = Arc::default();
    let intr = interrupt.clone();
    let hook = move |blocking: bool| {
        gil_hook(blocking);
        if !blocking
            // safety: PyGILState_Check may be called from any thread, GIL held or not.
            && unsafe { pyo3::ffi::PyGILState_Check() } == 1
            // safety: reached only when the check above says this thread holds the GIL,
            // which PyErr_CheckSignals needs (it does nothing off the main thread).
            && unsafe { pyo3::ffi::PyErr_CheckSignals() } != 0
        {
            let e = Python::attach(PyErr::fetch);
            intr.lock().unwrap().get_or_insert(e);
            cancel();
        }
    };
    (hook, interrupt)
}

/// A give-up check for waits with the GIL released: every [`SIGNAL_CHECK`] it runs the
/// signal handlers; an exception they raise is kept in `pending` and ends the wait.
#[cfg(feature = "mpi")]
pub fn signal_check(pending: &Mutex<Option<PyErr>>) -> impl FnMut() -> bool + '_ {
    let mut last = std::time::Instant::now();
    move || {
        if last.elapsed() < SIGNAL_CHECK {
            return false;
        }
        last = std::time::Instant::now();
        Python::attach(|py| match py.check_signals() {
            Ok(()) => false,
            Err(e) => {
                *pending.lock() = Some(e);
                true
            }
        })
    }
}
