//! A traced L3 run's timeline: what each dispatch records of itself and of its chip's
//! side ([`DispatchTrace`], [`ChipSide`]), and the run's timeline built from those
//! records (the file format and the clock are [`trace`]'s).

use super::transport::Chip;
use super::{trace, ChipCallable};
use crate::nextlevel::{Rec, RunTrace, TaskTrace};
use parking_lot::RwLock;
use std::sync::atomic::Ordering::Acquire;

/// A dispatch on a node thread and what its chip reported.
pub(crate) struct DispatchTrace {
    pub(super) tid: u64,
    pub(super) thread: String,
    pub(super) start_ns: u64,
    /// Request posted (after waiting for the chip's turn) and reply seen.
    pub(super) posted_ns: u64,
    pub(super) replied_ns: u64,
    /// The chip's side; None when no reply came.
    pub(super) chip: Option<ChipSide>,
}

/// A chip's side of one task: the thread that served it, when, and its own swimlane.
pub(crate) struct ChipSide {
    pub(super) tid: u64,
    pub(super) served_ns: u64,
    pub(super) replied_ns: u64,
    /// The swimlane's `ts = 0` on the host's clock; the events, or why there are none.
    pub(super) t0_ns: u64,
    pub(super) events: Result<trace::ChipTrace, String>,
}

/// What the host records of one dispatch's round trip for the timeline: when the request
/// was posted, when the reply was seen, and the chip's side.
pub(super) type TraceSide = Option<(u64, u64, ChipSide)>;

/// The chip's side of a traced dispatch, read while the host still holds the chip's
/// turn (no later task of that chip can overwrite its swimlane file first).
pub(super) fn chip_side(
    chip: &Chip,
    swimlane: &std::path::Path,
    posted_ns: u64,
) -> (u64, u64, ChipSide) {
    let replied_ns = trace::mono_ns();
    let h = chip.mailbox.header();
    let t0_ns = h.trace_t0_ns.load(Acquire);
    let events = if t0_ns == 0 {
        Err("the chip recorded no swimlane".to_string())
    } else {
        trace::read_chip_trace(swimlane)
    };
    let side = ChipSide {
        tid: h.served_tid.load(Acquire) as u64,
        served_ns: h.served_ns.load(Acquire),
        replied_ns: h.replied_ns.load(Acquire),
        t0_ns,
        events,
    };
    (posted_ns, replied_ns, side)
}

/// The run's L3 timeline (see [`trace`]): the host (its orchestration thread with
/// each task's submit; each dispatch on the node thread that ran it), then each
/// chip (the thread that served each task, its cores' kernels); a flow from each
/// submit to its dispatch and from each dispatch to the chip task it started
/// ([`TaskLane`] adds one task's part).
pub(super) fn build(
    chips: &[Chip],
    callables: &RwLock<Vec<ChipCallable>>,
    t: RunTrace<DispatchTrace>,
    tasks: &[Rec],
) -> trace::Timeline {
    use serde_json::json;
    let end_ns = trace::mono_ns();
    let host = std::process::id() as u64;
    let names: Vec<String> = callables
        .read()
        .iter()
        .map(|c| c.program.name().to_string())
        .collect();
    let mut tl = trace::Timeline {
        t0_ns: t.t0_ns,
        ..Default::default()
    };
    tl.processes.push((host, format!("host (pid {host})")));
    for c in chips {
        tl.processes.push((c.lane_pid(), c.prefix()));
    }
    tl.threads.push((host, t.orch_tid, "orchestrator".into()));
    tl.slices.push(trace::Slice {
        pid: host,
        tid: t.orch_tid,
        name: "L3 run".into(),
        start_ns: t.t0_ns,
        end_ns,
        args: json!({"tasks": tasks.len()}),
    });
    // Threads already named on the timeline, by (pid, tid).
    let mut seen = std::collections::HashSet::new();
    for (i, (task, tt)) in tasks.iter().zip(&t.tasks).enumerate() {
        let w = task.worker;
        let prog = names
            .get(task.callable as usize)
            .map(String::as_str)
            .unwrap_or("?");
        let lane = TaskLane {
            i,
            worker: w,
            prog,
            args: json!({"l3_task": i, "worker": w, "program": prog}),
        };
        let Some(at_dispatch) = lane.host_side(&mut tl, &mut seen, host, t.orch_tid, tt) else {
            continue;
        };
        if let Some(c) = tt.dispatch.as_ref().and_then(|d| d.chip.as_ref()) {
            let pid = chips[w].lane_pid();
            lane.chip_side(&mut tl, &mut seen, pid, c, at_dispatch);
        }
    }
    tl
}

/// One L3 task's part of the run's timeline.
struct TaskLane<'a> {
    i: usize,
    worker: usize,
    prog: &'a str,
    args: serde_json::Value,
}

impl TaskLane<'_> {
    /// Its submit on the orchestration thread, its dispatch on a node thread and the flow
    /// between them; the dispatch's end of the next flow (None: it was never dispatched).
    fn host_side(
        &self,
        tl: &mut trace::Timeline,
        seen: &mut std::collections::HashSet<(u64, u64)>,
        host: u64,
        orch_tid: u64,
        tt: &TaskTrace<DispatchTrace>,
    ) -> Option<trace::FlowEnd> {
        let (i, w, prog) = (self.i, self.worker, self.prog);
        if let Some((s, e)) = tt.submit {
            tl.slices.push(trace::Slice {
                pid: host,
                tid: orch_tid,
                name: format!("submit {prog} -> chip {w}"),
                start_ns: s,
                end_ns: e,
                args: self.args.clone(),
            });
        }
        let d = tt.dispatch.as_ref()?;
        if seen.insert((host, d.tid)) {
            tl.threads
                .push((host, d.tid, format!("dispatch ({})", d.thread)));
        }
        let mut dargs = self.args.clone();
        dargs["waited_for_chip_us"] =
            serde_json::json!(d.posted_ns.saturating_sub(d.start_ns) as f64 / 1000.0);
        tl.slices.push(trace::Slice {
            pid: host,
            tid: d.tid,
            name: format!("dispatch {prog} -> chip {w}"),
            start_ns: d.start_ns,
            end_ns: d.replied_ns,
            args: dargs,
        });
        let at_dispatch = trace::FlowEnd {
            pid: host,
            tid: d.tid,
            at_ns: d.posted_ns,
        };
        if let Some((s, e)) = tt.submit {
            let from = trace::FlowEnd {
                pid: host,
                tid: orch_tid,
                at_ns: s + (e - s) / 2,
            };
            tl.flows.push(trace::Flow {
                id: 2 * i as u64 + 1,
                cat: "submit",
                name: "submit".into(),
                from,
                to: at_dispatch,
            });
        }
        Some(at_dispatch)
    }

    /// The chip's slice for the task (on the thread that served it), the flow from the
    /// dispatch, and the chip's own core lanes with their kernels.
    fn chip_side(
        &self,
        tl: &mut trace::Timeline,
        seen: &mut std::collections::HashSet<(u64, u64)>,
        pid: u64,
        c: &ChipSide,
        at_dispatch: trace::FlowEnd,
    ) {
        let (i, w) = (self.i, self.worker);
        if seen.insert((pid, c.tid)) {
            tl.threads
                .push((pid, c.tid, format!("orchestrator (tid {})", c.tid)));
        }
        tl.slices.push(trace::Slice {
            pid,
            tid: c.tid,
            name: self.prog.to_string(),
            start_ns: c.served_ns,
            end_ns: c.replied_ns,
            args: self.args.clone(),
        });
        let to = trace::FlowEnd {
            pid,
            tid: c.tid,
            at_ns: c.served_ns + (c.replied_ns.saturating_sub(c.served_ns) / 2).min(1000),
        };
        tl.flows.push(trace::Flow {
            id: 2 * i as u64 + 2,
            cat: "dispatch",
            name: "dispatch".into(),
            from: at_dispatch,
            to,
        });
        // A chip's file numbers its cores 0, 1, ...: on the timeline each core lane
        // gets a tid of its own (Perfetto keeps a thread by tid; tids are below 2^22).
        let core_tid = |core: u64| (1 << 30) + ((w as u64) << 16) + core;
        match &c.events {
            Ok(ev) => {
                for (tid, name) in &ev.threads {
                    if seen.insert((pid, core_tid(*tid))) {
                        tl.threads.push((pid, core_tid(*tid), name.clone()));
                    }
                }
                for e in &ev.slices {
                    let mut a = e.args.clone();
                    if let Some(m) = a.as_object_mut() {
                        m.insert("l3_task".into(), serde_json::json!(i));
                    }
                    tl.slices.push(trace::Slice {
                        pid,
                        tid: core_tid(e.tid),
                        name: e.name.clone(),
                        start_ns: c.t0_ns + e.start_ns,
                        end_ns: c.t0_ns + e.end_ns,
                        args: a,
                    });
                }
            }
            Err(why) => tl.notes.push((
                pid,
                c.tid,
                c.replied_ns,
                format!("no chip swimlane for L3 task {i}: {why}"),
            )),
        }
    }
}
