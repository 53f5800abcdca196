//! loom model checks of the ring / completion core (`src/engine/shared.rs`).
//!
//! Run (release: loom explores thousands of interleavings per model):
//!
//! ```text
//! make test-loom (RUSTFLAGS="--cfg loom" cargo test --release -p taskring --lib loom_models::ring)
//! ```
//!
//! Each model drives the real protocol functions of `engine/shared/` on loom threads:
//! `SlotState`'s lock, `RingShared::prepare` / `advance`, `ArenaShared::complete` /
//! `complete_held` / `retired` / `release_ref` (the release and the CONSUMED check), the ready queues and the parking lots, and the
//! orchestrator's fan-in steps of `shared/fanin.rs` — `claim_fanin` (submit step 4,
//! over `ArenaShared::claim` for RETAIN edges and `ArenaShared::peek` for WAIT-only
//! ones), `write_fanin_record` (the fanin part of step 6) and `wire_and_publish` (step
//! 7: `begin_wiring`, `link`, `publish`), the very functions `engine/orch/submit.rs`
//! calls.
//!
//! Still replicated here, not the orchestrator's own code: the order of calls around
//! those functions ([`open`] and [`wire`]: prepare, claims, payload, wiring — the
//! orchestrator's `take_slot` / `finish_submit`), the rest of the payload (only `id`
//! and `kind` are written; no tensors or scalars), the dependency-node and spill-pool
//! reservations (the models pass node indices by hand and have at most
//! `FANIN_INLINE` producers), the push of a task ready at publication (the models
//! push, or run it on the same thread), the back-pressure wait ([`admit`], after
//! `alloc_slot` / `wait_or_fail`), the core loop ([`core_loop`], [`run_chain`],
//! [`run_held`]) and the
//! end of a run ([`finish`]). Windows and pools are tiny (1–4 slots) so that slots are
//! reused.
//!
//! `LOOM_MAX_PREEMPTIONS` overrides each model's preemption bound (default 2 or 3,
//! per model), `LOOM_UNBOUNDED=1` removes it (exhaustive; slow for the larger models);
//! `LOOM_LOCATION=1 RUST_BACKTRACE=1` explain a failure.

use super::model;

use crate::engine::shared::*;
use crate::kernel::CoreKind;
use crate::tensor::TaskId;
use loom::sync::atomic::{AtomicBool, AtomicU32};
use loom::sync::Arc;
use loom::thread;
use std::ptr::addr_of_mut;
use std::sync::atomic::Ordering::*;
use std::time::Duration;

const WR: u64 = DEP_WAIT | DEP_RETAIN;

/// Four rings with the given windows, each with a `pool`-entry dependency / spill pool.
fn arena(windows: [u64; 4], pool: u64) -> ArenaShared {
    ArenaShared {
        rings: windows.map(|w| RingShared::new(w, pool).expect("ring")),
    }
}

/// What the test's orchestrator and cores observed per task.
struct Marks {
    ids: Vec<TaskId>,
    /// Wiring ended (set just before the `+1` publication).
    wired: Vec<AtomicBool>,
    /// Times the task was made ready.
    ready: Vec<AtomicU32>,
}

impl Marks {
    fn new(ids: &[TaskId]) -> Marks {
        Marks {
            ids: ids.to_vec(),
            wired: ids.iter().map(|_| AtomicBool::new(false)).collect(),
            ready: ids.iter().map(|_| AtomicU32::new(0)).collect(),
        }
    }
    fn at(&self, t: TaskId) -> usize {
        self.ids
            .iter()
            .position(|&i| i == t)
            .unwrap_or_else(|| panic!("unknown task {t:?}"))
    }
    /// A task was made ready (by `publish` or by a completion): check and count it.
    fn on_ready(&self, a: &ArenaShared, t: TaskId) {
        let i = self.at(t);
        assert_eq!(
            a.slot(t).local.load(Relaxed),
            t.local(),
            "{t:?} made ready after its slot was reused"
        );
        assert!(
            self.wired[i].load(Acquire),
            "{t:?} made ready before its wiring ended"
        );
        // What a core does with a ready task (chip::core_loop): read its payload.
        // safety: `t` is published (loom checks the payload's publication).
        let p = unsafe { a.rings[t.ring()].payload(t.local()) };
        assert_eq!(p.id, t);
        assert_eq!(
            self.ready[i].fetch_add(1, Relaxed),
            0,
            "{t:?} made ready twice"
        );
    }
    fn ready_count(&self, t: TaskId) -> u32 {
        self.ready[self.at(t)].load(Relaxed)
    }
}

/// An orchestrator-side submit in progress: its claimed edges and WAIT count.
struct Sub {
    id: TaskId,
    waits: u32,
    claimed: Vec<FaninEdge>,
}

/// Submit steps 3–6 (`orch/submit.rs`: `take_slot`, `claim_fanin`, `write_payload`):
/// prepare the slot and publish `current`, claim each producer (the real
/// `claim_fanin`), write the payload's `id` and `kind` and its fanin record (the real
/// `write_fanin_record`; no spill entries needed: at most `FANIN_INLINE` producers).
fn open(a: &ArenaShared, id: TaskId, deps: &[(TaskId, u64)]) -> Sub {
    let ring = &a.rings[id.ring()];
    ring.prepare(id.local());
    let mut edges: Vec<FaninEdge> = deps.iter().map(|&(p, f)| FaninEdge::new(p, f)).collect();
    let c = claim_fanin(a, &mut edges);
    edges.truncate(c.kept);
    // A RETAIN edge is claimed; a WAIT-only one never is.
    assert!(edges
        .iter()
        .all(|e| e.claimed == (e.flags & DEP_RETAIN != 0)));
    // safety: prepared and not yet published; every payload field is valid at zero.
    unsafe {
        let pl = ring.payload_mut(id.local()).as_mut_ptr();
        addr_of_mut!((*pl).id).write(id);
        addr_of_mut!((*pl).queue).write(2); // the `Any` queue
        write_fanin_record(a, id, pl, &edges, 0);
    }
    Sub {
        id,
        waits: c.waits,
        claimed: edges,
    }
}

/// Submit step 7 (`orch/submit.rs`: `wire_and_publish`): the real `wire_and_publish`,
/// which marks `wired` in `marks` from its hook (wiring ended, just before the `+1`
/// publication). Dependency nodes are taken from `node` on in the consumer ring's pool.
/// Returns whether the task is ready now (counted in `marks`; the caller pushes or runs
/// it).
fn wire(a: &ArenaShared, marks: &Marks, s: &Sub, node: u64) -> bool {
    let i = marks.at(s.id);
    let ready = wire_and_publish(a, s.id, &s.claimed, s.waits, node, || {
        marks.wired[i].store(true, Release)
    });
    if ready {
        marks.on_ready(a, s.id);
    }
    ready
}

/// Submit `t[0]` and each further task behind the one before it (a WAIT edge; node
/// `i - 1` for `t[i]`): the chain waits for `t[0]`'s run.
fn submit_chain(a: &ArenaShared, marks: &Marks, t: &[TaskId]) {
    submit_root(a, marks, t[0]);
    for i in 1..t.len() {
        let s = open(a, t[i], &[(t[i - 1], DEP_WAIT)]);
        assert!(!wire(a, marks, &s, i as u64 - 1));
    }
}

/// Submit a task without dependencies: it is ready at once.
fn submit_root(a: &ArenaShared, marks: &Marks, id: TaskId) {
    let s = open(a, id, &[]);
    assert!(wire(a, marks, &s, 0));
}

/// The orchestrator's back-pressure (`orch/capacity.rs`: `alloc_slot` / `wait_or_fail`): wait on
/// the progress signal until `id` fits the window of its ring — the window check of
/// `engine::ring::window_admits`, a window of 1 meaning "the previous task retired".
/// A blocking wait, not a spin: under loom it only returns when notified.
fn admit(a: &ArenaShared, eng: &EngineShared, id: TaskId) {
    let r = &a.rings[id.ring()];
    let fits = || id.local() < r.last_alive.load(Acquire) + (r.window.max(2) - 1) as u32;
    while !eng.progress.wait(fits, Duration::from_secs(1)) {}
    if id.local() as u64 >= r.window {
        // The previous occupant of the slot has retired.
        let s = r.slot(id.local());
        assert_eq!(
            s.state.load(Acquire),
            CONSUMED,
            "slot of {id:?} re-prepared before its occupant was consumed"
        );
        assert_eq!(s.local.load(Relaxed) as u64, id.local() as u64 - r.window);
    }
}

fn assert_retired(a: &ArenaShared, ring: usize, ids: &[TaskId]) {
    for &t in ids {
        assert_eq!(a.slot(t).local.load(Relaxed), t.local());
        assert_eq!(
            a.slot(t).state.load(Relaxed),
            CONSUMED,
            "{t:?} not consumed"
        );
    }
    let r = &a.rings[ring];
    assert_eq!(
        r.last_alive.load(Relaxed),
        r.current.load(Relaxed),
        "watermark of ring {ring} stuck"
    );
}

/// A core (chip.rs `core_loop`): complete `t`; keep the first task that completion made
/// ready and run it next, push the others.
fn run_chain(a: &ArenaShared, eng: &EngineShared, marks: &Marks, t: TaskId) {
    run_chain_counted(a, eng, marks, t, None)
}

/// [`run_chain`], counting completions in `done`.
fn run_chain_counted(
    a: &ArenaShared,
    eng: &EngineShared,
    marks: &Marks,
    t: TaskId,
    done: Option<&AtomicU32>,
) {
    let mut next = Some(t);
    while let Some(t) = next.take() {
        // safety: `t` is published, ran (nothing to run), and is completed once, here.
        unsafe {
            a.complete(t, eng, |c| {
                marks.on_ready(a, c);
                if next.is_none() {
                    next = Some(c);
                } else {
                    eng.push_ready(c, CoreKind::Any);
                }
            })
        };
        if let Some(d) = done {
            d.fetch_add(1, Release);
        }
    }
}

/// The core as it runs tasks of a ring run (chip/core.rs `core_loop`,
/// `run_ring_task`, `Held`): the chain from `first`, then tasks popped from the ready
/// queue, until a pop finds nothing. A completion that consumes its task does not
/// advance the watermark; the core pays the advances it holds — once per ring — when a
/// pop finds nothing (before it would say IDLE), or after a task once the orchestrator
/// waits.
fn run_held(a: &ArenaShared, eng: &EngineShared, marks: &Marks, first: Option<TaskId>) {
    let mut next = first;
    let mut held = 0u8;
    loop {
        let Some(t) = next.take().or_else(|| eng.pop_ready(CoreKind::Any)) else {
            if held != 0 {
                a.retired_rings(held, eng);
            }
            return;
        };
        // safety: `t` is published, ran (nothing to run), and is completed once, here.
        let consumed = unsafe {
            a.complete_held(t, eng, |c| {
                marks.on_ready(a, c);
                if next.is_none() {
                    next = Some(c);
                } else {
                    eng.push_ready(c, CoreKind::Any);
                }
            })
        };
        if consumed {
            held |= 1 << t.ring();
        }
        if held != 0 && eng.progress.has_waiter() {
            a.retired_rings(held, eng);
            held = 0;
        }
    }
}

/// A core thread (chip.rs `core_loop`): pop a ready task and run its chain, or park
/// until a push (or shutdown) wakes it. `done` counts completions.
fn core_loop(a: &ArenaShared, eng: &EngineShared, marks: &Marks, done: &AtomicU32) {
    loop {
        match eng.pop_ready(CoreKind::Any) {
            Some(t) => run_chain_counted(a, eng, marks, t, Some(done)),
            None => {
                if eng.shutdown.load(Acquire) {
                    return;
                }
                eng.park_core(CoreKind::Any, Duration::from_secs(1));
            }
        }
    }
}

/// The end of a run (chip.rs `wait_retired`): wait until every submitted task of
/// `ring` retired — woken only by the retirement that ends the ring (`wait_end`; a lost
/// wake-up is a deadlock here), then stop the cores.
fn finish(a: &ArenaShared, eng: &EngineShared, ring: usize) {
    let r = &a.rings[ring];
    while !eng.progress.wait_end(
        || r.last_alive.load(Acquire) == r.current.load(Acquire),
        Duration::from_secs(1),
    ) {}
    eng.shutdown.store(true, SeqCst);
    eng.wake_all_cores();
}

/// 1. A producer's completion races the claim + wiring of its consumer. Whether P
/// completes before the claim, between claim and link, or after the link, C becomes
/// ready exactly once, never before its wiring ended, and everything retires. With
/// `scope_ended`, P's scope ended before C's submit, so P's completion may consume it
/// between C's look at it and the link (a WAIT-only edge holds no reference on P).
fn claim_vs_completion(flags: u64, scope_ended: bool) {
    model(3, move || {
        let a = Arc::new(arena([4; 4], 4));
        let eng = Arc::new(EngineShared::default());
        let (p, c) = (TaskId::new(0, 0), TaskId::new(0, 1));
        let marks = Arc::new(Marks::new(&[p, c]));
        submit_root(&a, &marks, p);
        if scope_ended {
            a.release_ref(p, SCOPE_BIT, &eng);
        }

        let core = {
            let (a, eng, marks) = (a.clone(), eng.clone(), marks.clone());
            thread::spawn(move || run_chain(&a, &eng, &marks, p))
        };
        // The orchestrator submits C (depends on P) meanwhile.
        let s = open(&a, c, &[(p, flags)]);
        let ready_at_publish = wire(&a, &marks, &s, 0);
        core.join().unwrap();

        // Ready exactly once: by the publication or by P's completion (which ran it).
        assert_eq!(marks.ready_count(c), 1, "C lost or readied twice");
        if ready_at_publish {
            run_chain(&a, &eng, &marks, c);
        }
        assert_eq!(
            a.slot(c).state.load(Relaxed),
            COMPLETED,
            "C did not complete"
        );
        // The scope ends.
        if !scope_ended {
            a.release_ref(p, SCOPE_BIT, &eng);
        }
        a.release_ref(c, SCOPE_BIT, &eng);
        assert_retired(&a, 0, &[p, c]);
        assert_eq!(a.rings[0].last_alive.load(Relaxed), 2);
    });
}

#[test]
fn claim_vs_completion_wait_retain() {
    claim_vs_completion(WR, false);
}

#[test]
fn claim_vs_completion_wait_only() {
    claim_vs_completion(DEP_WAIT, false);
}

#[test]
fn claim_vs_completion_wait_only_producer_consumed_meanwhile() {
    claim_vs_completion(DEP_WAIT, true);
}

/// 2. P's completion fans out to C1 and C2, which complete on two cores concurrently
/// (adjacent slots consumed at the same time), while the orchestrator closes the scope
/// of all three. Every task ends CONSUMED and the watermark ends at `current`.
#[test]
fn fanout_and_scope_release() {
    model(2, || {
        let a = Arc::new(arena([4; 4], 4));
        let eng = Arc::new(EngineShared::default());
        let (p, c1, c2) = (TaskId::new(0, 0), TaskId::new(0, 1), TaskId::new(0, 2));
        let marks = Arc::new(Marks::new(&[p, c1, c2]));
        submit_root(&a, &marks, p);
        let s1 = open(&a, c1, &[(p, WR)]);
        assert!(!wire(&a, &marks, &s1, 0));
        let s2 = open(&a, c2, &[(p, WR)]);
        assert!(!wire(&a, &marks, &s2, 1));

        // Core X completes P, keeps one consumer and pushes the other; core Y pops it.
        let done = Arc::new(AtomicU32::new(0));
        let x = {
            let (a, eng, marks, done) = (a.clone(), eng.clone(), marks.clone(), done.clone());
            thread::spawn(move || run_chain_counted(&a, &eng, &marks, p, Some(&done)))
        };
        let y = {
            let (a, eng, marks, done) = (a.clone(), eng.clone(), marks.clone(), done.clone());
            thread::spawn(move || core_loop(&a, &eng, &marks, &done))
        };
        // The orchestrator ends the scope.
        for t in [p, c1, c2] {
            a.release_ref(t, SCOPE_BIT, &eng);
        }
        x.join().unwrap();
        finish(&a, &eng, 0);
        y.join().unwrap();

        for t in [c1, c2] {
            assert_eq!(marks.ready_count(t), 1);
        }
        assert_eq!(eng.completed.load(Relaxed), 3);
        assert_eq!(done.load(Relaxed), 3);
        assert!(eng.queues_empty());
        assert_retired(&a, 0, &[p, c1, c2]);
        assert_eq!(a.rings[0].last_alive.load(Relaxed), 3);
    });
}

/// 2b. Consumptions a core holds while it runs a chain (`chip/core.rs` `Held`) never
/// strand the orchestrator: T0 -> T1 -> T2 is a chain the core runs in one go, every
/// scope already ended, so each completion consumes its task and the core holds the
/// advance; T3 needs T0 retired (window 4). The orchestrator advances the watermark
/// itself before it waits (`orch/capacity.rs`: `wait_for_space`) and the core pays once it sees
/// the waiter or its chain ends: in every interleaving T3 is admitted (a lost
/// wake-up is a deadlock under loom) and everything retires.
#[test]
fn held_advances_never_strand_a_waiting_orchestrator() {
    model(2, || {
        let a = Arc::new(arena([4; 4], 4));
        let eng = Arc::new(EngineShared::default());
        let t: Vec<TaskId> = (0..4).map(|l| TaskId::new(0, l)).collect();
        let marks = Arc::new(Marks::new(&t));
        submit_chain(&a, &marks, &t[..3]);
        for &x in &t[..3] {
            a.release_ref(x, SCOPE_BIT, &eng);
        }
        let core = {
            let (a, eng, marks, t0) = (a.clone(), eng.clone(), marks.clone(), t[0]);
            thread::spawn(move || run_held(&a, &eng, &marks, Some(t0)))
        };
        // T3 waits for T0's retirement: advance first, then wait (`wait_for_space`).
        a.rings[0].advance();
        admit(&a, &eng, t[3]);
        submit_root(&a, &marks, t[3]);
        a.release_ref(t[3], SCOPE_BIT, &eng);
        core.join().unwrap();
        run_chain(&a, &eng, &marks, t[3]);
        for &x in &t[1..3] {
            assert_eq!(marks.ready_count(x), 1);
        }
        assert_retired(&a, 0, &t);
        assert_eq!(a.rings[0].last_alive.load(Relaxed), 4);
    });
}

/// 2c. A core pays what it holds when its chain ends: the end of the run waits only for
/// a ring's last retirement (`wait_end`, which advances nothing), here after the chain
/// is over and with no waiter while it ran.
#[test]
fn a_chain_pays_its_held_advances_when_it_ends() {
    model(2, || {
        let a = Arc::new(arena([4; 4], 4));
        let eng = Arc::new(EngineShared::default());
        let t: Vec<TaskId> = (0..3).map(|l| TaskId::new(0, l)).collect();
        let marks = Arc::new(Marks::new(&t));
        submit_chain(&a, &marks, &t[..3]);
        let core = {
            let (a, eng, marks, t0) = (a.clone(), eng.clone(), marks.clone(), t[0]);
            thread::spawn(move || run_held(&a, &eng, &marks, Some(t0)))
        };
        // The scopes end while the chain runs: some completions consume, some not.
        for &x in &t {
            a.release_ref(x, SCOPE_BIT, &eng);
        }
        core.join().unwrap();
        finish(&a, &eng, 0);
        assert_retired(&a, 0, &t);
    });
}

/// 2d. A core holds the advances of tasks it pops from the ready queue too, and pays
/// them when a pop finds nothing: T0, T1, T2 are independent, ready and pushed, every
/// scope already ended, so each completion consumes its task; T3 needs T0 retired
/// (window 4). The orchestrator advances over a consumed head itself before it waits;
/// the core pays once it sees the waiter or finds no task. In every interleaving T3 is
/// admitted, the end of the run is woken (a lost wake-up is a deadlock under loom), and
/// everything retires.
#[test]
fn advances_held_over_popped_tasks_are_paid_when_the_queue_is_empty() {
    model(2, || {
        let a = Arc::new(arena([4; 4], 4));
        let eng = Arc::new(EngineShared::default());
        let t: Vec<TaskId> = (0..4).map(|l| TaskId::new(0, l)).collect();
        let marks = Arc::new(Marks::new(&t));
        for &x in &t[..3] {
            submit_root(&a, &marks, x);
            a.release_ref(x, SCOPE_BIT, &eng);
            eng.push_ready(x, CoreKind::Any);
        }
        let core = {
            let (a, eng, marks) = (a.clone(), eng.clone(), marks.clone());
            thread::spawn(move || run_held(&a, &eng, &marks, None))
        };
        // T3 waits for T0's retirement: advance first, then wait (`wait_for_space`).
        a.rings[0].advance();
        admit(&a, &eng, t[3]);
        submit_root(&a, &marks, t[3]);
        a.release_ref(t[3], SCOPE_BIT, &eng);
        eng.push_ready(t[3], CoreKind::Any);
        core.join().unwrap();
        // The core may have stopped before T3 was pushed: run it here then.
        run_held(&a, &eng, &marks, None);
        finish(&a, &eng, 0);
        assert_retired(&a, 0, &t);
    });
}

/// 3. Slot reuse with a window of 2 (one live task): each slot is re-prepared only
/// after the watermark passed its occupant, while the two cores that ran the earlier
/// tasks may still be finishing their completions; a claim of a retired task —
/// CONSUMED, or with its slot already holding a later task (generation mismatch) — is
/// refused.
#[test]
fn slot_reuse_and_stale_claims() {
    model(2, || {
        let a = Arc::new(arena([2; 4], 2));
        let eng = Arc::new(EngineShared::default());
        let t: Vec<TaskId> = (0..3).map(|l| TaskId::new(0, l)).collect();
        let marks = Arc::new(Marks::new(&t));
        let done = Arc::new(AtomicU32::new(0));

        submit_root(&a, &marks, t[0]);
        eng.push_ready(t[0], CoreKind::Any);
        let cores: Vec<_> = (0..2)
            .map(|_| {
                let (a, eng, marks, done) = (a.clone(), eng.clone(), marks.clone(), done.clone());
                thread::spawn(move || core_loop(&a, &eng, &marks, &done))
            })
            .collect();

        // Orchestrator: T0's scope ends; T1 waits for the window, claims T0 (consumed).
        a.release_ref(t[0], SCOPE_BIT, &eng);
        admit(&a, &eng, t[1]);
        let s1 = open(&a, t[1], &[(t[0], WR)]);
        assert!(s1.claimed.is_empty(), "claimed a consumed task");
        assert!(wire(&a, &marks, &s1, 0));
        eng.push_ready(t[1], CoreKind::Any);
        a.release_ref(t[1], SCOPE_BIT, &eng);

        // T2 reuses T0's slot; a claim of T0 now finds T2 there.
        admit(&a, &eng, t[2]);
        let s2 = open(&a, t[2], &[(t[0], WR), (t[0], DEP_WAIT)]);
        assert!(
            s2.claimed.is_empty(),
            "claimed a task whose slot was reused"
        );
        assert!(wire(&a, &marks, &s2, 0));
        eng.push_ready(t[2], CoreKind::Any);
        a.release_ref(t[2], SCOPE_BIT, &eng);

        finish(&a, &eng, 0);
        for c in cores {
            c.join().unwrap();
        }
        assert_eq!(eng.completed.load(Relaxed), 3);
        assert_eq!(done.load(Relaxed), 3);
        assert_retired(&a, 0, &t[1..]);
        assert_eq!(a.rings[0].last_alive.load(Relaxed), 3);
    });
}

/// 3b. The last two references on a completed task T0 are released concurrently — a
/// consumer's RETAIN claim on a core, the scope on the orchestrator. Whichever is last
/// consumes T0 (a release and its CONSUMED check are one critical section), and the
/// orchestrator then re-prepares T0's slot (window 1) for T1, without the lock, and
/// claims it. Every critical section of T0 must happen before that re-prepare (loom
/// checks the lock's critical sections and `prepare` against each other through the
/// slot's witness cell) and T1 must be left alone.
#[test]
fn late_consumed_check_vs_reprepare() {
    model(3, || {
        let a = Arc::new(arena([1; 4], 2));
        let eng = Arc::new(EngineShared::default());
        let (t0, t1, d) = (TaskId::new(0, 0), TaskId::new(0, 1), TaskId::new(1, 0));
        let marks = Arc::new(Marks::new(&[t0, t1, d]));
        submit_root(&a, &marks, t0);
        // A consumer D (ring 1) holds a RETAIN claim on T0; T0 completes.
        assert_eq!(a.claim(t0, DEP_RETAIN), Claim::Claimed { pending: false });
        run_chain(&a, &eng, &marks, t0);

        let core = {
            let (a, eng) = (a.clone(), eng.clone());
            // D completes and releases its claim.
            thread::spawn(move || a.release_ref(t0, 1, &eng))
        };
        // The orchestrator ends T0's scope, waits for the window and reuses the slot.
        a.release_ref(t0, SCOPE_BIT, &eng);
        admit(&a, &eng, t1);
        submit_root(&a, &marks, t1);
        assert_eq!(a.claim(t1, DEP_RETAIN), Claim::Claimed { pending: false });
        core.join().unwrap();
        let s = a.slot(t1);
        assert_eq!(
            s.state.load(Relaxed),
            PENDING,
            "T1 touched by a release of T0"
        );
        assert_eq!(s.fanout_count.load(Relaxed), SCOPE_BIT + 1);
        assert_eq!(s.fanout_refcount.load(Relaxed), 0);
        assert_eq!(a.rings[0].last_alive.load(Relaxed), 1);
    });
}

/// 4. A consumer C on ring 1 waits for P and Q on ring 0, which complete on two cores.
/// Whichever completion makes C ready runs it; C retires (ring 1's watermark does not
/// wait for ring 0), and the orchestrator reuses C's slot (window 1) for C', which
/// waits for a producer R that never completes — possibly while the other completion
/// is still releasing its fanin reference on C. It must not mistake C' for C.
#[test]
fn fanout_release_vs_consumer_slot_reuse() {
    model(3, || {
        let a = Arc::new(arena([4, 1, 4, 4], 4));
        let eng = Arc::new(EngineShared::default());
        let (p, q, r) = (TaskId::new(0, 0), TaskId::new(0, 1), TaskId::new(0, 2));
        let (c, c2) = (TaskId::new(1, 0), TaskId::new(1, 1));
        let marks = Arc::new(Marks::new(&[p, q, r, c, c2]));
        for t in [p, q, r] {
            submit_root(&a, &marks, t);
        }
        let s = open(&a, c, &[(p, WR), (q, WR)]);
        assert!(!wire(&a, &marks, &s, 0));

        let cores: Vec<_> = [p, q]
            .into_iter()
            .map(|t| {
                let (a, eng, marks) = (a.clone(), eng.clone(), marks.clone());
                thread::spawn(move || run_chain(&a, &eng, &marks, t))
            })
            .collect();
        // Orchestrator: C's scope ends; C' waits for ring 1's window (C retired), then
        // waits for R.
        a.release_ref(c, SCOPE_BIT, &eng);
        admit(&a, &eng, c2);
        let s2 = open(&a, c2, &[(r, WR)]);
        assert_eq!(s2.waits, 1);
        assert!(!wire(&a, &marks, &s2, 2));
        for core in cores {
            core.join().unwrap();
        }
        assert_eq!(marks.ready_count(c), 1);
        assert_eq!(marks.ready_count(c2), 0, "C' made ready while R is pending");
    });
}

/// 5a. Parking: a core that finds no work parks; a push must wake it (loom's condvar
/// never times out, so a lost wake-up is a deadlock).
#[test]
fn park_vs_push() {
    model(3, || {
        let eng = Arc::new(EngineShared::default());
        let pusher = {
            let eng = eng.clone();
            thread::spawn(move || eng.push_ready(TaskId::new(0, 0), CoreKind::Aiv))
        };
        loop {
            if eng.pop_ready(CoreKind::Aiv).is_some() {
                break;
            }
            eng.park_core(CoreKind::Aiv, Duration::from_secs(1));
        }
        pusher.join().unwrap();
    });
}

/// 5b. The orchestrator waits for progress (`Progress::wait`) while a core advances the
/// watermark and notifies (as `release_ref` does).
#[test]
fn progress_wait_vs_notify() {
    model(3, || {
        let eng = Arc::new(EngineShared::default());
        let moved = Arc::new(AtomicBool::new(false));
        let core = {
            let (eng, moved) = (eng.clone(), moved.clone());
            thread::spawn(move || {
                moved.store(true, Release);
                eng.progress.notify();
            })
        };
        while !eng
            .progress
            .wait(|| moved.load(Acquire), Duration::from_secs(1))
        {}
        core.join().unwrap();
    });
}

/// 5c. The end of a run waits for a ring's last retirement (`Progress::wait_end`) while
/// a core retires the ring's two tasks one after the other and notifies each time as
/// `release_ref` does (`notify_advance`, "ring done" only after the second): the
/// first notification must not wake it, the second must.
#[test]
fn wait_end_vs_notify_advance() {
    model(3, || {
        let eng = Arc::new(EngineShared::default());
        let retired = Arc::new(AtomicU32::new(0));
        let core = {
            let (eng, retired) = (eng.clone(), retired.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    let now = retired.fetch_add(1, Release) + 1;
                    eng.progress.notify_advance(|| now == 2);
                }
            })
        };
        while !eng
            .progress
            .wait_end(|| retired.load(Acquire) == 2, Duration::from_secs(1))
        {}
        core.join().unwrap();
    });
}

/// 7. Three tasks of one ring are consumed at once by three threads (each releases the
/// scope reference of one of them), so three watermark advances race: whichever
/// thread's scan runs last, no advance is lost and the watermark ends past all three
/// (the combining `RingShared::advance`; a lost request would leave it at 0, 1 or 2).
#[test]
fn concurrent_consumption_advances_the_watermark() {
    model(3, || {
        let a = Arc::new(arena([4; 4], 2));
        let eng = Arc::new(EngineShared::default());
        let ids = [TaskId::new(0, 0), TaskId::new(0, 1), TaskId::new(0, 2)];
        let marks = Arc::new(Marks::new(&ids));
        for &t in &ids {
            submit_root(&a, &marks, t);
            run_chain(&a, &eng, &marks, t);
        }
        let others: Vec<_> = ids[1..]
            .iter()
            .map(|&t| {
                let (a, eng) = (a.clone(), eng.clone());
                thread::spawn(move || a.release_ref(t, SCOPE_BIT, &eng))
            })
            .collect();
        a.release_ref(ids[0], SCOPE_BIT, &eng);
        for h in others {
            h.join().unwrap();
        }
        assert_retired(&a, 0, &ids);
    });
}
