//! B9 replay: captured graphs replayed (`docs/api.md` §10) against the executors they compete
//! with, in the same run (samples interleaved).
//!
//! - every B3 pattern ([`super::overhead::patterns`]), captured once with the default sizing,
//!   then replayed (`Captured::replay`, wall time) against B3's hand-rolled executor of
//!   the same DAG ([`super::baseline`]; build + execute, as in B3 — its execute-only
//!   time is reported too) and against the normal run of the program (B3's figure);
//! - a 67-task decode step: the paged-attention decode of
//!   `crates/taskring/tests/programs.rs` with 32 KV blocks (an alloc, 32 QK matmuls in
//!   scopes of their own, a softmax, a fill, 32 PV `matmul_acc` chained on the output),
//!   replayed against the same program run normally (`run_with_sizing`, the captured
//!   sizing).

use super::overhead::{
    helper_config, pattern_args, patterns_param, run_baseline, run_taskring, Rig,
};
use super::*;
use serde_json::json;
use taskring::builtin::{FILL, MATMUL, MATMUL_ACC, NOOP, SOFTMAX_ROWS};
use taskring::*;

/// KV blocks of the decode step: 2 × 32 + 3 = 67 tasks.
const DECODE_BLOCKS: u32 = 32;
const HEADS: u32 = 4;
const DIM: u32 = 16;
const BLOCK: u32 = 8;

fn spec(shape: &[u32]) -> Result<TensorSpec, RuntimeFailure> {
    Orchestrator::spec(shape, DType::F32)
}

fn bad(e: impl std::fmt::Display) -> RuntimeFailure {
    RuntimeFailure::invalid_args(None, e.to_string())
}

/// The paged-attention decode step (see the module doc): q [H, D], K^T per block
/// [blocks·D, B], V [blocks·B, D], out [H, D].
pub fn decode_step(blocks: u32) -> Program {
    decode_step_with(blocks, [MATMUL, SOFTMAX_ROWS, FILL, MATMUL_ACC])
}

/// The decode step's graph with other kernels (`[qk, softmax, fill, pv]`; NOOPs: the
/// same submits and dependencies, no compute).
pub fn decode_step_with(blocks: u32, k: [KernelRef; 4]) -> Program {
    let [qk, softmax, fill, pv] = k;
    Program::new("decode_step", move |o, args| {
        let (q, kt, v, out) = (
            args[0].tensor()?,
            args[1].tensor()?,
            args[2].tensor()?,
            args[3].tensor()?,
        );
        let width = BLOCK * blocks;
        let scores = o.alloc(&[spec(&[HEADS, width])?])?.output(0);
        for b in 0..blocks {
            o.scope(|o| {
                let ktb = kt
                    .rows_slice((b * DIM) as u64, ((b + 1) * DIM) as u64)
                    .map_err(bad)?;
                let sb = scores
                    .view(&[HEADS, BLOCK], (b * BLOCK) as u64, Some(&[width, 1]))
                    .map_err(bad)?;
                let mut t = TaskArgs::new();
                t.input(q).input(ktb).output_existing(sb);
                o.submit(qk, &t).map(|_| ())
            })?;
        }
        let mut t = TaskArgs::new();
        t.input(scores).output(spec(&[HEADS, width])?);
        let p = o.submit(softmax, &t)?.output(0);
        let mut t = TaskArgs::new();
        t.output_existing(out).scalar(Scalar::F64(0.0));
        o.submit(fill, &t)?;
        for b in 0..blocks {
            o.scope(|o| {
                let pb = p
                    .view(&[HEADS, BLOCK], (b * BLOCK) as u64, Some(&[width, 1]))
                    .map_err(bad)?;
                let vb = v
                    .rows_slice((b * BLOCK) as u64, ((b + 1) * BLOCK) as u64)
                    .map_err(bad)?;
                let mut t = TaskArgs::new();
                t.input(pb).input(vb).inout(out);
                o.submit(pv, &t).map(|_| ())
            })?;
        }
        Ok(())
    })
}

/// Host buffers of the decode step.
pub struct DecodeData {
    pub q: Vec<f32>,
    pub kt: Vec<f32>,
    pub v: Vec<f32>,
    pub out: Vec<f32>,
}

impl DecodeData {
    pub fn new(blocks: u32, seed: usize) -> DecodeData {
        let f = |n: u32, m: usize| {
            (0..n as usize)
                .map(|i| ((i * m + seed) % 13) as f32 / 13.0 - 0.5)
                .collect::<Vec<f32>>()
        };
        DecodeData {
            q: f(HEADS * DIM, 7),
            kt: f(blocks * DIM * BLOCK, 5),
            v: f(blocks * BLOCK * DIM, 3),
            out: vec![0.0; (HEADS * DIM) as usize],
        }
    }
    pub fn args(&mut self, blocks: u32) -> Vec<Arg<'_>> {
        vec![
            Arg::Tensor(CallerTensor::f32(&mut self.q, &[HEADS, DIM])),
            Arg::Tensor(CallerTensor::f32(&mut self.kt, &[blocks * DIM, BLOCK])),
            Arg::Tensor(CallerTensor::f32(&mut self.v, &[blocks * BLOCK, DIM])),
            Arg::Tensor(CallerTensor::f32(&mut self.out, &[HEADS, DIM])),
        ]
    }
}

/// One replay of `g` on `chip`, timed, checked to have replayed its `tasks` tasks.
pub(super) fn replay_once(
    chip: &mut ChipWorker,
    g: &Captured,
    args: &[Arg<'_>],
    tasks: u64,
) -> Result<f64, String> {
    let t0 = Instant::now();
    let rep = g
        .replay(chip, args, None)
        .map_err(|e| format!("replay of {}: {e}", g.name()))?;
    let dt = t0.elapsed().as_secs_f64();
    if rep.tasks != tasks || !rep.replayed {
        return Err(format!(
            "replay of {}: expected {tasks} tasks, the report says {} (replayed={})",
            g.name(),
            rep.tasks,
            rep.replayed
        ));
    }
    Ok(dt)
}

/// What the pattern rounds run on: B3's rig, and each pattern captured on each chip.
struct Setup {
    rig: Rig,
    cfg: CallConfig,
    graphs: Vec<Captured>,
    hgraphs: Vec<Captured>,
}

/// ns-per-task samples per pattern: replay, the baseline (build + execute and
/// execute-only), the normal run, the helper chip's replay; and each pattern's edges.
struct PatternSamples {
    rp: Vec<Vec<f64>>,
    bl: Vec<Vec<f64>>,
    bx: Vec<Vec<f64>>,
    nr: Vec<Vec<f64>>,
    hp: Vec<Vec<f64>>,
    edges: Vec<usize>,
}

/// The decode step and its graph with empty kernels, their captures and their data.
struct Decode {
    data: DecodeData,
    progs: [Program; 2],
    dgs: Vec<Captured>,
    tasks: u64,
}

/// Chips, pool and buffers; every pattern captured on both chips (task counts
/// checked); then one untimed replay of each on each and one baseline run.
fn setup(opts: &Opts) -> Result<Setup, String> {
    let mut rig = Rig::new(opts)?;
    let cfg = CallConfig::default();
    let (mut graphs, mut hgraphs) = (vec![], vec![]);
    let s = &mut rig;
    for (i, p) in s.pats.iter().enumerate() {
        for (w, gs) in [(&mut s.chip, &mut graphs), (&mut s.helper, &mut hgraphs)] {
            let g = w
                .capture(&p.program, &pattern_args(p, &mut s.bufs[i]), &cfg)
                .map_err(|e| format!("capture of {}: {e}", p.name))?;
            if g.tasks() as u64 != p.tasks {
                return Err(format!(
                    "capture of {}: {} tasks recorded, expected {}",
                    p.name,
                    g.tasks(),
                    p.tasks
                ));
            }
            gs.push(g);
        }
    }
    for (i, p) in s.pats.iter().enumerate() {
        let args = pattern_args(p, &mut s.bufs[i]);
        replay_once(&mut s.chip, &graphs[i], &args, p.tasks)?;
        let args = pattern_args(p, &mut s.bufs[i]);
        replay_once(&mut s.helper, &hgraphs[i], &args, p.tasks)?;
        run_baseline(&s.pool, p);
    }
    Ok(Setup {
        rig,
        cfg,
        graphs,
        hgraphs,
    })
}

/// The decode step (and its graph with empty kernels) captured on `chip`, a reference
/// output from a normal run, 100 untimed rounds of both, and a check that the replay
/// computes the reference.
fn setup_decode(
    chip: &mut ChipWorker,
    sizing: &RingSizing,
    cfg: &CallConfig,
) -> Result<Decode, String> {
    let mut data = DecodeData::new(DECODE_BLOCKS, 1);
    let progs = [
        decode_step(DECODE_BLOCKS),
        decode_step_with(DECODE_BLOCKS, [NOOP; 4]),
    ];
    let mut dgs = vec![];
    for prog in &progs {
        dgs.push(
            chip.capture(prog, &data.args(DECODE_BLOCKS), cfg)
                .map_err(|e| format!("capture of the decode step: {e}"))?,
        );
    }
    let dtasks = dgs[0].tasks() as u64;
    data.out.iter_mut().for_each(|x| *x = 0.0);
    chip.run_with_sizing(&progs[0], &data.args(DECODE_BLOCKS), sizing)
        .map_err(|e| e.to_string())?;
    let reference = data.out.clone();
    for _ in 0..100 {
        for (prog, dg) in progs.iter().zip(&dgs) {
            chip.run_with_sizing(prog, &data.args(DECODE_BLOCKS), sizing)
                .map_err(|e| e.to_string())?;
            replay_once(chip, dg, &data.args(DECODE_BLOCKS), dtasks)?;
        }
    }
    data.out.iter_mut().for_each(|x| *x = 0.0);
    replay_once(chip, &dgs[0], &data.args(DECODE_BLOCKS), dtasks)?;
    if data.out != reference {
        return Err("the decode step's replay computes something else than its normal run".into());
    }
    Ok(Decode {
        data,
        progs,
        dgs,
        tasks: dtasks,
    })
}

/// One round over every pattern: replay, baseline, normal run, the helper's replay.
fn measure_patterns_round(
    s: &mut Setup,
    m: &mut PatternSamples,
    prog_bar: &mut Progress,
) -> Result<(), String> {
    let (r, graphs, hgraphs) = (&mut s.rig, &s.graphs, &s.hgraphs);
    for (i, p) in r.pats.iter().enumerate() {
        let t = replay_once(
            &mut r.chip,
            &graphs[i],
            &pattern_args(p, &mut r.bufs[i]),
            p.tasks,
        )?;
        let (tb, tx, e) = run_baseline(&r.pool, p);
        let tn = run_taskring(&mut r.chip, p, &mut r.bufs[i], &r.sizing)?;
        let th = replay_once(
            &mut r.helper,
            &hgraphs[i],
            &pattern_args(p, &mut r.bufs[i]),
            p.tasks,
        )?;
        let per = |s: f64| s * 1e9 / p.tasks as f64;
        m.rp[i].push(per(t));
        m.bl[i].push(per(tb));
        m.bx[i].push(per(tx));
        m.nr[i].push(per(tn));
        m.hp[i].push(per(th));
        m.edges[i] = e;
        prog_bar.tick(p.name);
    }
    Ok(())
}

/// One round of the decode step: for each program (real kernels, then empty), the
/// median µs of `batch` normal runs, then of `batch` replays (the arguments are made
/// outside the timing).
fn measure_decode_round(
    chip: &mut ChipWorker,
    d: &mut Decode,
    sizing: &RingSizing,
    batch: usize,
    d_run: &mut [Vec<f64>; 2],
    d_rep: &mut [Vec<f64>; 2],
) -> Result<(), String> {
    let data = &mut d.data;
    for (k, (prog, dg)) in d.progs.iter().zip(&d.dgs).enumerate() {
        d_run[k].push(median_of(batch, || {
            let args = data.args(DECODE_BLOCKS);
            let t0 = Instant::now();
            chip.run_with_sizing(prog, &args, sizing)
                .map_err(|e| e.to_string())?;
            Ok(t0.elapsed().as_secs_f64() * 1e6)
        })?);
        d_rep[k].push(median_of(batch, || {
            let args = data.args(DECODE_BLOCKS);
            let t0 = Instant::now();
            dg.replay(chip, &args, None).map_err(|e| e.to_string())?;
            Ok(t0.elapsed().as_secs_f64() * 1e6)
        })?);
    }
    Ok(())
}

/// Pattern `i`'s line and case (with its bar); returns its part of the summary.
fn judge_pattern(b: &mut Bench, s: &Setup, m: &PatternSamples, i: usize, threads: usize) -> String {
    let p = &s.rig.pats[i];
    let sr = Series::new("ns/task", m.rp[i].clone());
    let base = Series::new("ns/task", m.bl[i].clone());
    let exec = Series::new("ns/task", m.bx[i].clone());
    let normal = Series::new("ns/task", m.nr[i].clone());
    let help = Series::new("ns/task", m.hp[i].clone());
    let ratio = sr.median / base.median;
    let help_ratio = help.median / base.median;
    let ok = ratio <= 1.5;
    b.say(&format!(
        "   {:<16} {:>8} {:>12.0} {:>12.0} {:>8.2} {:>12.0} {:>8.2} {:>12.0} {:>8.2} {:>12.0} {:>8.2}",
        p.name,
        p.tasks,
        1e9 / sr.median,
        1e9 / base.median,
        ratio,
        1e9 / exec.median,
        sr.median / exec.median,
        1e9 / normal.median,
        normal.median / sr.median,
        1e9 / help.median,
        help_ratio
    ));
    b.push(
        Case::new(
            p.name,
            &format!(
                "wall ns per task of one replay ({}), {} threads",
                p.desc, threads
            ),
            sr.clone(),
        )
        .with_baseline(
            "B3's work-stealing DAG executor of the same DAG: build + execute",
            base,
            "replay time / baseline time",
            ratio,
        )
        .bar("≤ 1.5× the baseline's time", ok)
        .extra(json!({
            "tasks": p.tasks,
            "edges": m.edges[i],
            "recorded_edges": s.graphs[i].edges(),
            "baseline_execute_only": exec,
            "ratio_vs_execute_only": sr.median / exec.median,
            "normal_run": normal,
            "speedup_vs_normal_run": normal.median / sr.median,
            "orchestrator_helps": {
                "config": helper_config(threads),
                "ns_per_task": help,
                "ratio": help_ratio,
            },
        })),
    );
    format!("{} {:.2}x", p.name, ratio)
}

/// The decode step's line and cases; returns its part of the summary.
fn judge_decode(
    b: &mut Bench,
    d: &Decode,
    batch: usize,
    d_run: [Vec<f64>; 2],
    d_rep: [Vec<f64>; 2],
) -> String {
    let dtasks = d.tasks;
    let [dr, er] = d_run.map(|v| Series::new("µs/step", v));
    let [dp, ep] = d_rep.map(|v| Series::new("µs/step", v));
    let speedup = dr.median / dp.median;
    let empty_speedup = er.median / ep.median;
    b.say(&format!(
        "   decode step ({dtasks} tasks): normal run {:.1} µs, replay {:.1} µs, {:.2}x faster; with empty kernels {:.1} vs {:.1} µs, {:.2}x",
        dr.median, dp.median, speedup, er.median, ep.median, empty_speedup
    ));
    b.push(
        Case::new(
            "decode_step",
            &format!("median µs of {batch} replays of a {dtasks}-task paged-attention decode step"),
            dp.clone(),
        )
        .with_baseline(
            "the same program run normally (run_with_sizing, the captured sizing)",
            dr.clone(),
            "normal run time / replay time",
            speedup,
        )
        .bar("≥ 3× faster than a normal run", speedup >= 3.0)
        .extra(json!({ "tasks": dtasks, "edges": d.dgs[0].edges(), "blocks": DECODE_BLOCKS })),
    );
    b.push(
        Case::new("decode_step_empty_kernels", &format!("median µs of {batch} replays of the decode step's graph with NOOP kernels (what the runtime itself costs)"), ep.clone())
            .with_baseline("the same program run normally", er.clone(), "normal run time / replay time", empty_speedup),
    );
    format!(
        "decode step ({dtasks} tasks) {:.1} µs replayed vs {:.1} µs run ({:.2}x; empty kernels {:.2}x)",
        dp.median, dr.median, speedup, empty_speedup,
    )
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start("b9", "replay", "captured graphs replayed vs the hand-rolled executor (B3 patterns) and vs normal runs (a decode step)", opts);
    let threads = opts.threads;
    let reps = opts.reps.max(5);
    let mut s = setup(opts)?;
    let n = s.rig.pats.len();
    let mut m = PatternSamples {
        rp: vec![vec![]; n],
        bl: vec![vec![]; n],
        bx: vec![vec![]; n],
        nr: vec![vec![]; n],
        hp: vec![vec![]; n],
        edges: vec![0usize; n],
    };
    // Decode step, and its graph with empty kernels.
    let mut d = setup_decode(&mut s.rig.chip, &s.rig.sizing, &s.cfg)?;
    let batch = if opts.quick { 200 } else { 1000 };

    let mut prog_bar = Progress::new("b9", reps * (n + 1));
    let (mut d_run, mut d_rep) = ([vec![], vec![]], [vec![], vec![]]);
    for _ in 0..reps {
        measure_patterns_round(&mut s, &mut m, &mut prog_bar)?;
        measure_decode_round(
            &mut s.rig.chip,
            &mut d,
            &s.rig.sizing,
            batch,
            &mut d_run,
            &mut d_rep,
        )?;
        prog_bar.tick("decode step");
    }
    prog_bar.done();

    b.say(&format!(
        "   {:<16} {:>8} {:>12} {:>12} {:>8} {:>12} {:>8} {:>12} {:>8} {:>12} {:>8}",
        "pattern",
        "tasks",
        "replay/s",
        "baseline/s",
        "ratio",
        "exec-only/s",
        "ratio",
        "normal/s",
        "speedup",
        "helper/s",
        "ratio"
    ));
    let parts: Vec<String> = (0..n)
        .map(|i| judge_pattern(&mut b, &s, &m, i, threads))
        .collect();
    let decode = judge_decode(&mut b, &d, batch, d_run, d_rep);
    let summary = format!(
        "replay vs hand-rolled executor: {}; {decode}",
        parts.join(", ")
    );
    Ok(b.finish(
        json!({
            "threads": threads,
            "chip": { "cores": threads, "sizing": "default" },
            "baseline": { "workers": threads, "executor": "B3's: crossbeam-deque work stealing, atomic predecessor counters" },
            "patterns": patterns_param(&s.rig.pats),
            "decode": { "blocks": DECODE_BLOCKS, "heads": HEADS, "dim": DIM, "block": BLOCK, "batch": batch },
            "reps": reps,
        }),
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decode step has 67 tasks, and its replay computes what its normal run does.
    #[test]
    fn decode_step_replays_like_its_normal_run() {
        let mut chip = ChipWorker::new(ChipOptions {
            cores: 2,
            ..Default::default()
        })
        .unwrap();
        let prog = decode_step(DECODE_BLOCKS);
        let mut a = DecodeData::new(DECODE_BLOCKS, 1);
        let rep = chip
            .run_with_sizing(&prog, &a.args(DECODE_BLOCKS), &RingSizing::default())
            .unwrap();
        assert_eq!(rep.tasks, 67);
        let mut c = DecodeData::new(DECODE_BLOCKS, 2);
        let g = chip
            .capture(&prog, &c.args(DECODE_BLOCKS), &CallConfig::default())
            .unwrap();
        let mut d = DecodeData::new(DECODE_BLOCKS, 1);
        g.replay(&mut chip, &d.args(DECODE_BLOCKS), None).unwrap();
        assert_eq!(d.out, a.out);
        assert!(a.out.iter().any(|&x| x != 0.0));
    }
}
