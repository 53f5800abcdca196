//! The task engine: rings, tensormap, scopes, submission and completion.
//!
//! One engine serves both levels (`docs/architecture.md`): what differs between an L2 chip
//! and an L3 node is only what runs a ready task, which is a [`Kernel`](crate::kernel::Kernel)
//! either way (a compute kernel on a core thread, or a chip dispatch on an endpoint).
//!
//! - [`ring`]: the orchestrator-side allocators (task window, heap ring, pools);
//! - [`shared`]: slot states, completion protocol, ready queues, parking;
//! - [`tensormap`]: dependency inference over buffer regions;
//! - `orch` (crate-internal): the [`Orchestrator`] (submit, scopes, alloc) and its
//!   per-arena state;
//! - `recording` (crate-internal): what the engine tells the recorder of a captured run,
//!   and what it takes to submit a recorded task again (`crate::Captured`);
//! - `error` (crate-internal): [`RuntimeFailure`] and status codes ([`StatusCode`]);
//!
//! What is not tracked: write-after-read. A task that overwrites a buffer an earlier task
//! only reads (INPUT) does not wait for that reader. Make the reader INOUT, or add an
//! explicit dependency on it (`docs/api.md` §3.1; upstream does not track it either).

pub(crate) mod depgraph;
pub(crate) mod error;
pub(crate) mod orch;
pub(crate) mod recording;
pub mod ring;
pub mod shared;
pub mod tensormap;
pub(crate) mod writers;

pub use error::{Resource, RuntimeFailure, StatusCode};
pub use orch::{OrchState, Orchestrator, PeakUse, TaskOutputs};

use crate::kernel::KernelRef;
use crate::tensor::{DType, TaskId, Tensor, TensorError, MAX_DIMS};
use std::fmt;
use std::mem::MaybeUninit;

/// Most tensors one task may take.
pub const MAX_TASK_TENSORS: usize = 16;
/// Most scalars one task may take.
pub const MAX_TASK_SCALARS: usize = 16;
/// Explicit dependencies a task keeps inline; more (there is no limit) move to the heap.
pub const MAX_TASK_DEPS: usize = 16;
/// Fanin edges stored in the payload; the rest spill into the ring's spill pool.
pub(crate) const FANIN_INLINE: usize = 16;
/// Deepest scope nesting.
pub(crate) const MAX_SCOPE_DEPTH: usize = 64;

/// How a task uses a tensor argument (upstream's `TensorArgType`; `docs/api.md` §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgTag {
    /// Read; depends on the creator and on overlapping writers.
    Input,
    /// Written into a buffer the runtime allocates from the current ring's heap.
    Output,
    /// Read and written; depends on overlapping writers and becomes the new writer.
    Inout,
    /// Written into an existing buffer; becomes the writer, does not wait for earlier
    /// writers (only for the buffer's creator).
    OutputExisting,
    /// Passed through without dependency tracking (only the creator edge).
    NoDep,
}

impl ArgTag {
    pub fn name(self) -> &'static str {
        match self {
            ArgTag::Input => "INPUT",
            ArgTag::Output => "OUTPUT",
            ArgTag::Inout => "INOUT",
            ArgTag::OutputExisting => "OUTPUT_EXISTING",
            ArgTag::NoDep => "NO_DEP",
        }
    }
}

/// A scalar argument, bit-cast to `u64`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F64(f64),
    I64(i64),
}

impl Scalar {
    pub fn bits(self) -> u64 {
        match self {
            Scalar::F64(v) => v.to_bits(),
            Scalar::I64(v) => v as u64,
        }
    }
}

/// A runtime-allocated output: shape and dtype (tag OUTPUT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub shape: [u32; MAX_DIMS],
    pub ndims: u8,
    pub dtype: DType,
}

impl TensorSpec {
    pub fn new(shape: &[u32], dtype: DType) -> Result<TensorSpec, TensorError> {
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(TensorError::Rank(shape.len()));
        }
        if shape.contains(&0) {
            return Err(TensorError::EmptyDim(shape.to_vec()));
        }
        if !crate::tensor::contiguous_strides_fit(shape) {
            return Err(TensorError::StrideOverflow(shape.to_vec()));
        }
        let mut s = [1u32; MAX_DIMS];
        s[..shape.len()].copy_from_slice(shape);
        Ok(TensorSpec {
            shape: s,
            ndims: shape.len() as u8,
            dtype,
        })
    }
    pub fn nbytes(&self) -> u64 {
        self.shape[..self.ndims as usize]
            .iter()
            .map(|&d| d as u64)
            .product::<u64>()
            * self.dtype.size_bytes() as u64
    }
    /// The tensor this spec becomes at `addr`, owned by `owner`.
    pub(crate) fn materialize(&self, addr: u64, owner: TaskId) -> Tensor {
        let mut t = Tensor::from_raw(addr, &self.shape[..self.ndims as usize], self.dtype);
        t.owner = owner;
        t
    }
}

/// A misuse recorded while building [`TaskArgs`]; it fails the submit (INVALID_ARGS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArgError {
    TooManyTensors,
    TooManyScalars,
    TensorAfterScalar,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::TooManyTensors => {
                write!(f, "a task takes at most {MAX_TASK_TENSORS} tensors")
            }
            ArgError::TooManyScalars => {
                write!(f, "a task takes at most {MAX_TASK_SCALARS} scalars")
            }
            ArgError::TensorAfterScalar => {
                f.write_str("all tensors must be added before any scalar")
            }
        }
    }
}

/// How a tensor argument was added: an existing tensor with its direction, or the spec
/// of an output the runtime allocates (kept in the argument's tensor entry: its shape,
/// rank and dtype; the rest of that entry is zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArgKind {
    Existing(ArgTag),
    Spec,
}

/// The entry of an output spec in [`TaskArgs`]'s tensor array.
#[inline(always)]
fn spec_entry(spec: &TensorSpec) -> Tensor {
    Tensor {
        addr: 0,
        buf_bytes: 0,
        offset: 0,
        owner: TaskId::INVALID,
        shape: spec.shape,
        strides: [0; crate::tensor::MAX_DIMS],
        ndims: spec.ndims,
        dtype: spec.dtype,
        version: 0,
        manual_dep: false,
    }
}

/// The arguments of one task, built without heap allocation. Misuse is recorded and
/// reported by the submit (INVALID_ARGS), as upstream's `Arg` builder does.
///
/// Built per submit, so `new` writes only the counts: the arrays are filled as
/// arguments are added (entries `[..n]` are initialised, the rest never read).
///
/// Tensors come first, in the kernel's argument order, each with its direction
/// (`input`, `inout`, `output_existing`, or `output` for a new buffer the runtime
/// allocates); then scalars; then explicit dependencies.
///
/// ```
/// use taskring::builtin::{MATMUL, SCALE};
/// use taskring::*;
///
/// let program = Program::new("scaled_matmul", |o, args| {
///     let (a, b, out) = (args[0].tensor()?, args[1].tensor()?, args[2].tensor()?);
///     // out = 0.5 * (a @ b): the product goes to a new runtime buffer, then is scaled.
///     let mut t = TaskArgs::new();
///     t.input(a).input(b).output(TensorSpec::new(&[2, 2], DType::F32).unwrap());
///     let product = o.submit(MATMUL, &t)?.output(0);
///     let mut t = TaskArgs::new();
///     t.input(product).output_existing(out).scalar(Scalar::F64(0.5));
///     o.submit(SCALE, &t).map(|_| ())
/// });
///
/// let mut chip = ChipWorker::new(ChipOptions { cores: 2, ..ChipOptions::default() }).unwrap();
/// let (mut a, mut b, mut out) = (vec![1.0f32, 2.0, 3.0, 4.0], vec![2.0f32, 0.0, 0.0, 2.0], vec![0.0f32; 4]);
/// let args = [
///     Arg::Tensor(CallerTensor::f32(&mut a, &[2, 2])),
///     Arg::Tensor(CallerTensor::f32(&mut b, &[2, 2])),
///     Arg::Tensor(CallerTensor::f32(&mut out, &[2, 2])),
/// ];
/// let report = chip.run(&program, &args, &CallConfig::default()).unwrap();
/// assert_eq!(report.tasks, 2);
/// drop(args);
/// assert_eq!(out, vec![1.0f32, 2.0, 3.0, 4.0]);
/// ```
#[derive(Clone)]
pub struct TaskArgs {
    /// The tensors (an output spec's shape, rank and dtype: `spec_entry`), and beside
    /// them how each was added. Two arrays, not one of an enum: a tensor is then stored
    /// with one plain copy (an enum around it was built on the stack and copied again
    /// with loads that straddled the stores just made, a stall on every argument).
    tensors: [MaybeUninit<Tensor>; MAX_TASK_TENSORS],
    kinds: [MaybeUninit<ArgKind>; MAX_TASK_TENSORS],
    n_tensors: usize,
    scalars: [MaybeUninit<u64>; MAX_TASK_SCALARS],
    n_scalars: usize,
    pub(crate) scalar_float_mask: u16,
    deps: [MaybeUninit<(TaskId, u64)>; MAX_TASK_DEPS],
    n_deps: usize,
    /// Every explicit dependency once there are more than [`MAX_TASK_DEPS`] (empty, and
    /// unallocated, until then).
    spill: Vec<(TaskId, u64)>,
    pub(crate) error: Option<ArgError>,
}

impl Default for TaskArgs {
    /// Writes the counts and nothing else: the arrays stay uninitialised. (A struct
    /// literal with `[MaybeUninit::uninit(); N]` arrays makes the compiler clear all
    /// ~1.8 KiB of them on every submit.)
    #[inline]
    fn default() -> Self {
        let mut a = MaybeUninit::<TaskArgs>::uninit();
        let p = a.as_mut_ptr();
        // safety: each field that is not an array of `MaybeUninit` is written once
        // through a raw pointer (no reference to uninitialised memory is made); the
        // arrays need no initialisation, so after these writes the value is valid.
        unsafe {
            std::ptr::addr_of_mut!((*p).n_tensors).write(0);
            std::ptr::addr_of_mut!((*p).n_scalars).write(0);
            std::ptr::addr_of_mut!((*p).scalar_float_mask).write(0);
            std::ptr::addr_of_mut!((*p).n_deps).write(0);
            std::ptr::addr_of_mut!((*p).spill).write(Vec::new());
            std::ptr::addr_of_mut!((*p).error).write(None);
            a.assume_init()
        }
    }
}

/// The first `n` entries of `a`, which the caller has initialised.
///
/// # Safety
/// `a[..n]` must be initialised.
#[inline(always)]
unsafe fn init_prefix<T>(a: &[MaybeUninit<T>], n: usize) -> &[T] {
    std::slice::from_raw_parts(a.as_ptr() as *const T, n)
}

impl TaskArgs {
    /// How each tensor argument so far was added, in argument order.
    #[inline]
    pub(crate) fn kinds(&self) -> &[ArgKind] {
        // safety: push_tensor initialises entry n_tensors before incrementing it.
        unsafe { init_prefix(&self.kinds, self.n_tensors) }
    }
    /// The tensor entries so far, in argument order (an output spec's: `spec_entry`).
    #[inline]
    pub(crate) fn tensor_entries(&self) -> &[Tensor] {
        // safety: as for `kinds`.
        unsafe { init_prefix(&self.tensors, self.n_tensors) }
    }
    /// The spec of tensor argument `i`, an output spec ([`ArgKind::Spec`]).
    #[inline]
    pub(crate) fn spec_at(&self, i: usize) -> TensorSpec {
        let t = &self.tensor_entries()[i];
        TensorSpec {
            shape: t.shape,
            ndims: t.ndims,
            dtype: t.dtype,
        }
    }
    /// The scalars added so far (bit patterns).
    #[inline]
    pub(crate) fn scalars(&self) -> &[u64] {
        // safety: scalar_raw initialises entry n_scalars before incrementing it.
        unsafe { init_prefix(&self.scalars, self.n_scalars) }
    }
    /// The explicit dependencies added so far (id, flags).
    #[inline]
    pub(crate) fn deps(&self) -> &[(TaskId, u64)] {
        if !self.spill.is_empty() {
            return &self.spill;
        }
        // safety: dep_flags initialises entry n_deps before incrementing it.
        unsafe { init_prefix(&self.deps, self.n_deps) }
    }
}

impl TaskArgs {
    #[inline]
    pub fn new() -> TaskArgs {
        TaskArgs::default()
    }
    #[cold]
    fn record(&mut self, e: ArgError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
    #[inline]
    fn push_tensor(&mut self, kind: ArgKind, t: &Tensor) -> &mut Self {
        if self.n_scalars > 0 {
            self.record(ArgError::TensorAfterScalar);
        } else if self.n_tensors == MAX_TASK_TENSORS {
            self.record(ArgError::TooManyTensors);
        } else {
            self.tensors[self.n_tensors].write(*t);
            self.kinds[self.n_tensors].write(kind);
            self.n_tensors += 1;
        }
        self
    }
    /// A tensor with an explicit tag. With [`ArgTag::Output`] only `t`'s shape and dtype
    /// count: the runtime allocates a new buffer of that shape, as for
    /// [`TaskArgs::output`] (`t`'s address, strides and offset are not used).
    #[inline]
    pub fn tensor(&mut self, tag: ArgTag, t: Tensor) -> &mut Self {
        if tag == ArgTag::Output {
            return self.output(TensorSpec {
                shape: t.shape,
                ndims: t.ndims,
                dtype: t.dtype,
            });
        }
        self.push_tensor(ArgKind::Existing(tag), &t)
    }
    #[inline]
    pub fn input(&mut self, t: Tensor) -> &mut Self {
        self.tensor(ArgTag::Input, t)
    }
    #[inline]
    pub fn inout(&mut self, t: Tensor) -> &mut Self {
        self.tensor(ArgTag::Inout, t)
    }
    #[inline]
    pub fn output_existing(&mut self, t: Tensor) -> &mut Self {
        self.tensor(ArgTag::OutputExisting, t)
    }
    #[inline]
    pub fn no_dep(&mut self, t: Tensor) -> &mut Self {
        self.tensor(ArgTag::NoDep, t)
    }
    /// A runtime-allocated output (tag OUTPUT).
    #[inline]
    pub fn output(&mut self, spec: TensorSpec) -> &mut Self {
        self.push_tensor(ArgKind::Spec, &spec_entry(&spec))
    }
    #[inline]
    pub fn scalar(&mut self, s: Scalar) -> &mut Self {
        self.scalar_raw(s.bits(), matches!(s, Scalar::F64(_)))
    }
    /// A scalar as a bit pattern; `is_float`: the bits are an `f64`'s, else an `i64`'s.
    #[inline]
    pub fn scalar_raw(&mut self, bits: u64, is_float: bool) -> &mut Self {
        if self.n_scalars == MAX_TASK_SCALARS {
            self.record(ArgError::TooManyScalars);
        } else {
            self.scalars[self.n_scalars] = MaybeUninit::new(bits);
            if is_float {
                self.scalar_float_mask |= 1 << self.n_scalars;
            }
            self.n_scalars += 1;
        }
        self
    }
    /// Explicit dependency: wait for `id` and keep its outputs alive until this task
    /// is released (WAIT | RETAIN).
    #[inline]
    pub fn dep(&mut self, id: TaskId) -> &mut Self {
        self.dep_flags(id, shared::DEP_WAIT | shared::DEP_RETAIN)
    }
    /// Explicit ordering-only dependency (WAIT).
    #[inline]
    pub fn dep_wait(&mut self, id: TaskId) -> &mut Self {
        self.dep_flags(id, shared::DEP_WAIT)
    }
    pub(crate) fn dep_flags(&mut self, id: TaskId, flags: u64) -> &mut Self {
        if self.n_deps < MAX_TASK_DEPS {
            self.deps[self.n_deps] = MaybeUninit::new((id, flags));
        } else {
            if self.spill.is_empty() {
                // safety: the first n_deps entries were initialised above.
                let inline = unsafe { init_prefix(&self.deps, self.n_deps) };
                self.spill.extend_from_slice(inline);
            }
            self.spill.push((id, flags));
        }
        self.n_deps += 1;
        self
    }
    pub fn tensor_count(&self) -> usize {
        self.n_tensors
    }
}

/// What a task runs with; written by the orchestrator before publication.
///
/// Laid out for the submit path, which writes it into a slot that is usually cold: the
/// header and the inline fanin first (the lines every task writes), then only as many
/// tensor lines as the task has tensors; scalars last.
#[repr(C, align(64))]
pub struct Payload {
    pub kernel: Option<KernelRef>,
    pub id: TaskId,
    pub fanin_spill_start: u64,
    pub n_fanin: u32,
    pub scalar_float_mask: u16,
    /// The ready queue the task goes to: its kernel's core kind's, or its lane's
    /// ([`Kernel::ready_queue`](crate::kernel::Kernel::ready_queue)).
    pub queue: u8,
    pub n_tensors: u8,
    pub n_inputs: u8,
    pub n_scalars: u8,
    pub fanin_inline: [u64; FANIN_INLINE],
    pub tensors: [Tensor; MAX_TASK_TENSORS],
    pub scalars: [u64; MAX_TASK_SCALARS],
}
