//! Python classes over L4 (`taskring.Worker(level=4)`): rank 0's `Cluster` and its
//! orchestrator, `HostTensor` (a host-resident tensor's stand-in on rank 0),
//! `HostTaskReport`, and the host side's request/receive/reply functions. Without the
//! `mpi` feature the module still has these names; using them raises `RuntimeError`
//! saying what to install.

use crate::config::PyCallConfig;
use crate::node::PyNodeRunReport;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use taskring::cluster::{self, Reservation};
use taskring::{DType, Tensor};

/// What to do when this build has no MPI.
pub const NO_MPI: &str = "taskring was built without MPI, which L4 (Worker(level=4)) needs: install Open MPI and libclang (Debian: apt-get install openmpi-bin libopenmpi-dev libclang-dev; or `make mpi` as root), then rebuild (`make py-dev`)";

/// Whether this build speaks MPI.
#[pyfunction]
pub fn mpi_built() -> bool {
    cluster::MPI_BUILT
}

/// `(rank, size)` from the MPI launcher's environment, or None outside an MPI launch.
#[pyfunction]
pub fn mpi_launch_env() -> Option<(usize, usize)> {
    cluster::launch_env()
}

/// What rank 0 learnt of one L4 task. Its `report` (the host's NodeRunReport) is made a
/// Python object when first asked for: a loop of small L4 runs that never looks at it
/// does not pay for its objects.
#[pyclass(module = "taskring", name = "HostTaskReport", frozen)]
pub struct PyHostTaskReport {
    #[pyo3(get)]
    worker: usize,
    #[pyo3(get)]
    rank: usize,
    #[pyo3(get)]
    callable: u32,
    #[pyo3(get)]
    elapsed_s: f64,
    #[pyo3(get)]
    error: Option<String>,
    raw: Option<taskring::node::NodeRunReport>,
    report: pyo3::sync::PyOnceLock<Option<Py<PyNodeRunReport>>>,
}

#[pymethods]
impl PyHostTaskReport {
    /// The host's NodeRunReport (None when the task failed before the host ran it).
    #[getter]
    fn report(&self, py: Python<'_>) -> PyResult<Option<Py<PyNodeRunReport>>> {
        if self.report.get(py).is_none() {
            let built = match &self.raw {
                Some(r) => Some(Py::new(py, PyNodeRunReport::from_rust(py, r)?)?),
                None => None,
            };
            // (Another thread may have set it meanwhile: either object is the same report.)
            let _ = self.report.set(py, built);
        }
        Ok(self
            .report
            .get(py)
            .and_then(|r| r.as_ref().map(|p| p.clone_ref(py))))
    }

    fn __repr__(&self) -> String {
        format!(
            "HostTaskReport(worker={}, rank={}, callable={}, chip_tasks={}, elapsed_s={:.6}, error={:?})",
            self.worker,
            self.rank,
            self.callable,
            self.raw
                .as_ref()
                .map(|r| r.tasks.len().to_string())
                .unwrap_or_else(|| "None".into()),
            self.elapsed_s,
            self.error
        )
    }
}

/// A tensor that lives on host `worker` (`Worker.alloc_tensor(..., worker=h)` at L4):
/// rank 0 holds only this stand-in (address space with no memory behind it, which
/// identifies the tensor to rank 0's dependency tracking); its data stays on the host
/// across tasks. Passing it to another host's task is a ValueError.
#[pyclass(module = "taskring", name = "HostTensor", frozen)]
pub struct PyHostTensor {
    res: Reservation,
    #[pyo3(get)]
    worker: usize,
    shape: Vec<u32>,
    dtype: DType,
}

#[pymethods]
impl PyHostTensor {
    #[new]
    fn new(worker: usize, shape: Vec<i64>, dtype: &str) -> PyResult<Self> {
        let dtype = crate::runtime::dtype_from_name(dtype)
            .ok_or_else(|| PyTypeError::new_err(format!("dtype {dtype} is not supported")))?;
        if shape.is_empty() || shape.len() > taskring::tensor::MAX_DIMS {
            return Err(PyValueError::new_err(format!(
                "a host tensor has 1..{} dimensions, got {}",
                taskring::tensor::MAX_DIMS,
                shape.len()
            )));
        }
        if shape.iter().any(|&d| d < 1 || d > u32::MAX as i64) {
            return Err(PyValueError::new_err(format!(
                "host tensor shape {shape:?} has an empty or too large dimension"
            )));
        }
        let shape: Vec<u32> = shape.iter().map(|&d| d as u32).collect();
        let nbytes = shape
            .iter()
            .try_fold(dtype.size_bytes() as u64, |a, &d| a.checked_mul(d as u64))
            .filter(|&n| n <= isize::MAX as u64)
            .ok_or_else(|| {
                PyValueError::new_err(format!("host tensor shape {shape:?} is too large"))
            })?;
        let res = Reservation::new(nbytes as usize)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(PyHostTensor {
            res,
            worker,
            shape,
            dtype,
        })
    }
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.shape.iter().map(|&d| d as usize))
    }
    /// The numpy dtype name (e.g. ``float32``).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }
    #[getter]
    fn nbytes(&self) -> u64 {
        self.view().nbytes()
    }
    /// Its identity on the host (stable for the life of this object).
    #[getter]
    fn id(&self) -> u64 {
        self.res.addr()
    }
    fn __repr__(&self) -> String {
        format!(
            "HostTensor(worker={}, shape={:?}, dtype={})",
            self.worker,
            self.shape,
            self.dtype.name()
        )
    }
}

impl PyHostTensor {
    fn view(&self) -> Tensor {
        Tensor::from_raw(self.res.addr(), &self.shape, self.dtype)
    }
}

/// A host request's arguments for Python: tensors as tuples, scalars as values.
#[cfg(feature = "mpi")]
fn request_args<'py>(py: Python<'py>, t: &cluster::wire::L4Task) -> PyResult<Bound<'py, PyTuple>> {
    use cluster::wire::{L4Arg, L4Dir};
    let dir = |d: L4Dir| match d {
        L4Dir::In => "in",
        L4Dir::Out => "out",
        L4Dir::InOut => "inout",
    };
    let mut out: Vec<Bound<'py, PyAny>> = Vec::with_capacity(t.args.len());
    for a in &t.args {
        out.push(match a {
            L4Arg::Shipped(ten) => (
                "shipped",
                dir(ten.dir),
                ten.dtype.name(),
                PyTuple::new(py, &ten.shape)?,
                ten.nbytes().unwrap_or(0),
            )
                .into_pyobject(py)?
                .into_any(),
            L4Arg::Resident(ten, id) => (
                "resident",
                dir(ten.dir),
                ten.dtype.name(),
                PyTuple::new(py, &ten.shape)?,
                *id,
            )
                .into_pyobject(py)?
                .into_any(),
            L4Arg::Int(v) => v.into_pyobject(py)?.into_any(),
            L4Arg::Float(v) => v.into_pyobject(py)?.into_any(),
        });
    }
    PyTuple::new(py, out)
}

/// One L4 task on a host: `callable`, `name`, `config` (the CallConfig rank 0 sent,
/// whole), `args` (`("shipped", dir, dtype, shape, nbytes)`, `("resident", dir,
/// dtype, shape, id)`, ints, floats).
#[pyclass(module = "taskring._native", name = "HostRequest", frozen)]
pub struct PyHostRequest {
    #[cfg(feature = "mpi")]
    task: cluster::wire::L4Task,
    #[pyo3(get)]
    callable: u32,
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    config: Py<PyCallConfig>,
    #[pyo3(get)]
    args: Py<PyTuple>,
    /// No argument is a tensor: `args` are the orchestration's arguments as they are.
    #[pyo3(get)]
    scalars_only: bool,
}

#[cfg(feature = "mpi")]
mod with_mpi {
    use super::*;
    use crate::config::call_config_of;
    use crate::runtime::{failure_err, RunPtr, RUN_IDS};
    use numpy::PyUntypedArray;
    use parking_lot::Mutex;
    use pyo3::exceptions::PyKeyboardInterrupt;
    use pyo3::types::{PyBool, PyInt, PyList};
    use std::sync::Arc;
    use taskring::cluster::comm;
    use taskring::cluster::host;
    use taskring::cluster::wire::{HostRequest, L4Arg};
    use taskring::cluster::{
        Cluster, ClusterError, ClusterOrchestrator, ClusterProgram, HostTaskReport,
    };
    use taskring::node::{ArgDir, NextLevelArg};

    fn host_report_py(t: HostTaskReport) -> PyHostTaskReport {
        PyHostTaskReport {
            worker: t.worker,
            rank: t.rank,
            callable: t.callable,
            elapsed_s: t.elapsed_s,
            error: t.error,
            raw: t.report,
            report: pyo3::sync::PyOnceLock::new(),
        }
    }

    fn mpi_err(e: String) -> PyErr {
        PyRuntimeError::new_err(e)
    }

    /// Initialise MPI (MPI_THREAD_MULTIPLE); returns `(rank, size)`.
    #[pyfunction]
    pub fn mpi_init(py: Python<'_>) -> PyResult<(i32, i32)> {
        let w = py.detach(comm::init).map_err(mpi_err)?;
        Ok((w.rank, w.size))
    }

    /// `MPI_Finalize` (idempotent).
    #[pyfunction]
    pub fn mpi_finalize(py: Python<'_>) {
        py.detach(comm::finalize)
    }

    /// `MPI_Abort` of the whole job with `code`.
    #[pyfunction]
    pub fn mpi_abort(code: i32) {
        if comm::initialized() {
            comm::abort(code)
        }
        std::process::exit(code)
    }

    /// A bare MPI exchange between rank 0 and `peer` (B8's baselines): `rounds` times,
    /// rank 0 sends `nbytes` and the peer answers with the same bytes (`echo`, a
    /// ping-pong) or with one byte (a one-way transfer and its acknowledgement), received
    /// with MPI's own blocking receive; returns
    /// the seconds of `rounds` rounds after one untimed round. The peer calls it with
    /// `peer=0` and the same arguments.
    #[pyfunction]
    #[pyo3(signature = (peer, nbytes, rounds, echo=true))]
    pub fn mpi_pingpong(
        py: Python<'_>,
        peer: i32,
        nbytes: usize,
        rounds: usize,
        echo: bool,
    ) -> PyResult<f64> {
        py.detach(|| {
            let me = comm::world().rank;
            let mut buf = vec![0u8; nbytes];
            let mut ack = [0u8; 1];
            let tag = comm::FIRST_DATA_TAG + comm::DATA_TAGS as i32; // no L4 message uses it
            let mut t0 = std::time::Instant::now();
            // One untimed round first: buffers touched, connection warm.
            for round in 0..=rounds {
                if round == 1 {
                    t0 = std::time::Instant::now();
                }
                if me == 0 {
                    comm::send_data(peer, tag, &buf);
                    if echo {
                        comm::receive_blocking(peer, tag, &mut buf);
                    } else {
                        comm::receive_blocking(peer, tag, &mut ack);
                    }
                } else {
                    comm::receive_blocking(peer, tag, &mut buf);
                    if echo {
                        comm::send_data(peer, tag, &buf);
                    } else {
                        comm::send_data(peer, tag, &ack);
                    }
                }
            }
            Ok(t0.elapsed().as_secs_f64())
        })
        .map_err(mpi_err)
    }

    /// Send raw bytes to rank `dest` with `tag` (tests and benchmarks).
    #[pyfunction]
    pub fn mpi_send_bytes(py: Python<'_>, dest: i32, tag: i32, data: Vec<u8>) {
        py.detach(|| comm::send(dest, tag, &data))
    }

    /// Receive one message from rank `source` with `tag` (tests and benchmarks).
    #[pyfunction]
    pub fn mpi_recv_bytes(py: Python<'_>, source: i32, tag: i32) -> PyResult<Vec<u8>> {
        let pending = Mutex::new(None);
        let got = py.detach(|| {
            comm::wait_message(
                source,
                Some(tag),
                std::time::Duration::from_millis(1),
                comm::Backoff::EXPECTED,
                signal_check(&pending),
            )
            .map(|(m, s)| comm::receive_vec(m, &s))
        });
        if let Some(e) = pending.lock().take() {
            return Err(e);
        }
        got.ok_or_else(|| PyRuntimeError::new_err("interrupted"))
    }

    /// `(seq, status, error, n_outputs)` of an L4 reply frame (tests).
    #[pyfunction]
    pub fn l4_decode_reply(data: Vec<u8>) -> PyResult<(u64, u32, String, u32)> {
        let r =
            cluster::wire::decode_reply(&data).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok((r.seq, r.status, r.error, r.n_outputs))
    }

    /// A give-up check for waits with the GIL released: every 50 ms it runs the signal
    /// handlers; an exception they raise is kept and ends the wait.
    fn signal_check(pending: &Mutex<Option<PyErr>>) -> impl FnMut() -> bool + '_ {
        let mut last = std::time::Instant::now();
        move || {
            if last.elapsed() < std::time::Duration::from_millis(50) {
                return false;
            }
            last = std::time::Instant::now();
            Python::attach(|py| match py.check_signals() {
                Ok(()) => false,
                Err(e) => {
                    *pending.lock() = Some(e);
                    true
                }
            })
        }
    }

    /// The next task from rank 0, or None when rank 0 closed. A malformed task frame is
    /// answered at once as a failed task (and the wait goes on).
    fn next_task(py: Python<'_>) -> PyResult<Option<cluster::wire::L4Task>> {
        let pending = Mutex::new(None);
        loop {
            let got = py.detach(|| host::next_request(signal_check(&pending)));
            if let Some(e) = pending.lock().take() {
                return Err(e);
            }
            match got {
                None => continue,
                Some(Ok(HostRequest::Close)) => return Ok(None),
                Some(Ok(HostRequest::Task(task))) => return Ok(Some(task)),
                Some(Err(m)) => {
                    let text = format!("malformed L4 task frame: {}", m.error);
                    match m.ids {
                        Some((seq, tag)) => {
                            py.detach(|| host::reply(seq, tag, None, Some(&text), &[]))
                        }
                        None => eprintln!("taskring host: dropped a request: {text}"),
                    }
                }
            }
        }
    }

    fn scalars_only(task: &cluster::wire::L4Task) -> bool {
        task.args
            .iter()
            .all(|a| matches!(a, L4Arg::Int(_) | L4Arg::Float(_)))
    }

    fn request_py(py: Python<'_>, task: cluster::wire::L4Task) -> PyResult<PyHostRequest> {
        Ok(PyHostRequest {
            callable: task.callable,
            name: task.name.clone(),
            config: Py::new(py, PyCallConfig::from_rust(py, &task.config)?)?,
            args: request_args(py, &task)?.unbind(),
            scalars_only: scalars_only(&task),
            task,
        })
    }

    /// A host's next request: a `HostRequest`, or None when rank 0 closed. A malformed
    /// task frame is answered at once as a failed task (and the wait goes on).
    #[pyfunction]
    pub fn host_next_request(py: Python<'_>) -> PyResult<Option<PyHostRequest>> {
        next_task(py)?.map(|t| request_py(py, t)).transpose()
    }

    /// The text a failed task's reply carries for the exception `e`: `str(e)`, or the
    /// name of its type when that is empty.
    fn exception_text(py: Python<'_>, e: &PyErr) -> String {
        match e.value(py).str().map(|s| s.to_string()) {
            Ok(t) if !t.is_empty() => t,
            _ => e
                .get_type(py)
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default(),
        }
    }

    /// `Type: text` of an exception (`Type` alone when the text is empty).
    fn typed_text(py: Python<'_>, e: &PyErr) -> String {
        let name = e
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        match e.value(py).str().map(|s| s.to_string()) {
            Ok(t) if !t.is_empty() => format!("{name}: {t}"),
            _ => name,
        }
    }

    /// Stops the host's watchdog thread when the serving loop ends, however it ends.
    struct WatchdogGuard;

    impl Drop for WatchdogGuard {
        fn drop(&mut self) {
            host::stop_watchdog();
        }
    }

    /// A host's serving loop, until rank 0 closes. `programs[i]` is `(name,
    /// orchestration, chips)` of the DistributedProgram registered i-th. A request whose
    /// arguments are all scalars, for a program registered under its name, is served
    /// here: the orchestration runs on `node` as `orch(o, chips, args, cfg)` with the
    /// request's CallConfig (which also sizes the node's rings), and the reply carries
    /// the host's report, or the text of the exception the run raised. Every other
    /// request goes to `other(HostRequest)` (the Python side: buffers, inputs, checks,
    /// then `host_run`, answering the exceptions of the run).
    ///
    /// No exception leaves a task unanswered: one that `other` did not answer is
    /// answered here. An exception that is not an `Exception` (`SystemExit`,
    /// `KeyboardInterrupt`, also a SIGINT while the host waits for requests) ends the
    /// serving: rank 0 is told that the host stops serving and why (its task fails with
    /// `SystemExit: 3; the host stopped serving`, its later tasks at once), then the
    /// exception propagates. The host's watchdog thread answers rank 0's pings while
    /// this loop runs.
    #[pyfunction]
    pub fn host_serve(
        py: Python<'_>,
        node: &crate::node::PyNode,
        programs: Vec<(String, Py<PyAny>, Py<PyAny>)>,
        other: Py<PyAny>,
    ) -> PyResult<()> {
        host::start_watchdog();
        let _guard = WatchdogGuard;
        let leaves = |e: &PyErr| !e.is_instance_of::<pyo3::exceptions::PyException>(py);
        loop {
            let task = match next_task(py) {
                Ok(Some(task)) => task,
                Ok(None) => return Ok(()),
                Err(e) => {
                    if leaves(&e) {
                        let why = typed_text(py, &e);
                        py.detach(|| host::leave(&why));
                    }
                    return Err(e);
                }
            };
            let (seq, tag) = (task.seq, task.data_tag);
            let r = serve_one(py, node, &programs, &other, task);
            let Err(e) = r else { continue };
            let leaving = leaves(&e);
            let text = if leaving {
                let why = typed_text(py, &e);
                py.detach(|| host::leave(&why));
                format!("{why}; the host stopped serving")
            } else {
                exception_text(py, &e)
            };
            if !host::replied(seq) {
                py.detach(|| host::reply(seq, tag, None, Some(&text), &[]));
            }
            if leaving {
                return Err(e);
            }
        }
    }

    /// One request of [`host_serve`]: served here (all scalars), or by `other`.
    fn serve_one(
        py: Python<'_>,
        node: &crate::node::PyNode,
        programs: &[(String, Py<PyAny>, Py<PyAny>)],
        other: &Py<PyAny>,
        task: cluster::wire::L4Task,
    ) -> PyResult<()> {
        let served_here = scalars_only(&task)
            && programs
                .get(task.callable as usize)
                .is_some_and(|p| p.0 == task.name);
        if !served_here {
            other.call1(py, (request_py(py, task)?,))?;
            return Ok(());
        }
        let (_, orch, chips) = &programs[task.callable as usize];
        let cfg = Py::new(py, PyCallConfig::from_rust(py, &task.config)?)?.into_bound(py);
        let args = request_args(py, &task)?.into_any();
        run_and_reply(py, node, orch, chips, args, cfg.into_any(), &task, &[], &[])
    }

    /// One buffer address per shipped tensor of the kind (`what`: "inputs", "outputs").
    fn buffers_match(what: &str, sizes: &[usize], addrs: &[u64]) -> PyResult<()> {
        if sizes.len() != addrs.len() {
            return Err(PyValueError::new_err(format!(
                "the task has {} shipped {what}, got {} buffers",
                sizes.len(),
                addrs.len()
            )));
        }
        Ok(())
    }

    /// The buffers at `addrs`, each of its size in `sizes` (pairs past the shorter list
    /// are dropped).
    ///
    /// # Safety
    /// Each `addrs[i]` is the start of `sizes[i]` bytes that stay valid for reads and
    /// writes for `'a`, which nothing else reads or writes meanwhile, and no two of
    /// the buffers overlap.
    unsafe fn slices_mut<'a>(addrs: &[u64], sizes: &[usize]) -> Vec<&'a mut [u8]> {
        addrs
            .iter()
            .zip(sizes)
            // safety: the caller's contract, buffer by buffer.
            .map(|(&a, &n)| unsafe { std::slice::from_raw_parts_mut(a as *mut u8, n) })
            .collect()
    }

    /// Receive the task's shipped inputs into the buffers at `addrs` (one per shipped
    /// IN/INOUT tensor, in order, each of its `nbytes`).
    #[pyfunction]
    pub fn host_receive_inputs(
        py: Python<'_>,
        req: &PyHostRequest,
        addrs: Vec<u64>,
    ) -> PyResult<()> {
        let sizes = host::input_sizes(&req.task);
        buffers_match("inputs", &sizes, &addrs)?;
        let pending = Mutex::new(None);
        let r = py.detach(|| {
            // safety: `_cluster.py` passes the addresses of arrays it allocated for this
            // task's shipped inputs, each of the input's `nbytes` (their number checked
            // above), and does not touch them until this call returns.
            let mut bufs = unsafe { slices_mut(&addrs, &sizes) };
            let mut check = signal_check(&pending);
            host::receive_inputs(&req.task, &mut bufs, &mut check)
        });
        if let Some(e) = pending.lock().take() {
            return Err(e);
        }
        r.map_err(mpi_err)
    }

    /// Answer the task: its host `report` (None when the run failed before one),
    /// `error` (None: it ran), and on success the outputs at `addrs` (one per shipped
    /// OUT/INOUT tensor, in order).
    #[pyfunction]
    #[pyo3(signature = (req, report, error, addrs))]
    pub fn host_reply(
        py: Python<'_>,
        req: &PyHostRequest,
        report: Option<PyRef<'_, PyNodeRunReport>>,
        error: Option<String>,
        addrs: Vec<u64>,
    ) -> PyResult<()> {
        let sizes = host::output_sizes(&req.task);
        if error.is_none() {
            buffers_match("outputs", &sizes, &addrs)?;
        }
        let raw = report.as_ref().and_then(|r| r.raw.clone());
        let (seq, tag) = (req.task.seq, req.task.data_tag);
        py.detach(|| {
            // safety: `_cluster.py` passes the addresses of arrays it allocated for this
            // task's shipped outputs, each of the output's `nbytes` (or none, with an
            // error), and does not touch them until this call returns.
            let outs: Vec<&[u8]> = unsafe { slices_mut(&addrs, &sizes) }
                .into_iter()
                .map(|s| &*s)
                .collect();
            host::reply(seq, tag, raw.as_ref(), error.as_deref(), &outs);
        });
        Ok(())
    }

    /// Run the task on the host's node — `orch(o, chips, args, cfg)` with `cfg` the
    /// request's CallConfig, which also sizes the node's rings — and answer rank 0 with
    /// the host's report and the outputs at `addrs` (one per shipped OUT/INOUT tensor, in
    /// order): `node.run` and `host_reply` without a Python report between them. An
    /// exception of the run propagates unanswered (the caller answers it with
    /// `host_reply`).
    #[pyfunction]
    pub fn host_run(
        py: Python<'_>,
        node: &crate::node::PyNode,
        req: &PyHostRequest,
        orch: Py<PyAny>,
        chips: Py<PyAny>,
        args: Py<PyTuple>,
        addrs: Vec<u64>,
    ) -> PyResult<()> {
        let sizes = host::output_sizes(&req.task);
        buffers_match("outputs", &sizes, &addrs)?;
        let cfg = req.config.bind(py).clone().into_any();
        run_and_reply(
            py,
            node,
            &orch,
            &chips,
            args.into_bound(py).into_any(),
            cfg,
            &req.task,
            &addrs,
            &sizes,
        )
    }

    /// `orch(o, chips, args, cfg)` on the host's node (`task`'s CallConfig sizing its
    /// rings), then the reply: the host's report and the outputs at `addrs` (of `sizes`),
    /// and the host's timeline when the config records one. An exception of the run is
    /// returned, unanswered.
    #[allow(clippy::too_many_arguments)]
    fn run_and_reply(
        py: Python<'_>,
        node: &crate::node::PyNode,
        orch: &Py<PyAny>,
        chips: &Py<PyAny>,
        args: Bound<'_, PyAny>,
        cfg: Bound<'_, PyAny>,
        task: &cluster::wire::L4Task,
        addrs: &[u64],
        sizes: &[usize],
    ) -> PyResult<()> {
        let rest = PyTuple::new(py, [chips.bind(py).clone(), args, cfg])?.unbind();
        let rep = node.run_rust(py, orch.clone_ref(py), Some(rest), &task.config)?;
        let (seq, tag) = (task.seq, task.data_tag);
        py.detach(|| {
            // safety: no buffers from `serve_one`; from `host_run`, one address per
            // shipped output (checked there), each of an array `_cluster.py` allocated
            // for this task with the output's `nbytes`; the run has returned, so no chip
            // writes them, and Python does not touch them until this call returns.
            let outs: Vec<&[u8]> = unsafe { slices_mut(addrs, sizes) }
                .into_iter()
                .map(|s| &*s)
                .collect();
            host::reply(seq, tag, Some(&rep), None, &outs);
            if host::ships_timeline(&task.config) {
                host::send_timeline(tag, &task.config);
            }
        });
        Ok(())
    }

    /// Rank 0 of an L4 job (the native part of `Worker(level=4)` there).
    #[pyclass(module = "taskring._native", name = "Cluster")]
    pub struct PyCluster {
        inner: Mutex<Option<Cluster>>,
        #[pyo3(get)]
        hosts: usize,
        programs: Arc<[ClusterProgram]>,
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

    fn cluster_err(py: Python<'_>, e: ClusterError) -> PyErr {
        match e {
            ClusterError::Config(c) => PyValueError::new_err(c.message),
            ClusterError::Host(m) | ClusterError::Mpi(m) => PyRuntimeError::new_err(m),
            ClusterError::Failure(f) => failure_err(py, &f),
            ClusterError::Interrupted(m) => PyKeyboardInterrupt::new_err(m),
            ClusterError::Closed => PyRuntimeError::new_err("this Worker is closed"),
        }
    }

    impl PyCluster {
        /// The cluster, waiting (GIL released, signals checked) for a run on another
        /// thread to end.
        fn lock<'a>(
            &'a self,
            py: Python<'_>,
        ) -> PyResult<parking_lot::MutexGuard<'a, Option<Cluster>>> {
            if let Some(g) = self.inner.try_lock() {
                return Ok(g);
            }
            let mut since_check = std::time::Instant::now();
            loop {
                if let Some(g) = self.inner.try_lock() {
                    return Ok(g);
                }
                py.detach(|| std::thread::sleep(std::time::Duration::from_micros(200)));
                if since_check.elapsed() >= std::time::Duration::from_millis(50) {
                    py.check_signals()?;
                    since_check = std::time::Instant::now();
                }
            }
        }
    }

    #[pymethods]
    impl PyCluster {
        /// `programs`: `(name, signature)` of each registered DistributedProgram.
        #[new]
        #[pyo3(signature = (hosts, programs, arena_cache_slots=4))]
        fn new(
            hosts: usize,
            programs: Vec<(String, Vec<u32>)>,
            arena_cache_slots: usize,
        ) -> PyResult<Self> {
            if !comm::initialized() {
                return Err(PyRuntimeError::new_err("MPI is not initialised (mpi_init)"));
            }
            let programs = programs
                .into_iter()
                .map(|(name, sig)| {
                    Ok(ClusterProgram {
                        name,
                        signature: dirs_of(sig)?,
                    })
                })
                .collect::<PyResult<Vec<_>>>()?;
            let c = Cluster::new(hosts, programs.clone(), arena_cache_slots)
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            Ok(PyCluster {
                inner: Mutex::new(Some(c)),
                hosts,
                programs: programs.into(),
            })
        }

        /// Run `orch(o, *rest)`; `config` sizes rank 0's own rings. Returns a
        /// NodeRunReport whose tasks are HostTaskReports.
        #[pyo3(signature = (orch, config=None, rest=None))]
        fn run(
            &self,
            py: Python<'_>,
            orch: Py<PyAny>,
            config: Option<&Bound<'_, PyAny>>,
            rest: Option<Py<PyTuple>>,
        ) -> PyResult<PyNodeRunReport> {
            let cfg = call_config_of(py, config)?;
            let mut guard = self.lock(py)?;
            let c = guard
                .as_mut()
                .ok_or_else(|| PyRuntimeError::new_err("this Worker is closed"))?;
            let pending: Arc<crate::runtime::PendingErr> = Arc::default();
            let pend = pending.clone();
            let cancel = Arc::new(c.canceller());
            let cancel2 = cancel.clone();
            let (hook, interrupt) = crate::runtime::interrupt_hook(move || cancel2());
            let keep: Arc<Mutex<Vec<Py<PyAny>>>> = Arc::default();
            let kept = keep.clone();
            let programs = self.programs.clone();
            let r = c.run(
                move |o| {
                    Python::attach(|py| {
                        let fail = |e: PyErr| {
                            crate::runtime::orchestration_failed(py, e, &pend, &|| cancel())
                        };
                        let po = PyClusterOrchestrator {
                            ptr: RunPtr::new(),
                            run: RUN_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                            keep: kept.clone(),
                            programs: programs.clone(),
                        };
                        #[allow(clippy::unnecessary_cast)] // the cast erases the run's lifetimes
                        let target = o as *mut ClusterOrchestrator<'_, '_>
                            as *mut ClusterOrchestrator<'static, 'static>;
                        crate::runtime::call_bound(py, &orch, po, target, rest.as_ref())
                            .map_err(fail)
                    })
                },
                &cfg,
                Some(&hook),
            );
            drop(guard);
            drop(std::mem::take(&mut *keep.lock()));
            // A host's failure explains an orchestration that raised on it.
            let host_failed = matches!(r, Err(ClusterError::Host(_)));
            if let Some(e) = crate::runtime::raised_in_run(&interrupt, &pending, |_| host_failed) {
                return Err(e);
            }
            let rep = r.map_err(|e| cluster_err(py, e))?;
            let tasks = rep.tasks.into_iter().map(host_report_py);
            Ok(PyNodeRunReport::of_tasks(
                PyList::new(py, tasks)?.unbind(),
                rep.elapsed_s,
            ))
        }

        /// Tell every host to stop serving and free rank 0's engine (idempotent).
        fn close(&self, py: Python<'_>) {
            let c = self.lock(py).ok().and_then(|mut g| g.take());
            if let Some(mut c) = c {
                py.detach(|| c.close());
            }
        }
    }

    impl crate::runtime::RunBound for PyClusterOrchestrator {
        type Target = ClusterOrchestrator<'static, 'static>;
        fn run_ptr(&self) -> &RunPtr<Self::Target> {
            &self.ptr
        }
    }

    /// The orchestrator handed to an L4 orchestration; valid only while its run lasts.
    #[pyclass(module = "taskring", name = "ClusterOrchestrator")]
    pub struct PyClusterOrchestrator {
        ptr: RunPtr<ClusterOrchestrator<'static, 'static>>,
        #[allow(dead_code)]
        run: u64,
        /// The arrays passed to `submit_next_level`, alive until the run ends.
        keep: Arc<Mutex<Vec<Py<PyAny>>>>,
        programs: Arc<[ClusterProgram]>,
    }

    /// One argument of an L4 submit: a scalar, a host-resident tensor, or a rank-0 array.
    fn cluster_arg(i: usize, a: &Bound<'_, PyAny>, dir: ArgDir) -> PyResult<NextLevelArg> {
        match crate::runtime::scalar_arg(i, a)? {
            Some(Ok(v)) => return Ok(NextLevelArg::Int(v)),
            Some(Err(v)) => return Ok(NextLevelArg::Float(v)),
            None => {}
        }
        if let Ok(h) = a.extract::<PyRef<'_, PyHostTensor>>() {
            return Ok(NextLevelArg::Resident {
                view: h.view(),
                id: h.id(),
                host: h.worker,
            });
        }
        if a.cast::<PyUntypedArray>().is_err() {
            return Err(PyTypeError::new_err(format!(
                "argument {i}: expected a numpy array, a HostTensor, an int or a float, got {}",
                a.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            )));
        }
        // As an L2 argument: a view addressed inside its owner's buffer, so overlapping
        // views of one array are one buffer to rank 0's tensormap; an input may be
        // read-only.
        let t = crate::runtime::array_tensor(i, a, dir != ArgDir::In)?;
        Ok(NextLevelArg::Tensor(t))
    }

    #[pymethods]
    impl PyClusterOrchestrator {
        /// Submit the registered DistributedProgram `handle` with `args` to host
        /// `worker`; its L3 orchestration receives `config` (a CallConfig, RunConfig or
        /// None = defaults) whole. Returns the L4 task id.
        #[pyo3(signature = (handle, args, config=None, *, worker))]
        fn submit_next_level(
            &self,
            py: Python<'_>,
            handle: u32,
            args: &Bound<'_, PyAny>,
            config: Option<&Bound<'_, PyAny>>,
            worker: &Bound<'_, PyAny>,
        ) -> PyResult<u64> {
            let hosts = self.ptr.with(|o| o.hosts())?;
            if worker.is_instance_of::<PyBool>() || !worker.is_instance_of::<PyInt>() {
                return Err(PyTypeError::new_err("worker must be an int"));
            }
            let w: i64 = worker.extract()?;
            if w < 0 || w as usize >= hosts {
                return Err(PyValueError::new_err(format!(
                    "worker {w} is not a host of this job (it has {hosts} hosts: 0..{})",
                    hosts - 1
                )));
            }
            let cfg = call_config_of(py, config)?;
            cfg.validate()
                .map_err(|e| PyValueError::new_err(e.message))?;
            let sig = &self
                .programs
                .get(handle as usize)
                .ok_or_else(|| PyValueError::new_err(format!("unknown program handle {handle}")))?
                .signature;
            let mut list = vec![];
            let mut keep = vec![];
            for (i, a) in args.try_iter()?.enumerate() {
                let a = a?;
                let dir = sig.get(i).copied().unwrap_or(ArgDir::In);
                list.push(cluster_arg(i, &a, dir)?);
                if !list[i].is_scalar() {
                    keep.push(a.unbind());
                }
            }
            self.keep.lock().extend(keep);
            self.ptr.with(|o| {
                o.submit_next_level(handle, &list, &cfg, w as usize)
                    .map(|id| id.0)
                    .map_err(|f| match f.code {
                        // The argument check's own sentence (the detail), as a ValueError.
                        taskring::StatusCode::InvalidArgs => {
                            PyValueError::new_err(f.detail.clone())
                        }
                        _ => failure_err(py, &f),
                    })
            })?
        }

        /// Number of hosts.
        fn hosts(&self) -> PyResult<usize> {
            self.ptr.with(|o| o.hosts())
        }
    }
}

#[cfg(feature = "mpi")]
pub use with_mpi::*;

#[cfg(not(feature = "mpi"))]
mod without_mpi {
    use super::*;

    /// Without MPI: raises RuntimeError saying what to install.
    #[pyfunction]
    pub fn mpi_init() -> PyResult<(i32, i32)> {
        Err(PyRuntimeError::new_err(NO_MPI))
    }
    #[pyfunction]
    pub fn mpi_finalize() {}
    #[pyfunction]
    pub fn mpi_abort(code: i32) {
        std::process::exit(code)
    }
}

#[cfg(not(feature = "mpi"))]
pub use without_mpi::*;

/// Add the L4 names to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MPI_MISSING", NO_MPI)?;
    m.add_function(wrap_pyfunction!(mpi_built, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_launch_env, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_init, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_finalize, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_abort, m)?)?;
    m.add_class::<PyHostTaskReport>()?;
    m.add_class::<PyHostTensor>()?;
    m.add_class::<PyHostRequest>()?;
    #[cfg(feature = "mpi")]
    {
        m.add_function(wrap_pyfunction!(mpi_pingpong, m)?)?;
        m.add_function(wrap_pyfunction!(mpi_send_bytes, m)?)?;
        m.add_function(wrap_pyfunction!(mpi_recv_bytes, m)?)?;
        m.add_function(wrap_pyfunction!(l4_decode_reply, m)?)?;
        m.add_function(wrap_pyfunction!(host_next_request, m)?)?;
        m.add_function(wrap_pyfunction!(host_receive_inputs, m)?)?;
        m.add_function(wrap_pyfunction!(host_reply, m)?)?;
        m.add_function(wrap_pyfunction!(host_run, m)?)?;
        m.add_function(wrap_pyfunction!(host_serve, m)?)?;
        m.add_class::<PyCluster>()?;
        m.add_class::<PyClusterOrchestrator>()?;
    }
    Ok(())
}
