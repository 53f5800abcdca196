//! The resident chip behind a `ChipWorker`, shared with the programs captured on it: the
//! Rust `ChipWorker` behind its lock (taken with the GIL released; refused on the thread
//! whose run holds it, see [`RunLock`]), the process it belongs to, and the arguments of
//! failed runs whose kernels may still write them.

use crate::errors::forked_err;
use crate::gil::{RunGuard, RunLock};
use pyo3::prelude::*;
use taskring::ChipWorker;

/// A resident simulated chip: None once closed.
///
/// Calls are serialised by the lock (a thread waits for its turn without the GIL; the
/// run's own orchestration calling back into its worker is refused at once). A
/// chip belongs to the process that made it: after `fork()` the child has none of its
/// threads, so every call there fails at once, and dropping it in the child frees
/// nothing the parent still owns.
pub struct Resident {
    chip: RunLock<Option<ChipWorker>>,
    pid: u32,
    /// The arguments (a run's list, a replay's tuple) of failed runs after which the chip
    /// had kernels set aside (`ChipWorker::stuck_kernels`): such a kernel may still
    /// write the caller's arrays, so they stay referenced (numpy cannot free and reuse
    /// their memory) until no kernel is set aside.
    kept: parking_lot::Mutex<Vec<Py<PyAny>>>,
}

impl Resident {
    pub fn new(chip: ChipWorker) -> Self {
        Resident {
            chip: RunLock::new(Some(chip)),
            pid: std::process::id(),
            kept: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// After a run or replay with `args` on `chip`: keep `args` referenced when the run
    /// `failed` and a kernel is set aside; let every kept argument go once none is.
    pub fn keep_args_while_stuck(
        &self,
        chip: &mut ChipWorker,
        failed: bool,
        args: &Bound<'_, PyAny>,
    ) {
        let stuck = !chip.stuck_kernels().is_empty();
        let mut kept = self.kept.lock();
        if !stuck {
            kept.clear();
        } else if failed {
            kept.push(args.clone().unbind());
        }
    }

    /// The chip is closing: if a kernel is still set aside, its arrays are never let go
    /// (it may write them whenever it returns); else they are let go now.
    pub fn release_kept_at_close(&self, chip: &mut ChipWorker) {
        let kept = std::mem::take(&mut *self.kept.lock());
        if chip.stuck_kernels().is_empty() {
            drop(kept);
        } else {
            std::mem::forget(kept);
        }
    }

    /// `RuntimeError` in a process other than the one that made the chip.
    pub fn check_process(&self) -> PyResult<()> {
        if self.forked() {
            return Err(forked_err("ChipWorker", self.pid));
        }
        Ok(())
    }

    /// Whether this is a child of `fork()` of the process that made the chip.
    pub fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    /// The chip (None once closed), locked for this thread to do `call` (e.g.
    /// `"run()"`, named in the refusal); waits for a run in flight with the GIL
    /// released.
    pub fn lock<'a>(
        &'a self,
        py: Python<'_>,
        call: &str,
    ) -> PyResult<RunGuard<'a, Option<ChipWorker>>> {
        self.chip.lock(py, call)
    }

    /// Is this thread running an orchestration on the chip?
    pub fn held_here(&self) -> bool {
        self.chip.held_here()
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        if self.forked() {
            // A forked child: the core threads exist only in the parent, so joining them
            // would wait forever. The memory is the child's copy; leave it to exit.
            std::mem::forget(self.chip.get_mut().take());
        }
    }
}
