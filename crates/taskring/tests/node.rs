//! L3 through the Rust API: chips as processes and as threads, per-task CallConfig,
//! inferred dependencies between L2 tasks, chip failures and chip death, and the faults
//! a node survives (stopped chip, cancel, close, fork, init/close cycles).
//!
//! Every test takes `SERIAL`: the fault tests count this process's mappings, fds and
//! threads, and fork it. No test asserts a time: each checks the order of events (a
//! chip's failure before its task could have ended, a task of one chip before the
//! backlog of another), and a test that hangs is ended by the watchdog `SERIAL` arms.

use parking_lot::RwLock;
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskring::builtin::*;
use taskring::node::shm::SharedBuffer;
use taskring::node::ChipCallable;
use taskring::node::*;
use taskring::*;

/// out = 2 * (a + b), in a scope (ring 1) with a runtime temporary.
fn vadd2() -> ChipCallable {
    ChipCallable {
        program: Program::new("vadd2", |o, args| {
            let (a, b, out) = (args[0].tensor()?, args[1].tensor()?, args[2].tensor()?);
            o.scope(|o| {
                let mut t = TaskArgs::new();
                t.input(a)
                    .input(b)
                    .output(TensorSpec::new(a.shape(), DType::F32).unwrap());
                let tmp = o.submit(ADD, &t)?.output(0);
                let mut t = TaskArgs::new();
                t.input(tmp).output_existing(out).scalar(Scalar::F64(2.0));
                o.submit(SCALE, &t).map(|_| ())
            })
        }),
        signature: vec![ArgDir::In, ArgDir::In, ArgDir::Out],
    }
}

/// Fails on purpose.
fn boom() -> ChipCallable {
    let k = fn_kernel("boom", CoreKind::Any, |_| panic!("chip-side failure"));
    ChipCallable {
        program: Program::new("boom", move |o, _| {
            o.submit(k, &TaskArgs::new()).map(|_| ())
        }),
        signature: vec![],
    }
}

fn shared_f32(n: usize, f: impl Fn(usize) -> f32) -> (SharedBuffer, Tensor) {
    let b = SharedBuffer::new(n * 4).unwrap();
    // safety: the fresh buffer is `n * 4` zeroed, page-aligned bytes (`n` valid f32s),
    // and nothing else refers to it yet.
    let s = unsafe { std::slice::from_raw_parts_mut(b.as_ptr() as *mut f32, n) };
    for (i, x) in s.iter_mut().enumerate() {
        *x = f(i);
    }
    let t = Tensor::from_raw(b.as_ptr() as u64, &[n as u32], DType::F32);
    (b, t)
}

fn read(b: &SharedBuffer, n: usize) -> Vec<f32> {
    // safety: callers ask for at most the `n` f32s the buffer was made with, and read
    // it only between runs, when no chip writes it.
    unsafe { std::slice::from_raw_parts(b.as_ptr() as *const f32, n) }.to_vec()
}

/// Sleeps for its scalar (ms), then sets its output to 1.
fn nap() -> ChipCallable {
    let k = fn_kernel("nap", CoreKind::Any, |c| {
        std::thread::sleep(Duration::from_millis(c.scalar_i64(0) as u64));
        // safety: the task's only tensor is its (shared, f32) output.
        unsafe { *(c.tensors[0].data_ptr() as *mut f32) = 1.0 };
    });
    ChipCallable {
        program: Program::new("nap", move |o, args| {
            let out = args[0].tensor()?;
            let ms = match args[1].scalar()? {
                Scalar::I64(v) => v,
                Scalar::F64(v) => v as i64,
            };
            let mut t = TaskArgs::new();
            t.output_existing(out).scalar(Scalar::I64(ms));
            o.submit(k, &t).map(|_| ())
        }),
        signature: vec![ArgDir::Out, ArgDir::Scalar],
    }
}

mod common;

static SERIAL: Serial = Serial(parking_lot::Mutex::new(()));

/// A test's turn, with the harness's hang timeout ([`common::watchdog`]) armed while
/// it runs (disarmed before the next test's turn begins).
struct Serial(parking_lot::Mutex<()>);

impl Serial {
    fn lock(&self) -> (common::Watchdog, parking_lot::MutexGuard<'_, ()>) {
        let turn = self.0.lock();
        (common::watchdog(), turn)
    }
}

fn node_with(processes: bool, chips: usize, chip_timeout: Duration) -> Node {
    let callables = Arc::new(RwLock::new(vec![vadd2(), boom(), nap()]));
    let opts = NodeOptions {
        device_ids: (0..chips as u32).collect(),
        chip_processes: processes,
        chip_cores: 1,
        prewarm: Some(CallConfig::default()),
        chip_timeout,
        ..Default::default()
    };
    Node::new(opts, callables, &NoForkHooks).unwrap_or_else(|e| panic!("{e}"))
}

fn node(processes: bool, chips: usize) -> Node {
    node_with(processes, chips, Duration::from_secs(2))
}

fn heterogeneous(processes: bool) {
    let _serial = SERIAL.lock();
    let mut n = node(processes, 2);
    let (ba, a) = shared_f32(256, |i| i as f32);
    let (bb, b) = shared_f32(256, |_| 1.0);
    let (bc, c) = shared_f32(256, |_| 0.0);
    let (bd, d) = shared_f32(256, |_| 0.0);
    let _keep = (&ba, &bb);
    let rep = n
        .run(
            move |o| {
                // A big attention-like task on chip 0, a small elementwise one on chip 1,
                // then one on chip 1 reading the first one's output (inferred dependency).
                let mut big = CallConfig::default();
                big.runtime_env.ring_task_window = [1024, 512, 0, 0];
                big.runtime_env.ring_heap = [1 << 24; 4];
                let mut small = CallConfig::default();
                small.runtime_env.ring_task_window = [16, 4, 4, 4];
                small.runtime_env.ring_heap = [4096; 4];
                small.runtime_env.ring_dep_pool = [8; 4];
                o.submit_next_level(
                    0,
                    &[
                        NextLevelArg::Tensor(a),
                        NextLevelArg::Tensor(b),
                        NextLevelArg::Tensor(c),
                    ],
                    &big,
                    0,
                )?;
                o.submit_next_level(
                    0,
                    &[
                        NextLevelArg::Tensor(b),
                        NextLevelArg::Tensor(b),
                        NextLevelArg::Tensor(d),
                    ],
                    &small,
                    1,
                )?;
                o.submit_next_level(
                    0,
                    &[
                        NextLevelArg::Tensor(c),
                        NextLevelArg::Tensor(d),
                        NextLevelArg::Tensor(c),
                    ],
                    &small,
                    1,
                )?;
                Ok(())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rep.tasks.len(), 3);
    let runs: Vec<_> = rep.tasks.iter().map(|t| t.run.as_ref().unwrap()).collect();
    let s0 = runs[0].ring_sizing;
    assert_eq!(s0.task_window, [1024, 512, 16384, 16384]);
    assert_eq!(s0.source(RingField::TaskWindow, 2), SizeSource::Default);
    let s1 = runs[1].ring_sizing;
    assert_eq!(s1.task_window, [16, 4, 4, 4]);
    assert_eq!(s1.heap, [4096; 4]);
    assert_eq!(rep.tasks[1].worker, 1);
    assert_eq!(runs[0].peak.task_window[1], 2);
    assert!(rep.tasks.iter().all(|t| t.error.is_none()));
    assert!(runs.iter().all(|r| r.tasks == 2 && !r.replayed));
    // c = 2(a + b) then c = 2(c + d) with d = 2(1 + 1) = 4.
    let want: Vec<f32> = (0..256)
        .map(|i| 2.0 * (2.0 * (i as f32 + 1.0) + 4.0))
        .collect();
    assert_eq!(read(&bc, 256), want);
    assert_eq!(read(&bd, 256), vec![4.0; 256]);
    // Chip 1 prewarmed the default sizing, then built the small one once and hit it.
    let st = n.chip_arena_stats(1).unwrap();
    assert_eq!((st.builds, st.hits, st.misses), (2, 1, 1));
    assert_eq!(st.resident[0], s1.key());
    let st0 = n.chip_arena_stats(0).unwrap();
    assert_eq!(st0.builds, 2);
    n.close();
    assert!(n.chip_arena_stats(0).is_err());
    n.close();
}

#[test]
fn heterogeneous_sizing_in_chip_processes() {
    heterogeneous(true);
}

#[test]
fn heterogeneous_sizing_in_chip_threads() {
    heterogeneous(false);
}

#[test]
fn chip_failure_and_chip_death() {
    let _serial = SERIAL.lock();
    let mut n = node(true, 2);
    let e = n
        .run(
            |o| {
                o.submit_next_level(1, &[], &CallConfig::default(), 1)
                    .map(|_| ())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    let pid1 = n.chip_pids()[1];
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("chip 1 (pid {pid1}): TASK_FAILED")),
        "{text}"
    );
    assert!(text.contains("chip-side failure"), "{text}");
    // The next run works.
    let (_bb, b) = shared_f32(16, |_| 1.0);
    let (bo, out) = shared_f32(16, |_| 0.0);
    n.run(
        move |o| {
            o.submit_next_level(
                0,
                &[
                    NextLevelArg::Tensor(b),
                    NextLevelArg::Tensor(b),
                    NextLevelArg::Tensor(out),
                ],
                &CallConfig::default(),
                1,
            )
            .map(|_| ())
        },
        &CallConfig::default(),
        None,
    )
    .unwrap();
    assert_eq!(read(&bo, 16), vec![4.0; 16]);
    // Kill chip 1: its next task fails naming the signal (seen as a death, not as a
    // stall: that would say "not responding"); chip 0 works.
    // safety: kill only sends a signal to a chip process of ours; no memory is involved.
    unsafe { libc::kill(pid1, libc::SIGKILL) };
    let e = n
        .run(
            move |o| {
                o.submit_next_level(
                    0,
                    &[
                        NextLevelArg::Tensor(b),
                        NextLevelArg::Tensor(b),
                        NextLevelArg::Tensor(out),
                    ],
                    &CallConfig::default(),
                    1,
                )
                .map(|_| ())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("chip 1 (pid {pid1}): the chip process was killed by signal 9")
    );
    n.run(
        move |o| {
            o.submit_next_level(
                0,
                &[
                    NextLevelArg::Tensor(b),
                    NextLevelArg::Tensor(b),
                    NextLevelArg::Tensor(out),
                ],
                &CallConfig::default(),
                0,
            )
            .map(|_| ())
        },
        &CallConfig::default(),
        None,
    )
    .unwrap();
    n.close();
}

#[test]
fn submit_checks() {
    let _serial = SERIAL.lock();
    let mut n = node(false, 1);
    let private = [0f32; 4];
    let t = Tensor::from_raw(private.as_ptr() as u64, &[4], DType::F32);
    let e = n
        .run(
            move |o| {
                o.submit_next_level(
                    0,
                    &[
                        NextLevelArg::Tensor(t),
                        NextLevelArg::Tensor(t),
                        NextLevelArg::Tensor(t),
                    ],
                    &CallConfig::default(),
                    0,
                )
                .map(|_| ())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("argument 0 is not in shared memory"),
        "{e}"
    );
    let e = n
        .run(
            |o| {
                o.submit_next_level(0, &[], &CallConfig::default(), 3)
                    .map(|_| ())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("worker 3 is not a chip of this node"),
        "{e}"
    );
    let mut bad = CallConfig::default();
    bad.runtime_env.ring_heap = [1000, 0, 0, 0];
    let e = n
        .run(
            move |o| o.submit_next_level(1, &[], &bad, 0).map(|_| ()),
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "RuntimeEnv: ring_heap[0] must be a power of 2 >= 1024 (bytes per ring), got 1000"
        ),
        "{e}"
    );
}

#[test]
fn node_alloc_is_shared_with_chips() {
    let _serial = SERIAL.lock();
    let mut n = node(true, 1);
    let (_ba, a) = shared_f32(64, |i| i as f32);
    let (bo, out) = shared_f32(64, |_| 0.0);
    n.run(
        move |o| {
            o.engine().scope(|_| Ok(()))?;
            let tmp = o
                .alloc(TensorSpec::new(&[64], DType::F32).unwrap())?
                .output(0);
            o.submit_next_level(
                0,
                &[
                    NextLevelArg::Tensor(a),
                    NextLevelArg::Tensor(a),
                    NextLevelArg::Tensor(tmp),
                ],
                &CallConfig::default(),
                0,
            )?;
            o.submit_next_level(
                0,
                &[
                    NextLevelArg::Tensor(tmp),
                    NextLevelArg::Tensor(a),
                    NextLevelArg::Tensor(out),
                ],
                &CallConfig::default(),
                0,
            )?;
            Ok(())
        },
        &CallConfig::default(),
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let want: Vec<f32> = (0..64).map(|i| 2.0 * (4.0 * i as f32 + i as f32)).collect();
    assert_eq!(read(&bo, 64), want);
}

/// Chip `worker` runs `nap(ms)` writing `out`.
fn nap_on(
    o: &mut NodeOrchestrator<'_, '_>,
    out: Tensor,
    ms: i64,
    worker: usize,
) -> Result<(), RuntimeFailure> {
    o.submit_next_level(
        2,
        &[NextLevelArg::Tensor(out), NextLevelArg::Int(ms)],
        &CallConfig::default(),
        worker,
    )
    .map(|_| ())
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
}

#[test]
fn stopped_chip_fails_its_task_and_holds_up_no_one() {
    let _serial = SERIAL.lock();
    let mut n = node_with(true, 2, Duration::from_millis(400));
    let pids = n.chip_pids();
    let (b0, o0) = shared_f32(1, |_| 0.0);
    let (b1, o1) = shared_f32(1, |_| 0.0);
    // safety: kill only sends a signal to a chip process of ours; no memory is involved.
    unsafe { libc::kill(pids[0], libc::SIGSTOP) };
    let t0 = Instant::now();
    let e = n
        .run(
            move |o| {
                nap_on(o, o0, 1, 0)?;
                nap_on(o, o1, 1, 1)
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    let took = t0.elapsed();
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "chip 0 (pid {}): not responding: no heartbeat for ",
            pids[0]
        )),
        "{text}"
    );
    assert!(text.contains("process state T, stopped"), "{text}");
    // The node's 400 ms timeout decided it, never earlier (a stall never noticed hangs
    // the test: the watchdog ends it). The stall is counted from the chip's last
    // heartbeat, which may precede the run (and, on a loaded machine, SIGSTOP by more
    // than one period).
    let stalled_ms: u64 = text
        .split("no heartbeat for ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        stalled_ms >= 400 && took >= Duration::from_millis(250),
        "stall of {stalled_ms} ms noticed after {took:?}"
    );
    // The healthy chip's task ran meanwhile.
    assert_eq!(read(&b1, 1), vec![1.0]);
    assert_eq!(read(&b0, 1), vec![0.0]);
    // Continued, the chip answers its old request, then works again — also when the
    // next run starts right away (before the chip's watchdog beats again).
    // safety: kill only sends a signal to a chip process of ours; no memory is involved.
    unsafe { libc::kill(pids[0], libc::SIGCONT) };
    n.run(move |o| nap_on(o, o1, 1, 0), &CallConfig::default(), None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&b0, 1), vec![1.0]);
    for _ in 0..3 {
        // safety: kill only sends a signal to a chip process of ours; no memory is involved.
        unsafe { libc::kill(pids[0], libc::SIGSTOP) };
        n.run(move |o| nap_on(o, o1, 1, 0), &CallConfig::default(), None)
            .unwrap_err();
        // safety: kill only sends a signal to a chip process of ours; no memory is involved.
        unsafe { libc::kill(pids[0], libc::SIGCONT) };
        n.run(move |o| nap_on(o, o1, 1, 0), &CallConfig::default(), None)
            .unwrap_or_else(|e| panic!("after SIGCONT: {e}"));
    }
    // Stopped again, with a run in flight on it from another thread: close returns,
    // killing it (a close that waited for the chip to answer would hang).
    // safety: kill only sends a signal to a chip process of ours; no memory is involved.
    unsafe { libc::kill(pids[0], libc::SIGSTOP) };
    let n = Arc::new(parking_lot::Mutex::new(n));
    let h = n.lock().handle();
    let runner = {
        let n = n.clone();
        std::thread::spawn(move || {
            n.lock()
                .run(move |o| nap_on(o, o0, 1, 0), &CallConfig::default(), None)
                .map(|_| ())
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    h.request_close();
    n.lock().close();
    let e = runner.join().unwrap().unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("chip 0 (pid {}): not responding", pids[0])),
        "{e}"
    );
    assert!(
        pids.iter().all(|&p| !alive(p)),
        "chips {pids:?} outlived close"
    );
}

#[test]
fn cancel_interrupts_a_waiting_run_and_the_node_stays_usable() {
    let _serial = SERIAL.lock();
    for processes in [true, false] {
        let mut n = node(processes, 2);
        let (b0, o0) = shared_f32(1, |_| 0.0);
        let h = n.handle();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            h.cancel();
        });
        let t0 = Instant::now();
        let e = n
            .run(
                move |o| nap_on(o, o0, 1500, 0),
                &CallConfig::default(),
                None,
            )
            .unwrap_err();
        assert!(matches!(e, NodeError::Interrupted(_)), "{e}");
        canceller.join().unwrap();
        // Interrupted before its task ended (the nap sets its output at its end).
        assert_eq!(read(&b0, 1), vec![0.0]);
        // The next run waits for the interrupted task's late reply, then runs.
        let (b1, o1) = shared_f32(1, |_| 0.0);
        n.run(move |o| nap_on(o, o1, 1, 0), &CallConfig::default(), None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(t0.elapsed() >= Duration::from_millis(1500));
        assert_eq!((read(&b0, 1), read(&b1, 1)), (vec![1.0], vec![1.0]));
        n.close();
    }
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

fn maps() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

fn children() -> usize {
    let mut n = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let p = t.unwrap().path().join("children");
        n += std::fs::read_to_string(p)
            .unwrap_or_default()
            .split_whitespace()
            .count();
    }
    n
}

#[test]
fn init_close_cycles_leak_nothing() {
    let _serial = SERIAL.lock();
    let (_b, t) = shared_f32(1, |_| 0.0);
    let cycle = || {
        let mut n = node(true, 2);
        n.run(
            move |o| nap_on(o, t, 0, 0).and_then(|_| nap_on(o, t, 0, 1)),
            &CallConfig::default(),
            None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        n.chip_arena_stats(1).unwrap();
        let pids = n.chip_pids();
        drop(n);
        pids
    };
    cycle();
    let before = (
        maps(),
        count("/proc/self/fd"),
        count("/proc/self/task"),
        children(),
    );
    for _ in 0..30 {
        let pids = cycle();
        assert!(pids.iter().all(|&p| !alive(p)));
    }
    let after = (
        maps(),
        count("/proc/self/fd"),
        count("/proc/self/task"),
        children(),
    );
    eprintln!("maps/fds/threads/children before {before:?} after {after:?}");
    assert!(
        after.0 <= before.0 + 4,
        "mappings {} -> {}",
        before.0,
        after.0
    );
    assert_eq!(
        (after.1, after.2, after.3),
        (before.1, before.2, before.3),
        "fds, threads, children (maps {} -> {})",
        before.0,
        after.0
    );
}

#[test]
fn a_node_is_unusable_after_fork_and_the_parent_keeps_it() {
    let _serial = SERIAL.lock();
    let mut n = node(true, 1);
    let parent = std::process::id();
    let pids = n.chip_pids();
    // safety: the child only runs the node's fork checks and drop, then _exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let ok = matches!(n.run(|_| Ok(()), &CallConfig::default(), None), Err(NodeError::Forked(p)) if p == parent)
            && matches!(n.chip_arena_stats(0), Err(NodeError::Forked(_)))
            && NodeError::Forked(parent).to_string()
                == format!(
                    "this node was created in process {parent}; it cannot be used after fork()"
                );
        drop(n);
        // safety: ends the forked child at once, running none of the parent's
        // destructors or atexit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // A child that hangs hangs this wait: the watchdog ends the test.
    // safety: a blocking reap of our own child into a local.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    assert!(alive(pids[0]));
    let (b, o) = shared_f32(1, |_| 0.0);
    n.run(move |o_| nap_on(o_, o, 0, 0), &CallConfig::default(), None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&b, 1), vec![1.0]);
}

/// Each chip has a lane of its own in the node's engine, served by its own dispatch
/// thread: a backlog of ready tasks on one chip holds up no task of another (before
/// lanes, 8 ready 50 ms tasks on chip 0 kept every dispatch thread waiting for chip 0's
/// turn and delayed chip 1's task by ~250 ms, past about half of the backlog).
#[test]
fn a_backlog_on_one_chip_holds_up_no_task_of_another() {
    let _serial = SERIAL.lock();
    for processes in [false, true] {
        let mut n = node(processes, 2);
        let naps: Vec<(SharedBuffer, Tensor)> = (0..8).map(|_| shared_f32(1, |_| 0.0)).collect();
        let outs: Vec<Tensor> = naps.iter().map(|(_, t)| *t).collect();
        let (b1, o1) = shared_f32(1, |_| 0.0);
        let flag = b1.as_ptr() as usize;
        let backlog: Vec<usize> = naps.iter().map(|(b, _)| b.as_ptr() as usize).collect();
        let run_ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ended = run_ended.clone();
        // Watch chip 1's output from another thread: how many of chip 0's tasks had
        // ended when chip 1's task did?
        let watcher = std::thread::spawn(move || loop {
            // safety: the buffers outlive the run (joined below); f32s written by the chips.
            let done = |p: usize| unsafe { std::ptr::read_volatile(p as *const f32) } == 1.0;
            if done(flag) {
                return Some(backlog.iter().filter(|&&p| done(p)).count());
            }
            if ended.load(std::sync::atomic::Ordering::Acquire) {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        });
        n.run(
            move |o| {
                for &out in &outs {
                    nap_on(o, out, 100, 0)?;
                }
                nap_on(o, o1, 1, 1)
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        run_ended.store(true, std::sync::atomic::Ordering::Release);
        let backlog_done = watcher.join().unwrap();
        assert!(naps.iter().all(|(b, _)| read(b, 1) == vec![1.0]));
        assert_eq!(read(&b1, 1), vec![1.0]);
        // Chip 0's backlog takes 8 x 100 ms; chip 1's task must not wait for it.
        assert!(
            backlog_done.is_some_and(|k| k <= 3),
            "chip 1's task ended after {backlog_done:?} of chip 0's 8 tasks (processes: {processes})"
        );
    }
}

/// Host workers beside a chip: a host task that doubles `c` in place runs after the chip
/// task that writes `c` and before one that reads it (inferred from the tensors they
/// share, with the directions each submit gives); each host task runs in a process of
/// its own with its config whole; a failing host task's text is the whole error, and a
/// host worker that dies is named with its label. The node stays usable.
#[test]
fn host_workers_share_the_chips_dag() {
    let _serial = SERIAL.lock();
    let (bh, hseen) = shared_f32(4, |_| 0.0);
    let hseen_addr = hseen.data_ptr() as u64;
    let entry: HostEntry = Arc::new(move |c: &HostCall<'_>| {
        let seen = hseen_addr as *mut f32;
        match c.callable {
            // Double the tensor in place; record the worker and the config's window.
            0 => {
                let HostArg::Tensor(t) = c.args[0] else {
                    return Err("expected a tensor".into());
                };
                let n = t.shape[0] as usize;
                // safety: the task's tensor is `n` f32s mapped in this process; the
                // node orders this task after its writer and before its reader.
                let x = unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, n) };
                x.iter_mut().for_each(|v| *v *= 2.0);
                // safety: `seen` is 4 shared f32s; one host task at a time writes it.
                unsafe {
                    *seen.add(c.worker) = c.config.runtime_env.ring_task_window[0] as f32;
                    *seen.add(2) = std::process::id() as f32;
                }
                Ok(())
            }
            1 => Err("sub_worker: ValueError: no".into()),
            _ => {
                // safety: ends this host worker's process.
                unsafe { libc::_exit(3) }
            }
        }
    });
    let opts = NodeOptions {
        device_ids: vec![0],
        chip_cores: 1,
        host: Some(HostWorkers {
            labels: vec!["sub_worker 0".into(), "sub_worker 1".into()],
            pool: 2,
            entry,
            start: None,
            stop: None,
        }),
        ..Default::default()
    };
    let mut n = Node::new(opts, Arc::new(RwLock::new(vec![vadd2()])), &NoForkHooks)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((n.chips(), n.host_pids().len()), (1, 2));
    let (ba, a) = shared_f32(64, |i| i as f32);
    let (bb, b) = shared_f32(64, |_| 1.0);
    let (bc, c) = shared_f32(64, |_| 0.0);
    let (bd, d) = shared_f32(64, |_| 0.0);
    let _keep = (&ba, &bb, &bh);
    let host_pids = n.host_pids();
    let rep = n
        .run(
            move |o| {
                o.submit_next_level(
                    0,
                    &[
                        NextLevelArg::Tensor(a),
                        NextLevelArg::Tensor(b),
                        NextLevelArg::Tensor(c),
                    ],
                    &CallConfig::default(),
                    0,
                )?;
                let mut cfg = CallConfig::default();
                cfg.runtime_env.ring_task_window = [64, 0, 0, 0];
                o.submit_host(
                    0,
                    &[ArgDir::InOut],
                    &[NextLevelArg::Tensor(c)],
                    &cfg,
                    Some(1),
                )?;
                o.submit_next_level(
                    0,
                    &[
                        NextLevelArg::Tensor(c),
                        NextLevelArg::Tensor(c),
                        NextLevelArg::Tensor(d),
                    ],
                    &CallConfig::default(),
                    0,
                )
                .map(|_| ())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rep.tasks.len(), 3);
    assert!(rep.tasks[1].run.is_none() && rep.tasks[1].error.is_none());
    let want: Vec<f32> = (0..64)
        .map(|i| 2.0 * 2.0 * 2.0 * 2.0 * (i as f32 + 1.0))
        .collect();
    assert_eq!(read(&bd, 64), want);
    assert_eq!(read(&bc, 64)[1], 2.0 * 2.0 * 2.0);
    let seen = read(&bh, 4);
    assert_eq!(seen[1], 64.0, "host worker 1 ran it, with its config");
    assert_eq!(seen[2] as i32, host_pids[1]);
    // A host task's own failure is the whole text; the node keeps working.
    let e = n
        .run(
            |o| {
                o.submit_host(1, &[], &[], &CallConfig::default(), None)
                    .map(|_| ())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    assert_eq!(e.to_string(), "sub_worker: ValueError: no");
    // A host worker that dies is named by its label and pid.
    let e = n
        .run(
            |o| {
                o.submit_host(2, &[], &[], &CallConfig::default(), Some(0))
                    .map(|_| ())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "sub_worker 0 (pid {}): the process exited with status 3",
            host_pids[0]
        )
    );
    let e = n
        .run(
            |o| {
                o.submit_host(0, &[], &[], &CallConfig::default(), Some(5))
                    .map(|_| ())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("host worker 5 does not exist (the node has 2)"),
        "{e}"
    );
    n.close();
}
