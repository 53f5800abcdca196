//! The chip-wide part of the shared state ([`EngineShared`]): the ready queues per core
//! kind, the idle cores' parking lot and the orchestrator's progress signal (both
//! `park.rs`), and the run's failure latch.
//!
//! A task enters a ready queue exactly once: whoever makes it ready (the orchestrator's
//! publication or the completion that releases its last fanin reference, `slot.rs`)
//! pushes it; the push is the release that carries the task's payload to the core that
//! pops it.

use super::park::{Progress, Sleep};
use crate::kernel::CoreKind;
use crate::sync::Ordering::*;
use crate::sync::{fence, AtomicBool, AtomicU64, AtomicUsize, Mutex};
use crate::tensor::TaskId;
use crossbeam_utils::CachePadded;
use std::time::Duration;

/// Ready queues (per core kind), the idle-core parking lot, and the orchestrator's
/// progress notification. Lives as long as the chip.
pub struct EngineShared {
    queues: [ReadyQueue; 3],
    sleep: Sleep,
    pub progress: Progress,
    /// A run failed: core threads stop running kernels and discard tasks.
    pub fatal: AtomicBool,
    pub shutdown: AtomicBool,
    /// Tasks completed (all runs); any change is progress for the backstop.
    pub completed: CachePadded<AtomicU64>,
    /// The first failure of the current run.
    pub failure: Mutex<Option<crate::engine::RuntimeFailure>>,
    /// A task of the current run has a kernel that is not
    /// [`Kernel::bounded`](crate::kernel::Kernel::bounded): set by the orchestrator at
    /// submit, read by its own help (which then leaves every task to the cores, instead
    /// of taking tasks off the queue only to put them back), cleared when it starts a
    /// run. Only the orchestrator's thread touches it.
    pub(crate) unbounded: CachePadded<AtomicBool>,
    /// A run is open (its orchestrator may owe a parked core a wake-up: cores park
    /// briefly then, see `chip/core.rs`'s `Idle`).
    run_open: AtomicBool,
    /// Cores in a long park ([`EngineShared::park_core_long`]): opening a run wakes them.
    long_parked: AtomicUsize,
}

/// A ready queue: lock-free `SegQueue` normally; under loom (which cannot see inside
/// crossbeam) a mutex-protected deque, so that a push/pop pair is a modelled
/// happens-before edge.
#[cfg(not(loom))]
#[derive(Default)]
struct ReadyQueue(crossbeam_queue::SegQueue<u64>);

#[cfg(not(loom))]
impl ReadyQueue {
    #[inline]
    fn push(&self, v: u64) {
        self.0.push(v)
    }
    #[inline]
    fn pop(&self) -> Option<u64> {
        self.0.pop()
    }
    #[inline]
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    #[inline]
    fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(loom)]
#[derive(Default)]
struct ReadyQueue(Mutex<std::collections::VecDeque<u64>>);

#[cfg(loom)]
impl ReadyQueue {
    fn push(&self, v: u64) {
        self.0.lock().push_back(v)
    }
    fn pop(&self) -> Option<u64> {
        self.0.lock().pop_front()
    }
    fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
    fn len(&self) -> usize {
        self.0.lock().len()
    }
}

#[inline]
pub(crate) fn queue_index(kind: CoreKind) -> usize {
    match kind {
        CoreKind::Aic => 0,
        CoreKind::Aiv => 1,
        CoreKind::Any => 2,
    }
}

/// The core kind of queue index `q` (the inverse of [`queue_index`]; 2 and above: Any).
#[inline]
pub(crate) fn queue_kind(q: usize) -> CoreKind {
    match q {
        0 => CoreKind::Aic,
        1 => CoreKind::Aiv,
        _ => CoreKind::Any,
    }
}

impl Default for EngineShared {
    fn default() -> Self {
        EngineShared {
            queues: [
                ReadyQueue::default(),
                ReadyQueue::default(),
                ReadyQueue::default(),
            ],
            sleep: Sleep::default(),
            progress: Progress::default(),
            fatal: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            completed: CachePadded::new(AtomicU64::new(0)),
            failure: Mutex::new(None),
            unbounded: CachePadded::new(AtomicBool::new(false)),
            run_open: AtomicBool::new(false),
            long_parked: AtomicUsize::new(0),
        }
    }
}

impl EngineShared {
    /// Make `id` available to a core of `kind`.
    #[inline]
    pub fn push_ready(&self, id: TaskId, kind: CoreKind) {
        let q = queue_index(kind);
        self.queues[q].push(id.0);
        self.sleep.wake_for(q);
    }

    /// Queue `id` for a core of `kind` without waking anyone: the caller calls
    /// [`EngineShared::wake_for_queues`] once after a batch. Returns the queue's bit.
    #[inline]
    #[doc(hidden)]
    pub fn push_ready_quiet(&self, id: TaskId, kind: CoreKind) -> u8 {
        let q = queue_index(kind);
        self.queues[q].push(id.0);
        1 << q
    }

    /// Wake for the queues of `mask` (bits from [`EngineShared::push_ready_quiet`]).
    #[inline]
    #[doc(hidden)]
    pub fn wake_for_queues(&self, mask: u8) {
        for q in 0..3 {
            if mask & (1 << q) != 0 {
                self.sleep.wake_for(q);
            }
        }
    }

    /// [`EngineShared::wake_for_queues`], only for the queues of `mask` that still hold
    /// a task: a wake-up owed for a push that a spinning core has taken since would
    /// only wake a sleeper to find nothing.
    #[inline]
    #[doc(hidden)]
    pub fn wake_for_queued(&self, mask: u8) {
        for q in 0..3 {
            if mask & (1 << q) != 0 && !self.queues[q].is_empty() {
                self.sleep.wake_for(q);
            }
        }
    }

    /// Wake parked cores (work may be queued that a spinner cannot take).
    #[doc(hidden)]
    pub fn wake_cores(&self) {
        self.sleep.wake();
    }

    /// Take a ready task for a core of `kind`: its own queue first, then `Any`.
    #[inline]
    pub fn pop_ready(&self, kind: CoreKind) -> Option<TaskId> {
        let own = queue_index(kind);
        if own != 2 {
            if let Some(t) = self.queues[own].pop() {
                return Some(TaskId(t));
            }
            return self.queues[2].pop().map(TaskId);
        }
        // A core of kind Any (a one-core chip) runs every kind.
        self.queues[2]
            .pop()
            .or_else(|| self.queues[0].pop())
            .or_else(|| self.queues[1].pop())
            .map(TaskId)
    }

    /// Any task a core of `kind` could take?
    #[inline]
    #[doc(hidden)]
    pub fn has_ready(&self, kind: CoreKind) -> bool {
        let own = queue_index(kind);
        if own == 2 {
            return self.queues.iter().any(|q| !q.is_empty());
        }
        !self.queues[2].is_empty() || !self.queues[own].is_empty()
    }

    /// Drop every queued task (abort).
    pub fn drain_queues(&self) {
        for q in &self.queues {
            while q.pop().is_some() {}
        }
    }

    /// Tasks waiting in the ready queues.
    #[doc(hidden)]
    pub fn ready_len(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }

    pub fn queues_empty(&self) -> bool {
        self.queues.iter().all(|q| q.is_empty())
    }

    /// Park the calling core until work may be there (or `timeout`).
    pub fn park_core(&self, kind: CoreKind, timeout: Duration) {
        self.park_core_or(kind, timeout, || false)
    }

    /// [`EngineShared::park_core`], not parking while `more()` either (work a push to
    /// the ready queues does not show: a direct replay's deques, whose owners wake a
    /// sleeper through [`EngineShared::wake_for_queues`] after they put work there).
    #[doc(hidden)]
    pub fn park_core_or(&self, kind: CoreKind, timeout: Duration, more: impl Fn() -> bool) {
        self.sleep.park(
            queue_index(kind),
            || self.has_ready(kind) || more() || self.shutdown.load(SeqCst),
            timeout,
        )
    }

    /// A run opens: cores park briefly from now on, and the ones in a long park are
    /// woken (a core that sees the run open, or is woken, parks briefly next). With
    /// [`EngineShared::park_core_long`] the same handshake as a push and a park: the
    /// opener publishes, fences, then looks for long sleepers; a long sleeper counts
    /// itself, fences (in `park`), then looks at the flag before it waits.
    #[doc(hidden)]
    pub fn open_for_cores(&self) {
        self.run_open.store(true, SeqCst);
        fence(SeqCst);
        if self.long_parked.load(SeqCst) > 0 {
            self.sleep.wake();
        }
    }

    /// The run is over: cores may park long again.
    #[doc(hidden)]
    pub fn close_for_cores(&self) {
        self.run_open.store(false, SeqCst);
    }

    /// Is a run open ([`EngineShared::open_for_cores`])?
    #[inline]
    #[doc(hidden)]
    pub fn run_is_open(&self) -> bool {
        self.run_open.load(Relaxed)
    }

    /// [`EngineShared::park_core_or`] for a long park while no run is open: ends when a
    /// run opens too ([`EngineShared::open_for_cores`] wakes it).
    #[doc(hidden)]
    pub fn park_core_long(&self, kind: CoreKind, timeout: Duration, more: impl Fn() -> bool) {
        self.long_parked.fetch_add(1, SeqCst);
        self.park_core_or(kind, timeout, || more() || self.run_open.load(SeqCst));
        self.long_parked.fetch_sub(1, SeqCst);
    }

    /// A core back from [`EngineShared::park_core`] took a task: wake one more core per
    /// queue that still holds tasks (a push woke only this one).
    #[inline]
    pub fn pass_on(&self) {
        self.sleep.pass_on(|q| !self.queues[q].is_empty());
    }

    /// Cores idle at this moment, parked or spinning (a hint).
    #[inline]
    pub(crate) fn idle_cores(&self) -> usize {
        self.sleep.idle()
    }

    /// Try to become the spinning idle core (see [`Sleep`]).
    #[inline]
    #[doc(hidden)]
    pub fn try_spin(&self, kind: CoreKind) -> bool {
        self.sleep.try_spin(queue_index(kind))
    }

    /// Stop spinning; if work is still queued, wake a sleeper for it.
    #[inline]
    #[doc(hidden)]
    pub fn end_spin(&self, found_work: bool) {
        self.sleep.end_spin();
        if found_work {
            self.pass_on();
        }
    }

    /// Wake every parked core (shutdown).
    pub fn wake_all_cores(&self) {
        self.sleep.wake();
    }

    /// Latch `f` as the run's failure if it is the first, and stop the run.
    pub fn fail(&self, f: crate::engine::RuntimeFailure) {
        {
            let mut slot = self.failure.lock();
            if slot.is_none() {
                *slot = Some(f);
            }
        }
        self.fatal.store(true, SeqCst);
        self.progress.notify();
        self.sleep.wake();
    }
}
