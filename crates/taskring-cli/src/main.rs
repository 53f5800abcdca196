//! `taskring`: command-line tools over the runtime.
//!
//! - `taskring sizing <scope_stats.jsonl> [--headroom 1.25]`: the smallest valid ring
//!   sizes per ring that would have held the peaks a run recorded, as a ready-to-paste
//!   `runtime_env` and as `PTO2_RING_*` lines.

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
    /// Suggest ring sizes from a scope-stats file (CallConfig.enable_scope_stats).
    Sizing {
        /// Path to scope_stats/scope_stats.jsonl.
        file: std::path::PathBuf,
        /// Multiply the recorded peaks by this factor before rounding up.
        #[arg(long, default_value_t = 1.25)]
        headroom: f64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Sizing { file, headroom } => {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("taskring sizing: cannot read {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            let peaks = match taskring::dfx::read_peaks(&text) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("taskring sizing: {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            let a = taskring::dfx::advise(&peaks, headroom);
            println!("# recorded peaks per ring: task_window={:?} heap={:?} dep_pool={:?}", peaks.task_window, peaks.heap, peaks.dep_pool);
            if let Some(f) = &peaks.failure {
                println!(
                    "# the run failed: {} (code {}) on ring {:?}, {} configured {:?}, needed {:?}",
                    f.name,
                    f.code,
                    f.ring,
                    f.resource.as_deref().unwrap_or("-"),
                    f.configured,
                    f.needed
                );
            }
            println!("# suggested sizes (headroom {:.2}):", a.headroom);
            println!("{}", a.runtime_env());
            println!("{}", a.env_lines());
            ExitCode::SUCCESS
        }
    }
}
