//! The L4 timeline: one Chrome trace (`merged_swimlane.json` under rank 0's run prefix,
//! opens in Perfetto) with rank 0's dispatches and every host's L3 timeline.
//!
//! A traced L4 run (rank 0's `CallConfig` with `enable_chip_swimlane` and an
//! `output_prefix`) has every L4 task record its host's timeline (the task's own prefix,
//! else the run's; the host writes under its `host{h}/` directory there), and each host
//! sends that file back after its reply (`worker::ships_timeline`). Rank 0 then writes:
//!
//! - process `rank 0 (pid P)`, one lane per dispatch thread (`dispatch (tid T)`), a
//!   slice per L4 task (`{program} -> host {h}`) from its request to its reply
//!   (`args`: the task's index, its host, its error);
//! - each host's processes (`host (pid P)`, `chip {w} (pid P)`) renamed
//!   `host {h} (rank {r}): ...`, with their lanes, slices and flows, from every task it
//!   ran (the events of one process of one host share one `pid` in the file: `pid`s are
//!   renumbered, since hosts on several machines may share a process id; flow ids are
//!   renumbered too);
//! - a flow from each L4 task's slice to the host's run of it.
//!
//! One clock: a host's file has its times relative to its run's start on
//! `CLOCK_MONOTONIC` (`otherData.t0_ns`), which all processes of one machine share; a
//! host run whose start does not fall inside rank 0's dispatch of it (a host on another
//! machine, with its own clock) is placed at the dispatch's start instead, and says so
//! in an instant event.

use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What rank 0 recorded of one L4 task of a traced run.
#[derive(Clone, Debug, Default)]
pub(crate) struct TaskSpan {
    pub worker: usize,
    pub name: String,
    /// The dispatch thread (kernel thread id).
    pub tid: u64,
    /// Request sent .. reply and outputs received, on `CLOCK_MONOTONIC`.
    pub start_ns: u64,
    pub end_ns: u64,
    pub error: Option<String>,
    /// The host's `merged_swimlane.json` of the task (None or empty: none came).
    pub timeline: Option<Vec<u8>>,
}

/// Renumbers a host's processes and flows into the merged file.
#[derive(Default)]
struct Ids {
    pids: HashMap<(usize, u64), u64>,
    named: std::collections::HashSet<(u64, u64)>,
    next_pid: u64,
    next_flow: u64,
}

impl Ids {
    fn pid(&mut self, worker: usize, pid: u64) -> u64 {
        let next = &mut self.next_pid;
        *self.pids.entry((worker, pid)).or_insert_with(|| {
            *next += 1;
            *next
        })
    }
}

/// The merged timeline of a run that started at `t0_ns` (`CLOCK_MONOTONIC`): rank 0
/// (process id `rank0_pid`) and the hosts' timelines of `tasks`.
pub(crate) fn merge(t0_ns: u64, rank0_pid: u32, tasks: &[TaskSpan]) -> Value {
    let us = |ns: u64| (ns as i128 - t0_ns as i128) as f64 / 1000.0;
    let mut ev: Vec<Value> = vec![];
    let mut ids = Ids {
        next_pid: 1,
        ..Default::default()
    };
    let r0 = 1u64;
    ev.push(json!({"name": "process_name", "ph": "M", "pid": r0, "tid": 0, "args": {"name": format!("rank 0 (pid {rank0_pid})")}}));
    ev.push(json!({"name": "process_sort_index", "ph": "M", "pid": r0, "tid": 0, "args": {"sort_index": 0}}));
    let mut lanes = std::collections::BTreeSet::new();
    for t in tasks {
        lanes.insert(t.tid);
    }
    for tid in &lanes {
        ev.push(json!({"name": "thread_name", "ph": "M", "pid": r0, "tid": tid, "args": {"name": format!("dispatch (tid {tid})")}}));
    }
    for (i, t) in tasks.iter().enumerate() {
        let prefix = super::host_prefix(t.worker);
        ev.push(json!({
            "name": format!("{} -> host {}", t.name, t.worker), "ph": "X", "pid": r0, "tid": t.tid, "ts": us(t.start_ns),
            "dur": t.end_ns.saturating_sub(t.start_ns) as f64 / 1000.0,
            "args": {"task": i, "host": t.worker, "rank": t.worker + 1, "error": t.error},
        }));
        let Some(bytes) = t.timeline.as_deref().filter(|b| !b.is_empty()) else {
            continue;
        };
        let host: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                ev.push(json!({"name": format!("{prefix}: its timeline does not parse: {e}"), "ph": "i", "s": "t", "pid": r0, "tid": t.tid, "ts": us(t.start_ns)}));
                continue;
            }
        };
        let host_t0 = host
            .pointer("/otherData/t0_ns")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        // A host's own clock: placed at the dispatch's start.
        let same_clock = host_t0 >= t.start_ns && host_t0 <= t.end_ns;
        let anchor = if same_clock { host_t0 } else { t.start_ns };
        if !same_clock {
            ev.push(json!({"name": format!("{prefix}: another clock; its run placed at the dispatch's start"), "ph": "i", "s": "t", "pid": r0, "tid": t.tid, "ts": us(t.start_ns)}));
        }
        let shift = us(anchor);
        let mut flows: HashMap<u64, u64> = HashMap::new();
        let mut first: Option<(u64, u64, f64)> = None;
        let events = host
            .get("traceEvents")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for mut e in events {
            let Some(obj) = e.as_object_mut() else {
                continue;
            };
            let pid = obj.get("pid").and_then(Value::as_u64).unwrap_or(0);
            let new_pid = ids.pid(t.worker, pid);
            obj.insert("pid".into(), json!(new_pid));
            let ph = obj
                .get("ph")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if ph == "M" {
                let name = obj
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let tid = obj.get("tid").and_then(Value::as_u64).unwrap_or(0);
                let arg = |k: &str| obj.get("args").and_then(|a| a.get(k)).cloned();
                match name.as_str() {
                    "process_name" if !ids.named.contains(&(new_pid, u64::MAX)) => {
                        ids.named.insert((new_pid, u64::MAX));
                        let old = arg("name")
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default();
                        obj.insert("args".into(), json!({"name": format!("{prefix}: {old}")}));
                    }
                    "process_sort_index" if !ids.named.contains(&(new_pid, u64::MAX - 1)) => {
                        ids.named.insert((new_pid, u64::MAX - 1));
                        let k = arg("sort_index").and_then(|v| v.as_u64()).unwrap_or(0);
                        let at = 1 + 1000 * t.worker as u64 + k;
                        obj.insert("args".into(), json!({"sort_index": at}));
                    }
                    "thread_name" if ids.named.insert((new_pid, tid)) => {}
                    _ => continue,
                }
                ev.push(e);
                continue;
            }
            if let Some(ts) = obj.get("ts").and_then(Value::as_f64) {
                let at = ts + shift;
                obj.insert("ts".into(), json!(at));
                if ph == "X" && first.is_none_or(|f| at < f.2) {
                    let tid = obj.get("tid").and_then(Value::as_u64).unwrap_or(0);
                    first = Some((new_pid, tid, at));
                }
            }
            if let Some(id) = obj.get("id").and_then(Value::as_u64) {
                let n = *flows.entry(id).or_insert_with(|| {
                    ids.next_flow += 1;
                    ids.next_flow
                });
                obj.insert("id".into(), json!(n));
            }
            ev.push(e);
        }
        // A flow from the L4 task's slice to the host's first slice of its run.
        if let Some((pid, tid, at)) = first {
            ids.next_flow += 1;
            let id = ids.next_flow;
            let name = format!("L4 task {i}");
            ev.push(json!({"name": name, "cat": "l4", "ph": "s", "id": id, "pid": r0, "tid": t.tid, "ts": us(t.start_ns)}));
            ev.push(json!({"name": name, "cat": "l4", "ph": "f", "bp": "e", "id": id, "pid": pid, "tid": tid, "ts": at}));
        }
    }
    let mut other = Map::new();
    other.insert("clock".into(), json!("CLOCK_MONOTONIC"));
    other.insert("t0_ns".into(), json!(t0_ns));
    other.insert("level".into(), json!(4));
    json!({"traceEvents": ev, "displayTimeUnit": "ns", "otherData": other})
}

/// Write `<prefix>/merged_swimlane.json`.
pub(crate) fn write(prefix: &Path, v: &Value) -> std::io::Result<PathBuf> {
    use std::io::Write;
    std::fs::create_dir_all(prefix)?;
    let path = prefix.join("merged_swimlane.json");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    serde_json::to_writer(&mut f, v)?;
    f.flush()?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_file(t0_ns: u64, pid: u64) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "traceEvents": [
                {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": format!("host (pid {pid})")}},
                {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": 0}},
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": 5, "args": {"name": "orchestrator"}},
                {"name": "run", "ph": "X", "pid": pid, "tid": 5, "ts": 0.0, "dur": 10.0, "args": {}},
                {"name": "d", "cat": "dispatch", "ph": "s", "id": 1, "pid": pid, "tid": 5, "ts": 1.0},
                {"name": "d", "cat": "dispatch", "ph": "f", "bp": "e", "id": 1, "pid": pid, "tid": 5, "ts": 2.0},
            ],
            "otherData": {"clock": "CLOCK_MONOTONIC", "t0_ns": t0_ns},
        }))
        .unwrap()
    }

    fn names(v: &Value) -> Vec<(u64, String)> {
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| {
                (
                    e["pid"].as_u64().unwrap(),
                    e["args"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn every_host_is_a_process_of_its_own_on_rank_0s_clock() {
        let span = |worker, start_ns, pid, t0| TaskSpan {
            worker,
            name: "p".into(),
            tid: 100 + worker as u64,
            start_ns,
            end_ns: start_ns + 1_000_000,
            error: None,
            timeline: Some(host_file(t0, pid)),
        };
        // Two hosts with the same process id (two machines), host 0 twice; host 1's
        // clock is another machine's.
        let tasks = [
            span(0, 2_000_000, 7, 2_100_000),
            span(1, 2_000_000, 7, 99),
            span(0, 4_000_000, 7, 4_100_000),
        ];
        let v = merge(1_000_000, 42, &tasks);
        assert_eq!(
            names(&v),
            [
                (1, "rank 0 (pid 42)".to_string()),
                (2, "host 0 (rank 1): host (pid 7)".to_string()),
                (3, "host 1 (rank 2): host (pid 7)".to_string()),
            ]
        );
        let ev = v["traceEvents"].as_array().unwrap();
        let runs: Vec<(u64, f64)> = ev
            .iter()
            .filter(|e| e["name"] == "run")
            .map(|e| (e["pid"].as_u64().unwrap(), e["ts"].as_f64().unwrap()))
            .collect();
        // Host 0 at its own start (1.1 ms, 3.1 ms after t0); host 1 at its dispatch's.
        assert_eq!(runs, [(2, 1100.0), (3, 1000.0), (2, 3100.0)]);
        assert!(ev
            .iter()
            .any(|e| e["ph"] == "i" && e["name"].as_str().unwrap().contains("another clock")));
        // Flow ids unique in the file: the hosts' three flows and three L4 flows.
        let mut ids: Vec<u64> = ev
            .iter()
            .filter(|e| e["ph"] == "s")
            .map(|e| e["id"].as_u64().unwrap())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 6);
        // One thread name per lane.
        let lanes = ev.iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(
            lanes,
            2 + 2,
            "two dispatch lanes, one orchestrator lane per host"
        );
    }
}
