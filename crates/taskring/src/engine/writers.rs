//! Every writer a run has had, for the two recorders that must find a task's whole
//! fanin whatever the timing: the dependency file (`engine::depgraph`, `deps.json`) and
//! capture (`replay::record`). The engine's own tensormap forgets writers that
//! completed or retired — right for a live run, which need not wait for them, but a
//! recording made against it would change from run to run.
//!
//! The rule is the engine's (steps 4 and 5 of a submit, `orch/submit.rs`): an argument
//! that is not a fresh OUTPUT depends on the task that allocated its buffer (WAIT |
//! RETAIN); an INPUT or INOUT outside a manual scope depends on every recorded writer
//! whose view overlaps it (WAIT), and a writer that an INOUT covers stops being one; then
//! the task becomes a writer of its INOUT and OUTPUT_EXISTING views.

use super::shared::{DEP_RETAIN, DEP_WAIT};
use super::tensormap::{check_overlap, Overlap};
use super::ArgTag;
use crate::tensor::{TaskId, Tensor};
use std::collections::HashMap;

/// The writers (INOUT / OUTPUT_EXISTING views outside manual scopes) per buffer,
/// keyed by (address, allocating task or `TaskId::INVALID` for a host array).
#[derive(Debug, Default)]
pub(crate) struct WriterLog {
    writers: HashMap<(u64, u64), Vec<(Tensor, TaskId)>>,
}

impl WriterLog {
    /// The edges task `id` infers from its tensors (`tensors[i]` with tag `tags[i]`),
    /// reported to `edge(producer, flags)` — a producer may be reported more than once
    /// (callers merge) — then `id` recorded as a writer.
    pub(crate) fn infer(
        &mut self,
        tensors: &[Tensor],
        tags: &[ArgTag],
        id: TaskId,
        mut edge: impl FnMut(TaskId, u64),
    ) {
        for (t, &tag) in tensors.iter().zip(tags) {
            if tag != ArgTag::Output && t.owner.is_valid() {
                edge(t.owner, DEP_WAIT | DEP_RETAIN);
            }
            if (tag == ArgTag::Input || tag == ArgTag::Inout) && !t.manual_dep {
                if let Some(w) = self.writers.get_mut(&(t.addr, t.owner.0)) {
                    w.retain(|(e, p)| match check_overlap(t, e) {
                        Overlap::None => true,
                        o => {
                            edge(*p, DEP_WAIT);
                            !(o == Overlap::Covered && tag == ArgTag::Inout)
                        }
                    });
                }
            }
        }
        for (t, &tag) in tensors.iter().zip(tags) {
            if matches!(tag, ArgTag::Inout | ArgTag::OutputExisting) && !t.manual_dep {
                self.writers
                    .entry((t.addr, t.owner.0))
                    .or_default()
                    .push((*t, id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    fn edges(log: &mut WriterLog, ts: &[Tensor], tags: &[ArgTag], id: u64) -> Vec<(u64, u64)> {
        let mut v = vec![];
        log.infer(ts, tags, TaskId(id), |p, f| v.push((p.0, f)));
        v
    }

    #[test]
    fn readers_wait_for_overlapping_writers_and_covering_inouts_replace_them() {
        let mut log = WriterLog::default();
        let whole = Tensor::from_raw(0x10000, &[8, 8], DType::F32);
        let (top, bottom) = (
            whole.rows_slice(0, 4).unwrap(),
            whole.rows_slice(4, 8).unwrap(),
        );
        assert!(edges(&mut log, &[top], &[ArgTag::OutputExisting], 1).is_empty());
        assert!(edges(&mut log, &[bottom], &[ArgTag::OutputExisting], 2).is_empty());
        // Reading the top half waits for task 1 only.
        assert_eq!(
            edges(&mut log, &[top], &[ArgTag::Input], 3),
            vec![(1, DEP_WAIT)]
        );
        // An INOUT of the whole buffer waits for both and covers both.
        let e = edges(&mut log, &[whole], &[ArgTag::Inout], 4);
        assert_eq!(e, vec![(1, DEP_WAIT), (2, DEP_WAIT)]);
        // Only task 4 writes the buffer now.
        assert_eq!(
            edges(&mut log, &[bottom], &[ArgTag::Input], 5),
            vec![(4, DEP_WAIT)]
        );
    }

    #[test]
    fn manual_views_and_runtime_outputs() {
        let mut log = WriterLog::default();
        let mut m = Tensor::from_raw(0x20000, &[8], DType::F32);
        m.manual_dep = true;
        assert!(edges(&mut log, &[m], &[ArgTag::Inout], 1).is_empty());
        assert!(edges(&mut log, &[m], &[ArgTag::Input], 2).is_empty());
        // A view of a runtime output depends on its creator (WAIT | RETAIN).
        let mut o = Tensor::from_raw(0x30000, &[8], DType::F32);
        o.owner = TaskId(7);
        assert_eq!(
            edges(&mut log, &[o], &[ArgTag::Input], 8),
            vec![(7, DEP_WAIT | DEP_RETAIN)]
        );
    }
}
