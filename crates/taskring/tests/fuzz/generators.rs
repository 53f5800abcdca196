//! Input generators more than one fuzzed target uses: integers and floats at their limits,
//! Unicode text, dtypes, call configs (the L3 and L4 task frames carry one), and byte-level
//! mutations of a valid frame (with the frame header both layers share).

use proptest::prelude::*;
use taskring::internals::node::wire::{FRAME_MAGIC, FRAME_VERSION};
use taskring::{CallConfig, DType};

/// u64 values that matter at limits, plus uniform ones.
pub(crate) fn interesting_u64() -> BoxedStrategy<u64> {
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
pub(crate) fn interesting_f64() -> BoxedStrategy<f64> {
    prop_oneof![
        2 => any::<u64>().prop_map(f64::from_bits),
        1 => prop::sample::select(vec![0.0, -0.0, 1.0, 1.25, 2.0, 0.5, -1.0, f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MAX, f64::MIN_POSITIVE, 5e-324, 1e300]),
        1 => 0.0f64..16.0,
    ]
    .boxed()
}

pub(crate) fn dtype() -> impl Strategy<Value = DType> {
    (0..DType::ALL.len()).prop_map(|i| DType::ALL[i])
}

/// Strings of any Unicode, sometimes longer than a frame may carry.
pub(crate) fn text(max_chars: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => ".{0,40}",
        1 => prop::collection::vec(any::<char>(), 0..max_chars).prop_map(|v| v.into_iter().collect::<String>()),
        1 => (any::<char>(), 0..max_chars).prop_map(|(c, n)| std::iter::repeat_n(c, n).collect::<String>()),
    ]
}

pub(crate) fn call_config() -> BoxedStrategy<CallConfig> {
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

/// One edit of a frame's bytes (positions are taken modulo the frame's length).
#[derive(Clone, Debug)]
pub(crate) enum Mutation {
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

pub(crate) fn mutation() -> impl Strategy<Value = Mutation> {
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

pub(crate) fn mutate(mut v: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
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

/// A frame header (magic, version, `kind`, body length `len` — else the body's own,
/// right or wrong) over `body`.
pub(crate) fn framed(kind: u16, len: Option<u32>, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + body.len());
    v.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
    v.extend_from_slice(&FRAME_VERSION.to_le_bytes());
    v.extend_from_slice(&kind.to_le_bytes());
    v.extend_from_slice(&len.unwrap_or(body.len() as u32).to_le_bytes());
    v.extend_from_slice(body);
    v
}
