//! What a run reports: its [`RunReport`] or [`RunError`], the diagnostics files it was
//! asked for (scope stats, `deps.json`, the swimlane), and — when no task completes for
//! the scheduler timeout — the stall's sub-class (as upstream classifies stalls).

use super::abort;
use super::{ChipShared, ChipWorker, Diagnostics};
use crate::config::{ConfigError, RingSizing};
use crate::engine::shared::ArenaShared;
use crate::engine::{PeakUse, RuntimeFailure, StatusCode};
use crate::kernel::CoreKind;
use crate::sync::Ordering::*;
use crate::tensor::TaskId;
use std::time::Duration;

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// The effective sizing.
    pub ring_sizing: RingSizing,
    /// Highest simultaneous use per ring (slots, heap bytes, dep entries).
    pub peak: PeakUse,
    /// Tasks submitted (including alloc and dummy tasks).
    pub tasks: u64,
    /// The arena was resident (nothing was built).
    pub arena_hit: bool,
    pub arena_build_s: f64,
    pub elapsed_s: f64,
    /// A replay of a captured graph ([`crate::Captured::replay`]).
    pub replayed: bool,
    /// Device memory: this sizing's arena, and the chip's use and capacity after the run.
    pub device_memory: DeviceMemory,
}

/// Device memory as a run report gives it (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMemory {
    /// The device footprint of this dispatch's sizing (`arena::device_footprint`).
    pub arena_bytes: u64,
    /// The chip's device memory in use after the run (0 where not reported: a report
    /// that crossed a process boundary carries only `arena_bytes`).
    pub used_bytes: u64,
    /// The chip's device memory (0 where not reported).
    pub capacity_bytes: u64,
}

impl DeviceMemory {
    /// Only the arena's footprint of `sizing` (use and capacity not known here).
    pub fn of_sizing(sizing: &crate::config::RingSizing) -> DeviceMemory {
        DeviceMemory {
            arena_bytes: crate::arena::device_footprint(sizing),
            ..DeviceMemory::default()
        }
    }
}

/// Why a dispatch did not run or failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Failure(#[from] RuntimeFailure),
}

fn write_stats(
    prefix: &std::path::Path,
    sizing: &RingSizing,
    orch: &crate::engine::OrchState,
    failure: Option<&RuntimeFailure>,
) {
    let Some(stats) = orch.stats.as_ref() else {
        return;
    };
    let peaks = orch.peaks();
    let header = crate::dfx::ScopeStatsHeader {
        version: 6,
        fatal: failure.is_some(),
        dropped: stats.dropped,
        total: stats.samples.len() as u64 + stats.dropped,
        task_window_max: sizing.task_window,
        heap_max: sizing.heap,
        dep_pool_max: sizing.dep_pool,
        tensormap_max: orch.tensormap_use().0,
        peak_task_window: Some(peaks.task_window),
        peak_heap: Some(peaks.heap),
        peak_dep_pool: Some(peaks.dep_pool),
        failure: failure.map(crate::dfx::FailureRecord::from),
        peak_tensormap: Some(orch.tensormap_use().1),
        arena_device_bytes: Some(crate::arena::device_footprint(sizing)),
    };
    if let Err(e) = crate::dfx::write_scope_stats(prefix, &header, stats) {
        eprintln!(
            "taskring: could not write scope stats under {}: {e}",
            prefix.display()
        );
    }
}

impl ChipWorker {
    /// The diagnostics files `diag` asks for, written after the run settled (the arena
    /// is idle; its orchestrator state holds the samples): scope stats, `deps.json`, the
    /// swimlane. A file that cannot be written is reported on stderr, not as a failure
    /// of the run.
    pub(super) fn write_diagnostics(
        &mut self,
        diag: &Diagnostics,
        sizing: &RingSizing,
        failure: Option<&RuntimeFailure>,
    ) {
        if let Some(prefix) = &diag.scope_stats_prefix {
            let (arena, _) = self
                .cache
                .acquire_resident(sizing)
                .expect("the run's arena is resident");
            write_stats(prefix, sizing, &arena.orch, failure);
        }
        if let Some(prefix) = &diag.deps_prefix {
            let (arena, _) = self
                .cache
                .acquire_resident(sizing)
                .expect("the run's arena is resident");
            let file = arena
                .orch
                .deps
                .as_deref()
                .map(|g| g.to_file())
                .unwrap_or_default();
            if let Err(e) = crate::dfx::write_deps(prefix, &file) {
                eprintln!(
                    "taskring: could not write deps.json under {}: {e}",
                    prefix.display()
                );
            }
        }
        if let Some(prefix) = &diag.swimlane_prefix {
            self.write_swimlane(prefix);
        }
    }

    /// `merged_swimlane.json`: every core's kernel executions of the run, one lane per
    /// core (`core {i} (AIC)`, `(AIV)` or `(any)`).
    fn write_swimlane(&self, prefix: &std::path::Path) {
        let cores = self.shared.cores.read();
        let mut lanes = Vec::with_capacity(cores.len());
        let mut names = vec![];
        for (i, c) in cores.iter().enumerate() {
            let kind = match c.kind {
                CoreKind::Any => c.kind.name().to_string(),
                k => k.name().to_uppercase(),
            };
            names.push(format!("core {i} ({kind})"));
            lanes.push(std::mem::take(&mut *c.lane.lock()));
        }
        if let Err(e) =
            crate::dfx::write_swimlane(prefix, lanes.iter_mut().flat_map(|l| l.take()), &names)
        {
            eprintln!(
                "taskring: could not write merged_swimlane.json under {}: {e}",
                prefix.display()
            );
        }
    }
}

/// SCHEDULER_TIMEOUT with the stall sub-class (upstream's classes): a task on a core
/// (S1) > a ready task nobody runs (S3) > only waiting tasks (S4).
pub(super) fn classify_stall(
    sh: &ChipShared,
    a: &ArenaShared,
    timeout: Duration,
    submitted: u64,
    completed: u64,
    orch_done: bool,
) -> RuntimeFailure {
    let cores = sh.cores.read();
    let running: Vec<(usize, TaskId)> = cores
        .iter()
        .enumerate()
        .filter_map(|(i, c)| abort::task_of(c.state.load(SeqCst)).map(|t| (i, t)))
        .collect();
    let ready = sh.eng.ready_len() as u64;
    let waiting = submitted.saturating_sub(completed + running.len() as u64 + ready);
    let (label, detail, stuck) = if let Some(&(core, t)) = running.first() {
        ("S1:running-stalled", 1, Some((t, core as i64)))
    } else if ready > 0 {
        ("S3:ready-but-all-idle", 3, None)
    } else if waiting > 0 {
        ("S4:dependency-deadlock", 4, None)
    } else {
        ("unknown:accounting/corruption", 99, None)
    };
    let (stuck_task, stuck_core) = stuck
        .map(|(t, c)| (format!("{t:?}"), c))
        .unwrap_or(("none".into(), -1));
    let ring = stuck.map(|(t, _)| t.ring());
    let kernel = stuck
        .map(|(t, _)| {
            // safety: a task on a core was published and its slot is not reused while
            // it has not completed.
            let p = unsafe { a.rings[t.ring()].payload(t.local()) };
            p.kernel
                .map(|k| format!(" running kernel '{}'", k.name()))
                .unwrap_or_default()
        })
        .unwrap_or_default();
    RuntimeFailure::new(
        StatusCode::SchedulerTimeout,
        ring,
        format!(
            "no task completed for {} ms{}: sub_class={label} (detail={detail}) completed={completed}/{submitted} running={} ready={ready} waiting={waiting} orch_done={} stuck_task_id={stuck_task}{kernel} stuck_core={stuck_core}",
            timeout.as_millis(),
            if orch_done { "" } else { " while the orchestrator waited for ring space" },
            running.len(),
            orch_done as u8
        ),
    )
}
