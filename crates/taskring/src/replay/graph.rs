//! The recorded graph (immutable): the recorded ops and tasks (the form the rings path
//! walks), the direct executor's compact form of it (`Direct`), and its structural
//! demand per ring (`Needs`).

use crate::chip::PerEntry;
use crate::config::RingField;
use crate::engine::recording::TaskHead;
use crate::engine::shared::DEP_RETAIN;
use crate::engine::shared::DEP_WAIT;
use crate::engine::{FANIN_INLINE, MAX_TASK_TENSORS};
use crate::kernel::{CoreKind, KernelRef};
use crate::tensor::{TaskId, Tensor};
use std::collections::HashMap;

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
pub(super) enum Base {
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
pub(super) struct RecTensor {
    /// The view as submitted (canonical order); its address is replaced at replay.
    pub(super) view: Tensor,
    pub(super) base: Base,
    /// Byte offset of `view.addr` from the base.
    pub(super) rel: u64,
}

pub(super) type Range = (u32, u32);

pub(super) fn slice<T>(v: &[T], r: Range) -> &[T] {
    &v[r.0 as usize..r.1 as usize]
}

#[derive(Clone, Copy)]
pub(super) struct RecTask {
    pub(super) head: TaskHead,
    pub(super) tensors: Range,
    pub(super) scalars: Range,
    pub(super) fanin: Range,
    pub(super) outs: Range,
}

/// A task as the direct executor reads it (see [`Direct`]): everything a thread needs
/// to run task `i` and complete it, in 32 bytes, two tasks to a cache line. A task
/// with a single successor holds it here (a chain's next task is then read from this
/// record, not from a successor array).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
pub(super) struct XTask {
    /// Index into [`Direct::kernels`]; [`XTask::NO_KERNEL`] for alloc and dummy tasks.
    pub(super) kernel: u32,
    /// First of its tensors in [`Direct::tensors`] (`n_tensors` of them; tasks with the
    /// same tensor records share them).
    pub(super) tensors: u32,
    /// First of its scalars in [`Graph::scalars`] (`n_scalars` of them).
    pub(super) scalars: u32,
    /// Its only successor when `n_succ` is 1, else the first of its successors in
    /// [`Graph::succ`].
    pub(super) succ: u32,
    pub(super) n_succ: u32,
    /// Its predecessors.
    pub(super) fanin_n: u32,
    pub(super) scalar_float_mask: u16,
    pub(super) n_tensors: u8,
    pub(super) n_scalars: u8,
    pub(super) n_inputs: u8,
    pub(super) kind: CoreKind,
}

impl XTask {
    pub(super) const NO_KERNEL: u32 = u32::MAX;

    /// Its successors (`succ`: the graph's successor array).
    #[inline]
    pub(super) fn successors<'s>(&'s self, succ: &'s [u32]) -> &'s [u32] {
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
pub(super) struct XTensor {
    /// Its address: `addrs[base] + rel` (see [`DirectJob`]: 0 for a fixed address, then
    /// the program arguments, then the tasks' output blocks).
    pub(super) rel: u64,
    pub(super) offset: u64,
    pub(super) owner: TaskId,
    pub(super) base: u32,
    /// Index into [`Direct::views`].
    pub(super) view: u32,
}

const _: () = assert!(std::mem::size_of::<XTensor>() == 32);

/// The direct executor's compact form of a graph, built once at capture: a replay of a
/// large graph reads mostly this, and it streams through memory — 32 bytes per task,
/// and 32 per tensor argument of a task whose tensor records no earlier task has
/// (a chain on one buffer, a fan-out's consumers of one producer share theirs), the
/// views deduplicated (patterns repeat a handful). The recorded form, ~180 bytes per
/// task with one tensor, is kept for the rings path.
pub(super) struct Direct {
    pub(super) tasks: Vec<XTask>,
    pub(super) tensors: Vec<XTensor>,
    pub(super) views: Vec<Tensor>,
    pub(super) kernels: Vec<KernelRef>,
}

/// What [`Direct::build`] reads of a recording.
pub(super) struct Recorded<'r> {
    pub(super) tasks: &'r [RecTask],
    pub(super) tensors: &'r [RecTensor],
    pub(super) scalars: &'r [u64],
    pub(super) n_args: usize,
}

impl Direct {
    pub(super) fn build(
        r: Recorded<'_>,
        succ_off: &[u32],
        succ: &[u32],
        fanin_n: &[u32],
        kinds: &[CoreKind],
    ) -> Direct {
        use std::hash::BuildHasher;
        let n_args = r.n_args as u32;
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
                for rt in slice(r.tensors, t.tensors) {
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
        d.check(n_args as usize, r.scalars, succ);
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
    pub(super) ops: Vec<Op>,
    pub(super) tasks: Vec<RecTask>,
    pub(super) tensors: Vec<RecTensor>,
    pub(super) scalars: Vec<u64>,
    pub(super) fanin: Vec<(TaskId, u64)>,
    pub(super) outs: Vec<(u8, u64)>,
    /// Successors of every task (task indices; task `i`'s from its `XTask::succ` on).
    pub(super) succ: Vec<u32>,
    /// Tasks without predecessors, in submission order.
    pub(super) roots: Vec<u32>,
    /// Output bytes per ring over the whole graph.
    pub(super) ring_bytes: [u64; 4],
    /// Tasks without successors.
    pub(super) sinks: usize,
    /// Program arguments of the capture.
    pub(super) n_args: usize,
    /// What a direct replay reads.
    pub(super) direct: Direct,
    /// Every task's kernel is [`Kernel::bounded`] (or it has none): the replay's
    /// caller may run any of them while it waits.
    ///
    /// [`Kernel::bounded`]: crate::kernel::Kernel::bounded
    pub(super) all_bounded: bool,
    /// Per core kind (AIC, AIV, Any): cores of that kind can run less than an eighth
    /// of the graph's tasks ([`quiet_kinds`]).
    pub(super) quiet: [bool; 3],
}

/// Which core kinds (AIC, AIV, Any) have little to do in a graph of tasks of `kinds`:
/// less than an eighth of its tasks. An idle core of such a kind parks at once during
/// a direct replay instead of spinning: its spin would take the CPU from the threads
/// running the graph (on a small machine) for the few tasks it could take.
pub(super) fn quiet_kinds(kinds: &[CoreKind]) -> [bool; 3] {
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

/// The graph's structural demand per ring (see `Captured::exact_config`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Needs {
    pub slots: [u64; 4],
    pub heap: [u64; 4],
    pub deps: [u64; 4],
}

impl Needs {
    /// The need per field and ring the chip's auto sizing takes (`chip::auto`):
    /// window: live slots + 1; heap bytes; dep entries.
    pub(crate) fn per_entry(&self) -> PerEntry<u64> {
        let mut need = [[0; 4]; 3];
        need[RingField::TaskWindow.index()] = self.slots.map(|s| s + 1);
        need[RingField::Heap.index()] = self.heap;
        need[RingField::DepPool.index()] = self.deps;
        need
    }

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
