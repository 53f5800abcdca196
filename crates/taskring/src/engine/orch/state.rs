//! The orchestrator's private per-arena state ([`OrchState`]): its record of each ring
//! (slots, heap, pools), the open scopes and the scope-stats recording.

use super::*;

/// Bytes of the orchestrator's own record per task-window slot.
pub(crate) const ORCH_SLOT_BYTES: usize = std::mem::size_of::<OrchSlot>();

/// Orchestrator-private record per slot.
#[derive(Clone, Copy)]
pub(super) struct OrchSlot {
    pub(super) heap_end: u64,
    pub(super) dep_mark: u64,
    pub(super) spill_mark: u64,
    pub(super) seen_epoch: u32,
    pub(super) seen_idx: u32,
}
// safety: integers.
unsafe impl ZeroValid for OrchSlot {}

/// Orchestrator-private state of one ring.
pub(super) struct OrchRing {
    pub(super) heap: HeapRing,
    pub(super) heap_base: u64,
    /// Heap bytes retired since the run began (wraps unrolled; scope stats).
    pub(super) heap_retired: u64,
    pub(super) deps: LinearPool,
    pub(super) spill: LinearPool,
    pub(super) next: u32,
    pub(super) seen_la: u32,
    pub(super) slots: ZeroedArray<OrchSlot>,
    pub(super) mask: u32,
    pub(super) peak_slots: u64,
    pub(super) peak_heap: u64,
    pub(super) peak_deps: u64,
}

impl OrchRing {
    /// The highest use so far: the peaks recorded, and the use now (between two
    /// catch-ups with the watermark the window, the heap and the pools only fill, so
    /// their peaks are recorded when a catch-up frees them and read with the use now).
    pub(super) fn peaks(&self) -> (u64, u64, u64) {
        (
            self.peak_slots.max((self.next - self.seen_la) as u64),
            self.peak_heap.max(self.heap.used()),
            self.peak_deps.max(self.deps.used()).max(self.spill.used()),
        )
    }

    /// The record of local id `local`'s slot.
    #[inline(always)]
    pub(super) fn slot_mut(&mut self, local: u32) -> &mut OrchSlot {
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
pub(super) struct ScopeFrame {
    pub(super) begin: usize,
    pub(super) manual: bool,
    pub(super) site: Site,
    /// The scope instance: scopes opened before it this run (the root scope is 0).
    pub(super) id: u32,
}

/// Where a scope was opened (for scope stats).
#[derive(Clone, Copy)]
pub(super) enum Site {
    Root,
    Code(&'static std::panic::Location<'static>),
    /// Index into `OrchState::sites` (sites named by a foreign caller, e.g. Python).
    Named(u32),
}

/// The orchestrator's private part of an arena. Reset per run in O(rings).
pub struct OrchState {
    pub(super) rings: [OrchRing; 4],
    pub(super) tensormap: TensorMap,
    pub(super) scope_tasks: Vec<TaskId>,
    pub(super) scopes: Vec<ScopeFrame>,
    pub(super) fanin: Vec<FaninEdge>,
    pub(super) epoch: u32,
    pub(super) tasks: u64,
    /// Scope-stats samples of the current run, when enabled.
    pub(crate) stats: Option<crate::dfx::ScopeStats>,
    /// The dependency graph of the current run, when enabled (`deps.json`).
    pub(crate) deps: Option<Box<super::depgraph::DepGraph>>,
    /// The recording of the current run, when it is being captured (`ChipWorker::capture`).
    pub(super) capture: Option<Box<dyn crate::engine::recording::Recording>>,
    /// `deps` or `capture` is on (one test on the submit path).
    pub(super) recording: bool,
    /// Scopes opened so far this run (the next scope's instance id).
    pub(super) scopes_opened: u32,
    /// The kernel (its address) whose [`Kernel::bounded`] the submit looked at last:
    /// asked again only when the kernel changes (`EngineShared::unbounded`).
    ///
    /// [`Kernel::bounded`]: crate::kernel::Kernel::bounded
    pub(super) bounded_seen: std::cell::Cell<usize>,
    pub(super) sites: Vec<String>,
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
    pub(crate) fn install_capture(
        &mut self,
        rec: Option<Box<dyn crate::engine::recording::Recording>>,
    ) {
        self.recording |= rec.is_some();
        self.capture = rec;
    }

    pub(crate) fn take_capture(&mut self) -> Option<Box<dyn crate::engine::recording::Recording>> {
        self.capture.take()
    }

    /// Record one submit in the dependency graph and / or the capture. Out of line and
    /// cold: when neither is on, the submit path pays one not-taken branch.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record(
        &mut self,
        head: &crate::engine::recording::TaskHead,
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
