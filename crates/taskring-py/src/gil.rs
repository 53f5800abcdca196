//! The GIL around waits. An orchestration runs on the caller's thread holding the GIL;
//! whenever the runtime waits (a full ring, the end of a run, a chip's answer) and
//! whenever a Python thread waits for a lock or a message, the GIL is released, so
//! Python kernels on core threads can take it. A thread waiting for a lock, an L3 or L4
//! run, or an MPI message also runs the signal handlers meanwhile, so Ctrl-C interrupts
//! the wait. Host arrays are used in place (zero copy): a run keeps references to them
//! until it returns.

use crate::errors::PendingErr;
use parking_lot::{Mutex, MutexGuard};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
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

/// A worker's lock, held for a whole run, that knows which thread holds it.
///
/// A run's orchestration runs on the thread that holds the lock. A call from there that
/// needs the lock (`close()`, `run()` on the worker whose run is calling) would wait for
/// the run, which waits for the orchestration to return: it is refused at once with a
/// `RuntimeError` ([`reentered`]). Other threads wait for their turn as
/// [`lock_detached`] does.
pub struct RunLock<T> {
    m: Mutex<T>,
    /// The [`thread_key`] of the thread holding `m`, 0 when none. Written only by that
    /// thread (when it takes and lets go of `m`); other threads read it only to compare
    /// with their own key, which it never equals.
    holder: AtomicU64,
}

/// Guard of a [`RunLock`]: clears the holder before the lock is let go.
pub struct RunGuard<'a, T> {
    g: MutexGuard<'a, T>,
    holder: &'a AtomicU64,
}

impl<T> std::ops::Deref for RunGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.g
    }
}

impl<T> std::ops::DerefMut for RunGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.g
    }
}

impl<T> Drop for RunGuard<'_, T> {
    fn drop(&mut self) {
        self.holder.store(0, Relaxed);
    }
}

impl<T: Send> RunLock<T> {
    pub fn new(v: T) -> Self {
        RunLock {
            m: Mutex::new(v),
            holder: AtomicU64::new(0),
        }
    }

    /// Does this thread hold the lock (is it running this worker's orchestration)?
    pub fn held_here(&self) -> bool {
        self.holder.load(Relaxed) == thread_key()
    }

    /// `RuntimeError` when this thread holds the lock: `call` (e.g. `"close()"`) was
    /// made from inside the worker's own orchestration.
    pub fn check_not_held_here(&self, call: &str) -> PyResult<()> {
        if self.held_here() {
            return Err(reentered(call));
        }
        Ok(())
    }

    /// Take the lock for `call`: refused at once on the thread that holds it, else as
    /// [`lock_detached`] (the GIL released, Ctrl-C raises).
    pub fn lock<'a>(&'a self, py: Python<'_>, call: &str) -> PyResult<RunGuard<'a, T>> {
        self.check_not_held_here(call)?;
        let g = lock_detached(py, &self.m)?;
        self.holder.store(thread_key(), Relaxed);
        Ok(RunGuard {
            g,
            holder: &self.holder,
        })
    }

    /// The lock without waiting (a child of `fork()`, where its holder may be a thread
    /// that no longer exists).
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.m.try_lock()
    }

    /// The value, through exclusive access (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        self.m.get_mut()
    }
}

/// The `RuntimeError` of a call made from inside the orchestration of the worker's own
/// run (`docs/api.md` §6.1).
pub fn reentered(call: &str) -> PyErr {
    PyRuntimeError::new_err(format!(
        "{call} was called from inside this worker's own orchestration: it would wait for \
         the run in progress, which waits for the orchestration to return; call it after \
         run() returns"
    ))
}

/// A key of the calling thread, unique in the process and never 0.
fn thread_key() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static KEY: u64 = NEXT.fetch_add(1, Relaxed);
    }
    KEY.with(|k| *k)
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
