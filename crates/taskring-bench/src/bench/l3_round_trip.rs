//! B6 l3: `submit_next_level` round trip and throughput of an L3 node
//! (`taskring::node::Node`, chips as forked processes, one core thread each).
//!
//! - `rt_1task`: one L3 run (`Node::run`) holding one tiny L2 task (a program that
//!   submits one NOOP) to chip 0: the wall time of the whole run — the node's
//!   orchestration, the frame encode, the futex handoff to the chip process, its L2
//!   dispatch (config resolution, arena hit, run), the reply, the node's completion;
//! - `rt_1task_tensor`: the same with one shared-memory tensor argument (the chip maps
//!   the region on first use, then resolves it per task);
//! - `rt_in_run`: many tiny L2 tasks per L3 run to chip 0 (one in flight per chip):
//!   run time / tasks;
//! - `rt_after_busy`: the 1-task round trips right after such a run;
//! - `throughput_{k}chips`: many tiny L2 tasks per run spread round-robin over k = 1..4
//!   chip processes, each task with its own `CallConfig`, cycling over three sizings
//!   (default; window 16/4/4/4 with 4 KiB heaps; window 1024 with 16 MiB heaps) — each
//!   chip builds each sizing once (warm-up) and hits its arena cache after.
//!
//! Baseline: a bare shared-memory ping-pong between this process and a forked child
//! (one anonymous MAP_SHARED page, a request and a response word, futex wake/wait with
//! the same spin-then-futex waiting as the node's mailbox); its round trip, and its
//! round trips per second as the throughput baseline.

use super::*;
use parking_lot::RwLock;
use serde_json::json;
use std::sync::atomic::{AtomicU32, Ordering::*};
use std::sync::Arc;
use std::time::Duration;
use taskring::builtin::NOOP;
use taskring::internals::node::mailbox::{futex_wake, wait_until};
use taskring::node::shm::SharedBuffer;
use taskring::node::ChipCallable;
use taskring::node::*;
use taskring::*;

fn callables() -> Arc<RwLock<Vec<ChipCallable>>> {
    Arc::new(RwLock::new(vec![
        ChipCallable {
            program: Program::new("tiny", |o, _| o.submit(NOOP, &TaskArgs::new()).map(|_| ())),
            signature: vec![],
        },
        ChipCallable {
            program: Program::new("tiny_in", |o, args| {
                let mut t = TaskArgs::new();
                t.input(args[0].tensor()?);
                o.submit(NOOP, &t).map(|_| ())
            }),
            signature: vec![ArgDir::In],
        },
    ]))
}

fn make_node(chips: usize) -> Result<Node, String> {
    let opts = NodeOptions {
        device_ids: (0..chips as u32).collect(),
        chip_processes: true,
        chip_cores: 1,
        prewarm: Some(CallConfig::default()),
        ..Default::default()
    };
    Node::new(opts, callables(), &NoForkHooks).map_err(|e| format!("node with {chips} chips: {e}"))
}

fn configs() -> Vec<CallConfig> {
    let def = CallConfig::default();
    let mut small = CallConfig::default();
    small.runtime_env.ring_task_window = [16, 4, 4, 4];
    small.runtime_env.ring_heap = [4096; 4];
    small.runtime_env.ring_dep_pool = [8; 4];
    let mut mid = CallConfig::default();
    mid.runtime_env.ring_task_window = [1024; 4];
    mid.runtime_env.ring_heap = [16 << 20; 4];
    mid.runtime_env.ring_dep_pool = [1024; 4];
    vec![def, small, mid]
}

/// One L3 run of `m` tiny tasks over `chips` chips (round-robin), configs cycling when
/// `vary`; returns seconds.
fn l3_run(
    node: &mut Node,
    m: usize,
    chips: usize,
    vary: bool,
    tensor: Option<Tensor>,
) -> Result<f64, String> {
    let cfgs = Arc::new(configs());
    let t0 = Instant::now();
    let rep = node
        .run(
            move |o| {
                for i in 0..m {
                    // Chip i % chips gets configs cycling over the three sizings.
                    let cfg = if vary {
                        &cfgs[(i / chips) % cfgs.len()]
                    } else {
                        &cfgs[0]
                    };
                    match tensor {
                        Some(t) => {
                            o.submit_next_level(1, &[NextLevelArg::Tensor(t)], cfg, i % chips)?
                        }
                        None => o.submit_next_level(0, &[], cfg, i % chips)?,
                    };
                }
                Ok(())
            },
            &CallConfig::default(),
            None,
        )
        .map_err(|e| e.to_string())?;
    let dt = t0.elapsed().as_secs_f64();
    let ran_one =
        |t: &ChipTaskReport| t.error.is_none() && t.run.as_ref().is_some_and(|r| r.tasks == 1);
    if rep.tasks.len() != m || !rep.tasks.iter().all(ran_one) {
        return Err(format!("unexpected L3 report: {} tasks", rep.tasks.len()));
    }
    Ok(dt)
}

/// The bare ping-pong: `n` round trips per sample, `reps` samples of µs per round trip.
///
/// Left whole (over 80 lines) on purpose: it is one protocol — map the shared page,
/// fork, the child's serve loop, the parent's timed round trips, stop, reap, unmap —
/// whose parts share the raw page and the child's pid and must run in this order; split
/// up, the unsafe lifetime of the page would span several functions.
fn ping_pong(n: usize, reps: usize) -> Result<Vec<f64>, String> {
    // safety: an anonymous shared page, checked.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    // safety: the zeroed page holds three AtomicU32 words on separate cache lines.
    let word = |i: usize| unsafe { &*((page as *mut u8).add(i * 64) as *const AtomicU32) };
    let (req, resp, stop) = (word(0), word(1), word(2));
    // safety: getpid has no preconditions and cannot fail.
    let parent = unsafe { libc::getpid() };
    // safety: the child only touches the shared words and futexes, then _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // safety: prctl with integer arguments, getppid and _exit touch no memory of
        // ours; _exit leaves the forked child without running the parent's destructors.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
        }
        let mut served = 0u32;
        loop {
            wait_until(
                req,
                || req.load(Acquire) != served || stop.load(Acquire) != 0,
                || false,
                Duration::from_millis(50),
            );
            if stop.load(Acquire) != 0 {
                // safety: ends the forked child at once, running none of the parent's
                // destructors.
                unsafe { libc::_exit(0) };
            }
            served = req.load(Acquire);
            resp.store(served, Release);
            futex_wake(resp);
        }
    }
    let mut seq = 0u32;
    let mut trip = |k: usize| -> bool {
        for _ in 0..k {
            seq = seq.wrapping_add(1);
            let want = seq;
            req.store(want, Release);
            futex_wake(req);
            if !wait_until(
                resp,
                || resp.load(Acquire) == want,
                || false,
                Duration::from_millis(50),
            ) {
                return false;
            }
        }
        true
    };
    trip(n / 4);
    let mut v = vec![];
    for _ in 0..reps {
        let t0 = Instant::now();
        trip(n);
        v.push(t0.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    stop.store(1, Release);
    futex_wake(req);
    let mut status = 0;
    // safety: waitpid reaps our own child into a local; the page is unmapped after the
    // child is gone and after the last use of `req`, `resp` and `stop`, which point
    // into it.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
        libc::munmap(page, 4096);
    }
    Ok(v)
}

/// 1-task runs timed right after a run of many tasks (`rt_after_busy`): what a serving
/// loop sees after a large dispatch, while the node's idle dispatch threads are still
/// in the state that run left them in (`Idle::DISPATCH_SPIN`, taskring's `chip/core.rs`).
const AFTER_BUSY: usize = 100;

/// Untimed 1-task runs for this long after [`AFTER_BUSY`]'s, before the steady round
/// trips are timed.
const SETTLE: Duration = Duration::from_millis(5);

/// Round trips to one chip, per rep: one run of `many` tasks (µs per task); the median µs
/// of the [`AFTER_BUSY`] 1-task runs after it; then, after [`SETTLE`], the medians of
/// `rt_batch` 1-task runs without and with a tensor, taken in turn (so that both see the
/// same state of the machine).
/// `node` has one chip; `t` is the tensor argument (in shared memory).
fn round_trips(
    node: &mut Node,
    t: Tensor,
    reps: usize,
    rt_batch: usize,
    many: usize,
) -> Result<[Series; 4], String> {
    for _ in 0..50 {
        l3_run(node, 1, 1, false, None)?;
        l3_run(node, 1, 1, false, Some(t))?;
    }
    l3_run(node, many, 1, false, None)?;
    let (mut r1, mut r1t, mut rin, mut after) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        rin.push(l3_run(node, many, 1, false, None)? * 1e6 / many as f64);
        after.push(median_of(AFTER_BUSY, || {
            Ok(l3_run(node, 1, 1, false, None)? * 1e6)
        })?);
        let t0 = Instant::now();
        while t0.elapsed() < SETTLE {
            l3_run(node, 1, 1, false, None)?;
        }
        let (mut a, mut b) = (Vec::with_capacity(rt_batch), Vec::with_capacity(rt_batch));
        for _ in 0..rt_batch {
            a.push(l3_run(node, 1, 1, false, None)? * 1e6);
            b.push(l3_run(node, 1, 1, false, Some(t))? * 1e6);
        }
        r1.push(median(&a));
        r1t.push(median(&b));
    }
    Ok([
        Series::new("µs", r1),
        Series::new("µs", r1t),
        Series::new("µs", rin),
        Series::new("µs", after),
    ])
}

/// The round trips' line and cases against the ping-pong `pp`.
fn judge_round_trips(
    b: &mut Bench,
    pp: &Series,
    [r1, r1t, rin, after]: &[Series; 4],
    rt_batch: usize,
    many: usize,
) {
    b.say(&format!(
        "   round trip: 1 task per L3 run {:.1} µs ({:.1} with a tensor; {:.1} in the {AFTER_BUSY} runs after a busy run), {:.1} µs/task with {many} tasks per run; baseline {:.2} µs",
        r1.median, r1t.median, after.median, rin.median, pp.median
    ));
    let ratio = r1.median / pp.median;
    b.push(
        Case::new(
            "rt_1task",
            &format!(
                "median µs of {rt_batch} L3 runs holding one tiny L2 task (Node::run wall time)"
            ),
            r1.clone(),
        )
        .with_baseline(
            "shared-memory futex ping-pong between two processes",
            pp.clone(),
            "taskring round trip / ping-pong round trip",
            ratio,
        )
        .bar(
            "round trip ≤ 8 µs and ≤ 10× the ping-pong",
            rt_bar_met(r1.median, pp.median),
        ),
    );
    b.push(
        Case::new(
            "rt_1task_tensor",
            "the same with one shared-memory tensor argument",
            r1t.clone(),
        )
        .with_baseline(
            "shared-memory futex ping-pong",
            pp.clone(),
            "taskring round trip / ping-pong round trip",
            r1t.median / pp.median,
        ),
    );
    b.push(
        Case::new(
            "rt_after_busy",
            &format!(
                "median µs of the {AFTER_BUSY} 1-task L3 runs right after a run of {many} tasks"
            ),
            after.clone(),
        )
        .with_baseline(
            "shared-memory futex ping-pong",
            pp.clone(),
            "taskring round trip / ping-pong round trip",
            after.median / pp.median,
        ),
    );
    b.push(
        Case::new(
            "rt_in_run",
            &format!("µs per L2 task of one L3 run of {many} tiny tasks to one chip"),
            rin.clone(),
        )
        .with_baseline(
            "shared-memory futex ping-pong",
            pp.clone(),
            "taskring per-task time / ping-pong round trip",
            rin.median / pp.median,
        ),
    );
}

/// `docs/benchmarks.md`'s round-trip bar: at most 8 µs and at most 10 times the ping-pong.
fn rt_bar_met(rt_us: f64, ping_pong_us: f64) -> bool {
    rt_us <= 8.0 && rt_us <= 10.0 * ping_pong_us
}

/// Throughput to `chips` chips with differing per-task configs: its line and case;
/// returns the median tasks/s.
fn throughput(
    b: &mut Bench,
    pp: &Series,
    chips: usize,
    (reps, many): (usize, usize),
    prog: &mut Progress,
) -> Result<f64, String> {
    let mut node = make_node(chips)?;
    l3_run(&mut node, many, chips, true, None)?;
    let mut v = vec![];
    for _ in 0..reps {
        v.push(many as f64 / l3_run(&mut node, many, chips, true, None)?);
    }
    let builds: Vec<u64> = (0..chips)
        .map(|w| node.chip_arena_stats(w).map(|s| s.builds).unwrap_or(0))
        .collect();
    drop(node);
    let s = Series::new("tasks/s", v);
    let base_tps = 1e6 / pp.median;
    let ratio = s.median / base_tps;
    prog.tick(&format!("{chips} chips"));
    b.say(&format!("   {chips} chip(s): {:.0} L2 tasks/s ({:.2}x the ping-pong's round trips/s), arena builds per chip {builds:?}", s.median, ratio));
    b.push(
        Case::new(&format!("throughput_{chips}chips"), &format!("L2 tasks/s of one L3 run of {many} tiny tasks round-robin over {chips} chip processes, 3 per-task configs"), s.clone())
            .with_baseline("ping-pong round trips/s", Series::new("round trips/s", pp.samples.iter().map(|x| 1e6 / x).collect()), "tasks/s / ping-pong round trips/s", ratio)
            .bar(
                if chips == 2 { "≥ 150 k L2 tasks/s with 2 chips" } else { "grows with chips (no bar of its own)" },
                chips != 2 || s.median >= 150_000.0,
            )
            .extra(json!({ "arena_builds_per_chip": builds })),
    );
    Ok(s.median)
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b6",
        "l3",
        "submit_next_level round trip and throughput to 1..4 chip processes",
        opts,
    );
    let reps = opts.reps.max(5);
    let (rt_batch, many, pp_n) = if opts.quick {
        (50, 200, 2000)
    } else {
        (300, 2000, 20000)
    };
    let mut prog = Progress::new("b6", 2 + 4);

    // Baseline first (a clean process: no node threads yet).
    let pp = Series::new("µs", ping_pong(pp_n, reps)?);
    prog.tick("ping-pong");
    b.say(&format!(
        "   baseline shared-memory futex ping-pong: {:.2} µs per round trip ({:.0} round trips/s)",
        pp.median,
        1e6 / pp.median
    ));

    // Round trips, one chip.
    let mut node = make_node(1)?;
    let shared = SharedBuffer::new(4096).map_err(|e| e.to_string())?;
    let t = Tensor::from_raw(shared.as_ptr() as u64, &[16], DType::F32);
    let rts = round_trips(&mut node, t, reps, rt_batch, many)?;
    drop(node);
    prog.tick("round trips");
    judge_round_trips(&mut b, &pp, &rts, rt_batch, many);
    let r1 = &rts[0];
    let ratio = r1.median / pp.median;

    // Throughput to 1..4 chips with differing per-task configs.
    let mut tp = vec![];
    for chips in 1..=4usize {
        tp.push(throughput(&mut b, &pp, chips, (reps, many), &mut prog)?);
    }
    prog.done();
    let met = |ok: bool| if ok { "met" } else { "missed" };
    let summary = format!(
        "round trip {:.1} µs (bar ≤ 8 and ≤ 10x ping-pong: {}, {:.1}x ping-pong {:.2} µs); throughput 1..4 chips {} tasks/s (bar ≥ 150k with 2 chips: {})",
        r1.median,
        met(rt_bar_met(r1.median, pp.median)),
        ratio,
        pp.median,
        tp.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join("/"),
        met(tp[1] >= 150_000.0)
    );
    Ok(b.finish(
        json!({ "reps": reps, "rt_batch": rt_batch, "tasks_per_run": many, "pingpong_round_trips_per_sample": pp_n,
            "chip_cores": 1, "node_cores": "1 per chip (default; a lane each)", "chip_processes": true,
            "configs": configs().iter().map(|c| format!("{:?}", c.runtime_env)).collect::<Vec<_>>() }),
        summary,
    ))
}
