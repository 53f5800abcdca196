//! `taskring`: command-line tools over the runtime.
//!
//! - `taskring sizing <scope_stats.jsonl> [--headroom 1.25]`: the smallest valid ring
//!   sizes per ring that would have held the peaks a run recorded, as a ready-to-paste
//!   `runtime_env` and as `PTO2_RING_*` lines (`taskring::dfx::sizing_command`, which
//!   `python -m taskring sizing` runs too).
//! - `taskring bench <b2|b3|b4|b5|b6|b10|all> [--reps N] [--threads T] [--quick] [--json]`:
//!   the benchmarks of BENCHMARKS.md (see `bench` and docs/performance.md).
//! - `taskring taskbench -steps N -width N -type PATTERN -kernel KERNEL ...`: a Task
//!   Bench-compatible driver (B1; `benches/taskbench/metg.py` sweeps it against an
//!   OpenMP baseline).

mod bench;
mod taskbench;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "taskring", version, about = "taskring runtime tools")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Suggest ring sizes from a scope-stats file (CallConfig.enable_scope_stats):
    /// `taskring sizing <scope_stats.jsonl> [--headroom H]` (H >= 1, default 1.25).
    /// Parsed by `taskring::dfx::sizing_command`, the implementation `python -m taskring
    /// sizing` runs too (this entry only lists it in `--help`).
    Sizing {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run benchmarks: b1 (taskbench METG sweep vs OpenMP), b2 (submit), b3 (overhead),
    /// b4 (ring curve), b5 (arena), b6 (l3), b7 (python), b10 (native kernels), or all (b2..b6 and b10 in sequence; b1
    /// and b7 run Python scripts of the source tree). Results go to
    /// bench-results/<id>_<name>.json.
    Bench {
        /// Benchmarks to run (b1 b2 b3 b4 b5 b6 b7 b10, or all = b2..b6 and b10).
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
    },
}

fn main() -> ExitCode {
    // Task Bench's single-dash flags are parsed by the driver itself, not by clap.
    let mut argv = std::env::args();
    match argv.nth(1).as_deref() {
        Some("taskbench") => return taskbench::main(argv.collect()),
        Some("sizing") => return sizing(&argv.collect::<Vec<_>>()),
        _ => {}
    }
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Bench {
            names,
            reps,
            threads,
            quick,
            json,
            out_dir,
        } => {
            let names: Vec<String> = if names.iter().any(|n| n == "all") {
                ["b2", "b3", "b4", "b5", "b6", "b9", "b10"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            } else {
                names
            };
            if reps < 5 {
                eprintln!(
                    "taskring bench: --reps must be at least 5 (medians of at least 5 repetitions)"
                );
                return ExitCode::from(2);
            }
            let threads = threads
                .unwrap_or_else(|| {
                    std::thread::available_parallelism()
                        .map(|n| n.get())
                        .unwrap_or(1)
                })
                .max(1);
            let opts = bench::Opts {
                reps,
                threads,
                quick,
                json,
                out_dir,
            };
            if bench::run(&names, &opts) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Cmd::Sizing { args } => sizing(&args),
    }
}

/// `taskring sizing ...`: the library's command, printed as it says.
fn sizing(args: &[String]) -> ExitCode {
    use std::io::Write;
    let out = taskring::dfx::sizing_command(args);
    let _ = std::io::stdout().write_all(out.stdout.as_bytes());
    let _ = std::io::stderr().write_all(out.stderr.as_bytes());
    ExitCode::from(out.status)
}
