//! One direct replay of a graph (`DirectJob`: the state the threads share while they
//! run it), the predecessor counters kept from one replay to the next, and a thread's
//! cache of the tensors of the task it ran last.

use super::graph::Graph;
use crate::engine::MAX_TASK_TENSORS;
use crate::kernel::{CoreKind, KernelRef};
use crate::tensor::{TaskId, Tensor};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};

/// A thread's tensors of the last task it ran of a direct replay, on its stack: a
/// task whose tensor records are the last task's (a chain on one buffer, the consumers
/// of one producer: see [`Direct`]) takes them as they are, and no task's run reads a
/// view or writes a tensor (each tensor built is a 104-byte copy of its view; for B9's
/// chain the cache took `direct_step` from 149 to 127 instructions per task).
/// Two lists may start at the same index (an empty one, and the next list stored), so
/// the length is compared as well.
pub(crate) struct TaskArgsCache {
    buf: [std::mem::MaybeUninit<Tensor>; MAX_TASK_TENSORS],
    /// Where the tensor records of `buf` start in `Direct::tensors` (`u32::MAX`: none).
    list: u32,
    n: usize,
}

impl TaskArgsCache {
    /// Empty: valid for one replay (one `DirectJob`) at a time.
    pub(crate) fn new() -> TaskArgsCache {
        TaskArgsCache {
            buf: [std::mem::MaybeUninit::uninit(); MAX_TASK_TENSORS],
            list: u32::MAX,
            n: 0,
        }
    }
}

/// One direct replay (see `Captured::replay`): the state the cores share while they
/// run a captured graph without the rings. Installed in the chip for the replay only.
pub(crate) struct DirectJob<'a> {
    g: &'a Graph,
    /// The address table: 0, each program argument's base address (0 for a scalar),
    /// each task's output block ([`Graph::addr_table`]).
    addrs: &'a [u64],
    /// Completed predecessors per task, counted over replays (see [`DirectCounters`]).
    counters: &'a [AtomicU64],
    /// This replay's number since the counters' last reset (from 1).
    gen: u64,
    /// Sinks not completed yet.
    remaining: AtomicUsize,
    next_root: AtomicUsize,
    /// Roots a thread out of work claims at once (`claim_roots`): one per 1024 roots of
    /// the graph, 1 to 16. A graph of many roots (B3's `independent`, the leaves of
    /// `fanin`) then costs one shared increment per 16 roots instead of per root, and
    /// neighbouring leaves count their common consumer's predecessors on one thread
    /// (B9 ns/task, 2-s loops, 2 rounds: independent 17-26 -> 11, fanin 34 -> 23-30);
    /// a graph of few roots (a fan-out's producers) keeps claiming them one by one (16
    /// producers on one thread's deque: fanout 13 -> 13-17).
    root_batch: usize,
}

impl<'a> DirectJob<'a> {
    /// A direct replay of `g` with the addresses of `addrs` ([`Graph::addr_table`]:
    /// the arguments' written for this replay, the blocks by [`Graph::place_blocks`]),
    /// predecessor counts in `counters` (armed for this replay: [`DirectCounters::arm`]).
    pub(crate) fn new(
        g: &'a Graph,
        addrs: &'a [u64],
        counters: &'a DirectCounters,
    ) -> DirectJob<'a> {
        // The unchecked reads of `run` and `complete` rely on both.
        assert_eq!(counters.counts.len(), g.tasks.len());
        assert_eq!(addrs.len(), 1 + g.n_args + g.tasks.len());
        DirectJob {
            g,
            addrs,
            counters: &counters.counts,
            gen: counters.gen,
            remaining: AtomicUsize::new(g.sinks),
            next_root: AtomicUsize::new(0),
            root_batch: (g.roots.len() / 1024).clamp(1, 16),
        }
    }

    /// Tasks of the graph.
    pub(crate) fn tasks(&self) -> usize {
        self.g.tasks.len()
    }

    /// Roots of the graph (tasks without predecessors).
    pub(crate) fn roots(&self) -> usize {
        self.g.roots.len()
    }

    /// The core kind task `i` needs.
    #[inline]
    pub(crate) fn kind(&self, i: u32) -> CoreKind {
        self.g.direct.tasks[i as usize].kind
    }

    /// Every task's kernel is bounded (see `Graph::all_bounded`).
    pub(crate) fn all_bounded(&self) -> bool {
        self.g.all_bounded
    }

    /// Per core kind (AIC, AIV, Any): idle cores of that kind park at once instead of
    /// spinning during this replay — every kind when every kernel is bounded (the
    /// replay's caller then runs tasks while a core is idle, and on a small machine an
    /// idle core's spin only takes the CPU from it: B9's decode step on 1 AIC + 1 AIV
    /// core replayed in 21–25 µs with idle cores spinning, 10–14 µs parked, 3 rounds
    /// each), else the kinds with little to do ([`quiet_kinds`]).
    pub(crate) fn quiet(&self) -> [bool; 3] {
        if self.g.all_bounded {
            [true; 3]
        } else {
            self.g.quiet
        }
    }

    /// The recorded id and kernel of task `i` (messages).
    pub(crate) fn head(&self, i: u32) -> (TaskId, Option<KernelRef>) {
        let h = &self.g.tasks[i as usize].head;
        (h.id, h.kernel)
    }

    /// Task `i`'s tensors at this replay's addresses (checked reads: not the hot path).
    pub(crate) fn tensors(&self, i: u32) -> Vec<Tensor> {
        let d = &self.g.direct;
        let t = &d.tasks[i as usize];
        (0..t.n_tensors as usize)
            .map(|j| {
                let x = &d.tensors[t.tensors as usize + j];
                let mut v = d.views[x.view as usize];
                v.addr = self.addrs[x.base as usize].wrapping_add(x.rel);
                v.offset = x.offset;
                v.owner = x.owner;
                v
            })
            .collect()
    }

    /// Run task `i`'s kernel (nothing for alloc and dummy tasks): `Err(message)` if it
    /// returned an error or panicked. `args`: the thread's tensors of the last task it
    /// ran of this replay (see [`TaskArgsCache`]).
    ///
    /// # Safety
    /// `i < self.tasks()` (a chain's next task is a successor, checked at capture; the
    /// caller checks the index it starts from: one bounds check per task was three).
    #[inline]
    pub(crate) unsafe fn run(&self, i: u32, args: &mut TaskArgsCache) -> Result<(), String> {
        let d = &self.g.direct;
        // safety: (caller) `i` is a task.
        let t = unsafe { d.tasks.get_unchecked(i as usize) };
        let Some(&k) = d.kernels.get(t.kernel as usize) else {
            return Ok(());
        };
        let n = t.n_tensors as usize;
        if args.list != t.tensors || args.n != n {
            // safety: for the unchecked reads below, `Direct::check` checked that every
            // task's tensor and scalar ranges lie in `d.tensors` and `g.scalars`, that
            // `n_tensors <= MAX_TASK_TENSORS`, and that every view index is in
            // `d.views` and every base index below `1 + n_args + tasks` (the length of
            // `addrs`, checked in `DirectJob::new`). This is the replay's per-task
            // path: the bounds checks and iterator adapters were a fifth of its
            // instructions.
            unsafe {
                let rec = d.tensors.as_ptr().add(t.tensors as usize);
                for j in 0..n {
                    let x = &*rec.add(j);
                    let mut v = *d.views.get_unchecked(x.view as usize);
                    v.addr = self
                        .addrs
                        .get_unchecked(x.base as usize)
                        .wrapping_add(x.rel);
                    v.offset = x.offset;
                    v.owner = x.owner;
                    args.buf.get_unchecked_mut(j).write(v);
                }
            }
            (args.list, args.n) = (t.tensors, n);
        }
        // safety: the first `n` entries were written for this list (above, or for an
        // earlier task of the same list: the address table does not change during a
        // replay); the scalars' range is in `g.scalars` (see above).
        let (tensors, scalars) = unsafe {
            (
                std::slice::from_raw_parts(args.buf.as_ptr() as *const Tensor, n),
                self.g
                    .scalars
                    .get_unchecked(t.scalars as usize..t.scalars as usize + t.n_scalars as usize),
            )
        };
        let call = crate::kernel::KernelCall {
            tensors,
            scalars,
            n_inputs: t.n_inputs as usize,
            scalar_float_mask: t.scalar_float_mask,
        };
        k.call(&call)
    }

    /// Task `i` completed: its successors that became ready are handed to `ready`, with
    /// the core kind each needs. Returns true when it is a sink (a task without
    /// successors): the caller counts it and reports its sinks with
    /// [`DirectJob::finish_sinks`] — the last of those calls means every sink, so every
    /// task, ran (each task has a path to a sink and runs before it).
    ///
    /// # Safety
    /// `i < self.tasks()` (as [`DirectJob::run`]).
    #[inline]
    pub(crate) unsafe fn complete(&self, i: u32, mut ready: impl FnMut(u32, CoreKind)) -> bool {
        let (g, x) = (self.g, &self.g.direct.tasks);
        // safety: (caller) `i` is a task; `Direct::check` checked that every successor
        // is a task index (`counters` has one per task).
        unsafe {
            let t = x.get_unchecked(i as usize);
            for &s in t.successors(&g.succ) {
                // A task with one predecessor is ready now: no counter to count.
                let st = x.get_unchecked(s as usize);
                let n = st.fanin_n;
                if n == 1
                    || self.counters.get_unchecked(s as usize).fetch_add(1, AcqRel) + 1
                        == n as u64 * self.gen
                {
                    ready(s, st.kind);
                }
            }
            t.n_succ == 0
        }
    }

    /// `n` sinks completed (counted by their threads, see `chip::deque::DirectLocal`):
    /// true if they were the last.
    #[inline]
    pub(crate) fn finish_sinks(&self, n: usize) -> bool {
        self.remaining.fetch_sub(n, AcqRel) == n
    }

    /// The next root nobody took yet.
    #[inline]
    pub(crate) fn claim_root(&self) -> Option<u32> {
        let k = self.next_root.fetch_add(1, Relaxed);
        self.g.roots.get(k).copied()
    }

    /// The next roots nobody took yet: `root_batch` of them (fewer at the end; None
    /// when none is left).
    #[inline]
    pub(crate) fn claim_roots(&self) -> Option<&'a [u32]> {
        let (roots, n) = (&self.g.roots, self.root_batch);
        let k = self.next_root.fetch_add(n, Relaxed);
        (k < roots.len()).then(|| &roots[k..roots.len().min(k + n)])
    }

    /// Every sink (so every task) completed?
    pub(crate) fn done(&self) -> bool {
        self.remaining.load(Acquire) == 0
    }
}

/// The predecessor counters of a graph's direct replays, kept from one replay to the
/// next: counter `i` counts the completed predecessors of task `i` over every replay
/// since the last reset, so in replay number `gen` (from 1) task `i` is ready when its
/// counter reaches `gen × fanin_n[i]` — no pass over the counters before a replay. A
/// replay that did not finish (failed) leaves them inexact: the next one resets them.
pub(crate) struct DirectCounters {
    counts: Vec<AtomicU64>,
    gen: u64,
    /// Every counter is `gen × fanin_n`: the last replay finished.
    exact: bool,
}

impl DirectCounters {
    pub(crate) fn new(g: &Graph) -> DirectCounters {
        DirectCounters {
            counts: (0..g.tasks.len()).map(|_| AtomicU64::new(0)).collect(),
            gen: 0,
            exact: true,
        }
    }

    /// Arm the counters for the next replay (reset them first if the last one did not
    /// finish, or before `gen × fanin_n` could overflow).
    pub(crate) fn arm(&mut self) {
        if !self.exact || self.gen >= u32::MAX as u64 {
            for c in &self.counts {
                c.store(0, Relaxed);
            }
            self.gen = 0;
        }
        self.gen += 1;
        self.exact = false;
    }

    /// The replay armed last finished: every task completed once.
    pub(crate) fn finished(&mut self) {
        self.exact = true;
    }
}
