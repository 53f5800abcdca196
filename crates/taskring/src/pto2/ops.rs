//! The function table an orchestration library calls (`taskring_pto2_ops`), and the
//! per-run record behind its `PTO2Runtime *`: every call becomes a call of the run's
//! [`Orchestrator`], so a C++ submit takes the same path as a Rust or Python one.
//!
//! Failures: the first failure of the run is latched in the orchestrator (as for any
//! program) and the record turns fatal; every later call returns at once (a submit with
//! an invalid task id and no outputs; the header's `get_ref` of a missing output is an
//! all-zero tensor, safe to touch). No Rust panic leaves these functions: each body runs
//! under `catch_unwind`, and a panic fails the run.

use super::abi::{self, ChipTensorAbi, Outputs, RuntimeHead, Submit, TensorCreateInfoAbi};
use super::kernel::{fill, KernelKey};
use super::Inner;
use crate::engine::{
    ArgTag, Orchestrator, RuntimeFailure, StatusCode, TaskArgs, TaskOutputs, TensorSpec,
    MAX_TASK_TENSORS,
};
use crate::kernel::KernelRef;
use crate::tensor::{TaskId, Tensor, MAX_DIMS};
use std::ffi::{c_char, CStr};
use std::panic::AssertUnwindSafe;

/// The chip an orchestration sees: a2a3's 24 clusters (one AIC core each) and 48 AIV
/// cores, whatever the host's core count, so a program sizes its SPMD launches as it does
/// on the device. The blocks then run on the chip's core threads (a sync-start launch's
/// together, on threads of their own).
pub(crate) const A2A3_GEOMETRY: (usize, usize) = (24, 48);

/// The record behind the library's `PTO2Runtime *` for one run: starts with the fields
/// the header's partial `PTO2Runtime` declares.
#[repr(C)]
pub(crate) struct Runtime<'a, 'o> {
    head: RuntimeHead,
    o: &'a mut Orchestrator<'o>,
    callable: &'a Inner,
    fatal: bool,
    done: bool,
    /// Kernels this run used, most recent last (a handful; searched before the
    /// callable's registry).
    kernels: Vec<(KernelKey, KernelRef)>,
    /// The kernel of the last submit without a predicate or initial values, by what alone
    /// then makes its key (func_ids, block_num, tags, tensor count): a loop submitting
    /// one kind of task skips building and comparing the whole key.
    last_plain: Option<([i32; 3], u16, u64, u8, KernelRef)>,
}

pub(crate) static OPS: abi::Ops = abi::Ops {
    abi_version: abi::ABI_VERSION,
    size: std::mem::size_of::<abi::Ops>() as u32,
    submit: op_submit,
    scope_begin: op_scope_begin,
    scope_end: op_scope_end,
    orchestration_done: op_orchestration_done,
    is_fatal: op_is_fatal,
    report_fatal: op_report_fatal,
    log: op_log,
    get_tensor_data: op_get_tensor_data,
    set_tensor_data: op_set_tensor_data,
    available_cluster_count: op_cluster_count,
    available_aiv_count: op_aiv_count,
};

impl<'a, 'o> Runtime<'a, 'o> {
    pub(crate) fn new(o: &'a mut Orchestrator<'o>, callable: &'a Inner) -> Self {
        Runtime {
            head: RuntimeHead {
                ops: &OPS,
                pending_scope_mode: 0,
            },
            o,
            callable,
            fatal: false,
            done: false,
            kernels: Vec::new(),
            last_plain: None,
        }
    }

    pub(crate) fn head(&mut self) -> *mut RuntimeHead {
        &mut self.head
    }

    pub(crate) fn orchestrator(&mut self) -> &mut Orchestrator<'o> {
        self.o
    }

    /// Has the run failed (here or on a core)?
    fn fatal_now(&mut self) -> bool {
        if !self.fatal && self.o.is_fatal() {
            self.fatal = true;
        }
        self.fatal
    }

    /// Fail the run with `f` (the first failure wins).
    pub(crate) fn fail(&mut self, f: RuntimeFailure) {
        self.fatal = true;
        self.o.fail_run(f);
    }

    fn invalid(&self, text: String) -> RuntimeFailure {
        RuntimeFailure::invalid_args(Some(self.o.current_ring()), text)
    }

    // Indexes run over several of the header's arrays at once.
    #[allow(clippy::needless_range_loop)]
    fn submit(&mut self, s: &Submit, out: &mut Outputs) -> Result<(), RuntimeFailure> {
        if self.done {
            return Err(self.invalid("submit after rt_orchestration_done()".into()));
        }
        if s.has_error != 0 {
            // SAFETY: the header passes the Arg's own message, a static string.
            let msg = unsafe { text(s.error_msg) };
            return Err(self.invalid(format!("Invalid Arg: {msg}")));
        }
        let n = s.tensor_count.max(0) as usize;
        let extra = (s.predicate_op != 0) as usize;
        if n + extra > MAX_TASK_TENSORS {
            return Err(self.invalid(format!(
                "the task has {n} tensor arguments{}; taskring takes at most {MAX_TASK_TENSORS} \
                 per task",
                if extra == 1 { " and a predicate" } else { "" }
            )));
        }
        let mut a = TaskArgs::new();
        let mut key_tags = 0u64;
        let mut init_mask = 0u32;
        let mut init = [0u64; MAX_TASK_TENSORS];
        let mut out_manual = 0u32;
        for i in 0..n {
            // SAFETY: the header's wrapper passes tensor_count entries of each array.
            let (tag, p) = unsafe { (*s.tags.add(i), *s.tensors.add(i)) };
            if p.is_null() {
                return Err(self.invalid(format!("tensor argument {i} is null")));
            }
            key_tags |= ((tag as u64) & 7) << (3 * i);
            if tag == abi::TAG_OUTPUT {
                // SAFETY: an OUTPUT argument points at the caller's TensorCreateInfo.
                let ci = unsafe { &*(p as *const TensorCreateInfoAbi) };
                let nd = (ci.ndims as usize).min(MAX_DIMS + 1);
                let dtype = abi::dtype_of(ci.dtype).map_err(|e| self.invalid(e))?;
                if nd == 0 || nd > MAX_DIMS {
                    return Err(self.invalid(format!(
                        "TensorCreateInfo of argument {i} has {} dimensions (1..{MAX_DIMS})",
                        ci.ndims
                    )));
                }
                let spec = TensorSpec::new(&ci.shapes[..nd], dtype)
                    .map_err(|e| self.invalid(format!("TensorCreateInfo of argument {i}: {e}")))?;
                a.output(spec);
                if ci.has_initial_value {
                    init_mask |= 1 << i;
                    init[i] = ci.initial_value;
                }
                if ci.manual_dep {
                    out_manual |= 1 << i;
                }
            } else {
                // SAFETY: every other tag points at the caller's ChipTensor.
                let rec = unsafe { &*(p as *const ChipTensorAbi) };
                let t = rec
                    .tensor()
                    .map_err(|e| self.invalid(format!("tensor argument {i}: {e}")))?;
                let tag = match tag {
                    abi::TAG_INPUT => ArgTag::Input,
                    abi::TAG_INOUT => ArgTag::Inout,
                    abi::TAG_OUTPUT_EXISTING => ArgTag::OutputExisting,
                    abi::TAG_NO_DEP => ArgTag::NoDep,
                    other => {
                        return Err(
                            self.invalid(format!("tensor argument {i} has tag {other} (0..4)"))
                        )
                    }
                };
                a.tensor(tag, t);
            }
        }
        let mut predicate = None;
        if s.predicate_op != 0 {
            if s.predicate_tensor.is_null() || s.predicate_op > 6 {
                return Err(self.invalid("set_predicate: no tensor, or an unknown operator".into()));
            }
            // SAFETY: the header passes the predicate operand's ChipTensor.
            let rec = unsafe { &*s.predicate_tensor };
            let t = element(rec, s.predicate_ndims, s.predicate_indices.as_ptr())
                .map_err(|e| self.invalid(format!("set_predicate: {e}")))?;
            predicate = Some((
                s.predicate_op,
                t.dtype.size_bytes() as u8,
                s.predicate_target,
            ));
            a.input(t);
        }
        for j in 0..s.scalar_count.max(0) as usize {
            // SAFETY: scalar_count entries.
            a.scalar_raw(unsafe { *s.scalars.add(j) }, false);
        }
        for k in 0..s.dep_count as usize {
            // SAFETY: dep_count entries of deps, and of dep_kinds when not null.
            let (id, kind) = unsafe {
                (
                    *s.deps.add(k),
                    if s.dep_kinds.is_null() {
                        abi::DEP_WAIT | abi::DEP_RETAIN
                    } else {
                        *s.dep_kinds.add(k)
                    },
                )
            };
            let id = TaskId(id);
            if !id.is_valid() {
                return Err(self.invalid(
                    "Arg.set_dependencies(...) requires valid task ids (an id of a failed submit?)"
                        .into(),
                ));
            }
            let mut flags = 0;
            if kind & abi::DEP_WAIT != 0 {
                flags |= crate::engine::shared::DEP_WAIT;
            }
            if kind & abi::DEP_RETAIN != 0 {
                flags |= crate::engine::shared::DEP_RETAIN;
            }
            if flags != 0 {
                a.dep_flags(id, flags);
            }
        }
        let outs = match s.kind {
            abi::SUBMIT_TASK => {
                let kernel = self.kernel(s, key_tags, n, predicate, init_mask, &init)?;
                let o = self.o.submit(kernel, &a)?;
                init_mask = 0; // the kernel fills them before it runs
                o
            }
            abi::SUBMIT_DUMMY => self.o.submit_dummy(&a)?,
            abi::SUBMIT_ALLOC => {
                let mut specs =
                    [TensorSpec::new(&[1], crate::tensor::DType::U8).unwrap(); MAX_TASK_TENSORS];
                let mut k = 0;
                for i in 0..n {
                    // SAFETY: as above.
                    if unsafe { *s.tags.add(i) } != abi::TAG_OUTPUT {
                        return Err(self.invalid(format!(
                            "alloc_tensors: argument {i} is not an output (TensorCreateInfo)"
                        )));
                    }
                    specs[k] = a.spec_at(i);
                    k += 1;
                }
                if s.scalar_count > 0 || k == 0 {
                    return Err(self.invalid(
                        "alloc_tensors: takes one or more TensorCreateInfo and nothing else".into(),
                    ));
                }
                self.o.alloc(&specs[..k])?
            }
            other => return Err(self.invalid(format!("unknown submit kind {other}"))),
        };
        self.write_outputs(&outs, s, out, init_mask, &init, out_manual);
        Ok(())
    }

    /// Copy the runtime outputs into the caller's TaskOutputTensors; fill the ones with
    /// an initial value that no kernel of this task fills (dummy tasks and
    /// allocations: nothing reads them before this returns).
    #[allow(clippy::needless_range_loop)]
    fn write_outputs(
        &self,
        outs: &TaskOutputs,
        s: &Submit,
        out: &mut Outputs,
        init_mask: u32,
        init: &[u64; MAX_TASK_TENSORS],
        out_manual: u32,
    ) {
        out.task_id = outs.id.0;
        let mut k = 0usize;
        for i in 0..s.tensor_count.max(0) as usize {
            // SAFETY: as in `submit`.
            if unsafe { *s.tags.add(i) } != abi::TAG_OUTPUT {
                continue;
            }
            if init_mask & (1 << i) != 0 {
                fill(&outs.output(k), init[i]);
            }
            if k < out.capacity as usize && !out.tensors.is_null() {
                let (addr, spec) = outs.output_raw(k);
                let rec = ChipTensorAbi::output(addr, &spec, outs.id.0, out_manual & (1 << i) != 0);
                // SAFETY: the caller's storage has room for `capacity` records.
                unsafe { out.tensors.add(k).write(rec) };
            }
            k += 1;
        }
        out.count = k.min(out.capacity as usize) as u32;
    }

    /// The engine kernel of this submit (see [`super::kernel`]).
    fn kernel(
        &mut self,
        s: &Submit,
        tags: u64,
        n: usize,
        predicate: Option<(u8, u8, i64)>,
        init_mask: u32,
        init: &[u64; MAX_TASK_TENSORS],
    ) -> Result<KernelRef, RuntimeFailure> {
        if s.block_num < 1 {
            return Err(self.invalid(format!("block_num must be >= 1, got {}", s.block_num)));
        }
        let ids = s.kernel_ids;
        if ids.iter().all(|&i| i < 0) {
            return Err(self.invalid(
                "rt_submit_task: MixedKernels names no kernel (use rt_submit_dummy_task for a \
                 task without one)"
                    .into(),
            ));
        }
        if s.require_sync_start != 0 && s.block_num > 1 {
            let (aic, aiv) = A2A3_GEOMETRY;
            let aiv_only = ids[0] < 0 && (ids[1] < 0 || ids[2] < 0);
            let (have, what) = if aiv_only {
                (aiv, "AIV cores")
            } else {
                (aic, "clusters")
            };
            if s.block_num as usize > have {
                return Err(RuntimeFailure::new(
                    StatusCode::RequireSyncStartInvalid,
                    Some(self.o.current_ring()),
                    format!(
                        "require_sync_start with block_num {} but the chip has {have} {what}",
                        s.block_num
                    ),
                ));
            }
        }
        let plain = predicate.is_none() && init_mask == 0;
        if let (true, Some((i, b, t, nt, k))) = (plain, self.last_plain) {
            if i == ids && b == s.block_num as u16 && t == tags && nt == n as u8 {
                return Ok(k);
            }
        }
        let mut key = KernelKey {
            ids,
            block_num: s.block_num as u16,
            sync_start: s.require_sync_start != 0 && s.block_num > 1,
            tags,
            n_tensors: n as u8,
            predicate,
            init_mask,
            init: [0; MAX_TASK_TENSORS],
        };
        if init_mask != 0 {
            key.init = *init;
        }
        let k = match self.kernels.iter().rev().find(|(k, _)| *k == key) {
            Some((_, k)) => *k,
            None => {
                let k = self
                    .callable
                    .kernel_for(&key)
                    .map_err(|e| self.invalid(e))?;
                self.kernels.push((key.clone(), k));
                k
            }
        };
        if plain {
            self.last_plain = Some((key.ids, key.block_num, key.tags, key.n_tensors, k));
        }
        Ok(k)
    }

    /// A one-element tensor at `indices` of `rec`, read (`inout` false) or written by a
    /// dummy task this thread then waits for: the access is ordered after the
    /// element's creator and every overlapping writer, as the tensormap knows them.
    fn access(
        &mut self,
        rec: &ChipTensorAbi,
        ndims: u32,
        indices: *const u32,
        inout: bool,
        what: &str,
    ) -> Result<Tensor, RuntimeFailure> {
        let t = element(rec, ndims, indices).map_err(|e| self.invalid(format!("{what}: {e}")))?;
        if t.addr == 0 {
            return Err(self.invalid(format!("{what}: the tensor has no buffer")));
        }
        let mut a = TaskArgs::new();
        if inout {
            a.inout(t);
        } else {
            a.input(t);
        }
        let id = self.o.submit_dummy(&a)?.id;
        self.o.wait_task(id, what)?;
        if inout && t.owner.is_valid() {
            // A write also waits for the tasks that read the element's buffer through
            // its creator (as upstream's set_tensor_data does).
            self.o.wait_consumers(t.owner, what)?;
        }
        Ok(t)
    }
}

/// The one-element view of `rec` at `indices` (`ndims` of them).
fn element(rec: &ChipTensorAbi, ndims: u32, indices: *const u32) -> Result<Tensor, String> {
    let mut t = rec.tensor()?;
    if ndims != t.ndims as u32 {
        return Err(format!(
            "{ndims} indices for a tensor of {} dimensions",
            t.ndims
        ));
    }
    let mut off = t.offset;
    for d in 0..ndims as usize {
        // SAFETY: the caller passes ndims indices.
        let ix = unsafe { *indices.add(d) };
        if ix >= t.shape[d] {
            return Err(format!(
                "index {ix} of dimension {d} is outside its extent {}",
                t.shape[d]
            ));
        }
        off += ix as u64 * t.strides[d] as u64;
    }
    t.offset = off;
    t.ndims = 1;
    t.shape = [1; MAX_DIMS];
    t.strides = [1; MAX_DIMS];
    t.validate().map_err(|e| e.to_string())?;
    Ok(t)
}

/// The text of a C string (lossy; "" for null).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The run record behind `rt`.
///
/// # Safety
/// `rt` is the head of a live [`Runtime`] bound on this thread.
unsafe fn runtime<'x>(rt: *mut RuntimeHead) -> &'x mut Runtime<'x, 'x> {
    &mut *(rt as *mut Runtime<'x, 'x>)
}

/// Run `f` on the run record; a panic fails the run instead of unwinding into C++.
fn guarded<R>(rt: *mut RuntimeHead, dflt: R, f: impl FnOnce(&mut Runtime<'_, '_>) -> R) -> R {
    // SAFETY: the library calls the table with the runtime the chip bound.
    let r = unsafe { runtime(rt) };
    let r2 = r as *mut Runtime<'_, '_>;
    match std::panic::catch_unwind(AssertUnwindSafe(|| f(r))) {
        Ok(v) => v,
        Err(p) => {
            // SAFETY: the closure that borrowed the record has ended.
            let r = unsafe { &mut *r2 };
            let msg = crate::kernel::panic_text(&p);
            r.fail(RuntimeFailure::new(
                StatusCode::ExplicitOrchFatal,
                None,
                format!("taskring panicked inside an orchestration call: {msg}"),
            ));
            dflt
        }
    }
}

unsafe extern "C" fn op_submit(rt: *mut RuntimeHead, s: *const Submit, out: *mut Outputs) {
    // SAFETY: the header passes its own submit record and output storage.
    let (s, out) = unsafe { (&*s, &mut *out) };
    out.task_id = u64::MAX;
    out.count = 0;
    guarded(rt, (), |r| {
        if r.fatal_now() {
            return;
        }
        if let Err(f) = r.submit(s, out) {
            out.task_id = u64::MAX;
            out.count = 0;
            r.fail(f);
        }
    })
}

unsafe extern "C" fn op_scope_begin(
    rt: *mut RuntimeHead,
    mode: u8,
    file: *const c_char,
    line: i32,
) {
    guarded(rt, (), |r| {
        if r.fatal_now() {
            return;
        }
        let manual = mode == 1;
        let res = if r.o.stats_enabled() && !file.is_null() {
            // SAFETY: the header passes __builtin_FILE().
            let site = format!("{}:{line}", unsafe { text(file) });
            r.o.begin_scope_named(manual, &site)
        } else {
            r.o.begin_scope(manual)
        };
        if let Err(f) = res {
            r.fail(f);
        }
    })
}

unsafe extern "C" fn op_scope_end(rt: *mut RuntimeHead) {
    guarded(rt, (), |r| {
        if r.fatal_now() {
            return;
        }
        if let Err(f) = r.o.end_scope() {
            r.fail(f);
        }
    })
}

unsafe extern "C" fn op_orchestration_done(rt: *mut RuntimeHead) {
    guarded(rt, (), |r| r.done = true)
}

unsafe extern "C" fn op_is_fatal(rt: *mut RuntimeHead) -> i32 {
    guarded(rt, 1, |r| r.fatal_now() as i32)
}

unsafe extern "C" fn op_report_fatal(
    rt: *mut RuntimeHead,
    code: i32,
    func: *const c_char,
    msg: *const c_char,
) {
    guarded(rt, (), |r| {
        // SAFETY: the header passes __FUNCTION__ and its formatted text.
        let (func, msg) = unsafe { (text(func), text(msg)) };
        let status = u32::try_from(code)
            .ok()
            .and_then(StatusCode::from_code)
            .unwrap_or(StatusCode::ExplicitOrchFatal);
        let f = RuntimeFailure::new(
            status,
            None,
            format!("rt_report_fatal(code {code}) in {func}: {msg}"),
        );
        r.fail(f);
    })
}

unsafe extern "C" fn op_log(
    _rt: *mut RuntimeHead,
    level: i32,
    func: *const c_char,
    msg: *const c_char,
) {
    if level > super::log_level() && level != abi_log::ALWAYS {
        return;
    }
    // SAFETY: as in op_report_fatal.
    let (func, msg) = unsafe { (text(func), text(msg)) };
    let name = match level {
        abi_log::ERROR => "ERROR",
        abi_log::WARN => "WARN",
        abi_log::INFO => "INFO",
        abi_log::DEBUG => "DEBUG",
        abi_log::TIMING => "TIMING",
        _ => "LOG",
    };
    eprintln!("[taskring orchestration] {name} {func}: {msg}");
}

/// `TASKRING_PTO2_LOG_*`.
pub(crate) mod abi_log {
    pub const ERROR: i32 = 0;
    pub const WARN: i32 = 1;
    pub const INFO: i32 = 2;
    pub const DEBUG: i32 = 3;
    pub const ALWAYS: i32 = 4;
    pub const TIMING: i32 = 5;
}

unsafe extern "C" fn op_get_tensor_data(
    rt: *mut RuntimeHead,
    t: *const ChipTensorAbi,
    ndims: u32,
    indices: *const u32,
) -> u64 {
    guarded(rt, 0, |r| {
        if r.fatal_now() || t.is_null() {
            return 0;
        }
        // SAFETY: the header passes the caller's ChipTensor.
        let rec = unsafe { &*t };
        match r.access(rec, ndims, indices, false, "get_tensor_data") {
            Ok(e) => {
                let mut v = 0u64;
                // SAFETY: the element is inside its buffer and its writers completed.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        e.data_ptr() as *const u8,
                        &mut v as *mut u64 as *mut u8,
                        e.dtype.size_bytes(),
                    )
                };
                v
            }
            Err(f) => {
                r.fail(f);
                0
            }
        }
    })
}

unsafe extern "C" fn op_set_tensor_data(
    rt: *mut RuntimeHead,
    t: *const ChipTensorAbi,
    ndims: u32,
    indices: *const u32,
    value: u64,
) {
    guarded(rt, (), |r| {
        if r.fatal_now() || t.is_null() {
            return;
        }
        // SAFETY: as in op_get_tensor_data.
        let rec = unsafe { &*t };
        match r.access(rec, ndims, indices, true, "set_tensor_data") {
            Ok(e) => {
                let bytes = value.to_le_bytes();
                // SAFETY: the element is inside its buffer; its writers completed, and
                // the dummy writer that ordered this access is the newest one.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        e.data_ptr(),
                        e.dtype.size_bytes(),
                    )
                };
            }
            Err(f) => r.fail(f),
        }
    })
}

unsafe extern "C" fn op_cluster_count(rt: *mut RuntimeHead) -> i32 {
    guarded(rt, 0, |_| A2A3_GEOMETRY.0 as i32)
}

unsafe extern "C" fn op_aiv_count(rt: *mut RuntimeHead) -> i32 {
    guarded(rt, 0, |_| A2A3_GEOMETRY.1 as i32)
}
