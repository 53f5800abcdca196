//! Recording (`Recorder`, installed in the orchestrator's state for one run): per
//! submit, in submission order, the task and its full fanin; scope begins and ends
//! between the tasks (see the module doc of `replay`).

use super::graph::{quiet_kinds, slice, Base, Direct, Graph, Op, RecTask, RecTensor, Recorded};
use crate::engine::recording::{Recording, TaskHead};
use crate::engine::shared::DEP_FLAGS;
use crate::engine::writers::WriterLog;
use crate::engine::ArgTag;
use crate::kernel::CoreKind;
use crate::tensor::{TaskId, Tensor};
use std::collections::HashMap;

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
        let recorded = Recorded {
            tasks: &self.tasks,
            tensors: &self.tensors,
            scalars: &self.scalars,
            n_args: self.args.len(),
        };
        let direct = Direct::build(recorded, &succ_off, &succ, &fanin_n, &kinds);
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

impl Recording for Recorder {
    fn begin_scope(&mut self, manual: bool) {
        self.open.push(self.ops.len());
        self.ops.push(Op::Begin { manual, total: 0 });
    }

    fn end_scope(&mut self) {
        self.open.pop();
        self.ops.push(Op::End);
    }

    /// Record one submit (tensors in canonical order, `tags[i]` for `tensors[i]`);
    /// `block`: the address of the task's output block in this run. Called from the
    /// orchestrator's cold recording path.
    #[allow(clippy::too_many_arguments)]
    fn task(
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
}

/// Add the edge `(p, flags)` to the fanin recorded from `f0` on, merging the flags of a
/// duplicate.
fn merge_edge(fanin: &mut Vec<(TaskId, u64)>, f0: usize, p: TaskId, flags: u64) {
    match fanin[f0..].iter_mut().find(|e| e.0 == p) {
        Some(e) => e.1 |= flags,
        None => fanin.push((p, flags)),
    }
}
