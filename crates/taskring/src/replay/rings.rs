//! A replay through the rings: the recorded ops fed to the orchestrator (every capacity
//! rule applies, with its codes).

use super::graph::{slice, Base, Graph, Op};
use crate::engine::recording::ReplaySubmit;
use crate::engine::{Orchestrator, RuntimeFailure, MAX_SCOPE_DEPTH, MAX_TASK_TENSORS};
use crate::tensor::Tensor;

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
