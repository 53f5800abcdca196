//! L4's host side: the requests rank 0 sends a host (`HostRequest`), the host's serving
//! loop (`host_serve`), and a request's methods: receiving the task's inputs, running it
//! on the host's node and answering it. Built with the `mpi` feature only; `HostRequest`
//! is not a name of the module (the serving loop hands it out).

#[cfg(feature = "mpi")]
pub use with_mpi::*;

use crate::config::PyCallConfig;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// One L4 task on a host: `callable`, `name`, `config` (the CallConfig rank 0 sent,
/// whole), `args` (`("shipped", dir, dtype, shape, nbytes)`, `("resident", dir,
/// dtype, shape, id)`, ints, floats).
#[pyclass(module = "taskring._native", name = "HostRequest", frozen)]
pub struct PyHostRequest {
    #[cfg(feature = "mpi")]
    task: taskring::cluster::L4Task,
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
    /// A reply went out for it (`reply`, `run`).
    #[cfg(feature = "mpi")]
    answered: std::sync::atomic::AtomicBool,
}

#[cfg(feature = "mpi")]
mod with_mpi {
    use super::*;
    use crate::errors::mpi_err;
    use crate::gil::signal_check;
    use crate::node::PyNode;
    use crate::reports::PyNodeRunReport;
    use parking_lot::Mutex;
    use pyo3::exceptions::{PyException, PyValueError};
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use taskring::cluster::worker::{self as host, HostSession};
    use taskring::cluster::{HostRequest, L4Arg, L4Dir, L4Task};
    use taskring::node::shm;

    /// A host request's arguments for Python: tensors as tuples, scalars as values.
    fn request_args<'py>(py: Python<'py>, t: &L4Task) -> PyResult<Bound<'py, PyTuple>> {
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

    /// The next task from rank 0, or None when rank 0 closed. A malformed task frame is
    /// answered at once as a failed task (and the wait goes on).
    fn next_task(py: Python<'_>, session: &mut HostSession) -> PyResult<Option<L4Task>> {
        let pending = Mutex::new(None);
        loop {
            let got = py.detach(|| session.next_request(signal_check(&pending)));
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

    fn scalars_only(task: &L4Task) -> bool {
        task.args
            .iter()
            .all(|a| matches!(a, L4Arg::Int(_) | L4Arg::Float(_)))
    }

    fn request_py(py: Python<'_>, task: L4Task) -> PyResult<PyHostRequest> {
        Ok(PyHostRequest {
            callable: task.callable,
            name: task.name.clone(),
            config: Py::new(py, PyCallConfig::from_rust(py, &task.config)?)?,
            args: request_args(py, &task)?.unbind(),
            scalars_only: scalars_only(&task),
            task,
            answered: AtomicBool::new(false),
        })
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

    /// A host's serving loop, until rank 0 closes. `programs[i]` is `(name,
    /// orchestration, chips)` of the DistributedProgram registered i-th. A request whose
    /// arguments are all scalars, for a program registered under its name, is served
    /// here: the orchestration runs on `node` as `orch(o, chips, args, cfg)` with the
    /// request's CallConfig (which also sizes the node's rings), and the reply carries
    /// the host's report, or the text of the exception the run raised. Every other
    /// request goes to `other(HostRequest)` (the Python side: buffers, inputs, checks,
    /// then `run`, answering the exceptions of the run).
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
        node: &PyNode,
        programs: Vec<(String, Py<PyAny>, Py<PyAny>)>,
        other: Py<PyAny>,
    ) -> PyResult<()> {
        let mut session = HostSession::start(true);
        let r = serve(py, &mut session, node, &programs, &other);
        session.finalize();
        r
    }

    /// [`host_serve`]'s loop in `session`.
    fn serve(
        py: Python<'_>,
        session: &mut HostSession,
        node: &PyNode,
        programs: &[(String, Py<PyAny>, Py<PyAny>)],
        other: &Py<PyAny>,
    ) -> PyResult<()> {
        let leaves = |e: &PyErr| !e.is_instance_of::<PyException>(py);
        loop {
            let task = match next_task(py, session) {
                Ok(Some(task)) => task,
                Ok(None) => return Ok(()),
                Err(e) => {
                    if leaves(&e) {
                        let why = typed_text(py, &e);
                        py.detach(|| session.leave(&why));
                    }
                    return Err(e);
                }
            };
            let (seq, tag) = (task.seq, task.data_tag);
            let answered = AtomicBool::new(false);
            let r = serve_one(py, node, programs, other, task, &answered);
            let Err(e) = r else { continue };
            let leaving = leaves(&e);
            let text = if leaving {
                let why = typed_text(py, &e);
                py.detach(|| session.leave(&why));
                format!("{why}; the host stopped serving")
            } else {
                exception_text(py, &e)
            };
            if !answered.load(Relaxed) {
                py.detach(|| host::reply(seq, tag, None, Some(&text), &[]));
            }
            if leaving {
                return Err(e);
            }
        }
    }

    /// One request of [`host_serve`]: served here (all scalars), or by `other`;
    /// `answered` says whether a reply went out for it.
    fn serve_one(
        py: Python<'_>,
        node: &PyNode,
        programs: &[(String, Py<PyAny>, Py<PyAny>)],
        other: &Py<PyAny>,
        task: L4Task,
        answered: &AtomicBool,
    ) -> PyResult<()> {
        let served_here = scalars_only(&task)
            && programs
                .get(task.callable as usize)
                .is_some_and(|p| p.0 == task.name);
        if !served_here {
            let req = Py::new(py, request_py(py, task)?)?;
            let r = other.call1(py, (req.clone_ref(py),));
            answered.store(req.get().answered.load(Relaxed), Relaxed);
            r?;
            return Ok(());
        }
        let (_, orch, chips) = &programs[task.callable as usize];
        let call = HostCall {
            orch,
            chips,
            args: request_args(py, &task)?.into_any(),
            cfg: Py::new(py, PyCallConfig::from_rust(py, &task.config)?)?
                .into_bound(py)
                .into_any(),
        };
        run_and_reply(py, node, call, &task, Outputs::default(), answered)
    }

    /// [`shm::check_buffers`] as a Python `ValueError`.
    fn check_buffers(what: &str, sizes: &[usize], addrs: &[u64]) -> PyResult<()> {
        shm::check_buffers(what, sizes, addrs).map_err(PyValueError::new_err)
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

    #[pymethods]
    impl PyHostRequest {
        /// Receive the task's shipped inputs into the buffers at `addrs` (one per shipped
        /// IN/INOUT tensor, in order, each of its `nbytes`).
        ///
        /// Each address is the start of the tensor's `nbytes` inside a `SharedMem` (or a
        /// `shared_array`) of this process, and no two buffers overlap; otherwise
        /// `ValueError`, before anything is received. The caller keeps those buffers alive
        /// and does not touch them until the call returns: they are written with the GIL
        /// released.
        fn receive_inputs(&self, py: Python<'_>, addrs: Vec<u64>) -> PyResult<()> {
            let sizes = host::input_sizes(&self.task);
            check_buffers("inputs", &sizes, &addrs)?;
            let pending = Mutex::new(None);
            let r = py.detach(|| {
                // safety: one buffer per shipped input, each inside a shared-memory region of
                // this process, none overlapping (checked above); the caller keeps the
                // regions mapped and leaves them alone until this call returns (the contract
                // its docstring states).
                let mut bufs = unsafe { slices_mut(&addrs, &sizes) };
                let mut check = signal_check(&pending);
                host::receive_inputs(&self.task, &mut bufs, &mut check)
            });
            if let Some(e) = pending.lock().take() {
                return Err(e);
            }
            r.map_err(mpi_err)
        }

        /// Answer the task: its host `report` (None when the run failed before one),
        /// `error` (None: it ran), and on success the outputs at `addrs` (one per shipped
        /// OUT/INOUT tensor, in order; not used with an error).
        ///
        /// Each address is the start of the tensor's `nbytes` inside a `SharedMem` (or a
        /// `shared_array`) of this process, and no two buffers overlap; otherwise
        /// `ValueError`, before anything is sent. The caller keeps those buffers alive and
        /// does not touch them until the call returns: they are read with the GIL released.
        #[pyo3(signature = (report, error, addrs))]
        fn reply(
            &self,
            py: Python<'_>,
            report: Option<PyRef<'_, PyNodeRunReport>>,
            error: Option<String>,
            addrs: Vec<u64>,
        ) -> PyResult<()> {
            let sizes = host::output_sizes(&self.task);
            // With an error the reply carries no outputs: `addrs` are not used.
            let addrs = if error.is_none() {
                check_buffers("outputs", &sizes, &addrs)?;
                addrs
            } else {
                vec![]
            };
            let raw = report.as_ref().and_then(|r| r.raw.clone());
            let (seq, tag) = (self.task.seq, self.task.data_tag);
            py.detach(|| {
                // safety: no buffers with an error; else one per shipped output, each inside a
                // shared-memory region of this process, none overlapping (checked above);
                // the caller keeps the regions mapped and leaves them alone until this call
                // returns (the contract its docstring states).
                let outs: Vec<&[u8]> = unsafe { slices_mut(&addrs, &sizes) }
                    .into_iter()
                    .map(|s| &*s)
                    .collect();
                host::reply(seq, tag, raw.as_ref(), error.as_deref(), &outs);
            });
            self.answered.store(true, Relaxed);
            Ok(())
        }

        /// Run the task on the host's node — `orch(o, chips, args, cfg)` with `cfg` the
        /// request's CallConfig, which also sizes the node's rings — and answer rank 0 with
        /// the host's report and the outputs at `addrs` (one per shipped OUT/INOUT tensor, in
        /// order): `node.run` and `reply` without a Python report between them. An
        /// exception of the run propagates unanswered (the caller answers it with
        /// `reply`).
        ///
        /// `addrs` are checked as `reply` checks them, before the run; the caller keeps
        /// those buffers alive and does not touch them until the call returns.
        fn run(
            &self,
            py: Python<'_>,
            node: &PyNode,
            orch: Py<PyAny>,
            chips: Py<PyAny>,
            args: Py<PyTuple>,
            addrs: Vec<u64>,
        ) -> PyResult<()> {
            let sizes = host::output_sizes(&self.task);
            check_buffers("outputs", &sizes, &addrs)?;
            let call = HostCall {
                orch: &orch,
                chips: &chips,
                args: args.into_bound(py).into_any(),
                cfg: self.config.bind(py).clone().into_any(),
            };
            let outputs = Outputs {
                addrs: &addrs,
                sizes: &sizes,
            };
            run_and_reply(py, node, call, &self.task, outputs, &self.answered)
        }
    }

    /// One run of a task's orchestration on the host's node: `orch(o, chips, args, cfg)`.
    struct HostCall<'a, 'py> {
        orch: &'a Py<PyAny>,
        chips: &'a Py<PyAny>,
        args: Bound<'py, PyAny>,
        cfg: Bound<'py, PyAny>,
    }

    /// The shipped outputs a reply carries: the buffer address of each shipped OUT/INOUT
    /// tensor, in order, and its size. None by default (a task with scalars only).
    #[derive(Clone, Copy, Default)]
    struct Outputs<'a> {
        addrs: &'a [u64],
        sizes: &'a [usize],
    }

    /// `call` on the host's node (`task`'s CallConfig sizing its rings), then the reply
    /// (`answered` set): the host's report and `outputs`, and the host's timeline when
    /// the config records one. An exception of the run is returned, unanswered.
    fn run_and_reply(
        py: Python<'_>,
        node: &PyNode,
        call: HostCall<'_, '_>,
        task: &L4Task,
        outputs: Outputs<'_>,
        answered: &AtomicBool,
    ) -> PyResult<()> {
        let rest = PyTuple::new(py, [call.chips.bind(py).clone(), call.args, call.cfg])?.unbind();
        let rep = node.run_rust(py, call.orch.clone_ref(py), Some(rest), &task.config)?;
        let (seq, tag) = (task.seq, task.data_tag);
        py.detach(|| {
            // safety: no buffers from `serve_one`; from `run`, one per shipped output,
            // each inside a shared-memory region of this process, none overlapping
            // (checked there); the caller keeps the regions mapped and leaves them alone
            // until `run` returns (the contract its docstring states), and the run
            // has returned, so no chip writes them.
            let outs: Vec<&[u8]> = unsafe { slices_mut(outputs.addrs, outputs.sizes) }
                .into_iter()
                .map(|s| &*s)
                .collect();
            host::reply(seq, tag, Some(&rep), None, &outs);
            answered.store(true, Relaxed);
            if host::ships_timeline(&task.config) {
                host::send_timeline(tag, &task.config);
            }
        });
        Ok(())
    }
}
