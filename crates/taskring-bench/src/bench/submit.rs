//! B2 submit: the orchestrator's cost per submit with the cores paused.
//!
//! A chip with one core; the orchestration first submits a gate task (a kernel that
//! blocks on a Mutex/Condvar), waits until the core runs it, then submits `n` tasks in
//! one scope and times that loop; then opens the gate. Nothing completes while the loop
//! runs, so the figure is the orchestrator alone: argument validation, the tensormap
//! lookups, the slot and heap allocation, dependency wiring, the ready push.
//!
//! Cases (builtin NOOP kernel, `TaskArgs` built per task as a user would):
//! - `2in_1out`: 2 host inputs + 1 runtime output (a 16-float spec) — the bar's case;
//! - `2in_1inout_chain`: 2 host inputs + 1 INOUT tensor shared by all tasks, so each task
//!   depends on the previous one (tensormap hit, a claimed producer, a dep-pool node);
//! - `no_args`: a task without arguments (the floor).

use super::*;
use serde_json::json;
use std::sync::{Condvar, Mutex};
use taskring::builtin::NOOP;
use taskring::*;

static GATE: (Mutex<(bool, bool)>, Condvar) = (Mutex::new((false, false)), Condvar::new());

pub(super) fn set_gate(open: bool) {
    let mut g = GATE.0.lock().unwrap();
    g.0 = open;
    if !open {
        g.1 = false;
    }
    GATE.1.notify_all();
}

pub(super) fn gate_kernel() -> KernelRef {
    fn_kernel("gate", CoreKind::Any, |_| {
        let mut g = GATE.0.lock().unwrap();
        g.1 = true; // running
        GATE.1.notify_all();
        while !g.0 {
            g = GATE.1.wait(g).unwrap();
        }
    })
}

pub(super) fn wait_gate_running() {
    let mut g = GATE.0.lock().unwrap();
    while !g.1 {
        g = GATE.1.wait(g).unwrap();
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Variant {
    TwoInOneOut,
    Chain,
    NoArgs,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::TwoInOneOut => "2in_1out",
            Variant::Chain => "2in_1inout_chain",
            Variant::NoArgs => "no_args",
        }
    }
}

/// One run: ns per submit of `n` submits (and the scope-end time, ns per task).
fn one_run(
    chip: &mut ChipWorker,
    gate: KernelRef,
    v: Variant,
    n: u32,
) -> Result<(f64, f64), String> {
    let out = std::sync::Arc::new(Mutex::new((0f64, 0f64)));
    let o2 = out.clone();
    let prog = Program::new("b2", move |o, args| {
        let (a, b, x) = (args[0].tensor()?, args[1].tensor()?, args[2].tensor()?);
        let spec = Orchestrator::spec(&[16], DType::F32)?;
        set_gate(false);
        o.submit(gate, &TaskArgs::new())?;
        wait_gate_running();
        o.begin_scope(false)?;
        let t0 = Instant::now();
        let r = (|| {
            for _ in 0..n {
                let mut t = TaskArgs::new();
                match v {
                    Variant::TwoInOneOut => {
                        t.input(a).input(b).output(spec);
                    }
                    Variant::Chain => {
                        t.input(a).input(b).inout(x);
                    }
                    Variant::NoArgs => {}
                }
                o.submit(NOOP, &t)?;
            }
            Ok::<(), RuntimeFailure>(())
        })();
        let dt = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let e = o.end_scope();
        let dt_end = t1.elapsed().as_secs_f64();
        set_gate(true);
        r?;
        e?;
        *o2.lock().unwrap() = (dt * 1e9 / n as f64, dt_end * 1e9 / n as f64);
        Ok(())
    });
    let mut va = vec![1f32; 16];
    let mut vb = vec![2f32; 16];
    let mut vx = vec![0f32; 16];
    let args = [
        Arg::Tensor(CallerTensor::f32(&mut va, &[16])),
        Arg::Tensor(CallerTensor::f32(&mut vb, &[16])),
        Arg::Tensor(CallerTensor::f32(&mut vx, &[16])),
    ];
    let rep = chip
        .run_with_sizing(&prog, &args, &RingSizing::default())
        .map_err(|e| e.to_string())?;
    if rep.tasks != n as u64 + 1 {
        return Err(format!(
            "expected {} tasks, the run reports {}",
            n + 1,
            rep.tasks
        ));
    }
    let r = *out.lock().unwrap();
    Ok(r)
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b2",
        "submit",
        "orchestrator cost per submit, cores paused (1 core held by a gate task)",
        opts,
    );
    // One scope holds at most window - 1 = 16383 tasks of ring 1.
    let n: u32 = if opts.quick { 4000 } else { 16000 };
    let reps = opts.reps.max(5) * 2;
    let gate = gate_kernel();
    let mut chip = ChipWorker::new(ChipOptions {
        cores: 1,
        prewarm: vec![RingSizing::default()],
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let variants = [Variant::TwoInOneOut, Variant::Chain, Variant::NoArgs];
    // Warm-up: touch the arena pages the runs use.
    for v in variants {
        one_run(&mut chip, gate, v, n)?;
    }
    let mut samples: Vec<(Vec<f64>, Vec<f64>)> = vec![(vec![], vec![]); variants.len()];
    let mut prog = Progress::new("b2", reps * variants.len());
    for _ in 0..reps {
        for (i, &v) in variants.iter().enumerate() {
            let (ns, end_ns) = one_run(&mut chip, gate, v, n)?;
            samples[i].0.push(ns);
            samples[i].1.push(end_ns);
            prog.tick(v.name());
        }
    }
    prog.done();
    let mut main = f64::NAN;
    for (i, &v) in variants.iter().enumerate() {
        let s = Series::new("ns/task", samples[i].0.clone());
        let end = Series::new("ns/task", samples[i].1.clone());
        b.say(&format!(
            "   {:<18} {:>7.1} ns/submit (min {:.1}, max {:.1}); scope end {:.1} ns/task",
            v.name(),
            s.median,
            s.min,
            s.max,
            end.median
        ));
        let mut c = Case::new(
            v.name(),
            &format!("ns per submit, median of one run's {n} submits in one scope"),
            s.clone(),
        )
        .extra(json!({ "scope_end_ns_per_task": end }));
        if v == Variant::TwoInOneOut {
            main = s.median;
            c = c.bar("≤ 150 ns/task", s.median <= 150.0);
        }
        b.push(c);
    }
    let chain = b.cases[1].value.median;
    let summary = format!(
        "submit 2in+1out {} ns/task (bar ≤ 150: {}), chain {} ns/task",
        fmt_num(main),
        if main <= 150.0 { "met" } else { "missed" },
        fmt_num(chain)
    );
    Ok(b.finish(json!({ "submits_per_run": n, "chip_cores": 1, "sizing": "default", "kernel": "noop", "samples_per_case": reps }), summary))
}
