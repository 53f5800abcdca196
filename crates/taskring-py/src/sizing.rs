//! The sizing advisor for Python: `SizingAdvice` (`taskring::dfx::advise` over a
//! scope-stats file's text, typed) and `sizing_command`, the command
//! `taskring::dfx::sizing_command` behind `python -m taskring sizing`, so that the
//! command, `taskring report` and `taskring.suggest_sizing` are one implementation.

use crate::reports::{peak_py, PyPeak};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyString, PyTuple};
use taskring::dfx::{self, RESOURCES};
use taskring::PeakUse;

/// Run `taskring sizing <args>`: `(exit status, stdout text, stderr text)`.
#[pyfunction]
pub fn sizing_command(args: Vec<String>) -> (u8, String, String) {
    let o = dfx::sizing_command(&args);
    (o.status, o.stdout, o.stderr)
}

/// The advisor's suggested ring sizes for a run's scope stats (`text`: the whole
/// `scope_stats.jsonl`), with `headroom` a factor >= 1 on the recorded peaks (default
/// 1.25): a str is read as `taskring sizing --headroom` reads it, a float is checked by
/// the same rule. A bad headroom or a text that is not scope stats is a `ValueError`
/// with the command's words (the latter begun with `path: ` when the text is a file's).
#[pyclass(module = "taskring", name = "SizingAdvice", frozen)]
pub struct PySizingAdvice {
    inner: dfx::SizingAdvice,
}

fn t4(v: [u64; 4]) -> (u64, u64, u64, u64) {
    (v[0], v[1], v[2], v[3])
}

#[pymethods]
impl PySizingAdvice {
    #[new]
    #[pyo3(signature = (text, headroom=None, path=None))]
    fn new(text: &str, headroom: Option<&Bound<'_, PyAny>>, path: Option<&str>) -> PyResult<Self> {
        let headroom = match headroom {
            None => dfx::DEFAULT_HEADROOM,
            // A number is checked as its repr would be on the command line.
            Some(h) => {
                let spelled = match h.cast::<PyString>() {
                    Ok(s) => s.to_str()?.to_owned(),
                    Err(_) => PyFloat::new(h.py(), h.extract::<f64>()?)
                        .repr()?
                        .to_str()?
                        .to_owned(),
                };
                dfx::check_headroom(&spelled).map_err(PyValueError::new_err)?
            }
        };
        let peaks = dfx::read_peaks(text).map_err(|e| {
            PyValueError::new_err(match path {
                Some(p) => format!("{p}: {e}"),
                None => e,
            })
        })?;
        Ok(PySizingAdvice {
            inner: dfx::advise(&peaks, headroom),
        })
    }

    /// The three ring resources of a scope-stats file, in contract order:
    /// `(key, label, unit, field)` with `key` naming the file's columns (`{key}_max`,
    /// `peak_{key}`) and `field` the `runtime_env` field.
    #[classattr]
    #[allow(non_snake_case)]
    fn RESOURCES(py: Python<'_>) -> PyResult<Py<PyTuple>> {
        let rows = RESOURCES
            .iter()
            .map(|r| PyTuple::new(py, [r.key, r.label, r.unit, r.field.name()]))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyTuple::new(py, rows)?.unbind())
    }

    /// The suggested task window per ring.
    #[getter]
    fn task_window(&self) -> (u64, u64, u64, u64) {
        t4(self.inner.task_window)
    }
    /// The suggested heap per ring (bytes).
    #[getter]
    fn heap(&self) -> (u64, u64, u64, u64) {
        t4(self.inner.heap)
    }
    /// The suggested dependency pool per ring.
    #[getter]
    fn dep_pool(&self) -> (u64, u64, u64, u64) {
        t4(self.inner.dep_pool)
    }
    /// The factor on the recorded peaks.
    #[getter]
    fn headroom(&self) -> f64 {
        self.inner.headroom
    }
    /// The recorded peaks per ring the advice is for (a failed run's cover the part
    /// that ran).
    #[getter]
    fn peak(&self) -> PyPeak {
        let p = &self.inner.peaks;
        peak_py(&PeakUse {
            task_window: p.task_window,
            heap: p.heap,
            dep_pool: p.dep_pool,
        })
    }
    /// Needs no valid size holds: `(field, ring, need, largest valid size)`; the
    /// suggestion for them is that largest size, still too small.
    #[getter]
    fn unfit(&self) -> Vec<(&'static str, usize, u64, u64)> {
        self.inner
            .unfit
            .iter()
            .map(|u| (u.field, u.ring, u.need, u.max))
            .collect()
    }
    /// The advisor's notes, one sentence each (recorded peaks, the failure, needs no
    /// valid size holds, the headroom).
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.inner.notes()
    }
    /// The suggestion as `RunConfig` / `CallConfig.runtime_env` fields: per field one
    /// int when the rings agree, else a list of four.
    #[getter]
    fn runtime_env<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for r in RESOURCES {
            match dfx::SizingAdvice::one_or_four(self.inner.sizes(r.field)) {
                Ok(v) => d.set_item(r.field.name(), v)?,
                Err(v) => d.set_item(r.field.name(), v.to_vec())?,
            }
        }
        Ok(d)
    }
    /// The suggestion as a line `runtime_env = {...}` (a scene-test case's config).
    #[getter]
    fn runtime_env_line(&self) -> String {
        self.inner.runtime_env()
    }
    /// The suggestion as `PTO2_RING_*=...` lines.
    #[getter]
    fn env_lines(&self) -> Vec<String> {
        self.inner.env_lines().lines().map(str::to_owned).collect()
    }
    /// What `taskring sizing` prints for the file.
    fn __str__(&self) -> String {
        self.inner.report()
    }
    fn __repr__(&self) -> String {
        format!(
            "SizingAdvice(task_window={:?}, heap={:?}, dep_pool={:?}, headroom={})",
            self.inner.task_window, self.inner.heap, self.inner.dep_pool, self.inner.headroom
        )
    }
}
