//! The C layouts of `include/pto2/taskring_pto2_abi.h` and of the tensor records an
//! orchestration and its kernels share (`ChipTensor`, 128 bytes, and `TensorCreateInfo`,
//! 64 bytes, at upstream's offsets), field by field, with the conversions to and from
//! the engine's [`Tensor`]. The sizes are checked at compile time here and by
//! `static_assert`s in the headers.

use crate::tensor::{DType, TaskId, Tensor, MAX_DIMS};
use std::ffi::{c_char, c_void};

/// `TASKRING_PTO2_ABI_VERSION`.
pub(crate) const ABI_VERSION: u32 = 1;

pub(crate) const SUBMIT_TASK: i32 = 0;
pub(crate) const SUBMIT_DUMMY: i32 = 1;
pub(crate) const SUBMIT_ALLOC: i32 = 2;

/// `TensorArgType`.
pub(crate) const TAG_INPUT: i32 = 0;
pub(crate) const TAG_OUTPUT: i32 = 1;
pub(crate) const TAG_INOUT: i32 = 2;
pub(crate) const TAG_OUTPUT_EXISTING: i32 = 3;
pub(crate) const TAG_NO_DEP: i32 = 4;

/// `DepFlags`.
pub(crate) const DEP_WAIT: u8 = 1;
pub(crate) const DEP_RETAIN: u8 = 2;

/// `args[]` slots of a kernel call.
pub(crate) const LOCAL_CONTEXT_INDEX: usize = 48;
pub(crate) const GLOBAL_CONTEXT_INDEX: usize = 49;
pub(crate) const KERNEL_ARGS: usize = 64;

/// `ChipTensor` (upstream's layout: 128 bytes, two cache lines).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct ChipTensorAbi {
    pub addr: u64,
    pub size: u64,
    pub owner_task_id: u64,
    pub start_offset: u64,
    pub version: i32,
    pub ndims: u32,
    pub dtype: u8,
    pub manual_dep: bool,
    pub is_contiguous: bool,
    pub address_space: u8,
    pub shapes: [u32; MAX_DIMS],
    pub extent_elem_cache: u64,
    pub strides: [u32; MAX_DIMS],
    pub pad: [u8; 36],
}

/// `TensorCreateInfo` (64 bytes; the fields after `initial_value`'s pair sit at
/// `ChipTensor`'s offsets).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct TensorCreateInfoAbi {
    pub initial_value: u64,
    pub has_initial_value: bool,
    pub pad1: [u8; 7],
    pub pad2: u64,
    pub start_offset: u64,
    pub version: i32,
    pub ndims: u32,
    pub dtype: u8,
    pub manual_dep: bool,
    pub is_contiguous: bool,
    pub pad_flags: u8,
    pub shapes: [u32; MAX_DIMS],
}

/// `taskring_pto2_submit`.
#[repr(C)]
pub struct Submit {
    pub tensors: *const *const c_void,
    pub tags: *const i32,
    pub scalars: *const u64,
    pub deps: *const u64,
    pub dep_kinds: *const u8,
    pub error_msg: *const c_char,
    pub predicate_tensor: *const ChipTensorAbi,
    pub predicate_target: i64,
    pub predicate_indices: [u32; 5],
    pub predicate_ndims: u32,
    pub tensor_count: i32,
    pub scalar_count: i32,
    pub dep_count: u32,
    pub kernel_ids: [i32; 3],
    pub kind: i32,
    pub task_timing_slot: i32,
    pub block_num: i16,
    pub require_sync_start: u8,
    pub allow_early_resolve: u8,
    pub has_error: u8,
    pub predicate_op: u8,
    pub reserved: [u8; 10],
}

/// `taskring_pto2_outputs`.
#[repr(C)]
pub struct Outputs {
    pub task_id: u64,
    pub count: u32,
    pub capacity: u32,
    pub tensors: *mut ChipTensorAbi,
}

/// `taskring_pto2_entry_args`.
#[repr(C)]
pub struct EntryArgs {
    pub tensors: *const ChipTensorAbi,
    pub scalars: *const u64,
    pub tensor_count: i32,
    pub scalar_count: i32,
}

/// The first fields of the header's `PTO2Runtime`; the chip's runtime record starts with
/// them ([`super::ops::Runtime`]).
#[repr(C)]
pub struct RuntimeHead {
    pub ops: *const Ops,
    pub pending_scope_mode: u8,
}

/// `taskring_pto2_ops`.
#[repr(C)]
pub struct Ops {
    pub abi_version: u32,
    pub size: u32,
    pub submit: unsafe extern "C" fn(*mut RuntimeHead, *const Submit, *mut Outputs),
    pub scope_begin: unsafe extern "C" fn(*mut RuntimeHead, u8, *const c_char, i32),
    pub scope_end: unsafe extern "C" fn(*mut RuntimeHead),
    pub orchestration_done: unsafe extern "C" fn(*mut RuntimeHead),
    pub is_fatal: unsafe extern "C" fn(*mut RuntimeHead) -> i32,
    pub report_fatal: unsafe extern "C" fn(*mut RuntimeHead, i32, *const c_char, *const c_char),
    pub log: unsafe extern "C" fn(*mut RuntimeHead, i32, *const c_char, *const c_char),
    pub get_tensor_data:
        unsafe extern "C" fn(*mut RuntimeHead, *const ChipTensorAbi, u32, *const u32) -> u64,
    pub set_tensor_data:
        unsafe extern "C" fn(*mut RuntimeHead, *const ChipTensorAbi, u32, *const u32, u64),
    pub available_cluster_count: unsafe extern "C" fn(*mut RuntimeHead) -> i32,
    pub available_aiv_count: unsafe extern "C" fn(*mut RuntimeHead) -> i32,
}

/// `taskring_pto2_config`: the expected argument count the library's config function
/// reports for these arguments; writes the library's ABI version.
pub(crate) type ConfigTrampoline =
    unsafe extern "C" fn(*const c_void, *const EntryArgs, *mut u32) -> i32;
/// `taskring_pto2_enter`: run the entry with the runtime bound; 1 when a C++ exception
/// was caught (and reported through `report_fatal`).
pub(crate) type EnterTrampoline =
    unsafe extern "C" fn(*mut RuntimeHead, *const c_void, *const EntryArgs) -> i32;
/// `kernel_entry`.
pub(crate) type KernelEntry = unsafe extern "C" fn(*mut i64);

/// `LocalContext` (what the runtime writes of it; the rest stays zero).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct LocalContext {
    pub block_idx: i32,
    pub block_num: i32,
    pub rest: [u64; 6],
}

/// `GlobalContext` (what the runtime writes of it; the rest stays zero).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct GlobalContext {
    pub sub_block_id: i32,
    pub pad: i32,
    pub rest: [u64; 7],
}

const _: () = {
    assert!(std::mem::size_of::<ChipTensorAbi>() == 128);
    assert!(std::mem::offset_of!(ChipTensorAbi, owner_task_id) == 16);
    assert!(std::mem::offset_of!(ChipTensorAbi, start_offset) == 24);
    assert!(std::mem::offset_of!(ChipTensorAbi, version) == 32);
    assert!(std::mem::offset_of!(ChipTensorAbi, ndims) == 36);
    assert!(std::mem::offset_of!(ChipTensorAbi, dtype) == 40);
    assert!(std::mem::offset_of!(ChipTensorAbi, manual_dep) == 41);
    assert!(std::mem::offset_of!(ChipTensorAbi, is_contiguous) == 42);
    assert!(std::mem::offset_of!(ChipTensorAbi, address_space) == 43);
    assert!(std::mem::offset_of!(ChipTensorAbi, shapes) == 44);
    assert!(std::mem::offset_of!(ChipTensorAbi, extent_elem_cache) == 64);
    assert!(std::mem::offset_of!(ChipTensorAbi, strides) == 72);
    assert!(std::mem::size_of::<TensorCreateInfoAbi>() == 64);
    assert!(std::mem::offset_of!(TensorCreateInfoAbi, start_offset) == 24);
    assert!(std::mem::offset_of!(TensorCreateInfoAbi, ndims) == 36);
    assert!(std::mem::offset_of!(TensorCreateInfoAbi, dtype) == 40);
    assert!(std::mem::offset_of!(TensorCreateInfoAbi, shapes) == 44);
    assert!(std::mem::size_of::<Submit>() == 136);
    assert!(std::mem::offset_of!(Submit, predicate_target) == 56);
    assert!(std::mem::offset_of!(Submit, tensor_count) == 88);
    assert!(std::mem::offset_of!(Submit, kernel_ids) == 100);
    assert!(std::mem::offset_of!(Submit, block_num) == 120);
    assert!(std::mem::offset_of!(Submit, predicate_op) == 125);
    assert!(std::mem::size_of::<Outputs>() == 24);
    assert!(std::mem::size_of::<EntryArgs>() == 24);
};

/// Upstream's `DataType` numbering.
pub(crate) const DATA_TYPE_NAMES: [&str; 15] = [
    "FLOAT32",
    "FLOAT16",
    "INT32",
    "INT16",
    "INT8",
    "UINT8",
    "BFLOAT16",
    "INT64",
    "UINT64",
    "UINT16",
    "UINT32",
    "BOOL",
    "FP8E4M3FN",
    "FP8E8M0",
    "FP4E2M1",
];

/// The engine's dtype of upstream's `DataType` `code`, or an error naming it.
#[inline]
pub(crate) fn dtype_of(code: u8) -> Result<DType, String> {
    Ok(match code {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::I32,
        4 => DType::I8,
        5 => DType::U8,
        6 => DType::BF16,
        7 => DType::I64,
        _ => {
            let name = DATA_TYPE_NAMES
                .get(code as usize)
                .copied()
                .unwrap_or("unknown");
            return Err(format!(
                "DataType {name} ({code}) is not supported by taskring (supported: FLOAT32, \
                 FLOAT16, BFLOAT16, INT32, INT64, INT8, UINT8)"
            ));
        }
    })
}

/// Upstream's `DataType` code of an engine dtype.
#[inline]
pub(crate) fn code_of(d: DType) -> u8 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::I32 => 2,
        DType::I8 => 4,
        DType::U8 => 5,
        DType::BF16 => 6,
        DType::I64 => 7,
    }
}

impl ChipTensorAbi {
    /// The record of a fresh runtime output of `owner` at `addr`: contiguous, row-major,
    /// the whole buffer.
    #[inline(always)]
    pub(crate) fn output(
        addr: u64,
        spec: &crate::engine::TensorSpec,
        owner: u64,
        manual_dep: bool,
    ) -> Self {
        let n = spec.ndims as usize;
        let mut strides = [0u32; MAX_DIMS];
        let mut acc = 1u64;
        for i in (0..n).rev() {
            strides[i] = acc as u32;
            acc *= spec.shape[i] as u64;
        }
        let mut shapes = [1u32; MAX_DIMS];
        shapes[..n].copy_from_slice(&spec.shape[..n]);
        ChipTensorAbi {
            addr,
            size: acc * spec.dtype.size_bytes() as u64,
            owner_task_id: owner,
            start_offset: 0,
            version: 0,
            ndims: n as u32,
            dtype: code_of(spec.dtype),
            manual_dep,
            is_contiguous: true,
            address_space: 0,
            shapes,
            extent_elem_cache: acc,
            strides,
            pad: [0; 36],
        }
    }

    /// The record of an engine tensor.
    #[inline]
    pub(crate) fn of(t: &Tensor) -> ChipTensorAbi {
        let n = t.ndims as usize;
        let mut extent = 1u64;
        let mut expected = 1u64;
        let mut contiguous = true;
        for i in (0..n).rev() {
            if t.strides[i] as u64 != expected {
                contiguous = false;
            }
            extent += (t.shape[i] as u64).saturating_sub(1) * t.strides[i] as u64;
            expected *= t.shape[i] as u64;
        }
        ChipTensorAbi {
            addr: t.addr,
            size: t.buf_bytes,
            owner_task_id: t.owner.0,
            start_offset: t.offset,
            version: t.version as i32,
            ndims: n as u32,
            dtype: code_of(t.dtype),
            manual_dep: t.manual_dep,
            is_contiguous: contiguous,
            address_space: 0,
            shapes: t.shape,
            extent_elem_cache: extent,
            strides: t.strides,
            pad: [0; 36],
        }
    }

    /// The engine tensor of this record (checked by the engine at submit). Inlined into
    /// the submit: a call per tensor argument cost ~110 instructions of a C++ submit.
    #[inline(always)]
    pub(crate) fn tensor(&self) -> Result<Tensor, String> {
        // The common dtypes without a call; the rest, and the error text, out of line.
        let dtype = match self.dtype {
            0 => DType::F32,
            2 => DType::I32,
            7 => DType::I64,
            _ => dtype_of(self.dtype)?,
        };
        let n = self.ndims as usize;
        if n == 0 || n > MAX_DIMS || !(0..=255).contains(&self.version) {
            return Err(self.refused());
        }
        // Whole arrays (no length-dependent copy); entries past ndims as the engine's own
        // tensors have them (shape 1, stride 0), a C++ record may leave them unset.
        let mut shape = self.shapes;
        let mut strides = self.strides;
        for d in n..MAX_DIMS {
            shape[d] = 1;
            strides[d] = 0;
        }
        Ok(Tensor {
            addr: self.addr,
            buf_bytes: self.size,
            offset: self.start_offset,
            owner: TaskId(self.owner_task_id),
            shape,
            strides,
            ndims: n as u8,
            dtype,
            version: self.version as u8,
            manual_dep: self.manual_dep,
        })
    }

    /// Why [`tensor`](Self::tensor) refuses this record.
    #[cold]
    #[inline(never)]
    fn refused(&self) -> String {
        if self.ndims == 0 || self.ndims as usize > MAX_DIMS {
            format!(
                "tensor has {} dimensions (1..{MAX_DIMS}); is it an output of a failed submit?",
                self.ndims
            )
        } else {
            format!("tensor version {} is outside 0..255", self.version)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_survives_the_round_trip_through_its_record() {
        let base = Tensor::from_raw(0x1000, &[4, 6], DType::F16);
        let mut v = base;
        v.offset = 7;
        v.shape[..2].copy_from_slice(&[2, 3]);
        v.strides[..2].copy_from_slice(&[6, 2]);
        v.owner = TaskId::new(2, 9);
        v.version = 3;
        let r = ChipTensorAbi::of(&v);
        assert_eq!(r.dtype, 1);
        assert!(!r.is_contiguous);
        // 1 + (2-1)*6 + (3-1)*2
        assert_eq!(r.extent_elem_cache, 11);
        assert_eq!(r.tensor().unwrap(), v);
        assert!(ChipTensorAbi::of(&base).is_contiguous);
    }

    #[test]
    fn a_fresh_output_record_is_the_record_of_its_tensor() {
        let spec = crate::engine::TensorSpec::new(&[3, 4, 5], DType::BF16).unwrap();
        let t = spec.materialize(0x4000, TaskId::new(1, 7));
        let a = ChipTensorAbi::output(0x4000, &spec, TaskId::new(1, 7).0, false);
        let b = ChipTensorAbi::of(&t);
        // SAFETY: both are plain-data records of the same type, compared as bytes.
        let bytes = |r: &ChipTensorAbi| unsafe {
            std::slice::from_raw_parts(r as *const ChipTensorAbi as *const u8, 128).to_vec()
        };
        assert_eq!(bytes(&a), bytes(&b));
    }

    #[test]
    fn dtypes_keep_upstream_numbers_and_unsupported_ones_are_named() {
        for d in DType::ALL {
            assert_eq!(dtype_of(code_of(d)).unwrap(), d);
        }
        assert_eq!(code_of(DType::BF16), 6);
        let e = dtype_of(10).unwrap_err();
        assert!(e.contains("UINT32 (10)"), "{e}");
    }

    #[test]
    fn a_record_without_dimensions_is_refused() {
        let mut r = ChipTensorAbi::of(&Tensor::from_raw(0x1000, &[4], DType::F32));
        r.ndims = 0;
        assert!(r.tensor().unwrap_err().contains("0 dimensions"));
    }
}
