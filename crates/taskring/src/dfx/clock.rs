//! The one clock of every timeline: `CLOCK_MONOTONIC`, which all processes of a machine
//! share (the L3 and L4 timelines place the host's, the chips' and the hosts' events on
//! it without offsets; see `node::trace`), and the kernel's thread ids.

use std::time::Instant;

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // safety: writes into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An earlier `Instant` on the `CLOCK_MONOTONIC` scale (std's `Instant` is
/// `CLOCK_MONOTONIC` on Linux: the two differ by the few ns between the two reads).
pub fn instant_ns(at: Instant) -> u64 {
    let (now_i, now_m) = (Instant::now(), mono_ns());
    now_m.saturating_sub(now_i.saturating_duration_since(at).as_nanos() as u64)
}

/// The calling thread's kernel thread id.
pub(crate) fn gettid() -> u64 {
    // safety: a plain syscall.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}
