//! Capture and replay (`docs/api.md` §10, `docs/replay.md`): record the task graph of one
//! run, then feed the recorded tasks to the chip again without running the orchestration,
//! without the tensormap and without inferring dependencies. As Taskflow keeps the graph,
//! its runs and the executor apart, one file per concept:
//!
//! - `record`: the recording ([`Recorder`](record::Recorder), installed in the
//!   orchestrator's state for one run);
//! - `graph`: the recorded graph (immutable), its direct executor's compact form and its
//!   structural demand per ring (`Needs`);
//! - `job`: one direct replay of a graph (`DirectJob`, the state the threads share) and
//!   the predecessor counters kept from one replay to the next;
//! - `step`: a thread's part of a direct replay (`direct_step`, on the chip's per-thread
//!   deques, stealing; `DirectJob` implements the chip's `DirectRun` with it, the one
//!   call a core makes per chain of tasks);
//! - `direct`: a direct replay on a chip (open, help, wait, stall, report);
//! - `rings`: a replay through the rings;
//! - `captured`: the worker-facing part ([`Captured`]: the capture, the argument check
//!   against it, `exact_config`, the sizing of a replay and the choice of path).
//!
//! Capture records, per submit, in submission order: the kernel, the scalars, each
//! tensor argument as a view relative to its base — a program argument (by index), the
//! runtime output block of an earlier task (by task index), the task's own output block,
//! or a fixed address (memory the program found elsewhere) — and the task's *full* fanin:
//! explicit deps, creator edges (WAIT | RETAIN) and every overlapping earlier writer
//! (WAIT), found against every writer of the run (the engine's tensormap forgets
//! completed writers, whose edges a replay may need: they may not have completed yet
//! then). Edges to the same producer are merged (flags or-ed), as the engine's fanin
//! does. Scope begins and ends are recorded between the tasks.
//!
//! A replay takes one of two paths (`docs/replay.md`):
//!
//! - direct, when the sizing holds the whole graph at once ([`Captured::fits`]): every
//!   runtime output gets its own bytes in the ring heaps, and the cores run the graph
//!   from precomputed predecessor counts and successor lists (`DirectJob`, run by
//!   `direct_step`) — no slots, scopes, claims or watermark;
//! - through the rings otherwise (every capacity rule then applies, with its codes).
//!
//! Through the rings (`replay_ops`), the recorded ops are walked: scopes open and close
//! as recorded (their ends release the scope references, as in a normal run); each task
//! goes through `Orchestrator::submit_replayed`: scope admission, slot and heap from the
//! ring (back-pressure, structural-deadlock and backstop checks as for any submit),
//! runtime outputs placed in the fresh block, the recorded fanin filtered to producers
//! still alive, claims, pools, payload, wiring, publication — the completion side is
//! the engine's, unchanged. Task ids are the recorded ones: ids count per ring from 0
//! in submission order, and the replay submits the same tasks on the same rings in the
//! same order.

mod captured;
mod direct;
pub(crate) mod graph;
pub(crate) mod job;
pub(crate) mod record;
mod rings;
pub(crate) mod step;

pub use captured::{Captured, ReplayError};
