//! The engine's side of capture and replay: what it tells the recorder of a captured
//! run ([`Recording`], implemented by `replay::record::Recorder`) and what it takes to
//! submit a recorded task again ([`ReplaySubmit`], `Orchestrator::submit_replayed`).

use super::ArgTag;
use crate::kernel::KernelRef;
use crate::tensor::{TaskId, Tensor};

/// A submitted task apart from its tensors, scalars and fanin (what a recording keeps
/// of it, and a replay submits again).
#[derive(Clone, Copy)]
pub(crate) struct TaskHead {
    pub id: TaskId,
    pub kernel: Option<KernelRef>,
    /// An `alloc()` (completes at once).
    pub alloc: bool,
    /// Its outputs' bytes (each rounded up to 1 KiB).
    pub heap_bytes: u64,
    pub n_inputs: u8,
    pub scalar_float_mask: u16,
}

/// A recorded task as `Orchestrator::submit_replayed` takes it.
pub(crate) struct ReplaySubmit<'a> {
    pub head: TaskHead,
    pub scalars: &'a [u64],
    pub fanin: &'a [(TaskId, u64)],
    /// The task's runtime outputs: (tensor index, byte offset in its block).
    pub outs: &'a [(u8, u64)],
}

/// What records a captured run (installed in the orchestrator's state for one run,
/// `OrchState::install_capture`): called on the orchestrator's cold recording path,
/// at each scope's begin and end and at each submit.
pub(crate) trait Recording: std::any::Any + Send {
    fn begin_scope(&mut self, manual: bool);
    fn end_scope(&mut self);
    /// Record one submit (tensors in canonical order, `tags[i]` for `tensors[i]`);
    /// `block`: the address of the task's output block in this run.
    #[allow(clippy::too_many_arguments)]
    fn task(
        &mut self,
        s: &TaskHead,
        block: u64,
        tensors: &[Tensor],
        tags: &[ArgTag],
        scalars: &[u64],
        explicit: &[(TaskId, u64)],
        infer: bool,
    );
}
