//! Diagnostics for tools: scope stats (`scope_stats/scope_stats.jsonl`) and the sizing
//! advisor that reads them back.
//!
//! Scope stats (schema version 6, as upstream's `docs/dfx/scope-stats.md`): line 1 is a
//! metadata object — `fatal`, `dropped`, `total`, the effective sizes per ring
//! (`task_window_max`, `heap_max`, `dep_pool_max`), `tensormap_max` — to which we add the
//! peak use per ring (`peak_task_window`, `peak_heap`, `peak_dep_pool`), the tensormap's
//! peak (`peak_tensormap`), the arena's device footprint (`arena_device_bytes`) and, for
//! a failed run, the failure (`failure`: code, name, ring, resource, configured, needed). Every
//! later line is one scope boundary sample: `site`, `phase` (`begin`/`end`), `depth`,
//! `ring`, `task_window_start`/`_end` (retired / next local id: monotonic counters),
//! `heap_start`/`_end` (bytes retired / allocated since the run began, wraps unrolled),
//! `dep_pool_start`/`_end` (tail / top of the dependency pool), `tensormap` (entries).
//!
//! Recording costs nothing unless enabled (`CallConfig.enable_scope_stats`); samples are
//! kept in memory (at most [`MAX_SAMPLES`]; the rest are counted in `dropped`) and
//! written when the run ends, also when it fails (`"fatal": true`).

pub mod clock;

use crate::config::RingField;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Most samples kept per run.
pub const MAX_SAMPLES: usize = 1 << 20;

/// One scope boundary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ScopeSample {
    pub site: String,
    pub phase: String,
    pub depth: u32,
    pub ring: u32,
    pub task_window_start: u64,
    pub task_window_end: u64,
    pub heap_start: u64,
    pub heap_end: u64,
    pub dep_pool_start: u64,
    pub dep_pool_end: u64,
    pub tensormap: u64,
}

/// The failure of a fatal run, as recorded in line 1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    pub code: u32,
    pub name: String,
    pub ring: Option<usize>,
    pub resource: Option<String>,
    pub configured: Option<u64>,
    pub needed: Option<u64>,
    /// Where `needed` is unknown: the lower bound the failure saw (absent in files
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_least: Option<u64>,
}

/// Line 1 of the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ScopeStatsHeader {
    pub version: u32,
    pub fatal: bool,
    pub dropped: u64,
    pub total: u64,
    pub task_window_max: [u64; 4],
    pub heap_max: [u64; 4],
    pub dep_pool_max: [u64; 4],
    pub tensormap_max: u64,
    #[serde(default)]
    pub peak_task_window: Option<[u64; 4]>,
    #[serde(default)]
    pub peak_heap: Option<[u64; 4]>,
    #[serde(default)]
    pub peak_dep_pool: Option<[u64; 4]>,
    #[serde(default)]
    pub failure: Option<FailureRecord>,
    /// The most tensormap entries in use at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_tensormap: Option<u64>,
    /// The device footprint of the run's arena (`arena::device_footprint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arena_device_bytes: Option<u64>,
}

/// Samples of one run (kept by the orchestrator while enabled).
#[derive(Clone, Debug, Default)]
pub(crate) struct ScopeStats {
    pub samples: Vec<ScopeSample>,
    pub dropped: u64,
}

impl ScopeStats {
    pub(crate) fn push(&mut self, s: ScopeSample) {
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(s);
        } else {
            self.dropped += 1;
        }
    }
}

/// Write `header` and `stats` to `<prefix>/scope_stats/scope_stats.jsonl`.
pub(crate) fn write_scope_stats(
    prefix: &Path,
    header: &ScopeStatsHeader,
    stats: &ScopeStats,
) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let dir = prefix.join("scope_stats");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("scope_stats.jsonl");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
    serde_json::to_writer(&mut w, header)?;
    w.write_all(b"\n")?;
    for s in &stats.samples {
        serde_json::to_writer(&mut w, s)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;
    Ok(path)
}

// ----- deps.json -----------------------------------------------------------------------

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

/// One kernel execution on a core (`CallConfig.enable_chip_swimlane`): 40 bytes, kept
/// in memory until the run ends (a task is one event).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SwimlaneEvent {
    pub task: u64,
    /// Nanoseconds since the run started.
    pub start_ns: u64,
    pub kernel: &'static str,
    /// Nanoseconds the kernel ran (saturating at about 4.3 s).
    pub dur_ns: u32,
    pub core: u32,
}

/// One core's events of a run, in chunks of [`Lane::CHUNK`] that never move: memory
/// is 40 bytes an event plus at most one chunk (no doubling, no copy on growth).
#[derive(Default)]
pub(crate) struct Lane {
    chunks: Vec<Vec<SwimlaneEvent>>,
}

impl Lane {
    pub const CHUNK: usize = 4096;

    pub fn push(&mut self, e: SwimlaneEvent) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < Self::CHUNK => c.push(e),
            _ => {
                let mut c = Vec::with_capacity(Self::CHUNK);
                c.push(e);
                self.chunks.push(c);
            }
        }
    }

    pub fn clear(&mut self) {
        self.chunks.clear();
    }

    /// The events, leaving the lane empty.
    pub fn take(&mut self) -> impl Iterator<Item = SwimlaneEvent> {
        std::mem::take(&mut self.chunks).into_iter().flatten()
    }
}

/// Write `<prefix>/merged_swimlane.json` (Chrome trace events; opens in Perfetto),
/// streamed event by event: the file costs no memory beyond the events themselves.
pub(crate) fn write_swimlane(
    prefix: &Path,
    events: impl IntoIterator<Item = SwimlaneEvent>,
    core_names: &[String],
) -> std::io::Result<PathBuf> {
    use std::io::Write;
    std::fs::create_dir_all(prefix)?;
    let path = prefix.join("merged_swimlane.json");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    f.write_all(b"{\"traceEvents\":[")?;
    let mut first = true;
    let mut sep = |f: &mut std::io::BufWriter<std::fs::File>| {
        let s: &[u8] = if first { b"" } else { b"," };
        first = false;
        f.write_all(s)
    };
    for (i, n) in core_names.iter().enumerate() {
        sep(&mut f)?;
        write!(
            f,
            "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":{i},\"args\":{{\"name\":"
        )?;
        serde_json::to_writer(&mut f, n)?;
        f.write_all(b"}}")?;
    }
    for e in events {
        sep(&mut f)?;
        f.write_all(b"{\"name\":")?;
        serde_json::to_writer(&mut f, e.kernel)?;
        write!(f, ",\"ph\":\"X\",\"pid\":0,\"tid\":{},\"ts\":", e.core)?;
        serde_json::to_writer(&mut f, &(e.start_ns as f64 / 1000.0))?;
        f.write_all(b",\"dur\":")?;
        serde_json::to_writer(&mut f, &(e.dur_ns as f64 / 1000.0))?;
        write!(
            f,
            ",\"args\":{{\"task\":\"{:?}\",\"ring\":{}}}}}",
            crate::tensor::TaskId(e.task),
            e.task >> 32
        )?;
    }
    f.write_all(b"],\"displayTimeUnit\":\"ns\"}")?;
    f.flush()?;
    Ok(path)
}

/// Peaks per ring read back from a scope-stats file.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedPeaks {
    pub task_window: [u64; 4],
    pub heap: [u64; 4],
    pub dep_pool: [u64; 4],
    pub failure: Option<FailureRecord>,
    /// For a failed run, the sizes it ran with: its peaks cover only the part that ran,
    /// so advice never goes below them.
    pub floor: Option<([u64; 4], [u64; 4], [u64; 4])>,
}

/// Parse a scope-stats file: the recorded peaks per ring (from the header when it has
/// them, else derived from the samples: `end.head - begin.tail` per scope and ring).
pub fn read_peaks(text: &str) -> Result<RecordedPeaks, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().ok_or("empty scope-stats file")?;
    let h: ScopeStatsHeader = serde_json::from_str(first)
        .map_err(|e| format!("line 1 is not scope-stats metadata: {e}"))?;
    if h.version != 6 {
        return Err(format!(
            "unsupported scope-stats version {} (expected 6)",
            h.version
        ));
    }
    let mut p = RecordedPeaks {
        task_window: h.peak_task_window.unwrap_or([0; 4]),
        heap: h.peak_heap.unwrap_or([0; 4]),
        dep_pool: h.peak_dep_pool.unwrap_or([0; 4]),
        failure: h.failure.clone(),
        floor: h
            .fatal
            .then_some((h.task_window_max, h.heap_max, h.dep_pool_max)),
    };
    if h.peak_task_window.is_none() {
        // Derive from the samples: open scopes' begin values per ring, matched to ends.
        let mut open: Vec<ScopeSample> = Vec::new();
        for (i, l) in lines.enumerate() {
            let s: ScopeSample =
                serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 2))?;
            if s.phase == "begin" {
                open.push(s);
            } else if let Some(b) = open.pop() {
                let r = (s.ring as usize).min(3);
                p.task_window[r] =
                    p.task_window[r].max(s.task_window_end.saturating_sub(b.task_window_start));
                p.heap[r] = p.heap[r].max(s.heap_end.saturating_sub(b.heap_start));
                p.dep_pool[r] = p.dep_pool[r].max(s.dep_pool_end.saturating_sub(b.dep_pool_start));
            }
        }
    }
    Ok(p)
}

/// Suggested ring sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct SizingAdvice {
    pub task_window: [u64; 4],
    pub heap: [u64; 4],
    pub dep_pool: [u64; 4],
    pub headroom: f64,
    /// Recorded needs that no valid size holds (the advice for them is the largest
    /// valid size, which is still too small: the program must change).
    pub unfit: Vec<Unfit>,
}

/// A recorded need beyond the largest valid size of its resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unfit {
    /// `ring_task_window`, `ring_heap` or `ring_dep_pool`.
    pub field: &'static str,
    pub ring: usize,
    /// The size the recorded peak (or the failure's `needed`) asks for, in the
    /// resource's unit (slots, bytes, entries).
    pub need: u64,
    /// The largest valid size.
    pub max: u64,
}

/// `v × headroom` rounded up, saturating, and never below `v` (a float product of a
/// large `v` may round down).
fn scaled(v: u64, headroom: f64) -> u64 {
    // (`as` saturates: NaN -> 0, beyond u64::MAX -> u64::MAX.)
    (((v as f64) * headroom).ceil() as u64).max(v)
}

/// The smallest valid size of `field` (config rules) that is at least `need`, or the
/// largest valid size and `false` when none is.
fn valid_at_least(field: RingField, need: u64) -> (u64, bool) {
    use crate::config::{
        MAX_RING_DEP_POOL, MAX_RING_TASK_WINDOW, MIN_RING_DEP_POOL, MIN_RING_HEAP,
        MIN_RING_TASK_WINDOW,
    };
    let (min, max, pow2) = match field {
        RingField::TaskWindow => (MIN_RING_TASK_WINDOW, MAX_RING_TASK_WINDOW, true),
        RingField::Heap => (MIN_RING_HEAP, 1u64 << 63, true),
        RingField::DepPool => (MIN_RING_DEP_POOL, MAX_RING_DEP_POOL, false),
    };
    let v = need.max(min);
    let v = if pow2 {
        v.checked_next_power_of_two().unwrap_or(u64::MAX)
    } else {
        v
    };
    let r = if v <= max { (v, true) } else { (max, false) };
    debug_assert!(field.check(r.0));
    r
}

/// The smallest valid sizes per ring that would have held `p` with `headroom` (≥ 1):
/// window = the next power of two above `peak × headroom` (a ring holds window − 1
/// tasks), at least 4; heap = the next power of two at or above `peak × headroom`, at
/// least 1024; dep pool = `peak × headroom`, at least 4. Every suggestion is a valid
/// size (config rules) and never below the recorded peak; a need beyond the largest
/// valid size is listed in `unfit` (and the suggestion is that largest size). For a
/// failed run the advice never goes below the sizes it ran with (rounded up to valid
/// sizes), and the failure's `needed` size raises its ring's resource to at least that:
/// a failed run only shows the part that ran, so the advice is a next step (run again
/// with it and re-read the stats), not a final answer. Arithmetic saturates.
///
/// The window and heap peaks of a program are deterministic; the dependency-pool peak is
/// not quite: an edge found through the tensormap to a producer that has already
/// completed needs no node, so a slower run can need a few more. Keep headroom there.
///
/// A `headroom` that is not a finite number ≥ 1 counts as 1 (the command line rejects
/// it: [`check_headroom`]).
pub fn advise(p: &RecordedPeaks, headroom: f64) -> SizingAdvice {
    let headroom = if headroom.is_finite() && headroom >= 1.0 {
        headroom
    } else {
        1.0
    };
    let mut a = SizingAdvice {
        task_window: [4; 4],
        heap: [1024; 4],
        dep_pool: [4; 4],
        headroom,
        unfit: Vec::new(),
    };
    let raise = |a: &mut SizingAdvice, field: RingField, r: usize, need: u64| {
        let (v, fits) = valid_at_least(field, need);
        let slot = match field {
            RingField::TaskWindow => &mut a.task_window[r],
            RingField::Heap => &mut a.heap[r],
            RingField::DepPool => &mut a.dep_pool[r],
        };
        *slot = (*slot).max(v);
        if !fits {
            let (max, _) = valid_at_least(field, u64::MAX);
            if let Some(u) = a
                .unfit
                .iter_mut()
                .find(|u| u.field == field.name() && u.ring == r)
            {
                u.need = u.need.max(need);
            } else {
                a.unfit.push(Unfit {
                    field: field.name(),
                    ring: r,
                    need,
                    max,
                });
            }
        }
    };
    for r in 0..4 {
        // A window holds window − 1 live tasks.
        raise(
            &mut a,
            RingField::TaskWindow,
            r,
            scaled(p.task_window[r], headroom).saturating_add(1),
        );
        raise(&mut a, RingField::Heap, r, scaled(p.heap[r], headroom));
        raise(
            &mut a,
            RingField::DepPool,
            r,
            scaled(p.dep_pool[r], headroom),
        );
    }
    if let Some((w, h, d)) = &p.floor {
        for r in 0..4 {
            // The sizes the failed run had (a crafted file may hold invalid ones: they
            // are rounded up to valid sizes, or capped at the largest).
            a.task_window[r] = a.task_window[r].max(valid_at_least(RingField::TaskWindow, w[r]).0);
            a.heap[r] = a.heap[r].max(valid_at_least(RingField::Heap, h[r]).0);
            a.dep_pool[r] = a.dep_pool[r].max(valid_at_least(RingField::DepPool, d[r]).0);
        }
    }
    if let Some(f) = &p.failure {
        // The size that holds the run, else at least the lower bound the failure saw.
        if let (Some(r), Some(res), Some(n)) =
            (f.ring, f.resource.as_deref(), f.needed.or(f.at_least))
        {
            let r = r.min(3);
            if let Some(field) = RingField::ALL.into_iter().find(|fl| fl.name() == res) {
                raise(&mut a, field, r, scaled(n, headroom));
            }
        }
    }
    a
}

/// The `--headroom` rule: a finite number ≥ 1 (`"1.25"`).
pub fn check_headroom(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(h) if h.is_finite() && h >= 1.0 => Ok(h),
        _ => Err(format!("--headroom must be a finite number >= 1 (a factor on the recorded peaks), got '{text}'")),
    }
}

/// What a command prints and its exit status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutput {
    pub status: u8,
    pub stdout: String,
    pub stderr: String,
}

/// Usage of the sizing command.
pub(crate) const SIZING_USAGE: &str = "usage: taskring sizing <scope_stats.jsonl> [--headroom H]
  Suggested ring sizes (runtime_env and PTO2_RING_* lines) from a run's scope stats
  (CallConfig.enable_scope_stats). H: a factor >= 1 on the recorded peaks (default 1.25).";

/// `taskring sizing <scope_stats.jsonl> [--headroom H]` — the one implementation behind
/// the Rust `taskring sizing` and `python -m taskring sizing` (through the native
/// module): same arguments, same output, same exit status (0; 2 for bad arguments or an
/// unreadable file).
pub fn sizing_command(args: &[String]) -> CommandOutput {
    let usage_err = |msg: String| CommandOutput {
        status: 2,
        stdout: String::new(),
        stderr: format!("taskring sizing: {msg}\n{SIZING_USAGE}\n"),
    };
    let mut file: Option<&str> = None;
    let mut headroom = 1.25;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-h" || a == "--help" {
            return CommandOutput {
                status: 0,
                stdout: format!("{SIZING_USAGE}\n"),
                stderr: String::new(),
            };
        }
        let value = if a == "--headroom" {
            i += 1;
            match args.get(i) {
                Some(v) => Some(v.as_str()),
                None => return usage_err("--headroom needs a value".into()),
            }
        } else {
            a.strip_prefix("--headroom=")
        };
        if let Some(v) = value {
            headroom = match check_headroom(v) {
                Ok(h) => h,
                Err(e) => return usage_err(e),
            };
        } else if a.starts_with('-') && a.len() > 1 {
            return usage_err(format!("unknown option '{a}'"));
        } else if file.replace(a).is_some() {
            return usage_err(format!("one scope-stats file only (got '{}' too)", a));
        }
        i += 1;
    }
    let Some(file) = file else {
        return usage_err("the scope-stats file is missing".into());
    };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            return CommandOutput {
                status: 2,
                stdout: String::new(),
                stderr: format!("taskring sizing: cannot read {file}: {e}\n"),
            }
        }
    };
    match sizing_report(&text, headroom) {
        Ok(out) => CommandOutput {
            status: 0,
            stdout: out,
            stderr: String::new(),
        },
        Err(e) => CommandOutput {
            status: 2,
            stdout: String::new(),
            stderr: format!("taskring sizing: {file}: {e}\n"),
        },
    }
}

/// The sizing command's report for a scope-stats file's text.
pub fn sizing_report(text: &str, headroom: f64) -> Result<String, String> {
    use std::fmt::Write;
    let peaks = read_peaks(text)?;
    let a = advise(&peaks, headroom);
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# recorded peaks per ring: task_window={:?} heap={:?} dep_pool={:?}",
        peaks.task_window, peaks.heap, peaks.dep_pool
    );
    if let Some(f) = &peaks.failure {
        let _ = writeln!(
            o,
            "# the run failed: {} (code {}){}",
            f.name,
            f.code,
            // A failure of no ring (DEVICE_OUT_OF_MEMORY, ...) has no sizes to show.
            match (f.ring, f.resource.as_deref()) {
                (Some(r), Some(res)) => format!(
                    " on ring {r}, {res} configured {}, needed {}{}",
                    opt(f.configured),
                    opt(f.needed),
                    f.at_least
                        .map_or(String::new(), |n| format!(" (at least {n})"))
                ),
                (Some(r), None) => format!(" on ring {r}"),
                _ => String::new(),
            }
        );
    }
    for u in &a.unfit {
        let _ = writeln!(
            o,
            "# no valid size fits: ring {} needs {} >= {} but the largest valid {} is {}; the advice below caps it there, which is still too small: change the program (split the scope or the graph)",
            u.ring, u.field, u.need, u.field, u.max
        );
    }
    let _ = writeln!(o, "# suggested sizes (headroom {:.2}):", a.headroom);
    let _ = writeln!(o, "{}", a.runtime_env());
    let _ = writeln!(o, "{}", a.env_lines());
    Ok(o)
}

impl SizingAdvice {
    fn python_value(v: &[u64; 4]) -> String {
        if v.iter().all(|&x| x == v[0]) {
            v[0].to_string()
        } else {
            format!("[{}, {}, {}, {}]", v[0], v[1], v[2], v[3])
        }
    }
    fn env_value(v: &[u64; 4]) -> String {
        if v.iter().all(|&x| x == v[0]) {
            v[0].to_string()
        } else {
            format!("{},{},{},{}", v[0], v[1], v[2], v[3])
        }
    }

    /// A ready-to-paste `runtime_env` mapping (scene-test / `CallConfig` style).
    pub fn runtime_env(&self) -> String {
        format!(
            "runtime_env = {{\"ring_task_window\": {}, \"ring_heap\": {}, \"ring_dep_pool\": {}}}",
            Self::python_value(&self.task_window),
            Self::python_value(&self.heap),
            Self::python_value(&self.dep_pool)
        )
    }

    /// The same as `PTO2_RING_*` environment lines.
    pub(crate) fn env_lines(&self) -> String {
        format!(
            "PTO2_RING_TASK_WINDOW={}\nPTO2_RING_HEAP={}\nPTO2_RING_DEP_POOL={}",
            Self::env_value(&self.task_window),
            Self::env_value(&self.heap),
            Self::env_value(&self.dep_pool)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swimlane_event_is_40_bytes_and_the_file_parses() {
        assert_eq!(std::mem::size_of::<SwimlaneEvent>(), 40);
        let dir = std::env::temp_dir().join(format!("taskring-swim-{}", std::process::id()));
        let ev = [SwimlaneEvent {
            task: (1 << 32) | 5,
            start_ns: 1500,
            kernel: "k\"$x$\\",
            dur_ns: 2500,
            core: 1,
        }];
        let names = ["core 0 (AIC)".to_string(), "core \"1\"".to_string()];
        let path = write_swimlane(&dir, ev, &names).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let evs = v["traceEvents"].as_array().unwrap();
        assert_eq!(evs.len(), 3);
        assert_eq!(evs[1]["args"]["name"], "core \"1\"");
        let x = &evs[2];
        assert_eq!(x["name"], "k\"$x$\\");
        assert_eq!(
            (x["ts"].as_f64(), x["dur"].as_f64()),
            (Some(1.5), Some(2.5))
        );
        assert_eq!(x["tid"], 1);
        assert_eq!(x["args"]["ring"], 1);
        assert_eq!(x["args"]["task"], "task(ring=1, local=5)");
        assert_eq!(v["displayTimeUnit"], "ns");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn header(peaks: Option<([u64; 4], [u64; 4], [u64; 4])>) -> ScopeStatsHeader {
        ScopeStatsHeader {
            version: 6,
            fatal: false,
            dropped: 0,
            total: 2,
            task_window_max: [16384; 4],
            heap_max: [1 << 28; 4],
            dep_pool_max: [16384; 4],
            tensormap_max: 0,
            peak_task_window: peaks.map(|p| p.0),
            peak_heap: peaks.map(|p| p.1),
            peak_dep_pool: peaks.map(|p| p.2),
            failure: None,
            peak_tensormap: None,
            arena_device_bytes: None,
        }
    }

    #[test]
    fn advice_from_header_peaks() {
        let h = header(Some(([3, 3, 3, 3], [0, 1024, 1024, 1024], [0, 2, 2, 2])));
        let text = serde_json::to_string(&h).unwrap();
        let p = read_peaks(&text).unwrap();
        let a = advise(&p, 1.0);
        assert_eq!(a.task_window, [4; 4]);
        assert_eq!(a.heap, [1024; 4]);
        assert_eq!(a.dep_pool, [4; 4]);
        assert_eq!(
            a.runtime_env(),
            "runtime_env = {\"ring_task_window\": 4, \"ring_heap\": 1024, \"ring_dep_pool\": 4}"
        );
        let a = advise(
            &RecordedPeaks {
                task_window: [100, 7, 0, 0],
                heap: [5000, 0, 0, 0],
                dep_pool: [10, 0, 0, 0],
                failure: None,
                floor: None,
            },
            1.25,
        );
        assert_eq!(a.task_window, [128, 16, 4, 4]);
        assert_eq!(a.heap, [8192, 1024, 1024, 1024]);
        assert_eq!(a.dep_pool, [13, 4, 4, 4]);
        assert_eq!(a.env_lines(), "PTO2_RING_TASK_WINDOW=128,16,4,4\nPTO2_RING_HEAP=8192,1024,1024,1024\nPTO2_RING_DEP_POOL=13,4,4,4");
    }

    #[test]
    fn advice_from_samples_and_failure() {
        let h = header(None);
        let b = ScopeSample {
            site: "x.rs:1".into(),
            phase: "begin".into(),
            depth: 1,
            ring: 1,
            task_window_start: 10,
            task_window_end: 10,
            heap_start: 0,
            heap_end: 0,
            dep_pool_start: 5,
            dep_pool_end: 5,
            tensormap: 0,
        };
        let mut e = b.clone();
        e.phase = "end".into();
        e.task_window_end = 30;
        e.heap_end = 3000;
        e.dep_pool_end = 25;
        let text = format!(
            "{}\n{}\n{}\n",
            serde_json::to_string(&h).unwrap(),
            serde_json::to_string(&b).unwrap(),
            serde_json::to_string(&e).unwrap()
        );
        let p = read_peaks(&text).unwrap();
        assert_eq!((p.task_window[1], p.heap[1], p.dep_pool[1]), (20, 3000, 20));
        let mut p2 = p.clone();
        p2.failure = Some(FailureRecord {
            code: 1,
            name: "SCOPE_DEADLOCK".into(),
            ring: Some(2),
            resource: Some("ring_task_window".into()),
            configured: Some(4),
            needed: Some(64),
            at_least: None,
        });
        let a = advise(&p2, 1.0);
        assert_eq!(a.task_window[1], 32);
        assert_eq!(a.task_window[2], 64);
        // An unknown needed size: the lower bound the failure saw raises the entry.
        let mut p3 = p.clone();
        p3.failure = Some(FailureRecord {
            code: 2,
            name: "HEAP_RING_DEADLOCK".into(),
            ring: Some(1),
            resource: Some("ring_heap".into()),
            configured: Some(4096),
            needed: None,
            at_least: Some(1 << 20),
        });
        assert_eq!(advise(&p3, 1.0).heap[1], 1 << 20);
        assert!(read_peaks("{\"version\":5}").is_err());
        assert!(read_peaks("").is_err());
    }

    fn all_valid(a: &SizingAdvice) {
        for r in 0..4 {
            assert!(RingField::TaskWindow.check(a.task_window[r]), "{a:?}");
            assert!(RingField::Heap.check(a.heap[r]), "{a:?}");
            assert!(RingField::DepPool.check(a.dep_pool[r]), "{a:?}");
        }
    }

    fn peaks(w: [u64; 4], h: [u64; 4], d: [u64; 4]) -> RecordedPeaks {
        RecordedPeaks {
            task_window: w,
            heap: h,
            dep_pool: d,
            failure: None,
            floor: None,
        }
    }

    #[test]
    fn huge_peaks_saturate_and_are_reported_unfit() {
        // next_power_of_two of these wrapped to the minimum suggestion.
        let p = peaks(
            [u64::MAX, 1 << 30, (1 << 30) - 1, 0],
            [(1 << 63) + 1, 1 << 63, u64::MAX, 5],
            [u64::MAX, i32::MAX as u64, 4, 0],
        );
        for h in [1.0, 1.25, 1e300] {
            let a = advise(&p, h);
            all_valid(&a);
            assert_eq!(a.task_window[0], 1 << 30);
            assert_eq!(a.heap[0], 1 << 63);
            assert_eq!(a.dep_pool[0], i32::MAX as u64);
            if h < 2.0 {
                assert_eq!(a.heap[3], 1024);
            }
            if h == 1.0 {
                // Never below a recorded peak when a valid size holds it.
                assert_eq!(a.task_window[2], 1 << 30);
                assert_eq!(a.heap[1], 1 << 63);
                assert_eq!(a.dep_pool[1], i32::MAX as u64);
            }
            let unfit: Vec<(&str, usize)> = a.unfit.iter().map(|u| (u.field, u.ring)).collect();
            for want in [
                ("ring_task_window", 0),
                ("ring_task_window", 1),
                ("ring_heap", 0),
                ("ring_heap", 2),
                ("ring_dep_pool", 0),
            ] {
                assert!(unfit.contains(&want), "{want:?} not in {:?}", a.unfit);
            }
            let u = a
                .unfit
                .iter()
                .find(|u| (u.field, u.ring) == ("ring_task_window", 1))
                .unwrap();
            assert_eq!(u.max, 1 << 30);
            assert!(u.need > 1 << 30);
        }
        let a = advise(
            &peaks([(1 << 30) - 1; 4], [1 << 63; 4], [i32::MAX as u64; 4]),
            1.0,
        );
        assert!(a.unfit.is_empty(), "{:?}", a.unfit);
        let text = sizing_report(
            &serde_json::to_string(&header(Some(([u64::MAX; 4], [u64::MAX; 4], [u64::MAX; 4]))))
                .unwrap(),
            1.25,
        )
        .unwrap();
        assert!(text.contains("# no valid size fits: ring 0 needs ring_task_window >= 18446744073709551615 but the largest valid ring_task_window is 1073741824;"), "{text}");
        assert!(text.contains("\"ring_task_window\": 1073741824, \"ring_heap\": 9223372036854775808, \"ring_dep_pool\": 2147483647"), "{text}");
    }

    #[test]
    fn invalid_sizes_of_a_failed_run_become_valid_suggestions() {
        let mut h = header(Some(([1, 1, 1, 1], [0; 4], [0; 4])));
        h.fatal = true;
        h.task_window_max = [5, 5, 16, 1 << 40];
        h.heap_max = [3000, 1023, 0, u64::MAX];
        h.dep_pool_max = [3, 5, 0, u64::MAX];
        let p = read_peaks(&serde_json::to_string(&h).unwrap()).unwrap();
        let a = advise(&p, 1.0);
        all_valid(&a);
        assert_eq!(a.task_window, [8, 8, 16, 1 << 30]);
        assert_eq!(a.heap, [4096, 1024, 1024, 1 << 63]);
        assert_eq!(a.dep_pool, [4, 5, 4, i32::MAX as u64]);
        // A failure's needed size beyond the largest valid size is reported, not wrapped.
        let mut p2 = p.clone();
        p2.failure = Some(FailureRecord {
            code: 2,
            name: "HEAP_RING_DEADLOCK".into(),
            ring: Some(1),
            resource: Some("ring_heap".into()),
            configured: Some(1024),
            needed: Some(u64::MAX),
            at_least: None,
        });
        let a = advise(&p2, 1.25);
        all_valid(&a);
        assert_eq!(a.heap[1], 1 << 63);
        assert_eq!(
            a.unfit,
            vec![Unfit {
                field: "ring_heap",
                ring: 1,
                need: u64::MAX,
                max: 1 << 63
            }]
        );
    }

    #[test]
    fn the_failure_line_shows_sizes_only_for_a_ring() {
        let mut h = header(Some(([1; 4], [0; 4], [0; 4])));
        h.fatal = true;
        h.failure = Some(FailureRecord {
            code: 202,
            name: "DEVICE_OUT_OF_MEMORY".into(),
            ring: None,
            resource: None,
            configured: None,
            needed: None,
            at_least: None,
        });
        let text = sizing_report(&serde_json::to_string(&h).unwrap(), 1.25).unwrap();
        assert!(
            text.contains("# the run failed: DEVICE_OUT_OF_MEMORY (code 202)\n"),
            "{text}"
        );
        h.failure = Some(FailureRecord {
            code: 2,
            name: "HEAP_RING_DEADLOCK".into(),
            ring: Some(1),
            resource: Some("ring_heap".into()),
            configured: Some(4096),
            needed: None,
            at_least: Some(8192),
        });
        let text = sizing_report(&serde_json::to_string(&h).unwrap(), 1.25).unwrap();
        assert!(
            text.contains("# the run failed: HEAP_RING_DEADLOCK (code 2) on ring 1, ring_heap configured 4096, needed - (at least 8192)\n"),
            "{text}"
        );
    }

    #[test]
    fn headroom_must_be_a_finite_factor_of_at_least_one() {
        for bad in [
            "nan", "NaN", "-1", "0", "0.5", "inf", "-inf", "", "x", "1e400",
        ] {
            let e = check_headroom(bad).unwrap_err();
            assert_eq!(e, format!("--headroom must be a finite number >= 1 (a factor on the recorded peaks), got '{bad}'"));
        }
        assert_eq!(check_headroom("1"), Ok(1.0));
        assert_eq!(check_headroom("1.25"), Ok(1.25));
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = sizing_command(&args(&["x.jsonl", "--headroom", "nan"]));
        assert_eq!(o.status, 2);
        assert!(o.stdout.is_empty());
        assert!(
            o.stderr
                .starts_with("taskring sizing: --headroom must be a finite number >= 1"),
            "{}",
            o.stderr
        );
        for a in [
            &["x.jsonl", "--headroom"][..],
            &["--headroom=0", "x.jsonl"],
            &[],
            &["a", "b"],
            &["x.jsonl", "--bogus"],
        ] {
            let o = sizing_command(&args(a));
            assert_eq!(o.status, 2, "{a:?}");
            assert!(
                o.stderr.starts_with("taskring sizing: "),
                "{a:?}: {}",
                o.stderr
            );
        }
        let o = sizing_command(&args(&["/nonexistent/scope_stats.jsonl"]));
        assert_eq!(o.status, 2);
        assert!(
            o.stderr
                .starts_with("taskring sizing: cannot read /nonexistent/scope_stats.jsonl: "),
            "{}",
            o.stderr
        );
        assert_eq!(sizing_command(&args(&["-h"])).status, 0);
    }
}
