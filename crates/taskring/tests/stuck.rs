//! A kernel given up on (SCHEDULER_TIMEOUT) that returns later must not write into any
//! later run: its arena is set aside and runs over its tensors are refused until it
//! returns (`chip/quarantine.rs`).

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use taskring::builtin::*;
use taskring::*;

/// Write `v` into every f32 of the call's first writable tensor.
fn write_all(call: &KernelCall<'_>, v: f32) {
    let t = &call.tensors[call.n_inputs];
    let p = t.data_ptr() as *mut f32;
    for i in 0..t.numel() as usize {
        // safety: the kernel's own output view (contiguous, f32) of `numel` elements.
        unsafe { p.add(i).write(v) };
    }
}

/// A kernel that waits until `release`, then writes 42 into its output.
fn late(name: &str, release: &'static AtomicBool) -> KernelRef {
    fn_kernel(name, CoreKind::Any, move |call| {
        while !release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        write_all(call, 42.0);
    })
}

fn chip_with_timeout() -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores: 2,
        scheduler_timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .unwrap()
}

/// A program that fills its tensor argument with 1.
fn fill_ones() -> Program {
    Program::new("fill", |o, args| {
        let x = args[0].tensor()?;
        submit(o, FILL, |t| {
            t.output_existing(x).scalar(Scalar::F64(1.0));
        })
        .map(|_| ())
    })
}

/// While a kernel is set aside, a run over other memory goes ahead; then let the kernel
/// go (`release`) and wait until its entry is lifted.
fn other_memory_runs_until_released(w: &mut ChipWorker, release: &AtomicBool) {
    let mut y = vec![0f32; 64];
    w.run_with_sizing(&fill_ones(), &[host(&mut y, &[64])], &RingSizing::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(y.iter().all(|&v| v == 1.0));
    release.store(true, Ordering::SeqCst);
    let _hang = common::watchdog(); // an entry never lifted
    while !w.stuck_kernels().is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Run 1's kernel is given up on; run 2 (same sizing, so the same heap offsets) fills a
/// runtime output with 7, lets the stale kernel go and waits, then copies it out: it
/// must see 7, not the stale kernel's 42.
#[test]
fn a_stale_kernel_never_writes_into_a_later_runs_outputs() {
    static RELEASE: AtomicBool = AtomicBool::new(false);
    let late = late("late", &RELEASE);
    let let_go = fn_kernel("let_go", CoreKind::Any, |call| {
        RELEASE.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        // copy input 0 to output 0
        let (a, b) = (&call.tensors[0], &call.tensors[1]);
        // safety: both views are contiguous f32 of the same shape.
        unsafe {
            std::ptr::copy_nonoverlapping(
                a.data_ptr() as *const f32,
                b.data_ptr() as *mut f32,
                a.numel() as usize,
            )
        };
    });
    let mut w = chip_with_timeout();
    let s = sizing(16, 64 << 10, 64);
    let first = Program::new("first", move |o, _| {
        submit(o, late, |t| {
            t.output(spec(&[256]));
        })
        .map(|_| ())
    });
    let e = w.run_with_sizing(&first, &[], &s).unwrap_err();
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    assert!(
        e.detail
            .ends_with("; the run's outputs may be partly written"),
        "{e}"
    );
    assert_eq!(w.stuck_kernels().len(), 1);
    let second = Program::new("second", move |o, args| {
        let out = args[0].tensor()?;
        let tmp = submit(o, FILL, |t| {
            t.output(spec(&[256])).scalar(Scalar::F64(7.0));
        })?
        .output(0);
        submit(o, let_go, |t| {
            t.input(tmp).output_existing(out);
        })
        .map(|_| ())
    });
    let mut out = vec![0f32; 256];
    let r = w
        .run_with_sizing(&second, &[host(&mut out, &[256])], &s)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.iter().all(|&x| x == 7.0), "{:?}", &out[..8]);
    assert!(!r.arena_hit, "the stuck kernel's arena was handed on");
    // The kernel returned: its entry is lifted (or the watchdog ends the wait).
    let _hang = common::watchdog();
    while !w.stuck_kernels().is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A run over the buffer a stuck kernel still holds is refused, naming the kernel;
/// other buffers run; once the kernel returned the buffer runs again.
#[test]
fn a_run_over_a_stuck_kernels_buffer_is_refused_until_it_returns() {
    static RELEASE: AtomicBool = AtomicBool::new(false);
    let late = late("late_user", &RELEASE);
    let mut w = chip_with_timeout();
    let first = Program::new("first", move |o, args| {
        let x = args[0].tensor()?;
        submit(o, late, |t| {
            t.output_existing(x);
        })
        .map(|_| ())
    });
    let fill = fill_ones();
    let mut x = vec![0f32; 64];
    let xp = x.as_mut_ptr() as u64;
    let e = w
        .run_with_sizing(&first, &[host(&mut x, &[64])], &RingSizing::default())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    // A view of the middle of x overlaps it too.
    let view = Tensor::from_raw(xp + 64, &[8], DType::F32);
    // safety: x lives to the end of the test; nothing else uses it meanwhile.
    let arg = Arg::Tensor(unsafe { CallerTensor::from_raw(view) });
    let e = w
        .run_with_sizing(&fill, &[arg], &RingSizing::default())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::SchedulerTimeout, "{e}");
    assert!(
        e.detail
            .contains("argument 0 overlaps memory that kernel 'late_user'")
            && e.detail.contains("has not returned"),
        "{e}"
    );
    other_memory_runs_until_released(&mut w, &RELEASE);
    w.run_with_sizing(&fill, &[host(&mut x, &[64])], &RingSizing::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(x.iter().all(|&v| v == 1.0));
}

/// A kernel that says it started, waits until `release`, writes 42 into its output and
/// says it wrote.
fn gated(
    name: &str,
    started: &'static AtomicBool,
    release: &'static AtomicBool,
    wrote: &'static AtomicBool,
) -> KernelRef {
    fn_kernel(name, CoreKind::Any, move |call| {
        started.store(true, Ordering::SeqCst);
        while !release.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        write_all(call, 42.0);
        wrote.store(true, Ordering::SeqCst);
    })
}

/// From another thread: interrupt `w`'s run once `started` says its kernel runs.
fn interrupt_once_started(
    w: &ChipWorker,
    started: &'static AtomicBool,
) -> std::thread::JoinHandle<()> {
    let interrupter = w.interrupter();
    std::thread::spawn(move || {
        while !started.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        interrupter.interrupt("the test asked");
    })
}

/// An interrupted run (`RunInterrupter`, from another thread here; Ctrl-C through a
/// Python caller's hook) fails at once, before its kernel returns — with a scheduler
/// timeout far away — and the kernel is set aside as after SCHEDULER_TIMEOUT.
#[test]
fn an_interrupted_run_returns_before_its_kernel_and_sets_the_kernel_aside() {
    static RELEASE: AtomicBool = AtomicBool::new(false);
    static STARTED: AtomicBool = AtomicBool::new(false);
    static WROTE: AtomicBool = AtomicBool::new(false);
    let late = gated("late_interrupted", &STARTED, &RELEASE, &WROTE);
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        scheduler_timeout: Duration::from_secs(600),
        ..Default::default()
    })
    .unwrap();
    let first = Program::new("first", move |o, args| {
        let x = args[0].tensor()?;
        submit(o, late, |t| {
            t.output_existing(x);
        })
        .map(|_| ())
    });
    let t = interrupt_once_started(&w, &STARTED);
    let mut x = vec![0f32; 64];
    let e = w
        .run_with_sizing(&first, &[host(&mut x, &[64])], &RingSizing::default())
        .unwrap_err();
    t.join().unwrap();
    // The kernel cannot have returned: it waits for RELEASE.
    assert!(!RELEASE.load(Ordering::SeqCst));
    assert_eq!(e.code, StatusCode::ExplicitOrchFatal, "{e}");
    assert!(
        e.detail
            .starts_with("the run was interrupted: the test asked"),
        "{e}"
    );
    let stuck = w.stuck_kernels();
    assert_eq!(stuck.len(), 1);
    assert_eq!(stuck[0].0, "late_interrupted");
    let e = w
        .run_with_sizing(&fill_ones(), &[host(&mut x, &[64])], &RingSizing::default())
        .unwrap_err();
    assert!(
        e.detail
            .contains("overlaps memory that kernel 'late_interrupted' (")
            && e.detail.contains("when an earlier run was interrupted"),
        "{e}"
    );
    // Other memory runs: the interrupt was for the run in progress only.
    other_memory_runs_until_released(&mut w, &RELEASE);
    assert!(x.iter().all(|&v| v == 42.0));
}

/// A chip dropped while a kernel it gave up on still runs: that kernel's arena stays
/// mapped, so the kernel's late write into its runtime output lands in memory that is
/// still its own instead of crashing the process.
#[test]
fn a_chip_dropped_while_a_kernel_it_gave_up_on_runs_keeps_that_arena() {
    static RELEASE: AtomicBool = AtomicBool::new(false);
    static STARTED: AtomicBool = AtomicBool::new(false);
    static WROTE: AtomicBool = AtomicBool::new(false);
    let late = gated("late_after_drop", &STARTED, &RELEASE, &WROTE);
    let mut w = chip_with_timeout();
    let prog = Program::new("runtime_output", move |o, _| {
        submit(o, late, |t| {
            t.output(spec(&[1 << 16]));
        })
        .map(|_| ())
    });
    let t = interrupt_once_started(&w, &STARTED);
    let e = w
        .run_with_sizing(&prog, &[], &sizing(16, 1 << 20, 64))
        .unwrap_err();
    t.join().unwrap();
    assert_eq!(e.code, StatusCode::ExplicitOrchFatal, "{e}");
    assert_eq!(w.stuck_kernels().len(), 1);
    drop(w);
    RELEASE.store(true, Ordering::SeqCst);
    let _hang = common::watchdog();
    while !WROTE.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
}
