//! (b) `PTO2_RING_*` parsing and ring-sizing resolution (taskring's config): arbitrary
//! strings are either a value that passes the field's rule or one warning naming the
//! variable (checked against an independent model of the rule); resolution never panics
//! and never yields an invalid sizing, also through the real process environment (child
//! processes, non-UTF-8 values) and from a chip's reply (12 values, 12 source codes).

use crate::generators::interesting_u64;
use crate::harness::{cases, fuzz, fuzz_n};
use proptest::prelude::*;
use taskring::{parse_env_value, EnvSnapshot, RingField, RingSizing, RuntimeEnv, SizeSource};

/// An independent model of the rule (`docs/api.md` §1): one value or exactly four, comma
/// separated, whitespace around each trimmed; each a base-10 u64 with an optional `+`;
/// `0` = fall through; non-zero values must pass the field's rule.
fn model(field: RingField, s: &str) -> Option<[u64; 4]> {
    let tokens: Vec<&str> = s.split(',').map(str::trim).collect();
    if tokens.len() != 1 && tokens.len() != 4 {
        return None;
    }
    let mut out = [0u64; 4];
    for (o, t) in out.iter_mut().zip(&tokens) {
        if t.eq_ignore_ascii_case("auto") {
            *o = RuntimeEnv::AUTO;
            continue;
        }
        let digits = t.strip_prefix('+').unwrap_or(t);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut v: u128 = 0;
        for b in digits.bytes() {
            v = v * 10 + (b - b'0') as u128;
            if v > u64::MAX as u128 {
                return None;
            }
        }
        let v = v as u64;
        let ok = match field {
            RingField::TaskWindow => v.is_power_of_two() && (4..=1 << 30).contains(&v),
            RingField::Heap => v.is_power_of_two() && v >= 1024,
            RingField::DepPool => (4..=i32::MAX as u64).contains(&v),
        };
        if v != 0 && !ok {
            return None;
        }
        *o = v;
    }
    if tokens.len() == 1 {
        out = [out[0]; 4];
    }
    Some(out)
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (0u32..64).prop_map(|s| (1u64 << s).to_string()),
        2 => "[0-9]{1,24}",
        1 => any::<u64>().prop_map(|v| v.to_string()),
        1 => Just("0".to_string()),
        1 => Just(String::new()),
        1 => prop::sample::select(vec![
            "+16", "-16", "-0", "+", "++4", "0x10", "1e3", "4.0", "16 ", " 16", "\t1024\n", "1_024", "١٦", "１６", "\u{a0}64\u{3000}", "18446744073709551615",
            "18446744073709551616", "340282366920938463463374607431768211456", "000000000000000000000000000000000016", "9223372036854775808", "4294967296",
            "2147483647", "2147483648", "1073741824", "2147483646", "NaN", "inf", "\0", "16\0", "𝟙𝟞", " ",
        ])
        .prop_map(str::to_string),
        1 => "\\PC{0,6}",
    ]
}

/// Env values: token lists joined by commas (or other separators), and arbitrary text.
fn env_value() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (prop::collection::vec(token(), 1..7), prop::sample::select(vec![",", ",", ",", ", ", " ,", ";", " "])).prop_map(|(t, sep)| t.join(sep)),
        1 => any::<String>(),
        1 => prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

fn field() -> impl Strategy<Value = RingField> {
    prop::sample::select(RingField::ALL.to_vec())
}

#[test]
fn env_parse_matches_model() {
    fuzz(
        "env_parse_matches_model",
        30000,
        (field(), env_value()),
        |(f, s)| {
            let got = parse_env_value(f, &s);
            let want = model(f, &s);
            match (&got, want) {
                (Ok(v), Some(w)) => {
                    prop_assert_eq!(*v, w);
                    for &x in v {
                        prop_assert!(
                            x == 0 || f.check(x),
                            "{} accepted invalid {}",
                            f.env_var(),
                            x
                        );
                    }
                }
                (Err(w), None) => {
                    prop_assert_eq!(w.var, f.env_var());
                    prop_assert_eq!(&w.value, &s);
                    let shown = w.to_string();
                    let prefix = format!("taskring: {}={} ignored: ", f.env_var(), s);
                    prop_assert!(shown.starts_with(&prefix), "warning {:?}", shown);
                    prop_assert!(!w.rule.is_empty());
                }
                _ => prop_assert!(
                    false,
                    "{}={:?}: parse gave {:?}, the model {:?}",
                    f.env_var(),
                    s,
                    got,
                    want
                ),
            }
            Ok(())
        },
    );
}

fn ring_entry(f: RingField) -> impl Strategy<Value = u64> {
    let valid: Vec<u64> = match f {
        RingField::TaskWindow => (2..=30).map(|s| 1u64 << s).collect(),
        RingField::Heap => (10..64).map(|s| 1u64 << s).collect(),
        RingField::DepPool => vec![4, 5, 100, 16384, i32::MAX as u64],
    };
    prop_oneof![4 => Just(0u64), 4 => prop::sample::select(valid), 1 => interesting_u64()]
}

fn runtime_env() -> impl Strategy<Value = RuntimeEnv> {
    (
        prop::array::uniform4(ring_entry(RingField::TaskWindow)),
        prop::array::uniform4(ring_entry(RingField::Heap)),
        prop::array::uniform4(ring_entry(RingField::DepPool)),
    )
        .prop_map(|(ring_task_window, ring_heap, ring_dep_pool)| RuntimeEnv {
            ring_task_window,
            ring_heap,
            ring_dep_pool,
        })
}

/// Values that parse more often than `env_value` alone (so the env source is exercised).
fn env_var_value(f: RingField) -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        2 => env_value(),
        1 => ring_entry(f).prop_map(|v| v.to_string()),
        1 => prop::array::uniform4(ring_entry(f)).prop_map(|v| format!("{},{},{},{}", v[0], v[1], v[2], v[3])),
    ])
}

#[test]
fn env_resolve_never_invalid() {
    let strategy = (
        runtime_env(),
        env_var_value(RingField::TaskWindow),
        env_var_value(RingField::Heap),
        env_var_value(RingField::DepPool),
    );
    fuzz(
        "env_resolve_never_invalid",
        15000,
        strategy,
        |(cfg, task_window, heap, dep_pool)| {
            let snap = EnvSnapshot {
                task_window,
                heap,
                dep_pool,
            };
            match (cfg.validate(), RingSizing::resolve(&cfg, &snap)) {
                (Err(e), Err(g)) => prop_assert_eq!(e, g),
                (Ok(()), Ok((sizing, warnings))) => {
                    let mut expected_warnings = vec![];
                    for f in RingField::ALL {
                        let parsed = snap.get(f).map(|s| (s, model(f, s)));
                        if let Some((_, None)) = parsed {
                            expected_warnings.push(f.env_var());
                        }
                        let env_vals = parsed.and_then(|p| p.1).unwrap_or([0; 4]);
                        #[allow(clippy::needless_range_loop)] // ring indexes three parallel tables
                        for ring in 0..4 {
                            let v = sizing.get(f)[ring];
                            prop_assert!(
                                f.check(v),
                                "resolved {}[{}] = {} is invalid",
                                f.name(),
                                ring,
                                v
                            );
                            let (c, e) = (cfg.get(f)[ring], env_vals[ring]);
                            let (want, src) =
                                if c == RuntimeEnv::AUTO || (c == 0 && e == RuntimeEnv::AUTO) {
                                    (f.default_value(), SizeSource::Auto)
                                } else if cfg.get(f)[ring] != 0 {
                                    (cfg.get(f)[ring], SizeSource::CallConfig)
                                } else if env_vals[ring] != 0 {
                                    (env_vals[ring], SizeSource::Env)
                                } else {
                                    (f.default_value(), SizeSource::Default)
                                };
                            prop_assert_eq!(
                                (v, sizing.source(f, ring)),
                                (want, src),
                                "{}[{}]",
                                f.name(),
                                ring
                            );
                        }
                    }
                    let got: Vec<&str> = warnings.iter().map(|w| w.var).collect();
                    prop_assert_eq!(got, expected_warnings);
                    let k = sizing.key();
                    let again = RingSizing::from_key_and_sources(k, sizing.source_codes());
                    prop_assert!(
                        again.is_ok(),
                        "a resolved sizing does not rebuild: {:?}",
                        again
                    );
                    prop_assert_eq!(again.unwrap().source_codes(), sizing.source_codes());
                }
                (v, r) => prop_assert!(false, "validate {:?} but resolve {:?}", v, r),
            }
            Ok(())
        },
    );
}

/// The harness name of `env_child_resolve_from_process` (this file is module `env` of
/// the `fuzz` test target).
const CHILD_TEST: &str = "env::env_child_resolve_from_process";

/// The child side of `env_process_environment`: resolve from the real environment and
/// print the key. Does nothing unless started by that test.
#[test]
fn env_child_resolve_from_process() {
    if std::env::var_os("TASKRING_FUZZ_ENV_CHILD").is_none() {
        return;
    }
    let s = RingSizing::resolve_from_process(&RuntimeEnv::default())
        .expect("an empty config always resolves");
    println!("KEY {:?} SOURCES {:?}", s.key(), s.source_codes());
}

/// Arbitrary bytes (also invalid UTF-8) in the three variables of a real process
/// environment: the child resolves without panicking, prints one warning per ignored
/// variable, and its sizing is what the model expects of the lossy values.
#[test]
fn env_process_environment() {
    use std::os::unix::ffi::OsStringExt;
    let exe = std::env::current_exe().unwrap();
    let raw = || {
        prop::option::of(prop_oneof![
            2 => env_value().prop_map(|s| s.replace('\0', "").into_bytes()),
            1 => prop::collection::vec(1u8..=255, 0..24),
        ])
    };
    // One child process per case: at most 2000 even under the long budget.
    fuzz_n(
        "env_process_environment",
        cases(48).min(2000),
        (raw(), raw(), raw()),
        |vals| {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
                .env("TASKRING_FUZZ_ENV_CHILD", "1");
            let mut lossy = [None, None, None];
            for (i, (f, v)) in RingField::ALL
                .iter()
                .zip([&vals.0, &vals.1, &vals.2])
                .enumerate()
            {
                cmd.env_remove(f.env_var());
                if let Some(v) = v {
                    cmd.env(f.env_var(), std::ffi::OsString::from_vec(v.clone()));
                    lossy[i] = Some(String::from_utf8_lossy(v).into_owned());
                }
            }
            let out = cmd.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            prop_assert!(out.status.success(), "child failed: {}\n{}", stdout, stderr);
            let snap = EnvSnapshot {
                task_window: lossy[0].clone(),
                heap: lossy[1].clone(),
                dep_pool: lossy[2].clone(),
            };
            let (want, warnings) = RingSizing::resolve(&RuntimeEnv::default(), &snap).unwrap();
            let line = format!("KEY {:?} SOURCES {:?}", want.key(), want.source_codes());
            prop_assert!(
                stdout.contains(&line),
                "child printed {:?}, expected {:?}",
                stdout,
                line
            );
            for w in &warnings {
                prop_assert!(
                    stderr.contains(&w.to_string()),
                    "warning {:?} missing from {:?}",
                    w.to_string(),
                    stderr
                );
            }
            prop_assert_eq!(
                stderr.matches("taskring: PTO2_RING_").count(),
                warnings.len(),
                "stderr {:?}",
                stderr
            );
            Ok(())
        },
    );
}

/// A chip's reply carries its resolved sizing as 12 values and 12 source codes, rebuilt on
/// the host by `RingSizing::from_key_and_sources`: any values and codes give a valid
/// sizing or an error, never a panic; a sizing rebuilt from its own key round-trips.
#[test]
fn env_sizing_from_wire_values() {
    // Half the keys mostly valid per field (so the Ok branch is reached), half any.
    let key = (
        runtime_env(),
        prop::array::uniform12(interesting_u64()),
        any::<bool>(),
    )
        .prop_map(|(e, any_key, valid)| {
            if !valid {
                return any_key;
            }
            let mut k = [0u64; 12];
            k[..4].copy_from_slice(&e.ring_task_window);
            k[4..8].copy_from_slice(&e.ring_heap);
            k[8..].copy_from_slice(&e.ring_dep_pool);
            for (i, v) in k.iter_mut().enumerate() {
                if *v == 0 {
                    *v = RingField::ALL[i / 4].default_value(); // resolved: no zeros
                }
            }
            k
        });
    let accepted = std::sync::atomic::AtomicU64::new(0);
    fuzz(
        "env_sizing_from_wire_values",
        20000,
        (key, any::<[u8; 12]>()),
        |(key, codes)| {
            match RingSizing::from_key_and_sources(key, codes) {
                Ok(s) => {
                    accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    prop_assert_eq!(s.key(), key);
                    for (i, f) in RingField::ALL.into_iter().enumerate() {
                        for r in 0..4 {
                            prop_assert!(
                                f.check(key[i * 4 + r]),
                                "{}[{}] = {} accepted",
                                f.name(),
                                r,
                                key[i * 4 + r]
                            );
                        }
                    }
                    let again =
                        RingSizing::from_key_and_sources(s.key(), s.source_codes()).unwrap();
                    prop_assert_eq!(again.source_codes(), s.source_codes());
                }
                Err(e) => prop_assert!(e.to_string().starts_with("RingSizing: "), "{}", e),
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz env_sizing_from_wire_values: {} sizings accepted",
        accepted.into_inner()
    );
}
