//! `Chip`, the native part of `taskring.ChipWorker`: a resident simulated chip that runs
//! Python orchestrations (L2) and captures them for replay.

use crate::callable::program_of;
use crate::config::call_config_of;
use crate::conversion::host_args;
use crate::errors::{failure_err, raised_in_run, run_err, same_failure_said_fully, PendingErr};
use crate::gil::interrupt_hook;
use crate::kernel::interrupt_python_kernels;
use crate::replay::PyCaptured;
use crate::reports::{arena_stats_py, report_py, PyArenaStats, PyRunReport};
use crate::resident::Resident;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::sync::Arc;
use taskring::CallConfig;
use taskring::{Arg, ChipOptions, ChipWorker, Program, RingSizing, RunError};

/// A resident simulated chip (native part of `taskring.ChipWorker`).
///
/// One chip may be used from several Python threads: its calls are serialised by
/// `chip` (a thread waits for its turn without the GIL), and `close()` waits for the run
/// in flight. A call from the run's own orchestration that needs the chip (`close()`,
/// `run()`, `capture()`, a replay, `arena_stats`) raises `RuntimeError` at once. A chip
/// belongs to the process that made it: after `fork()` the child has none of its
/// threads, so every call there fails at once (and dropping it in the child frees
/// nothing the parent still owns).
#[pyclass(module = "taskring._native", name = "Chip", frozen)]
pub struct PyChip {
    chip: Arc<Resident>,
    /// The chip's core threads (a core given up on is replaced: the count stays).
    cores: usize,
}

/// An orchestration to run on the chip: `orchestration(rt, *args)` named `name`, with
/// `config` (a CallConfig, RunConfig or None).
struct Orchestration<'a, 'py> {
    /// The call, as a refusal names it (`"run()"`, `"capture()"`).
    call: &'static str,
    orchestration: Py<PyAny>,
    name: &'a str,
    args: &'a Bound<'py, PyList>,
    config: Option<&'a Bound<'py, PyAny>>,
}

impl PyChip {
    /// Run `o` on the chip through `go` (a run or a capture, given the blocking hook: the
    /// GIL released while the runtime waits, the signal handlers run between the wait's
    /// slices). Ctrl-C (an exception a signal handler raised) interrupts the run at once
    /// (`taskring::RunInterrupter`: a kernel still running is set aside) and is raised
    /// in place of its result, as is an exception the orchestration raised; a
    /// `KeyboardInterrupt` raised in the orchestration interrupts the run's wait for its
    /// kernels the same way.
    fn drive<R>(
        &self,
        py: Python<'_>,
        o: Orchestration<'_, '_>,
        go: impl FnOnce(
            &mut ChipWorker,
            &Program,
            &[Arg<'static>],
            &CallConfig,
            &dyn Fn(bool),
        ) -> Result<R, RunError>,
    ) -> PyResult<R> {
        self.chip.check_process()?;
        let cfg = call_config_of(py, o.config)?;
        let host = host_args(o.args.iter())?;
        let (program, pending) = program_of(o.orchestration, o.name);
        let mut guard = self.chip.lock(py, o.call)?;
        let chip = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("this ChipWorker is closed"))?;
        let on_signal = chip.interrupter();
        let (signal_hook, interrupt) =
            interrupt_hook(move || on_signal.interrupt("a signal handler raised (Ctrl-C)"));
        let on_raise = chip.interrupter();
        let raised = pending.clone();
        let hook = move |blocking: bool| {
            signal_hook(blocking);
            if !blocking && orchestration_interrupted(&raised) {
                on_raise.interrupt("the orchestration raised KeyboardInterrupt");
            }
        };
        let r = go(chip, &program, &host, &cfg, &hook);
        if r.is_err() {
            interrupt_python_kernels(py, &chip.abandoned_threads());
        }
        self.chip
            .keep_args_while_stuck(chip, r.is_err(), o.args.as_any());
        drop(guard);
        drop(host);
        if let Some(e) = raised_in_run(&interrupt, &pending, |_| false) {
            return Err(same_failure_said_fully(py, e, r.as_ref().err()));
        }
        r.map_err(|e| run_err(py, e))
    }
}

/// Did the orchestration raise `KeyboardInterrupt` (kept in `pending`)? Asked by the
/// run's blocking hook after a wait's slice, with the GIL taken back.
fn orchestration_interrupted(pending: &PendingErr) -> bool {
    let held = pending.lock().unwrap_or_else(|p| p.into_inner());
    held.as_ref().is_some_and(|e| {
        Python::attach(|py| e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py))
    })
}

#[pymethods]
impl PyChip {
    /// The least device memory a chip can have (bytes).
    #[classattr]
    const MIN_DEVICE_MEMORY: u64 = taskring::MIN_DEVICE_MEMORY;

    /// `prewarm`: CallConfigs (or RunConfigs) whose sizings are built now.
    #[new]
    /// `prewarm_if_fits`: a prewarm that does not fit the device memory is skipped with a
    /// warning instead of failing (the default sizing built when none was asked for).
    #[pyo3(signature = (cores=0, arena_cache_slots=4, prewarm=None, aic_cores=None, device_memory=None, prewarm_if_fits=false))]
    fn new(
        py: Python<'_>,
        cores: usize,
        arena_cache_slots: usize,
        prewarm: Option<&Bound<'_, PyAny>>,
        aic_cores: Option<usize>,
        device_memory: Option<u64>,
        prewarm_if_fits: bool,
    ) -> PyResult<Self> {
        let mut sizings: Vec<RingSizing> = vec![];
        if let Some(p) = prewarm {
            for c in p.try_iter()? {
                let c = call_config_of(py, Some(&c?))?;
                c.validate().map_err(|e| PyValueError::new_err(e.message))?;
                sizings.push(
                    RingSizing::resolve_from_process(&c.runtime_env)
                        .map_err(|e| PyValueError::new_err(e.message))?,
                );
            }
        }
        if arena_cache_slots == 0 {
            return Err(PyValueError::new_err("arena_cache_slots must be >= 1"));
        }
        let mut opts = ChipOptions {
            cores,
            aic_cores,
            arena_cache_slots,
            ..ChipOptions::default()
        };
        if prewarm_if_fits {
            opts.prewarm_if_fits = sizings;
        } else {
            opts.prewarm = sizings;
        }
        if let Some(b) = device_memory {
            opts.device_memory = b;
        }
        let chip = py
            .detach(|| ChipWorker::new(opts))
            .map_err(|f| failure_err(py, &f))?;
        Ok(PyChip {
            cores: chip.cores().len(),
            chip: Arc::new(Resident::new(chip)),
        })
    }

    /// Run `orchestration(rt, *args)` with `config` (a CallConfig, RunConfig or None).
    /// numpy arrays become Tensors (zero copy); ints and floats are passed through.
    #[pyo3(signature = (orchestration, name, args, config=None))]
    fn run(
        &self,
        py: Python<'_>,
        orchestration: Py<PyAny>,
        name: String,
        args: &Bound<'_, PyList>,
        config: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyRunReport> {
        let o = Orchestration {
            call: "run()",
            orchestration,
            name: &name,
            args,
            config,
        };
        let rep = self.drive(py, o, |chip, program, host, cfg, hook| {
            chip.run_with_hook(program, host, cfg, Some(hook))
        })?;
        report_py(py, &rep)
    }

    /// Run `orchestration(rt, *args)` once, as `run` does, and record its task graph.
    #[pyo3(signature = (orchestration, name, args, config=None))]
    fn capture(
        &self,
        py: Python<'_>,
        orchestration: Py<PyAny>,
        name: String,
        args: &Bound<'_, PyList>,
        config: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyCaptured> {
        let o = Orchestration {
            call: "capture()",
            orchestration,
            name: &name,
            args,
            config,
        };
        let g = self.drive(py, o, |chip, program, host, cfg, hook| {
            chip.capture_with_hook(program, host, cfg, Some(hook))
        })?;
        Ok(PyCaptured::new(g, self.chip.clone()))
    }

    /// The chip holds `nbytes` of device-resident buffers (the Simpler face's
    /// `malloc`): charged to its device memory, idle cached arenas evicted to make room;
    /// DEVICE_OUT_OF_MEMORY (and nothing changes) when they cannot fit.
    fn hold(&self, py: Python<'_>, nbytes: u64) -> PyResult<()> {
        self.chip.check_process()?;
        let mut guard = self.chip.lock(py, "hold")?;
        let chip = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("this ChipWorker is closed"))?;
        let r = chip.hold_resident_tensors(nbytes);
        drop(guard);
        r.map_err(|f| run_err(py, RunError::Failure(f)))
    }

    fn arena_stats(&self, py: Python<'_>) -> PyResult<PyArenaStats> {
        self.chip.check_process()?;
        let stats = self
            .chip
            .lock(py, "arena_stats")?
            .as_ref()
            .map(|c| c.arena_stats());
        arena_stats_py(
            py,
            stats.ok_or_else(|| PyRuntimeError::new_err("this ChipWorker is closed"))?,
        )
    }

    #[getter]
    fn cores(&self, py: Python<'_>) -> PyResult<usize> {
        if self.chip.held_here() {
            // Asked by the chip's own orchestration: the run holds the chip.
            return Ok(self.cores);
        }
        Ok(self
            .chip
            .lock(py, "cores")?
            .as_ref()
            .map(|c| c.cores().len())
            .unwrap_or(0))
    }

    /// Stop the chip (waits for a run in flight on another thread).
    /// In a forked child, closing forgets the parent's chip without touching it.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let chip = self.chip.lock(py, "close()")?.take();
        match chip {
            Some(c) if self.chip.forked() => std::mem::forget(c),
            Some(mut c) => {
                interrupt_python_kernels(py, &c.abandoned_threads());
                self.chip.release_kept_at_close(&mut c);
                py.detach(move || drop(c))
            }
            None => {}
        }
        Ok(())
    }

    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        // The chip's own orchestration asking: its run holds the chip, open.
        if self.chip.held_here() {
            return Ok(false);
        }
        Ok(self.chip.lock(py, "closed")?.is_none())
    }
}
