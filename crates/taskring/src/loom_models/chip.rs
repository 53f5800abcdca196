//! loom model of the chip's abort handshake (a failed run, then the next run), argued in
//! five steps in the module doc of `src/chip/core.rs`.
//!
//! Run (release):
//!
//! ```text
//! make test-loom (RUSTFLAGS="--cfg loom" cargo test --release -p taskring --lib loom_models::chip)
//! ```
//!
//! What is real: every atomic access of the handshake is one of the functions of
//! `crate::chip::abort` that `chip::core_loop`, `wait_cores_idle`,
//! `replace_stuck_cores`, `open_run` / `open_direct` call (`search`, `admit`,
//! `begin_completion`, `release`, `holds_task`, `give_up_if_stuck`, `reopen`), on the
//! engine's real `EngineShared` (ready queues, `fail`, `fatal`, `drain_queues`). What is
//! replicated: the sequencing of those calls — a core's loop (take a held or popped
//! task, admit it, "run its kernel", win the race to complete it, complete it) and the
//! caller's (settle: drain, [give up on stuck cores,] wait until no core holds a task,
//! [give up again after the wait's timeout,] drain; close the run; reset the arena; open
//! the next run: drain, wait, reopen) — and the arena, a loom `UnsafeCell` holding the
//! number of the run it belongs to: a kernel or a completion reads or writes it, the
//! caller writes it after the settle (close_run) and again when it arms the next run.
//!
//! Two models:
//!
//! - `failed_run_then_next_run` (a kernel fails; nobody is given up on). Checked:
//!   (1) after the settle's wait returns no core runs a kernel of the failed run (loom
//!   reports the arena read racing with the caller's write, and the value read names the
//!   task's run); (2) no task of the failed run meets the next run's arena; (3) a task
//!   is run or dropped, never both, never twice; (4) the next run's task is never
//!   dropped (`fatal` was lifted before it could be popped). Each core looks at the
//!   queues a bounded number of times (`LOOKS`), so the next run's task may stay queued.
//! - `give_up_races_a_completing_core` (SCHEDULER_TIMEOUT: step 4, the give-up, against
//!   a core whose kernel returns right then). Checked: (5) a core given up on touches
//!   nothing more — its completion never writes the arena the caller resets (loom reports
//!   the race on the cell), and the settle does not end while a core that won the race
//!   still completes; (6) exactly one side wins: a task is completed xor its core is
//!   ABANDONED; (7) no task the failed run's completions made ready is left queued for
//!   the next run.
//!
//! `LOOM_MAX_PREEMPTIONS` overrides the preemption bound (default 3), `LOOM_UNBOUNDED=1`
//! removes it; `LOOM_LOCATION=1 RUST_BACKTRACE=1` explain a failure.

use super::model;

use crate::chip::abort::{self, CORE_ABANDONED, CORE_IDLE};
use crate::engine::shared::EngineShared;
use crate::engine::{RuntimeFailure, StatusCode};
use crate::kernel::CoreKind;
use crate::tensor::TaskId;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::*;

/// Tasks of the failed run (1): `FAILS`'s kernel fails; `FEEDS`'s succeeds and its
/// completion makes `LATE` ready (a push that may come after the failure and after the
/// settle's first drain). The next run (2) has one task, `NEXT`.
const FAILS: u64 = 1;
const FEEDS: u64 = 2;
const LATE: u64 = 3;
const NEXT: u64 = 4;
const TASKS: usize = 5;
/// A core's looks at the queues (it exits after them).
const LOOKS: usize = 3;

fn run_of(t: u64) -> u32 {
    if t == NEXT {
        2
    } else {
        1
    }
}

/// A core's shared record (`chip::Core`'s handshake field).
struct Core {
    state: AtomicU64,
}

struct Chip {
    eng: EngineShared,
    cores: [Core; 2],
    /// The arena: the number of the run it belongs to (0: none).
    arena: UnsafeCell<u32>,
    /// Per task: kernels run, and drops (popped or held, then dropped on `fatal`).
    ran: [AtomicU32; TASKS],
    dropped: [AtomicU32; TASKS],
}

/// A core thread (`chip::core_loop`'s sequence), bounded to `LOOKS` looks at the queues
/// (loom cannot explore an unbounded idle loop): search; admit the task; run its kernel
/// (read the arena); after the kernel, `begin_completion`; complete it (make `LATE`
/// ready, or fail); release.
fn core_loop(chip: &Chip, me: usize) {
    let core = &chip.cores[me];
    let eng = &chip.eng;
    for _ in 0..LOOKS {
        let Some(task) = abort::search(&core.state, eng, CoreKind::Any) else {
            continue;
        };
        if !abort::admit(&core.state, eng, task) {
            chip.dropped[task.0 as usize].fetch_add(1, Relaxed);
            continue;
        }
        // The kernel: it reads the arena of its run.
        let run = chip.arena.with(|p| unsafe { *p });
        assert_eq!(
            run,
            run_of(task.0),
            "task {} ran on the arena of run {run}",
            task.0
        );
        chip.ran[task.0 as usize].fetch_add(1, Relaxed);
        if !abort::begin_completion(&core.state, task) {
            return;
        }
        match task.0 {
            FAILS => eng.fail(RuntimeFailure::new(
                StatusCode::TaskFailed,
                None,
                "kernel failed",
            )),
            FEEDS => eng.push_ready(TaskId(LATE), CoreKind::Any),
            _ => {}
        }
        abort::release(&core.state);
    }
}

/// The settle's wait (`wait_cores_idle`'s predicate, with a yield between looks).
fn wait_cores_idle(chip: &Chip) {
    while chip.cores.iter().any(|c| abort::holds_task(&c.state)) {
        thread::yield_now();
    }
}

#[test]
fn failed_run_then_next_run() {
    model(3, || {
        let chip = Arc::new(Chip {
            eng: EngineShared::default(),
            cores: [0, 1].map(|_| Core {
                state: AtomicU64::new(CORE_IDLE),
            }),
            arena: UnsafeCell::new(1),
            ran: Default::default(),
            dropped: Default::default(),
        });
        // Run 1's orchestration queued its ready tasks.
        chip.eng.push_ready(TaskId(FAILS), CoreKind::Any);
        chip.eng.push_ready(TaskId(FEEDS), CoreKind::Any);
        let cores: Vec<_> = (0..2)
            .map(|i| {
                let c = chip.clone();
                thread::spawn(move || core_loop(&c, i))
            })
            .collect();
        let eng = &chip.eng;
        // Run 1's caller: its wait for retirement ends on the failure.
        while !eng.fatal.load(Acquire) {
            thread::yield_now();
        }
        // ChipWorker::settle (failure): drain, wait until no core holds a task, drain.
        eng.drain_queues();
        wait_cores_idle(&chip);
        eng.drain_queues();
        // close_run, then run 2's arm_arena (reset): the caller owns the arena now.
        chip.arena.with_mut(|p| unsafe { *p = 0 });
        chip.arena.with_mut(|p| unsafe { *p = 2 });
        // open_run: drain, wait, (publish the arena), clear the failure, lift `fatal`.
        eng.drain_queues();
        wait_cores_idle(&chip);
        abort::reopen(eng);
        // Run 2's orchestration queues its task.
        eng.push_ready(TaskId(NEXT), CoreKind::Any);
        for c in cores {
            c.join().unwrap();
        }
        for t in 1..TASKS {
            let (r, d) = (chip.ran[t].load(Relaxed), chip.dropped[t].load(Relaxed));
            assert!(r + d <= 1, "task {t}: run {r} times, dropped {d} times");
        }
        assert_eq!(chip.ran[FAILS as usize].load(Relaxed), 1);
        assert_eq!(
            chip.dropped[NEXT as usize].load(Relaxed),
            0,
            "run 2's task dropped"
        );
    });
}

/// The give-up model's tasks (run 1): `STUCK`'s kernel returns right at the scheduler
/// timeout; its completion makes `KEPT` ready, which the core keeps (as `core_loop`
/// keeps the first consumer it can run: its word goes COMPLETING -> RUNNING, no IDLE
/// between, and nothing is pushed, so only `admit`'s Release orders this completion
/// before a give-up of `KEPT`); `KEPT`'s completion pushes `QUEUED`. Their
/// kernels touch nothing of the model: a kernel that runs on after its core was given
/// up on may still write its outputs — the give-up accepts that; what it promises is
/// about the core's steps once the kernel returned.
const STUCK: u64 = 1;
const KEPT: u64 = 2;
const QUEUED: u64 = 3;
const GIVE_UP_TASKS: usize = 4;
/// The core's passes (a held or popped task, or an empty look each).
const GIVE_UP_PASSES: usize = 3;
/// The settle's looks at the word per wait (then the wait "times out").
const WAIT_LOOKS: usize = 1;

struct OneCore {
    eng: EngineShared,
    state: AtomicU64,
    /// The arena: the number of the run it belongs to.
    arena: UnsafeCell<u32>,
    /// Per task: completions, and drops (held, then dropped on `fatal`).
    completed: [AtomicU32; GIVE_UP_TASKS],
    dropped: [AtomicU32; GIVE_UP_TASKS],
    /// The core lost `begin_completion` (of this task + 1; 0: never).
    lost: AtomicU32,
}

/// One core (`chip::core_loop` / `run_ring_task`'s sequence, bounded): take the task
/// it keeps or search; admit it; its kernel; `begin_completion` (lost: touch nothing,
/// exit); the completion writes the arena (its slot) and makes `KEPT` (kept) or
/// `QUEUED` (pushed) ready; release unless it keeps a task.
fn give_up_core(c: &OneCore) {
    let eng = &c.eng;
    let mut next = None;
    for _ in 0..GIVE_UP_PASSES {
        let task = match next.take() {
            Some(t) => t,
            None => match abort::search(&c.state, eng, CoreKind::Any) {
                Some(t) => t,
                None => continue,
            },
        };
        if !abort::admit(&c.state, eng, task) {
            c.dropped[task.0 as usize].fetch_add(1, Relaxed);
            continue;
        }
        // The kernel returns (right at the timeout, for `STUCK`).
        if !abort::begin_completion(&c.state, task) {
            c.lost.store(task.0 as u32 + 1, Relaxed);
            return;
        }
        // The completion: into the arena of run 1.
        c.arena.with_mut(|p| {
            let run = unsafe { *p };
            assert_eq!(
                run, 1,
                "task {} completed into the arena of run {run}",
                task.0
            );
            unsafe { *p = 1 };
        });
        c.completed[task.0 as usize].fetch_add(1, Relaxed);
        match task.0 {
            STUCK => next = Some(TaskId(KEPT)),
            KEPT => eng.push_ready(TaskId(QUEUED), CoreKind::Any),
            _ => {}
        }
        if next.is_none() {
            abort::release(&c.state);
        }
    }
}

/// `wait_cores_idle` with its timeout: `WAIT_LOOKS` looks; false if the core still
/// holds a task then.
fn wait_idle_or_time_out(c: &OneCore) -> bool {
    for _ in 0..WAIT_LOOKS {
        if !abort::holds_task(&c.state) {
            return true;
        }
        thread::yield_now();
    }
    false
}

#[test]
fn give_up_races_a_completing_core() {
    model(3, || {
        let chip = Arc::new(OneCore {
            eng: EngineShared::default(),
            state: AtomicU64::new(CORE_IDLE),
            arena: UnsafeCell::new(1),
            completed: Default::default(),
            dropped: Default::default(),
            lost: AtomicU32::new(0),
        });
        // Run 1's orchestration queued `STUCK`.
        chip.eng.push_ready(TaskId(STUCK), CoreKind::Any);
        let core = {
            let c = chip.clone();
            thread::spawn(move || give_up_core(&c))
        };
        let eng = &chip.eng;
        // Run 1's caller: no task completed for the scheduler timeout (as far as its
        // clock knows): SCHEDULER_TIMEOUT is latched.
        eng.fail(RuntimeFailure::new(
            StatusCode::SchedulerTimeout,
            None,
            "no task completed",
        ));
        // ChipWorker::settle (SCHEDULER_TIMEOUT): drain; replace_stuck_cores; wait
        // (bounded); while not idle: replace_stuck_cores, wait again; drain.
        eng.drain_queues();
        let mut gave_up = abort::give_up_if_stuck(&chip.state);
        while !wait_idle_or_time_out(&chip) {
            gave_up |= abort::give_up_if_stuck(&chip.state);
        }
        eng.drain_queues();
        // close_run, then run 2's arm_arena (reset): the caller owns the arena now.
        chip.arena.with_mut(|p| unsafe { *p = 0 });
        chip.arena.with_mut(|p| unsafe { *p = 2 });
        // (7) Nothing of run 1 is queued for run 2 (before `reopen`, so the core, if it
        // still searches, drops rather than runs what it would find).
        let stale = eng.pop_ready(CoreKind::Any);
        assert!(stale.is_none(), "stale {stale:?} met the next run");
        core.join().unwrap();
        // (6) The race has one winner per task.
        let lost = chip.lost.load(Relaxed);
        assert_eq!(gave_up, lost != 0, "give-up {gave_up}, core lost {lost}");
        assert_eq!(gave_up, chip.state.load(Relaxed) == CORE_ABANDONED);
        for t in 1..GIVE_UP_TASKS {
            let done = chip.completed[t].load(Relaxed);
            let d = chip.dropped[t].load(Relaxed);
            assert!(
                done + d <= 1,
                "task {t}: completed {done} times, dropped {d}"
            );
            if lost == t as u32 + 1 {
                assert_eq!(done, 0, "task {t}: completed by a core given up on");
            }
        }
    });
}
