//! B3 overhead: end-to-end empty tasks (builtin NOOP) per DAG pattern, against a
//! hand-rolled executor of the same DAG ([`super::baseline`]) with the same number of
//! worker threads, in the same run (samples interleaved).
//!
//! Patterns (tasks are numbered in submission order; the baseline gets exactly the
//! edges taskring infers):
//! - `independent`: `n` tasks without arguments, in scopes of 1000;
//! - `chain`: `n` tasks each INOUT on one host tensor (each depends on the previous), in
//!   scopes of 1000;
//! - `fanout`: blocks of 1 producer (a runtime output) + `k` consumers reading it, one
//!   scope per block;
//! - `fanin`: a radix-15 reduction tree per scope (a task takes at most 16 tensors: 15
//!   inputs + its output): 3375 leaves with a runtime output each, then 225, 15 and 1
//!   reducers reading 15 outputs each (3616 tasks, 3615 edges per tree);
//! - `wavefront`: an R×C grid per scope, cell (i,j) reads cells (i−1,j) and (i,j−1) and
//!   writes its own (OUTPUT_EXISTING), dependencies via the tensormap; each cell is a
//!   16-float tensor of its own;
//! - `wavefront_views`: the same with the cells as row views of one buffer. The
//!   tensormap keys its buckets on the buffer's base address, so every live cell of the
//!   grid is in one bucket chain and each lookup walks it (fewer grids: it is slow).
//!
//! taskring's time is the wall time of `ChipWorker::run_with_sizing` (submission
//! overlaps execution). The baseline's time is building the DAG (edge list, CSR,
//! counters) plus running it: the same information taskring derives from its
//! submissions. Its execute-only time is reported too.
//!
//! `warm_1task`: the fixed cost of one warm dispatch of a 1-task program through
//! `ChipWorker::run` (CallConfig path: config validation and sizing resolution against
//! the environment, arena-cache hit, reset, orchestration, completion), against the
//! baseline pool running a 1-node DAG.

use super::baseline::{Dag, Pool};
use super::*;
use serde_json::json;
use std::sync::Arc;
use taskring::builtin::NOOP;
use taskring::*;

const SCOPE: u64 = 1000;

/// Makes a pattern's DAG for the baseline: (nodes, forward edges).
pub type EdgesFn = Arc<dyn Fn() -> (usize, Vec<(u32, u32)>) + Send + Sync>;

/// A pattern: its taskring program, its task count and the same DAG for the baseline.
pub struct Pattern {
    pub name: &'static str,
    pub desc: String,
    pub tasks: u64,
    /// f32 elements of the host buffer the program takes as its only argument (0: none).
    pub buf_elems: usize,
    pub program: Program,
    pub edges: EdgesFn,
}

fn spec16() -> TensorSpec {
    TensorSpec::new(&[16], DType::F32).expect("spec")
}

pub fn independent(n: u64) -> Pattern {
    Pattern {
        name: "independent",
        desc: format!("{n} tasks, no arguments, scopes of {SCOPE}"),
        tasks: n,
        buf_elems: 0,
        program: Program::new("independent", move |o, _| {
            let mut left = n;
            while left > 0 {
                let m = left.min(SCOPE);
                o.scope(|o| {
                    for _ in 0..m {
                        o.submit(NOOP, &TaskArgs::new())?;
                    }
                    Ok(())
                })?;
                left -= m;
            }
            Ok(())
        }),
        edges: Arc::new(move || (n as usize, vec![])),
    }
}

pub fn chain(n: u64) -> Pattern {
    Pattern {
        name: "chain",
        desc: format!("{n} tasks INOUT on one tensor, scopes of {SCOPE}"),
        tasks: n,
        buf_elems: 16,
        program: Program::new("chain", move |o, args| {
            let x = args[0].tensor()?;
            let mut left = n;
            while left > 0 {
                let m = left.min(SCOPE);
                o.scope(|o| {
                    for _ in 0..m {
                        let mut t = TaskArgs::new();
                        t.inout(x);
                        o.submit(NOOP, &t)?;
                    }
                    Ok(())
                })?;
                left -= m;
            }
            Ok(())
        }),
        edges: Arc::new(move || (n as usize, (1..n as u32).map(|i| (i - 1, i)).collect())),
    }
}

pub fn fanout(blocks: u64, k: u64) -> Pattern {
    Pattern {
        name: "fanout",
        desc: format!(
            "{blocks} blocks of 1 producer -> {k} consumers (runtime output), one scope per block"
        ),
        tasks: blocks * (k + 1),
        buf_elems: 0,
        program: Program::new("fanout", move |o, _| {
            for _ in 0..blocks {
                o.scope(|o| {
                    let mut p = TaskArgs::new();
                    p.output(spec16());
                    let out = o.submit(NOOP, &p)?.output(0);
                    for _ in 0..k {
                        let mut t = TaskArgs::new();
                        t.input(out);
                        o.submit(NOOP, &t)?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        }),
        edges: Arc::new(move || {
            let n = (blocks * (k + 1)) as usize;
            let mut e = Vec::with_capacity((blocks * k) as usize);
            for b in 0..blocks {
                let p = (b * (k + 1)) as u32;
                for j in 1..=k as u32 {
                    e.push((p, p + j));
                }
            }
            (n, e)
        }),
    }
}

pub const RADIX: usize = 15;
pub const LEAVES: usize = RADIX * RADIX * RADIX;

/// Tasks of one radix-15 tree over LEAVES leaves.
pub fn tree_tasks() -> u64 {
    let mut n = 0;
    let mut level = LEAVES;
    while level > 1 {
        n += level;
        level = level.div_ceil(RADIX);
    }
    (n + 1) as u64
}

pub fn fanin(trees: u64) -> Pattern {
    let per = tree_tasks();
    Pattern {
        name: "fanin",
        desc: format!("{trees} radix-{RADIX} reduction trees of {LEAVES} leaves ({per} tasks each), one scope per tree"),
        tasks: trees * per,
        buf_elems: 0,
        program: Program::new("fanin", move |o, _| {
            let mut level: Vec<Tensor> = Vec::with_capacity(LEAVES);
            let mut next: Vec<Tensor> = Vec::with_capacity(LEAVES / RADIX + 1);
            for _ in 0..trees {
                o.scope(|o| {
                    level.clear();
                    for _ in 0..LEAVES {
                        let mut t = TaskArgs::new();
                        t.output(spec16());
                        level.push(o.submit(NOOP, &t)?.output(0));
                    }
                    while level.len() > 1 {
                        next.clear();
                        for chunk in level.chunks(RADIX) {
                            let mut t = TaskArgs::new();
                            for &x in chunk {
                                t.input(x);
                            }
                            t.output(spec16());
                            next.push(o.submit(NOOP, &t)?.output(0));
                        }
                        std::mem::swap(&mut level, &mut next);
                    }
                    Ok(())
                })?;
            }
            Ok(())
        }),
        edges: Arc::new(move || {
            let mut e = Vec::with_capacity((trees * per) as usize);
            let mut id = 0u32;
            for _ in 0..trees {
                let mut level: Vec<u32> = (id..id + LEAVES as u32).collect();
                id += LEAVES as u32;
                while level.len() > 1 {
                    let mut next = Vec::with_capacity(level.len() / RADIX + 1);
                    for chunk in level.chunks(RADIX) {
                        for &x in chunk {
                            e.push((x, id));
                        }
                        next.push(id);
                        id += 1;
                    }
                    level = next;
                }
            }
            (id as usize, e)
        }),
    }
}

/// `views`: cells are row views of one buffer (all in one tensormap bucket); else each
/// cell is a tensor of its own (its own base address).
pub fn wavefront(grids: u64, r: u64, c: u64, views: bool) -> Pattern {
    Pattern {
        name: if views {
            "wavefront_views"
        } else {
            "wavefront"
        },
        desc: format!(
            "{grids} grids of {r}x{c}, cell (i,j) <- (i-1,j), (i,j-1), one scope per grid; {}",
            if views {
                "cells are row views of one buffer"
            } else {
                "each cell its own 16-float tensor"
            }
        ),
        tasks: grids * r * c,
        buf_elems: (grids * r * c * 16) as usize,
        program: Program::new("wavefront", move |o, args| {
            let buf = args[0].tensor()?;
            let cells = buf
                .view(&[(grids * r * c) as u32, 16], 0, None)
                .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))?;
            let base_addr = buf.data_ptr() as u64;
            let cell = |k: u64| {
                if views {
                    cells.rows_slice(k, k + 1).expect("row")
                } else {
                    Tensor::from_raw(base_addr + k * 64, &[16], DType::F32)
                }
            };
            for g in 0..grids {
                o.scope(|o| {
                    let base = g * r * c;
                    for i in 0..r {
                        for j in 0..c {
                            let mut t = TaskArgs::new();
                            if i > 0 {
                                t.input(cell(base + (i - 1) * c + j));
                            }
                            if j > 0 {
                                t.input(cell(base + i * c + j - 1));
                            }
                            t.output_existing(cell(base + i * c + j));
                            o.submit(NOOP, &t)?;
                        }
                    }
                    Ok(())
                })?;
            }
            Ok(())
        }),
        edges: Arc::new(move || {
            let n = (grids * r * c) as usize;
            let mut e = Vec::with_capacity(2 * n);
            for g in 0..grids {
                let base = g * r * c;
                for i in 0..r {
                    for j in 0..c {
                        let me = (base + i * c + j) as u32;
                        if i > 0 {
                            e.push(((base + (i - 1) * c + j) as u32, me));
                        }
                        if j > 0 {
                            e.push(((base + i * c + j - 1) as u32, me));
                        }
                    }
                }
            }
            (n, e)
        }),
    }
}

pub fn patterns(quick: bool) -> Vec<Pattern> {
    let s = if quick { 10 } else { 1 };
    vec![
        independent(200_000 / s),
        chain(100_000 / s),
        fanout(100 / s, 1000),
        fanin((30 / s).max(1)),
        // 64×64 cells (8064 edges) per scope: the dependency pool (16384 entries per ring)
        // is reclaimed only when the scope's tasks retire.
        wavefront(25 / s, 64, 64, false),
        wavefront(if quick { 1 } else { 2 }, 64, 64, true),
    ]
}

/// The arguments of one run of `p`: its host buffer, if it takes one.
pub fn pattern_args<'a>(p: &Pattern, buf: &'a mut [f32]) -> Vec<Arg<'a>> {
    if p.buf_elems > 0 {
        vec![Arg::Tensor(CallerTensor::f32(buf, &[p.buf_elems as u32]))]
    } else {
        vec![]
    }
}

/// One taskring run of `p`: seconds.
pub fn run_taskring(
    chip: &mut ChipWorker,
    p: &Pattern,
    buf: &mut [f32],
    sizing: &RingSizing,
) -> Result<f64, String> {
    let args = pattern_args(p, buf);
    let t0 = Instant::now();
    let rep = chip
        .run_with_sizing(&p.program, &args, sizing)
        .map_err(|e| format!("{}: {e}", p.name))?;
    let dt = t0.elapsed().as_secs_f64();
    if rep.tasks != p.tasks {
        return Err(format!(
            "{}: expected {} tasks, the run reports {}",
            p.name, p.tasks, rep.tasks
        ));
    }
    Ok(dt)
}

/// One baseline run of `p`: (build + execute seconds, execute-only seconds, edges).
pub fn run_baseline(pool: &Pool, p: &Pattern) -> (f64, f64, usize) {
    let t0 = Instant::now();
    let (n, edges) = (p.edges)();
    let dag = Arc::new(Dag::from_edges(n, &edges));
    let t1 = Instant::now();
    pool.run(&dag);
    let t2 = Instant::now();
    assert_eq!(n as u64, p.tasks, "{}: baseline DAG size", p.name);
    (
        t2.duration_since(t0).as_secs_f64(),
        t2.duration_since(t1).as_secs_f64(),
        dag.edges(),
    )
}

/// What B3 and B9 run the patterns on: the chip of `threads` core threads, the same
/// with as many threads as the baseline — threads-1 cores plus the orchestrator, which
/// runs ready tasks while it waits (ChipOptions::orchestrator_helps) — the baseline
/// pool, and the patterns with one host buffer each.
pub struct Rig {
    pub chip: ChipWorker,
    pub helper: ChipWorker,
    pub pool: Pool,
    pub sizing: RingSizing,
    pub pats: Vec<Pattern>,
    pub bufs: Vec<Vec<f32>>,
}

impl Rig {
    pub fn new(opts: &Opts) -> Result<Rig, String> {
        let threads = opts.threads;
        let chip = ChipWorker::new(ChipOptions {
            cores: threads,
            prewarm: vec![RingSizing::default()],
            ..Default::default()
        })
        .map_err(|e| e.to_string())?;
        let helper = ChipWorker::new(ChipOptions {
            cores: helper_cores(threads),
            orchestrator_helps: true,
            prewarm: vec![RingSizing::default()],
            ..Default::default()
        })
        .map_err(|e| e.to_string())?;
        let pool = Pool::new(threads);
        let pats = patterns(opts.quick);
        let bufs = pats.iter().map(|p| vec![0f32; p.buf_elems]).collect();
        Ok(Rig {
            chip,
            helper,
            pool,
            sizing: RingSizing::default(),
            pats,
            bufs,
        })
    }
}

/// Core threads of the helper chip of a [`Rig`].
fn helper_cores(threads: usize) -> usize {
    threads.saturating_sub(1).max(1)
}

/// The `config` line of a case's `orchestrator_helps` figures (B3 and B9).
pub fn helper_config(threads: usize) -> String {
    format!("{} core thread(s) + the orchestrator running ready tasks while it waits (as many threads as the baseline)", helper_cores(threads))
}

/// The `patterns` parameter of B3's and B9's result documents.
pub fn patterns_param(pats: &[Pattern]) -> Vec<serde_json::Value> {
    pats.iter()
        .map(|p| json!({"name": p.name, "desc": p.desc, "tasks": p.tasks}))
        .collect()
}

/// ns-per-task samples per pattern: taskring, the baseline (build + execute and
/// execute-only), the helper chip; and each pattern's edge count.
struct PatternSamples {
    tr: Vec<Vec<f64>>,
    bl: Vec<Vec<f64>>,
    bx: Vec<Vec<f64>>,
    th: Vec<Vec<f64>>,
    edges: Vec<usize>,
}

/// µs samples (medians of a batch each) of the warm 1-task dispatch.
struct WarmSamples {
    batch: usize,
    run: Vec<f64>,
    sized: Vec<f64>,
    baseline: Vec<f64>,
}

/// The rig, then one untimed run of every pattern on each chip and the pool (arena
/// pages, allocator, baseline deques).
fn setup(opts: &Opts) -> Result<Rig, String> {
    let mut s = Rig::new(opts)?;
    for (i, p) in s.pats.iter().enumerate() {
        run_taskring(&mut s.chip, p, &mut s.bufs[i], &s.sizing)?;
        run_taskring(&mut s.helper, p, &mut s.bufs[i], &s.sizing)?;
        run_baseline(&s.pool, p);
    }
    Ok(s)
}

/// `reps` rounds over every pattern: taskring, the baseline, the helper chip.
fn measure_patterns(
    s: &mut Rig,
    reps: usize,
    prog: &mut Progress,
) -> Result<PatternSamples, String> {
    let n = s.pats.len();
    let mut m = PatternSamples {
        tr: vec![vec![]; n],
        bl: vec![vec![]; n],
        bx: vec![vec![]; n],
        th: vec![vec![]; n],
        edges: vec![0usize; n],
    };
    for _ in 0..reps {
        for (i, p) in s.pats.iter().enumerate() {
            let t = run_taskring(&mut s.chip, p, &mut s.bufs[i], &s.sizing)?;
            let (tb, tx, e) = run_baseline(&s.pool, p);
            let t_h = run_taskring(&mut s.helper, p, &mut s.bufs[i], &s.sizing)?;
            m.th[i].push(t_h * 1e9 / p.tasks as f64);
            m.tr[i].push(t * 1e9 / p.tasks as f64);
            m.bl[i].push(tb * 1e9 / p.tasks as f64);
            m.bx[i].push(tx * 1e9 / p.tasks as f64);
            m.edges[i] = e;
            prog.tick(p.name);
        }
    }
    Ok(m)
}

/// The warm 1-task dispatch: 200 untimed rounds, then per rep the median of a batch of
/// `ChipWorker::run`, of `run_with_sizing` and of the baseline pool's 1-node DAG.
fn measure_warm_1task(
    s: &mut Rig,
    opts: &Opts,
    reps: usize,
    prog: &mut Progress,
) -> Result<WarmSamples, String> {
    let one = Program::new("one", |o, _| o.submit(NOOP, &TaskArgs::new()).map(|_| ()));
    let cfg = CallConfig::default();
    let one_dag = || Arc::new(Dag::from_edges(1, &[]));
    let batch = if opts.quick { 200 } else { 1000 };
    let (chip, pool, sizing) = (&mut s.chip, &s.pool, &s.sizing);
    for _ in 0..200 {
        chip.run(&one, &[], &cfg).map_err(|e| e.to_string())?;
        pool.run(&one_dag());
    }
    let mut w = WarmSamples {
        batch,
        run: vec![],
        sized: vec![],
        baseline: vec![],
    };
    for _ in 0..reps {
        w.run.push(median_us(batch, || {
            chip.run(&one, &[], &cfg)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })?);
        w.sized.push(median_us(batch, || {
            chip.run_with_sizing(&one, &[], sizing)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })?);
        w.baseline.push(median_us(batch, || {
            pool.run(&one_dag());
            Ok(())
        })?);
        prog.tick("warm 1-task");
    }
    Ok(w)
}

/// Pattern `i`'s line and case (with its bars); returns its part of the summary.
fn judge_pattern(
    b: &mut Bench,
    p: &Pattern,
    i: usize,
    m: &PatternSamples,
    threads: usize,
) -> String {
    let s = Series::new("ns/task", m.tr[i].clone());
    let base = Series::new("ns/task", m.bl[i].clone());
    let exec = Series::new("ns/task", m.bx[i].clone());
    let help = Series::new("ns/task", m.th[i].clone());
    let ratio = s.median / base.median;
    let ok = ratio <= 1.5;
    let mut c = Case::new(
        p.name,
        &format!(
            "wall ns per task of one run ({}), {} threads",
            p.desc, threads
        ),
        s.clone(),
    )
    .with_baseline(
        "work-stealing DAG executor (crossbeam-deque, atomic counters): build + execute",
        base.clone(),
        "taskring time / baseline time",
        ratio,
    )
    .bar("≤ 1.5× the baseline's time", ok)
    .extra(json!({
        "tasks": p.tasks,
        "edges": m.edges[i],
        "tasks_per_s": 1e9 / s.median,
        "baseline_tasks_per_s": 1e9 / base.median,
        "baseline_execute_only": exec,
        "ratio_vs_execute_only": s.median / exec.median,
        "orchestrator_helps": {
            "config": helper_config(threads),
            "ns_per_task": help,
            "tasks_per_s": 1e9 / help.median,
            "ratio": help.median / base.median,
        },
    }));
    match p.name {
        "independent" => {
            let tps = 1e9 / s.median;
            c = c.bar("≥ 2 M tasks/s", tps >= 2e6);
        }
        "chain" => c = c.bar("≤ 1.5 µs/task", s.median <= 1500.0),
        _ => {}
    }
    b.say(&format!(
        "   {:<12} {:>10} {:>12.0} {:>12.0} {:>8.2} {:>10.0} {:>12.0} {:>8.2}   (baseline execute-only {:.0} ns/task)",
        p.name,
        p.tasks,
        1e9 / s.median,
        1e9 / base.median,
        ratio,
        s.median,
        1e9 / help.median,
        help.median / base.median,
        exec.median
    ));
    b.push(c);
    format!("{} {:.2}M/s ({:.2}x)", p.name, 1e3 / s.median, ratio)
}

/// The warm 1-task line and case; returns (median µs, ratio to the baseline).
fn judge_warm_1task(b: &mut Bench, w: WarmSamples) -> (f64, f64) {
    let batch = w.batch;
    let w_tr = Series::new("µs/run", w.run);
    let wb = Series::new("µs/run", w.baseline);
    let ws = Series::new("µs/run", w.sized);
    let wr = w_tr.median / wb.median;
    b.say(&format!(
        "   warm 1-task run: {:.1} µs (run_with_sizing {:.1} µs), baseline {:.1} µs, ratio {:.2}",
        w_tr.median, ws.median, wb.median, wr
    ));
    b.push(
        Case::new(
            "warm_1task",
            &format!("median µs of {batch} warm ChipWorker::run dispatches of a 1-task program"),
            w_tr.clone(),
        )
        .with_baseline(
            "the baseline pool running a 1-node DAG",
            wb,
            "taskring time / baseline time",
            wr,
        )
        .bar("≤ 50 µs", w_tr.median <= 50.0)
        .bar("≤ 1.5× the baseline's time", wr <= 1.5)
        .extra(json!({ "run_with_sizing_us": ws })),
    );
    (w_tr.median, wr)
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b3",
        "overhead",
        "end-to-end empty tasks vs a hand-rolled work-stealing executor of the same DAG",
        opts,
    );
    let threads = opts.threads;
    let reps = opts.reps.max(5);
    let mut s = setup(opts)?;
    let mut prog = Progress::new("b3", reps * s.pats.len() + reps);
    let m = measure_patterns(&mut s, reps, &mut prog)?;
    let w = measure_warm_1task(&mut s, opts, reps, &mut prog)?;
    prog.done();

    b.say(&format!(
        "   {:<12} {:>10} {:>12} {:>12} {:>8} {:>10} {:>12} {:>8}",
        "pattern", "tasks", "taskring/s", "baseline/s", "ratio", "ns/task", "helper/s", "ratio"
    ));
    let mut parts = vec![];
    for (i, p) in s.pats.iter().enumerate() {
        parts.push(judge_pattern(&mut b, p, i, &m, threads));
    }
    let batch = w.batch;
    let (w_median, wr) = judge_warm_1task(&mut b, w);
    let summary = format!(
        "{}; warm 1-task {:.1} µs ({:.2}x)",
        parts.join(", "),
        w_median,
        wr
    );
    Ok(b.finish(
        json!({
            "threads": threads,
            "chip": { "cores": threads, "aic_cores": "default (half)", "sizing": "default" },
            "baseline": { "workers": threads, "executor": "crossbeam-deque work stealing, atomic predecessor counters, continuation of the first ready successor" },
            "scope_size": SCOPE,
            "patterns": patterns_param(&s.pats),
            "warm_batch": batch,
            "reps": reps,
        }),
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pattern's taskring run submits the number of tasks the baseline DAG has,
    /// and the baseline DAG has the edges the module doc states.
    #[test]
    fn patterns_agree_with_their_baseline_dags() {
        let mut chip = ChipWorker::new(ChipOptions {
            cores: 2,
            ..Default::default()
        })
        .unwrap();
        let pool = Pool::new(2);
        for p in [
            independent(2500),
            chain(2500),
            fanout(3, 50),
            fanin(1),
            wavefront(2, 7, 9, false),
            wavefront(2, 7, 9, true),
        ] {
            let mut buf = vec![0f32; p.buf_elems];
            run_taskring(&mut chip, &p, &mut buf, &RingSizing::default()).unwrap();
            let (_, _, e) = run_baseline(&pool, &p);
            let want = match p.name {
                "independent" => 0,
                "chain" => 2499,
                "fanout" => 150,
                "fanin" => tree_tasks() as usize - 1,
                "wavefront" | "wavefront_views" => 2 * (6 * 9 + 7 * 8),
                _ => unreachable!(),
            };
            assert_eq!(e, want, "{}", p.name);
        }
        assert_eq!(tree_tasks(), 3375 + 225 + 15 + 1);
    }
}
