//! `CapturedProgram`: a program's task graph recorded by `ChipWorker.capture`, replayed
//! on the worker that captured it (`docs/api.md` §10; the engine side is
//! taskring's recorded graphs).

use crate::config::{call_config_of, PyCallConfig};
use crate::conversion::host_args;
use crate::errors::{run_err, PendingErr};
use crate::kernel::interrupt_python_kernels;
use crate::reports::{peak_py, report_py, PyPeak, PyRunReport};
use crate::resident::Resident;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyTuple};
use std::sync::Arc;
use taskring::{Captured, ReplayError};

/// A captured program (see `ChipWorker.capture`).
#[pyclass(module = "taskring", name = "CapturedProgram", frozen)]
pub struct PyCaptured {
    g: Captured,
    /// The chip it was captured on (once closed, replays are refused).
    chip: Arc<Resident>,
}

impl PyCaptured {
    pub fn new(g: Captured, chip: Arc<Resident>) -> PyCaptured {
        PyCaptured { g, chip }
    }
}

#[pymethods]
impl PyCaptured {
    /// Recorded tasks (including alloc and dummy tasks).
    #[getter]
    fn tasks(&self) -> usize {
        self.g.tasks()
    }

    /// Recorded dependency edges (one per producer-consumer pair).
    #[getter]
    fn edges(&self) -> usize {
        self.g.edges()
    }

    /// The highest use per ring of the recorded run.
    #[getter]
    fn ring_needs(&self) -> PyPeak {
        peak_py(&self.g.ring_needs())
    }

    /// The report of the capture run.
    #[getter]
    fn report(&self, py: Python<'_>) -> PyResult<PyRunReport> {
        report_py(py, self.g.report())
    }

    #[getter]
    fn name(&self) -> String {
        self.g.name().to_string()
    }

    /// A CallConfig whose runtime_env is exactly what the graph needs: replays under it
    /// never fail for capacity.
    fn exact_config(&self, py: Python<'_>) -> PyResult<PyCallConfig> {
        PyCallConfig::from_rust(py, &self.g.exact_config())
    }

    /// Replay with `args` (same count, shapes and dtypes as the capture; other arrays
    /// are fine) and `config` (None: the captured sizing).
    #[pyo3(signature = (*args, config=None))]
    fn replay(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        config: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyRunReport> {
        self.chip.check_process()?;
        let cfg = config.map(|c| call_config_of(py, Some(c))).transpose()?;
        for (i, a) in args.iter().enumerate() {
            let number = a.is_instance_of::<PyInt>() || a.is_instance_of::<PyFloat>();
            if self.g.scalar_at(i) == Some(true) && !number {
                return Err(PyTypeError::new_err(format!(
                    "argument {i}: program '{}' was captured with a scalar here (a replay runs with the captured value); pass an int or float, got {}",
                    self.g.name(),
                    a.get_type().name()?
                )));
            }
        }
        let host = host_args(args.iter())?;
        let mut guard = self.chip.lock(py, "replay()")?;
        let Some(w) = guard.as_mut() else {
            return Err(PyValueError::new_err(
                "this captured program's ChipWorker is closed; capture it again on an open worker",
            ));
        };
        // No Python runs on this thread during a replay (Python kernels take the GIL
        // on the core threads): release it for the whole replay, taking it back only
        // between the slices of its waits to run the signal handlers: an exception they
        // raise (Ctrl-C) interrupts the replay (`taskring::RunInterrupter`) and is
        // raised in place of its result.
        let g = &self.g;
        let interrupter = w.interrupter();
        let interrupt: PendingErr = Default::default();
        let hook = |blocking: bool| {
            if blocking {
                return;
            }
            Python::attach(|py| {
                if let Err(e) = py.check_signals() {
                    interrupt.lock().unwrap().get_or_insert(e);
                    interrupter.interrupt("a signal handler raised (Ctrl-C)");
                }
            });
        };
        let r = py.detach(|| g.replay_with_hook(w, &host, cfg.as_ref(), Some(&hook)));
        if r.is_err() {
            interrupt_python_kernels(py, &w.abandoned_threads());
        }
        self.chip
            .keep_args_while_stuck(w, r.is_err(), args.as_any());
        drop(guard);
        drop(host);
        if let Some(e) = interrupt.lock().unwrap().take() {
            return Err(e);
        }
        match r {
            Ok(rep) => report_py(py, &rep),
            Err(ReplayError::Run(e)) => Err(run_err(py, e)),
            Err(e) => Err(PyValueError::new_err(e.to_string())),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "CapturedProgram(name='{}', tasks={}, edges={})",
            self.g.name(),
            self.g.tasks(),
            self.g.edges()
        )
    }
}
