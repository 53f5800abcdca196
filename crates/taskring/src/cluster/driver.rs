//! Rank 0 of an L4 job: [`Cluster`], the engine whose tasks are whole L3 dispatches on
//! hosts (the next-level engine with the hosts as its executor, [`super::executor`]), and its
//! orchestration API.

use super::executor::{Hosts, Watch};
use super::transport::{self, TAG_REQUEST};
use super::wire;
use super::{ClusterError, ClusterProgram, ClusterRunReport};
use crate::config::CallConfig;
use crate::engine::{Orchestrator, RuntimeFailure};
use crate::nextlevel::{Level, LevelError, LevelOptions, NextLevelArg, Orch};
use crate::tensor::TaskId;
use std::sync::atomic::Ordering::*;
use std::time::{Duration, Instant};

/// The orchestration API of an L4 run (rank 0).
pub struct ClusterOrchestrator<'a, 'r> {
    g: Orch<'a, 'r, Hosts>,
}

impl<'r> ClusterOrchestrator<'_, 'r> {
    /// The underlying engine orchestrator (scopes).
    pub fn engine(&mut self) -> &mut Orchestrator<'r> {
        self.g.o
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.g.sh.exec.hosts
    }

    /// Submit the L4 task `callable(args)` to host `worker`, whose L3 orchestration
    /// receives `config` whole.
    pub fn submit_next_level(
        &mut self,
        callable: u32,
        args: &[NextLevelArg],
        config: &CallConfig,
        worker: usize,
    ) -> Result<TaskId, RuntimeFailure> {
        self.g.submit_with(callable, None, args, config, worker)
    }
}

/// Rank 0 of an L4 job (after `transport::init`).
pub struct Cluster {
    level: Level<Hosts>,
    closed: bool,
}

impl Cluster {
    /// Rank 0 with `hosts` host ranks; `arena_cache_slots` for its own engine's arenas.
    pub fn new(
        hosts: usize,
        programs: Vec<ClusterProgram>,
        arena_cache_slots: usize,
    ) -> Result<Cluster, ClusterError> {
        if hosts == 0 {
            return Err(ClusterError::Mpi(
                "an L4 job needs at least one host rank".into(),
            ));
        }
        // An L4 task is a whole L3 dispatch: the level's engine has no L2-sized
        // timeouts (a dead host ends the MPI job).
        let opts = LevelOptions {
            threads: (2 * hosts).min(crate::chip::MAX_CORES),
            // A lane (ready queue) per host, two dispatch threads on each: a host's
            // backlog holds up no thread of another host, and while a host serves one
            // request its next one is already sent.
            lanes: hosts,
            arena_cache_slots,
            device_memory: crate::chip::default_device_memory(),
        };
        let level = Level::new(Hosts::new(hosts, programs), opts)
            .map_err(|(e, _)| ClusterError::Failure(e))?;
        Ok(Cluster {
            level,
            closed: false,
        })
    }

    pub fn hosts(&self) -> usize {
        self.level.sh.exec.hosts
    }

    /// Ask the run in flight to stop waiting (Ctrl-C); it fails with `Interrupted`.
    pub fn cancel(&self) {
        self.level.sh.cancel();
    }

    /// A handle to cancel a run from another thread.
    pub fn canceller(&self) -> impl Fn() + Send + Sync + 'static {
        let sh = self.level.sh.clone();
        move || sh.cancel()
    }

    /// Run `orch` (the L4 orchestration); `config` sizes rank 0's own rings. `hook` is
    /// called around the caller's blocking waits (`true` before, `false` after; at least
    /// every 50 ms while the run waits for its hosts).
    pub fn run(
        &mut self,
        orch: impl Fn(&mut ClusterOrchestrator<'_, '_>) -> Result<(), RuntimeFailure>
            + Send
            + Sync
            + 'static,
        config: &CallConfig,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<ClusterRunReport, ClusterError> {
        let t0 = Instant::now();
        let orch =
            move |g: &mut Orch<'_, '_, Hosts>| orch(&mut ClusterOrchestrator { g: g.reborrow() });
        let tasks = self.level.run(orch, config, hook)?;
        Ok(ClusterRunReport {
            tasks,
            elapsed_s: t0.elapsed().as_secs_f64(),
        })
    }

    /// Tell every host to stop serving and wait for each to acknowledge, then free the
    /// engine (idempotent). A host that does not answer within the host timeout is
    /// lost (the job then ends with `MPI_Abort` when rank 0 finalizes); one that answers
    /// pings but is still busy (a task of an interrupted run) is not waited for longer.
    /// MPI itself is finalized by the embedding (`transport::finalize`).
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let mut buf = [0u8; 64];
        let n = wire::encode_close(&mut buf).expect("the close frame fits");
        let frame: &'static [u8] = Box::leak(buf[..n].to_vec().into_boxed_slice());
        let sh = &self.level.sh.exec;
        let mut watches: Vec<Watch<'_>> = (0..sh.hosts).map(|h| Watch::new(sh, h)).collect();
        let mut waiting: Vec<usize> = (0..sh.hosts)
            .filter(|&h| sh.live[h].lost().is_none())
            .collect();
        // The close frame is small: it goes out at once, even to a stopped host.
        waiting.retain(|&h| {
            let w = &mut watches[h];
            transport::send_until(h as i32 + 1, TAG_REQUEST, frame, || w.lost())
        });
        let t0 = Instant::now();
        let mut b = transport::Backoff::new(Duration::from_millis(1), transport::Backoff::EXPECTED);
        while !waiting.is_empty() {
            waiting.retain(|&h| {
                sh.live[h].drain(h);
                !sh.live[h].closed.load(Relaxed) && !watches[h].lost()
            });
            if t0.elapsed() >= sh.timeout {
                break;
            }
            b.snooze();
        }
        self.level.close();
    }
}

impl From<LevelError<String>> for ClusterError {
    fn from(e: LevelError<String>) -> Self {
        match e {
            LevelError::Closed => ClusterError::Closed,
            LevelError::Interrupted(why) => ClusterError::Interrupted(why),
            LevelError::Config(e) => ClusterError::Config(e),
            LevelError::Worker(text) => ClusterError::Host(text),
            LevelError::Failure(f) => ClusterError::Failure(f),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.close();
    }
}
