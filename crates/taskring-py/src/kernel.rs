//! Kernels from Python: handles (`Kernel`), the builtin kernels, Python functions run
//! as kernels on core threads, and stopping the Python kernels a chip gave up on.

use crate::errors::py_err_text;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyTuple};
use std::sync::Mutex;
use taskring::{CoreKind, Kernel, KernelCall, KernelRef};

/// A kernel handle (`taskring.kernels.add`, or made by `@taskring.kernel`).
#[pyclass(module = "taskring", name = "Kernel", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PyKernel {
    pub k: KernelRef,
}

#[pymethods]
impl PyKernel {
    #[getter]
    fn name(&self) -> String {
        self.k.name().to_string()
    }
    #[getter]
    fn core(&self) -> &'static str {
        match self.k.core() {
            CoreKind::Aic => "aic",
            CoreKind::Aiv => "aiv",
            CoreKind::Any => "any",
        }
    }
    fn __repr__(&self) -> String {
        format!("<taskring kernel '{}' ({})>", self.k.name(), self.core())
    }
}

/// A Python function run as a kernel: it gets numpy views of its tensors (inputs,
/// inouts, outputs, no_dep) followed by its scalars, and runs holding the GIL.
struct PythonKernel {
    name: String,
    core: CoreKind,
    func: Py<PyAny>,
    /// `taskring._views.view(addr, shape, strides, dtype)`.
    view: Py<PyAny>,
}

impl Kernel for PythonKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn core(&self) -> CoreKind {
        self.core
    }
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        Python::attach(|py| {
            let _running = RunningPyKernel::enter();
            let mut items: Vec<Bound<'_, PyAny>> =
                Vec::with_capacity(call.tensors.len() + call.scalars.len());
            for t in call.tensors {
                let v = self
                    .view
                    .call1(
                        py,
                        (
                            t.data_ptr() as u64,
                            t.shape().to_vec(),
                            t.strides().to_vec(),
                            t.dtype.name(),
                        ),
                    )
                    .map_err(|e| py_err_text(py, &e))?;
                items.push(v.into_bound(py));
            }
            for i in 0..call.scalars.len() {
                let v = if call.scalar_is_float(i) {
                    PyFloat::new(py, call.scalar_f64(i)).into_any()
                } else {
                    call.scalar_i64(i)
                        .into_pyobject(py)
                        .map_err(|e| e.to_string())?
                        .into_any()
                };
                items.push(v);
            }
            let args = PyTuple::new(py, items).map_err(|e| py_err_text(py, &e))?;
            self.func
                .call1(py, args)
                .map(|_| ())
                .map_err(|e| py_err_text(py, &e))
        })
    }
}

extern "C" {
    // CPython's id of the calling thread (`threading.get_ident()`), the key that
    // PyThreadState_SetAsyncExc takes.
    fn PyThread_get_thread_ident() -> std::os::raw::c_ulong;
}

/// Threads inside a Python kernel right now: (Rust thread, Python thread ident).
static PY_KERNEL_THREADS: Mutex<Vec<(std::thread::ThreadId, std::os::raw::c_ulong)>> =
    Mutex::new(Vec::new());

/// Registers the calling thread in [`PY_KERNEL_THREADS`] while a Python kernel runs.
struct RunningPyKernel(std::thread::ThreadId);

impl RunningPyKernel {
    fn enter() -> RunningPyKernel {
        let me = std::thread::current().id();
        // safety: called holding the GIL, on a thread CPython knows.
        let ident = unsafe { PyThread_get_thread_ident() };
        PY_KERNEL_THREADS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((me, ident));
        RunningPyKernel(me)
    }
}

impl Drop for RunningPyKernel {
    fn drop(&mut self) {
        PY_KERNEL_THREADS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(t, _)| *t != self.0);
    }
}

/// Stop the Python kernels still running on `threads` (cores the chip gave up on after
/// SCHEDULER_TIMEOUT): each gets a `TimeoutError` at its next bytecode, so a spinning
/// kernel ends instead of burning a core for the life of the process. A kernel blocked
/// inside a C call ends when that call returns.
pub fn interrupt_python_kernels(py: Python<'_>, threads: &[std::thread::ThreadId]) {
    if threads.is_empty() {
        return;
    }
    let running = PY_KERNEL_THREADS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    for (t, ident) in running {
        if threads.contains(&t) {
            // safety: holding the GIL; the exception type is a borrowed static object.
            unsafe {
                pyo3::ffi::PyThreadState_SetAsyncExc(ident as _, pyo3::ffi::PyExc_TimeoutError)
            };
        }
    }
    let _ = py;
}

/// Make a kernel from a Python function (used by `@taskring.kernel`).
#[pyfunction]
#[pyo3(signature = (func, name, core="aiv"))]
pub fn make_python_kernel(
    py: Python<'_>,
    func: Py<PyAny>,
    name: String,
    core: &str,
) -> PyResult<PyKernel> {
    let core = match core {
        "aiv" => CoreKind::Aiv,
        "aic" => CoreKind::Aic,
        "any" => CoreKind::Any,
        other => {
            return Err(PyValueError::new_err(format!(
                "core must be 'aiv' or 'aic', got {other:?}"
            )))
        }
    };
    let view = py.import("taskring._views")?.getattr("view")?.unbind();
    Ok(PyKernel {
        k: KernelRef::leak(PythonKernel {
            name,
            core,
            func,
            view,
        }),
    })
}

/// The builtin kernels by name.
#[pyfunction]
pub fn builtin_kernels(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for k in taskring::builtin::all() {
        d.set_item(k.name(), PyKernel { k: *k })?;
    }
    Ok(d)
}
