//! Stage 1 of a submit (the module doc of [`super::submit`]): the tensor arguments in
//! canonical order with their output specs checked and their output blocks sized
//! ([`CanonicalArgs`], [`canonical_order`]), and stage 3b, placing the outputs in the
//! task's block ([`place_outputs`]). Everything here is on the submit's hot path and
//! `#[inline(always)]`; nothing allocates.

use super::TaskOutputs;
use crate::engine::ring::{align_output, OUTPUT_ALIGN_BYTES};
use crate::engine::{ArgKind, ArgTag, TensorSpec, MAX_TASK_TENSORS};
use crate::tensor::{Tensor, TensorError, MAX_DIMS};
use std::mem::MaybeUninit;

/// A submit's tensor arguments in canonical order — inputs, inouts, outputs (OUTPUT and
/// OUTPUT_EXISTING in argument order), no_dep — with what the later stages need of
/// them. Stage 1's result; on the stack, no heap allocation.
pub(super) struct CanonicalArgs {
    /// Entries `0..n` are initialised (stage 1 writes them in order).
    pub(super) tensors: [MaybeUninit<Tensor>; MAX_TASK_TENSORS],
    pub(super) tags: [ArgTag; MAX_TASK_TENSORS],
    /// Heap bytes of each OUTPUT's block ([`output_block_bytes`]), written for OUTPUT
    /// entries only (left uninitialised: most submits have no OUTPUT).
    pub(super) out_size: [MaybeUninit<u64>; MAX_TASK_TENSORS],
    /// The argument index of each canonical entry (`order[..n]`).
    pub(super) order: [u8; MAX_TASK_TENSORS],
    pub(super) n: usize,
    pub(super) n_inputs: usize,
    /// The sum of the outputs' `out_size` (saturating).
    pub(super) heap_bytes: u64,
    /// Tensormap inserts the submit will make (INOUT / OUTPUT_EXISTING, not no-dep).
    pub(super) tm_inserts: u32,
}

impl CanonicalArgs {
    #[inline(always)]
    pub(super) fn new() -> CanonicalArgs {
        CanonicalArgs {
            tensors: [const { MaybeUninit::uninit() }; MAX_TASK_TENSORS],
            tags: [ArgTag::Input; MAX_TASK_TENSORS],
            out_size: [const { MaybeUninit::uninit() }; MAX_TASK_TENSORS],
            order: [0; MAX_TASK_TENSORS],
            n: 0,
            n_inputs: 0,
            heap_bytes: 0,
            tm_inserts: 0,
        }
    }

    #[inline(always)]
    pub(super) fn tensors(&self) -> &[Tensor] {
        // safety: entries 0..n are initialised (the type's invariant).
        unsafe { std::slice::from_raw_parts(self.tensors.as_ptr() as *const Tensor, self.n) }
    }

    #[inline(always)]
    pub(super) fn tags(&self) -> &[ArgTag] {
        &self.tags[..self.n]
    }
}

/// The canonical group of a tensor argument: 0 inputs, 1 inouts, 2 outputs (OUTPUT,
/// OUTPUT_EXISTING), 3 no_dep.
#[inline(always)]
pub(super) fn canonical_group(a: ArgKind) -> u8 {
    match a {
        ArgKind::Existing(ArgTag::Input) => 0,
        ArgKind::Existing(ArgTag::Inout) => 1,
        ArgKind::Existing(ArgTag::OutputExisting) | ArgKind::Spec => 2,
        // (`TaskArgs::tensor` turns a tensor tagged OUTPUT into a spec.)
        ArgKind::Existing(ArgTag::Output) => 2,
        ArgKind::Existing(ArgTag::NoDep) => 3,
    }
}

/// Stage 1a: writes to `order[..argv.len()]` the argument indices in canonical order,
/// stable (argument order within a group). Most submits list their arguments in
/// canonical order already: then `order` is the identity and nothing is sorted.
#[inline(always)]
pub(super) fn canonical_order(argv: &[ArgKind], order: &mut [u8; MAX_TASK_TENSORS]) {
    let mut group = [0u8; MAX_TASK_TENSORS];
    let mut count = [0usize; 4];
    let mut sorted = true;
    for (i, &a) in argv.iter().enumerate() {
        let g = canonical_group(a);
        sorted &= i == 0 || g >= group[i - 1];
        group[i] = g;
        count[g as usize] += 1;
    }
    if sorted {
        for (i, o) in order.iter_mut().enumerate().take(argv.len()) {
            *o = i as u8;
        }
        return;
    }
    // Stable counting sort by group.
    let mut at = [
        0,
        count[0],
        count[0] + count[1],
        count[0] + count[1] + count[2],
    ];
    for (i, &g) in group.iter().enumerate().take(argv.len()) {
        let g = g as usize;
        order[at[g]] = i as u8;
        at[g] += 1;
    }
}

/// Why the OUTPUT spec `s` cannot be materialised, or `None`. Materialising needs a valid
/// rank and non-empty dimensions, and a byte size that overflows 64 bits must not wrap
/// into a small buffer; with these checked (and contiguous strides that fit), the
/// materialised tensor is valid by construction (contiguous from offset 0 over exactly
/// its bytes).
#[cold]
#[inline(never)]
pub(super) fn output_spec_error(s: &TensorSpec) -> Option<String> {
    let nd = s.ndims as usize;
    let bytes = s.shape[..nd.min(MAX_DIMS)]
        .iter()
        .fold(s.dtype.size_bytes() as u128, |b, &d| b * d as u128);
    if nd == 0 || nd > MAX_DIMS {
        Some(TensorError::Rank(nd).to_string())
    } else if s.shape[..nd].contains(&0) {
        Some(TensorError::EmptyDim(s.shape[..nd].to_vec()).to_string())
    } else if bytes > u64::MAX as u128 {
        Some(format!(
            "an output of shape {:?} ({bytes} bytes) does not fit 64-bit sizes",
            &s.shape[..nd]
        ))
    } else if !crate::tensor::contiguous_strides_fit(&s.shape[..nd]) {
        Some(TensorError::StrideOverflow(s.shape[..nd].to_vec()).to_string())
    } else {
        None
    }
}

/// Is the OUTPUT spec `s` valid? The fast test in front of [`output_spec_error`] (which
/// names the problem): rank, non-empty dimensions, a byte size within 64 bits and
/// strides that fit.
#[inline(always)]
pub(super) fn output_spec_ok(s: &TensorSpec) -> bool {
    let nd = s.ndims as usize;
    if nd == 0 || nd > MAX_DIMS {
        return false;
    }
    let mut bytes = s.dtype.size_bytes() as u128;
    for &d in &s.shape[..nd] {
        if d == 0 {
            return false;
        }
        bytes *= d as u128;
    }
    bytes <= u64::MAX as u128 && crate::tensor::contiguous_strides_fit(&s.shape[..nd])
}

/// The heap bytes an output of `nbytes` takes in its task's output block: rounded up to
/// [`OUTPUT_ALIGN_BYTES`]. Saturating: a size near 2^64 must not wrap into a small
/// allocation (it fails as larger than any heap instead).
#[inline(always)]
pub(super) fn output_block_bytes(nbytes: u64) -> u64 {
    nbytes
        .checked_add(OUTPUT_ALIGN_BYTES - 1)
        .map_or(u64::MAX, |_| align_output(nbytes))
}

/// Stage 3b: gives each OUTPUT of `c` its address in the task's output block at `base`
/// (packed in canonical order, `out_size` bytes each) and the task (`outputs.id`) as its
/// owner, and appends it to `outputs` (what the caller gets back, in canonical order).
/// `outputs` is the caller's, filled in place: returning it would copy its ~0.5 KiB on
/// every submit.
#[inline(always)]
pub(super) fn place_outputs(c: &mut CanonicalArgs, base: u64, outputs: &mut TaskOutputs) {
    let id = outputs.id;
    let mut off = 0u64;
    for i in 0..c.n {
        if c.tags[i] != ArgTag::Output {
            continue;
        }
        // safety: entries 0..n are initialised, and an OUTPUT entry's size with it.
        let (t, size) = unsafe { (c.tensors[i].assume_init_mut(), c.out_size[i].assume_init()) };
        t.addr = base + off;
        t.owner = id;
        off += size;
        outputs.push(t);
        debug_assert!({
            let back = outputs.output(outputs.len() - 1);
            back.addr == t.addr
                && back.offset == t.offset
                && back.buf_bytes == t.buf_bytes
                && back.shape == t.shape
                && back.strides == t.strides
                && back.owner == t.owner
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    fn input() -> ArgKind {
        ArgKind::Existing(ArgTag::Input)
    }
    fn tagged(tag: ArgTag) -> ArgKind {
        ArgKind::Existing(tag)
    }
    fn spec(shape: &[u32]) -> TensorSpec {
        TensorSpec {
            shape: {
                let mut s = [0; MAX_DIMS];
                s[..shape.len()].copy_from_slice(shape);
                s
            },
            ndims: shape.len() as u8,
            dtype: DType::F32,
        }
    }
    fn order_of(argv: &[ArgKind]) -> Vec<u8> {
        let mut order = [0xff; MAX_TASK_TENSORS];
        canonical_order(argv, &mut order);
        order[..argv.len()].to_vec()
    }

    #[test]
    fn canonical_order_keeps_an_ordered_list() {
        let argv = [
            input(),
            input(),
            tagged(ArgTag::Inout),
            ArgKind::Spec,
            tagged(ArgTag::OutputExisting),
            tagged(ArgTag::NoDep),
        ];
        assert_eq!(order_of(&argv), [0, 1, 2, 3, 4, 5]);
        assert_eq!(order_of(&[]), Vec::<u8>::new());
    }

    #[test]
    fn canonical_order_groups_stably() {
        // no_dep, output, inout, input, output_existing, input, spec
        let argv = [
            tagged(ArgTag::NoDep),
            ArgKind::Spec,
            tagged(ArgTag::Inout),
            input(),
            tagged(ArgTag::OutputExisting),
            input(),
            ArgKind::Spec,
        ];
        // inputs 3, 5; inout 2; outputs in argument order 1, 4, 6; no_dep 0.
        assert_eq!(order_of(&argv), [3, 5, 2, 1, 4, 6, 0]);
    }

    #[test]
    fn canonical_order_at_the_argument_limit() {
        let mut argv = vec![tagged(ArgTag::NoDep); MAX_TASK_TENSORS];
        argv[MAX_TASK_TENSORS - 1] = input();
        let order = order_of(&argv);
        assert_eq!(order[0] as usize, MAX_TASK_TENSORS - 1);
        assert_eq!(
            &order[1..],
            (0..MAX_TASK_TENSORS as u8 - 1).collect::<Vec<_>>()
        );
    }

    #[test]
    fn output_specs_are_validated() {
        assert_eq!(output_spec_error(&spec(&[4, 8])), None);
        assert!(output_spec_ok(&spec(&[4, 8])));
        let bad = [
            spec(&[]),
            spec(&[2, 0, 3]),
            // 2^32-1 elements per dimension, 4 bytes each: over 2^64 bytes.
            spec(&[u32::MAX, u32::MAX, u32::MAX]),
        ];
        for s in &bad {
            assert!(!output_spec_ok(s), "{s:?}");
            assert!(output_spec_error(s).is_some(), "{s:?}");
        }
        let mut too_many = spec(&[1]);
        too_many.ndims = MAX_DIMS as u8 + 1;
        assert!(!output_spec_ok(&too_many));
        assert_eq!(
            output_spec_error(&too_many),
            Some(TensorError::Rank(MAX_DIMS + 1).to_string())
        );
        assert_eq!(
            output_spec_error(&spec(&[2, 0])),
            Some(TensorError::EmptyDim(vec![2, 0]).to_string())
        );
        let big = output_spec_error(&spec(&[u32::MAX, u32::MAX, u32::MAX])).unwrap();
        assert!(big.contains("does not fit 64-bit sizes"), "{big}");
    }

    #[test]
    fn output_blocks_are_aligned_and_saturate() {
        let a = OUTPUT_ALIGN_BYTES;
        assert_eq!(output_block_bytes(1), a);
        assert_eq!(output_block_bytes(a), a);
        assert_eq!(output_block_bytes(a + 1), 2 * a);
        assert_eq!(output_block_bytes(u64::MAX - a + 2), u64::MAX);
        assert_eq!(output_block_bytes(u64::MAX), u64::MAX);
    }
}
