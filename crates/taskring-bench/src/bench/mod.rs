//! `taskring-bench <name>`: the benchmarks B2–B6, B9–B12 and peers of `docs/benchmarks.md`
//! (B7 is `benches/b7_python.py`, B1 is `taskring-bench taskbench`).
//!
//! Every benchmark pins its thread counts, takes the median of at least 5 repetitions
//! (baseline and taskring samples interleaved, so machine noise hits both alike), prints
//! the machine, writes one JSON document to `bench-results/<id>_<name>.json` (machine,
//! parameters, raw samples, medians, the baseline's figures, the ratio, each bar met or
//! not) and prints a one-line summary. `--json` prints that document on stdout too (the
//! human-readable lines then go to stderr only).
//!
//! What each benchmark measures, and how to read it: `docs/performance.md`.

pub mod arena;
pub mod baseline;
pub mod cpp_submit;
pub mod cpus;
pub mod device_memory;
pub mod l3_round_trip;
pub mod native_kernels;
pub mod overhead;
pub mod paired;
pub mod peers;
pub mod replay;
pub mod ring_curve;
pub mod submit;

use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options shared by every benchmark.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Repetitions per measured point (at least 5).
    pub reps: usize,
    /// Core threads of the chips (and worker threads of the baselines).
    pub threads: usize,
    /// Smaller problem sizes (a smoke run; figures are noisier).
    pub quick: bool,
    /// Print the JSON document on stdout.
    pub json: bool,
    /// Where JSON results go.
    pub out_dir: PathBuf,
}

/// The machine a result was measured on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub kernel: String,
    /// `/proc/loadavg` when the benchmark started and ended (other users of the box).
    pub loadavg_start: String,
    pub loadavg_end: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        Machine {
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model,
            kernel,
            loadavg_start: loadavg(),
            loadavg_end: String::new(),
        }
    }
    pub fn line(&self) -> String {
        format!(
            "machine: nproc={} cpu=\"{}\" kernel={} loadavg={}",
            self.nproc, self.cpu_model, self.kernel, self.loadavg_start
        )
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A bar of `docs/benchmarks.md` and whether this run met it.
#[derive(Clone, Debug, Serialize)]
pub struct Bar {
    pub text: String,
    pub met: bool,
}

/// Samples of one measured quantity.
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    pub unit: String,
    pub samples: Vec<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Series {
    pub fn new(unit: &str, samples: Vec<f64>) -> Series {
        Series {
            unit: unit.into(),
            median: median(&samples),
            min: fmin(&samples),
            max: fmax(&samples),
            samples,
        }
    }
}

/// One measured case: taskring's figure, optionally a baseline's and their ratio.
#[derive(Clone, Debug, Serialize)]
pub struct Case {
    pub name: String,
    /// What one sample is.
    pub what: String,
    pub value: Series,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// How `ratio` is formed (e.g. "taskring time / baseline time").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_def: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bars: Vec<Bar>,
    /// Anything else worth keeping (derived figures, counters).
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub extra: serde_json::Value,
}

#[derive(Clone, Debug, Serialize)]
pub struct Baseline {
    pub name: String,
    pub value: Series,
}

impl Case {
    pub fn new(name: &str, what: &str, value: Series) -> Case {
        Case {
            name: name.into(),
            what: what.into(),
            value,
            baseline: None,
            ratio_def: None,
            ratio: None,
            bars: vec![],
            extra: serde_json::Value::Null,
        }
    }
    pub fn with_baseline(mut self, name: &str, b: Series, ratio_def: &str, ratio: f64) -> Case {
        self.baseline = Some(Baseline {
            name: name.into(),
            value: b,
        });
        self.ratio_def = Some(ratio_def.into());
        self.ratio = Some(ratio);
        self
    }
    pub fn bar(mut self, text: impl Into<String>, met: bool) -> Case {
        self.bars.push(Bar {
            text: text.into(),
            met,
        });
        self
    }
    pub fn extra(mut self, v: serde_json::Value) -> Case {
        self.extra = v;
        self
    }
}

/// A benchmark's whole result document.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: u32,
    pub bench: String,
    pub title: String,
    pub command: String,
    pub unix_time: u64,
    pub duration_s: f64,
    pub machine: Machine,
    pub params: serde_json::Value,
    pub cases: Vec<Case>,
    pub summary: String,
    /// Every bar of this benchmark met?
    pub bars_met: bool,
}

/// Collects a benchmark's cases and writes its report.
pub struct Bench {
    pub id: &'static str,
    pub name: &'static str,
    pub title: &'static str,
    pub opts: Opts,
    pub machine: Machine,
    pub cases: Vec<Case>,
    t0: Instant,
}

impl Bench {
    pub fn start(id: &'static str, name: &'static str, title: &'static str, opts: &Opts) -> Bench {
        let machine = Machine::probe();
        say(opts, &format!("== {id} {name}: {title}"));
        say(opts, &format!("   {}", machine.line()));
        say(
            opts,
            &format!(
                "   threads={} reps={}{}",
                opts.threads,
                opts.reps,
                if opts.quick { " (quick)" } else { "" }
            ),
        );
        Bench {
            id,
            name,
            title,
            opts: opts.clone(),
            machine,
            cases: vec![],
            t0: Instant::now(),
        }
    }

    pub fn say(&self, s: &str) {
        say(&self.opts, s)
    }

    pub fn push(&mut self, c: Case) {
        self.cases.push(c);
    }

    /// Write the JSON document, print the summary (and the document with `--json`).
    pub fn finish(self, params: serde_json::Value, summary: String) -> Report {
        let stem = format!("{}_{}", self.id, self.name);
        self.finish_as(&stem, params, summary)
    }

    /// [`Bench::finish`], writing the document to `<out_dir>/<stem>.json`.
    pub fn finish_as(mut self, stem: &str, params: serde_json::Value, summary: String) -> Report {
        self.machine.loadavg_end = loadavg();
        let bars_met = self.cases.iter().flat_map(|c| c.bars.iter()).all(|b| b.met);
        let report = Report {
            schema: 1,
            bench: format!("{}_{}", self.id, self.name),
            title: self.title.into(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            duration_s: self.t0.elapsed().as_secs_f64(),
            machine: self.machine.clone(),
            params,
            cases: std::mem::take(&mut self.cases),
            summary: summary.clone(),
            bars_met,
        };
        let text = serde_json::to_string_pretty(&report).expect("report serialises");
        let path = self.opts.out_dir.join(format!("{stem}.json"));
        let written =
            std::fs::create_dir_all(&self.opts.out_dir).and_then(|_| std::fs::write(&path, &text));
        if let Err(e) = &written {
            eprintln!("taskring-bench: cannot write {}: {e}", path.display());
        }
        let line = format!(
            "{} {}: {} [bars {}] -> {}",
            self.id,
            self.name,
            summary,
            if bars_met { "met" } else { "NOT all met" },
            path.display()
        );
        if self.opts.json {
            eprintln!("{line}");
            println!("{text}");
        } else {
            println!("{line}");
        }
        report
    }
}

/// A human-readable line (stderr with `--json`, else stdout).
pub fn say(opts: &Opts, s: &str) {
    if opts.json {
        eprintln!("{s}");
    } else {
        println!("{s}");
        let _ = std::io::stdout().flush();
    }
}

/// A plain stderr progress counter: `\r`-updated on a terminal, else a line at most
/// every 5 s. Silent for work that ends within 2 s.
pub struct Progress {
    label: String,
    total: usize,
    done: usize,
    t0: Instant,
    last: Instant,
    tty: bool,
    shown: bool,
}

impl Progress {
    pub fn new(label: &str, total: usize) -> Progress {
        let now = Instant::now();
        Progress {
            label: label.into(),
            total,
            done: 0,
            t0: now,
            last: now,
            tty: std::io::stderr().is_terminal(),
            shown: false,
        }
    }
    pub fn tick(&mut self, what: &str) {
        self.done += 1;
        let now = Instant::now();
        if now.duration_since(self.t0) < Duration::from_secs(2) {
            return;
        }
        let every = if self.tty {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(5)
        };
        if self.shown && now.duration_since(self.last) < every && self.done < self.total {
            return;
        }
        self.last = now;
        self.shown = true;
        let msg = format!(
            "  [{}] {}/{} {:.0}s {}",
            self.label,
            self.done,
            self.total,
            now.duration_since(self.t0).as_secs_f64(),
            what
        );
        let mut e = std::io::stderr();
        if self.tty {
            let _ = write!(e, "\r{msg:<100}");
            let _ = e.flush();
        } else {
            let _ = writeln!(e, "{msg}");
        }
    }
    pub fn done(self) {
        if self.shown && self.tty {
            let _ = write!(std::io::stderr(), "\r{:<100}\r", "");
        }
    }
}

pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The median of `n` samples, each taken by `sample` (which times what it measures
/// itself, so whatever it does around the timed call stays outside the timing).
pub fn median_of(n: usize, mut sample: impl FnMut() -> Result<f64, String>) -> Result<f64, String> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(sample()?);
    }
    Ok(median(&v))
}

/// The median µs of `n` calls of `op`, each timed on its own (only the call).
pub fn median_us(n: usize, mut op: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    median_of(n, || {
        let t0 = Instant::now();
        op()?;
        Ok(t0.elapsed().as_secs_f64() * 1e6)
    })
}

fn fmin(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}
fn fmax(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Resident set size now, bytes.
pub fn rss_now() -> u64 {
    taskring::rss_bytes()
}

/// Reset the process's peak RSS (`/proc/self/clear_refs` ← 5); false if not possible.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak RSS since the last reset (`VmHWM`), bytes.
pub fn peak_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

pub const MIB: f64 = 1024.0 * 1024.0;

/// `x` with a sensible number of digits.
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// B1 (the METG sweep, which drives `taskring-bench taskbench` and the OpenMP baseline)
/// and B7 (the Python API) are Python scripts of the repository: run one with the
/// project's `.venv` interpreter (made by `make py-dev`; B7 needs the package installed
/// there), else `python3`, passing `--reps`, `--out-dir`, `--taskring-bench` (this
/// binary) and, for `--quick`, a shorter B1 sweep. The script writes its JSON and prints
/// its summary itself.
fn run_script(rel: &str, args: &[&str], opts: &Opts) -> Result<(), String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join(rel);
    if !script.exists() {
        return Err(format!(
            "{} not found (this command runs the scripts of the source tree it was built from)",
            script.display()
        ));
    }
    let venv = root.join(".venv/bin/python");
    let python = if venv.exists() {
        venv
    } else {
        std::path::PathBuf::from("python3")
    };
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(&script)
        .args(args)
        .arg("--reps")
        .arg(opts.reps.to_string())
        .arg("--out-dir")
        .arg(&opts.out_dir);
    // Both scripts drive this very binary (B1 its `taskbench` driver, B7 its B2).
    if let Ok(me) = std::env::current_exe() {
        cmd.arg("--taskring-bench").arg(me);
    }
    if opts.quick && rel.ends_with("metg.py") {
        cmd.args(["--steps", "200", "--budget", "20"]);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("could not run {}: {e}", python.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {} exited with {status}",
            python.display(),
            script.display()
        ))
    }
}

/// Run every benchmark of `names` in order; returns false if one could not run.
pub fn run(names: &[String], opts: &Opts) -> bool {
    let mut ok = true;
    for n in names {
        let r = match n.as_str() {
            "b2" | "submit" => submit::run(opts).map(|_| ()),
            "b3" | "overhead" => overhead::run(opts).map(|_| ()),
            "b4" | "ring" | "ring-curve" => ring_curve::run(opts).map(|_| ()),
            "b5" | "arena" => arena::run(opts).map(|_| ()),
            "b6" | "l3" => l3_round_trip::run(opts).map(|_| ()),
            "b9" | "replay" => replay::run(opts).map(|_| ()),
            "b10" | "native" => native_kernels::run(opts).map(|_| ()),
            "b11" | "device-memory" => device_memory::run(opts).map(|_| ()),
            "b12" | "cpp-submit" => cpp_submit::run(opts).map(|_| ()),
            "peers" => peers::run(opts).map(|_| ()),
            "b1" | "metg" => run_script("benches/taskbench/metg.py", &["trivial", "stencil_1d"], opts),
            "b7" | "python" => run_script("benches/b7_python.py", &[], opts),
            other => Err(format!("unknown benchmark '{other}' (b1 metg, b2 submit, b3 overhead, b4 ring, b5 arena, b6 l3, b7 python, b9 replay, b10 native, b11 device-memory, b12 cpp-submit, peers, all; `taskring-bench taskbench` is the Task Bench driver)")),
        };
        if let Err(e) = r {
            eprintln!("taskring-bench {n}: {e}");
            ok = false;
        }
    }
    ok
}
