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
pub mod native;

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
    /// Every kind, in the order the API lists them (`"aiv"`, `"aic"`, `"any"`).
    pub const ALL: [CoreKind; 3] = [CoreKind::Aiv, CoreKind::Aic, CoreKind::Any];

    /// The name the API uses: `"aic"`, `"aiv"` or `"any"` (also what `Display` and
    /// `FromStr` write and read). The only place these names are spelled.
    pub const fn name(self) -> &'static str {
        match self {
            CoreKind::Aic => "aic",
            CoreKind::Aiv => "aiv",
            CoreKind::Any => "any",
        }
    }

    /// The kind called `s` (the inverse of [`CoreKind::name`]); `s.parse()` gives the
    /// same with an error that lists the names.
    pub fn parse(s: &str) -> Option<CoreKind> {
        CoreKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl fmt::Display for CoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CoreKind {
    type Err = UnknownCoreKind;

    fn from_str(s: &str) -> Result<CoreKind, UnknownCoreKind> {
        CoreKind::parse(s).ok_or_else(|| UnknownCoreKind(s.to_string()))
    }
}

/// A core name that is not one of [`CoreKind::ALL`]'s; displays as
/// `core must be 'aiv', 'aic' or 'any', got "..."`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCoreKind(pub String);

impl fmt::Display for UnknownCoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = CoreKind::ALL.map(|k| format!("'{}'", k.name()));
        let (last, rest) = names.split_last().expect("CoreKind::ALL is not empty");
        write!(
            f,
            "core must be {} or {last}, got {:?}",
            rest.join(", "),
            self.0
        )
    }
}

impl std::error::Error for UnknownCoreKind {}

/// What a kernel sees when it runs.
pub struct KernelCall<'a> {
    /// Tensors in submit order: inputs, inouts, outputs, no_dep.
    pub tensors: &'a [Tensor],
    /// Scalars as 64-bit patterns: a float scalar is `f64::to_bits`, an integer scalar
    /// is `i64 as u64`; bit `i` of `scalar_float_mask` says which (read them through
    /// [`KernelCall::scalar_f64`] / [`KernelCall::scalar_i64`], which convert).
    pub scalars: &'a [u64],
    /// Index of the first tensor the kernel may write (inouts start at `n_inputs`).
    pub n_inputs: usize,
    /// Bit `i` set: scalar `i` holds `f64` bits; clear: `i64`.
    pub scalar_float_mask: u16,
}

impl KernelCall<'_> {
    /// Is scalar `i` a float?
    pub fn scalar_is_float(&self, i: usize) -> bool {
        self.scalar_float_mask & (1 << i) != 0
    }
    /// Scalar `i` as an `f64` (an integer scalar is converted).
    pub fn scalar_f64(&self, i: usize) -> f64 {
        if self.scalar_is_float(i) {
            f64::from_bits(self.scalars[i])
        } else {
            self.scalars[i] as i64 as f64
        }
    }
    pub fn scalar_f32(&self, i: usize) -> f32 {
        self.scalar_f64(i) as f32
    }
    /// Scalar `i` as an `i64` (a float scalar is truncated).
    pub fn scalar_i64(&self, i: usize) -> i64 {
        if self.scalar_is_float(i) {
            f64::from_bits(self.scalars[i]) as i64
        } else {
            self.scalars[i] as i64
        }
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
    /// Validate the arguments at submit. `n_inputs` tensors are read-only. The default
    /// accepts anything. The error is the kernel author's own sentence (the orchestrator
    /// makes it an INVALID_ARGS failure naming the task): this trait is implemented by
    /// users' kernels too, whose reasons no closed error enum of ours could list, so it
    /// stays a `String`, as `try_run`'s does.
    fn check(&self, _tensors: &[Tensor], _n_inputs: usize, _scalars: &[u64]) -> Result<(), String> {
        Ok(())
    }
    /// Run on a core thread. Implement this or [`Kernel::try_run`] (each defaults to the
    /// other).
    fn run(&self, call: &KernelCall<'_>) {
        if let Err(e) = self.try_run(call) {
            panic!("{e}");
        }
    }
    /// Run, reporting a failure as an error message instead of a panic (kernels that
    /// can fail without panicking, e.g. Python kernels, implement this). A panic in
    /// either fails the task too.
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        self.run(call);
        Ok(())
    }
    /// Whether every call returns after a bounded amount of work on its own arguments:
    /// it never blocks, sleeps, waits on anything outside the call or loops for as long
    /// as a scalar says. A run may then execute such a task on the thread that would
    /// otherwise wait for it (a chip's orchestrator once its program returned or while
    /// it waits for ring space), saving the hand-off to a core thread and back; a
    /// kernel that might not return must run on a core, where SCHEDULER_TIMEOUT can
    /// give up on it. Default `false`; every builtin but `busy_wait` says `true`.
    fn bounded(&self) -> bool {
        false
    }
    /// The ready queue of this kernel's tasks: its core kind's by default. An L3 node's
    /// dispatch kernels name their chip's lane instead (see
    /// [`EngineShared::with_lanes`](crate::engine::shared::EngineShared::with_lanes)).
    #[doc(hidden)]
    fn ready_queue(&self) -> usize {
        kind_queue(self.core())
    }
}

/// The engine's ready queue for tasks of `kind`: 0 AIC, 1 AIV, 2 `Any` (lanes follow
/// from 3; the engine's `queue_index` is this).
#[inline]
pub(crate) fn kind_queue(kind: CoreKind) -> usize {
    match kind {
        CoreKind::Aic => 0,
        CoreKind::Aiv => 1,
        CoreKind::Any => 2,
    }
}

/// A handle to a kernel, cheap to copy.
#[derive(Clone, Copy)]
pub struct KernelRef(pub &'static dyn Kernel);

/// The message of a caught panic (its `&str` or `String` payload).
pub(crate) fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

impl KernelRef {
    /// Run the kernel on a core: `Err(message)` if it returned an error or panicked
    /// (the panic's text; a kernel's panic never unwinds into the runtime).
    #[inline(always)]
    pub(crate) fn call(&self, call: &KernelCall<'_>) -> Result<(), String> {
        use std::panic::{catch_unwind, AssertUnwindSafe};
        catch_unwind(AssertUnwindSafe(|| self.0.try_run(call)))
            .unwrap_or_else(|p| Err(panic_text(&p)))
    }

    /// Leak `k` and return a handle (for kernels registered once per process).
    pub fn leak<K: Kernel>(k: K) -> KernelRef {
        KernelRef(Box::leak(Box::new(k)))
    }
    pub fn name(&self) -> &str {
        self.0.name()
    }
    /// The name with the kernel's (static) lifetime.
    pub(crate) fn name_static(&self) -> &'static str {
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
pub(crate) struct FnKernel<F> {
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
    fn run(&self, call: &KernelCall<'_>) {
        (self.f)(call)
    }
}

/// Leak a closure kernel with no argument checks.
pub fn fn_kernel<F>(name: &str, core: CoreKind, f: F) -> KernelRef
where
    F: Fn(&KernelCall<'_>) + Send + Sync + 'static,
{
    KernelRef::leak(FnKernel {
        name: name.to_string(),
        core,
        f,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_kind_names_round_trip() {
        for k in CoreKind::ALL {
            assert_eq!(CoreKind::parse(k.name()), Some(k));
            assert_eq!(k.name().parse::<CoreKind>(), Ok(k));
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!(CoreKind::Aic.name(), "aic");
        assert_eq!(CoreKind::parse("AIC"), None);
        assert_eq!(
            "gpu".parse::<CoreKind>().unwrap_err().to_string(),
            r#"core must be 'aiv', 'aic' or 'any', got "gpu""#
        );
    }
}
