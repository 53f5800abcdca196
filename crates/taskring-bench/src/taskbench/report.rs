//! What the driver prints: Task Bench's configuration block and result lines on stdout
//! (numbers as C's `printf("%e")` prints them, so Task Bench's scripts parse them), and
//! with `-v` the runtime mapping and each thread's share of the timed run on stderr.

use super::graph::Graph;
use super::Budgets;
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

/// One thread's scheduler counters (`/proc/self/task/<tid>/schedstat` and `status`).
struct ThreadSample {
    name: String,
    /// Nanoseconds on a CPU, nanoseconds runnable but waiting for one, timeslices.
    on_cpu_ns: u64,
    wait_ns: u64,
    slices: u64,
    voluntary: u64,
    involuntary: u64,
}

/// The scheduler counters of every thread of this process, by thread id (empty where
/// `/proc` does not have them).
pub(super) struct ThreadTimes(Vec<(u32, ThreadSample)>);

impl ThreadTimes {
    pub(super) fn take() -> ThreadTimes {
        let mut v = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return ThreadTimes(v);
        };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let path = e.path();
            let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
            let sched: Vec<u64> = read("schedstat")
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            let status = read("status");
            let field = |key: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|x| x.trim().parse().ok())
                    .unwrap_or(0)
            };
            v.push((
                tid,
                ThreadSample {
                    name: read("comm").trim().to_string(),
                    on_cpu_ns: sched.first().copied().unwrap_or(0),
                    wait_ns: sched.get(1).copied().unwrap_or(0),
                    slices: sched.get(2).copied().unwrap_or(0),
                    voluntary: field("voluntary_ctxt_switches:"),
                    involuntary: field("nonvoluntary_ctxt_switches:"),
                },
            ));
        }
        // The calling thread's own schedstat is only brought up to date when it is
        // switched out; its clock is exact.
        // safety: gettid has no preconditions; clock_gettime writes the timespec.
        let (tid, now) = unsafe {
            let mut ts: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
            (
                libc::syscall(libc::SYS_gettid) as u32,
                ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
            )
        };
        if let Some((_, s)) = v.iter_mut().find(|(t, _)| *t == tid) {
            s.on_cpu_ns = now;
        }
        v.sort_by_key(|(tid, _)| *tid);
        ThreadTimes(v)
    }

    /// `-v`: what each thread did between `before` and now (the timed run), on stderr:
    /// milliseconds on a CPU, milliseconds runnable but waiting for a CPU, timeslices,
    /// voluntary and involuntary context switches.
    ///
    /// A thread's schedstat is brought up to date when it is switched out, so the
    /// counters are read 5 ms after the run, when idle cores have parked (their spin
    /// before parking counts as time on a CPU); the calling thread's time is its clock.
    pub(super) fn print_since(before: &ThreadTimes, elapsed: f64) {
        std::thread::sleep(std::time::Duration::from_millis(5));
        let now = ThreadTimes::take();
        let ms = |ns: u64| ns as f64 / 1e6;
        let mut cpu = 0.0;
        for (tid, s) in &now.0 {
            let b = before.0.iter().find(|(t, _)| t == tid).map(|(_, b)| b);
            let d = |f: fn(&ThreadSample) -> u64| f(s).saturating_sub(b.map_or(0, f));
            cpu += ms(d(|x| x.on_cpu_ns));
            eprintln!(
                "taskbench: thread {tid} {}: {:.1} ms on a CPU, {:.1} ms waiting for one, {} timeslices, {} voluntary / {} involuntary switches",
                s.name,
                ms(d(|x| x.on_cpu_ns)),
                ms(d(|x| x.wait_ns)),
                d(|x| x.slices),
                d(|x| x.voluntary),
                d(|x| x.involuntary)
            );
        }
        eprintln!(
            "taskbench: timed run {:.1} ms, {cpu:.1} ms on CPUs in all ({:.2} CPUs busy)",
            elapsed * 1e3,
            cpu / (elapsed * 1e3)
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
