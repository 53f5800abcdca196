//! taskring: a PTO2-style ("tensormap and ringbuffer") task runtime on a simulated chip,
//! with per-task ring sizing.
//!
//! - [`config`]: `RuntimeEnv`, `CallConfig`, env parsing, `RingSizing` (precedence:
//!   per-task config > `PTO2_RING_*` env > built-in default, per resource and per ring);
//! - [`engine`]: rings, tensormap, scopes, the orchestrator, completion;
//! - [`arena`]: all memory of one sizing, and the per-chip LRU arena cache;
//! - [`chip`]: the L2 chip (core threads running kernels) and `ChipWorker`;
//! - [`kernel`]: the kernel trait and the builtin f32 kernels;
//! - [`tensor`]: tensor views and task ids;
//! - [`sync`]: the std / loom synchronisation facade the concurrent core is written against.

pub mod arena;
pub mod chip;
pub mod cluster;
pub mod config;
pub mod dfx;
pub mod engine;
pub mod kernel;
pub mod mem;
pub mod node;
pub mod sync;
pub mod tensor;

pub use arena::{Arena, ArenaCache, ArenaStats};
pub use chip::{Arg, ChipOptions, ChipWorker, HostTensor, Program, RunError, RunReport};
pub use config::{CallConfig, ConfigError, RingField, RingSizing, RuntimeEnv, SizeSource};
pub use engine::replay::{Captured, ReplayError};
pub use engine::{
    ArgTag, Orchestrator, PeakUse, Resource, RuntimeFailure, Scalar, StatusCode, TaskArgs,
    TaskOutputs, TensorSpec,
};
pub use kernel::native::{NativeKernel, NativeKernelError, NativeSignature, TensorRule};
pub use kernel::{builtin, CoreKind, Kernel, KernelCall, KernelRef};
pub use tensor::{DType, TaskId, Tensor};
