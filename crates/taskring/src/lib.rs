//! taskring: a PTO2-style ("tensormap and ringbuffer") task runtime on a simulated chip,
//! with per-task ring sizing.
//!
//! # The API a user needs
//!
//! Everything a Rust user needs is re-exported here at the crate root: a chip
//! ([`ChipWorker`], built from [`ChipOptions`]), a program ([`Program`]: host code that
//! submits tasks through an [`Orchestrator`]), a task's arguments ([`TaskArgs`],
//! [`TensorSpec`], [`Scalar`]), the kernels ([`builtin`], [`NativeKernel`], or your own
//! [`Kernel`]), the per-dispatch configuration ([`CallConfig`] with its [`RuntimeEnv`] of
//! 3 resources × 4 rings), and what a run reports ([`RunReport`], with the resolved
//! [`RingSizing`] and the [`PeakUse`] of every ring) or how it failed ([`RunError`],
//! [`RuntimeFailure`], [`ConfigError`]).
//!
//! An L2 run: one chip, a program that adds two tensors with the builtin `add` kernel,
//! dispatched with its own ring sizes (the task window, heap and dependency pool of each
//! of the four rings); the report says which sizes the run used and where each came from.
//!
//! ```
//! use taskring::builtin::ADD;
//! use taskring::*;
//!
//! let program = Program::new("add", |o, args| {
//!     let (a, b, c) = (args[0].tensor()?, args[1].tensor()?, args[2].tensor()?);
//!     let mut t = TaskArgs::new();
//!     t.input(a).input(b).output_existing(c);
//!     o.submit(ADD, &t)?;
//!     Ok(())
//! });
//!
//! let mut chip = ChipWorker::new(ChipOptions { cores: 2, ..ChipOptions::default() })?;
//!
//! // Per-task ring sizes: every entry set here wins over `PTO2_RING_*` and the defaults.
//! let mut config = CallConfig::default();
//! config.runtime_env.ring_task_window = [64, 16, 16, 16];
//! config.runtime_env.ring_heap = [1 << 20, 64 << 10, 64 << 10, 64 << 10];
//! config.runtime_env.ring_dep_pool = [256, 64, 64, 64];
//!
//! let (mut a, mut b, mut c) = (vec![1.0f32; 8], vec![2.0f32; 8], vec![0.0f32; 8]);
//! let args = [
//!     Arg::Tensor(CallerTensor::f32(&mut a, &[2, 4])),
//!     Arg::Tensor(CallerTensor::f32(&mut b, &[2, 4])),
//!     Arg::Tensor(CallerTensor::f32(&mut c, &[2, 4])),
//! ];
//! let report = chip.run(&program, &args, &config)?;
//! assert_eq!(c, vec![3.0f32; 8]);
//!
//! // The ring sizing the run used, per ring, and where each value came from.
//! assert_eq!(report.tasks, 1);
//! assert_eq!(report.ring_sizing.task_window, [64, 16, 16, 16]);
//! assert_eq!(report.ring_sizing.heap[0], 1 << 20);
//! assert_eq!(report.ring_sizing.source(RingField::DepPool, 3), SizeSource::CallConfig);
//! assert!(report.peak.task_window[0] >= 1);
//! println!("{}", report.ring_sizing);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Resolving a [`RingSizing`] from a [`CallConfig`] without running anything, with an
//! injected environment ([`RingSizing::resolve`]; a run uses
//! [`RingSizing::resolve_from_process`]): per resource and per ring, a non-zero
//! `runtime_env` entry wins over a non-zero `PTO2_RING_*` entry, which wins over the
//! built-in default.
//!
//! ```
//! use taskring::{CallConfig, EnvSnapshot, RingField, RingSizing, SizeSource, DEFAULT_RING_DEP_POOL};
//!
//! let config = CallConfig::default().with_ring(RingField::TaskWindow, [1024, 0, 0, 0]);
//! config.validate()?;
//! let env = EnvSnapshot::from_lookup(|name| {
//!     (name == "PTO2_RING_TASK_WINDOW").then(|| "256,128,64,32".to_string())
//! });
//! let (sizing, warnings) = RingSizing::resolve(&config.runtime_env, &env)?;
//! assert!(warnings.is_empty());
//! assert_eq!(sizing.task_window, [1024, 128, 64, 32]);
//! assert_eq!(sizing.source(RingField::TaskWindow, 0), SizeSource::CallConfig);
//! assert_eq!(sizing.source(RingField::TaskWindow, 1), SizeSource::Env);
//! assert_eq!(sizing.dep_pool, [DEFAULT_RING_DEP_POOL; 4]);
//! assert_eq!(sizing.source(RingField::DepPool, 2), SizeSource::Default);
//! # Ok::<(), taskring::ConfigError>(())
//! ```
//!
//! # Modules
//!
//! Every module is private except three, and items are `pub(crate)` unless something
//! outside the crate names them; what a user needs is re-exported above. The public
//! modules serve the crate's own other users — the Python bindings (`taskring-py`), the
//! benchmarks (`taskring-bench`), the integration and fuzz tests:
//!
//! - [`node`]: L3 (chip processes, mailboxes, frames, the merged timeline);
//! - [`cluster`]: L4 over MPI (frames always; transport, rank 0 and the host side with
//!   the `mpi` feature);
//! - [`dfx`]: scope stats, `deps.json`, the sizing advisor (`taskring sizing`), the
//!   timelines' clock.
//!
//! The private ones, top to bottom (`docs/architecture.md`, checked by `tests/layers.rs`):
//! `nextlevel` (the engine of L3 and L4 over their executors), `chip` (L2: core threads,
//! `ChipWorker`, capture and replay), `arena` (all memory of one sizing and the per-chip
//! cache), `engine` (rings, tensormap, scopes, the orchestrator, completion), `kernel`,
//! `sync` (the std / loom facade), `config`, `tensor`, `mem`; the loom models
//! (`loom_models`, built only with `--cfg loom`) drive `engine::shared` and `chip::abort`
//! from inside the crate.

mod arena;
mod chip;
pub mod cluster;
mod config;
pub mod dfx;
mod engine;
#[cfg(feature = "internals")]
pub mod internals;
mod kernel;
#[cfg(all(test, loom))]
mod loom_models;
mod mem;
mod nextlevel;
pub mod node;
pub mod pto2;
mod replay;
mod sync;
mod tensor;

pub use arena::{device_footprint, tensormap_bytes, AcquireError, Arena, ArenaCache, ArenaStats};
pub use chip::RunInterrupter;
pub use chip::{
    auto_size, Arg, CallerTensor, ChipOptions, ChipWorker, DeviceMemory, Program, RunError,
    RunReport, AUTO_HEADROOM, AUTO_KEYS,
};
pub use chip::{MAX_CORES, MIN_DEVICE_MEMORY};
pub use config::{
    parse_env_value, CallConfig, ConfigError, ConfigErrorKind, EnvSnapshot, EnvWarning, IntArg,
    RingField, RingSizing, RuntimeEnv, SizeSource, DEFAULT_RING_DEP_POOL, DEFAULT_RING_HEAP,
    DEFAULT_RING_TASK_WINDOW, RUNTIME_ENV_RING_COUNT,
};
pub use engine::{
    ArgTag, Orchestrator, PeakUse, Resource, RuntimeFailure, Scalar, StatusCode, TaskArgs,
    TaskOutputs, TensorSpec, MAX_TASK_SCALARS, MAX_TASK_TENSORS,
};
pub use kernel::native::{self, NativeKernel, NativeKernelError, NativeSignature, TensorRule};
pub use kernel::{builtin, fn_kernel, CoreKind, Kernel, KernelCall, KernelRef};
pub use mem::rss_bytes;
pub use pto2::{CallableError, ChipCallable, CoreCallable};
pub use replay::{Captured, ReplayError};
pub use tensor::{DType, TaskId, Tensor, MAX_DIMS};
