//! Python classes over taskring's configuration types: `RuntimeEnv`, `CallConfig`, `RingSizing`, and
//! `resolve_ring_sizing`. Rules and message texts are the Rust core's (docs/api.md §1): this file
//! only turns Python values into [`IntArg`]s and configuration errors into Python exceptions,
//! for `CallConfig`/`RuntimeEnv` and for the dataclass `RunConfig`
//! (`CallConfig._check_run_config_field`).

use crate::conversion::bounded_int;
use crate::errors::config_err;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyTuple};
use taskring::{
    CallConfig, ConfigErrorKind, EnvSnapshot, IntArg, RingField, RingSizing, RuntimeEnv,
};

/// The ring field named `name`, or a `ValueError` listing the names.
fn ring_field(name: &str) -> PyResult<RingField> {
    RingField::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown field {name:?}; expected ring_task_window, ring_heap or ring_dep_pool"
        ))
    })
}

/// A non-negative Python int that is not a bool (`RuntimeEnv`, `CallConfig`).
fn plain_u64(v: &Bound<'_, PyAny>) -> Option<u64> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return None;
    }
    v.extract::<u64>().ok()
}

/// `v` as `RunConfig`'s rules see it: only an exact `int` is an integer (not a
/// bool, an int subclass or a numpy scalar); Python ints have no upper bound.
fn run_config_int(v: &Bound<'_, PyAny>) -> PyResult<IntArg> {
    if !v.is_exact_instance_of::<PyInt>() {
        return Ok(IntArg::NotASize);
    }
    if let Ok(x) = v.extract::<u64>() {
        return Ok(IntArg::U64(x));
    }
    if v.lt(0)? {
        return Ok(IntArg::NotASize);
    }
    let power_of_two = v.bitand(v.sub(1)?)?.eq(0)?;
    Ok(IntArg::Huge { power_of_two })
}

/// Is `v` a string that spells `"auto"` (the one rule: [`RuntimeEnv::is_auto_word`])?
fn is_auto(v: &Bound<'_, PyAny>) -> bool {
    v.extract::<String>()
        .is_ok_and(|s| RuntimeEnv::is_auto_word(&s))
}

/// Four ring entries as Python writes them: `[16, 'auto', 0, 0]`.
fn entries_repr(v: &[u64; 4]) -> String {
    let e: Vec<String> = v
        .iter()
        .map(|&x| {
            if x == RuntimeEnv::AUTO {
                "'auto'".to_owned()
            } else {
                x.to_string()
            }
        })
        .collect();
    format!("[{}]", e.join(", "))
}

fn repr(v: &Bound<'_, PyAny>) -> String {
    v.repr().map(|r| r.to_string()).unwrap_or_default()
}

/// The value a `RunConfig` ring field keeps for a valid `v`: each spelling of auto as
/// `"auto"`, a tuple as a list, anything else as it is.
fn run_config_ring_value<'py>(v: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = v.py();
    let one = |x: Bound<'py, PyAny>| -> Bound<'py, PyAny> {
        if is_auto(&x) {
            pyo3::types::PyString::new(py, "auto").into_any()
        } else {
            x
        }
    };
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'py, PyAny>> =
            v.try_iter()?.map(|x| x.map(one)).collect::<PyResult<_>>()?;
        return Ok(PyList::new(py, items)?.into_any());
    }
    Ok(one(v.clone()))
}

/// `RunConfig`'s rule for `field` (a ring field, `aicpu_thread_num` or
/// `enable_chip_swimlane`) applied to `v`; `None` passes for the ring fields
/// and the thread count (unset).
fn check_run_config_field(field: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
    let checked = match field {
        "aicpu_thread_num" if v.is_none() => Ok(()),
        "aicpu_thread_num" => {
            CallConfig::check_run_config_thread_num(run_config_int(v)?, || repr(v))
        }
        "enable_chip_swimlane" if v.is_instance_of::<PyBool>() => Ok(()),
        "enable_chip_swimlane" => {
            CallConfig::check_run_config_swimlane(run_config_int(v)?, || repr(v))
        }
        _ if v.is_none() || is_auto(v) => ring_field(field).map(|_| Ok(()))?,
        _ if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() => {
            let items: Vec<Bound<'_, PyAny>> = v.try_iter()?.collect::<PyResult<_>>()?;
            // An "auto" entry passes (as 0 does: the rules are for sizes).
            let ints = items
                .iter()
                .map(|x| {
                    if is_auto(x) {
                        Ok(IntArg::U64(0))
                    } else {
                        run_config_int(x)
                    }
                })
                .collect::<PyResult<Vec<_>>>()?;
            ring_field(field)?.check_run_config_list(&ints, |i| repr(&items[i]))
        }
        _ => ring_field(field)?.check_run_config(run_config_int(v)?, || repr(v)),
    };
    checked.map_err(config_err)
}

/// Parse an int (broadcast) or a sequence of exactly 4 ints, with the API's messages.
fn ring_values(field: RingField, v: &Bound<'_, PyAny>) -> PyResult<[u64; 4]> {
    let generic = || config_err(ConfigErrorKind::RuntimeEnvValue { field });
    let entry = |x: &Bound<'_, PyAny>| {
        if is_auto(x) {
            Some(RuntimeEnv::AUTO)
        } else {
            plain_u64(x)
        }
    };
    if let Some(x) = entry(v) {
        return Ok([x; 4]);
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'_, PyAny>> = v.try_iter()?.collect::<PyResult<_>>()?;
        if items.len() != 4 {
            return Err(config_err(ConfigErrorKind::RuntimeEnvLength { field }));
        }
        let mut out = [0u64; 4];
        for (i, it) in items.iter().enumerate() {
            out[i] = entry(it).ok_or_else(generic)?;
        }
        return Ok(out);
    }
    Err(generic())
}

/// Window, heap and dep pool, four entries each, as Python lists.
type RingLists = (Vec<u64>, Vec<u64>, Vec<u64>);

/// Per-ring ring sizes of one dispatch (0 = unset for that ring).
#[pyclass(module = "taskring", name = "RuntimeEnv", eq, skip_from_py_object)]
#[derive(Clone, PartialEq)]
pub struct PyRuntimeEnv {
    pub inner: RuntimeEnv,
}

#[pymethods]
impl PyRuntimeEnv {
    /// The entry meaning "size this resource to the program's measured need"
    /// (`"auto"` is accepted wherever it is).
    #[classattr]
    const AUTO: u64 = RuntimeEnv::AUTO;

    /// `RuntimeEnv(ring_task_window=0, ring_heap=0, ring_dep_pool=0)`: each an int
    /// (broadcast) or 4 ints; `0` = unset. (Parsed by hand so that an explicit `None`
    /// is rejected like any other non-int.)
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        if args.len() > 3 {
            return Err(PyTypeError::new_err(format!(
                "RuntimeEnv() takes at most 3 arguments ({} given)",
                args.len()
            )));
        }
        let mut given: [Option<Bound<'_, PyAny>>; 3] = [None, None, None];
        for (i, a) in args.iter().enumerate() {
            given[i] = Some(a);
        }
        if let Some(kw) = kwargs {
            for (k, v) in kw.iter() {
                let k: String = k.extract()?;
                let i = RingField::ALL
                    .iter()
                    .position(|f| f.name() == k)
                    .ok_or_else(|| {
                        PyTypeError::new_err(format!(
                            "RuntimeEnv() got an unexpected keyword argument '{k}'"
                        ))
                    })?;
                if given[i].is_some() {
                    return Err(PyTypeError::new_err(format!(
                        "RuntimeEnv() got multiple values for argument '{k}'"
                    )));
                }
                given[i] = Some(v);
            }
        }
        let mut e = RuntimeEnv::default();
        for (f, g) in RingField::ALL.into_iter().zip(&given) {
            if let Some(v) = g {
                *e.get_mut(f) = ring_values(f, v)?;
            }
        }
        Ok(PyRuntimeEnv { inner: e })
    }

    #[getter]
    fn get_ring_task_window(&self) -> Vec<u64> {
        self.inner.ring_task_window.to_vec()
    }
    #[setter]
    fn set_ring_task_window(&mut self, v: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.set(RingField::TaskWindow, v)
    }
    #[getter]
    fn get_ring_heap(&self) -> Vec<u64> {
        self.inner.ring_heap.to_vec()
    }
    #[setter]
    fn set_ring_heap(&mut self, v: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.set(RingField::Heap, v)
    }
    #[getter]
    fn get_ring_dep_pool(&self) -> Vec<u64> {
        self.inner.ring_dep_pool.to_vec()
    }
    #[setter]
    fn set_ring_dep_pool(&mut self, v: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.set(RingField::DepPool, v)
    }

    fn __repr__(&self) -> String {
        let e = &self.inner;
        format!(
            "RuntimeEnv(ring_task_window={}, ring_heap={}, ring_dep_pool={})",
            entries_repr(&e.ring_task_window),
            entries_repr(&e.ring_heap),
            entries_repr(&e.ring_dep_pool)
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, RingLists)> {
        let e = slf.borrow().inner;
        Ok((
            slf.get_type().into_any(),
            (
                e.ring_task_window.to_vec(),
                e.ring_heap.to_vec(),
                e.ring_dep_pool.to_vec(),
            ),
        ))
    }

    fn copy(&self) -> Self {
        self.clone()
    }
}

impl PyRuntimeEnv {
    fn set(&mut self, field: RingField, v: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let Some(v) = v else {
            return Err(config_err(ConfigErrorKind::RuntimeEnvValue { field }));
        };
        *self.inner.get_mut(field) = ring_values(field, v)?;
        Ok(())
    }
}

/// Per-dispatch configuration (low level, Simpler-style).
#[pyclass(module = "taskring", name = "CallConfig")]
pub struct PyCallConfig {
    #[pyo3(get)]
    pub aicpu_thread_num: u32,
    pub runtime_env: Py<PyRuntimeEnv>,
    #[pyo3(get, set)]
    pub enable_scope_stats: bool,
    #[pyo3(get)]
    pub enable_chip_swimlane: u32,
    #[pyo3(get, set)]
    pub enable_dep_gen: bool,
    #[pyo3(get, set)]
    pub output_prefix: String,
}

impl PyCallConfig {
    /// The Rust value of this config.
    pub fn to_rust(&self, py: Python<'_>) -> CallConfig {
        CallConfig {
            aicpu_thread_num: self.aicpu_thread_num,
            runtime_env: self.runtime_env.borrow(py).inner,
            enable_scope_stats: self.enable_scope_stats,
            enable_chip_swimlane: self.enable_chip_swimlane,
            enable_dep_gen: self.enable_dep_gen,
            output_prefix: self.output_prefix.clone(),
        }
    }

    pub fn from_rust(py: Python<'_>, c: &CallConfig) -> PyResult<PyCallConfig> {
        Ok(PyCallConfig {
            aicpu_thread_num: c.aicpu_thread_num,
            runtime_env: Py::new(
                py,
                PyRuntimeEnv {
                    inner: c.runtime_env,
                },
            )?,
            enable_scope_stats: c.enable_scope_stats,
            enable_chip_swimlane: c.enable_chip_swimlane,
            enable_dep_gen: c.enable_dep_gen,
            output_prefix: c.output_prefix.clone(),
        })
    }
}

/// An int (not a bool); range rules are `validate()`'s.
fn thread_num(v: &Bound<'_, PyAny>) -> PyResult<u32> {
    plain_u64(v)
        .and_then(|x| u32::try_from(x).ok())
        .ok_or_else(|| config_err(ConfigErrorKind::AicpuThreadNum { got: repr(v) }))
}

fn swimlane_value(v: &Bound<'_, PyAny>) -> PyResult<u32> {
    if v.is_instance_of::<PyBool>() {
        return Ok(if v.extract::<bool>()? { 4 } else { 0 });
    }
    v.extract::<u32>()
        .map_err(|_| PyTypeError::new_err(ConfigErrorKind::ChipSwimlaneType.to_string()))
}

#[pymethods]
impl PyCallConfig {
    #[new]
    #[pyo3(signature = (aicpu_thread_num=None, runtime_env=None, enable_scope_stats=false, enable_chip_swimlane=None, enable_dep_gen=false, output_prefix=String::new()))]
    fn new(
        py: Python<'_>,
        aicpu_thread_num: Option<&Bound<'_, PyAny>>,
        runtime_env: Option<PyRef<'_, PyRuntimeEnv>>,
        enable_scope_stats: bool,
        enable_chip_swimlane: Option<&Bound<'_, PyAny>>,
        enable_dep_gen: bool,
        output_prefix: String,
    ) -> PyResult<Self> {
        let env = runtime_env.map(|e| e.inner).unwrap_or_default();
        Ok(PyCallConfig {
            aicpu_thread_num: aicpu_thread_num.map(thread_num).transpose()?.unwrap_or(0),
            runtime_env: Py::new(py, PyRuntimeEnv { inner: env })?,
            enable_scope_stats,
            enable_chip_swimlane: enable_chip_swimlane
                .map(swimlane_value)
                .transpose()?
                .unwrap_or(0),
            enable_dep_gen,
            output_prefix,
        })
    }

    /// A bool (True -> 4, False -> 0) or an int in [0, 4].
    #[setter]
    fn set_enable_chip_swimlane(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.enable_chip_swimlane = swimlane_value(v)?;
        Ok(())
    }

    #[setter]
    fn set_aicpu_thread_num(&mut self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.aicpu_thread_num = thread_num(v)?;
        Ok(())
    }

    /// The config's own `RuntimeEnv`, by reference: writes through it change the config.
    #[getter]
    fn get_runtime_env(&self, py: Python<'_>) -> Py<PyRuntimeEnv> {
        self.runtime_env.clone_ref(py)
    }

    /// Assigning copies the values in.
    #[setter]
    fn set_runtime_env(&mut self, py: Python<'_>, v: PyRef<'_, PyRuntimeEnv>) {
        self.runtime_env.borrow_mut(py).inner = v.inner;
    }

    /// Check the config; raises ValueError with the first rule broken.
    fn validate(&self, py: Python<'_>) -> PyResult<()> {
        self.to_rust(py).validate().map_err(config_err)
    }

    /// `RunConfig`'s rule for one field (docs/api.md §1.1): raises `ValueError` with the
    /// contract's message when `value` breaks it, else returns the value the field keeps
    /// (a ring field: auto spelled `"auto"`, a tuple as a list). `field` is a ring field,
    /// `aicpu_thread_num` or `enable_chip_swimlane`; `None` passes for all but the last.
    /// (Called by `taskring.RunConfig.__post_init__`, so the rules live in Rust only.)
    #[staticmethod]
    fn _check_run_config_field<'py>(
        field: &str,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        check_run_config_field(field, value)?;
        if RingField::from_name(field).is_some() {
            return run_config_ring_value(value);
        }
        Ok(value.clone())
    }

    fn copy(&self, py: Python<'_>) -> PyResult<Self> {
        PyCallConfig::from_rust(py, &self.to_rust(py))
    }

    fn __copy__(&self, py: Python<'_>) -> PyResult<Self> {
        self.copy(py)
    }

    fn __deepcopy__(&self, py: Python<'_>, _memo: &Bound<'_, PyAny>) -> PyResult<Self> {
        self.copy(py)
    }

    /// A new config with `changes` applied (ring fields as flat keywords or
    /// `runtime_env=`). The original is not modified.
    #[pyo3(signature = (**changes))]
    fn derive(&self, py: Python<'_>, changes: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut c = self.to_rust(py);
        if let Some(ch) = changes {
            for (k, v) in ch.iter() {
                let k: String = k.extract()?;
                match k.as_str() {
                    "aicpu_thread_num" => c.aicpu_thread_num = thread_num(&v)?,
                    "enable_scope_stats" => c.enable_scope_stats = v.extract()?,
                    "enable_chip_swimlane" => c.enable_chip_swimlane = swimlane_value(&v)?,
                    "enable_dep_gen" => c.enable_dep_gen = v.extract()?,
                    "output_prefix" => c.output_prefix = v.extract()?,
                    "runtime_env" => c.runtime_env = v.extract::<PyRef<'_, PyRuntimeEnv>>()?.inner,
                    ring if RingField::from_name(ring).is_some() => {
                        let f = ring_field(ring)?;
                        *c.runtime_env.get_mut(f) = ring_values(f, &v)?;
                    }
                    other => {
                        return Err(PyTypeError::new_err(format!(
                            "CallConfig.derive() got an unexpected keyword '{other}'; allowed: aicpu_thread_num, enable_chip_swimlane, enable_dep_gen, enable_scope_stats, output_prefix, ring_dep_pool, ring_heap, ring_task_window, runtime_env"
                        )))
                    }
                }
            }
        }
        PyCallConfig::from_rust(py, &c)
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> bool {
        match other.extract::<PyRef<'_, PyCallConfig>>() {
            Ok(o) => self.to_rust(py) == o.to_rust(py),
            Err(_) => false,
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let c = self.to_rust(py);
        let mut s = format!(
            "CallConfig(aicpu_thread_num={}, enable_chip_swimlane={}, enable_dep_gen={}, enable_scope_stats={}",
            c.aicpu_thread_num,
            c.enable_chip_swimlane,
            if c.enable_dep_gen { "True" } else { "False" },
            if c.enable_scope_stats { "True" } else { "False" }
        );
        if !c.runtime_env.is_unset() {
            let e = &c.runtime_env;
            s += &format!(
                ", runtime_env.ring_task_window={}, runtime_env.ring_heap={}, runtime_env.ring_dep_pool={}",
                entries_repr(&e.ring_task_window),
                entries_repr(&e.ring_heap),
                entries_repr(&e.ring_dep_pool)
            );
        }
        if !c.output_prefix.is_empty() {
            let r = pyo3::types::PyString::new(py, &c.output_prefix).repr()?;
            s += &format!(", output_prefix={}", r.to_str()?);
        }
        s.push(')');
        Ok(s)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, CallConfigArgs)> {
        let py = slf.py();
        let c = slf.borrow().to_rust(py);
        Ok((
            slf.get_type().into_any(),
            (
                c.aicpu_thread_num,
                PyRuntimeEnv {
                    inner: c.runtime_env,
                },
                c.enable_scope_stats,
                c.enable_chip_swimlane,
                c.enable_dep_gen,
                c.output_prefix,
            ),
        ))
    }
}

/// `CallConfig(...)`'s positional arguments, as `__reduce__` hands them to pickle.
type CallConfigArgs = (u32, PyRuntimeEnv, bool, u32, bool, String);

/// The resolved, validated sizes of one dispatch.
#[pyclass(
    module = "taskring",
    name = "RingSizing",
    frozen,
    eq,
    hash,
    skip_from_py_object
)]
#[derive(Clone, PartialEq, Hash)]
pub struct PyRingSizing {
    pub inner: RingSizing,
}

#[pymethods]
impl PyRingSizing {
    #[getter]
    fn task_window(&self) -> (u64, u64, u64, u64) {
        let v = self.inner.task_window;
        (v[0], v[1], v[2], v[3])
    }
    #[getter]
    fn heap(&self) -> (u64, u64, u64, u64) {
        let v = self.inner.heap;
        (v[0], v[1], v[2], v[3])
    }
    #[getter]
    fn dep_pool(&self) -> (u64, u64, u64, u64) {
        let v = self.inner.dep_pool;
        (v[0], v[1], v[2], v[3])
    }
    /// Where a value came from: "call_config", "env", "default" or "auto". `field` is a
    /// ring field's name or this class's attribute for it (`"ring_heap"` or `"heap"`).
    fn source(&self, field: &str, ring: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        let f = RingField::from_name_or_attr(field).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown field {field:?}; expected ring_task_window, ring_heap or ring_dep_pool (or task_window, heap or dep_pool)"
            ))
        })?;
        let ring = bounded_int(ring, "ring", 0, 3)? as usize;
        Ok(self.inner.source(f, ring).as_str())
    }
    /// The 12-value tuple the arena cache is keyed on.
    fn key<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.key())
    }
    fn __str__(&self) -> String {
        self.inner.to_string()
    }
    fn __repr__(&self) -> String {
        format!("<RingSizing {}>", self.inner)
    }
}

/// An env snapshot from a mapping (tests, tools) or the process environment now.
fn env_snapshot(env: Option<&Bound<'_, PyAny>>) -> PyResult<EnvSnapshot> {
    let Some(env) = env else {
        return Ok(EnvSnapshot::from_process());
    };
    EnvSnapshot::try_from_lookup(|k| match env.get_item(k) {
        Ok(v) if v.is_none() => Ok(None),
        Ok(v) => Ok(Some(v.str()?.to_string())),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyKeyError>(env.py()) => Ok(None),
        Err(e) => Err(e),
    })
}

/// `config`: a CallConfig, anything with `to_call_config()` (RunConfig), or None.
pub fn call_config_of(py: Python<'_>, config: Option<&Bound<'_, PyAny>>) -> PyResult<CallConfig> {
    let Some(c) = config else {
        return Ok(CallConfig::default());
    };
    if c.is_none() {
        return Ok(CallConfig::default());
    }
    if let Ok(cc) = c.extract::<PyRef<'_, PyCallConfig>>() {
        return Ok(cc.to_rust(py));
    }
    if c.hasattr("to_call_config")? {
        let cc = c.call_method0("to_call_config")?;
        let cc = cc.extract::<PyRef<'_, PyCallConfig>>()?;
        return Ok(cc.to_rust(py));
    }
    Err(PyTypeError::new_err(format!(
        "config must be a CallConfig, a RunConfig or None, got {}",
        c.get_type().name()?
    )))
}

/// Resolve the ring sizing a dispatch with `config` would use, against `env` (a
/// mapping) or the process environment. Invalid env variables are ignored with a
/// warning on stderr.
#[pyfunction]
#[pyo3(signature = (config=None, env=None))]
pub fn resolve_ring_sizing(
    py: Python<'_>,
    config: Option<&Bound<'_, PyAny>>,
    env: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyRingSizing> {
    let c = call_config_of(py, config)?;
    c.validate().map_err(config_err)?;
    let snap = env_snapshot(env)?;
    let (s, warnings) = RingSizing::resolve(&c.runtime_env, &snap).map_err(config_err)?;
    for w in warnings {
        eprintln!("{w}");
    }
    Ok(PyRingSizing { inner: s })
}
