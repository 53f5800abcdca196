//! The scope-stats file (`scope_stats/scope_stats.jsonl`, schema version 6, as
//! upstream's `docs/dfx/scope-stats.md`): line 1 is a metadata object — `fatal`,
//! `dropped`, `total`, the effective sizes per ring (`task_window_max`, `heap_max`,
//! `dep_pool_max`), `tensormap_max` — to which we add the peak use per ring
//! (`peak_task_window`, `peak_heap`, `peak_dep_pool`), the tensormap's peak
//! (`peak_tensormap`), the arena's device footprint (`arena_device_bytes`) and, for a
//! failed run, the failure (`failure`: code, name, ring, resource, configured, needed).
//! Every later line is one scope boundary sample: `site`, `phase` (`begin`/`end`),
//! `depth`, `ring`, `task_window_start`/`_end` (retired / next local id: monotonic
//! counters), `heap_start`/`_end` (bytes retired / allocated since the run began, wraps
//! unrolled), `dep_pool_start`/`_end` (tail / top of the dependency pool), `tensormap`
//! (entries).
//!
//! Recording costs nothing unless enabled (`CallConfig.enable_scope_stats`); samples are
//! kept in memory (at most [`MAX_SAMPLES`]; the rest are counted in `dropped`) and
//! written when the run ends, also when it fails (`"fatal": true`). [`read_peaks`] reads
//! a file back: the one rule for a ring's peak, which the advisor and the report use.

use crate::config::RingField;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One ring resource of the file: `key` names its columns (`{key}_max`, `peak_{key}`,
/// `{key}_start` / `{key}_end`); `label` and `unit` are how tools show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsResource {
    pub key: &'static str,
    pub label: &'static str,
    pub unit: &'static str,
    pub field: RingField,
}

/// The three ring resources, in contract order (window, heap, dep pool).
pub const RESOURCES: [StatsResource; 3] = [
    StatsResource {
        key: "task_window",
        label: "task window",
        unit: "slots",
        field: RingField::TaskWindow,
    },
    StatsResource {
        key: "heap",
        label: "heap",
        unit: "bytes",
        field: RingField::Heap,
    },
    StatsResource {
        key: "dep_pool",
        label: "dep pool",
        unit: "entries",
        field: RingField::DepPool,
    },
];

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

#[cfg(test)]
pub(crate) fn test_header(peaks: Option<([u64; 4], [u64; 4], [u64; 4])>) -> ScopeStatsHeader {
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
