//! A graph ready to run: its output buffers (two parities of rows, split into blocks),
//! the row views its tasks take, its totals and the per-task limits checked at setup.

use super::cli::{physical_memory, GraphSpec};
use super::kernels::KernelKind;
use super::pattern::{Intervals, Pattern, Shape};
use super::war::War;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use taskring::{DType, TaskArgs, Tensor};

/// Most input tensors one task may take (taskring's limit of 16, minus the output row).
const MAX_INPUT_TENSORS: usize = 15;
/// Most explicit dependencies the generated tasks take (taskring keeps 16 inline).
const MAX_EXPLICIT_DEPS: usize = 16;

/// Rows of one buffer block (graphs up to this width use a single block).
const BLOCK_ROWS_MIN: i64 = 256;

/// A zeroed, 64-byte aligned allocation of i64 words.
pub(super) struct RawBuf {
    pub(super) ptr: *mut i64,
    layout: Layout,
}

// safety: the buffer owns a plain heap allocation, freed in Drop by whichever thread
// drops it.
unsafe impl Send for RawBuf {}
// safety: plain memory; tasks access disjoint rows or rows ordered by the runtime's
// dependencies (trivial's racing rows are written with atomics).
unsafe impl Sync for RawBuf {}

impl RawBuf {
    /// `None` when the machine cannot give that much (never an abort).
    fn new(words: usize) -> Option<RawBuf> {
        let bytes = words.max(1).checked_mul(8)?;
        let layout = Layout::from_size_align(bytes, 64).ok()?;
        // safety: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) } as *mut i64;
        (!ptr.is_null()).then_some(RawBuf { ptr, layout })
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // safety: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr as *mut u8, self.layout) }
    }
}

/// Rows `first..first + rows` of one output buffer.
pub(super) struct Block {
    pub(super) buf: RawBuf,
    pub(super) first: i64,
    pub(super) rows: i64,
    /// `[rows, out_words]` view with row stride `stride`.
    pub(super) view: Tensor,
}

/// A graph ready to run: its shape, kernel, buffers and totals.
pub(super) struct Graph {
    pub(super) idx: usize,
    pub(super) spec: GraphSpec,
    pub(super) shape: Shape,
    pub(super) out_words: usize,
    /// Row stride in words (the output rounded up to 64 bytes).
    pub(super) stride: usize,
    pub(super) block_rows: i64,
    pub(super) blocks: [Vec<Block>; 2],
    pub(super) war: Option<War>,
    pub(super) flops_per_task: u64,
    pub(super) bytes_per_task: u64,
    pub(super) tasks: u64,
    pub(super) deps: u64,
    /// Producers per task at most (inputs + previous writer + explicit orderings).
    pub(super) max_edges: usize,
    pub(super) max_inputs: usize,
    pub(super) max_explicit: usize,
    pub(super) explicit_total: u64,
}

/// One output buffer of a graph `w` points wide: blocks of `block_rows` rows of
/// `stride` words, each viewed as `[rows, out_words]`.
fn alloc_blocks(
    w: i64,
    block_rows: i64,
    stride: usize,
    out_words: usize,
    too_big: &dyn Fn() -> String,
) -> Result<Vec<Block>, String> {
    let mut v = Vec::new();
    let mut first = 0;
    while first < w {
        let rows = block_rows.min(w - first);
        let words = (rows as usize).checked_mul(stride).ok_or_else(too_big)?;
        let buf = RawBuf::new(words).ok_or_else(too_big)?;
        let full = Tensor::from_raw(buf.ptr as u64, &[rows as u32, stride as u32], DType::I64);
        let view = full
            .view(
                &[rows as u32, out_words as u32],
                0,
                Some(&[stride as u32, 1]),
            )
            .map_err(|e| format!("buffer view: {e}"))?;
        v.push(Block {
            buf,
            first,
            rows,
            view,
        });
        first += rows;
    }
    Ok(v)
}

/// (FLOPs, bytes) per task of the graph's kernel. Checked: Task Bench's totals are
/// 64-bit counts.
fn per_task_costs(spec: &GraphSpec) -> Result<(u64, u64), String> {
    let flops_per_task = match spec.kernel {
        KernelKind::ComputeBound => spec
            .iter
            .checked_mul(128)
            .and_then(|f| f.checked_add(64))
            .ok_or("-iter is too large: FLOPs per task overflow 64 bits")?,
        _ => 0,
    };
    let bytes_per_task = match spec.kernel {
        KernelKind::MemoryBound => spec
            .iter
            .checked_mul(spec.scratch)
            .ok_or("-iter x -scratch is too large: bytes per task overflow 64 bits")?,
        _ => 0,
    };
    Ok((flops_per_task, bytes_per_task))
}

impl Graph {
    pub(super) fn new(idx: usize, spec: &GraphSpec) -> Result<Graph, String> {
        let shape = Shape::new(
            spec.pattern,
            spec.steps,
            spec.width,
            spec.radix,
            spec.period,
            spec.fraction,
        );
        let out_words = (spec.output / 8) as usize;
        let stride = out_words.div_ceil(8) * 8;
        let w = spec.width;
        let block_rows = if w <= BLOCK_ROWS_MIN {
            w
        } else {
            BLOCK_ROWS_MIN.max((w + 7) / 8)
        };
        let buffer_bytes = (w as u64).saturating_mul(stride as u64).saturating_mul(16);
        let too_big = || {
            format!(
                "the output buffers ({buffer_bytes} bytes: {w} points x {} bytes per row, twice) cannot be allocated on this machine ({} bytes of memory)",
                stride.saturating_mul(8),
                physical_memory()
            )
        };
        if buffer_bytes > physical_memory() {
            return Err(too_big());
        }
        let mk = || alloc_blocks(w, block_rows, stride, out_words, &too_big);
        let blocks = [mk()?, mk()?];
        let (flops_per_task, bytes_per_task) = per_task_costs(spec)?;
        let war = War::build(&shape)?;
        let mut g = Graph {
            idx,
            spec: spec.clone(),
            shape,
            out_words,
            stride,
            block_rows,
            blocks,
            war,
            flops_per_task,
            bytes_per_task,
            tasks: 0,
            deps: 0,
            max_edges: 0,
            max_inputs: 0,
            max_explicit: 0,
            explicit_total: 0,
        };
        g.count()?;
        if g.tasks.checked_mul(g.flops_per_task).is_none()
            || g.tasks.checked_mul(g.bytes_per_task).is_none()
        {
            return Err("-steps x -width x (FLOPs or bytes per task) is too large: the totals overflow 64 bits".into());
        }
        Ok(g)
    }

    /// Totals, and the per-task limits checked before anything runs.
    fn count(&mut self) -> Result<(), String> {
        let s = &self.shape;
        let mut iv = Intervals::new();
        let (mut tasks, mut deps, mut explicit_total) = (0u64, 0u64, 0u64);
        let (mut max_edges, mut max_inputs, mut max_explicit) = (0usize, 0usize, 0usize);
        for t in 0..s.steps {
            let lo = s.offset_at(t);
            let w = s.width_at(t);
            tasks += w as u64;
            for i in lo..lo + w {
                s.deps_at(t, i, &mut iv);
                let nd = iv.count() as usize;
                deps += nd as u64;
                if s.pattern == Pattern::Trivial {
                    continue;
                }
                let mut inputs = 0usize;
                for &(a, b) in iv.as_slice() {
                    inputs += (b / self.block_rows - a / self.block_rows + 1) as usize;
                }
                let mut explicit = 0usize;
                if let Some(war) = &self.war {
                    war.for_each_missing(s, t, i, &iv, |_| explicit += 1);
                }
                if inputs > MAX_INPUT_TENSORS {
                    return Err(format!(
                        "task (t={t}, i={i}) reads {inputs} row ranges but a task takes at most {MAX_INPUT_TENSORS} input tensors (plus its output); lower -radix"
                    ));
                }
                if explicit > MAX_EXPLICIT_DEPS {
                    return Err(format!(
                        "task (t={t}, i={i}) needs {explicit} explicit write-after-read orderings but a task takes at most {MAX_EXPLICIT_DEPS}; lower -radix"
                    ));
                }
                max_inputs = max_inputs.max(inputs);
                max_explicit = max_explicit.max(explicit);
                max_edges = max_edges.max(nd + 1 + explicit);
                explicit_total += explicit as u64;
            }
        }
        self.tasks = tasks;
        self.deps = deps;
        self.max_edges = max_edges;
        self.max_inputs = max_inputs;
        self.max_explicit = max_explicit;
        self.explicit_total = explicit_total;
        Ok(())
    }

    #[inline]
    pub(super) fn block_of(&self, point: i64) -> usize {
        (point / self.block_rows) as usize
    }

    /// The output row of `point` in buffer parity `p`.
    #[inline]
    pub(super) fn row_view(&self, p: usize, point: i64) -> Tensor {
        let b = &self.blocks[p][self.block_of(point)];
        let r = (point - b.first) as u64;
        b.view.rows_slice(r, r + 1).expect("row inside its block")
    }

    /// Add INPUT views of rows `lo..=hi` of parity `q` (one per block touched).
    #[inline]
    pub(super) fn push_inputs(&self, a: &mut TaskArgs, q: usize, lo: i64, hi: i64) {
        let mut p = lo;
        while p <= hi {
            let b = &self.blocks[q][self.block_of(p)];
            let end = hi.min(b.first + b.rows - 1);
            a.input(
                b.view
                    .rows_slice((p - b.first) as u64, (end - b.first + 1) as u64)
                    .expect("rows inside their block"),
            );
            p = end + 1;
        }
    }

    /// The block of parity `q` that `t` views, as (first point of the view, rows).
    #[inline]
    pub(super) fn locate(&self, q: usize, t: &Tensor) -> Option<(i64, i64)> {
        let b = self.blocks[q].iter().find(|b| b.buf.ptr as u64 == t.addr)?;
        if !t.offset.is_multiple_of(self.stride as u64)
            || t.ndims != 2
            || t.shape[1] as usize != self.out_words
        {
            return None;
        }
        Some((
            b.first + (t.offset / self.stride as u64) as i64,
            t.shape[0] as i64,
        ))
    }
}
