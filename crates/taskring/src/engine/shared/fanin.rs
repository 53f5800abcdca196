//! The orchestrator's side of the completion protocol for one task's fan-in: the claims
//! (submit step 4), the fanin record in the payload (step 6) and the wiring with the
//! `+1` publication (step 7). The orchestrator (`engine/orch/submit.rs`) calls these
//! functions around its own work (gathering the edges, reserving pool entries, writing
//! tensors and scalars, pushing a ready task); the loom models (`src/loom_models/ring.rs`)
//! call the same functions.
//!
//! The arguments are in the module docs of `completion.rs` (claim vs consume, the
//! references a claim takes and who releases them) and `slot.rs` (readiness): a claim
//! is taken under the producer's lock, for a RETAIN edge only, and held until the
//! consumer's completion releases it, which finds it in the fanin record written here;
//! a WAIT-only edge takes no reference — its producer may be consumed before the link,
//! and `link` then finds it finished or gone under its lock (only the orchestrator
//! re-prepares a slot, and it is busy here, so the slot cannot hold a later task
//! meanwhile); and the `+1` of `fanin_count` is released last, so the task cannot
//! become ready while it is still being linked (the models fail when it is released
//! first).

use super::completion::{ArenaShared, Claim};
use super::retire::RingShared;
use super::slot::{DEP_RETAIN, DEP_WAIT};
use crate::engine::{Payload, FANIN_INLINE};
use crate::tensor::TaskId;

/// One producer of the task being submitted (one edge per producer, flags merged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaninEdge {
    pub producer: TaskId,
    /// `DEP_WAIT` and/or `DEP_RETAIN`.
    pub flags: u64,
    /// A reference is held on the producer ([`claim_fanin`] sets it).
    pub claimed: bool,
    /// The producer was seen not completed while this submit gathered its fan-in (the
    /// tensormap lookup looks): [`claim_fanin`] keeps a WAIT-only edge without looking
    /// again, and `link` decides under the producer's lock.
    pub fresh: bool,
}

impl FaninEdge {
    /// An edge not claimed yet.
    #[inline(always)]
    pub fn new(producer: TaskId, flags: u64) -> FaninEdge {
        FaninEdge {
            producer,
            flags,
            claimed: false,
            fresh: false,
        }
    }
}

/// What [`claim_fanin`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaninClaims {
    /// The kept edges, now `edges[..kept]` (in their order).
    pub kept: usize,
    /// Kept WAIT edges: each needs a dependency node, and `fanin_count = waits + 1`.
    pub waits: u32,
    /// Live producers — kept, or completed but not yet consumed — for the spill demand
    /// (`orch/submit.rs`, `spill_demand`).
    pub live: usize,
}

/// Step 4, claims: claim the producer of every RETAIN edge under its lock
/// ([`ArenaShared::claim`]); look at the producer of every WAIT-only edge without a
/// lock ([`ArenaShared::peek`]: such an edge needs no reference, `link` decides under
/// the lock) — unless it is `fresh` (seen pending a moment ago: kept as pending). The
/// kept edges — claimed ones marked `claimed`, and WAIT-only edges to a producer not
/// completed yet — move to the front (`edges[..kept]`, order kept); an edge whose
/// producer is gone, or completed with a WAIT-only edge, is dropped (what is left
/// behind `kept` is unspecified).
#[inline(always)]
pub fn claim_fanin(sh: &ArenaShared, edges: &mut [FaninEdge]) -> FaninClaims {
    let mut c = FaninClaims {
        kept: 0,
        waits: 0,
        live: 0,
    };
    for i in 0..edges.len() {
        let e = edges[i];
        if e.flags & DEP_RETAIN == 0 {
            let seen = if e.fresh {
                Some(false)
            } else {
                sh.peek(e.producer)
            };
            match seen {
                Some(false) => {
                    c.live += 1;
                    c.waits += (e.flags & DEP_WAIT != 0) as u32;
                    edges[c.kept] = FaninEdge {
                        claimed: false,
                        ..e
                    };
                    c.kept += 1;
                }
                Some(true) => c.live += 1,
                None => {}
            }
            continue;
        }
        match sh.claim(e.producer, e.flags) {
            Claim::Claimed { .. } => {
                c.live += 1;
                c.waits += (e.flags & DEP_WAIT != 0) as u32;
                edges[c.kept] = FaninEdge { claimed: true, ..e };
                c.kept += 1;
            }
            Claim::Skipped { live } => c.live += live as usize,
        }
    }
    c
}

/// Step 6, the fanin record: the claimed `edges` (those of [`claim_fanin`]) into the
/// payload `p` of task `id` — the first `FANIN_INLINE` inline, the rest from
/// `spill_start` in the spill pool of `id`'s ring. The task's completion reads it to
/// release the RETAIN claims. Made visible to the cores by the publication that follows
/// (the rest of the payload is the caller's).
///
/// # Safety
/// `p` is the payload of `id`'s slot, prepared and not yet published (from
/// [`RingShared::payload_mut`]); the spill entries `spill_start..` needed are reserved
/// for this submit.
#[inline(always)]
pub unsafe fn write_fanin_record(
    sh: &ArenaShared,
    id: TaskId,
    p: *mut Payload,
    edges: &[FaninEdge],
    spill_start: u64,
) {
    let sp = &sh.rings[id.ring()].spill;
    // safety: the caller's contract.
    unsafe {
        (*p).n_fanin = edges.len() as u32;
        (*p).fanin_spill_start = spill_start;
        for (i, e) in edges.iter().enumerate() {
            let rec = e.producer.0 | e.flags;
            if i < FANIN_INLINE {
                (*p).fanin_inline[i] = rec;
            } else {
                *sp[((spill_start + (i - FANIN_INLINE) as u64) % sp.len() as u64) as usize].get() =
                    rec;
            }
        }
    }
}

/// Step 7, wiring and publication of task `id` with its claimed `edges` ([`claim_fanin`]:
/// `waits` of them WAIT edges): `fanin_count = waits + 1`, then link `id` behind each
/// WAIT producer (dependency nodes from index `dep_start`, below the pool's length, on,
/// wrapping, in the pool of `id`'s ring; a producer completed or gone meanwhile counts
/// as a done edge), call `wired` (the wiring has ended), and release the `+1` with the
/// done edges.
/// Returns whether the task is ready now: then the caller pushes it to a ready queue;
/// otherwise its last producer's completion will (exactly once, `slot.rs`).
///
/// `wired` is a hook for the loom models (the orchestrator passes `|| {}`).
#[inline(always)]
pub fn wire_and_publish(
    sh: &ArenaShared,
    id: TaskId,
    edges: &[FaninEdge],
    waits: u32,
    dep_start: u64,
    wired: impl FnOnce(),
) -> bool {
    let rs: &RingShared = &sh.rings[id.ring()];
    let me = rs.slot(id.local());
    me.begin_wiring(waits);
    let mut done = 0u32;
    if !edges.is_empty() {
        let n_nodes = rs.dep_nodes.len();
        let mut node = dep_start as usize;
        debug_assert!(node < n_nodes);
        for e in edges {
            if e.flags & DEP_WAIT == 0 {
                continue;
            }
            if sh.link(e.producer, id, node) {
                // The next node, wrapping (no division per edge).
                node += 1;
                if node == n_nodes {
                    node = 0;
                }
            } else {
                done += 1;
            }
        }
    }
    wired();
    if waits == 0 {
        me.publish_unwaited()
    } else {
        me.publish(done)
    }
}
