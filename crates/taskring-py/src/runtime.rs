//! Python classes over the L2 runtime: tensors, kernels, the orchestrator handed to a
//! program (`rt`), the chip, and reports.
//!
//! Threading: the orchestration runs on the caller's thread holding the GIL; whenever
//! the runtime waits (a full ring, the end of a run) the GIL is released, so Python
//! kernels on core threads can take it. Host arrays are used in place (zero copy); the
//! run keeps references to them until it returns.

use crate::config::{call_config_of, PyRingSizing};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PySlice, PyTuple};
use std::cell::Cell;
use std::sync::Mutex;
use taskring::engine::{ArgTag, Scalar, TaskArgs, TensorSpec};
use taskring::kernel::{CoreKind, Kernel, KernelCall, KernelRef};
use taskring::{
    Arg, ChipOptions, ChipWorker, DType, HostTensor, Orchestrator, Program, RingSizing, RunError,
    RuntimeFailure, TaskId, Tensor,
};

// ----- errors --------------------------------------------------------------------------

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

/// The error of a run whose orchestration let a failure raised by `submit` escape
/// (`pending`): when the run ended with a failure of the same code, the run's own
/// error, which says what the run adds (its outputs may be partly written; an "auto"
/// entry grows); else `pending` as it is.
fn same_failure_said_fully(py: Python<'_>, pending: PyErr, run: Option<&RunError>) -> PyErr {
    let Some(RunError::Failure(f)) = run else {
        return pending;
    };
    let code = pending
        .value(py)
        .getattr("code")
        .and_then(|c| c.extract::<u32>());
    let is_ours = py
        .import("taskring._errors")
        .and_then(|m| m.getattr("RuntimeFailure"))
        .is_ok_and(|cls| pending.is_instance(py, &cls));
    if is_ours && code.is_ok_and(|c| c == f.code.code()) {
        failure_err(py, f)
    } else {
        pending
    }
}

pub fn run_err(py: Python<'_>, e: RunError) -> PyErr {
    match e {
        RunError::Config(c) => PyValueError::new_err(c.message),
        RunError::Failure(f) => failure_err(py, &f),
    }
}

// ----- dtypes and tensors --------------------------------------------------------------

pub fn dtype_from_name(name: &str) -> Option<DType> {
    DType::ALL.iter().copied().find(|d| d.name() == name)
}

fn parse_dtype(v: &Bound<'_, PyAny>) -> PyResult<DType> {
    let name: String = if let Ok(s) = v.extract::<String>() {
        s
    } else {
        v.str()?.to_string()
    };
    // numpy dtype objects and classes print as e.g. "float32" / "<class 'numpy.float32'>".
    let name = name
        .trim_start_matches("<class 'numpy.")
        .trim_end_matches("'>")
        .to_string();
    dtype_from_name(&name).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "unsupported dtype {name}; expected one of float32, float16, bfloat16, int32, int64, int8, uint8"
        ))
    })
}

fn parse_shape(v: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if let Ok(n) = v.extract::<u32>() {
        return Ok(vec![n]);
    }
    let dims: Vec<i64> = v.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "shape must be an int or a sequence of ints, got {}",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    if dims.is_empty() || dims.len() > taskring::tensor::MAX_DIMS {
        return Err(PyValueError::new_err(format!(
            "shape must have 1 to {} dimensions, got {:?}",
            taskring::tensor::MAX_DIMS,
            dims
        )));
    }
    dims.iter()
        .map(|&d| {
            if d >= 1 && d <= u32::MAX as i64 {
                Ok(d as u32)
            } else {
                Err(PyValueError::new_err(format!(
                    "shape entries must be >= 1, got {dims:?}"
                )))
            }
        })
        .collect()
}

/// An int argument in `[lo, hi]`: `TypeError` for a non-int, `ValueError` (never
/// `OverflowError`) for one out of range, however large.
pub fn bounded_int(v: &Bound<'_, PyAny>, what: &str, lo: u64, hi: u64) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, got {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        )));
    }
    match v.extract::<u64>() {
        Ok(x) if (lo..=hi).contains(&x) => Ok(x),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be in [{lo}, {hi}], got {v}"
        ))),
    }
}

/// A tensor handle inside an orchestration (a view; never owns memory).
#[pyclass(module = "taskring", name = "Tensor", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PyTensor {
    pub t: Tensor,
    /// The run the handle belongs to: a handle kept past its run would point at memory
    /// that run no longer owns, so the orchestrators refuse it.
    pub run: u64,
}

/// Ids of Python-driven runs (L2 orchestrations and L3 node runs).
pub static RUN_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

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

/// A host numpy array as a Tensor (zero copy); an L2 argument may be written.
fn host_tensor(i: usize, a: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    array_tensor(i, a, true)
}

/// A numpy array as a Tensor over its owner's buffer (zero copy): checked for layout,
/// dtype, shape, alignment and (when `writeable`) the writeable flag. L2 arguments and
/// rank 0's L4 arguments.
pub fn array_tensor(i: usize, a: &Bound<'_, PyAny>, writeable: bool) -> PyResult<Tensor> {
    let arr = a.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "argument {i}: expected a numpy.ndarray, got {}",
            a.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    if !arr.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array must be C-contiguous (use numpy.ascontiguousarray)"
        )));
    }
    let dname = arr.dtype().str()?.to_string();
    let dtype = dtype_from_name(&dname).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "argument {i}: dtype {dname} is not supported; expected one of float32, float16, bfloat16, int32, int64, int8, uint8"
        ))
    })?;
    let shape: Vec<usize> = arr.shape().to_vec();
    if shape.is_empty()
        || shape.len() > taskring::tensor::MAX_DIMS
        || shape.iter().any(|&d| d == 0 || d > u32::MAX as usize)
    {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array shape {shape:?} is not supported (1 to {} dimensions, none empty)",
            taskring::tensor::MAX_DIMS
        )));
    }
    if writeable
        && !a
            .getattr("flags")?
            .getattr("writeable")?
            .extract::<bool>()?
    {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array must be writeable"
        )));
    }
    let dims: Vec<u32> = shape.iter().map(|&d| d as u32).collect();
    // safety: reading the data pointer of a live array object.
    let data = unsafe { (*arr.as_array_ptr()).data } as u64;
    check_aligned(i, data, dtype)?;
    let item = dtype.size_bytes() as u64;
    let nbytes = arr.len() as u64 * item;
    // A view of another array is a view of that array's buffer (so dependencies between
    // overlapping views passed as different arguments are seen). The buffer's start is
    // rounded down to 8 bytes (the largest element size), so every view of one owner,
    // whatever its dtype, has the same base and a whole number of elements from it; the
    // extra bytes before the owner are never part of any view, so never touched.
    let (base, bytes) = match root_buffer(a)?.filter(|&(b, n)| b <= data && data + nbytes <= b + n)
    {
        Some((b, n)) => (b & !(MAX_ITEM - 1), n + (b & (MAX_ITEM - 1))),
        None => (data, nbytes),
    };
    let mut t = Tensor::from_raw(base, &dims, dtype);
    t.buf_bytes = bytes;
    debug_assert_eq!((data - base) % item, 0);
    t.offset = (data - base) / item;
    t.validate()
        .map_err(|e| PyValueError::new_err(format!("argument {i}: {e}")))?;
    Ok(t)
}

/// A Python scalar argument of `submit_next_level` (L3 and L4): `Some(Ok(int))`,
/// `Some(Err(float))`, None when `a` is not a scalar; a bool or an int beyond int64 is
/// an error.
pub fn scalar_arg(i: usize, a: &Bound<'_, PyAny>) -> PyResult<Option<Result<i64, f64>>> {
    if a.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "argument {i}: bool is not a valid scalar"
        )));
    }
    if a.is_instance_of::<pyo3::types::PyInt>() {
        return a.extract::<i64>().map(|v| Some(Ok(v))).map_err(|_| {
            PyValueError::new_err(format!("argument {i}: scalar {a} does not fit int64"))
        });
    }
    if a.is_instance_of::<pyo3::types::PyFloat>() {
        return Ok(Some(Err(a.extract()?)));
    }
    Ok(None)
}

/// The largest element size of any dtype (bytes); buffer bases are rounded to it.
const MAX_ITEM: u64 = 8;

/// A host array's data must sit on a multiple of its element size: the runtime
/// addresses tensors in whole elements, so a misaligned view would be read and written
/// at the wrong bytes (docs/api.md §2). Checked before anything runs.
pub fn check_aligned(i: usize, data: u64, dtype: DType) -> PyResult<()> {
    let item = dtype.size_bytes() as u64;
    if !data.is_multiple_of(item) {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array data is not aligned to its {item}-byte elements"
        )));
    }
    Ok(())
}

/// The data pointer and byte size of the array that owns `a`'s memory (following
/// `.base` through numpy views), when that owner is a C-contiguous ndarray.
pub fn root_buffer(a: &Bound<'_, PyAny>) -> PyResult<Option<(u64, u64)>> {
    let mut cur = a.clone();
    loop {
        let b = cur.getattr("base")?;
        if b.is_none() || b.cast::<PyUntypedArray>().is_err() {
            break;
        }
        cur = b;
    }
    let arr = cur.cast::<PyUntypedArray>()?;
    if !arr.is_c_contiguous() {
        return Ok(None);
    }
    // safety: reading the data pointer of a live array object.
    let data = unsafe { (*arr.as_array_ptr()).data } as u64;
    let item: usize = cur.getattr("itemsize")?.extract()?;
    Ok(Some((data, (arr.len() * item) as u64)))
}

// ----- kernels -------------------------------------------------------------------------

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

fn py_err_text(py: Python<'_>, e: &PyErr) -> String {
    let ty = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    format!("{ty}: {}", e.value(py))
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

// ----- the orchestrator ------------------------------------------------------------------

/// A submitted task: its id and its runtime outputs.
#[pyclass(module = "taskring", name = "Task", frozen)]
pub struct PyTask {
    #[pyo3(get)]
    id: u64,
    #[pyo3(get)]
    outputs: Py<PyList>,
}

#[pymethods]
impl PyTask {
    #[getter]
    fn ring(&self) -> usize {
        TaskId(self.id).ring()
    }
    fn __repr__(&self) -> String {
        format!("Task(id={:#x}, {:?})", self.id, TaskId(self.id))
    }
}

/// Tagged task arguments (low level): `add(tensor_or_spec, tag)`, `add_scalar(x)`,
/// `add_dep(task_id)`.
#[pyclass(module = "taskring", name = "TaskArgs")]
#[derive(Default)]
pub struct PyTaskArgs {
    items: Vec<TaItem>,
    /// Scalars as 64-bit patterns, and as given (for L3, where they travel as values).
    scalars: Vec<(u64, bool)>,
    scalar_objs: Vec<Py<PyAny>>,
    deps: Vec<u64>,
    tensor_after_scalar: bool,
}

/// One tensor argument of a `TaskArgs`.
enum TaItem {
    /// A tensor handle of an orchestration (L2), with the run it belongs to.
    Tensor(ArgTag, Tensor, u64),
    /// A runtime output (tag OUTPUT, L2).
    Spec(TensorSpec),
    /// A host array (L3: a shared array, a device tensor): checked where it is used.
    Host(ArgTag, Py<PyAny>),
}

#[pymethods]
impl PyTaskArgs {
    #[new]
    fn new() -> Self {
        Self::default()
    }
    /// Add a tensor with a `TensorArgType` tag (0 INPUT, 1 OUTPUT, 2 INOUT,
    /// 3 OUTPUT_EXISTING, 4 NO_DEP). At L2 a tensor is a `Tensor` handle and OUTPUT
    /// takes a `TensorSpec`; at L3 (`submit_next_level`) a tensor is an array a chip
    /// can see (docs/api.md §4.1.1).
    fn add(&mut self, value: &Bound<'_, PyAny>, tag: u32) -> PyResult<()> {
        let tag = tag_of(tag)?;
        let item = if let Ok(s) = value.extract::<PyRef<'_, PySpec>>() {
            if tag != ArgTag::Output {
                return Err(PyTypeError::new_err(format!(
                    "a TensorSpec is an OUTPUT argument, not {}",
                    tag.name()
                )));
            }
            TaItem::Spec(s.s)
        } else if let Ok(t) = value.extract::<PyRef<'_, PyTensor>>() {
            if tag == ArgTag::Output {
                return Err(PyTypeError::new_err(
                    "an OUTPUT argument must be a TensorSpec (rt.spec(shape, dtype)); an existing tensor is OUTPUT_EXISTING",
                ));
            }
            TaItem::Tensor(tag, t.t, t.run)
        } else if value.cast::<PyUntypedArray>().is_ok() {
            TaItem::Host(tag, value.clone().unbind())
        } else if tag == ArgTag::Output {
            return Err(PyTypeError::new_err("an OUTPUT argument must be a TensorSpec (rt.spec(shape, dtype)), or at L3 an array"));
        } else {
            return Err(PyTypeError::new_err(format!(
                "a {} argument must be a taskring Tensor, or at L3 an array from taskring.shared_array; got {}",
                tag.name(),
                value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            )));
        };
        if !self.scalars.is_empty() {
            self.tensor_after_scalar = true;
        }
        self.items.push(item);
        Ok(())
    }
    /// Upstream's spelling of [`add`](Self::add): `add_tensor(t, TensorArgType.X)`,
    /// INPUT when the tag is left out.
    #[pyo3(signature = (value, tag=0))]
    fn add_tensor(&mut self, value: &Bound<'_, PyAny>, tag: u32) -> PyResult<()> {
        self.add(value, tag)
    }
    fn add_scalar(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.scalars.push(scalar_of(v)?);
        self.scalar_objs.push(v.clone().unbind());
        Ok(())
    }
    fn add_dep(&mut self, id: u64) {
        self.deps.push(id);
    }
    fn __len__(&self) -> usize {
        self.items.len()
    }
}

impl PyTaskArgs {
    /// The arguments in a program's signature order (`dirs`: 0 IN, 1 OUT, 2 INOUT,
    /// 3 SCALAR): tensors fill the non-SCALAR positions in the order they were added,
    /// scalars the SCALAR positions. Each tag must agree with its position's direction
    /// (INPUT or NO_DEP ↔ IN, OUTPUT or OUTPUT_EXISTING ↔ OUT, INOUT ↔ INOUT).
    pub fn in_signature_order<'py>(
        &self,
        py: Python<'py>,
        dirs: &[u32],
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        const DIR: [&str; 4] = ["IN", "OUT", "INOUT", "SCALAR"];
        let (nt, ns) = (
            dirs.iter().filter(|&&d| d != 3).count(),
            dirs.iter().filter(|&&d| d == 3).count(),
        );
        if nt != self.items.len() || ns != self.scalars.len() {
            return Err(PyValueError::new_err(format!(
                "TaskArgs has {} tensors and {} scalars; the program's signature [{}] takes {nt} and {ns}",
                self.items.len(),
                self.scalars.len(),
                dirs.iter().map(|&d| DIR.get(d as usize).copied().unwrap_or("?")).collect::<Vec<_>>().join(", ")
            )));
        }
        let (mut ti, mut si) = (0, 0);
        let mut out = Vec::with_capacity(dirs.len());
        for (pos, &d) in dirs.iter().enumerate() {
            if d == 3 {
                out.push(self.scalar_objs[si].bind(py).clone());
                si += 1;
                continue;
            }
            let (tag, value) = match &self.items[ti] {
                TaItem::Host(tag, v) => (*tag, v.bind(py).clone()),
                TaItem::Tensor(tag, t, run) => (*tag, Bound::new(py, PyTensor { t: *t, run: *run })?.into_any()),
                TaItem::Spec(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "argument {pos}: a TensorSpec (a runtime output) cannot be a chip task's argument; pass a shared array or o.alloc(...)"
                    )))
                }
            };
            ti += 1;
            let agrees = matches!(
                (tag, d),
                (ArgTag::Input | ArgTag::NoDep, 0)
                    | (ArgTag::Output | ArgTag::OutputExisting, 1)
                    | (ArgTag::Inout, 2)
            );
            if !agrees {
                return Err(PyValueError::new_err(format!(
                    "argument {pos}: tag {} does not agree with the program's signature, which has {} there",
                    tag.name(),
                    DIR.get(d as usize).copied().unwrap_or("?")
                )));
            }
            out.push(value);
        }
        Ok(out)
    }
}

fn tag_of(tag: u32) -> PyResult<ArgTag> {
    Ok(match tag {
        0 => ArgTag::Input,
        1 => ArgTag::Output,
        2 => ArgTag::Inout,
        3 => ArgTag::OutputExisting,
        4 => ArgTag::NoDep,
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown TensorArgType {tag}"
            )))
        }
    })
}

fn scalar_of(v: &Bound<'_, PyAny>) -> PyResult<(u64, bool)> {
    if v.is_instance_of::<PyBool>() {
        return Ok((v.extract::<bool>()? as u64, false));
    }
    if v.is_instance_of::<PyInt>() {
        // A scalar is 64 bits: int64, or uint64 above 2**63 - 1 (the same bits).
        if let Ok(x) = v.extract::<i64>() {
            return Ok((x as u64, false));
        }
        if let Ok(x) = v.extract::<u64>() {
            return Ok((x, false));
        }
        return Err(PyValueError::new_err(format!(
            "scalar {v} does not fit 64 bits (int64 or uint64)"
        )));
    }
    if let Ok(x) = v.extract::<f64>() {
        return Ok((x.to_bits(), true));
    }
    Err(PyTypeError::new_err(format!(
        "scalars must be int or float, got {}",
        v.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    )))
}

/// The orchestrator handed to a program as `rt`; valid only while its run lasts.
#[pyclass(module = "taskring", name = "Orchestrator")]
pub struct PyOrchestrator {
    ptr: RunPtr<Orchestrator<'static>>,
    run: u64,
}

/// A pointer to a run's orchestrator: set only while the orchestration call is on the
/// stack of the thread that created it, usable only from that thread.
pub struct RunPtr<T> {
    ptr: std::sync::atomic::AtomicPtr<T>,
    thread: std::thread::ThreadId,
}

impl<T> RunPtr<T> {
    pub fn new() -> Self {
        RunPtr {
            ptr: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
            thread: std::thread::current().id(),
        }
    }
    pub fn set(&self, p: *mut T) {
        self.ptr.store(p, std::sync::atomic::Ordering::Relaxed);
    }
    /// Run `f` on the target if the run is live and this is its thread.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> PyResult<R> {
        let p = self.ptr.load(std::sync::atomic::Ordering::Relaxed);
        if p.is_null() {
            return Err(PyRuntimeError::new_err(
                "this orchestrator belongs to a run that has ended",
            ));
        }
        if std::thread::current().id() != self.thread {
            return Err(PyRuntimeError::new_err(
                "this orchestrator can only be used from the thread running its orchestration",
            ));
        }
        // safety: non-null only while the orchestration call that set it is on this
        // thread's stack (checked just above), and the GIL serialises Python access.
        Ok(f(unsafe { &mut *p }))
    }
}

impl<T> Default for RunPtr<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl PyOrchestrator {
    fn with<R>(&self, f: impl FnOnce(&mut Orchestrator<'static>) -> R) -> PyResult<R> {
        self.ptr.with(f)
    }
}

fn tensors_of(v: Option<&Bound<'_, PyAny>>, what: &str, run: u64) -> PyResult<Vec<Tensor>> {
    let Some(v) = v else { return Ok(vec![]) };
    let mut out = vec![];
    for (i, it) in v.try_iter()?.enumerate() {
        let it = it?;
        let t = it.extract::<PyRef<'_, PyTensor>>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{what}[{i}] must be a taskring Tensor, got {}",
                it.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        if t.run != run {
            return Err(stale_tensor(&format!("{what}[{i}]")));
        }
        out.push(t.t);
    }
    Ok(out)
}

fn submit_built(
    py: Python<'_>,
    o: &mut Orchestrator<'static>,
    kernel: KernelRef,
    a: &TaskArgs,
    o_run: u64,
) -> PyResult<PyTask> {
    let r = o.submit(kernel, a).map_err(|f| failure_err(py, &f))?;
    let run = o_run;
    let outs: Vec<PyTensor> = r.outputs().map(|t| PyTensor { t, run }).collect();
    Ok(PyTask {
        id: r.id.0,
        outputs: PyList::new(py, outs)?.unbind(),
    })
}

#[pymethods]
impl PyOrchestrator {
    /// Submit a task. `outputs` entries are existing tensors (OUTPUT_EXISTING) or
    /// `rt.spec(shape, dtype)` (OUTPUT, allocated from the current ring's heap).
    #[pyo3(signature = (kernel, *, inputs=None, outputs=None, inouts=None, no_dep=None, scalars=None, deps=None))]
    #[allow(clippy::too_many_arguments)]
    fn submit(
        &self,
        py: Python<'_>,
        kernel: PyRef<'_, PyKernel>,
        inputs: Option<&Bound<'_, PyAny>>,
        outputs: Option<&Bound<'_, PyAny>>,
        inouts: Option<&Bound<'_, PyAny>>,
        no_dep: Option<&Bound<'_, PyAny>>,
        scalars: Option<&Bound<'_, PyAny>>,
        deps: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTask> {
        let mut a = TaskArgs::new();
        for t in tensors_of(inputs, "inputs", self.run)? {
            a.input(t);
        }
        for t in tensors_of(inouts, "inouts", self.run)? {
            a.inout(t);
        }
        if let Some(outs) = outputs {
            for (i, it) in outs.try_iter()?.enumerate() {
                let it = it?;
                if let Ok(s) = it.extract::<PyRef<'_, PySpec>>() {
                    a.output(s.s);
                } else if let Ok(t) = it.extract::<PyRef<'_, PyTensor>>() {
                    if t.run != self.run {
                        return Err(stale_tensor(&format!("outputs[{i}]")));
                    }
                    a.output_existing(t.t);
                } else {
                    return Err(PyTypeError::new_err(format!(
                        "outputs[{i}] must be a taskring Tensor or rt.spec(shape, dtype), got {}",
                        it.get_type().name()?
                    )));
                }
            }
        }
        for t in tensors_of(no_dep, "no_dep", self.run)? {
            a.no_dep(t);
        }
        if let Some(sc) = scalars {
            for it in sc.try_iter()? {
                let (bits, f) = scalar_of(&it?)?;
                a.scalar_raw(bits, f);
            }
        }
        if let Some(ds) = deps {
            for it in ds.try_iter()? {
                let it = it?;
                let id: u64 = if let Ok(t) = it.extract::<PyRef<'_, PyTask>>() {
                    t.id
                } else {
                    it.extract()?
                };
                a.dep(TaskId(id));
            }
        }
        let k = kernel.k;
        let run = self.run;
        self.with(|o| submit_built(py, o, k, &a, run))?
    }

    /// Submit with tagged `TaskArgs` (tensors reach the kernel in insertion order
    /// within each tag group: inputs, inouts, outputs, no_dep).
    fn submit_args(
        &self,
        py: Python<'_>,
        kernel: PyRef<'_, PyKernel>,
        args: PyRef<'_, PyTaskArgs>,
    ) -> PyResult<PyTask> {
        let mut a = TaskArgs::new();
        for (i, item) in args.items.iter().enumerate() {
            match item {
                TaItem::Tensor(tag, t, run) => {
                    if *run != self.run {
                        return Err(stale_tensor(&format!("TaskArgs entry {i}")));
                    }
                    a.tensor(*tag, *t);
                }
                TaItem::Spec(s) => {
                    a.output(*s);
                }
                TaItem::Host(tag, _) => {
                    return Err(PyTypeError::new_err(format!(
                        "TaskArgs entry {i}: a {} argument of a kernel must be a taskring Tensor (arrays are arguments of chip tasks at L3)",
                        tag.name()
                    )))
                }
            }
        }
        if args.tensor_after_scalar {
            // Reproduce the builder's rule: tensors after scalars are an error.
            a.scalar_raw(0, false);
            a.input(Tensor::from_raw(0, &[1], DType::U8));
        }
        for &(bits, f) in &args.scalars {
            a.scalar_raw(bits, f);
        }
        for &d in &args.deps {
            a.dep(TaskId(d));
        }
        let k = kernel.k;
        let run = self.run;
        self.with(|o| submit_built(py, o, k, &a, run))?
    }

    /// A dependency-only task (barrier).
    #[pyo3(signature = (*, deps=None))]
    fn submit_dummy(&self, py: Python<'_>, deps: Option<&Bound<'_, PyAny>>) -> PyResult<PyTask> {
        let mut a = TaskArgs::new();
        if let Some(ds) = deps {
            for it in ds.try_iter()? {
                let it = it?;
                let id: u64 = if let Ok(t) = it.extract::<PyRef<'_, PyTask>>() {
                    t.id
                } else {
                    it.extract()?
                };
                a.dep(TaskId(id));
            }
        }
        self.with(|o| -> PyResult<PyTask> {
            let r = o.submit_dummy(&a).map_err(|f| failure_err(py, &f))?;
            Ok(PyTask {
                id: r.id.0,
                outputs: PyList::empty(py).unbind(),
            })
        })?
    }

    /// An output-only allocation, alive until the current scope ends.
    fn alloc(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let s = PySpec::new(shape, dtype)?;
        self.with(|o| -> PyResult<PyTensor> {
            let r = o.alloc(&[s.s]).map_err(|f| failure_err(py, &f))?;
            Ok(PyTensor {
                t: r.output(0),
                run: self.run,
            })
        })?
    }

    /// A runtime-output spec for `submit(outputs=[...])`.
    #[staticmethod]
    fn spec(shape: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> PyResult<PySpec> {
        PySpec::new(shape, dtype)
    }

    /// Open a scope; `manual=True` infers no dependencies (only explicit `deps`).
    #[pyo3(signature = (manual=false, site=None))]
    fn begin_scope(&self, py: Python<'_>, manual: bool, site: Option<&str>) -> PyResult<()> {
        self.with(|o| {
            match site {
                Some(s) => o.begin_scope_named(manual, s),
                None => o.begin_scope(manual),
            }
            .map_err(|f| failure_err(py, &f))
        })?
    }

    fn end_scope(&self, py: Python<'_>) -> PyResult<()> {
        self.with(|o| o.end_scope().map_err(|f| failure_err(py, &f)))?
    }

    /// Current scope depth (the run's root scope is 0).
    #[getter]
    fn depth(&self) -> PyResult<usize> {
        self.with(|o| o.depth())
    }

    /// `with rt.scope(manual=False): ...` — a nested scope (depth + 1; ring
    /// min(depth, 3)).
    #[pyo3(signature = (manual=false))]
    fn scope(slf: &Bound<'_, Self>, manual: bool) -> PyResult<PyScope> {
        let py = slf.py();
        let stats = slf.borrow().with(|o| o.stats_enabled())?;
        let site = if stats { Some(user_site(py)?) } else { None };
        Ok(PyScope {
            rt: slf.clone().unbind(),
            manual,
            site,
        })
    }
}

/// `file:line` of the user's code that is calling into taskring now: the innermost
/// Python frame outside the `taskring` package (a call from Rust adds no frame, so the
/// innermost frame is the line that called `rt.scope()` unless a taskring helper did).
pub fn user_site(py: Python<'_>) -> PyResult<String> {
    let pkg = py
        .import("taskring")?
        .getattr("__file__")?
        .extract::<String>()?;
    let pkg_dir = std::path::Path::new(&pkg)
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default();
    let mut f = py.import("sys")?.call_method1("_getframe", (0,))?;
    let mut first: Option<String> = None;
    while !f.is_none() {
        let file: String = f.getattr("f_code")?.getattr("co_filename")?.extract()?;
        let line: u32 = f.getattr("f_lineno")?.extract()?;
        let here = format!("{file}:{line}");
        if !std::path::Path::new(&file).starts_with(&pkg_dir) {
            return Ok(here);
        }
        first.get_or_insert(here);
        f = f.getattr("f_back")?;
    }
    Ok(first.unwrap_or_else(|| "<unknown>:0".into()))
}

/// The context manager returned by `rt.scope()`.
#[pyclass(module = "taskring", name = "Scope")]
pub struct PyScope {
    rt: Py<PyOrchestrator>,
    manual: bool,
    site: Option<String>,
}

#[pymethods]
impl PyScope {
    fn __enter__(&self, py: Python<'_>) -> PyResult<()> {
        self.rt
            .borrow(py)
            .begin_scope(py, self.manual, self.site.as_deref())
    }
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _v: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let r = self.rt.borrow(py).end_scope(py);
        if exc_type.is_none() {
            r?;
        }
        Ok(false)
    }
}

// ----- the chip ----------------------------------------------------------------------------

/// Counters of a chip's arena cache.
#[pyclass(module = "taskring", name = "ArenaStats", frozen, get_all)]
pub struct PyArenaStats {
    builds: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    /// Keys (12-tuples, as `RingSizing.key()`), most recently used first.
    resident: Py<PyList>,
    build_s: f64,
    /// Device bytes of the resident arenas.
    resident_bytes: u64,
    /// Device bytes held outside the cache (arenas set aside for a stuck kernel).
    held_bytes: u64,
    /// The chip's device memory.
    capacity_bytes: u64,
}

#[pymethods]
impl PyArenaStats {
    fn __repr__(&self) -> String {
        format!(
            "ArenaStats(builds={}, hits={}, misses={}, evictions={}, resident={} keys, build_s={:.6})",
            self.builds,
            self.hits,
            self.misses,
            self.evictions,
            Python::attach(|py| self.resident.bind(py).len()),
            self.build_s
        )
    }
}

pub fn arena_stats_py(py: Python<'_>, s: taskring::ArenaStats) -> PyResult<PyArenaStats> {
    let keys: Vec<Bound<'_, PyTuple>> = s
        .resident
        .iter()
        .map(|k| PyTuple::new(py, k))
        .collect::<PyResult<_>>()?;
    Ok(PyArenaStats {
        builds: s.builds,
        hits: s.hits,
        misses: s.misses,
        evictions: s.evictions,
        resident: PyList::new(py, keys)?.unbind(),
        build_s: s.build_s,
        resident_bytes: s.resident_bytes,
        held_bytes: s.held_bytes,
        capacity_bytes: s.capacity_bytes,
    })
}

/// Device memory as a run report gives it (bytes).
#[pyclass(module = "taskring", name = "DeviceMemory", frozen, get_all)]
pub struct PyDeviceMemory {
    /// The device footprint of the run's sizing.
    arena_bytes: u64,
    /// The chip's device memory in use after the run (0 where not reported).
    used_bytes: u64,
    /// The chip's device memory (0 where not reported).
    capacity_bytes: u64,
}

#[pymethods]
impl PyDeviceMemory {
    fn __repr__(&self) -> String {
        format!(
            "DeviceMemory(arena_bytes={}, used_bytes={}, capacity_bytes={})",
            self.arena_bytes, self.used_bytes, self.capacity_bytes
        )
    }
}

/// Highest simultaneous use per ring.
#[pyclass(module = "taskring", name = "PeakUse", frozen, get_all)]
pub struct PyPeak {
    task_window: (u64, u64, u64, u64),
    heap: (u64, u64, u64, u64),
    dep_pool: (u64, u64, u64, u64),
}

#[pymethods]
impl PyPeak {
    fn __repr__(&self) -> String {
        format!(
            "PeakUse(task_window={:?}, heap={:?}, dep_pool={:?})",
            self.task_window, self.heap, self.dep_pool
        )
    }
}

fn t4(v: [u64; 4]) -> (u64, u64, u64, u64) {
    (v[0], v[1], v[2], v[3])
}

/// What one L2 run did.
#[pyclass(module = "taskring", name = "RunReport", frozen, get_all)]
pub struct PyRunReport {
    ring_sizing: PyRingSizing,
    peak: Py<PyPeak>,
    tasks: u64,
    arena_hit: bool,
    arena_build_s: f64,
    elapsed_s: f64,
    /// A replay of a captured program.
    replayed: bool,
    device_memory: Py<PyDeviceMemory>,
}

#[pymethods]
impl PyRunReport {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "RunReport(tasks={}, replayed={}, arena_hit={}, arena_build_s={:.6}, elapsed_s={:.6}, peak={}, ring_sizing={})",
            self.tasks,
            if self.replayed { "True" } else { "False" },
            if self.arena_hit { "True" } else { "False" },
            self.arena_build_s,
            self.elapsed_s,
            self.peak.borrow(py).__repr__(),
            self.ring_sizing.inner
        )
    }
}

pub fn peak_py(p: &taskring::PeakUse) -> PyPeak {
    PyPeak {
        task_window: t4(p.task_window),
        heap: t4(p.heap),
        dep_pool: t4(p.dep_pool),
    }
}

pub fn report_py(py: Python<'_>, r: &taskring::RunReport) -> PyResult<PyRunReport> {
    Ok(PyRunReport {
        replayed: r.replayed,
        ring_sizing: PyRingSizing {
            inner: r.ring_sizing,
        },
        peak: Py::new(
            py,
            PyPeak {
                task_window: t4(r.peak.task_window),
                heap: t4(r.peak.heap),
                dep_pool: t4(r.peak.dep_pool),
            },
        )?,
        tasks: r.tasks,
        arena_hit: r.arena_hit,
        arena_build_s: r.arena_build_s,
        elapsed_s: r.elapsed_s,
        device_memory: Py::new(
            py,
            PyDeviceMemory {
                arena_bytes: r.device_memory.arena_bytes,
                used_bytes: r.device_memory.used_bytes,
                capacity_bytes: r.device_memory.capacity_bytes,
            },
        )?,
    })
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

/// A Rust `Program` running the Python orchestration `orch(rt, *args)`. A Python
/// exception fails the run (EXPLICIT_ORCH_FATAL, with the exception's text) and is
/// kept in the returned slot, so the caller can re-raise the original.
pub fn python_program(orch: Py<PyAny>, name: &str) -> (Program, std::sync::Arc<PendingErr>) {
    let pending: std::sync::Arc<PendingErr> = std::sync::Arc::new(Mutex::new(None));
    let pending_ref = pending.clone();
    let program = Program::new(name, move |o, args| {
        Python::attach(|py| {
            let keep = |e: PyErr, what: &str| {
                let text = format!("{what}: {}", py_err_text(py, &e));
                *pending_ref.lock().unwrap() = Some(e);
                RuntimeFailure::new(taskring::StatusCode::ExplicitOrchFatal, None, text)
            };
            let run = RUN_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let rt = Py::new(
                py,
                PyOrchestrator {
                    ptr: RunPtr::new(),
                    run,
                },
            )
            .map_err(|e| keep(e, "could not create the orchestrator"))?;
            #[allow(clippy::unnecessary_cast)] // the cast erases the run's lifetime
            let erased = o as *mut Orchestrator<'_> as *mut Orchestrator<'static>;
            rt.borrow(py).ptr.set(erased);
            let mut call_args: Vec<Bound<'_, PyAny>> =
                vec![rt.clone_ref(py).into_bound(py).into_any()];
            for a in args {
                let v = match a {
                    Arg::Tensor(t) => {
                        Bound::new(py, PyTensor { t: t.tensor(), run }).map(|b| b.into_any())
                    }
                    Arg::Scalar(Scalar::F64(x)) => Ok(PyFloat::new(py, *x).into_any()),
                    Arg::Scalar(Scalar::I64(x)) => Ok(x
                        .into_pyobject(py)
                        .expect("int conversion is infallible")
                        .into_any()),
                };
                call_args.push(v.map_err(|e| keep(e, "argument conversion failed"))?);
            }
            let r = PyTuple::new(py, call_args).and_then(|t| orch.call1(py, t));
            rt.borrow(py).ptr.set(std::ptr::null_mut());
            r.map(|_| ())
                .map_err(|e| keep(e, "the orchestration raised"))
        })
    });
    (program, pending)
}

/// A resident simulated chip (native part of `taskring.ChipWorker`).
///
/// One chip may be used from several Python threads: its calls are serialised by
/// `chip` (a thread waits for its turn without the GIL), and `close()` waits for the run
/// in flight. A chip belongs to the process that made it: after `fork()` the child has
/// none of its threads, so every call there fails at once (and dropping it in the child
/// frees nothing the parent still owns).
#[pyclass(module = "taskring._native", name = "Chip", frozen)]
pub struct PyChip {
    pub(crate) chip: Mutex<Option<ChipWorker>>,
    pid: u32,
}

/// The Python error raised by the orchestration, kept until the run returns.
pub type PendingErr = Mutex<Option<PyErr>>;

/// After an L3 or L4 run: the exception its caller raises instead of the run's own
/// result, if any — Ctrl-C first (`interrupt`, from [`interrupt_hook`]), then the
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

/// The blocking hook of an L3 or L4 run on a Python thread: releases the GIL around each
/// wait, and after a wait runs the signal handlers (at least every 50 ms while the run
/// waits); an exception they raise (Ctrl-C) is kept in the returned slot and `cancel()`
/// stops the run, which then raises it.
pub fn interrupt_hook(
    cancel: impl Fn() + Send + Sync + 'static,
) -> (
    impl Fn(bool) + Send + Sync + 'static,
    std::sync::Arc<PendingErr>,
) {
    let interrupt: std::sync::Arc<PendingErr> = std::sync::Arc::new(Mutex::new(None));
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
    if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
        cancel();
    }
    *pending.lock().unwrap() = Some(e);
    RuntimeFailure::new(taskring::StatusCode::ExplicitOrchFatal, None, text)
}

/// A Python orchestrator object bound to the run's Rust orchestrator for one call.
pub trait RunBound: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::False> {
    type Target;
    fn run_ptr(&self) -> &RunPtr<Self::Target>;
}

/// Call `orch(obj, *rest)` with `obj` pointing at the run's orchestrator `target` for
/// exactly the duration of the call (after it, `obj` raises "belongs to a run that has
/// ended").
pub fn call_bound<P: RunBound>(
    py: Python<'_>,
    orch: &Py<PyAny>,
    obj: P,
    target: *mut P::Target,
    rest: Option<&Py<PyTuple>>,
) -> PyResult<()>
where
    pyo3::PyClassInitializer<P>: From<P>,
{
    let po = Py::new(py, obj)?;
    po.borrow(py).run_ptr().set(target);
    let r = match rest {
        None => orch.call1(py, (po.clone_ref(py),)),
        Some(rest) => {
            let rest = rest.bind(py);
            let mut all = Vec::with_capacity(1 + rest.len());
            all.push(po.clone_ref(py).into_any().into_bound(py));
            all.extend(rest.iter());
            orch.call1(py, PyTuple::new(py, all)?)
        }
    };
    po.borrow(py).run_ptr().set(std::ptr::null_mut());
    r.map(|_| ())
}

/// `RuntimeError` for an object used in a process other than the one that created it.
pub fn forked_err(what: &str, pid: u32) -> PyErr {
    PyRuntimeError::new_err(format!(
        "this {what} was created in process {pid}; it cannot be used after fork()"
    ))
}

/// Take `m` for this thread, waiting for it with the GIL released (the holder may be a
/// run that needs the GIL for its Python kernels). Poisoning is ignored: a panic is
/// caught inside the run and leaves the chip consistent.
pub fn lock_detached<'a, T: Send>(py: Python<'_>, m: &'a Mutex<T>) -> std::sync::MutexGuard<'a, T> {
    loop {
        match m.try_lock() {
            Ok(g) => return g,
            Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => py.detach(|| drop(m.lock())),
        }
    }
}

/// Program arguments: numpy arrays -> tensors (zero copy; the caller keeps the arrays
/// alive for the whole run), Python ints and floats -> scalars.
pub fn host_args<'py>(
    args: impl Iterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Vec<Arg<'static>>> {
    let mut host: Vec<Arg<'static>> = vec![];
    for (i, a) in args.enumerate() {
        if a.is_instance_of::<PyFloat>() || a.is_instance_of::<PyInt>() {
            let (bits, f) = scalar_of(&a)?;
            host.push(Arg::Scalar(if f {
                Scalar::F64(f64::from_bits(bits))
            } else {
                Scalar::I64(bits as i64)
            }));
        } else {
            let t = host_tensor(i, &a)?;
            // safety: the caller keeps the array referenced for the whole run.
            host.push(Arg::Tensor(unsafe { HostTensor::from_raw(t) }));
        }
    }
    Ok(host)
}

impl PyChip {
    pub(crate) fn check_process(&self) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Err(forked_err("ChipWorker", self.pid));
        }
        Ok(())
    }
}

impl Drop for PyChip {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // A forked child: the core threads exist only in the parent, so joining them
            // would wait forever. The memory is the child's copy; leave it to exit.
            let chip = self
                .chip
                .get_mut()
                .map(|c| c.take())
                .unwrap_or_else(|p| p.into_inner().take());
            std::mem::forget(chip);
        }
    }
}

#[pymethods]
impl PyChip {
    /// `prewarm`: CallConfigs (or RunConfigs) whose sizings are built now.
    #[new]
    #[pyo3(signature = (cores=0, arena_cache_slots=4, prewarm=None, aic_cores=None, device_memory=None))]
    fn new(
        py: Python<'_>,
        cores: usize,
        arena_cache_slots: usize,
        prewarm: Option<&Bound<'_, PyAny>>,
        aic_cores: Option<usize>,
        device_memory: Option<u64>,
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
            prewarm: sizings,
            ..ChipOptions::default()
        };
        if let Some(b) = device_memory {
            opts.device_memory = b;
        }
        let chip = py
            .detach(|| ChipWorker::new(opts))
            .map_err(|f| failure_err(py, &f))?;
        Ok(PyChip {
            chip: Mutex::new(Some(chip)),
            pid: std::process::id(),
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
        self.check_process()?;
        let cfg = call_config_of(py, config)?;
        let host = host_args(args.iter())?;
        let (program, pending) = python_program(orchestration.clone_ref(py), &name);
        let mut guard = lock_detached(py, &self.chip);
        let chip = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("this ChipWorker is closed"))?;
        let hook = gil_hook;
        let r = chip.run_with_hook(&program, &host, &cfg, &hook);
        if r.is_err() {
            interrupt_python_kernels(py, &chip.abandoned_threads());
        }
        drop(guard);
        drop(host);
        if let Some(e) = pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(same_failure_said_fully(py, e, r.as_ref().err()));
        }
        match r {
            Ok(rep) => report_py(py, &rep),
            Err(e) => Err(run_err(py, e)),
        }
    }

    /// Run `orchestration(rt, *args)` once, as `run` does, and record its task graph.
    #[pyo3(signature = (orchestration, name, args, config=None))]
    fn capture(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        orchestration: Py<PyAny>,
        name: String,
        args: &Bound<'_, PyList>,
        config: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::replay::PyCaptured> {
        let me = slf.get();
        me.check_process()?;
        let cfg = call_config_of(py, config)?;
        let host = host_args(args.iter())?;
        let (program, pending) = python_program(orchestration.clone_ref(py), &name);
        let mut guard = lock_detached(py, &me.chip);
        let chip = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("this ChipWorker is closed"))?;
        let hook = gil_hook;
        let r = chip.capture_with_hook(&program, &host, &cfg, Some(&hook));
        if r.is_err() {
            interrupt_python_kernels(py, &chip.abandoned_threads());
        }
        drop(guard);
        drop(host);
        if let Some(e) = pending.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(same_failure_said_fully(py, e, r.as_ref().err()));
        }
        match r {
            Ok(g) => Ok(crate::replay::PyCaptured::new(g, slf.clone().unbind())),
            Err(e) => Err(run_err(py, e)),
        }
    }

    fn arena_stats(&self, py: Python<'_>) -> PyResult<PyArenaStats> {
        self.check_process()?;
        let stats = lock_detached(py, &self.chip)
            .as_ref()
            .map(|c| c.arena_stats());
        arena_stats_py(
            py,
            stats.ok_or_else(|| PyRuntimeError::new_err("this ChipWorker is closed"))?,
        )
    }

    #[getter]
    fn cores(&self, py: Python<'_>) -> usize {
        lock_detached(py, &self.chip)
            .as_ref()
            .map(|c| c.cores().len())
            .unwrap_or(0)
    }

    /// Stop the chip (waits for a run in flight on another thread).
    /// In a forked child, closing forgets the parent's chip without touching it.
    fn close(&self, py: Python<'_>) {
        let chip = lock_detached(py, &self.chip).take();
        match chip {
            Some(c) if std::process::id() != self.pid => std::mem::forget(c),
            Some(c) => {
                interrupt_python_kernels(py, &c.abandoned_threads());
                py.detach(move || drop(c))
            }
            None => {}
        }
    }

    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        lock_detached(py, &self.chip).is_none()
    }
}
