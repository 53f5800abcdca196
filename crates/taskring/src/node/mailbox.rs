//! A chip's mailbox: one anonymous shared mapping (created before the chip process is
//! forked, so both sides see it) holding a small header of futex words and two frame
//! buffers (host → chip, chip → host).
//!
//! Protocol (one task in flight per chip; the host side holds the chip's lock):
//! 1. host writes the task frame and its length, then `req_seq += 1` (release) and wakes;
//! 2. chip waits until `req_seq` differs from the last it served, reads the frame,
//!    runs the task, writes the reply and its length, stores `resp_seq = req_seq`
//!    (release) and wakes;
//! 3. host waits until `resp_seq` equals its request number, then reads the reply.
//!
//! `state` tells the chip's life: STARTING → READY (or FAILED with the reason in the
//! reply buffer) → SHUTDOWN (set by the host to make the chip exit). Waits are futex
//! waits with a timeout, so each side can notice the other's death.
//!
//! `heartbeat` is bumped by a chip process's watchdog thread every [`HEARTBEAT`]: the
//! host reads it to tell a chip that is busy (it beats) from one that is stopped or
//! frozen (it does not); see the node module doc.
//!
//! With each reply the chip also leaves, in the header, which of its threads served the
//! request, when (`served_ns` .. `replied_ns`) and where its swimlane's clock started
//! (`trace_t0_ns`): what the host needs to put the chip on the L3 timeline.

use crate::chip::spin::SpinThenPark;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::time::Duration;

pub(crate) const STATE_STARTING: u32 = 0;
pub(crate) const STATE_READY: u32 = 1;
pub(crate) const STATE_FAILED: u32 = 2;
pub(crate) const STATE_SHUTDOWN: u32 = 3;

/// Bytes of each frame buffer.
pub(crate) const FRAME_BYTES: usize = 64 * 1024;

#[repr(C)]
pub(crate) struct Header {
    pub req_seq: AtomicU32,
    pub resp_seq: AtomicU32,
    pub state: AtomicU32,
    pub req_len: AtomicU32,
    pub resp_len: AtomicU32,
    /// Bumped by the chip process every [`HEARTBEAT`] (never by chip threads).
    pub heartbeat: AtomicU32,
    /// Kernel thread id of the chip thread that served the last request.
    pub served_tid: AtomicU32,
    /// When the chip took the last request and when it had its reply ready
    /// (`CLOCK_MONOTONIC` ns, see `node::trace`): written before `resp_seq`.
    pub served_ns: AtomicU64,
    pub replied_ns: AtomicU64,
    /// The start of the last request's swimlane (`ts = 0` of the chip's file) on
    /// `CLOCK_MONOTONIC`; 0 when the request recorded none.
    pub trace_t0_ns: AtomicU64,
    /// Waiters about to sleep (or asleep) on `req_seq` / `resp_seq`: a side that
    /// publishes a new sequence number calls `futex_wake` only when its word's count is
    /// not zero ([`publish`], [`wait_until_flagged`]).
    pub req_sleeping: AtomicU32,
    pub resp_sleeping: AtomicU32,
}

/// How often a chip process bumps `heartbeat`.
pub const HEARTBEAT: Duration = Duration::from_millis(20);

/// See the module doc.
pub(crate) struct Mailbox {
    base: *mut u8,
    len: usize,
}

// safety: the mailbox owns its mapping, which is not tied to the thread that made it;
// any thread may unmap it in Drop.
unsafe impl Send for Mailbox {}
// safety: through `&Mailbox` the header is reached only as atomics, and the frame
// buffers only through the unsafe `req_buf`/`resp_buf`, whose callers follow the
// protocol above (each buffer has one writer at a time, handed over by release/acquire
// on `req_seq`/`resp_seq`).
unsafe impl Sync for Mailbox {}

const HEADER_BYTES: usize = 4096;

impl Mailbox {
    pub(crate) fn new() -> std::io::Result<Mailbox> {
        let len = HEADER_BYTES + 2 * FRAME_BYTES;
        // safety: anonymous shared mapping; checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mailbox {
            base: p as *mut u8,
            len,
        })
    }

    pub(crate) fn header(&self) -> &Header {
        // safety: the mapping starts with a zeroed, page-aligned Header of atomics.
        unsafe { &*(self.base as *const Header) }
    }

    /// # Safety
    /// Only the host, while it owns the request side (no request in flight).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn req_buf(&self) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.base.add(HEADER_BYTES), FRAME_BYTES)
    }

    /// # Safety
    /// Only the chip, while it serves a request (or reports its start).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn resp_buf(&self) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.base.add(HEADER_BYTES + FRAME_BYTES), FRAME_BYTES)
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        // safety: our own mapping.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// Wait while `word == expected`, at most `timeout` (spurious returns are fine).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // safety: a shared (non-private) futex wait on a word in shared memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word as *const AtomicU32,
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

/// Wake every waiter on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // safety: as futex_wait.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word as *const AtomicU32,
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

/// How a mailbox waiter (and the node's wait for its dispatches) spins before it sleeps:
/// 20 yields, no spin hints. The other side is a process that, on a machine with fewer
/// CPUs than runnable threads, needs this CPU to answer: a spin hint keeps the CPU
/// (measured: with 100 hints first, each mailbox crossing of an L3 round trip costs
/// 6–7 µs); a yield hands it over. On the 2-core box, yielding from the first look
/// gives B6 a round trip of 15–21 µs against 22–33 µs with spin hints first, 1.2–1.6×
/// the throughput, and leaves B3 and B2 within the noise. Only 20 yields: with chip
/// work that is not empty (a 20 000-iteration `busy_wait` per L2 task,
/// `examples/rtloop`), the waiters' yields take the CPU from the other chip's kernel;
/// 2 chips take 22.5–28.0 µs per task with 20 yields against 30.0–33.5 µs with 200
/// (1 chip: 33–38 µs), and B6 is the same with either.
pub(crate) const MAILBOX_SPIN: SpinThenPark = SpinThenPark {
    checks: 20,
    spin_checks: 0,
    yield_every: 0,
    backoff: 1,
};

/// How a chip waits for its next request: 200 yields before it sleeps. Requests of a
/// busy host come back to back, and of an L4 host a few tens of microseconds apart (its
/// MPI round trip and Python): a chip asleep then costs each request a `futex_wake` and
/// a wake-up. (The waits for a reply, during which the chip's kernel may need this CPU,
/// yield only `MAILBOX_SPIN`'s 20 times.)
pub(crate) const REQUEST_SPIN: SpinThenPark = SpinThenPark {
    checks: 200,
    spin_checks: 0,
    yield_every: 0,
    backoff: 1,
};

/// Wait until `cond()` holds, spinning briefly, then sleeping on `word` (which the other
/// side changes and wakes), checking `give_up()` between sleeps. (B6's bare futex
/// round trip waits with it, through `internals`.)
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn wait_until(
    word: &AtomicU32,
    cond: impl Fn() -> bool,
    give_up: impl Fn() -> bool,
    slice: Duration,
) -> bool {
    wait_until_flagged(word, None, cond, give_up, slice)
}

/// Publish `value` in `word` (release: what was written before it is visible to whoever
/// acquires it) and wake a waiter only if one announced it may sleep on it. The other
/// half of [`wait_until_flagged`]: with a SeqCst fence on both sides between "my store"
/// and "my load of the other's word" (Dekker), either this side sees the waiter's
/// announcement and wakes it, or the waiter's re-check after its announcement sees
/// `value` and does not sleep; a waiter that read the old value and sleeps anyway
/// passes it to `futex_wait`, which returns at once when the word changed. Saves the
/// `futex_wake` syscall (~0.5 µs) per crossing when nobody sleeps. Model:
/// `src/loom_models/mailbox.rs`.
pub(crate) fn publish(word: &AtomicU32, value: u32, sleeping: &AtomicU32) {
    word.store(value, Release);
    std::sync::atomic::fence(SeqCst);
    if sleeping.load(Relaxed) != 0 {
        futex_wake(word);
    }
}

/// [`wait_until`], and for a word whose publisher uses [`publish`] (`sleeping`: its
/// count) the other half of the elision: before each sleep the waiter counts itself,
/// fences, and re-checks.
pub(crate) fn wait_until_flagged(
    word: &AtomicU32,
    sleeping: Option<&AtomicU32>,
    cond: impl Fn() -> bool,
    give_up: impl Fn() -> bool,
    slice: Duration,
) -> bool {
    wait_until_spun(word, sleeping, cond, give_up, slice, &MAILBOX_SPIN)
}

/// [`wait_until_flagged`] with its own spin phase (a chip waiting for its next request:
/// [`REQUEST_SPIN`]).
pub(crate) fn wait_until_spun(
    word: &AtomicU32,
    sleeping: Option<&AtomicU32>,
    cond: impl Fn() -> bool,
    give_up: impl Fn() -> bool,
    slice: Duration,
    spin: &SpinThenPark,
) -> bool {
    if spin.spin(&cond) {
        return true;
    }
    loop {
        if let Some(s) = sleeping {
            s.fetch_add(1, Relaxed);
            std::sync::atomic::fence(SeqCst);
        }
        let seen = word.load(Acquire);
        let done = cond();
        let stop = !done && give_up();
        if !done && !stop {
            futex_wait(word, seen, slice);
        }
        if let Some(s) = sleeping {
            s.fetch_sub(1, Relaxed);
        }
        if done {
            return true;
        }
        if stop {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flagged_ping_pong_between_threads() {
        let m = std::sync::Arc::new(Mailbox::new().unwrap());
        let c = m.clone();
        let t = std::thread::spawn(move || {
            let h = c.header();
            let mut served = 0;
            while served < 2000 {
                assert!(wait_until_flagged(
                    &h.req_seq,
                    Some(&h.req_sleeping),
                    || h.req_seq.load(Acquire) != served,
                    || false,
                    Duration::from_secs(5),
                ));
                served = h.req_seq.load(Acquire);
                if served % 100 == 0 {
                    // Let the other side go to sleep now and then.
                    std::thread::sleep(Duration::from_millis(2));
                }
                publish(&h.resp_seq, served, &h.resp_sleeping);
            }
        });
        let h = m.header();
        let t0 = std::time::Instant::now();
        for i in 1..=2000u32 {
            if i % 150 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            publish(&h.req_seq, i, &h.req_sleeping);
            assert!(wait_until_flagged(
                &h.resp_seq,
                Some(&h.resp_sleeping),
                || h.resp_seq.load(Acquire) == i,
                || false,
                Duration::from_secs(5),
            ));
        }
        t.join().unwrap();
        // A lost wake-up would cost a whole 5 s slice.
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        assert_eq!(
            h.req_sleeping.load(Relaxed) + h.resp_sleeping.load(Relaxed),
            0
        );
    }

    #[test]
    fn ping_pong_between_threads() {
        let m = std::sync::Arc::new(Mailbox::new().unwrap());
        let c = m.clone();
        let t = std::thread::spawn(move || {
            let h = c.header();
            let mut served = 0;
            while served < 100 {
                wait_until(
                    &h.req_seq,
                    || h.req_seq.load(Acquire) != served,
                    || false,
                    Duration::from_millis(50),
                );
                served = h.req_seq.load(Acquire);
                // safety: this thread plays the chip: the request was written before
                // `req_seq` (acquired above), and the reply buffer is ours until we
                // publish `resp_seq`.
                unsafe { c.resp_buf()[0] = c.req_buf()[0].wrapping_add(1) };
                h.resp_seq.store(served, Release);
                futex_wake(&h.resp_seq);
            }
        });
        let h = m.header();
        for i in 1..=100u32 {
            // safety: no request is in flight: the last reply was awaited below.
            unsafe { m.req_buf()[0] = i as u8 };
            h.req_seq.store(i, Release);
            futex_wake(&h.req_seq);
            assert!(wait_until(
                &h.resp_seq,
                || h.resp_seq.load(Acquire) == i,
                || false,
                Duration::from_millis(50)
            ));
            // safety: the reply was written before `resp_seq` (acquired above), and the
            // other thread does not touch it again before the next request.
            assert_eq!(unsafe { m.resp_buf()[0] }, (i as u8).wrapping_add(1));
        }
        t.join().unwrap();
    }
}
