//! Random programs checked against a sequential oracle.
//!
//! A generator interprets a vector of raw random words as a program over K (2..=4) host
//! tensors ([8, 8] f32 each, distinct contents) and the runtime outputs / allocations the
//! program makes: kernel tasks with 1..=3 INPUT / INOUT / OUTPUT_EXISTING views (full,
//! `rows_slice`, column halves, sub-blocks, 1-D rows, flat; some with `manual_dep`) and
//! runtime outputs, nested auto and manual scopes (depth <= 5, so ring 3 is shared by
//! depths 3..5), explicit deps (`dep` / `dep_wait`), `alloc`, dummy tasks. Every kernel
//! task runs one custom kernel ([`compute`]) that writes each writable tensor from all
//! readable ones and a salt. Runtime outputs are only used while their scope is open;
//! allocations are only read where something wrote them.
//!
//! Dependencies: the generator keeps a model of the edges the runtime is *guaranteed* to
//! infer (RAW and INOUT-WAW through the tensormap for tasks submitted outside manual
//! scopes, creator edges for runtime outputs) and adds an explicit dependency for every
//! earlier conflicting task the model does not already order before the new one (WAR,
//! WAW through OUTPUT_EXISTING, anything in or across manual scopes, where it also
//! depends directly on the creator of every runtime output it uses). So inference is
//! really tested: a missing inferred edge shows up as a wrong result or as an ordering
//! violation in the kernel log. Ops that would need more than 16 explicit deps are
//! dropped.
//!
//! Each program runs twice on one chip (2 cores): with the tightest sizing it is
//! feasible with, and with the default sizing. Tiny sizing per ring r, where B_r is the
//! most tasks of ring r that cannot retire at a submit (from the first task of a
//! still-open scope on: retirement is in order, so on ring 3 the tasks of ended inner
//! scopes stay live behind a pinned outer one) and P_r their output bytes:
//! window = max(4, next_pow2(B_r + 2)) (<= 16: the generator skips submits beyond),
//! heap = max(1 KiB, next_pow2(2 P_r + 2 × largest request)) (outputs round up to 1 KiB),
//! dep_pool = max(4, window × the largest fanin bound of the ring's tasks).
//!
//! The oracle runs the same ops sequentially on plain `Vec<f32>`s with the same kernel
//! function; final host buffers and every task's output hash must match bit for bit,
//! each kernel task must run exactly once, and every conflicting pair (overlapping
//! regions, at least one write) must have run in program order (end_i < start_j from a
//! global sequence counter).
//!
//! `TASKRING_ORACLE_SCALE=n` multiplies the number of cases (bug hunting).

mod common;

use common::mix::compute;
use common::{host, spec};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestError, TestRunner};
use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use taskring::fn_kernel;
use taskring::*;

// ----- limits -------------------------------------------------------------------------

/// Most submits (kernel, dummy and alloc tasks) per random program (ancestor sets are
/// `u64` bit sets: at most 64 tasks in any program).
const MAX_TASKS: usize = 40;
/// Largest task window the tiny sizing may need (the generator skips submits beyond).
const MAX_TINY_WINDOW: u64 = 16;
/// Deepest scope (the root scope is depth 0).
const MAX_DEPTH: usize = 5;
/// Every runtime output here is <= 256 bytes and is rounded up to 1 KiB by the runtime.
const OUT_BYTES: u64 = 1024;
const MAX_DEPS: usize = 16;
/// Raw words per generated op.
const RAW: usize = 32;
type RawOp = [u32; RAW];

// ----- the kernel ---------------------------------------------------------------------

/// Global sequence for start / end stamps of kernel runs.
static SEQ: AtomicU64 = AtomicU64::new(1);

#[derive(Clone, Copy, Debug)]
struct LogEntry {
    task: usize,
    start: u64,
    end: u64,
    hash: u64,
}
type Log = Mutex<Vec<LogEntry>>;

/// Scalars: salt (f64), task index, number of inouts, address of the run's [`Log`].
fn oracle_kernel() -> KernelRef {
    static K: OnceLock<KernelRef> = OnceLock::new();
    *K.get_or_init(|| {
        fn_kernel("oracle_mix", CoreKind::Any, |call| {
            let start = SEQ.fetch_add(1, SeqCst);
            let salt = call.scalar_f64(0);
            let task = call.scalar_i64(1) as usize;
            let n_inout = call.scalar_i64(2) as usize;
            let log = call.scalar_i64(3) as usize as *const Log;
            // Some tasks linger a few microseconds, so that a missing dependency shows
            // up as overlapping runs and the orchestrator meets full rings.
            for _ in 0..(task.wrapping_mul(2_654_435_761) >> 7) % 4 * 500 {
                std::hint::spin_loop();
            }
            let hash = compute(call.tensors, call.n_inputs, n_inout, salt);
            let end = SEQ.fetch_add(1, SeqCst);
            // safety: the log outlives the run (the caller keeps it until run returns,
            // and a run returns only after every core went idle).
            unsafe { &*log }.lock().unwrap().push(LogEntry {
                task,
                start,
                end,
                hash,
            });
        })
    })
}

fn kernel_scalars(a: &mut TaskArgs, salt: f64, task: usize, n_inout: usize, log: &Log) {
    a.scalar(Scalar::F64(salt))
        .scalar(Scalar::I64(task as i64))
        .scalar(Scalar::I64(n_inout as i64))
        .scalar(Scalar::I64(log as *const Log as usize as i64));
}

// ----- programs -----------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    In,
    InOut,
    OutEx,
}

impl Mode {
    fn tag(self) -> ArgTag {
        match self {
            Mode::In => ArgTag::Input,
            Mode::InOut => ArgTag::Inout,
            Mode::OutEx => ArgTag::OutputExisting,
        }
    }
    fn reads(self) -> bool {
        matches!(self, Mode::In | Mode::InOut)
    }
    fn writes(self) -> bool {
        matches!(self, Mode::InOut | Mode::OutEx)
    }
}

/// `(r0, r1, c0, c1)`, half-open, in buffer coordinates.
type Rect = (u32, u32, u32, u32);

fn overlap(a: Rect, b: Rect) -> bool {
    a.0 < b.1 && b.0 < a.1 && a.2 < b.3 && b.2 < a.3
}

/// A view of a `[rows, cols]` buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum View {
    Full,
    /// `rows_slice(a, b)`.
    Rows(u32, u32),
    /// Left (0) or right (1) column half, `view(&[rows, cols/2], h*cols/2, [cols, 1])`.
    Cols(u32),
    Block {
        r0: u32,
        nr: u32,
        c0: u32,
        nc: u32,
    },
    /// One row as a 1-D view.
    Row1d(u32),
    /// The whole buffer as a 1-D view.
    Flat,
}

impl View {
    fn pick(p: u32, rows: u32, cols: u32) -> View {
        let q = p >> 3;
        match p % 8 {
            0 => View::Full,
            1 | 2 => {
                let a = q % rows;
                View::Rows(a, a + 1 + (q / rows) % (rows - a))
            }
            3 | 4 => View::Cols(q % 2),
            5 | 6 => {
                let r0 = q % rows;
                let nr = 1 + (q / 8) % (rows - r0);
                let c0 = (q / 64) % cols;
                let nc = 1 + (q / 512) % (cols - c0);
                View::Block { r0, nr, c0, nc }
            }
            _ => {
                if q.is_multiple_of(2) {
                    View::Row1d((q / 2) % rows)
                } else {
                    View::Flat
                }
            }
        }
    }

    fn rect(self, rows: u32, cols: u32) -> Rect {
        match self {
            View::Full | View::Flat => (0, rows, 0, cols),
            View::Rows(a, b) => (a, b, 0, cols),
            View::Cols(h) => (0, rows, h * cols / 2, (h + 1) * cols / 2),
            View::Block { r0, nr, c0, nc } => (r0, r0 + nr, c0, c0 + nc),
            View::Row1d(r) => (r, r + 1, 0, cols),
        }
    }

    /// The view of `base` (a contiguous `[rows, cols]` tensor over the whole buffer).
    fn apply(self, base: Tensor) -> Tensor {
        let (rows, cols) = (base.shape()[0], base.shape()[1]);
        let c = cols as u64;
        let t = match self {
            View::Full => Ok(base),
            View::Rows(a, b) => base.rows_slice(a as u64, b as u64),
            View::Cols(h) => base.view(&[rows, cols / 2], h as u64 * c / 2, Some(&[cols, 1])),
            View::Block { r0, nr, c0, nc } => {
                base.view(&[nr, nc], r0 as u64 * c + c0 as u64, Some(&[cols, 1]))
            }
            View::Row1d(r) => base.view(&[cols], r as u64 * c, None),
            View::Flat => base.view(&[rows * cols], 0, None),
        };
        t.unwrap_or_else(|e| panic!("view {self:?} of {base:?}: {e}"))
    }
}

#[derive(Clone, Copy, Debug)]
enum PArg {
    /// An existing buffer (host tensor, runtime output or allocation) through a view;
    /// `md`: the view's `manual_dep` flag (no tensormap lookup / insert for it).
    Ex {
        buf: usize,
        view: View,
        mode: Mode,
        md: bool,
    },
    /// A runtime-allocated output `[rows, cols]` (tag OUTPUT); becomes the next buffer.
    Out { rows: u32, cols: u32 },
}

#[derive(Clone, Copy, Debug)]
struct Dep {
    task: usize,
    /// `dep_wait` (ordering only) instead of `dep` (wait + retain).
    wait_only: bool,
}

#[derive(Clone, Debug)]
enum Op {
    Begin {
        manual: bool,
    },
    End,
    Task {
        id: usize,
        args: Vec<PArg>,
        deps: Vec<Dep>,
        salt: f64,
    },
    Dummy {
        id: usize,
        args: Vec<PArg>,
        deps: Vec<Dep>,
    },
    Alloc {
        id: usize,
        shapes: Vec<(u32, u32)>,
    },
}

struct Prog {
    /// Initial contents of the host buffers (`[8, 8]` each).
    init: Vec<Vec<f32>>,
    ops: Vec<Op>,
    n_tasks: usize,
    /// Shape of every buffer, in creation order (host buffers first).
    buf_shapes: Vec<(u32, u32)>,
    kernel_tasks: Vec<usize>,
    /// Pairs `(i, j)`, `i < j`, of kernel tasks whose accesses conflict.
    conflicts: Vec<(usize, usize)>,
    /// Explicit deps the generator had to add (not counting random extra ones).
    required_deps: usize,
    /// Tasks whose fanin may exceed the 16 inline edges.
    wide_tasks: usize,
    tiny: RingSizing,
}

fn fmt_args(args: &[PArg], next_buf: &mut usize) -> String {
    let mut s = Vec::new();
    for a in args {
        match *a {
            PArg::Ex {
                buf,
                view,
                mode,
                md,
            } => s.push(format!(
                "{mode:?}(b{buf}.{view:?}{})",
                if md { " manual_dep" } else { "" }
            )),
            PArg::Out { rows, cols } => {
                s.push(format!("Out[{rows}x{cols}]->b{next_buf}"));
                *next_buf += 1;
            }
        }
    }
    s.join(", ")
}

fn fmt_deps(deps: &[Dep]) -> String {
    if deps.is_empty() {
        return String::new();
    }
    let d: Vec<String> = deps
        .iter()
        .map(|d| format!("{}t{}", if d.wait_only { "wait:" } else { "" }, d.task))
        .collect();
    format!(" deps [{}]", d.join(", "))
}

impl fmt::Debug for Prog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Prog: {} host buffers, {} tasks, {} conflicting pairs, {} required explicit deps",
            self.init.len(),
            self.n_tasks,
            self.conflicts.len(),
            self.required_deps
        )?;
        writeln!(
            f,
            "  tiny sizing: window {:?} heap {:?} dep_pool {:?}",
            self.tiny.task_window, self.tiny.heap, self.tiny.dep_pool
        )?;
        let mut depth = 0usize;
        let mut next_buf = self.init.len();
        for op in &self.ops {
            let ind = "  ".repeat(depth + 1);
            match op {
                Op::Begin { manual } => {
                    writeln!(f, "{ind}begin_scope(manual={manual})")?;
                    depth += 1;
                }
                Op::End => {
                    depth = depth.saturating_sub(1);
                    writeln!(f, "{}end_scope()", "  ".repeat(depth + 1))?;
                }
                Op::Task {
                    id,
                    args,
                    deps,
                    salt,
                } => writeln!(
                    f,
                    "{ind}t{id} = task(salt={salt}; {}){}",
                    fmt_args(args, &mut next_buf),
                    fmt_deps(deps)
                )?,
                Op::Dummy { id, args, deps } => writeln!(
                    f,
                    "{ind}t{id} = dummy({}){}",
                    fmt_args(args, &mut next_buf),
                    fmt_deps(deps)
                )?,
                Op::Alloc { id, shapes } => {
                    let bufs: Vec<String> = (0..shapes.len())
                        .map(|i| format!("b{}", next_buf + i))
                        .collect();
                    next_buf += shapes.len();
                    writeln!(f, "{ind}t{id} = alloc({shapes:?}) -> {}", bufs.join(", "))?
                }
            }
        }
        Ok(())
    }
}

// ----- the generator ------------------------------------------------------------------

/// Shapes of runtime outputs and allocations (even column counts: column halves exist).
const OUT_SHAPES: [(u32, u32); 4] = [(8, 8), (4, 8), (8, 4), (4, 4)];

#[derive(Clone, Copy)]
struct Acc {
    buf: usize,
    rect: Rect,
    write: bool,
}

fn conflict(a: &[Acc], b: &[Acc]) -> bool {
    a.iter().any(|x| {
        b.iter()
            .any(|y| x.buf == y.buf && (x.write || y.write) && overlap(x.rect, y.rect))
    })
}

struct GTask {
    ring: usize,
    frame: usize,
    bytes: u64,
    kernel: bool,
    acc: Vec<Acc>,
    /// Tasks guaranteed to complete before this one starts (bit set).
    anc: u64,
}

struct GBuf {
    rows: u32,
    cols: u32,
    /// Task that created it (runtime output or allocation).
    owner: Option<usize>,
    /// Scope frame it was created in (None: host buffer, always valid).
    frame: Option<usize>,
    /// Elements written so far (allocations start uninitialised).
    init: Vec<bool>,
}

impl GBuf {
    fn all_init(&self, r: Rect) -> bool {
        (r.0..r.1).all(|i| (r.2..r.3).all(|j| self.init[(i * self.cols + j) as usize]))
    }
    fn set_init(&mut self, r: Rect) {
        for i in r.0..r.1 {
            for j in r.2..r.3 {
                self.init[(i * self.cols + j) as usize] = true;
            }
        }
    }
}

#[derive(Default)]
struct RingNeeds {
    /// Max live-and-unretirable tasks before a submit (tasks from the first task of a
    /// still-open scope on, retirement being in order).
    blocked: u64,
    blocked_bytes: u64,
    largest_bytes: u64,
    max_fanin: u64,
}

struct Gen {
    ops: Vec<Op>,
    tasks: Vec<GTask>,
    bufs: Vec<GBuf>,
    /// Tensormap writers the runtime knows: (task, buf, rect), auto context only.
    writers: Vec<(usize, usize, Rect)>,
    /// Open scope frames (id, manual); frame 0 is the root scope.
    frames: Vec<(usize, bool)>,
    next_frame: usize,
    conflicts: Vec<(usize, usize)>,
    required_deps: usize,
    wide_tasks: usize,
    needs: [RingNeeds; 4],
}

/// Op kind thresholds (out of 100) per profile: task, begin auto, begin manual, end,
/// alloc, dummy; the rest are tasks. Profile 2 ("wide") also adds many random explicit
/// deps, for fanins beyond the 16 edges held inline (spill pool).
const PROFILES: [[u32; 6]; 3] = [
    [55, 63, 67, 79, 86, 93],
    [40, 54, 64, 76, 83, 91],
    [65, 71, 74, 82, 86, 94],
];

impl Gen {
    fn new(k: usize) -> Gen {
        let bufs = (0..k)
            .map(|_| GBuf {
                rows: 8,
                cols: 8,
                owner: None,
                frame: None,
                init: vec![true; 64],
            })
            .collect();
        Gen {
            ops: Vec::new(),
            tasks: Vec::new(),
            bufs,
            writers: Vec::new(),
            frames: vec![(0, false)],
            next_frame: 1,
            conflicts: Vec::new(),
            required_deps: 0,
            wide_tasks: 0,
            needs: Default::default(),
        }
    }

    fn depth(&self) -> usize {
        self.frames.len() - 1
    }
    fn ring(&self) -> usize {
        self.depth().min(3)
    }
    fn manual_ctx(&self) -> bool {
        self.frames.iter().any(|f| f.1)
    }
    fn frame_open(&self, f: usize) -> bool {
        self.frames.iter().any(|x| x.0 == f)
    }

    /// (tasks, bytes) of `ring` that cannot retire while the current scopes stay open.
    fn blocked(&self, ring: usize) -> (u64, u64) {
        let first = self
            .tasks
            .iter()
            .position(|t| t.ring == ring && self.frame_open(t.frame));
        match first {
            None => (0, 0),
            Some(i) => self.tasks[i..]
                .iter()
                .filter(|t| t.ring == ring)
                .fold((0, 0), |(n, b), t| (n + 1, b + t.bytes)),
        }
    }

    /// Room for one more task (at most MAX_TASKS, and the current ring's tiny window
    /// stays within MAX_TINY_WINDOW)?
    fn admit(&self) -> bool {
        self.tasks.len() < MAX_TASKS && self.blocked(self.ring()).0 + 2 <= MAX_TINY_WINDOW
    }

    fn record_needs(&mut self, blocked: (u64, u64), bytes: u64, fanin: u64) {
        let r = self.ring();
        let nd = &mut self.needs[r];
        nd.blocked = nd.blocked.max(blocked.0);
        nd.blocked_bytes = nd.blocked_bytes.max(blocked.1);
        nd.largest_bytes = nd.largest_bytes.max(bytes);
        nd.max_fanin = nd.max_fanin.max(fanin);
    }

    fn avail_bufs(&self) -> Vec<usize> {
        (0..self.bufs.len())
            .filter(|&b| self.bufs[b].frame.is_none_or(|f| self.frame_open(f)))
            .collect()
    }

    fn step(&mut self, r: &RawOp, profile: usize) {
        let th = PROFILES[profile];
        let k = r[0] % 100;
        if k < th[0] {
            self.task(r, true, profile);
        } else if k < th[1] {
            // An auto scope is not allowed inside a manual one: open a manual one there.
            let manual = self.manual_ctx();
            self.begin(manual);
        } else if k < th[2] {
            self.begin(true);
        } else if k < th[3] {
            if self.depth() > 0 {
                self.end();
            }
        } else if k < th[4] {
            self.alloc(r);
        } else if k < th[5] {
            self.task(r, false, profile);
        } else {
            self.task(r, true, profile);
        }
    }

    fn end(&mut self) {
        assert!(self.depth() > 0);
        self.frames.pop();
        self.ops.push(Op::End);
    }

    fn begin(&mut self, manual: bool) {
        if self.depth() < MAX_DEPTH {
            self.frames.push((self.next_frame, manual));
            self.next_frame += 1;
            self.ops.push(Op::Begin { manual });
        }
    }

    fn alloc(&mut self, r: &RawOp) {
        if !self.admit() {
            return;
        }
        let n = 1 + (r[1] % 2) as usize;
        let shapes: Vec<(u32, u32)> = (0..n)
            .map(|i| OUT_SHAPES[(r[2 + i] % 4) as usize])
            .collect();
        self.alloc_shapes(shapes);
    }

    /// `o.alloc(...)`: returns the task id; the buffers are the next ones.
    fn alloc_shapes(&mut self, shapes: Vec<(u32, u32)>) -> usize {
        let blocked = self.blocked(self.ring());
        let id = self.tasks.len();
        let bytes = OUT_BYTES * shapes.len() as u64;
        self.record_needs(blocked, bytes, 0);
        let frame = self.frames.last().unwrap().0;
        for &(rows, cols) in &shapes {
            self.bufs.push(GBuf {
                rows,
                cols,
                owner: Some(id),
                frame: Some(frame),
                init: vec![false; (rows * cols) as usize],
            });
        }
        self.tasks.push(GTask {
            ring: self.ring(),
            frame,
            bytes,
            kernel: false,
            acc: vec![],
            anc: 0,
        });
        self.ops.push(Op::Alloc { id, shapes });
        id
    }

    /// A kernel task (`kernel`) or a dummy task, from raw words.
    fn task(&mut self, r: &RawOp, kernel: bool, profile: usize) {
        if !self.admit() {
            return;
        }
        let id = self.tasks.len();
        let avail = self.avail_bufs();
        let n_ex = if kernel { 1 + r[1] % 3 } else { r[1] % 3 } as usize;
        let n_out = if kernel {
            [0, 0, 0, 1, 2][(r[2] % 5) as usize]
        } else {
            0
        };

        let mut args: Vec<PArg> = Vec::new();
        for a in 0..n_ex {
            let f = &r[3 + 3 * a..6 + 3 * a];
            let buf = avail[f[0] as usize % avail.len()];
            let (rows, cols) = (self.bufs[buf].rows, self.bufs[buf].cols);
            let view = View::pick(f[2], rows, cols);
            let mut mode = [Mode::In, Mode::InOut, Mode::OutEx][(f[1] % 3) as usize];
            // Never read what no task wrote yet (allocations): write it instead.
            if kernel && mode.reads() && !self.bufs[buf].all_init(view.rect(rows, cols)) {
                mode = Mode::OutEx;
            }
            let md = (r[22] >> (4 * a)) & 7 == 0;
            args.push(PArg::Ex {
                buf,
                view,
                mode,
                md,
            });
        }
        for o in 0..n_out {
            let (rows, cols) = OUT_SHAPES[(r[12 + o] % 4) as usize];
            let pos = r[14 + o] as usize % (args.len() + 1);
            args.insert(pos, PArg::Out { rows, cols });
        }

        // Random extra deps.
        let mut wait_bits = r[20];
        let n_extra = match (profile, kernel) {
            (2, true) => (r[16] % 12) as usize,
            (2, false) => (r[16] % 17) as usize,
            (_, true) => [0, 0, 0, 0, 1, 2][(r[16] % 6) as usize],
            (_, false) => (r[16] % 4) as usize,
        };
        let selector = |s: usize| {
            if s < 3 {
                r[17 + s]
            } else {
                r[17 + s % 3]
                    .wrapping_mul(0x9E37_79B9)
                    .wrapping_add((s as u32).wrapping_mul(0x85EB_CA6B))
                    .rotate_left(s as u32)
            }
        };
        let mut extra = Vec::new();
        if id > 0 {
            for s in 0..n_extra {
                extra.push(Dep {
                    task: selector(s) as usize % id,
                    wait_only: wait_bits & 1 == 1,
                });
                wait_bits = wait_bits.rotate_right(1);
            }
        }
        let salt = (r[21] % 64) as f64 * 0.0625;
        self.submit_task(kernel, args, extra, salt, wait_bits);
    }

    /// Submit a kernel task (`kernel`) or a dummy task with `args` and the explicit deps
    /// `extra`, adding the deps the runtime will not infer (flags from `wait_bits`, bit
    /// by bit: 1 = `dep_wait`). Returns its id, or None when it would need more than
    /// MAX_DEPS explicit deps (the op is dropped).
    fn submit_task(
        &mut self,
        kernel: bool,
        args: Vec<PArg>,
        extra: Vec<Dep>,
        salt: f64,
        mut wait_bits: u32,
    ) -> Option<usize> {
        let id = self.tasks.len();
        let manual = self.manual_ctx();
        let blocked = self.blocked(self.ring());

        // Accesses (kernel tasks only: a dummy touches no memory).
        let mut acc = Vec::new();
        if kernel {
            let mut next_buf = self.bufs.len();
            for a in &args {
                match *a {
                    PArg::Ex {
                        buf, view, mode, ..
                    } => {
                        let b = &self.bufs[buf];
                        let rect = view.rect(b.rows, b.cols);
                        assert!(
                            b.frame.is_none_or(|f| self.frame_open(f)),
                            "b{buf} used after its scope ended"
                        );
                        assert!(
                            !mode.reads() || b.all_init(rect),
                            "b{buf} read before it was written"
                        );
                        acc.push(Acc {
                            buf,
                            rect,
                            write: mode.writes(),
                        });
                    }
                    PArg::Out { rows, cols } => {
                        acc.push(Acc {
                            buf: next_buf,
                            rect: (0, rows, 0, cols),
                            write: true,
                        });
                        next_buf += 1;
                    }
                }
            }
        }

        let tasks = &self.tasks;
        let edge = |anc: &mut u64, i: usize| *anc |= tasks[i].anc | (1u64 << i);
        let mut next_wait = || {
            let w = wait_bits & 1 == 1;
            wait_bits = wait_bits.rotate_right(1);
            w
        };
        let mut anc = 0u64;
        for d in &extra {
            edge(&mut anc, d.task);
        }
        let mut deps = extra;
        // Edges the runtime infers outside manual scopes: creator edges, and tensormap
        // lookups (INPUT / INOUT) against earlier INOUT / OUTPUT_EXISTING writers.
        let mut fanin_set = anc_bits(&deps);
        if !manual {
            for a in &args {
                if let PArg::Ex {
                    buf,
                    view,
                    mode,
                    md,
                } = *a
                {
                    let b = &self.bufs[buf];
                    // The creator edge applies even to a manual_dep view.
                    if let Some(o) = b.owner {
                        edge(&mut anc, o);
                        fanin_set |= 1 << o;
                    }
                    if mode.reads() && !md {
                        let rect = view.rect(b.rows, b.cols);
                        for &(w, wb, wr) in &self.writers {
                            // Fanin bound: the tensormap is keyed on addresses, and a heap
                            // address may be reused while a writer of its previous buffer
                            // is still alive (a harmless extra edge).
                            let heap = b.owner.is_some() && self.bufs[wb].owner.is_some();
                            if wb == buf || heap {
                                fanin_set |= 1 << w;
                            }
                            if wb == buf && overlap(wr, rect) {
                                edge(&mut anc, w);
                            }
                        }
                    }
                }
            }
        }
        let mut required = 0usize;
        let mut conflicts = Vec::new();
        if kernel {
            if manual {
                // No creator edges in manual scopes: depend (and retain) directly on the
                // creator of every runtime output / allocation used.
                for a in &args {
                    if let PArg::Ex { buf, .. } = *a {
                        if let Some(o) = self.bufs[buf].owner {
                            if !deps.iter().any(|d| d.task == o && !d.wait_only) {
                                deps.push(Dep {
                                    task: o,
                                    wait_only: false,
                                });
                                required += 1;
                            }
                            edge(&mut anc, o);
                        }
                    }
                }
            }
            for i in (0..id).rev() {
                if tasks[i].kernel && conflict(&tasks[i].acc, &acc) {
                    conflicts.push((i, id));
                    if anc & (1 << i) == 0 {
                        deps.push(Dep {
                            task: i,
                            wait_only: next_wait(),
                        });
                        required += 1;
                        edge(&mut anc, i);
                    }
                }
            }
        }
        if deps.len() > MAX_DEPS {
            return None; // drop the op
        }
        fanin_set |= anc_bits(&deps);
        let fanin = fanin_set.count_ones() as u64;

        // Commit.
        let n_out = args
            .iter()
            .filter(|a| matches!(a, PArg::Out { .. }))
            .count();
        let bytes = OUT_BYTES * n_out as u64;
        self.record_needs(blocked, bytes, fanin);
        let frame = self.frames.last().unwrap().0;
        for a in &args {
            match *a {
                PArg::Ex {
                    buf,
                    view,
                    mode,
                    md,
                } => {
                    let (rows, cols) = (self.bufs[buf].rows, self.bufs[buf].cols);
                    let rect = view.rect(rows, cols);
                    if kernel && mode.writes() {
                        self.bufs[buf].set_init(rect);
                    }
                    if !manual && !md && mode.writes() {
                        self.writers.push((id, buf, rect));
                    }
                }
                PArg::Out { rows, cols } => self.bufs.push(GBuf {
                    rows,
                    cols,
                    owner: Some(id),
                    frame: Some(frame),
                    init: vec![true; (rows * cols) as usize],
                }),
            }
        }
        self.conflicts.extend(conflicts.into_iter().rev());
        self.required_deps += required;
        self.wide_tasks += (fanin > 16) as usize;
        self.tasks.push(GTask {
            ring: self.ring(),
            frame,
            bytes,
            kernel,
            acc,
            anc,
        });
        if kernel {
            self.ops.push(Op::Task {
                id,
                args,
                deps,
                salt,
            });
        } else {
            assert!(n_out == 0, "dummy tasks take no runtime outputs here");
            self.ops.push(Op::Dummy { id, args, deps });
        }
        Some(id)
    }

    fn finish(self, k: usize) -> Prog {
        assert!(self.tasks.len() <= 64);
        let mut w = [0u64; 4];
        let mut h = [0u64; 4];
        let mut d = [0u64; 4];
        for r in 0..4 {
            let n = &self.needs[r];
            // admission: live + 1 < window, with `blocked` tasks that cannot retire.
            w[r] = (n.blocked + 2).next_power_of_two().max(4);
            // A request never straddles the heap end: room for twice the pinned bytes
            // and twice the largest request covers the abandoned end gap.
            h[r] = (2 * n.blocked_bytes + 2 * n.largest_bytes)
                .next_power_of_two()
                .max(1024);
            // At most window - 1 live tasks, each with at most max_fanin pool entries
            // (dependency nodes and spill entries each have a pool of this size).
            d[r] = (w[r] * n.max_fanin).max(4);
        }
        let tiny = RingSizing::from_values(w, h, d).unwrap_or_else(|e| panic!("{e}"));
        let init = (0..k)
            .map(|b| {
                (0..64)
                    .map(|i| (b * 64 + i) as f32 * 0.03125 - 1.0 - b as f32)
                    .collect()
            })
            .collect();
        Prog {
            init,
            n_tasks: self.tasks.len(),
            buf_shapes: self.bufs.iter().map(|b| (b.rows, b.cols)).collect(),
            kernel_tasks: (0..self.tasks.len())
                .filter(|&i| self.tasks[i].kernel)
                .collect(),
            conflicts: self.conflicts,
            required_deps: self.required_deps,
            wide_tasks: self.wide_tasks,
            ops: self.ops,
            tiny,
        }
    }
}

fn anc_bits(deps: &[Dep]) -> u64 {
    deps.iter().fold(0, |s, d| s | (1u64 << d.task))
}

fn generate(k: usize, raws: &[RawOp], profile: usize) -> Prog {
    let mut g = Gen::new(k);
    for r in raws {
        if g.tasks.len() >= MAX_TASKS {
            break;
        }
        g.step(r, profile);
    }
    g.finish(k)
}

// ----- running on the chip ------------------------------------------------------------

fn oracle_chip() -> ChipWorker {
    // A long backstop: a loaded CI machine must not turn slowness into a failure.
    ChipWorker::new(ChipOptions {
        cores: 2,
        backstop: Duration::from_secs(20),
        ..Default::default()
    })
    .expect("chip")
}

/// One core thread, and the orchestrator runs ready tasks while it waits.
fn helping_chip() -> ChipWorker {
    ChipWorker::new(ChipOptions {
        cores: 1,
        orchestrator_helps: true,
        backstop: Duration::from_secs(20),
        ..Default::default()
    })
    .expect("chip")
}

fn run_ops(
    o: &mut Orchestrator<'_>,
    args: &[Arg<'_>],
    p: &Prog,
    log: &Log,
) -> Result<(), RuntimeFailure> {
    let k = oracle_kernel();
    let mut bufs: Vec<Tensor> = args.iter().map(|a| a.tensor()).collect::<Result<_, _>>()?;
    let mut ids: Vec<TaskId> = Vec::with_capacity(p.n_tasks);
    for op in &p.ops {
        match op {
            Op::Begin { manual } => o.begin_scope(*manual)?,
            Op::End => o.end_scope()?,
            Op::Task { id, args, deps, .. } | Op::Dummy { id, args, deps } => {
                let mut a = TaskArgs::new();
                let mut n_inout = 0;
                for arg in args {
                    match *arg {
                        PArg::Ex {
                            buf,
                            view,
                            mode,
                            md,
                        } => {
                            n_inout += (mode == Mode::InOut) as usize;
                            let mut t = view.apply(bufs[buf]);
                            t.manual_dep = md;
                            a.tensor(mode.tag(), t);
                        }
                        PArg::Out { rows, cols } => {
                            a.output(spec(&[rows, cols]));
                        }
                    }
                }
                for d in deps {
                    if d.wait_only {
                        a.dep_wait(ids[d.task]);
                    } else {
                        a.dep(ids[d.task]);
                    }
                }
                let out = if let Op::Task { salt, .. } = op {
                    kernel_scalars(&mut a, *salt, *id, n_inout, log);
                    o.submit(k, &a)?
                } else {
                    o.submit_dummy(&a)?
                };
                assert_eq!(ids.len(), *id);
                ids.push(out.id);
                bufs.extend(out.outputs());
            }
            Op::Alloc { id, shapes } => {
                let specs: Vec<TensorSpec> = shapes.iter().map(|&(r, c)| spec(&[r, c])).collect();
                let out = o.alloc(&specs)?;
                assert_eq!(ids.len(), *id);
                ids.push(out.id);
                bufs.extend(out.outputs());
            }
        }
    }
    Ok(())
}

struct RunResult {
    host: Vec<Vec<f32>>,
    log: Vec<LogEntry>,
    report: RunReport,
}

fn run_on_chip(
    chip: &mut ChipWorker,
    p: &Arc<Prog>,
    sizing: &RingSizing,
    label: &'static str,
) -> Result<RunResult, RuntimeFailure> {
    let log: Box<Log> = Box::new(Mutex::new(Vec::with_capacity(64)));
    let log_addr = &*log as *const Log as usize;
    let pc = p.clone();
    let program = Program::new("oracle", move |o, args| {
        // safety: `log` outlives the run (see below).
        let log = unsafe { &*(log_addr as *const Log) };
        run_ops(o, args, &pc, log)
    });
    let mut hostbufs = p.init.clone();
    let _watch = Watch::start(p.clone(), label);
    let report = {
        let args: Vec<Arg<'_>> = hostbufs.iter_mut().map(|v| host(v, &[8, 8])).collect();
        chip.run_with_sizing(&program, &args, sizing)?
    };
    let log = std::mem::take(&mut *log.lock().unwrap());
    Ok(RunResult {
        host: hostbufs,
        log,
        report,
    })
}

// ----- the oracle ---------------------------------------------------------------------

struct Expected {
    host: Vec<Vec<f32>>,
    hash: Vec<Option<u64>>,
}

fn oracle(p: &Prog) -> Expected {
    let mut mem: Vec<Vec<f32>> = p.init.clone();
    let mut hash = vec![None; p.n_tasks];
    let base = |mem: &mut Vec<Vec<f32>>, b: usize| {
        let (r, c) = p.buf_shapes[b];
        Tensor::from_raw(mem[b].as_mut_ptr() as u64, &[r, c], DType::F32)
    };
    for op in &p.ops {
        match op {
            Op::Task { id, args, salt, .. } => {
                // Runtime outputs become buffers first (argument order), then the tensors
                // go into canonical order: inputs, inouts, outputs (OUTPUT and
                // OUTPUT_EXISTING in argument order).
                let mut groups: [Vec<Tensor>; 3] = Default::default();
                let mut outs = Vec::new();
                for a in args {
                    if let PArg::Out { rows, cols } = *a {
                        outs.push(mem.len());
                        mem.push(vec![0f32; (rows * cols) as usize]);
                    }
                }
                let mut oi = 0;
                for a in args {
                    match *a {
                        PArg::Ex {
                            buf, view, mode, ..
                        } => {
                            let g = match mode {
                                Mode::In => 0,
                                Mode::InOut => 1,
                                Mode::OutEx => 2,
                            };
                            let t = view.apply(base(&mut mem, buf));
                            groups[g].push(t);
                        }
                        PArg::Out { .. } => {
                            let t = base(&mut mem, outs[oi]);
                            oi += 1;
                            groups[2].push(t);
                        }
                    }
                }
                let (n_in, n_inout) = (groups[0].len(), groups[1].len());
                let ts: Vec<Tensor> = groups.concat();
                hash[*id] = Some(compute(&ts, n_in, n_inout, *salt));
            }
            Op::Alloc { shapes, .. } => {
                for &(r, c) in shapes {
                    mem.push(vec![0f32; (r * c) as usize]);
                }
            }
            Op::Dummy { .. } | Op::Begin { .. } | Op::End => {}
        }
    }
    mem.truncate(p.init.len());
    Expected { host: mem, hash }
}

fn check(p: &Prog, label: &str, got: &RunResult, exp: &Expected) -> Result<(), String> {
    if got.report.tasks != p.n_tasks as u64 {
        return Err(format!(
            "{label}: report says {} tasks, the program submits {}",
            got.report.tasks, p.n_tasks
        ));
    }
    let mut seen: Vec<Option<LogEntry>> = vec![None; p.n_tasks];
    for e in &got.log {
        if e.task >= p.n_tasks || exp.hash[e.task].is_none() {
            return Err(format!("{label}: t{} ran but is not a kernel task", e.task));
        }
        if seen[e.task].is_some() {
            return Err(format!("{label}: t{} ran twice", e.task));
        }
        seen[e.task] = Some(*e);
    }
    for &t in &p.kernel_tasks {
        match seen[t] {
            None => return Err(format!("{label}: kernel task t{t} never ran")),
            Some(e) if Some(e.hash) != exp.hash[t] => {
                return Err(format!(
                    "{label}: t{t} wrote different values than the oracle (hash {:#x} vs {:#x})",
                    e.hash,
                    exp.hash[t].unwrap()
                ))
            }
            _ => {}
        }
    }
    for &(i, j) in &p.conflicts {
        let (a, b) = (seen[i].unwrap(), seen[j].unwrap());
        if a.end >= b.start {
            return Err(format!(
                "{label}: conflicting t{i} and t{j} overlapped in time (t{i} ran {}..{}, t{j} ran {}..{})",
                a.start, a.end, b.start, b.end
            ));
        }
    }
    for (b, (g, e)) in got.host.iter().zip(&exp.host).enumerate() {
        if let Some(i) = (0..g.len()).find(|&i| g[i].to_bits() != e[i].to_bits()) {
            return Err(format!("{label}: host buffer b{b} differs at element {i} (row {}, col {}): got {} expected {}", i / 8, i % 8, g[i], e[i]));
        }
    }
    Ok(())
}

/// Run `p` with its tiny sizing and with the default sizing; compare with the oracle.
/// Returns whether the tiny run filled some ring's task window (back-pressure).
fn check_program(chip: &mut ChipWorker, p: &Arc<Prog>) -> Result<bool, String> {
    let exp = oracle(p);
    let mut full = false;
    for (label, sizing) in [
        ("tiny sizing", p.tiny),
        ("default sizing", RingSizing::default()),
    ] {
        let got = run_on_chip(chip, p, &sizing, label)
            .map_err(|e| format!("{label}: run failed: {e}"))?;
        check(p, label, &got, &exp)?;
        if label == "tiny sizing" {
            full = (0..4).any(|r| got.report.peak.task_window[r] + 1 == sizing.task_window[r]);
        }
    }
    Ok(full)
}

// ----- watchdog -----------------------------------------------------------------------

/// Aborts the process (printing the program) if one run takes longer than a minute, so a
/// runtime hang shows what hung instead of stalling CI.
struct Watch(u64);

type Watched = Mutex<Vec<(u64, Instant, Arc<Prog>, &'static str)>>;

fn watched() -> &'static Watched {
    static W: OnceLock<Watched> = OnceLock::new();
    W.get_or_init(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_secs(1));
            let w = watched().lock().unwrap();
            if let Some((_, _, p, label)) =
                w.iter().find(|e| e.1.elapsed() > Duration::from_secs(60))
            {
                eprintln!("oracle watchdog: a run ({label}) has not finished after 60 s:\n{p:?}");
                std::process::abort();
            }
        });
        Mutex::new(Vec::new())
    })
}

impl Watch {
    fn start(p: Arc<Prog>, label: &'static str) -> Watch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, SeqCst);
        watched()
            .lock()
            .unwrap()
            .push((id, Instant::now(), p, label));
        Watch(id)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        watched().lock().unwrap().retain(|e| e.0 != self.0);
    }
}

// ----- property tests -----------------------------------------------------------------

fn raw_program() -> impl Strategy<Value = (usize, Vec<RawOp>)> {
    (
        2usize..=4,
        prop::collection::vec(prop::array::uniform32(any::<u32>()), 1..64),
    )
}

fn property(profile: usize, cases: u32) {
    property_on(profile, cases, oracle_chip);
}

fn property_on(profile: usize, cases: u32, make_chip: fn() -> ChipWorker) {
    // TASKRING_ORACLE_SCALE=n runs n times the cases (bug hunting).
    let scale = std::env::var("TASKRING_ORACLE_SCALE")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let cases = cases * scale;
    let config = PtConfig {
        cases,
        failure_persistence: None,
        ..PtConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let chip = RefCell::new(make_chip());
    let t0 = Instant::now();
    let stats = RefCell::new((0usize, 0usize, 0usize, 0usize, 0usize));
    let r = runner.run(&raw_program(), |(k, raws)| {
        let p = Arc::new(generate(k, &raws, profile));
        let full = check_program(&mut chip.borrow_mut(), &p)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{p:?}")))?;
        let mut s = stats.borrow_mut();
        s.0 += p.n_tasks;
        s.1 += p.conflicts.len();
        s.2 += p.required_deps;
        s.3 += full as usize;
        s.4 += p.wide_tasks;
        Ok(())
    });
    let s = stats.borrow();
    eprintln!(
        "oracle profile {profile}: {cases} cases in {:.2} s: {} tasks, {} conflicting pairs, {} explicit deps the \
         generator had to add (the rest is inferred), {} tiny runs filled a task window, {} tasks with a possible \
         fanin > 16",
        t0.elapsed().as_secs_f64(),
        s.0,
        s.1,
        s.2,
        s.3,
        s.4
    );
    match r {
        Ok(()) => {}
        Err(TestError::Fail(why, (k, raws))) => {
            panic!(
                "oracle mismatch (minimal case: k={k}, {} raw ops):\n{why}",
                raws.len()
            )
        }
        Err(e) => panic!("{e}"),
    }
}

/// Mixed programs: tasks, scopes (auto and manual), allocations, dummies.
#[test]
fn oracle_mixed_programs() {
    property(0, 1000);
}

/// Mixed programs on a chip whose orchestrator runs tasks while it waits (one core).
#[test]
fn oracle_mixed_programs_orchestrator_helps() {
    property_on(0, 400, helping_chip);
}

/// Programs that nest deeper (ring 3 shared by depths 3..5) and open more manual scopes.
#[test]
fn oracle_deep_and_manual_programs() {
    property(1, 600);
}

/// Programs with many explicit deps per task (fanins beyond the inline 16).
#[test]
fn oracle_wide_fanin_programs() {
    property(2, 400);
}

// ----- focused tests ------------------------------------------------------------------

/// A small fixed program (for "the chip still works" checks).
fn fixed_program() -> Arc<Prog> {
    let mut raws = Vec::new();
    for i in 0..24u32 {
        let mut r = [0u32; RAW];
        for (j, x) in r.iter_mut().enumerate() {
            *x = (i + 1)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(j as u32 * 40_503)
                .rotate_left(j as u32 % 31);
        }
        raws.push(r);
    }
    let p = generate(3, &raws, 0);
    assert!(p.kernel_tasks.len() >= 5, "{p:?}");
    Arc::new(p)
}

/// The generator never uses a runtime output after its scope ended, because the runtime
/// rejects it (INVALID_ARGS) — and using it in an inner scope is fine. After the
/// rejection the same chip runs the next program correctly.
#[test]
fn runtime_output_after_its_scope_ended_is_rejected_and_chip_recovers() {
    let k = oracle_kernel();
    let mut chip = oracle_chip();
    let log: Box<Log> = Box::new(Mutex::new(Vec::new()));
    let la = &*log as *const Log as usize;
    let prog = Program::new("escape", move |o, args| {
        // safety: `la` is the address of the boxed log, which lives to the end of the
        // test, past every run of this program; a Mutex is shared by `&`.
        let log = unsafe { &*(la as *const Log) };
        let x = args[0].tensor()?;
        let tmp = o.scope(|o| {
            let mut a = TaskArgs::new();
            a.input(x).output(spec(&[8, 8]));
            kernel_scalars(&mut a, 0.5, 0, 0, log);
            let tmp = o.submit(k, &a)?.output(0);
            // Inner scope: allowed.
            o.scope(|o| {
                let mut a = TaskArgs::new();
                a.input(tmp).inout(x.rows_slice(0, 4).unwrap());
                kernel_scalars(&mut a, 0.25, 1, 1, log);
                o.submit(k, &a)
            })?;
            Ok(tmp)
        })?;
        // The scope that made `tmp` has ended.
        let mut a = TaskArgs::new();
        a.input(tmp).output_existing(x);
        kernel_scalars(&mut a, 1.0, 2, 0, log);
        o.submit(k, &a)?;
        Ok(())
    });
    let mut x = vec![1f32; 64];
    let args = [host(&mut x, &[8, 8])];
    let e = chip
        .run_with_sizing(&prog, &args, &RingSizing::default())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgs, "{e}");
    assert!(e.to_string().contains("scope"), "{e}");
    // The rejected task never ran.
    assert!(log.lock().unwrap().iter().all(|e| e.task != 2));
    // The chip is usable at once, with both sizings.
    check_program(&mut chip, &fixed_program()).unwrap_or_else(|e| panic!("{e}"));
    let _ = &args;
}

/// The generator never opens an auto scope inside a manual one: the runtime rejects it
/// (INVALID_ARGS); a manual scope inside a manual scope is fine.
#[test]
fn auto_scope_inside_manual_scope_is_rejected() {
    let mut chip = oracle_chip();
    let ok = Program::new("manual_in_manual", |o, _| {
        o.manual_scope(|o| {
            o.manual_scope(|o| o.submit_dummy(&TaskArgs::new()))
                .map(|_| ())
        })
    });
    chip.run_with_sizing(&ok, &[], &RingSizing::default())
        .unwrap();
    let bad = Program::new("auto_in_manual", |o, _| {
        o.manual_scope(|o| o.scope(|_| Ok(())))
    });
    let e = chip
        .run_with_sizing(&bad, &[], &RingSizing::default())
        .unwrap_err();
    assert_eq!(e.code, StatusCode::InvalidArgs, "{e}");
    check_program(&mut chip, &fixed_program()).unwrap_or_else(|e| panic!("{e}"));
}

/// The tiny sizing's window rule: ring 3 is shared by depths >= 3 and retires in order,
/// so the tasks of an ended depth-4 scope stay live behind a pinned depth-3 task. With
/// one depth-3 task and two ended depth-4 tasks, the next ring-3 task needs a window of
/// next_pow2(3 + 2) = 8: window 4 is a provable deadlock, window 8 runs.
#[test]
fn ring3_is_shared_by_deep_scopes() {
    let mut chip = oracle_chip();
    let prog = Program::new("deep", |o, _| {
        o.scope(|o| {
            o.scope(|o| {
                o.scope(|o| {
                    assert_eq!(o.current_ring(), 3);
                    o.submit_dummy(&TaskArgs::new())?;
                    o.scope(|o| {
                        assert_eq!(o.current_ring(), 3);
                        o.submit_dummy(&TaskArgs::new())?;
                        o.submit_dummy(&TaskArgs::new())
                    })?;
                    o.scope(|o| o.submit_dummy(&TaskArgs::new()))
                })
            })
        })
        .map(|_| ())
    });
    let sized = |w3: u64| RingSizing::from_values([4, 4, 4, w3], [1024; 4], [4; 4]).unwrap();
    let e = chip.run_with_sizing(&prog, &[], &sized(4)).unwrap_err();
    assert_eq!(e.code, StatusCode::FlowControlDeadlock, "{e}");
    assert_eq!(e.ring, Some(3));
    let rep = chip.run_with_sizing(&prog, &[], &sized(8)).unwrap();
    assert_eq!(rep.tasks, 4);
    check_program(&mut chip, &fixed_program()).unwrap_or_else(|e| panic!("{e}"));
}

/// A task with 16 explicit deps, a creator edge and tensormap lookups has more than the
/// 16 fanin edges held inline: the rest goes to the ring's spill pool (at depth 0 and in
/// a depth-1 scope, where the root-scope writers are found too). Same oracle checks.
#[test]
fn fanin_beyond_16_inline_edges() {
    let mut g = Gen::new(2);
    for depth in 0..2 {
        if depth == 1 {
            g.begin(false);
        }
        let mut writers = Vec::new();
        for b in 0..2 {
            for r in 0..8 {
                let a = vec![PArg::Ex {
                    buf: b,
                    view: View::Rows(r, r + 1),
                    mode: Mode::OutEx,
                    md: false,
                }];
                writers.push(g.submit_task(true, a, vec![], 0.25 * r as f64, 0).unwrap());
            }
        }
        let z = g.bufs.len();
        let a = vec![
            PArg::Ex {
                buf: 0,
                view: View::Cols(1),
                mode: Mode::In,
                md: false,
            },
            PArg::Out { rows: 8, cols: 8 },
        ];
        g.submit_task(true, a, vec![], 1.0, 0).unwrap();
        let extra: Vec<Dep> = writers
            .iter()
            .map(|&t| Dep {
                task: t,
                wait_only: false,
            })
            .collect();
        let a = vec![
            PArg::Ex {
                buf: 0,
                view: View::Full,
                mode: Mode::In,
                md: false,
            },
            PArg::Ex {
                buf: z,
                view: View::Full,
                mode: Mode::In,
                md: false,
            },
            PArg::Ex {
                buf: 1,
                view: View::Full,
                mode: Mode::InOut,
                md: false,
            },
        ];
        g.submit_task(true, a, extra, 0.5, 0).unwrap();
    }
    let p = Arc::new(g.finish(2));
    assert!(p.wide_tasks >= 2, "{p:?}");
    let mut chip = oracle_chip();
    for _ in 0..20 {
        check_program(&mut chip, &p).unwrap_or_else(|e| panic!("{e}\n{p:?}"));
    }
}
