//! Core threads: what a core does with a ready task (run its kernel, complete it, keep
//! the first consumer it made ready; a direct replay's task goes to the replay's job
//! through [`DirectRun::step`], one call per chain of tasks), the idle protocol (spin,
//! yield, park), the orchestrator's help. Hot path: nothing here allocates or takes a
//! lock per task unless the swimlane is recorded.
//!
//! # The abort handshake (a failed run, then the next run)
//!
//! Its atomics go through [`crate::sync`] (so a `--cfg loom` build can model them):
//! `Core::state` (IDLE, SEARCHING, RUNNING a task, COMPLETING it, ABANDONED: the table
//! in [`super::abort`]), the engine's `fatal`; only the arena and direct-job pointers
//! are std's `AtomicPtr` (Release/Acquire publication, outside the facade, which has no
//! pointer atomic). Each step's atomic accesses are one function of [`super::abort`]
//! (`search`, `admit`, `begin_completion`, `release`, `holds_task`, `give_up_if_stuck`,
//! `reopen`), which `src/loom_models/chip.rs` drives under loom.
//!
//! 1. A failure latches `fatal` (`EngineShared::fail`, SeqCst). A core that pops a task
//!    and then reads `fatal` set drops it; a core never runs a kernel after it read it.
//! 2. A core says what it holds in `state` *before* it looks at the queues: SEARCHING
//!    (SeqCst store), then the task id once it popped one, IDLE when it holds nothing
//!    (after a failed pop, a dropped task, or a completion that left no next task).
//! 3. The run's caller settles (`ChipWorker::settle`): it drains the queues, then waits
//!    until every core reads IDLE or ABANDONED (SeqCst loads, [`wait_cores_idle`]), then
//!    drains again.
//!
//!    Why SeqCst: step 2 is a store (`state`) followed by loads (the queues); step 3 is
//!    a write to the queues (the drain) followed by a load (`state`). That is Dekker's
//!    pattern: only a single total order of both sides' accesses forbids "the core's pop
//!    got a task from before the drain, and the settle still read the core's earlier
//!    IDLE". With it, a core the settle reads IDLE either holds nothing or pops after
//!    the drain (and finds only what the next run pushes).
//! 4. A core whose `state` still names a RUNNING task (on SCHEDULER_TIMEOUT, or after
//!    the wait's timeout) is given up on, and a replacement is started. Giving up and
//!    completing race for the same word: as soon as its kernel returns (at once for a
//!    task with no kernel), before it touches the arena or the run, the core CASes
//!    RUNNING `t` -> COMPLETING `t` (`begin_completion`); the settle CASes RUNNING `t`
//!    -> ABANDONED (`give_up_if_stuck`). The word's modification order decides: the
//!    loser's CAS reads the winner's value and fails. If the settle won, the core
//!    touches nothing more (the arena may already belong to the next run) and is not
//!    waited for. If the core won, it is not given up on: the settle's next looks at
//!    the word come after its failed CAS, so (coherence) they see COMPLETING or later,
//!    never the core's earlier IDLE, and the settle waits — however long, looking again
//!    after each timeout — until the core's IDLE store (SeqCst, a release; read by a
//!    SeqCst load), which publishes the completion's arena accesses to it. A core that
//!    completed a task and keeps the next goes COMPLETING -> RUNNING without IDLE: that
//!    store is a Release (`admit`), so a give-up that reads it (its CAS acquires) also
//!    comes after the last completion. (Before the CAS the core read a separate
//!    `abandoned` flag: a core that read it clear just before the settle set it completed
//!    its task into an arena the next run was already resetting.) Outside the promise:
//!    what the kernel itself does while it runs on after its core was given up on
//!    (reads its payload and tensors, writes its outputs).
//! 5. The next run (`run::open_run`, `replay::direct::open_direct`) drains and waits for IDLE
//!    again (a core may have popped a stale task just before the last drain: it drops it,
//!    since `fatal` is still up), publishes the arena (Release), clears the failure and
//!    only then lifts `fatal` (SeqCst): a core that reads `fatal` clear after a pop
//!    (Acquire) sees the new arena.
//!
//! A direct replay's threads also keep ready tasks in deques of their own
//! ([`DirectLocal`], `chip/deque.rs`), which idle cores steal from (`Thieves`). A steal
//! is a pop for this protocol: an idle core steals only inside its SEARCHING window
//! (`abort::search_or`), so the settle waits for it as for a pop; `open_direct` drains
//! the deques as it drains the queues, before its wait for IDLE (a failed replay may
//! leave tasks there, a core given up on too); a task stolen before that drain is
//! dropped at `admit`, `fatal` being still up. A thread with work of its own never
//! parks: it steals only once its deque is empty, and it empties it before it goes
//! idle. A core about to park looks at every deque after registering as a sleeper; an
//! owner whose deque goes from empty to non-empty wakes a sleeper after its push
//! (`wake_for_queues`, fenced as any push's wake-up).

use super::abort;
use super::deque::{CoreWords, DirectLocal, DirectRun};
use super::spin::SpinThenPark;
use super::ChipShared;
use crate::engine::shared::{queue_takes, ArenaShared, EngineShared};
use crate::engine::RuntimeFailure;
use crate::kernel::{CoreKind, KernelCall, KernelRef};
use crate::sync::{AtomicU64, Ordering::*};
use crate::tensor::TaskId;
use crossbeam_utils::CachePadded;
use std::time::{Duration, Instant};

pub(super) use super::abort::CORE_IDLE;

/// One core thread's shared record.
pub(crate) struct Core {
    pub(super) kind: CoreKind,
    /// The ready queue this core takes tasks from: its kind's, or its lane's (an L3
    /// node's dispatch thread: see `EngineShared::with_lanes`).
    pub(super) queue: usize,
    /// Kernel executions of the current run (only while the swimlane is recorded).
    pub(super) lane: parking_lot::Mutex<crate::dfx::Lane>,
    /// `CORE_IDLE`, `CORE_SEARCHING`, the id of the task it runs (with
    /// `CORE_COMPLETING` once its kernel returned and it completes the task), or
    /// `CORE_ABANDONED` once the run gave up on it (its kernel did not return in time:
    /// the thread exits as soon as the kernel returns, touching nothing).
    pub(crate) state: CachePadded<AtomicU64>,
    /// Direct-replay tasks this core completed (ever): the replay's stall clock looks
    /// for a change of their sum. One line per core, written only by it (one shared
    /// counter written by every core per task was a quarter of a wavefront replay's
    /// samples: its cache line travelled between the cores).
    pub(crate) progress: CachePadded<std::sync::atomic::AtomicU64>,
}

/// How the settle waits for the cores: they finish within a kernel's time, usually
/// microseconds (99 spins, 900 yields), then it sleeps [`IDLE_CORES_SLEEP`] between
/// looks.
const IDLE_CORES_SPIN: SpinThenPark = SpinThenPark {
    checks: 999,
    spin_checks: 99,
    yield_every: 0,
    backoff: 1,
};
/// The settle's sleep between two looks at the cores after its spin phase.
const IDLE_CORES_SLEEP: Duration = Duration::from_micros(200);

/// Wait until no core holds a task of the run (they finish within a kernel's time), at
/// most `limit`; false if a core still holds one then.
pub(crate) fn wait_cores_idle(sh: &ChipShared, limit: Duration) -> bool {
    let idle = || !sh.cores.read().iter().any(|c| abort::holds_task(&c.state));
    if IDLE_CORES_SPIN.spin(idle) {
        return true;
    }
    // (The clock only for a wait that outlasts the spins: every run comes here.)
    let t0 = Instant::now();
    loop {
        if idle() {
            return true;
        }
        if t0.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(IDLE_CORES_SLEEP);
    }
}

/// Call a task's kernel; `Some(message)` if it failed (returned an error or panicked).
fn call_kernel(k: crate::kernel::KernelRef, p: &crate::engine::Payload) -> Option<String> {
    let call = KernelCall {
        tensors: &p.tensors[..p.n_tensors as usize],
        scalars: &p.scalars[..p.n_scalars as usize],
        n_inputs: p.n_inputs as usize,
        scalar_float_mask: p.scalar_float_mask,
    };
    k.call(&call).err()
}

/// The kinds of task the orchestrator may help with: those some core of the chip can
/// run (a task no core can run stays a SCHEDULER_TIMEOUT, helper or not).
pub(crate) fn help_kind(kinds: &[CoreKind]) -> CoreKind {
    let has = |k: CoreKind| kinds.contains(&k);
    match (
        has(CoreKind::Any) || (has(CoreKind::Aic) && has(CoreKind::Aiv)),
        has(CoreKind::Aic),
    ) {
        (true, _) => CoreKind::Any,
        (false, true) => CoreKind::Aic,
        (false, false) => CoreKind::Aiv,
    }
}

/// The orchestrator's help: run one ready task that a core of `kind` could run, on the
/// calling thread, and complete it. Any task with [`ChipOptions::orchestrator_helps`];
/// else (`only_bounded`) only while every kernel the run submitted is
/// [`Kernel::bounded`] (`EngineShared::unbounded`): tasks are never taken off the queue
/// only to be put back (that would reorder them). Returns whether it ran one.
///
/// [`ChipOptions::orchestrator_helps`]: super::ChipOptions::orchestrator_helps
/// [`Kernel::bounded`]: crate::kernel::Kernel::bounded
pub(super) fn help_one(
    sh: &ChipShared,
    arena: &ArenaShared,
    kind: CoreKind,
    only_bounded: bool,
) -> bool {
    let eng = &sh.eng;
    if eng.fatal.load(Acquire) || (only_bounded && eng.unbounded.load(Relaxed)) {
        return false;
    }
    let Some(task) = eng.pop_ready(kind) else {
        return false;
    };
    if eng.fatal.load(Acquire) {
        // Dropped, as a core drops what it popped after a failure.
        return false;
    }
    // safety: `task` was published (popped from a ready queue) and belongs to this run
    // (queues are drained between runs).
    let p = unsafe { arena.rings[task.ring()].payload(task.local()) };
    // A run with an unbounded kernel set `unbounded` at its submit (checked above).
    debug_assert!(!only_bounded || p.kernel.is_none_or(|k| k.0.bounded()));
    if let Some(k) = p.kernel {
        if let Some(msg) = call_kernel(k, p) {
            eng.fail(RuntimeFailure::task_failed(k.name(), task, &msg));
            return true;
        }
    }
    // safety: the task ran (or is a dummy) and is completed exactly once, here.
    unsafe {
        arena.complete(task, eng, |c| {
            eng.push_queue(c, arena.rings[c.ring()].payload(c.local()).queue as usize)
        });
    }
    true
}

/// A core thread: take a task (the one its last completion made ready, else one from
/// the ready queues, else go idle), run it, complete it; until shutdown or until the
/// core is given up on. A direct replay's tasks take the job's [`DirectRun::step`], a
/// run's [`run_ring_task`]. `core.state` says what the core holds at every moment (the
/// settle and the stall report read it).
pub(super) fn core_loop(sh: &ChipShared, core: &Core, mut local: DirectLocal) {
    let kind = core.kind;
    let busy = &core.state;
    let eng = &sh.eng;
    let mut next: Option<TaskId> = None;
    let mut idle = Idle::new(eng);
    // During a direct replay a core out of work steals from the other threads'
    // deques too (while its state says SEARCHING: the settle waits for it), and does
    // not park while one holds a task.
    let direct_on = || !sh.direct.load(Acquire).is_null();
    let slot = local.slot;
    let steal = || {
        direct_on()
            .then(|| sh.thieves.steal(slot, kind, eng))
            .flatten()
            .map(|i| TaskId(i as u64))
    };
    let deque_work = || direct_on() && sh.thieves.any();
    let mut held = Held::default();
    loop {
        // (Never ABANDONED here: only a RUNNING word is given up on, and the core
        // returns as soon as it lost `begin_completion`.)
        let task = match next.take() {
            Some(t) => t,
            None => {
                // Only a failed direct replay leaves tasks here (its step hands them
                // out before it returns None): they must never meet another run.
                local.clear();
                // A core back from a park takes what the orchestrator pushed but has not
                // published yet (it may be in user code between two submits). A core that
                // finds nothing pays what it holds before it says IDLE (`Held`).
                let more = || {
                    let t = steal();
                    if t.is_none() {
                        held.pay(eng);
                    }
                    t
                };
                match abort::search_or(busy, eng, core.queue, idle.parked, more) {
                    Some(t) => {
                        idle.found(eng);
                        t
                    }
                    None => {
                        if eng.shutdown.load(Acquire) {
                            idle.leave(eng);
                            return;
                        }
                        let quiet = sh.direct_quiet.load(Relaxed);
                        if quiet & (1 << crate::engine::shared::queue_index(kind)) != 0 {
                            // A direct replay whose caller helps, or with little for
                            // this core: park now (see `DirectJob::quiet`).
                            idle.spins = idle.spin.checks;
                        }
                        idle.step(eng, core.queue, &deque_work);
                        continue;
                    }
                }
            }
        };
        idle.spins = 0;
        if !abort::admit(busy, eng, task) {
            // The run failed (its end does not wait for retirements) and the core says
            // IDLE: the arena may go to another run, so what it held is dropped.
            held.forget();
            continue;
        }
        let job = sh.direct.load(Acquire);
        let step = if job.is_null() {
            run_ring_task(sh, core, task, &mut held)
        } else {
            // safety: installed for the whole direct replay (a `&dyn DirectRun` that
            // outlives it), removed only after every core went idle; an abandoned core
            // touches nothing after its kernel.
            let job = unsafe { *(job as *const &'static dyn DirectRun) };
            // One indirect call per chain of tasks (the step loops until it runs out).
            let n = job.step(
                eng,
                &sh.thieves,
                task.0 as u32,
                kind,
                Some(CoreWords {
                    state: &core.state,
                    progress: &core.progress,
                }),
                &mut local,
                u32::MAX,
            );
            if n.is_none() && abort::is_abandoned(busy) {
                Step::Abandoned
            } else {
                Step::Next(n.map(|s| TaskId(s as u64)))
            }
        };
        match step {
            Step::Abandoned => return,
            Step::Next(n) => next = n,
        }
        // A core holding advances goes on saying it completes the task until its search
        // says SEARCHING: it holds the run until it paid (`Held`).
        if next.is_none() && held.rings == 0 {
            abort::release(busy);
        }
    }
}

/// The watermark advances a core owes ([`ArenaShared::complete_held`]): tasks of one run
/// whose completion consumed them, while the core went on to its next task (the first
/// consumer the completion made ready, or one from the ready queues). An advance is
/// several SeqCst atomics on lines the other cores and the orchestrator write; a core
/// pays one per ring for all it holds.
///
/// Paid when the core finds no task (before it says IDLE: until then it says
/// COMPLETING or SEARCHING, and the end of the run waits for it), every [`Held::MOST`]
/// tasks, as soon as the orchestrator waits (for space, or for the end of the run), and
/// when a kernel failed; dropped when the run failed under the core (the end of a
/// failed run waits for no retirement). An orchestrator short of space counts a
/// consumed task at the watermark as space and advances over it itself
/// (`wait_for_space`), so what a core holds delays it only in the race with its going
/// to sleep, by at most the task the core is running.
struct Held {
    arena: *const ArenaShared,
    /// Bit `r`: a consumption of ring `r` not advanced over.
    rings: u8,
    n: u32,
}

impl Default for Held {
    fn default() -> Held {
        Held {
            arena: std::ptr::null(),
            rings: 0,
            n: 0,
        }
    }
}

impl Held {
    /// The most consumptions a core holds.
    const MOST: u32 = 32;

    #[inline]
    fn hold(&mut self, arena: &ArenaShared, ring: usize) {
        self.arena = arena;
        self.rings |= 1 << ring;
        self.n += 1;
    }

    /// Forget what is held (the run failed; its arena is not touched again).
    #[inline]
    fn forget(&mut self) {
        self.rings = 0;
        self.n = 0;
    }

    /// Advance every ring held. The caller still says COMPLETING a task of the run whose
    /// arena this is, or SEARCHING since (the settle waits for both), so the arena is the
    /// run's.
    #[inline]
    fn pay(&mut self, eng: &EngineShared) {
        if self.rings == 0 {
            return;
        }
        debug_assert!(!self.arena.is_null());
        // safety: see above; `rings != 0` only after `hold` set `arena`.
        let arena = unsafe { &*self.arena };
        arena.retired_rings(self.rings, eng);
        self.forget();
    }
}

/// What a core does after a task.
enum Step {
    /// Run this task next (the first consumer its completion made ready), or look for
    /// one (`None`).
    Next(Option<TaskId>),
    /// The core was given up on while the kernel ran: touch nothing more.
    Abandoned,
}

/// A core's idle protocol: one core at a time may spin (bounded, backing off; a chip's
/// core yields every 32 checks so the orchestrator is not starved on small machines),
/// the others park at once. While a core spins, pushes skip the wake-up syscall (see
/// `Sleep`).
struct Idle {
    /// [`Idle::SPIN`], or [`Idle::DISPATCH_SPIN`] for the cores of a next-level engine.
    spin: SpinThenPark,
    /// Empty looks at the queues since the core last held a task.
    spins: u32,
    /// This core is the spinning one.
    spinning: bool,
    /// This core parked since it last held a task (a push woke only it).
    parked: bool,
    /// Short parks since the core last held a task or was woken from a long one.
    short_parks: u32,
}

impl Idle {
    /// The spinning core's looks at the queues before it parks (fewer than `checks`:
    /// the look that ends the phase is the one that gives up), backing off to 32 spin
    /// hints between looks, and yielding on every 32nd (up to 32 times). B3's
    /// independent tasks ran in 0.6–0.7× the time of one hint per look and 2048 looks.
    const SPIN: SpinThenPark = SpinThenPark {
        checks: 256,
        spin_checks: u32::MAX,
        yield_every: 32,
        backoff: 32,
    };
    /// [`Idle::SPIN`]'s first 32 looks (31 pauses of spin hints, no yield), for the
    /// dispatch threads of a next-level engine (an L3 node's, rank 0's of L4: the engine
    /// has lanes). Their tasks are whole dispatches of microseconds, and the long spin
    /// costs more than the wake-ups it saves: after a run of many tasks the spinning
    /// thread competes for the CPUs with the orchestrator and the chip processes, and can
    /// take a lone dispatch of the next runs, which their orchestrator would run itself
    /// (`help_at_end`). With the long spin a node's 1-task round trips took 4.3–5.1 µs
    /// for about a millisecond after each such run, against 2.4–3.3 µs with this one
    /// (B6's `rt_after_busy`).
    const DISPATCH_SPIN: SpinThenPark = SpinThenPark {
        checks: 32,
        ..Self::SPIN
    };
    /// A core in a long park looks again after this long even without a wake-up.
    const PARK: Duration = Duration::from_millis(100);
    /// A short park: a task the orchestrator made ready may wait for its wake-up until
    /// the orchestrator's next call into the engine (`Orchestrator::wake_debt`), and
    /// user code between two submits can take long; so while a run is open a parked
    /// core looks at the queues at least this often.
    const RUN_PARK: Duration = Duration::from_millis(1);
    /// Short parks before a core parks long (only while no run is open; opening a run
    /// wakes the long sleepers, `EngineShared::open_for_cores`): the cores of a chip
    /// that serves short runs back to back stay in short parks, so that a run's
    /// opening seldom pays a wake-up; an idle chip's cores look every `PARK`.
    const SHORT_PARKS: u32 = 100;

    fn new(eng: &EngineShared) -> Idle {
        Idle {
            spin: if eng.lanes() > 0 {
                Self::DISPATCH_SPIN
            } else {
                Self::SPIN
            },
            spins: 0,
            spinning: false,
            parked: false,
            short_parks: 0,
        }
    }

    /// A task was found: stop spinning (the sleep protocol learns work was found).
    #[inline]
    fn found(&mut self, eng: &EngineShared) {
        if self.spinning {
            self.spinning = false;
            eng.end_spin(true);
        }
        self.short_parks = 0;
        if self.parked {
            self.parked = false;
            eng.pass_on();
        }
    }

    /// The core leaves its loop.
    fn leave(&mut self, eng: &EngineShared) {
        if self.spinning {
            eng.end_spin(false);
        }
    }

    /// One idle step after an empty look at the queues: spin (if this core is, or can
    /// become, the spinning one), else park.
    fn step(&mut self, eng: &EngineShared, q: usize, deque_work: &dyn Fn() -> bool) {
        // A core back from a park that found nothing parks again without spinning: the
        // short parks of an open run must not turn into a spin phase every `RUN_PARK`.
        if self.spins == 0 && !self.spinning && !self.parked {
            self.spinning = eng.try_spin(q);
        }
        self.spins += 1;
        if self.spinning && self.spins < self.spin.checks {
            self.spin.pause(self.spins);
        } else if self.spinning {
            // Give up spinning; look once more (a push may have skipped its wake-up
            // while we spun), then park.
            self.spinning = false;
            eng.end_spin(false);
            self.spins = 0;
            // Work of a kind we cannot run may have skipped its wake-up.
            if eng.ready_len() > 0 {
                eng.wake_cores();
            }
            if !eng.has_queued(q) && !deque_work() {
                self.park(eng, q, deque_work);
            }
        } else {
            self.spins = 0;
            self.park(eng, q, deque_work);
        }
    }

    /// Park: briefly while a run is open or the core was busy lately, else long.
    fn park(&mut self, eng: &EngineShared, q: usize, deque_work: &dyn Fn() -> bool) {
        self.parked = true;
        if eng.run_is_open() || self.short_parks < Self::SHORT_PARKS {
            self.short_parks = self.short_parks.saturating_add(1);
            eng.park_queue_or(q, Self::RUN_PARK, deque_work);
        } else {
            let t0 = Instant::now();
            eng.park_queue_long(q, Self::PARK, deque_work);
            if t0.elapsed() < Self::PARK / 2 {
                // Woken (a run opened, or a push): short parks again.
                self.short_parks = 0;
            }
        }
    }
}

/// Run a task of the current run (in the ring slots) on `core` and complete it: its
/// kernel (recorded on the swimlane when it is on), a failure latched, else the
/// completion, keeping the first consumer it made ready that this core can run.
#[inline]
fn run_ring_task(sh: &ChipShared, core: &Core, task: TaskId, held: &mut Held) -> Step {
    let eng = &sh.eng;
    let arena_ptr = sh.arena.load(Acquire);
    if arena_ptr.is_null() {
        // Defensive: no run is active (queues are drained between runs).
        return Step::Next(None);
    }
    // safety: the arena pointer is set for the whole run and a queued task belongs
    // to the current run (queues are drained between runs).
    let arena = unsafe { &*arena_ptr };
    let ring = &arena.rings[task.ring()];
    // safety: `task` was published (popped from a ready queue or made ready by us).
    let p = unsafe { ring.payload(task.local()) };
    let failed = p.kernel.and_then(|k| {
        let t_start = sh.trace.load(Relaxed).then(Instant::now);
        let err = call_kernel(k, p);
        if let Some(t) = t_start {
            record_lane(sh, core, task, k, t);
        }
        err.map(|msg| (k, msg))
    });
    // Step 4: win the race against the run's give-up before touching anything (also
    // for a task with no kernel, whose core the give-up may see RUNNING too).
    if !abort::begin_completion(&core.state, task) {
        // The run gave up on this core; its arena may be in use by another run.
        return Step::Abandoned;
    }
    if let Some((k, msg)) = failed {
        eng.fail(RuntimeFailure::task_failed(k.name(), task, &msg));
        held.pay(eng);
        return Step::Next(None);
    }
    let mut next = None;
    // safety: the task ran (or is a dummy) and is completed exactly once, here.
    let consumed = unsafe {
        arena.complete_held(task, eng, |c| {
            let cq = arena.rings[c.ring()].payload(c.local()).queue as usize;
            if next.is_none() && queue_takes(core.queue, cq) {
                next = Some(c);
            } else {
                eng.push_queue(c, cq);
            }
        })
    };
    if consumed {
        held.hold(arena, task.ring());
    }
    if held.rings != 0 && (held.n >= Held::MOST || eng.progress.has_waiter()) {
        held.pay(eng);
    }
    Step::Next(next)
}

/// Record one kernel execution (from `start` to now) on `core`'s swimlane.
#[cold]
fn record_lane(sh: &ChipShared, core: &Core, task: TaskId, k: KernelRef, start: Instant) {
    let Some(t0) = *sh.trace_t0.lock() else {
        return;
    };
    let ns = |x: Instant| x.saturating_duration_since(t0).as_nanos() as u64;
    let idx = sh
        .cores
        .read()
        .iter()
        .position(|c| std::ptr::eq(&**c, core))
        .unwrap_or(0) as u32;
    let (start_ns, end_ns) = (ns(start), ns(Instant::now()));
    core.lane.lock().push(crate::dfx::SwimlaneEvent {
        task: task.0,
        start_ns,
        kernel: k.name_static(),
        dur_ns: end_ns.saturating_sub(start_ns).min(u32::MAX as u64) as u32,
        core: idx,
    });
}
