//! Capture and replay on a chip (docs/api.md §10): [`ChipWorker::capture`] runs a program
//! once while the engine records its task graph (`record`), and [`Captured::replay`]
//! feeds that graph to the worker's cores again — directly when the sizing holds the
//! whole graph (`direct`), else through the rings (`rings`). This file is the
//! worker-facing part: the argument check against the capture, the sizing of a replay,
//! `exact_config` and the choice of path.

use super::graph::{Graph, Needs};
use super::job::{DirectCounters, DirectJob};
use super::record::Recorder;
use super::rings::replay_ops;
use crate::chip::policy::RunPolicy;
use crate::chip::run::Dispatch;
use crate::chip::{Arg, ChipWorker, Diagnostics, PerEntry, Program, RunError, RunReport};
use crate::config::{
    CallConfig, RingSizing, RuntimeEnv, MIN_RING_DEP_POOL, MIN_RING_HEAP, MIN_RING_TASK_WINDOW,
};
use crate::engine::recording::Recording;
use crate::engine::{Orchestrator, PeakUse, RuntimeFailure};
use crate::tensor::DType;
use std::fmt;

/// How two program arguments share memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sharing {
    /// Disjoint buffers (or a scalar).
    Distinct,
    /// The same buffer (same address and size).
    Same,
    /// Buffers that overlap without being the same.
    Overlap,
}

impl Sharing {
    fn says(self) -> &'static str {
        match self {
            Sharing::Distinct => "are distinct buffers",
            Sharing::Same => "are the same buffer",
            Sharing::Overlap => "overlap",
        }
    }
}

fn sharing(a: &Arg<'_>, b: &Arg<'_>) -> Sharing {
    let ((pa, na), (pb, nb)) = (arg_buffer(a), arg_buffer(b));
    if na == 0 || nb == 0 || pa.saturating_add(na) <= pb || pb.saturating_add(nb) <= pa {
        Sharing::Distinct
    } else if pa == pb && na == nb {
        Sharing::Same
    } else {
        Sharing::Overlap
    }
}

/// What one program argument looked like at capture.
#[derive(Clone, Debug, PartialEq)]
enum ArgSig {
    Tensor {
        shape: Vec<u32>,
        dtype: DType,
        bytes: u64,
    },
    Scalar,
}

/// Why a replay did not run, or failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReplayError {
    /// The graph was captured on another worker (or one that was closed).
    #[error("this captured program belongs to another ChipWorker (captured on worker {captured}, replayed on worker {given})")]
    WrongWorker { captured: u64, given: u64 },
    /// An argument does not match the capture (count, kind, shape or dtype).
    #[error("{message}")]
    Args {
        index: Option<usize>,
        message: String,
    },
    /// The replay's dispatch failed (config, or a runtime failure).
    #[error("{0}")]
    Run(#[from] RunError),
}

/// A captured program: the graph of one run of a program, replayable on the worker that
/// captured it ([`ChipWorker::capture`]). See the module doc.
pub struct Captured {
    name: String,
    worker: u64,
    graph: Graph,
    sigs: Vec<ArgSig>,
    /// How each pair of the capture's arguments shared memory ([`aliasing`]), row-major
    /// over `(i, j)` with `i < j`: the graph's edges and address table rely on it.
    aliasing: Vec<Sharing>,
    sizing: RingSizing,
    report: RunReport,
    /// Per-replay state, kept to avoid allocating per replay.
    scratch: parking_lot::Mutex<Scratch>,
    needs: Needs,
}

impl fmt::Debug for Captured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Captured(program='{}', tasks={}, edges={})",
            self.name,
            self.tasks(),
            self.edges()
        )
    }
}

impl ChipWorker {
    /// Run `program` once (a normal run) and record its task graph for
    /// [`Captured::replay`]. A failing run fails the capture.
    pub fn capture(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        config: &CallConfig,
    ) -> Result<Captured, RunError> {
        self.capture_with_hook(program, args, config, None)
    }

    /// As [`ChipWorker::capture`], with a blocking hook (see `run_with_hook`).
    pub fn capture_with_hook(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        config: &CallConfig,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<Captured, RunError> {
        config.validate()?;
        let asked = RingSizing::resolve_from_process(&config.runtime_env)?;
        // Auto entries: what the chip learned of the program, or the learning sizing
        // (the capture then teaches the chip the program's need, and replays run on
        // the graph's own need).
        let auto = asked.is_auto();
        let mut sizing = if auto {
            self.auto_sizing_for(program, args, asked)
        } else {
            asked
        };
        let built = auto && !self.cache.contains(&sizing);
        let diag = Diagnostics::from_config(config);
        let run = Dispatch::program(program, args, &sizing, hook, &diag);
        let (r, graph) = self.run_recorded(self.policy, run);
        let mut report = match r {
            Ok(r) => r,
            Err(e) if auto => {
                let e = self.auto_failed(program, args, &asked, &sizing, e);
                if built {
                    drop(self.cache.take(&sizing));
                }
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        let graph = graph.expect("the recorder comes back from the run");
        let needs = Needs::of(&graph);
        if auto {
            self.auto_learn_from(program, args, needs.per_entry());
            let fit = self.sized_for(asked, needs.per_entry());
            if built && fit.key() != sizing.key() {
                drop(self.cache.take(&sizing));
                report.device_memory = self.device_memory(&sizing);
            }
            sizing = fit;
        }
        let sigs = args
            .iter()
            .map(|a| match a {
                Arg::Tensor(h) => {
                    let t = h.tensor();
                    ArgSig::Tensor {
                        shape: t.shape[..t.ndims as usize].to_vec(),
                        dtype: t.dtype,
                        bytes: t.buf_bytes,
                    }
                }
                Arg::Scalar(_) => ArgSig::Scalar,
            })
            .collect();
        let n = args.len();
        let mut pairs = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        for i in 0..n {
            for j in i + 1..n {
                pairs.push(sharing(&args[i], &args[j]));
            }
        }
        Ok(Captured {
            aliasing: pairs,
            name: program.name().to_string(),
            worker: self.worker_id(),
            scratch: parking_lot::Mutex::new(Scratch {
                addrs: graph.addr_table(),
                counters: DirectCounters::new(&graph),
                placed: None,
            }),
            graph,
            sigs,
            sizing,
            report,
            needs,
        })
    }

    /// The cycle of `run` with a recorder installed (a capture, or a dispatch that learns
    /// its sizes); the recorded graph when the run succeeded.
    pub(crate) fn run_recorded<P: RunPolicy>(
        &mut self,
        policy: P,
        run: Dispatch<'_>,
    ) -> (Result<RunReport, RuntimeFailure>, Option<Graph>) {
        let rec = Recorder::new(run.args.iter().map(arg_buffer).collect());
        let mut rec = Some(Box::new(rec) as Box<dyn Recording>);
        let run = Dispatch {
            record: Some(&mut rec),
            ..run
        };
        let r = self.cycle(policy, run);
        let rec = rec.and_then(|r| (r as Box<dyn std::any::Any>).downcast::<Recorder>().ok());
        let graph = match (&r, rec) {
            (Ok(_), Some(rec)) => Some(rec.finish()),
            _ => None,
        };
        (r, graph)
    }

    /// The cycle of `run` recording its graph for the auto sizing (a learning or a
    /// checking dispatch, `chip::auto`): the graph's need per field and ring
    /// ([`Needs::per_entry`]) when the run succeeded.
    pub(crate) fn run_learning<P: RunPolicy>(
        &mut self,
        policy: P,
        run: Dispatch<'_>,
    ) -> (Result<RunReport, RuntimeFailure>, Option<PerEntry<u64>>) {
        let (r, graph) = self.run_recorded(policy, run);
        (r, graph.map(|g| Needs::of(&g).per_entry()))
    }
}

impl Captured {
    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Recorded tasks (including alloc and dummy tasks).
    pub fn tasks(&self) -> usize {
        self.graph.tasks()
    }
    /// Recorded dependency edges (one per (producer, consumer) pair).
    pub fn edges(&self) -> usize {
        self.graph.edges()
    }
    /// The highest use per ring of the recorded run.
    pub fn ring_needs(&self) -> PeakUse {
        self.report.peak
    }
    /// The graph's structural demand per ring, whatever the timing: live task-window
    /// slots, heap bytes and dep-pool entries that must be held at once (a sizing needs
    /// a window above the slots). What `"auto"` sizes to.
    pub fn structural_needs(&self) -> PeakUse {
        PeakUse {
            task_window: self.needs.slots,
            heap: self.needs.heap,
            dep_pool: self.needs.deps,
        }
    }
    /// The report of the capture run.
    pub fn report(&self) -> &RunReport {
        &self.report
    }
    /// The sizing of the capture run (a replay without a config uses it).
    pub fn sizing(&self) -> &RingSizing {
        &self.sizing
    }
    /// The worker the graph belongs to ([`ChipWorker::worker_id`]).
    pub fn worker_id(&self) -> u64 {
        self.worker
    }

    /// A `CallConfig` whose `runtime_env` is exactly what the graph needs: per ring,
    /// the smallest valid sizes that hold the recorded peaks and the graph's
    /// structural demand (what no completion can free: the tasks whose scope is still
    /// open, or that a RETAIN consumer still holds, with every WAIT edge pending),
    /// so that replays under it never fail for capacity, whatever the timing.
    pub fn exact_config(&self) -> CallConfig {
        let p = &self.report.peak;
        let n = &self.needs;
        let mut env = RuntimeEnv::default();
        for r in 0..4 {
            let live = p.task_window[r].max(n.slots[r]);
            env.ring_task_window[r] = (live + 1).next_power_of_two().max(MIN_RING_TASK_WINDOW);
            env.ring_heap[r] = p.heap[r]
                .max(n.heap[r])
                .next_power_of_two()
                .max(MIN_RING_HEAP);
            env.ring_dep_pool[r] = p.dep_pool[r].max(n.deps[r]).max(MIN_RING_DEP_POOL);
        }
        CallConfig {
            runtime_env: env,
            ..CallConfig::default()
        }
    }

    /// Check `args` against the capture: count, kind, shape and dtype.
    pub(crate) fn check_args(&self, args: &[Arg<'_>]) -> Result<(), ReplayError> {
        if args.len() != self.sigs.len() {
            return Err(ReplayError::Args {
                index: None,
                message: format!(
                    "program '{}' was captured with {} arguments, replayed with {}",
                    self.name,
                    self.sigs.len(),
                    args.len()
                ),
            });
        }
        for (i, (a, sig)) in args.iter().zip(&self.sigs).enumerate() {
            let bad = |m: String| {
                Err(ReplayError::Args {
                    index: Some(i),
                    message: format!("argument {i}: {m}"),
                })
            };
            match (a, sig) {
                (
                    Arg::Tensor(h),
                    ArgSig::Tensor {
                        shape,
                        dtype,
                        bytes,
                    },
                ) => {
                    let t = h.tensor();
                    let got = &t.shape[..t.ndims as usize];
                    if got != &shape[..] {
                        return bad(format!(
                            "shape {got:?} does not match the captured shape {shape:?}"
                        ));
                    }
                    if t.dtype != *dtype {
                        return bad(format!(
                            "dtype {} does not match the captured dtype {dtype}",
                            t.dtype
                        ));
                    }
                    if t.buf_bytes != *bytes {
                        return bad(format!(
                            "{} bytes do not match the captured {bytes} bytes",
                            t.buf_bytes
                        ));
                    }
                }
                (Arg::Scalar(_), ArgSig::Scalar) => {}
                (Arg::Scalar(_), ArgSig::Tensor { .. }) => {
                    return bad("a scalar where the capture had a tensor".into())
                }
                (Arg::Tensor(_), ArgSig::Scalar) => {
                    return bad("a tensor where the capture had a scalar".into())
                }
            }
        }
        // The arguments must share memory as the capture's did: its graph has the
        // edges (and its address table the bases) of that aliasing only.
        let n = args.len();
        if n >= 2 {
            let mut k = 0;
            for i in 0..n {
                for j in i + 1..n {
                    let (now, then) = (sharing(&args[i], &args[j]), self.aliasing[k]);
                    k += 1;
                    if now != then {
                        return Err(ReplayError::Args {
                            index: Some(j),
                            message: format!(
                                "arguments {i} and {j} {} but {} at capture: a replay needs the aliasing of its capture (capture again with these arguments)",
                                now.says(),
                                then.says().replacen("are", "were", 1).replace("overlap", "overlapped")
                            ),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Was program argument `i` a scalar at capture? (None: no such argument.)
    pub fn scalar_at(&self, i: usize) -> Option<bool> {
        self.sigs.get(i).map(|s| matches!(s, ArgSig::Scalar))
    }

    /// Replay the graph on `chip` (the worker that captured it) with `args` (same count,
    /// shapes and dtypes as the capture; scalar arguments are the captured ones) and
    /// `config` (`None`: the captured sizing).
    pub fn replay(
        &self,
        chip: &mut ChipWorker,
        args: &[Arg<'_>],
        config: Option<&CallConfig>,
    ) -> Result<RunReport, ReplayError> {
        self.replay_with_hook(chip, args, config, None)
    }

    /// As [`Captured::replay`], with a blocking hook (see `ChipWorker::run_with_hook`;
    /// a binding's caller runs its signal handlers there and may interrupt the replay,
    /// `ChipWorker::interrupter`).
    pub fn replay_with_hook(
        &self,
        chip: &mut ChipWorker,
        args: &[Arg<'_>],
        config: Option<&CallConfig>,
        hook: Option<&dyn Fn(bool)>,
    ) -> Result<RunReport, ReplayError> {
        self.replay_mode(chip, args, config, hook, false)
    }

    /// A replay through the rings even where the sizing holds the whole graph (the way a
    /// replay goes under a sizing that does not; see the module doc). For tests and
    /// comparisons.
    pub fn replay_through_rings(
        &self,
        chip: &mut ChipWorker,
        args: &[Arg<'_>],
        config: Option<&CallConfig>,
    ) -> Result<RunReport, ReplayError> {
        self.replay_mode(chip, args, config, None, true)
    }

    /// Does `sizing` hold the whole graph at once: every ring's output bytes side by
    /// side in its heap, and the structural demand of window and pools (so a replay
    /// through the rings could not fail for capacity either)?
    pub fn fits(&self, sizing: &RingSizing) -> bool {
        let (g, n) = (&self.graph, &self.needs);
        (0..4).all(|r| {
            g.ring_bytes()[r] <= sizing.heap[r]
                && n.heap[r] <= sizing.heap[r]
                && n.slots[r] < sizing.task_window[r]
                && n.deps[r] <= sizing.dep_pool[r]
        })
    }

    fn replay_mode(
        &self,
        chip: &mut ChipWorker,
        args: &[Arg<'_>],
        config: Option<&CallConfig>,
        hook: Option<&dyn Fn(bool)>,
        rings: bool,
    ) -> Result<RunReport, ReplayError> {
        if chip.worker_id() != self.worker {
            return Err(ReplayError::WrongWorker {
                captured: self.worker,
                given: chip.worker_id(),
            });
        }
        self.check_args(args)?;
        chip.check_stuck(args, hook).map_err(RunError::from)?;
        let (sizing, mut diag) = match config {
            Some(c) => {
                c.validate().map_err(RunError::from)?;
                let s = RingSizing::resolve_from_process(&c.runtime_env).map_err(RunError::from)?;
                // Auto entries: the graph's own need (known exactly).
                let s = if s.is_auto() {
                    chip.sized_for(s, self.needs.per_entry())
                } else {
                    s
                };
                (s, Diagnostics::from_config(c))
            }
            None => (self.sizing, Diagnostics::default()),
        };
        // Nothing is inferred at replay: there is no dependency file to write.
        diag.deps_prefix = None;
        let mut scratch = self.scratch.lock();
        let Scratch {
            addrs,
            counters,
            placed,
        } = &mut *scratch;
        let g = &self.graph;
        let (bases, blocks) = g.split_addrs(addrs);
        for (b, a) in bases.iter_mut().zip(args) {
            *b = arg_buffer(a).0;
        }
        if !rings
            && diag.scope_stats_prefix.is_none()
            && diag.swimlane_prefix.is_none()
            && self.fits(&sizing)
        {
            let needs = PeakUse {
                task_window: self.needs.slots,
                heap: g.ring_bytes(),
                dep_pool: self.needs.deps,
            };
            let at = chip.heap_bases(&sizing).map_err(RunError::from)?;
            if *placed != Some(at) {
                g.place_blocks(at, blocks);
                *placed = Some(at);
            }
            counters.arm();
            let job = DirectJob::new(g, addrs, counters);
            let report = chip.run_direct(&sizing, hook, needs, &job);
            if report.is_ok() {
                counters.finished();
            }
            return Ok(report.map_err(RunError::from)?);
        }
        // The rings path writes the blocks of this replay.
        *placed = None;
        let bases = &*bases;
        let blocks = std::cell::RefCell::new(blocks);
        let body = |o: &mut Orchestrator<'_>, _: &[Arg<'_>]| {
            replay_ops(o, g, bases, &mut blocks.borrow_mut())
        };
        let run = Dispatch {
            name: &self.name,
            body: &body,
            args,
            sizing: &sizing,
            hook,
            diag: &diag,
            record: None,
            replayed: true,
        };
        Ok(chip.cycle(chip.policy, run).map_err(RunError::from)?)
    }
}

/// Per-replay state of a [`Captured`]: the address table (`Graph::addr_table`:
/// program arguments' and output blocks' addresses), and (direct replays) predecessor
/// counters.
struct Scratch {
    addrs: Vec<u64>,
    counters: DirectCounters,
    /// The heap bases `blocks` were placed from by the last direct replay (None: the
    /// last replay went through the rings, or none ran yet).
    placed: Option<[u64; 4]>,
}

/// A program argument's buffer (address, bytes; `(0, 0)` for a scalar).
pub(crate) fn arg_buffer(a: &Arg<'_>) -> (u64, u64) {
    match a {
        Arg::Tensor(h) => (h.tensor().addr, h.tensor().buf_bytes),
        Arg::Scalar(_) => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::{sharing, Sharing};
    use crate::chip::{Arg, CallerTensor};
    use crate::engine::Scalar;
    use crate::tensor::{DType, Tensor};

    fn arg(addr: u64, n: u32) -> Arg<'static> {
        // safety: never run; only its address range is compared.
        Arg::Tensor(unsafe { CallerTensor::from_raw(Tensor::from_raw(addr, &[n], DType::F32)) })
    }

    #[test]
    fn sharing_of_two_arguments() {
        assert_eq!(
            sharing(&arg(0x1000, 16), &arg(0x1040, 16)),
            Sharing::Distinct
        );
        assert_eq!(sharing(&arg(0x1000, 16), &arg(0x1000, 16)), Sharing::Same);
        assert_eq!(
            sharing(&arg(0x1000, 16), &arg(0x1020, 16)),
            Sharing::Overlap
        );
        assert_eq!(sharing(&arg(0x1000, 16), &arg(0x1000, 8)), Sharing::Overlap);
        let s = Arg::Scalar(Scalar::I64(0x1000));
        assert_eq!(sharing(&arg(0x1000, 16), &s), Sharing::Distinct);
    }
}
