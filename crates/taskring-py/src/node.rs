//! `Node`, the native part of `taskring.Worker(level=3)`, and `SharedMem`, the memory
//! its chips see (backs `taskring.shared_array`).

use crate::callable::{program_of, PyChipCallable};
use crate::config::{call_config_of, PyCallConfig};
use crate::conversion::{arg_dirs, dtype_itemsize, worker_index};
use crate::errors::{
    config_err, forked_err, is_failure, node_err, orchestration_failed, py_err_text, raised_in_run,
    PendingErr,
};
use crate::gil::{gil_hook, interrupt_hook, RunGuard, RunLock};
use crate::node_orchestrator::PyNodeOrchestrator;
use crate::orchestrator::call_bound;
use crate::reports::{arena_stats_py, PyArenaStats, PyNodeRunReport};
use parking_lot::RwLock;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use taskring::node::shm::SharedBuffer;
use taskring::node::{
    ChipCallable, ForkHooks, HostArg, HostCall, HostHook, HostWorkers, Node, NodeError, NodeHandle,
    NodeOptions, NodeOrchestrator, NodeRunReport,
};
use taskring::CallConfig;
use taskring::StatusCode;

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
    /// The bytes of one element of `dtype` (a name); `TypeError` for a dtype the
    /// runtime does not support.
    #[staticmethod]
    fn itemsize(dtype: &str) -> PyResult<usize> {
        dtype_itemsize(dtype)
    }

    /// Whether `[address, address + nbytes)` lies in one shared memory region of this
    /// process (one chips and host workers map).
    #[staticmethod]
    fn holds(address: u64, nbytes: u64) -> bool {
        taskring::node::shm::locate(address, nbytes).is_some()
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

/// The options of `Node(...)` after its chips, programs and owners.
struct NodeArgs<'py> {
    /// Each chip in a process of its own (else a thread of this one).
    chip_processes: bool,
    arena_cache_slots: usize,
    /// Cores per chip (0: the chip's default).
    chip_cores: usize,
    /// A CallConfig (or RunConfig) whose sizing every chip builds at start.
    prewarm: Option<Bound<'py, PyAny>>,
    /// Each chip's device memory in bytes (None: the default).
    device_memory: Option<u64>,
    /// A prewarm that does not fit a chip's device memory is a warning, not a failure.
    prewarm_if_fits: bool,
    /// Host workers: their labels, the pool, entry and hooks (see [`host_workers`]).
    host: Option<HostArgs>,
}

/// The host workers of `Node(...)`: `labels[i]` names host worker `i` in failures; the
/// first `pool` form the pool; `entry(worker, callable, args, config)` runs each task in
/// the worker's process (returns None, or a failure text); `start(worker)` and
/// `stop(worker)` run there once.
struct HostArgs {
    labels: Vec<String>,
    pool: usize,
    entry: Py<PyAny>,
    start: Option<Py<PyAny>>,
    stop: Option<Py<PyAny>>,
}

/// A host-worker hook's outcome: None is success, a str the failure text.
fn hook_outcome(py: Python<'_>, r: PyResult<Py<PyAny>>) -> Result<(), String> {
    match r {
        Ok(v) if v.is_none(py) => Ok(()),
        Ok(v) => Err(v
            .bind(py)
            .str()
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "failed".into())),
        Err(e) => Err(py_err_text(py, &e)),
    }
}

/// The node's host workers, calling into Python in their processes.
fn host_workers(h: HostArgs) -> HostWorkers {
    let entry = Arc::new(h.entry);
    let pool = h.pool;
    let hook = |f: Option<Py<PyAny>>| -> Option<HostHook> {
        f.map(|f| {
            let f = Arc::new(f);
            Arc::new(move |i: usize| Python::attach(|py| hook_outcome(py, f.call1(py, (i,)))))
                as HostHook
        })
    };
    HostWorkers {
        labels: h.labels,
        pool: h.pool,
        start: hook(h.start),
        stop: hook(h.stop),
        entry: Arc::new(move |c: &HostCall<'_>| {
            Python::attach(|py| {
                let args = PyList::empty(py);
                for a in c.args {
                    let r = match *a {
                        HostArg::Int(v) => args.append(v),
                        HostArg::Float(v) => args.append(v),
                        HostArg::Tensor(t) => {
                            let n = t.ndims as usize;
                            // Elements from the first to one past the last, in strides.
                            let span = (0..n)
                                .map(|k| {
                                    (t.shape[k] as u64).saturating_sub(1) * t.strides[k] as u64
                                })
                                .sum::<u64>()
                                + 1;
                            args.append((
                                t.data_ptr() as u64,
                                span * t.dtype.size_bytes() as u64,
                                t.shape[..n].to_vec(),
                                t.strides[..n].to_vec(),
                                t.dtype.name(),
                            ))
                        }
                    };
                    r.map_err(|e| py_err_text(py, &e))?;
                }
                // A pooled (SUB) worker's callable takes no config: none is built for it.
                let cfg = if c.worker < pool {
                    None
                } else {
                    Some(PyCallConfig::from_rust(py, c.config).map_err(|e| py_err_text(py, &e))?)
                };
                hook_outcome(py, entry.call1(py, (c.worker, c.callable, args, cfg)))
            })
        }),
    }
}

/// Native part of `taskring.Worker(level=3)`.
///
/// Calls from several threads are serialised by `node` (a thread waits for its turn
/// without the GIL, and Ctrl-C interrupts that wait; the run's own orchestration calling
/// `run()` or `close()` raises `RuntimeError` at once); `close()` waits for the run in
/// flight, after telling it to give up on chips that do not answer. A run waits for
/// its chips with the GIL released and looks for Ctrl-C every 50 ms: `KeyboardInterrupt`
/// cancels the run (the worker stays usable; see `taskring::node`). The worker belongs
/// to the process that created it: in a child of `fork()` every call raises at once and
/// `close()` (or dropping it) forgets it without touching the parent's chips.
#[pyclass(module = "taskring._native", name = "Node")]
pub struct PyNode {
    /// Held for a whole run; other calls wait for it with the GIL released, and the
    /// run's own orchestration calling `run()` or `close()` is refused at once.
    node: RunLock<Option<Node>>,
    callables: Arc<RwLock<Vec<ChipCallable>>>,
    processes: bool,
    owners: Py<PyAny>,
    pids: Vec<i32>,
    host_pids: Vec<i32>,
    started: AtomicBool,
    /// Statistics, cancel and close without the node lock; dropped by `close()`.
    handle: parking_lot::Mutex<Option<NodeHandle>>,
    /// The process that created the worker.
    pid: u32,
    /// `close()` was called: no run starts any more.
    closing: AtomicBool,
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
        let mut guard = self.lock(py, "run()")?;
        let node = guard
            .as_mut()
            .filter(|_| !self.closing.load(Ordering::SeqCst))
            .ok_or_else(|| PyRuntimeError::new_err("this Worker is closed"))?;
        let pending: Arc<PendingErr> = Arc::default();
        let pend = pending.clone();
        // Ctrl-C while the run waits: see `interrupt_hook`.
        let h = node.handle();
        let (hook, interrupt) = interrupt_hook(move || h.cancel());
        let h = node.handle();
        let keep: Arc<Mutex<Vec<Py<PyAny>>>> = Arc::default();
        let kept = keep.clone();
        let r = node.run(
            move |o| {
                Python::attach(|py| {
                    let fail = |e: PyErr| orchestration_failed(py, e, &pend, &|| h.cancel());
                    let po = PyNodeOrchestrator::new(
                        owners.clone_ref(py),
                        kept.clone(),
                        callables.clone(),
                    );
                    #[allow(clippy::unnecessary_cast)] // the cast erases the run's lifetimes
                    let target = o as *mut NodeOrchestrator<'_, '_>
                        as *mut NodeOrchestrator<'static, 'static>;
                    call_bound(py, &orch, po, target, rest.as_ref()).map_err(fail)
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
        if let Some(e) = raised_in_run(&interrupt, &pending, |e| {
            chip_failed && is_failure(py, e, StatusCode::TaskFailed)
        }) {
            return Err(e);
        }
        r.map_err(|e| node_err(py, e))
    }

    /// The node, locked for `call` (waiting without the GIL while a run holds it;
    /// Ctrl-C raises; refused on the thread whose run holds it).
    fn lock<'a>(&'a self, py: Python<'_>, call: &str) -> PyResult<RunGuard<'a, Option<Node>>> {
        self.node.lock(py, call)
    }

    fn check_process(&self) -> PyResult<()> {
        if std::process::id() != self.pid {
            return Err(forked_err("Worker", self.pid));
        }
        Ok(())
    }

    /// A node of the chips `device_ids` running the programs `callables`, with the
    /// options `o` (see [`PyNode::new`]).
    fn start(
        device_ids: Vec<u32>,
        callables: &Bound<'_, PyList>,
        owners: Py<PyAny>,
        o: NodeArgs<'_>,
    ) -> PyResult<Self> {
        let py = callables.py();
        let reg = Arc::new(RwLock::new(Vec::new()));
        for c in callables.iter() {
            let (f, name, sig): (Py<PyAny>, String, Vec<u32>) = c.extract()?;
            let (program, _pending) = program_of(f, &name);
            reg.write().push(ChipCallable {
                program,
                signature: arg_dirs(sig)?,
            });
        }
        let prewarm = match o.prewarm {
            Some(p) => {
                let c = call_config_of(py, Some(&p))?;
                c.validate().map_err(config_err)?;
                Some(c)
            }
            _ => None,
        };
        let opts = NodeOptions {
            device_ids,
            chip_processes: o.chip_processes,
            arena_cache_slots: o.arena_cache_slots,
            chip_cores: o.chip_cores,
            prewarm,
            prewarm_if_fits: o.prewarm_if_fits,
            blocking_hook: Some(Arc::new(gil_hook)),
            host: o.host.map(host_workers),
            // A C++ program registered after the chips started: each chip loads its
            // libraries from the paths it was loaded from here.
            late_callable: Some(Arc::new(|d: &[u8]| {
                taskring::ChipCallable::from_description(d).map(|c| c.for_node())
            })),
            ..NodeOptions::default()
        };
        let opts = NodeOptions {
            device_memory: o.device_memory.unwrap_or(opts.device_memory),
            ..opts
        };
        let node = Node::new(opts, reg.clone(), &PythonForkHooks).map_err(|e| node_err(py, e))?;
        let pids = node.chip_pids();
        let host_pids = node.host_pids();
        let handle = node.handle();
        Ok(PyNode {
            handle: parking_lot::Mutex::new(Some(handle)),
            pid: std::process::id(),
            closing: AtomicBool::new(false),
            node: RunLock::new(Some(node)),
            callables: reg,
            processes: o.chip_processes,
            owners,
            pids,
            host_pids,
            started: AtomicBool::new(true),
        })
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
    #[pyo3(signature = (
        device_ids,
        callables,
        owners,
        chip_processes=true,
        arena_cache_slots=4,
        chip_cores=0,
        prewarm=None,
        device_memory=None,
        prewarm_if_fits=false,
        host_labels=None,
        host_pool=0,
        host_entry=None,
        host_start=None,
        host_stop=None
    ))]
    #[allow(clippy::too_many_arguments)] // the Python signature's, bound by PyO3
    fn new(
        device_ids: Vec<u32>,
        callables: &Bound<'_, PyList>,
        owners: Py<PyAny>,
        chip_processes: bool,
        arena_cache_slots: usize,
        chip_cores: usize,
        prewarm: Option<Bound<'_, PyAny>>,
        device_memory: Option<u64>,
        prewarm_if_fits: bool,
        host_labels: Option<Vec<String>>,
        host_pool: usize,
        host_entry: Option<Py<PyAny>>,
        host_start: Option<Py<PyAny>>,
        host_stop: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let host = match (host_labels, host_entry) {
            (Some(labels), Some(entry)) if !labels.is_empty() => Some(HostArgs {
                labels,
                pool: host_pool,
                entry,
                start: host_start,
                stop: host_stop,
            }),
            (Some(labels), None) if !labels.is_empty() => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "host workers need host_entry",
                ))
            }
            _ => None,
        };
        let o = NodeArgs {
            chip_processes,
            arena_cache_slots,
            chip_cores,
            prewarm,
            device_memory,
            prewarm_if_fits,
            host,
        };
        PyNode::start(device_ids, callables, owners, o)
    }
    /// Register one more program (chip threads see it at once; chip processes are sent a
    /// C++ `ChipCallable`, and know a Python program only if it was registered before
    /// they started).
    fn register(
        &self,
        py: Python<'_>,
        f: Py<PyAny>,
        name: String,
        signature: Vec<u32>,
    ) -> PyResult<u32> {
        self.check_process()?;
        // Held until the program is in the host's registry: one registration at a time,
        // so the index sent is the next one on every chip.
        let mut _turn = None;
        if self.processes && self.started.load(Ordering::Relaxed) {
            let desc = f
                .bind(py)
                .cast::<PyChipCallable>()
                .ok()
                .map(|c| c.get().inner.describe());
            let Some(desc) = desc else {
                return Err(PyRuntimeError::new_err(
                    "register programs before init(): chip processes are forked at init() and only know the Python programs registered by then (a C++ ChipCallable can be registered later; or use chip_processes=False)",
                ));
            };
            _turn = Some(self.lock(py, "register()")?);
            let index = self.callables.read().len() as u32;
            let h = self.handle()?;
            py.detach(|| h.register_late(index, &desc))
                .map_err(|e| node_err(py, e))?;
        }
        let (program, _pending) = program_of(f, &name);
        let mut r = self.callables.write();
        r.push(ChipCallable {
            program,
            signature: arg_dirs(signature)?,
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

    /// Process ids of the host workers.
    #[getter]
    fn host_pids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.host_pids)
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
        // From the run's own orchestration: refused before anything changes.
        self.node.check_not_held_here("close()")?;
        self.closing.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.lock().as_ref() {
            h.request_close();
        }
        let taken = self.lock(py, "close()")?.take();
        if let Some(mut n) = taken {
            py.detach(move || n.close());
        }
        self.handle.lock().take();
        Ok(())
    }
}
