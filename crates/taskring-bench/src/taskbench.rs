//! `taskring-bench taskbench`: a Task Bench-compatible driver (benchmark B1).
//!
//! Task Bench (Slaughter et al., SC'20) runs one or more task graphs of `steps` timesteps
//! × `width` points. Point `i` of timestep `t` depends on a set of points of timestep
//! `t-1` given by a dependence pattern, runs a kernel, and writes an output that its
//! consumers validate. This driver takes Task Bench's flags and prints its result lines
//! (`Total Tasks`, `Total Dependencies`, `Total FLOPs`, `Total Bytes`, `Elapsed Time … seconds`,
//! `FLOP/s`, `B/s`), so Task Bench's own scripts can parse it. The patterns and kernels
//! are written here from the published definitions (not copied).
//!
//! How a graph maps onto taskring (one task per point per timestep):
//! - **Outputs.** Each graph owns two host buffers (parities 0/1). Each is
//!   `[width, output_bytes/8]` of i64, rows padded to 64 bytes. Graphs wider than 256
//!   points split each buffer into up to 8 blocks of rows, one allocation each, so one
//!   tensormap bucket chain stays short. Task `(t, i)` writes row `i` of parity `t%2`
//!   (INOUT, which also orders it after the row's previous writer `(t-2, i)`). It reads
//!   rows of parity `(t-1)%2` as INPUT, one row-range view per dependency interval (per
//!   block), so a stencil task has 1 INPUT + 1 INOUT tensor and all_to_all has 1 INPUT.
//!   The tensormap infers every data dependency.
//! - **Write-after-read** is not tracked by taskring (see `engine/mod.rs`). `(t, i)`
//!   overwrites the row that the readers of `(t-2, i)` at `t-1` may still be reading.
//!   For symmetric patterns (no_comm, stencil_1d, stencil_1d_periodic, all_to_all,
//!   nearest with odd radix) those readers are already among `(t, i)`'s own inputs. For
//!   dom, tree, fft, nearest with even radix, spread and random_nearest, the readers
//!   that are missing become explicit ordering-only dependencies (`dep_wait`), at most
//!   16 per task. Whether a pattern needs them is decided at setup by brute force over
//!   its dependence sets.
//! - **trivial**: tasks take no tensors, since no task reads their output. The kernel
//!   writes its stamp into the graph's buffer with relaxed atomic stores.
//! - **Scopes.** Each timestep (all graphs together) gets its own scope at depth 1
//!   (ring 1), so retired tasks recycle. A scope is split when it would own more than
//!   half of ring 1's task window or need more than half of its dependency pool.
//! - **Ring sizing** (per dispatch, taskring's own knob). Ring 1's task window is, in
//!   order of precedence: `-window N`; `PTO2_RING_TASK_WINDOW` from the environment;
//!   otherwise `clamp(next_pow2(32 · max(Σ widths, cores)), 64, 16384)`. A window sized to
//!   the graph keeps the ring's slots and payloads (~2 KB per slot) in cache and bounds
//!   how far the orchestrator runs ahead, much as libgomp queues at most 64 tasks per
//!   thread. On a 2-core box with width 2 this halves the per-task floor compared with
//!   the default window of 16384, which cycles through ~31 MB of payloads. It also keeps
//!   a helping orchestrator (`-helper 1`) busy: it runs tasks while it waits for ring
//!   space, but once the program has submitted its last task, the first time it finds no
//!   ready task it sleeps until the run ends. With a window that holds the whole graph
//!   (`-window 0` on a 2000-task graph) that happens within the first timesteps, and
//!   stencil_1d at width 2 runs on the core thread alone (57 against 108 GFLOP/s at
//!   `-iter 16384` on 2 CPUs); with the sized window only the last window's tasks do.
//!   `-window 0` keeps the runtime's default. Ring 1's dependency pool is raised only
//!   when a wide, dense graph needs it (see `run`).
//! - **Validation.** Every task checks that its inputs are exactly the rows of its
//!   dependency set, in order, from the right buffer. Each input must hold the stamp
//!   `(t-1, j)` of its producer in every 16-byte pair. The task then writes `(t, i)`
//!   into every pair of its own row. A mismatch fails the task, and so the run, with a
//!   message naming the graph, task, input and stamps. After each run the number of
//!   executed tasks is checked against the graph's task count.
//!
//! Kernels: `empty`; `busy_wait` (`acc = acc·139 mod 2^31−1`, `-iter` times, no FLOPs);
//! `compute_bound` (Task Bench's arithmetic: 16 independent lanes of 4 doubles, `a = a·a + a`
//! `-iter` times, as register-only FMAs with AVX2/FMA, then their product: `128·iter + 64`
//! FLOPs per task, counted as Task Bench does);
//! `memory_bound` (copies one half of a per-thread `-scratch` buffer to the other,
//! `-iter` times: `iter · scratch` bytes per task).
//!
//! Extensions beyond Task Bench's flags:
//! - `-worker N`: core threads (default: the number of CPUs);
//! - `-window N`: ring 1's task window (power of 2; 0 = the runtime's default);
//! - `-warmup N`: untimed runs of the same graphs before the timed one (default 0);
//! - `-helper 1`: the orchestrator thread runs ready tasks whenever it waits for ring
//!   space, and after the program until it first finds none ready
//!   (`ChipOptions::orchestrator_helps`); with
//!   `-worker` = CPUs − 1 the run then uses as many threads as CPUs, like an OpenMP team;
//! - `-pin 1`: the orchestrator thread on the first CPU the process may use and core
//!   thread k on the (k+1)-th (modulo those CPUs). Unpinned, the scheduler can queue the
//!   core thread it wakes at a run's start on the busy orchestrator's CPU for a time
//!   slice while the other CPU idles: a trivial run of 2000 tasks of 1.6 µs then takes
//!   4 ms instead of 2.5 ms, the core thread 0.4 ms on a CPU and 5.5 ms waiting for one
//!   (`-v`);
//! - `-v`: print the runtime mapping to stderr, and after the timed run each thread's
//!   scheduler counters for it (`/proc/self/task/*/schedstat` and `status`: time on a CPU,
//!   time runnable but waiting for one, voluntary and involuntary context switches).
//!
//! `-field` and `-sample` are accepted and ignored (with a note on stderr).
//!
//! Self-contained: uses only `std`, `libc` and `taskring`.
//!
//! Files: `cli` (flags), `pattern` (dependence patterns), `war` (write-after-read
//! orderings), `graph` (buffers, views, totals), `kernels`, `task` (validation and
//! stamps), `driver` (ring sizing, orchestration, timed runs), `report` (output).

mod cli;
mod driver;
mod graph;
mod kernels;
mod pattern;
mod report;
mod task;
mod war;

use cli::{parse, physical_memory, USAGE};
use driver::{core_threads, run};
use graph::Graph;
use kernels::KernelKind;
use std::process::ExitCode;
use std::sync::Arc;

/// The name of `v` in a flag's `(name, value)` table (`-type`, `-kernel`).
fn name_of<T: PartialEq>(table: &[(&'static str, T)], v: &T) -> &'static str {
    table.iter().find(|(_, t)| t == v).map_or("?", |(n, _)| n)
}

/// Per-scope budgets on ring 1 (scopes at depth 1).
#[derive(Clone, Copy)]
struct Budgets {
    tasks: usize,
    edges: usize,
}

/// `taskring-bench taskbench <flags>`: `args` are the flags after the subcommand.
pub fn main(args: Vec<String>) -> ExitCode {
    let opts = match parse(&args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!(
                "taskring-bench taskbench: {e} (taskring-bench taskbench -h lists the flags)"
            );
            return ExitCode::from(2);
        }
    };
    // Sizes the machine cannot hold (buffers, tables, 64-bit totals) are usage errors too.
    let graphs: Vec<Arc<Graph>> = match opts
        .graphs
        .iter()
        .enumerate()
        .map(|(k, s)| {
            Graph::new(k, s)
                .map(Arc::new)
                .map_err(|e| format!("task graph {}: {e}", k + 1))
        })
        .collect()
    {
        Ok(g) => g,
        Err(e) => {
            eprintln!("taskring-bench taskbench: {e}");
            return ExitCode::from(2);
        }
    };
    let cores = core_threads(&opts);
    let scratch: u64 = opts
        .graphs
        .iter()
        .filter(|g| g.kernel == KernelKind::MemoryBound)
        .map(|g| g.scratch)
        .max()
        .unwrap_or(0);
    if scratch.saturating_mul(cores as u64) > physical_memory() {
        eprintln!("taskring-bench taskbench: -scratch {scratch} bytes for each of {cores} core threads is more than this machine's memory ({} bytes)", physical_memory());
        return ExitCode::from(2);
    }
    match run(&opts, graphs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("taskring-bench taskbench: {e}");
            ExitCode::FAILURE
        }
    }
}
