//! Python values as the runtime's: dtypes, shapes, bounded ints, scalars, numpy arrays as
//! tensors over their owner's buffer (zero copy), program arguments, signatures.

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};
use taskring::node::ArgDir;
use taskring::Scalar;
use taskring::{Arg, CallerTensor, DType, Tensor};

/// The dtype names the runtime supports, as error messages list them.
const DTYPE_NAMES: &str = "float32, float16, bfloat16, int32, int64, int8, uint8";

/// The name of `v`'s type (for error messages).
pub fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

pub fn dtype_from_name(name: &str) -> Option<DType> {
    DType::ALL.iter().copied().find(|d| d.name() == name)
}

fn unsupported_dtype(name: &str) -> PyErr {
    PyTypeError::new_err(format!(
        "unsupported dtype {name}; expected one of {DTYPE_NAMES}"
    ))
}

/// The bytes of one element of the dtype named `name` (`SharedMem.itemsize`, which
/// `shared_array` checks its dtype with).
pub fn dtype_itemsize(name: &str) -> PyResult<usize> {
    dtype_from_name(name)
        .map(|d| d.size_bytes())
        .ok_or_else(|| unsupported_dtype(name))
}

/// A dtype given as a name, a numpy dtype or a numpy scalar type.
pub fn parse_dtype(v: &Bound<'_, PyAny>) -> PyResult<DType> {
    let name: String = if let Ok(s) = v.extract::<String>() {
        s
    } else {
        v.str()?.to_string()
    };
    // numpy dtype objects and classes print as e.g. "float32" / "<class 'numpy.float32'>".
    let name = name
        .trim_start_matches("<class 'numpy.")
        .trim_end_matches("'>")
        .to_string();
    dtype_from_name(&name).ok_or_else(|| unsupported_dtype(&name))
}

/// A shape given as an int or a sequence of ints.
pub fn parse_shape(v: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if let Ok(n) = v.extract::<u32>() {
        return Ok(vec![n]);
    }
    let dims: Vec<i64> = v.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "shape must be an int or a sequence of ints, got {}",
            v.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })?;
    if dims.is_empty() || dims.len() > taskring::MAX_DIMS {
        return Err(PyValueError::new_err(format!(
            "shape must have 1 to {} dimensions, got {:?}",
            taskring::MAX_DIMS,
            dims
        )));
    }
    dims.iter()
        .map(|&d| {
            if d >= 1 && d <= u32::MAX as i64 {
                Ok(d as u32)
            } else {
                Err(PyValueError::new_err(format!(
                    "shape entries must be >= 1, got {dims:?}"
                )))
            }
        })
        .collect()
}

/// An int argument in `[lo, hi]`: `TypeError` for a non-int, `ValueError` (never
/// `OverflowError`) for one out of range, however large.
pub fn bounded_int(v: &Bound<'_, PyAny>, what: &str, lo: u64, hi: u64) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, got {}",
            type_name(v)
        )));
    }
    match v.extract::<u64>() {
        Ok(x) if (lo..=hi).contains(&x) => Ok(x),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be in [{lo}, {hi}], got {v}"
        ))),
    }
}

/// A chip of `chips` named by the int `w` (`worker=` of L3 calls).
pub fn worker_index(w: &Bound<'_, PyAny>, chips: usize) -> PyResult<usize> {
    if w.is_instance_of::<PyBool>() || !w.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "worker must be an int, got {}",
            type_name(w)
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

/// A kernel scalar as its 64-bit pattern and whether it is a float: a bool or an int
/// (int64, or uint64 above 2**63 - 1), or a float.
pub fn scalar_of(v: &Bound<'_, PyAny>) -> PyResult<(u64, bool)> {
    if v.is_instance_of::<PyBool>() {
        return Ok((v.extract::<bool>()? as u64, false));
    }
    if v.is_instance_of::<PyInt>() {
        // A scalar is 64 bits: int64, or uint64 above 2**63 - 1 (the same bits).
        if let Ok(x) = v.extract::<i64>() {
            return Ok((x as u64, false));
        }
        if let Ok(x) = v.extract::<u64>() {
            return Ok((x, false));
        }
        return Err(PyValueError::new_err(format!(
            "scalar {v} does not fit 64 bits (int64 or uint64)"
        )));
    }
    if let Ok(x) = v.extract::<f64>() {
        return Ok((x.to_bits(), true));
    }
    Err(PyTypeError::new_err(format!(
        "scalars must be int or float, got {}",
        type_name(v)
    )))
}

/// A Python scalar argument of `submit_next_level` (L3 and L4): `Some(Ok(int))`,
/// `Some(Err(float))`, None when `a` is not a scalar; a bool or an int beyond int64 is
/// an error.
pub fn scalar_arg(i: usize, a: &Bound<'_, PyAny>) -> PyResult<Option<Result<i64, f64>>> {
    if a.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "argument {i}: bool is not a valid scalar"
        )));
    }
    if a.is_instance_of::<PyInt>() {
        return a.extract::<i64>().map(|v| Some(Ok(v))).map_err(|_| {
            PyValueError::new_err(format!("argument {i}: scalar {a} does not fit int64"))
        });
    }
    if a.is_instance_of::<PyFloat>() {
        return Ok(Some(Err(a.extract()?)));
    }
    Ok(None)
}

/// The largest element size of any dtype (bytes); buffer bases are rounded to it.
const MAX_ITEM: u64 = 8;

/// A host array's data must sit on a multiple of its element size: the runtime
/// addresses tensors in whole elements, so a misaligned view would be read and written
/// at the wrong bytes (docs/api.md §2). Checked before anything runs.
pub fn check_aligned(i: usize, data: u64, dtype: DType) -> PyResult<()> {
    let item = dtype.size_bytes() as u64;
    if !data.is_multiple_of(item) {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array data is not aligned to its {item}-byte elements"
        )));
    }
    Ok(())
}

/// The data pointer of a numpy array.
pub fn data_address(arr: &Bound<'_, PyUntypedArray>) -> u64 {
    // safety: reading the data pointer of a live array object.
    unsafe { (*arr.as_array_ptr()).data as u64 }
}

/// The data pointer and byte size of the array that owns `a`'s memory (following
/// `.base` through numpy views), when that owner is a C-contiguous ndarray.
fn root_buffer(a: &Bound<'_, PyAny>) -> PyResult<Option<(u64, u64)>> {
    let mut cur = a.clone();
    loop {
        let b = cur.getattr("base")?;
        if b.is_none() || b.cast::<PyUntypedArray>().is_err() {
            break;
        }
        cur = b;
    }
    let arr = cur.cast::<PyUntypedArray>()?;
    if !arr.is_c_contiguous() {
        return Ok(None);
    }
    let data = data_address(arr);
    let item: usize = cur.getattr("itemsize")?.extract()?;
    Ok(Some((data, (arr.len() * item) as u64)))
}

/// A numpy array as a Tensor over its owner's buffer (zero copy): checked for layout,
/// dtype, shape, alignment and (when `writeable`) the writeable flag. L2 arguments and
/// rank 0's L4 arguments.
pub fn array_tensor(i: usize, a: &Bound<'_, PyAny>, writeable: bool) -> PyResult<Tensor> {
    let arr = a.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "argument {i}: expected a numpy.ndarray, got {}",
            type_name(a)
        ))
    })?;
    if !arr.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array must be C-contiguous (use numpy.ascontiguousarray)"
        )));
    }
    let dname = arr.dtype().str()?.to_string();
    let dtype = dtype_from_name(&dname).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "argument {i}: dtype {dname} is not supported; expected one of {DTYPE_NAMES}"
        ))
    })?;
    let shape: Vec<usize> = arr.shape().to_vec();
    if shape.is_empty()
        || shape.len() > taskring::MAX_DIMS
        || shape.iter().any(|&d| d == 0 || d > u32::MAX as usize)
    {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array shape {shape:?} is not supported (1 to {} dimensions, none empty)",
            taskring::MAX_DIMS
        )));
    }
    if writeable
        && !a
            .getattr("flags")?
            .getattr("writeable")?
            .extract::<bool>()?
    {
        return Err(PyValueError::new_err(format!(
            "argument {i}: array must be writeable"
        )));
    }
    let dims: Vec<u32> = shape.iter().map(|&d| d as u32).collect();
    let data = data_address(arr);
    check_aligned(i, data, dtype)?;
    let item = dtype.size_bytes() as u64;
    let nbytes = arr.len() as u64 * item;
    // A view of another array is a view of that array's buffer (so dependencies between
    // overlapping views passed as different arguments are seen). The buffer's start is
    // rounded down to 8 bytes (the largest element size), so every view of one owner,
    // whatever its dtype, has the same base and a whole number of elements from it; the
    // extra bytes before the owner are never part of any view, so never touched.
    let (base, bytes) = match root_buffer(a)?.filter(|&(b, n)| b <= data && data + nbytes <= b + n)
    {
        Some((b, n)) => (b & !(MAX_ITEM - 1), n + (b & (MAX_ITEM - 1))),
        None => (data, nbytes),
    };
    let mut t = Tensor::from_raw(base, &dims, dtype);
    t.buf_bytes = bytes;
    debug_assert_eq!((data - base) % item, 0);
    t.offset = (data - base) / item;
    t.validate()
        .map_err(|e| PyValueError::new_err(format!("argument {i}: {e}")))?;
    Ok(t)
}

/// Program arguments: numpy arrays -> tensors (zero copy, writeable; the caller keeps
/// the arrays alive for the whole run), Python ints and floats -> scalars.
pub fn host_args<'py>(
    args: impl Iterator<Item = Bound<'py, PyAny>>,
) -> PyResult<Vec<Arg<'static>>> {
    let mut host: Vec<Arg<'static>> = vec![];
    for (i, a) in args.enumerate() {
        if a.is_instance_of::<PyFloat>() || a.is_instance_of::<PyInt>() {
            let (bits, f) = scalar_of(&a)?;
            host.push(Arg::Scalar(if f {
                Scalar::F64(f64::from_bits(bits))
            } else {
                Scalar::I64(bits as i64)
            }));
        } else {
            let t = array_tensor(i, &a, true)?;
            // safety: the caller keeps the array referenced for the whole run.
            host.push(Arg::Tensor(unsafe { CallerTensor::from_raw(t) }));
        }
    }
    Ok(host)
}

/// A program's signature (`ArgDirection` values: 0 IN, 1 OUT, 2 INOUT, 3 SCALAR).
pub fn arg_dirs(sig: Vec<u32>) -> PyResult<Vec<ArgDir>> {
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
