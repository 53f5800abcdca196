//! The orchestrator: submission, scopes and output-only allocations, on the caller's
//! thread; and [`OrchState`], its private per-arena state.
//!
//! Submit, in order (upstream's steps), each step able to fail the run with a precise
//! [`RuntimeFailure`]:
//! 1. validate the arguments (counts, views, the kernel's own check, explicit deps, and
//!    that no tensor outlives the scope of the task that produced it) — INVALID_ARGS;
//! 2. scope admission: the innermost scope may own at most `window - 1` tasks —
//!    SCOPE_DEADLOCK at once;
//! 3. a slot and the packed output bytes from the current ring (`min(depth, 3)`), waiting
//!    while completions will free space (back-pressure); failing at once when the ring's
//!    head task is pinned by an open scope (structural deadlock: no scope can end while
//!    the orchestrator waits), or after the backstop without progress;
//! 4. the fanin: explicit deps, then (outside manual scopes) creator edges and
//!    tensormap lookups; duplicates merged; each producer claimed under its lock
//!    (skipped when it already completed and only ordering was asked);
//! 5. tensormap inserts for INOUT and OUTPUT_EXISTING (outside manual scopes);
//! 6. fanin record (inline, then spill pool) and dependency nodes, each reserved with the
//!    same wait / structural / backstop rules (DEP_POOL_OVERFLOW);
//! 7. wiring under each producer's lock, then the `+1` release that publishes the task.
//!
//! After any failure the run is fatal: every later call returns the latched failure.
//!
//! The steps are the stages of `orch/submit.rs` (one function each); this file holds the
//! orchestrator's state, scopes, the allocators' back-pressure (`alloc_slot`,
//! `reserve_pool`, `reserve_tensormap`, `wait_or_fail`) and the no-progress clock.

mod submit;

use submit::Submitted;

use super::ring::{window_admits, HeapAlloc, HeapRing, LinearPool};
use super::shared::{ArenaShared, EngineShared, FaninEdge, SCOPE_BIT};
use super::tensormap::TensorMap;
use super::*;
use crate::config::RingSizing;
use crate::mem::{ReserveError, ZeroValid, ZeroedArray};
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

/// How many submits ahead the submit path prefetches the slot it will fill (the slot
/// tables of a large window do not stay in cache; a store miss there stalls the
/// publishing atomic of the current submit).
const PREFETCH_AHEAD: u32 = 4;
/// How many scope references ahead the end of a scope prefetches a task's slot.
const SCOPE_PREFETCH_AHEAD: usize = 8;

/// Bytes of the orchestrator's own record per task-window slot.
pub(crate) const ORCH_SLOT_BYTES: usize = std::mem::size_of::<OrchSlot>();

/// Orchestrator-private record per slot.
#[derive(Clone, Copy)]
struct OrchSlot {
    heap_end: u64,
    dep_mark: u64,
    spill_mark: u64,
    seen_epoch: u32,
    seen_idx: u32,
}
// safety: integers.
unsafe impl ZeroValid for OrchSlot {}

/// Orchestrator-private state of one ring.
struct OrchRing {
    heap: HeapRing,
    heap_base: u64,
    /// Heap bytes retired since the run began (wraps unrolled; scope stats).
    heap_retired: u64,
    deps: LinearPool,
    spill: LinearPool,
    next: u32,
    seen_la: u32,
    slots: ZeroedArray<OrchSlot>,
    mask: u32,
    peak_slots: u64,
    peak_heap: u64,
    peak_deps: u64,
}

impl OrchRing {
    /// The highest use so far: the peaks recorded, and the use now (between two
    /// catch-ups with the watermark the window, the heap and the pools only fill, so
    /// their peaks are recorded when a catch-up frees them and read with the use now).
    fn peaks(&self) -> (u64, u64, u64) {
        (
            self.peak_slots.max((self.next - self.seen_la) as u64),
            self.peak_heap.max(self.heap.used()),
            self.peak_deps.max(self.deps.used()).max(self.spill.used()),
        )
    }

    /// The record of local id `local`'s slot.
    #[inline(always)]
    fn slot_mut(&mut self, local: u32) -> &mut OrchSlot {
        let i = (local & self.mask) as usize;
        debug_assert!(i < self.slots.len());
        // safety: `slots` holds `mask + 1` records (`OrchState::new`) and `i <= mask`;
        // `&mut self` is unique.
        unsafe { &mut *self.slots.as_ptr().add(i) }
    }
}

/// Highest simultaneous use seen per ring during a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeakUse {
    pub task_window: [u64; 4],
    pub heap: [u64; 4],
    pub dep_pool: [u64; 4],
}

impl PeakUse {
    /// The 12 values as the frames carry them: ring 0..3 of task window, heap, dep pool.
    pub fn to_array(&self) -> [u64; 12] {
        let mut a = [0u64; 12];
        a[..4].copy_from_slice(&self.task_window);
        a[4..8].copy_from_slice(&self.heap);
        a[8..].copy_from_slice(&self.dep_pool);
        a
    }

    /// The reverse of [`PeakUse::to_array`].
    pub fn from_array(a: [u64; 12]) -> PeakUse {
        PeakUse {
            task_window: [a[0], a[1], a[2], a[3]],
            heap: [a[4], a[5], a[6], a[7]],
            dep_pool: [a[8], a[9], a[10], a[11]],
        }
    }
}

#[derive(Clone, Copy)]
struct ScopeFrame {
    begin: usize,
    manual: bool,
    site: Site,
    /// The scope instance: scopes opened before it this run (the root scope is 0).
    id: u32,
}

/// Where a scope was opened (for scope stats).
#[derive(Clone, Copy)]
enum Site {
    Root,
    Code(&'static std::panic::Location<'static>),
    /// Index into `OrchState::sites` (sites named by a foreign caller, e.g. Python).
    Named(u32),
}

/// The orchestrator's private part of an arena. Reset per run in O(rings).
pub struct OrchState {
    rings: [OrchRing; 4],
    tensormap: TensorMap,
    scope_tasks: Vec<TaskId>,
    scopes: Vec<ScopeFrame>,
    fanin: Vec<FaninEdge>,
    epoch: u32,
    tasks: u64,
    /// Scope-stats samples of the current run, when enabled.
    pub(crate) stats: Option<crate::dfx::ScopeStats>,
    /// The dependency graph of the current run, when enabled (`deps.json`).
    pub(crate) deps: Option<Box<super::depgraph::DepGraph>>,
    /// The recording of the current run, when it is being captured (`ChipWorker::capture`).
    capture: Option<Box<super::replay::Recorder>>,
    /// `deps` or `capture` is on (one test on the submit path).
    recording: bool,
    /// Scopes opened so far this run (the next scope's instance id).
    scopes_opened: u32,
    /// The kernel (its address) whose [`Kernel::bounded`] the submit looked at last:
    /// asked again only when the kernel changes (`EngineShared::unbounded`).
    ///
    /// [`Kernel::bounded`]: crate::kernel::Kernel::bounded
    pub(super) bounded_seen: std::cell::Cell<usize>,
    sites: Vec<String>,
}

impl OrchState {
    /// Build for `sizing`; `heap_bases[r]` is the address of ring `r`'s heap.
    pub fn new(sizing: &RingSizing, heap_bases: [u64; 4]) -> Result<OrchState, ReserveError> {
        let mk = |r: usize| -> Result<OrchRing, ReserveError> {
            Ok(OrchRing {
                heap: HeapRing::new(sizing.heap[r]),
                heap_base: heap_bases[r],
                heap_retired: 0,
                deps: LinearPool::new(sizing.dep_pool[r]),
                spill: LinearPool::new(sizing.dep_pool[r]),
                next: 0,
                seen_la: 0,
                slots: ZeroedArray::new(sizing.task_window[r] as usize)?,
                mask: (sizing.task_window[r] - 1) as u32,
                peak_slots: 0,
                peak_heap: 0,
                peak_deps: 0,
            })
        };
        Ok(OrchState {
            rings: [mk(0)?, mk(1)?, mk(2)?, mk(3)?],
            tensormap: TensorMap::new(crate::engine::tensormap::pool_entries(&sizing.task_window))?,
            scope_tasks: Vec::with_capacity(1024),
            scopes: Vec::with_capacity(MAX_SCOPE_DEPTH),
            fanin: Vec::with_capacity(64),
            epoch: 0,
            tasks: 0,
            stats: None,
            deps: None,
            capture: None,
            recording: false,
            scopes_opened: 0,
            bounded_seen: std::cell::Cell::new(0),
            sites: Vec::new(),
        })
    }

    /// Forget the previous run (O(rings)).
    pub fn reset(&mut self) {
        for r in &mut self.rings {
            r.heap.reset();
            r.heap_retired = 0;
            r.deps.reset();
            r.spill.reset();
            r.next = 0;
            r.seen_la = 0;
            r.peak_slots = 0;
            r.peak_heap = 0;
            r.peak_deps = 0;
        }
        self.tensormap.reset();
        self.scope_tasks.clear();
        self.scopes.clear();
        self.fanin.clear();
        self.tasks = 0;
        self.stats = None;
        self.deps = None;
        self.capture = None;
        self.recording = false;
        self.scopes_opened = 0;
        self.sites.clear();
    }

    /// Record the dependency graph this run.
    pub(crate) fn enable_deps(&mut self) {
        self.deps = Some(Box::default());
        self.recording = true;
    }

    /// Capture this run's graph into `rec` (take it back with `take_capture`).
    pub(crate) fn install_capture(&mut self, rec: Option<Box<super::replay::Recorder>>) {
        self.recording |= rec.is_some();
        self.capture = rec;
    }

    pub(crate) fn take_capture(&mut self) -> Option<Box<super::replay::Recorder>> {
        self.capture.take()
    }

    /// Record one submit in the dependency graph and / or the capture. Out of line and
    /// cold: when neither is on, the submit path pays one not-taken branch.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        head: &super::replay::TaskHead,
        block: u64,
        scope: u32,
        tensors: &[Tensor],
        tags: &[ArgTag],
        order: &[u8],
        args: &TaskArgs,
        infer: bool,
    ) {
        if let Some(g) = self.deps.as_deref_mut() {
            let name = head
                .kernel
                .map(|k| k.name_static())
                .unwrap_or(if head.alloc { "alloc" } else { "dummy" });
            g.record(
                head.id,
                name,
                head.id.ring(),
                scope,
                tensors,
                tags,
                order,
                args.deps(),
                infer,
            );
        }
        if let Some(c) = self.capture.as_deref_mut() {
            c.task(
                head,
                block,
                tensors,
                tags,
                args.scalars(),
                args.deps(),
                infer,
            );
        }
    }

    /// Record scope stats this run.
    pub(crate) fn enable_stats(&mut self) {
        self.stats = Some(crate::dfx::ScopeStats::default());
    }

    /// The tensormap pool's entries and the most in use at once during the run.
    pub fn tensormap_use(&self) -> (u64, u64) {
        (
            self.tensormap.capacity() as u64,
            self.tensormap.peak() as u64,
        )
    }

    pub fn peaks(&self) -> PeakUse {
        let mut p = PeakUse::default();
        for (i, r) in self.rings.iter().enumerate() {
            (p.task_window[i], p.heap[i], p.dep_pool[i]) = r.peaks();
        }
        p
    }

    /// Address of ring `r`'s heap.
    pub(crate) fn heap_base(&self, r: usize) -> u64 {
        self.rings[r].heap_base
    }

    /// Tasks submitted in the current run (including alloc and dummy tasks).
    pub fn tasks(&self) -> u64 {
        self.tasks
    }
}

/// The tensors a submit produced.
///
/// Compact (each output is its address and spec, 32 bytes, not an 80-byte tensor): it
/// is returned by value from every submit, and a copy of 16 full tensors per submit was
/// a measurable part of B2.
#[derive(Clone, Copy)]
pub struct TaskOutputs {
    pub id: TaskId,
    n: u8,
    /// The first `n` are initialised (no per-submit initialisation of the rest).
    outs: [std::mem::MaybeUninit<(u64, TensorSpec)>; MAX_TASK_TENSORS],
}

impl std::fmt::Debug for TaskOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskOutputs")
            .field("id", &self.id)
            .field("outputs", &self.outputs().collect::<Vec<_>>())
            .finish()
    }
}

impl TaskOutputs {
    fn new(id: TaskId) -> TaskOutputs {
        TaskOutputs {
            id,
            n: 0,
            outs: [const { std::mem::MaybeUninit::uninit() }; MAX_TASK_TENSORS],
        }
    }
    fn push(&mut self, t: &Tensor) {
        self.outs[self.n as usize].write((
            t.addr,
            TensorSpec {
                shape: t.shape,
                ndims: t.ndims,
                dtype: t.dtype,
            },
        ));
        self.n += 1;
    }
    /// Number of runtime-allocated outputs.
    pub fn len(&self) -> usize {
        self.n as usize
    }
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
    /// Runtime-allocated outputs (tag OUTPUT), in argument order. Valid for submits in
    /// the same scope or inner scopes.
    pub fn outputs(&self) -> impl ExactSizeIterator<Item = Tensor> + '_ {
        (0..self.len()).map(|i| self.output(i))
    }
    /// Output `i` (panics if `i >= len()`).
    pub fn output(&self, i: usize) -> Tensor {
        assert!(
            i < self.len(),
            "output {i} of a task with {} runtime outputs",
            self.len()
        );
        // safety: the first `n` entries were written by the submit.
        let (addr, spec) = unsafe { self.outs[i].assume_init() };
        spec.materialize(addr, self.id)
    }
}

/// Timeouts the orchestrator applies while it waits for space.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitPolicy {
    /// Fail with the resource's code after this long without any progress: no task
    /// completed and no task ran on a core or waited in a ready queue (backstop).
    pub backstop: Duration,
    /// Fail with SCHEDULER_TIMEOUT after this long without any task completing while
    /// tasks were running (or ready): a kernel that never returns.
    pub scheduler_timeout: Duration,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy {
            backstop: Duration::from_millis(500),
            scheduler_timeout: Duration::from_secs(10),
        }
    }
}

/// The executor's side of the backstop: what its cores are doing. Asked only while the
/// orchestrator waits for space (never on the submit path).
pub(crate) trait ExecutorProbe {
    /// Is a task running on a core, or ready in a queue (about to be dispatched)?
    fn busy(&self) -> bool;
    /// The SCHEDULER_TIMEOUT failure (with its sub-class) of a run in which no task
    /// completed for `timeout` while the orchestrator waited, `submitted` tasks so far.
    fn stall(&self, timeout: Duration, submitted: u64) -> RuntimeFailure;
}

/// The orchestration API for one run. See the module doc.
pub struct Orchestrator<'r> {
    eng: &'r EngineShared,
    sh: &'r ArenaShared,
    st: &'r mut OrchState,
    sizing: RingSizing,
    policy: WaitPolicy,
    /// Called around blocking waits (e.g. to release Python's GIL): `true` before
    /// waiting, `false` after.
    pub(crate) blocking_hook: Option<&'r dyn Fn(bool)>,
    /// The executor's "run one ready task here" (ChipOptions::orchestrator_helps): while
    /// the orchestrator waits for ring space it runs ready tasks instead of sleeping.
    /// Returns whether it ran one.
    pub(crate) helper: Option<&'r dyn Fn() -> bool>,
    /// The executor's "run one queued task here" for a program that has nothing more
    /// to submit (a node's: see `Node::run`); returns whether it ran one.
    pub(crate) end_helper: Option<&'r dyn Fn() -> bool>,
    /// What the executor's cores are doing (the backstop counts a running task as
    /// progress). Without one, progress is a task completing.
    pub(crate) probe: Option<&'r dyn ExecutorProbe>,
    /// A SCOPE_DEADLOCK found but not yet reported: the rest of the scope is counted
    /// (not run) so that the failure can say which window would have held it.
    dry: Option<DryScope>,
    /// Count a scope that overflows its window to its end (else SCOPE_DEADLOCK at the
    /// overflowing submit, with a lower bound). Off for executors that cannot tell a
    /// counted submit from a dispatched one (an L3 node records its tasks at submit).
    pub(crate) count_scope_overflow: bool,
    /// Queues (bits of [`EngineShared::push_owned_quiet`]) that got a ready task from
    /// this orchestrator whose wake-up of a parked core is still owed. A submit's ready
    /// push wakes nobody at once. The next submit looks at the debt
    /// ([`Orchestrator::look_at_wakes`]: plain loads) and pays it only when a parked
    /// core could take an owed task and the CPU share allows waking it, else keeps it;
    /// a wait for space, the end of the program and the drop pay it (fenced) —
    /// unless by then the task was taken, by a spinning core or by the orchestrator
    /// itself at the end of the program. A program of one task then costs no wake-up
    /// and no hand-off to a core. While user code runs between two submits, a parked
    /// core looks at the queues every millisecond anyway (cores park briefly while a
    /// run is open: `Idle::RUN_PARK` in `chip/core.rs`), and takes the pushes not yet
    /// published too ([`EngineShared::pop_queue_all`]; the orchestrator's ring publishes
    /// in batches), which bounds how late an owed task can start. Paying publishes.
    wake_debt: std::cell::Cell<u64>,
    /// Submits left before the next look at an unpaid debt: a look that finds nobody
    /// to wake skips the next [`LOOK_SKIP`] submits' looks (a chain's debt stays unpaid
    /// while its one awake core runs it, and a look is some 40 instructions, a few
    /// percent of a submit).
    look_skip: std::cell::Cell<u32>,
}

/// Submits whose look at an unpaid wake-up debt is skipped after a look that found no
/// core to wake ([`Orchestrator::look_at_wakes`]): a core that parks meanwhile is seen
/// at most this many submits later (or by a fenced payment before).
const LOOK_SKIP: u32 = 15;

impl Drop for Orchestrator<'_> {
    /// A program's owed wake-up is paid at the latest here (its executor usually paid
    /// it already, after running what it could itself).
    fn drop(&mut self) {
        self.pay_wakes();
    }
}

/// The scope-deadlock count in progress (see `Orchestrator::dry`).
struct DryScope {
    /// `scopes.len()` while the overflowing scope is the innermost one.
    level: usize,
    ring: usize,
    depth: usize,
    window: u64,
    /// Tasks the scope owns so far (submitted, or counted without running).
    owned: u64,
    /// Submits seen while counting (the scope's own and those of its inner scopes).
    counted: u64,
    /// The submit that overflowed (its text: `submit of kernel 'x'`).
    what: String,
}

/// Most submits counted after a SCOPE_DEADLOCK (a program that only stops submitting
/// when a submit fails must not run forever); beyond it `needed` is a lower bound.
const DRY_COUNT_LIMIT: u64 = 1 << 20;

impl DryScope {
    /// The SCOPE_DEADLOCK: `complete` when the scope ended (its task count is exact),
    /// else the count so far is a lower bound.
    fn failure(&self, complete: bool) -> RuntimeFailure {
        let DryScope {
            ring,
            depth,
            window,
            owned,
            ref what,
            ..
        } = *self;
        let max = crate::config::MAX_RING_TASK_WINDOW;
        // A scope of `owned` tasks needs `owned + 1 <= window - 1` at its last submit.
        let needed = owned
            .saturating_add(1)
            .checked_next_power_of_two()
            .filter(|&n| n <= max);
        let count = if complete {
            format!("the scope at depth {depth} submits {owned} tasks (those beyond the window were counted to the end of the scope, not run)")
        } else {
            format!("the scope at depth {depth} submitted at least {owned} tasks (the rest of the scope was not counted)")
        };
        let fit = match needed {
            Some(n) if complete => format!("a ring_task_window of {n} slots would have held it"),
            Some(n) => format!("a ring_task_window of at least {n} slots is needed"),
            None => format!(
                "no valid ring_task_window (at most {max} slots) holds that many; split the scope"
            ),
        };
        // Only a complete count knows the window that holds the scope.
        RuntimeFailure::capacity(
            StatusCode::ScopeDeadlock,
            ring,
            Resource::TaskWindow,
            window,
            needed.filter(|_| complete),
            format!("{what}: {count} and ring {ring}'s ring_task_window={window} holds at most {} live tasks; {fit}", window - 1),
        )
    }
}

#[derive(Clone, Copy)]
enum Blocked {
    Window,
    Heap,
    Deps,
    Spill,
    Tensormap,
}

impl<'r> Orchestrator<'r> {
    pub(crate) fn new(
        eng: &'r EngineShared,
        sh: &'r ArenaShared,
        st: &'r mut OrchState,
        sizing: RingSizing,
        policy: WaitPolicy,
    ) -> Orchestrator<'r> {
        // A new run: no kernel of it seen yet.
        eng.unbounded.store(false, Relaxed);
        st.bounded_seen.set(0);
        Orchestrator {
            eng,
            sh,
            st,
            sizing,
            policy,
            blocking_hook: None,
            helper: None,
            end_helper: None,
            probe: None,
            dry: None,
            count_scope_overflow: true,
            wake_debt: std::cell::Cell::new(0),
            look_skip: std::cell::Cell::new(0),
        }
    }

    /// Pay the wake-up debt (see `wake_debt`): wake a parked core for each queue that
    /// got a ready task since the last payment and still holds one (a task a spinning
    /// core took meanwhile needs nobody woken).
    #[inline]
    pub(crate) fn pay_wakes(&self) {
        let debt = self.wake_debt.replace(0);
        self.look_skip.set(0);
        if debt != 0 {
            // safety: the orchestrator of the engine's run is the one thread that
            // pushes to its rings.
            unsafe { self.eng.publish_owned(debt) };
            self.eng.wake_for_queued(debt);
        }
    }

    /// Publish the ready tasks pushed since the last payment (the ring publishes in
    /// batches, `engine/shared/owner_ring.rs`) without waking anyone: a spinning core
    /// takes them now.
    #[inline]
    pub(crate) fn publish_ready(&self) {
        // safety: as in `pay_wakes`.
        unsafe { self.eng.publish_owned(self.wake_debt.get()) };
    }

    /// A submit's look at the wake-up debt: paid ([`Orchestrator::pay_wakes`]) only when
    /// a core that could take one of the owed tasks is parked; otherwise kept for a
    /// later look. The look is plain loads of the parked-core counts (lines the cores
    /// write only when they park or wake), no fence: a core parking at this very moment
    /// may not be seen yet, and is seen by a later look — one of the next
    /// [`LOOK_SKIP`] + 1 submits', or the fenced payment of a wait for space, the end of
    /// the program or the drop.
    #[inline(always)]
    pub(super) fn look_at_wakes(&self) {
        let debt = self.wake_debt.get();
        if debt != 0 {
            let skip = self.look_skip.get();
            if skip > 0 {
                self.look_skip.set(skip - 1);
            } else if self.eng.parked_for(debt) {
                self.pay_wakes();
            } else {
                self.look_skip.set(LOOK_SKIP);
            }
        }
    }

    /// Owe a wake-up for the queues of `mask` (a ready push just made).
    #[inline(always)]
    pub(super) fn owe_wakes(&self, mask: u64) {
        self.wake_debt.set(self.wake_debt.get() | mask);
    }

    /// The sizing this run uses.
    pub fn sizing(&self) -> &RingSizing {
        &self.sizing
    }

    /// Are scope stats being recorded this run?
    pub fn stats_enabled(&self) -> bool {
        self.st.stats.is_some()
    }

    /// Current scope depth (the run's root scope is depth 0).
    pub fn depth(&self) -> usize {
        self.st.scopes.len().saturating_sub(1)
    }

    /// Ring new tasks go to: `min(depth, 3)`.
    pub fn current_ring(&self) -> usize {
        self.depth().min(3)
    }

    fn in_manual_scope(&self) -> bool {
        self.st.scopes.iter().any(|s| s.manual)
    }

    /// A runtime-allocated output spec (tag OUTPUT).
    pub fn spec(shape: &[u32], dtype: DType) -> Result<TensorSpec, RuntimeFailure> {
        TensorSpec::new(shape, dtype)
            .map_err(|e| RuntimeFailure::invalid_args(None, format!("spec: {e}")))
    }

    #[inline]
    fn check_fatal(&self) -> Result<(), RuntimeFailure> {
        if self.eng.fatal.load(Acquire) {
            return Err(self.latched_failure());
        }
        Ok(())
    }

    #[cold]
    fn latched_failure(&self) -> RuntimeFailure {
        let f = self.eng.failure.lock().clone();
        f.unwrap_or_else(|| {
            RuntimeFailure::new(StatusCode::TaskFailed, None, "the run already failed")
        })
    }

    /// Latch `f` as the run's failure (first wins) and return it. A scope deadlock
    /// still being counted is latched first (with what was counted so far).
    fn fail(&self, f: RuntimeFailure) -> RuntimeFailure {
        if let Some(d) = &self.dry {
            self.eng.fail(d.failure(false));
        }
        self.eng.fail(f.clone());
        self.eng.failure.lock().clone().unwrap_or(f)
    }

    // ----- scopes -------------------------------------------------------------------

    /// Open a scope. `manual` scopes infer no dependencies (only explicit ones).
    #[track_caller]
    pub fn begin_scope(&mut self, manual: bool) -> Result<(), RuntimeFailure> {
        let site = if self.st.scopes.is_empty() {
            Site::Root
        } else {
            Site::Code(std::panic::Location::caller())
        };
        self.begin_scope_at(manual, site)
    }

    /// Open a scope whose site (for scope stats) is named by the caller, e.g.
    /// `"model.py:42"`.
    pub fn begin_scope_named(&mut self, manual: bool, site: &str) -> Result<(), RuntimeFailure> {
        let site = if self.st.stats.is_some() {
            self.st.sites.push(site.to_string());
            Site::Named(self.st.sites.len() as u32 - 1)
        } else {
            Site::Root
        };
        self.begin_scope_at(manual, site)
    }

    fn begin_scope_at(&mut self, manual: bool, site: Site) -> Result<(), RuntimeFailure> {
        self.check_fatal()?;
        if !manual && self.in_manual_scope() {
            return Err(self.fail(RuntimeFailure::invalid_args(
                Some(self.current_ring()),
                "scope(): auto scope nested inside manual scope is not supported",
            )));
        }
        if self.st.scopes.len() >= MAX_SCOPE_DEPTH {
            return Err(self.fail(RuntimeFailure::invalid_args(
                Some(self.current_ring()),
                format!("scope(): scopes nest at most {MAX_SCOPE_DEPTH} deep"),
            )));
        }
        let begin = self.st.scope_tasks.len();
        let id = self.st.scopes_opened;
        self.st.scopes_opened = id.wrapping_add(1);
        self.st.scopes.push(ScopeFrame {
            begin,
            manual,
            site,
            id,
        });
        if let Some(c) = self.st.capture.as_deref_mut() {
            c.begin_scope(manual);
        }
        self.sample("begin", site);
        Ok(())
    }

    /// Record a scope-stats sample for the innermost scope (when enabled).
    fn sample(&mut self, phase: &str, site: Site) {
        if self.st.stats.is_none() {
            return;
        }
        let depth = self.st.scopes.len().saturating_sub(1);
        let ring = depth.min(3);
        self.observe(ring);
        let site = match site {
            Site::Root => "root".to_string(),
            Site::Code(l) => format!("{}:{}", l.file(), l.line()),
            Site::Named(i) => self.st.sites[i as usize].clone(),
        };
        let r = &self.st.rings[ring];
        let sample = crate::dfx::ScopeSample {
            site,
            phase: phase.to_string(),
            depth: depth as u32,
            ring: ring as u32,
            task_window_start: r.seen_la as u64,
            task_window_end: r.next as u64,
            heap_start: r.heap_retired,
            heap_end: r.heap_retired + r.heap.used(),
            dep_pool_start: r.deps.tail,
            dep_pool_end: r.deps.top,
            tensormap: self.st.tensormap.used() as u64,
        };
        if let Some(st) = self.st.stats.as_mut() {
            st.push(sample);
        }
    }

    /// Close the innermost scope: drop its reference on each of its tasks (non-blocking).
    pub fn end_scope(&mut self) -> Result<(), RuntimeFailure> {
        if self.st.scopes.len() <= 1 {
            return Err(self.fail(RuntimeFailure::invalid_args(
                Some(0),
                "end_scope(): no scope is open (the root scope ends with the run)",
            )));
        }
        self.close_scope();
        self.check_fatal()
    }

    pub(crate) fn close_scope(&mut self) {
        let Some(&frame) = self.st.scopes.last() else {
            return;
        };
        self.sample("end", frame.site);
        self.st.scopes.pop();
        self.publish_ready();
        if let Some(c) = self.st.capture.as_deref_mut() {
            c.end_scope();
        }
        let tasks = &self.st.scope_tasks[frame.begin..];
        // Rings with a task this loop consumed: their watermarks advance once, after it.
        let mut consumed = 0u8;
        for (i, &id) in tasks.iter().enumerate() {
            // The slots' lines were last written by the cores that completed the tasks:
            // ask for them a few releases ahead, so that the misses overlap instead of
            // each stalling its release's locked instruction in turn.
            if let Some(&ahead) = tasks.get(i + SCOPE_PREFETCH_AHEAD) {
                crate::mem::prefetch_write(self.sh.slot(ahead) as *const _ as *const u8, 1);
            }
            if self.sh.release_ref_held(id, SCOPE_BIT) {
                consumed |= 1 << id.ring();
            }
        }
        self.sh.retired_rings(consumed, self.eng);
        self.st.scope_tasks.truncate(frame.begin);
        if matches!(&self.dry, Some(d) if self.st.scopes.len() < d.level) {
            // The overflowing scope ended: its count is complete.
            let d = self.dry.take().expect("checked");
            self.eng.fail(d.failure(true));
        }
    }

    /// Close every open scope, the root included (end of the orchestration).
    pub(crate) fn close_all_scopes(&mut self) {
        while !self.st.scopes.is_empty() {
            self.close_scope();
        }
    }

    /// Run `f` inside an automatic scope.
    #[track_caller]
    pub fn scope<R>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<R, RuntimeFailure>,
    ) -> Result<R, RuntimeFailure> {
        self.begin_scope(false)?;
        let r = f(self);
        let e = self.end_scope();
        let v = r?;
        e?;
        Ok(v)
    }

    /// Run `f` inside a manual scope (no inferred dependencies).
    #[track_caller]
    pub fn manual_scope<R>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<R, RuntimeFailure>,
    ) -> Result<R, RuntimeFailure> {
        self.begin_scope(true)?;
        let r = f(self);
        let e = self.end_scope();
        let v = r?;
        e?;
        Ok(v)
    }

    // ----- submission ---------------------------------------------------------------

    /// Submit a task running `kernel`.
    pub fn submit(
        &mut self,
        kernel: KernelRef,
        args: &TaskArgs,
    ) -> Result<TaskOutputs, RuntimeFailure> {
        self.submit_impl(Some(kernel), args, false)
    }

    /// Submit a dummy task: dependencies and outputs as given, runs nothing (a barrier).
    pub fn submit_dummy(&mut self, args: &TaskArgs) -> Result<TaskOutputs, RuntimeFailure> {
        self.submit_impl(None, args, false)
    }

    /// An output-only allocation: the buffers live until this scope ends (and until
    /// every RETAIN consumer released them). Completes at once.
    pub fn alloc(&mut self, specs: &[TensorSpec]) -> Result<TaskOutputs, RuntimeFailure> {
        let mut a = TaskArgs::new();
        if specs.is_empty() {
            return Err(self.fail(RuntimeFailure::invalid_args(
                Some(self.current_ring()),
                "alloc(): needs at least one tensor",
            )));
        }
        for s in specs {
            a.output(*s);
        }
        self.submit_impl(None, &a, true)
    }

    /// A submit while a SCOPE_DEADLOCK is being counted: count it (when it belongs to
    /// the overflowing scope), run nothing, return placeholder outputs (address 0) so
    /// that the program can go on to the end of the scope.
    #[cold]
    fn count_dry(&mut self, args: &TaskArgs) -> Result<TaskOutputs, RuntimeFailure> {
        let level = self.st.scopes.len();
        let ring = self.current_ring();
        let d = self.dry.as_mut().expect("counting");
        d.counted += 1;
        if level == d.level {
            d.owned += 1;
        }
        let mut stop = d.counted > DRY_COUNT_LIMIT;
        // An id past every id of the run (on the ring the task would have gone to), never
        // used: nothing is submitted any more in this run.
        let mut outputs = TaskOutputs::new(TaskId::new(
            ring as u8,
            self.st.rings[ring].next.wrapping_add(d.counted as u32),
        ));
        for (i, &kind) in args.kinds().iter().enumerate() {
            if kind == ArgKind::Spec {
                let s = args.spec_at(i);
                let nd = s.ndims as usize;
                if nd == 0 || nd > MAX_DIMS {
                    // (A real submit would fail here: stop counting.)
                    stop = true;
                    break;
                }
                outputs.push(&s.materialize(0, outputs.id));
            }
        }
        if stop {
            let f = d.failure(false);
            self.dry = None;
            return Err(self.fail(f));
        }
        Ok(outputs)
    }

    /// Submit a recorded task (replay, `ChipWorker::capture`): no argument validation,
    /// no tensormap, no inference — the fanin is the recorded one. Scope admission,
    /// the slot, the heap, the pools, claims and wiring are those of any submit (so
    /// back-pressure and every capacity check still hold). `tensors` are in canonical
    /// order with every address resolved except the task's own runtime outputs,
    /// `outs` (tensor index, byte offset in the task's output block), which are set
    /// here. `scope_total`: the tasks the innermost scope owns in the recording (the
    /// SCOPE_DEADLOCK's count). Returns the address of the task's output block.
    pub(crate) fn submit_replayed(
        &mut self,
        t: &super::replay::ReplaySubmit<'_>,
        tensors: &mut [Tensor],
        scope_total: u64,
    ) -> Result<u64, RuntimeFailure> {
        // As `submit_impl`: the last submits' owed wake-up is looked at now.
        self.look_at_wakes();
        self.check_fatal()?;
        // Before waiting for space: the previous submit's claims must not look like
        // claims of this one (`head_pinned`).
        self.st.fanin.clear();
        let ring = self.current_ring();
        let h = &t.head;
        let what = What::new(h.kernel, h.alloc);
        let window = self.sizing.task_window[ring];
        let (_, owned) = self.innermost_scope();
        if owned + 1 >= window {
            let d = DryScope {
                level: self.st.scopes.len(),
                ring,
                depth: self.depth(),
                window,
                owned: scope_total,
                counted: 0,
                what: what.to_string(),
            };
            return Err(self.fail(d.failure(true)));
        }
        let (id, base) = self.take_slot(ring, h.heap_bytes, &what)?;
        debug_assert_eq!(
            id, h.id,
            "a replay submits the recorded tasks in the recorded order"
        );
        for &(i, off) in t.outs {
            let o = &mut tensors[i as usize];
            o.addr = base + off;
            o.owner = id;
        }
        let rr = &self.st.rings;
        let la = [rr[0].seen_la, rr[1].seen_la, rr[2].seen_la, rr[3].seen_la];
        for &(p, flags) in t.fanin {
            if p.local() >= la[p.ring()] {
                self.st.fanin.push(FaninEdge::new(p, flags));
            }
        }
        let task = Submitted {
            id,
            kernel: h.kernel,
            inline_complete: h.alloc,
            n_inputs: h.n_inputs as usize,
            scalar_float_mask: h.scalar_float_mask,
            queue: h.kernel.map_or(2, |k| k.0.ready_queue()) as u8,
        };
        self.finish_submit(&task, &what, tensors, t.scalars, 0)?;
        Ok(base)
    }

    /// The innermost open scope and the tasks it owns so far.
    #[inline(always)]
    fn innermost_scope(&self) -> (ScopeFrame, u64) {
        let frame = *self
            .st
            .scopes
            .last()
            .expect("root scope is open during a run");
        (frame, (self.st.scope_tasks.len() - frame.begin) as u64)
    }

    /// Open a scope of a replay (recorded, so valid).
    pub(crate) fn begin_replayed_scope(&mut self, manual: bool) -> Result<(), RuntimeFailure> {
        self.begin_scope_at(manual, Site::Root)
    }

    fn record_marks(&mut self, ring: usize, local: u32) {
        let r = &mut self.st.rings[ring];
        let (dep_mark, spill_mark) = (r.deps.top, r.spill.top);
        let os = r.slot_mut(local);
        os.dep_mark = dep_mark;
        os.spill_mark = spill_mark;
    }

    fn check_owner_live(&self, owner: TaskId) -> Result<(), String> {
        let r = owner.ring();
        if (owner.0 >> 32) > 3 || owner.local() >= self.st.rings[r].next {
            return Err(format!("its producer {owner:?} is not a task of this run"));
        }
        let s = self.sh.slot(owner);
        let la = self.sh.rings[r].last_alive.load(Acquire);
        if owner.local() < la || s.local.load(Relaxed) != owner.local() || s.scope_released() {
            return Err(format!(
                "it was produced by {owner:?}, whose scope has ended; runtime outputs are valid only in the scope that made them and its inner scopes"
            ));
        }
        Ok(())
    }

    fn watermarks(&self) -> [u32; 4] {
        [0, 1, 2, 3].map(|r| self.sh.rings[r].last_alive.load(Acquire))
    }

    fn begin_fanin(&mut self) {
        self.st.fanin.clear();
        self.st.epoch = self.st.epoch.wrapping_add(1);
        if self.st.epoch == 0 {
            // Once every 2^32 submits: forget every de-duplication mark (only those:
            // the slots' heap and pool marks of live tasks must stay).
            for r in &mut self.st.rings {
                for os in r.slots.iter_mut() {
                    os.seen_epoch = 0;
                }
            }
            self.st.epoch = 1;
        }
    }

    fn add_fanin(&mut self, p: TaskId, flags: u64) {
        let st = &mut *self.st;
        add_fanin_to(&mut st.fanin, &mut st.rings, st.epoch, p, flags, false);
    }

    // ----- capacity -----------------------------------------------------------------

    /// Catch up with the ring's watermark: free slots, heap bytes and pool entries.
    #[inline(always)]
    fn observe(&mut self, ring: usize) {
        let la = self.sh.rings[ring].last_alive.load(Acquire);
        if la != self.st.rings[ring].seen_la {
            self.catch_up(ring, la);
        }
    }

    /// [`Orchestrator::observe`] when the watermark moved to `la`.
    #[inline(never)]
    fn catch_up(&mut self, ring: usize, la: u32) {
        let r = &mut self.st.rings[ring];
        (r.peak_slots, r.peak_heap, r.peak_deps) = r.peaks();
        let last = r.slots[((la - 1) & r.mask) as usize];
        let old_tail = r.heap.tail;
        r.heap.retire_to(la, last.heap_end);
        let t = r.heap.tail;
        r.heap_retired += if t >= old_tail {
            t - old_tail
        } else {
            r.heap.size - old_tail + t
        };
        r.deps.retire_to(last.dep_mark);
        r.spill.retire_to(last.spill_mark);
        r.seen_la = la;
    }

    /// Is the ring's head task pinned so that it can never retire while we wait?
    fn head_pinned(&self, ring: usize) -> Option<TaskId> {
        let r = &self.st.rings[ring];
        if r.seen_la == r.next {
            return None;
        }
        let head = TaskId::new(ring as u8, r.seen_la);
        let s = self.sh.slot(head);
        if !s.scope_released()
            || self
                .st
                .fanin
                .iter()
                .any(|e| e.claimed && e.producer == head)
        {
            Some(head)
        } else {
            None
        }
    }

    #[inline(always)]
    fn alloc_slot(
        &mut self,
        ring: usize,
        heap_bytes: u64,
        what: &What,
    ) -> Result<(u32, u64, u64), RuntimeFailure> {
        let heap_size = self.sizing.heap[ring];
        let window = self.sizing.task_window[ring];
        if heap_bytes > heap_size {
            let needed = heap_bytes.checked_next_power_of_two();
            let fit = match needed {
                Some(n) => format!("a ring_heap of at least {n} bytes is needed"),
                None => {
                    "no valid ring_heap (a power of 2 of at most 2^63 bytes) holds them".to_string()
                }
            };
            return Err(self.fail(RuntimeFailure::capacity(
                StatusCode::HeapRingDeadlock,
                ring,
                Resource::Heap,
                heap_size,
                // A lower bound (other live tasks hold bytes too): not a size that holds
                // the run.
                None,
                format!("{what}: its outputs need {heap_bytes} bytes (each output rounded up to 1 KiB) but ring {ring}'s ring_heap={heap_size} bytes; {fit}"),
            )));
        }
        // Built at the first wait (most submits never wait).
        let mut clock: Option<Backstop> = None;
        loop {
            self.observe(ring);
            let r = &mut self.st.rings[ring];
            let local = r.next;
            let win_ok = window_admits(local, r.seen_la, window);
            if win_ok {
                if let HeapAlloc::At { offset, end } = r.heap.try_alloc(heap_bytes, local) {
                    r.next += 1;
                    return Ok((local, offset, end));
                }
            }
            let blocked = if win_ok {
                Blocked::Heap
            } else {
                Blocked::Window
            };
            self.wait_or_fail(
                ring,
                blocked,
                heap_bytes,
                what,
                clock.get_or_insert_with(Backstop::new),
            )?;
        }
    }

    /// `need` consecutive entries of `ring`'s dependency pool (`Blocked::Deps`) or
    /// spill pool (`Blocked::Spill`): their start. Waits for retirements while they do
    /// not fit; a demand beyond the pool, or no progress, is the DEP_POOL_OVERFLOW
    /// failure. The room-at-once case is inlined into the submit; the rest is
    /// [`Orchestrator::reserve_pool_waiting`].
    #[inline(always)]
    fn reserve_pool(
        &mut self,
        ring: usize,
        need: u64,
        which: Blocked,
        what: &What,
    ) -> Result<u64, RuntimeFailure> {
        if need <= self.sizing.dep_pool[ring] {
            self.observe(ring);
            if let Some(start) = self.try_pool(ring, need, which) {
                return Ok(start);
            }
        }
        self.reserve_pool_waiting(ring, need, which, what)
    }

    /// Take `need` entries of the pool if they fit now (the peak: `OrchRing::peaks`).
    #[inline(always)]
    fn try_pool(&mut self, ring: usize, need: u64, which: Blocked) -> Option<u64> {
        let r = &mut self.st.rings[ring];
        let pool = match which {
            Blocked::Spill => &mut r.spill,
            _ => &mut r.deps,
        };
        Some(pool.try_alloc(need)? as u64)
    }

    /// [`Orchestrator::reserve_pool`] when the entries do not fit at once.
    #[cold]
    #[inline(never)]
    fn reserve_pool_waiting(
        &mut self,
        ring: usize,
        need: u64,
        which: Blocked,
        what: &What,
    ) -> Result<u64, RuntimeFailure> {
        let cap = self.sizing.dep_pool[ring];
        if need > cap {
            let (noun, extra) = match which {
                Blocked::Spill => ("fanin edges beyond the 16 held inline", ""),
                _ => ("dependency-list entries", " for producers still running"),
            };
            return Err(self.fail(RuntimeFailure::capacity(
                StatusCode::DepPoolOverflow,
                ring,
                Resource::DepPool,
                cap,
                // A lower bound, as for the heap above.
                None,
                format!("{what}: the task needs {need} {noun}{extra} but ring {ring}'s ring_dep_pool={cap} entries; a ring_dep_pool of at least {need} entries is needed"),
            )));
        }
        // Built at the first wait (most submits never wait).
        let mut clock: Option<Backstop> = None;
        loop {
            self.observe(ring);
            if let Some(start) = self.try_pool(ring, need, which) {
                return Ok(start);
            }
            self.wait_or_fail(
                ring,
                which,
                need,
                what,
                clock.get_or_insert_with(Backstop::new),
            )?;
        }
    }

    fn reserve_tensormap(
        &mut self,
        need: u32,
        ring: usize,
        what: &What,
    ) -> Result<(), RuntimeFailure> {
        let cap = self.st.tensormap.capacity();
        if need > cap {
            return Err(self.fail(RuntimeFailure::capacity(
                StatusCode::TensormapOverflow,
                ring,
                Resource::Tensormap,
                cap as u64,
                Some(need as u64),
                format!("{what}: needs {need} tensormap entries"),
            )));
        }
        // Built at the first wait (most submits never wait).
        let mut clock: Option<Backstop> = None;
        loop {
            if self.st.tensormap.free() >= need {
                return Ok(());
            }
            let la = self.watermarks();
            self.st.tensormap.sweep(&la);
            if self.st.tensormap.free() >= need {
                return Ok(());
            }
            self.wait_or_fail(
                ring,
                Blocked::Tensormap,
                need as u64,
                what,
                clock.get_or_insert_with(Backstop::new),
            )?;
        }
    }

    /// Either prove a deadlock, time out, or wait for progress: the submit is blocked on
    /// `blocked` of `ring` needing `need` more of it. Returns `Ok` after a wait (the
    /// caller retries its allocation); fails at once when the ring's head is pinned by an
    /// open scope (structural), and after the backstop (or the scheduler timeout) without
    /// progress.
    fn wait_or_fail(
        &mut self,
        ring: usize,
        blocked: Blocked,
        need: u64,
        what: &What,
        clock: &mut Backstop,
    ) -> Result<(), RuntimeFailure> {
        self.check_fatal()?;
        if !matches!(blocked, Blocked::Tensormap) {
            if let Some(head) = self.head_pinned(ring) {
                let s = self.shortage(ring, blocked, need);
                return Err(self.fail(s.pinned(what, head)));
            }
        }
        match clock.check(self) {
            Verdict::Wait => {}
            Verdict::Deadlock => {
                let s = self.shortage(ring, blocked, need);
                return Err(self.fail(s.no_progress(what, self.policy.backstop)));
            }
            Verdict::Stalled(f) => return Err(self.fail(f)),
        }
        self.wait_for_space(ring, blocked);
        Ok(())
    }

    /// The numbers of `blocked` of `ring` for a submit needing `need` more of it (built
    /// only when a failure is reported).
    #[cold]
    fn shortage(&self, ring: usize, blocked: Blocked, need: u64) -> Shortage {
        let (code, resource, configured) = match blocked {
            Blocked::Window => (
                StatusCode::FlowControlDeadlock,
                Resource::TaskWindow,
                self.sizing.task_window[ring],
            ),
            Blocked::Heap => (
                StatusCode::HeapRingDeadlock,
                Resource::Heap,
                self.sizing.heap[ring],
            ),
            Blocked::Deps | Blocked::Spill => (
                StatusCode::DepPoolOverflow,
                Resource::DepPool,
                self.sizing.dep_pool[ring],
            ),
            Blocked::Tensormap => (
                StatusCode::TensormapOverflow,
                Resource::Tensormap,
                self.st.tensormap.capacity() as u64,
            ),
        };
        let r = &self.st.rings[ring];
        let live = (r.next - r.seen_la) as u64;
        let in_use = match blocked {
            Blocked::Window => live,
            Blocked::Heap => r.heap.used(),
            Blocked::Deps => r.deps.used(),
            Blocked::Spill => r.spill.used(),
            Blocked::Tensormap => self.st.tensormap.used() as u64,
        };
        Shortage {
            code,
            resource,
            configured,
            in_use,
            needed: needed_size(blocked, in_use, need, configured),
            more: if matches!(blocked, Blocked::Window) {
                1
            } else {
                need
            },
            unit: match blocked {
                Blocked::Window => "slot",
                Blocked::Heap => "bytes",
                Blocked::Deps | Blocked::Spill | Blocked::Tensormap => "entries",
            },
            ring,
            live,
            window: self.sizing.task_window[ring],
            heap_used: r.heap.used(),
            heap_size: self.sizing.heap[ring],
        }
    }

    /// Wait (briefly) for a watermark to move, or anything to fail: the ring's own, or,
    /// for the tensormap (whose entries belong to producers of every ring), any ring's.
    /// With a helper, run a ready task instead (its completion may be what frees the
    /// space). Spins, yields, then parks on [`Progress`](super::shared::park::Progress) for at
    /// most 20 ms (or the backstop if shorter).
    fn wait_for_space(&self, ring: usize, blocked: Blocked) {
        // The cores must see every task pushed so far: their completions free the space.
        self.pay_wakes();
        let seen: [u32; 4] = if matches!(blocked, Blocked::Tensormap) {
            self.watermarks()
        } else {
            [self.st.rings[ring].seen_la; 4]
        };
        let rings: &[usize] = if matches!(blocked, Blocked::Tensormap) {
            &[0, 1, 2, 3]
        } else {
            std::slice::from_ref(&ring)
        };
        let sh = self.sh;
        let eng = self.eng;
        // A core completing tasks back to back advances the watermark once it finds no
        // task, every 32 tasks, or once it sees the orchestrator asleep here
        // (`chip/core.rs` `Held`): so the watermark counts as moved as soon as the task
        // at it is consumed, and the orchestrator advances over it itself (the advance
        // combines; any thread may make it) instead of waiting for the core.
        let moved = || {
            eng.fatal.load(Acquire)
                || rings.iter().any(|&r| {
                    let rs = &sh.rings[r];
                    rs.last_alive.load(Acquire) != seen[if rings.len() == 1 { 0 } else { r }]
                        || (rs.head_consumed() && {
                            rs.advance();
                            true
                        })
                })
        };
        // Back to submitting at once if something was freed — before helping, which
        // would first run a whole task.
        if moved() {
            return;
        }
        if let Some(h) = self.helper {
            if h() {
                return;
            }
        }
        for i in 0..64 {
            if moved() {
                return;
            }
            if i < 48 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Some(h) = self.blocking_hook {
            h(true);
        }
        self.eng
            .progress
            .wait(moved, Duration::from_millis(20).min(self.policy.backstop));
        if let Some(h) = self.blocking_hook {
            h(false);
        }
    }
}

/// Names the call in error messages (formatted only when an error is built). The
/// submit's stages take it by reference: copied by value, the compiler moved it with
/// one 16-byte load of two 8-byte stores just made, which the store buffer cannot
/// forward (a stall of ~5 % of a chain submit's samples).
#[derive(Clone, Copy)]
struct What {
    kernel: Option<KernelRef>,
    alloc: bool,
}

impl What {
    #[inline(always)]
    fn new(kernel: Option<KernelRef>, alloc: bool) -> What {
        What { kernel, alloc }
    }
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kernel {
            Some(k) => write!(f, "submit of kernel '{}'", k.name()),
            None if self.alloc => f.write_str("alloc()"),
            None => f.write_str("submit of a dummy task"),
        }
    }
}

/// How short a blocked resource is: what its capacity failure reports.
struct Shortage {
    code: StatusCode,
    resource: Resource,
    /// The configured size, in the resource's unit.
    configured: u64,
    in_use: u64,
    /// The size that would hold what is live now plus this submit ([`needed_size`]).
    needed: Option<u64>,
    /// What the resource lacks, in its own unit: one more slot for the task window, the
    /// submit's bytes for the heap, its entries for the pools.
    more: u64,
    unit: &'static str,
    ring: usize,
    live: u64,
    window: u64,
    heap_used: u64,
    heap_size: u64,
}

impl Shortage {
    /// `unit`, in the singular or plural `n` takes.
    fn unit_of(&self, n: u64) -> &'static str {
        if self.unit == "slot" && n != 1 {
            "slots"
        } else if self.unit == "entries" && n == 1 {
            "entry"
        } else {
            self.unit
        }
    }

    /// The ring's use of every resource, for the message.
    fn usage(&self) -> String {
        let Shortage {
            ring,
            live,
            window,
            heap_used,
            heap_size,
            in_use,
            configured,
            more,
            ..
        } = *self;
        format!(
            "ring {ring}: {live} live tasks of window {window}, heap {heap_used} of {heap_size} bytes in use, {} {in_use} of {configured} {} in use, {more} more {} needed",
            self.resource.name(),
            self.unit_of(configured),
            self.unit_of(more),
        )
    }

    /// The structural failure: the ring's oldest live task `head` is pinned by an open
    /// scope, so no completion can free space while the orchestrator waits.
    fn pinned(&self, what: &What, head: TaskId) -> RuntimeFailure {
        let fit = match self.needed {
            Some(n) => format!(
                "{} of at least {n} {} would be needed",
                self.resource.name(),
                self.unit_of(n)
            ),
            None => format!("no valid {} holds that much", self.resource.name()),
        };
        RuntimeFailure::capacity(
            self.code,
            self.ring,
            self.resource,
            self.configured,
            // What is live now plus this submit: a lower bound of what holds the run.
            None,
            format!(
                "{what}: provable head-of-line deadlock: the ring's oldest live task {head:?} is held by a scope that is still open, and no scope can end while the orchestrator waits here ({}); {fit}",
                self.usage(),
            ),
        )
    }

    /// The backstop's failure: nothing completed, ran or was ready for `backstop`.
    fn no_progress(&self, what: &What, backstop: Duration) -> RuntimeFailure {
        RuntimeFailure::capacity(
            self.code,
            self.ring,
            self.resource,
            self.configured,
            None,
            format!(
                "{what}: no reclaim progress for ~{} ms: no task completed, ran on a core or waited to run ({})",
                backstop.as_millis(),
                self.usage()
            ),
        )
    }
}

/// The size of `blocked` that would hold `in_use` plus a submit needing `need` more
/// (`None`: no valid size of the resource would). A task window keeps one slot free, so
/// it must exceed `in_use + 1` (a power of two). A heap is never the configured size
/// itself: a heap ring that failed at this size does not fit it (the end gap a wrap
/// abandons, and the strict tail rule of `HeapRing::try_alloc`), so the next size up.
fn needed_size(blocked: Blocked, in_use: u64, need: u64, configured: u64) -> Option<u64> {
    match blocked {
        Blocked::Window => (in_use + 2)
            .checked_next_power_of_two()
            .filter(|&n| n <= crate::config::MAX_RING_TASK_WINDOW),
        Blocked::Heap => in_use
            .saturating_add(need)
            .checked_next_power_of_two()
            .map(|n| {
                if n <= configured {
                    configured.saturating_mul(2)
                } else {
                    n
                }
            }),
        Blocked::Deps | Blocked::Spill => {
            Some(in_use + need).filter(|&n| n <= crate::config::MAX_RING_DEP_POOL)
        }
        Blocked::Tensormap => Some(in_use + need),
    }
}

/// Add `p` to the fanin being built, merging flags of duplicates (per-submit epoch).
/// `fresh`: `p` was just seen not completed ([`FaninEdge::fresh`]).
fn add_fanin_to(
    fanin: &mut Vec<FaninEdge>,
    rings: &mut [OrchRing; 4],
    epoch: u32,
    p: TaskId,
    flags: u64,
    fresh: bool,
) {
    let os = rings[p.ring()].slot_mut(p.local());
    if os.seen_epoch == epoch {
        let e = &mut fanin[os.seen_idx as usize];
        if e.producer == p {
            e.flags |= flags;
            e.fresh |= fresh;
            return;
        }
    }
    os.seen_epoch = epoch;
    os.seen_idx = fanin.len() as u32;
    fanin.push(FaninEdge {
        fresh,
        ..FaninEdge::new(p, flags)
    });
}

/// The no-progress clock, started lazily at the first wait (the uncontended path reads
/// no clock). Progress is a task completing anywhere; and while a task runs on a core
/// or waits in a ready queue the orchestrator is not stalled either — it waits for that
/// task, up to the scheduler timeout (then SCHEDULER_TIMEOUT names the task on the core
/// or the ready task nobody runs). Only when nothing completes, runs or is ready for
/// the backstop is the wait a capacity deadlock.
struct Backstop {
    /// Last completion seen (or the first wait).
    since: Option<Instant>,
    completed: u64,
    /// Since when nothing ran or was ready (None while something does).
    idle_since: Option<Instant>,
}

enum Verdict {
    Wait,
    /// Nothing completed, ran or was ready for the backstop.
    Deadlock,
    /// Tasks ran (or were ready) but none completed for the scheduler timeout.
    Stalled(RuntimeFailure),
}

impl Backstop {
    fn new() -> Backstop {
        Backstop {
            since: None,
            completed: 0,
            idle_since: None,
        }
    }
    fn check(&mut self, o: &Orchestrator<'_>) -> Verdict {
        let c = o.eng.completed.load(Relaxed);
        let now = Instant::now();
        let since = match self.since {
            Some(t) if c == self.completed => t,
            _ => {
                self.completed = c;
                self.since = Some(now);
                self.idle_since = Some(now);
                return Verdict::Wait;
            }
        };
        match o.probe {
            Some(p) if p.busy() => {
                self.idle_since = None;
                if now.saturating_duration_since(since) >= o.policy.scheduler_timeout {
                    return Verdict::Stalled(p.stall(o.policy.scheduler_timeout, o.st.tasks));
                }
                Verdict::Wait
            }
            _ => {
                let idle = *self.idle_since.get_or_insert(now);
                if now.saturating_duration_since(idle) >= o.policy.backstop {
                    Verdict::Deadlock
                } else {
                    Verdict::Wait
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_window_keeps_a_slot_free() {
        // 3 live + this submit, one slot always free: 8 (a power of two above 4).
        assert_eq!(needed_size(Blocked::Window, 3, 1, 4), Some(8));
        assert_eq!(needed_size(Blocked::Window, 6, 1, 8), Some(8));
        assert_eq!(needed_size(Blocked::Window, 0, 1, 2), Some(2));
        let max = crate::config::MAX_RING_TASK_WINDOW;
        assert_eq!(needed_size(Blocked::Window, max - 1, 1, max), None);
    }

    #[test]
    fn needed_heap_is_never_the_failing_size() {
        assert_eq!(needed_size(Blocked::Heap, 1000, 3000, 1024), Some(4096));
        // Fits by bytes, but failed at this size: the next size up.
        assert_eq!(needed_size(Blocked::Heap, 1024, 1024, 4096), Some(8192));
        assert_eq!(needed_size(Blocked::Heap, u64::MAX, 1, 1024), None);
    }

    #[test]
    fn needed_pools_add_the_demand() {
        assert_eq!(needed_size(Blocked::Deps, 10, 5, 12), Some(15));
        assert_eq!(needed_size(Blocked::Spill, 0, 40, 16), Some(40));
        let max = crate::config::MAX_RING_DEP_POOL;
        assert_eq!(needed_size(Blocked::Deps, max, 1, max), None);
        assert_eq!(needed_size(Blocked::Tensormap, 100, 3, 100), Some(103));
    }

    #[test]
    fn shortage_units_agree_with_their_numbers() {
        let s = Shortage {
            code: StatusCode::FlowControlDeadlock,
            resource: Resource::TaskWindow,
            configured: 4,
            in_use: 3,
            needed: Some(8),
            more: 1,
            unit: "slot",
            ring: 1,
            live: 3,
            window: 4,
            heap_used: 0,
            heap_size: 1024,
        };
        assert_eq!(s.unit_of(1), "slot");
        assert_eq!(s.unit_of(4), "slots");
        assert!(
            s.usage()
                .ends_with("3 of 4 slots in use, 1 more slot needed"),
            "{}",
            s.usage()
        );
        let pool = Shortage {
            unit: "entries",
            ..s
        };
        assert_eq!(pool.unit_of(1), "entry");
        assert_eq!(pool.unit_of(2), "entries");
    }
}
