//! Python parameters bound by hand, for methods that gather their optional parameters in
//! an options struct (a method's Rust parameters stay few however many its Python
//! signature has). Binding follows PyO3's own: the same checks in the same order, with
//! the same messages, so a call behaves as if PyO3 had bound the signature.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

/// A Python signature: positional-or-keyword parameters (the first `required` of them
/// required), then keyword-only ones (optional).
pub struct Params {
    /// The function as messages name it: `Class.method()`.
    pub func: &'static str,
    pub positional: &'static [&'static str],
    pub required: usize,
    pub keyword_only: &'static [&'static str],
}

/// The arguments of one call, one slot per parameter (positional ones first).
pub struct Args<'py> {
    names: Vec<&'static str>,
    slots: Vec<Option<Bound<'py, PyAny>>>,
}

impl Params {
    /// Bind a call's `args` and `kwargs`: too many positional arguments, a keyword that
    /// names no parameter or one already given, and a missing required argument are
    /// `TypeError`s, in that order.
    pub fn bind<'py>(
        &self,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Args<'py>> {
        let np = self.positional.len();
        if args.len() > np {
            return Err(self.too_many_positional(args.len()));
        }
        let names: Vec<&'static str> = self
            .positional
            .iter()
            .chain(self.keyword_only)
            .copied()
            .collect();
        let mut slots: Vec<Option<Bound<'py, PyAny>>> = vec![None; names.len()];
        for (slot, a) in slots.iter_mut().zip(args.iter()) {
            *slot = Some(a);
        }
        for (k, v) in kwargs.into_iter().flatten() {
            let k = k.cast_into::<PyString>()?;
            let name = k.to_str()?;
            let Some(i) = names.iter().position(|n| *n == name) else {
                return Err(PyTypeError::new_err(format!(
                    "{} got an unexpected keyword argument '{name}'",
                    self.func
                )));
            };
            if slots[i].replace(v).is_some() {
                return Err(PyTypeError::new_err(format!(
                    "{} got multiple values for argument '{name}'",
                    self.func
                )));
            }
        }
        let missing: Vec<&str> = self.positional[..self.required]
            .iter()
            .zip(&slots)
            .filter(|(_, s)| s.is_none())
            .map(|(n, _)| *n)
            .collect();
        if !missing.is_empty() {
            return Err(self.missing(&missing));
        }
        Ok(Args { names, slots })
    }

    fn too_many_positional(&self, given: usize) -> PyErr {
        let np = self.positional.len();
        let was = if given == 1 { "was" } else { "were" };
        let takes = if self.required == np {
            format!("{np}")
        } else {
            format!("from {} to {np}", self.required)
        };
        PyTypeError::new_err(format!(
            "{} takes {takes} positional arguments but {given} {was} given",
            self.func
        ))
    }

    fn missing(&self, names: &[&str]) -> PyErr {
        let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        let list = match quoted.as_slice() {
            [one] => one.clone(),
            [a, b] => format!("{a} and {b}"),
            [init @ .., last] => format!("{}, and {last}", init.join(", ")),
            [] => String::new(),
        };
        let arguments = if names.len() == 1 {
            "argument"
        } else {
            "arguments"
        };
        PyTypeError::new_err(format!(
            "{} missing {} required positional {arguments}: {list}",
            self.func,
            names.len()
        ))
    }
}

impl<'py> Args<'py> {
    /// Required parameter `i` as a `T` (binding has checked that it was given).
    pub fn extract_required<T>(&self, i: usize) -> PyResult<T>
    where
        T: for<'a> FromPyObject<'a, 'py>,
        for<'a> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
    {
        self.extract(i)
            .map(|v| v.expect("binding checks that required parameters are given"))
    }

    /// Parameter `i` as a `T`, or None when not given; a value of the wrong type is the
    /// `TypeError` PyO3 raises for it (`argument 'name': ...`).
    pub fn extract<T>(&self, i: usize) -> PyResult<Option<T>>
    where
        T: for<'a> FromPyObject<'a, 'py>,
        for<'a> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
    {
        let Some(v) = &self.slots[i] else {
            return Ok(None);
        };
        v.extract::<T>()
            .map(Some)
            .map_err(|e| argument_error(v.py(), self.names[i], e.into()))
    }

    /// Parameter `i` of type `Option<T>`: None when not given or given as None.
    pub fn extract_optional<T>(&self, i: usize) -> PyResult<Option<T>>
    where
        T: for<'a> FromPyObject<'a, 'py>,
        for<'a> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
    {
        match &self.slots[i] {
            Some(v) if v.is_none() => Ok(None),
            _ => self.extract(i),
        }
    }
}

/// A `TypeError` from converting parameter `name`, named as PyO3 names it.
fn argument_error(py: Python<'_>, name: &str, e: PyErr) -> PyErr {
    if !e.get_type(py).is(py.get_type::<PyTypeError>()) {
        return e;
    }
    let named = PyTypeError::new_err(format!("argument '{name}': {}", e.value(py)));
    named.set_cause(py, e.cause(py));
    named
}
