//! B4 ring curve: throughput, peak RSS and back-pressure against the ring sizing, and
//! the time to diagnose undersized rings.
//!
//! Window curve: `ring_task_window` (all four rings) in 2^3..2^16, heap and dep pool at
//! their defaults, for three patterns submitted in scopes of `min(window/2, 1024)` tasks
//! (a scope must hold fewer than `window` tasks; half a window lets the next scope start
//! while the previous one drains):
//! - `chain`: every task INOUT on one tensor;
//! - `stencil`: a 1-D 3-point stencil over W columns × T steps: one host buffer of
//!   (T+1)·W rows, step t's task j reads the row slice (t, j−1..j+1) and writes row
//!   (t+1, j) — all views of one buffer, dependencies via the tensormap;
//! - `fanout`: blocks of one producer writing a row of a host buffer and K consumers
//!   reading it.
//!
//! Heap curve: `ring_heap` (all rings) in 2^12..2^28 at the default window, for
//! `fanout_heap`: blocks (one scope each) of a producer with a 4 KiB runtime output and
//! 15 consumers reading it.
//!
//! Per point: throughput (median of reps, uninstrumented), peak RSS (`VmHWM`, reset before
//! the point; a new chip per point so earlier arenas are unmapped), and back-pressure from
//! one extra instrumented run that times every submit: submits slower than 5 µs are
//! counted as stalled and their time summed (an approximation: a preemption on this
//! shared box also counts). The ratio is throughput against the default sizing's.
//!
//! Undersized cases must fail with the right code; the time from the start of the
//! failing submit to its error return is the diagnosis time (bar < 10 ms) — for a
//! scope deadlock, which the engine reports when the scope ends (the rest of the scope
//! is counted, so the error can say which window holds it), from the start of the
//! first submit past the window to the scope's error return; the whole failed run's
//! wall time is reported too.

use super::*;
use serde_json::json;
use taskring::builtin::NOOP;
use taskring::*;

const STALL_NS: u64 = 5_000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Pat {
    Chain,
    Stencil,
    Fanout,
    FanoutHeap,
}

impl Pat {
    fn name(self) -> &'static str {
        match self {
            Pat::Chain => "chain",
            Pat::Stencil => "stencil",
            Pat::Fanout => "fanout",
            Pat::FanoutHeap => "fanout_heap",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Sizes {
    chain: u64,
    w: u64,
    t: u64,
    blocks: u64,
    k: u64,
    heap_blocks: u64,
}

impl Sizes {
    fn tasks(&self, p: Pat) -> u64 {
        match p {
            Pat::Chain => self.chain,
            Pat::Stencil => self.w * self.t,
            Pat::Fanout => self.blocks * (self.k + 1),
            Pat::FanoutHeap => self.heap_blocks * 16,
        }
    }
    fn buf_elems(&self, p: Pat) -> usize {
        match p {
            Pat::Chain => 16,
            Pat::Stencil => ((self.t + 1) * self.w * 16) as usize,
            Pat::Fanout => (self.blocks * 16) as usize,
            Pat::FanoutHeap => 16,
        }
    }
}

/// Per-submit timing (instrumented runs).
#[derive(Default, Clone, Copy, Debug)]
struct Stalls {
    submits: u64,
    stalled: u64,
    stalled_ns: u64,
    orch_ns: u64,
}

/// Submits one pattern's tasks in scopes of `scope` tasks (a fresh scope when asked),
/// timing each submit when `instrument`.
struct Submitter {
    scope: u64,
    instrument: bool,
    in_scope: u64,
    open: bool,
    st: Stalls,
}

impl Submitter {
    #[inline]
    fn submit(
        &mut self,
        o: &mut Orchestrator<'_>,
        t: &TaskArgs,
        fresh_scope: bool,
    ) -> Result<TaskOutputs, RuntimeFailure> {
        if !self.open || fresh_scope || self.in_scope == self.scope {
            if self.open {
                o.end_scope()?;
            }
            self.open = true;
            o.begin_scope(false)?;
            self.in_scope = 0;
        }
        self.in_scope += 1;
        if self.instrument {
            let t0 = Instant::now();
            let r = o.submit(NOOP, t);
            let dt = t0.elapsed().as_nanos() as u64;
            self.st.submits += 1;
            if dt > STALL_NS {
                self.st.stalled += 1;
                self.st.stalled_ns += dt;
            }
            r
        } else {
            o.submit(NOOP, t)
        }
    }
}

/// Every task of pattern `p` over `buf`, through `sub`.
fn submit_pattern(
    o: &mut Orchestrator<'_>,
    p: Pat,
    sz: Sizes,
    buf: Tensor,
    sub: &mut Submitter,
) -> Result<(), RuntimeFailure> {
    match p {
        Pat::Chain => {
            for _ in 0..sz.chain {
                let mut t = TaskArgs::new();
                t.inout(buf);
                sub.submit(o, &t, false)?;
            }
        }
        Pat::Stencil => {
            let rows = buf
                .view(&[((sz.t + 1) * sz.w) as u32, 16], 0, None)
                .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))?;
            for step in 0..sz.t {
                for j in 0..sz.w {
                    let lo = step * sz.w + j.saturating_sub(1);
                    let hi = step * sz.w + (j + 2).min(sz.w);
                    let mut t = TaskArgs::new();
                    t.input(rows.rows_slice(lo, hi).expect("slice"));
                    let me = (step + 1) * sz.w + j;
                    t.output_existing(rows.rows_slice(me, me + 1).expect("row"));
                    sub.submit(o, &t, false)?;
                }
            }
        }
        Pat::Fanout => {
            let rows = buf
                .view(&[sz.blocks as u32, 16], 0, None)
                .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))?;
            for bk in 0..sz.blocks {
                let row = rows.rows_slice(bk, bk + 1).expect("row");
                let mut t = TaskArgs::new();
                t.output_existing(row);
                sub.submit(o, &t, false)?;
                for _ in 0..sz.k {
                    let mut t = TaskArgs::new();
                    t.input(row);
                    sub.submit(o, &t, false)?;
                }
            }
        }
        Pat::FanoutHeap => {
            let spec = Orchestrator::spec(&[1024], DType::F32)?;
            for _ in 0..sz.heap_blocks {
                let mut t = TaskArgs::new();
                t.output(spec);
                let out = sub.submit(o, &t, true)?.output(0);
                for _ in 0..15 {
                    let mut t = TaskArgs::new();
                    t.input(out);
                    sub.submit(o, &t, false)?;
                }
            }
        }
    }
    Ok(())
}

fn program(
    p: Pat,
    sz: Sizes,
    scope: u64,
    instrument: bool,
    out: std::sync::Arc<std::sync::Mutex<Stalls>>,
) -> Program {
    Program::new(p.name(), move |o, args| {
        let buf = args[0].tensor()?;
        let mut sub = Submitter {
            scope,
            instrument,
            in_scope: 0,
            open: false,
            st: Stalls::default(),
        };
        let t_orch = Instant::now();
        submit_pattern(o, p, sz, buf, &mut sub)?;
        if sub.open {
            o.end_scope()?;
        }
        sub.st.orch_ns = t_orch.elapsed().as_nanos() as u64;
        if instrument {
            *out.lock().unwrap() = sub.st;
        }
        Ok(())
    })
}

struct Point {
    tput: Series,
    peak_rss: u64,
    rss_before: u64,
    stalls: Stalls,
    peak_window: u64,
    peak_heap: u64,
}

fn measure(
    p: Pat,
    sz: Sizes,
    sizing: &RingSizing,
    scope: u64,
    threads: usize,
    reps: usize,
) -> Result<Point, String> {
    let rss_before = rss_now();
    let hwm_ok = reset_peak_rss();
    let mut chip = ChipWorker::new(ChipOptions {
        cores: threads,
        arena_cache_slots: 1,
        prewarm: vec![*sizing],
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let mut buf = vec![0f32; sz.buf_elems(p)];
    let cell = std::sync::Arc::new(std::sync::Mutex::new(Stalls::default()));
    let plain = program(p, sz, scope, false, cell.clone());
    let instr = program(p, sz, scope, true, cell.clone());
    let n = sz.tasks(p);
    let mut run = |prog: &Program, buf: &mut Vec<f32>| -> Result<(f64, RunReport), String> {
        let len = buf.len() as u32;
        let args = [Arg::Tensor(CallerTensor::f32(buf, &[len]))];
        let t0 = Instant::now();
        let r = chip
            .run_with_sizing(prog, &args, sizing)
            .map_err(|e| format!("{} at {sizing}: {e}", p.name()))?;
        let dt = t0.elapsed().as_secs_f64();
        if r.tasks != n {
            return Err(format!("{}: expected {n} tasks, got {}", p.name(), r.tasks));
        }
        Ok((dt, r))
    };
    let (_, warm) = run(&plain, &mut buf)?;
    let mut v = vec![];
    for _ in 0..reps {
        let (dt, _) = run(&plain, &mut buf)?;
        v.push(n as f64 / dt);
    }
    run(&instr, &mut buf)?;
    let stalls = *cell.lock().unwrap();
    let peak_rss = if hwm_ok { peak_rss() } else { rss_now() };
    drop(chip);
    Ok(Point {
        tput: Series::new("tasks/s", v),
        peak_rss,
        rss_before,
        stalls,
        peak_window: *warm.peak.task_window.iter().max().unwrap_or(&0),
        peak_heap: *warm.peak.heap.iter().max().unwrap_or(&0),
    })
}

/// An undersized case: (name, sizing, expected code, orchestration).
struct Under {
    name: &'static str,
    desc: &'static str,
    sizing: RingSizing,
    code: StatusCode,
    prog: Program,
}

fn timed_submit(
    o: &mut Orchestrator<'_>,
    t: &TaskArgs,
    diag: &std::sync::Mutex<f64>,
) -> Result<TaskOutputs, RuntimeFailure> {
    let t0 = Instant::now();
    let r = o.submit(NOOP, t);
    if r.is_err() {
        *diag.lock().unwrap() = t0.elapsed().as_secs_f64() * 1e3;
    }
    r
}

/// The undersized cases.
///
/// Left whole (over 80 lines) on purpose: it is a table of five cases, each a name, a
/// sizing, the code it must fail with and a program of a few lines; the table reads
/// best in one place, and a function per row would only scatter it.
fn undersized(diag: std::sync::Arc<std::sync::Mutex<f64>>) -> Vec<Under> {
    let sz = |w: u64, h: u64, d: u64| RingSizing::uniform(w, h, d).expect("valid sizing");
    let spec = |bytes: u32| TensorSpec::new(&[bytes / 4], DType::F32).expect("spec");
    let d1 = diag.clone();
    let d2 = diag.clone();
    let d3 = diag.clone();
    let d4 = diag.clone();
    let d5 = diag.clone();
    vec![
        Under {
            name: "scope_deadlock",
            desc: "window 8: one scope submits 8 tasks (holds at most 7)",
            sizing: sz(8, 1 << 20, 64),
            code: StatusCode::ScopeDeadlock,
            prog: Program::new("u1", move |o, _| {
                let mut t0 = None;
                let r = o.scope(|o| {
                    for i in 0..8 {
                        if i == 7 {
                            t0 = Some(Instant::now());
                        }
                        timed_submit(o, &TaskArgs::new(), &d1)?;
                    }
                    Ok(())
                });
                if let (Err(_), Some(t0)) = (&r, t0) {
                    let mut d = d1.lock().unwrap();
                    if d.is_nan() {
                        *d = t0.elapsed().as_secs_f64() * 1e3;
                    }
                }
                r
            }),
        },
        Under {
            name: "flow_control_deadlock",
            desc: "window 8: 4 tasks in an open scope at depth 3 pin ring 3; its inner scope (depth 4, also ring 3) submits 4 more",
            sizing: sz(8, 1 << 20, 64),
            code: StatusCode::FlowControlDeadlock,
            prog: Program::new("u2", move |o, _| {
                o.scope(|o| {
                    o.scope(|o| {
                        o.scope(|o| {
                            for _ in 0..4 {
                                timed_submit(o, &TaskArgs::new(), &d2)?;
                            }
                            o.scope(|o| {
                                for _ in 0..4 {
                                    timed_submit(o, &TaskArgs::new(), &d2)?;
                                }
                                Ok(())
                            })
                        })
                    })
                })
            }),
        },
        Under {
            name: "heap_oversized_output",
            desc: "heap 4 KiB: one task with an 8 KiB runtime output",
            sizing: sz(64, 4096, 64),
            code: StatusCode::HeapRingDeadlock,
            prog: Program::new("u3", move |o, _| {
                o.scope(|o| {
                    let mut t = TaskArgs::new();
                    t.output(spec(8192));
                    timed_submit(o, &t, &d3).map(|_| ())
                })
            }),
        },
        Under {
            name: "heap_ring_deadlock",
            desc: "heap 4 KiB: one scope submits two tasks with a 4 KiB runtime output each (the first is pinned by the open scope)",
            sizing: sz(64, 4096, 64),
            code: StatusCode::HeapRingDeadlock,
            prog: Program::new("u4", move |o, _| {
                o.scope(|o| {
                    for _ in 0..2 {
                        let mut t = TaskArgs::new();
                        t.output(spec(4096));
                        timed_submit(o, &t, &d4)?;
                    }
                    Ok(())
                })
            }),
        },
        Under {
            name: "dep_pool_overflow",
            desc: "dep pool 4: a task reads the runtime outputs of 8 producers of its scope (8 dependency entries)",
            sizing: sz(64, 1 << 20, 4),
            code: StatusCode::DepPoolOverflow,
            prog: Program::new("u5", move |o, _| {
                o.scope(|o| {
                    let mut outs = vec![];
                    for _ in 0..8 {
                        let mut t = TaskArgs::new();
                        t.output(spec(64));
                        outs.push(timed_submit(o, &t, &d5)?.output(0));
                    }
                    let mut t = TaskArgs::new();
                    for x in outs {
                        t.input(x);
                    }
                    timed_submit(o, &t, &d5).map(|_| ())
                })
            }),
        },
    ]
}

/// What every point of the curves shares: problem sizes, threads, reps, the default
/// sizing.
struct Ctx {
    sz: Sizes,
    threads: usize,
    reps: usize,
    def: RingSizing,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            chain: 4000,
            w: 64,
            t: 60,
            blocks: 40,
            k: 100,
            heap_blocks: 250,
        }
    } else {
        Sizes {
            chain: 20000,
            w: 64,
            t: 300,
            blocks: 200,
            k: 100,
            heap_blocks: 1250,
        }
    }
}

/// The window curve of pattern `p`: the default sizing, then every window; returns
/// the curve's JSON and the ratio at window 8 (if measured).
fn window_curve(
    b: &mut Bench,
    c: &Ctx,
    p: Pat,
    windows: &[u64],
    prog: &mut Progress,
) -> Result<(serde_json::Value, Option<f64>), String> {
    let (sz, def) = (c.sz, &c.def);
    let base = measure(p, sz, def, 1024, c.threads, c.reps)?;
    prog.tick(&format!("{} default", p.name()));
    b.say(&format!(
        "   {} ({} tasks): default sizing {:.0} tasks/s, peak RSS {:.1} MiB",
        p.name(),
        sz.tasks(p),
        base.tput.median,
        base.peak_rss as f64 / MIB
    ));
    b.say(&format!(
        "     {:>7} {:>12} {:>7} {:>10} {:>10} {:>10} {:>9}",
        "window", "tasks/s", "ratio", "peakRSS", "stalled", "blocked", "blocked%"
    ));
    let mut pts = vec![];
    let mut at8 = None;
    for &w in windows {
        let s =
            RingSizing::from_values([w; 4], def.heap, def.dep_pool).map_err(|e| e.to_string())?;
        let scope = (w / 2).clamp(1, 1024);
        let pt = measure(p, sz, &s, scope, c.threads, c.reps)?;
        prog.tick(&format!("{} w={w}", p.name()));
        let ratio = pt.tput.median / base.tput.median;
        pts.push(window_point(b, p, w, scope, &pt, &base, ratio));
        if w == 8 {
            at8 = Some(ratio);
        }
    }
    let curve = json!({ "tasks": sz.tasks(p), "default_tasks_per_s": base.tput.median, "default_peak_rss_mib": base.peak_rss as f64 / MIB, "points": pts });
    Ok((curve, at8))
}

/// One point of a window curve: its line and case; returns its JSON row.
fn window_point(
    b: &mut Bench,
    p: Pat,
    w: u64,
    scope: u64,
    pt: &Point,
    base: &Point,
    ratio: f64,
) -> serde_json::Value {
    let blocked_pct = 100.0 * pt.stalls.stalled_ns as f64 / pt.stalls.orch_ns.max(1) as f64;
    b.say(&format!(
        "     {:>7} {:>12.0} {:>7.2} {:>8.1}Mi {:>10} {:>8.1}ms {:>8.1}%",
        w,
        pt.tput.median,
        ratio,
        pt.peak_rss as f64 / MIB,
        pt.stalls.stalled,
        pt.stalls.stalled_ns as f64 / 1e6,
        blocked_pct
    ));
    b.push(
        Case::new(&format!("{}_w{}", p.name(), w), &format!("tasks/s of one run, window {w} on all rings, scopes of {scope}"), pt.tput.clone())
            .with_baseline("the default sizing", base.tput.clone(), "throughput / default sizing's throughput", ratio)
            .extra(json!({ "peak_rss_bytes": pt.peak_rss, "rss_before_bytes": pt.rss_before, "stalled_submits": pt.stalls.stalled,
                "submits": pt.stalls.submits, "blocked_ns": pt.stalls.stalled_ns, "orchestration_ns": pt.stalls.orch_ns, "peak_task_window": pt.peak_window })),
    );
    json!({ "window": w, "scope": scope, "tasks_per_s": pt.tput.median, "ratio_vs_default": ratio,
        "peak_rss_mib": pt.peak_rss as f64 / MIB, "rss_before_mib": pt.rss_before as f64 / MIB,
        "stalled_submits": pt.stalls.stalled, "blocked_ms": pt.stalls.stalled_ns as f64 / 1e6, "blocked_pct_of_orchestration": blocked_pct,
        "peak_task_window": pt.peak_window })
}

/// The heap curve (`fanout_heap`): the default sizing, then every heap; returns the
/// curve's JSON.
fn heap_curve(
    b: &mut Bench,
    c: &Ctx,
    heaps: &[u64],
    prog: &mut Progress,
) -> Result<serde_json::Value, String> {
    let (p, sz, def) = (Pat::FanoutHeap, c.sz, &c.def);
    let base = measure(p, sz, def, 1024, c.threads, c.reps)?;
    prog.tick("fanout_heap default");
    b.say(&format!(
        "   {} ({} tasks, 4 KiB output per block): default sizing {:.0} tasks/s",
        p.name(),
        sz.tasks(p),
        base.tput.median
    ));
    b.say(&format!(
        "     {:>10} {:>12} {:>7} {:>10} {:>10} {:>10}",
        "heap", "tasks/s", "ratio", "peakRSS", "stalled", "blocked"
    ));
    let mut pts = vec![];
    for &h in heaps {
        let s = RingSizing::from_values(def.task_window, [h; 4], def.dep_pool)
            .map_err(|e| e.to_string())?;
        let pt = measure(p, sz, &s, 1024, c.threads, c.reps)?;
        prog.tick(&format!("heap {h}"));
        let ratio = pt.tput.median / base.tput.median;
        b.say(&format!(
            "     {:>10} {:>12.0} {:>7.2} {:>8.1}Mi {:>10} {:>8.1}ms",
            h,
            pt.tput.median,
            ratio,
            pt.peak_rss as f64 / MIB,
            pt.stalls.stalled,
            pt.stalls.stalled_ns as f64 / 1e6
        ));
        pts.push(json!({ "heap": h, "tasks_per_s": pt.tput.median, "ratio_vs_default": ratio, "peak_rss_mib": pt.peak_rss as f64 / MIB,
            "stalled_submits": pt.stalls.stalled, "blocked_ms": pt.stalls.stalled_ns as f64 / 1e6, "peak_heap": pt.peak_heap }));
        b.push(
            Case::new(&format!("fanout_heap_h{h}"), &format!("tasks/s of one run, ring_heap {h} on all rings"), pt.tput.clone())
                .with_baseline("the default sizing", base.tput.clone(), "throughput / default sizing's throughput", ratio)
                .extra(json!({ "peak_rss_bytes": pt.peak_rss, "stalled_submits": pt.stalls.stalled, "blocked_ns": pt.stalls.stalled_ns, "peak_heap": pt.peak_heap })),
        );
    }
    Ok(json!({ "tasks": sz.tasks(p), "default_tasks_per_s": base.tput.median, "points": pts }))
}

/// Every undersized case, `reps` + 1 failing runs each (the first, which also builds
/// the arena, dropped); returns (every code right, the slowest median diagnosis µs).
fn undersized_cases(
    b: &mut Bench,
    threads: usize,
    reps: usize,
    prog: &mut Progress,
) -> Result<(bool, f64), String> {
    let diag = std::sync::Arc::new(std::sync::Mutex::new(f64::NAN));
    let mut chip = ChipWorker::new(ChipOptions {
        cores: threads,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let mut worst: f64 = 0.0;
    let mut all_codes = true;
    for u in undersized(diag.clone()) {
        let (mut dv, mut rv) = (vec![], vec![]);
        let mut got = None;
        for _ in 0..reps + 1 {
            *diag.lock().unwrap() = f64::NAN;
            let t0 = Instant::now();
            let r = chip.run_with_sizing(&u.prog, &[], &u.sizing);
            let dt = t0.elapsed().as_secs_f64() * 1e3;
            got = Some(r.as_ref().err().map(|f| f.code));
            dv.push(*diag.lock().unwrap());
            rv.push(dt);
        }
        // The first run also built the arena: drop it from the samples.
        dv.remove(0);
        rv.remove(0);
        let code = got.flatten();
        let right = code == Some(u.code);
        all_codes &= right;
        let d = Series::new("µs", dv.iter().map(|x| x * 1e3).collect());
        let r = Series::new("µs", rv.iter().map(|x| x * 1e3).collect());
        worst = worst.max(d.median);
        prog.tick(u.name);
        judge_undersized(b, &u, code, right, d, r);
    }
    Ok((all_codes, worst))
}

/// An undersized case's line and case (its code and diagnosis time bars).
fn judge_undersized(
    b: &mut Bench,
    u: &Under,
    code: Option<StatusCode>,
    right: bool,
    d: Series,
    r: Series,
) {
    b.say(&format!(
        "   undersized {:<22} -> {:<22} (want {}) diagnosed in {:.1} µs, failed run {:.1} µs",
        u.name,
        code.map(|c| c.name()).unwrap_or("no failure"),
        u.code.name(),
        d.median,
        r.median
    ));
    b.push(
        Case::new(&format!("undersized_{}", u.name), &format!("µs from the failing submit's start to its error: {}", u.desc), d.clone())
            .bar(format!("fails with {} ({})", u.code.name(), u.code.code()), right)
            .bar("diagnosed in < 10 ms", d.median < 10_000.0)
            .extra(json!({ "code": code.map(|c| c.code()), "code_name": code.map(|c| c.name()), "failed_run_us": r, "sizing": u.sizing.to_string() })),
    );
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b4",
        "ring_curve",
        "throughput, peak RSS and back-pressure vs ring sizing; undersized rings",
        opts,
    );
    let threads = opts.threads;
    let reps = opts.reps.max(5);
    let sz = sizes(opts.quick);
    let windows: Vec<u64> = vec![8, 16, 64, 256, 1024, 4096, 16384, 65536];
    let heaps: Vec<u64> = vec![1 << 12, 1 << 14, 1 << 16, 1 << 20, 1 << 24, 1 << 28];
    let ctx = Ctx {
        sz,
        threads,
        reps,
        def: RingSizing::default(),
    };
    let total = 3 * (windows.len() + 1) + heaps.len() + 1 + 5;
    let mut prog = Progress::new("b4", total);
    let mut curves = serde_json::Map::new();
    let mut summary_parts = vec![];
    for p in [Pat::Chain, Pat::Stencil, Pat::Fanout] {
        let (curve, at8) = window_curve(&mut b, &ctx, p, &windows, &mut prog)?;
        if let Some(ratio) = at8 {
            summary_parts.push(format!("{} w=8 {:.2}x", p.name(), ratio));
        }
        curves.insert(p.name().into(), curve);
    }
    let curve = heap_curve(&mut b, &ctx, &heaps, &mut prog)?;
    curves.insert(Pat::FanoutHeap.name().into(), curve);
    let (all_codes, worst) = undersized_cases(&mut b, threads, reps, &mut prog)?;
    prog.done();
    summary_parts.push(format!(
        "undersized: codes {}, slowest diagnosis {:.1} µs (bar < 10 ms)",
        if all_codes { "right" } else { "WRONG" },
        worst
    ));
    Ok(b.finish(
        json!({ "threads": threads, "reps": reps, "windows": windows, "heaps": heaps, "sizes": format!("{sz:?}"),
            "stall_threshold_ns": STALL_NS, "curves": curves }),
        summary_parts.join(", "),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_undersized_case_fails_with_its_code_and_times_its_diagnosis() {
        let diag = std::sync::Arc::new(std::sync::Mutex::new(f64::NAN));
        let mut chip = ChipWorker::new(ChipOptions {
            cores: 2,
            ..Default::default()
        })
        .unwrap();
        for u in undersized(diag.clone()) {
            *diag.lock().unwrap() = f64::NAN;
            let e = chip.run_with_sizing(&u.prog, &[], &u.sizing).unwrap_err();
            assert_eq!(e.code, u.code, "{}: {e}", u.name);
            let d = *diag.lock().unwrap();
            assert!(d.is_finite() && d >= 0.0, "{}: diagnosis time {d}", u.name);
        }
    }
}
