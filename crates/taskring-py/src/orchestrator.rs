//! The L2 orchestrator handed to a program (`rt`): submits, allocations and scopes;
//! binding a Python orchestrator object to a run's Rust orchestrator for the length of
//! one call (shared with L3 and L4); a Python orchestration as a Rust `Program`.

use crate::conversion::{scalar_of, type_name};
use crate::errors::{failure_err, py_err_text, PendingErr};
use crate::kernel::PyKernel;
use crate::task_args::PyTaskArgs;
use crate::tensor::{next_run_id, stale_tensor, PySpec, PyTensor};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyList, PyTuple};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};
use taskring::KernelRef;
use taskring::{Arg, Orchestrator, Program, RuntimeFailure, StatusCode, TaskId, Tensor};
use taskring::{Scalar, TaskArgs};

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

/// The orchestrator handed to a program as `rt`; valid only while its run lasts.
#[pyclass(module = "taskring", name = "Orchestrator")]
pub struct PyOrchestrator {
    ptr: RunPtr<Orchestrator<'static>>,
    run: u64,
}

/// A pointer to a run's orchestrator: set only while the orchestration call is on the
/// stack of the thread that created it, usable only from that thread.
pub struct RunPtr<T> {
    ptr: AtomicPtr<T>,
    thread: std::thread::ThreadId,
}

impl<T> RunPtr<T> {
    pub fn new() -> Self {
        RunPtr {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            thread: std::thread::current().id(),
        }
    }
    pub fn set(&self, p: *mut T) {
        self.ptr.store(p, Ordering::Relaxed);
    }
    /// Run `f` on the target if the run is live and this is its thread.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> PyResult<R> {
        let p = self.ptr.load(Ordering::Relaxed);
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
                type_name(&it)
            ))
        })?;
        if t.run != run {
            return Err(stale_tensor(&format!("{what}[{i}]")));
        }
        out.push(t.t);
    }
    Ok(out)
}

/// Add `deps` (Tasks or task ids) to `a`.
fn add_deps(a: &mut TaskArgs, deps: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let Some(ds) = deps else { return Ok(()) };
    for it in ds.try_iter()? {
        let it = it?;
        let id: u64 = if let Ok(t) = it.extract::<PyRef<'_, PyTask>>() {
            t.id
        } else {
            it.extract()?
        };
        a.dep(TaskId(id));
    }
    Ok(())
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
    // One Rust parameter per Python parameter, bound by PyO3: binding the keywords by
    // hand (as `Node(...)` does) costs about 100 ns more per submit, which B7 measures.
    #[expect(clippy::too_many_arguments, reason = "PyO3 binds rt.submit's keywords")]
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
        add_deps(&mut a, deps)?;
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
        let a = args.kernel_args(self.run)?;
        let k = kernel.k;
        let run = self.run;
        self.with(|o| submit_built(py, o, k, &a, run))?
    }

    /// A dependency-only task (barrier).
    #[pyo3(signature = (*, deps=None))]
    fn submit_dummy(&self, py: Python<'_>, deps: Option<&Bound<'_, PyAny>>) -> PyResult<PyTask> {
        let mut a = TaskArgs::new();
        add_deps(&mut a, deps)?;
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

/// A Rust `Program` running the Python orchestration `orch(rt, *args)`. A Python
/// exception fails the run (EXPLICIT_ORCH_FATAL, with the exception's text) and is
/// kept in the returned slot, so the caller can re-raise the original. The program's
/// identity is the Python object's (`id(orch)`; the program keeps it alive), so every
/// dispatch of one function shares what automatic sizing learns of it.
pub fn python_program(orch: Py<PyAny>, name: &str) -> (Program, Arc<PendingErr>) {
    let pending: Arc<PendingErr> = Arc::new(Mutex::new(None));
    let pending_ref = pending.clone();
    let identity = orch.as_ptr() as usize;
    let program = Program::with_identity(name, identity, move |o, args| {
        Python::attach(|py| {
            let keep = |e: PyErr, what: &str| {
                let text = format!("{what}: {}", py_err_text(py, &e));
                *pending_ref.lock().unwrap() = Some(e);
                RuntimeFailure::new(StatusCode::ExplicitOrchFatal, None, text)
            };
            let run = next_run_id();
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
