//! How to build a chip ([`ChipOptions`]) and what one dispatch records
//! ([`Diagnostics`]): the control plane of `chip`, read once when a chip starts or a run
//! begins.

use crate::config::{CallConfig, RingSizing};
use std::time::Duration;

/// How to build a chip.
#[derive(Clone, Debug)]
pub struct ChipOptions {
    /// Core threads (0 = available parallelism).
    pub cores: usize,
    /// How many of them are AIC (cube) cores; default half, at least one when there
    /// are two or more cores.
    pub aic_cores: Option<usize>,
    pub arena_cache_slots: usize,
    /// Sizings to build before `new` returns; one that does not fit the device memory
    /// fails `new` (DEVICE_OUT_OF_MEMORY). A sizing with `"auto"` entries is not built
    /// (its sizes are learned at its first dispatch).
    pub prewarm: Vec<RingSizing>,
    /// Sizings to build before `new` returns where they fit the device memory; one that
    /// does not is skipped with a warning on stderr (the default sizing a worker builds
    /// when it is given no prewarm of its own). Auto sizings are not built.
    pub prewarm_if_fits: Vec<RingSizing>,
    /// Allocation backstop (no progress for this long fails the run). Default 500 ms,
    /// or `TASKRING_ALLOC_TIMEOUT_MS`.
    pub backstop: Duration,
    /// SCHEDULER_TIMEOUT after this long without any task completing while the run
    /// waits for its tasks. Default 10 s, or `PTO2_SCHEDULER_TIMEOUT_MS`.
    pub scheduler_timeout: Duration,
    /// The orchestrator thread runs ready tasks whenever it would otherwise wait: for
    /// ring space (task window, heap, pools) and, after the program returns, for the
    /// run's tasks to retire. With `cores = nproc - 1` the chip then uses exactly the
    /// machine's CPUs (no third thread competing with two cores on two CPUs), as an
    /// OpenMP master thread does. Off by default: a kernel that never returns then
    /// hangs the orchestrator itself (no SCHEDULER_TIMEOUT can reclaim it), and kernels
    /// run on the thread that called `run` (not for Python kernels, whose program
    /// holds the GIL). Runs with the swimlane recorded do not help (no lane for it).
    pub orchestrator_helps: bool,
    /// Device memory in bytes: every cached arena is charged at its device footprint
    /// against it (`arena` module doc). Default 64 GiB, or `TASKRING_DEVICE_MEMORY`.
    pub device_memory: u64,
}

/// The default device memory of a chip: 64 GiB (an a2a3-class device).
pub const DEFAULT_DEVICE_MEMORY: u64 = 64 << 30;

/// The smallest device memory a chip may be given.
pub const MIN_DEVICE_MEMORY: u64 = 1 << 20;

/// The process default of `ChipOptions::device_memory`: `TASKRING_DEVICE_MEMORY` when it
/// holds an integer >= [`MIN_DEVICE_MEMORY`] (else a warning on stderr, once per value,
/// and the built-in 64 GiB).
pub fn default_device_memory() -> u64 {
    let Some(v) = std::env::var_os("TASKRING_DEVICE_MEMORY") else {
        return DEFAULT_DEVICE_MEMORY;
    };
    let text = v.to_string_lossy().trim().to_string();
    match text.parse::<u64>() {
        Ok(b) if b >= MIN_DEVICE_MEMORY => b,
        _ => {
            static WARNED: parking_lot::Mutex<Vec<String>> = parking_lot::Mutex::new(Vec::new());
            let mut w = WARNED.lock();
            if !w.contains(&text) {
                eprintln!(
                    "taskring: ignoring TASKRING_DEVICE_MEMORY={text:?}: must be an integer >= {MIN_DEVICE_MEMORY} (bytes)"
                );
                w.push(text);
            }
            DEFAULT_DEVICE_MEMORY
        }
    }
}

fn env_ms(var: &str) -> Option<Duration> {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&v| v > 0)
        .map(Duration::from_millis)
}

impl Default for ChipOptions {
    fn default() -> Self {
        ChipOptions {
            cores: 0,
            aic_cores: None,
            arena_cache_slots: 4,
            prewarm: Vec::new(),
            prewarm_if_fits: Vec::new(),
            backstop: env_ms("TASKRING_ALLOC_TIMEOUT_MS").unwrap_or(Duration::from_millis(500)),
            scheduler_timeout: env_ms("PTO2_SCHEDULER_TIMEOUT_MS")
                .unwrap_or(Duration::from_secs(10)),
            orchestrator_helps: false,
            device_memory: default_device_memory(),
        }
    }
}

/// Most core threads a chip may have (`ChipOptions::cores`): far above any real chip's
/// core count, and low enough that the threads can always be started.
pub const MAX_CORES: usize = 1024;

/// Diagnostics requested for one dispatch.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    /// Write `scope_stats/scope_stats.jsonl` under this prefix.
    pub scope_stats_prefix: Option<std::path::PathBuf>,
    /// Write `deps.json` under this prefix.
    pub deps_prefix: Option<std::path::PathBuf>,
    /// Write `merged_swimlane.json` (Perfetto) under this prefix.
    pub swimlane_prefix: Option<std::path::PathBuf>,
}

impl Diagnostics {
    pub(crate) fn from_config(c: &CallConfig) -> Diagnostics {
        let at = |on: bool| {
            (on && !c.output_prefix.is_empty()).then(|| std::path::PathBuf::from(&c.output_prefix))
        };
        Diagnostics {
            scope_stats_prefix: at(c.enable_scope_stats),
            deps_prefix: at(c.enable_dep_gen),
            swimlane_prefix: at(c.enable_chip_swimlane > 0),
        }
    }
}
