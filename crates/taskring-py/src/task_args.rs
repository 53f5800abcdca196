//! Tagged task arguments (`TaskArgs`, the low-level form of a submit): tensors with a
//! `TensorArgType` tag, scalars and dependencies, for an L2 kernel or, in a program's
//! signature order, for an L3 chip task.

use crate::conversion::{scalar_of, type_name};
use crate::tensor::{stale_tensor, PySpec, PyTensor};
use numpy::PyUntypedArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use taskring::{ArgTag, TaskArgs, TensorSpec};
use taskring::{DType, TaskId, Tensor};

/// Tagged task arguments (low level): `add(tensor_or_spec, tag)`, `add_scalar(x)`,
/// `add_dep(task_id)`.
#[pyclass(module = "taskring", name = "TaskArgs")]
#[derive(Default)]
pub struct PyTaskArgs {
    items: Vec<TaItem>,
    /// Scalars as 64-bit patterns, and as given (for L3, where they travel as values).
    scalars: Vec<(u64, bool)>,
    scalar_objs: Vec<Py<PyAny>>,
    deps: Vec<u64>,
    tensor_after_scalar: bool,
}

/// One tensor argument of a `TaskArgs`.
enum TaItem {
    /// A tensor handle of an orchestration (L2), with the run it belongs to.
    Tensor(ArgTag, Tensor, u64),
    /// A runtime output (tag OUTPUT, L2).
    Spec(TensorSpec),
    /// A host array (L3: a shared array, a device tensor): checked where it is used.
    Host(ArgTag, Py<PyAny>),
}

#[pymethods]
impl PyTaskArgs {
    #[new]
    fn new() -> Self {
        Self::default()
    }
    /// Add a tensor with a `TensorArgType` tag (0 INPUT, 1 OUTPUT, 2 INOUT,
    /// 3 OUTPUT_EXISTING, 4 NO_DEP). At L2 a tensor is a `Tensor` handle and OUTPUT
    /// takes a `TensorSpec`; at L3 (`submit_next_level`) a tensor is an array a chip
    /// can see (docs/api.md §4.1.1).
    fn add(&mut self, value: &Bound<'_, PyAny>, tag: u32) -> PyResult<()> {
        let tag = tag_of(tag)?;
        let item = if let Ok(s) = value.extract::<PyRef<'_, PySpec>>() {
            if tag != ArgTag::Output {
                return Err(PyTypeError::new_err(format!(
                    "a TensorSpec is an OUTPUT argument, not {}",
                    tag.name()
                )));
            }
            TaItem::Spec(s.s)
        } else if let Ok(t) = value.extract::<PyRef<'_, PyTensor>>() {
            if tag == ArgTag::Output {
                return Err(PyTypeError::new_err(
                    "an OUTPUT argument must be a TensorSpec (rt.spec(shape, dtype)); an existing tensor is OUTPUT_EXISTING",
                ));
            }
            TaItem::Tensor(tag, t.t, t.run)
        } else if value.cast::<PyUntypedArray>().is_ok() {
            TaItem::Host(tag, value.clone().unbind())
        } else if tag == ArgTag::Output {
            return Err(PyTypeError::new_err("an OUTPUT argument must be a TensorSpec (rt.spec(shape, dtype)), or at L3 an array"));
        } else {
            return Err(PyTypeError::new_err(format!(
                "a {} argument must be a taskring Tensor, or at L3 an array from taskring.shared_array; got {}",
                tag.name(),
                type_name(value)
            )));
        };
        if !self.scalars.is_empty() {
            self.tensor_after_scalar = true;
        }
        self.items.push(item);
        Ok(())
    }
    /// Upstream's spelling of [`add`](Self::add): `add_tensor(t, TensorArgType.X)`,
    /// INPUT when the tag is left out.
    #[pyo3(signature = (value, tag=0))]
    fn add_tensor(&mut self, value: &Bound<'_, PyAny>, tag: u32) -> PyResult<()> {
        self.add(value, tag)
    }
    fn add_scalar(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.scalars.push(scalar_of(v)?);
        self.scalar_objs.push(v.clone().unbind());
        Ok(())
    }
    fn add_dep(&mut self, id: u64) {
        self.deps.push(id);
    }
    fn __len__(&self) -> usize {
        self.items.len()
    }
}

impl PyTaskArgs {
    /// The arguments of an L2 kernel of run `run` (tensors by tag group: inputs, inouts,
    /// outputs, no_dep, in insertion order within each).
    pub fn kernel_args(&self, run: u64) -> PyResult<TaskArgs> {
        let mut a = TaskArgs::new();
        for (i, item) in self.items.iter().enumerate() {
            match item {
                TaItem::Tensor(tag, t, r) => {
                    if *r != run {
                        return Err(stale_tensor(&format!("TaskArgs entry {i}")));
                    }
                    a.tensor(*tag, *t);
                }
                TaItem::Spec(s) => {
                    a.output(*s);
                }
                TaItem::Host(tag, _) => {
                    return Err(PyTypeError::new_err(format!(
                        "TaskArgs entry {i}: a {} argument of a kernel must be a taskring Tensor (arrays are arguments of chip tasks at L3)",
                        tag.name()
                    )))
                }
            }
        }
        if self.tensor_after_scalar {
            // Reproduce the builder's rule: tensors after scalars are an error.
            a.scalar_raw(0, false);
            a.input(Tensor::from_raw(0, &[1], DType::U8));
        }
        for &(bits, f) in &self.scalars {
            a.scalar_raw(bits, f);
        }
        for &d in &self.deps {
            a.dep(TaskId(d));
        }
        Ok(a)
    }

    /// The arguments in a program's signature order (`dirs`: 0 IN, 1 OUT, 2 INOUT,
    /// 3 SCALAR): tensors fill the non-SCALAR positions in the order they were added,
    /// scalars the SCALAR positions. Each tag must agree with its position's direction
    /// (INPUT or NO_DEP ↔ IN, OUTPUT or OUTPUT_EXISTING ↔ OUT, INOUT ↔ INOUT).
    pub fn in_signature_order<'py>(
        &self,
        py: Python<'py>,
        dirs: &[u32],
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        const DIR: [&str; 4] = ["IN", "OUT", "INOUT", "SCALAR"];
        let (nt, ns) = (
            dirs.iter().filter(|&&d| d != 3).count(),
            dirs.iter().filter(|&&d| d == 3).count(),
        );
        if nt != self.items.len() || ns != self.scalars.len() {
            return Err(PyValueError::new_err(format!(
                "TaskArgs has {} tensors and {} scalars; the program's signature [{}] takes {nt} and {ns}",
                self.items.len(),
                self.scalars.len(),
                dirs.iter().map(|&d| DIR.get(d as usize).copied().unwrap_or("?")).collect::<Vec<_>>().join(", ")
            )));
        }
        let (mut ti, mut si) = (0, 0);
        let mut out = Vec::with_capacity(dirs.len());
        for (pos, &d) in dirs.iter().enumerate() {
            if d == 3 {
                out.push(self.scalar_objs[si].bind(py).clone());
                si += 1;
                continue;
            }
            let (tag, value) = match &self.items[ti] {
                TaItem::Host(tag, v) => (*tag, v.bind(py).clone()),
                TaItem::Tensor(tag, t, run) => (*tag, Bound::new(py, PyTensor { t: *t, run: *run })?.into_any()),
                TaItem::Spec(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "argument {pos}: a TensorSpec (a runtime output) cannot be a chip task's argument; pass a shared array or o.alloc(...)"
                    )))
                }
            };
            ti += 1;
            let agrees = matches!(
                (tag, d),
                (ArgTag::Input | ArgTag::NoDep, 0)
                    | (ArgTag::Output | ArgTag::OutputExisting, 1)
                    | (ArgTag::Inout, 2)
            );
            if !agrees {
                return Err(PyValueError::new_err(format!(
                    "argument {pos}: tag {} does not agree with the program's signature, which has {} there",
                    tag.name(),
                    DIR.get(d as usize).copied().unwrap_or("?")
                )));
            }
            out.push(value);
        }
        Ok(out)
    }
}

fn tag_of(tag: u32) -> PyResult<ArgTag> {
    Ok(match tag {
        0 => ArgTag::Input,
        1 => ArgTag::Output,
        2 => ArgTag::Inout,
        3 => ArgTag::OutputExisting,
        4 => ArgTag::NoDep,
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown TensorArgType {tag}"
            )))
        }
    })
}
