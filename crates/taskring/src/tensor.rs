//! Tensor descriptors: what a task argument looks like to the engine and to kernels.
//!
//! A [`Tensor`] is a *view* over a buffer: the buffer's base address and byte size, an
//! element offset, a shape and element strides (up to [`MAX_DIMS`] dimensions), a dtype,
//! the id of the task that created the buffer (for runtime outputs), and a `version`
//! used by the overlap test. It is `Copy` and 96 bytes; it never owns memory.
//!
//! Invariants (checked by [`Tensor::validate`] at submit):
//! - `1 <= ndims <= MAX_DIMS`, every shape entry `>= 1`, every stride `>= 1`;
//! - the view stays inside its buffer: `(offset + extent) * elem_size <= buf_bytes`.
//!
//! Who uses it: the orchestrator (dependency inference, `docs/api.md` §3.1), the
//! tensormap (overlap test), kernels (element access through [`Tensor::data_ptr`] and [`Tensor::as_rows`]).

use std::fmt;

/// Most dimensions a view may have (upstream: 5).
pub const MAX_DIMS: usize = 5;

/// Element types a tensor can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    F32 = 0,
    F16 = 1,
    BF16 = 2,
    I32 = 3,
    I64 = 4,
    I8 = 5,
    U8 = 6,
}

impl DType {
    /// Bytes per element.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I64 => 8,
            DType::I8 | DType::U8 => 1,
        }
    }

    /// Lower-case name as numpy spells it (`bfloat16` for BF16).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::I8 => "int8",
            DType::U8 => "uint8",
        }
    }

    /// All dtypes, in enum order.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::I8,
        DType::U8,
    ];
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A task id: `(ring << 32) | local`. `TaskId::INVALID` is `u64::MAX`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

impl TaskId {
    pub const INVALID: TaskId = TaskId(u64::MAX);

    #[inline]
    pub const fn new(ring: u8, local: u32) -> TaskId {
        TaskId(((ring as u64) << 32) | local as u64)
    }
    #[inline]
    pub const fn ring(self) -> usize {
        (self.0 >> 32) as u8 as usize
    }
    #[inline]
    pub const fn local(self) -> u32 {
        self.0 as u32
    }
    #[inline]
    pub const fn is_valid(self) -> bool {
        self.0 != u64::MAX
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_valid() {
            write!(f, "task(ring={}, local={})", self.ring(), self.local())
        } else {
            f.write_str("task(invalid)")
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A view over a buffer. See the module doc for the invariants.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tensor {
    /// Base address of the underlying buffer (the tensormap key).
    pub addr: u64,
    /// Size of the underlying buffer in bytes.
    pub buf_bytes: u64,
    /// Offset of element `[0, 0, ...]` of this view, in elements from `addr`.
    pub offset: u64,
    /// Task that allocated the buffer (runtime outputs), else `TaskId::INVALID`.
    pub owner: TaskId,
    pub shape: [u32; MAX_DIMS],
    /// Element strides (not bytes); only the first `ndims` are meaningful.
    pub strides: [u32; MAX_DIMS],
    pub ndims: u8,
    pub dtype: DType,
    /// Overlap-test version (a newer version is conservatively overlapping).
    pub version: u8,
    /// Skip tensormap lookup/insert for this tensor (creator edges still apply).
    pub manual_dep: bool,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({} {:?} strides={:?} offset={} addr={:#x}",
            self.dtype,
            self.shape(),
            self.strides(),
            self.offset,
            self.addr
        )?;
        if self.owner.is_valid() {
            write!(f, " owner={}", self.owner)?;
        }
        f.write_str(")")
    }
}

/// Why a tensor view is malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    #[error("tensor must have between 1 and {MAX_DIMS} dimensions, got {0}")]
    Rank(usize),
    #[error("tensor shape entries must be >= 1, got {0:?}")]
    EmptyDim(Vec<u32>),
    #[error("tensor strides must be >= 1, got {0:?}")]
    Stride(Vec<u32>),
    #[error("view {shape:?} at offset {offset} with strides {strides:?} reaches element {end} but the buffer holds {capacity} elements")]
    OutOfBounds {
        shape: Vec<u32>,
        strides: Vec<u32>,
        offset: u64,
        end: u64,
        capacity: u64,
    },
    #[error("row slice {start}..{end} is out of range for {rows} rows")]
    RowSlice { start: u64, end: u64, rows: u64 },
    #[error("shape {0:?} needs a row-major stride beyond 2^32-1 elements (strides are 32-bit)")]
    StrideOverflow(Vec<u32>),
    #[error("tensor data at {addr:#x} is not aligned to its {size}-byte elements")]
    Misaligned { addr: u64, size: u64 },
    #[error("tensor shape {0:?} has more than 2^64 elements")]
    TooManyElements(Vec<u32>),
}

/// Do the row-major strides of `shape` fit 32 bits? (The stride of dimension `i` is the
/// product of the dimensions after it; [`contiguous_strides`] would cap a larger one and
/// the rows would overlap.)
pub(crate) fn contiguous_strides_fit(shape: &[u32]) -> bool {
    let mut acc: u64 = 1;
    for i in (1..shape.len()).rev() {
        acc = acc.saturating_mul(shape[i] as u64);
        if acc > u32::MAX as u64 {
            return false;
        }
    }
    true
}

/// Row-major strides for `shape`.
pub(crate) fn contiguous_strides(shape: &[u32]) -> [u32; MAX_DIMS] {
    let mut strides = [0u32; MAX_DIMS];
    let mut acc: u64 = 1;
    for i in (0..shape.len()).rev() {
        strides[i] = acc.min(u32::MAX as u64) as u32;
        acc = acc.saturating_mul(shape[i] as u64);
    }
    strides
}

impl Tensor {
    /// A contiguous tensor covering a whole buffer at `addr` (owner: none).
    ///
    /// Panics if `shape` has more than `MAX_DIMS` entries; use [`Tensor::validate`] for
    /// user input.
    pub fn from_raw(addr: u64, shape: &[u32], dtype: DType) -> Tensor {
        assert!(shape.len() <= MAX_DIMS, "at most {MAX_DIMS} dims");
        // Every dimension slot, without a `memcpy` call for a few bytes (a submit makes
        // one such tensor per runtime output).
        let s: [u32; MAX_DIMS] = std::array::from_fn(|i| shape.get(i).copied().unwrap_or(1));
        let numel: u64 = shape.iter().map(|&d| d as u64).product();
        Tensor {
            addr,
            buf_bytes: numel * dtype.size_bytes() as u64,
            offset: 0,
            owner: TaskId::INVALID,
            shape: s,
            strides: contiguous_strides(shape),
            ndims: shape.len() as u8,
            dtype,
            version: 0,
            manual_dep: false,
        }
    }

    #[inline]
    pub fn shape(&self) -> &[u32] {
        &self.shape[..self.ndims as usize]
    }
    #[inline]
    pub fn strides(&self) -> &[u32] {
        &self.strides[..self.ndims as usize]
    }
    #[inline]
    pub fn numel(&self) -> u64 {
        self.shape().iter().map(|&d| d as u64).product()
    }
    #[inline]
    pub fn nbytes(&self) -> u64 {
        self.numel() * self.dtype.size_bytes() as u64
    }
    /// True when the view's elements are dense and in row-major order.
    pub fn is_contiguous(&self) -> bool {
        self.strides() == &contiguous_strides(self.shape())[..self.ndims as usize]
    }
    /// Elements spanned by the view: `1 + Σ (shape_i − 1) · stride_i`.
    #[inline]
    pub(crate) fn extent(&self) -> u64 {
        1 + self
            .shape()
            .iter()
            .zip(self.strides())
            .map(|(&d, &s)| (d as u64 - 1) * s as u64)
            .sum::<u64>()
    }
    /// Elements the buffer holds.
    #[inline]
    pub(crate) fn capacity_elems(&self) -> u64 {
        self.buf_bytes / self.dtype.size_bytes() as u64
    }

    /// Check the invariants of the module doc.
    #[inline]
    pub fn validate(&self) -> Result<(), TensorError> {
        // The fast test, in 64 bits with every overflow flagged: each term of the extent
        // is a product of two 32-bit numbers (under 2^64), and any sum or product that
        // overflows, like an empty dimension or a zero stride, sends the view to
        // `validate_slow`, which names the first broken rule in their order of
        // precedence (a view that passes has no overflow, so its sizes are exact).
        let n = self.ndims as usize;
        if n == 0 || n > MAX_DIMS {
            return Err(TensorError::Rank(n));
        }
        let (mut zero, mut ovf, mut extent, mut numel) = (false, false, 1u64, 1u64);
        for i in 0..n {
            let (d, st) = (self.shape[i] as u64, self.strides[i] as u64);
            zero |= (d == 0) | (st == 0);
            let (e, o1) = extent.overflowing_add(d.wrapping_sub(1).wrapping_mul(st));
            let (m, o2) = numel.overflowing_mul(d);
            (extent, numel) = (e, m);
            ovf |= o1 | o2;
        }
        let size = self.dtype.size_bytes() as u64;
        let (end, o1) = self.offset.overflowing_add(extent);
        let (end_bytes, o2) = end.overflowing_mul(size);
        if zero | ovf | o1 | o2 || end_bytes > self.buf_bytes || self.addr & (size - 1) != 0 {
            return self.validate_slow();
        }
        Ok(())
    }

    /// [`Tensor::validate`] rule by rule, for a view that failed its fast test.
    #[cold]
    #[inline(never)]
    fn validate_slow(&self) -> Result<(), TensorError> {
        let n = self.ndims as usize;
        if n == 0 || n > MAX_DIMS {
            return Err(TensorError::Rank(n));
        }
        // One pass (this runs for every host tensor of every submit); the errors keep
        // their precedence: an empty dimension, then a zero stride, then the bounds.
        // Each term (d-1)*stride fits 64 bits; their sum, the offset and the byte size
        // may not: any overflow means out of bounds.
        let (mut zero_dim, mut zero_stride, mut extent, mut ovf) = (false, false, 1u64, false);
        // The element count too: overlapping strides can span a small region with more
        // than 2^64 elements, which a kernel walking `numel()` cannot count.
        let (mut numel, mut too_many) = (1u64, false);
        for i in 0..n {
            let (d, st) = (self.shape[i], self.strides[i]);
            zero_dim |= d == 0;
            zero_stride |= st == 0;
            let (e, o) = extent.overflowing_add(d.wrapping_sub(1) as u64 * st as u64);
            extent = e;
            ovf |= o;
            let (m, o) = numel.overflowing_mul(d as u64);
            numel = m;
            too_many |= o;
        }
        if zero_dim {
            return Err(TensorError::EmptyDim(self.shape().to_vec()));
        }
        if zero_stride {
            return Err(TensorError::Stride(self.strides().to_vec()));
        }
        let size = self.dtype.size_bytes() as u64;
        let (end, o1) = self.offset.overflowing_add(extent);
        let (end_bytes, o2) = end.overflowing_mul(size);
        if ovf | o1 | o2 || end_bytes > self.buf_bytes {
            return Err(self.out_of_bounds(if ovf | o1 { u64::MAX } else { end }));
        }
        if too_many {
            return Err(TensorError::TooManyElements(self.shape().to_vec()));
        }
        // Elements are addressed in whole units from `addr` (sizes are powers of two).
        if self.addr & (size - 1) != 0 {
            return Err(TensorError::Misaligned {
                addr: self.addr,
                size,
            });
        }
        Ok(())
    }

    #[cold]
    fn out_of_bounds(&self, end: u64) -> TensorError {
        TensorError::OutOfBounds {
            shape: self.shape().to_vec(),
            strides: self.strides().to_vec(),
            offset: self.offset,
            end,
            capacity: self.capacity_elems(),
        }
    }

    /// A new view over the same buffer. `offset` is in elements relative to this view's
    /// start; `strides = None` means row-major.
    pub fn view(
        &self,
        shape: &[u32],
        offset: u64,
        strides: Option<&[u32]>,
    ) -> Result<Tensor, TensorError> {
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(TensorError::Rank(shape.len()));
        }
        let mut t = *self;
        t.ndims = shape.len() as u8;
        t.shape = [1; MAX_DIMS];
        t.shape[..shape.len()].copy_from_slice(shape);
        t.strides = match strides {
            Some(s) => {
                if s.len() != shape.len() {
                    return Err(TensorError::Stride(s.to_vec()));
                }
                let mut a = [1u32; MAX_DIMS];
                a[..s.len()].copy_from_slice(s);
                a
            }
            None => contiguous_strides(shape),
        };
        t.offset = self.offset + offset;
        t.validate()?;
        Ok(t)
    }

    /// Rows `start..end` of the leading dimension.
    pub fn rows_slice(&self, start: u64, end: u64) -> Result<Tensor, TensorError> {
        let rows = self.shape[0] as u64;
        if start >= end || end > rows {
            return Err(TensorError::RowSlice { start, end, rows });
        }
        let mut t = *self;
        t.shape[0] = (end - start) as u32;
        t.offset = self.offset + start * self.strides[0] as u64;
        t.validate()?;
        Ok(t)
    }

    /// The view as `(rows, cols, row_stride)` when its last dimension is dense and the
    /// leading dimensions collapse into one row index (all row-contiguous views do).
    /// Returns `None` for views that cannot be expressed that way.
    pub fn as_rows(&self) -> Option<(usize, usize, usize)> {
        let n = self.ndims as usize;
        if n == 1 {
            return if self.strides[0] == 1 {
                Some((1, self.shape[0] as usize, self.shape[0] as usize))
            } else {
                None
            };
        }
        if self.strides[n - 1] != 1 {
            return None;
        }
        let cols = self.shape[n - 1] as usize;
        let row_stride = self.strides[n - 2] as usize;
        // Leading dims must nest: stride[i] == stride[i+1] * shape[i+1] for i < n-2.
        let mut rows = self.shape[n - 2] as usize;
        for i in (0..n - 2).rev() {
            if self.strides[i] as usize != self.strides[i + 1] as usize * self.shape[i + 1] as usize
            {
                return None;
            }
            rows *= self.shape[i] as usize;
        }
        Some((rows, cols, row_stride))
    }

    /// Raw pointer to element `[0, ...]` of this view.
    #[inline]
    pub fn data_ptr(&self) -> *mut u8 {
        (self.addr as usize + self.offset as usize * self.dtype.size_bytes()) as *mut u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_a_base_not_aligned_to_its_elements() {
        let t = Tensor::from_raw(0x1001, &[8], DType::F32);
        assert_eq!(
            t.validate(),
            Err(TensorError::Misaligned {
                addr: 0x1001,
                size: 4
            })
        );
        assert_eq!(
            t.validate().unwrap_err().to_string(),
            "tensor data at 0x1001 is not aligned to its 4-byte elements"
        );
        assert!(Tensor::from_raw(0x1002, &[8], DType::F16)
            .validate()
            .is_ok());
        assert!(Tensor::from_raw(0x1001, &[8], DType::U8).validate().is_ok());
        assert!(Tensor::from_raw(0x1004, &[8], DType::I64)
            .validate()
            .is_err());
    }

    #[test]
    fn validate_rejects_views_with_more_than_2_pow_64_elements() {
        // Found by the frame fuzz: overlapping strides keep the span inside 10 f16 while
        // the element count (858993460 * 5 * (2^32-1)) passes 2^64.
        let mut t = Tensor::from_raw(0x1000, &[1], DType::F16);
        t.ndims = 3;
        t.shape[..3].copy_from_slice(&[858_993_460, 5, u32::MAX]);
        t.strides[..3].copy_from_slice(&[5, 1, 1]);
        let span = 1 + (858_993_460u64 - 1) * 5 + 4 + (u32::MAX as u64 - 1);
        t.buf_bytes = span * 2;
        assert_eq!(
            t.validate(),
            Err(TensorError::TooManyElements(vec![858_993_460, 5, u32::MAX]))
        );
        t.shape[2] = 1;
        assert!(t.validate().is_ok());
    }

    #[test]
    fn validate_rejects_views_whose_extent_overflows_u64() {
        // 2^32-1 rows of stride 2^32-1 in each of 5 dims: the span overflows 64 bits and
        // must not wrap around into something that fits a 64-byte buffer.
        let mut t = Tensor::from_raw(0x1000, &[16], DType::F32);
        t.ndims = 5;
        t.shape = [u32::MAX; MAX_DIMS];
        t.strides = [u32::MAX; MAX_DIMS];
        assert!(
            matches!(t.validate(), Err(TensorError::OutOfBounds { .. })),
            "{:?}",
            t.validate()
        );
        // An offset near u64::MAX does not wrap either.
        let mut t = Tensor::from_raw(0x1000, &[16], DType::F32);
        t.offset = u64::MAX;
        assert!(matches!(t.validate(), Err(TensorError::OutOfBounds { .. })));
        // The bound is exact: 16 f32 fit a 64-byte buffer, 17 do not.
        let t = Tensor::from_raw(0x1000, &[16], DType::F32);
        assert!(t.validate().is_ok());
        let mut t2 = t;
        t2.offset = 1;
        assert!(matches!(
            t2.validate(),
            Err(TensorError::OutOfBounds {
                end: 17,
                capacity: 16,
                ..
            })
        ));
    }

    #[test]
    fn row_major_strides_must_fit_32_bits() {
        assert!(contiguous_strides_fit(&[4, 65536, 65535]));
        assert!(!contiguous_strides_fit(&[2, 65536, 65536]));
        // The first dimension's size never is a stride.
        assert!(contiguous_strides_fit(&[u32::MAX, 1]));
        assert!(matches!(
            crate::engine::TensorSpec::new(&[2, 65536, 65536], DType::U8),
            Err(TensorError::StrideOverflow(_))
        ));
    }

    #[test]
    fn task_id_encoding() {
        let id = TaskId::new(3, 7);
        assert_eq!(id.0, (3u64 << 32) | 7);
        assert_eq!(id.ring(), 3);
        assert_eq!(id.local(), 7);
        assert!(!TaskId::INVALID.is_valid());
    }

    #[test]
    fn views_and_rows() {
        let t = Tensor::from_raw(0x1000, &[4, 8], DType::F32);
        assert!(t.is_contiguous());
        assert_eq!(t.extent(), 32);
        assert_eq!(t.as_rows(), Some((4, 8, 8)));
        let r = t.rows_slice(1, 3).unwrap();
        assert_eq!(r.offset, 8);
        assert_eq!(r.shape(), &[2, 8]);
        let col = t.view(&[4, 2], 2, Some(&[8, 1])).unwrap();
        assert_eq!(col.as_rows(), Some((4, 2, 8)));
        assert!(!col.is_contiguous());
        assert!(t.view(&[5, 8], 0, None).is_err());
        assert!(t.rows_slice(3, 5).is_err());
        let strided = t.view(&[4, 4], 0, Some(&[8, 2])).unwrap();
        assert_eq!(strided.as_rows(), None);
        let t3 = Tensor::from_raw(0, &[2, 3, 4], DType::F32);
        assert_eq!(t3.as_rows(), Some((6, 4, 4)));
    }

    use proptest::prelude::*;

    proptest! {
        /// The fast test of `validate` and the rule-by-rule one agree on every view,
        /// valid or not, near every boundary (sizes and strides of 0, 1 and near 2^32,
        /// offsets and buffers near 2^64, misaligned addresses).
        #[test]
        fn validate_agrees_with_its_rule_by_rule_form(
            nd in 0usize..=MAX_DIMS + 1,
            dims in proptest::collection::vec(
                prop_oneof![0u32..4, Just(u32::MAX), (u32::MAX - 3)..=u32::MAX, any::<u32>()], MAX_DIMS),
            strides in proptest::collection::vec(
                prop_oneof![0u32..4, Just(u32::MAX), any::<u32>()], MAX_DIMS),
            offset in prop_oneof![0u64..64, (u64::MAX - 64)..=u64::MAX, any::<u64>()],
            buf in prop_oneof![0u64..4096, (u64::MAX - 4096)..=u64::MAX, any::<u64>()],
            addr in prop_oneof![0u64..64, any::<u64>()],
            dt in 0usize..7,
        ) {
            let dtype = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::I8, DType::U8][dt];
            let mut t = Tensor::from_raw(addr, &[1], dtype);
            t.ndims = nd as u8;
            t.shape.copy_from_slice(&dims);
            t.strides.copy_from_slice(&strides);
            t.offset = offset;
            t.buf_bytes = buf;
            prop_assert_eq!(t.validate(), t.validate_slow());
        }
    }
}
