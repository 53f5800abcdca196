//! `taskring-bench taskbench` never aborts: impossible sizes are a one-line message and
//! exit status 2 (`docs/api.md` §6.1); small runs print Task Bench's result lines. (The
//! `taskring sizing` command is the Python entry point's: python/tests/test_cli.py.)

use std::process::{Command, Output};

fn taskring_bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_taskring-bench"))
        .args(args)
        .output()
        .expect("run taskring-bench")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Exit 2, one line on stderr naming the problem, no panic.
fn usage_error(args: &[&str], want: &str) {
    let o = taskring_bench(args);
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
fn taskbench_small_runs_print_the_result_lines() {
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
        let o = taskring_bench(&a);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stdout).contains("Total Tasks"),
            "{}",
            text(&o.stdout)
        );
    }
}
