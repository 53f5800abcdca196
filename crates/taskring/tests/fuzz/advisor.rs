//! (c) The sizing advisor (`taskring::dfx::advise`) and the `taskring sizing` command: the
//! advice is always a valid ring size, never below a recorded peak, a failure's `needed`
//! or a failed run's valid recorded sizes (whenever a valid size that high exists); the
//! `PTO2_RING_*` lines the command prints parse back to the advice.

use crate::generators::{interesting_f64, interesting_u64, text};
use crate::harness::{catch_quietly, fuzz};
use crate::scope_stats::{hdr, scope_stats_text, Hdr};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use taskring::dfx::{self, RecordedPeaks};
use taskring::{parse_env_value, RingField};

const MAX_WINDOW: u64 = 1 << 30;
const MAX_HEAP: u64 = 1 << 63;
const MAX_DEP: u64 = i32::MAX as u64;

/// The advice is valid everywhere and at or above every recorded peak (a window above:
/// a ring holds window − 1 tasks), a failure's `needed` and a failed run's valid recorded
/// sizes — whenever a valid size that high exists.
fn check_advice(p: &RecordedPeaks, headroom: f64) -> Result<(), TestCaseError> {
    let a = dfx::advise(p, headroom);
    let advice = [a.task_window, a.heap, a.dep_pool];
    let peaks = [p.task_window, p.heap, p.dep_pool];
    let floor = p.floor.map(|(w, h, d)| [w, h, d]);
    for (i, f) in RingField::ALL.into_iter().enumerate() {
        let max = [MAX_WINDOW, MAX_HEAP, MAX_DEP][i];
        let name = f.name();
        for r in 0..4 {
            let (got, peak) = (advice[i][r], peaks[i][r]);
            prop_assert!(
                f.check(got),
                "invalid {}[{}] {} for peak {}",
                name,
                r,
                got,
                peak
            );
            // A window of w holds w - 1 tasks.
            let need = if f == RingField::TaskWindow {
                peak.saturating_add(1)
            } else {
                peak
            };
            if need <= max {
                prop_assert!(
                    got >= need,
                    "{}[{}] {} does not hold peak {}",
                    name,
                    r,
                    got,
                    peak
                );
            }
            if let Some(fl) = floor.filter(|fl| f.check(fl[i][r])) {
                prop_assert!(
                    got >= fl[i][r],
                    "{}[{}] {} below the failed run's {}",
                    name,
                    r,
                    got,
                    fl[i][r]
                );
            }
        }
    }
    let failure = p
        .failure
        .as_ref()
        .and_then(|f| Some((f.ring?, f.resource.clone()?, f.needed?)));
    if let Some((r, res, n)) = failure {
        if let Some(i) = RingField::ALL.iter().position(|f| f.name() == res) {
            if r < 4 && n <= [MAX_WINDOW, MAX_HEAP, MAX_DEP][i] {
                let got = advice[i][r];
                prop_assert!(
                    got >= n,
                    "{}[{}] {} below the failure's needed {}",
                    res,
                    r,
                    got,
                    n
                );
            }
        }
    }
    Ok(())
}

/// Peaks a real run can record (window < 2^30, heap and dep pool within their ranges), a
/// failed run's sizes valid, headroom in [1, 4]: the advice must be right here too.
fn realistic_peaks() -> impl Strategy<Value = (Hdr, f64)> {
    let sizes = (
        prop::array::uniform4((2u32..=30).prop_map(|s| 1u64 << s)),
        prop::array::uniform4((10u32..=40).prop_map(|s| 1u64 << s)),
        prop::array::uniform4(4u64..=MAX_DEP),
    );
    (
        prop::array::uniform4(0u64..MAX_WINDOW),
        prop::array::uniform4(0u64..=(1 << 40)),
        prop::array::uniform4(0u64..=MAX_DEP),
        any::<bool>(),
        sizes,
        prop_oneof![Just(1.0), Just(1.25), Just(2.0), 1.0f64..4.0],
    )
        .prop_map(|(w, h, d, fatal, (mw, mh, md), headroom)| {
            (
                Hdr {
                    fatal,
                    max: [mw, mh, md],
                    peaks: Some([w, h, d]),
                    failure: None,
                },
                headroom,
            )
        })
}

#[test]
fn dfx_advise_arbitrary_peaks() {
    fuzz(
        "dfx_advise_arbitrary_peaks",
        10000,
        (hdr(interesting_u64(), interesting_u64()), interesting_f64()),
        |(hdr, h)| match dfx::read_peaks(&hdr.text()) {
            Ok(p) => check_advice(&p, h),
            Err(_) => Ok(()), // a reader that rejects impossible files is fine too
        },
    );
}

#[test]
fn dfx_advise_from_crafted_files() {
    let parsed = std::sync::atomic::AtomicU64::new(0);
    fuzz(
        "dfx_advise_from_crafted_files",
        8000,
        (scope_stats_text(), interesting_f64()),
        |(text, h)| {
            if let Ok(p) = dfx::read_peaks(&text) {
                parsed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                check_advice(&p, h)?;
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz dfx_advise_from_crafted_files: {} files parsed",
        parsed.into_inner()
    );
}

#[test]
fn dfx_advise_realistic_peaks() {
    fuzz(
        "dfx_advise_realistic_peaks",
        10000,
        realistic_peaks(),
        |(hdr, h)| {
            let p = hdr.read();
            check_advice(&p, h)?;
            // More headroom never gives less.
            let (a, b) = (dfx::advise(&p, h), dfx::advise(&p, h * 2.0));
            for r in 0..4 {
                prop_assert!(
                    b.task_window[r] >= a.task_window[r]
                        && b.heap[r] >= a.heap[r]
                        && b.dep_pool[r] >= a.dep_pool[r],
                    "ring {}: {:?} vs {:?}",
                    r,
                    a,
                    b
                );
            }
            Ok(())
        },
    );
}

/// Fixed inputs of the advisor's hard cases (overflowing peaks, a failed run's invalid
/// recorded sizes): each must give valid advice at or above the peak without panicking.
#[test]
fn dfx_advise_known_cases() {
    let none = Hdr::peaks([0; 4], [0; 4], [0; 4]);
    let fail = |resource: &str, needed: u64| Hdr {
        failure: Some((Some(1), Some(resource.into()), Some(needed))),
        ..none.clone()
    };
    let cases: Vec<(&str, Hdr, f64)> = vec![
        // A window holds peak + 1: for a peak of 2^64-1 that sum overflows u64.
        (
            "window peak u64::MAX",
            Hdr::peaks([u64::MAX, 0, 0, 0], [0; 4], [0; 4]),
            1.0,
        ),
        // Above 2^63 there is no power of two in u64 at or above the peak.
        (
            "heap peak u64::MAX",
            Hdr::peaks([0; 4], [0, u64::MAX, 0, 0], [0; 4]),
            1.0,
        ),
        (
            "window peak 2^63+1",
            Hdr::peaks([(1 << 63) + 1, 0, 0, 0], [0; 4], [0; 4]),
            1.0,
        ),
        // A huge headroom saturates a small peak to u64::MAX: the same overflows.
        (
            "heap peak 2, headroom 1e300",
            Hdr::peaks([0; 4], [2, 0, 0, 0], [0; 4]),
            1e300,
        ),
        (
            "window peak 2, headroom 1e300",
            Hdr::peaks([2, 0, 0, 0], [0; 4], [0; 4]),
            1e300,
        ),
        // A failure's `needed` near 2^64 overflows next_power_of_two.
        (
            "failure needed heap u64::MAX",
            fail("ring_heap", u64::MAX),
            1.0,
        ),
        (
            "failure needed window u64::MAX",
            fail("ring_task_window", u64::MAX),
            1.0,
        ),
        // A failed run's recorded sizes that are not valid sizes (window 5, heap 3000,
        // dep pool 2^31): the advice must not repeat them.
        (
            "fatal run with invalid recorded sizes",
            Hdr {
                fatal: true,
                max: [[5, 4, 4, 4], [3000, 1024, 1024, 1024], [1 << 31, 4, 4, 4]],
                ..none.clone()
            },
            1.0,
        ),
    ];
    let mut failed = vec![];
    for (name, p, h) in cases {
        let r = catch_quietly(|| match dfx::read_peaks(&p.text()) {
            Ok(p) => check_advice(&p, h),
            Err(_) => Ok(()), // rejecting the file is a valid answer too
        });
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("{name}: {e}")),
            Err(panic) => failed.push(format!("{name}: panicked: {panic}")),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of the known advisor cases fail:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// The `taskring sizing` command (one implementation for Rust and Python): arbitrary
/// arguments and headroom texts never panic and exit 0 or 2; every report's
/// `PTO2_RING_*` lines parse back, with the env parser, to valid sizes equal to the
/// advice (what the advisor prints can be pasted into the environment as it is).
#[test]
fn dfx_sizing_command_and_report() {
    let file = std::env::temp_dir().join(format!("taskring-fuzz-{}.jsonl", std::process::id()));
    std::fs::write(
        &file,
        Hdr::peaks([100, 7, 0, 0], [5000, 0, 0, 0], [10, 0, 0, 0]).text(),
    )
    .unwrap();
    let path = file.to_string_lossy().into_owned();
    let arg = prop_oneof![
        3 => prop::sample::select(vec!["--headroom", "--headroom=1.5", "--headroom=0.5", "--headroom=nan", "--headroom=inf", "-h", "--help", "--bogus", "-", "/nonexistent/x.jsonl", "1e308", "2", ""]).prop_map(str::to_string),
        2 => Just(path),
        1 => ".{0,12}",
    ];
    let strategy = (
        prop::collection::vec(arg, 0..5),
        scope_stats_text(),
        text(12),
        interesting_f64(),
    );
    fuzz(
        "dfx_sizing_command_and_report",
        3000,
        strategy,
        |(args, stats, headroom_text, headroom)| {
            let out = dfx::sizing_command(&args);
            prop_assert!(out.status == 0 || out.status == 2, "status {}", out.status);
            if let Ok(h) = dfx::check_headroom(&headroom_text) {
                prop_assert!(h.is_finite() && h >= 1.0);
            }
            let h = if headroom.is_finite() && headroom >= 1.0 {
                headroom
            } else {
                1.25
            };
            if let Ok(report) = dfx::sizing_report(&stats, h) {
                let p = dfx::read_peaks(&stats).expect("a report was written from this file");
                let a = dfx::advise(&p, h);
                for (i, f) in RingField::ALL.into_iter().enumerate() {
                    let line = report
                        .lines()
                        .find_map(|l| l.strip_prefix(&format!("{}=", f.env_var())));
                    prop_assert!(line.is_some(), "no {} line in {:?}", f.env_var(), report);
                    let parsed = parse_env_value(f, line.unwrap());
                    prop_assert!(
                        parsed.is_ok(),
                        "the advisor printed {}={} which the env parser rejects: {:?}",
                        f.env_var(),
                        line.unwrap(),
                        parsed
                    );
                    prop_assert_eq!(parsed.unwrap(), [a.task_window, a.heap, a.dep_pool][i]);
                }
            }
            Ok(())
        },
    );
    let _ = std::fs::remove_file(&file);
}
