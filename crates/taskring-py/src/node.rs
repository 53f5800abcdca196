//! Python classes over the L3 node: `SharedMem` (memory chips see), `Node` (the native
//! part of `taskring.Worker(level=3)`), the L3 orchestrator `o`, and the reports.

use crate::config::{call_config_of, PyRingSizing};
use crate::runtime::{
    arena_stats_py, failure_err, gil_hook, python_program, user_site, PyArenaStats, PyPeak, PySpec,
    PyTensor,
};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use parking_lot::RwLock;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PyTuple};
use std::sync::Arc;
use taskring::config::CallConfig;
use taskring::node::shm::SharedBuffer;
use taskring::node::{
    ArgDir, ChipCallable, ForkHooks, NextLevelArg, Node, NodeError, NodeHandle, NodeOptions,
    NodeOrchestrator, NodeRunReport,
};
use taskring::{DType, Tensor};

/// Shared memory that chip processes can map (backs `taskring.shared_array`).
#[pyclass(module = "taskring._native", name = "SharedMem", frozen)]
pub struct PySharedMem {
    buf: SharedBuffer,
}

#[pymethods]
impl PySharedMem {
    #[new]
    fn new(nbytes: usize) -> PyResult<Self> {
        Ok(PySharedMem {
            buf: SharedBuffer::new(nbytes).map_err(|e| PyRuntimeError::new_err(e.to_string()))?,
        })
    }
    #[getter]
    fn address(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
    #[getter]
    fn nbytes(&self) -> usize {
        self.buf.len()
    }
}

/// Interpreter fork hooks (what `os.fork()` does around `fork()`).
struct PythonForkHooks;

impl ForkHooks for PythonForkHooks {
    fn before(&self) {
        // safety: called with the GIL held, right before fork().
        unsafe { pyo3::ffi::PyOS_BeforeFork() }
    }
    fn after_parent(&self) {
        // safety: paired with PyOS_BeforeFork in the parent.
        unsafe { pyo3::ffi::PyOS_AfterFork_Parent() }
    }
    fn after_child(&self) {
        // safety: first call in the child after fork().
        unsafe { pyo3::ffi::PyOS_AfterFork_Child() }
    }
}

fn node_err(py: Python<'_>, e: NodeError) -> PyErr {
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
        NodeError::Forked(pid) => crate::runtime::forked_err("Worker", pid),
    }
}

/// Is `e` the runtime's own TASK_FAILED (a `taskring.RuntimeFailure` with code 200)?
fn is_task_failed(py: Python<'_>, e: &PyErr) -> bool {
    let Ok(cls) = py
        .import("taskring._errors")
        .and_then(|m| m.getattr("RuntimeFailure"))
    else {
        return false;
    };
    let v = e.value(py);
    v.is_instance(&cls).unwrap_or(false)
        && v.getattr("code").ok().and_then(|c| c.extract::<u32>().ok())
            == Some(taskring::StatusCode::TaskFailed.code())
}

fn dirs_of(sig: Vec<u32>) -> PyResult<Vec<ArgDir>> {
    sig.into_iter()
        .map(|d| match d {
            0 => Ok(ArgDir::In),
            1 => Ok(ArgDir::Out),
            2 => Ok(ArgDir::InOut),
            3 => Ok(ArgDir::Scalar),
            _ => Err(PyValueError::new_err(format!("unknown ArgDirection {d}"))),
        })
        .collect()
}

/// What a chip reported for one L2 task.
#[pyclass(module = "taskring", name = "ChipTaskReport", frozen, get_all)]
pub struct PyChipTaskReport {
    worker: usize,
    callable: u32,
    ring_sizing: Option<PyRingSizing>,
    peak: Py<PyPeak>,
    tasks: u64,
    arena_hit: bool,
    arena_build_s: f64,
    elapsed_s: f64,
    error: Option<String>,
    /// The device footprint of the task's sizing on its chip (0 if it failed before).
    arena_bytes: u64,
}

#[pymethods]
impl PyChipTaskReport {
    fn __repr__(&self) -> String {
        format!(
            "ChipTaskReport(worker={}, callable={}, tasks={}, arena_hit={}, elapsed_s={:.6}, ring_sizing={}, error={:?})",
            self.worker,
            self.callable,
            self.tasks,
            if self.arena_hit { "True" } else { "False" },
            self.elapsed_s,
            self.ring_sizing.as_ref().map(|s| s.inner.to_string()).unwrap_or_else(|| "None".into()),
            self.error
        )
    }
}

/// What one L3 run did: one `ChipTaskReport` per L2 task, in submission order.
#[pyclass(module = "taskring", name = "NodeRunReport", frozen)]
pub struct PyNodeRunReport {
    #[pyo3(get)]
    pub(crate) tasks: Py<PyList>,
    #[pyo3(get)]
    elapsed_s: f64,
    /// The Rust report (an L3 run's; None at L4), which a host sends back to rank 0.
    pub raw: Option<NodeRunReport>,
}

impl PyNodeRunReport {
    /// A report whose tasks are `tasks` (HostTaskReports at L4).
    pub fn of_tasks(tasks: Py<PyList>, elapsed_s: f64) -> Self {
        PyNodeRunReport {
            tasks,
            elapsed_s,
            raw: None,
        }
    }

    /// The Python face of an L3 run's report.
    pub fn from_rust(py: Python<'_>, rep: &NodeRunReport) -> PyResult<Self> {
        let mut tasks = vec![];
        for t in &rep.tasks {
            // A task that did not complete (no run report) shows no sizing and zeros.
            let run = t.run.as_ref();
            tasks.push(PyChipTaskReport {
                worker: t.worker,
                callable: t.callable,
                ring_sizing: run.map(|r| PyRingSizing {
                    inner: r.ring_sizing,
                }),
                peak: Py::new(
                    py,
                    crate::runtime::peak_py(&run.map(|r| r.peak).unwrap_or_default()),
                )?,
                tasks: run.map_or(0, |r| r.tasks),
                arena_hit: run.is_some_and(|r| r.arena_hit),
                arena_build_s: run.map_or(0.0, |r| r.arena_build_s),
                elapsed_s: run.map_or(0.0, |r| r.elapsed_s),
                error: t.error.clone(),
                arena_bytes: run.map_or(0, |r| r.device_memory.arena_bytes),
            });
        }
        Ok(PyNodeRunReport {
            tasks: PyList::new(py, tasks)?.unbind(),
            elapsed_s: rep.elapsed_s,
            raw: Some(rep.clone()),
        })
    }
}

#[pymethods]
impl PyNodeRunReport {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "NodeRunReport({} tasks, elapsed_s={:.6})",
            self.tasks.bind(py).len(),
            self.elapsed_s
        )
    }
}

/// The orchestrator handed to an L3 orchestration; valid only while its run lasts.
#[pyclass(module = "taskring", name = "NodeOrchestrator")]
pub struct PyNodeOrchestrator {
    ptr: crate::runtime::RunPtr<NodeOrchestrator<'static, 'static>>,
    run: u64,
    /// Owner worker of device tensors (`alloc_tensor`), by data address.
    owners: Py<PyAny>,
    /// The arrays passed to `submit_next_level`, kept alive until the run ends (a
    /// temporary `shared_array` must not be freed while a chip may still use it).
    keep: Arc<std::sync::Mutex<Vec<Py<PyAny>>>>,
    /// The registered programs (their signatures order a `TaskArgs`).
    callables: Arc<RwLock<Vec<ChipCallable>>>,
}

impl crate::runtime::RunBound for PyNodeOrchestrator {
    type Target = NodeOrchestrator<'static, 'static>;
    fn run_ptr(&self) -> &crate::runtime::RunPtr<Self::Target> {
        &self.ptr
    }
}

impl PyNodeOrchestrator {
    fn with<R>(&self, f: impl FnOnce(&mut NodeOrchestrator<'static, 'static>) -> R) -> PyResult<R> {
        self.ptr.with(f)
    }
}

fn node_arg(
    py: Python<'_>,
    i: usize,
    a: &Bound<'_, PyAny>,
    worker: usize,
    owners: &Bound<'_, PyAny>,
    run: u64,
) -> PyResult<NextLevelArg> {
    match crate::runtime::scalar_arg(i, a)? {
        Some(Ok(v)) => return Ok(NextLevelArg::Int(v)),
        Some(Err(v)) => return Ok(NextLevelArg::Float(v)),
        None => {}
    }
    if let Ok(t) = a.extract::<PyRef<'_, PyTensor>>() {
        if t.run != run {
            return Err(crate::runtime::stale_tensor(&format!("argument {i}")));
        }
        return Ok(NextLevelArg::Tensor(t.t));
    }
    let arr = a.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "argument {i}: expected a numpy array from taskring.shared_array, a Tensor, an int or a float, got {}",
            a.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    if !arr.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array must be C-contiguous"
        )));
    }
    let dname = arr.dtype().str()?.to_string();
    let dtype = crate::runtime::dtype_from_name(&dname).ok_or_else(|| {
        PyTypeError::new_err(format!("argument {i}: dtype {dname} is not supported"))
    })?;
    let shape: Vec<u32> = arr.shape().iter().map(|&d| d as u32).collect();
    if shape.is_empty() || shape.len() > taskring::tensor::MAX_DIMS || shape.contains(&0) {
        return Err(PyValueError::new_err(format!(
            "argument {i}: shape {shape:?} is not supported"
        )));
    }
    // safety: reading the data pointer of a live array.
    let data = unsafe { (*arr.as_array_ptr()).data } as u64;
    crate::runtime::check_aligned(i, data, dtype)?;
    let item = dtype.size_bytes() as u64;
    let nbytes = arr.len() as u64 * item;
    // Address the view inside its shared region, so overlapping views of one buffer are
    // one buffer to the tensormap, and ownership covers every view of a device tensor.
    let (_, region_len, off) = taskring::node::shm::locate(data, nbytes).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "argument {i} is not in shared memory: chip tasks take arrays from taskring.shared_array (or alloc_tensor), or node allocations"
        ))
    })?;
    let base = data - off;
    if let Some(owner) = owners
        .get_item(base)
        .ok()
        .and_then(|v| v.extract::<usize>().ok())
    {
        if owner != worker {
            return Err(PyValueError::new_err(format!(
                "argument {i} is a device tensor of chip {owner}; it cannot be passed to a task on chip {worker}"
            )));
        }
    }
    let _ = py;
    let mut t = Tensor::from_raw(base, &shape, dtype);
    t.buf_bytes = region_len;
    t.offset = off / item;
    t.validate()
        .map_err(|e| PyValueError::new_err(format!("argument {i}: {e}")))?;
    Ok(NextLevelArg::Tensor(t))
}

fn worker_index(w: &Bound<'_, PyAny>, chips: usize) -> PyResult<usize> {
    if w.is_instance_of::<PyBool>() || !w.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "worker must be an int, got {}",
            w.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        )));
    }
    let v: i64 = w.extract()?;
    if v < 0 {
        return Err(PyValueError::new_err(format!(
            "worker must be >= 0, got {v}"
        )));
    }
    if v as usize >= chips {
        return Err(PyValueError::new_err(format!(
            "worker {v} is not a chip of this worker (it has {chips} chips: 0..{})",
            chips - 1
        )));
    }
    Ok(v as usize)
}

#[pymethods]
impl PyNodeOrchestrator {
    /// Submit the registered program `handle` with `args` to chip `worker`, to run
    /// there with `config` (a CallConfig, RunConfig or None = defaults; never the
    /// run-level config implicitly). Returns the L3 task id.
    #[pyo3(signature = (handle, args, config=None, *, worker))]
    fn submit_next_level(
        &self,
        py: Python<'_>,
        handle: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, PyAny>>,
        worker: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let chips = self.with(|o| o.chips())?;
        let worker = worker_index(worker, chips)?;
        let cfg: CallConfig = call_config_of(py, config)?;
        cfg.validate()
            .map_err(|e| PyValueError::new_err(e.message))?;
        let owners = self.owners.bind(py);
        // Simpler-style `TaskArgs` (`docs/api.md` §4.1.1): put in the program's signature order.
        let ordered = match args.extract::<PyRef<'_, crate::runtime::PyTaskArgs>>() {
            Ok(ta) => {
                let dirs: Vec<u32> = self
                    .callables
                    .read()
                    .get(handle as usize)
                    .map(|c| c.signature.iter().map(|d| *d as u32).collect())
                    .ok_or_else(|| {
                        PyValueError::new_err(format!("unknown program handle {handle}"))
                    })?;
                Some(PyList::new(py, ta.in_signature_order(py, &dirs)?)?)
            }
            Err(_) => None,
        };
        let args = match &ordered {
            Some(l) => l.as_any(),
            None => args,
        };
        let mut list = vec![];
        let mut keep = vec![];
        for (i, a) in args.try_iter()?.enumerate() {
            let a = a?;
            list.push(node_arg(py, i, &a, worker, owners, self.run)?);
            if !list[i].is_scalar() {
                keep.push(a.unbind());
            }
        }
        self.keep.lock().unwrap().extend(keep);
        self.with(|o| {
            o.submit_next_level(handle, &list, &cfg, worker)
                .map(|id| id.0)
                .map_err(|f| failure_err(py, &f))
        })?
    }

    /// Open a scope (depth + 1); `site` names it in the scope stats (default: the
    /// caller's `file:line`).
    #[pyo3(signature = (manual=false, site=None))]
    fn begin_scope(&self, py: Python<'_>, manual: bool, site: Option<String>) -> PyResult<()> {
        let site = match site {
            Some(s) => Some(s),
            None if self.with(|o| o.engine().stats_enabled())? => Some(user_site(py)?),
            None => None,
        };
        self.with(|o| {
            match &site {
                Some(s) => o.engine().begin_scope_named(manual, s),
                None => o.engine().begin_scope(manual),
            }
            .map_err(|f| failure_err(py, &f))
        })?
    }

    fn end_scope(&self, py: Python<'_>) -> PyResult<()> {
        self.with(|o| o.engine().end_scope().map_err(|f| failure_err(py, &f)))?
    }

    /// An allocation in the node's shared memory, alive until the current scope ends.
    fn alloc(
        &self,
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
    ) -> PyResult<PyTensor> {
        let s = PySpec::new(shape, dtype)?;
        let run = self.run;
        self.with(|o| {
            o.alloc(s.s)
                .map(|r| PyTensor {
                    t: r.output(0),
                    run,
                })
                .map_err(|f| failure_err(py, &f))
        })?
    }

    #[getter]
    fn chips(&self) -> PyResult<usize> {
        self.with(|o| o.chips())
    }

    /// `with o.scope(manual=False): ...` — a nested scope of the node's engine; its
    /// scope-stats site is the line of the `with` (the user's code, as at L2).
    #[pyo3(signature = (manual=false))]
    fn scope(slf: &Bound<'_, Self>, manual: bool) -> PyResult<NodeScope> {
        let stats = slf.borrow().with(|o| o.engine().stats_enabled())?;
        let site = if stats {
            Some(user_site(slf.py())?)
        } else {
            None
        };
        Ok(NodeScope {
            o: slf.clone().unbind(),
            manual,
            site,
        })
    }

    /// Submit the same program to several chips: `args_list[i]` runs on `workers[i]`,
    /// all with `config`. Returns the task ids.
    #[pyo3(signature = (handle, args_list, config=None, *, workers))]
    fn submit_next_level_group(
        &self,
        py: Python<'_>,
        handle: u32,
        args_list: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, PyAny>>,
        workers: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<u64>> {
        let args: Vec<Bound<'_, PyAny>> = args_list.try_iter()?.collect::<PyResult<_>>()?;
        let ws: Vec<Bound<'_, PyAny>> = workers.try_iter()?.collect::<PyResult<_>>()?;
        if args.len() != ws.len() {
            return Err(PyValueError::new_err(format!(
                "submit_next_level_group: {} argument lists for {} workers",
                args.len(),
                ws.len()
            )));
        }
        let mut ids = Vec::with_capacity(ws.len());
        for (a, w) in args.iter().zip(&ws) {
            ids.push(self.submit_next_level(py, handle, a, config, w)?);
        }
        Ok(ids)
    }
}

/// The context manager returned by `o.scope()` at L3.
#[pyclass(module = "taskring", name = "NodeScope")]
pub struct NodeScope {
    o: Py<PyNodeOrchestrator>,
    manual: bool,
    /// The user's `file:line` that opened the scope (only while scope stats record).
    site: Option<String>,
}

#[pymethods]
impl NodeScope {
    fn __enter__(&self, py: Python<'_>) -> PyResult<()> {
        self.o
            .borrow(py)
            .begin_scope(py, self.manual, self.site.clone())
    }
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _v: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let r = self.o.borrow(py).end_scope(py);
        if exc_type.is_none() {
            r?;
        }
        Ok(false)
    }
}

/// Native part of `taskring.Worker(level=3)`.
///
/// Calls from several threads are serialised by `node` (a thread waits for its turn
/// without the GIL, and Ctrl-C interrupts that wait); `close()` waits for the run in
/// flight, after telling it to give up on chips that do not answer. A run waits for
/// its chips with the GIL released and looks for Ctrl-C every 50 ms: `KeyboardInterrupt`
/// cancels the run (the worker stays usable; see `taskring::node`). The worker belongs
/// to the process that created it: in a child of `fork()` every call raises at once and
/// `close()` (or dropping it) forgets it without touching the parent's chips.
#[pyclass(module = "taskring._native", name = "Node")]
pub struct PyNode {
    /// Held for a whole run; other calls wait for it with the GIL released.
    node: parking_lot::Mutex<Option<Node>>,
    callables: Arc<RwLock<Vec<ChipCallable>>>,
    processes: bool,
    owners: Py<PyAny>,
    pids: Vec<i32>,
    started: std::sync::atomic::AtomicBool,
    /// Statistics, cancel and close without the node lock; dropped by `close()`.
    handle: parking_lot::Mutex<Option<NodeHandle>>,
    /// The process that created the worker.
    pid: u32,
    /// `close()` was called: no run starts any more.
    closing: std::sync::atomic::AtomicBool,
}

impl PyNode {
    /// [`PyNode::run`] without the Python report: `orch(o, *rest)` on the node, `cfg`
    /// sizing its rings. (An L4 host answers rank 0 with the Rust report.)
    pub(crate) fn run_rust(
        &self,
        py: Python<'_>,
        orch: Py<PyAny>,
        rest: Option<Py<PyTuple>>,
        cfg: &CallConfig,
    ) -> PyResult<NodeRunReport> {
        self.check_process()?;
        let owners = self.owners.clone_ref(py);
        let callables = self.callables.clone();
        let mut guard = self.lock(py)?;
        let node = guard
            .as_mut()
            .filter(|_| !self.closing.load(std::sync::atomic::Ordering::SeqCst))
            .ok_or_else(|| PyRuntimeError::new_err("this Worker is closed"))?;
        let pending: Arc<crate::runtime::PendingErr> = Arc::new(std::sync::Mutex::new(None));
        let pend = pending.clone();
        // Ctrl-C while the run waits: see `interrupt_hook`.
        let h = node.handle();
        let (hook, interrupt) = crate::runtime::interrupt_hook(move || h.cancel());
        let h = node.handle();
        let keep: Arc<std::sync::Mutex<Vec<Py<PyAny>>>> = Arc::default();
        let kept = keep.clone();
        let r = node.run(
            move |o| {
                Python::attach(|py| {
                    let fail = |e: PyErr| {
                        crate::runtime::orchestration_failed(py, e, &pend, &|| h.cancel())
                    };
                    let po = PyNodeOrchestrator {
                        ptr: crate::runtime::RunPtr::new(),
                        run: crate::runtime::RUN_IDS
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                        owners: owners.clone_ref(py),
                        keep: kept.clone(),
                        callables: callables.clone(),
                    };
                    #[allow(clippy::unnecessary_cast)] // the cast erases the run's lifetimes
                    let target = o as *mut NodeOrchestrator<'_, '_>
                        as *mut NodeOrchestrator<'static, 'static>;
                    crate::runtime::call_bound(py, &orch, po, target, rest.as_ref()).map_err(fail)
                })
            },
            cfg,
            Some(&hook),
        );
        drop(guard);
        drop(std::mem::take(&mut *keep.lock().unwrap()));
        // The orchestration may have raised only because the run had already failed: a
        // chip's task failed while it was still submitting, and its next submit re-raised
        // the latched TASK_FAILED. Report the chip's own failure then, as when the chip
        // fails after the last submit. Any other exception wins.
        let chip_failed = matches!(r, Err(NodeError::Chip(_)));
        if let Some(e) = crate::runtime::raised_in_run(&interrupt, &pending, |e| {
            chip_failed && is_task_failed(py, e)
        }) {
            return Err(e);
        }
        r.map_err(|e| node_err(py, e))
    }

    /// The node, locked (waiting without the GIL while a run holds it; Ctrl-C raises).
    fn lock<'a>(&'a self, py: Python<'_>) -> PyResult<parking_lot::MutexGuard<'a, Option<Node>>> {
        if let Some(g) = self.node.try_lock() {
            return Ok(g);
        }
        let mut since_check = std::time::Instant::now();
        loop {
            if let Some(g) = self.node.try_lock() {
                return Ok(g);
            }
            py.detach(|| std::thread::sleep(std::time::Duration::from_micros(200)));
            if since_check.elapsed() >= std::time::Duration::from_millis(50) {
                py.check_signals()?;
                since_check = std::time::Instant::now();
            }
        }
    }

    fn check_process(&self) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Err(crate::runtime::forked_err("Worker", self.pid));
        }
        Ok(())
    }

    fn handle(&self) -> PyResult<NodeHandle> {
        self.handle
            .lock()
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err("this Worker is closed"))
    }
}

#[pymethods]
impl PyNode {
    /// `callables`: `(orchestration, name, signature)` triples, registered in order
    /// (handles 0, 1, ...). `owners`: a dict address -> worker of device tensors.
    #[new]
    #[pyo3(signature = (device_ids, callables, owners, chip_processes=true, arena_cache_slots=4, chip_cores=0, prewarm=None, device_memory=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        device_ids: Vec<u32>,
        callables: &Bound<'_, PyList>,
        owners: Py<PyAny>,
        chip_processes: bool,
        arena_cache_slots: usize,
        chip_cores: usize,
        prewarm: Option<&Bound<'_, PyAny>>,
        device_memory: Option<u64>,
    ) -> PyResult<Self> {
        let reg = Arc::new(RwLock::new(Vec::new()));
        for c in callables.iter() {
            let (f, name, sig): (Py<PyAny>, String, Vec<u32>) = c.extract()?;
            let (program, _pending) = python_program(f, &name);
            reg.write().push(ChipCallable {
                program,
                signature: dirs_of(sig)?,
            });
        }
        let prewarm = match prewarm {
            Some(p) if !p.is_none() => {
                let c = call_config_of(py, Some(p))?;
                c.validate().map_err(|e| PyValueError::new_err(e.message))?;
                Some(c)
            }
            _ => None,
        };
        let opts = NodeOptions {
            device_ids,
            chip_processes,
            arena_cache_slots,
            chip_cores,
            prewarm,
            blocking_hook: Some(Arc::new(gil_hook)),
            ..NodeOptions::default()
        };
        let opts = NodeOptions {
            device_memory: device_memory.unwrap_or(opts.device_memory),
            ..opts
        };
        let node = Node::new(opts, reg.clone(), &PythonForkHooks).map_err(|e| node_err(py, e))?;
        let pids = node.chip_pids();
        let handle = node.handle();
        Ok(PyNode {
            handle: parking_lot::Mutex::new(Some(handle)),
            pid: std::process::id(),
            closing: std::sync::atomic::AtomicBool::new(false),
            node: parking_lot::Mutex::new(Some(node)),
            callables: reg,
            processes: chip_processes,
            owners,
            pids,
            started: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// Register one more program (chip threads see it at once; chip processes only
    /// know the programs registered before they started).
    fn register(&self, f: Py<PyAny>, name: String, signature: Vec<u32>) -> PyResult<u32> {
        self.check_process()?;
        if self.processes && self.started.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(PyRuntimeError::new_err(
                "register programs before init(): chip processes are forked at init() and only know the programs registered by then (or use chip_processes=False)",
            ));
        }
        let (program, _pending) = python_program(f, &name);
        let mut r = self.callables.write();
        r.push(ChipCallable {
            program,
            signature: dirs_of(signature)?,
        });
        Ok(r.len() as u32 - 1)
    }

    /// Run `orch(o)`; `config` sizes the node's own rings.
    #[pyo3(signature = (orch, config=None))]
    fn run(
        &self,
        py: Python<'_>,
        orch: Py<PyAny>,
        config: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyNodeRunReport> {
        let cfg = call_config_of(py, config)?;
        let rep = self.run_rust(py, orch, None, &cfg)?;
        PyNodeRunReport::from_rust(py, &rep)
    }

    /// Tell chip `worker` that it holds `nbytes` of device-resident tensors (charged to
    /// its device memory); its arena statistics after. A chip whose memory cannot hold
    /// them raises its DEVICE_OUT_OF_MEMORY (as `chip {w} (pid {p}): ...`).
    fn hold(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        nbytes: u64,
    ) -> PyResult<PyArenaStats> {
        self.check_process()?;
        let w = worker_index(worker, self.pids.len())?;
        let h = self.handle()?;
        let st = py
            .detach(move || h.chip_hold(w, nbytes))
            .map_err(|e| node_err(py, e))?;
        arena_stats_py(py, st)
    }

    /// Chip `worker`'s arena statistics.
    fn arena_stats(&self, py: Python<'_>, worker: &Bound<'_, PyAny>) -> PyResult<PyArenaStats> {
        self.check_process()?;
        let w = worker_index(worker, self.pids.len())?;
        let h = self.handle()?;
        let st = py
            .detach(move || h.chip_arena_stats(w))
            .map_err(|e| node_err(py, e))?;
        arena_stats_py(py, st)
    }

    #[getter]
    fn pids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.pids)
    }

    #[getter]
    fn chips(&self) -> usize {
        self.pids.len()
    }

    /// Stop every chip (idempotent). Waits for the run in flight, which gives up on
    /// chips that do not answer (they are killed).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.pid {
            // A child of fork(): the node is the parent's; forget it (its lock may have
            // been held by another thread at fork() — never wait for it here).
            if let Some(mut g) = self.node.try_lock() {
                if let Some(mut n) = g.take() {
                    n.close();
                }
            }
            return Ok(());
        }
        self.closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(h) = self.handle.lock().as_ref() {
            h.request_close();
        }
        let taken = self.lock(py)?.take();
        if let Some(mut n) = taken {
            py.detach(move || n.close());
        }
        self.handle.lock().take();
        Ok(())
    }
}

/// Used by `shared_array`: check a dtype name.
#[pyfunction]
pub fn dtype_itemsize(name: &str) -> PyResult<usize> {
    crate::runtime::dtype_from_name(name)
        .map(|d: DType| d.size_bytes())
        .ok_or_else(|| PyTypeError::new_err(format!("unsupported dtype {name}; expected one of float32, float16, bfloat16, int32, int64, int8, uint8")))
}
