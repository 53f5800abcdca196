//! (a) The L3 task frame and reply decoders (`taskring::internals::node::wire`): arbitrary bytes,
//! valid headers over random bodies and mutated valid frames never panic and give `Ok` or
//! a typed `FrameError`; encode → decode is the identity, and decode → encode → decode is
//! stable for whatever a mutated frame decodes to.

use crate::generators::{
    call_config, dtype, framed, interesting_f64, interesting_u64, mutate, mutation, text,
};
use crate::harness::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use taskring::internals::node::wire::*;
use taskring::{CallConfig, DType};

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
        |(kind, body, len)| check_decoders(&framed(kind, len, &body)),
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

/// Asymmetries between encoder and decoder (not panics): the encoder accepts values the
/// decoder rejects. Documented behaviour (a chip never sends them), checked so that a
/// change on either side shows here.
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
