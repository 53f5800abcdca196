//! What runs report: an L2 run's `RunReport` (with its `PeakUse` and `DeviceMemory`), a
//! chip's `ArenaStats`, an L3 run's `NodeRunReport` of `ChipTaskReport`s, and what rank 0
//! learnt of an L4 task (`HostTaskReport`).

use crate::config::PyRingSizing;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use taskring::node::NodeRunReport;

// ----- L2 -------------------------------------------------------------------------------

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
    /// Device bytes held outside the cache (arenas set aside for a stuck kernel,
    /// device-resident tensors).
    held_bytes: u64,
    /// The chip's device memory.
    capacity_bytes: u64,
}

#[pymethods]
impl PyArenaStats {
    fn __repr__(&self) -> String {
        format!(
            "ArenaStats(builds={}, hits={}, misses={}, evictions={}, resident={} keys, build_s={:.6}, resident_bytes={}, held_bytes={}, capacity_bytes={})",
            self.builds,
            self.hits,
            self.misses,
            self.evictions,
            Python::attach(|py| self.resident.bind(py).len()),
            self.build_s,
            self.resident_bytes,
            self.held_bytes,
            self.capacity_bytes
        )
    }
}

/// The Python face of a chip's arena statistics.
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

/// The Python face of a run's peak use.
pub fn peak_py(p: &taskring::PeakUse) -> PyPeak {
    PyPeak {
        task_window: t4(p.task_window),
        heap: t4(p.heap),
        dep_pool: t4(p.dep_pool),
    }
}

/// The Python face of an L2 run's report.
pub fn report_py(py: Python<'_>, r: &taskring::RunReport) -> PyResult<PyRunReport> {
    Ok(PyRunReport {
        replayed: r.replayed,
        ring_sizing: PyRingSizing {
            inner: r.ring_sizing,
        },
        peak: Py::new(py, peak_py(&r.peak))?,
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

// ----- L3 -------------------------------------------------------------------------------

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
                peak: Py::new(py, peak_py(&run.map(|r| r.peak).unwrap_or_default()))?,
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

// ----- L4 -------------------------------------------------------------------------------

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

#[cfg(feature = "mpi")]
impl PyHostTaskReport {
    /// The Python face of rank 0's report of one L4 task.
    pub fn from_rust(t: taskring::cluster::HostTaskReport) -> Self {
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
