//! B9 replay: captured graphs replayed (API.md §10) against the executors they compete
//! with, in the same run (samples interleaved).
//!
//! - every B3 pattern ([`super::b3::patterns`]), captured once with the default sizing,
//!   then replayed (`Captured::replay`, wall time) against B3's hand-rolled executor of
//!   the same DAG ([`super::baseline`]; build + execute, as in B3 — its execute-only
//!   time is reported too) and against the normal run of the program (B3's figure);
//! - a 67-task decode step: the paged-attention decode of
//!   `crates/taskring/tests/programs.rs` with 32 KV blocks (an alloc, 32 QK matmuls in
//!   scopes of their own, a softmax, a fill, 32 PV `matmul_acc` chained on the output),
//!   replayed against the same program run normally (`run_with_sizing`, the captured
//!   sizing).

use super::b3::{patterns, run_baseline, run_taskring, Pattern};
use super::baseline::Pool;
use super::*;
use serde_json::json;
use taskring::builtin::{FILL, MATMUL, MATMUL_ACC, NOOP, SOFTMAX_ROWS};
use taskring::*;

fn pattern_args<'a>(p: &Pattern, buf: &'a mut [f32]) -> Vec<Arg<'a>> {
    if p.buf_elems > 0 {
        vec![Arg::Tensor(HostTensor::f32(buf, &[p.buf_elems as u32]))]
    } else {
        vec![]
    }
}

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
            Arg::Tensor(HostTensor::f32(&mut self.q, &[HEADS, DIM])),
            Arg::Tensor(HostTensor::f32(&mut self.kt, &[blocks * DIM, BLOCK])),
            Arg::Tensor(HostTensor::f32(&mut self.v, &[blocks * BLOCK, DIM])),
            Arg::Tensor(HostTensor::f32(&mut self.out, &[HEADS, DIM])),
        ]
    }
}

fn replay_once(
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

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start("b9", "replay", "captured graphs replayed vs the hand-rolled executor (B3 patterns) and vs normal runs (a decode step)", opts);
    let threads = opts.threads;
    let reps = opts.reps.max(5);
    let mut chip = ChipWorker::new(ChipOptions {
        cores: threads,
        prewarm: vec![RingSizing::default()],
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    // As B3: the same with as many threads as the baseline (threads-1 cores plus the
    // orchestrator running ready tasks while it waits).
    let mut helper = ChipWorker::new(ChipOptions {
        cores: threads.saturating_sub(1).max(1),
        orchestrator_helps: true,
        prewarm: vec![RingSizing::default()],
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let pool = Pool::new(threads);
    let sizing = RingSizing::default();
    let cfg = CallConfig::default();
    let pats = patterns(opts.quick);
    let mut bufs: Vec<Vec<f32>> = pats.iter().map(|p| vec![0f32; p.buf_elems]).collect();
    let (mut graphs, mut hgraphs) = (vec![], vec![]);
    for (i, p) in pats.iter().enumerate() {
        for (w, gs) in [(&mut chip, &mut graphs), (&mut helper, &mut hgraphs)] {
            let g = w
                .capture(&p.program, &pattern_args(p, &mut bufs[i]), &cfg)
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
    let series = || vec![Vec::<f64>::new(); pats.len()];
    let (mut rp, mut bl, mut bx, mut nr, mut hp) =
        (series(), series(), series(), series(), series());
    let mut edges = vec![0usize; pats.len()];
    for (i, p) in pats.iter().enumerate() {
        replay_once(
            &mut chip,
            &graphs[i],
            &pattern_args(p, &mut bufs[i]),
            p.tasks,
        )?;
        replay_once(
            &mut helper,
            &hgraphs[i],
            &pattern_args(p, &mut bufs[i]),
            p.tasks,
        )?;
        run_baseline(&pool, p);
    }
    // Decode step, and its graph with empty kernels.
    let mut data = DecodeData::new(DECODE_BLOCKS, 1);
    let progs = [
        decode_step(DECODE_BLOCKS),
        decode_step_with(DECODE_BLOCKS, [NOOP; 4]),
    ];
    let mut dgs = vec![];
    for prog in &progs {
        dgs.push(
            chip.capture(prog, &data.args(DECODE_BLOCKS), &cfg)
                .map_err(|e| format!("capture of the decode step: {e}"))?,
        );
    }
    let dtasks = dgs[0].tasks() as u64;
    data.out.iter_mut().for_each(|x| *x = 0.0);
    chip.run_with_sizing(&progs[0], &data.args(DECODE_BLOCKS), &sizing)
        .map_err(|e| e.to_string())?;
    let reference = data.out.clone();
    let batch = if opts.quick { 200 } else { 1000 };
    for _ in 0..100 {
        for (prog, dg) in progs.iter().zip(&dgs) {
            chip.run_with_sizing(prog, &data.args(DECODE_BLOCKS), &sizing)
                .map_err(|e| e.to_string())?;
            replay_once(&mut chip, dg, &data.args(DECODE_BLOCKS), dtasks)?;
        }
    }
    data.out.iter_mut().for_each(|x| *x = 0.0);
    replay_once(&mut chip, &dgs[0], &data.args(DECODE_BLOCKS), dtasks)?;
    if data.out != reference {
        return Err("the decode step's replay computes something else than its normal run".into());
    }

    let mut prog_bar = Progress::new("b9", reps * (pats.len() + 1));
    let (mut d_run, mut d_rep) = ([vec![], vec![]], [vec![], vec![]]);
    for _ in 0..reps {
        for (i, p) in pats.iter().enumerate() {
            let t = replay_once(
                &mut chip,
                &graphs[i],
                &pattern_args(p, &mut bufs[i]),
                p.tasks,
            )?;
            let (tb, tx, e) = run_baseline(&pool, p);
            let tn = run_taskring(&mut chip, p, &mut bufs[i], &sizing)?;
            let th = replay_once(
                &mut helper,
                &hgraphs[i],
                &pattern_args(p, &mut bufs[i]),
                p.tasks,
            )?;
            let per = |s: f64| s * 1e9 / p.tasks as f64;
            rp[i].push(per(t));
            bl[i].push(per(tb));
            bx[i].push(per(tx));
            nr[i].push(per(tn));
            hp[i].push(per(th));
            edges[i] = e;
            prog_bar.tick(p.name);
        }
        for (k, (prog, dg)) in progs.iter().zip(&dgs).enumerate() {
            let mut v = Vec::with_capacity(batch);
            for _ in 0..batch {
                let args = data.args(DECODE_BLOCKS);
                let t0 = Instant::now();
                chip.run_with_sizing(prog, &args, &sizing)
                    .map_err(|e| e.to_string())?;
                v.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            d_run[k].push(median(&v));
            let mut v = Vec::with_capacity(batch);
            for _ in 0..batch {
                let args = data.args(DECODE_BLOCKS);
                let t0 = Instant::now();
                dg.replay(&mut chip, &args, None)
                    .map_err(|e| e.to_string())?;
                v.push(t0.elapsed().as_secs_f64() * 1e6);
            }
            d_rep[k].push(median(&v));
        }
        prog_bar.tick("decode step");
    }
    prog_bar.done();

    let mut parts = vec![];
    let mut all_ok = true;
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
    for (i, p) in pats.iter().enumerate() {
        let s = Series::new("ns/task", rp[i].clone());
        let base = Series::new("ns/task", bl[i].clone());
        let exec = Series::new("ns/task", bx[i].clone());
        let normal = Series::new("ns/task", nr[i].clone());
        let help = Series::new("ns/task", hp[i].clone());
        let ratio = s.median / base.median;
        let help_ratio = help.median / base.median;
        let ok = ratio <= 1.5;
        all_ok &= ok;
        b.say(&format!(
            "   {:<16} {:>8} {:>12.0} {:>12.0} {:>8.2} {:>12.0} {:>8.2} {:>12.0} {:>8.2} {:>12.0} {:>8.2}",
            p.name,
            p.tasks,
            1e9 / s.median,
            1e9 / base.median,
            ratio,
            1e9 / exec.median,
            s.median / exec.median,
            1e9 / normal.median,
            normal.median / s.median,
            1e9 / help.median,
            help_ratio
        ));
        parts.push(format!("{} {:.2}x", p.name, ratio));
        b.push(
            Case::new(p.name, &format!("wall ns per task of one replay ({}), {} threads", p.desc, threads), s.clone())
                .with_baseline("B3's work-stealing DAG executor of the same DAG: build + execute", base, "replay time / baseline time", ratio)
                .bar("≤ 1.5× the baseline's time", ok)
                .extra(json!({
                    "tasks": p.tasks,
                    "edges": edges[i],
                    "recorded_edges": graphs[i].edges(),
                    "baseline_execute_only": exec,
                    "ratio_vs_execute_only": s.median / exec.median,
                    "normal_run": normal,
                    "speedup_vs_normal_run": normal.median / s.median,
                    "orchestrator_helps": {
                        "config": format!("{} core thread(s) + the orchestrator running ready tasks while it waits (as many threads as the baseline)", threads.saturating_sub(1).max(1)),
                        "ns_per_task": help,
                        "ratio": help_ratio,
                    },
                })),
        );
    }
    let [dr, er] = d_run.map(|v| Series::new("µs/step", v));
    let [dp, ep] = d_rep.map(|v| Series::new("µs/step", v));
    let speedup = dr.median / dp.median;
    let empty_speedup = er.median / ep.median;
    all_ok &= speedup >= 3.0;
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
        .extra(json!({ "tasks": dtasks, "edges": dgs[0].edges(), "blocks": DECODE_BLOCKS })),
    );
    b.push(
        Case::new("decode_step_empty_kernels", &format!("median µs of {batch} replays of the decode step's graph with NOOP kernels (what the runtime itself costs)"), ep.clone())
            .with_baseline("the same program run normally", er.clone(), "normal run time / replay time", empty_speedup),
    );
    let summary = format!(
        "replay vs hand-rolled executor: {}; decode step ({dtasks} tasks) {:.1} µs replayed vs {:.1} µs run ({:.2}x; empty kernels {:.2}x)",
        parts.join(", "),
        dp.median,
        dr.median,
        speedup,
        empty_speedup,
    );
    let _ = all_ok;
    Ok(b.finish(
        json!({
            "threads": threads,
            "chip": { "cores": threads, "sizing": "default" },
            "baseline": { "workers": threads, "executor": "B3's: crossbeam-deque work stealing, atomic predecessor counters" },
            "patterns": pats.iter().map(|p| json!({"name": p.name, "desc": p.desc, "tasks": p.tasks})).collect::<Vec<_>>(),
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
