//! Native (C ABI) kernels from Python: `taskring.load_kernel` and numba cfuncs
//! (`docs/api.md` §11). The kernels themselves live in `taskring::native`.

use crate::conversion::dtype_from_name;
use crate::kernel::PyKernel;
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;
use taskring::CoreKind;
use taskring::{KernelRef, NativeKernel, NativeKernelError, NativeSignature, TensorRule};

fn core_of(core: &str) -> PyResult<CoreKind> {
    core.parse::<CoreKind>()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `tensors`: one `(dtype name or None, ndim or None)` per tensor argument.
fn signature_of(
    tensors: Option<Vec<(Option<String>, Option<u8>)>>,
    scalars: Option<usize>,
) -> PyResult<Option<NativeSignature>> {
    let Some(rules) = tensors else {
        if scalars.is_some() {
            return Err(PyValueError::new_err(
                "a signature's scalars count needs its tensors list too",
            ));
        }
        return Ok(None);
    };
    let mut out = Vec::with_capacity(rules.len());
    for (i, (dtype, ndim)) in rules.into_iter().enumerate() {
        let dtype = match dtype {
            Some(d) => Some(dtype_from_name(&d).ok_or_else(|| {
                PyTypeError::new_err(format!("signature tensor {i}: dtype {d} is not supported"))
            })?),
            None => None,
        };
        if let Some(n) = ndim {
            if n == 0 || n as usize > taskring::MAX_DIMS {
                return Err(PyValueError::new_err(format!(
                    "signature tensor {i}: ndim must be in [1, {}], got {n}",
                    taskring::MAX_DIMS
                )));
            }
        }
        out.push(TensorRule { dtype, ndim });
    }
    Ok(Some(NativeSignature {
        tensors: out,
        scalars,
    }))
}

/// Load `symbol` of the shared library at `path` as a kernel. A missing or unloadable
/// library is an `OSError`, a missing symbol a `ValueError`; both name what was missing.
#[pyfunction]
#[pyo3(signature = (path, symbol, core="aiv", name=None, tensors=None, scalars=None))]
pub fn load_native_kernel(
    path: PathBuf,
    symbol: &str,
    core: &str,
    name: Option<String>,
    tensors: Option<Vec<(Option<String>, Option<u8>)>>,
    scalars: Option<usize>,
) -> PyResult<PyKernel> {
    let core = core_of(core)?;
    let sig = signature_of(tensors, scalars)?;
    let mut k = NativeKernel::load(&path, symbol, core).map_err(|e| match e {
        NativeKernelError::Library { .. } => PyOSError::new_err(e.to_string()),
        NativeKernelError::Symbol { .. } => PyValueError::new_err(e.to_string()),
    })?;
    if let Some(n) = name {
        k = k.named(&n);
    }
    if let Some(s) = sig {
        k = k.with_signature(s);
    }
    Ok(PyKernel {
        k: KernelRef::leak(k),
    })
}

/// An exception raised inside the numba kernel the calling thread runs now (`text`):
/// its task fails with it. False when the thread runs no such kernel (the caller then
/// passes the exception on to Python's usual unraisable hook).
#[pyfunction]
pub fn report_kernel_raised(text: &str) -> bool {
    taskring::native::report_raised(text)
}

/// A kernel calling the C function at `address` (a numba cfunc's). `keep` (the cfunc
/// object) is kept alive for the rest of the process, as the kernel is.
#[pyfunction]
#[pyo3(signature = (address, name, core, keep, tensors=None, scalars=None))]
pub fn native_kernel_from_address(
    address: usize,
    name: &str,
    core: &str,
    keep: Py<PyAny>,
    tensors: Option<Vec<(Option<String>, Option<u8>)>>,
    scalars: Option<usize>,
) -> PyResult<PyKernel> {
    if address == 0 {
        return Err(PyValueError::new_err("native kernel address is null"));
    }
    let core = core_of(core)?;
    let sig = signature_of(tensors, scalars)?;
    // safety: the caller (taskring.kernel) passes the address of a compiled numba cfunc
    // whose signature it checked against the ABI; `keep` holds the code for ever.
    let mut k = unsafe { NativeKernel::from_address(name, core, address) };
    if let Some(s) = sig {
        k = k.with_signature(s);
    }
    std::mem::forget(keep);
    Ok(PyKernel {
        k: KernelRef::leak(k),
    })
}
