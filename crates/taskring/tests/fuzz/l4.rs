//! L4 frames (`taskring::internals::cluster::wire`): what a host decodes from rank 0 and rank 0 from
//! a host. Decoding never panics; whatever decodes re-encodes to a frame that decodes the
//! same; encode → decode is the identity for every task and reply the encoder accepts.

use crate::generators::{
    call_config, dtype, framed, interesting_f64, interesting_u64, mutate, mutation, text,
};
use crate::harness::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use taskring::internals::cluster::wire::{
    self as l4w, HostRequest, L4Arg, L4Dir, L4Reply, L4Task, L4Tensor, KIND_L4_CLOSE,
    KIND_L4_REPLY, KIND_L4_TASK,
};
use taskring::internals::node::wire::{KIND_TASK, MAX_PREFIX_BYTES};

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
        let n = l4w::encode_task(&t, &mut buf)
            .map_err(|e| TestCaseError::fail(format!("a decoded task does not re-encode: {e}")))?;
        let again =
            l4w::decode_request(&buf[..n]).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(same_l4_task(&again, &HostRequest::Task(t)));
    }
    if let Ok(r) = l4w::decode_reply(bytes) {
        let mut buf = vec![0u8; l4w::reply_len(&r)];
        let n = l4w::encode_reply(&r, &mut buf).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let again = l4w::decode_reply(&buf[..n]).map_err(|e| TestCaseError::fail(e.to_string()))?;
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
            check(&framed(kind, len, &body))
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
                        prop_assert!(l4w::decode_request(&buf[..cut.min(n)]).is_err() || cut >= n);
                    }
                }
                Err(_) => prop_assert!(
                    t.config.output_prefix.len() > MAX_PREFIX_BYTES || t.name.len() > 256
                ),
            }
            let mut rb = vec![0u8; l4w::reply_len(&r)];
            let n =
                l4w::encode_reply(&r, &mut rb).map_err(|e| TestCaseError::fail(e.to_string()))?;
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
