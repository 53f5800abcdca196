//! `ChipOptions::orchestrator_helps`: the orchestrator thread runs ready tasks while it
//! waits for ring space or for the run's tasks to retire; without it, it still runs the
//! tasks of `Kernel::bounded` kernels (and never another).

mod common;
use common::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::Duration;
use taskring::builtin::*;
use taskring::*;

fn helping_chip(cores: usize, aic_cores: Option<usize>) -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores,
        aic_cores,
        orchestrator_helps: true,
        scheduler_timeout: Duration::from_millis(500),
        ..Default::default()
    })
    .unwrap()
}

/// A closure kernel that can fail.
struct TryFn<F>(&'static str, F);

impl<F: Fn() -> Result<(), String> + Send + Sync + 'static> Kernel for TryFn<F> {
    fn name(&self) -> &str {
        self.0
    }
    fn try_run(&self, _call: &KernelCall<'_>) -> Result<(), String> {
        (self.1)()
    }
}

/// A kernel that holds its core until `done` reaches `n`: the other tasks must run while
/// it waits (if they do not, the watchdog ends the test).
fn gate(name: &'static str, done: &'static AtomicUsize, n: usize) -> KernelRef {
    KernelRef::leak(TryFn(name, move || {
        let _hang = common::watchdog();
        while done.load(SeqCst) < n {
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }))
}

#[test]
fn the_orchestrator_runs_tasks_while_the_only_core_is_held() {
    static DONE: AtomicUsize = AtomicUsize::new(0);
    static THREADS: Mutex<Option<HashSet<ThreadId>>> = Mutex::new(None);
    let hold = gate("hold", &DONE, 20);
    let count = fn_kernel("count", CoreKind::Any, |_| {
        THREADS
            .lock()
            .unwrap()
            .get_or_insert_with(HashSet::new)
            .insert(std::thread::current().id());
        DONE.fetch_add(1, SeqCst);
    });
    let mut w = helping_chip(1, None);
    let prog = Program::new("held", move |o, _| {
        o.submit(hold, &TaskArgs::new())?;
        // Let the core take the gate first.
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..20 {
            o.submit(count, &TaskArgs::new())?;
        }
        Ok(())
    });
    // Nobody but the orchestrator can run the 20 tasks while the gate holds the core.
    let rep = w
        .run_with_sizing(&prog, &[], &RingSizing::default())
        .expect("the orchestrator ran the tasks");
    assert_eq!(rep.tasks, 21);
    assert_eq!(DONE.load(SeqCst), 20);
    let threads = THREADS.lock().unwrap().take().unwrap();
    assert!(
        threads.contains(&std::thread::current().id()),
        "no task ran on the orchestrator (calling) thread"
    );
}

#[test]
fn the_orchestrator_helps_when_the_window_is_full() {
    // Window 4 on ring 1, 200 tasks in scopes of 2: the orchestrator waits for slots
    // again and again, and runs tasks meanwhile; results must be right.
    let inc = fn_kernel("inc", CoreKind::Any, |call| {
        let p = call.tensors[0].addr as *mut f32;
        // safety: the task's INOUT tensor: 16 contiguous f32 of the host buffer below.
        unsafe {
            for i in 0..16 {
                *p.add(i) += 1.0;
            }
        }
    });
    let mut w = helping_chip(1, None);
    let prog = Program::new("chain", move |o, args| {
        let x = args[0].tensor()?;
        for _ in 0..100 {
            o.scope(|o| {
                for _ in 0..2 {
                    submit(o, inc, |t| {
                        t.inout(x);
                    })?;
                }
                Ok(())
            })?;
        }
        Ok(())
    });
    let mut x = vec![0f32; 16];
    let args = [host(&mut x, &[16])];
    let rep = w
        .run_with_sizing(&prog, &args, &sizing(4, 4096, 16))
        .unwrap();
    assert_eq!(rep.tasks, 200);
    let _ = &args;
    assert!(x.iter().all(|&v| v == 200.0), "{x:?}");
}

#[test]
fn a_kernel_failing_on_the_orchestrator_fails_the_run_and_the_chip_recovers() {
    static RAN: AtomicUsize = AtomicUsize::new(0);
    let hold = gate("hold_for_fail", &RAN, 1);
    let fail = KernelRef::leak(TryFn("fails", || {
        RAN.fetch_add(1, SeqCst);
        Err("deliberate failure".to_string())
    }));
    let mut w = helping_chip(1, None);
    let prog = Program::new("fails", move |o, _| {
        o.submit(hold, &TaskArgs::new())?;
        std::thread::sleep(Duration::from_millis(20));
        o.submit(fail, &TaskArgs::new()).map(|_| ())
    });
    let e = w
        .run_with_sizing(&prog, &[], &RingSizing::default())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::TaskFailed, "{e}");
    assert!(
        e.detail.contains("kernel 'fails'") && e.detail.contains("deliberate failure"),
        "{e}"
    );
    // Usable afterwards.
    let ok = Program::new("ok", |o, _| o.submit(NOOP, &TaskArgs::new()).map(|_| ()));
    assert_eq!(
        w.run_with_sizing(&ok, &[], &RingSizing::default())
            .unwrap()
            .tasks,
        1
    );
}

#[test]
fn the_orchestrator_does_not_run_a_kind_no_core_has() {
    // Two AIV cores: an AIC-only task stays unrun (SCHEDULER_TIMEOUT S3), helper or not.
    let mut w = helping_chip(2, Some(0));
    let e = run_aic_only_task(&mut w).unwrap_err();
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    assert!(e.detail.contains("sub_class=S3"), "{e}");
}

/// A kernel that records the thread it ran on, counts its runs and says whether it is
/// `bounded`.
struct Recorder {
    name: &'static str,
    bounded: bool,
    threads: &'static Mutex<Vec<ThreadId>>,
    runs: &'static AtomicUsize,
}

impl Kernel for Recorder {
    fn name(&self) -> &str {
        self.name
    }
    fn bounded(&self) -> bool {
        self.bounded
    }
    fn run(&self, _call: &KernelCall<'_>) {
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.runs.fetch_add(1, SeqCst);
    }
}

fn default_chip(cores: usize) -> ChipWorker {
    // `orchestrator_helps` stays off.
    ChipWorker::new(ChipOptions {
        cores,
        scheduler_timeout: Duration::from_millis(500),
        ..Default::default()
    })
    .unwrap()
}

/// A kernel that holds its thread until `done` reaches `until` (set by the test before
/// each run; if the other tasks never run, the watchdog ends the test), and says it is bounded — it is not, but a test needs
/// the core held by a kernel that leaves the run's help on. Records its thread.
struct BoundedGate {
    done: &'static AtomicUsize,
    until: &'static AtomicUsize,
    ran_on: &'static Mutex<Option<ThreadId>>,
}

impl Kernel for BoundedGate {
    fn name(&self) -> &str {
        "bounded_gate"
    }
    fn bounded(&self) -> bool {
        true
    }
    fn try_run(&self, _call: &KernelCall<'_>) -> Result<(), String> {
        *self.ran_on.lock().unwrap() = Some(std::thread::current().id());
        let _hang = common::watchdog();
        while self.done.load(SeqCst) < self.until.load(SeqCst) {
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }
}

#[test]
fn without_helping_the_orchestrator_still_runs_bounded_kernels_while_the_core_is_held() {
    static DONE: AtomicUsize = AtomicUsize::new(0);
    static THREADS: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());
    static GATE: Mutex<Option<ThreadId>> = Mutex::new(None);
    static UNTIL: AtomicUsize = AtomicUsize::new(10);
    let hold = KernelRef::leak(BoundedGate {
        done: &DONE,
        until: &UNTIL,
        ran_on: &GATE,
    });
    let rec = KernelRef::leak(Recorder {
        name: "bounded_rec",
        bounded: true,
        threads: &THREADS,
        runs: &DONE,
    });
    let mut w = default_chip(1);
    let prog = Program::new("held_bounded", move |o, _| {
        o.submit(hold, &TaskArgs::new())?;
        // Let the core take the gate first.
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..10 {
            o.submit(rec, &TaskArgs::new())?;
        }
        Ok(())
    });
    // Only the orchestrator can run the 10 recorders while the gate holds the core.
    let rep = w
        .run_with_sizing(&prog, &[], &RingSizing::default())
        .expect("the orchestrator ran the bounded tasks while the core was held");
    assert_eq!(rep.tasks, 11);
    let threads = THREADS.lock().unwrap().clone();
    assert_eq!(threads.len(), 10);
    let me = std::thread::current().id();
    assert_ne!(
        *GATE.lock().unwrap(),
        Some(me),
        "the core was to take the gate"
    );
    assert!(
        threads.iter().all(|t| *t == me),
        "a bounded task ran elsewhere while the core was held"
    );
}

/// One kernel of a run that is not bounded turns the help off for the whole run: no
/// task is taken off the queue only to be put back (that reorders the queue).
#[test]
fn without_helping_the_orchestrator_never_runs_an_unbounded_kernel() {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    static THREADS: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());
    let hold = KernelRef::leak(TryFn("hold_50ms", || {
        std::thread::sleep(Duration::from_millis(50));
        Ok(())
    }));
    let rec = KernelRef::leak(Recorder {
        name: "unbounded_rec",
        bounded: false,
        threads: &THREADS,
        runs: &RUNS,
    });
    let brec = KernelRef::leak(Recorder {
        name: "bounded_rec_in_unbounded_run",
        bounded: true,
        threads: &THREADS,
        runs: &RUNS,
    });
    let mut w = default_chip(1);
    let prog = Program::new("held_unbounded", move |o, _| {
        o.submit(hold, &TaskArgs::new())?;
        for _ in 0..10 {
            o.submit(rec, &TaskArgs::new())?;
            o.submit(brec, &TaskArgs::new())?;
        }
        Ok(())
    });
    let rep = w
        .run_with_sizing(&prog, &[], &RingSizing::default())
        .unwrap();
    assert_eq!(rep.tasks, 21);
    assert_eq!(RUNS.load(SeqCst), 20);
    let me = std::thread::current().id();
    let threads = THREADS.lock().unwrap().clone();
    assert!(
        threads.iter().all(|t| *t != me),
        "an unbounded task ran on the orchestrator"
    );
}

/// A direct replay of bounded kernels: the caller helps while a core is idle and hands
/// its next task and its own stack back to the cores when none is (`help_direct`).
/// Here the only core is held for 30 ms by a task that says it is bounded, at any
/// moment of the replay: every task must still run exactly once, none stranded on the
/// caller's stack.
#[test]
fn a_replay_of_bounded_kernels_strands_no_task_when_the_caller_stops_helping() {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    static THREADS: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());
    struct Slow;
    impl Kernel for Slow {
        fn name(&self) -> &str {
            "slow_bounded"
        }
        fn bounded(&self) -> bool {
            true
        }
        fn run(&self, _call: &KernelCall<'_>) {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    let slow = KernelRef::leak(Slow);
    let rec = KernelRef::leak(Recorder {
        name: "replay_rec",
        bounded: true,
        threads: &THREADS,
        runs: &RUNS,
    });
    let mut w = default_chip(1);
    for at in [0usize, 3, 9] {
        let prog = Program::new("held_at", move |o, _| {
            for i in 0..10 {
                if i == at {
                    o.submit(slow, &TaskArgs::new())?;
                }
                o.submit(rec, &TaskArgs::new())?;
            }
            Ok(())
        });
        let g = w.capture(&prog, &[], &CallConfig::default()).unwrap();
        for _ in 0..5 {
            let before = RUNS.load(SeqCst);
            let rep = g.replay(&mut w, &[], None).expect("the replay completes");
            assert!(rep.replayed);
            assert_eq!(rep.tasks, 11);
            assert_eq!(RUNS.load(SeqCst) - before, 10, "slow task at {at}");
        }
    }
}
