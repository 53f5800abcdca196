//! The orchestrator handed to an L3 orchestration (`o`): chip tasks submitted to the
//! node's chips, node allocations in shared memory, and scopes.

use crate::config::call_config_of;
use crate::conversion::{
    arg_dirs, check_aligned, data_address, dtype_from_name, scalar_arg, type_name, worker_index,
};
use crate::errors::{config_err, failure_err};
use crate::orchestrator::{user_site, RunBound, RunPtr};
use crate::task_args::PyTaskArgs;
use crate::tensor::{next_run_id, stale_tensor, PySpec, PyTensor};
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use parking_lot::RwLock;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::sync::{Arc, Mutex};
use taskring::node::{ChipCallable, NextLevelArg, NodeOrchestrator};
use taskring::CallConfig;
use taskring::Tensor;

/// The orchestrator handed to an L3 orchestration; valid only while its run lasts.
#[pyclass(module = "taskring", name = "NodeOrchestrator")]
pub struct PyNodeOrchestrator {
    ptr: RunPtr<NodeOrchestrator<'static, 'static>>,
    run: u64,
    /// Owner worker of device tensors (`alloc_tensor`), by data address.
    owners: Py<PyAny>,
    /// The arrays passed to `submit_next_level`, kept alive until the run ends (a
    /// temporary `shared_array` must not be freed while a chip may still use it).
    keep: Arc<Mutex<Vec<Py<PyAny>>>>,
    /// The registered programs (their signatures order a `TaskArgs`).
    callables: Arc<RwLock<Vec<ChipCallable>>>,
}

impl RunBound for PyNodeOrchestrator {
    type Target = NodeOrchestrator<'static, 'static>;
    fn run_ptr(&self) -> &RunPtr<Self::Target> {
        &self.ptr
    }
}

impl PyNodeOrchestrator {
    /// An orchestrator for a new run of a node whose device-tensor owners are `owners`
    /// and whose programs are `callables`; the arrays its submits pass are kept in
    /// `keep` until the run ends.
    pub fn new(
        owners: Py<PyAny>,
        keep: Arc<Mutex<Vec<Py<PyAny>>>>,
        callables: Arc<RwLock<Vec<ChipCallable>>>,
    ) -> Self {
        PyNodeOrchestrator {
            ptr: RunPtr::new(),
            run: next_run_id(),
            owners,
            keep,
            callables,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut NodeOrchestrator<'static, 'static>) -> R) -> PyResult<R> {
        self.ptr.with(f)
    }
}

/// One argument of an L3 submit to chip `worker` (None: to a host worker): a scalar, a
/// tensor handle of run `run`, or an array in shared memory (a device tensor only on its
/// own chip). A host worker also takes an array elsewhere (it reads it where `fork()`
/// left it) but no device tensor.
fn node_arg(
    i: usize,
    a: &Bound<'_, PyAny>,
    worker: Option<usize>,
    owners: &Bound<'_, PyAny>,
    run: u64,
) -> PyResult<NextLevelArg> {
    match scalar_arg(i, a)? {
        Some(Ok(v)) => return Ok(NextLevelArg::Int(v)),
        Some(Err(v)) => return Ok(NextLevelArg::Float(v)),
        None => {}
    }
    if let Ok(t) = a.extract::<PyRef<'_, PyTensor>>() {
        if t.run != run {
            return Err(stale_tensor(&format!("argument {i}")));
        }
        return Ok(NextLevelArg::Tensor(t.t));
    }
    let arr = a.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "argument {i}: expected a numpy array from taskring.shared_array, a Tensor, an int or a float, got {}",
            type_name(a)
        ))
    })?;
    if !arr.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array must be C-contiguous"
        )));
    }
    let dname = arr.dtype().str()?.to_string();
    let dtype = dtype_from_name(&dname).ok_or_else(|| {
        PyTypeError::new_err(format!("argument {i}: dtype {dname} is not supported"))
    })?;
    let shape: Vec<u32> = arr.shape().iter().map(|&d| d as u32).collect();
    if shape.is_empty() || shape.len() > taskring::MAX_DIMS || shape.contains(&0) {
        return Err(PyValueError::new_err(format!(
            "argument {i}: shape {shape:?} is not supported"
        )));
    }
    let data = data_address(arr);
    check_aligned(i, data, dtype)?;
    let item = dtype.size_bytes() as u64;
    let nbytes = arr.len() as u64 * item;
    // Address the view inside its shared region, so overlapping views of one buffer are
    // one buffer to the tensormap, and ownership covers every view of a device tensor.
    let located = taskring::node::shm::locate(data, nbytes);
    let Some((_, region_len, off)) = located else {
        if worker.is_none() {
            let t = Tensor::from_raw(data, &shape, dtype);
            t.validate()
                .map_err(|e| PyValueError::new_err(format!("argument {i}: {e}")))?;
            return Ok(NextLevelArg::Tensor(t));
        }
        return Err(PyTypeError::new_err(format!(
            "argument {i} is not in shared memory: chip tasks take arrays from taskring.shared_array (or alloc_tensor), or node allocations"
        )));
    };
    let base = data - off;
    if let Some(owner) = owners
        .get_item(base)
        .ok()
        .and_then(|v| v.extract::<usize>().ok())
    {
        match worker {
            None => {
                return Err(PyValueError::new_err(format!(
                    "argument {i} is a device tensor of chip {owner}; a SUB task takes host tensors only"
                )))
            }
            Some(w) if w != owner => {
                return Err(PyValueError::new_err(format!(
                    "argument {i} is a device tensor of chip {owner}; it cannot be passed to a task on chip {w}"
                )))
            }
            _ => {}
        }
    }
    let mut t = Tensor::from_raw(base, &shape, dtype);
    t.buf_bytes = region_len;
    t.offset = off / item;
    t.validate()
        .map_err(|e| PyValueError::new_err(format!("argument {i}: {e}")))?;
    Ok(NextLevelArg::Tensor(t))
}

#[pymethods]
impl PyNodeOrchestrator {
    /// Submit the registered program `handle` with `args` to chip `worker`, to run
    /// there with `config` (a CallConfig, RunConfig or None = defaults; never the
    /// run-level config implicitly). Returns the L3 task id.
    #[pyo3(signature = (handle, args, config=None, *, worker, dirs=None))]
    fn submit_next_level(
        &self,
        py: Python<'_>,
        handle: u32,
        args: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, PyAny>>,
        worker: &Bound<'_, PyAny>,
        dirs: Option<Vec<u32>>,
    ) -> PyResult<u64> {
        let dirs = dirs.map(arg_dirs).transpose()?;
        let chips = self.with(|o| o.chips())?;
        let worker = worker_index(worker, chips)?;
        let cfg: CallConfig = call_config_of(py, config)?;
        cfg.validate().map_err(config_err)?;
        let owners = self.owners.bind(py);
        // Simpler-style `TaskArgs` (`docs/api.md` §4.1.1): put in the program's signature order.
        let ordered = match args.extract::<PyRef<'_, PyTaskArgs>>() {
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
            list.push(node_arg(i, &a, Some(worker), owners, self.run)?);
            if !list[i].is_scalar() {
                keep.push(a.unbind());
            }
        }
        self.keep.lock().unwrap().extend(keep);
        self.with(|o| {
            o.submit_next_level_with(handle, dirs.as_deref(), &list, &cfg, worker)
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

    #[getter]
    fn host_workers(&self) -> PyResult<usize> {
        self.with(|o| o.host_workers())
    }

    /// Submit task `callable` (the host workers' own number) with `args` (tensors and
    /// scalars) used as `dirs` say (ArgDir values, one per argument) to host worker
    /// `worker`, or with None to the pool's least busy one; it runs there with
    /// `config`. Returns the L3 task id.
    #[pyo3(signature = (callable, args, dirs, config=None, worker=None))]
    fn submit_host(
        &self,
        py: Python<'_>,
        callable: u32,
        args: &Bound<'_, PyAny>,
        dirs: Vec<u32>,
        config: Option<&Bound<'_, PyAny>>,
        worker: Option<usize>,
    ) -> PyResult<u64> {
        let cfg: CallConfig = call_config_of(py, config)?;
        cfg.validate().map_err(config_err)?;
        let dirs = arg_dirs(dirs)?;
        let owners = self.owners.bind(py);
        let mut list = vec![];
        let mut keep = vec![];
        for (i, a) in args.try_iter()?.enumerate() {
            let a = a?;
            list.push(node_arg(i, &a, None, owners, self.run)?);
            if !list[i].is_scalar() {
                keep.push(a.unbind());
            }
        }
        self.keep.lock().unwrap().extend(keep);
        self.with(|o| {
            o.submit_host(callable, &dirs, &list, &cfg, worker)
                .map(|id| id.0)
                .map_err(|f| failure_err(py, &f))
        })?
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
            ids.push(self.submit_next_level(py, handle, a, config, w, None)?);
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
