//! B10 native: per-task cost of a C-ABI kernel against the builtin doing the same work.
//!
//! The example library (`examples/native/kernels.c`) is compiled with the system C
//! compiler at `-O3`, as the example's Makefile does (the builtin's loops are vectorised;
//! gcc vectorises loops of unknown length from `-O3` on), into the results directory. A
//! chip with one core runs `n` independent tasks submitted from Rust in one scope; the
//! figure is wall time per task (submit, dispatch, the kernel call, completion) — the
//! same program with the builtin and with the native kernel, runs interleaved. Cases:
//! `noop` (no arguments; the call itself) and `add` (2 inputs, 1 runtime output of 256
//! floats; argument marshalling and a little work).
//! Python kernels are measured against both by `benches/b10_python.py`.

use super::*;
use serde_json::json;
use taskring::builtin::{ADD, NOOP};
use taskring::*;

fn build_library(out_dir: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = root.join("examples/native/kernels.c");
    if !src.exists() {
        return Err(format!(
            "{} not found (b10 builds the example kernels of the source tree)",
            src.display()
        ));
    }
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let lib = out_dir.join("libtrkernels_b10.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = std::process::Command::new(&cc)
        .args(["-O3", "-shared", "-fPIC", "-I"])
        .arg(root.join("include"))
        .arg("-o")
        .arg(&lib)
        .arg(&src)
        .arg("-lm")
        .status()
        .map_err(|e| format!("could not run the C compiler {cc}: {e}"))?;
    if !st.success() {
        return Err(format!("{cc} failed to build {}", src.display()));
    }
    Ok(lib)
}

/// ns per task of `n` independent tasks of `k` (with or without arguments).
fn one_run(chip: &mut ChipWorker, k: KernelRef, with_args: bool, n: u32) -> Result<f64, String> {
    let prog = Program::new("b10", move |o, args| {
        let (a, b) = (args[0].tensor()?, args[1].tensor()?);
        let spec = Orchestrator::spec(&[256], DType::F32)?;
        o.scope(|o| {
            for _ in 0..n {
                let mut t = TaskArgs::new();
                if with_args {
                    t.input(a).input(b).output(spec);
                }
                o.submit(k, &t)?;
            }
            Ok(())
        })
    });
    let mut va = vec![1f32; 256];
    let mut vb = vec![2f32; 256];
    let args = [
        Arg::Tensor(CallerTensor::f32(&mut va, &[256])),
        Arg::Tensor(CallerTensor::f32(&mut vb, &[256])),
    ];
    let t0 = Instant::now();
    let rep = chip
        .run_with_sizing(&prog, &args, &RingSizing::default())
        .map_err(|e| e.to_string())?;
    let dt = t0.elapsed().as_secs_f64();
    if rep.tasks != n as u64 {
        return Err(format!("expected {n} tasks, the run reports {}", rep.tasks));
    }
    Ok(dt * 1e9 / n as f64)
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b10",
        "native",
        "per-task cost of a C-ABI kernel vs the builtin (1 core, n independent tasks)",
        opts,
    );
    let lib = build_library(&opts.out_dir)?;
    let load = |sym: &str| {
        NativeKernel::load(&lib, sym, CoreKind::Any)
            .map(KernelRef::leak)
            .map_err(|e| e.to_string())
    };
    let cases = [
        ("noop", NOOP, load("tr_noop")?, false),
        ("add", ADD, load("tr_add")?, true),
    ];
    let n: u32 = if opts.quick { 2000 } else { 8000 };
    let reps = opts.reps.max(5) * 2;
    let mut chip = ChipWorker::new(ChipOptions {
        cores: 1,
        prewarm: vec![RingSizing::default()],
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    for &(_, builtin, native, args) in &cases {
        one_run(&mut chip, builtin, args, n)?;
        one_run(&mut chip, native, args, n)?;
    }
    let mut samples = vec![(vec![], vec![]); cases.len()];
    let mut prog = Progress::new("b10", reps * cases.len());
    for _ in 0..reps {
        for (i, &(name, builtin, native, args)) in cases.iter().enumerate() {
            samples[i].0.push(one_run(&mut chip, builtin, args, n)?);
            samples[i].1.push(one_run(&mut chip, native, args, n)?);
            prog.tick(name);
        }
    }
    prog.done();
    let mut parts = vec![];
    let mut all_met = true;
    for (i, &(name, ..)) in cases.iter().enumerate() {
        let base = Series::new("ns/task", samples[i].0.clone());
        let nat = Series::new("ns/task", samples[i].1.clone());
        let ratio = nat.median / base.median;
        let met = ratio <= 1.2;
        all_met &= met;
        b.say(&format!(
            "   {name:<5} native {:>7.1} ns/task, builtin {:>7.1} ns/task: {ratio:.2}x",
            nat.median, base.median
        ));
        b.push(
            Case::new(
                name,
                &format!("ns per task (wall), median of one run's {n} independent tasks"),
                nat,
            )
            .with_baseline("builtin", base, "native time / builtin time", ratio)
            .bar("≤ 1.2× the builtin", met),
        );
        parts.push(format!("{name} {ratio:.2}x"));
    }
    let summary = format!(
        "native kernel vs builtin per task: {} (bar ≤ 1.2x: {})",
        parts.join(", "),
        if all_met { "met" } else { "missed" }
    );
    Ok(b.finish(json!({ "tasks_per_run": n, "chip_cores": 1, "samples_per_case": reps, "library": lib.display().to_string() }), summary))
}
