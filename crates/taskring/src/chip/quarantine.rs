//! Memory that a kernel given up on can still write.
//!
//! A core whose kernel does not return within the scheduler timeout, or when its run is
//! interrupted (`RunInterrupter`, a Python caller's Ctrl-C), is given up on and
//! replaced (step 4 of the abort handshake, `chip/core.rs`), but its thread cannot be
//! stopped: a native kernel keeps its task's pointers and may write through them
//! whenever it wakes. Until that thread ends, the chip sets the memory aside:
//!
//! - the failed run's arena leaves the cache and stays mapped, owned by the entry; the
//!   next run of that sizing builds a fresh arena, so no later run's runtime outputs
//!   share memory with the stuck kernel;
//! - the stuck task's tensors (the caller's buffers among them) are kept as byte
//!   ranges; a later run or replay with a tensor argument that overlaps one is refused
//!   with SCHEDULER_TIMEOUT naming the kernel, its task and core, instead of running
//!   (and reporting success) over memory the kernel can still write.
//!
//! An entry is lifted when its core thread has ended (the kernel returned and the core,
//! finding itself given up on, touched nothing more): its arena is unmapped then. A chip
//! dropped while an entry's kernel still runs leaves that arena mapped for the rest of
//! the process (leaked): the kernel may still write into its runtime outputs.

use super::{Arg, ChipWorker};
use crate::arena::Arena;
use crate::config::RingSizing;
use crate::engine::{RuntimeFailure, StatusCode};
use crate::tensor::{TaskId, Tensor};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// How long a run waits for a stuck kernel whose memory it needs to return before it is
/// refused: a kernel that can be interrupted (Python's, which gets a `TimeoutError` at
/// its next bytecode) leaves within this.
const GRACE: Duration = Duration::from_millis(500);

/// A core given up on by the settle of a failed run.
pub(super) struct GivenUp {
    pub core: usize,
    pub task: TaskId,
    /// The abandoned core's thread (None if it could not be found: then the entry is
    /// never lifted).
    pub thread: Option<ThreadId>,
}

/// Why a core was given up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GivenUpWhy {
    /// Its kernel did not return within the scheduler timeout.
    SchedulerTimeout,
    /// Its run was interrupted (`RunInterrupter`).
    Interrupted,
}

impl GivenUpWhy {
    /// How an error says it: `... given up on on core {c} {when}`.
    fn when(self) -> &'static str {
        match self {
            GivenUpWhy::SchedulerTimeout => "after SCHEDULER_TIMEOUT in an earlier run",
            GivenUpWhy::Interrupted => "when an earlier run was interrupted",
        }
    }
}

/// One kernel given up on that may still run. See the module doc.
pub(super) struct Stuck {
    thread: Option<ThreadId>,
    why: GivenUpWhy,
    kernel: String,
    task: TaskId,
    core: usize,
    /// Byte ranges `[lo, hi)` of the task's tensors.
    ranges: Vec<(u64, u64)>,
    /// The failed run's sizing; its arena is moved here by [`ChipWorker::set_aside_arenas`].
    sizing: RingSizing,
    arena: Option<Box<Arena>>,
}

/// The byte range a tensor's kernel may touch: its whole buffer.
pub(super) fn buffer_range(t: &Tensor) -> (u64, u64) {
    (t.addr, t.addr.saturating_add(t.buf_bytes))
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1 && a.0 < a.1 && b.0 < b.1
}

impl Stuck {
    pub(super) fn new(
        g: &GivenUp,
        why: GivenUpWhy,
        kernel: Option<&str>,
        tensors: &[Tensor],
        sizing: &RingSizing,
    ) -> Stuck {
        Stuck {
            thread: g.thread,
            why,
            kernel: kernel.unwrap_or("?").to_string(),
            task: g.task,
            core: g.core,
            ranges: tensors.iter().map(buffer_range).collect(),
            sizing: *sizing,
            arena: None,
        }
    }

    /// What the entry says in an error: the kernel, its task and core.
    fn describe(&self) -> String {
        format!(
            "kernel '{}' ({}, given up on on core {} {})",
            self.kernel,
            self.task,
            self.core,
            self.why.when()
        )
    }
}

impl ChipWorker {
    /// Has the core thread `t` ended?
    fn thread_ended(&self, t: Option<ThreadId>) -> bool {
        let Some(t) = t else { return false };
        self.threads
            .iter()
            .find(|(_, h)| h.thread().id() == t)
            .is_none_or(|(_, h)| h.is_finished())
    }

    /// Drop the entries whose kernel has returned (their arenas are unmapped).
    fn lift_ended(&mut self) {
        if self.stuck.is_empty() {
            return;
        }
        let stuck = std::mem::take(&mut self.stuck);
        self.stuck = stuck
            .into_iter()
            .filter(|s| !self.thread_ended(s.thread))
            .collect();
        self.charge_stuck();
    }

    /// Charge the set-aside arenas and the device-resident tensors to the chip's device
    /// memory.
    fn charge_stuck(&mut self) {
        let mut held: Vec<(String, u64)> = self
            .stuck
            .iter()
            .filter_map(|s| {
                s.arena.as_ref().map(|a| {
                    (
                        format!(
                            "arena {} set aside for kernel '{}' given up on",
                            crate::arena::sizing_words(a.sizing()),
                            s.kernel
                        ),
                        a.device_bytes(),
                    )
                })
            })
            .collect();
        if self.resident_tensors > 0 {
            held.push(("device-resident tensors".into(), self.resident_tensors));
        }
        self.cache.set_outside(held);
    }

    /// The chip holds `bytes` of device-resident tensors (an L3 host's `alloc_tensor`s
    /// for it): charged to its device memory. Idle cached arenas are evicted to make
    /// room; if they cannot fit even then, DEVICE_OUT_OF_MEMORY and nothing changes.
    pub fn hold_resident_tensors(&mut self, bytes: u64) -> Result<(), RuntimeFailure> {
        let before = self.resident_tensors;
        self.lift_ended();
        self.resident_tensors = bytes;
        self.charge_stuck();
        // Refused before anything is evicted when it could not fit even with every
        // idle arena gone.
        if bytes <= before || self.cache.outside_bytes() <= self.cache.capacity() {
            self.cache.evict_to_fit();
            return Ok(());
        }
        self.resident_tensors = before;
        self.charge_stuck();
        let cap = self.cache.capacity();
        Err(RuntimeFailure::new(
            StatusCode::DeviceOutOfMemory,
            None,
            format!(
                "{} more bytes of device-resident tensors do not fit: {} of {cap} bytes are free (held: {})",
                bytes - before,
                cap.saturating_sub(self.cache.used_bytes()),
                self.cache.holders()
            ),
        ))
    }

    /// Move the arenas of new entries out of the cache (after the failed run wrote its
    /// diagnostics, which read the arena).
    pub(crate) fn set_aside_arenas(&mut self) {
        let mut moved = false;
        for i in 0..self.stuck.len() {
            if self.stuck[i].arena.is_none() {
                let sizing = self.stuck[i].sizing;
                // Another entry of the same run may have taken it already.
                if let Some(a) = self.cache.take(&sizing) {
                    self.stuck[i].arena = Some(a);
                    moved = true;
                }
            }
        }
        // Every run ends here: charge again only when an arena moved (no allocation on
        // a run's common path).
        if moved {
            self.charge_stuck();
        }
    }

    /// When the chip is dropped: unmap the arenas of entries whose kernel returned, and
    /// leak those of kernels still running (see the module doc).
    pub(super) fn leak_stuck_arenas(&mut self) {
        self.lift_ended();
        for s in self.stuck.drain(..) {
            if let Some(a) = s.arena {
                std::mem::forget(a);
            }
        }
    }

    /// Kernels given up on that may still write memory, as `(kernel, task, core)`.
    pub fn stuck_kernels(&mut self) -> Vec<(String, TaskId, usize)> {
        self.lift_ended();
        self.stuck
            .iter()
            .map(|s| (s.kernel.clone(), s.task, s.core))
            .collect()
    }

    /// Before a run or replay with `args`: refuse it when a tensor argument overlaps
    /// memory a stuck kernel can still write. A kernel that returns within [`GRACE`]
    /// (with the hook's release on: a Python kernel needs the GIL to leave) is waited
    /// for.
    pub(crate) fn check_stuck(
        &mut self,
        args: &[Arg<'_>],
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<(), RuntimeFailure> {
        if self.stuck.is_empty() {
            return Ok(());
        }
        self.lift_ended();
        let clash = |w: &ChipWorker| -> Option<(usize, usize)> {
            args.iter().enumerate().find_map(|(i, a)| match a {
                Arg::Tensor(h) => {
                    let r = buffer_range(&h.tensor());
                    w.stuck
                        .iter()
                        .position(|s| s.ranges.iter().any(|&x| overlaps(x, r)))
                        .map(|s| (i, s))
                }
                Arg::Scalar(_) => None,
            })
        };
        if clash(self).is_none() {
            return Ok(());
        }
        if let Some(h) = hook {
            h(true);
        }
        let t0 = Instant::now();
        while clash(self).is_some() && t0.elapsed() < GRACE {
            std::thread::sleep(Duration::from_millis(2));
            self.lift_ended();
        }
        if let Some(h) = hook {
            h(false);
        }
        match clash(self) {
            None => Ok(()),
            Some((i, s)) => Err(RuntimeFailure::new(
                StatusCode::SchedulerTimeout,
                None,
                format!(
                    "argument {i} overlaps memory that {} can still write: the kernel has not returned, so this run is refused until it does",
                    self.stuck[s].describe()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::overlaps;

    #[test]
    fn overlap_is_half_open_and_ignores_empty_ranges() {
        assert!(overlaps((0, 10), (9, 20)));
        assert!(!overlaps((0, 10), (10, 20)));
        assert!(!overlaps((10, 20), (0, 10)));
        assert!(overlaps((5, 6), (0, 10)));
        assert!(!overlaps((5, 5), (0, 10)));
    }
}
