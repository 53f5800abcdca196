//! B12 cpp submit: the cost per submit of a C++ orchestration (Simpler's API, run through
//! `taskring::ChipCallable`) against the same program in Rust and in Python.
//!
//! One program, written three times, each timing its own submit loop:
//! - C++: `b12/orchestration.cpp` (`aicpu_orchestration_entry`, `CoreTaskArgs`,
//!   `rt_submit_aiv_task`) with a no-op kernel library (`b12/noop_kernel.cpp`) and a gate
//!   kernel library (`b12/gate_kernel.cpp`, a futex wait), compiled when the benchmark starts with
//!   `$CXX` (else `g++`) `-O2 -std=c++17 -shared -fPIC -I include/pto2` into a temporary
//!   directory; `std::chrono::steady_clock` around the loop, the nanoseconds written
//!   into an int64 tensor argument;
//! - Rust: a [`Program`] submitting the builtin NOOP; `Instant` around the loop;
//! - Python: `b12/program.py`, run by the source tree's `.venv/bin/python` as a child
//!   process that runs one program per line it reads; `time.perf_counter_ns` around the
//!   loop. Skipped (with the reason) where that interpreter cannot import taskring.
//!
//! Each program is B2's loop: a gate task holds the chip's only core, `n` tasks are
//! submitted in one nested scope, the scope ends, the gate opens — nothing completes
//! while the loop runs. The task window is set (`CallConfig::runtime_env`) so the scope
//! fits with room to spare. Cases as B2's: `2in_1out` (2 caller inputs + 1 runtime output
//! of 16 floats) and `2in_1inout_chain` (2 inputs + 1 INOUT tensor shared by all tasks).
//! The figure is ns per submit, the median over the rounds; every round runs C++, Rust
//! and Python in turn for each case, after one warm-up run of each. Ratios C++/Rust and
//! Python/Rust, of the medians and the median of the per-round ratios. Bar: C++ within
//! 1.5× of Rust.

use super::paired::PairedRatios;
use super::submit::{gate_kernel, set_gate, wait_gate_running};
use super::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use taskring::builtin::NOOP;
use taskring::node::ArgDir;
use taskring::*;

const CASES: [(&str, bool); 2] = [("2in_1out", false), ("2in_1inout_chain", true)];

/// The source tree the benchmark was built from.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        let p = std::env::temp_dir().join(format!("taskring-b12-{}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The C++ compiler's name and its version line.
fn compiler() -> (String, String) {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let version = Command::new(&cxx)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default();
    (cxx, version)
}

/// Compile `b12/<name>.cpp` into `<dir>/lib<name>.so`.
fn compile(cxx: &str, name: &str, dir: &Path) -> Result<PathBuf, String> {
    let root = root();
    let src = root
        .join("crates/taskring-bench/b12")
        .join(format!("{name}.cpp"));
    let include = root.join("include/pto2");
    if !include.join("pto_orchestration_api.h").exists() {
        return Err(format!(
            "{} not found (b12 compiles its C++ program against the source tree's headers)",
            include.join("pto_orchestration_api.h").display()
        ));
    }
    let lib = dir.join(format!("lib{name}.so"));
    let out = Command::new(cxx)
        .args(["-O2", "-std=c++17", "-shared", "-fPIC", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&lib)
        .arg(&src)
        .output()
        .map_err(|e| format!("could not run the C++ compiler {cxx}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cxx} failed to build {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(lib)
}

/// The C++ program: the orchestration with the no-op kernel (func_id 0) and the gate
/// (func_id 1).
fn cpp_program(dir: &Path, cxx: &str) -> Result<ChipCallable, String> {
    let orch = compile(cxx, "orchestration", dir)?;
    let noop = compile(cxx, "noop_kernel", dir)?;
    let gate = compile(cxx, "gate_kernel", dir)?;
    let kernel =
        |p: &Path| CoreCallable::from_path(p, CoreKind::Aiv, &[]).map_err(|e| e.to_string());
    let sig = [
        ArgDir::In,
        ArgDir::In,
        ArgDir::InOut,
        ArgDir::InOut,
        ArgDir::Out,
        ArgDir::Scalar,
        ArgDir::Scalar,
    ];
    ChipCallable::from_path(
        &orch,
        "aicpu_orchestration_entry",
        &sig,
        vec![(0, kernel(&noop)?), (1, kernel(&gate)?)],
    )
    .map_err(|e| e.to_string())
}

/// A one-dimensional tensor of `dtype` over `v`.
fn raw_tensor<T>(v: &mut [T], dtype: DType) -> CallerTensor<'_> {
    assert_eq!(std::mem::size_of::<T>(), dtype.size_bytes());
    let t = Tensor::from_raw(v.as_mut_ptr() as u64, &[v.len() as u32], dtype);
    // SAFETY: `v` is borrowed mutably for the tensor's lifetime, and only the run
    // touches it.
    unsafe { CallerTensor::from_raw(t) }
}

/// One run of the C++ program: ns per submit.
fn cpp_run(
    chip: &mut ChipWorker,
    prog: &Program,
    cfg: &CallConfig,
    chain: bool,
    n: u32,
) -> Result<f64, String> {
    let (mut va, mut vb, mut vx) = (vec![1f32; 16], vec![2f32; 16], vec![0f32; 16]);
    let (mut gate, mut timing) = (vec![0i32; 2], vec![-1i64; 1]);
    let args = [
        Arg::Tensor(CallerTensor::f32(&mut va, &[16])),
        Arg::Tensor(CallerTensor::f32(&mut vb, &[16])),
        Arg::Tensor(CallerTensor::f32(&mut vx, &[16])),
        Arg::Tensor(raw_tensor(&mut gate, DType::I32)),
        Arg::Tensor(raw_tensor(&mut timing, DType::I64)),
        Arg::Scalar(Scalar::I64(n as i64)),
        Arg::Scalar(Scalar::I64(chain as i64)),
    ];
    let rep = chip.run(prog, &args, cfg).map_err(|e| e.to_string())?;
    if rep.tasks != n as u64 + 1 {
        return Err(format!(
            "C++: expected {} tasks, the run reports {}",
            n + 1,
            rep.tasks
        ));
    }
    if timing[0] < 0 {
        return Err("C++: the program wrote no timing".into());
    }
    Ok(timing[0] as f64 / n as f64)
}

/// The Rust program (B2's loop): ns per submit, through `out`.
fn rust_program(gate: KernelRef, chain: bool, n: u32, out: Arc<Mutex<f64>>) -> Program {
    Program::new("b12_rust", move |o, args| {
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
                if chain {
                    t.input(a).input(b).inout(x);
                } else {
                    t.input(a).input(b).output(spec);
                }
                o.submit(NOOP, &t)?;
            }
            Ok::<(), RuntimeFailure>(())
        })();
        let dt = t0.elapsed();
        let e = o.end_scope();
        set_gate(true);
        r?;
        e?;
        *out.lock().unwrap() = dt.as_nanos() as f64 / n as f64;
        Ok(())
    })
}

fn rust_run(
    chip: &mut ChipWorker,
    prog: &Program,
    out: &Mutex<f64>,
    cfg: &CallConfig,
    n: u32,
) -> Result<f64, String> {
    let (mut va, mut vb, mut vx) = (vec![1f32; 16], vec![2f32; 16], vec![0f32; 16]);
    let args = [
        Arg::Tensor(CallerTensor::f32(&mut va, &[16])),
        Arg::Tensor(CallerTensor::f32(&mut vb, &[16])),
        Arg::Tensor(CallerTensor::f32(&mut vx, &[16])),
    ];
    *out.lock().unwrap() = f64::NAN;
    let rep = chip.run(prog, &args, cfg).map_err(|e| e.to_string())?;
    if rep.tasks != n as u64 + 1 {
        return Err(format!(
            "Rust: expected {} tasks, the run reports {}",
            n + 1,
            rep.tasks
        ));
    }
    Ok(*out.lock().unwrap())
}

/// The Python program's process (`b12/program.py`).
struct PythonSide {
    child: Child,
    /// None once closed (which ends the program's loop).
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    version: String,
}

impl PythonSide {
    /// Start it; `Err` is the reason the Python column is skipped.
    fn start(n: u32, window: u64) -> Result<PythonSide, String> {
        let root = root();
        let python = root.join(".venv/bin/python");
        if !python.exists() {
            return Err(format!("no {}", python.display()));
        }
        let script = root.join("crates/taskring-bench/b12/program.py");
        let version = Command::new(&python)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let mut child = Command::new(&python)
            .arg(&script)
            .args(["--n", &n.to_string(), "--window", &window.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not run {}: {e}", python.display()))?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut side = PythonSide {
            child,
            stdin,
            stdout,
            version,
        };
        match side.line()?.as_str() {
            "ready" => Ok(side),
            l => Err(l.strip_prefix("skip: ").unwrap_or(l).to_string()),
        }
    }

    fn line(&mut self) -> Result<String, String> {
        let mut l = String::new();
        match self.stdout.read_line(&mut l) {
            Ok(0) => Err("the Python program exited".into()),
            Ok(_) => Ok(l.trim().to_string()),
            Err(e) => Err(format!("reading the Python program: {e}")),
        }
    }

    /// One run of `case`: ns per submit.
    fn run(&mut self, case: &str) -> Result<f64, String> {
        let stdin = self.stdin.as_mut().expect("open until dropped");
        writeln!(stdin, "{case}")
            .and_then(|_| stdin.flush())
            .map_err(|e| format!("writing to the Python program: {e}"))?;
        let l = self.line()?;
        l.parse::<f64>()
            .map_err(|_| format!("Python {case}: {}", l.trim_start_matches("error: ")))
    }
}

impl Drop for PythonSide {
    fn drop(&mut self) {
        self.stdin = None;
        let _ = self.child.wait();
    }
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b12",
        "cpp_submit",
        "cost per submit of a C++ orchestration vs the same program in Rust and Python (1 core held by a gate)",
        opts,
    );
    let n: u32 = if opts.quick { 300 } else { 2000 };
    // Room for the scope's n tasks, the gate and then some; nothing back-pressures.
    let window = (2 * n as u64 + 64).next_power_of_two();
    let cfg = CallConfig::default().with_ring(RingField::TaskWindow, [window; 4]);
    let sizing = RingSizing::resolve_from_process(&cfg.runtime_env).map_err(|e| e.to_string())?;
    let rounds = opts.reps.max(5) * 3;

    let (cxx, cxx_version) = compiler();
    let tmp = TempDir::new()?;
    let t_build = Instant::now();
    let cpp = cpp_program(&tmp.0, &cxx)?;
    let build_s = t_build.elapsed().as_secs_f64();
    b.say(&format!(
        "   C++ program built with {cxx} ({cxx_version}) in {build_s:.1} s"
    ));
    let cpp_prog = cpp.program();

    let mut chip = ChipWorker::new(ChipOptions {
        cores: 1,
        prewarm: vec![sizing],
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let gate = gate_kernel();
    let rust: Vec<(Program, Arc<Mutex<f64>>)> = CASES
        .iter()
        .map(|&(_, chain)| {
            let out = Arc::new(Mutex::new(f64::NAN));
            (rust_program(gate, chain, n, out.clone()), out)
        })
        .collect();

    let mut python = match PythonSide::start(n, window) {
        Ok(p) => Ok(p),
        Err(why) => {
            b.say(&format!("   Python: skipped: {why}"));
            Err(why)
        }
    };
    let python_version = python
        .as_ref()
        .map(|p| p.version.clone())
        .unwrap_or_default();

    // One warm-up run of each.
    for (i, &(name, chain)) in CASES.iter().enumerate() {
        cpp_run(&mut chip, &cpp_prog, &cfg, chain, n)?;
        rust_run(&mut chip, &rust[i].0, &rust[i].1, &cfg, n)?;
        if let Ok(p) = python.as_mut() {
            p.run(name)?;
        }
    }
    // samples[case] = (C++, Rust, Python), in round order.
    let mut samples = vec![(vec![], vec![], vec![]); CASES.len()];
    let mut prog = Progress::new("b12", rounds * CASES.len());
    for _ in 0..rounds {
        for (i, &(name, chain)) in CASES.iter().enumerate() {
            samples[i]
                .0
                .push(cpp_run(&mut chip, &cpp_prog, &cfg, chain, n)?);
            samples[i]
                .1
                .push(rust_run(&mut chip, &rust[i].0, &rust[i].1, &cfg, n)?);
            if let Ok(p) = python.as_mut() {
                samples[i].2.push(p.run(name)?);
            }
            prog.tick(name);
        }
    }
    prog.done();
    let python_skip = python.as_ref().err().cloned();
    drop(python);

    let mut parts = vec![];
    let mut all_met = true;
    for (i, &(name, _)) in CASES.iter().enumerate() {
        let (c, r, p) = &samples[i];
        let cs = Series::new("ns/submit", c.clone());
        let rs = Series::new("ns/submit", r.clone());
        let ratio = cs.median / rs.median;
        let paired = PairedRatios::new(c, r);
        let met = ratio <= 1.5;
        all_met &= met;
        let paired_json = |q: &PairedRatios| json!({ "median": q.median, "q1": q.q1, "q3": q.q3, "ratios": q.ratios });
        let (py_text, py_json) = match &python_skip {
            Some(why) => (format!("Python skipped ({why})"), json!({ "skipped": why })),
            None => {
                let ps = Series::new("ns/submit", p.clone());
                let pr = PairedRatios::new(p, r);
                let text = format!(
                    "Python {:>7.1} ({:.2}x Rust, paired {:.2}x)",
                    ps.median,
                    ps.median / rs.median,
                    pr.median
                );
                let j = json!({ "value": ps, "ratio": ps.median / rs.median, "paired_over_rust": paired_json(&pr) });
                (text, j)
            }
        };
        b.say(&format!(
            "   {name:<17} C++ {:>7.1}, Rust {:>7.1} ns/submit: C++/Rust {ratio:.2}x (paired {:.2}x, q1–q3 {:.2}–{:.2}); {py_text}",
            cs.median, rs.median, paired.median, paired.q1, paired.q3
        ));
        b.push(
            Case::new(
                name,
                &format!(
                    "ns per submit of the C++ orchestration, one run's {n} submits in one scope"
                ),
                cs,
            )
            .with_baseline("Rust", rs.clone(), "C++ ns/submit / Rust ns/submit", ratio)
            .bar("≤ 1.5× Rust", met)
            .extra(json!({ "paired_over_rust": paired_json(&paired), "python": py_json })),
        );
        if python_skip.is_none() {
            let ps = Series::new("ns/submit", p.clone());
            let pr = ps.median / rs.median;
            b.push(
                Case::new(
                    &format!("{name}_python"),
                    &format!("ns per submit of the Python orchestration, one run's {n} submits in one scope"),
                    ps,
                )
                .with_baseline("Rust", rs, "Python ns/submit / Rust ns/submit", pr)
                .extra(json!({
                    "paired_over_rust": paired_json(&PairedRatios::new(p, r)),
                    "reported": true,
                })),
            );
            parts.push(format!("{name} C++/Rust {ratio:.2}x, Python/Rust {pr:.2}x"));
        } else {
            parts.push(format!("{name} C++/Rust {ratio:.2}x"));
        }
    }
    let summary = format!(
        "{} (bar C++ ≤ 1.5x Rust: {}){}",
        parts.join("; "),
        if all_met { "met" } else { "missed" },
        python_skip
            .as_ref()
            .map(|w| format!("; Python skipped: {w}"))
            .unwrap_or_default()
    );
    Ok(b.finish(
        json!({
            "submits_per_run": n, "chip_cores": 1, "ring_task_window": window,
            "rounds": rounds, "order": "per round and case: C++, Rust, Python",
            "cxx": cxx, "cxx_version": cxx_version,
            "cxx_flags": "-O2 -std=c++17 -shared -fPIC", "cpp_build_s": build_s,
            "python": python_version, "python_skipped": python_skip,
        }),
        summary,
    ))
}
