//! Tensor handles of an orchestration (`Tensor`, views of the runtime's or the caller's
//! memory, valid only inside their run) and runtime-output specs (`TensorSpec`).

use crate::conversion::{bounded_int, parse_dtype, parse_shape};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};
use std::sync::atomic::{AtomicU64, Ordering};
use taskring::Tensor;
use taskring::TensorSpec;

/// A tensor handle inside an orchestration (a view; never owns memory).
#[pyclass(module = "taskring", name = "Tensor", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PyTensor {
    pub t: Tensor,
    /// The run the handle belongs to: a handle kept past its run would point at memory
    /// that run no longer owns, so the orchestrators refuse it.
    pub run: u64,
}

/// Ids of Python-driven runs (L2 orchestrations, L3 node runs, L4 cluster runs).
static RUN_IDS: AtomicU64 = AtomicU64::new(1);

/// A new run id, for the tensor handles of one Python-driven run.
pub fn next_run_id() -> u64 {
    RUN_IDS.fetch_add(1, Ordering::Relaxed)
}

/// The error for a tensor handle used outside its run.
pub fn stale_tensor(what: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{what}: this Tensor handle belongs to another run; handles are valid only inside the orchestration that received or made them"
    ))
}

#[pymethods]
impl PyTensor {
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.shape())
    }
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.strides())
    }
    #[getter]
    fn dtype(&self) -> &'static str {
        self.t.dtype.name()
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.t.ndims as usize
    }
    #[getter]
    fn offset(&self) -> u64 {
        self.t.offset
    }
    /// Id of the task that produced this runtime tensor, or None for host tensors.
    #[getter]
    fn owner(&self) -> Option<u64> {
        self.t.owner.is_valid().then_some(self.t.owner.0)
    }
    /// A view over the same buffer: `offset` in elements from this view's start,
    /// `strides` in elements (row-major when None).
    #[pyo3(signature = (shape, offset=None, strides=None))]
    fn view(
        &self,
        shape: &Bound<'_, PyAny>,
        offset: Option<&Bound<'_, PyAny>>,
        strides: Option<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<PyTensor> {
        let shape = parse_shape(shape)?;
        let offset = offset
            .map(|o| bounded_int(o, "offset", 0, u64::MAX))
            .transpose()?
            .unwrap_or(0);
        let strides = match strides {
            Some(v) => Some(
                v.iter()
                    .map(|s| {
                        bounded_int(s, "strides entries", 1, u32::MAX as u64).map(|x| x as u32)
                    })
                    .collect::<PyResult<Vec<u32>>>()?,
            ),
            None => None,
        };
        let t = self
            .t
            .view(&shape, offset, strides.as_deref())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyTensor { t, run: self.run })
    }
    /// Row slicing `t[i:j]` (step 1) or one row `t[i]` (keeps the dimension).
    fn __getitem__(&self, idx: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let rows = self.t.shape()[0] as i64;
        let (start, end) = if let Ok(s) = idx.cast::<PySlice>() {
            let ind = s.indices(rows as isize)?;
            if ind.step != 1 {
                return Err(PyValueError::new_err("tensor slicing supports step 1 only"));
            }
            (ind.start as i64, ind.stop as i64)
        } else if let Ok(i) = idx.extract::<i64>() {
            let i = if i < 0 { i + rows } else { i };
            (i, i + 1)
        } else {
            return Err(PyTypeError::new_err(
                "tensors are indexed by an int or a slice of rows",
            ));
        };
        if start < 0 || end <= start || end > rows {
            return Err(PyValueError::new_err(format!(
                "row slice {start}:{end} is out of range for {rows} rows"
            )));
        }
        let t = self
            .t
            .rows_slice(start as u64, end as u64)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyTensor { t, run: self.run })
    }
    fn __repr__(&self) -> String {
        format!(
            "Tensor(shape={:?}, dtype={}, offset={})",
            self.t.shape(),
            self.t.dtype.name(),
            self.t.offset
        )
    }
}

/// A runtime-allocated output: shape and dtype (tag OUTPUT).
#[pyclass(module = "taskring", name = "TensorSpec", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PySpec {
    pub s: TensorSpec,
}

#[pymethods]
impl PySpec {
    #[new]
    pub fn new(shape: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> PyResult<Self> {
        let shape = parse_shape(shape)?;
        let dtype = parse_dtype(dtype)?;
        Ok(PySpec {
            s: TensorSpec::new(&shape, dtype).map_err(|e| PyValueError::new_err(e.to_string()))?,
        })
    }
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.s.shape[..self.s.ndims as usize])
    }
    #[getter]
    fn dtype(&self) -> &'static str {
        self.s.dtype.name()
    }
    fn __repr__(&self) -> String {
        format!(
            "TensorSpec(shape={:?}, dtype={})",
            &self.s.shape[..self.s.ndims as usize],
            self.s.dtype.name()
        )
    }
}
