//! Elementwise kernels: `copy`, `fill`, `add`, `sub`, `mul`, `scale`, `exp`. Every
//! tensor has the same shape; dense views run as one long row. Raw pointers only, so an
//! output may alias an input (in place).

use super::check::{check_elementwise, Sig};
use super::rows::{assert_same_layout, Rows};
use crate::kernel::{Kernel, KernelCall};
use crate::tensor::Tensor;

/// `out[i] = f(x[i])` for tensors 0 (read) and 1 (written).
#[inline(always)]
fn map1(name: &str, call: &KernelCall<'_>, f: impl Fn(f32) -> f32) {
    let (mut x, mut o) = (
        Rows::of(name, &call.tensors[0]),
        Rows::of(name, &call.tensors[1]),
    );
    assert_same_layout(name, &x, &o);
    if x.dense() && o.dense() {
        (x, o) = (x.flat(), o.flat());
    }
    for i in 0..x.rows {
        // safety: check() accepted both tensors (same shape, row-addressable f32 views)
        // and the engine validated them against live buffers, so row i < rows holds
        // `cols` in-bounds elements in each. Raw pointers only: x and o may alias.
        unsafe {
            let (px, po) = (x.row(i), o.row(i));
            for j in 0..x.cols {
                *po.add(j) = f(*px.add(j));
            }
        }
    }
}

/// `out[i] = f(a[i], b[i])` for tensors 0, 1 (read) and 2 (written).
#[inline(always)]
fn map2(name: &str, call: &KernelCall<'_>, f: impl Fn(f32, f32) -> f32) {
    let mut a = Rows::of(name, &call.tensors[0]);
    let mut b = Rows::of(name, &call.tensors[1]);
    let mut o = Rows::of(name, &call.tensors[2]);
    assert_same_layout(name, &a, &o);
    assert_same_layout(name, &b, &o);
    if a.dense() && b.dense() && o.dense() {
        (a, b, o) = (a.flat(), b.flat(), o.flat());
    }
    for i in 0..o.rows {
        // safety: check() accepted the three tensors (same shape, row-addressable f32
        // views) and the engine validated them against live buffers, so row i < rows
        // holds `cols` in-bounds elements in each. Raw pointers only: they may alias.
        unsafe {
            let (pa, pb, po) = (a.row(i), b.row(i), o.row(i));
            for j in 0..o.cols {
                *po.add(j) = f(*pa.add(j), *pb.add(j));
            }
        }
    }
}

const COPY_SIG: Sig = Sig::unary(CopyKernel::NAME);

/// `copy`: `out = x`.
///
/// Tensors: 0 `x` (input), 1 `out` (output, same shape as `x`). Scalars: none. Core: any.
pub struct CopyKernel;

impl Kernel for CopyKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&COPY_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        let mut x = Rows::of(Self::NAME, &call.tensors[0]);
        let mut o = Rows::of(Self::NAME, &call.tensors[1]);
        assert_same_layout(Self::NAME, &x, &o);
        if x.dense() && o.dense() {
            (x, o) = (x.flat(), o.flat());
        }
        for i in 0..x.rows {
            // safety: check() accepted x and out with the same shape as row-addressable
            // f32 views validated against live buffers: row i < rows holds `cols`
            // in-bounds elements in both. `ptr::copy` tolerates overlap.
            unsafe { std::ptr::copy(x.row(i), o.row(i), x.cols) }
        }
    }
}

const FILL_SIG: Sig = Sig {
    name: FillKernel::NAME,
    inputs: &[],
    outputs: &["out"],
    scalars: &["value"],
};

/// `fill(value)`: every element of `out` becomes `value`.
///
/// Tensors: 0 `out` (output). Scalars: 0 = `value` (`f64` bits, rounded to `f32`).
/// Core: any.
pub struct FillKernel;

impl Kernel for FillKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        FILL_SIG.check(tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        let v = call.scalar_f32(0);
        let mut o = Rows::of(Self::NAME, &call.tensors[0]);
        if o.dense() {
            o = o.flat();
        }
        for i in 0..o.rows {
            // safety: check() accepted out as a row-addressable f32 view, validated
            // against a live buffer: row i < rows holds `cols` in-bounds elements.
            unsafe {
                let p = o.row(i);
                for j in 0..o.cols {
                    *p.add(j) = v;
                }
            }
        }
    }
}

const ADD_SIG: Sig = Sig::binary(AddKernel::NAME);
const SUB_SIG: Sig = Sig::binary(SubKernel::NAME);
const MUL_SIG: Sig = Sig::binary(MulKernel::NAME);

/// `add`: `out = a + b` elementwise.
///
/// Tensors: 0 `a`, 1 `b` (inputs), 2 `out` (output); all the same shape. Scalars: none.
/// Core: any.
pub struct AddKernel;

impl Kernel for AddKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&ADD_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        map2(Self::NAME, call, |a, b| a + b)
    }
}

/// `sub`: `out = a - b` elementwise.
///
/// Tensors: 0 `a`, 1 `b` (inputs), 2 `out` (output); all the same shape. Scalars: none.
/// Core: any.
pub struct SubKernel;

impl Kernel for SubKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&SUB_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        map2(Self::NAME, call, |a, b| a - b)
    }
}

/// `mul`: `out = a * b` elementwise.
///
/// Tensors: 0 `a`, 1 `b` (inputs), 2 `out` (output); all the same shape. Scalars: none.
/// Core: any.
pub struct MulKernel;

impl Kernel for MulKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&MUL_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        map2(Self::NAME, call, |a, b| a * b)
    }
}

const SCALE_SIG: Sig = Sig::unary(ScaleKernel::NAME).with_scalars(&["alpha"]);

/// `scale(alpha)`: `out = alpha * x`.
///
/// Tensors: 0 `x` (input), 1 `out` (output, same shape as `x`).
/// Scalars: 0 = `alpha` (`f64` bits, rounded to `f32`). Core: any.
pub struct ScaleKernel;

impl Kernel for ScaleKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&SCALE_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        let alpha = call.scalar_f32(0);
        map1(Self::NAME, call, |x| alpha * x)
    }
}

const EXP_SIG: Sig = Sig::unary(ExpKernel::NAME);

/// `exp`: `out = e^x` elementwise.
///
/// Tensors: 0 `x` (input), 1 `out` (output, same shape as `x`). Scalars: none. Core: any.
pub struct ExpKernel;

impl Kernel for ExpKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&EXP_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        map1(Self::NAME, call, f32::exp)
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::builtin::testing::{close, data, exec, f, t};
    use crate::kernel::builtin::*;

    #[test]
    fn copy_contiguous_and_strided() {
        let mut x = data(12, 2);
        let mut o = vec![0.0; 12];
        exec(COPY, &[t(&mut x, &[3, 4]), t(&mut o, &[3, 4])], 1, &[]);
        assert_eq!(o, x);

        // Copy column block [:, 2..5] of a 4x8 matrix into column block [:, 1..4] of 4x6.
        let mut src = data(32, 3);
        let mut dst = vec![-7.0; 24];
        let vs = t(&mut src, &[4, 8])
            .view(&[4, 3], 2, Some(&[8, 1]))
            .unwrap();
        let vd = t(&mut dst, &[4, 6])
            .view(&[4, 3], 1, Some(&[6, 1]))
            .unwrap();
        exec(COPY, &[vs, vd], 1, &[]);
        for r in 0..4 {
            for c in 0..6 {
                let want = if (1..4).contains(&c) {
                    src[r * 8 + c + 1]
                } else {
                    -7.0
                };
                assert_eq!(dst[r * 6 + c], want, "({r}, {c})");
            }
        }
    }

    #[test]
    fn fill_whole_and_rows() {
        let mut o = vec![0.0; 20];
        exec(FILL, &[t(&mut o, &[4, 5])], 0, &[f(2.5)]);
        assert!(o.iter().all(|&v| v == 2.5));
        // Fill rows 1..3 only.
        let mut o = vec![0.0; 20];
        let rows = t(&mut o, &[4, 5]).rows_slice(1, 3).unwrap();
        exec(FILL, &[rows], 0, &[f(-1.0)]);
        for (i, &v) in o.iter().enumerate() {
            assert_eq!(v, if (5..15).contains(&i) { -1.0 } else { 0.0 });
        }
    }

    #[test]
    fn add_sub_mul_contiguous() {
        let (mut a, mut b) = (data(24, 4), data(24, 5));
        for (k, op) in [(ADD, 0), (SUB, 1), (MUL, 2)] {
            let mut o = vec![0.0; 24];
            exec(
                k,
                &[
                    t(&mut a, &[2, 3, 4]),
                    t(&mut b, &[2, 3, 4]),
                    t(&mut o, &[2, 3, 4]),
                ],
                2,
                &[],
            );
            let want: Vec<f32> = a
                .iter()
                .zip(&b)
                .map(|(x, y)| match op {
                    0 => x + y,
                    1 => x - y,
                    _ => x * y,
                })
                .collect();
            assert_eq!(o, want, "{}", k.name());
        }
    }

    #[test]
    fn add_strided_views() {
        // a = column block [:, 1..4] of 5x6, b = rows 2..7 of 8x3, out = column block
        // [:, 4..7] of 5x9 (the rest of out must stay untouched).
        let mut wa = data(30, 6);
        let mut wb = data(24, 7);
        let mut wo = vec![9.0; 45];
        let a = t(&mut wa, &[5, 6]).view(&[5, 3], 1, Some(&[6, 1])).unwrap();
        let b = t(&mut wb, &[8, 3]).rows_slice(2, 7).unwrap();
        let o = t(&mut wo, &[5, 9]).view(&[5, 3], 4, Some(&[9, 1])).unwrap();
        exec(ADD, &[a, b, o], 2, &[]);
        for r in 0..5 {
            for c in 0..9 {
                let want = if (4..7).contains(&c) {
                    wa[r * 6 + 1 + (c - 4)] + wb[(r + 2) * 3 + (c - 4)]
                } else {
                    9.0
                };
                assert_eq!(wo[r * 9 + c], want, "({r}, {c})");
            }
        }
    }

    #[test]
    fn add_in_place_via_alias() {
        // out is the same buffer as a (raw pointers: defined behaviour).
        let mut a = data(16, 8);
        let mut b = data(16, 9);
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        let ta = t(&mut a, &[4, 4]);
        exec(ADD, &[ta, t(&mut b, &[4, 4]), ta], 2, &[]);
        assert_eq!(a, want);
    }

    #[test]
    fn scale_and_exp() {
        let mut x = data(15, 10);
        let mut o = vec![0.0; 15];
        exec(
            SCALE,
            &[t(&mut x, &[3, 5]), t(&mut o, &[3, 5])],
            1,
            &[f(-1.5)],
        );
        assert_eq!(o, x.iter().map(|v| -1.5 * v).collect::<Vec<_>>());

        exec(EXP, &[t(&mut x, &[15]), t(&mut o, &[15])], 1, &[]);
        close(&o, &x.iter().map(|v| v.exp()).collect::<Vec<_>>(), 1e-6);

        // Strided: exp of column block [:, 1..3] of 3x5 into a dense 3x2.
        let mut o2 = vec![0.0; 6];
        let v = t(&mut x, &[3, 5]).view(&[3, 2], 1, Some(&[5, 1])).unwrap();
        exec(EXP, &[v, t(&mut o2, &[3, 2])], 1, &[]);
        let want: Vec<f32> = (0..3)
            .flat_map(|r| (1..3).map(move |c| (r, c)))
            .map(|(r, c)| x[r * 5 + c].exp())
            .collect();
        close(&o2, &want, 1e-6);
    }
}
