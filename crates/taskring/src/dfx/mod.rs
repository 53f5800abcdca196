//! Diagnostics for tools, one file per concept:
//!
//! - `scope_stats`: the scope-stats file (`scope_stats/scope_stats.jsonl`): what a run
//!   records and writes, and [`read_peaks`], which reads a ring's peaks back (the one
//!   rule of the advisor and the report);
//! - `deps`: `deps.json`, a run's task graph ([`DepsFile`]);
//! - `swimlane`: each core's kernel executions, written as Chrome trace events;
//! - `advisor`: [`advise`], the suggested ring sizes from recorded peaks
//!   ([`SizingAdvice`], with its notes and its `runtime_env` / `PTO2_RING_*` lines);
//! - `command`: `taskring sizing` ([`sizing_command`]), the advisor's command line;
//! - [`clock`]: the timelines' clock.

mod advisor;
pub mod clock;
mod command;
mod deps;
mod scope_stats;
mod swimlane;

pub use advisor::{advise, check_headroom, SizingAdvice, Unfit, DEFAULT_HEADROOM};
pub use command::{sizing_command, sizing_report, CommandOutput};
pub(crate) use deps::write_deps;
pub use deps::{DepsArg, DepsEdge, DepsFile, DepsTask, DepsTensor};
pub use scope_stats::{
    read_peaks, FailureRecord, RecordedPeaks, StatsResource, MAX_SAMPLES, RESOURCES,
};
pub(crate) use scope_stats::{write_scope_stats, ScopeSample, ScopeStats, ScopeStatsHeader};
pub(crate) use swimlane::{write_swimlane, Lane, SwimlaneEvent};
