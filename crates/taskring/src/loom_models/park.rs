//! loom model of idle cores parking and waking (`engine::shared::park::Sleep`, reached
//! through the real `EngineShared`: `push_queue`, `push_queue_quiet` +
//! `wake_for_queues`, or `push_owned_quiet` + `parked_for` / `wake_for_queued`, `try_spin` / `end_spin`, `park_queue_or`,
//! `pass_on`; queues of the three core kinds and of lanes, `EngineShared::with_lanes`).
//!
//! Run (release):
//!
//! ```text
//! make test-loom (RUSTFLAGS="--cfg loom" cargo test --release -p taskring --lib loom_models::park)
//! ```
//!
//! What is real: every atomic, lock and condition variable of the protocol (under
//! `--cfg loom` the engine's `sync` facade is loom's, and a timed condvar wait never
//! times out, so a lost wake-up is a deadlock that loom reports). What is replicated:
//! a core's idle loop (`chip::core`'s `Idle`: pop, else spin if no other core spins —
//! here one look instead of up to 256 — else park, and park again without spinning
//! after a park that found nothing; a spin that ends empty-handed wakes every
//! sleeper if tasks are queued, since a push that saw a spinner skipped its wake-up;
//! after a park or a spin that found a task, pass the wake-up on), and the pushing
//! thread.
//!
//! What is checked: (1) every pushed task is taken, exactly once, by a core that can run
//! it — each push wakes one sleeper only (of the task's kind, else of kind `Any`), a
//! batch pushed with one wake-up per queue is passed on by the cores it wakes, and
//! wake-ups owed as an orchestrator owes them (`Orchestrator::wake_debt`: looked at
//! without a fence at the next push, paid with one at the end) reach every task; (2) no wake-up is lost
//! whatever the interleaving (else the pusher's wait for its tasks never ends).
//! Leaving out the replica's wake-up after an empty spin makes loom report a deadlock (a
//! push read a stale `spinner_kind` and skipped the only core that could run its task).

use super::model;

use crate::engine::shared::EngineShared;
use crate::tensor::TaskId;
use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::*;
use std::time::Duration;

/// Queue indices: the three core kinds, then the lanes.
const AIC: usize = 0;
const AIV: usize = 1;
const ANY: usize = 2;
const LANE0: usize = 3;
const LANE1: usize = 4;

/// May a core of queue index `core` run a task of queue index `task`? A lane's task
/// only a core of that lane; a kind's as `CoreKind` says.
fn can_run(core: usize, task: usize) -> bool {
    if core >= LANE0 || task >= LANE0 {
        core == task
    } else {
        task == ANY || core == ANY || core == task
    }
}

/// The replica of a core's loop: take tasks until shutdown; each taken task's bit is
/// set in `taken` (a bit taken twice fails the model).
fn core(eng: &EngineShared, kind: usize, tasks: &[usize], taken: &AtomicU32) {
    let mut spinning = false;
    let mut parked = false;
    loop {
        if let Some(t) = eng.pop_queue(kind) {
            if spinning {
                spinning = false;
                eng.end_spin(true);
            }
            if parked {
                parked = false;
                eng.pass_on();
            }
            let i = t.0 as usize;
            assert!(
                can_run(kind, tasks[i]),
                "a {kind:?} core took a {:?} task",
                tasks[i]
            );
            let before = taken.fetch_or(1 << i, AcqRel);
            assert_eq!(before & (1 << i), 0, "task {i} taken twice");
            eng.progress.notify();
            continue;
        }
        if eng.shutdown.load(Acquire) {
            if spinning {
                eng.end_spin(false);
            }
            return;
        }
        // A core back from a park that found nothing parks again (it does not spin).
        if !spinning && !parked && eng.try_spin(kind) {
            // One look while spinning (the real loop looks up to 256 times, 32 in a
            // next-level engine's dispatch threads).
            spinning = true;
            thread::yield_now();
            continue;
        }
        if spinning {
            spinning = false;
            eng.end_spin(false);
            // Work of a kind this core cannot run may have skipped its wake-up.
            if eng.ready_len() > 0 {
                eng.wake_cores();
            }
            if !eng.has_queued(kind) {
                parked = true;
                eng.park_queue_or(kind, Duration::from_secs(1), || false);
            }
        } else {
            parked = true;
            eng.park_queue_or(kind, Duration::from_secs(1), || false);
        }
    }
}

/// How the pushing thread wakes the cores.
#[derive(Clone, Copy, PartialEq)]
enum Push {
    /// A wake-up per push (`push_ready`).
    Each,
    /// One batch, one wake-up per queue (`push_ready_quiet` + `wake_for_queues`).
    Batch,
    /// The orchestrator's owed wake-ups (`Orchestrator::wake_debt`): each push is
    /// quiet (`push_owned_quiet`); at the next push the debt is paid if a core that
    /// could take an owed task is seen parked (`parked_for`, no fence), else kept; after
    /// the last push it is paid (`wake_for_queued`: only for queues still holding a task).
    Owed,
    /// [`Push::Owed`] on an engine whose cores share 2 CPUs with the orchestrator
    /// (`set_cpu_share`): the looks at the debt wake a core only while none is awake
    /// (or none awake can run the task); the payment after the last push is fenced and
    /// not limited.
    Shared,
}

/// Cores of `cores` kinds; the main thread pushes `tasks` (woken as `push` says), waits
/// until all were taken, then shuts down.
fn scenario(cores: &'static [usize], tasks: &'static [usize], push: Push) {
    let lanes = if cores.iter().chain(tasks).any(|&q| q >= LANE0) {
        2
    } else {
        0
    };
    let eng = Arc::new(EngineShared::with_lanes(lanes));
    let taken = Arc::new(AtomicU32::new(0));
    let handles: Vec<_> = cores
        .iter()
        .map(|&k| {
            let (eng, taken) = (eng.clone(), taken.clone());
            thread::spawn(move || core(&eng, k, tasks, &taken))
        })
        .collect();
    match push {
        Push::Batch => {
            let mut mask = 0;
            for (i, &k) in tasks.iter().enumerate() {
                mask |= eng.push_queue_quiet(TaskId(i as u64), k);
            }
            eng.wake_for_queues(mask);
        }
        Push::Each => {
            for (i, &k) in tasks.iter().enumerate() {
                eng.push_queue(TaskId(i as u64), k);
            }
        }
        Push::Owed | Push::Shared => {
            if push == Push::Shared {
                let kinds: Vec<_> = cores
                    .iter()
                    .map(|&k| crate::engine::shared::queue_kind(k))
                    .collect();
                eng.set_cpu_share(&kinds, 2);
            }
            let mut debt = 0;
            for (i, &k) in tasks.iter().enumerate() {
                // `Orchestrator::look_at_wakes`: paid only if a core that could take an
                // owed task is seen parked (a plain look), else kept.
                if debt != 0 && eng.parked_for(debt) {
                    eng.wake_for_queued(std::mem::take(&mut debt));
                }
                // safety: this thread is the only one pushing this way.
                debt |= unsafe { eng.push_owned_quiet(TaskId(i as u64), k) };
            }
            eng.wake_for_queued(debt);
        }
    }
    let all = (1u32 << tasks.len()) - 1;
    while !eng
        .progress
        .wait(|| taken.load(Acquire) == all, Duration::from_secs(1))
    {}
    eng.shutdown.store(true, SeqCst);
    eng.wake_all_cores();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(taken.load(Acquire), all);
}

/// An AIC and an AIV core; an AIV task, an AIC task and an `Any` task, each pushed with
/// its own wake-up: each wakes one sleeper of its own kind.
#[test]
fn one_wake_up_per_push_reaches_a_core_of_the_right_kind() {
    model(2, || scenario(&[AIC, AIV], &[AIV, AIC, ANY], Push::Each));
}

/// Two AIV cores and an `Any` core; three AIV tasks pushed as one batch with a single
/// wake-up: the cores woken pass it on while tasks are left.
#[test]
fn a_batch_with_one_wake_up_is_passed_on() {
    model(2, || scenario(&[AIV, AIV], &[AIV, AIV, AIV], Push::Batch));
}

/// An AIC core and an `Any` core; AIC tasks: whichever sleeps, one can take them (an
/// `Any` core is woken when no AIC core sleeps).
#[test]
fn a_task_wakes_an_any_core_when_none_of_its_kind_sleeps() {
    model(2, || scenario(&[ANY, AIC], &[AIC, AIC], Push::Each));
}

/// Two AIV cores; three AIV tasks whose wake-ups are owed (as an orchestrator's submits
/// owe them) and paid only for queues still holding a task: a push whose task a
/// spinning core took meanwhile wakes nobody, and no task is left unseen.
#[test]
fn owed_wake_ups_paid_only_for_queued_tasks_lose_none() {
    model(2, || scenario(&[AIV, AIV], &[AIV, AIV, AIV], Push::Owed));
}

/// An AIC core and an AIV core; owed wake-ups for tasks of both kinds and `Any`.
#[test]
fn owed_wake_ups_of_mixed_kinds_lose_none() {
    model(2, || scenario(&[AIC, AIV], &[AIC, ANY, AIV], Push::Owed));
}

/// Two AIV cores sharing 2 CPUs with the submitting thread: its looks at the debt wake at
/// most one of them, and no task is left unseen.
#[test]
fn wake_ups_limited_while_submitting_lose_none() {
    model(2, || scenario(&[AIV, AIV], &[AIV, AIV, AIV], Push::Shared));
}

/// An AIC and an AIV core sharing 2 CPUs with the submitting thread, tasks of both
/// kinds: with the limit no task is left unseen either.
#[test]
fn wake_ups_limited_while_submitting_respect_kinds() {
    model(2, || scenario(&[AIC, AIV], &[AIV, AIC, AIV], Push::Shared));
}

/// Two lanes with a core each (an L3 node's dispatch threads); tasks of both lanes, a
/// wake-up each: a lane's task wakes its own lane's core, never the other's.
#[test]
fn a_lane_task_wakes_its_own_lanes_core() {
    model(2, || {
        scenario(&[LANE0, LANE1], &[LANE1, LANE0, LANE1], Push::Each)
    });
}

/// The same with the orchestrator's owed wake-ups.
#[test]
fn owed_wake_ups_of_lane_tasks_lose_none() {
    model(2, || {
        scenario(&[LANE0, LANE1], &[LANE0, LANE1, LANE0], Push::Owed)
    });
}

/// A core in a long park (no run open when it parked: `EngineShared::park_queue_long`)
/// and a run opening (`EngineShared::open_for_cores`): the opener publishes, fences,
/// then wakes long sleepers; the core counts itself, fences, then looks at the flag
/// before it waits. Either way the core leaves its park (a lost wake-up would leave it
/// there: loom's timed waits never time out, so that is a reported deadlock).
#[test]
fn opening_a_run_ends_a_long_park() {
    model(3, || {
        let eng = Arc::new(EngineShared::default());
        let core = {
            let eng = eng.clone();
            thread::spawn(move || {
                while !eng.run_is_open() {
                    eng.park_queue_long(ANY, Duration::from_secs(1), || false);
                }
            })
        };
        eng.open_for_cores();
        core.join().unwrap();
    });
}
