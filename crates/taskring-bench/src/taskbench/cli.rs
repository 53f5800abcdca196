//! The command line: Task Bench's single-dash flags (one graph's flags, `-and` starting
//! the next graph's) and this driver's own, checked into one `GraphSpec` per graph and
//! the run's `Opts`.

use super::kernels::{KernelKind, KERNELS};
use super::pattern::{Pattern, MAX_IV, PATTERNS};

pub(super) const USAGE: &str = "usage: taskring-bench taskbench [-steps N] [-width N] [-type PATTERN] [-radix N] [-period N]
                           [-fraction F] [-kernel KERNEL] [-iter N] [-output BYTES] [-scratch BYTES]
                           [-and <flags of another graph>]... [-worker N] [-window N] [-warmup N] [-helper 0|1] [-pin 0|1] [-v]
  PATTERN: trivial no_comm stencil_1d stencil_1d_periodic dom tree fft all_to_all nearest spread random_nearest
  KERNEL:  empty busy_wait compute_bound memory_bound
  Defaults per graph: -steps 4 -width 4 -type trivial -radix 3 -period 3 (spread, random_nearest)
  -fraction 0.25 -kernel empty -iter 0 -output 16 -scratch 0. `-and` starts another independent graph run in
  the same execution (its flags start from the defaults). -worker: core threads (default: CPUs).
  -window: ring 1's task window (default: PTO2_RING_TASK_WINDOW, else sized to the graph; 0: runtime default).
  -warmup: untimed runs before the timed one. -pin 1: the orchestrator thread on the first allowed CPU,
  core thread k on the (k+1)-th (modulo the allowed CPUs). -v: the runtime mapping on stderr, and after the timed run
  each thread's time on a CPU, time waiting for one and context switches during it.";

/// Most output bytes per point (a row's stride in 8-byte words must fit 32 bits).
const MAX_OUTPUT_BYTES: u64 = 1 << 34;

/// One graph's flags.
#[derive(Clone, Debug)]
pub(super) struct GraphSpec {
    pub(super) steps: i64,
    pub(super) width: i64,
    pub(super) pattern: Pattern,
    pub(super) radix: i64,
    /// As given (-1: unset); the effective period is `Shape::period`.
    pub(super) period: i64,
    pub(super) fraction: f64,
    pub(super) kernel: KernelKind,
    pub(super) iter: u64,
    pub(super) output: u64,
    pub(super) scratch: u64,
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

/// The run's flags.
pub(super) struct Opts {
    pub(super) graphs: Vec<GraphSpec>,
    /// Core threads (0: the number of CPUs).
    pub(super) workers: usize,
    /// Ring 1's task window: None = env or auto, Some(0) = runtime default.
    pub(super) window: Option<u64>,
    pub(super) warmup: u32,
    pub(super) verbose: bool,
    /// The orchestrator thread runs ready tasks while it waits (`-helper 1`).
    pub(super) helper: bool,
    /// Each thread on its own CPU, as far as there are CPUs (`-pin 1`).
    pub(super) pin: bool,
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

/// The value named `s` in `table` (the names of `-type` or `-kernel`).
fn named<T: Copy>(table: &[(&str, T)], s: &str, flag: &str) -> Result<T, String> {
    match table.iter().find(|(n, _)| *n == s) {
        Some(&(_, v)) => Ok(v),
        None => {
            let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
            Err(format!(
                "unknown {flag} '{s}' (one of: {})",
                names.join(" ")
            ))
        }
    }
}

/// The name of `v` in `table` (`?` if it has none).
/// `Err("")`: `-h` (print the usage); another `Err`: a usage error.
pub(super) fn parse(args: &[String]) -> Result<Opts, String> {
    let mut opts = Opts {
        graphs: Vec::new(),
        workers: 0,
        window: None,
        warmup: 0,
        verbose: false,
        helper: false,
        pin: false,
    };
    let mut g = GraphSpec::default();
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        match flag {
            "-steps" => g.steps = num(value(args, &mut i, flag)?, flag)?,
            "-width" => g.width = num(value(args, &mut i, flag)?, flag)?,
            "-type" => g.pattern = named(&PATTERNS, value(args, &mut i, flag)?, flag)?,
            "-radix" => g.radix = num(value(args, &mut i, flag)?, flag)?,
            "-period" => g.period = num(value(args, &mut i, flag)?, flag)?,
            "-fraction" => g.fraction = num(value(args, &mut i, flag)?, flag)?,
            "-kernel" => g.kernel = named(&KERNELS, value(args, &mut i, flag)?, flag)?,
            "-iter" => g.iter = num(value(args, &mut i, flag)?, flag)?,
            "-output" => g.output = num(value(args, &mut i, flag)?, flag)?,
            "-scratch" => g.scratch = num(value(args, &mut i, flag)?, flag)?,
            "-and" => opts.graphs.push(std::mem::take(&mut g)),
            "-worker" | "-workers" => {
                opts.workers = num(value(args, &mut i, flag)?, flag)?;
                if opts.workers > taskring::MAX_CORES {
                    return Err(format!(
                        "-worker must be in 0..={} (got {}; 0 = the number of CPUs)",
                        taskring::MAX_CORES,
                        opts.workers
                    ));
                }
            }
            "-warmup" => opts.warmup = num(value(args, &mut i, flag)?, flag)?,
            "-helper" => opts.helper = num::<u32>(value(args, &mut i, flag)?, flag)? != 0,
            "-pin" => opts.pin = num::<u32>(value(args, &mut i, flag)?, flag)? != 0,
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
pub(super) fn physical_memory() -> u64 {
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
