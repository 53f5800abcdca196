//! The arguments of a next-level submit: their checks (one rule and one set of messages
//! for L3 and L4) and where each goes among the task's tensors.

use crate::engine::TaskArgs;
use crate::tensor::Tensor;

/// How a program uses each argument (its signature).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgDir {
    In,
    Out,
    InOut,
    Scalar,
}

/// One argument of a next-level submit: of an L3 task to a chip
/// ([`NodeOrchestrator::submit_next_level`](crate::node::NodeOrchestrator::submit_next_level))
/// and of an L4 task to a host (rank 0's `ClusterOrchestrator::submit_next_level`). The two
/// wire formats stay their own (`node::wire::WireArg`,
/// [`L4Arg`](crate::cluster::L4Arg)).
#[derive(Clone, Copy, Debug)]
pub enum NextLevelArg {
    /// An array of the caller's: at L3 in shared memory (the chip maps it); at L4 a
    /// C-contiguous rank-0 array, shipped to the host (and back, for an output).
    Tensor(Tensor),
    /// A tensor resident on an L4 host (`alloc_tensor(..., worker=host)`): its stand-in
    /// view on rank 0, its id and its host. Only an L4 submit takes it; an L3 submit
    /// refuses it.
    Resident {
        view: Tensor,
        id: u64,
        host: usize,
    },
    Int(i64),
    Float(f64),
}

impl NextLevelArg {
    /// An int or a float (nothing the run has to keep alive).
    pub fn is_scalar(&self) -> bool {
        matches!(self, NextLevelArg::Int(_) | NextLevelArg::Float(_))
    }

    /// Argument `i` against its direction `d`: a scalar goes only where the signature
    /// says SCALAR, a tensor everywhere else.
    fn check_direction(&self, i: usize, d: ArgDir) -> Result<(), String> {
        match (d == ArgDir::Scalar, self.is_scalar()) {
            (true, false) => Err(format!("argument {i} is SCALAR but a tensor was given")),
            (false, true) => Err(format!("argument {i} must be a tensor")),
            _ => Ok(()),
        }
    }
}

/// Where a program argument is in the dispatched task.
#[derive(Clone, Copy, Debug)]
// A tensor's direction and resident id travel only to an L4 host (the `mpi` feature).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) enum Slot {
    /// A tensor: its index among the task's tensors (canonical order: inputs, inouts,
    /// outputs), its direction, and the id of the host-resident tensor it is (L4).
    Tensor {
        index: usize,
        dir: ArgDir,
        resident: Option<u64>,
    },
    Int(i64),
    Float(f64),
}

/// Where each argument of a program with signature `sig` goes among its task's
/// tensors, which the engine keeps in canonical order (inputs, inouts, outputs): the
/// index for a tensor argument, None for a scalar.
pub(crate) fn canonical_index(sig: &[ArgDir]) -> Vec<Option<usize>> {
    let group = |d: ArgDir| match d {
        ArgDir::In => Some(0),
        ArgDir::InOut => Some(1),
        ArgDir::Out => Some(2),
        ArgDir::Scalar => None,
    };
    let mut counts = [0usize; 3];
    for g in sig.iter().filter_map(|d| group(*d)) {
        counts[g] += 1;
    }
    let starts = [0, counts[0], counts[0] + counts[1]];
    let mut seen = [0usize; 3];
    sig.iter()
        .map(|d| {
            group(*d).map(|g| {
                seen[g] += 1;
                starts[g] + seen[g] - 1
            })
        })
        .collect()
}

/// A task's engine arguments and where each program argument is among them. Arity and
/// directions are checked here; `tensor(i, arg)` is the level's own rule for a tensor
/// argument (which memory it may be in): the view the engine tracks and, at L4, the id of
/// a host-resident tensor.
pub(crate) fn task_args(
    sig: &[ArgDir],
    args: &[NextLevelArg],
    tensor: impl Fn(usize, &NextLevelArg) -> Result<(Tensor, Option<u64>), String>,
) -> Result<(Vec<Slot>, TaskArgs), String> {
    if sig.len() != args.len() {
        return Err(format!(
            "the program takes {} arguments, got {}",
            sig.len(),
            args.len()
        ));
    }
    let at = canonical_index(sig);
    let mut slots = Vec::with_capacity(args.len());
    let mut ta = TaskArgs::new();
    for (i, (d, a)) in sig.iter().zip(args).enumerate() {
        a.check_direction(i, *d)?;
        match *a {
            NextLevelArg::Int(v) => slots.push(Slot::Int(v)),
            NextLevelArg::Float(v) => slots.push(Slot::Float(v)),
            _ => {
                let (view, resident) = tensor(i, a)?;
                slots.push(Slot::Tensor {
                    index: at[i].expect("a tensor argument has an index"),
                    dir: *d,
                    resident,
                });
                match d {
                    ArgDir::In => ta.input(view),
                    ArgDir::InOut => ta.inout(view),
                    _ => ta.output_existing(view),
                };
            }
        }
    }
    Ok((slots, ta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ArgDir::*;

    #[test]
    fn canonical_order_is_inputs_inouts_outputs() {
        let sig = [Out, In, Scalar, InOut, In];
        assert_eq!(
            canonical_index(&sig),
            vec![Some(3), Some(0), None, Some(2), Some(1)]
        );
    }

    #[test]
    fn arity_and_direction_are_checked_before_the_level_rule() {
        let t = Tensor::from_raw(0x1000, &[4], crate::tensor::DType::F32);
        let never = |_: usize, _: &NextLevelArg| -> Result<(Tensor, Option<u64>), String> {
            panic!("the level rule runs only for a well-placed tensor")
        };
        let e = task_args(&[In], &[], never).err().unwrap();
        assert_eq!(e, "the program takes 1 arguments, got 0");
        let e = task_args(&[Scalar], &[NextLevelArg::Tensor(t)], never)
            .err()
            .unwrap();
        assert_eq!(e, "argument 0 is SCALAR but a tensor was given");
        let e = task_args(&[In], &[NextLevelArg::Int(3)], never)
            .err()
            .unwrap();
        assert_eq!(e, "argument 0 must be a tensor");
        let ok = |_: usize, a: &NextLevelArg| match *a {
            NextLevelArg::Tensor(t) => Ok((t, None)),
            _ => Err("no".to_string()),
        };
        let (slots, _) = task_args(
            &[Out, Scalar],
            &[NextLevelArg::Tensor(t), NextLevelArg::Float(0.5)],
            ok,
        )
        .unwrap();
        assert!(matches!(
            slots[0],
            Slot::Tensor {
                index: 0,
                dir: Out,
                resident: None
            }
        ));
        assert!(matches!(slots[1], Slot::Float(v) if v == 0.5));
    }
}
