//! Fuzz tests (proptest; there is no nightly / cargo-fuzz on this machine) of the parsers
//! that read bytes or text from outside the process:
//!
//! - (a) the L3 task frame and reply decoders (`taskring::node::frame`): arbitrary bytes,
//!   valid headers over random bodies and mutated valid frames never panic and always give
//!   `Ok` or a typed `FrameError`; encode → decode is the identity (and decode → encode →
//!   decode is stable for whatever a mutated frame decodes to); a tensor argument off the
//!   wire that `Tensor::validate` accepts stays inside its shared-memory region;
//! - (b) `PTO2_RING_*` parsing (`taskring::config`): arbitrary strings are either a value
//!   that passes the field's rule or one warning naming the variable (checked against an
//!   independent model of the rule), and resolution never panics and never yields an
//!   invalid sizing — also through the real process environment (child processes, with
//!   non-UTF-8 values);
//! - (c) the scope-stats reader and the sizing advisor (`taskring::dfx`): arbitrary text
//!   and crafted JSONL (huge numbers, negative, NaN, wrong types, missing fields) never
//!   panic; advice is always a valid ring size and never below a recorded peak (when a
//!   valid size at or above the peak exists); the `taskring sizing` command never panics
//!   and the `PTO2_RING_*` lines it prints parse back to the advice.
//!
//! Budget: every property runs `TASKRING_FUZZ_CASES` cases when set, else
//! `PROPTEST_CASES`, else its own default (the defaults keep this whole file at a few
//! seconds in the debug test build on 2 cores — `make test`). `make fuzz` runs the long
//! budget (200000 cases per property, about 2.5 minutes on 2 cores) in the same build. Each property prints `fuzz <name>: N cases in T s (seed S)` on
//! stderr (visible with `--nocapture`); a failure prints the shrunk input and the seed.
//! `TASKRING_FUZZ_SEED=<u64>` replays a seed. `make test` uses a fixed seed per property
//! (repeatable); `make fuzz` a random one per run. A view whose element count overflows
//! is refused by `Tensor::validate` (`TooManyElements`).
//!
//! `dfx_advise_known_cases` holds, as fixed inputs, the classes of advisor input that
//! need care: huge peaks whose scaling overflows (a panic in debug, advice below the peak
//! in release) and a failed run's invalid recorded sizes, which must not reach the advice.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::cell::Cell;
use std::sync::Once;
use std::time::Instant;
use taskring::config::{
    parse_env_value, EnvSnapshot, RingField, RingSizing, RuntimeEnv, SizeSource,
};
use taskring::dfx::{self, RecordedPeaks};
use taskring::node::frame::*;
use taskring::{CallConfig, DType};

// ------------------------------------------------------------------------------------------
// Harness
// ------------------------------------------------------------------------------------------

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Panics inside a property are failures proptest catches and shrinks; keep the default
/// hook from printing every one of them (thousands while shrinking).
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                default(info);
            }
        }));
    });
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn cases(default: u32) -> u32 {
    env_u64("TASKRING_FUZZ_CASES")
        .or_else(|| env_u64("PROPTEST_CASES"))
        .map(|v| v.clamp(1, u32::MAX as u64) as u32)
        .unwrap_or(default)
}

/// Runs `test` on `cases(default)` values of `strategy`; panics with the shrunk input.
fn fuzz<S: Strategy>(
    name: &str,
    default: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    fuzz_n(name, cases(default), strategy, test)
}

/// Runs `test` on `n` values of `strategy`.
fn fuzz_n<S: Strategy>(
    name: &str,
    n: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    quiet_panics();
    // `make test` (no TASKRING_FUZZ_CASES) runs each property from a fixed seed, so that
    // a test run is repeatable; `make fuzz` draws a new seed every run (how new inputs
    // are found; a failure prints its seed for TASKRING_FUZZ_SEED).
    let seed = env_u64("TASKRING_FUZZ_SEED").unwrap_or_else(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = if env_u64("TASKRING_FUZZ_CASES").is_some() {
            std::collections::hash_map::RandomState::new().build_hasher()
        } else {
            std::collections::hash_map::DefaultHasher::new()
        };
        h.write(name.as_bytes());
        h.finish()
    });
    let mut seed_bytes = [0u8; 32];
    for (i, c) in seed_bytes.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes());
    }
    let config = Config {
        cases: n,
        failure_persistence: None,
        max_shrink_iters: 20_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let t = Instant::now();
    QUIET.with(|q| q.set(true));
    let ran = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&strategy, |v| {
        ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        test(v)
    });
    QUIET.with(|q| q.set(false));
    let secs = t.elapsed().as_secs_f64();
    let ran = ran.into_inner();
    eprintln!("fuzz {name}: {n} cases in {secs:.2} s (seed {seed}; {ran} calls incl. shrinking)");
    if let Err(e) = result {
        panic!("fuzz {name} failed (replay with TASKRING_FUZZ_SEED={seed}): {e}");
    }
}

/// u64 values that matter at limits, plus uniform ones.
fn interesting_u64() -> BoxedStrategy<u64> {
    prop_oneof![
        3 => any::<u64>(),
        2 => 0u64..70_000,
        2 => (0u32..64).prop_map(|s| 1u64 << s),
        1 => (0u32..64, -1i64..=1).prop_map(|(s, d)| (1u64 << s).wrapping_add(d as u64)),
        1 => (1u64 << 63)..=u64::MAX,
        1 => prop::sample::select(vec![0, 1, 3, 4, 1023, 1024, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, (1 << 31) - 1, 1 << 31, 1 << 62, 1 << 63, u64::MAX - 1, u64::MAX]),
    ]
    .boxed()
}

/// f64 bit patterns (NaNs with payloads, infinities, subnormals, -0.0) and plain values.
fn interesting_f64() -> BoxedStrategy<f64> {
    prop_oneof![
        2 => any::<u64>().prop_map(f64::from_bits),
        1 => prop::sample::select(vec![0.0, -0.0, 1.0, 1.25, 2.0, 0.5, -1.0, f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MAX, f64::MIN_POSITIVE, 5e-324, 1e300]),
        1 => 0.0f64..16.0,
    ]
    .boxed()
}

// ------------------------------------------------------------------------------------------
// (a) task frames and replies
// ------------------------------------------------------------------------------------------

fn dtype() -> impl Strategy<Value = DType> {
    (0..DType::ALL.len()).prop_map(|i| DType::ALL[i])
}

fn wire_tensor() -> impl Strategy<Value = WireTensor> {
    (
        dtype(),
        1u8..=5,
        interesting_u64(),
        interesting_u64(),
        interesting_u64(),
        any::<[u32; 5]>(),
        any::<[u32; 5]>(),
    )
        .prop_map(
            |(dtype, ndims, region, region_bytes, offset_bytes, shape, strides)| WireTensor {
                dtype,
                ndims,
                region,
                region_bytes,
                offset_bytes,
                shape,
                strides,
            },
        )
}

fn wire_arg() -> BoxedStrategy<WireArg> {
    prop_oneof![
        wire_tensor().prop_map(WireArg::Tensor),
        any::<i64>().prop_map(WireArg::Int),
        interesting_f64().prop_map(WireArg::Float),
    ]
    .boxed()
}

/// Strings of any Unicode, sometimes longer than a frame may carry.
fn text(max_chars: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => ".{0,40}",
        1 => prop::collection::vec(any::<char>(), 0..max_chars).prop_map(|v| v.into_iter().collect::<String>()),
        1 => (any::<char>(), 0..max_chars).prop_map(|(c, n)| std::iter::repeat_n(c, n).collect::<String>()),
    ]
}

fn call_config() -> BoxedStrategy<CallConfig> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<bool>(),
        any::<bool>(),
        prop::array::uniform12(interesting_u64()),
        text(1500),
    )
        .prop_map(
            |(
                aicpu_thread_num,
                enable_chip_swimlane,
                enable_scope_stats,
                enable_dep_gen,
                rings,
                output_prefix,
            )| {
                let mut c = CallConfig {
                    aicpu_thread_num,
                    enable_chip_swimlane,
                    enable_scope_stats,
                    enable_dep_gen,
                    output_prefix,
                    ..Default::default()
                };
                c.runtime_env.ring_task_window.copy_from_slice(&rings[0..4]);
                c.runtime_env.ring_heap.copy_from_slice(&rings[4..8]);
                c.runtime_env.ring_dep_pool.copy_from_slice(&rings[8..12]);
                c
            },
        )
        .boxed()
}

fn task_frame() -> BoxedStrategy<TaskFrame> {
    (
        any::<u32>(),
        call_config(),
        prop::collection::vec(wire_arg(), 0..12),
    )
        .prop_map(|(callable, config, args)| TaskFrame {
            callable,
            config,
            args,
        })
        .boxed()
}

fn wire_report() -> BoxedStrategy<WireReport> {
    (
        prop::array::uniform12(interesting_u64()),
        any::<[u8; 12]>(),
        prop::array::uniform12(interesting_u64()),
        interesting_u64(),
        any::<bool>(),
        interesting_f64(),
        interesting_f64(),
    )
        .prop_map(
            |(sizing, sources, peak, tasks, arena_hit, arena_build_s, elapsed_s)| WireReport {
                sizing,
                sources,
                peak,
                tasks,
                arena_hit,
                arena_build_s,
                elapsed_s,
            },
        )
        .boxed()
}

fn wire_stats() -> BoxedStrategy<WireStats> {
    (
        interesting_u64(),
        interesting_u64(),
        interesting_u64(),
        interesting_u64(),
        interesting_f64(),
        prop::collection::vec(prop::array::uniform12(interesting_u64()), 0..6),
    )
        .prop_map(
            |(builds, hits, misses, evictions, build_s, resident)| WireStats {
                builds,
                hits,
                misses,
                evictions,
                build_s,
                resident,
            },
        )
        .boxed()
}

fn reply_frame() -> BoxedStrategy<ReplyFrame> {
    (
        any::<u32>(),
        text(3000),
        prop::option::of(wire_report()),
        prop::option::of(wire_stats()),
    )
        .prop_map(|(status, error, report, stats)| ReplyFrame {
            status,
            error,
            report,
            stats,
        })
        .boxed()
}

/// Floats compared by bits (NaN payloads and -0.0 must survive the wire).
#[derive(Debug, PartialEq)]
enum ArgBits {
    Tensor(WireTensor),
    Int(i64),
    Float(u64),
}

fn arg_bits(a: &[WireArg]) -> Vec<ArgBits> {
    a.iter()
        .map(|a| match *a {
            WireArg::Tensor(t) => ArgBits::Tensor(t),
            WireArg::Int(v) => ArgBits::Int(v),
            WireArg::Float(v) => ArgBits::Float(v.to_bits()),
        })
        .collect()
}

/// A reply with its floats as bits.
fn reply_bits(r: &ReplyFrame) -> String {
    let rep = r.report.as_ref().map(|p| {
        (
            p.sizing,
            p.sources,
            p.peak,
            p.tasks,
            p.arena_hit,
            p.arena_build_s.to_bits(),
            p.elapsed_s.to_bits(),
        )
    });
    let st = r.stats.as_ref().map(|s| {
        (
            s.builds,
            s.hits,
            s.misses,
            s.evictions,
            s.build_s.to_bits(),
            s.resident.clone(),
        )
    });
    format!("{} {:?} {:?} {:?}", r.status, r.error, rep, st)
}

fn same_task(a: &TaskFrame, b: &TaskFrame) -> bool {
    a.callable == b.callable && a.config == b.config && arg_bits(&a.args) == arg_bits(&b.args)
}

const BUF: usize = 1 << 16;

fn encoded_task(f: &TaskFrame) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; BUF];
    encode_task(f, &mut buf).ok().map(|n| buf[..n].to_vec())
}

fn encoded_reply(f: &ReplyFrame) -> Vec<u8> {
    let mut buf = vec![0u8; BUF];
    let n = encode_reply(f, &mut buf)
        .expect("a reply of at most 8 KiB error and 6 resident keys fits 64 KiB");
    buf[..n].to_vec()
}

/// Decoding any bytes gives Ok or a typed error, and whatever decodes re-encodes to a
/// frame that decodes to the same value.
fn check_decoders(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(f) = decode_task(bytes) {
        prop_assert!(f.config.output_prefix.len() <= MAX_PREFIX_BYTES);
        prop_assert!(f.args.len() <= 4096);
        for a in &f.args {
            if let WireArg::Tensor(t) = a {
                prop_assert!((1..=5).contains(&t.ndims), "decoded ndims {}", t.ndims);
            }
        }
        let again = encoded_task(&f).expect("a decoded frame re-encodes");
        prop_assert!(
            again.len() <= bytes.len(),
            "re-encoding grew: {} > {}",
            again.len(),
            bytes.len()
        );
        let g = decode_task(&again).expect("a re-encoded frame decodes");
        prop_assert!(same_task(&f, &g), "decode(encode(decode(x))) != decode(x)");
    }
    if let Ok(r) = decode_reply(bytes) {
        prop_assert!(
            r.error.len() <= MAX_ERROR_BYTES * 3,
            "lossy error text grew to {}",
            r.error.len()
        );
        if r.stats.as_ref().is_none_or(|s| s.resident.len() <= 1024)
            && r.error.len() <= MAX_ERROR_BYTES
        {
            let again = encoded_reply(&r);
            let g = decode_reply(&again).expect("a re-encoded reply decodes");
            prop_assert_eq!(reply_bits(&r), reply_bits(&g));
        }
    }
    match request_kind(bytes) {
        Ok(k) => {
            prop_assert!(bytes.len() >= 12);
            prop_assert_eq!(k, u16::from_le_bytes([bytes[6], bytes[7]]));
            prop_assert_eq!(&bytes[..4], b"TRNG");
        }
        Err(FrameError::Short(n)) => prop_assert_eq!(n, bytes.len()),
        Err(_) => {}
    }
    Ok(())
}

#[test]
fn frame_arbitrary_bytes() {
    fuzz(
        "frame_arbitrary_bytes",
        20000,
        prop::collection::vec(any::<u8>(), 0..300),
        |bytes| check_decoders(&bytes),
    );
}

/// A valid header (magic, version, kind, body length — right or wrong) over random bytes:
/// reaches every field decoder.
#[test]
fn frame_valid_header_random_body() {
    let strategy = (
        prop::sample::select(vec![KIND_TASK, KIND_REPLY, KIND_STATS, 0, 4, u16::MAX]),
        prop::collection::vec(any::<u8>(), 0..400),
        prop::option::of(any::<u32>()),
    );
    fuzz(
        "frame_valid_header_random_body",
        20000,
        strategy,
        |(kind, body, len)| {
            let mut v = Vec::with_capacity(12 + body.len());
            v.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
            v.extend_from_slice(&FRAME_VERSION.to_le_bytes());
            v.extend_from_slice(&kind.to_le_bytes());
            v.extend_from_slice(&len.unwrap_or(body.len() as u32).to_le_bytes());
            v.extend_from_slice(&body);
            check_decoders(&v)
        },
    );
}

#[test]
fn frame_task_round_trip() {
    fuzz("frame_task_round_trip", 5000, task_frame(), |f| {
        let mut buf = vec![0u8; BUF];
        match encode_task(&f, &mut buf) {
            Ok(n) => {
                prop_assert!(f.config.output_prefix.len() <= MAX_PREFIX_BYTES);
                let g = decode_task(&buf[..n]);
                prop_assert!(g.is_ok(), "decode of an encoded frame failed: {:?}", g);
                let g = g.unwrap();
                prop_assert!(
                    same_task(&f, &g),
                    "round trip changed the frame:\n{:?}\n{:?}",
                    f,
                    g
                );
                prop_assert_eq!(request_kind(&buf[..n]), Ok(KIND_TASK));
                prop_assert_eq!(decode_reply(&buf[..n]), Err(FrameError::Kind(KIND_TASK)));
                // Every strict prefix is an error, never a panic nor a shorter frame.
                for cut in [0, 1, 11, 12, n / 2, n - 1] {
                    if cut < n {
                        prop_assert!(
                            decode_task(&buf[..cut]).is_err(),
                            "prefix of {cut} of {n} bytes decoded"
                        );
                    }
                }
            }
            Err(FrameError::Field(_)) => {
                prop_assert!(f.config.output_prefix.len() > MAX_PREFIX_BYTES)
            }
            Err(e) => prop_assert!(false, "encode failed: {e}"),
        }
        Ok(())
    });
}

/// Encoding into a buffer of any size either fits (same length as into a large one) or is
/// `TooBig` — never a panic or a partial length.
#[test]
fn frame_encode_into_small_buffers() {
    fuzz(
        "frame_encode_into_small_buffers",
        4000,
        (task_frame(), reply_frame(), 0usize..600),
        |(f, r, size)| {
            let mut big = vec![0u8; BUF];
            let mut small = vec![0u8; size];
            if let Ok(full) = encode_task(&f, &mut big) {
                match encode_task(&f, &mut small) {
                    Ok(n) => prop_assert!(n == full && size >= full),
                    Err(FrameError::TooBig { need, cap }) => {
                        prop_assert!(cap == size && size < full && need <= full + 8 && need > size)
                    }
                    Err(e) => prop_assert!(false, "unexpected {e}"),
                }
            }
            let full = encode_reply(&r, &mut big).unwrap();
            match encode_reply(&r, &mut small) {
                Ok(n) => prop_assert!(n == full && size >= full),
                Err(FrameError::TooBig { cap, .. }) => prop_assert!(cap == size && size < full),
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
            Ok(())
        },
    );
}

#[test]
fn frame_reply_round_trip() {
    fuzz("frame_reply_round_trip", 4000, reply_frame(), |r| {
        let bytes = encoded_reply(&r);
        let g = decode_reply(&bytes);
        prop_assert!(g.is_ok(), "decode of an encoded reply failed: {:?}", g);
        let g = g.unwrap();
        if r.error.len() <= MAX_ERROR_BYTES {
            prop_assert_eq!(reply_bits(&r), reply_bits(&g));
        } else {
            // Cut at a character boundary at most 3 bytes short of the limit.
            prop_assert!(r.error.starts_with(&g.error));
            prop_assert!(
                g.error.len() <= MAX_ERROR_BYTES && g.error.len() + 4 > MAX_ERROR_BYTES,
                "cut to {}",
                g.error.len()
            );
            let mut cut = r.clone();
            cut.error = g.error.clone();
            prop_assert_eq!(reply_bits(&cut), reply_bits(&g));
        }
        prop_assert_eq!(
            decode_task(&bytes).unwrap_err(),
            FrameError::Kind(KIND_REPLY)
        );
        Ok(())
    });
}

#[derive(Clone, Debug)]
enum Mutation {
    Set(usize, u8),
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, u8),
    Delete(usize),
    /// Rewrite the header's body length to the frame's length (so the mutation reaches
    /// the body decoder instead of failing the length check).
    FixLength,
    /// Overwrite a u32 at a position with a boundary value.
    Word(usize, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        3 => (any::<usize>(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<usize>().prop_map(Mutation::Delete),
        3 => Just(Mutation::FixLength),
        2 => (any::<usize>(), prop::sample::select(vec![0u32, 1, 2, 3, 4, 5, 6, 255, 4096, 4097, 8192, 8193, 1024, 1025, u32::MAX, u32::MAX - 11])).prop_map(|(i, w)| Mutation::Word(i, w)),
    ]
}

fn mutate(mut v: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        let n = v.len();
        match *m {
            Mutation::Set(i, b) if n > 0 => v[i % n] = b,
            Mutation::Flip(i, b) if n > 0 => v[i % n] ^= 1 << b,
            Mutation::Truncate(i) => v.truncate(i % (n + 1)),
            Mutation::Insert(i, b) => v.insert(i % (n + 1), b),
            Mutation::Delete(i) if n > 0 => {
                v.remove(i % n);
            }
            Mutation::FixLength if n >= 12 => {
                let body = (n - 12) as u32;
                v[8..12].copy_from_slice(&body.to_le_bytes());
            }
            Mutation::Word(i, w) if n >= 4 => {
                let at = i % (n - 3);
                v[at..at + 4].copy_from_slice(&w.to_le_bytes());
            }
            _ => {}
        }
    }
    v
}

#[test]
fn frame_mutated_valid_frames() {
    let frames = prop_oneof![
        task_frame().prop_filter_map("prefix too long", |f| encoded_task(&f)),
        reply_frame().prop_map(|r| encoded_reply(&r)),
        Just({
            let mut b = [0u8; 12];
            let n = encode_stats_request(&mut b).unwrap();
            b[..n].to_vec()
        }),
    ];
    let decoded = std::sync::atomic::AtomicU64::new(0);
    fuzz(
        "frame_mutated_valid_frames",
        15000,
        (frames, prop::collection::vec(mutation(), 1..6)),
        |(frame, muts)| {
            let v = mutate(frame, &muts);
            if decode_task(&v).is_ok() || decode_reply(&v).is_ok() {
                decoded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            check_decoders(&v)
        },
    );
    eprintln!(
        "fuzz frame_mutated_valid_frames: {} mutated frames still decoded",
        decoded.into_inner()
    );
}

/// Findings that are not panics but asymmetries between encoder and decoder: the encoder
/// accepts values the decoder rejects. Kept as documented behaviour (a chip never sends
/// them), checked so a change is noticed.
#[test]
fn frame_encoder_decoder_asymmetries() {
    let t = WireTensor {
        dtype: DType::F32,
        ndims: 0,
        region: 1,
        region_bytes: 4,
        offset_bytes: 0,
        shape: [1; 5],
        strides: [1; 5],
    };
    let f = TaskFrame {
        callable: 0,
        config: CallConfig::default(),
        args: vec![WireArg::Tensor(t)],
    };
    let bytes = encoded_task(&f).expect("the encoder does not check ndims");
    assert!(matches!(decode_task(&bytes), Err(FrameError::Field(_))));
    let r = ReplyFrame {
        status: 0,
        error: String::new(),
        report: None,
        stats: Some(WireStats {
            builds: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
            build_s: 0.0,
            resident: vec![[0; 12]; 1025],
        }),
    };
    let mut buf = vec![0u8; 1 << 17];
    let n = encode_reply(&r, &mut buf).expect("the encoder does not bound the resident list");
    assert!(matches!(decode_reply(&buf[..n]), Err(FrameError::Field(_))));
    // Trailing bytes inside the stated body are ignored by both decoders.
    let mut bytes = encoded_task(&TaskFrame {
        callable: 7,
        config: CallConfig::default(),
        args: vec![],
    })
    .unwrap();
    bytes.extend_from_slice(&[0xAA; 5]);
    let body = (bytes.len() - 12) as u32;
    bytes[8..12].copy_from_slice(&body.to_le_bytes());
    assert_eq!(decode_task(&bytes).unwrap().callable, 7);
}

// ------------------------------------------------------------------------------------------
// (b) PTO2_RING_* parsing
// ------------------------------------------------------------------------------------------

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
            cmd.args([
                "--exact",
                "env_child_resolve_from_process",
                "--nocapture",
                "--test-threads=1",
            ])
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

// ------------------------------------------------------------------------------------------
// (c) scope-stats reader and sizing advisor
// ------------------------------------------------------------------------------------------

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
struct Hdr {
    fatal: bool,
    max: [[u64; 4]; 3],
    peaks: Option<[[u64; 4]; 3]>,
    failure: Option<(Option<u64>, Option<String>, Option<u64>)>,
}

impl Hdr {
    fn peaks(task_window: [u64; 4], heap: [u64; 4], dep_pool: [u64; 4]) -> Hdr {
        Hdr {
            fatal: false,
            max: [[16384; 4], [1 << 28; 4], [16384; 4]],
            peaks: Some([task_window, heap, dep_pool]),
            failure: None,
        }
    }

    fn text(&self) -> String {
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

    fn read(&self) -> RecordedPeaks {
        dfx::read_peaks(&self.text()).expect("a well-formed scope-stats header")
    }
}

fn hdr(peak: BoxedStrategy<u64>, max: BoxedStrategy<u64>) -> impl Strategy<Value = Hdr> {
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

fn scope_stats_text() -> impl Strategy<Value = String> {
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

/// `advise` may return `SizingAdvice` (today) or a `Result`/`Option` of it (if the fix
/// makes impossible advice an error): the properties below accept both.
trait IntoAdvice {
    fn into_advice(self) -> Option<dfx::SizingAdvice>;
}
impl IntoAdvice for dfx::SizingAdvice {
    fn into_advice(self) -> Option<dfx::SizingAdvice> {
        Some(self)
    }
}
impl<E> IntoAdvice for Result<dfx::SizingAdvice, E> {
    fn into_advice(self) -> Option<dfx::SizingAdvice> {
        self.ok()
    }
}
impl IntoAdvice for Option<dfx::SizingAdvice> {
    fn into_advice(self) -> Option<dfx::SizingAdvice> {
        self
    }
}

const MAX_WINDOW: u64 = 1 << 30;
const MAX_HEAP: u64 = 1 << 63;
const MAX_DEP: u64 = i32::MAX as u64;

/// The advice is valid everywhere and at or above every recorded peak (a window above:
/// a ring holds window − 1 tasks), a failure's `needed` and a failed run's valid recorded
/// sizes — whenever a valid size that high exists.
fn check_advice(p: &RecordedPeaks, headroom: f64) -> Result<(), TestCaseError> {
    let Some(a) = dfx::advise(p, headroom).into_advice() else {
        return Ok(());
    };
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
            let (Some(a), Some(b)) = (
                dfx::advise(&p, h).into_advice(),
                dfx::advise(&p, h * 2.0).into_advice(),
            ) else {
                return Ok(());
            };
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
        // `scaled(peak) + 1` overflows (release: wraps, window 4 for a peak of 2^64-1).
        (
            "window peak u64::MAX",
            Hdr::peaks([u64::MAX, 0, 0, 0], [0; 4], [0; 4]),
            1.0,
        ),
        // next_power_of_two overflows above 2^63 (release: 0 -> heap 1024 for this peak).
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
        // A failed run's recorded sizes are copied into the advice unchecked: a file that
        // states window 5 / heap 3000 / dep pool 2^31 gets them back as advice.
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
        QUIET.with(|q| q.set(true));
        quiet_panics();
        let r = std::panic::catch_unwind(|| match dfx::read_peaks(&p.text()) {
            Ok(p) => check_advice(&p, h),
            Err(_) => Ok(()), // rejecting the file is a valid answer too
        });
        QUIET.with(|q| q.set(false));
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.push(format!("{name}: {e}")),
            Err(panic) => failed.push(format!(
                "{name}: panicked: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        }
    }
    assert!(
        failed.is_empty(),
        "{} of the known advisor cases fail:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A tensor argument off the wire, turned into a view exactly as the chip does it (base of
/// the region, `buf_bytes = region_bytes`, element offset, shape, strides): whenever
/// `Tensor::validate` accepts it, every element the view spans — and every element a
/// kernel reaches through `as_rows` — lies inside the region (checked in 128-bit).
#[test]
fn frame_tensor_views_stay_in_bounds() {
    let small = || prop_oneof![3 => 0u32..6, 1 => any::<u32>(), 1 => prop::sample::select(vec![u32::MAX, u32::MAX - 1, 1 << 16, 1 << 31])];
    let strategy = (
        dtype(),
        0u8..=6,
        prop::array::uniform5(small()),
        prop::array::uniform5(small()),
        interesting_u64(),
        prop_oneof![2 => 0u64..4096, 1 => interesting_u64()],
        -16i64..16,
    );
    let accepted = std::sync::atomic::AtomicU64::new(0);
    fuzz(
        "frame_tensor_views_stay_in_bounds",
        20000,
        strategy,
        |(dtype, ndims, shape, strides, offset_elems, region, fit)| {
            let esize = dtype.size_bytes() as u128;
            let n = (ndims as usize).min(5);
            // Often size the region to the view's exact span (± a few bytes): the boundary.
            let span: u128 = 1
                + (0..n)
                    .map(|i| (shape[i].max(1) as u128 - 1) * strides[i] as u128)
                    .sum::<u128>();
            let exact = (offset_elems as u128 + span) * esize;
            let region_bytes = if fit != 0 && exact <= u64::MAX as u128 {
                (exact as i128 + fit as i128).clamp(0, u64::MAX as i128) as u64
            } else {
                region
            };
            let mut t = taskring::Tensor::from_raw(0x10000, &[1], dtype);
            t.buf_bytes = region_bytes;
            t.offset = offset_elems;
            t.ndims = ndims;
            t.shape = shape;
            t.strides = strides;
            if t.validate().is_err() {
                return Ok(());
            }
            accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            prop_assert!((1..=5).contains(&n) && n == ndims as usize);
            prop_assert!(
                shape[..n].iter().all(|&d| d >= 1) && strides[..n].iter().all(|&s| s >= 1)
            );
            let end = (offset_elems as u128 + span) * esize;
            prop_assert!(
                end <= region_bytes as u128,
                "view ends at byte {} of a {}-byte region",
                end,
                region_bytes
            );
            if let Some((rows, cols, row_stride)) = t.as_rows() {
                let last =
                    offset_elems as u128 + (rows as u128 - 1) * row_stride as u128 + cols as u128;
                prop_assert!(rows >= 1 && cols >= 1);
                prop_assert!(
                    last * esize <= region_bytes as u128,
                    "as_rows reaches byte {} of a {}-byte region",
                    last * esize,
                    region_bytes
                );
                prop_assert_eq!((rows as u128) * (cols as u128), t.numel() as u128);
            }
            Ok(())
        },
    );
    eprintln!(
        "fuzz frame_tensor_views_stay_in_bounds: {} views accepted",
        accepted.into_inner()
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
                let Some(a) = dfx::advise(&p, h).into_advice() else {
                    return Ok(());
                };
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

// ------------------------------------------------------------------------------------------
// L4 frames (cluster::wire): what a host decodes from rank 0 and rank 0 from a host
// ------------------------------------------------------------------------------------------

mod l4 {
    use super::*;
    use taskring::cluster::wire::{
        self as l4w, HostRequest, L4Arg, L4Dir, L4Reply, L4Task, L4Tensor, KIND_L4_CLOSE,
        KIND_L4_REPLY, KIND_L4_TASK,
    };

    fn l4_tensor() -> impl Strategy<Value = L4Tensor> {
        (
            prop::sample::select(vec![L4Dir::In, L4Dir::Out, L4Dir::InOut]),
            dtype(),
            prop::collection::vec(prop_oneof![1u64..64, interesting_u64()], 1..=5),
        )
            .prop_map(|(dir, dtype, shape)| L4Tensor { dir, dtype, shape })
    }

    fn l4_arg() -> BoxedStrategy<L4Arg> {
        prop_oneof![
            l4_tensor().prop_map(L4Arg::Shipped),
            (l4_tensor(), any::<u64>()).prop_map(|(t, id)| L4Arg::Resident(t, id)),
            any::<i64>().prop_map(L4Arg::Int),
            interesting_f64().prop_map(L4Arg::Float),
        ]
        .boxed()
    }

    fn l4_task() -> BoxedStrategy<L4Task> {
        (
            any::<u64>(),
            any::<i32>(),
            any::<u32>(),
            text(80),
            call_config(),
            prop::collection::vec(l4_arg(), 0..8),
        )
            .prop_map(|(seq, data_tag, callable, name, config, args)| L4Task {
                seq,
                data_tag,
                callable,
                name,
                config,
                args,
            })
            .boxed()
    }

    fn l4_reply() -> BoxedStrategy<L4Reply> {
        (
            any::<u64>(),
            any::<u32>(),
            text(300),
            interesting_f64(),
            prop::collection::vec((0usize..8, any::<u32>(), prop::option::of(text(100))), 0..5),
            any::<u32>(),
        )
            .prop_map(
                |(seq, status, error, elapsed_s, chips, n_outputs)| L4Reply {
                    seq,
                    status,
                    error,
                    elapsed_s,
                    chip_tasks: chips
                        .into_iter()
                        .map(|(w, c, e)| {
                            // Every other task ran (a report), the others failed (none).
                            let run = (w % 2 == 0).then(|| {
                                let mut r = taskring::RunReport {
                                    ring_sizing: taskring::RingSizing::default(),
                                    peak: Default::default(),
                                    tasks: c as u64,
                                    arena_hit: c % 2 == 0,
                                    arena_build_s: 0.5,
                                    elapsed_s: 0.25,
                                    replayed: false,
                                    device_memory: taskring::DeviceMemory::of_sizing(
                                        &taskring::RingSizing::default(),
                                    ),
                                };
                                r.peak.heap[w % 4] = c as u64;
                                r
                            });
                            taskring::node::ChipTaskReport {
                                worker: w,
                                callable: c,
                                run,
                                error: e,
                            }
                        })
                        .collect(),
                    n_outputs,
                },
            )
            .boxed()
    }

    /// Decoding never panics; whatever decodes re-encodes to a frame that decodes the same.
    fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(HostRequest::Task(t)) = l4w::decode_request(bytes) {
            let mut buf = vec![0u8; bytes.len() + 64];
            let n = l4w::encode_task(&t, &mut buf).map_err(|e| {
                TestCaseError::fail(format!("a decoded task does not re-encode: {e}"))
            })?;
            let again =
                l4w::decode_request(&buf[..n]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(same_l4_task(&again, &HostRequest::Task(t)));
        }
        if let Ok(r) = l4w::decode_reply(bytes) {
            let mut buf = vec![0u8; l4w::reply_len(&r)];
            let n =
                l4w::encode_reply(&r, &mut buf).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let again =
                l4w::decode_reply(&buf[..n]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(format!("{again:?}"), format!("{r:?}"));
        }
        Ok(())
    }

    /// Equal up to NaN payloads (a float scalar's bits survive; `==` says NaN != NaN).
    fn same_l4_task(a: &HostRequest, b: &HostRequest) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    #[test]
    fn l4_arbitrary_bytes_and_valid_headers() {
        let strategy = (
            prop::sample::select(vec![
                KIND_L4_TASK,
                KIND_L4_CLOSE,
                KIND_L4_REPLY,
                KIND_TASK,
                0,
            ]),
            prop::collection::vec(any::<u8>(), 0..400),
            prop::option::of(any::<u32>()),
            any::<bool>(),
        );
        fuzz(
            "l4_arbitrary_bytes_and_valid_headers",
            20000,
            strategy,
            |(kind, body, len, raw)| {
                if raw {
                    return check(&body);
                }
                let mut v = Vec::with_capacity(12 + body.len());
                v.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
                v.extend_from_slice(&FRAME_VERSION.to_le_bytes());
                v.extend_from_slice(&kind.to_le_bytes());
                v.extend_from_slice(&len.unwrap_or(body.len() as u32).to_le_bytes());
                v.extend_from_slice(&body);
                check(&v)
            },
        );
    }

    #[test]
    fn l4_round_trips_and_truncations() {
        fuzz(
            "l4_round_trips_and_truncations",
            3000,
            (l4_task(), l4_reply()),
            |(t, r)| {
                let mut buf = vec![0u8; 16384];
                match l4w::encode_task(&t, &mut buf) {
                    Ok(n) => {
                        let back = l4w::decode_request(&buf[..n]);
                        let shapes_fit = t.args.iter().all(|a| match a {
                            L4Arg::Shipped(x) | L4Arg::Resident(x, _) => {
                                x.nbytes().is_some_and(|b| b <= isize::MAX as u64)
                            }
                            _ => true,
                        });
                        if shapes_fit && t.config.output_prefix.len() <= MAX_PREFIX_BYTES {
                            prop_assert!(
                                same_l4_task(&back.clone().unwrap(), &HostRequest::Task(t.clone())),
                                "{back:?}"
                            );
                        } else {
                            prop_assert!(back.is_err());
                        }
                        for cut in [0, 11, 12, n / 2, n - 1] {
                            prop_assert!(
                                l4w::decode_request(&buf[..cut.min(n)]).is_err() || cut >= n
                            );
                        }
                    }
                    Err(_) => prop_assert!(
                        t.config.output_prefix.len() > MAX_PREFIX_BYTES || t.name.len() > 256
                    ),
                }
                let mut rb = vec![0u8; l4w::reply_len(&r)];
                let n = l4w::encode_reply(&r, &mut rb)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(
                    n <= rb.len(),
                    "the reply is {n} bytes, its bound {}",
                    rb.len()
                );
                // A host never announces more outputs than a task has arguments; the decoder
                // refuses such a count (the encoder does not check it).
                match l4w::decode_reply(&rb) {
                    Ok(back) => prop_assert_eq!(format!("{back:?}"), format!("{r:?}")),
                    Err(e) => prop_assert!(r.n_outputs as usize > l4w::MAX_L4_ARGS, "{e}"),
                }
                Ok(())
            },
        );
    }

    #[test]
    fn l4_mutated_valid_frames() {
        let frames = prop_oneof![
            l4_task().prop_filter_map("does not encode", |t| {
                let mut buf = vec![0u8; 16384];
                l4w::encode_task(&t, &mut buf)
                    .ok()
                    .map(|n| buf[..n].to_vec())
            }),
            l4_reply().prop_map(|r| {
                let mut buf = vec![0u8; l4w::reply_len(&r)];
                let n = l4w::encode_reply(&r, &mut buf).unwrap();
                buf[..n].to_vec()
            }),
        ];
        fuzz(
            "l4_mutated_valid_frames",
            15000,
            (frames, prop::collection::vec(mutation(), 1..6)),
            |(frame, muts)| check(&mutate(frame, &muts)),
        );
    }
}
