//! B3's baseline: a hand-rolled work-stealing executor of a static DAG with atomic
//! predecessor counters — no rings, no tensormap, no scopes, no payloads.
//!
//! - [`Dag`]: successors in CSR form plus each node's predecessor count, built from an
//!   edge list (nodes are numbered in submission order, edges go forward);
//! - [`Pool`]: `threads` resident worker threads (crossbeam-deque: one LIFO deque per
//!   worker, a global injector for the roots, stealing between workers). A worker that
//!   finishes a task decrements each successor's counter; the first successor that
//!   becomes ready is run next by the same worker (as taskring's cores do), the others
//!   are pushed to its deque. Idle workers spin briefly, yield, then park (the same idle
//!   policy as taskring's cores); the caller parks until the last task completes.
//!
//! Task bodies are empty (`black_box` of the node id).

use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A static DAG. See the module doc.
pub struct Dag {
    pub n: usize,
    pub indeg: Vec<u32>,
    pub succ_off: Vec<u32>,
    pub succ: Vec<u32>,
}

impl Dag {
    /// Build from forward edges `(from, to)` over `n` nodes (counting sort into CSR).
    pub fn from_edges(n: usize, edges: &[(u32, u32)]) -> Dag {
        let mut indeg = vec![0u32; n];
        let mut off = vec![0u32; n + 1];
        for &(a, b) in edges {
            off[a as usize + 1] += 1;
            indeg[b as usize] += 1;
        }
        for i in 0..n {
            off[i + 1] += off[i];
        }
        let mut fill = off.clone();
        let mut succ = vec![0u32; edges.len()];
        for &(a, b) in edges {
            let f = &mut fill[a as usize];
            succ[*f as usize] = b;
            *f += 1;
        }
        Dag {
            n,
            indeg,
            succ_off: off,
            succ,
        }
    }

    pub fn edges(&self) -> usize {
        self.succ.len()
    }

    fn succs(&self, i: u32) -> &[u32] {
        &self.succ[self.succ_off[i as usize] as usize..self.succ_off[i as usize + 1] as usize]
    }
}

/// One execution of a DAG.
struct Job {
    dag: Arc<Dag>,
    counters: Vec<AtomicU32>,
    remaining: AtomicUsize,
    /// Completion order check for tests: every node's position (when recorded).
    order: Option<Vec<AtomicU64>>,
    seq: AtomicU64,
    done: AtomicBool,
    /// Workers inside `run_job` (joined under the job mutex; the caller waits for 0
    /// after uninstalling the job, so no worker ever sees two jobs' tasks).
    active: AtomicUsize,
    caller: std::thread::Thread,
}

struct Shared {
    injector: Injector<u32>,
    stealers: Vec<Stealer<u32>>,
    job: Mutex<Option<Arc<Job>>>,
    epoch: AtomicU64,
    wake: Condvar,
    shutdown: AtomicBool,
}

/// Resident worker threads. See the module doc.
pub struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    pub fn new(threads: usize) -> Pool {
        let threads = threads.max(1);
        let workers: Vec<Worker<u32>> = (0..threads).map(|_| Worker::new_lifo()).collect();
        let shared = Arc::new(Shared {
            injector: Injector::new(),
            stealers: workers.iter().map(|w| w.stealer()).collect(),
            job: Mutex::new(None),
            epoch: AtomicU64::new(0),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let handles = workers
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                let sh = shared.clone();
                std::thread::Builder::new()
                    .name(format!("baseline-{i}"))
                    .spawn(move || worker_loop(&sh, i, w))
                    .expect("spawn a baseline worker")
            })
            .collect();
        Pool {
            shared,
            threads: handles,
        }
    }

    /// Run `dag` to completion; returns once every node ran.
    pub fn run(&self, dag: &Arc<Dag>) {
        self.run_inner(dag, false);
    }

    /// Run and return each node's completion sequence number (tests).
    #[cfg(test)]
    pub fn run_recorded(&self, dag: &Arc<Dag>) -> Vec<u64> {
        self.run_inner(dag, true).expect("recorded")
    }

    fn run_inner(&self, dag: &Arc<Dag>, record: bool) -> Option<Vec<u64>> {
        if dag.n == 0 {
            return record.then(Vec::new);
        }
        let job = Arc::new(Job {
            dag: dag.clone(),
            counters: dag.indeg.iter().map(|&d| AtomicU32::new(d)).collect(),
            remaining: AtomicUsize::new(dag.n),
            order: record.then(|| (0..dag.n).map(|_| AtomicU64::new(0)).collect()),
            seq: AtomicU64::new(0),
            done: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            caller: std::thread::current(),
        });
        for (i, &d) in dag.indeg.iter().enumerate() {
            if d == 0 {
                self.shared.injector.push(i as u32);
            }
        }
        {
            let mut j = self.shared.job.lock();
            *j = Some(job.clone());
            self.shared.epoch.fetch_add(1, SeqCst);
            self.shared.wake.notify_all();
        }
        let mut spins = 0u32;
        while !job.done.load(Acquire) {
            spins += 1;
            if spins < 200 {
                std::hint::spin_loop();
            } else {
                std::thread::park_timeout(Duration::from_millis(50));
            }
        }
        *self.shared.job.lock() = None;
        let mut spins = 0u32;
        while job.active.load(Acquire) != 0 {
            spins += 1;
            if spins < 200 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        job.order
            .as_ref()
            .map(|o| o.iter().map(|a| a.load(Relaxed)).collect())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, SeqCst);
        {
            let _g = self.shared.job.lock();
            self.shared.wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn find_task(sh: &Shared, me: usize, local: &Worker<u32>) -> Option<u32> {
    if let Some(t) = local.pop() {
        return Some(t);
    }
    loop {
        let mut retry = false;
        match sh.injector.steal_batch_and_pop(local) {
            Steal::Success(t) => return Some(t),
            Steal::Retry => retry = true,
            Steal::Empty => {}
        }
        for (i, s) in sh.stealers.iter().enumerate() {
            if i == me {
                continue;
            }
            match s.steal() {
                Steal::Success(t) => return Some(t),
                Steal::Retry => retry = true,
                Steal::Empty => {}
            }
        }
        if !retry {
            return None;
        }
    }
}

fn worker_loop(sh: &Shared, me: usize, local: Worker<u32>) {
    let mut seen_epoch = 0u64;
    loop {
        // Wait for a new job: spin, yield, then park (taskring's core idle policy).
        let mut idle = 0u32;
        let job = loop {
            if sh.shutdown.load(Acquire) {
                return;
            }
            let e = sh.epoch.load(Acquire);
            if e != seen_epoch {
                seen_epoch = e;
                let g = sh.job.lock();
                if let Some(j) = g.as_ref() {
                    j.active.fetch_add(1, SeqCst);
                    break j.clone();
                }
                continue;
            }
            idle += 1;
            if idle < 64 {
                std::hint::spin_loop();
            } else if idle < 72 {
                std::thread::yield_now();
            } else {
                let mut g = sh.job.lock();
                if sh.epoch.load(Acquire) == seen_epoch && !sh.shutdown.load(Acquire) {
                    sh.wake.wait_for(&mut g, Duration::from_millis(100));
                }
                idle = 0;
            }
        };
        run_job(sh, me, &local, &job);
        job.active.fetch_sub(1, SeqCst);
    }
}

fn run_job(sh: &Shared, me: usize, local: &Worker<u32>, job: &Job) {
    let dag = &*job.dag;
    let mut next: Option<u32> = None;
    let mut idle = 0u32;
    loop {
        let t = match next.take() {
            Some(t) => t,
            None => match find_task(sh, me, local) {
                Some(t) => t,
                None => {
                    if job.remaining.load(Acquire) == 0 {
                        return;
                    }
                    idle += 1;
                    if idle < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                    continue;
                }
            },
        };
        idle = 0;
        // The empty task body.
        std::hint::black_box(t);
        if let Some(o) = &job.order {
            o[t as usize].store(job.seq.fetch_add(1, SeqCst) + 1, SeqCst);
        }
        for &s in dag.succs(t) {
            if job.counters[s as usize].fetch_sub(1, AcqRel) == 1 {
                if next.is_none() {
                    next = Some(s);
                } else {
                    local.push(s);
                }
            }
        }
        if job.remaining.fetch_sub(1, AcqRel) == 1 {
            job.done.store(true, Release);
            job.caller.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(dag: &Arc<Dag>, order: &[u64]) {
        assert_eq!(order.len(), dag.n);
        assert!(order.iter().all(|&o| o > 0), "every node ran");
        for a in 0..dag.n as u32 {
            for &b in dag.succs(a) {
                assert!(
                    order[a as usize] < order[b as usize],
                    "{a} -> {b} ran out of order"
                );
            }
        }
    }

    #[test]
    fn runs_every_node_after_its_predecessors() {
        let pool = Pool::new(2);
        // chain, fan-out, fan-in, independent
        let mut edges = vec![];
        for i in 0..99 {
            edges.push((i, i + 1));
        }
        for i in 101..200 {
            edges.push((100, i));
        }
        for i in 200..215 {
            edges.push((i, 215));
        }
        let dag = Arc::new(Dag::from_edges(300, &edges));
        assert_eq!(dag.edges(), edges.len());
        for _ in 0..20 {
            let o = pool.run_recorded(&dag);
            check(&dag, &o);
        }
        pool.run(&Arc::new(Dag::from_edges(1, &[])));
        pool.run(&Arc::new(Dag::from_edges(0, &[])));
    }
}
