//! The L3 timeline: one Chrome trace (`merged_swimlane.json`, opens in Perfetto) with
//! the host's lanes and every chip's core lanes, on one clock.
//!
//! # The clock
//!
//! Every timestamp is taken on `CLOCK_MONOTONIC` ([`mono_ns`]). It is one system-wide
//! clock: all processes of a machine (of one time namespace; a chip process is forked
//! by the host, so it shares the host's) read the same value at the same instant, so
//! the host's and the chips' times need no offset. A chip records its kernels relative
//! to its run's start (an [`Instant`](std::time::Instant), which std reads from `CLOCK_MONOTONIC` on
//! Linux); the chip converts that start to `CLOCK_MONOTONIC` ([`instant_ns`]) and
//! hands it to the host with its reply, and the host places every chip event at
//! `start + offset`. `tests/l3_trace.rs` checks the claim: each chip event lies inside
//! the host's window of the dispatch that started it (request posted .. reply seen).
//!
//! # The file
//!
//! `ts` / `dur` in microseconds since the host's run started (`otherData.t0_ns` is that
//! start on `CLOCK_MONOTONIC`); one process per participant, named by `process_name`
//! metadata (`host (pid P)`, `chip {worker} (pid P)`), the host first
//! (`process_sort_index`); lanes named by `thread_name`; slices are `X` events; flows
//! are `s` / `f` pairs (`bp: "e"`: bound to the enclosing slice) with ids unique in
//! the file.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};

pub(crate) use crate::dfx::clock::gettid;
pub use crate::dfx::clock::{instant_ns, mono_ns};

/// One slice (`X` event), times on `CLOCK_MONOTONIC`.
#[derive(Clone, Debug)]
pub(crate) struct Slice {
    pub pid: u64,
    pub tid: u64,
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub args: Value,
}

/// A point of a flow: a lane and a time inside the slice it binds to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowEnd {
    pub pid: u64,
    pub tid: u64,
    pub at_ns: u64,
}

/// A flow arrow.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    pub id: u64,
    /// Chrome matches `s` and `f` by category, name and id.
    pub cat: &'static str,
    pub name: String,
    pub from: FlowEnd,
    pub to: FlowEnd,
}

/// A whole timeline (see the module doc).
#[derive(Clone, Debug, Default)]
pub(crate) struct Timeline {
    /// `ts = 0` on `CLOCK_MONOTONIC`.
    pub t0_ns: u64,
    /// `(pid, name)`, in display order.
    pub processes: Vec<(u64, String)>,
    /// `(pid, tid, name)`.
    pub threads: Vec<(u64, u64, String)>,
    pub slices: Vec<Slice>,
    pub flows: Vec<Flow>,
    /// Instant events `(pid, tid, at_ns, text)`: what the merge could not do.
    pub notes: Vec<(u64, u64, u64, String)>,
}

impl Timeline {
    fn us(&self, ns: u64) -> f64 {
        (ns as i128 - self.t0_ns as i128) as f64 / 1000.0
    }

    /// The Chrome trace object.
    pub(crate) fn to_json(&self) -> Value {
        let mut ev = Vec::with_capacity(
            2 * self.processes.len()
                + self.threads.len()
                + self.slices.len()
                + 2 * self.flows.len(),
        );
        for (i, (pid, name)) in self.processes.iter().enumerate() {
            ev.push(json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}));
            ev.push(json!({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": i}}));
        }
        for (pid, tid, name) in &self.threads {
            ev.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}));
        }
        let mut slices: Vec<&Slice> = self.slices.iter().collect();
        slices.sort_by_key(|s| (s.start_ns, std::cmp::Reverse(s.end_ns)));
        for s in slices {
            ev.push(json!({
                "name": s.name, "ph": "X", "pid": s.pid, "tid": s.tid,
                "ts": self.us(s.start_ns), "dur": s.end_ns.saturating_sub(s.start_ns) as f64 / 1000.0, "args": s.args,
            }));
        }
        for f in &self.flows {
            ev.push(json!({"name": f.name, "cat": f.cat, "ph": "s", "id": f.id, "pid": f.from.pid, "tid": f.from.tid, "ts": self.us(f.from.at_ns)}));
            ev.push(json!({"name": f.name, "cat": f.cat, "ph": "f", "bp": "e", "id": f.id, "pid": f.to.pid, "tid": f.to.tid, "ts": self.us(f.to.at_ns)}));
        }
        for (pid, tid, at, text) in &self.notes {
            ev.push(json!({"name": text, "ph": "i", "s": "t", "pid": pid, "tid": tid, "ts": self.us(*at)}));
        }
        json!({"traceEvents": ev, "displayTimeUnit": "ns", "otherData": {"clock": "CLOCK_MONOTONIC", "t0_ns": self.t0_ns}})
    }

    /// Write `<prefix>/merged_swimlane.json`.
    pub(crate) fn write(&self, prefix: &Path) -> std::io::Result<PathBuf> {
        use std::io::Write;
        std::fs::create_dir_all(prefix)?;
        let path = prefix.join("merged_swimlane.json");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        serde_json::to_writer(&mut f, &self.to_json())?;
        f.flush()?;
        Ok(path)
    }
}

/// A chip's own swimlane file (as `dfx::write_swimlane` writes it), times relative to
/// the chip run's start.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChipTrace {
    /// `(tid, name)` of the core lanes.
    pub threads: Vec<(u64, String)>,
    /// Slices with `start_ns` / `end_ns` relative to the run's start (`pid` unset).
    pub slices: Vec<Slice>,
}

/// Read a chip's swimlane file.
pub(crate) fn read_chip_trace(path: &Path) -> Result<ChipTrace, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let events = v
        .get("traceEvents")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{}: no traceEvents", path.display()))?;
    let mut t = ChipTrace::default();
    let ns = |x: Option<&Value>| {
        (x.and_then(Value::as_f64).unwrap_or(0.0).max(0.0) * 1000.0).round() as u64
    };
    for e in events {
        let tid = e.get("tid").and_then(Value::as_u64).unwrap_or(0);
        match e.get("ph").and_then(Value::as_str) {
            Some("M") if e.get("name").and_then(Value::as_str) == Some("thread_name") => {
                let name = e
                    .pointer("/args/name")
                    .and_then(Value::as_str)
                    .unwrap_or("core")
                    .to_string();
                t.threads.push((tid, name));
            }
            Some("X") => {
                let start = ns(e.get("ts"));
                t.slices.push(Slice {
                    pid: 0,
                    tid,
                    name: e
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_string(),
                    start_ns: start,
                    end_ns: start + ns(e.get("dur")),
                    args: e.get("args").cloned().unwrap_or(Value::Null),
                });
            }
            _ => {}
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn instant_and_clock_monotonic_are_one_clock() {
        for _ in 0..100 {
            let a = mono_ns();
            let i = Instant::now();
            let b = mono_ns();
            let x = instant_ns(i);
            // Read between a and b; converted a moment later (a few µs of slack).
            assert!(x + 50_000 >= a && x <= b + 50_000, "{a} {x} {b}");
        }
    }

    #[test]
    fn timeline_json_shape() {
        let mut t = Timeline {
            t0_ns: 1_000_000,
            ..Default::default()
        };
        t.processes.push((7, "host (pid 7)".into()));
        t.threads.push((7, 8, "orchestrator".into()));
        t.slices.push(Slice {
            pid: 7,
            tid: 8,
            name: "a".into(),
            start_ns: 1_002_000,
            end_ns: 1_005_000,
            args: json!({}),
        });
        t.flows.push(Flow {
            id: 3,
            cat: "dispatch",
            name: "d".into(),
            from: FlowEnd {
                pid: 7,
                tid: 8,
                at_ns: 1_003_000,
            },
            to: FlowEnd {
                pid: 9,
                tid: 1,
                at_ns: 1_004_000,
            },
        });
        let v = t.to_json();
        let ev = v["traceEvents"].as_array().unwrap();
        let x = ev.iter().find(|e| e["ph"] == "X").unwrap();
        assert_eq!(
            (x["ts"].as_f64(), x["dur"].as_f64()),
            (Some(2.0), Some(3.0))
        );
        let s = ev.iter().find(|e| e["ph"] == "s").unwrap();
        let f = ev.iter().find(|e| e["ph"] == "f").unwrap();
        assert_eq!(
            (s["id"].as_u64(), f["id"].as_u64(), f["bp"].as_str()),
            (Some(3), Some(3), Some("e"))
        );
        assert_eq!(v["otherData"]["t0_ns"], 1_000_000);
    }
}
