//! `taskring._native`: the PyO3 module under the Python package `taskring`.
//!
//! Everything with behaviour lives in the Rust crate `taskring`; this crate converts
//! between Python and Rust values and releases the GIL whenever the runtime waits.
//! The Python package (`python/taskring/`) adds the thin high-level layer (`RunConfig`,
//! decorators, `run`, `ChipWorker`).

mod cluster;
mod config;
mod native;
mod node;
mod replay;
mod runtime;
mod sizing;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<config::PyRuntimeEnv>()?;
    m.add_class::<config::PyCallConfig>()?;
    m.add_class::<config::PyRingSizing>()?;
    m.add_function(wrap_pyfunction!(config::resolve_ring_sizing, m)?)?;
    m.add_class::<runtime::PyTensor>()?;
    m.add_class::<runtime::PySpec>()?;
    m.add_class::<runtime::PyKernel>()?;
    m.add_class::<runtime::PyTask>()?;
    m.add_class::<runtime::PyTaskArgs>()?;
    m.add_class::<runtime::PyOrchestrator>()?;
    m.add_class::<runtime::PyChip>()?;
    m.add_class::<runtime::PyRunReport>()?;
    m.add_class::<runtime::PyArenaStats>()?;
    m.add_class::<runtime::PyDeviceMemory>()?;
    m.add_class::<runtime::PyPeak>()?;
    m.add_class::<replay::PyCaptured>()?;
    m.add_function(wrap_pyfunction!(runtime::make_python_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::builtin_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(native::load_native_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(native::native_kernel_from_address, m)?)?;
    m.add_function(wrap_pyfunction!(native::report_kernel_raised, m)?)?;
    m.add_class::<runtime::PyScope>()?;
    m.add_class::<node::PySharedMem>()?;
    m.add_class::<node::PyNode>()?;
    m.add_class::<node::PyNodeOrchestrator>()?;
    m.add_class::<node::NodeScope>()?;
    m.add_function(wrap_pyfunction!(sizing::sizing_command, m)?)?;
    m.add_class::<node::PyNodeRunReport>()?;
    m.add_class::<node::PyChipTaskReport>()?;
    m.add_function(wrap_pyfunction!(node::dtype_itemsize, m)?)?;
    cluster::register(m)?;
    m.add(
        "RUNTIME_ENV_RING_COUNT",
        taskring::config::RUNTIME_ENV_RING_COUNT,
    )?;
    m.add(
        "DEFAULT_RING_TASK_WINDOW",
        taskring::config::DEFAULT_RING_TASK_WINDOW,
    )?;
    m.add("DEFAULT_RING_HEAP", taskring::config::DEFAULT_RING_HEAP)?;
    m.add(
        "DEFAULT_RING_DEP_POOL",
        taskring::config::DEFAULT_RING_DEP_POOL,
    )?;
    Ok(())
}
