//! Row access at run time: a checked view as raw rows ([`Rows`]), which every family's
//! `run` walks with raw pointers.

use crate::tensor::{DType, Tensor};

/// A view as raw rows: row `i` is `cols` dense elements at `ptr + i * stride`.
#[derive(Clone, Copy)]
pub(super) struct Rows {
    pub(super) ptr: *mut f32,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) stride: usize,
}

impl Rows {
    /// Re-derive the row layout of a tensor `check` accepted; panics (failing the task)
    /// instead of touching memory if it is not an aligned row-addressable f32 view.
    #[inline]
    pub(super) fn of(name: &str, t: &Tensor) -> Rows {
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
    pub(super) fn dense(&self) -> bool {
        self.rows <= 1 || self.stride == self.cols
    }

    /// The same elements as one long row (only valid when [`Rows::dense`]).
    #[inline]
    pub(super) fn flat(self) -> Rows {
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
    pub(super) unsafe fn row(&self, i: usize) -> *mut f32 {
        self.ptr.add(i * self.stride)
    }
}

pub(super) fn assert_same_layout(name: &str, a: &Rows, b: &Rows) {
    assert!(
        a.rows == b.rows && a.cols == b.cols,
        "kernel '{name}': row layouts differ ({}x{} vs {}x{})",
        a.rows,
        a.cols,
        b.rows,
        b.cols
    );
}

#[cfg(test)]
mod tests {
    use crate::kernel::builtin::testing::{data, t};
    use crate::kernel::builtin::COPY;
    use crate::kernel::KernelCall;

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
