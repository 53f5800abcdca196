//! L3 outputs: the one merged timeline (`merged_swimlane.json` under the run's prefix:
//! host lanes, each chip's lanes as a process named `chip {worker} (pid {pid})`, flows
//! from each dispatch to the chip task it started, one clock) and each chip task's DFX
//! files under `{prefix}/chip{worker}/`.

use parking_lot::RwLock;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use taskring::builtin::*;
use taskring::node::shm::SharedBuffer;
use taskring::node::trace::mono_ns;
use taskring::node::ChipCallable;
use taskring::node::*;
use taskring::*;

static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

mod common;

/// out = a * b + a, in a scope (ring 1) with a runtime temporary: two kernels.
fn mul_add() -> ChipCallable {
    ChipCallable {
        program: Program::new("mul_add", |o, args| {
            let (a, b, out) = (args[0].tensor()?, args[1].tensor()?, args[2].tensor()?);
            o.scope(|o| {
                let ab = common::submit(o, MUL, |t| {
                    t.input(a).input(b).output(common::spec(a.shape()));
                })?
                .output(0);
                common::submit(o, ADD, |t| {
                    t.input(ab).input(a).output_existing(out);
                })
                .map(|_| ())
            })
        }),
        signature: vec![ArgDir::In, ArgDir::In, ArgDir::Out],
    }
}

/// Its kernel fails.
fn boom() -> ChipCallable {
    let k = fn_kernel("boom", CoreKind::Any, |_| panic!("chip-side failure"));
    ChipCallable {
        program: Program::new("boom", move |o, _| {
            o.submit(k, &TaskArgs::new()).map(|_| ())
        }),
        signature: vec![],
    }
}

fn shared(n: usize, v: f32) -> (SharedBuffer, Tensor) {
    let b = SharedBuffer::new(n * 4).unwrap();
    // safety: a fresh buffer of n f32.
    unsafe { std::slice::from_raw_parts_mut(b.as_ptr() as *mut f32, n) }.fill(v);
    let t = Tensor::from_raw(b.as_ptr() as u64, &[n as u32], DType::F32);
    (b, t)
}

fn node(processes: bool) -> Node {
    let opts = NodeOptions {
        device_ids: vec![0, 1],
        chip_processes: processes,
        chip_cores: 2,
        prewarm: Some(CallConfig::default()),
        ..Default::default()
    };
    Node::new(
        opts,
        Arc::new(RwLock::new(vec![mul_add(), boom()])),
        &NoForkHooks,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("taskring-l3-trace-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn dfx(prefix: &Path, stats: bool, lane: bool) -> CallConfig {
    CallConfig {
        enable_scope_stats: stats,
        enable_dep_gen: stats,
        enable_chip_swimlane: lane as u32,
        output_prefix: prefix.to_string_lossy().into_owned(),
        ..CallConfig::default()
    }
}

/// Per chip: one task asking for all DFX outputs under `task_prefix`, one with the
/// default config (the run's swimlane still records it). Returns the outputs.
fn run_two_chips(n: &mut Node, run: CallConfig, task_prefix: PathBuf) -> Vec<SharedBuffer> {
    let (ba, a) = shared(4096, 1.0);
    let (bb, b) = shared(4096, 2.0);
    let outs: Vec<(SharedBuffer, Tensor)> = (0..4).map(|_| shared(4096, 0.0)).collect();
    let ts: Vec<Tensor> = outs.iter().map(|o| o.1).collect();
    n.run(
        move |o| {
            for (i, out) in ts.iter().enumerate() {
                let cfg = if i < 2 {
                    dfx(&task_prefix, true, true)
                } else {
                    CallConfig::default()
                };
                o.submit_next_level(
                    0,
                    &[
                        NextLevelArg::Tensor(a),
                        NextLevelArg::Tensor(b),
                        NextLevelArg::Tensor(*out),
                    ],
                    &cfg,
                    i % 2,
                )?;
            }
            Ok(())
        },
        &run,
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    drop((ba, bb));
    outs.into_iter().map(|o| o.0).collect()
}

fn load(path: &Path) -> Vec<Value> {
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap();
    v["traceEvents"].as_array().unwrap().clone()
}

fn events<'a>(ev: &'a [Value], ph: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    ev.iter().filter(move |e| e["ph"] == ph)
}

/// The window `[ts, ts + dur]` of an X event.
fn window(e: &Value) -> (f64, f64) {
    let ts = e["ts"].as_f64().unwrap();
    (ts, ts + e["dur"].as_f64().unwrap())
}

fn inside(inner: (f64, f64), outer: (f64, f64)) -> bool {
    // ts are microseconds with ns digits: allow rounding of the last digit.
    inner.0 >= outer.0 - 0.002 && inner.1 <= outer.1 + 0.002
}

/// Checks the merged file of a 2-chip run of 4 tasks (tasks 0, 2 on chip 0; 1, 3 on
/// chip 1); `names[w]` is how chip w's process must be named.
fn check_timeline(
    ev: &[Value],
    host_pid: u64,
    names: &[String],
    before_ns: u64,
    after_ns: u64,
    t0_ns: u64,
) {
    let pname = |pid: u64| {
        events(ev, "M")
            .find(|e| e["name"] == "process_name" && e["pid"].as_u64() == Some(pid))
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
    };
    assert_eq!(
        pname(host_pid).as_deref(),
        Some(format!("host (pid {host_pid})").as_str())
    );
    let chip_pid: Vec<u64> = names
        .iter()
        .map(|n| {
            events(ev, "M")
                .find(|e| e["name"] == "process_name" && e["args"]["name"] == n.as_str())
                .unwrap_or_else(|| panic!("no process named {n}"))["pid"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_ne!(chip_pid[0], chip_pid[1]);
    assert!(!chip_pid.contains(&host_pid));
    // Host lanes: the orchestration thread (submits) and dispatch threads.
    let lane_name = |pid: u64, tid: u64| {
        events(ev, "M")
            .find(|e| {
                e["name"] == "thread_name"
                    && e["pid"].as_u64() == Some(pid)
                    && e["tid"].as_u64() == Some(tid)
            })
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
    };
    let task_of = |e: &Value| e["args"]["l3_task"].as_u64();
    let x_of = |pid: u64, prefix: &str, task: u64| {
        events(ev, "X")
            .find(|e| {
                e["pid"].as_u64() == Some(pid)
                    && e["name"].as_str().unwrap().starts_with(prefix)
                    && task_of(e) == Some(task)
            })
            .cloned()
    };
    for task in 0..4u64 {
        let w = (task % 2) as usize;
        let submit = x_of(host_pid, "submit mul_add -> chip", task)
            .unwrap_or_else(|| panic!("no submit of task {task}"));
        assert_eq!(submit["name"], format!("submit mul_add -> chip {w}"));
        assert_eq!(
            lane_name(host_pid, submit["tid"].as_u64().unwrap()).as_deref(),
            Some("orchestrator")
        );
        let d = x_of(host_pid, "dispatch mul_add -> chip", task)
            .unwrap_or_else(|| panic!("no dispatch of task {task}"));
        let dtid = d["tid"].as_u64().unwrap();
        assert!(
            lane_name(host_pid, dtid)
                .unwrap()
                .starts_with("dispatch (taskring-core"),
            "{:?}",
            lane_name(host_pid, dtid)
        );
        let dw = window(&d);
        // One clock: every host and chip time lies within what the test saw around the run.
        let abs = |us: f64| t0_ns as f64 + us * 1000.0;
        assert!(
            abs(dw.0) >= before_ns as f64 && abs(dw.1) <= after_ns as f64,
            "{d} outside the run"
        );
        // The flow from this dispatch to its chip task: s on the dispatch, f on the chip.
        let id = 2 * task + 2;
        let s = events(ev, "s")
            .find(|e| e["id"].as_u64() == Some(id))
            .unwrap_or_else(|| panic!("no flow start {id}"));
        let f = events(ev, "f")
            .find(|e| e["id"].as_u64() == Some(id))
            .unwrap_or_else(|| panic!("no flow finish {id}"));
        assert_eq!(
            (s["cat"].clone(), s["name"].clone()),
            (f["cat"].clone(), f["name"].clone())
        );
        assert_eq!(f["bp"], "e");
        assert_eq!(
            (s["pid"].as_u64(), s["tid"].as_u64()),
            (Some(host_pid), Some(dtid))
        );
        let sts = s["ts"].as_f64().unwrap();
        assert!(inside((sts, sts), dw));
        assert_eq!(f["pid"].as_u64(), Some(chip_pid[w]));
        // The chip task the flow ends in, and its kernels: inside the dispatch's window.
        let ct = events(ev, "X")
            .find(|e| {
                e["pid"].as_u64() == Some(chip_pid[w])
                    && e["name"] == "mul_add"
                    && task_of(e) == Some(task)
            })
            .unwrap();
        assert_eq!(f["tid"], ct["tid"]);
        let fts = f["ts"].as_f64().unwrap();
        assert!(inside((fts, fts), window(ct)), "{f} not in {ct}");
        assert!(
            inside(window(ct), dw),
            "chip task {ct} outside its dispatch {d}"
        );
        let kernels: Vec<&Value> = events(ev, "X")
            .filter(|e| {
                e["pid"].as_u64() == Some(chip_pid[w])
                    && task_of(e) == Some(task)
                    && e["name"] != "mul_add"
            })
            .collect();
        let mut names: Vec<&str> = kernels
            .iter()
            .map(|k| k["name"].as_str().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["add", "mul"], "task {task}");
        for k in kernels {
            assert!(
                inside(window(k), window(ct)),
                "kernel {k} outside chip task {ct}"
            );
            assert!(inside(window(k), dw), "kernel {k} outside dispatch {d}");
            assert!(lane_name(chip_pid[w], k["tid"].as_u64().unwrap())
                .unwrap()
                .starts_with("core "));
        }
        // And the submit's flow to the dispatch.
        assert!(
            events(ev, "s").any(|e| e["id"].as_u64() == Some(2 * task + 1) && e["cat"] == "submit")
        );
    }
    // Host first.
    let sort = |pid: u64| {
        events(ev, "M")
            .find(|e| e["name"] == "process_sort_index" && e["pid"].as_u64() == Some(pid))
            .unwrap()["args"]["sort_index"]
            .as_u64()
            .unwrap()
    };
    assert!(sort(host_pid) < sort(chip_pid[0]) && sort(chip_pid[0]) < sort(chip_pid[1]));
}

/// The merged file at `path`: on CLOCK_MONOTONIC, its start within the run, and
/// [`check_timeline`].
fn check_file(path: &Path, host_pid: u64, names: &[String], before: u64, after: u64) {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(v["otherData"]["clock"], "CLOCK_MONOTONIC");
    let t0 = v["otherData"]["t0_ns"].as_u64().unwrap();
    assert!(before <= t0 && t0 <= after);
    check_timeline(
        v["traceEvents"].as_array().unwrap(),
        host_pid,
        names,
        before,
        after,
        t0,
    );
}

#[test]
fn two_chip_processes_one_timeline_and_per_chip_files() {
    let _serial = SERIAL.lock();
    let mut n = node(true);
    let pids = n.chip_pids();
    let dir = fresh_dir("proc");
    let before = mono_ns();
    let outs = run_two_chips(&mut n, dfx(&dir, false, true), dir.clone());
    let after = mono_ns();
    for o in &outs {
        // safety: each output buffer holds 4096 f32, written by the chips during the
        // run, which has returned: nothing writes them any more.
        let v = unsafe { std::slice::from_raw_parts(o.as_ptr() as *const f32, 4096) };
        assert!(v.iter().all(|&x| x == 3.0));
    }
    let path = dir.join("merged_swimlane.json");
    let names: Vec<String> = pids
        .iter()
        .enumerate()
        .map(|(w, p)| format!("chip {w} (pid {p})"))
        .collect();
    check_file(&path, std::process::id() as u64, &names, before, after);
    // Each chip task's own files under chip{worker}/, nothing of theirs at the prefix.
    for w in 0..2 {
        let c = dir.join(format!("chip{w}"));
        for f in [
            "scope_stats/scope_stats.jsonl",
            "deps.json",
            "merged_swimlane.json",
        ] {
            assert!(c.join(f).is_file(), "{} missing", c.join(f).display());
        }
    }
    assert!(!dir.join("scope_stats").exists() && !dir.join("deps.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn chip_threads_are_processes_of_their_own_on_the_timeline() {
    let _serial = SERIAL.lock();
    let mut n = node(false);
    let dir = fresh_dir("threads");
    let before = mono_ns();
    run_two_chips(&mut n, dfx(&dir, false, true), dir.join("tasks"));
    let after = mono_ns();
    let host = std::process::id();
    let names: Vec<String> = (0..2).map(|w| format!("chip {w} (pid {host})")).collect();
    check_file(
        &dir.join("merged_swimlane.json"),
        host as u64,
        &names,
        before,
        after,
    );
    assert!(
        dir.join("tasks/chip0/deps.json").is_file() && dir.join("tasks/chip1/deps.json").is_file()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn chip_tasks_write_under_their_chip_directory_without_a_run_swimlane() {
    let _serial = SERIAL.lock();
    let mut n = node(true);
    let dir = fresh_dir("nolane");
    run_two_chips(&mut n, CallConfig::default(), dir.clone());
    for w in 0..2 {
        let c = dir.join(format!("chip{w}"));
        assert!(
            c.join("scope_stats/scope_stats.jsonl").is_file()
                && c.join("deps.json").is_file()
                && c.join("merged_swimlane.json").is_file()
        );
        // The chip's own swimlane: its cores.
        let ev = load(&c.join("merged_swimlane.json"));
        assert!(events(&ev, "X").any(|e| e["name"] == "add"));
    }
    assert!(
        !dir.join("merged_swimlane.json").exists(),
        "no run swimlane was asked for"
    );
    // A prefix that already names the chip's directory is used as it is.
    assert_eq!(chip_dir("/x/chip1", 1), PathBuf::from("/x/chip1"));
    assert_eq!(chip_dir("/x/chip1/", 1), PathBuf::from("/x/chip1/"));
    assert_eq!(chip_dir("/x/chip1", 0), PathBuf::from("/x/chip1/chip0"));
    assert_eq!(chip_dir("out", 3), PathBuf::from("out/chip3"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_run_still_writes_its_timeline() {
    let _serial = SERIAL.lock();
    let mut n = node(true);
    let dir = fresh_dir("failed");
    let (_b, t) = shared(16, 1.0);
    let (_o, out) = shared(16, 0.0);
    let r = n.run(
        move |o| {
            o.submit_next_level(
                0,
                &[
                    NextLevelArg::Tensor(t),
                    NextLevelArg::Tensor(t),
                    NextLevelArg::Tensor(out),
                ],
                &CallConfig::default(),
                0,
            )?;
            o.submit_next_level(1, &[], &CallConfig::default(), 1)
                .map(|_| ())
        },
        &dfx(&dir, false, true),
        None,
    );
    let e = r.unwrap_err().to_string();
    assert!(
        e.starts_with("chip 1 (pid ") && e.contains("chip-side failure"),
        "{e}"
    );
    let ev = load(&dir.join("merged_swimlane.json"));
    let pid1 = n.chip_pids()[1] as u64;
    // The failed task: its dispatch, its flow to chip 1, and the kernel that failed there.
    let d = events(&ev, "X")
        .find(|e| e["name"] == "dispatch boom -> chip 1")
        .expect("the failed task's dispatch");
    assert_eq!(d["args"]["l3_task"], 1);
    assert!(events(&ev, "f").any(|e| e["id"] == 4 && e["pid"].as_u64() == Some(pid1)));
    let k = events(&ev, "X")
        .find(|e| {
            e["name"] == "boom"
                && e["pid"].as_u64() == Some(pid1)
                && e["args"].get("ring").is_some()
        })
        .expect("the failed kernel");
    assert!(inside(window(k), window(d)));
    let _ = std::fs::remove_dir_all(&dir);
}
