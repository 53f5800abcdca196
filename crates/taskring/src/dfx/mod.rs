//! Diagnostics for tools: scope stats (`scope_stats/scope_stats.jsonl`) and the sizing
//! advisor that reads them back.
//!
//! Scope stats (schema version 6, as upstream's `docs/dfx/scope-stats.md`): line 1 is a
//! metadata object — `fatal`, `dropped`, `total`, the effective sizes per ring
//! (`task_window_max`, `heap_max`, `dep_pool_max`), `tensormap_max` — to which we add the
//! peak use per ring (`peak_task_window`, `peak_heap`, `peak_dep_pool`) and, for a failed
//! run, the failure (`failure`: code, name, ring, resource, configured, needed). Every
//! later line is one scope boundary sample: `site`, `phase` (`begin`/`end`), `depth`,
//! `ring`, `task_window_start`/`_end` (retired / next local id: monotonic counters),
//! `heap_start`/`_end` (bytes retired / allocated since the run began, wraps unrolled),
//! `dep_pool_start`/`_end` (tail / top of the dependency pool), `tensormap` (entries).
//!
//! Recording costs nothing unless enabled (`CallConfig.enable_scope_stats`); samples are
//! kept in memory (at most [`MAX_SAMPLES`]; the rest are counted in `dropped`) and
//! written when the run ends, also when it fails (`"fatal": true`).

use crate::engine::RuntimeFailure;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Most samples kept per run.
pub const MAX_SAMPLES: usize = 1 << 20;

/// One scope boundary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScopeSample {
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
}

impl From<&RuntimeFailure> for FailureRecord {
    fn from(f: &RuntimeFailure) -> Self {
        FailureRecord {
            code: f.code.code(),
            name: f.name().to_string(),
            ring: f.ring,
            resource: f.resource.map(|r| r.name().to_string()),
            configured: f.configured,
            needed: f.needed,
        }
    }
}

/// Line 1 of the file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScopeStatsHeader {
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
}

/// Samples of one run (kept by the orchestrator while enabled).
#[derive(Clone, Debug, Default)]
pub struct ScopeStats {
    pub samples: Vec<ScopeSample>,
    pub dropped: u64,
}

impl ScopeStats {
    pub fn push(&mut self, s: ScopeSample) {
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(s);
        } else {
            self.dropped += 1;
        }
    }
}

/// Write `header` and `stats` to `<prefix>/scope_stats/scope_stats.jsonl`.
pub fn write_scope_stats(prefix: &Path, header: &ScopeStatsHeader, stats: &ScopeStats) -> std::io::Result<PathBuf> {
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

/// One task of `deps.json` (`CallConfig.enable_dep_gen`): its id, kernel and the
/// producers it was found to depend on (before completed or retired ones were dropped),
/// with the edge kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepRecord {
    pub id: u64,
    pub ring: u32,
    pub kernel: String,
    /// `(producer id, "wait" | "retain" | "wait+retain")`.
    pub deps: Vec<(u64, String)>,
}

/// Write `<prefix>/deps.json`.
pub fn write_deps(prefix: &Path, tasks: &[DepRecord]) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(prefix)?;
    let path = prefix.join("deps.json");
    let f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    serde_json::to_writer(f, &serde_json::json!({ "version": 1, "tasks": tasks }))?;
    Ok(path)
}

/// One kernel execution on a core (`CallConfig.enable_chip_swimlane`).
#[derive(Clone, Copy, Debug)]
pub struct SwimlaneEvent {
    pub task: u64,
    pub core: u32,
    pub kernel: &'static str,
    /// Nanoseconds since the run started.
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Write `<prefix>/merged_swimlane.json` (Chrome trace events; opens in Perfetto).
pub fn write_swimlane(prefix: &Path, events: &[SwimlaneEvent], core_names: &[String]) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(prefix)?;
    let path = prefix.join("merged_swimlane.json");
    let mut ev: Vec<serde_json::Value> = core_names
        .iter()
        .enumerate()
        .map(|(i, n)| serde_json::json!({"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": n}}))
        .collect();
    for e in events {
        ev.push(serde_json::json!({
            "name": e.kernel,
            "ph": "X",
            "pid": 0,
            "tid": e.core,
            "ts": e.start_ns as f64 / 1000.0,
            "dur": (e.end_ns.saturating_sub(e.start_ns)) as f64 / 1000.0,
            "args": {"task": format!("{:?}", crate::tensor::TaskId(e.task)), "ring": (e.task >> 32)},
        }));
    }
    let f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    serde_json::to_writer(f, &serde_json::json!({ "traceEvents": ev, "displayTimeUnit": "ns" }))?;
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
    let h: ScopeStatsHeader = serde_json::from_str(first).map_err(|e| format!("line 1 is not scope-stats metadata: {e}"))?;
    if h.version != 6 {
        return Err(format!("unsupported scope-stats version {} (expected 6)", h.version));
    }
    let mut p = RecordedPeaks {
        task_window: h.peak_task_window.unwrap_or([0; 4]),
        heap: h.peak_heap.unwrap_or([0; 4]),
        dep_pool: h.peak_dep_pool.unwrap_or([0; 4]),
        failure: h.failure.clone(),
        floor: h.fatal.then_some((h.task_window_max, h.heap_max, h.dep_pool_max)),
    };
    if h.peak_task_window.is_none() {
        // Derive from the samples: open scopes' begin values per ring, matched to ends.
        let mut open: Vec<ScopeSample> = Vec::new();
        for (i, l) in lines.enumerate() {
            let s: ScopeSample = serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 2))?;
            if s.phase == "begin" {
                open.push(s);
            } else if let Some(b) = open.pop() {
                let r = (s.ring as usize).min(3);
                p.task_window[r] = p.task_window[r].max(s.task_window_end.saturating_sub(b.task_window_start));
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
}

fn scaled(v: u64, headroom: f64) -> u64 {
    ((v as f64) * headroom).ceil() as u64
}

/// The smallest valid sizes per ring that would have held `p` with `headroom` (≥ 1):
/// window = the next power of two above `peak × headroom` (a ring holds window − 1
/// tasks), at least 4; heap = the next power of two at or above `peak × headroom`, at
/// least 1024; dep pool = `peak × headroom`, at least 4. For a failed run the advice
/// never goes below the sizes it ran with, and the failure's `needed` size raises its
/// ring's resource to at least that: a failed run only shows the part that ran, so the
/// advice is a next step (run again with it and re-read the stats), not a final answer.
///
/// The window and heap peaks of a program are deterministic; the dependency-pool peak is
/// not quite: an edge found through the tensormap to a producer that has already
/// completed needs no node, so a slower run can need a few more. Keep headroom there.
pub fn advise(p: &RecordedPeaks, headroom: f64) -> SizingAdvice {
    let headroom = if headroom.is_finite() && headroom >= 1.0 { headroom } else { 1.0 };
    let mut a = SizingAdvice { task_window: [4; 4], heap: [1024; 4], dep_pool: [4; 4], headroom };
    for r in 0..4 {
        a.task_window[r] = (scaled(p.task_window[r], headroom) + 1).next_power_of_two().clamp(4, 1 << 30);
        a.heap[r] = scaled(p.heap[r], headroom).next_power_of_two().max(1024);
        a.dep_pool[r] = scaled(p.dep_pool[r], headroom).clamp(4, i32::MAX as u64);
    }
    if let Some((w, h, d)) = &p.floor {
        for r in 0..4 {
            a.task_window[r] = a.task_window[r].max(w[r]);
            a.heap[r] = a.heap[r].max(h[r]);
            a.dep_pool[r] = a.dep_pool[r].max(d[r]);
        }
    }
    if let Some(f) = &p.failure {
        if let (Some(r), Some(res), Some(n)) = (f.ring, f.resource.as_deref(), f.needed) {
            let r = r.min(3);
            match res {
                "ring_task_window" => a.task_window[r] = a.task_window[r].max(scaled(n, headroom).next_power_of_two().min(1 << 30)),
                "ring_heap" => a.heap[r] = a.heap[r].max(scaled(n, headroom).next_power_of_two()),
                "ring_dep_pool" => a.dep_pool[r] = a.dep_pool[r].max(scaled(n, headroom).min(i32::MAX as u64)),
                _ => {}
            }
        }
    }
    a
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
    pub fn env_lines(&self) -> String {
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
        assert_eq!(a.runtime_env(), "runtime_env = {\"ring_task_window\": 4, \"ring_heap\": 1024, \"ring_dep_pool\": 4}");
        let a = advise(&RecordedPeaks { task_window: [100, 7, 0, 0], heap: [5000, 0, 0, 0], dep_pool: [10, 0, 0, 0], failure: None, floor: None }, 1.25);
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
        let text = format!("{}\n{}\n{}\n", serde_json::to_string(&h).unwrap(), serde_json::to_string(&b).unwrap(), serde_json::to_string(&e).unwrap());
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
        });
        let a = advise(&p2, 1.0);
        assert_eq!(a.task_window[1], 32);
        assert_eq!(a.task_window[2], 64);
        assert!(read_peaks("{\"version\":5}").is_err());
        assert!(read_peaks("").is_err());
    }
}
