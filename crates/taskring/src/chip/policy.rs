//! How the orchestrator's thread takes part in a run cycle ([`RunPolicy`]): a chip's own
//! ([`ChipPolicy`]) or a next level's (`nextlevel::LevelPolicy`). The owner of the run
//! (the chip, or a `Level` over its engine) passes its policy to each run; the cycle is
//! generic over it, so nothing on a run's task path asks it through a pointer.

/// Which ready tasks the orchestrator's thread runs while it waits (for ring space, for
/// the end of the run; in a direct replay, for the replay's end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Help {
    /// None: the cores run every task.
    Never,
    /// Tasks of [`Kernel::bounded`](crate::kernel::Kernel::bounded) kernels, while no
    /// unbounded kernel was submitted in the run (a direct replay: while every kernel of
    /// the graph is bounded, and then only while a core is idle).
    Bounded,
    /// Any task ([`ChipOptions::orchestrator_helps`](super::ChipOptions::orchestrator_helps)).
    Any,
}

/// How the orchestrator's thread takes part in a run cycle. See the module doc.
pub(crate) trait RunPolicy: Copy {
    /// Once the program has nothing more to submit, the orchestrator runs a lone queued
    /// task itself, with the hook's release around it (a next level's dispatch: a
    /// one-task run then costs no hand-off to a dispatch thread and back).
    const HELPS_AT_END: bool;
    /// A scope that overflows its task window is counted to its end, so that its
    /// SCOPE_DEADLOCK names the window that would have held it; else it fails at the
    /// overflowing submit, with a lower bound (a next level records each task when it is
    /// submitted, and cannot tell a counted submit from a dispatched one).
    const COUNTS_SCOPE_OVERFLOW: bool;
    /// A dispatch with `"auto"` ring sizes learns them (`chip/auto.rs`); else its auto
    /// entries run on their defaults.
    const LEARNS_SIZING: bool;

    /// Which tasks the orchestrator's thread runs while it waits.
    fn help(&self) -> Help;
}

/// A chip's own runs: the orchestrator helps with bounded kernels' tasks (any task with
/// `orchestrator_helps`), counts a scope's overflow, learns `"auto"` sizes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChipPolicy {
    /// [`ChipOptions::orchestrator_helps`](super::ChipOptions::orchestrator_helps).
    pub(crate) orchestrator_helps: bool,
}

impl RunPolicy for ChipPolicy {
    const HELPS_AT_END: bool = false;
    const COUNTS_SCOPE_OVERFLOW: bool = true;
    const LEARNS_SIZING: bool = true;

    fn help(&self) -> Help {
        if self.orchestrator_helps {
            Help::Any
        } else {
            Help::Bounded
        }
    }
}
