//! B6's 1-task L3 round trip in a loop, for profiling (`perf record -a -g`): a node with
//! one chip process, runs of one tiny L2 task for the given seconds (default 5); prints
//! the median and the 10th/90th percentiles (of the time per task).
//!
//! ```text
//! cargo run --release -p taskring --example rtloop -- SECS [TASKS_PER_RUN [NODE_CORES [CHIPS [WORK]]]]
//! cargo run --release -p taskring --example rtloop -- 3              # B6's round trip
//! cargo run --release -p taskring --example rtloop -- 3 2000 0 2     # B6's 2-chip throughput
//! ```
//!
//! A run's tasks go to the chips in turn. WORK > 0: each L2 task is a `busy_wait` of
//! that many iterations on a chip core instead of a NOOP (chip work that is not empty).
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskring::builtin::{BUSY_WAIT, NOOP};
use taskring::node::ChipCallable;
use taskring::node::*;
use taskring::*;

fn main() {
    let arg = |i: usize, d: f64| std::env::args().nth(i).map_or(d, |s| s.parse().unwrap());
    let secs = arg(1, 5.0);
    let per_run = arg(2, 1.0) as usize;
    let node_cores = arg(3, 0.0) as usize;
    let chips = arg(4, 1.0) as usize;
    let work = arg(5, 0.0) as i64;
    let callables = Arc::new(RwLock::new(vec![ChipCallable {
        program: Program::new("tiny", move |o, _| {
            if work > 0 {
                let mut t = TaskArgs::new();
                t.scalar(Scalar::I64(work));
                o.submit(BUSY_WAIT, &t).map(|_| ())
            } else {
                o.submit(NOOP, &TaskArgs::new()).map(|_| ())
            }
        }),
        signature: vec![],
    }]));
    let opts = NodeOptions {
        device_ids: (0..chips as u32).collect(),
        chip_processes: true,
        chip_cores: 1,
        prewarm: Some(CallConfig::default()),
        node_cores,
        ..Default::default()
    };
    let mut node = Node::new(opts, callables, &NoForkHooks).unwrap();
    let cfg = CallConfig::default();
    let mut ts = vec![];
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let t0 = Instant::now();
        let c = cfg.clone();
        node.run(
            move |o| {
                for i in 0..per_run {
                    o.submit_next_level(0, &[], &c, i % chips)?;
                }
                Ok(())
            },
            &CallConfig::default(),
            None,
        )
        .unwrap();
        ts.push(t0.elapsed().as_secs_f64() * 1e6 / per_run as f64);
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{} runs, median {:.2} us, p10 {:.2}, p90 {:.2}",
        ts.len(),
        ts[ts.len() / 2],
        ts[ts.len() / 10],
        ts[ts.len() * 9 / 10]
    );
}
