//! The chip-wide part of the shared state ([`EngineShared`]): the ready queues per core
//! kind, the idle cores' parking lot and the orchestrator's progress signal (both
//! `park.rs`), and the run's failure latch.
//!
//! A task enters a ready queue exactly once: whoever makes it ready (the orchestrator's
//! publication or the completion that releases its last fanin reference, `slot.rs`)
//! pushes it; the push is the release that carries the task's payload to the core that
//! pops it.

#[cfg(not(loom))]
use super::owner_ring::OwnerRing;
use super::park::{queues_of, Progress, Sleep, LANE0};
use crate::kernel::CoreKind;
use crate::sync::Ordering::*;
use crate::sync::{fence, AtomicBool, AtomicU64, AtomicUsize, Mutex};
use crate::tensor::TaskId;
use crossbeam_utils::CachePadded;
use std::time::Duration;

/// Ready queues (per core kind, then per lane), the idle-core parking lot, and the
/// orchestrator's progress notification. Lives as long as the chip.
///
/// Queue indices: 0 AIC, 1 AIV, 2 `Any` (`queue_index`), then one per *lane*
/// ([`EngineShared::with_lanes`]): a lane's tasks are taken only by the cores of that
/// lane (and the orchestrator's help). An L3 node gives each chip a lane and each
/// dispatch thread a chip: a chip's backlog (or a stopped chip) then holds up no
/// thread of another chip.
pub struct EngineShared {
    queues: Box<[ReadyQueue]>,
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
    /// Cores in a long park ([`EngineShared::park_queue_long`]): opening a run wakes them.
    long_parked: AtomicUsize,
}

/// A ready queue: lock-free normally; under loom (which cannot see inside crossbeam) a
/// mutex-protected deque, so that a push/pop pair is a modelled happens-before edge.
///
/// Two parts: the orchestrator's own ring ([`OwnerRing`], pushed by
/// [`ReadyQueue::push_owned`]: the one thread that submits) and a `SegQueue` for every
/// other push (completions on the cores, the orchestrator's when its ring is full). A pop
/// takes from the shared queue first. The ring's push is plain stores, no locked
/// instruction: a submit that makes its task ready at once (the usual case when each
/// task's producers finished before it was submitted) then waits for no cache line the
/// cores hold. The ring publishes in batches ([`OWNER_BATCH`] pushes) for a kind's
/// queue, at every push for a lane's.
#[cfg(not(loom))]
struct ReadyQueue {
    own: OwnerRing,
    shared: crossbeam_queue::SegQueue<u64>,
}

/// Pushes per publication of the orchestrator's ring of a kind's queue (see
/// `owner_ring.rs`). The orchestrator publishes the rest when it pays its owed
/// wake-ups (a parked core could take a task; a wait for space; the end of the
/// program) and at a scope's end; a core that parked and found nothing published
/// takes what is written ([`EngineShared::pop_queue_all`]).
pub(crate) const OWNER_BATCH: usize = 32;

#[cfg(not(loom))]
impl ReadyQueue {
    fn new(batch: usize) -> ReadyQueue {
        ReadyQueue {
            own: OwnerRing::with_batch(batch),
            shared: crossbeam_queue::SegQueue::new(),
        }
    }
    #[inline]
    fn push(&self, v: u64) {
        self.shared.push(v)
    }
    /// # Safety
    /// Only one thread at a time pushes this way (the orchestrator of the engine's run).
    #[inline]
    unsafe fn push_owned(&self, v: u64) {
        // safety: the caller's contract.
        if !unsafe { self.own.push(v) } {
            self.shared.push(v)
        }
    }
    /// The shared queue first: its tasks were made ready by completions (or overflowed
    /// the ring), and were submitted before the ones a submit just made ready — the
    /// older the task, the sooner its slot can retire.
    #[inline]
    fn pop(&self) -> Option<u64> {
        self.shared.pop().or_else(|| self.own.pop())
    }
    /// [`ReadyQueue::pop`], the ring's unpublished entries included.
    #[inline]
    fn pop_all(&self) -> Option<u64> {
        self.shared.pop().or_else(|| self.own.pop_written())
    }
    /// # Safety
    /// As [`ReadyQueue::push_owned`].
    #[inline]
    unsafe fn publish(&self) {
        // safety: the caller's contract.
        unsafe { self.own.publish() };
    }
    #[inline]
    fn is_empty(&self) -> bool {
        self.own.is_empty() && self.shared.is_empty()
    }
    #[inline]
    fn len(&self) -> usize {
        self.own.len() + self.shared.len()
    }
}

#[cfg(loom)]
#[derive(Default)]
struct ReadyQueue(Mutex<std::collections::VecDeque<u64>>);

#[cfg(loom)]
impl ReadyQueue {
    fn new(_batch: usize) -> ReadyQueue {
        ReadyQueue::default()
    }
    fn push(&self, v: u64) {
        self.0.lock().push_back(v)
    }
    unsafe fn push_owned(&self, v: u64) {
        self.push(v)
    }
    unsafe fn publish(&self) {}
    fn pop(&self) -> Option<u64> {
        self.0.lock().pop_front()
    }
    fn pop_all(&self) -> Option<u64> {
        self.pop()
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
    crate::kernel::kind_queue(kind)
}

/// The queue index of lane `lane` ([`EngineShared::with_lanes`]); lanes beyond
/// `MAX_LANES` share queues (modulo).
#[inline]
pub(crate) fn lane_queue(lane: usize) -> usize {
    LANE0 + lane % MAX_LANES
}

/// Lanes an engine has at most: every queue's bit fits a `u64` mask.
pub(crate) const MAX_LANES: usize = 64 - LANE0;

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
        EngineShared::with_lanes(0)
    }
}

impl EngineShared {
    /// An engine with `lanes` lane queues besides the three kind queues (at most
    /// 61, `MAX_LANES`; more share queues).
    pub fn with_lanes(lanes: usize) -> Self {
        let n = LANE0 + lanes.min(MAX_LANES);
        EngineShared {
            queues: (0..n)
                .map(|q| ReadyQueue::new(if q < LANE0 { OWNER_BATCH } else { 1 }))
                .collect(),
            sleep: Sleep::new(n),
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

    /// Lane queues of this engine.
    #[doc(hidden)]
    pub fn lanes(&self) -> usize {
        self.queues.len() - LANE0
    }

    /// Make `id` available to a core of `kind`.
    #[inline]
    pub fn push_ready(&self, id: TaskId, kind: CoreKind) {
        self.push_queue(id, queue_index(kind));
    }

    /// Make `id` available to the cores of queue index `q` (a kind's or a lane's).
    #[inline]
    #[doc(hidden)]
    pub fn push_queue(&self, id: TaskId, q: usize) {
        self.queues[q].push(id.0);
        self.sleep.wake_for(q);
    }

    /// Queue `id` for a core of `kind` without waking anyone: the caller calls
    /// [`EngineShared::wake_for_queues`] once after a batch. Returns the queue's bit.
    #[inline]
    #[doc(hidden)]
    pub fn push_ready_quiet(&self, id: TaskId, kind: CoreKind) -> u64 {
        self.push_queue_quiet(id, queue_index(kind))
    }

    /// [`EngineShared::push_ready_quiet`] to queue index `q`.
    #[inline]
    #[doc(hidden)]
    pub fn push_queue_quiet(&self, id: TaskId, q: usize) -> u64 {
        self.queues[q].push(id.0);
        1 << q
    }

    /// [`EngineShared::push_queue_quiet`] by the orchestrator: into the queue's ring of
    /// the one submitting thread (no locked instruction; the shared queue when it is
    /// full).
    ///
    /// # Safety
    /// Only one thread at a time calls this on an engine (its run's orchestrator; calls
    /// of successive runs are ordered by the runs' start and end).
    #[inline]
    pub(crate) unsafe fn push_owned_quiet(&self, id: TaskId, q: usize) -> u64 {
        // safety: the caller's contract.
        unsafe { self.queues[q].push_owned(id.0) };
        1 << q
    }

    /// Wake for the queues of `mask` (bits from [`EngineShared::push_ready_quiet`]).
    #[inline]
    #[doc(hidden)]
    pub fn wake_for_queues(&self, mask: u64) {
        queues_of(mask).for_each(|q| self.sleep.wake_for(q));
    }

    /// [`EngineShared::wake_for_queues`], only for the queues of `mask` that still hold
    /// a task: a wake-up owed for a push that a spinning core has taken since would
    /// only wake a sleeper to find nothing.
    #[inline]
    #[doc(hidden)]
    pub fn wake_for_queued(&self, mask: u64) {
        self.sleep
            .wake_for_mask(mask, |q| !self.queues[q].is_empty());
    }

    /// Is a core parked that could take a task of one of the queues of `mask`, and may a
    /// submitting orchestrator wake it ([`EngineShared::set_cpu_share`])? Plain loads, no
    /// fence: a hint (see `Orchestrator::look_at_wakes`).
    #[inline]
    pub(crate) fn parked_for(&self, mask: u64) -> bool {
        self.sleep.parked_for(mask)
    }

    /// The chip's cores (their kinds) run on a machine of `cpus` CPUs, beside the
    /// orchestrator. While the orchestrator submits it takes a CPU, so a submit's look
    /// at its owed wake-ups (`Orchestrator::look_at_wakes`) wakes a parked core only
    /// while fewer than `cpus - 1` cores (at least 1) are awake, unless none of them can
    /// run the task: a core woken beyond that would share a CPU with a core or with the
    /// orchestrator (on a 2-CPU machine a chain's next task is taken by the one awake
    /// core as soon as it is done; waking the other only made the three threads take
    /// turns). The fenced payments — a wait for space, the end of the program — and the
    /// cores' own wake-ups are not limited, nor are lane tasks (an L3 node's dispatches).
    /// A core running a long kernel counts as awake: on a machine with fewer CPUs than
    /// cores + 1, an independent task submitted meanwhile may wait for a parked core's
    /// next look (at most `RUN_PARK`, 1 ms) or for the orchestrator's next wait.
    pub fn set_cpu_share(&self, cores: &[CoreKind], cpus: usize) {
        let mut per_kind = [0usize; LANE0];
        for &k in cores {
            per_kind[queue_index(k)] += 1;
        }
        self.sleep.set_share(per_kind, cpus);
    }

    /// Wake parked cores (work may be queued that a spinner cannot take).
    #[doc(hidden)]
    pub fn wake_cores(&self) {
        self.sleep.wake();
    }

    /// Take a ready task for a core of `kind`: its own queue first, then `Any`.
    #[inline]
    pub fn pop_ready(&self, kind: CoreKind) -> Option<TaskId> {
        self.pop_queue(queue_index(kind))
    }

    /// Take a ready task for a core of queue index `q`: a kind's core its own queue,
    /// then `Any`'s; a core of kind `Any` (a one-core chip; the orchestrator's help)
    /// every queue, lanes last; a lane's core its lane's queue only. Tasks the
    /// orchestrator pushed but has not published yet are not taken.
    #[inline]
    #[doc(hidden)]
    pub fn pop_queue(&self, q: usize) -> Option<TaskId> {
        self.pop_queue_in(q, ReadyQueue::pop)
    }

    /// [`EngineShared::pop_queue`], the orchestrator's unpublished pushes included: for
    /// a core that parked (woken, or after its timeout: the orchestrator may be in user
    /// code between two submits, and its batch unpublished).
    #[inline]
    #[doc(hidden)]
    pub fn pop_queue_all(&self, q: usize) -> Option<TaskId> {
        self.pop_queue_in(q, ReadyQueue::pop_all)
    }

    #[inline(always)]
    fn pop_queue_in(&self, q: usize, pop: impl Fn(&ReadyQueue) -> Option<u64>) -> Option<TaskId> {
        if q >= LANE0 {
            return pop(&self.queues[q]).map(TaskId);
        }
        if q != 2 {
            if let Some(t) = pop(&self.queues[q]) {
                return Some(TaskId(t));
            }
            return pop(&self.queues[2]).map(TaskId);
        }
        pop(&self.queues[2])
            .or_else(|| pop(&self.queues[0]))
            .or_else(|| pop(&self.queues[1]))
            .or_else(|| self.queues[LANE0..].iter().find_map(&pop))
            .map(TaskId)
    }

    /// Publish the orchestrator's pushes to the queues of `mask` (bits of
    /// [`EngineShared::push_owned_quiet`]).
    ///
    /// # Safety
    /// As [`EngineShared::push_owned_quiet`]: called by the run's orchestrator.
    #[inline]
    pub(crate) unsafe fn publish_owned(&self, mask: u64) {
        for q in queues_of(mask) {
            // safety: the caller's contract.
            unsafe { self.queues[q].publish() };
        }
    }

    /// Any task a core of `kind` could take?
    #[inline]
    #[doc(hidden)]
    pub fn has_ready(&self, kind: CoreKind) -> bool {
        self.has_queued(queue_index(kind))
    }

    /// Any task a core of queue index `q` could take ([`EngineShared::pop_queue`])?
    #[inline]
    #[doc(hidden)]
    pub fn has_queued(&self, q: usize) -> bool {
        if q >= LANE0 {
            return !self.queues[q].is_empty();
        }
        if q == 2 {
            return self.queues.iter().any(|q| !q.is_empty());
        }
        !self.queues[2].is_empty() || !self.queues[q].is_empty()
    }

    /// Drop every queued task (abort).
    pub fn drain_queues(&self) {
        for q in &self.queues {
            while q.pop_all().is_some() {}
        }
    }

    /// Tasks waiting in the ready queues.
    #[doc(hidden)]
    pub fn ready_len(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }

    #[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
    pub fn queues_empty(&self) -> bool {
        self.queues.iter().all(|q| q.is_empty())
    }

    /// Park the calling core until work may be there (or `timeout`).
    #[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
    pub fn park_core(&self, kind: CoreKind, timeout: Duration) {
        self.park_queue_or(queue_index(kind), timeout, || false)
    }

    /// Park a core of queue index `q` as [`EngineShared::park_core`] does, not parking while
    /// `more()` either (work a push to the ready queues does not show: a direct replay's
    /// deques, whose owners wake a sleeper through [`EngineShared::wake_for_queues`]).
    #[doc(hidden)]
    pub fn park_queue_or(&self, q: usize, timeout: Duration, more: impl Fn() -> bool) {
        self.sleep.park(
            q,
            || self.has_queued(q) || more() || self.shutdown.load(SeqCst),
            timeout,
        )
    }

    /// A run opens: cores park briefly from now on, and the ones in a long park are
    /// woken (a core that sees the run open, or is woken, parks briefly next). With
    /// [`EngineShared::park_queue_long`] the same handshake as a push and a park: the
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
    pub fn park_queue_long(&self, q: usize, timeout: Duration, more: impl Fn() -> bool) {
        self.long_parked.fetch_add(1, SeqCst);
        self.park_queue_or(q, timeout, || more() || self.run_open.load(SeqCst));
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
    pub fn try_spin(&self, q: usize) -> bool {
        self.sleep.try_spin(q)
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Park a thread as a core of queue index `q` until shutdown; wait until it counts
    /// as parked.
    fn parked_core(eng: &Arc<EngineShared>, q: usize) -> std::thread::JoinHandle<()> {
        let before = eng.idle_cores();
        let e = eng.clone();
        let h = std::thread::spawn(move || {
            while !e.shutdown.load(SeqCst) {
                e.park_queue_or(q, Duration::from_secs(5), || false);
            }
        });
        while eng.idle_cores() == before {
            std::thread::yield_now();
        }
        h
    }

    fn stop(eng: &EngineShared, cores: Vec<std::thread::JoinHandle<()>>) {
        eng.shutdown.store(true, SeqCst);
        eng.wake_all_cores();
        for c in cores {
            c.join().unwrap();
        }
    }

    /// An AIC core awake and an AIV core parked, on 2 CPUs: a submit may wake the AIV
    /// core for an AIV task (no awake core can run it), not for an `Any` task (the
    /// awake AIC core will take it); with both parked it may wake for either; and an
    /// engine that was not told its CPU share is not limited.
    #[test]
    fn a_submit_wakes_within_the_cpu_share() {
        let (aic, aiv, any) = (1 << 0, 1 << 1, 1 << 2);
        let eng = Arc::new(EngineShared::default());
        eng.set_cpu_share(&[CoreKind::Aic, CoreKind::Aiv], 2);
        let c_aiv = parked_core(&eng, 1);
        assert!(eng.parked_for(aiv), "only the parked core can run it");
        assert!(!eng.parked_for(any), "the awake AIC core takes it");
        assert!(!eng.parked_for(aic), "no parked core runs AIC tasks");
        let c_aic = parked_core(&eng, 0);
        assert!(eng.parked_for(any) && eng.parked_for(aic), "no core awake");
        stop(&eng, vec![c_aiv, c_aic]);

        let free = Arc::new(EngineShared::default());
        let c = parked_core(&free, 1);
        assert!(free.parked_for(any) && free.parked_for(aiv));
        stop(&free, vec![c]);
    }
}
