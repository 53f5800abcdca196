//! Kernels: the code a task runs on a core thread.
//!
//! A kernel is a `&'static dyn Kernel` ([`KernelRef`]). Builtins are statics; user kernels
//! are leaked once at registration ([`KernelRef::leak`]), which keeps the hot path free of
//! reference counting (a task slot stores one fat pointer).
//!
//! Contract:
//! 1. [`Kernel::check`] runs on the orchestrator thread at submit, with the task's
//!    tensors (inputs, inouts, outputs, no_dep — in that order) and scalars; it rejects
//!    wrong counts, shapes and dtypes with a message (the submit fails with it).
//! 2. [`Kernel::run`] runs on a core thread once all the task's producers completed. It
//!    may read the tensors that precede `first_output` and write the others. A panic
//!    fails the task (caught by the core thread).

pub mod builtin;

use crate::tensor::Tensor;
use std::fmt;

/// Which kind of core a kernel needs. `Any` runs on whichever core is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoreKind {
    /// Cube core (matrix unit).
    Aic,
    /// Vector core.
    Aiv,
    /// Either kind.
    Any,
}

impl CoreKind {
    pub fn parse(s: &str) -> Option<CoreKind> {
        match s {
            "aic" => Some(CoreKind::Aic),
            "aiv" => Some(CoreKind::Aiv),
            "any" => Some(CoreKind::Any),
            _ => None,
        }
    }
}

/// What a kernel sees when it runs.
pub struct KernelCall<'a> {
    /// Tensors in submit order: inputs, inouts, outputs, no_dep.
    pub tensors: &'a [Tensor],
    /// Scalars, bit-cast to `u64` (an `f32` scalar is `f32::to_bits as u64`, an `f64`
    /// is `f64::to_bits`; see [`KernelCall::scalar_f32`]).
    pub scalars: &'a [u64],
    /// Index of the first tensor the kernel may write (inouts start at `n_inputs`).
    pub n_inputs: usize,
}

impl KernelCall<'_> {
    /// Scalar `i` read as an `f32`: scalars are stored as `f64` bits by the Rust and
    /// Python APIs ([`crate::engine::Scalar`]).
    pub fn scalar_f32(&self, i: usize) -> f32 {
        f64::from_bits(self.scalars[i]) as f32
    }
    pub fn scalar_f64(&self, i: usize) -> f64 {
        f64::from_bits(self.scalars[i])
    }
    pub fn scalar_i64(&self, i: usize) -> i64 {
        self.scalars[i] as i64
    }
}

/// A kernel: see the module doc for the contract.
pub trait Kernel: Send + Sync + 'static {
    /// Name used in errors (`kernel 'add'`).
    fn name(&self) -> &str;
    /// Core kind the kernel requires.
    fn core(&self) -> CoreKind {
        CoreKind::Any
    }
    /// Validate the arguments at submit. `n_inputs` tensors are read-only.
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String>;
    /// Run on a core thread.
    fn run(&self, call: &KernelCall<'_>);
}

/// A handle to a kernel, cheap to copy.
#[derive(Clone, Copy)]
pub struct KernelRef(pub &'static dyn Kernel);

impl KernelRef {
    /// Leak `k` and return a handle (for kernels registered once per process).
    pub fn leak<K: Kernel>(k: K) -> KernelRef {
        KernelRef(Box::leak(Box::new(k)))
    }
    pub fn name(&self) -> &str {
        self.0.name()
    }
    pub fn core(&self) -> CoreKind {
        self.0.core()
    }
}

impl fmt::Debug for KernelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel '{}'", self.0.name())
    }
}

/// A kernel made from a closure (Rust API convenience; used by tests).
pub struct FnKernel<F> {
    pub name: String,
    pub core: CoreKind,
    pub f: F,
}

impl<F> Kernel for FnKernel<F>
where
    F: Fn(&KernelCall<'_>) + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn core(&self) -> CoreKind {
        self.core
    }
    fn check(&self, _t: &[Tensor], _n: usize, _s: &[u64]) -> Result<(), String> {
        Ok(())
    }
    fn run(&self, call: &KernelCall<'_>) {
        (self.f)(call)
    }
}

/// Leak a closure kernel with no argument checks.
pub fn fn_kernel<F>(name: &str, core: CoreKind, f: F) -> KernelRef
where
    F: Fn(&KernelCall<'_>) + Send + Sync + 'static,
{
    KernelRef::leak(FnKernel { name: name.to_string(), core, f })
}
