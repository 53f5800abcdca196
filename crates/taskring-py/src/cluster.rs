//! Python classes over L4 (`taskring.Worker(level=4)`) on rank 0: the `Cluster` and its
//! orchestrator, `HostTensor` (a host-resident tensor's stand-in on rank 0), and `Mpi`,
//! MPI in this process (launch, init, finalize), with `mpi_built` and `MPI_MISSING`
//! saying whether the build has it. The host side is `cluster_host`. Without the `mpi`
//! feature `Mpi` is there too; its `init` raises `RuntimeError` saying what to install.

use crate::conversion::dtype_from_name;
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

/// MPI in this process (`Worker(level=4)`): the launch it was started by, and its
/// initialisation and finalization. Without MPI in the build `init` raises
/// `RuntimeError` saying what to install, and the rest do nothing.
#[pyclass(module = "taskring._native", name = "Mpi", frozen)]
pub struct PyMpi;

#[pymethods]
impl PyMpi {
    /// `(rank, size)` from the MPI launcher's environment, or None outside an MPI launch.
    #[staticmethod]
    fn launch_env() -> Option<(usize, usize)> {
        cluster::launch_env()
    }

    /// Initialise MPI (MPI_THREAD_MULTIPLE); returns `(rank, size)`.
    #[staticmethod]
    fn init(py: Python<'_>) -> PyResult<(i32, i32)> {
        mpi_init(py)
    }

    /// `MPI_Finalize` (idempotent).
    #[staticmethod]
    fn finalize(py: Python<'_>) {
        mpi_finalize(py)
    }

    /// Finalize MPI when the process exits — after Python's own exit — or, with a
    /// non-zero exit status, `MPI_Abort` the job with it (rank 0: a host may be waiting
    /// for it). False where that cannot be arranged (the caller then finalizes in
    /// `atexit`).
    #[staticmethod]
    fn finalize_at_exit() -> bool {
        mpi_finalize_at_exit()
    }

    /// Rank 0 prints why it ends when SIGTERM comes (mpirun ending the job), written by
    /// the signal handler itself; only while SIGTERM has its default action. Returns
    /// whether the handler was set.
    #[staticmethod]
    fn say_at_sigterm() -> bool {
        mpi_say_at_sigterm()
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
        let dtype = dtype_from_name(dtype)
            .ok_or_else(|| PyTypeError::new_err(format!("dtype {dtype} is not supported")))?;
        if shape.is_empty() || shape.len() > taskring::MAX_DIMS {
            return Err(PyValueError::new_err(format!(
                "a host tensor has 1..{} dimensions, got {}",
                taskring::MAX_DIMS,
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

#[cfg(feature = "mpi")]
mod with_mpi {
    use super::*;
    use crate::config::call_config_of;
    use crate::conversion::{arg_dirs, array_tensor, scalar_arg, type_name};
    use crate::errors::{
        cluster_err, config_err, failure_err, mpi_err, orchestration_failed, raised_in_run,
        PendingErr,
    };
    use crate::gil::{interrupt_hook, lock_detached};
    use crate::orchestrator::{call_bound, RunBound, RunPtr};
    use crate::reports::{PyHostTaskReport, PyNodeRunReport};
    use crate::tensor::next_run_id;
    use numpy::PyUntypedArray;
    use parking_lot::Mutex;
    use pyo3::types::{PyBool, PyInt, PyList};
    use std::sync::Arc;
    use taskring::cluster::mpi;
    use taskring::cluster::{Cluster, ClusterError, ClusterOrchestrator, ClusterProgram};
    use taskring::node::{ArgDir, NextLevelArg};

    /// `Mpi.init`.
    pub fn mpi_init(py: Python<'_>) -> PyResult<(i32, i32)> {
        let w = py.detach(mpi::init).map_err(mpi_err)?;
        Ok((w.rank, w.size))
    }

    /// `Mpi.finalize`.
    pub fn mpi_finalize(py: Python<'_>) {
        py.detach(mpi::finalize)
    }

    /// `Mpi.finalize_at_exit`.
    pub fn mpi_finalize_at_exit() -> bool {
        mpi::finalize_at_exit()
    }

    /// `Mpi.say_at_sigterm`.
    pub fn mpi_say_at_sigterm() -> bool {
        mpi::say_at_sigterm()
    }

    /// Rank 0 of an L4 job (the native part of `Worker(level=4)` there).
    #[pyclass(module = "taskring._native", name = "Cluster")]
    pub struct PyCluster {
        inner: Mutex<Option<Cluster>>,
        #[pyo3(get)]
        hosts: usize,
        programs: Arc<[ClusterProgram]>,
    }

    impl PyCluster {
        /// The cluster, waiting (GIL released, signals checked) for a run on another
        /// thread to end.
        fn lock<'a>(
            &'a self,
            py: Python<'_>,
        ) -> PyResult<parking_lot::MutexGuard<'a, Option<Cluster>>> {
            lock_detached(py, &self.inner)
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
            if !mpi::initialized() {
                return Err(PyRuntimeError::new_err("MPI is not initialised (Mpi.init)"));
            }
            let programs = programs
                .into_iter()
                .map(|(name, sig)| {
                    Ok(ClusterProgram {
                        name,
                        signature: arg_dirs(sig)?,
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
            let pending: Arc<PendingErr> = Arc::default();
            let pend = pending.clone();
            let cancel = Arc::new(c.canceller());
            let cancel2 = cancel.clone();
            let (hook, interrupt) = interrupt_hook(move || cancel2());
            let keep: Arc<Mutex<Vec<Py<PyAny>>>> = Arc::default();
            let kept = keep.clone();
            let programs = self.programs.clone();
            let r = c.run(
                move |o| {
                    Python::attach(|py| {
                        let fail = |e: PyErr| orchestration_failed(py, e, &pend, &|| cancel());
                        let po = PyClusterOrchestrator {
                            ptr: RunPtr::new(),
                            run: next_run_id(),
                            keep: kept.clone(),
                            programs: programs.clone(),
                        };
                        #[allow(clippy::unnecessary_cast)] // the cast erases the run's lifetimes
                        let target = o as *mut ClusterOrchestrator<'_, '_>
                            as *mut ClusterOrchestrator<'static, 'static>;
                        call_bound(py, &orch, po, target, rest.as_ref()).map_err(fail)
                    })
                },
                &cfg,
                Some(&hook),
            );
            drop(guard);
            drop(std::mem::take(&mut *keep.lock()));
            // A host's failure explains an orchestration that raised on it.
            let host_failed = matches!(r, Err(ClusterError::Host(_)));
            if let Some(e) = raised_in_run(&interrupt, &pending, |_| host_failed) {
                return Err(e);
            }
            let rep = r.map_err(|e| cluster_err(py, e))?;
            let tasks = rep.tasks.into_iter().map(PyHostTaskReport::from_rust);
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

    impl RunBound for PyClusterOrchestrator {
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
        match scalar_arg(i, a)? {
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
                type_name(a)
            )));
        }
        // As an L2 argument: a view addressed inside its owner's buffer, so overlapping
        // views of one array are one buffer to rank 0's tensormap; an input may be
        // read-only.
        let t = array_tensor(i, a, dir != ArgDir::In)?;
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
            cfg.validate().map_err(config_err)?;
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
    pub fn mpi_init(_py: Python<'_>) -> PyResult<(i32, i32)> {
        Err(PyRuntimeError::new_err(NO_MPI))
    }
    pub fn mpi_finalize(_py: Python<'_>) {}
    pub fn mpi_finalize_at_exit() -> bool {
        false
    }
    pub fn mpi_say_at_sigterm() -> bool {
        false
    }
}

#[cfg(not(feature = "mpi"))]
pub use without_mpi::*;
