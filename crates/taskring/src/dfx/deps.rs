//! `deps.json` (`CallConfig.enable_dep_gen`): the format of a run's task graph.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `deps.json` (`CallConfig.enable_dep_gen`): the run's tasks with their tensor
/// arguments, the buffers those arguments refer to, and every dependency edge.
///
/// ```json
/// {"tasks": [{"id": 4294967296, "kernel": "add", "ring": 1, "scope": 1,
///             "args": [{"idx": 0, "tag": "INPUT", "tensor": 0, "shape": [4, 256],
///                       "dtype": "float32", "offset": 0}, ...]}, ...],
///  "tensors": [{"id": 0, "addr": 140212345678912, "dtype": "float32", "numel": 1024}, ...],
///  "edges": [{"pred": 4294967296, "succ": 4294967297, "source": "tensormap",
///             "flags": ["wait", "retain"]}, ...]}
/// ```
///
/// - `tasks`, ordered by id (`(ring << 32) | local`): `kernel` is the kernel's name
///   (`"dummy"` for a dummy task, `"alloc"` for an output-only allocation); `scope` is
///   the scope instance the task was submitted in: scopes are numbered in the order
///   they open during the run, 0 being the run's root scope. `args` are the tensor
///   arguments in argument order (`idx`: position among the task's tensor arguments;
///   scalars are not listed), each with its tag (`INPUT`, `OUTPUT`, `INOUT`,
///   `OUTPUT_EXISTING`, `NO_DEP`), the `tensors` entry of its buffer, the view's shape
///   and dtype and its offset in elements from the buffer's start.
/// - `tensors`, one per distinct buffer, ordered by id (ids in order of first use):
///   host arrays by base address, runtime outputs by their heap allocation (the address
///   and the task that allocated it). `numel` is the buffer's size in elements of
///   `dtype` (the dtype of its first use).
/// - `edges`, ordered by `(succ, pred, source)`: `source` is `"explicit"` for a
///   `deps` / `add_dep` dependency, `"tensormap"` for one the runtime inferred (an
///   overlapping earlier writer found in the tensormap — flags `["wait"]` —, or the
///   task that allocated a runtime output the task uses — `["wait", "retain"]`). One
///   edge per `(pred, succ, source)`, flags merged; a dependency both declared and
///   inferred is two edges.
///
/// Edges are what the program implies under the runtime's rules (`docs/api.md` §3.1: RAW
/// and WAW through view overlap, WAR not tracked, nothing inferred in manual scopes),
/// independent of timing: a producer that had already completed or retired when its
/// consumer was submitted is still an edge, though the engine does not wait on it. So
/// the file (up to `addr`) is the same on every run of a program.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DepsFile {
    pub tasks: Vec<DepsTask>,
    pub tensors: Vec<DepsTensor>,
    pub edges: Vec<DepsEdge>,
}

/// A task of [`DepsFile`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepsTask {
    pub id: u64,
    pub kernel: String,
    pub ring: u32,
    pub scope: u32,
    pub args: Vec<DepsArg>,
}

/// A tensor argument of a [`DepsTask`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepsArg {
    pub idx: u32,
    pub tag: String,
    pub tensor: u32,
    pub shape: Vec<u32>,
    pub dtype: String,
    pub offset: u64,
}

/// A buffer of [`DepsFile`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepsTensor {
    pub id: u32,
    pub addr: u64,
    pub dtype: String,
    pub numel: u64,
}

/// An edge of [`DepsFile`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepsEdge {
    pub pred: u64,
    pub succ: u64,
    /// `"tensormap"` or `"explicit"`.
    pub source: String,
    /// `"wait"` and/or `"retain"`, in that order.
    pub flags: Vec<String>,
}

/// Write `<prefix>/deps.json` (an empty graph when `graph` is `None`).
pub(crate) fn write_deps(prefix: &Path, file: &DepsFile) -> std::io::Result<PathBuf> {
    use std::io::Write;
    std::fs::create_dir_all(prefix)?;
    let path = prefix.join("deps.json");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    serde_json::to_writer(&mut f, file)?;
    f.flush()?;
    Ok(path)
}
