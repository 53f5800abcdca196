//! The orchestrator's owed wake-ups (`Orchestrator::wake_debt`): a submit's ready task
//! wakes no parked core at once; a later submit pays the wake-up when it sees a parked
//! core that is needed, and a wait for space or the end of the program pays whatever is
//! still owed. What must still hold, through the public API:
//! - a task does not wait for the orchestrator's next call: while user code runs after
//!   a submit, a parked core finds the task (cores park briefly while a run is open);
//! - a one-task program runs on the orchestrator's thread when the cores are parked
//!   (it is what saves the hand-off), and a program that leaves several tasks queued at
//!   its end still spreads them over the cores.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::Duration;
use taskring::*;

mod common;

/// A closure kernel that says it is bounded (the orchestrator may run it itself).
struct Bounded<F>(&'static str, F);

impl<F: Fn() + Send + Sync + 'static> Kernel for Bounded<F> {
    fn name(&self) -> &str {
        self.0
    }
    fn run(&self, _call: &KernelCall<'_>) {
        (self.1)()
    }
    fn bounded(&self) -> bool {
        true
    }
}

fn bounded(name: &'static str, f: impl Fn() + Send + Sync + 'static) -> KernelRef {
    KernelRef::leak(Bounded(name, f))
}

fn chip(cores: usize) -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores,
        aic_cores: Some(0),
        prewarm: vec![RingSizing::default()],
        ..Default::default()
    })
    .unwrap()
}

/// Let the idle cores finish their spin phase and park (their spin is well under
/// 50 ms even on a loaded machine).
fn let_cores_park() {
    std::thread::sleep(Duration::from_millis(50));
}

#[test]
fn a_submitted_task_starts_while_the_orchestration_is_still_busy() {
    // The orchestration's user code waits (without calling into the engine) until the
    // task it submitted has started. One core, parked: without the short parks of an
    // open run the task would wait for the orchestration's end, which never comes —
    // the watchdog ends the test.
    let _hang = common::watchdog();
    static STARTED: AtomicBool = AtomicBool::new(false);
    let record = bounded("record", || STARTED.store(true, SeqCst));
    let mut c = chip(1);
    for _ in 0..5 {
        let_cores_park();
        STARTED.store(false, SeqCst);
        let prog = Program::new("busy_after_submit", move |o, _| {
            o.submit(record, &TaskArgs::new())?;
            while !STARTED.load(SeqCst) {
                std::thread::sleep(Duration::from_micros(100));
            }
            Ok(())
        });
        c.run(&prog, &[], &CallConfig::default()).unwrap();
    }
}

#[test]
fn a_one_task_program_runs_on_the_orchestrator_thread_when_the_cores_are_parked() {
    static THREAD: Mutex<Option<ThreadId>> = Mutex::new(None);
    let who = bounded("who", || {
        *THREAD.lock().unwrap() = Some(std::thread::current().id());
    });
    let mut c = chip(2);
    let prog = Program::new("one", move |o, _| {
        o.submit(who, &TaskArgs::new()).map(|_| ())
    });
    let me = std::thread::current().id();
    let mut here = 0;
    for _ in 0..5 {
        let_cores_park();
        c.run(&prog, &[], &CallConfig::default()).unwrap();
        if *THREAD.lock().unwrap() == Some(me) {
            here += 1;
        }
    }
    // A parked core is never woken for it, but its short park may still find the task
    // first on a loaded machine: most runs, not all.
    assert!(
        here >= 3,
        "the lone task ran on this thread in {here} of 5 runs"
    );
}

#[test]
fn tasks_left_queued_at_the_end_of_a_program_still_reach_the_cores() {
    static THREADS: Mutex<Option<HashSet<ThreadId>>> = Mutex::new(None);
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let slow = bounded("slow", || {
        THREADS
            .lock()
            .unwrap()
            .get_or_insert_with(HashSet::new)
            .insert(std::thread::current().id());
        RAN.fetch_add(1, SeqCst);
        std::thread::sleep(Duration::from_millis(5));
    });
    let mut c = chip(2);
    let prog = Program::new("many", move |o, _| {
        for _ in 0..16 {
            o.submit(slow, &TaskArgs::new())?;
        }
        Ok(())
    });
    let_cores_park();
    c.run(&prog, &[], &CallConfig::default()).unwrap();
    assert_eq!(RAN.load(SeqCst), 16);
    let threads = THREADS.lock().unwrap().clone().unwrap();
    let me = std::thread::current().id();
    // 16 tasks of 5 ms: the two cores ran some of them, not only this thread.
    assert!(
        threads.iter().any(|t| *t != me),
        "every task ran on the orchestrator's thread"
    );
}
