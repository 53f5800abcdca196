//! Capture and replay (`docs/api.md` §10): record the task graph of one run, then feed the
//! recorded tasks to the engine again without running the orchestration, without the
//! tensormap and without inferring dependencies.
//!
//! Capture (`Recorder`, installed in the orchestrator's state for one run) records,
//! per submit, in submission order: the kernel, the scalars, each tensor argument as a
//! view relative to its base — a program argument (by index), the runtime output block
//! of an earlier task (by task index), the task's own output block, or a fixed address
//! (memory the program found elsewhere) — and the task's *full* fanin: explicit deps,
//! creator edges (WAIT | RETAIN) and every overlapping earlier writer (WAIT), found
//! against every writer of the run (the engine's tensormap forgets completed writers,
//! whose edges a replay may need: they may not have completed yet then). Edges to the
//! same producer are merged (flags or-ed), as the engine's fanin does. Scope begins and
//! ends are recorded between the tasks.
//!
//! The worker-facing part (capture, the argument check, `exact_config`, the choice of
//! path) is `chip::capture`. A replay takes one of two paths (`docs/replay.md`):
//!
//! - direct, when the sizing holds the whole graph at once (`chip::Captured::fits`): every
//!   runtime output gets its own bytes in the ring heaps, and the cores run the graph
//!   from precomputed predecessor counts and successor lists (`DirectJob`, run by
//!   `chip::direct_step`) — no slots, scopes, claims or watermark;
//! - through the rings otherwise (every capacity rule then applies, with its codes).
//!
//! Through the rings (`replay_ops`), the recorded ops are walked: scopes open and close
//! as recorded (their ends release the scope references, as in a normal run); each task
//! goes through `Orchestrator::submit_replayed`: scope admission, slot and heap from the
//! ring (back-pressure, structural-deadlock and backstop checks as for any submit),
//! runtime outputs placed in the fresh block, the recorded fanin filtered to producers
//! still alive, claims, pools, payload, wiring, publication — the completion side is
//! the engine's, unchanged. Task ids are the recorded ones: ids count per ring from 0
//! in submission order, and the replay submits the same tasks on the same rings in the
//! same order.

use super::shared::{DEP_FLAGS, DEP_RETAIN, DEP_WAIT};
use super::writers::WriterLog;
use super::*;
use crate::kernel::CoreKind;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};

/// One recorded step of the orchestration.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// A scope opens; `total`: the tasks it owns directly.
    Begin {
        manual: bool,
        total: u32,
    },
    End,
    /// Task `i` (index into the recorded tasks).
    Task(u32),
}

/// What a recorded tensor's address is relative to.
#[derive(Clone, Copy, Debug)]
enum Base {
    /// Program argument `i`'s buffer.
    Arg(u16),
    /// The output block of recorded task `i`.
    Out(u32),
    /// The task's own output block (a runtime output, tag OUTPUT).
    Own,
    /// An absolute address (neither an argument nor a runtime output).
    Fixed,
}

#[derive(Clone, Copy)]
struct RecTensor {
    /// The view as submitted (canonical order); its address is replaced at replay.
    view: Tensor,
    base: Base,
    /// Byte offset of `view.addr` from the base.
    rel: u64,
}

type Range = (u32, u32);

fn slice<T>(v: &[T], r: Range) -> &[T] {
    &v[r.0 as usize..r.1 as usize]
}

/// A submitted task apart from its tensors, scalars and fanin.
#[derive(Clone, Copy)]
pub(crate) struct TaskHead {
    pub id: TaskId,
    pub kernel: Option<KernelRef>,
    /// An `alloc()` (completes at once).
    pub alloc: bool,
    /// Its outputs' bytes (each rounded up to 1 KiB).
    pub heap_bytes: u64,
    pub n_inputs: u8,
    pub scalar_float_mask: u16,
}

#[derive(Clone, Copy)]
struct RecTask {
    head: TaskHead,
    tensors: Range,
    scalars: Range,
    fanin: Range,
    outs: Range,
}

/// A recorded task as [`Orchestrator::submit_replayed`] takes it.
pub(crate) struct ReplaySubmit<'a> {
    pub head: TaskHead,
    pub scalars: &'a [u64],
    pub fanin: &'a [(TaskId, u64)],
    /// The task's runtime outputs: (tensor index, byte offset in its block).
    pub outs: &'a [(u8, u64)],
}

/// The graph being recorded during a capture run (see the module doc).
#[derive(Default)]
pub(crate) struct Recorder {
    ops: Vec<Op>,
    tasks: Vec<RecTask>,
    tensors: Vec<RecTensor>,
    scalars: Vec<u64>,
    fanin: Vec<(TaskId, u64)>,
    outs: Vec<(u8, u64)>,
    /// Task id -> index in `tasks`.
    index: HashMap<TaskId, u32>,
    /// Output block address of each task in the capture run.
    blocks: Vec<u64>,
    /// Every writer of the recording (not the engine's tensormap, which forgets
    /// completed writers), so the recorded graph does not depend on timing.
    writers: WriterLog,
    /// The program arguments' buffers (address, bytes; bytes 0 for a scalar).
    args: Vec<(u64, u64)>,
    /// Indices in `ops` of the open scopes' `Begin`.
    open: Vec<usize>,
}

impl Recorder {
    /// A recorder for a run whose program arguments' buffers are `args` (address,
    /// bytes; `(0, 0)` for a scalar).
    pub(crate) fn new(args: Vec<(u64, u64)>) -> Recorder {
        Recorder {
            args,
            ..Recorder::default()
        }
    }

    pub(crate) fn begin_scope(&mut self, manual: bool) {
        self.open.push(self.ops.len());
        self.ops.push(Op::Begin { manual, total: 0 });
    }

    pub(crate) fn end_scope(&mut self) {
        self.open.pop();
        self.ops.push(Op::End);
    }

    fn base_of(&self, t: &Tensor) -> (Base, u64) {
        if t.owner.is_valid() {
            if let Some(&j) = self.index.get(&t.owner) {
                return (Base::Out(j), t.addr.wrapping_sub(self.blocks[j as usize]));
            }
        }
        // An argument's buffer: the one starting at the view's base address, else one
        // that contains it.
        let exact = self.args.iter().position(|&(a, b)| b > 0 && a == t.addr);
        let within = || {
            self.args
                .iter()
                .position(|&(a, b)| b > 0 && t.addr > a && t.addr - a < b)
        };
        match exact.or_else(within) {
            Some(j) => (Base::Arg(j as u16), t.addr - self.args[j].0),
            None => (Base::Fixed, 0),
        }
    }

    /// Record one submit (tensors in canonical order, `tags[i]` for `tensors[i]`);
    /// `block`: the address of the task's output block in this run. Called from the
    /// orchestrator's cold recording path.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn task(
        &mut self,
        s: &TaskHead,
        block: u64,
        tensors: &[Tensor],
        tags: &[ArgTag],
        scalars: &[u64],
        explicit: &[(TaskId, u64)],
        infer: bool,
    ) {
        let idx = self.tasks.len() as u32;
        let (t0, o0, f0, s0) = (
            self.tensors.len() as u32,
            self.outs.len() as u32,
            self.fanin.len(),
            self.scalars.len() as u32,
        );
        for (i, t) in tensors.iter().enumerate() {
            let (base, rel) = if tags[i] == ArgTag::Output {
                self.outs.push((i as u8, t.addr - block));
                (Base::Own, t.addr - block)
            } else {
                self.base_of(t)
            };
            self.tensors.push(RecTensor {
                view: *t,
                base,
                rel,
            });
        }
        self.scalars.extend_from_slice(scalars);
        for &(d, flags) in explicit {
            merge_edge(&mut self.fanin, f0, d, flags & DEP_FLAGS);
        }
        if infer {
            let fanin = &mut self.fanin;
            self.writers.infer(tensors, tags, s.id, |p, flags| {
                merge_edge(fanin, f0, p, flags)
            });
        }
        self.tasks.push(RecTask {
            head: *s,
            tensors: (t0, self.tensors.len() as u32),
            scalars: (s0, self.scalars.len() as u32),
            fanin: (f0 as u32, self.fanin.len() as u32),
            outs: (o0, self.outs.len() as u32),
        });
        self.index.insert(s.id, idx);
        self.blocks.push(block);
        if let Some(&b) = self.open.last() {
            if let Op::Begin { total, .. } = &mut self.ops[b] {
                *total += 1;
            }
        }
        self.ops.push(Op::Task(idx));
    }

    pub(crate) fn finish(self) -> Graph {
        // The direct executor's view of the edges: successors (CSR) and fanin counts by
        // task index.
        let n = self.tasks.len();
        let mut fanin_n = vec![0u32; n];
        let mut succ_off = vec![0u32; n + 1];
        let pred = |e: &(TaskId, u64)| self.index.get(&e.0).map(|&j| j as usize);
        for (i, t) in self.tasks.iter().enumerate() {
            for e in slice(&self.fanin, t.fanin) {
                if let Some(j) = pred(e) {
                    succ_off[j + 1] += 1;
                    fanin_n[i] += 1;
                }
            }
        }
        for i in 0..n {
            succ_off[i + 1] += succ_off[i];
        }
        let mut fill = succ_off.clone();
        let mut succ = vec![0u32; succ_off[n] as usize];
        for (i, t) in self.tasks.iter().enumerate() {
            for e in slice(&self.fanin, t.fanin) {
                if let Some(j) = pred(e) {
                    succ[fill[j] as usize] = i as u32;
                    fill[j] += 1;
                }
            }
        }
        let roots = (0..n as u32)
            .filter(|&i| fanin_n[i as usize] == 0)
            .collect();
        let mut ring_bytes = [0u64; 4];
        for t in &self.tasks {
            ring_bytes[t.head.id.ring()] += t.head.heap_bytes;
        }
        let sinks = (0..n).filter(|&i| succ_off[i] == succ_off[i + 1]).count();
        let kinds: Vec<CoreKind> = self
            .tasks
            .iter()
            .map(|t| t.head.kernel.map(|k| k.core()).unwrap_or(CoreKind::Any))
            .collect();
        let all_bounded = self
            .tasks
            .iter()
            .all(|t| t.head.kernel.is_none_or(|k| k.0.bounded()));
        let quiet = quiet_kinds(&kinds);
        let direct = Direct::build(&self, &succ_off, &succ, &fanin_n, &kinds);
        Graph {
            all_bounded,
            quiet,
            ops: self.ops,
            tasks: self.tasks,
            tensors: self.tensors,
            scalars: self.scalars,
            fanin: self.fanin,
            outs: self.outs,
            succ,
            roots,
            ring_bytes,
            sinks,
            n_args: self.args.len(),
            direct,
        }
    }
}

/// A task as the direct executor reads it (see [`Direct`]): everything a thread needs
/// to run task `i` and complete it, in 32 bytes, two tasks to a cache line. A task
/// with a single successor holds it here (a chain's next task is then read from this
/// record, not from a successor array).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct XTask {
    /// Index into [`Direct::kernels`]; [`XTask::NO_KERNEL`] for alloc and dummy tasks.
    kernel: u32,
    /// First of its tensors in [`Direct::tensors`] (`n_tensors` of them; tasks with the
    /// same tensor records share them).
    tensors: u32,
    /// First of its scalars in [`Graph::scalars`] (`n_scalars` of them).
    scalars: u32,
    /// Its only successor when `n_succ` is 1, else the first of its successors in
    /// [`Graph::succ`].
    succ: u32,
    n_succ: u32,
    /// Its predecessors.
    fanin_n: u32,
    scalar_float_mask: u16,
    n_tensors: u8,
    n_scalars: u8,
    n_inputs: u8,
    kind: CoreKind,
}

impl XTask {
    const NO_KERNEL: u32 = u32::MAX;

    /// Its successors (`succ`: the graph's successor array).
    #[inline]
    fn successors<'s>(&'s self, succ: &'s [u32]) -> &'s [u32] {
        if self.n_succ == 1 {
            std::slice::from_ref(&self.succ)
        } else {
            // safety: `Direct::check` checked every multi-successor range is in `succ`.
            unsafe { succ.get_unchecked(self.succ as usize..(self.succ + self.n_succ) as usize) }
        }
    }
}

const _: () = assert!(std::mem::size_of::<XTask>() == 32);

/// A tensor argument as the direct executor reads it: the view (shared by every
/// tensor of the same shape, strides, dtype and buffer size) and what differs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct XTensor {
    /// Its address: `addrs[base] + rel` (see [`DirectJob`]: 0 for a fixed address, then
    /// the program arguments, then the tasks' output blocks).
    rel: u64,
    offset: u64,
    owner: TaskId,
    base: u32,
    /// Index into [`Direct::views`].
    view: u32,
}

const _: () = assert!(std::mem::size_of::<XTensor>() == 32);

/// The direct executor's compact form of a graph, built once at capture: a replay of a
/// large graph reads mostly this, and it streams through memory — 32 bytes per task,
/// and 32 per tensor argument of a task whose tensor records no earlier task has
/// (a chain on one buffer, a fan-out's consumers of one producer share theirs), the
/// views deduplicated (patterns repeat a handful). The recorded form, ~180 bytes per
/// task with one tensor, is kept for the rings path.
struct Direct {
    tasks: Vec<XTask>,
    tensors: Vec<XTensor>,
    views: Vec<Tensor>,
    kernels: Vec<KernelRef>,
}

impl Direct {
    fn build(
        r: &Recorder,
        succ_off: &[u32],
        succ: &[u32],
        fanin_n: &[u32],
        kinds: &[CoreKind],
    ) -> Direct {
        use std::hash::BuildHasher;
        let n_args = r.args.len() as u32;
        let (mut kernels, mut kernel_at) = (Vec::new(), HashMap::new());
        let (mut views, mut view_at) = (Vec::new(), HashMap::new());
        // Tensor lists seen: a hash of the list -> where it starts in `tensors` (a list
        // whose hash another list took is stored again: rare, and still correct).
        let mut list_at: HashMap<u64, u32> = HashMap::new();
        let hasher = std::collections::hash_map::RandomState::new();
        let mut tensors = Vec::new();
        let mut list: Vec<XTensor> = Vec::with_capacity(MAX_TASK_TENSORS);
        let tasks = r
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let kernel = t.head.kernel.map_or(XTask::NO_KERNEL, |k| {
                    // The whole fat pointer: kernels of zero-sized types share one data
                    // address and differ only in their vtables.
                    let key = k.0 as *const dyn crate::kernel::Kernel;
                    *kernel_at.entry(key).or_insert_with(|| {
                        kernels.push(k);
                        kernels.len() as u32 - 1
                    })
                });
                list.clear();
                for rt in slice(&r.tensors, t.tensors) {
                    let mut v = rt.view;
                    let (addr, offset, owner) = (v.addr, v.offset, v.owner);
                    (v.addr, v.offset, v.owner) = (0, 0, TaskId::INVALID);
                    let view = *view_at.entry(v).or_insert_with(|| {
                        views.push(v);
                        views.len() as u32 - 1
                    });
                    let (base, rel) = match rt.base {
                        Base::Arg(j) => (1 + j as u32, rt.rel),
                        Base::Out(j) => (1 + n_args + j, rt.rel),
                        Base::Own => (1 + n_args + i as u32, rt.rel),
                        Base::Fixed => (0, addr),
                    };
                    list.push(XTensor {
                        rel,
                        offset,
                        owner,
                        base,
                        view,
                    });
                }
                let h = hasher.hash_one(list.as_slice());
                let shared = list_at.get(&h).copied().filter(|&at| {
                    tensors.get(at as usize..at as usize + list.len()) == Some(list.as_slice())
                });
                let first = shared.unwrap_or_else(|| {
                    let at = tensors.len() as u32;
                    tensors.extend_from_slice(&list);
                    list_at.entry(h).or_insert(at);
                    at
                });
                let n_succ = succ_off[i + 1] - succ_off[i];
                XTask {
                    kernel,
                    tensors: first,
                    scalars: t.scalars.0,
                    succ: if n_succ == 1 {
                        succ[succ_off[i] as usize]
                    } else {
                        succ_off[i]
                    },
                    n_succ,
                    fanin_n: fanin_n[i],
                    scalar_float_mask: t.head.scalar_float_mask,
                    n_tensors: list.len() as u8,
                    n_scalars: (t.scalars.1 - t.scalars.0) as u8,
                    n_inputs: t.head.n_inputs,
                    kind: kinds[i],
                }
            })
            .collect();
        let d = Direct {
            tasks,
            tensors,
            views,
            kernels,
        };
        d.check(n_args as usize, &r.scalars, succ);
        d
    }

    /// What `DirectJob::run` and `DirectJob::complete` read without bounds checks:
    /// every range and index in bounds (a failure here is a bug of `build`).
    fn check(&self, n_args: usize, scalars: &[u64], succ: &[u32]) {
        let n = self.tasks.len();
        let succ_len = succ.len();
        assert!(succ.iter().all(|&s| (s as usize) < n));
        for t in &self.tasks {
            assert!(t.n_tensors as usize <= MAX_TASK_TENSORS);
            assert!(t.tensors as usize + t.n_tensors as usize <= self.tensors.len());
            assert!(t.scalars as usize + t.n_scalars as usize <= scalars.len());
            if t.n_succ == 1 {
                assert!((t.succ as usize) < n);
            } else {
                assert!(t.succ as usize + t.n_succ as usize <= succ_len);
            }
        }
        for x in &self.tensors {
            assert!((x.view as usize) < self.views.len());
            assert!((x.base as usize) < 1 + n_args + n);
        }
    }
}

/// A recorded graph (immutable).
pub(crate) struct Graph {
    ops: Vec<Op>,
    tasks: Vec<RecTask>,
    tensors: Vec<RecTensor>,
    scalars: Vec<u64>,
    fanin: Vec<(TaskId, u64)>,
    outs: Vec<(u8, u64)>,
    /// Successors of every task (task indices; task `i`'s from its `XTask::succ` on).
    succ: Vec<u32>,
    /// Tasks without predecessors, in submission order.
    roots: Vec<u32>,
    /// Output bytes per ring over the whole graph.
    ring_bytes: [u64; 4],
    /// Tasks without successors.
    sinks: usize,
    /// Program arguments of the capture.
    n_args: usize,
    /// What a direct replay reads.
    direct: Direct,
    /// Every task's kernel is [`Kernel::bounded`] (or it has none): the replay's
    /// caller may run any of them while it waits.
    ///
    /// [`Kernel::bounded`]: crate::kernel::Kernel::bounded
    all_bounded: bool,
    /// Per core kind (AIC, AIV, Any): cores of that kind can run less than an eighth
    /// of the graph's tasks ([`quiet_kinds`]).
    quiet: [bool; 3],
}

/// Which core kinds (AIC, AIV, Any) have little to do in a graph of tasks of `kinds`:
/// less than an eighth of its tasks. An idle core of such a kind parks at once during
/// a direct replay instead of spinning: its spin would take the CPU from the threads
/// running the graph (on a small machine) for the few tasks it could take.
fn quiet_kinds(kinds: &[CoreKind]) -> [bool; 3] {
    let count = |f: fn(CoreKind) -> bool| kinds.iter().filter(|&&k| f(k)).count();
    let aic = count(|k| k != CoreKind::Aiv);
    let aiv = count(|k| k != CoreKind::Aic);
    let few = |n: usize| n * 8 < kinds.len();
    [few(aic), few(aiv), false]
}

impl Graph {
    /// Recorded tasks (including alloc and dummy tasks).
    pub(crate) fn tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Recorded dependency edges (one per (producer, consumer) pair).
    pub(crate) fn edges(&self) -> usize {
        self.fanin.len()
    }

    /// Output bytes per ring over the whole graph.
    pub(crate) fn ring_bytes(&self) -> [u64; 4] {
        self.ring_bytes
    }

    /// A replay's address table (see [`DirectJob::new`]): 0 (for fixed addresses), each
    /// program argument's base address, each task's output block.
    pub(crate) fn addr_table(&self) -> Vec<u64> {
        vec![0; 1 + self.n_args + self.tasks.len()]
    }

    /// A table's program-argument part and output-block part.
    pub(crate) fn split_addrs<'t>(&self, table: &'t mut [u64]) -> (&'t mut [u64], &'t mut [u64]) {
        table[1..].split_at_mut(self.n_args)
    }

    /// Give each task its output block for a direct replay: tasks side by side in their
    /// ring's heap from `at[ring]` on, `blocks[i]` for task `i`.
    pub(crate) fn place_blocks(&self, mut at: [u64; 4], blocks: &mut [u64]) {
        for (b, t) in blocks.iter_mut().zip(&self.tasks) {
            let r = t.head.id.ring();
            *b = at[r];
            at[r] += t.head.heap_bytes;
        }
    }
}

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

/// One direct replay (see `chip::Captured::replay`): the state the cores share while they
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

    /// `n` sinks completed (counted by their threads, see `chip::core::DirectLocal`):
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

/// Feed the recorded ops to the orchestrator (the root scope is open already: op 0).
/// `blocks[i]` receives task `i`'s output block address.
pub(crate) fn replay_ops(
    o: &mut Orchestrator<'_>,
    g: &Graph,
    args: &[u64],
    blocks: &mut [u64],
) -> Result<(), RuntimeFailure> {
    let mut totals = [0u32; MAX_SCOPE_DEPTH + 1];
    let mut depth = 1usize;
    if let Some(Op::Begin { total, .. }) = g.ops.first() {
        totals[0] = *total;
    }
    for op in g.ops.iter().skip(1) {
        match *op {
            Op::Begin { manual, total } => {
                o.begin_replayed_scope(manual)?;
                totals[depth] = total;
                depth += 1;
            }
            Op::End => {
                o.close_scope();
                depth -= 1;
            }
            Op::Task(i) => {
                let t = &g.tasks[i as usize];
                let mut buf = [std::mem::MaybeUninit::<Tensor>::uninit(); MAX_TASK_TENSORS];
                let rec = slice(&g.tensors, t.tensors);
                for (dst, r) in buf.iter_mut().zip(rec) {
                    let mut v = r.view;
                    match r.base {
                        Base::Arg(j) => v.addr = args[j as usize] + r.rel,
                        Base::Out(j) => v.addr = blocks[j as usize].wrapping_add(r.rel),
                        Base::Own | Base::Fixed => {}
                    }
                    dst.write(v);
                }
                // safety: the first `rec.len()` entries were written just above.
                let tensors = unsafe {
                    std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut Tensor, rec.len())
                };
                let s = ReplaySubmit {
                    head: t.head,
                    scalars: slice(&g.scalars, t.scalars),
                    fanin: slice(&g.fanin, t.fanin),
                    outs: slice(&g.outs, t.outs),
                };
                blocks[i as usize] = o.submit_replayed(&s, tensors, totals[depth - 1] as u64)?;
            }
        }
    }
    Ok(())
}

/// The graph's structural demand per ring (see `chip::Captured::exact_config`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Needs {
    pub slots: [u64; 4],
    pub heap: [u64; 4],
    pub deps: [u64; 4],
}

impl Needs {
    /// Walk the ops: a task can retire only once its scope ended, every RETAIN
    /// consumer of it can retire and every WAIT consumer was submitted (`free_at`, an
    /// op index); in order, so at each submit
    /// the tasks of the ring from the oldest one not free yet are live whatever the
    /// timing. Heap: where a ring can retire before its last submit the heap may wrap
    /// and abandon an end gap (less than one task's bytes), so the largest task's bytes
    /// are added twice there.
    pub(crate) fn of(g: &Graph) -> Needs {
        let n = g.tasks.len();
        let (at, free_at) = free_times(g);
        let mut needs = Needs::default();
        let mut live: [std::collections::VecDeque<usize>; 4] = Default::default();
        let mut sum = [[0u64; 4]; 4]; // per ring: slots, bytes, nodes, spill
        let mut wraps = [false; 4];
        let mut biggest = [0u64; 4];
        let mut spill = [0u64; 4];
        let cost = |i: usize| {
            let f = slice(&g.fanin, g.tasks[i].fanin);
            let waits = f.iter().filter(|e| e.1 & DEP_WAIT != 0).count() as u64;
            [
                1,
                g.tasks[i].head.heap_bytes,
                waits,
                (f.len() as u64).saturating_sub(FANIN_INLINE as u64),
            ]
        };
        #[allow(clippy::needless_range_loop)]
        for i in 0..n {
            let r = g.tasks[i].head.id.ring();
            while let Some(&h) = live[r].front() {
                if free_at[h] >= at[i] {
                    break;
                }
                live[r].pop_front();
                wraps[r] = true;
                for (s, c) in sum[r].iter_mut().zip(cost(h)) {
                    *s -= c;
                }
            }
            live[r].push_back(i);
            let c = cost(i);
            for (s, c) in sum[r].iter_mut().zip(c) {
                *s += c;
            }
            biggest[r] = biggest[r].max(c[1]);
            needs.slots[r] = needs.slots[r].max(sum[r][0]);
            needs.heap[r] = needs.heap[r].max(sum[r][1]);
            needs.deps[r] = needs.deps[r].max(sum[r][2]);
            spill[r] = spill[r].max(sum[r][3]);
        }
        for r in 0..4 {
            needs.deps[r] = needs.deps[r].max(spill[r]);
            if wraps[r] {
                needs.heap[r] = needs.heap[r].saturating_add(2 * biggest[r]);
            }
        }
        needs
    }
}

/// Add the edge `(p, flags)` to the fanin recorded from `f0` on, merging the flags of a
/// duplicate.
fn merge_edge(fanin: &mut Vec<(TaskId, u64)>, f0: usize, p: TaskId, flags: u64) {
    match fanin[f0..].iter_mut().find(|e| e.0 == p) {
        Some(e) => e.1 |= flags,
        None => fanin.push((p, flags)),
    }
}

/// For each task (by index in `g`): the op index of its submit, and the op index from
/// which it can retire — once its scope ended, every RETAIN consumer of it can retire
/// and every WAIT consumer was submitted (see [`Needs::of`]).
fn free_times(g: &Graph) -> (Vec<usize>, Vec<usize>) {
    let n = g.tasks.len();
    let mut at = vec![0usize; n];
    let mut scope_end = vec![usize::MAX; n];
    let mut stack: Vec<Vec<u32>> = vec![];
    for (k, op) in g.ops.iter().enumerate() {
        match *op {
            Op::Begin { .. } => stack.push(vec![]),
            Op::End => {
                for t in stack.pop().unwrap_or_default() {
                    scope_end[t as usize] = k;
                }
            }
            Op::Task(i) => {
                at[i as usize] = k;
                if let Some(s) = stack.last_mut() {
                    s.push(i);
                }
            }
        }
    }
    let index: HashMap<TaskId, usize> = g
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.head.id, i))
        .collect();
    let mut free_at = scope_end;
    for i in (0..n).rev() {
        for &(p, flags) in slice(&g.fanin, g.tasks[i].fanin) {
            if let Some(&j) = index.get(&p) {
                // A RETAIN claim holds the producer until the consumer can retire; a
                // WAIT claim (taken when the producer had not completed) until the
                // consumer's submit is done.
                let until = if flags & DEP_RETAIN != 0 {
                    free_at[i]
                } else {
                    at[i]
                };
                free_at[j] = free_at[j].max(until);
            }
        }
    }
    (at, free_at)
}
