//! (c) The scope-stats reader (`taskring::dfx::read_peaks`) and the scope-stats files the
//! advisor tests read: well-typed headers as the runtime writes them, crafted JSON (huge
//! numbers, negative, NaN, wrong types, missing fields) and arbitrary text. The reader
//! never panics, and what it returns reflects the file.

use crate::generators::interesting_u64;
use crate::harness::fuzz;
use proptest::prelude::*;
use taskring::dfx::{self, RecordedPeaks};

/// A JSON number (or something that is not one) as raw text.
fn json_num() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => interesting_u64().prop_map(|v| v.to_string()),
        1 => any::<i64>().prop_map(|v| v.to_string()),
        1 => Just("-1".to_string()),
        1 => any::<f64>().prop_map(|v| if v.is_finite() { format!("{v:?}") } else { "1e999".into() }),
        1 => prop::sample::select(vec!["NaN", "Infinity", "-Infinity", "1e400", "-0", "18446744073709551616", "1e19", "null", "\"5\"", "true", "[]", "{}", "9999999999999999999999999"]).prop_map(str::to_string),
    ]
}

fn json_array4() -> impl Strategy<Value = String> {
    prop_oneof![
        16 => prop::array::uniform4(json_num()).prop_map(|a| format!("[{}]", a.join(","))),
        1 => prop::collection::vec(json_num(), 0..7).prop_map(|a| format!("[{}]", a.join(","))),
        1 => json_num(),
    ]
}

fn json_opt_usize() -> impl Strategy<Value = String> {
    prop_oneof![2 => (0u64..6).prop_map(|v| v.to_string()), 1 => json_num()]
}

fn failure_json() -> impl Strategy<Value = String> {
    (
        json_num(),
        prop::sample::select(vec!["SCOPE_DEADLOCK", "HEAP_RING_DEADLOCK", "DEP_POOL_OVERFLOW", "x"]),
        json_opt_usize(),
        prop::sample::select(vec!["\"ring_task_window\"", "\"ring_heap\"", "\"ring_dep_pool\"", "\"bogus\"", "null", "7"]),
        json_num(),
        json_num(),
    )
        .prop_map(|(code, name, ring, resource, configured, needed)| {
            format!("{{\"code\":{code},\"name\":\"{name}\",\"ring\":{ring},\"resource\":{resource},\"configured\":{configured},\"needed\":{needed}}}")
        })
}

/// A line-1 header: every field present (mostly well-typed), missing, or replaced.
fn header_json() -> impl Strategy<Value = String> {
    let field = |name: &'static str, value: BoxedStrategy<String>| prop_oneof![40 => value.prop_map(move |v| Some(format!("\"{name}\":{v}"))), 1 => Just(None)];
    (
        field("version", prop_oneof![30 => Just("6".to_string()), 1 => json_num()].boxed()),
        field("fatal", prop_oneof![10 => Just("true".to_string()), 10 => Just("false".to_string()), 1 => json_num()].boxed()),
        field("dropped", json_num().boxed()),
        field("total", json_num().boxed()),
        field("task_window_max", json_array4().boxed()),
        field("heap_max", json_array4().boxed()),
        field("dep_pool_max", json_array4().boxed()),
        field("tensormap_max", json_num().boxed()),
        field("peak_task_window", prop_oneof![3 => json_array4(), 1 => Just("null".to_string())].boxed()),
        field("peak_heap", prop_oneof![3 => json_array4(), 1 => Just("null".to_string())].boxed()),
        field("peak_dep_pool", prop_oneof![3 => json_array4(), 1 => Just("null".to_string())].boxed()),
        field("failure", prop_oneof![1 => failure_json(), 1 => Just("null".to_string())].boxed()),
    )
        .prop_map(|(a, b, c, d, e, f, g, h, i, j, k, l)| {
            let parts: Vec<String> = [a, b, c, d, e, f, g, h, i, j, k, l].into_iter().flatten().collect();
            format!("{{{}}}", parts.join(","))
        })
}

fn sample_json() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["\"begin\"", "\"end\"", "\"middle\"", "3"]),
        json_opt_usize(),
        json_opt_usize(),
        prop::array::uniform7(json_num()),
    )
        .prop_map(|(phase, depth, ring, n)| {
            format!(
                "{{\"site\":\"x.py:1\",\"phase\":{phase},\"depth\":{depth},\"ring\":{ring},\"task_window_start\":{},\"task_window_end\":{},\"heap_start\":{},\"heap_end\":{},\"dep_pool_start\":{},\"dep_pool_end\":{},\"tensormap\":{}}}",
                n[0], n[1], n[2], n[3], n[4], n[5], n[6]
            )
        })
}

/// Line 1 of a scope-stats file, built as JSON text (so these tests do not depend on
/// the layout of the dfx structs): `max` and `peaks` as [window, heap, dep pool] per ring,
/// `failure` as (ring, resource, needed).
#[derive(Clone, Debug)]
pub(crate) struct Hdr {
    pub(crate) fatal: bool,
    pub(crate) max: [[u64; 4]; 3],
    pub(crate) peaks: Option<[[u64; 4]; 3]>,
    pub(crate) failure: Option<(Option<u64>, Option<String>, Option<u64>)>,
}

impl Hdr {
    pub(crate) fn peaks(task_window: [u64; 4], heap: [u64; 4], dep_pool: [u64; 4]) -> Hdr {
        Hdr {
            fatal: false,
            max: [[16384; 4], [1 << 28; 4], [16384; 4]],
            peaks: Some([task_window, heap, dep_pool]),
            failure: None,
        }
    }

    pub(crate) fn text(&self) -> String {
        let mut v = serde_json::json!({
            "version": 6, "fatal": self.fatal, "dropped": 0, "total": 0, "tensormap_max": 0,
            "task_window_max": self.max[0], "heap_max": self.max[1], "dep_pool_max": self.max[2],
        });
        if let Some(p) = self.peaks {
            v["peak_task_window"] = serde_json::json!(p[0]);
            v["peak_heap"] = serde_json::json!(p[1]);
            v["peak_dep_pool"] = serde_json::json!(p[2]);
        }
        if let Some((ring, resource, needed)) = &self.failure {
            v["failure"] = serde_json::json!({
                "code": 2, "name": "HEAP_RING_DEADLOCK", "ring": ring, "resource": resource,
                "configured": 1024, "needed": needed,
            });
        }
        v.to_string()
    }

    pub(crate) fn read(&self) -> RecordedPeaks {
        dfx::read_peaks(&self.text()).expect("a well-formed scope-stats header")
    }
}

pub(crate) fn hdr(peak: BoxedStrategy<u64>, max: BoxedStrategy<u64>) -> impl Strategy<Value = Hdr> {
    let arr3 = |v: BoxedStrategy<u64>| prop::array::uniform3(prop::array::uniform4(v));
    let failure = (
        prop::option::of(prop_oneof![4 => 0u64..4, 1 => any::<u64>()]),
        prop::option::of(
            prop::sample::select(vec![
                "ring_task_window",
                "ring_heap",
                "ring_dep_pool",
                "tensormap",
            ])
            .prop_map(str::to_string),
        ),
        prop::option::of(interesting_u64()),
    );
    (
        any::<bool>(),
        arr3(max),
        prop::option::of(arr3(peak)),
        prop::option::of(failure),
    )
        .prop_map(|(fatal, max, peaks, failure)| Hdr {
            fatal,
            max,
            peaks,
            failure,
        })
}

/// A well-typed header as the runtime writes it (values anywhere in u64), with or without
/// the peaks (without: they are derived from the samples).
fn header_typed() -> impl Strategy<Value = String> {
    hdr(interesting_u64(), interesting_u64()).prop_map(|h| h.text())
}

pub(crate) fn scope_stats_text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (header_typed(), prop::collection::vec(sample_json(), 0..8)).prop_map(|(h, s)| {
            let mut t = h;
            for l in s {
                t.push('\n');
                t.push_str(&l);
            }
            t
        }),
        8 => (header_json(), prop::collection::vec(sample_json(), 0..8)).prop_map(|(h, s)| {
            let mut t = h;
            for l in s {
                t.push('\n');
                t.push_str(&l);
            }
            t
        }),
        1 => any::<String>(),
        1 => (header_json(), prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(h, b)| format!("{h}\n{}", String::from_utf8_lossy(&b))),
    ]
}

/// `read_peaks` never panics, whatever the file holds; what it returns reflects the file.
#[test]
fn dfx_read_peaks_never_panics() {
    let parsed = std::sync::atomic::AtomicU64::new(0);
    fuzz(
        "dfx_read_peaks_never_panics",
        8000,
        scope_stats_text(),
        |text| {
            if let Ok(p) = dfx::read_peaks(&text) {
                parsed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let first = text.lines().find(|l| !l.trim().is_empty()).unwrap();
                let h: serde_json::Value = serde_json::from_str(first).unwrap();
                prop_assert_eq!(h["version"].as_u64(), Some(6));
                if let Some(v) = h.get("peak_task_window").filter(|v| !v.is_null()) {
                    let want: Vec<u64> = v
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_u64().unwrap())
                        .collect();
                    prop_assert_eq!(p.task_window.to_vec(), want);
                }
                prop_assert_eq!(p.floor.is_some(), h["fatal"].as_bool() == Some(true));
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz dfx_read_peaks_never_panics: {} files parsed",
        parsed.into_inner()
    );
}
