//! Quick throughput probe (not the benchmark suite): independent empty tasks, a chain
//! through one INOUT tensor, and submit cost with 2 inputs + 1 output.
use std::time::Instant;
use taskring::builtin::*;
use taskring::*;

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let mut chip = ChipWorker::new(ChipOptions::default()).unwrap();
    let indep = Program::new("indep", move |o, _| {
        let a = TaskArgs::new();
        for _ in 0..n / 1000 {
            o.scope(|o| {
                for _ in 0..1000 {
                    o.submit(NOOP, &a)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    });
    let chain = Program::new("chain", move |o, args| {
        let x = args[0].tensor()?;
        let mut a = TaskArgs::new();
        a.inout(x);
        for _ in 0..n / 1000 {
            o.scope(|o| {
                for _ in 0..1000 {
                    o.submit(NOOP, &a)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    });
    let mut x = vec![0f32; 16];
    for (name, p) in [("independent", &indep), ("chain", &chain)] {
        for _ in 0..3 {
            let args = [Arg::Tensor(HostTensor::f32(&mut x, &[16]))];
            let t0 = Instant::now();
            let r = chip.run_with_sizing(p, &args, &RingSizing::default()).unwrap();
            let dt = t0.elapsed().as_secs_f64();
            println!("{name}: {} tasks in {:.3} s = {:.2} M tasks/s, {:.0} ns/task", r.tasks, dt, r.tasks as f64 / dt / 1e6, dt * 1e9 / r.tasks as f64);
        }
    }
    // Submit cost: 2 inputs + 1 runtime output, with the only core held by a gate task
    // (cores paused), so the orchestrator runs alone.
    static GATE: (std::sync::Mutex<bool>, std::sync::Condvar) = (std::sync::Mutex::new(false), std::sync::Condvar::new());
    let gate = kernel::fn_kernel("gate", CoreKind::Any, |_| {
        let mut open = GATE.0.lock().unwrap();
        while !*open {
            open = GATE.1.wait(open).unwrap();
        }
    });
    let mut chip1 = ChipWorker::new(ChipOptions { cores: 1, ..Default::default() }).unwrap();
    let m: u32 = std::env::var("SUBMITS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let sub = Program::new("submit", move |o, args| {
        let (a, b) = (args[0].tensor()?, args[1].tensor()?);
        let mut t = TaskArgs::new();
        t.input(a).input(b).output(TensorSpec::new(&[16], DType::F32).unwrap());
        *GATE.0.lock().unwrap() = false;
        o.submit(gate, &TaskArgs::new())?;
        let t0 = Instant::now();
        o.scope(|o| {
            for _ in 0..m {
                o.submit(NOOP, &t)?;
            }
            Ok(())
        })?;
        println!("submit (2 in, 1 out): {:.0} ns/task", t0.elapsed().as_secs_f64() * 1e9 / m as f64);
        *GATE.0.lock().unwrap() = true;
        GATE.1.notify_all();
        Ok(())
    });
    let mut a = vec![0f32; 16];
    let mut b = vec![0f32; 16];
    for _ in 0..5 {
        let args = [Arg::Tensor(HostTensor::f32(&mut a, &[16])), Arg::Tensor(HostTensor::f32(&mut b, &[16]))];
        chip1.run_with_sizing(&sub, &args, &RingSizing::default()).unwrap();
    }
}
