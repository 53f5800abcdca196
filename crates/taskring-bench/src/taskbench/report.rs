//! What the driver prints: Task Bench's configuration block and result lines on stdout
//! (numbers as C's `printf("%e")` prints them, so Task Bench's scripts parse them), and
//! with `-v` the runtime mapping on stderr.

use super::driver::Budgets;
use super::graph::Graph;
use std::sync::Arc;
use taskring::{ChipWorker, RingSizing};

/// `x` as C's `printf("%e")` prints it (`1.234568e-02`).
fn c_exp(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let s = format!("{x:.6e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// Task Bench's configuration block, one entry per graph.
pub(super) fn print_config(graphs: &[Arc<Graph>]) {
    println!("Running Task Benchmark");
    println!("  Configuration:");
    for g in graphs {
        let s = &g.spec;
        println!("    Task Graph {}:", g.idx + 1);
        println!("      Time Steps: {}", s.steps);
        println!("      Max Width: {}", s.width);
        println!("      Dependence Type: {}", s.pattern.name());
        println!("      Radix: {}", s.radix);
        println!("      Period: {}", g.shape.period);
        println!("      Fraction Connected: {:.6}", s.fraction);
        println!("      Kernel:");
        println!("        Type: {}", s.kernel.name());
        println!("        Iterations: {}", s.iter);
        println!("        Output Bytes: {}", s.output);
        println!("        Scratch Bytes: {}", s.scratch);
    }
}

/// Task Bench's totals over all graphs.
pub(super) struct Totals {
    pub(super) tasks: u64,
    deps: u64,
    flops: u64,
    bytes: u64,
}

impl Totals {
    pub(super) fn of(graphs: &[Arc<Graph>]) -> Totals {
        // (Each graph's product was checked at setup; several graphs saturate.)
        Totals {
            tasks: graphs.iter().map(|g| g.tasks).sum(),
            deps: graphs.iter().map(|g| g.deps).sum(),
            flops: graphs
                .iter()
                .fold(0u64, |a, g| a.saturating_add(g.tasks * g.flops_per_task)),
            bytes: graphs
                .iter()
                .fold(0u64, |a, g| a.saturating_add(g.tasks * g.bytes_per_task)),
        }
    }

    /// Task Bench's result lines for a timed run of `elapsed` seconds.
    pub(super) fn print(&self, elapsed: f64) {
        println!("Total Tasks {}", self.tasks);
        println!("Total Dependencies {}", self.deps);
        println!("Total FLOPs {}", self.flops);
        println!("Total Bytes {}", self.bytes);
        println!("Elapsed Time {} seconds", c_exp(elapsed));
        println!("FLOP/s {}", c_exp(self.flops as f64 / elapsed));
        println!("B/s {}", c_exp(self.bytes as f64 / elapsed));
    }
}

/// `-v`: the runtime mapping on stderr.
pub(super) fn print_mapping(
    chip: &ChipWorker,
    sizing: &RingSizing,
    budget: Budgets,
    graphs: &[Arc<Graph>],
) {
    eprintln!(
        "taskbench: taskring chip with {} core threads (+ the orchestrator thread), {sizing}; scope budget {} tasks / {} edges",
        chip.cores().len(),
        budget.tasks,
        budget.edges
    );
    for g in graphs {
        eprintln!(
            "taskbench: graph {}: {} tasks, {} dependencies; buffers 2 x {} block(s) of {} rows x {} words (stride {}); max {} input tensors per task; explicit write-after-read orderings: {} total, max {} per task",
            g.idx + 1,
            g.tasks,
            g.deps,
            g.blocks[0].len(),
            g.block_rows,
            g.out_words,
            g.stride,
            g.max_inputs,
            g.explicit_total,
            g.max_explicit
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_format() {
        assert_eq!(c_exp(0.0123456789), "1.234568e-02");
        assert_eq!(c_exp(0.0), "0.000000e+00");
        assert_eq!(c_exp(6.02e23), "6.020000e+23");
    }
}
