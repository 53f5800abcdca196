//! Builtin `float32` kernels.
//!
//! Every kernel here is a unit struct implementing [`Kernel`], exposed as a `pub static`
//! [`KernelRef`] handle ([`ADD`], [`MATMUL`], ...). [`by_name`] looks a builtin up by the
//! name it reports (`"add"`, `"matmul_acc"`, ...) and [`all`] lists every builtin.
//!
//! Tensor order is the engine's submit order: read-only inputs first (`n_inputs` of
//! them), then inouts, then outputs. Each kernel's doc states its tensors in that order
//! and its scalars. Scalars are `u64` bit patterns: floating-point scalars are `f64` bits
//! (read with [`KernelCall::scalar_f32`]), integer scalars are `i64` bits.
//!
//! [`Kernel::check`] (at submit) validates, in this order: the tensor count, the split
//! into read-only and writable tensors, the scalar count, the dtypes (only `float32`),
//! that every view is row-addressable ([`Tensor::as_rows`] is `Some`) and `f32`-aligned,
//! that no writable view overlaps itself (row stride smaller than the row length), and
//! the shapes. Every error message starts with `kernel '{name}': `.
//!
//! [`Kernel::run`] works on raw row pointers: a view is `(rows, cols, row_stride)` in
//! elements, row `i` starts at `data_ptr + i * row_stride` and holds `cols` dense
//! elements. It relies on two invariants: the engine validated every view
//! ([`Tensor::validate`]: it lies inside its buffer) and keeps the buffers alive while the
//! task runs, and `check` accepted the arguments. As cheap defence in depth, `run`
//! re-derives the row layout and panics (failing the task) rather than touching memory
//! when it does not match. Elementwise kernels access memory through raw pointers only
//! (never `&`/`&mut` slices), so an output that aliases an input (e.g. an in-place
//! `scale`) is well defined. No kernel allocates, except `matmul`/`matmul_acc`, whose
//! `matrixmultiply::sgemm` allocates its packing buffers.

use super::{CoreKind, Kernel, KernelCall, KernelRef};
use crate::tensor::{DType, Tensor};
use std::fmt::Display;

// ---------------------------------------------------------------------------------------
// Handles and lookup
// ---------------------------------------------------------------------------------------

/// `noop` handle; see [`NoopKernel`].
pub static NOOP: KernelRef = KernelRef(&NoopKernel);
/// `busy_wait` handle; see [`BusyWaitKernel`].
pub static BUSY_WAIT: KernelRef = KernelRef(&BusyWaitKernel);
/// `copy` handle; see [`CopyKernel`].
pub static COPY: KernelRef = KernelRef(&CopyKernel);
/// `fill` handle; see [`FillKernel`].
pub static FILL: KernelRef = KernelRef(&FillKernel);
/// `add` handle; see [`AddKernel`].
pub static ADD: KernelRef = KernelRef(&AddKernel);
/// `sub` handle; see [`SubKernel`].
pub static SUB: KernelRef = KernelRef(&SubKernel);
/// `mul` handle; see [`MulKernel`].
pub static MUL: KernelRef = KernelRef(&MulKernel);
/// `scale` handle; see [`ScaleKernel`].
pub static SCALE: KernelRef = KernelRef(&ScaleKernel);
/// `exp` handle; see [`ExpKernel`].
pub static EXP: KernelRef = KernelRef(&ExpKernel);
/// `matmul` handle; see [`MatmulKernel`].
pub static MATMUL: KernelRef = KernelRef(&MatmulKernel);
/// `matmul_acc` handle; see [`MatmulAccKernel`].
pub static MATMUL_ACC: KernelRef = KernelRef(&MatmulAccKernel);
/// `rowmax` handle; see [`RowMaxKernel`].
pub static ROWMAX: KernelRef = KernelRef(&RowMaxKernel);
/// `rowsum` handle; see [`RowSumKernel`].
pub static ROWSUM: KernelRef = KernelRef(&RowSumKernel);
/// `softmax_rows` handle; see [`SoftmaxRowsKernel`].
pub static SOFTMAX_ROWS: KernelRef = KernelRef(&SoftmaxRowsKernel);

static ALL: [KernelRef; 14] = [
    KernelRef(&NoopKernel),
    KernelRef(&BusyWaitKernel),
    KernelRef(&CopyKernel),
    KernelRef(&FillKernel),
    KernelRef(&AddKernel),
    KernelRef(&SubKernel),
    KernelRef(&MulKernel),
    KernelRef(&ScaleKernel),
    KernelRef(&ExpKernel),
    KernelRef(&MatmulKernel),
    KernelRef(&MatmulAccKernel),
    KernelRef(&RowMaxKernel),
    KernelRef(&RowSumKernel),
    KernelRef(&SoftmaxRowsKernel),
];

/// Names of all builtins, in the order of [`all`].
pub const NAMES: [&str; 14] = [
    "noop",
    "busy_wait",
    "copy",
    "fill",
    "add",
    "sub",
    "mul",
    "scale",
    "exp",
    "matmul",
    "matmul_acc",
    "rowmax",
    "rowsum",
    "softmax_rows",
];

/// Every builtin kernel, in the order of [`NAMES`].
pub fn all() -> &'static [KernelRef] {
    &ALL
}

/// The builtin called `name`, if any.
pub fn by_name(name: &str) -> Option<KernelRef> {
    ALL.iter().copied().find(|k| k.name() == name)
}

// ---------------------------------------------------------------------------------------
// Argument checking (submit time)
// ---------------------------------------------------------------------------------------

/// A kernel's argument signature: tensor labels (read-only ones, then writable ones) and
/// scalar labels, used for the count checks and in messages.
struct Sig {
    name: &'static str,
    inputs: &'static [&'static str],
    outputs: &'static [&'static str],
    scalars: &'static [&'static str],
}

fn fail<T>(name: &str, msg: impl Display) -> Result<T, String> {
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
    fn label(&self, i: usize) -> &'static str {
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
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
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

fn check_scalars(name: &str, want: &[&str], got: &[u64]) -> Result<(), String> {
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
fn check_tensor(name: &str, i: usize, label: &str, t: &Tensor, writable: bool) -> Result<(), String> {
    if t.dtype != DType::F32 {
        return fail(name, format!("tensor {i} has dtype {}, expected float32", t.dtype));
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
fn check_same_shape(sig: &Sig, tensors: &[Tensor]) -> Result<(), String> {
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
fn overlaps(a: &Tensor, b: &Tensor) -> bool {
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

fn check_elementwise(sig: &Sig, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
    sig.check(tensors, n_inputs, scalars)?;
    check_same_shape(sig, tensors)
}

fn check_matmul(sig: &Sig, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
    sig.check(tensors, n_inputs, scalars)?;
    let (a, b, c) = (&tensors[0], &tensors[1], &tensors[2]);
    for (i, t) in tensors.iter().enumerate() {
        if t.ndims != 2 {
            return fail(
                sig.name,
                format!("{} must be 2-D, got shape {:?} (tensor {i})", sig.label(i), t.shape()),
            );
        }
    }
    if a.shape[1] != b.shape[0] {
        return fail(
            sig.name,
            format!("inner dimensions differ: a is {:?}, b is {:?}", a.shape(), b.shape()),
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

fn check_row_reduce(sig: &Sig, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
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

// ---------------------------------------------------------------------------------------
// Row access (run time)
// ---------------------------------------------------------------------------------------

/// A view as raw rows: row `i` is `cols` dense elements at `ptr + i * stride`.
#[derive(Clone, Copy)]
struct Rows {
    ptr: *mut f32,
    rows: usize,
    cols: usize,
    stride: usize,
}

impl Rows {
    /// Re-derive the row layout of a tensor `check` accepted; panics (failing the task)
    /// instead of touching memory if it is not an aligned row-addressable f32 view.
    #[inline]
    fn of(name: &str, t: &Tensor) -> Rows {
        assert!(
            t.dtype == DType::F32,
            "kernel '{name}': tensor has dtype {}, expected float32",
            t.dtype
        );
        debug_assert!(t.validate().is_ok(), "kernel '{name}': invalid view {t:?}");
        let (rows, cols, stride) = t
            .as_rows()
            .unwrap_or_else(|| panic!("kernel '{name}': view {t:?} is not row-addressable"));
        let ptr = t.data_ptr() as *mut f32;
        assert!(
            ptr.is_aligned(),
            "kernel '{name}': view {t:?} is not aligned for float32"
        );
        Rows {
            ptr,
            rows,
            cols,
            stride,
        }
    }

    #[inline]
    fn dense(&self) -> bool {
        self.rows <= 1 || self.stride == self.cols
    }

    /// The same elements as one long row (only valid when [`Rows::dense`]).
    #[inline]
    fn flat(self) -> Rows {
        let n = self.rows * self.cols;
        Rows {
            ptr: self.ptr,
            rows: 1,
            cols: n,
            stride: n,
        }
    }

    /// Pointer to row `i`.
    ///
    /// # Safety
    /// `i < self.rows` and the view was validated against a live buffer.
    #[inline]
    unsafe fn row(&self, i: usize) -> *mut f32 {
        self.ptr.add(i * self.stride)
    }
}

fn assert_same_layout(name: &str, a: &Rows, b: &Rows) {
    assert!(
        a.rows == b.rows && a.cols == b.cols,
        "kernel '{name}': row layouts differ ({}x{} vs {}x{})",
        a.rows,
        a.cols,
        b.rows,
        b.cols
    );
}

/// `out[i] = f(x[i])` for tensors 0 (read) and 1 (written).
#[inline(always)]
fn map1(name: &str, call: &KernelCall<'_>, f: impl Fn(f32) -> f32) {
    let (mut x, mut o) = (Rows::of(name, &call.tensors[0]), Rows::of(name, &call.tensors[1]));
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

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

/// `noop`: does nothing.
///
/// Tensors: any number, any dtype, any split (none are touched). Scalars: any (ignored).
/// Core: any.
pub struct NoopKernel;

impl Kernel for NoopKernel {
    fn name(&self) -> &str {
        "noop"
    }
    fn check(&self, _tensors: &[Tensor], _n_inputs: usize, _scalars: &[u64]) -> Result<(), String> {
        Ok(())
    }
    fn run(&self, _call: &KernelCall<'_>) {}
}

/// `busy_wait(iterations)`: spins `iterations` rounds of a cheap loop the optimiser cannot
/// remove, to simulate compute time.
///
/// Tensors: any number, any dtype, any split (none are touched).
/// Scalars: 0 = `iterations` (`i64`, must be `>= 0`). Core: any.
pub struct BusyWaitKernel;

impl Kernel for BusyWaitKernel {
    fn name(&self) -> &str {
        "busy_wait"
    }
    fn check(&self, _tensors: &[Tensor], _n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_scalars("busy_wait", &["iterations"], scalars)?;
        let n = scalars[0] as i64;
        if n < 0 {
            return fail("busy_wait", format!("iterations must be >= 0, got {n}"));
        }
        Ok(())
    }
    fn run(&self, call: &KernelCall<'_>) {
        let n = call.scalar_i64(0).max(0) as u64;
        let mut acc = 0u64;
        for i in 0..n {
            acc = std::hint::black_box(acc.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i));
        }
        std::hint::black_box(acc);
    }
}

const COPY_SIG: Sig = Sig {
    name: "copy",
    inputs: &["x"],
    outputs: &["out"],
    scalars: &[],
};

/// `copy`: `out = x`.
///
/// Tensors: 0 `x` (input), 1 `out` (output, same shape as `x`). Scalars: none. Core: any.
pub struct CopyKernel;

impl Kernel for CopyKernel {
    fn name(&self) -> &str {
        "copy"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&COPY_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        let (mut x, mut o) = (Rows::of("copy", &call.tensors[0]), Rows::of("copy", &call.tensors[1]));
        assert_same_layout("copy", &x, &o);
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
    name: "fill",
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
        "fill"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        FILL_SIG.check(tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        let v = call.scalar_f32(0);
        let mut o = Rows::of("fill", &call.tensors[0]);
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

const ADD_SIG: Sig = Sig {
    name: "add",
    inputs: &["a", "b"],
    outputs: &["out"],
    scalars: &[],
};
const SUB_SIG: Sig = Sig {
    name: "sub",
    inputs: &["a", "b"],
    outputs: &["out"],
    scalars: &[],
};
const MUL_SIG: Sig = Sig {
    name: "mul",
    inputs: &["a", "b"],
    outputs: &["out"],
    scalars: &[],
};

/// `add`: `out = a + b` elementwise.
///
/// Tensors: 0 `a`, 1 `b` (inputs), 2 `out` (output); all the same shape. Scalars: none.
/// Core: any.
pub struct AddKernel;

impl Kernel for AddKernel {
    fn name(&self) -> &str {
        "add"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&ADD_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        map2("add", call, |a, b| a + b)
    }
}

/// `sub`: `out = a - b` elementwise.
///
/// Tensors: 0 `a`, 1 `b` (inputs), 2 `out` (output); all the same shape. Scalars: none.
/// Core: any.
pub struct SubKernel;

impl Kernel for SubKernel {
    fn name(&self) -> &str {
        "sub"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&SUB_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        map2("sub", call, |a, b| a - b)
    }
}

/// `mul`: `out = a * b` elementwise.
///
/// Tensors: 0 `a`, 1 `b` (inputs), 2 `out` (output); all the same shape. Scalars: none.
/// Core: any.
pub struct MulKernel;

impl Kernel for MulKernel {
    fn name(&self) -> &str {
        "mul"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&MUL_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        map2("mul", call, |a, b| a * b)
    }
}

const SCALE_SIG: Sig = Sig {
    name: "scale",
    inputs: &["x"],
    outputs: &["out"],
    scalars: &["alpha"],
};

/// `scale(alpha)`: `out = alpha * x`.
///
/// Tensors: 0 `x` (input), 1 `out` (output, same shape as `x`).
/// Scalars: 0 = `alpha` (`f64` bits, rounded to `f32`). Core: any.
pub struct ScaleKernel;

impl Kernel for ScaleKernel {
    fn name(&self) -> &str {
        "scale"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&SCALE_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        let alpha = call.scalar_f32(0);
        map1("scale", call, |x| alpha * x)
    }
}

const EXP_SIG: Sig = Sig {
    name: "exp",
    inputs: &["x"],
    outputs: &["out"],
    scalars: &[],
};

/// `exp`: `out = e^x` elementwise.
///
/// Tensors: 0 `x` (input), 1 `out` (output, same shape as `x`). Scalars: none. Core: any.
pub struct ExpKernel;

impl Kernel for ExpKernel {
    fn name(&self) -> &str {
        "exp"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&EXP_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        map1("exp", call, f32::exp)
    }
}

const MATMUL_SIG: Sig = Sig {
    name: "matmul",
    inputs: &["a", "b"],
    outputs: &["c"],
    scalars: &[],
};
const MATMUL_ACC_SIG: Sig = Sig {
    name: "matmul_acc",
    inputs: &["a", "b"],
    outputs: &["c"],
    scalars: &[],
};

/// `matmul`: `c = a @ b`.
///
/// Tensors: 0 `a` `[M, K]`, 1 `b` `[K, N]` (inputs), 2 `c` `[M, N]` (output; must not
/// overlap `a` or `b`). All 2-D; rows may be strided (e.g. a column block of a wider
/// matrix). Scalars: none. Core: AIC.
pub struct MatmulKernel;

impl Kernel for MatmulKernel {
    fn name(&self) -> &str {
        "matmul"
    }
    fn core(&self) -> CoreKind {
        CoreKind::Aic
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_matmul(&MATMUL_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        gemm("matmul", call, 0.0)
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
        "matmul_acc"
    }
    fn core(&self) -> CoreKind {
        CoreKind::Aic
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_matmul(&MATMUL_ACC_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        gemm("matmul_acc", call, 1.0)
    }
}

const ROWMAX_SIG: Sig = Sig {
    name: "rowmax",
    inputs: &["x"],
    outputs: &["out"],
    scalars: &[],
};
const ROWSUM_SIG: Sig = Sig {
    name: "rowsum",
    inputs: &["x"],
    outputs: &["out"],
    scalars: &[],
};

/// `rowmax`: `out[i] = max_j x[i, j]`.
///
/// Tensors: 0 `x` `[M, N]` (input; a 1-D `[N]` is one row), 1 `out` `[M]` or `[M, 1]`
/// (output; `[M, 1]` may be a strided column). Scalars: none. Core: any.
/// NaNs are skipped (`f32::max`) unless a whole row is NaN.
pub struct RowMaxKernel;

impl Kernel for RowMaxKernel {
    fn name(&self) -> &str {
        "rowmax"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_row_reduce(&ROWMAX_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        // safety (closure): row_reduce passes a row pointer with `n` in-bounds elements.
        row_reduce("rowmax", call, |p, n| unsafe { row_max(p, n) })
    }
}

/// `rowsum`: `out[i] = sum_j x[i, j]` (accumulated in `f64`).
///
/// Tensors: 0 `x` `[M, N]` (input; a 1-D `[N]` is one row), 1 `out` `[M]` or `[M, 1]`
/// (output; `[M, 1]` may be a strided column). Scalars: none. Core: any.
pub struct RowSumKernel;

impl Kernel for RowSumKernel {
    fn name(&self) -> &str {
        "rowsum"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_row_reduce(&ROWSUM_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        // safety (closure): row_reduce passes a row pointer with `n` in-bounds elements.
        row_reduce("rowsum", call, |p, n| unsafe { row_sum(p, n) as f32 })
    }
}

/// Max of `n >= 1` elements at `p`.
///
/// # Safety
/// `p..p+n` is readable.
#[inline]
unsafe fn row_max(p: *const f32, n: usize) -> f32 {
    let mut m = f32::NEG_INFINITY;
    let mut all_nan = n > 0;
    for j in 0..n {
        let v = *p.add(j);
        all_nan &= v.is_nan();
        m = m.max(v);
    }
    if all_nan {
        f32::NAN
    } else {
        m
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

const SOFTMAX_SIG: Sig = Sig {
    name: "softmax_rows",
    inputs: &["x"],
    outputs: &["out"],
    scalars: &[],
};

/// `softmax_rows`: per row, `out[i, j] = exp(x[i, j] - max_i) / sum_j exp(x[i, j] - max_i)`
/// (numerically stable; computed in place in the output row, no allocation).
///
/// Tensors: 0 `x` `[M, N]` (input; a 1-D `[N]` is one row, higher ranks collapse their
/// leading dimensions into rows), 1 `out` (output, same shape as `x`; may be the same
/// view as `x`). Scalars: none. Core: any.
pub struct SoftmaxRowsKernel;

impl Kernel for SoftmaxRowsKernel {
    fn name(&self) -> &str {
        "softmax_rows"
    }
    fn check(&self, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_elementwise(&SOFTMAX_SIG, tensors, n_inputs, scalars)
    }
    fn run(&self, call: &KernelCall<'_>) {
        let x = Rows::of("softmax_rows", &call.tensors[0]);
        let o = Rows::of("softmax_rows", &call.tensors[1]);
        assert_same_layout("softmax_rows", &x, &o);
        for i in 0..x.rows {
            // safety: check() accepted x and out with the same shape as row-addressable
            // f32 views validated against live buffers: row i < rows holds `cols`
            // in-bounds elements in both. Element j of x is read before element j of out
            // is written, so out == x (in place) is fine; raw pointers only.
            unsafe {
                let (px, po) = (x.row(i), o.row(i));
                let m = row_max(px, x.cols);
                let mut s = 0.0f64;
                for j in 0..x.cols {
                    let e = (*px.add(j) - m).exp();
                    *po.add(j) = e;
                    s += e as f64;
                }
                let inv = (1.0 / s) as f32;
                for j in 0..x.cols {
                    *po.add(j) *= inv;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic test data.
    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1103515245).wrapping_add(12345);
                ((s >> 8) % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn t(v: &mut [f32], shape: &[u32]) -> Tensor {
        let n: usize = shape.iter().map(|&d| d as usize).product();
        assert_eq!(v.len(), n, "buffer size vs shape");
        Tensor::from_raw(v.as_mut_ptr() as u64, shape, DType::F32)
    }

    fn f(x: f64) -> u64 {
        x.to_bits()
    }

    /// check() then run(), like the engine.
    fn exec(k: KernelRef, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) {
        k.0.check(tensors, n_inputs, scalars)
            .unwrap_or_else(|e| panic!("check failed: {e}"));
        k.0.run(&KernelCall {
            tensors,
            scalars,
            n_inputs,
            scalar_float_mask: u16::MAX,
        });
    }

    fn err(k: KernelRef, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> String {
        let e = k.0.check(tensors, n_inputs, scalars).expect_err("check should fail");
        assert!(e.starts_with(&format!("kernel '{}': ", k.name())), "bad prefix: {e}");
        e
    }

    fn close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "element {i}: got {g}, want {w}");
        }
    }

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
    fn lookup_names_and_cores() {
        assert_eq!(all().len(), NAMES.len());
        for (k, name) in all().iter().zip(NAMES) {
            assert_eq!(k.name(), name);
            assert_eq!(by_name(name).unwrap().name(), name);
            let want = if name.starts_with("matmul") {
                CoreKind::Aic
            } else {
                CoreKind::Any
            };
            assert_eq!(k.core(), want, "{name}");
        }
        let handles = [
            NOOP,
            BUSY_WAIT,
            COPY,
            FILL,
            ADD,
            SUB,
            MUL,
            SCALE,
            EXP,
            MATMUL,
            MATMUL_ACC,
            ROWMAX,
            ROWSUM,
            SOFTMAX_ROWS,
        ];
        for (h, name) in handles.iter().zip(NAMES) {
            assert_eq!(h.name(), name);
        }
        assert!(by_name("nope").is_none());
        assert_eq!(format!("{:?}", ADD), "kernel 'add'");
    }

    #[test]
    fn noop_accepts_anything() {
        let mut v = vec![0i32; 4];
        let ti = Tensor::from_raw(v.as_mut_ptr() as u64, &[4], DType::I32);
        exec(NOOP, &[], 0, &[]);
        exec(NOOP, &[ti, ti], 1, &[1, 2, 3]);
        assert_eq!(v, [0; 4]);
    }

    #[test]
    fn busy_wait_runs_and_checks() {
        let mut v = data(4, 1);
        let before = v.clone();
        let tv = t(&mut v, &[4]);
        exec(BUSY_WAIT, &[tv], 1, &[1000i64 as u64]);
        exec(BUSY_WAIT, &[], 0, &[0]);
        assert_eq!(v, before);
        assert_eq!(
            err(BUSY_WAIT, &[], 0, &[]),
            "kernel 'busy_wait': needs 1 scalar (iterations), got 0"
        );
        assert_eq!(
            err(BUSY_WAIT, &[], 0, &[(-5i64) as u64]),
            "kernel 'busy_wait': iterations must be >= 0, got -5"
        );
    }

    #[test]
    fn copy_contiguous_and_strided() {
        let mut x = data(12, 2);
        let mut o = vec![0.0; 12];
        exec(COPY, &[t(&mut x, &[3, 4]), t(&mut o, &[3, 4])], 1, &[]);
        assert_eq!(o, x);

        // Copy column block [:, 2..5] of a 4x8 matrix into column block [:, 1..4] of 4x6.
        let mut src = data(32, 3);
        let mut dst = vec![-7.0; 24];
        let vs = t(&mut src, &[4, 8]).view(&[4, 3], 2, Some(&[8, 1])).unwrap();
        let vd = t(&mut dst, &[4, 6]).view(&[4, 3], 1, Some(&[6, 1])).unwrap();
        exec(COPY, &[vs, vd], 1, &[]);
        for r in 0..4 {
            for c in 0..6 {
                let want = if (1..4).contains(&c) { src[r * 8 + c + 1] } else { -7.0 };
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
                &[t(&mut a, &[2, 3, 4]), t(&mut b, &[2, 3, 4]), t(&mut o, &[2, 3, 4])],
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
        exec(SCALE, &[t(&mut x, &[3, 5]), t(&mut o, &[3, 5])], 1, &[f(-1.5)]);
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
        let a = t(&mut wa, &[6, 10]).view(&[6, 4], 2, Some(&[10, 1])).unwrap();
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
                    assert!((got - w).abs() <= 1e-5 * (1.0 + w.abs()), "({r}, {col}): {got} vs {w}");
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
        assert_eq!(o, (0..3).map(|r| x[r * 4 + 1].max(x[r * 4 + 2])).collect::<Vec<_>>());
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
        let want: Vec<f32> = (0..4).flat_map(|r| reference(&x[r * 5..r * 5 + 5])).collect();
        let mut o = vec![0.0; 20];
        exec(SOFTMAX_ROWS, &[t(&mut x, &[4, 5]), t(&mut o, &[4, 5])], 1, &[]);
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
                &[t(&mut a, &[4, 8]), t(&mut b, &[16, 2]), t(&mut o[..8], &[4, 2])],
                2,
                &[]
            ),
            "kernel 'matmul': inner dimensions differ: a is [4, 8], b is [16, 2]"
        );
        assert_eq!(
            err(
                MATMUL,
                &[t(&mut a, &[4, 8]), t(&mut b, &[8, 4]), t(&mut o[..9], &[3, 3])],
                2,
                &[]
            ),
            "kernel 'matmul': c is [3, 3], expected [4, 4] (a is [4, 8], b is [8, 4])"
        );
        assert_eq!(
            err(
                MATMUL,
                &[t(&mut a, &[32]), t(&mut b, &[32, 1]), t(&mut o[..1], &[1, 1])],
                2,
                &[]
            ),
            "kernel 'matmul': a must be 2-D, got shape [32] (tensor 0)"
        );
        assert_eq!(
            err(
                ADD,
                &[t(&mut a, &[4, 8]), t(&mut b, &[8, 4]), t(&mut o[..32], &[4, 8])],
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
            err(ROWMAX, &[t(&mut a, &[2, 2, 8]), t(&mut o[..4], &[4])], 1, &[]),
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
        assert_eq!(err(FILL, &[to], 0, &[]), "kernel 'fill': needs 1 scalar (value), got 0");
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
        let bad3 = t(&mut w, &[4, 8]).view(&[2, 2, 2], 0, Some(&[3, 8, 1])).unwrap();
        assert!(err(COPY, &[bad3, t(&mut o[..8], &[2, 2, 2])], 1, &[]).contains("tensor 0 (x) with shape [2, 2, 2]"));
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
        MATMUL.0.check(&[a, t(&mut bb, &[4, 4]), c_ok], 2, &[]).unwrap();
        let c_ok = t(&mut big, &[8, 4]).rows_slice(4, 8).unwrap();
        let a_ok = t(&mut big, &[8, 4]).rows_slice(0, 4).unwrap();
        MATMUL.0.check(&[a_ok, t(&mut bb, &[4, 4]), c_ok], 2, &[]).unwrap();
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

    #[test]
    fn run_panics_instead_of_reading_bad_layout() {
        // run() without check(): mismatched shapes panic rather than read out of bounds.
        let (mut a, mut o) = (data(8, 28), vec![0.0; 4]);
        let ts = [t(&mut a, &[8]), t(&mut o, &[4])];
        let r = std::panic::catch_unwind(|| {
            COPY.0.run(&KernelCall {
                tensors: &ts,
                scalars: &[],
                n_inputs: 1,
                scalar_float_mask: 0,
            })
        });
        assert!(r.is_err());
    }
}
