//! `taskring._native`: the PyO3 module under the Python package `taskring`.
//!
//! Everything with behaviour lives in the Rust crate `taskring`; this crate converts
//! between Python and Rust values and releases the GIL whenever the runtime waits.
//! The Python package (`python/taskring/`) adds the thin high-level layer (`RunConfig`,
//! decorators, `run`, `ChipWorker`).
//!
//! Modules, lower ones first (a module uses only those before it): `errors`, `gil`,
//! `conversion`, `config`, `tensor`, `kernel`, `native`, `reports`,
//! `task_args`, `orchestrator`, `resident`, `replay`, `chip`, `node_orchestrator`,
//! `node`, `cluster_host`, `cluster`, `sizing`, `mpi_tools` (`taskring._mpi_tools`, a
//! module of its own: bare MPI for B8 and the L4 tests).

mod callable;
mod chip;
mod cluster;
#[cfg(feature = "mpi")]
mod cluster_host;
mod config;
mod conversion;
mod errors;
mod gil;
mod kernel;
#[cfg(feature = "mpi")]
mod mpi_tools;
mod native;
mod node;
mod node_orchestrator;
mod orchestrator;
mod replay;
mod reports;
mod resident;
mod sizing;
mod task_args;
mod tensor;

use pyo3::prelude::*;

/// The module registers what the package (`python/taskring`) uses by name: classes it
/// only hands out (a scope, a host request, the L4 orchestrator) are not registered.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Configuration (docs/api.md §1).
    m.add_class::<config::PyRuntimeEnv>()?;
    m.add_class::<config::PyCallConfig>()?;
    m.add_class::<config::PyRingSizing>()?;
    m.add_function(wrap_pyfunction!(config::resolve_ring_sizing, m)?)?;
    m.add("RUNTIME_ENV_RING_COUNT", taskring::RUNTIME_ENV_RING_COUNT)?;
    m.add(
        "DEFAULT_RING_TASK_WINDOW",
        taskring::DEFAULT_RING_TASK_WINDOW,
    )?;
    m.add("DEFAULT_RING_HEAP", taskring::DEFAULT_RING_HEAP)?;
    m.add("DEFAULT_RING_DEP_POOL", taskring::DEFAULT_RING_DEP_POOL)?;
    m.add_function(wrap_pyfunction!(sizing::sizing_command, m)?)?;
    m.add_class::<sizing::PySizingAdvice>()?;
    // L2: tensors, kernels, the orchestrator, the chip, replay, reports.
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<tensor::PySpec>()?;
    m.add_class::<kernel::PyKernel>()?;
    m.add_function(wrap_pyfunction!(kernel::make_python_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::builtin_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(native::load_native_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(native::native_kernel_from_address, m)?)?;
    m.add_function(wrap_pyfunction!(native::report_kernel_raised, m)?)?;
    m.add_class::<orchestrator::PyTask>()?;
    m.add_class::<task_args::PyTaskArgs>()?;
    m.add_class::<orchestrator::PyOrchestrator>()?;
    m.add_class::<callable::PyCoreCallable>()?;
    m.add_class::<callable::PyChipCallable>()?;
    m.add_class::<chip::PyChip>()?;
    m.add_class::<replay::PyCaptured>()?;
    m.add_class::<reports::PyRunReport>()?;
    m.add_class::<reports::PyArenaStats>()?;
    m.add_class::<reports::PyDeviceMemory>()?;
    m.add_class::<reports::PyPeak>()?;
    // L3: the node, its orchestrator, shared memory, reports.
    m.add_class::<node::PySharedMem>()?;
    m.add_class::<node::PyNode>()?;
    m.add_class::<node_orchestrator::PyNodeOrchestrator>()?;
    m.add_class::<reports::PyNodeRunReport>()?;
    m.add_class::<reports::PyChipTaskReport>()?;
    // L4: MPI, rank 0, the host side (names that need MPI only in a build with it).
    m.add("MPI_MISSING", cluster::NO_MPI)?;
    m.add_function(wrap_pyfunction!(cluster::mpi_built, m)?)?;
    m.add_class::<cluster::PyMpi>()?;
    m.add_class::<reports::PyHostTaskReport>()?;
    m.add_class::<cluster::PyHostTensor>()?;
    #[cfg(feature = "mpi")]
    {
        m.add_function(wrap_pyfunction!(cluster_host::host_serve, m)?)?;
        m.add_class::<cluster::PyCluster>()?;
        // Bare MPI for B8 and the L4 tests: a module of its own, not the package's.
        mpi_tools::register(m.py())?;
    }
    Ok(())
}
