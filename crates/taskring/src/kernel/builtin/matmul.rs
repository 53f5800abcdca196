//! Matrix products: `matmul` (`c = a @ b`) and `matmul_acc` (`c += a @ b`), through
//! `matrixmultiply::sgemm` on strided rows (small products by a register-blocked loop of
//! our own). Core: AIC.

use super::check::{fail, overlaps, Sig};
use super::rows::Rows;
use crate::kernel::{CoreKind, Kernel, KernelCall};
use crate::tensor::Tensor;

fn check_matmul(
    sig: &Sig,
    tensors: &[Tensor],
    n_inputs: usize,
    scalars: &[u64],
) -> Result<(), String> {
    sig.check(tensors, n_inputs, scalars)?;
    let (a, b, c) = (&tensors[0], &tensors[1], &tensors[2]);
    for (i, t) in tensors.iter().enumerate() {
        if t.ndims != 2 {
            return fail(
                sig.name,
                format!(
                    "{} must be 2-D, got shape {:?} (tensor {i})",
                    sig.label(i),
                    t.shape()
                ),
            );
        }
    }
    if a.shape[1] != b.shape[0] {
        return fail(
            sig.name,
            format!(
                "inner dimensions differ: a is {:?}, b is {:?}",
                a.shape(),
                b.shape()
            ),
        );
    }
    let want = [a.shape[0], b.shape[1]];
    if c.shape() != want {
        return fail(
            sig.name,
            format!(
                "c is {:?}, expected {:?} (a is {:?}, b is {:?})",
                c.shape(),
                want,
                a.shape(),
                b.shape()
            ),
        );
    }
    for (i, t) in [(0, a), (1, b)] {
        if overlaps(c, t) {
            return fail(
                sig.name,
                format!(
                    "c (tensor 2) overlaps {} (tensor {i}); the output must not alias an input",
                    sig.label(i)
                ),
            );
        }
    }
    Ok(())
}

/// Products of at most this many multiply-adds (`M·K·N`, e.g. 16×16×16) skip `sgemm`:
/// its packing buffers (allocated per call) and blocking cost more than the product
/// itself at these sizes: on the 2-core box `[4,16]@[16,8]` (a decode step's QK) took
/// 474 ns through sgemm and 97 ns here, `[8,64]@[64,8]` 766 against 236, `16³` the same.
const SMALL_PRODUCT: usize = 4096;

/// `c = a @ b + beta * c` (`beta` 0: `c` is not read) by rows: `c[i] += a[i][p] * b[p]`
/// over `p`, the inner loop over a dense row of `b` and of `c` (vectorised; with AVX2
/// and fused multiply-adds where the CPU has them, as `sgemm` does).
///
/// # Safety
/// As `gemm`'s call of `sgemm`: `a` is `m×k`, `b` `k×n`, `c` `m×n`, valid f32 rows, `c`
/// overlapping neither.
unsafe fn small_gemm(a: &Rows, b: &Rows, c: &Rows, m: usize, k: usize, n: usize, beta: f32) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        return small_gemm_avx2(a, b, c, m, k, n, beta);
    }
    small_gemm_rows::<false>(a, b, c, m, k, n, beta)
}

/// [`small_gemm_rows`] compiled for AVX2 with fused multiply-adds.
///
/// # Safety
/// As [`small_gemm`], on a CPU with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn small_gemm_avx2(a: &Rows, b: &Rows, c: &Rows, m: usize, k: usize, n: usize, beta: f32) {
    small_gemm_rows::<true>(a, b, c, m, k, n, beta)
}

/// The loops of [`small_gemm`]: blocks of up to 4 rows × 8 columns of `c` kept in
/// registers while `p` runs over `k` (four independent multiply-add chains of one
/// 8-wide vector each), then combined with `beta * c` and stored. `FMA`: multiply-adds
/// fused (only where the target has them: elsewhere `mul_add` is a library call).
///
/// # Safety
/// As [`small_gemm`].
#[inline(always)]
unsafe fn small_gemm_rows<const FMA: bool>(
    a: &Rows,
    b: &Rows,
    c: &Rows,
    m: usize,
    k: usize,
    n: usize,
    beta: f32,
) {
    const R: usize = 4;
    const W: usize = 8;
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(R);
        let mut j = 0;
        while j < n {
            let w = (n - j).min(W);
            let mut acc = [[0f32; W]; R];
            for p in 0..k {
                let bp = b.ptr.add(p * b.stride + j);
                let mut bv = [0f32; W];
                if w == W {
                    bv = std::ptr::read_unaligned(bp as *const [f32; W]);
                } else {
                    for (q, x) in bv.iter_mut().enumerate().take(w) {
                        *x = *bp.add(q);
                    }
                }
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    let arp = if r < rows {
                        *a.ptr.add((i + r) * a.stride + p)
                    } else {
                        0.0
                    };
                    for (x, &y) in acc_r.iter_mut().zip(&bv) {
                        *x = if FMA {
                            arp.mul_add(y, *x)
                        } else {
                            *x + arp * y
                        };
                    }
                }
            }
            for (r, acc_r) in acc.iter().enumerate().take(rows) {
                let cr = c.ptr.add((i + r) * c.stride + j);
                for (q, &v) in acc_r.iter().enumerate().take(w) {
                    let dst = cr.add(q);
                    *dst = if beta == 0.0 { v } else { v + beta * *dst };
                }
            }
            j += W;
        }
        i += R;
    }
}

/// `c = a @ b + beta * c` with `sgemm` (tensors 0, 1 read, 2 written).
fn gemm(name: &str, call: &KernelCall<'_>, beta: f32) {
    let a = Rows::of(name, &call.tensors[0]);
    let b = Rows::of(name, &call.tensors[1]);
    let c = Rows::of(name, &call.tensors[2]);
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(
        b.rows == k && c.rows == m && c.cols == n,
        "kernel '{name}': shapes do not chain: a {m}x{k}, b {}x{n}, c {}x{}",
        b.rows,
        c.rows,
        c.cols
    );
    if m * k * n <= SMALL_PRODUCT {
        // safety: as for sgemm below.
        unsafe { small_gemm(&a, &b, &c, m, k, n, beta) };
        return;
    }
    // safety: check() accepted a [M,K], b [K,N], c [M,N] as 2-D row-addressable f32
    // views, c's rows do not overlap each other nor a or b, and the engine validated all
    // three against live buffers; sgemm reads/writes exactly rows < M/K and cols < K/N
    // with the given row strides and unit column strides.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.ptr,
            a.stride as isize,
            1,
            b.ptr,
            b.stride as isize,
            1,
            beta,
            c.ptr,
            c.stride as isize,
            1,
        );
    }
}

/// `a [M, K]` and `b [K, N]` read, `c [M, N]` written, no scalars.
const fn gemm_sig(name: &'static str) -> Sig {
    Sig {
        name,
        inputs: &["a", "b"],
        outputs: &["c"],
        scalars: &[],
    }
}

const MATMUL_SIG: Sig = gemm_sig(MatmulKernel::NAME);
const MATMUL_ACC_SIG: Sig = gemm_sig(MatmulAccKernel::NAME);

/// `matmul`: `c = a @ b`.
///
/// Tensors: 0 `a` `[M, K]`, 1 `b` `[K, N]` (inputs), 2 `c` `[M, N]` (output; must not
/// overlap `a` or `b`). All 2-D; rows may be strided (e.g. a column block of a wider
/// matrix). Scalars: none. Core: AIC.
pub struct MatmulKernel;

impl Kernel for MatmulKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn core(&self) -> CoreKind {
        CoreKind::Aic
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_matmul(&MATMUL_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        gemm(Self::NAME, call, 0.0)
    }
}

/// `matmul_acc`: `c += a @ b`.
///
/// Tensors: 0 `a` `[M, K]`, 1 `b` `[K, N]` (inputs), 2 `c` `[M, N]` (writable: inout or
/// output; its current contents are accumulated into; must not overlap `a` or `b`). All
/// 2-D; rows may be strided. `n_inputs` must be 2. Scalars: none. Core: AIC.
pub struct MatmulAccKernel;

impl Kernel for MatmulAccKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn core(&self) -> CoreKind {
        CoreKind::Aic
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_matmul(&MATMUL_ACC_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        gemm(Self::NAME, call, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Rows;
    use crate::kernel::builtin::testing::{close, data, exec, t};
    use crate::kernel::builtin::{MATMUL, MATMUL_ACC};

    fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    s += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }

    #[test]
    fn matmul_contiguous() {
        let (m, k, n) = (7, 5, 3);
        let (mut a, mut b) = (data(m * k, 11), data(k * n, 12));
        let mut c = vec![f32::NAN; m * n]; // beta = 0: old contents ignored
        exec(
            MATMUL,
            &[
                t(&mut a, &[m as u32, k as u32]),
                t(&mut b, &[k as u32, n as u32]),
                t(&mut c, &[m as u32, n as u32]),
            ],
            2,
            &[],
        );
        close(&c, &matmul_ref(&a, &b, m, k, n), 1e-5);
    }

    #[test]
    fn matmul_strided_views() {
        // a = column block [:, 2..6] of a 6x10 matrix (M=6, K=4), b = rows 1..5 of 8x3
        // (K=4, N=3), c = column block [:, 1..4] of 6x5.
        let (m, k, n) = (6, 4, 3);
        let mut wa = data(60, 13);
        let mut wb = data(24, 14);
        let mut wc = vec![5.0; 30];
        let a = t(&mut wa, &[6, 10])
            .view(&[6, 4], 2, Some(&[10, 1]))
            .unwrap();
        let b = t(&mut wb, &[8, 3]).rows_slice(1, 5).unwrap();
        let c = t(&mut wc, &[6, 5]).view(&[6, 3], 1, Some(&[5, 1])).unwrap();
        exec(MATMUL, &[a, b, c], 2, &[]);
        let da: Vec<f32> = (0..m)
            .flat_map(|r| (0..k).map(move |p| (r, p)))
            .map(|(r, p)| wa[r * 10 + 2 + p])
            .collect();
        let db: Vec<f32> = wb[3..3 + k * n].to_vec();
        let want = matmul_ref(&da, &db, m, k, n);
        for r in 0..6 {
            for col in 0..5 {
                let got = wc[r * 5 + col];
                if (1..4).contains(&col) {
                    let w = want[r * n + col - 1];
                    assert!(
                        (got - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "({r}, {col}): {got} vs {w}"
                    );
                } else {
                    assert_eq!(got, 5.0, "({r}, {col}) must be untouched");
                }
            }
        }
    }

    #[test]
    fn matmul_acc_accumulates() {
        let (m, k, n) = (4, 6, 5);
        let (mut a, mut b) = (data(m * k, 15), data(k * n, 16));
        let c0 = data(m * n, 17);
        let mut c = c0.clone();
        let ts = [t(&mut a, &[4, 6]), t(&mut b, &[6, 5]), t(&mut c, &[4, 5])];
        exec(MATMUL_ACC, &ts, 2, &[]);
        exec(MATMUL_ACC, &ts, 2, &[]);
        let p = matmul_ref(&a, &b, m, k, n);
        let want: Vec<f32> = c0.iter().zip(&p).map(|(x, y)| x + 2.0 * y).collect();
        close(&c, &want, 1e-5);
    }

    #[test]
    fn both_paths_agree_with_the_reference_around_the_small_product_bound() {
        // M·K·N = 4096 takes the small path, 4160 and 20·17·15 = 5100 take sgemm; each
        // as matmul (NaN in c ignored) and as matmul_acc (c accumulated).
        for (m, k, n) in [
            (16, 16, 16),
            (16, 16, 1),
            (1, 16, 16),
            (16, 65, 4),
            (20, 17, 15),
        ] {
            let (mut a, mut b) = (data(m * k, 21), data(k * n, 22));
            let shapes = [
                [m as u32, k as u32],
                [k as u32, n as u32],
                [m as u32, n as u32],
            ];
            let mut c = vec![f32::NAN; m * n];
            exec(
                MATMUL,
                &[
                    t(&mut a, &shapes[0]),
                    t(&mut b, &shapes[1]),
                    t(&mut c, &shapes[2]),
                ],
                2,
                &[],
            );
            let p = matmul_ref(&a, &b, m, k, n);
            close(&c, &p, 1e-5);
            exec(
                MATMUL_ACC,
                &[
                    t(&mut a, &shapes[0]),
                    t(&mut b, &shapes[1]),
                    t(&mut c, &shapes[2]),
                ],
                2,
                &[],
            );
            let twice: Vec<f32> = p.iter().map(|x| 2.0 * x).collect();
            close(&c, &twice, 1e-5);
        }
    }

    #[test]
    fn the_unfused_small_loop_matches_the_reference() {
        // The loop CPUs without AVX2/FMA take (this box takes the fused one): ragged
        // blocks (7 rows, 11 columns), beta 0 over NaN, then beta 1.
        let (m, k, n) = (7, 5, 11);
        let (mut a, mut b) = (data(m * k, 23), data(k * n, 24));
        let mut c = vec![f32::NAN; m * n];
        let rows = |v: &mut Vec<f32>, r: usize, cols: usize| Rows {
            ptr: v.as_mut_ptr(),
            rows: r,
            cols,
            stride: cols,
        };
        let (ra, rb, rc) = (rows(&mut a, m, k), rows(&mut b, k, n), rows(&mut c, m, n));
        // safety: three live, disjoint, dense buffers of these shapes.
        unsafe { super::small_gemm_rows::<false>(&ra, &rb, &rc, m, k, n, 0.0) };
        let p = matmul_ref(&a, &b, m, k, n);
        close(&c, &p, 1e-5);
        let rc = rows(&mut c, m, n);
        // safety: as above.
        unsafe { super::small_gemm_rows::<false>(&ra, &rb, &rc, m, k, n, 1.0) };
        let twice: Vec<f32> = p.iter().map(|x| 2.0 * x).collect();
        close(&c, &twice, 1e-5);
    }
}
