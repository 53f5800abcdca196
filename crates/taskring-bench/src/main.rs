//! `taskring-bench`: the benchmarks of `docs/benchmarks.md`, kept out of the user-facing
//! `taskring` command (the Python entry point, which forwards `taskring bench ...` and
//! `taskring taskbench ...` here).
//!
//! - `taskring-bench <b1|b2|...|b12|peers|all>... [--reps N] [--threads T] [--quick] [--json]`:
//!   the benchmarks (see `bench` and docs/performance.md).
//! - `taskring-bench taskbench -steps N -width N -type PATTERN -kernel KERNEL ...`: a Task
//!   Bench-compatible driver (B1; `benches/taskbench/metg.py` sweeps it against an
//!   OpenMP baseline). Its single-dash flags are parsed by the driver, not by clap.

mod bench;
mod taskbench;

use clap::Parser;
use std::process::ExitCode;

/// Run benchmarks: b1 (taskbench METG sweep vs OpenMP), b2 (submit), b3 (overhead),
/// b4 (ring curve), b5 (arena), b6 (l3), b7 (python), b9 (replay), b10 (native kernels),
/// b11 (device memory), b12 (C++ orchestration submit vs Rust and Python), peers (the B3 patterns vs oneTBB and OpenMP; `make peers-build`
/// first), or all (b2..b6 and b9..b12 in sequence; b1 and b7 run Python scripts of the
/// source tree). Results go to bench-results/<id>_<name>.json (B11:
/// bench-results/b11.json, peers: bench-results/peers.json). `taskring-bench taskbench
/// <flags>` runs the Task Bench driver instead (`taskring-bench taskbench -h`).
#[derive(Parser)]
#[command(name = "taskring-bench", version)]
struct Cli {
    /// Benchmarks to run (b1 b2 b3 b4 b5 b6 b7 b9 b10 b11 b12 peers, or all = b2..b6 and b9..b12).
    #[arg(required = true)]
    names: Vec<String>,
    /// Repetitions per measured point (median of them; at least 5).
    #[arg(long, default_value_t = 7)]
    reps: usize,
    /// Core threads of the chips and worker threads of the baselines (default: the
    /// number of CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// Smaller problems (a smoke run; noisier figures).
    #[arg(long)]
    quick: bool,
    /// Also print each result document as JSON on stdout (human lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Directory for the JSON results.
    #[arg(long, default_value = "bench-results")]
    out_dir: std::path::PathBuf,
}

/// Every benchmark `all` runs, in order.
const ALL: [&str; 9] = ["b2", "b3", "b4", "b5", "b6", "b9", "b10", "b11", "b12"];

fn main() -> ExitCode {
    let mut argv = std::env::args();
    if argv.nth(1).as_deref() == Some("taskbench") {
        return taskbench::main(argv.collect());
    }
    let cli = Cli::parse();
    let names: Vec<String> = if cli.names.iter().any(|n| n == "all") {
        ALL.iter().map(|s| s.to_string()).collect()
    } else {
        cli.names
    };
    if cli.reps < 5 {
        eprintln!("taskring-bench: --reps must be at least 5 (medians of at least 5 repetitions)");
        return ExitCode::from(2);
    }
    let threads = cli
        .threads
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    let opts = bench::Opts {
        reps: cli.reps,
        threads,
        quick: cli.quick,
        json: cli.json,
        out_dir: cli.out_dir,
    };
    if bench::run(&names, &opts) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
