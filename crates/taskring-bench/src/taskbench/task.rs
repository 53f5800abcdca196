//! The task every point of every graph runs: checks that its inputs are exactly the rows
//! of its dependency set, each holding its producer's stamp, runs the graph's kernel,
//! writes its own stamp into its row and counts itself.

use super::graph::Graph;
use super::kernels::run_kernel;
use super::pattern::{Intervals, Pattern};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use taskring::{Kernel, KernelCall, Tensor};

/// Executed-task counters, one cache line per thread slot.
#[repr(align(128))]
struct PaddedCount(AtomicU64);

pub(super) struct Counters {
    slots: Vec<PaddedCount>,
}

const COUNTER_SLOTS: usize = 64;
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static SLOT: usize = NEXT_SLOT.fetch_add(1, Relaxed) % COUNTER_SLOTS;
}

impl Counters {
    pub(super) fn new() -> Counters {
        Counters {
            slots: (0..COUNTER_SLOTS)
                .map(|_| PaddedCount(AtomicU64::new(0)))
                .collect(),
        }
    }
    #[inline]
    fn bump(&self) {
        SLOT.with(|&s| self.slots[s].0.fetch_add(1, Relaxed));
    }
    pub(super) fn take(&self) -> u64 {
        self.slots.iter().map(|c| c.0.swap(0, Relaxed)).sum()
    }
}

/// The kernel of one graph's tasks (scalars: the task's timestep and point).
pub(super) struct TbKernel {
    pub(super) g: Arc<Graph>,
    pub(super) counters: Arc<Counters>,
}

impl TbKernel {
    fn exec(&self, call: &KernelCall<'_>) -> Result<(), String> {
        let g = &*self.g;
        if call.scalars.len() != 2 {
            return Err(format!(
                "graph {}: expected 2 scalars (t, i), got {}",
                g.idx + 1,
                call.scalars.len()
            ));
        }
        let t = call.scalars[0] as i64;
        let i = call.scalars[1] as i64;
        let p = (t & 1) as usize;
        if g.shape.pattern == Pattern::Trivial {
            return self.exec_trivial(call, t, i, p);
        }

        // Inputs: exactly the rows of the dependency set, in order, each stamped (t-1, j).
        let mut iv = Intervals::new();
        g.shape.deps_at(t, i, &mut iv);
        let inputs = &call.tensors[..call.n_inputs.min(call.tensors.len())];
        check_inputs(g, t, i, inputs, &iv)?;

        // The own row.
        let own = call.tensors.get(call.n_inputs).ok_or_else(|| {
            format!(
                "graph {} task (t={t}, i={i}): validation failed: the output row is missing",
                g.idx + 1
            )
        })?;
        match g.locate(p, own) {
            Some((first, 1)) if first == i => {}
            _ => {
                return Err(format!(
                    "graph {} task (t={t}, i={i}): validation failed: the output tensor {own:?} is not row {i} of the timestep-{t} buffer",
                    g.idx + 1
                ))
            }
        }

        run_kernel(g.spec.kernel, g.spec.iter, g.spec.scratch, t, i)?;

        // safety: the row is this task's output (checked above); it is ordered after the
        // row's previous writer and readers by the runtime.
        unsafe {
            let row = (own.addr as *mut i64).add(own.offset as usize);
            for w in (0..g.out_words).step_by(2) {
                *row.add(w) = t;
                *row.add(w + 1) = i;
            }
        }
        self.counters.bump();
        Ok(())
    }

    /// A trivial task: no tensors; the kernel, then the stamp into the graph's buffer.
    #[inline]
    fn exec_trivial(&self, call: &KernelCall<'_>, t: i64, i: i64, p: usize) -> Result<(), String> {
        let g = &*self.g;
        if !call.tensors.is_empty() {
            return Err(format!(
                "graph {} task (t={t}, i={i}): trivial tasks take no tensors",
                g.idx + 1
            ));
        }
        run_kernel(g.spec.kernel, g.spec.iter, g.spec.scratch, t, i)?;
        let b = &g.blocks[p][g.block_of(i)];
        // safety: the row is inside the block; concurrent writers of the same row
        // (timesteps t and t±2, unordered in this pattern) use atomics.
        unsafe {
            let row = b.buf.ptr.add((i - b.first) as usize * g.stride);
            for w in (0..g.out_words).step_by(2) {
                AtomicI64::from_ptr(row.add(w)).store(t, Relaxed);
                AtomicI64::from_ptr(row.add(w + 1)).store(i, Relaxed);
            }
        }
        self.counters.bump();
        Ok(())
    }
}

/// Task (t, i)'s `inputs` are exactly the rows of its dependency set `iv`, in order,
/// from the timestep-(t-1) buffer, each stamped (t-1, j).
#[inline]
fn check_inputs(
    g: &Graph,
    t: i64,
    i: i64,
    inputs: &[Tensor],
    iv: &Intervals,
) -> Result<(), String> {
    let q = ((t - 1) & 1) as usize;
    let mut k = 0usize; // input tensor
    let mut r = 0i64; // row within it
    let mut cur: Option<(i64, i64)> = None; // (first point, rows) of input k
    for &(a, b) in iv.as_slice() {
        for j in a..=b {
            loop {
                if k >= inputs.len() {
                    return Err(format!(
                        "graph {} task (t={t}, i={i}): validation failed: input for point {j} of timestep {} is missing ({} input tensors)",
                        g.idx + 1,
                        t - 1,
                        inputs.len()
                    ));
                }
                let (first, rows) = match cur {
                    Some(c) => c,
                    None => {
                        let c = g.locate(q, &inputs[k]).ok_or_else(|| {
                            format!(
                                "graph {} task (t={t}, i={i}): validation failed: input {k} ({:?}) is not a row range of the timestep-{} buffer",
                                g.idx + 1,
                                inputs[k],
                                t - 1
                            )
                        })?;
                        cur = Some(c);
                        c
                    }
                };
                if r < rows {
                    if first + r != j {
                        return Err(format!(
                            "graph {} task (t={t}, i={i}): validation failed: input {k} row {r} is point {}, expected point {j}",
                            g.idx + 1,
                            first + r
                        ));
                    }
                    break;
                }
                k += 1;
                r = 0;
                cur = None;
            }
            check_stamps(g, t, i, &inputs[k], r, j)?;
            r += 1;
        }
    }
    let rest = match cur {
        Some((_, rows)) if r == rows => inputs.len() - k - 1,
        Some(_) => inputs.len() - k,
        None => inputs.len() - k,
    };
    if rest != 0 {
        return Err(format!(
            "graph {} task (t={t}, i={i}): validation failed: {rest} unexpected input tensor(s) beyond its {} dependencies",
            g.idx + 1,
            iv.count()
        ));
    }
    Ok(())
}

/// Row `r` of input `ten` (which `locate` placed in a buffer of `g`) holds point j's
/// stamp (t-1, j) in every pair.
#[inline]
fn check_stamps(g: &Graph, t: i64, i: i64, ten: &Tensor, r: i64, j: i64) -> Result<(), String> {
    // safety: `locate` proved the view is inside a buffer of this graph; its
    // producer completed before this task was made ready.
    unsafe {
        let row = (ten.addr as *const i64).add(ten.offset as usize + r as usize * g.stride);
        for w in (0..g.out_words).step_by(2) {
            let (st, sp) = (*row.add(w), *row.add(w + 1));
            if st != t - 1 || sp != j {
                return Err(format!(
                    "graph {} task (t={t}, i={i}): validation failed: input point {j} holds stamp (t={st}, i={sp}) at word {w}, expected (t={}, i={j})",
                    g.idx + 1,
                    t - 1
                ));
            }
        }
    }
    Ok(())
}

impl Kernel for TbKernel {
    fn name(&self) -> &str {
        "taskbench"
    }
    fn check(&self, _tensors: &[Tensor], _n_inputs: usize, _scalars: &[u64]) -> Result<(), String> {
        Ok(())
    }
    fn run(&self, call: &KernelCall<'_>) {
        if let Err(msg) = self.exec(call) {
            panic!("{msg}");
        }
    }
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        self.exec(call)
    }
}
