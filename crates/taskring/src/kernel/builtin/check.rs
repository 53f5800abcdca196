//! Argument checking at submit time, shared by the families: a kernel's [`Sig`] (tensor
//! and scalar labels) checks counts, scalars, dtypes, row layout, alignment and writable
//! self-overlap ([`Sig::check`]); [`check_elementwise`] adds "every tensor has the shape of
//! tensor 0" and [`overlaps`] tells whether an output aliases an input. Every message
//! starts with `kernel '{name}': `.

use crate::tensor::{DType, Tensor};
use std::fmt::Display;

/// A kernel's argument signature: tensor labels (read-only ones, then writable ones) and
/// scalar labels, used for the count checks and in messages.
pub(super) struct Sig {
    pub(super) name: &'static str,
    pub(super) inputs: &'static [&'static str],
    pub(super) outputs: &'static [&'static str],
    pub(super) scalars: &'static [&'static str],
}

pub(super) fn fail<T>(name: &str, msg: impl Display) -> Result<T, String> {
    Err(format!("kernel '{name}': {msg}"))
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

impl Sig {
    /// `x` read, `out` written, no scalars (`copy`, `exp`, `rowmax`, `softmax_rows`, ...).
    pub(super) const fn unary(name: &'static str) -> Sig {
        Sig {
            name,
            inputs: &["x"],
            outputs: &["out"],
            scalars: &[],
        }
    }

    /// `a` and `b` read, `out` written, no scalars (`add`, `sub`, `mul`).
    pub(super) const fn binary(name: &'static str) -> Sig {
        Sig {
            name,
            inputs: &["a", "b"],
            outputs: &["out"],
            scalars: &[],
        }
    }

    /// The same signature with these scalar labels.
    pub(super) const fn with_scalars(self, scalars: &'static [&'static str]) -> Sig {
        Sig { scalars, ..self }
    }

    pub(super) fn label(&self, i: usize) -> &'static str {
        let ni = self.inputs.len();
        if i < ni {
            self.inputs[i]
        } else {
            self.outputs.get(i - ni).copied().unwrap_or("?")
        }
    }

    fn describe(&self) -> String {
        let ins = if self.inputs.is_empty() {
            "no inputs".to_string()
        } else {
            format!("read-only {}", self.inputs.join(", "))
        };
        format!("{ins}; writable {}", self.outputs.join(", "))
    }

    /// Counts, scalars, dtypes, row layout, alignment and writable self-overlap.
    pub(super) fn check(
        &self,
        tensors: &[Tensor],
        n_inputs: usize,
        scalars: &[u64],
    ) -> Result<(), String> {
        let (ni, no) = (self.inputs.len(), self.outputs.len());
        if tensors.len() != ni + no {
            return fail(
                self.name,
                format!(
                    "expected {} ({}), got {}",
                    plural(ni + no, "tensor"),
                    self.describe(),
                    tensors.len()
                ),
            );
        }
        if n_inputs > tensors.len() {
            return fail(
                self.name,
                format!(
                    "n_inputs is {n_inputs} but only {} were given",
                    plural(tensors.len(), "tensor")
                ),
            );
        }
        if n_inputs != ni {
            return fail(
                self.name,
                format!(
                    "expected {} and {} ({}), got {} read-only and {} writable",
                    plural(ni, "read-only input"),
                    plural(no, "writable tensor"),
                    self.describe(),
                    n_inputs,
                    tensors.len() - n_inputs
                ),
            );
        }
        check_scalars(self.name, self.scalars, scalars)?;
        for (i, t) in tensors.iter().enumerate() {
            check_tensor(self.name, i, self.label(i), t, i >= ni)?;
        }
        Ok(())
    }
}

pub(super) fn check_scalars(name: &str, want: &[&str], got: &[u64]) -> Result<(), String> {
    if got.len() == want.len() {
        return Ok(());
    }
    if want.is_empty() {
        return fail(name, format!("takes no scalars, got {}", got.len()));
    }
    fail(
        name,
        format!(
            "needs {} ({}), got {}",
            plural(want.len(), "scalar"),
            want.join(", "),
            got.len()
        ),
    )
}

/// One tensor: dtype, row-addressable, aligned, and (if writable) rows that do not overlap.
fn check_tensor(
    name: &str,
    i: usize,
    label: &str,
    t: &Tensor,
    writable: bool,
) -> Result<(), String> {
    if t.dtype != DType::F32 {
        return fail(
            name,
            format!("tensor {i} has dtype {}, expected float32", t.dtype),
        );
    }
    let Some((rows, cols, stride)) = t.as_rows() else {
        return fail(
            name,
            format!(
                "tensor {i} ({label}) with shape {:?} and strides {:?} is not row-addressable \
                 (the last dimension must have stride 1 and the leading dimensions must nest)",
                t.shape(),
                t.strides()
            ),
        );
    };
    if !(t.data_ptr() as *const f32).is_aligned() {
        return fail(
            name,
            format!(
                "tensor {i} ({label}) starts at {:#x}, which is not aligned for float32",
                t.data_ptr() as usize
            ),
        );
    }
    if writable && rows > 1 && stride < cols {
        return fail(
            name,
            format!(
                "tensor {i} ({label}) is written but its rows overlap (row stride {stride} < {cols} columns, shape {:?})",
                t.shape()
            ),
        );
    }
    Ok(())
}

/// All tensors of an elementwise kernel have the shape of tensor 0.
pub(super) fn check_same_shape(sig: &Sig, tensors: &[Tensor]) -> Result<(), String> {
    let first = tensors[0].shape();
    for (i, t) in tensors.iter().enumerate().skip(1) {
        if t.shape() != first {
            return fail(
                sig.name,
                format!(
                    "shape mismatch: tensor 0 ({}) is {:?} but tensor {i} ({}) is {:?}",
                    sig.label(0),
                    first,
                    sig.label(i),
                    t.shape()
                ),
            );
        }
    }
    Ok(())
}

/// Whether two row-addressable f32 views share an element. Exact when their row strides
/// agree (or either is a single row), e.g. two column blocks of one matrix; otherwise it
/// conservatively compares the address ranges the views span.
pub(super) fn overlaps(a: &Tensor, b: &Tensor) -> bool {
    let (Some((ra, ca, mut sa)), Some((rb, cb, mut sb))) = (a.as_rows(), b.as_rows()) else {
        return true;
    };
    let esz = std::mem::size_of::<f32>() as i128;
    let (pa, pb) = (a.data_ptr() as usize as i128, b.data_ptr() as usize as i128);
    let (ea, eb) = (pa + a.extent() as i128 * esz, pb + b.extent() as i128 * esz);
    if pa >= eb || pb >= ea {
        return false;
    }
    if ra == 1 {
        sa = sb;
    }
    if rb == 1 {
        sb = sa;
    }
    let d = pb - pa;
    if sa != sb || d % esz != 0 {
        return true;
    }
    // a[i, x] == b[j, y]  <=>  (i - j) * s == d + y - x, with x < ca, y < cb: some row
    // difference k = i - j in [-(rb - 1), ra - 1] must have k * s in [d - ca + 1, d + cb - 1].
    let (s, d) = (sa.max(1) as i128, d / esz);
    let (lo, hi) = (d - (ca as i128 - 1), d + (cb as i128 - 1));
    let kmin = (-((-lo).div_euclid(s))).max(-(rb as i128 - 1));
    let kmax = hi.div_euclid(s).min(ra as i128 - 1);
    kmin <= kmax
}

pub(super) fn check_elementwise(
    sig: &Sig,
    tensors: &[Tensor],
    n_inputs: usize,
    scalars: &[u64],
) -> Result<(), String> {
    sig.check(tensors, n_inputs, scalars)?;
    check_same_shape(sig, tensors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::builtin::testing::{data, err, exec, f, t};
    use crate::kernel::builtin::*;

    #[test]
    fn check_rejects_counts_and_splits() {
        let (mut a, mut b, mut o) = (data(8, 20), data(8, 21), vec![0.0; 8]);
        let (ta, tb, to) = (t(&mut a, &[2, 4]), t(&mut b, &[2, 4]), t(&mut o, &[2, 4]));
        assert_eq!(
            err(ADD, &[ta, to], 1, &[]),
            "kernel 'add': expected 3 tensors (read-only a, b; writable out), got 2"
        );
        assert_eq!(
            err(ADD, &[ta, tb, to], 1, &[]),
            "kernel 'add': expected 2 read-only inputs and 1 writable tensor (read-only a, b; writable out), got 1 read-only and 2 writable"
        );
        assert_eq!(
            err(ADD, &[ta, tb, to], 4, &[]),
            "kernel 'add': n_inputs is 4 but only 3 tensors were given"
        );
        assert_eq!(
            err(FILL, &[ta, to], 1, &[f(1.0)]),
            "kernel 'fill': expected 1 tensor (no inputs; writable out), got 2"
        );
        assert!(err(FILL, &[to], 1, &[f(1.0)]).contains("got 1 read-only and 0 writable"));
        // matmul_acc: c must be writable (n_inputs 3 rejected).
        let mut m = vec![0.0; 16];
        let tm = t(&mut m, &[4, 4]);
        let mut m2 = vec![0.0; 16];
        let tm2 = t(&mut m2, &[4, 4]);
        let mut m3 = vec![0.0; 16];
        let tm3 = t(&mut m3, &[4, 4]);
        assert!(err(MATMUL_ACC, &[tm, tm2, tm3], 3, &[]).contains("got 3 read-only and 0 writable"));
        MATMUL_ACC.0.check(&[tm, tm2, tm3], 2, &[]).unwrap();
    }

    #[test]
    fn check_rejects_dtype() {
        let (mut a, mut o) = (data(8, 22), vec![0.0; 8]);
        let mut bi = vec![0i32; 8];
        let tbi = Tensor::from_raw(bi.as_mut_ptr() as u64, &[2, 4], DType::I32);
        assert_eq!(
            err(ADD, &[t(&mut a, &[2, 4]), tbi, t(&mut o, &[2, 4])], 2, &[]),
            "kernel 'add': tensor 1 has dtype int32, expected float32"
        );
        let th = Tensor::from_raw(o.as_mut_ptr() as u64, &[8], DType::F16);
        assert_eq!(
            err(FILL, &[th], 0, &[f(0.0)]),
            "kernel 'fill': tensor 0 has dtype float16, expected float32"
        );
    }

    #[test]
    fn check_rejects_shapes() {
        let (mut a, mut b, mut o) = (data(32, 23), data(32, 24), vec![0.0; 64]);
        assert_eq!(
            err(
                MATMUL,
                &[
                    t(&mut a, &[4, 8]),
                    t(&mut b, &[16, 2]),
                    t(&mut o[..8], &[4, 2])
                ],
                2,
                &[]
            ),
            "kernel 'matmul': inner dimensions differ: a is [4, 8], b is [16, 2]"
        );
        assert_eq!(
            err(
                MATMUL,
                &[
                    t(&mut a, &[4, 8]),
                    t(&mut b, &[8, 4]),
                    t(&mut o[..9], &[3, 3])
                ],
                2,
                &[]
            ),
            "kernel 'matmul': c is [3, 3], expected [4, 4] (a is [4, 8], b is [8, 4])"
        );
        assert_eq!(
            err(
                MATMUL,
                &[
                    t(&mut a, &[32]),
                    t(&mut b, &[32, 1]),
                    t(&mut o[..1], &[1, 1])
                ],
                2,
                &[]
            ),
            "kernel 'matmul': a must be 2-D, got shape [32] (tensor 0)"
        );
        assert_eq!(
            err(
                ADD,
                &[
                    t(&mut a, &[4, 8]),
                    t(&mut b, &[8, 4]),
                    t(&mut o[..32], &[4, 8])
                ],
                2,
                &[]
            ),
            "kernel 'add': shape mismatch: tensor 0 (a) is [4, 8] but tensor 1 (b) is [8, 4]"
        );
        assert_eq!(
            err(COPY, &[t(&mut a, &[4, 8]), t(&mut o[..32], &[32])], 1, &[]),
            "kernel 'copy': shape mismatch: tensor 0 (x) is [4, 8] but tensor 1 (out) is [32]"
        );
        assert_eq!(
            err(ROWSUM, &[t(&mut a, &[4, 8]), t(&mut o[..8], &[8])], 1, &[]),
            "kernel 'rowsum': output out is [8], expected [4] or [4, 1] (one value per row of x [4, 8])"
        );
        assert_eq!(
            err(
                ROWMAX,
                &[t(&mut a, &[2, 2, 8]), t(&mut o[..4], &[4])],
                1,
                &[]
            ),
            "kernel 'rowmax': input x must be 1-D or 2-D, got shape [2, 2, 8]"
        );
        assert_eq!(
            err(SOFTMAX_ROWS, &[t(&mut a, &[4, 8]), t(&mut o[..32], &[8, 4])], 1, &[]),
            "kernel 'softmax_rows': shape mismatch: tensor 0 (x) is [4, 8] but tensor 1 (out) is [8, 4]"
        );
    }

    #[test]
    fn check_rejects_scalars() {
        let (mut x, mut o) = (data(4, 25), vec![0.0; 4]);
        let (tx, to) = (t(&mut x, &[4]), t(&mut o, &[4]));
        assert_eq!(
            err(SCALE, &[tx, to], 1, &[]),
            "kernel 'scale': needs 1 scalar (alpha), got 0"
        );
        assert_eq!(
            err(FILL, &[to], 0, &[]),
            "kernel 'fill': needs 1 scalar (value), got 0"
        );
        assert_eq!(
            err(EXP, &[tx, to], 1, &[f(1.0)]),
            "kernel 'exp': takes no scalars, got 1"
        );
    }

    #[test]
    fn check_rejects_bad_views() {
        let (mut w, mut o) = (data(32, 26), vec![0.0; 64]);
        // Every other column: last-dim stride 2.
        let strided = t(&mut w, &[4, 8]).view(&[4, 4], 0, Some(&[8, 2])).unwrap();
        assert_eq!(
            err(EXP, &[strided, t(&mut o[..16], &[4, 4])], 1, &[]),
            "kernel 'exp': tensor 0 (x) with shape [4, 4] and strides [8, 2] is not row-addressable \
             (the last dimension must have stride 1 and the leading dimensions must nest)"
        );
        // Leading dims that do not nest.
        let bad3 = t(&mut w, &[4, 8])
            .view(&[2, 2, 2], 0, Some(&[3, 8, 1]))
            .unwrap();
        assert!(err(COPY, &[bad3, t(&mut o[..8], &[2, 2, 2])], 1, &[])
            .contains("tensor 0 (x) with shape [2, 2, 2]"));
        // A written view whose rows overlap.
        let overlapping = t(&mut o, &[64]).view(&[4, 4], 0, Some(&[2, 1])).unwrap();
        assert_eq!(
            err(FILL, &[overlapping], 0, &[f(0.0)]),
            "kernel 'fill': tensor 0 (out) is written but its rows overlap (row stride 2 < 4 columns, shape [4, 4])"
        );
        // ... but reading such a view is fine.
        let mut o2 = vec![0.0; 16];
        exec(COPY, &[overlapping, t(&mut o2, &[4, 4])], 1, &[]);
        // Misaligned start.
        let mis = Tensor {
            addr: o.as_mut_ptr() as u64 + 2,
            buf_bytes: 16,
            ..t(&mut o[..4], &[4])
        };
        assert!(err(FILL, &[mis], 0, &[f(0.0)]).contains("not aligned for float32"));
        // matmul output overlapping an input.
        let mut big = vec![0.0; 32];
        let whole = t(&mut big, &[4, 8]);
        let a = whole.view(&[4, 4], 0, Some(&[8, 1])).unwrap();
        let c = whole.view(&[4, 4], 2, Some(&[8, 1])).unwrap();
        let mut bb = data(16, 27);
        assert_eq!(
            err(MATMUL, &[a, t(&mut bb, &[4, 4]), c], 2, &[]),
            "kernel 'matmul': c (tensor 2) overlaps a (tensor 0); the output must not alias an input"
        );
        // Disjoint column blocks / row blocks of one buffer are fine.
        let c_ok = whole.view(&[4, 4], 4, Some(&[8, 1])).unwrap();
        MATMUL
            .0
            .check(&[a, t(&mut bb, &[4, 4]), c_ok], 2, &[])
            .unwrap();
        let c_ok = t(&mut big, &[8, 4]).rows_slice(4, 8).unwrap();
        let a_ok = t(&mut big, &[8, 4]).rows_slice(0, 4).unwrap();
        MATMUL
            .0
            .check(&[a_ok, t(&mut bb, &[4, 4]), c_ok], 2, &[])
            .unwrap();
    }

    #[test]
    fn overlap_test_matches_brute_force() {
        // Every pair of small 2-D views into one 64-element buffer.
        let base = 0x10000u64;
        let whole = Tensor::from_raw(base, &[64], DType::F32);
        let mut views = Vec::new();
        for rows in 1..4u32 {
            for cols in 1..4u32 {
                for stride in [1u32, 2, 3, 5] {
                    for off in 0..6u64 {
                        if let Ok(v) = whole.view(&[rows, cols], off, Some(&[stride, 1])) {
                            views.push(v);
                        }
                    }
                }
            }
        }
        let elems = |t: &Tensor| -> Vec<u64> {
            let (r, c, s) = t.as_rows().unwrap();
            (0..r)
                .flat_map(|i| (0..c).map(move |j| t.offset + (i * s + j) as u64))
                .collect()
        };
        for a in &views {
            for b in &views {
                let (ea, eb) = (elems(a), elems(b));
                let truth = ea.iter().any(|x| eb.contains(x));
                let got = overlaps(a, b);
                let (sa, sb) = (a.as_rows().unwrap(), b.as_rows().unwrap());
                let exact = sa.2 == sb.2 || sa.0 == 1 || sb.0 == 1;
                if exact {
                    assert_eq!(got, truth, "{a:?} vs {b:?}");
                } else {
                    assert!(got || !truth, "missed overlap: {a:?} vs {b:?}");
                }
            }
        }
    }
}
