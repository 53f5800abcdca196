//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod mix;

use taskring::*;

pub fn chip(cores: usize) -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores,
        ..Default::default()
    })
    .expect("chip")
}

pub fn sizing(window: u64, heap: u64, dep_pool: u64) -> RingSizing {
    RingSizing::uniform(window, heap, dep_pool).expect("valid sizing")
}

pub fn spec(shape: &[u32]) -> TensorSpec {
    TensorSpec::new(shape, DType::F32).unwrap()
}

pub fn submit(
    o: &mut Orchestrator<'_>,
    k: KernelRef,
    build: impl FnOnce(&mut TaskArgs),
) -> Result<TaskOutputs, RuntimeFailure> {
    let mut a = TaskArgs::new();
    build(&mut a);
    o.submit(k, &a)
}

pub fn host<'a>(v: &'a mut [f32], shape: &[u32]) -> Arg<'a> {
    Arg::Tensor(CallerTensor::f32(v, shape))
}

/// Run a program with one AIC-only task (a 2x2 matmul) on `w`; on a chip without AIC
/// cores nobody can take it: the run's SCHEDULER_TIMEOUT (S3) error is returned.
pub fn run_aic_only_task(w: &mut ChipWorker) -> Result<RunReport, RuntimeFailure> {
    let prog = Program::new("aic_only", |o, args| {
        let (a, c) = (args[0].tensor()?, args[1].tensor()?);
        submit(o, taskring::builtin::MATMUL, |t| {
            t.input(a).input(a).output_existing(c);
        })
        .map(|_| ())
    });
    let mut a = vec![1f32; 4];
    let mut c = vec![0f32; 4];
    let args = [host(&mut a, &[2, 2]), host(&mut c, &[2, 2])];
    w.run_with_sizing(&prog, &args, &RingSizing::default())
}

/// The harness's hang timeout for a test that waits on an order of events (no test
/// asserts a time): while the returned guard lives, a thread waits for it; when the test
/// still runs after `TASKRING_TEST_WATCHDOG_S` seconds (default 60, as the Python
/// suite's), it names the test and aborts the process, so a hang fails `make test`
/// instead of holding it. Dropping the guard ends (and joins) the thread.
pub fn watchdog() -> Watchdog {
    let limit = std::time::Duration::from_secs_f64(
        std::env::var("TASKRING_TEST_WATCHDOG_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60.0),
    );
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let (disarm, armed) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = armed.recv_timeout(limit) {
            // Straight to stderr: the test harness captures eprintln! of the test's threads.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "{test}: still running after {limit:?}: taken for a hang, aborting"
            );
            std::process::abort();
        }
    });
    Watchdog(Some((disarm, thread)))
}

/// See [`watchdog`].
pub struct Watchdog(Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some((disarm, thread)) = self.0.take() {
            drop(disarm);
            let _ = thread.join();
        }
    }
}
