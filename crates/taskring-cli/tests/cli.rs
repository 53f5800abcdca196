//! The `taskring` command never aborts: impossible sizes are a one-line message and exit
//! status 2 (API.md §6.1); `taskring sizing` gives valid sizes for any file.

use std::process::{Command, Output};

fn taskring(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_taskring"))
        .args(args)
        .output()
        .expect("run taskring")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit 2, one line on stderr naming the problem, no panic.
fn usage_error(args: &[&str], want: &str) {
    let o = taskring(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: expected '{want}' in: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{args:?}: {err}"
    );
}

#[test]
fn taskbench_impossible_sizes_exit_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "-kernel",
                "memory_bound",
                "-scratch",
                "99999999999999",
                "-steps",
                "1",
                "-width",
                "1",
            ],
            "-scratch 99999999999999 bytes is more than this machine's memory",
        ),
        (
            &[
                "-kernel",
                "memory_bound",
                "-scratch",
                "18446744073709551615",
            ],
            "-scratch 18446744073709551615 bytes",
        ),
        (
            &["-worker", "100000"],
            "-worker must be in 0..=1024 (got 100000",
        ),
        (&["-worker", "-1"], "invalid value for -worker"),
        (
            &["-width", "2147483648"],
            "the output buffers (274877906944 bytes",
        ),
        (
            &["-type", "dom", "-width", "2147483648"],
            "cannot be allocated on this machine",
        ),
        (&["-width", "2147483649"], "-width must be in 1..=2^31"),
        (
            &[
                "-type",
                "spread",
                "-period",
                "999999999999",
                "-width",
                "1000",
            ],
            "write-after-read table entries",
        ),
        (
            &["-kernel", "compute_bound", "-iter", "18446744073709551615"],
            "FLOPs per task overflow 64 bits",
        ),
        (
            &[
                "-kernel",
                "memory_bound",
                "-scratch",
                "1024",
                "-iter",
                "18446744073709551615",
            ],
            "bytes per task overflow 64 bits",
        ),
        (
            &[
                "-kernel",
                "compute_bound",
                "-iter",
                "72057594037927935",
                "-steps",
                "1000",
            ],
            "the totals overflow 64 bits",
        ),
        (
            &["-output", "18446744073709551600"],
            "-output must be at most",
        ),
        (
            &["-output", "0"],
            "-output must be a positive multiple of 16",
        ),
        (&["-steps", "0"], "-steps must be >= 1"),
        (&["-width", "0"], "-width must be in 1..=2^31"),
        (&["-fraction", "nan"], "-fraction must be in [0, 1]"),
        (&["-radix", "-3"], "-radix must be >= 0"),
        (&["-window", "3"], "-window must be 0 or a power of 2"),
        (
            &["-window", "18446744073709551615"],
            "-window must be 0 or a power of 2",
        ),
        (
            &["-steps", "99999999999999999999"],
            "invalid value for -steps",
        ),
        (&["-steps"], "-steps needs a value"),
        (&["-bogus"], "unknown flag '-bogus'"),
    ];
    for (args, want) in cases {
        let mut a = vec!["taskbench"];
        a.extend_from_slice(args);
        usage_error(&a, want);
    }
}

#[test]
fn taskbench_small_runs_still_work() {
    for args in [
        &["-steps", "3", "-width", "2"][..],
        &[
            "-steps",
            "2",
            "-width",
            "2",
            "-kernel",
            "memory_bound",
            "-scratch",
            "64",
            "-iter",
            "2",
            "-worker",
            "1",
        ],
    ] {
        let mut a = vec!["taskbench"];
        a.extend_from_slice(args);
        let o = taskring(&a);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stdout).contains("Total Tasks"),
            "{}",
            text(&o.stdout)
        );
    }
}

fn write(name: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("taskring-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// A crafted fatal header: invalid sizes the run "had" (5, 3000), a heap peak of 2^64 - 1
/// and a scope deadlock that needed a window of 64.
pub const CRAFTED: &str = r#"{"version":6,"fatal":true,"dropped":0,"total":0,"task_window_max":[5,5,5,5],"heap_max":[3000,3000,3000,3000],"dep_pool_max":[16,16,16,16],"tensormap_max":0,"peak_task_window":[0,3,0,0],"peak_heap":[0,18446744073709551615,0,0],"peak_dep_pool":[0,2,0,0],"failure":{"code":1,"name":"SCOPE_DEADLOCK","ring":1,"resource":"ring_task_window","configured":4,"needed":64}}
"#;

/// What `taskring sizing crafted.jsonl --headroom 1` prints (python/tests/test_cli.py
/// holds the same text for `python -m taskring sizing`).
pub const CRAFTED_ADVICE: &str = "# recorded peaks per ring: task_window=[0, 3, 0, 0] heap=[0, 18446744073709551615, 0, 0] dep_pool=[0, 2, 0, 0]
# the run failed: SCOPE_DEADLOCK (code 1) on ring 1, ring_task_window configured 4, needed 64
# no valid size fits: ring 1 needs ring_heap >= 18446744073709551615 but the largest valid ring_heap is 9223372036854775808; the advice below caps it there, which is still too small: change the program (split the scope or the graph)
# suggested sizes (headroom 1.00):
runtime_env = {\"ring_task_window\": [8, 64, 8, 8], \"ring_heap\": [4096, 9223372036854775808, 4096, 4096], \"ring_dep_pool\": 16}
PTO2_RING_TASK_WINDOW=8,64,8,8
PTO2_RING_HEAP=4096,9223372036854775808,4096,4096
PTO2_RING_DEP_POOL=16
";

#[test]
fn sizing_of_a_crafted_file_is_valid_and_says_what_cannot_fit() {
    let p = write("crafted.jsonl", CRAFTED);
    let path = p.to_str().unwrap();
    let o = taskring(&["sizing", path, "--headroom", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), CRAFTED_ADVICE);
    assert_eq!(taskring(&["sizing", "--headroom=1", path]).stdout, o.stdout);
}

#[test]
fn sizing_bad_headroom_or_file_exits_2() {
    let p = write("ok.jsonl", CRAFTED);
    let path = p.to_str().unwrap();
    for h in ["nan", "-1", "0", "0.99", "inf", "x"] {
        let o = taskring(&["sizing", path, "--headroom", h]);
        assert_eq!(o.status.code(), Some(2), "{h}");
        assert!(o.stdout.is_empty(), "{h}: {}", text(&o.stdout));
        let err = text(&o.stderr);
        assert!(err.starts_with(&format!("taskring sizing: --headroom must be a finite number >= 1 (a factor on the recorded peaks), got '{h}'\n")), "{err}");
    }
    let bad = write("bad.jsonl", "not json\n");
    let o = taskring(&["sizing", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("line 1"), "{}", text(&o.stderr));
    let o = taskring(&["sizing"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).starts_with("taskring sizing: the scope-stats file is missing"),
        "{}",
        text(&o.stderr)
    );
}
