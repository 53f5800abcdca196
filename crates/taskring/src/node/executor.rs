//! The node's executor: one L3 task's round trip to its chip through the chip's mailbox,
//! and what it records — the chip's report, its failure, and in a traced run the
//! dispatch's and the chip's sides for the timeline.

use super::timeline::{self, chip_side, DispatchTrace, TraceSide};
use super::transport::{Chip, Ctl};
use super::wire::{ReplyFrame, TaskFrame, WireArg, WireReport, WireTensor};
use super::worker::chip_dir;
use super::{mailbox, shm, trace, ChipCallable, ChipFault, ChipTaskReport};
use crate::chip::RunReport;
use crate::config::RingSizing;
use crate::engine::PeakUse;
use crate::kernel::KernelCall;
use crate::nextlevel::args::Slot;
use crate::nextlevel::hook::{blocking, HOOK_SLICE};
use crate::nextlevel::{ArgDir, Dispatched, Executor, NextLevelArg, Rec, RunTrace};
use crate::tensor::Tensor;
use parking_lot::RwLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Duration;

/// A node's chips as the executor of its engine.
pub(crate) struct Chips {
    pub(super) chips: Vec<Chip>,
    pub(super) ctl: Ctl,
    /// Every chip's device memory (`NodeOptions::device_memory`).
    pub(super) device_memory: u64,
    pub(super) callables: Arc<RwLock<Vec<ChipCallable>>>,
    /// How many of `chips` are chips; the rest are host workers.
    pub(super) n_chips: usize,
    /// Lanes of the chips; host worker `i` has lane `chip_lanes + i` to itself.
    pub(super) chip_lanes: usize,
    /// Host workers (from the first) a task may leave the choice of worker to.
    pub(super) pool: usize,
    /// Tasks submitted to each host worker and not yet finished.
    pub(super) load: Vec<std::sync::atomic::AtomicU32>,
    /// Where the pool's next choice starts (ties go round).
    pub(super) cursor: std::sync::atomic::AtomicUsize,
}

impl Chips {
    /// The host worker of the pool with the fewest unfinished tasks (ties in turn),
    /// passing over those known dead while a live one is left.
    pub(super) fn pick_pooled(&self) -> Option<usize> {
        let n = self.pool;
        if n == 0 {
            return None;
        }
        let start = self.cursor.fetch_add(1, Relaxed) % n;
        (0..n).map(|k| (start + k) % n).min_by_key(|&i| {
            let dead = self.chips[self.n_chips + i].dead.lock().is_some();
            (dead, self.load[i].load(Relaxed))
        })
    }
}

/// The wire form of a host worker's tensor argument: in shared memory as for a chip,
/// else by its address (region 0), which the host worker, a child of this process,
/// reads where `fork()` left it (memory mapped shared before the fork is shared).
fn host_wire_tensor(t: &Tensor) -> WireTensor {
    wire_tensor(t).unwrap_or_else(|_| WireTensor {
        dtype: t.dtype,
        ndims: t.ndims,
        region: 0,
        region_bytes: t.extent() * t.dtype.size_bytes() as u64,
        offset_bytes: t.data_ptr() as u64,
        shape: t.shape,
        strides: t.strides,
    })
}

/// The wire form of a tensor argument: its shared-memory region and offset.
fn wire_tensor(t: &Tensor) -> Result<WireTensor, String> {
    let bytes = t.extent() * t.dtype.size_bytes() as u64;
    let addr = t.data_ptr() as u64;
    let (region, region_bytes, off) = shm::locate(addr, bytes).ok_or_else(|| {
        "a tensor argument is not in shared memory (use taskring.shared_array or a node allocation)"
            .to_string()
    })?;
    Ok(WireTensor {
        dtype: t.dtype,
        ndims: t.ndims,
        region,
        region_bytes,
        offset_bytes: off,
        shape: t.shape,
        strides: t.strides,
    })
}

/// The rule for tensor argument `i` of an L3 task: a chip maps the caller's shared
/// memory, so an array elsewhere, or a tensor resident on an L4 host, is refused.
fn chip_tensor(i: usize, arg: &NextLevelArg) -> Result<(Tensor, Option<u64>), String> {
    match *arg {
        NextLevelArg::Resident { host, .. } => Err(format!(
            "argument {i} is a tensor resident on L4 host {host}; a chip task takes arrays in shared memory"
        )),
        NextLevelArg::Tensor(t) if wire_tensor(&t).is_ok() => Ok((t, None)),
        _ => Err(format!(
            "argument {i} is not in shared memory (use taskring.shared_array or a node allocation)"
        )),
    }
}

impl Executor for Chips {
    type Traced = DispatchTrace;
    type Fault = ChipFault;
    type Report = ChipTaskReport;

    const KERNEL: &'static str = "chip-dispatch";
    const PROGRAM: &'static str = "l3";
    const WORKER_OF: &'static str = "a chip of this node";
    const HANDLE: &'static str = "callable";
    const WAIT_SPIN: crate::chip::spin::SpinThenPark = mailbox::MAILBOX_SPIN;
    const INLINE_WHEN_TRACED: bool = false;

    fn workers(&self) -> usize {
        self.chips.len()
    }

    fn cancel_flag(&self) -> &AtomicBool {
        &self.ctl.cancel
    }

    fn signature(&self, callable: u32) -> Option<Vec<ArgDir>> {
        let c = self.callables.read();
        c.get(callable as usize).map(|c| c.signature.clone())
    }

    fn tensor_arg(
        &self,
        i: usize,
        arg: &NextLevelArg,
        worker: usize,
    ) -> Result<(Tensor, Option<u64>), String> {
        match *arg {
            NextLevelArg::Tensor(t) if worker >= self.n_chips => Ok((t, None)),
            _ => chip_tensor(i, arg),
        }
    }

    fn lane(&self, worker: usize, lanes: usize) -> usize {
        if worker < self.n_chips {
            worker % self.chip_lanes.max(1)
        } else {
            (self.chip_lanes + worker - self.n_chips).min(lanes - 1)
        }
    }

    /// A chip may still run a task of an interrupted run: wait for its late reply first,
    /// so that task's writes cannot overlap the next run (the hook is called every slice).
    fn before_run(&self, hook: Option<&dyn Fn(bool)>) -> Result<(), String> {
        for c in self
            .chips
            .iter()
            .filter(|c| !c.settle(&self.ctl, Duration::ZERO))
        {
            while !blocking(hook, || c.settle(&self.ctl, HOOK_SLICE)) {
                if self.ctl.cancel.load(Acquire) {
                    return Err("interrupted while chips finished an interrupted run".into());
                }
            }
        }
        Ok(())
    }

    /// Encode the task's frame (its whole config), the round trip to its chip, then the
    /// report (and in a traced run, both sides of the dispatch).
    fn dispatch(
        &self,
        rec: Rec,
        call: &KernelCall<'_>,
        traced_from: Option<u64>,
    ) -> Dispatched<Self> {
        let chip = &self.chips[rec.worker];
        let host = rec.worker >= self.n_chips;
        let traced = traced_from.is_some() && !host;
        // Built only for a traced run (two allocations per dispatch otherwise).
        let swimlane = traced
            .then(|| chip_dir(&rec.config.output_prefix, rec.worker).join("merged_swimlane.json"));
        let after = |posted_ns: u64| {
            swimlane
                .as_deref()
                .map(|path| chip_side(chip, path, posted_ns))
        };
        let args: Result<Vec<WireArg>, ChipFault> = rec
            .slots
            .iter()
            .map(|s| match *s {
                Slot::Tensor { index, .. } if host => {
                    Ok(WireArg::Tensor(host_wire_tensor(&call.tensors[index])))
                }
                Slot::Tensor { index, .. } => wire_tensor(&call.tensors[index])
                    .map(WireArg::Tensor)
                    .map_err(|e| chip.fault(e)),
                Slot::Int(v) => Ok(WireArg::Int(v)),
                Slot::Float(v) => Ok(WireArg::Float(v)),
            })
            .collect();
        let (worker, callable) = (rec.worker, rec.callable);
        let reply: Result<(ReplyFrame, TraceSide), ChipFault> = args.and_then(|args| {
            chip.call(
                &self.ctl,
                &TaskFrame {
                    callable,
                    config: rec.config,
                    args,
                },
                traced,
                after,
            )
        });
        let (reply, side) = match reply {
            Ok((r, side)) => (Ok(r), side),
            Err(e) => (Err(e), None),
        };
        let traced = traced_from.map(|start_ns| {
            let end_ns = trace::mono_ns();
            let (posted_ns, replied_ns, chip) = match side {
                Some((p, r, c)) => (p, r, Some(c)),
                None => (end_ns, end_ns, None),
            };
            let thread = std::thread::current()
                .name()
                .unwrap_or("node thread")
                .to_string();
            DispatchTrace {
                tid: trace::gettid(),
                thread,
                start_ns,
                posted_ns,
                replied_ns,
                chip,
            }
        });
        if host {
            self.load[rec.worker - self.n_chips].fetch_sub(1, Relaxed);
        }
        let (report, fault) = match reply {
            Ok(r) => {
                let fault = (r.status != 0).then(|| chip.own_fault(r.error));
                let text = fault.as_ref().map(ChipFault::to_string);
                (report_of(worker, callable, r.report.as_ref(), text), fault)
            }
            Err(e) => (
                report_of(worker, callable, None, Some(e.to_string())),
                Some(e),
            ),
        };
        Dispatched {
            report,
            fault,
            traced,
        }
    }

    fn write_timeline(&self, t: RunTrace<DispatchTrace>, tasks: &[Rec]) {
        let prefix = std::path::PathBuf::from(&t.prefix);
        if let Err(e) = timeline::build(&self.chips, &self.callables, t, tasks).write(&prefix) {
            eprintln!(
                "taskring: could not write merged_swimlane.json under {}: {e}",
                prefix.display()
            );
        }
    }
}

pub(crate) fn report_of(
    worker: usize,
    callable: u32,
    r: Option<&WireReport>,
    error: Option<String>,
) -> ChipTaskReport {
    ChipTaskReport {
        worker,
        callable,
        run: r.and_then(run_report_of),
        error,
    }
}

/// The L2 report a chip's wire report stands for; `None` when its sizing is not a
/// valid one (a failed run's report carries zeros there).
fn run_report_of(r: &WireReport) -> Option<RunReport> {
    let ring_sizing = RingSizing::from_key_and_sources(r.sizing, r.sources).ok()?;
    Some(RunReport {
        ring_sizing,
        peak: PeakUse::from_array(r.peak),
        tasks: r.tasks,
        arena_hit: r.arena_hit,
        arena_build_s: r.arena_build_s,
        elapsed_s: r.elapsed_s,
        replayed: false,
        device_memory: crate::chip::DeviceMemory::of_sizing(&ring_sizing),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nextlevel::args::task_args;

    #[test]
    fn an_l3_task_takes_only_arrays_in_shared_memory() {
        use ArgDir::*;
        let t = Tensor::from_raw(4096, &[4], crate::tensor::DType::F32);
        let err = |sig: &[ArgDir], args: &[NextLevelArg]| task_args(sig, args, chip_tensor).err();
        assert_eq!(
            err(&[In, Scalar], &[NextLevelArg::Int(1)]).as_deref(),
            Some("the program takes 2 arguments, got 1")
        );
        assert_eq!(
            err(&[In], &[NextLevelArg::Tensor(t)]).as_deref(),
            Some("argument 0 is not in shared memory (use taskring.shared_array or a node allocation)")
        );
        let resident = NextLevelArg::Resident {
            view: t,
            id: 7,
            host: 1,
        };
        assert_eq!(
            err(&[Scalar, In], &[NextLevelArg::Int(3), resident]).as_deref(),
            Some("argument 1 is a tensor resident on L4 host 1; a chip task takes arrays in shared memory")
        );
        assert!(!resident.is_scalar() && NextLevelArg::Float(1.0).is_scalar());
    }
}
