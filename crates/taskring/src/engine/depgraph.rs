//! The dependency graph of a run for `deps.json` (`CallConfig.enable_dep_gen`): the
//! engine records it; the file's format is `dfx::DepsFile`'s.

use super::shared::{DEP_RETAIN as RETAIN, DEP_WAIT as WAIT};
use super::writers::WriterLog;
use super::ArgTag;
use crate::dfx::{DepsArg, DepsEdge, DepsFile, DepsTask, DepsTensor};
use crate::tensor::{DType, TaskId, Tensor, MAX_DIMS};

#[derive(Clone, Copy, Debug)]
struct RecTask {
    id: u64,
    kernel: &'static str,
    ring: u8,
    scope: u32,
    /// Range in `DepGraph::args`.
    args: (u32, u32),
}

#[derive(Clone, Copy, Debug)]
struct RecArg {
    idx: u8,
    tag: ArgTag,
    tensor: u32,
    ndims: u8,
    shape: [u32; MAX_DIMS],
    dtype: DType,
    offset: u64,
}

#[derive(Clone, Copy, Debug)]
struct RecTensor {
    addr: u64,
    dtype: DType,
    numel: u64,
}

#[derive(Clone, Copy, Debug)]
struct RecEdge {
    pred: u64,
    succ: u64,
    explicit: bool,
    flags: u64,
}

/// The dependency graph of a run, recorded by the orchestrator while `enable_dep_gen`
/// is on (nothing of it exists otherwise). Edges inferred through the tensormap are
/// found again here, against every writer the run has had (the engine's tensormap
/// forgets completed and retired writers, which would make the file depend on timing).
#[derive(Debug, Default)]
pub(crate) struct DepGraph {
    tasks: Vec<RecTask>,
    args: Vec<RecArg>,
    tensors: Vec<RecTensor>,
    /// `(addr, allocating task or INVALID for host arrays)` -> tensor id.
    tensor_ids: std::collections::HashMap<(u64, u64), u32>,
    edges: Vec<RecEdge>,
    writers: WriterLog,
}

impl DepGraph {
    fn tensor_id(&mut self, t: &Tensor) -> u32 {
        let next = self.tensors.len() as u32;
        let id = *self.tensor_ids.entry((t.addr, t.owner.0)).or_insert(next);
        if id == next {
            let numel = t.buf_bytes / t.dtype.size_bytes() as u64;
            self.tensors.push(RecTensor {
                addr: t.addr,
                dtype: t.dtype,
                numel,
            });
        }
        id
    }

    /// Record one submit: task `id` on `ring` in scope instance `scope`, its tensors in
    /// the engine's canonical order (`tensors[i]` has tag `tags[i]` and was argument
    /// `order[i]`), its explicit deps, and whether dependencies are inferred (outside
    /// manual scopes). Mirrors the engine's steps 4 and 5: all lookups, then all inserts.
    // Out of line and cold: the submit path keeps its shape when recording is off.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    pub(crate) fn record(
        &mut self,
        id: TaskId,
        kernel: &'static str,
        ring: usize,
        scope: u32,
        tensors: &[Tensor],
        tags: &[ArgTag],
        order: &[u8],
        explicit: &[(TaskId, u64)],
        infer: bool,
    ) {
        let a0 = self.args.len() as u32;

        for (i, t) in tensors.iter().enumerate() {
            let tensor = self.tensor_id(t);
            let mut shape = [0u32; MAX_DIMS];
            let nd = (t.ndims as usize).min(MAX_DIMS);
            shape[..nd].copy_from_slice(&t.shape[..nd]);
            self.args.push(RecArg {
                idx: order[i],
                tag: tags[i],
                tensor,
                ndims: nd as u8,
                shape,
                dtype: t.dtype,
                offset: t.offset,
            });
        }
        self.args[a0 as usize..].sort_by_key(|a| a.idx);
        self.tasks.push(RecTask {
            id: id.0,
            kernel,
            ring: ring as u8,
            scope,
            args: (a0, self.args.len() as u32),
        });
        let first = self.edges.len();
        for &(d, flags) in explicit {
            add_edge(&mut self.edges, first, d, id, true, flags & (WAIT | RETAIN));
        }
        if !infer {
            return;
        }
        let edges = &mut self.edges;
        self.writers.infer(tensors, tags, id, |p, flags| {
            add_edge(edges, first, p, id, false, flags)
        });
    }

    /// The file's content: everything ordered as [`DepsFile`] says.
    pub(crate) fn to_file(&self) -> DepsFile {
        let flag_names = |f: u64| {
            let mut v = Vec::with_capacity(2);
            if f & WAIT != 0 {
                v.push("wait".to_string());
            }
            if f & RETAIN != 0 {
                v.push("retain".to_string());
            }
            v
        };
        let mut tasks: Vec<DepsTask> = self
            .tasks
            .iter()
            .map(|t| DepsTask {
                id: t.id,
                kernel: t.kernel.to_string(),
                ring: t.ring as u32,
                scope: t.scope,
                args: self.args[t.args.0 as usize..t.args.1 as usize]
                    .iter()
                    .map(|a| DepsArg {
                        idx: a.idx as u32,
                        tag: a.tag.name().to_string(),
                        tensor: a.tensor,
                        shape: a.shape[..a.ndims as usize].to_vec(),
                        dtype: a.dtype.name().to_string(),
                        offset: a.offset,
                    })
                    .collect(),
            })
            .collect();
        tasks.sort_by_key(|t| t.id);
        let tensors = self
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| DepsTensor {
                id: i as u32,
                addr: t.addr,
                dtype: t.dtype.name().to_string(),
                numel: t.numel,
            })
            .collect();
        let mut edges: Vec<&RecEdge> = self.edges.iter().collect();
        // "explicit" < "tensormap"
        edges.sort_by_key(|e| (e.succ, e.pred, !e.explicit));
        let edges = edges
            .into_iter()
            .map(|e| DepsEdge {
                pred: e.pred,
                succ: e.succ,
                source: if e.explicit { "explicit" } else { "tensormap" }.to_string(),
                flags: flag_names(e.flags),
            })
            .collect();
        DepsFile {
            tasks,
            tensors,
            edges,
        }
    }
}

/// Add an edge into the task being recorded (whose edges start at `first`), merging
/// flags with an edge of the same producer and source.
fn add_edge(
    edges: &mut Vec<RecEdge>,
    first: usize,
    pred: TaskId,
    succ: TaskId,
    explicit: bool,
    flags: u64,
) {
    if let Some(e) = edges[first..]
        .iter_mut()
        .find(|e| e.pred == pred.0 && e.explicit == explicit)
    {
        e.flags |= flags;
    } else {
        edges.push(RecEdge {
            pred: pred.0,
            succ: succ.0,
            explicit,
            flags,
        });
    }
}
