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
//! Files, one concept each: `orch/submit.rs` (the steps, one function each),
//! `orch/state.rs` (the per-arena state, [`OrchState`]), `orch/scope.rs` (opening and
//! closing scopes, and the count of a scope that overflows its window),
//! `orch/capacity.rs` (the allocators' back-pressure: `alloc_slot`, `reserve_pool`,
//! `reserve_tensormap`, `wait_or_fail`, the no-progress clock, and the capacity
//! failures' texts). This file: the `Orchestrator` itself, its wake-up debt, the
//! failure latch, and what a submit returns ([`TaskOutputs`]).

mod await_task;
mod canonical;
mod capacity;
mod scope;
mod state;
mod submit;

use capacity::*;
use scope::*;
pub use state::*;

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
    /// Output `i` as its address and spec (panics if `i >= len()`).
    #[inline]
    pub(crate) fn output_raw(&self, i: usize) -> (u64, TensorSpec) {
        assert!(i < self.len());
        // safety: the first `n` entries were written by the submit.
        unsafe { self.outs[i].assume_init() }
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

/// The executor's side of a run, as its orchestrator asks it: what its cores are doing
/// (the backstop), whether the orchestrator's thread runs ready tasks while it waits,
/// whether it runs a lone queued task once its program has nothing more to submit, and
/// how a scope that overflows its window fails. Asked only off a submit's common path:
/// while the orchestrator waits for space, at a scope's overflow, at the end of the
/// program.
pub(crate) trait ExecutorProbe {
    /// Is a task running on a core, or ready in a queue (about to be dispatched)?
    fn busy(&self) -> bool;
    /// The SCHEDULER_TIMEOUT failure (with its sub-class) of a run in which no task
    /// completed for `timeout` while the orchestrator waited, `submitted` tasks so far.
    fn stall(&self, timeout: Duration, submitted: u64) -> RuntimeFailure;
    /// Run one ready task on the orchestrator's thread (ChipOptions::orchestrator_helps,
    /// or a bounded kernel's) while it waits for ring space: its completion may be what
    /// frees the space. Returns whether it ran one (never, for an executor whose
    /// orchestrator does not help).
    fn help(&self) -> bool;
    /// Once the program has nothing more to submit: run one queued task here (a next
    /// level's dispatch: see `Level::run`). Returns whether it ran one.
    fn help_at_end(&self) -> bool;
    /// Count a scope that overflows its window to its end (else SCOPE_DEADLOCK at the
    /// overflowing submit, with a lower bound). False for executors that cannot tell a
    /// counted submit from a dispatched one (a next level records its tasks at submit).
    fn counts_scope_overflow(&self) -> bool;
    /// The cores the run may use, (AIC, AIV); a core of either kind counts in both.
    /// (0, 0) for executors that are no chip.
    fn cores(&self) -> (usize, usize) {
        (0, 0)
    }
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
    /// The executor's side of the run ([`ExecutorProbe`]): the backstop counts a task
    /// running on a core as progress; while the orchestrator waits for ring space it
    /// runs ready tasks there instead of sleeping when the executor helps; a scope's
    /// overflow is counted or fails at once as the executor says.
    probe: &'r dyn ExecutorProbe,
    /// A SCOPE_DEADLOCK found but not yet reported: the rest of the scope is counted
    /// (not run) so that the failure can say which window would have held it.
    dry: Option<DryScope>,
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

impl<'r> Orchestrator<'r> {
    pub(crate) fn new(
        eng: &'r EngineShared,
        sh: &'r ArenaShared,
        st: &'r mut OrchState,
        sizing: RingSizing,
        policy: WaitPolicy,
        probe: &'r dyn ExecutorProbe,
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
            probe,
            dry: None,
            wake_debt: std::cell::Cell::new(0),
            look_skip: std::cell::Cell::new(0),
        }
    }

    /// Once the program has nothing more to submit: run one queued task on this thread
    /// when the executor does (`ExecutorProbe::help_at_end`). Returns whether it ran one.
    pub(crate) fn help_at_end(&self) -> bool {
        self.probe.help_at_end()
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
        t: &super::recording::ReplaySubmit<'_>,
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
