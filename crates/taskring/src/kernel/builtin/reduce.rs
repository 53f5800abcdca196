//! Per-row kernels: `rowmax`, `rowsum` (one value per row) and `softmax_rows` (a row
//! max and a row sum per row). A 1-D view is one row.

use super::check::{check_elementwise, fail, Sig};
use super::fastmath::exp_f32;
use super::rows::{assert_same_layout, Rows};
use crate::kernel::{Kernel, KernelCall};
use crate::tensor::Tensor;

fn check_row_reduce(
    sig: &Sig,
    tensors: &[Tensor],
    n_inputs: usize,
    scalars: &[u64],
) -> Result<(), String> {
    sig.check(tensors, n_inputs, scalars)?;
    let (x, out) = (&tensors[0], &tensors[1]);
    let m = match x.ndims {
        1 => 1,
        2 => x.shape[0],
        _ => {
            return fail(
                sig.name,
                format!("input x must be 1-D or 2-D, got shape {:?}", x.shape()),
            )
        }
    };
    if out.shape() != [m] && out.shape() != [m, 1] {
        return fail(
            sig.name,
            format!(
                "output out is {:?}, expected [{m}] or [{m}, 1] (one value per row of x {:?})",
                out.shape(),
                x.shape()
            ),
        );
    }
    Ok(())
}

/// For each row of tensor 0, `out[i] = reduce(row)`; tensor 1 holds one value per row.
#[inline(always)]
fn row_reduce(name: &str, call: &KernelCall<'_>, reduce: impl Fn(*const f32, usize) -> f32) {
    let x = Rows::of(name, &call.tensors[0]);
    let o = Rows::of(name, &call.tensors[1]);
    assert!(
        o.rows * o.cols == x.rows && (o.rows == 1 || o.cols == 1),
        "kernel '{name}': output {}x{} does not hold one value per row of a {}x{} input",
        o.rows,
        o.cols,
        x.rows,
        x.cols
    );
    // [M] is one row of M dense values; [M, 1] is M rows of one value each.
    let step = if o.rows == 1 { 1 } else { o.stride };
    for i in 0..x.rows {
        // safety: check() accepted x as a row-addressable f32 view with `rows` rows and
        // out as an f32 view holding `rows` values at `step` apart; the engine validated
        // both against live buffers, so row i < rows and out element i are in bounds.
        unsafe {
            *o.ptr.add(i * step) = reduce(x.row(i), x.cols);
        }
    }
}

const ROWMAX_SIG: Sig = Sig::unary(RowMaxKernel::NAME);
const ROWSUM_SIG: Sig = Sig::unary(RowSumKernel::NAME);

/// `rowmax`: `out[i] = max_j x[i, j]`.
///
/// Tensors: 0 `x` `[M, N]` (input; a 1-D `[N]` is one row), 1 `out` `[M]` or `[M, 1]`
/// (output; `[M, 1]` may be a strided column). Scalars: none. Core: any.
/// NaNs are skipped (`f32::max`) unless a whole row is NaN.
pub struct RowMaxKernel;

impl Kernel for RowMaxKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_row_reduce(&ROWMAX_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        // safety: row_reduce passes the closure a row pointer with `n` in-bounds elements.
        row_reduce(Self::NAME, call, |p, n| unsafe { row_max(p, n) })
    }
}

/// `rowsum`: `out[i] = sum_j x[i, j]` (accumulated in `f64`).
///
/// Tensors: 0 `x` `[M, N]` (input; a 1-D `[N]` is one row), 1 `out` `[M]` or `[M, 1]`
/// (output; `[M, 1]` may be a strided column). Scalars: none. Core: any.
pub struct RowSumKernel;

impl Kernel for RowSumKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_row_reduce(&ROWSUM_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        // safety: row_reduce passes the closure a row pointer with `n` in-bounds elements.
        row_reduce(Self::NAME, call, |p, n| unsafe { row_sum(p, n) as f32 })
    }
}

/// Max of `n >= 1` elements at `p`.
///
/// # Safety
/// `p..p+n` is readable.
///
/// NaN elements are skipped (`f32::max`), a row of NaN only gives NaN. In eight lanes
/// (a loop the compiler vectorises; the order of a maximum does not matter).
#[inline(always)]
unsafe fn row_max(p: *const f32, n: usize) -> f32 {
    let row = std::slice::from_raw_parts(p, n);
    let mut m = [f32::NEG_INFINITY; 8];
    // Per lane: a non-NaN element was seen.
    let mut num = [false; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for ((ml, nl), &v) in m.iter_mut().zip(num.iter_mut()).zip(c) {
            *ml = ml.max(v);
            *nl |= !v.is_nan();
        }
    }
    let mut best = m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mut any = num.iter().any(|&x| x);
    for &v in chunks.remainder() {
        best = best.max(v);
        any |= !v.is_nan();
    }
    if !any && n > 0 {
        f32::NAN
    } else {
        best
    }
}

/// Sum of `n` elements at `p`, in `f64`.
///
/// # Safety
/// `p..p+n` is readable.
#[inline]
unsafe fn row_sum(p: *const f32, n: usize) -> f64 {
    let mut s = 0.0f64;
    for j in 0..n {
        s += *p.add(j) as f64;
    }
    s
}

const SOFTMAX_SIG: Sig = Sig::unary(SoftmaxRowsKernel::NAME);

/// `softmax_rows`: per row, `out[i, j] = exp(x[i, j] - max_i) / sum_j exp(x[i, j] - max_i)`
/// (numerically stable; computed in place in the output row, no allocation; the
/// exponential is `fastmath::exp_f32`, within 2 ulp, vectorised).
///
/// Tensors: 0 `x` `[M, N]` (input; a 1-D `[N]` is one row, higher ranks collapse their
/// leading dimensions into rows), 1 `out` (output, same shape as `x`; may be the same
/// view as `x`). Scalars: none. Core: any.
pub struct SoftmaxRowsKernel;

impl Kernel for SoftmaxRowsKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&SOFTMAX_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        let x = Rows::of(Self::NAME, &call.tensors[0]);
        let o = Rows::of(Self::NAME, &call.tensors[1]);
        assert_same_layout(Self::NAME, &x, &o);
        // safety: check() accepted x and out with the same shape as row-addressable f32
        // views validated against live buffers: row i < rows holds `cols` in-bounds
        // elements in both.
        unsafe { softmax_rows(&x, &o) }
    }
}

/// [`softmax_rows_body`], with AVX2 where the CPU has it (8 exponentials per
/// instruction sequence instead of 4).
///
/// # Safety
/// As [`softmax_rows_body`].
unsafe fn softmax_rows(x: &Rows, o: &Rows) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return softmax_rows_avx2(x, o);
    }
    softmax_rows_body(x, o)
}

/// [`softmax_rows_body`] compiled for AVX2.
///
/// # Safety
/// As [`softmax_rows_body`], on a CPU with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn softmax_rows_avx2(x: &Rows, o: &Rows) {
    softmax_rows_body(x, o)
}

/// Per row: the maximum, then `exp(x - max)` into the output row (a loop the compiler
/// vectorises: [`exp_f32`] has no branch and no call), then the sum in `f64` (eight
/// partial sums) and the scaling.
///
/// # Safety
/// `x` and `o` have the same shape; each of their rows holds `cols` valid f32 (rows of
/// `o` writable; `o` may be `x` itself, row for row, but no other overlap).
#[inline(always)]
unsafe fn softmax_rows_body(x: &Rows, o: &Rows) {
    let n = x.cols;
    for i in 0..x.rows {
        let (px, po) = (x.row(i), o.row(i));
        let m = row_max(px, n);
        if std::ptr::eq(px, po) {
            for v in std::slice::from_raw_parts_mut(po, n) {
                *v = exp_f32(*v - m);
            }
        } else {
            // Element j read before element j is written, as the views may overlap
            // (the compiler vectorises this loop behind a run-time overlap check).
            for j in 0..n {
                *po.add(j) = exp_f32(*px.add(j) - m);
            }
        }
        let out = std::slice::from_raw_parts_mut(po, n);
        let mut acc = [0f64; 8];
        let mut chunks = out.chunks_exact(8);
        for c in &mut chunks {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a += v as f64;
            }
        }
        let s: f64 =
            acc.iter().sum::<f64>() + chunks.remainder().iter().map(|&v| v as f64).sum::<f64>();
        let inv = (1.0 / s) as f32;
        for v in out.iter_mut() {
            *v *= inv;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::builtin::testing::{close, data, exec, t};
    use crate::kernel::builtin::{ROWMAX, ROWSUM, SOFTMAX_ROWS};

    #[test]
    fn rowmax_rowsum() {
        let mut x = data(12, 18);
        let row = |r: usize| &x[r * 4..r * 4 + 4];
        let maxes: Vec<f32> = (0..3)
            .map(|r| row(r).iter().cloned().fold(f32::NEG_INFINITY, f32::max))
            .collect();
        let sums: Vec<f32> = (0..3).map(|r| row(r).iter().sum()).collect();

        // [M] output.
        let mut o = vec![0.0; 3];
        exec(ROWMAX, &[t(&mut x, &[3, 4]), t(&mut o, &[3])], 1, &[]);
        assert_eq!(o, maxes);
        exec(ROWSUM, &[t(&mut x, &[3, 4]), t(&mut o, &[3])], 1, &[]);
        close(&o, &sums, 1e-6);

        // [M, 1] output as a strided column (column 2 of a 3x4 buffer).
        let mut w = vec![0.0; 12];
        let col = t(&mut w, &[3, 4]).view(&[3, 1], 2, Some(&[4, 1])).unwrap();
        exec(ROWMAX, &[t(&mut x, &[3, 4]), col], 1, &[]);
        for r in 0..3 {
            assert_eq!(w[r * 4 + 2], maxes[r]);
            assert_eq!(w[r * 4], 0.0);
        }

        // 1-D input is one row; strided input (column block [:, 1..3]).
        let mut one = vec![0.0; 1];
        exec(ROWSUM, &[t(&mut x, &[12]), t(&mut one, &[1])], 1, &[]);
        close(&one, &[x.iter().sum()], 1e-6);
        let blk = t(&mut x, &[3, 4]).view(&[3, 2], 1, Some(&[4, 1])).unwrap();
        exec(ROWMAX, &[blk, t(&mut o, &[3, 1])], 1, &[]);
        assert_eq!(
            o,
            (0..3)
                .map(|r| x[r * 4 + 1].max(x[r * 4 + 2]))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn softmax_rows_stable_strided_and_in_place() {
        let mut x = data(20, 19);
        x[3] = 1000.0; // would overflow exp without the max shift
        x[4] = 999.0;
        let reference = |row: &[f32]| -> Vec<f32> {
            let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|v| (v / s) as f32).collect()
        };
        let want: Vec<f32> = (0..4)
            .flat_map(|r| reference(&x[r * 5..r * 5 + 5]))
            .collect();
        let mut o = vec![0.0; 20];
        exec(
            SOFTMAX_ROWS,
            &[t(&mut x, &[4, 5]), t(&mut o, &[4, 5])],
            1,
            &[],
        );
        close(&o, &want, 1e-6);
        assert!(o.iter().all(|v| v.is_finite()));

        // Strided input block [:, 1..4], output a column block of a wider buffer.
        let mut wo = vec![3.0; 4 * 7];
        let xin = t(&mut x, &[4, 5]).view(&[4, 3], 1, Some(&[5, 1])).unwrap();
        let out = t(&mut wo, &[4, 7]).view(&[4, 3], 2, Some(&[7, 1])).unwrap();
        exec(SOFTMAX_ROWS, &[xin, out], 1, &[]);
        for r in 0..4 {
            let w = reference(&x[r * 5 + 1..r * 5 + 4]);
            close(&wo[r * 7 + 2..r * 7 + 5], &w, 1e-6);
            assert_eq!(wo[r * 7], 3.0);
            assert_eq!(wo[r * 7 + 6], 3.0);
        }

        // In place: out is the same view as x.
        let tx = t(&mut x, &[4, 5]);
        exec(SOFTMAX_ROWS, &[tx, tx], 1, &[]);
        close(&x, &want, 1e-6);
    }
}
