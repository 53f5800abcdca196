//! Per-dispatch ring sizing through `ChipWorker::run`: precedence, the arena cache,
//! prewarm, and many sizings on one chip.

mod common;
use common::*;
use taskring::builtin::*;
use taskring::rss_bytes;
use taskring::*;

/// out = 2 * (a + b) through a runtime temporary, in a scope (ring 1), plus a small
/// inner-scope task on ring 2 and a root-level fill.
fn program() -> Program {
    Program::new("vadd2", |o, args| {
        let (a, b, out) = (args[0].tensor()?, args[1].tensor()?, args[2].tensor()?);
        let n = a.shape()[0];
        o.scope(|o| {
            let tmp = submit(o, ADD, |t| {
                t.input(a).input(b).output(spec(&[n]));
            })?
            .output(0);
            o.scope(|o| {
                submit(o, SCALE, |t| {
                    t.input(tmp).output_existing(out).scalar(Scalar::F64(2.0));
                })
                .map(|_| ())
            })
        })
    })
}

fn run_checked(w: &mut ChipWorker, cfg: &CallConfig, n: usize) -> RunReport {
    let mut a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.5).collect();
    let mut out = vec![0f32; n];
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| 2.0 * (x + y)).collect();
    let args = [
        host(&mut a, &[n as u32]),
        host(&mut b, &[n as u32]),
        host(&mut out, &[n as u32]),
    ];
    let rep = w
        .run(&program(), &args, cfg)
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = &args;
    assert_eq!(out, want);
    rep
}

fn cfg(window: [u64; 4], heap: [u64; 4], dep: [u64; 4]) -> CallConfig {
    let runtime_env = RuntimeEnv {
        ring_task_window: window,
        ring_heap: heap,
        ring_dep_pool: dep,
    };
    CallConfig {
        runtime_env,
        ..Default::default()
    }
}

#[test]
fn dispatch_reports_its_own_sizing_and_peaks() {
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        arena_cache_slots: 3,
        ..Default::default()
    })
    .unwrap();
    // Cycle through five different sizings (more than the cache holds).
    let sizings = [
        cfg([0; 4], [0; 4], [0; 4]),
        cfg([8, 4, 4, 4], [4096, 8192, 4096, 1024], [4, 8, 4, 4]),
        cfg([16, 0, 32, 0], [0, 1 << 20, 0, 0], [0, 0, 0, 64]),
        cfg([4; 4], [1 << 16; 4], [16; 4]),
        cfg([128, 64, 32, 16], [0; 4], [256, 0, 0, 0]),
    ];
    for round in 0..3 {
        for c in &sizings {
            let rep = run_checked(&mut w, c, 256);
            for r in 0..4 {
                let want_w = if c.runtime_env.ring_task_window[r] == 0 {
                    16384
                } else {
                    c.runtime_env.ring_task_window[r]
                };
                // Only when no PTO2_RING_* is set in the test environment.
                if std::env::var_os("PTO2_RING_TASK_WINDOW").is_none() {
                    assert_eq!(rep.ring_sizing.task_window[r], want_w);
                }
            }
            assert_eq!(rep.peak.task_window, [0, 1, 1, 0]);
            assert_eq!(rep.peak.heap, [0, 1024, 0, 0]);
            assert_eq!(rep.tasks, 2);
            if round > 0 {
                // 5 sizings through 3 slots with LRU: every dispatch misses.
                assert!(!rep.arena_hit);
            }
        }
    }
    let st = w.arena_stats();
    assert_eq!(st.builds, 15);
    assert_eq!(st.evictions, 12);
    assert_eq!(st.resident.len(), 3);
}

#[test]
fn prewarm_then_dispatch_builds_nothing() {
    let small = RingSizing::resolve(
        &cfg([8; 4], [4096; 4], [8; 4]).runtime_env,
        &EnvSnapshot::empty(),
    )
    .unwrap()
    .0;
    let mut w = ChipWorker::new(ChipOptions {
        cores: 2,
        prewarm: vec![RingSizing::default(), small],
        ..Default::default()
    })
    .unwrap();
    let st = w.arena_stats();
    assert_eq!((st.builds, st.hits, st.misses), (2, 0, 0));
    let rep = w.run_with_sizing(&program_noop(), &[], &small).unwrap();
    assert!(rep.arena_hit);
    assert_eq!(rep.arena_build_s, 0.0);
    // An explicit value equal to the default hits the default's arena.
    let explicit = RingSizing::uniform(16384, 256 << 20, 16384).unwrap();
    let rep = w.run_with_sizing(&program_noop(), &[], &explicit).unwrap();
    assert!(rep.arena_hit);
    let st = w.arena_stats();
    assert_eq!((st.builds, st.hits, st.misses), (2, 2, 0));
    assert_eq!(st.resident[0], RingSizing::default().key());
}

fn program_noop() -> Program {
    Program::new("noop", |o, _| o.submit(NOOP, &TaskArgs::new()).map(|_| ()))
}

#[test]
fn alternating_two_sizings_single_slot_vs_two() {
    let a = RingSizing::uniform(8, 4096, 8).unwrap();
    let b = RingSizing::from_values([8, 4, 4, 4], [4096; 4], [8; 4]).unwrap();
    for (slots, want_builds) in [(1usize, 10u64), (2, 2)] {
        let mut w = ChipWorker::new(ChipOptions {
            cores: 1,
            arena_cache_slots: slots,
            ..Default::default()
        })
        .unwrap();
        for i in 0..10 {
            let s = if i % 2 == 0 { &a } else { &b };
            let rep = w.run_with_sizing(&program_noop(), &[], s).unwrap();
            assert_eq!(rep.ring_sizing, *s);
        }
        assert_eq!(w.arena_stats().builds, want_builds, "slots={slots}");
    }
}

#[test]
fn eviction_returns_memory() {
    // Touch a big heap, then evict its arena: RSS must drop back.
    let big =
        RingSizing::from_values([16384; 4], [64 << 20, 1024, 1024, 1024], [16384; 4]).unwrap();
    let mut w = ChipWorker::new(ChipOptions {
        cores: 1,
        arena_cache_slots: 1,
        ..Default::default()
    })
    .unwrap();
    let touch = Program::new("touch", |o, _| {
        for _ in 0..48 {
            submit(o, FILL, |t| {
                t.output(spec(&[256 * 1024])).scalar(Scalar::F64(1.0));
            })?;
        }
        Ok(())
    });
    let before = rss_bytes();
    w.run_with_sizing(&touch, &[], &big).unwrap();
    let touched = rss_bytes();
    assert!(
        touched > before + (40 << 20),
        "run should have committed ~48 MiB: {before} -> {touched}"
    );
    w.run_with_sizing(
        &program_noop(),
        &[],
        &RingSizing::uniform(4, 1024, 4).unwrap(),
    )
    .unwrap();
    let after = rss_bytes();
    assert!(
        after + (40 << 20) < touched,
        "eviction did not return memory: {touched} -> {after}"
    );
}

#[test]
fn invalid_config_is_rejected_before_anything_runs() {
    let mut w = chip(1);
    let bad = cfg([3, 0, 0, 0], [0; 4], [0; 4]);
    let e = w.run(&program_noop(), &[], &bad).unwrap_err();
    assert_eq!(
        e.to_string(),
        "RuntimeEnv: ring_task_window[0] must be a power of 2 in [4, 1073741824], got 3"
    );
    // The broken rule is data too, not only text.
    let RunError::Config(ce) = e else {
        panic!("expected a config error")
    };
    assert_eq!(
        ce.kind(),
        &ConfigErrorKind::RuntimeEnvEntry {
            field: RingField::TaskWindow,
            ring: 0,
            value: 3
        }
    );
    let c = CallConfig {
        enable_scope_stats: true,
        ..Default::default()
    };
    let e = w.run(&program_noop(), &[], &c).unwrap_err();
    assert!(e
        .to_string()
        .starts_with("CallConfig: output_prefix must be set"));
    assert!(
        matches!(e, RunError::Config(ce) if *ce.kind() == ConfigErrorKind::OutputPrefixRequired)
    );
    assert_eq!(w.arena_stats().builds, 0);
}

/// This test binary, to run only test `name` in a child process (whose environment the
/// caller sets).
fn child_running(name: &str) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    c
}

/// Real process environment: the child (this same test binary) resolves its dispatch
/// sizing with `PTO2_RING_*` set; per-task entries win where non-zero.
#[test]
fn env_precedence_in_a_subprocess() {
    if std::env::var_os("TASKRING_ENV_CHILD").is_some() {
        let mut w = chip(1);
        let c = cfg([128, 0, 0, 0], [0; 4], [0, 0, 0, 32]);
        let rep = w.run(&program_noop(), &[], &c).unwrap();
        let s = &rep.ring_sizing;
        println!("CHILD {}", s);
        println!(
            "SOURCES {} {} {} {}",
            s.source(RingField::TaskWindow, 0).as_str(),
            s.source(RingField::TaskWindow, 1).as_str(),
            s.source(RingField::Heap, 0).as_str(),
            s.source(RingField::DepPool, 3).as_str()
        );
        return;
    }
    let out = child_running("env_precedence_in_a_subprocess")
        .env("TASKRING_ENV_CHILD", "1")
        .env("PTO2_RING_TASK_WINDOW", "64,256,0,32")
        .env("PTO2_RING_HEAP", "banana")
        .env("PTO2_RING_DEP_POOL", "512")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(
            "CHILD Ring buffer sizes: ring0 window=128 heap=268435456 dep_pool=512; ring1 window=256 heap=268435456 dep_pool=512; ring2 window=16384 heap=268435456 dep_pool=512; ring3 window=32 heap=268435456 dep_pool=32"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("SOURCES call_config env default call_config"),
        "{stdout}"
    );
    assert!(
        stderr.contains("PTO2_RING_HEAP=banana"),
        "no warning for the bad variable: {stderr}"
    );
}

/// `EnvSnapshot::from_process` (one pass over `environ`) reads what three `getenv`s
/// would, in a child with names that share the prefix but are not the variables, an
/// empty value, a value that is not UTF-8, and one variable unset.
#[test]
fn the_one_pass_environment_read_agrees_with_getenv() {
    use std::os::unix::ffi::OsStrExt;
    let by_name = || {
        EnvSnapshot::from_lookup(|n| std::env::var_os(n).map(|v| v.to_string_lossy().into_owned()))
    };
    if std::env::var_os("TASKRING_ENV_SCAN_CHILD").is_some() {
        let snap = EnvSnapshot::from_process();
        assert_eq!(snap, by_name());
        assert_eq!(snap.task_window.as_deref(), Some(""));
        assert_eq!(snap.heap.as_deref(), Some("1\u{fffd}2"));
        assert_eq!(snap.dep_pool, None);
        println!("CHILD AGREES");
        return;
    }
    let out = child_running("the_one_pass_environment_read_agrees_with_getenv")
        .env("TASKRING_ENV_SCAN_CHILD", "1")
        .env("PTO2_RING_", "7")
        .env("PTO2_RING_HEAPS", "8")
        .env("PTO2_RING_TASK", "9")
        .env("PTO2_RING_DEP_POOLX", "3")
        .env("PTO2_RING_TASK_WINDOW", "")
        .env("PTO2_RING_HEAP", std::ffi::OsStr::from_bytes(b"1\xff2"))
        .env("PTO2", "x")
        .env_remove("PTO2_RING_DEP_POOL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("CHILD AGREES"), "{stdout}");
}

#[test]
fn run_with_sizing_refuses_a_sizing_changed_to_break_a_rule_and_runs_nothing() {
    let mut w = chip(2);
    let prog = program_noop();
    let mut bad = RingSizing::uniform(64, 64 << 10, 256).unwrap();
    bad.task_window[1] = 48;
    let e = w.run_with_sizing(&prog, &[], &bad).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgs, "{e}");
    assert!(
        e.to_string().contains(
            "RingSizing: ring_task_window[1] must be a power of 2 in [4, 1073741824], got 48"
        ),
        "{e}"
    );
    let mut bad = RingSizing::default();
    bad.dep_pool[3] = 0;
    let e = w.run_with_sizing(&prog, &[], &bad).unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgs, "{e}");
    assert!(e.to_string().contains("ring_dep_pool[3]"), "{e}");
    // Refused before anything ran or was built: the worker runs the next dispatch.
    let good = RingSizing::uniform(64, 64 << 10, 256).unwrap();
    let rep = w.run_with_sizing(&prog, &[], &good).unwrap();
    assert_eq!(rep.tasks, 1);
}
