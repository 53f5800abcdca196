//! Builtin `float32` kernels, one file per family.
//!
//! | family | file | kernels |
//! |---|---|---|
//! | synthetic (touch no tensor) | `synthetic.rs` | `noop`, `busy_wait` |
//! | elementwise | `elementwise.rs` | `copy`, `fill`, `add`, `sub`, `mul`, `scale`, `exp` |
//! | matrix product | `matmul.rs` | `matmul`, `matmul_acc` |
//! | per-row reductions | `reduce.rs` | `rowmax`, `rowsum`, `softmax_rows` |
//!
//! Every kernel is a unit struct implementing [`Kernel`]. The table below names each
//! builtin once: from its one line come the kernel's `NAME` (what [`Kernel::name`]
//! reports and every error message starts with), its `pub static` [`KernelRef`] handle
//! ([`ADD`], [`MATMUL`], ...), its place in [`all`] and [`NAMES`], and so what
//! [`by_name`] finds and what Python's `taskring.kernels` lists.
//!
//! Tensor order is the engine's submit order: read-only inputs first (`n_inputs` of
//! them), then inouts, then outputs. Each kernel's doc states its tensors in that order
//! and its scalars. Scalars are `u64` bit patterns: floating-point scalars are `f64` bits
//! (read with [`KernelCall::scalar_f32`]), integer scalars are `i64` bits.
//!
//! [`Kernel::check`] (at submit; `check.rs`) validates, in this order: the tensor count,
//! the split into read-only and writable tensors, the scalar count, the dtypes (only
//! `float32`), that every view is row-addressable ([`Tensor::as_rows`] is `Some`) and
//! `f32`-aligned, that no writable view overlaps itself (row stride smaller than the row
//! length), and the shapes. Every error message starts with `kernel '{name}': `.
//!
//! [`Kernel::run`] works on raw row pointers (`rows.rs`): a view is
//! `(rows, cols, row_stride)` in elements, row `i` starts at `data_ptr + i * row_stride`
//! and holds `cols` dense elements. It relies on two invariants: the engine validated
//! every view ([`Tensor::validate`]: it lies inside its buffer) and keeps the buffers
//! alive while the task runs, and `check` accepted the arguments. As cheap defence in
//! depth, `run` re-derives the row layout and panics (failing the task) rather than
//! touching memory when it does not match. Elementwise kernels access memory through raw
//! pointers only (never `&`/`&mut` slices), so an output that aliases an input (e.g. an
//! in-place `scale`) is well defined. No kernel allocates, except `matmul`/`matmul_acc`
//! above 4096 multiply-adds, whose `matrixmultiply::sgemm` allocates its packing buffers
//! (smaller products run a register-blocked loop of ours).
//!
//! [`Kernel`]: super::Kernel
//! [`Kernel::name`]: super::Kernel::name
//! [`Kernel::check`]: super::Kernel::check
//! [`Kernel::run`]: super::Kernel::run
//! [`KernelCall::scalar_f32`]: super::KernelCall::scalar_f32
//! [`Tensor::as_rows`]: crate::tensor::Tensor::as_rows
//! [`Tensor::validate`]: crate::tensor::Tensor::validate

mod check;
mod elementwise;
mod fastmath;
mod matmul;
mod reduce;
mod rows;
mod synthetic;

pub use elementwise::{
    AddKernel, CopyKernel, ExpKernel, FillKernel, MulKernel, ScaleKernel, SubKernel,
};
pub use matmul::{MatmulAccKernel, MatmulKernel};
pub use reduce::{RowMaxKernel, RowSumKernel, SoftmaxRowsKernel};
pub use synthetic::{BusyWaitKernel, NoopKernel};

use super::KernelRef;

/// Declares the builtins from one line each, `HANDLE = Kernel("name")`: the kernel's
/// `NAME`, the `pub static HANDLE`, and the entries of [`all`] and [`NAMES`] (in the
/// order of the lines).
macro_rules! builtins {
    ($($handle:ident = $kernel:ident($name:literal),)*) => {
        $(
            impl $kernel {
                /// The name the kernel reports, as written in the builtin table.
                pub const NAME: &'static str = $name;
            }

            #[doc = concat!("`", $name, "` handle; see [`", stringify!($kernel), "`].")]
            pub static $handle: KernelRef = KernelRef(&$kernel);
        )*

        static ALL: [KernelRef; NAMES.len()] = [$(KernelRef(&$kernel)),*];

        /// Names of all builtins, in the order of [`all`].
        pub const NAMES: [&str; [$($name),*].len()] = [$($name),*];
    };
}

// The builtin table: each builtin's name is written here and nowhere else.
builtins! {
    NOOP = NoopKernel("noop"),
    BUSY_WAIT = BusyWaitKernel("busy_wait"),
    COPY = CopyKernel("copy"),
    FILL = FillKernel("fill"),
    ADD = AddKernel("add"),
    SUB = SubKernel("sub"),
    MUL = MulKernel("mul"),
    SCALE = ScaleKernel("scale"),
    EXP = ExpKernel("exp"),
    MATMUL = MatmulKernel("matmul"),
    MATMUL_ACC = MatmulAccKernel("matmul_acc"),
    ROWMAX = RowMaxKernel("rowmax"),
    ROWSUM = RowSumKernel("rowsum"),
    SOFTMAX_ROWS = SoftmaxRowsKernel("softmax_rows"),
}

/// Every builtin kernel, in the order of [`NAMES`] (the order of the builtin table).
pub fn all() -> &'static [KernelRef] {
    &ALL
}

/// The builtin called `name`, if any.
pub fn by_name(name: &str) -> Option<KernelRef> {
    ALL.iter().copied().find(|k| k.name() == name)
}

/// Helpers shared by the families' unit tests: deterministic data, tensors over `Vec`s,
/// and `check()` then `run()` like the engine.
#[cfg(test)]
mod testing {
    use crate::kernel::{KernelCall, KernelRef};
    use crate::tensor::{DType, Tensor};

    /// Deterministic test data in `[-1, 1)`.
    pub fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1103515245).wrapping_add(12345);
                ((s >> 8) % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// A dense f32 tensor over `v`.
    pub fn t(v: &mut [f32], shape: &[u32]) -> Tensor {
        let n: usize = shape.iter().map(|&d| d as usize).product();
        assert_eq!(v.len(), n, "buffer size vs shape");
        Tensor::from_raw(v.as_mut_ptr() as u64, shape, DType::F32)
    }

    /// A float scalar.
    pub fn f(x: f64) -> u64 {
        x.to_bits()
    }

    /// check() then run(), like the engine.
    pub fn exec(k: KernelRef, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) {
        k.0.check(tensors, n_inputs, scalars)
            .unwrap_or_else(|e| panic!("check failed: {e}"));
        k.0.run(&KernelCall {
            tensors,
            scalars,
            n_inputs,
            scalar_float_mask: u16::MAX,
        });
    }

    /// check() must fail; returns its message (which starts with `kernel '{name}': `).
    pub fn err(k: KernelRef, tensors: &[Tensor], n_inputs: usize, scalars: &[u64]) -> String {
        let e =
            k.0.check(tensors, n_inputs, scalars)
                .expect_err("check should fail");
        assert!(
            e.starts_with(&format!("kernel '{}': ", k.name())),
            "bad prefix: {e}"
        );
        e
    }

    /// Elementwise `|got - want| <= tol * (1 + |want|)`.
    pub fn close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "element {i}: got {g}, want {w}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::CoreKind;

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
        for (h, k) in handles.iter().zip(all()) {
            assert!(
                std::ptr::addr_eq(h.0, k.0),
                "{} is not the table's entry",
                h.name()
            );
        }
        let mut sorted = NAMES.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), NAMES.len(), "duplicate builtin name");
        assert!(by_name("nope").is_none());
        assert_eq!(format!("{:?}", ADD), "kernel 'add'");
        assert_eq!(AddKernel::NAME, "add");
    }
}
