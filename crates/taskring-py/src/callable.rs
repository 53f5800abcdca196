//! C++ programs for the Python face (`docs/api.md` §13): `_native.CoreCallable` (a
//! kernel library) and `_native.ChipCallable` (an orchestration library with its
//! kernels by func_id). A `ChipCallable` is accepted wherever a Python orchestration is:
//! `ChipWorker.run`/`capture` and an L3 node's callables ([`program_of`]).

use crate::conversion::arg_dirs;
use crate::errors::PendingErr;
use crate::orchestrator::python_program;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::sync::{Arc, Mutex};
use taskring::pto2::Binary;
use taskring::{CallableError, ChipCallable, CoreCallable, CoreKind, Program};

/// A library given as bytes or as a path (`str` or `os.PathLike`).
enum Lib {
    Bytes(Vec<u8>),
    Path(std::path::PathBuf),
}

impl Lib {
    fn of(obj: &Bound<'_, PyAny>) -> PyResult<Lib> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Lib::Bytes(b.as_bytes().to_vec()));
        }
        if let Ok(p) = obj.extract::<std::path::PathBuf>() {
            return Ok(Lib::Path(p));
        }
        if let Ok(b) = obj.extract::<Vec<u8>>() {
            return Ok(Lib::Bytes(b));
        }
        Err(PyValueError::new_err(
            "binary must be the bytes of a shared library or its path",
        ))
    }
    fn binary(&self) -> Binary<'_> {
        match self {
            Lib::Bytes(b) => Binary::Bytes(b),
            Lib::Path(p) => Binary::Path(p),
        }
    }
}

/// A library the loader refuses or that lacks a symbol is an `OSError`; anything else a
/// `ValueError`.
fn load_err(e: CallableError) -> PyErr {
    match e {
        CallableError::Missing { .. }
        | CallableError::Open { .. }
        | CallableError::Write { .. } => PyOSError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// A kernel library (`kernel_entry`), its core type (`"aic"` or `"aiv"`) and signature
/// (directions: 0 in, 1 out, 2 inout, 3 scalar).
#[pyclass(name = "CoreCallable", module = "taskring._native", frozen)]
pub struct PyCoreCallable {
    pub(crate) inner: CoreCallable,
}

#[pymethods]
impl PyCoreCallable {
    #[new]
    #[pyo3(signature = (binary, core_type="aiv", signature=vec![]))]
    fn new(binary: &Bound<'_, PyAny>, core_type: &str, signature: Vec<u32>) -> PyResult<Self> {
        let core = match core_type.to_ascii_lowercase().as_str() {
            "aic" => CoreKind::Aic,
            "aiv" => CoreKind::Aiv,
            other => {
                return Err(PyValueError::new_err(format!(
                    "core_type must be 'aic' or 'aiv', got '{other}'"
                )))
            }
        };
        let lib = Lib::of(binary)?;
        let sig = arg_dirs(signature)?;
        let inner = CoreCallable::load(lib.binary(), core, &sig).map_err(load_err)?;
        Ok(PyCoreCallable { inner })
    }

    #[getter]
    fn core_type(&self) -> &'static str {
        match self.inner.core() {
            CoreKind::Aic => "aic",
            _ => "aiv",
        }
    }

    #[getter]
    fn sig_count(&self) -> usize {
        self.inner.signature().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "CoreCallable(core_type='{}', sig_count={})",
            self.core_type(),
            self.sig_count()
        )
    }
}

/// An orchestration library: its entry `func_name`, signature and kernels
/// `children = [(func_id, CoreCallable), ...]`.
#[pyclass(name = "ChipCallable", module = "taskring._native", frozen)]
pub struct PyChipCallable {
    pub(crate) inner: ChipCallable,
}

#[pymethods]
impl PyChipCallable {
    #[new]
    #[pyo3(signature = (binary, func_name="aicpu_orchestration_entry", signature=vec![], children=None))]
    fn new(
        binary: &Bound<'_, PyAny>,
        func_name: &str,
        signature: Vec<u32>,
        children: Option<&Bound<'_, PyList>>,
    ) -> PyResult<Self> {
        let lib = Lib::of(binary)?;
        let sig = arg_dirs(signature)?;
        let mut kids = Vec::new();
        if let Some(c) = children {
            for item in c.iter() {
                let (id, k): (i32, Bound<'_, PyCoreCallable>) = item.extract().map_err(|_| {
                    PyValueError::new_err("children must be (func_id, CoreCallable) pairs")
                })?;
                kids.push((id, k.get().inner.clone()));
            }
        }
        let inner = ChipCallable::load(lib.binary(), func_name, &sig, kids).map_err(load_err)?;
        Ok(PyChipCallable { inner })
    }

    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    #[getter]
    fn sig_count(&self) -> usize {
        self.inner.signature().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "ChipCallable(name='{}', sig_count={})",
            self.inner.name(),
            self.sig_count()
        )
    }
}

/// The program of `orch`: a `ChipCallable`'s, else the Python orchestration's (with the
/// slot its raised exception is kept in).
pub fn program_of(orch: Py<PyAny>, name: &str) -> (Program, Arc<PendingErr>) {
    let cpp = Python::attach(|py| {
        orch.bind(py)
            .cast::<PyChipCallable>()
            .ok()
            .map(|c| c.get().inner.program())
    });
    match cpp {
        Some(p) => (p, Arc::new(Mutex::new(None))),
        None => python_program(orch, name),
    }
}
