//! Python exceptions of the binding: taskring's errors as the exceptions the API names
//! (docs/api.md), and an orchestration's exception kept for the caller of its run.

use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;
use taskring::node::NodeError;
use taskring::ConfigError;
use taskring::{RunError, RuntimeFailure, StatusCode};

/// `taskring.RuntimeFailure` (defined in Python) built from a Rust failure.
pub fn failure_err(py: Python<'_>, f: &RuntimeFailure) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("taskring._errors")?.getattr("RuntimeFailure")?;
        let kw = PyDict::new(py);
        kw.set_item("code", f.code.code())?;
        kw.set_item("name", f.name())?;
        kw.set_item("ring", f.ring)?;
        kw.set_item("description", f.description())?;
        kw.set_item("hint", f.hint())?;
        kw.set_item("resource", f.resource.map(|r| r.name()))?;
        kw.set_item("configured", f.configured)?;
        kw.set_item("needed", f.needed)?;
        let e = cls.call((), Some(&kw))?;
        Ok(PyErr::from_value(e))
    };
    build().unwrap_or_else(|e| e)
}

/// Is `e` a `taskring.RuntimeFailure` with status `code`?
pub fn is_failure(py: Python<'_>, e: &PyErr, code: StatusCode) -> bool {
    let Ok(cls) = py
        .import("taskring._errors")
        .and_then(|m| m.getattr("RuntimeFailure"))
    else {
        return false;
    };
    let v = e.value(py);
    v.is_instance(&cls).unwrap_or(false)
        && v.getattr("code").ok().and_then(|c| c.extract::<u32>().ok()) == Some(code.code())
}

/// The error of a run whose orchestration let a failure raised by `submit` escape
/// (`pending`): when the run ended with a failure of the same code, the run's own
/// error, which says what the run adds (its outputs may be partly written; an "auto"
/// entry grows); else `pending` as it is.
pub fn same_failure_said_fully(py: Python<'_>, pending: PyErr, run: Option<&RunError>) -> PyErr {
    match run {
        Some(RunError::Failure(f)) if is_failure(py, &pending, f.code) => failure_err(py, f),
        _ => pending,
    }
}

/// A run's error: a broken configuration rule is a `ValueError`, a failure a
/// `taskring.RuntimeFailure`.
pub fn run_err(py: Python<'_>, e: RunError) -> PyErr {
    match e {
        RunError::Config(c) => PyValueError::new_err(c.message),
        RunError::Failure(f) => failure_err(py, &f),
    }
}

/// A broken configuration rule as the `ValueError` the contract names.
pub fn config_err(e: impl Into<ConfigError>) -> PyErr {
    PyValueError::new_err(e.into().message)
}

/// An L3 node's error as a Python exception.
pub fn node_err(py: Python<'_>, e: NodeError) -> PyErr {
    match e {
        // A broken rule or a use the node cannot serve: ValueError, the text unchanged.
        NodeError::Config(_)
        | NodeError::NoDevices
        | NodeError::NoSuchChip(_)
        | NodeError::Closed
        | NodeError::Start { .. } => PyValueError::new_err(e.to_string()),
        NodeError::Chip(f) => PyRuntimeError::new_err(f.to_string()),
        NodeError::Failure(f) => failure_err(py, &f),
        NodeError::Interrupted(m) => PyKeyboardInterrupt::new_err(m),
        NodeError::Forked(pid) => forked_err("Worker", pid),
    }
}

/// An L4 run's error (rank 0) as a Python exception.
#[cfg(feature = "mpi")]
pub fn cluster_err(py: Python<'_>, e: taskring::cluster::ClusterError) -> PyErr {
    use taskring::cluster::ClusterError;
    match e {
        ClusterError::Config(c) => PyValueError::new_err(c.message),
        ClusterError::Host(m) | ClusterError::Mpi(m) => PyRuntimeError::new_err(m),
        ClusterError::Failure(f) => failure_err(py, &f),
        ClusterError::Interrupted(m) => PyKeyboardInterrupt::new_err(m),
        ClusterError::Closed => PyRuntimeError::new_err("this Worker is closed"),
    }
}

/// An MPI failure as a `RuntimeError`.
#[cfg(feature = "mpi")]
pub fn mpi_err(e: String) -> PyErr {
    PyRuntimeError::new_err(e)
}

/// `RuntimeError` for an object used in a process other than the one that created it.
pub fn forked_err(what: &str, pid: u32) -> PyErr {
    PyRuntimeError::new_err(format!(
        "this {what} was created in process {pid}; it cannot be used after fork()"
    ))
}

/// `Type: value` of a Python exception (the text a failed task or run carries).
pub fn py_err_text(py: Python<'_>, e: &PyErr) -> String {
    let ty = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    format!("{ty}: {}", e.value(py))
}

/// The Python error raised by an orchestration, kept until its run returns.
pub type PendingErr = Mutex<Option<PyErr>>;

/// After an L3 or L4 run: the exception its caller raises instead of the run's own
/// result, if any — Ctrl-C first (`interrupt`, from `gil::interrupt_hook`), then the
/// orchestration's exception (`pending`) unless `run_explains(e)`: the run's own failure
/// is the better report (e.g. the orchestration only re-raised a chip's latched failure).
pub fn raised_in_run(
    interrupt: &PendingErr,
    pending: &PendingErr,
    run_explains: impl FnOnce(&PyErr) -> bool,
) -> Option<PyErr> {
    if let Some(e) = interrupt.lock().unwrap().take() {
        return Some(e);
    }
    let e = pending.lock().unwrap().take()?;
    (!run_explains(&e)).then_some(e)
}

/// An orchestration's exception, turned into the run's failure (EXPLICIT_ORCH_FATAL with
/// its text) and kept in `pending` for the caller to raise; a KeyboardInterrupt also
/// calls `cancel()`.
pub fn orchestration_failed(
    py: Python<'_>,
    e: PyErr,
    pending: &PendingErr,
    cancel: &dyn Fn(),
) -> RuntimeFailure {
    let text = format!("the orchestration raised: {}", e.value(py));
    if e.is_instance_of::<PyKeyboardInterrupt>(py) {
        cancel();
    }
    *pending.lock().unwrap() = Some(e);
    RuntimeFailure::new(StatusCode::ExplicitOrchFatal, None, text)
}
