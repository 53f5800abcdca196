//! loom model of the chip's abort handshake (a failed run, then the next run), argued in
//! five steps in the module doc of `src/chip/core.rs`.
//!
//! Run (release):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --locked --release -p taskring --test loom_chip
//! ```
//!
//! What is real: every atomic access of the handshake is one of the functions of
//! `taskring::chip::abort` that `chip::core_loop`, `wait_cores_idle`, `open_run` /
//! `open_direct` call (`search`, `admit`, `given_up`, `release`, `holds_task`,
//! `reopen`), on the engine's real `EngineShared` (ready queues, `fail`, `fatal`,
//! `drain_queues`). What is replicated: the sequencing of those calls — a core's loop
//! (take a held or popped task, admit it, "run its kernel", complete it) and the
//! caller's (settle: drain, wait until no core holds a task, drain; close the run; reset
//! the arena; open the next run: drain, wait, reopen) — and the arena, a loom
//! `UnsafeCell` holding the number of the run it belongs to: a kernel reads it, the
//! caller writes it after the settle (close_run) and again when it arms the next run.
//!
//! Checked: (1) after the settle's wait returns no core runs a kernel of the failed run
//! (loom reports the arena read racing with the caller's write, and the value read
//! names the task's run); (2) no task of the failed run meets the next run's arena;
//! (3) a task is run or dropped, never both, never twice; (4) the next run's task is
//! never dropped (`fatal` was lifted before it could be popped). Each core looks at the
//! queues a bounded number of times (`LOOKS`), so the next run's task may stay queued.
//!
//! `LOOM_MAX_PREEMPTIONS` overrides the preemption bound (default 3), `LOOM_UNBOUNDED=1`
//! removes it; `LOOM_LOCATION=1 RUST_BACKTRACE=1` explain a failure.
#![cfg(loom)]

mod loom_support;
use loom_support::model;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::*;
use taskring::chip::abort::{self, CORE_IDLE};
use taskring::engine::shared::EngineShared;
use taskring::engine::{RuntimeFailure, StatusCode};
use taskring::kernel::CoreKind;
use taskring::tensor::TaskId;

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

/// A core's shared record (`chip::Core`'s handshake fields).
struct Core {
    state: AtomicU64,
    abandoned: AtomicBool,
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
/// (read the arena); after the kernel, `given_up`; complete it (make `LATE` ready, or
/// fail); release.
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
        if abort::given_up(&core.abandoned) {
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
    while chip
        .cores
        .iter()
        .any(|c| abort::holds_task(&c.state, &c.abandoned))
    {
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
                abandoned: AtomicBool::new(false),
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
