//! Native kernels: C functions with the ABI of `include/taskring_kernel.h` (`docs/api.md` §11),
//! loaded from a shared library (`dlopen` through `libloading`) or given by address (a
//! `numba.cfunc`). They run on core threads like the builtins: no interpreter lock, so a
//! chip runs as many at once as it has cores.
//!
//! Trust: a native kernel runs in the process with full rights. A kernel that writes
//! outside its tensors or crashes takes the process with it (at L3 that process is the
//! chip, which the host reports as dead); the runtime cannot contain it. An optional
//! [`NativeSignature`] moves argument mistakes (count, dtype, rank) to submit time, where
//! they are INVALID_ARGS instead of undefined behaviour inside the kernel.

use super::{CoreKind, Kernel, KernelCall};
use crate::tensor::{DType, Tensor, MAX_DIMS};
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An error's text followed by its sources' (the loader's own reason, `dlerror()`'s, is
/// the source of libloading's "dlopen failed").
pub(crate) fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        src = s.source();
    }
    text
}

thread_local! {
    /// Set while this thread runs a kernel given by its address (a numba cfunc). Such a
    /// function's wrapper hands an exception to the host's interpreter as "unraisable"
    /// and returns 0; the host passes it on with [`report_raised`].
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static RAISED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// An exception raised inside the address kernel this thread runs now (`text`, e.g.
/// `"ValueError: bad"`): the kernel's task fails with it. Returns false (and records
/// nothing) when the thread runs no such kernel.
pub fn report_raised(text: &str) -> bool {
    if !WATCHING.get() {
        return false;
    }
    RAISED.with_borrow_mut(|r| {
        if r.is_none() {
            *r = Some(text.to_string());
        }
    });
    true
}

/// `tr_tensor` of the C header.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct TrTensor {
    pub data: *mut c_void,
    pub dtype: i32,
    pub ndim: i32,
    pub shape: [i64; MAX_DIMS],
    pub strides: [i64; MAX_DIMS],
}

/// `tr_scalar` of the C header (the union is carried as its 8 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct TrScalar {
    pub kind: i32,
    pub reserved: i32,
    pub bits: u64,
}

/// `tr_kernel_fn` of the C header.
pub(crate) type TrKernelFn =
    unsafe extern "C" fn(*const TrTensor, i32, *const TrScalar, i32, *mut c_char, usize) -> i32;

/// Bytes of the message buffer handed to a kernel (`errlen`).
pub(crate) const ERR_LEN: usize = 512;

/// Most tensors and scalars one call passes: the engine's per-task limits
/// (`engine::MAX_TASK_TENSORS` / `MAX_TASK_SCALARS`, equal by a test; the kernel layer
/// does not depend on the engine).
pub const MAX_TENSORS: usize = 16;
pub const MAX_SCALARS: usize = 16;

/// Why a native kernel could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NativeKernelError {
    /// The library could not be opened (missing file, not a shared library, missing
    /// dependencies).
    #[error("cannot load native kernel library {path}: {reason}")]
    Library { path: String, reason: String },
    /// The library has no such symbol.
    #[error("native kernel library {path} has no symbol '{symbol}': {reason}")]
    Symbol {
        path: String,
        symbol: String,
        reason: String,
    },
}

/// What one tensor argument must be (`None` = anything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TensorRule {
    pub dtype: Option<DType>,
    pub ndim: Option<u8>,
}

/// An argument signature checked at submit: the number of tensors and scalars, and
/// each tensor's dtype and rank where given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NativeSignature {
    pub tensors: Vec<TensorRule>,
    /// Number of scalars (`None` = any number).
    pub scalars: Option<usize>,
}

impl NativeSignature {
    fn check(&self, tensors: &[Tensor], scalars: usize) -> Result<(), String> {
        if tensors.len() != self.tensors.len() {
            return Err(format!(
                "takes {} tensors, got {}",
                self.tensors.len(),
                tensors.len()
            ));
        }
        if let Some(n) = self.scalars {
            if n != scalars {
                return Err(format!("takes {n} scalars, got {scalars}"));
            }
        }
        for (i, (t, r)) in tensors.iter().zip(&self.tensors).enumerate() {
            if let Some(d) = r.dtype {
                if t.dtype != d {
                    return Err(format!(
                        "tensor {i} must be {}, got {}",
                        d.name(),
                        t.dtype.name()
                    ));
                }
            }
            if let Some(n) = r.ndim {
                if t.ndims != n {
                    return Err(format!(
                        "tensor {i} must have {n} dimensions, got {}",
                        t.ndims
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Where a native kernel's code comes from (kept so a chip process can load it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NativeSource {
    /// `symbol` of the library at `path` (absolute when the file was found).
    Library { path: PathBuf, symbol: String },
    /// A function address given by the caller (e.g. a numba cfunc).
    Address(usize),
}

/// A kernel calling a C function of the `tr_kernel_fn` ABI.
pub struct NativeKernel {
    name: String,
    core: CoreKind,
    func: TrKernelFn,
    source: NativeSource,
    signature: Option<NativeSignature>,
    /// Keeps the library mapped for as long as the kernel exists (kernels are leaked,
    /// so a loaded library is never unmapped under a running task).
    _lib: Option<Arc<libloading::Library>>,
}

impl NativeKernel {
    /// Load `symbol` from the shared library at `path`. The kernel's name is the
    /// symbol's.
    pub fn load(
        path: impl AsRef<Path>,
        symbol: &str,
        core: CoreKind,
    ) -> Result<NativeKernel, NativeKernelError> {
        let given = path.as_ref();
        // An existing file is opened by its absolute path (so a chip process started
        // elsewhere opens the same file); a bare name goes to the loader's search.
        let path = std::fs::canonicalize(given).unwrap_or_else(|_| given.to_path_buf());
        let shown = path.display().to_string();
        // safety: loading a library runs its initialisers; that is what the user asks for.
        let lib =
            unsafe { libloading::Library::new(&path) }.map_err(|e| NativeKernelError::Library {
                path: shown.clone(),
                reason: with_sources(&e),
            })?;
        // safety: the symbol is declared by the ABI to have the tr_kernel_fn type.
        let func: TrKernelFn = unsafe { lib.get::<TrKernelFn>(symbol.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| NativeKernelError::Symbol {
                path: shown,
                symbol: symbol.to_string(),
                reason: with_sources(&e),
            })?;
        Ok(NativeKernel {
            name: symbol.to_string(),
            core,
            func,
            source: NativeSource::Library {
                path,
                symbol: symbol.to_string(),
            },
            signature: None,
            _lib: Some(Arc::new(lib)),
        })
    }

    /// A kernel from a function address.
    ///
    /// # Safety
    /// `addr` must be a function of the `tr_kernel_fn` ABI that stays valid for the rest
    /// of the process.
    pub unsafe fn from_address(name: &str, core: CoreKind, addr: usize) -> NativeKernel {
        NativeKernel {
            name: name.to_string(),
            core,
            // safety: the caller's promise.
            func: unsafe { std::mem::transmute::<usize, TrKernelFn>(addr) },
            source: NativeSource::Address(addr),
            signature: None,
            _lib: None,
        }
    }

    /// Rename the kernel (the name used in errors and traces).
    pub fn named(mut self, name: &str) -> NativeKernel {
        self.name = name.to_string();
        self
    }

    /// Check arguments against `sig` at submit.
    pub fn with_signature(mut self, sig: NativeSignature) -> NativeKernel {
        self.signature = Some(sig);
        self
    }

    /// Where the code comes from.
    pub fn source(&self) -> &NativeSource {
        &self.source
    }

    /// The signature checked at submit, if any.
    pub fn signature(&self) -> Option<&NativeSignature> {
        self.signature.as_ref()
    }
}

fn tr_tensor(t: &Tensor) -> TrTensor {
    let mut shape = [0i64; MAX_DIMS];
    let mut strides = [0i64; MAX_DIMS];
    for (i, (&d, &s)) in t.shape().iter().zip(t.strides()).enumerate() {
        shape[i] = d as i64;
        strides[i] = s as i64;
    }
    TrTensor {
        data: t.data_ptr() as *mut c_void,
        dtype: t.dtype as i32,
        ndim: t.ndims as i32,
        shape,
        strides,
    }
}

impl Kernel for NativeKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn core(&self) -> CoreKind {
        self.core
    }
    fn check(&self, tensors: &[Tensor], _n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        match &self.signature {
            Some(sig) => sig.check(tensors, scalars.len()),
            None => Ok(()),
        }
    }
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        // Everything on the stack, only the used entries written: a native task
        // allocates nothing and fills ~100 bytes per argument.
        use std::mem::MaybeUninit;
        debug_assert!(call.tensors.len() <= MAX_TENSORS && call.scalars.len() <= MAX_SCALARS);
        let nt = call.tensors.len().min(MAX_TENSORS);
        let ns = call.scalars.len().min(MAX_SCALARS);
        let mut tensors = [const { MaybeUninit::<TrTensor>::uninit() }; MAX_TENSORS];
        for (slot, t) in tensors.iter_mut().zip(&call.tensors[..nt]) {
            slot.write(tr_tensor(t));
        }
        let mut scalars = [const { MaybeUninit::<TrScalar>::uninit() }; MAX_SCALARS];
        for (i, slot) in scalars.iter_mut().enumerate().take(ns) {
            slot.write(TrScalar {
                kind: call.scalar_is_float(i) as i32,
                reserved: 0,
                bits: call.scalars[i],
            });
        }
        // Zeroed (one small memset): whatever the kernel writes, the message is read
        // from initialised bytes.
        let mut err = [0u8; ERR_LEN];
        let watch = matches!(self.source, NativeSource::Address(_));
        if watch {
            WATCHING.set(true);
        }
        // safety: the ABI's contract; the kernel reads only the first nt / ns entries,
        // which are initialised; err holds ERR_LEN bytes.
        let rc = unsafe {
            (self.func)(
                tensors.as_ptr() as *const TrTensor,
                nt as i32,
                scalars.as_ptr() as *const TrScalar,
                ns as i32,
                err.as_mut_ptr() as *mut c_char,
                ERR_LEN,
            )
        };
        if watch {
            WATCHING.set(false);
            if let Some(text) = RAISED.with_borrow_mut(Option::take) {
                return Err(format!("raised {text}"));
            }
        }
        if rc == 0 {
            return Ok(());
        }
        // The message ends at the first NUL (or the buffer's end, if the kernel wrote
        // no NUL).
        let end = err.iter().position(|&b| b == 0).unwrap_or(ERR_LEN);
        let msg = String::from_utf8_lossy(&err[..end]);
        Err(if msg.is_empty() {
            format!("returned {rc}")
        } else {
            format!("returned {rc}: {msg}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn add_one(
        t: *const TrTensor,
        nt: i32,
        s: *const TrScalar,
        ns: i32,
        err: *mut c_char,
        errlen: usize,
    ) -> i32 {
        // safety: called by try_run with nt tensors and ns scalars.
        let (t, s) = unsafe {
            (
                std::slice::from_raw_parts(t, nt as usize),
                std::slice::from_raw_parts(s, ns as usize),
            )
        };
        if nt != 2 || ns != 1 || s[0].kind != 1 {
            let m = b"want 2 tensors and a float\0";
            // safety: errlen >= the message's length.
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr(), err as *mut u8, m.len().min(errlen))
            };
            return 7;
        }
        let n = t[0].shape[0] as usize;
        let add = f64::from_bits(s[0].bits) as f32;
        for i in 0..n {
            // safety: the tensors are f32 vectors of n elements, strides 1.
            unsafe { *(t[1].data as *mut f32).add(i) = *(t[0].data as *const f32).add(i) + add };
        }
        0
    }

    #[test]
    fn calls_the_function_with_the_abi_layout() {
        assert_eq!(std::mem::size_of::<TrTensor>(), 8 + 4 + 4 + 40 + 40);
        assert_eq!(std::mem::size_of::<TrScalar>(), 16);
        // safety: add_one has the ABI and lives for the whole test binary.
        let k = unsafe {
            NativeKernel::from_address("add_one", CoreKind::Any, add_one as TrKernelFn as usize)
        };
        let a = [1f32, 2., 3.];
        let mut b = [0f32; 3];
        let ta = Tensor::from_raw(a.as_ptr() as u64, &[3], DType::F32);
        let tb = Tensor::from_raw(b.as_mut_ptr() as u64, &[3], DType::F32);
        let tensors = [ta, tb];
        let scalars = [0.5f64.to_bits()];
        let call = KernelCall {
            tensors: &tensors,
            scalars: &scalars,
            n_inputs: 1,
            scalar_float_mask: 1,
        };
        k.try_run(&call).unwrap();
        assert_eq!(b, [1.5, 2.5, 3.5]);
        let call = KernelCall {
            tensors: &tensors,
            scalars: &scalars,
            n_inputs: 1,
            scalar_float_mask: 0,
        };
        assert_eq!(
            k.try_run(&call).unwrap_err(),
            "returned 7: want 2 tensors and a float"
        );
    }

    #[test]
    fn signature_is_checked_at_submit() {
        // safety: never called.
        let k = unsafe {
            NativeKernel::from_address("k", CoreKind::Any, add_one as TrKernelFn as usize)
        }
        .with_signature(NativeSignature {
            tensors: vec![
                TensorRule {
                    dtype: Some(DType::F32),
                    ndim: Some(1),
                },
                TensorRule::default(),
            ],
            scalars: Some(1),
        });
        let t1 = Tensor::from_raw(0x1000, &[3], DType::F32);
        let t2 = Tensor::from_raw(0x1000, &[3, 1], DType::I32);
        assert!(k.check(&[t1, t2], 1, &[0]).is_ok());
        assert_eq!(
            k.check(&[t1], 1, &[0]).unwrap_err(),
            "takes 2 tensors, got 1"
        );
        assert_eq!(
            k.check(&[t1, t2], 1, &[]).unwrap_err(),
            "takes 1 scalars, got 0"
        );
        assert_eq!(
            k.check(&[t2, t1], 1, &[0]).unwrap_err(),
            "tensor 0 must be float32, got int32"
        );
        let t3 = Tensor::from_raw(0x1000, &[3, 1], DType::F32);
        assert_eq!(
            k.check(&[t3, t1], 1, &[0]).unwrap_err(),
            "tensor 0 must have 1 dimensions, got 2"
        );
    }

    #[test]
    fn load_errors_name_the_file_and_the_symbol() {
        let e = NativeKernel::load("/nonexistent/libnothing.so", "k", CoreKind::Aiv)
            .err()
            .unwrap();
        assert!(
            matches!(&e, NativeKernelError::Library { path, .. } if path == "/nonexistent/libnothing.so"),
            "{e}"
        );
        // The C library is always there and has no such symbol.
        let libc_path = if cfg!(target_os = "linux") {
            "libc.so.6"
        } else {
            return;
        };
        let e = NativeKernel::load(libc_path, "taskring_no_such_kernel", CoreKind::Aiv)
            .err()
            .unwrap();
        assert!(
            matches!(&e, NativeKernelError::Symbol { symbol, .. } if symbol == "taskring_no_such_kernel"),
            "{e}"
        );
    }
}
