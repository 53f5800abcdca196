//! A tensor argument off the wire as the chip turns it into a view: whatever
//! `Tensor::validate` accepts stays inside its shared-memory region, through `as_rows`
//! too.

use crate::generators::{dtype, interesting_u64};
use crate::harness::fuzz;
use proptest::prelude::*;

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
