//! The host's CPUs as the benchmarks see them: which CPUs this process may use, and how
//! long a cache line takes to go from one to another and back.
//!
//! On a virtual machine the second figure is not fixed: the hypervisor moves the
//! virtual CPUs between physical ones, and on the 2-vCPU machines of
//! `docs/performance.md` the round trip sits at ~35 ns, ~100–130 ns or ~400–550 ns for
//! seconds at a time. Every hand-off between the orchestrator and a core pays it, so the
//! peers benchmark measures it next to each sample.

use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Instant;

/// The CPUs this process may run on (its affinity mask), in order.
pub fn allowed_cpus() -> Result<Vec<usize>, String> {
    // SAFETY: a plain syscall filling a zeroed cpu_set_t of the size it is told.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) != 0 {
            return Err(format!(
                "sched_getaffinity: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &allowed))
            .collect())
    }
}

/// Pin thread `tid` (0: the calling thread) to `cpu`.
pub fn pin_thread(tid: libc::pid_t, cpu: usize) -> Result<(), String> {
    // SAFETY: plain syscalls on a zeroed cpu_set_t of the right size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "sched_setaffinity of thread {tid} to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

#[repr(align(128))]
struct Line(AtomicU64);

/// Mean round trip of a cache line between the first two CPUs this process may use, in
/// ns, over `trips` round trips: one thread pinned to each CPU, each writing its own
/// line and waiting for the other's. The calling thread is not pinned. None with fewer
/// than two CPUs (or if pinning fails).
pub fn cross_cpu_rtt(trips: u64) -> Option<f64> {
    let cpus = allowed_cpus().ok()?;
    if cpus.len() < 2 || trips == 0 {
        return None;
    }
    let (ping, pong) = (Line(AtomicU64::new(0)), Line(AtomicU64::new(0)));
    std::thread::scope(|s| {
        let echo = s.spawn(|| {
            let pinned = pin_thread(0, cpus[1]).is_ok();
            for i in 1..=trips {
                // The pinging side gives up at once if it could not pin: stop too.
                while ping.0.load(Acquire) != i {
                    if ping.0.load(Relaxed) == u64::MAX {
                        return pinned;
                    }
                    std::hint::spin_loop();
                }
                pong.0.store(i, Release);
            }
            pinned
        });
        let timed = s
            .spawn(|| {
                pin_thread(0, cpus[0]).ok()?;
                let t0 = Instant::now();
                for i in 1..=trips {
                    ping.0.store(i, Release);
                    while pong.0.load(Acquire) != i {
                        std::hint::spin_loop();
                    }
                }
                Some(t0.elapsed().as_secs_f64() * 1e9 / trips as f64)
            })
            .join()
            .ok()
            .flatten();
        if timed.is_none() {
            ping.0.store(u64::MAX, Release);
        }
        let echoed = echo.join().unwrap_or(false);
        timed.filter(|_| echoed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_is_measured_on_two_cpus() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        match cross_cpu_rtt(1000) {
            Some(ns) => {
                assert!(cpus.len() >= 2);
                assert!(ns.is_finite() && ns > 0.0, "{ns}");
            }
            None => assert!(cpus.len() < 2),
        }
    }
}
