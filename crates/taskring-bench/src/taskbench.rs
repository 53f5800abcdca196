//! `taskring-bench taskbench`: a Task Bench-compatible driver (benchmark B1).
//!
//! Task Bench (Slaughter et al., SC'20) runs one or more task graphs of `steps` timesteps
//! × `width` points. Point `i` of timestep `t` depends on a set of points of timestep
//! `t-1` given by a dependence pattern, runs a kernel, and writes an output that its
//! consumers validate. This driver takes Task Bench's flags and prints its result lines
//! (`Total Tasks`, `Total Dependencies`, `Total FLOPs`, `Total Bytes`, `Elapsed Time … seconds`,
//! `FLOP/s`, `B/s`), so Task Bench's own scripts can parse it. The patterns and kernels
//! are written here from the published definitions (not copied).
//!
//! How a graph maps onto taskring (one task per point per timestep):
//! - **Outputs.** Each graph owns two host buffers (parities 0/1). Each is
//!   `[width, output_bytes/8]` of i64, rows padded to 64 bytes. Graphs wider than 256
//!   points split each buffer into up to 8 blocks of rows, one allocation each, so one
//!   tensormap bucket chain stays short. Task `(t, i)` writes row `i` of parity `t%2`
//!   (INOUT, which also orders it after the row's previous writer `(t-2, i)`). It reads
//!   rows of parity `(t-1)%2` as INPUT, one row-range view per dependency interval (per
//!   block), so a stencil task has 1 INPUT + 1 INOUT tensor and all_to_all has 1 INPUT.
//!   The tensormap infers every data dependency.
//! - **Write-after-read** is not tracked by taskring (see `engine/mod.rs`). `(t, i)`
//!   overwrites the row that the readers of `(t-2, i)` at `t-1` may still be reading.
//!   For symmetric patterns (no_comm, stencil_1d, stencil_1d_periodic, all_to_all,
//!   nearest with odd radix) those readers are already among `(t, i)`'s own inputs. For
//!   dom, tree, fft, nearest with even radix, spread and random_nearest, the readers
//!   that are missing become explicit ordering-only dependencies (`dep_wait`), at most
//!   16 per task. Whether a pattern needs them is decided at setup by brute force over
//!   its dependence sets.
//! - **trivial**: tasks take no tensors, since no task reads their output. The kernel
//!   writes its stamp into the graph's buffer with relaxed atomic stores.
//! - **Scopes.** Each timestep (all graphs together) gets its own scope at depth 1
//!   (ring 1), so retired tasks recycle. A scope is split when it would own more than
//!   half of ring 1's task window or need more than half of its dependency pool.
//! - **Ring sizing** (per dispatch, taskring's own knob). Ring 1's task window is, in
//!   order of precedence: `-window N`; `PTO2_RING_TASK_WINDOW` from the environment;
//!   otherwise `clamp(next_pow2(32 · max(Σ widths, cores)), 64, 16384)`. A window sized to
//!   the graph keeps the ring's slots and payloads (~2 KB per slot) in cache and bounds
//!   how far the orchestrator runs ahead, much as libgomp queues at most 64 tasks per
//!   thread. On a 2-core box with width 2 this halves the per-task floor compared with
//!   the default window of 16384, which cycles through ~31 MB of payloads. `-window 0`
//!   keeps the runtime's default. Ring 1's dependency pool is raised only when a wide,
//!   dense graph needs it (see `run`).
//! - **Validation.** Every task checks that its inputs are exactly the rows of its
//!   dependency set, in order, from the right buffer. Each input must hold the stamp
//!   `(t-1, j)` of its producer in every 16-byte pair. The task then writes `(t, i)`
//!   into every pair of its own row. A mismatch fails the task, and so the run, with a
//!   message naming the graph, task, input and stamps. After each run the number of
//!   executed tasks is checked against the graph's task count.
//!
//! Kernels: `empty`; `busy_wait` (`acc = acc·139 mod 2^31−1`, `-iter` times, no FLOPs);
//! `compute_bound` (16 AVX2 registers, `x = x·x + c` as FMA, `-iter` times: `128·iter + 64`
//! FLOPs per task, counted as Task Bench does; scalar fallback without AVX2/FMA);
//! `memory_bound` (copies one half of a per-thread `-scratch` buffer to the other,
//! `-iter` times: `iter · scratch` bytes per task).
//!
//! Extensions beyond Task Bench's flags:
//! - `-worker N`: core threads (default: the number of CPUs);
//! - `-window N`: ring 1's task window (power of 2; 0 = the runtime's default);
//! - `-warmup N`: untimed runs of the same graphs before the timed one (default 0);
//! - `-helper 1`: the orchestrator thread runs ready tasks whenever it waits for ring
//!   space or for the run to finish (`ChipOptions::orchestrator_helps`); with
//!   `-worker` = CPUs − 1 the run then uses as many threads as CPUs, like an OpenMP team;
//! - `-v`: print the runtime mapping to stderr.
//!
//! `-field` and `-sample` are accepted and ignored (with a note on stderr).
//!
//! Self-contained: uses only `std` and `taskring`.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::RefCell;
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use taskring::{
    ChipOptions, ChipWorker, DType, Kernel, KernelCall, KernelRef, Orchestrator, Program,
    RingField, RingSizing, RuntimeEnv, RuntimeFailure, Scalar, SizeSource, TaskArgs, TaskId,
    Tensor,
};

const USAGE: &str = "usage: taskring-bench taskbench [-steps N] [-width N] [-type PATTERN] [-radix N] [-period N]
                           [-fraction F] [-kernel KERNEL] [-iter N] [-output BYTES] [-scratch BYTES]
                           [-and <flags of another graph>]... [-worker N] [-window N] [-warmup N] [-helper 0|1] [-v]
  PATTERN: trivial no_comm stencil_1d stencil_1d_periodic dom tree fft all_to_all nearest spread random_nearest
  KERNEL:  empty busy_wait compute_bound memory_bound
  Defaults per graph: -steps 4 -width 4 -type trivial -radix 3 -period 3 (spread, random_nearest)
  -fraction 0.25 -kernel empty -iter 0 -output 16 -scratch 0. `-and` starts another independent graph run in
  the same execution (its flags start from the defaults). -worker: core threads (default: CPUs).
  -window: ring 1's task window (default: PTO2_RING_TASK_WINDOW, else sized to the graph; 0: runtime default).
  -warmup: untimed runs before the timed one. -v: the runtime mapping on stderr.";

/// Most input tensors one task may take (taskring's limit of 16, minus the output row).
const MAX_INPUT_TENSORS: usize = 15;
/// Most explicit dependencies one task may take (taskring's `MAX_TASK_DEPS`).
const MAX_EXPLICIT_DEPS: usize = 16;
/// Most dependency intervals one task may have (bounds spread / random_nearest radix).
const MAX_IV: usize = 64;
/// Rows of one buffer block (graphs up to this width use a single block).
const BLOCK_ROWS_MIN: i64 = 256;
/// Most (dependence set, point) entries of the write-after-read tables (each a small
/// vector of reader points): 2^26, about 1.5 GiB of vector headers.
const MAX_WAR_ENTRIES: u64 = 1 << 26;
/// Most output bytes per point (a row's stride in 8-byte words must fit 32 bits).
const MAX_OUTPUT_BYTES: u64 = 1 << 34;

// ----- command line -----------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    Trivial,
    NoComm,
    Stencil1D,
    Stencil1DPeriodic,
    Dom,
    Tree,
    Fft,
    AllToAll,
    Nearest,
    Spread,
    RandomNearest,
}

const PATTERNS: [(&str, Pattern); 11] = [
    ("trivial", Pattern::Trivial),
    ("no_comm", Pattern::NoComm),
    ("stencil_1d", Pattern::Stencil1D),
    ("stencil_1d_periodic", Pattern::Stencil1DPeriodic),
    ("dom", Pattern::Dom),
    ("tree", Pattern::Tree),
    ("fft", Pattern::Fft),
    ("all_to_all", Pattern::AllToAll),
    ("nearest", Pattern::Nearest),
    ("spread", Pattern::Spread),
    ("random_nearest", Pattern::RandomNearest),
];

impl Pattern {
    fn parse(s: &str) -> Option<Pattern> {
        PATTERNS.iter().find(|(n, _)| *n == s).map(|&(_, p)| p)
    }
    fn name(self) -> &'static str {
        PATTERNS
            .iter()
            .find(|(_, p)| *p == self)
            .map(|&(n, _)| n)
            .unwrap_or("?")
    }
    /// Patterns whose dependence set changes with the timestep's period.
    fn uses_period(self) -> bool {
        matches!(self, Pattern::Spread | Pattern::RandomNearest)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KernelKind {
    Empty,
    BusyWait,
    ComputeBound,
    MemoryBound,
}

const KERNELS: [(&str, KernelKind); 4] = [
    ("empty", KernelKind::Empty),
    ("busy_wait", KernelKind::BusyWait),
    ("compute_bound", KernelKind::ComputeBound),
    ("memory_bound", KernelKind::MemoryBound),
];

impl KernelKind {
    fn parse(s: &str) -> Option<KernelKind> {
        KERNELS.iter().find(|(n, _)| *n == s).map(|&(_, k)| k)
    }
    fn name(self) -> &'static str {
        KERNELS
            .iter()
            .find(|(_, k)| *k == self)
            .map(|&(n, _)| n)
            .unwrap_or("?")
    }
}

/// One graph's flags.
#[derive(Clone, Debug)]
struct GraphSpec {
    steps: i64,
    width: i64,
    pattern: Pattern,
    radix: i64,
    /// As given (-1: unset); the effective period is `Shape::period`.
    period: i64,
    fraction: f64,
    kernel: KernelKind,
    iter: u64,
    output: u64,
    scratch: u64,
}

impl Default for GraphSpec {
    fn default() -> Self {
        GraphSpec {
            steps: 4,
            width: 4,
            pattern: Pattern::Trivial,
            radix: 3,
            period: -1,
            fraction: 0.25,
            kernel: KernelKind::Empty,
            iter: 0,
            output: 16,
            scratch: 0,
        }
    }
}

struct Opts {
    graphs: Vec<GraphSpec>,
    /// Core threads (0: the number of CPUs).
    workers: usize,
    /// Ring 1's task window: None = env or auto, Some(0) = runtime default.
    window: Option<u64>,
    warmup: u32,
    verbose: bool,
    /// The orchestrator thread runs ready tasks while it waits (`-helper 1`).
    helper: bool,
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> Result<&'a str, String> {
    *i += 1;
    args.get(*i)
        .map(|s| s.as_str())
        .ok_or_else(|| format!("{flag} needs a value"))
}

fn num<T: std::str::FromStr>(s: &str, flag: &str) -> Result<T, String> {
    s.trim()
        .parse::<T>()
        .map_err(|_| format!("invalid value for {flag}: '{s}'"))
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut opts = Opts {
        graphs: Vec::new(),
        workers: 0,
        window: None,
        warmup: 0,
        verbose: false,
        helper: false,
    };
    let mut g = GraphSpec::default();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        match flag {
            "-steps" => g.steps = num(value(args, &mut i, flag)?, flag)?,
            "-width" => g.width = num(value(args, &mut i, flag)?, flag)?,
            "-type" => {
                let v = value(args, &mut i, flag)?;
                g.pattern = Pattern::parse(v).ok_or_else(|| {
                    format!(
                        "unknown -type '{v}' (one of: {})",
                        PATTERNS.map(|(n, _)| n).join(" ")
                    )
                })?;
            }
            "-radix" => g.radix = num(value(args, &mut i, flag)?, flag)?,
            "-period" => g.period = num(value(args, &mut i, flag)?, flag)?,
            "-fraction" => g.fraction = num(value(args, &mut i, flag)?, flag)?,
            "-kernel" => {
                let v = value(args, &mut i, flag)?;
                g.kernel = KernelKind::parse(v).ok_or_else(|| {
                    format!(
                        "unknown -kernel '{v}' (one of: {})",
                        KERNELS.map(|(n, _)| n).join(" ")
                    )
                })?;
            }
            "-iter" => g.iter = num(value(args, &mut i, flag)?, flag)?,
            "-output" => g.output = num(value(args, &mut i, flag)?, flag)?,
            "-scratch" => g.scratch = num(value(args, &mut i, flag)?, flag)?,
            "-and" => opts.graphs.push(std::mem::take(&mut g)),
            "-worker" | "-workers" => {
                opts.workers = num(value(args, &mut i, flag)?, flag)?;
                if opts.workers > taskring::chip::MAX_CORES {
                    return Err(format!(
                        "-worker must be in 0..={} (got {}; 0 = the number of CPUs)",
                        taskring::chip::MAX_CORES,
                        opts.workers
                    ));
                }
            }
            "-warmup" => opts.warmup = num(value(args, &mut i, flag)?, flag)?,
            "-helper" => opts.helper = num::<u32>(value(args, &mut i, flag)?, flag)? != 0,
            "-window" => {
                let w: u64 = num(value(args, &mut i, flag)?, flag)?;
                if w != 0 && (!w.is_power_of_two() || !(4..=1 << 30).contains(&w)) {
                    return Err(format!(
                        "-window must be 0 or a power of 2 in [4, 2^30] (got {w})"
                    ));
                }
                opts.window = Some(w);
            }
            "-v" | "-verbose" => opts.verbose = true,
            "-field" | "-sample" => {
                let v = value(args, &mut i, flag)?;
                eprintln!("taskring-bench taskbench: note: {flag} {v} is accepted and ignored");
            }
            "-h" | "-help" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown flag '{flag}'")),
        }
        i += 1;
    }
    opts.graphs.push(g);
    for (k, g) in opts.graphs.iter().enumerate() {
        check_spec(g).map_err(|e| format!("task graph {}: {e}", k + 1))?;
    }
    Ok(opts)
}

fn check_spec(g: &GraphSpec) -> Result<(), String> {
    if g.steps < 1 {
        return Err(format!("-steps must be >= 1 (got {})", g.steps));
    }
    if g.width < 1 || g.width > (1 << 31) {
        return Err(format!("-width must be in 1..=2^31 (got {})", g.width));
    }
    if g.radix < 0 {
        return Err(format!("-radix must be >= 0 (got {})", g.radix));
    }
    if g.pattern.uses_period() && g.radix as usize > MAX_IV {
        return Err(format!(
            "-radix {} is above {MAX_IV} for {}",
            g.radix,
            g.pattern.name()
        ));
    }
    if !(0.0..=1.0).contains(&g.fraction) {
        return Err(format!("-fraction must be in [0, 1] (got {})", g.fraction));
    }
    if g.output < 16 || !g.output.is_multiple_of(16) {
        return Err(format!(
            "-output must be a positive multiple of 16 bytes (one (timestep, point) stamp is 16 bytes; got {})",
            g.output
        ));
    }
    if g.output > MAX_OUTPUT_BYTES {
        return Err(format!(
            "-output must be at most {MAX_OUTPUT_BYTES} bytes (got {})",
            g.output
        ));
    }
    if g.kernel == KernelKind::MemoryBound && g.scratch < 16 {
        return Err(format!(
            "-kernel memory_bound needs -scratch of at least 16 bytes (got {})",
            g.scratch
        ));
    }
    if g.kernel == KernelKind::MemoryBound && g.scratch > physical_memory() {
        // (Each core thread keeps one scratch buffer; `run` checks all of them.)
        return Err(format!(
            "-scratch {} bytes is more than this machine's memory ({} bytes)",
            g.scratch,
            physical_memory()
        ));
    }
    Ok(())
}

/// Bytes of physical memory (what lazily committed buffers can really use; with
/// overcommit an allocation far beyond it may succeed and the run then be killed).
fn physical_memory() -> u64 {
    // safety: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || page <= 0 {
        return u64::MAX;
    }
    (pages as u64).saturating_mul(page as u64)
}

// ----- dependence patterns ----------------------------------------------------------

/// Up to `MAX_IV` inclusive point intervals, kept sorted and disjoint by `normalize`.
#[derive(Clone, Copy)]
struct Intervals {
    v: [(i64, i64); MAX_IV],
    n: usize,
}

impl Intervals {
    fn new() -> Intervals {
        Intervals {
            v: [(0, 0); MAX_IV],
            n: 0,
        }
    }
    #[inline]
    fn clear(&mut self) {
        self.n = 0;
    }
    #[inline]
    fn push(&mut self, lo: i64, hi: i64) {
        // Bounded by construction (check_spec caps the radix of the point-list patterns).
        assert!(self.n < MAX_IV, "more than {MAX_IV} dependency intervals");
        self.v[self.n] = (lo, hi);
        self.n += 1;
    }
    #[inline]
    fn as_slice(&self) -> &[(i64, i64)] {
        &self.v[..self.n]
    }
    /// Sort by start and merge overlapping or adjacent intervals.
    fn normalize(&mut self) {
        let v = &mut self.v[..self.n];
        for k in 1..v.len() {
            let mut j = k;
            while j > 0 && v[j - 1].0 > v[j].0 {
                v.swap(j - 1, j);
                j -= 1;
            }
        }
        let mut m = 0usize;
        for k in 0..self.n {
            let (lo, hi) = self.v[k];
            if m > 0 && lo <= self.v[m - 1].1 + 1 {
                self.v[m - 1].1 = self.v[m - 1].1.max(hi);
            } else {
                self.v[m] = (lo, hi);
                m += 1;
            }
        }
        self.n = m;
    }
    /// Keep only the parts inside `[lo, hi]`.
    fn clip(&mut self, lo: i64, hi: i64) {
        let mut m = 0usize;
        for k in 0..self.n {
            let (a, b) = (self.v[k].0.max(lo), self.v[k].1.min(hi));
            if a <= b {
                self.v[m] = (a, b);
                m += 1;
            }
        }
        self.n = m;
    }
    fn count(&self) -> i64 {
        self.as_slice().iter().map(|&(a, b)| b - a + 1).sum()
    }
    fn contains(&self, p: i64) -> bool {
        self.as_slice().iter().any(|&(a, b)| a <= p && p <= b)
    }
}

/// The shape of one graph: which points exist at each timestep and what they depend on.
#[derive(Clone, Debug)]
struct Shape {
    pattern: Pattern,
    steps: i64,
    width: i64,
    radix: i64,
    period: i64,
    fraction: f64,
    /// Number of distinct dependence sets (fft: log2 width; spread/random_nearest: period).
    ndsets: i64,
}

fn ceil_log2(x: i64) -> i64 {
    let mut k = 0;
    while (1i64 << k) < x {
        k += 1;
    }
    k
}

/// splitmix64 finaliser (the C baseline uses the same, so both run identical graphs).
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A deterministic uniform number in [0, 1) for the edge `dep -> point` of set `dset`.
#[inline]
fn edge_uniform(dset: i64, point: i64, dep: i64) -> f64 {
    let h = mix64(mix64(mix64(dset as u64) ^ point as u64) ^ dep as u64);
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

impl Shape {
    fn new(g: &GraphSpec) -> Shape {
        let period = if g.pattern.uses_period() && g.period <= 0 {
            3
        } else {
            g.period
        };
        let ndsets = match g.pattern {
            Pattern::Fft => ceil_log2(g.width).max(1),
            Pattern::Spread | Pattern::RandomNearest => period.max(1),
            _ => 1,
        };
        Shape {
            pattern: g.pattern,
            steps: g.steps,
            width: g.width,
            radix: g.radix,
            period,
            fraction: g.fraction,
            ndsets,
        }
    }

    /// First point of timestep `t` (the diamond of `dom` slides right in its second half).
    #[inline]
    fn offset_at(&self, t: i64) -> i64 {
        if t < 0 {
            return 0;
        }
        match self.pattern {
            Pattern::Dom => (t + self.width - self.steps).max(0),
            _ => 0,
        }
    }

    /// Points of timestep `t` (0 before the first timestep).
    #[inline]
    fn width_at(&self, t: i64) -> i64 {
        if t < 0 {
            return 0;
        }
        match self.pattern {
            Pattern::Dom => self.width.min(t + 1).min(self.steps - t),
            Pattern::Tree => self.width.min(1i64 << t.min(62)),
            _ => self.width,
        }
    }

    /// Dependence set used by timestep `t >= 1`.
    #[inline]
    fn dset_at(&self, t: i64) -> i64 {
        match self.pattern {
            // timestep 1 uses stride 1, then 2, 4, ...
            Pattern::Fft => (t + self.ndsets - 1) % self.ndsets,
            Pattern::Spread | Pattern::RandomNearest => t % self.ndsets,
            _ => 0,
        }
    }

    /// The points of the previous timestep that point `i` depends on under set `dset`,
    /// before clipping to the points that exist (normalized).
    fn raw_deps(&self, dset: i64, i: i64, out: &mut Intervals) {
        out.clear();
        let w = self.width;
        match self.pattern {
            Pattern::Trivial => {}
            Pattern::NoComm => out.push(i, i),
            Pattern::Stencil1D => out.push((i - 1).max(0), (i + 1).min(w - 1)),
            Pattern::Stencil1DPeriodic => {
                for p in [i - 1, i, i + 1] {
                    let q = p.rem_euclid(w);
                    out.push(q, q);
                }
            }
            Pattern::Dom => out.push((i - 1).max(0), i),
            Pattern::Tree => out.push(i / 2, i / 2),
            Pattern::Fft => {
                let s = 1i64 << dset;
                if i - s >= 0 {
                    out.push(i - s, i - s);
                }
                out.push(i, i);
                if i + s < w {
                    out.push(i + s, i + s);
                }
            }
            Pattern::AllToAll => out.push(0, w - 1),
            Pattern::Nearest => {
                if self.radix > 0 {
                    out.push(
                        (i - (self.radix - 1) / 2).max(0),
                        (i + self.radix / 2).min(w - 1),
                    );
                }
            }
            Pattern::Spread => {
                for k in 0..self.radix {
                    let shift = if k > 0 { dset } else { 0 };
                    let q = (i + k * w / self.radix + shift).rem_euclid(w);
                    out.push(q, q);
                }
            }
            Pattern::RandomNearest => {
                if self.radix > 0 {
                    let lo = (i - (self.radix - 1) / 2).max(0);
                    let hi = (i + self.radix / 2).min(w - 1);
                    for j in lo..=hi {
                        if j == i || edge_uniform(dset, i, j) < self.fraction {
                            out.push(j, j);
                        }
                    }
                }
            }
        }
        out.normalize();
    }

    /// The points of timestep `t - 1` that point `i` of timestep `t` depends on.
    #[inline]
    fn deps_at(&self, t: i64, i: i64, out: &mut Intervals) {
        if t <= 0 {
            out.clear();
            return;
        }
        self.raw_deps(self.dset_at(t), i, out);
        let lo = self.offset_at(t - 1);
        out.clip(lo, lo + self.width_at(t - 1) - 1);
    }
}

/// Reverse dependence sets, for the write-after-read orderings taskring does not infer.
struct War {
    /// `readers[dset][j]`: points `k` with `j` in `raw_deps(dset, k)`.
    readers: Vec<Vec<Vec<u32>>>,
    /// `needed[d]`: some point of a timestep using set `d` misses a reader of its row.
    needed: Vec<bool>,
}

impl War {
    /// `None` when no timestep can need an explicit ordering; an error when its tables
    /// would not fit in memory.
    fn build(s: &Shape) -> Result<Option<War>, String> {
        match s.pattern {
            // trivial: no task reads an output; all_to_all: every reader is an input.
            Pattern::Trivial | Pattern::AllToAll => return Ok(None),
            _ => {}
        }
        let w = s.width as usize;
        if (s.ndsets as u64).saturating_mul(w as u64) > MAX_WAR_ENTRIES {
            return Err(format!(
                "-width {} with {} dependence sets (-period / fft stages) needs {} write-after-read table entries; at most {MAX_WAR_ENTRIES} are supported",
                s.width,
                s.ndsets,
                (s.ndsets as u64).saturating_mul(w as u64)
            ));
        }
        let mut iv = Intervals::new();
        let mut readers = vec![vec![Vec::new(); w]; s.ndsets as usize];
        for d in 0..s.ndsets {
            for k in 0..s.width {
                s.raw_deps(d, k, &mut iv);
                for &(a, b) in iv.as_slice() {
                    for j in a..=b {
                        readers[d as usize][j as usize].push(k as u32);
                    }
                }
            }
        }
        // Timestep t uses set d, t-1 used set (d-1) mod n (fft and the periodic patterns
        // cycle; the others have one set). Clipping to existing points removes readers
        // and inputs alike, so the test on unclipped sets is exact.
        let mut needed = vec![false; s.ndsets as usize];
        for d in 0..s.ndsets {
            let dp = ((d + s.ndsets - 1) % s.ndsets) as usize;
            for i in 0..s.width {
                s.raw_deps(d, i, &mut iv);
                if readers[dp][i as usize]
                    .iter()
                    .any(|&k| !iv.contains(k as i64))
                {
                    needed[d as usize] = true;
                    break;
                }
            }
        }
        Ok(needed.iter().any(|&n| n).then_some(War { readers, needed }))
    }

    /// Call `f(k)` for each point `k` of timestep `t-1` that reads row `i` as written at
    /// `t-2` and is not among the inputs `deps` of `(t, i)`.
    #[inline]
    fn for_each_missing(
        &self,
        s: &Shape,
        t: i64,
        i: i64,
        deps: &Intervals,
        mut f: impl FnMut(i64),
    ) {
        if t < 2 {
            return;
        }
        let d = s.dset_at(t);
        if !self.needed[d as usize] {
            return;
        }
        // Row i was last written at t-2 only if point i existed then (the point ranges of
        // dom and tree only grow at the right and shrink at the left, so a row that did
        // not exist at t-2 was never written before).
        let lo2 = s.offset_at(t - 2);
        if i < lo2 || i >= lo2 + s.width_at(t - 2) {
            return;
        }
        let lo1 = s.offset_at(t - 1);
        let hi1 = lo1 + s.width_at(t - 1);
        let dp = ((d + s.ndsets - 1) % s.ndsets) as usize;
        for &k in &self.readers[dp][i as usize] {
            let k = k as i64;
            if k >= lo1 && k < hi1 && !deps.contains(k) {
                f(k);
            }
        }
    }
}

// ----- buffers and graphs -----------------------------------------------------------

/// A zeroed, 64-byte aligned allocation of i64 words.
struct RawBuf {
    ptr: *mut i64,
    layout: Layout,
}

// safety: the buffer owns a plain heap allocation, freed in Drop by whichever thread
// drops it.
unsafe impl Send for RawBuf {}
// safety: plain memory; tasks access disjoint rows or rows ordered by the runtime's
// dependencies (trivial's racing rows are written with atomics).
unsafe impl Sync for RawBuf {}

impl RawBuf {
    /// `None` when the machine cannot give that much (never an abort).
    fn new(words: usize) -> Option<RawBuf> {
        let bytes = words.max(1).checked_mul(8)?;
        let layout = Layout::from_size_align(bytes, 64).ok()?;
        // safety: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) } as *mut i64;
        (!ptr.is_null()).then_some(RawBuf { ptr, layout })
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // safety: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr as *mut u8, self.layout) }
    }
}

struct Block {
    buf: RawBuf,
    first: i64,
    rows: i64,
    /// `[rows, out_words]` view with row stride `stride`.
    view: Tensor,
}

/// A graph ready to run: its shape, kernel, buffers and totals.
struct Graph {
    idx: usize,
    spec: GraphSpec,
    shape: Shape,
    out_words: usize,
    /// Row stride in words (the output rounded up to 64 bytes).
    stride: usize,
    block_rows: i64,
    blocks: [Vec<Block>; 2],
    war: Option<War>,
    flops_per_task: u64,
    bytes_per_task: u64,
    tasks: u64,
    deps: u64,
    /// Producers per task at most (inputs + previous writer + explicit orderings).
    max_edges: usize,
    max_inputs: usize,
    max_explicit: usize,
    explicit_total: u64,
}

/// One output buffer of a graph `w` points wide: blocks of `block_rows` rows of
/// `stride` words, each viewed as `[rows, out_words]`.
fn alloc_blocks(
    w: i64,
    block_rows: i64,
    stride: usize,
    out_words: usize,
    too_big: &dyn Fn() -> String,
) -> Result<Vec<Block>, String> {
    let mut v = Vec::new();
    let mut first = 0;
    while first < w {
        let rows = block_rows.min(w - first);
        let words = (rows as usize).checked_mul(stride).ok_or_else(too_big)?;
        let buf = RawBuf::new(words).ok_or_else(too_big)?;
        let full = Tensor::from_raw(buf.ptr as u64, &[rows as u32, stride as u32], DType::I64);
        let view = full
            .view(
                &[rows as u32, out_words as u32],
                0,
                Some(&[stride as u32, 1]),
            )
            .map_err(|e| format!("buffer view: {e}"))?;
        v.push(Block {
            buf,
            first,
            rows,
            view,
        });
        first += rows;
    }
    Ok(v)
}

/// (FLOPs, bytes) per task of the graph's kernel. Checked: Task Bench's totals are
/// 64-bit counts.
fn per_task_costs(spec: &GraphSpec) -> Result<(u64, u64), String> {
    let flops_per_task = match spec.kernel {
        KernelKind::ComputeBound => spec
            .iter
            .checked_mul(128)
            .and_then(|f| f.checked_add(64))
            .ok_or("-iter is too large: FLOPs per task overflow 64 bits")?,
        _ => 0,
    };
    let bytes_per_task = match spec.kernel {
        KernelKind::MemoryBound => spec
            .iter
            .checked_mul(spec.scratch)
            .ok_or("-iter x -scratch is too large: bytes per task overflow 64 bits")?,
        _ => 0,
    };
    Ok((flops_per_task, bytes_per_task))
}

impl Graph {
    fn new(idx: usize, spec: &GraphSpec) -> Result<Graph, String> {
        let shape = Shape::new(spec);
        let out_words = (spec.output / 8) as usize;
        let stride = out_words.div_ceil(8) * 8;
        let w = spec.width;
        let block_rows = if w <= BLOCK_ROWS_MIN {
            w
        } else {
            BLOCK_ROWS_MIN.max((w + 7) / 8)
        };
        let buffer_bytes = (w as u64).saturating_mul(stride as u64).saturating_mul(16);
        let too_big = || {
            format!(
                "the output buffers ({buffer_bytes} bytes: {w} points x {} bytes per row, twice) cannot be allocated on this machine ({} bytes of memory)",
                stride.saturating_mul(8),
                physical_memory()
            )
        };
        if buffer_bytes > physical_memory() {
            return Err(too_big());
        }
        let mk = || alloc_blocks(w, block_rows, stride, out_words, &too_big);
        let blocks = [mk()?, mk()?];
        let (flops_per_task, bytes_per_task) = per_task_costs(spec)?;
        let war = War::build(&shape)?;
        let mut g = Graph {
            idx,
            spec: spec.clone(),
            shape,
            out_words,
            stride,
            block_rows,
            blocks,
            war,
            flops_per_task,
            bytes_per_task,
            tasks: 0,
            deps: 0,
            max_edges: 0,
            max_inputs: 0,
            max_explicit: 0,
            explicit_total: 0,
        };
        g.count()?;
        if g.tasks.checked_mul(g.flops_per_task).is_none()
            || g.tasks.checked_mul(g.bytes_per_task).is_none()
        {
            return Err("-steps x -width x (FLOPs or bytes per task) is too large: the totals overflow 64 bits".into());
        }
        Ok(g)
    }

    /// Totals, and the per-task limits checked before anything runs.
    fn count(&mut self) -> Result<(), String> {
        let s = &self.shape;
        let mut iv = Intervals::new();
        let (mut tasks, mut deps, mut explicit_total) = (0u64, 0u64, 0u64);
        let (mut max_edges, mut max_inputs, mut max_explicit) = (0usize, 0usize, 0usize);
        for t in 0..s.steps {
            let lo = s.offset_at(t);
            let w = s.width_at(t);
            tasks += w as u64;
            for i in lo..lo + w {
                s.deps_at(t, i, &mut iv);
                let nd = iv.count() as usize;
                deps += nd as u64;
                if s.pattern == Pattern::Trivial {
                    continue;
                }
                let mut inputs = 0usize;
                for &(a, b) in iv.as_slice() {
                    inputs += (b / self.block_rows - a / self.block_rows + 1) as usize;
                }
                let mut explicit = 0usize;
                if let Some(war) = &self.war {
                    war.for_each_missing(s, t, i, &iv, |_| explicit += 1);
                }
                if inputs > MAX_INPUT_TENSORS {
                    return Err(format!(
                        "task (t={t}, i={i}) reads {inputs} row ranges but a task takes at most {MAX_INPUT_TENSORS} input tensors (plus its output); lower -radix"
                    ));
                }
                if explicit > MAX_EXPLICIT_DEPS {
                    return Err(format!(
                        "task (t={t}, i={i}) needs {explicit} explicit write-after-read orderings but a task takes at most {MAX_EXPLICIT_DEPS}; lower -radix"
                    ));
                }
                max_inputs = max_inputs.max(inputs);
                max_explicit = max_explicit.max(explicit);
                max_edges = max_edges.max(nd + 1 + explicit);
                explicit_total += explicit as u64;
            }
        }
        self.tasks = tasks;
        self.deps = deps;
        self.max_edges = max_edges;
        self.max_inputs = max_inputs;
        self.max_explicit = max_explicit;
        self.explicit_total = explicit_total;
        Ok(())
    }

    #[inline]
    fn block_of(&self, point: i64) -> usize {
        (point / self.block_rows) as usize
    }

    /// The output row of `point` in buffer parity `p`.
    #[inline]
    fn row_view(&self, p: usize, point: i64) -> Tensor {
        let b = &self.blocks[p][self.block_of(point)];
        let r = (point - b.first) as u64;
        b.view.rows_slice(r, r + 1).expect("row inside its block")
    }

    /// Add INPUT views of rows `lo..=hi` of parity `q` (one per block touched).
    #[inline]
    fn push_inputs(&self, a: &mut TaskArgs, q: usize, lo: i64, hi: i64) {
        let mut p = lo;
        while p <= hi {
            let b = &self.blocks[q][self.block_of(p)];
            let end = hi.min(b.first + b.rows - 1);
            a.input(
                b.view
                    .rows_slice((p - b.first) as u64, (end - b.first + 1) as u64)
                    .expect("rows inside their block"),
            );
            p = end + 1;
        }
    }

    /// The block of parity `q` that `t` views, as (first point of the view, rows).
    #[inline]
    fn locate(&self, q: usize, t: &Tensor) -> Option<(i64, i64)> {
        let b = self.blocks[q].iter().find(|b| b.buf.ptr as u64 == t.addr)?;
        if !t.offset.is_multiple_of(self.stride as u64)
            || t.ndims != 2
            || t.shape[1] as usize != self.out_words
        {
            return None;
        }
        Some((
            b.first + (t.offset / self.stride as u64) as i64,
            t.shape[0] as i64,
        ))
    }
}

// ----- the task ----------------------------------------------------------------------

/// Executed-task counters, one cache line per thread slot.
#[repr(align(128))]
struct PaddedCount(AtomicU64);

struct Counters {
    slots: Vec<PaddedCount>,
}

const COUNTER_SLOTS: usize = 64;
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static SLOT: usize = NEXT_SLOT.fetch_add(1, Relaxed) % COUNTER_SLOTS;
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Counters {
    fn new() -> Counters {
        Counters {
            slots: (0..COUNTER_SLOTS)
                .map(|_| PaddedCount(AtomicU64::new(0)))
                .collect(),
        }
    }
    #[inline]
    fn bump(&self) {
        SLOT.with(|&s| self.slots[s].0.fetch_add(1, Relaxed));
    }
    fn take(&self) -> u64 {
        self.slots.iter().map(|c| c.0.swap(0, Relaxed)).sum()
    }
}

struct TbKernel {
    g: Arc<Graph>,
    counters: Arc<Counters>,
}

impl TbKernel {
    fn exec(&self, call: &KernelCall<'_>) -> Result<(), String> {
        let g = &*self.g;
        if call.scalars.len() != 2 {
            return Err(format!(
                "graph {}: expected 2 scalars (t, i), got {}",
                g.idx + 1,
                call.scalars.len()
            ));
        }
        let t = call.scalars[0] as i64;
        let i = call.scalars[1] as i64;
        let p = (t & 1) as usize;
        if g.shape.pattern == Pattern::Trivial {
            return self.exec_trivial(call, t, i, p);
        }

        // Inputs: exactly the rows of the dependency set, in order, each stamped (t-1, j).
        let mut iv = Intervals::new();
        g.shape.deps_at(t, i, &mut iv);
        let inputs = &call.tensors[..call.n_inputs.min(call.tensors.len())];
        check_inputs(g, t, i, inputs, &iv)?;

        // The own row.
        let own = call.tensors.get(call.n_inputs).ok_or_else(|| {
            format!(
                "graph {} task (t={t}, i={i}): validation failed: the output row is missing",
                g.idx + 1
            )
        })?;
        match g.locate(p, own) {
            Some((first, 1)) if first == i => {}
            _ => {
                return Err(format!(
                    "graph {} task (t={t}, i={i}): validation failed: the output tensor {own:?} is not row {i} of the timestep-{t} buffer",
                    g.idx + 1
                ))
            }
        }

        run_kernel(&g.spec, t, i)?;

        // safety: the row is this task's output (checked above); it is ordered after the
        // row's previous writer and readers by the runtime.
        unsafe {
            let row = (own.addr as *mut i64).add(own.offset as usize);
            for w in (0..g.out_words).step_by(2) {
                *row.add(w) = t;
                *row.add(w + 1) = i;
            }
        }
        self.counters.bump();
        Ok(())
    }

    /// A trivial task: no tensors; the kernel, then the stamp into the graph's buffer.
    #[inline]
    fn exec_trivial(&self, call: &KernelCall<'_>, t: i64, i: i64, p: usize) -> Result<(), String> {
        let g = &*self.g;
        if !call.tensors.is_empty() {
            return Err(format!(
                "graph {} task (t={t}, i={i}): trivial tasks take no tensors",
                g.idx + 1
            ));
        }
        run_kernel(&g.spec, t, i)?;
        let b = &g.blocks[p][g.block_of(i)];
        // safety: the row is inside the block; concurrent writers of the same row
        // (timesteps t and t±2, unordered in this pattern) use atomics.
        unsafe {
            let row = b.buf.ptr.add((i - b.first) as usize * g.stride);
            for w in (0..g.out_words).step_by(2) {
                AtomicI64::from_ptr(row.add(w)).store(t, Relaxed);
                AtomicI64::from_ptr(row.add(w + 1)).store(i, Relaxed);
            }
        }
        self.counters.bump();
        Ok(())
    }
}

/// Task (t, i)'s `inputs` are exactly the rows of its dependency set `iv`, in order,
/// from the timestep-(t-1) buffer, each stamped (t-1, j).
#[inline]
fn check_inputs(
    g: &Graph,
    t: i64,
    i: i64,
    inputs: &[Tensor],
    iv: &Intervals,
) -> Result<(), String> {
    let q = ((t - 1) & 1) as usize;
    let mut k = 0usize; // input tensor
    let mut r = 0i64; // row within it
    let mut cur: Option<(i64, i64)> = None; // (first point, rows) of input k
    for &(a, b) in iv.as_slice() {
        for j in a..=b {
            loop {
                if k >= inputs.len() {
                    return Err(format!(
                        "graph {} task (t={t}, i={i}): validation failed: input for point {j} of timestep {} is missing ({} input tensors)",
                        g.idx + 1,
                        t - 1,
                        inputs.len()
                    ));
                }
                let (first, rows) = match cur {
                    Some(c) => c,
                    None => {
                        let c = g.locate(q, &inputs[k]).ok_or_else(|| {
                            format!(
                                "graph {} task (t={t}, i={i}): validation failed: input {k} ({:?}) is not a row range of the timestep-{} buffer",
                                g.idx + 1,
                                inputs[k],
                                t - 1
                            )
                        })?;
                        cur = Some(c);
                        c
                    }
                };
                if r < rows {
                    if first + r != j {
                        return Err(format!(
                            "graph {} task (t={t}, i={i}): validation failed: input {k} row {r} is point {}, expected point {j}",
                            g.idx + 1,
                            first + r
                        ));
                    }
                    break;
                }
                k += 1;
                r = 0;
                cur = None;
            }
            check_stamps(g, t, i, &inputs[k], r, j)?;
            r += 1;
        }
    }
    let rest = match cur {
        Some((_, rows)) if r == rows => inputs.len() - k - 1,
        Some(_) => inputs.len() - k,
        None => inputs.len() - k,
    };
    if rest != 0 {
        return Err(format!(
            "graph {} task (t={t}, i={i}): validation failed: {rest} unexpected input tensor(s) beyond its {} dependencies",
            g.idx + 1,
            iv.count()
        ));
    }
    Ok(())
}

/// Row `r` of input `ten` (which `locate` placed in a buffer of `g`) holds point j's
/// stamp (t-1, j) in every pair.
#[inline]
fn check_stamps(g: &Graph, t: i64, i: i64, ten: &Tensor, r: i64, j: i64) -> Result<(), String> {
    // safety: `locate` proved the view is inside a buffer of this graph; its
    // producer completed before this task was made ready.
    unsafe {
        let row = (ten.addr as *const i64).add(ten.offset as usize + r as usize * g.stride);
        for w in (0..g.out_words).step_by(2) {
            let (st, sp) = (*row.add(w), *row.add(w + 1));
            if st != t - 1 || sp != j {
                return Err(format!(
                    "graph {} task (t={t}, i={i}): validation failed: input point {j} holds stamp (t={st}, i={sp}) at word {w}, expected (t={}, i={j})",
                    g.idx + 1,
                    t - 1
                ));
            }
        }
    }
    Ok(())
}

impl Kernel for TbKernel {
    fn name(&self) -> &str {
        "taskbench"
    }
    fn check(&self, _tensors: &[Tensor], _n_inputs: usize, _scalars: &[u64]) -> Result<(), String> {
        Ok(())
    }
    fn run(&self, call: &KernelCall<'_>) {
        if let Err(msg) = self.exec(call) {
            panic!("{msg}");
        }
    }
    fn try_run(&self, call: &KernelCall<'_>) -> Result<(), String> {
        self.exec(call)
    }
}

// ----- kernels -------------------------------------------------------------------------

#[inline]
fn run_kernel(spec: &GraphSpec, t: i64, i: i64) -> Result<(), String> {
    match spec.kernel {
        KernelKind::Empty => {}
        KernelKind::BusyWait => {
            let mut acc: u64 = 1 + ((t * 31 + i) as u64 % 1000);
            for _ in 0..spec.iter {
                acc = acc * 139 % 2_147_483_647;
            }
            black_box(acc);
        }
        KernelKind::ComputeBound => {
            black_box(compute_bound(spec.iter, 0.5 + (i % 16) as f64 * 0.01));
        }
        KernelKind::MemoryBound => return memory_bound(spec.iter, spec.scratch as usize),
    }
    Ok(())
}

/// `iter` rounds of `x = x*x - 1.5` on 64 doubles (the map stays in [-1.5, 0.75], so no
/// overflow and no denormals), then a sum: `128 * iter + 64` FLOPs as Task Bench counts.
fn compute_bound(iter: u64, x0: f64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // safety: the features were detected.
            return unsafe { compute_bound_avx2(iter, x0) };
        }
    }
    let mut x = [0f64; 64];
    for (k, v) in x.iter_mut().enumerate() {
        *v = x0 + 0.001 * k as f64;
    }
    for _ in 0..iter {
        for v in x.iter_mut() {
            *v = *v * *v - 1.5;
        }
    }
    x.iter().sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn compute_bound_avx2(iter: u64, x0: f64) -> f64 {
    use std::arch::x86_64::*;
    // 32-byte aligned: a misaligned `c` makes every FMA a cache-line-split load on
    // some stack layouts, which halves the kernel's throughput.
    let c = _mm256_set1_pd(-1.5);
    let mut a = [_mm256_setzero_pd(); 16];
    for (k, v) in a.iter_mut().enumerate() {
        let b = x0 + 0.001 * k as f64;
        *v = _mm256_set_pd(b, b + 0.05, b + 0.1, b + 0.15);
    }
    if iter > 0 {
        // 16 independent FMA chains in the 16 ymm registers, `c` read from memory (as
        // gcc compiles the C baseline's loop); LLVM would keep `c` in a register and
        // spill an accumulator.
        let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7, mut a8, mut a9, mut a10, mut a11, mut a12, mut a13, mut a14, mut a15] =
            a;
        std::arch::asm!(
            "2:",
            "vfmadd213pd {a0}, {a0}, ymmword ptr [{c}]",
            "vfmadd213pd {a1}, {a1}, ymmword ptr [{c}]",
            "vfmadd213pd {a2}, {a2}, ymmword ptr [{c}]",
            "vfmadd213pd {a3}, {a3}, ymmword ptr [{c}]",
            "vfmadd213pd {a4}, {a4}, ymmword ptr [{c}]",
            "vfmadd213pd {a5}, {a5}, ymmword ptr [{c}]",
            "vfmadd213pd {a6}, {a6}, ymmword ptr [{c}]",
            "vfmadd213pd {a7}, {a7}, ymmword ptr [{c}]",
            "vfmadd213pd {a8}, {a8}, ymmword ptr [{c}]",
            "vfmadd213pd {a9}, {a9}, ymmword ptr [{c}]",
            "vfmadd213pd {a10}, {a10}, ymmword ptr [{c}]",
            "vfmadd213pd {a11}, {a11}, ymmword ptr [{c}]",
            "vfmadd213pd {a12}, {a12}, ymmword ptr [{c}]",
            "vfmadd213pd {a13}, {a13}, ymmword ptr [{c}]",
            "vfmadd213pd {a14}, {a14}, ymmword ptr [{c}]",
            "vfmadd213pd {a15}, {a15}, ymmword ptr [{c}]",
            "dec {n}",
            "jnz 2b",
            a0 = inout(ymm_reg) a0, a1 = inout(ymm_reg) a1, a2 = inout(ymm_reg) a2, a3 = inout(ymm_reg) a3,
            a4 = inout(ymm_reg) a4, a5 = inout(ymm_reg) a5, a6 = inout(ymm_reg) a6, a7 = inout(ymm_reg) a7,
            a8 = inout(ymm_reg) a8, a9 = inout(ymm_reg) a9, a10 = inout(ymm_reg) a10, a11 = inout(ymm_reg) a11,
            a12 = inout(ymm_reg) a12, a13 = inout(ymm_reg) a13, a14 = inout(ymm_reg) a14, a15 = inout(ymm_reg) a15,
            c = in(reg) &c as *const __m256d,
            n = inout(reg) iter => _,
            options(nostack, readonly),
        );
        a = [
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
        ];
    }
    let mut s = a[0];
    for v in &a[1..] {
        s = _mm256_add_pd(s, *v);
    }
    let mut out = [0f64; 4];
    _mm256_storeu_pd(out.as_mut_ptr(), s);
    out[0] + out[1] + out[2] + out[3]
}

/// `iter` copies of one half of a per-thread scratch buffer of `bytes` into the other.
fn memory_bound(iter: u64, bytes: usize) -> Result<(), String> {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < bytes {
            // Fallible: a scratch buffer the machine cannot give fails the task (the
            // setup already checked one such buffer can be had), it does not abort.
            let more = bytes - s.len();
            s.try_reserve_exact(more).map_err(|e| format!("memory_bound: could not allocate the {bytes}-byte scratch buffer of this core: {e}"))?;
            s.resize(bytes, 1);
        }
        let half = bytes / 2;
        let (a, b) = s.split_at_mut(half);
        for it in 0..iter {
            if it & 1 == 0 {
                b[..half].copy_from_slice(&a[..half]);
            } else {
                a[..half].copy_from_slice(&b[..half]);
            }
            black_box(&mut *a);
        }
        Ok(())
    })
}

// ----- orchestration -------------------------------------------------------------------

/// Per-scope budgets on ring 1 (scopes at depth 1).
#[derive(Clone, Copy)]
struct Budgets {
    tasks: usize,
    edges: usize,
}

fn orchestrate(
    o: &mut Orchestrator<'_>,
    graphs: &[Arc<Graph>],
    kernels: &[KernelRef],
    budget: Budgets,
) -> Result<(), RuntimeFailure> {
    // ids[g][parity][point]: the task of (t, point) for the last two timesteps.
    let mut ids: Vec<[Vec<TaskId>; 2]> = graphs
        .iter()
        .map(|g| {
            [
                vec![TaskId::INVALID; g.shape.width as usize],
                vec![TaskId::INVALID; g.shape.width as usize],
            ]
        })
        .collect();
    let max_steps = graphs.iter().map(|g| g.shape.steps).max().unwrap_or(0);
    let mut iv = Intervals::new();
    for t in 0..max_steps {
        o.begin_scope(false)?;
        let (mut n_tasks, mut n_edges, mut n_spill) = (0usize, 0usize, 0usize);
        for (gi, g) in graphs.iter().enumerate() {
            let s = &g.shape;
            if t >= s.steps {
                continue;
            }
            let kernel = kernels[gi];
            let p = (t & 1) as usize;
            let q = p ^ 1;
            let lo = s.offset_at(t);
            let trivial = s.pattern == Pattern::Trivial;
            for i in lo..lo + s.width_at(t) {
                let mut a = TaskArgs::new();
                let mut edges = 0usize;
                if !trivial {
                    s.deps_at(t, i, &mut iv);
                    for &(x, y) in iv.as_slice() {
                        g.push_inputs(&mut a, q, x, y);
                    }
                    a.inout(g.row_view(p, i));
                    edges = iv.count() as usize + 1;
                    if let Some(war) = &g.war {
                        let prev = &ids[gi][q];
                        war.for_each_missing(s, t, i, &iv, |k| {
                            a.dep_wait(prev[k as usize]);
                            edges += 1;
                        });
                    }
                }
                if n_tasks > 0
                    && (n_tasks + 1 > budget.tasks
                        || n_edges + edges > budget.edges
                        || n_spill + edges.saturating_sub(16) > budget.edges)
                {
                    o.end_scope()?;
                    o.begin_scope(false)?;
                    (n_tasks, n_edges, n_spill) = (0, 0, 0);
                }
                a.scalar(Scalar::I64(t)).scalar(Scalar::I64(i));
                let id = o.submit(kernel, &a)?.id;
                ids[gi][p][i as usize] = id;
                n_tasks += 1;
                n_edges += edges;
                n_spill += edges.saturating_sub(16);
            }
        }
        o.end_scope()?;
    }
    Ok(())
}

// ----- output ----------------------------------------------------------------------------

/// `x` as C's `printf("%e")` prints it (`1.234568e-02`).
fn c_exp(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let s = format!("{x:.6e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

fn print_config(graphs: &[Arc<Graph>]) {
    println!("Running Task Benchmark");
    println!("  Configuration:");
    for g in graphs {
        let s = &g.spec;
        println!("    Task Graph {}:", g.idx + 1);
        println!("      Time Steps: {}", s.steps);
        println!("      Max Width: {}", s.width);
        println!("      Dependence Type: {}", s.pattern.name());
        println!("      Radix: {}", s.radix);
        println!("      Period: {}", g.shape.period);
        println!("      Fraction Connected: {:.6}", s.fraction);
        println!("      Kernel:");
        println!("        Type: {}", s.kernel.name());
        println!("        Iterations: {}", s.iter);
        println!("        Output Bytes: {}", s.output);
        println!("        Scratch Bytes: {}", s.scratch);
    }
}

// ----- entry -----------------------------------------------------------------------------

/// `taskring-bench taskbench <flags>`: `args` are the flags after the subcommand.
pub fn main(args: Vec<String>) -> ExitCode {
    let opts = match parse(&args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!(
                "taskring-bench taskbench: {e} (taskring-bench taskbench -h lists the flags)"
            );
            return ExitCode::from(2);
        }
    };
    // Sizes the machine cannot hold (buffers, tables, 64-bit totals) are usage errors too.
    let graphs: Vec<Arc<Graph>> = match opts
        .graphs
        .iter()
        .enumerate()
        .map(|(k, s)| {
            Graph::new(k, s)
                .map(Arc::new)
                .map_err(|e| format!("task graph {}: {e}", k + 1))
        })
        .collect()
    {
        Ok(g) => g,
        Err(e) => {
            eprintln!("taskring-bench taskbench: {e}");
            return ExitCode::from(2);
        }
    };
    let cores = core_threads(&opts);
    let scratch: u64 = opts
        .graphs
        .iter()
        .filter(|g| g.kernel == KernelKind::MemoryBound)
        .map(|g| g.scratch)
        .max()
        .unwrap_or(0);
    if scratch.saturating_mul(cores as u64) > physical_memory() {
        eprintln!("taskring-bench taskbench: -scratch {scratch} bytes for each of {cores} core threads is more than this machine's memory ({} bytes)", physical_memory());
        return ExitCode::from(2);
    }
    match run(&opts, graphs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("taskring-bench taskbench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Core threads: `-worker`, else the number of CPUs.
fn core_threads(opts: &Opts) -> usize {
    if opts.workers > 0 {
        opts.workers
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

/// The ring sizing of the dispatch: the process's, with ring 1's task window and
/// dependency pool set for these graphs (see the module doc).
fn ring_sizing(opts: &Opts, graphs: &[Arc<Graph>]) -> Result<RingSizing, String> {
    let mut sizing = RingSizing::resolve_from_process(&RuntimeEnv::default())
        .map_err(|e| format!("ring sizing: {e}"))?;
    let cores = core_threads(opts);
    let window = match opts.window {
        Some(0) => None,
        Some(w) => Some(w),
        None if sizing.source(RingField::TaskWindow, 1) != SizeSource::Default => None,
        None => {
            let points: u64 = graphs.iter().map(|g| g.shape.width as u64).sum();
            Some(
                (32 * points.max(cores as u64))
                    .next_power_of_two()
                    .clamp(64, sizing.task_window[1].max(64)),
            )
        }
    };
    if let Some(w) = window {
        let mut tw = sizing.task_window;
        tw[1] = w;
        sizing = RingSizing::from_values(tw, sizing.heap, sizing.dep_pool)
            .map_err(|e| format!("ring sizing: {e}"))?;
    }
    // Ring 1's dependency pool must hold the edges of two live timesteps: a task claims
    // its producers (timestep t-1, possibly the ring's oldest task) before it reserves
    // its nodes, so a pool filled by those producers' own edges cannot drain (taskring
    // reports that as a provable DEP_POOL_OVERFLOW). Only wide, dense graphs (e.g.
    // all_to_all beyond ~60 points) need more than the default.
    let need: u64 = graphs
        .iter()
        .map(|g| 2 * g.shape.width as u64 * g.max_edges as u64)
        .sum::<u64>()
        + graphs.iter().map(|g| g.max_edges as u64).max().unwrap_or(0);
    if need > sizing.dep_pool[1] {
        let pool = need.next_power_of_two().min(i32::MAX as u64);
        let mut dep = sizing.dep_pool;
        dep[1] = pool;
        eprintln!("taskring-bench taskbench: note: ring 1's dependency pool raised from {} to {pool} entries for these graphs", sizing.dep_pool[1]);
        sizing = RingSizing::from_values(sizing.task_window, sizing.heap, dep)
            .map_err(|e| format!("ring sizing: {e}"))?;
    }
    Ok(sizing)
}

/// Task Bench's totals over all graphs: (tasks, dependencies, FLOPs, bytes).
fn totals(graphs: &[Arc<Graph>]) -> (u64, u64, u64, u64) {
    let total_tasks: u64 = graphs.iter().map(|g| g.tasks).sum();
    let total_deps: u64 = graphs.iter().map(|g| g.deps).sum();
    // (Each graph's product was checked at setup; several graphs saturate.)
    let total_flops: u64 = graphs
        .iter()
        .fold(0u64, |a, g| a.saturating_add(g.tasks * g.flops_per_task));
    let total_bytes: u64 = graphs
        .iter()
        .fold(0u64, |a, g| a.saturating_add(g.tasks * g.bytes_per_task));
    (total_tasks, total_deps, total_flops, total_bytes)
}

/// `-v`: the runtime mapping on stderr.
fn print_mapping(chip: &ChipWorker, sizing: &RingSizing, budget: Budgets, graphs: &[Arc<Graph>]) {
    eprintln!(
        "taskbench: taskring chip with {} core threads (+ the orchestrator thread), {sizing}; scope budget {} tasks / {} edges",
        chip.cores().len(),
        budget.tasks,
        budget.edges
    );
    for g in graphs {
        eprintln!(
            "taskbench: graph {}: {} tasks, {} dependencies; buffers 2 x {} block(s) of {} rows x {} words (stride {}); max {} input tensors per task; explicit write-after-read orderings: {} total, max {} per task",
            g.idx + 1,
            g.tasks,
            g.deps,
            g.blocks[0].len(),
            g.block_rows,
            g.out_words,
            g.stride,
            g.max_inputs,
            g.explicit_total,
            g.max_explicit
        );
    }
}

fn run(opts: &Opts, graphs: Vec<Arc<Graph>>) -> Result<(), String> {
    let sizing = ring_sizing(opts, &graphs)?;
    let budget = Budgets {
        tasks: ((sizing.task_window[1] / 2).max(1)) as usize,
        edges: ((sizing.dep_pool[1] / 2).max(1)) as usize,
    };
    let mut chip = ChipWorker::new(ChipOptions {
        cores: opts.workers,
        prewarm: vec![sizing],
        orchestrator_helps: opts.helper,
        ..Default::default()
    })
    .map_err(|e| format!("could not start the chip: {e}"))?;
    let counters = Arc::new(Counters::new());
    let kernels: Vec<KernelRef> = graphs
        .iter()
        .map(|g| {
            KernelRef::leak(TbKernel {
                g: g.clone(),
                counters: counters.clone(),
            })
        })
        .collect();
    let (total_tasks, total_deps, total_flops, total_bytes) = totals(&graphs);

    print_config(&graphs);
    if opts.verbose {
        print_mapping(&chip, &sizing, budget, &graphs);
    }

    let prog_graphs = graphs.clone();
    let prog_kernels = kernels.clone();
    let program = Program::new("taskbench", move |o, _| {
        orchestrate(o, &prog_graphs, &prog_kernels, budget)
    });
    let mut run_once = |what: &str| -> Result<f64, String> {
        counters.take();
        let t0 = Instant::now();
        chip.run_with_sizing(&program, &[], &sizing)
            .map_err(|e| format!("{what} failed: {e}"))?;
        let dt = t0.elapsed().as_secs_f64();
        let done = counters.take();
        if done != total_tasks {
            return Err(format!(
                "{what}: validation failed: {done} tasks executed, the graphs have {total_tasks}"
            ));
        }
        Ok(dt)
    };
    for k in 0..opts.warmup {
        run_once(&format!("warm-up run {}", k + 1))?;
    }
    let elapsed = run_once("the run")?;

    println!("Total Tasks {total_tasks}");
    println!("Total Dependencies {total_deps}");
    println!("Total FLOPs {total_flops}");
    println!("Total Bytes {total_bytes}");
    println!("Elapsed Time {} seconds", c_exp(elapsed));
    println!("FLOP/s {}", c_exp(total_flops as f64 / elapsed));
    println!("B/s {}", c_exp(total_bytes as f64 / elapsed));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(p: Pattern, steps: i64, width: i64, radix: i64) -> Shape {
        Shape::new(&GraphSpec {
            pattern: p,
            steps,
            width,
            radix,
            ..Default::default()
        })
    }

    fn pts(s: &Shape, t: i64, i: i64) -> Vec<i64> {
        let mut iv = Intervals::new();
        s.deps_at(t, i, &mut iv);
        iv.as_slice().iter().flat_map(|&(a, b)| a..=b).collect()
    }

    #[test]
    fn patterns() {
        let s = shape(Pattern::Stencil1D, 4, 4, 3);
        assert_eq!(pts(&s, 1, 0), vec![0, 1]);
        assert_eq!(pts(&s, 1, 2), vec![1, 2, 3]);
        assert_eq!(pts(&s, 0, 2), Vec::<i64>::new());
        let s = shape(Pattern::Stencil1DPeriodic, 4, 4, 3);
        assert_eq!(pts(&s, 1, 0), vec![0, 1, 3]);
        let s = shape(Pattern::Tree, 5, 8, 3);
        assert_eq!(
            (0..5).map(|t| s.width_at(t)).collect::<Vec<_>>(),
            vec![1, 2, 4, 8, 8]
        );
        assert_eq!(pts(&s, 3, 5), vec![2]);
        let s = shape(Pattern::Dom, 6, 3, 3);
        assert_eq!(
            (0..6)
                .map(|t| (s.offset_at(t), s.width_at(t)))
                .collect::<Vec<_>>(),
            vec![(0, 1), (0, 2), (0, 3), (0, 3), (1, 2), (2, 1)]
        );
        assert_eq!(pts(&s, 4, 1), vec![0, 1]);
        assert_eq!(pts(&s, 5, 2), vec![1, 2]);
        let s = shape(Pattern::Fft, 4, 8, 3);
        assert_eq!(pts(&s, 1, 3), vec![2, 3, 4]);
        assert_eq!(pts(&s, 2, 3), vec![1, 3, 5]);
        assert_eq!(pts(&s, 3, 3), vec![3, 7]);
        assert_eq!(pts(&s, 4, 3), vec![2, 3, 4]);
        let s = shape(Pattern::Nearest, 4, 10, 4);
        assert_eq!(pts(&s, 1, 5), vec![4, 5, 6, 7]);
        let s = shape(Pattern::Spread, 4, 12, 3);
        assert_eq!(pts(&s, 3, 1), vec![1, 5, 9]);
        assert_eq!(pts(&s, 1, 1), vec![1, 6, 10]);
        let s = shape(Pattern::AllToAll, 2, 5, 3);
        assert_eq!(pts(&s, 1, 4), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn war_needed_only_for_asymmetric_patterns() {
        for (p, radix, needed) in [
            (Pattern::NoComm, 3, false),
            (Pattern::Stencil1D, 3, false),
            (Pattern::Stencil1DPeriodic, 3, false),
            (Pattern::Nearest, 3, false),
            (Pattern::Nearest, 4, true),
            (Pattern::Dom, 3, true),
            (Pattern::Tree, 3, true),
            (Pattern::Fft, 3, true),
            (Pattern::Spread, 3, true),
        ] {
            assert_eq!(
                War::build(&shape(p, 8, 16, radix)).unwrap().is_some(),
                needed,
                "{p:?} radix {radix}"
            );
        }
        assert!(War::build(&shape(Pattern::AllToAll, 8, 16, 3))
            .unwrap()
            .is_none());
    }

    #[test]
    fn c_format() {
        assert_eq!(c_exp(0.0123456789), "1.234568e-02");
        assert_eq!(c_exp(0.0), "0.000000e+00");
        assert_eq!(c_exp(6.02e23), "6.020000e+23");
    }

    #[test]
    fn intervals_normalize() {
        let mut iv = Intervals::new();
        iv.push(5, 5);
        iv.push(1, 2);
        iv.push(3, 3);
        iv.push(7, 9);
        iv.push(8, 8);
        iv.normalize();
        assert_eq!(iv.as_slice(), &[(1, 3), (5, 5), (7, 9)]);
        iv.clip(2, 8);
        assert_eq!(iv.as_slice(), &[(2, 3), (5, 5), (7, 8)]);
        assert_eq!(iv.count(), 5);
    }
}
