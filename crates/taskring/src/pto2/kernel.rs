//! The engine kernel of a C++ task: its parts' `kernel_entry` functions, called on a core
//! thread with upstream's `args[]` (a `ChipTensor` address per tensor argument in the
//! order the orchestration added them, the scalars, the block context at slots 48/49).
//!
//! The engine hands a kernel its tensors in canonical order (inputs, inouts, outputs,
//! no-dep); what a C++ kernel expects is argument order, and that — like the parts, the
//! block count, a predicate and the outputs' initial values — is a property of the
//! submit, not of the func_id. So one [`PtoKernel`] exists per distinct [`KernelKey`]
//! (made on first use, kept for the life of the process; programs have a handful), and
//! it carries the permutation from canonical to argument order.

use super::abi::{
    ChipTensorAbi, GlobalContext, KernelEntry, LocalContext, GLOBAL_CONTEXT_INDEX, KERNEL_ARGS,
    LOCAL_CONTEXT_INDEX, TAG_INOUT, TAG_INPUT, TAG_NO_DEP,
};
use crate::engine::MAX_TASK_TENSORS;
use crate::kernel::{CoreKind, Kernel, KernelCall};
use std::mem::MaybeUninit;

/// What makes two C++ tasks' kernels the same.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct KernelKey {
    /// AIC, AIV0, AIV1 func_ids (-1: none).
    pub ids: [i32; 3],
    pub block_num: u16,
    /// `launch_spec.set_require_sync_start(true)`: every block starts at once.
    pub sync_start: bool,
    /// The tensor arguments' tags, 3 bits each in argument order.
    pub tags: u64,
    pub n_tensors: u8,
    /// A predicate: (operator, element bytes, target); its element is the last input.
    pub predicate: Option<(u8, u8, i64)>,
    /// Bit i: output argument i starts filled with `init[i]`'s low element bytes.
    pub init_mask: u32,
    pub init: [u64; MAX_TASK_TENSORS],
}

/// The canonical group of a tag (the engine's order).
fn group(tag: i32) -> u8 {
    match tag {
        TAG_INPUT => 0,
        TAG_INOUT => 1,
        TAG_NO_DEP => 3,
        _ => 2,
    }
}

/// One part of a task: a kernel function and the sub-block id it sees.
#[derive(Clone, Copy)]
struct Part {
    entry: KernelEntry,
    sub_block_id: i32,
}

pub(crate) struct PtoKernel {
    name: String,
    core: CoreKind,
    parts: Vec<Part>,
    block_num: u32,
    sync_start: bool,
    n_tensors: usize,
    /// `order[c]`: the argument index of canonical tensor `c` (user tensors only).
    order: [u8; MAX_TASK_TENSORS + 1],
    /// Canonical index of the predicate's element, with (operator, element bytes, target).
    predicate: Option<(usize, u8, u8, i64)>,
    /// (argument index, value) of the outputs with an initial value.
    init: Vec<(usize, u64)>,
}

impl PtoKernel {
    /// The kernel for `key`; `entries[slot]` is the function of each present part.
    pub(crate) fn new(key: &KernelKey, entries: [Option<KernelEntry>; 3], name: String) -> Self {
        let mut parts = Vec::new();
        for (slot, e) in entries.iter().enumerate() {
            if let Some(entry) = e {
                parts.push(Part {
                    entry: *entry,
                    sub_block_id: if slot == 2 { 1 } else { 0 },
                });
            }
        }
        let core = match (
            entries[0].is_some(),
            entries[1].is_some() || entries[2].is_some(),
        ) {
            (true, false) => CoreKind::Aic,
            (false, true) => CoreKind::Aiv,
            _ => CoreKind::Any,
        };
        let n = key.n_tensors as usize;
        let tag = |i: usize| ((key.tags >> (3 * i)) & 7) as i32;
        // The engine's canonical order: by group, argument order within a group; the
        // predicate's element is an input added after every user tensor.
        let mut order = [0u8; MAX_TASK_TENSORS + 1];
        let mut c = 0;
        let mut predicate = None;
        for g in 0..4 {
            for i in 0..n {
                if group(tag(i)) == g {
                    order[c] = i as u8;
                    c += 1;
                }
            }
            if g == 0 {
                if let Some((op, bytes, target)) = key.predicate {
                    predicate = Some((c, op, bytes, target));
                    order[c] = u8::MAX;
                    c += 1;
                }
            }
        }
        let init = (0..n)
            .filter(|i| key.init_mask & (1 << i) != 0)
            .map(|i| (i, key.init[i]))
            .collect();
        PtoKernel {
            name,
            core,
            parts,
            block_num: key.block_num.max(1) as u32,
            sync_start: key.sync_start,
            n_tensors: n,
            order,
            predicate,
            init,
        }
    }
}

/// Does the predicate's element pass (upstream's `DispatchPredicate::pass`: the element
/// sign-extended from its width, compared with the target)?
fn passes(t: &crate::tensor::Tensor, op: u8, bytes: u8, target: i64) -> bool {
    let mut v: i64 = 0;
    // SAFETY: the element is inside the tensor's buffer (checked at submit) and its
    // producer completed before this task became ready (the element is an input).
    unsafe {
        std::ptr::copy_nonoverlapping(
            t.data_ptr() as *const u8,
            &mut v as *mut i64 as *mut u8,
            bytes as usize,
        );
    }
    let bits = bytes as u32 * 8;
    if bits < 64 {
        let shift = 64 - bits;
        v = (v << shift) >> shift;
    }
    match op {
        1 => v == target,
        2 => v != target,
        3 => v > target,
        4 => v < target,
        5 => v >= target,
        6 => v <= target,
        _ => true,
    }
}

/// Fill a fresh output with copies of `value`'s low element bytes.
pub(crate) fn fill(t: &crate::tensor::Tensor, value: u64) {
    let elem = t.dtype.size_bytes();
    let bytes = value.to_le_bytes();
    let n = t.numel() as usize;
    let p = t.data_ptr();
    for i in 0..n {
        // SAFETY: a runtime output is a contiguous block of numel elements owned by
        // this task until it completes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(i * elem), elem) };
    }
}

impl Kernel for PtoKernel {
    fn name(&self) -> &str {
        &self.name
    }
    fn core(&self) -> CoreKind {
        self.core
    }
    fn run(&self, call: &KernelCall<'_>) {
        if let Some((c, op, bytes, target)) = self.predicate {
            if !passes(&call.tensors[c], op, bytes, target) {
                return;
            }
        }
        let mut recs: [MaybeUninit<ChipTensorAbi>; MAX_TASK_TENSORS] =
            [const { MaybeUninit::uninit() }; MAX_TASK_TENSORS];
        let mut args = [0i64; KERNEL_ARGS];
        for (c, t) in call.tensors.iter().enumerate() {
            let a = self.order[c];
            if a == u8::MAX {
                continue;
            }
            let a = a as usize;
            recs[a].write(ChipTensorAbi::of(t));
            if let Some(&(_, v)) = self.init.iter().find(|(i, _)| *i == a) {
                fill(t, v);
            }
        }
        for (a, r) in recs.iter().enumerate().take(self.n_tensors) {
            args[a] = r.as_ptr() as i64;
        }
        for (j, s) in call.scalars.iter().enumerate() {
            args[self.n_tensors + j] = *s as i64;
        }
        let units = self.block_num as usize * self.parts.len();
        if self.sync_start || self.parts.len() > 1 {
            // Units that may wait for each other run at once: every block and part of a
            // sync-start task, the parts of each block of a mixed task.
            let group = if self.sync_start {
                units
            } else {
                self.parts.len()
            };
            for first in (0..units).step_by(group) {
                std::thread::scope(|s| {
                    for u in first + 1..first + group {
                        s.spawn(move || self.run_unit(&args, u));
                    }
                    self.run_unit(&args, first);
                });
            }
        } else {
            for u in 0..units {
                self.run_unit(&args, u);
            }
        }
    }
}

impl PtoKernel {
    /// Run unit `u` (block `u / parts`, part `u % parts`) with its own block context.
    fn run_unit(&self, base: &[i64; KERNEL_ARGS], u: usize) {
        let p = self.parts[u % self.parts.len()];
        let mut local = LocalContext {
            block_idx: (u / self.parts.len()) as i32,
            block_num: self.block_num as i32,
            ..LocalContext::default()
        };
        let mut global = GlobalContext {
            sub_block_id: p.sub_block_id,
            ..GlobalContext::default()
        };
        let mut args = *base;
        args[LOCAL_CONTEXT_INDEX] = &mut local as *mut LocalContext as i64;
        args[GLOBAL_CONTEXT_INDEX] = &mut global as *mut GlobalContext as i64;
        // SAFETY: the context records and the tensor records `args` points at outlive
        // the call; kernel_entry is the library's function of the documented ABI
        // (trusted as native kernels are, docs/api.md §11).
        unsafe { (p.entry)(args.as_mut_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn nothing(_: *mut i64) {}

    fn key(tags: &[i32], predicate: bool) -> KernelKey {
        KernelKey {
            ids: [-1, 0, -1],
            block_num: 1,
            sync_start: false,
            tags: tags
                .iter()
                .enumerate()
                .fold(0, |a, (i, &t)| a | (t as u64) << (3 * i)),
            n_tensors: tags.len() as u8,
            predicate: predicate.then_some((1, 4, 0)),
            init_mask: 0,
            init: [0; MAX_TASK_TENSORS],
        }
    }

    #[test]
    fn canonical_order_maps_back_to_argument_order() {
        // out(OUTPUT), a(INPUT), nd(NO_DEP), io(INOUT), b(INPUT)
        let k = PtoKernel::new(
            &key(&[1, 0, 4, 2, 0], false),
            [None, Some(nothing), None],
            "k".into(),
        );
        // canonical: a, b, io, out, nd
        assert_eq!(&k.order[..5], &[1, 4, 3, 0, 2]);
        assert_eq!(k.core, CoreKind::Aiv);
    }

    #[test]
    fn the_predicate_element_is_the_last_input() {
        let k = PtoKernel::new(
            &key(&[1, 0, 2], true),
            [Some(nothing), Some(nothing), None],
            "k".into(),
        );
        // canonical: in, <predicate>, inout, out
        assert_eq!(&k.order[..4], &[1, u8::MAX, 2, 0]);
        assert_eq!(k.predicate.map(|p| p.0), Some(1));
        assert_eq!(k.core, CoreKind::Any);
    }

    #[test]
    fn predicates_compare_the_sign_extended_element() {
        let v: i32 = -3;
        let t = crate::tensor::Tensor::from_raw(
            &v as *const i32 as u64,
            &[1],
            crate::tensor::DType::I32,
        );
        assert!(passes(&t, 4, 4, 0)); // -3 < 0
        assert!(passes(&t, 1, 4, -3));
        assert!(!passes(&t, 3, 4, -3));
    }
}
