//! Scope stats written by a dispatch, read back by the sizing advisor, whose advice
//! then makes a failing program fit.

mod common;
use common::*;
use taskring::builtin::*;
use taskring::*;

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "taskring-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Per step: a scope holding `per_scope` tasks with 1 KiB outputs each.
fn program(per_scope: usize) -> Program {
    Program::new("steps", move |o, _| {
        for _ in 0..3 {
            o.scope(|o| {
                let mut prev: Option<Tensor> = None;
                for _ in 0..per_scope {
                    let out = submit(o, FILL, |t| {
                        t.output(spec(&[256])).scalar(Scalar::F64(1.0));
                    })?
                    .output(0);
                    if let Some(p) = prev {
                        submit(o, COPY, |t| {
                            t.input(p).output_existing(out);
                        })?;
                    }
                    prev = Some(out);
                }
                Ok(())
            })?;
        }
        Ok(())
    })
}

#[test]
fn stats_file_and_advice_round_trip() {
    let dir = tempdir("stats");
    let mut w = chip(2);
    let mut cfg = CallConfig::default();
    cfg.enable_scope_stats = true;
    cfg.output_prefix = dir.to_string_lossy().into_owned();
    cfg.runtime_env.ring_task_window = [16, 16, 16, 16];
    cfg.runtime_env.ring_heap = [1 << 20, 4096, 1 << 20, 1 << 20];

    // 11 tasks per scope fit a window of 16; ring 1's heap of 4096 holds only 4 of the 6 pinned outputs.
    let e = w.run(&program(6), &[], &cfg).unwrap_err();
    let RunError::Failure(f) = e else {
        panic!("{e}")
    };
    assert_eq!(f.code, StatusCode::HeapRingDeadlock, "{f}");
    let path = dir.join("scope_stats/scope_stats.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["version"], 6);
    assert_eq!(first["fatal"], true);
    assert_eq!(
        first["task_window_max"],
        serde_json::json!([16, 16, 16, 16])
    );
    assert_eq!(first["failure"]["name"], "HEAP_RING_DEADLOCK");
    let samples: Vec<serde_json::Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(samples[0]["phase"], "begin");
    assert_eq!(samples[0]["depth"], 0);
    assert_eq!(samples[0]["site"], "root");
    assert!(
        samples[1]["site"]
            .as_str()
            .unwrap()
            .contains("scope_stats.rs:"),
        "{}",
        samples[1]
    );
    assert_eq!(samples[1]["ring"], 1);

    // Following the advisor converges: each failed run's advice is a next step.
    let mut rep = None;
    for _ in 0..4 {
        let text = std::fs::read_to_string(&path).unwrap();
        let a = dfx::advise(&dfx::read_peaks(&text).unwrap(), 1.0);
        cfg.runtime_env.ring_task_window = a.task_window;
        cfg.runtime_env.ring_heap = a.heap;
        cfg.runtime_env.ring_dep_pool = a.dep_pool;
        if let Ok(r) = w.run(&program(6), &[], &cfg) {
            rep = Some(r);
            break;
        }
    }
    let rep = rep.expect("the advisor converged within 4 runs");
    // Tight advice from a successful run (headroom 1.0) still fits for the window and
    // the heap (deterministic for this program). The dependency-pool demand depends on
    // timing (an edge to a producer that already completed needs no node), so it gets
    // headroom.
    let text = std::fs::read_to_string(&path).unwrap();
    let peaks = dfx::read_peaks(&text).unwrap();
    let a = dfx::advise(&peaks, 1.0);
    let mut tight = cfg.clone();
    tight.runtime_env.ring_task_window = a.task_window;
    tight.runtime_env.ring_heap = a.heap;
    tight.runtime_env.ring_dep_pool = dfx::advise(&peaks, 2.0).dep_pool;
    w.run(&program(6), &[], &tight)
        .unwrap_or_else(|e| panic!("tight advice {a:?} did not fit: {e}"));
    let text = std::fs::read_to_string(&path).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["fatal"], false);
    assert!(first["peak_heap"][1].as_u64().unwrap() >= 6 * 1024 && rep.peak.heap[1] >= 6 * 1024);
    // begin/end pairs: root + 3 scopes.
    assert_eq!(text.lines().count(), 1 + 8);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program whose peaks are exact (every task pinned by its open scope, no inferred
/// edges): the file states them, the advice fits, and halving any advised window or heap
/// fails with the matching code.
#[test]
fn exact_maxima_and_halving_fails() {
    let dir = tempdir("exact");
    // One scope: its five tasks stay pinned until it ends, so the peaks are exact.
    // (With several scopes in a row the next scope may start before the previous one's
    // tasks retired: that peak depends on timing.)
    let prog = Program::new("exact", |o, _| {
        o.scope(|o| {
            for _ in 0..5 {
                submit(o, FILL, |t| {
                    t.output(spec(&[512])).scalar(Scalar::F64(0.0)); // 2 KiB each
                })?;
            }
            Ok(())
        })
    });
    let mut w = chip(2);
    let mut cfg = CallConfig::default();
    cfg.enable_scope_stats = true;
    cfg.output_prefix = dir.to_string_lossy().into_owned();
    w.run(&prog, &[], &cfg).unwrap();
    let text = std::fs::read_to_string(dir.join("scope_stats/scope_stats.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["peak_task_window"], serde_json::json!([0, 5, 0, 0]));
    assert_eq!(first["peak_heap"], serde_json::json!([0, 10240, 0, 0]));
    let samples: Vec<serde_json::Value> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // root begin, scope begin, scope end, root end
    assert_eq!(samples.len(), 4);
    let end1 = &samples[2];
    assert_eq!(
        (end1["phase"].as_str(), end1["ring"].as_u64()),
        (Some("end"), Some(1))
    );
    assert_eq!(
        end1["task_window_end"].as_u64().unwrap()
            - samples[1]["task_window_start"].as_u64().unwrap(),
        5
    );
    assert_eq!(
        end1["heap_end"].as_u64().unwrap() - samples[1]["heap_start"].as_u64().unwrap(),
        10240
    );

    let a = dfx::advise(&dfx::read_peaks(&text).unwrap(), 1.0);
    assert_eq!(a.task_window[1], 8);
    assert_eq!(a.heap[1], 16384);
    let with = |w: [u64; 4], h: [u64; 4]| {
        let mut c = CallConfig::default();
        c.runtime_env.ring_task_window = w;
        c.runtime_env.ring_heap = h;
        c
    };
    w.run(&prog, &[], &with(a.task_window, a.heap))
        .expect("the advice fits");
    let mut half_w = a.task_window;
    half_w[1] /= 2;
    let e = w.run(&prog, &[], &with(half_w, a.heap)).unwrap_err();
    let RunError::Failure(f) = e else {
        panic!("{e}")
    };
    assert_eq!(
        (f.code, f.ring),
        (StatusCode::ScopeDeadlock, Some(1)),
        "{f}"
    );
    let mut half_h = a.heap;
    half_h[1] /= 2;
    let e = w.run(&prog, &[], &with(a.task_window, half_h)).unwrap_err();
    let RunError::Failure(f) = e else {
        panic!("{e}")
    };
    assert_eq!(
        (f.code, f.ring),
        (StatusCode::HeapRingDeadlock, Some(1)),
        "{f}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn deps_json_and_swimlane() {
    let dir = tempdir("trace");
    let prog = Program::new("chain3", |o, args| {
        let x = args[0].tensor()?;
        o.scope(|o| {
            let a = submit(o, FILL, |t| {
                t.output(spec(&[64])).scalar(Scalar::F64(1.0));
            })?
            .output(0);
            let b = submit(o, SCALE, |t| {
                t.input(a).output(spec(&[64])).scalar(Scalar::F64(2.0));
            })?
            .output(0);
            submit(o, COPY, |t| {
                t.input(b).output_existing(x);
            })
            .map(|_| ())
        })
    });
    let mut w = chip(2);
    let mut cfg = CallConfig::default();
    cfg.enable_dep_gen = true;
    cfg.enable_chip_swimlane = 4;
    cfg.output_prefix = dir.to_string_lossy().into_owned();
    let mut x = vec![0f32; 64];
    let args = [host(&mut x, &[64])];
    w.run(&prog, &args, &cfg).unwrap();
    let _ = &args;
    assert!(x.iter().all(|&v| v == 2.0));
    let deps: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("deps.json")).unwrap()).unwrap();
    let tasks = deps["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 3);
    assert_eq!(tasks[1]["kernel"], "scale");
    // The creator edges fill -> scale -> copy (the full format: tests/deps_json.rs).
    let edges = deps["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 2, "{edges:?}");
    assert_eq!(
        (&edges[0]["pred"], &edges[0]["succ"]),
        (&tasks[0]["id"], &tasks[1]["id"])
    );
    assert_eq!(edges[0]["flags"], serde_json::json!(["wait", "retain"]));
    assert_eq!(edges[0]["source"], "tensormap");
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("merged_swimlane.json")).unwrap())
            .unwrap();
    let runs: Vec<&serde_json::Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert_eq!(runs.len(), 3);
    let names: Vec<&str> = runs.iter().map(|e| e["name"].as_str().unwrap()).collect();
    for k in ["fill", "scale", "copy"] {
        assert!(names.contains(&k), "{names:?}");
    }
    // Dependent tasks do not overlap in time.
    let span = |k: &str| {
        let e = runs.iter().find(|e| e["name"] == k).unwrap();
        (
            e["ts"].as_f64().unwrap(),
            e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap(),
        )
    };
    assert!(span("fill").1 <= span("scale").0 && span("scale").1 <= span("copy").0);
    // Without the flags nothing is written.
    let dir2 = tempdir("notrace");
    let mut plain = CallConfig::default();
    plain.output_prefix = dir2.to_string_lossy().into_owned();
    let args = [host(&mut x, &[64])];
    w.run(&prog, &args, &plain).unwrap();
    assert!(!dir2.join("deps.json").exists() && !dir2.join("merged_swimlane.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}
