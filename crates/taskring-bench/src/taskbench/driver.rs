//! The taskring side of the driver: the ring sizing of the dispatch, the program that
//! submits every graph's tasks one scope per timestep, and the timed runs on one chip.

use super::cli::Opts;
use super::graph::Graph;
use super::pattern::{Intervals, Pattern};
use super::report::{print_config, print_mapping, ThreadTimes, Totals};
use super::task::{Counters, TbKernel};
use super::Budgets;
use std::sync::Arc;
use std::time::Instant;
use taskring::{
    ChipOptions, ChipWorker, KernelRef, Orchestrator, Program, RingField, RingSizing, RuntimeEnv,
    RuntimeFailure, Scalar, SizeSource, TaskArgs, TaskId,
};

/// The program: each timestep's tasks of every graph in one scope at depth 1, split when
/// a scope would pass `budget`; each task's inputs, its row and its explicit orderings.
fn orchestrate(
    o: &mut Orchestrator<'_>,
    graphs: &[Arc<Graph>],
    kernels: &[KernelRef],
    budget: Budgets,
) -> Result<(), RuntimeFailure> {
    // ids[g][parity][point]: the task of (t, point) for the last two timesteps.
    let mut ids: Vec<[Vec<TaskId>; 2]> = graphs
        .iter()
        .map(|g| {
            [
                vec![TaskId::INVALID; g.shape.width as usize],
                vec![TaskId::INVALID; g.shape.width as usize],
            ]
        })
        .collect();
    let max_steps = graphs.iter().map(|g| g.shape.steps).max().unwrap_or(0);
    let mut iv = Intervals::new();
    for t in 0..max_steps {
        o.begin_scope(false)?;
        let (mut n_tasks, mut n_edges, mut n_spill) = (0usize, 0usize, 0usize);
        for (gi, g) in graphs.iter().enumerate() {
            let s = &g.shape;
            if t >= s.steps {
                continue;
            }
            let kernel = kernels[gi];
            let p = (t & 1) as usize;
            let q = p ^ 1;
            let lo = s.offset_at(t);
            let trivial = s.pattern == Pattern::Trivial;
            for i in lo..lo + s.width_at(t) {
                let mut a = TaskArgs::new();
                let mut edges = 0usize;
                if !trivial {
                    s.deps_at(t, i, &mut iv);
                    for &(x, y) in iv.as_slice() {
                        g.push_inputs(&mut a, q, x, y);
                    }
                    a.inout(g.row_view(p, i));
                    edges = iv.count() as usize + 1;
                    if let Some(war) = &g.war {
                        let prev = &ids[gi][q];
                        war.for_each_missing(s, t, i, &iv, |k| {
                            a.dep_wait(prev[k as usize]);
                            edges += 1;
                        });
                    }
                }
                if n_tasks > 0
                    && (n_tasks + 1 > budget.tasks
                        || n_edges + edges > budget.edges
                        || n_spill + edges.saturating_sub(16) > budget.edges)
                {
                    o.end_scope()?;
                    o.begin_scope(false)?;
                    (n_tasks, n_edges, n_spill) = (0, 0, 0);
                }
                a.scalar(Scalar::I64(t)).scalar(Scalar::I64(i));
                let id = o.submit(kernel, &a)?.id;
                ids[gi][p][i as usize] = id;
                n_tasks += 1;
                n_edges += edges;
                n_spill += edges.saturating_sub(16);
            }
        }
        o.end_scope()?;
    }
    Ok(())
}

/// Core threads: `-worker`, else the number of CPUs.
pub(super) fn core_threads(opts: &Opts) -> usize {
    if opts.workers > 0 {
        opts.workers
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

/// The ring sizing of the dispatch: the process's, with ring 1's task window and
/// dependency pool set for these graphs (see the `taskbench` module doc).
fn ring_sizing(opts: &Opts, graphs: &[Arc<Graph>]) -> Result<RingSizing, String> {
    let mut sizing = RingSizing::resolve_from_process(&RuntimeEnv::default())
        .map_err(|e| format!("ring sizing: {e}"))?;
    let cores = core_threads(opts);
    let window = match opts.window {
        Some(0) => None,
        Some(w) => Some(w),
        None if sizing.source(RingField::TaskWindow, 1) != SizeSource::Default => None,
        None => {
            let points: u64 = graphs.iter().map(|g| g.shape.width as u64).sum();
            Some(
                (32 * points.max(cores as u64))
                    .next_power_of_two()
                    .clamp(64, sizing.task_window[1].max(64)),
            )
        }
    };
    if let Some(w) = window {
        let mut tw = sizing.task_window;
        tw[1] = w;
        sizing = RingSizing::from_values(tw, sizing.heap, sizing.dep_pool)
            .map_err(|e| format!("ring sizing: {e}"))?;
    }
    // Ring 1's dependency pool must hold the edges of two live timesteps: a task claims
    // its producers (timestep t-1, possibly the ring's oldest task) before it reserves
    // its nodes, so a pool filled by those producers' own edges cannot drain (taskring
    // reports that as a provable DEP_POOL_OVERFLOW). Only wide, dense graphs (e.g.
    // all_to_all beyond ~60 points) need more than the default.
    let need: u64 = graphs
        .iter()
        .map(|g| 2 * g.shape.width as u64 * g.max_edges as u64)
        .sum::<u64>()
        + graphs.iter().map(|g| g.max_edges as u64).max().unwrap_or(0);
    if need > sizing.dep_pool[1] {
        let pool = need.next_power_of_two().min(i32::MAX as u64);
        let mut dep = sizing.dep_pool;
        dep[1] = pool;
        eprintln!("taskring-bench taskbench: note: ring 1's dependency pool raised from {} to {pool} entries for these graphs", sizing.dep_pool[1]);
        sizing = RingSizing::from_values(sizing.task_window, sizing.heap, dep)
            .map_err(|e| format!("ring sizing: {e}"))?;
    }
    Ok(sizing)
}

/// `-pin 1`: the calling (orchestrator) thread on the first CPU this process may use,
/// core thread k (named `taskring-core<k>-…`) on the (k+1)-th, modulo those CPUs.
fn pin_threads() -> Result<(), String> {
    use crate::bench::cpus::{allowed_cpus, pin_thread};
    let cpus = allowed_cpus().map_err(|e| format!("-pin: {e}"))?;
    if cpus.is_empty() {
        return Ok(());
    }
    let pin = |tid, cpu| pin_thread(tid, cpu).map_err(|e| format!("-pin: {e}"));
    pin(0, cpus[0])?;
    let dir = std::fs::read_dir("/proc/self/task").map_err(|e| format!("-pin: {e}"))?;
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let Some(k) = comm.strip_prefix("taskring-core").and_then(|r| {
            let d: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
            d.parse::<usize>().ok()
        }) else {
            continue;
        };
        pin(tid, cpus[(k + 1) % cpus.len()])?;
    }
    Ok(())
}

/// Runs the graphs on one chip: `-warmup` untimed runs, then the timed one; prints
/// the configuration block and the result lines.
pub(super) fn run(opts: &Opts, graphs: Vec<Arc<Graph>>) -> Result<(), String> {
    let sizing = ring_sizing(opts, &graphs)?;
    let budget = Budgets {
        tasks: ((sizing.task_window[1] / 2).max(1)) as usize,
        edges: ((sizing.dep_pool[1] / 2).max(1)) as usize,
    };
    let mut chip = ChipWorker::new(ChipOptions {
        cores: opts.workers,
        prewarm: vec![sizing],
        orchestrator_helps: opts.helper,
        ..Default::default()
    })
    .map_err(|e| format!("could not start the chip: {e}"))?;
    if opts.pin {
        pin_threads()?;
    }
    let counters = Arc::new(Counters::new());
    let kernels: Vec<KernelRef> = graphs
        .iter()
        .map(|g| {
            KernelRef::leak(TbKernel {
                g: g.clone(),
                counters: counters.clone(),
            })
        })
        .collect();
    let totals = Totals::of(&graphs);

    print_config(&graphs);
    if opts.verbose {
        print_mapping(&chip, &sizing, budget, &graphs);
    }

    let prog_graphs = graphs.clone();
    let prog_kernels = kernels.clone();
    let program = Program::new("taskbench", move |o, _| {
        orchestrate(o, &prog_graphs, &prog_kernels, budget)
    });
    let mut run_once = |what: &str| -> Result<f64, String> {
        counters.take();
        let t0 = Instant::now();
        chip.run_with_sizing(&program, &[], &sizing)
            .map_err(|e| format!("{what} failed: {e}"))?;
        let dt = t0.elapsed().as_secs_f64();
        let done = counters.take();
        if done != totals.tasks {
            return Err(format!(
                "{what}: validation failed: {done} tasks executed, the graphs have {}",
                totals.tasks
            ));
        }
        Ok(dt)
    };
    for k in 0..opts.warmup {
        run_once(&format!("warm-up run {}", k + 1))?;
    }
    let before = opts.verbose.then(ThreadTimes::take);
    let elapsed = run_once("the run")?;
    if let Some(b) = before {
        ThreadTimes::print_since(&b, elapsed);
    }

    totals.print(elapsed);
    Ok(())
}
