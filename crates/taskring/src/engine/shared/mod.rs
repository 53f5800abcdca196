//! The state shared between the orchestrator thread and the core threads, and the
//! completion protocol that runs on the core threads. One concern per file, each with
//! the part of the protocol argument that concerns its code:
//!
//! | file | what it owns | its argument |
//! |---|---|---|
//! | `slot.rs` | [`SlotState`] (one cache line per window entry: the spin lock, state, reference counts, fanout head), the edge flags, [`DepNode`] | readiness (`fanin_count = WAIT + 1`) |
//! | `retire.rs` | [`RingShared`]: one ring's slot, payload, dependency-node and spill tables, `current` and the `last_alive` watermark | retirement (the combining advance, no lost request) |
//! | `completion.rs` | [`ArenaShared`]: claims, links, reference release, the completion of a task | reference accounting, completion steps 1–3, claim vs consume |
//! | `fanin.rs` | the orchestrator's side for one task's fan-in: [`claim_fanin`], [`write_fanin_record`], [`wire_and_publish`] (submit steps 4, 6 and 7) | the order of claims, record, links, WAIT-only releases and the `+1` |
//! | `ready.rs` | [`EngineShared`]: the ready queues per core kind, the run's failure latch | ready exactly once, then queued |
//! | `owner_ring.rs` | [`owner_ring::OwnerRing`]: the orchestrator's own part of a ready queue (one producer, plain stores) | each entry taken once |
//! | `park.rs` | [`Sleep`] (idle cores) and [`Progress`] (the orchestrator waiting for space) | no lost wake-up |
//!
//! Per ring ([`RingShared`]): the slot table, the payload table (what a task runs with),
//! the dependency-node pool and the fanin spill pool, and two counters: `current` (next
//! local id, published by the orchestrator) and `last_alive` (the in-order retirement
//! watermark).
//!
//! Orchestrator side: [`RingShared::prepare`], the fan-in steps of `fanin.rs`
//! ([`claim_fanin`] over [`ArenaShared::claim`] and [`ArenaShared::peek`];
//! [`write_fanin_record`]; [`wire_and_publish`] over [`SlotState::begin_wiring`],
//! [`ArenaShared::link`] and [`SlotState::publish`]),
//! [`SlotState::mark_completed`] (inline completion) and [`ArenaShared::release_ref`]
//! (scope end). Core side: [`ArenaShared::complete`], the ready queues and parking of
//! [`EngineShared`].
//!
//! Every atomic, lock and shared cell comes from [`crate::sync`], so a `--cfg loom`
//! build model-checks these modules (`src/loom_models/ring.rs`).
//!
//! Memory ordering: payloads, fanin records and dependency nodes are plain memory written
//! by the orchestrator before the task is published; publication is a release RMW on
//! `fanin_refcount` (or a push onto a ready queue), and readers acquire it.

mod completion;
mod fanin;
pub(crate) mod owner_ring;
mod park;
mod ready;
mod retire;
mod slot;

#[cfg_attr(not(all(test, loom)), allow(unused_imports))] // the loom models use these names
pub use completion::{ArenaShared, Claim};
#[cfg_attr(not(all(test, loom)), allow(unused_imports))] // the loom models use these names
pub use fanin::{claim_fanin, wire_and_publish, write_fanin_record, FaninEdge};
pub(crate) use park::queue_takes;
pub use ready::EngineShared;
pub(crate) use ready::{lane_queue, queue_index, queue_kind, MAX_LANES};
pub use retire::{PayloadCell, RingShared};
pub(crate) use slot::DEP_FLAGS;
#[cfg_attr(not(all(test, loom)), allow(unused_imports))] // the loom models use these names
pub use slot::{DepNode, SlotState, COMPLETED, CONSUMED, DEP_RETAIN, DEP_WAIT, PENDING, SCOPE_BIT};
