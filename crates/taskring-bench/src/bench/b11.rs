//! B11 device memory: what per-task ring sizing saves in a chip's device memory
//! (`docs/api.md` §12), on one L3 workload sized three ways.
//!
//! The workload is one L3 dispatch (`Node::run`) on a node of 4 chip processes (one
//! core thread each): one large attention-like L2 task on chip 0 and 32 small
//! element-wise L2 tasks spread round-robin over the 4 chips.
//!
//! - The attention-like task opens one scope (ring 1), allocates three 32 MiB f32
//!   buffers (scores, probabilities, context: 96 MiB of ring 1's heap), adds a query
//!   tile into 120 tiles of the scores, writing the probabilities, and copies one tile
//!   to its output: 122 tasks in one scope (the three buffers are one allocation), so
//!   ring 1 needs a 128-slot window and a 128 MiB heap.
//! - A small task scales a 4 KiB input into a runtime output (ring 0's heap) and adds
//!   it back to the input into its output: 3 tasks, a 16 KiB heap.
//!
//! The ways of sizing them (`Way`):
//!
//! - (a) `global`: one sizing for every task, large enough for the largest — one value
//!   per resource for all four rings (what `RunConfig(ring_heap=...)` or a one-number
//!   `PTO2_RING_HEAP` gives), the largest need of any ring: window 128, heap 128 MiB,
//!   dep pool 256 on each ring;
//! - (b) `per_task`: each task's own sizing by hand, each ring sized for its own use;
//! - (c) `auto`: the runtime sizing each task from its measured need. This build has no
//!   automatic sizing, so the way is skipped with a note (`Way::configs`).
//!
//! The ways run on separate nodes with the same device memory (1 GiB per chip), their
//! dispatches interleaved: per sample, `batch` dispatches of each way in turn. After the
//! repetitions each chip reports its arena cache (`Node::chip_arena_stats`: resident
//! device bytes); the chip task reports give each chip's distinct sizings (the sum of
//! their `device_footprint`) and its peak use. Then the tight variant: 4 chips of
//! 256 MiB, where (a)'s arena (≈ 545 MB) cannot fit and its dispatch fails with
//! DEVICE_OUT_OF_MEMORY, while (b)'s arenas (≈ 141 MB on chip 0) do.
//!
//! Bars (`docs/benchmarks.md`): (b) reserves ≤ 25 % of (a)'s device memory at ≥ 0.95×
//! its throughput; with the tight device memory, (a) fails with DEVICE_OUT_OF_MEMORY
//! while (b) runs.

use super::*;
use parking_lot::RwLock;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use taskring::builtin::{ADD, COPY, SCALE};
use taskring::node::shm::SharedBuffer;
use taskring::node::*;
use taskring::*;

/// Chips of the node.
const CHIPS: usize = 4;
/// The chip that runs the attention-like task.
const BIG_CHIP: usize = 0;
/// Small element-wise tasks per dispatch.
const SMALL_TASKS: usize = 32;
/// f32 elements of a small task's input and output (4 KiB).
const SMALL_ELEMS: u32 = 1024;
/// f32 elements of each of the attention-like task's three buffers (32 MiB).
const ATTN_ELEMS: u32 = 8 << 20;
/// Tiles of the scores the attention-like task works on (in one scope).
const ATTN_TILES: u32 = 120;
/// f32 elements of a tile (1 KiB).
const TILE: u32 = 256;
/// Device memory per chip in the main variant (every way fits).
const ROOMY: u64 = 1 << 30;
/// Device memory per chip in the tight variant ((a) cannot fit, (b) can).
const TIGHT: u64 = 256 << 20;
/// Callable handles.
const ATTN: u32 = 0;
const ELEMENTWISE: u32 = 1;

/// A way of sizing the workload's tasks.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Global,
    PerTask,
    Auto,
}

const WAYS: [Way; 3] = [Way::Global, Way::PerTask, Way::Auto];

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::Global => "a_global",
            Way::PerTask => "b_per_task",
            Way::Auto => "c_auto",
        }
    }

    /// The configs of (the attention-like task, a small task), or why this way cannot
    /// run in this build. Automatic sizing is one more arm here: both tasks get the
    /// automatic entry in every field.
    fn configs(self) -> Result<(CallConfig, CallConfig), String> {
        match self {
            Way::Global => {
                let g = env([128; 4], [128 << 20; 4], [256; 4]);
                Ok((g.clone(), g))
            }
            Way::PerTask => Ok((
                env(
                    [16, 128, 4, 4],
                    [16 << 10, 128 << 20, 1024, 1024],
                    [16, 256, 4, 4],
                ),
                env([16, 4, 4, 4], [16 << 10, 1024, 1024, 1024], [16, 4, 4, 4]),
            )),
            Way::Auto => Err("auto: not available in this build".into()),
        }
    }
}

fn env(window: [u64; 4], heap: [u64; 4], dep_pool: [u64; 4]) -> CallConfig {
    let mut c = CallConfig::default();
    c.runtime_env.ring_task_window = window;
    c.runtime_env.ring_heap = heap;
    c.runtime_env.ring_dep_pool = dep_pool;
    c
}

fn callables() -> Arc<RwLock<Vec<ChipCallable>>> {
    Arc::new(RwLock::new(vec![
        // ATTN(q: in [TILE], out: out [TILE])
        ChipCallable {
            program: Program::new("attention_like", |o, args| {
                let (q, out) = (args[0].tensor()?, args[1].tensor()?);
                o.scope(|o| {
                    let spec = TensorSpec::new(&[ATTN_ELEMS], DType::F32).expect("a valid spec");
                    let bufs = o.alloc(&[spec, spec, spec])?;
                    let (scores, probs) = (bufs.output(0), bufs.output(1));
                    let stride = ATTN_ELEMS / ATTN_TILES;
                    let tile = |t: &Tensor, i: u32| {
                        t.view(&[TILE], (i * stride) as u64, None)
                            .map_err(|e| RuntimeFailure::invalid_args(None, e.to_string()))
                    };
                    for i in 0..ATTN_TILES {
                        let mut a = TaskArgs::new();
                        a.input(q)
                            .input(tile(&scores, i)?)
                            .output_existing(tile(&probs, i)?);
                        o.submit(ADD, &a)?;
                    }
                    let mut a = TaskArgs::new();
                    a.input(tile(&probs, 0)?).output_existing(out);
                    o.submit(COPY, &a).map(|_| ())
                })
            }),
            signature: vec![ArgDir::In, ArgDir::Out],
        },
        // ELEMENTWISE(x: in [SMALL_ELEMS], y: out [SMALL_ELEMS]): y = 2x + x
        ChipCallable {
            program: Program::new("elementwise", |o, args| {
                let (x, y) = (args[0].tensor()?, args[1].tensor()?);
                let spec = TensorSpec::new(&[SMALL_ELEMS], DType::F32).expect("a valid spec");
                let mut a = TaskArgs::new();
                a.input(x).output(spec).scalar(Scalar::F64(2.0));
                let tmp = o.submit(SCALE, &a)?.output(0);
                let mut a = TaskArgs::new();
                a.input(tmp).input(x).output_existing(y);
                o.submit(ADD, &a).map(|_| ())
            }),
            signature: vec![ArgDir::In, ArgDir::Out],
        },
    ]))
}

fn make_node(device_memory: u64) -> Result<Node, String> {
    let opts = NodeOptions {
        device_ids: (0..CHIPS as u32).collect(),
        chip_processes: true,
        chip_cores: 1,
        prewarm: None,
        device_memory,
        ..Default::default()
    };
    Node::new(opts, callables(), &NoForkHooks).map_err(|e| format!("node of {CHIPS} chips: {e}"))
}

/// The tensors of one dispatch, in one shared buffer: the attention-like task's query
/// and output tiles, then each small task's input and output.
struct Tensors {
    _buf: SharedBuffer,
    q: Tensor,
    attn_out: Tensor,
    small: Vec<(Tensor, Tensor)>,
}

impl Tensors {
    fn new() -> Result<Tensors, String> {
        let elems = 2 * TILE as usize + 2 * SMALL_TASKS * SMALL_ELEMS as usize;
        let buf = SharedBuffer::new(elems * 4).map_err(|e| e.to_string())?;
        let at = |off: usize, n: u32| {
            Tensor::from_raw(buf.as_ptr() as u64 + off as u64 * 4, &[n], DType::F32)
        };
        let q = at(0, TILE);
        let attn_out = at(TILE as usize, TILE);
        let base = 2 * TILE as usize;
        let small = (0..SMALL_TASKS)
            .map(|i| {
                let off = base + 2 * i * SMALL_ELEMS as usize;
                (
                    at(off, SMALL_ELEMS),
                    at(off + SMALL_ELEMS as usize, SMALL_ELEMS),
                )
            })
            .collect();
        Ok(Tensors {
            _buf: buf,
            q,
            attn_out,
            small,
        })
    }
}

/// What one way's chips did: per chip the distinct sizings (key → device footprint),
/// the largest peak use (as the device footprint of a sizing exactly that large) and
/// the tasks run.
#[derive(Default)]
struct Usage {
    sizings: [BTreeMap<[u64; 12], u64>; CHIPS],
    peak_used: [u64; CHIPS],
    tasks: [u64; CHIPS],
    /// The attention-like task's largest peak per ring and resource.
    attn_peak: [u64; 12],
}

impl Usage {
    fn add(&mut self, rep: &NodeRunReport) {
        for t in &rep.tasks {
            let Some(r) = &t.run else { continue };
            let w = t.worker;
            self.sizings[w].insert(r.ring_sizing.key(), device_footprint(&r.ring_sizing));
            let mut used = r.ring_sizing;
            used.task_window = r.peak.task_window;
            used.heap = r.peak.heap;
            used.dep_pool = r.peak.dep_pool;
            self.peak_used[w] = self.peak_used[w].max(device_footprint(&used));
            self.tasks[w] += 1;
            if t.callable == ATTN {
                let p = r.peak.to_array();
                self.attn_peak = std::array::from_fn(|i| self.attn_peak[i].max(p[i]));
            }
        }
    }
}

/// One dispatch of the workload sized by `(big, small)`; returns its report.
fn dispatch(
    node: &mut Node,
    t: &Tensors,
    (big, small): &(CallConfig, CallConfig),
) -> Result<NodeRunReport, String> {
    let (big, small) = (big.clone(), small.clone());
    let (q, attn_out, pairs) = (t.q, t.attn_out, t.small.clone());
    let rep = node
        .run(
            move |o| {
                let a = [NextLevelArg::Tensor(q), NextLevelArg::Tensor(attn_out)];
                o.submit_next_level(ATTN, &a, &big, BIG_CHIP)?;
                for (i, &(x, y)) in pairs.iter().enumerate() {
                    let a = [NextLevelArg::Tensor(x), NextLevelArg::Tensor(y)];
                    o.submit_next_level(ELEMENTWISE, &a, &small, i % CHIPS)?;
                }
                Ok(())
            },
            &CallConfig::default(),
            None,
        )
        .map_err(|e| e.to_string())?;
    if let Some(bad) = rep
        .tasks
        .iter()
        .find(|t| t.error.is_some() || t.run.is_none())
    {
        return Err(format!(
            "chip {} task failed: {}",
            bad.worker,
            bad.error.as_deref().unwrap_or("no report")
        ));
    }
    if rep.tasks.len() != 1 + SMALL_TASKS {
        return Err(format!("unexpected L3 report: {} tasks", rep.tasks.len()));
    }
    Ok(rep)
}

/// One way's figures after its repetitions.
struct WayResult {
    way: Way,
    /// Dispatches per second, one sample per batch.
    tput: Series,
    resident: [u64; CHIPS],
    footprint: [u64; CHIPS],
    peak_used: [u64; CHIPS],
    arenas: [usize; CHIPS],
    tasks: [u64; CHIPS],
    attn_peak: [u64; 12],
}

impl WayResult {
    fn total(v: &[u64; CHIPS]) -> u64 {
        v.iter().sum()
    }
    fn json(&self) -> serde_json::Value {
        let chips: Vec<_> = (0..CHIPS)
            .map(|w| {
                json!({ "chip": w, "resident_bytes": self.resident[w],
                    "footprint_bytes": self.footprint[w], "peak_used_bytes": self.peak_used[w],
                    "sizings": self.arenas[w], "tasks": self.tasks[w] })
            })
            .collect();
        json!({ "way": self.way.label(), "chips": chips,
            "total": { "resident_bytes": Self::total(&self.resident),
                "footprint_bytes": Self::total(&self.footprint),
                "peak_used_bytes": Self::total(&self.peak_used) },
            "dispatches_per_s": self.tput.median,
            "attention_like_peak": { "task_window": &self.attn_peak[..4],
                "heap": &self.attn_peak[4..8], "dep_pool": &self.attn_peak[8..] } })
    }
}

/// The main variant: the runnable ways on nodes of `ROOMY` chips, dispatches
/// interleaved, `reps` samples of `batch` dispatches each.
fn main_variant(
    ways: &[(Way, (CallConfig, CallConfig))],
    reps: usize,
    batch: usize,
    prog: &mut Progress,
) -> Result<Vec<WayResult>, String> {
    let tensors = Tensors::new()?;
    let mut nodes = ways
        .iter()
        .map(|_| make_node(ROOMY))
        .collect::<Result<Vec<_>, _>>()?;
    let mut usage: Vec<Usage> = ways.iter().map(|_| Usage::default()).collect();
    // Warm-up: each chip builds its arenas.
    for ((node, (_, cfgs)), u) in nodes.iter_mut().zip(ways).zip(&mut usage) {
        for _ in 0..2 {
            u.add(&dispatch(node, &tensors, cfgs)?);
        }
    }
    let mut samples: Vec<Vec<f64>> = ways.iter().map(|_| vec![]).collect();
    for rep in 0..reps {
        // The ways take turns going first (machine noise hits them alike).
        let mut order: Vec<usize> = (0..ways.len()).collect();
        order.rotate_left(rep % ways.len().max(1));
        for k in order {
            let (node, (_, cfgs)) = (&mut nodes[k], &ways[k]);
            let mut reports = Vec::with_capacity(batch);
            let t0 = Instant::now();
            for _ in 0..batch {
                reports.push(dispatch(node, &tensors, cfgs)?);
            }
            samples[k].push(batch as f64 / t0.elapsed().as_secs_f64());
            reports.iter().for_each(|r| usage[k].add(r));
        }
        prog.tick("dispatches");
    }
    let mut out = vec![];
    for (((node, (way, _)), u), s) in nodes.iter().zip(ways).zip(usage).zip(samples) {
        let mut resident = [0; CHIPS];
        for (w, r) in resident.iter_mut().enumerate() {
            *r = node
                .chip_arena_stats(w)
                .map_err(|e| format!("arena stats of chip {w}: {e}"))?
                .resident_bytes;
        }
        out.push(WayResult {
            way: *way,
            tput: Series::new("dispatches/s", s),
            resident,
            footprint: u.sizings.each_ref().map(|m| m.values().sum()),
            peak_used: u.peak_used,
            arenas: u.sizings.each_ref().map(|m| m.len()),
            tasks: u.tasks,
            attn_peak: u.attn_peak,
        });
    }
    Ok(out)
}

/// The tight variant's outcome for one way: dispatches run, or the failure's text.
struct TightResult {
    way: Way,
    ran: usize,
    error: Option<String>,
    resident: u64,
}

/// Each runnable way on a fresh node of `TIGHT` chips: `n` dispatches, stopping at the
/// first failure.
fn tight_variant(
    ways: &[(Way, (CallConfig, CallConfig))],
    n: usize,
) -> Result<Vec<TightResult>, String> {
    let tensors = Tensors::new()?;
    let mut out = vec![];
    for (way, cfgs) in ways {
        let mut node = make_node(TIGHT)?;
        let (mut ran, mut error) = (0, None);
        for _ in 0..n {
            match dispatch(&mut node, &tensors, cfgs) {
                Ok(_) => ran += 1,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let resident = (0..CHIPS)
            .map(|w| node.chip_arena_stats(w).map(|s| s.resident_bytes))
            .sum::<Result<u64, _>>()
            .map_err(|e| format!("arena stats: {e}"))?;
        out.push(TightResult {
            way: *way,
            ran,
            error,
            resident,
        });
    }
    Ok(out)
}

/// The tightest single sizing that fits every task: each ring and resource at the
/// largest of (b)'s entries (for reference beside (a)'s one value for all rings).
fn tightest_single_sizing() -> Result<RingSizing, String> {
    let (big, small) = Way::PerTask.configs()?;
    let (x, y) = (&big.runtime_env, &small.runtime_env);
    let max = |p: [u64; 4], q: [u64; 4]| std::array::from_fn(|r| p[r].max(q[r]));
    let e = env(
        max(x.ring_task_window, y.ring_task_window),
        max(x.ring_heap, y.ring_heap),
        max(x.ring_dep_pool, y.ring_dep_pool),
    );
    RingSizing::resolve_from_process(&e.runtime_env).map_err(|e| e.to_string())
}

fn mb(b: u64) -> String {
    format!("{:.1}", b as f64 / 1e6)
}

/// The table: per way, each chip and the total.
fn table(b: &Bench, res: &[WayResult]) {
    b.say(&format!(
        "   {:<11} {:<6} {:>8} {:>14} {:>14} {:>13} {:>6} {:>14}",
        "way",
        "chip",
        "sizings",
        "reserved MB",
        "Σ footprint MB",
        "peak used MB",
        "tasks",
        "dispatches/s"
    ));
    for r in res {
        for w in 0..CHIPS {
            b.say(&format!(
                "   {:<11} {:<6} {:>8} {:>14} {:>14} {:>13} {:>6} {:>14}",
                r.way.label(),
                w,
                r.arenas[w],
                mb(r.resident[w]),
                mb(r.footprint[w]),
                mb(r.peak_used[w]),
                r.tasks[w],
                ""
            ));
        }
        b.say(&format!(
            "   {:<11} {:<6} {:>8} {:>14} {:>14} {:>13} {:>6} {:>14}",
            r.way.label(),
            "total",
            r.arenas.iter().sum::<usize>(),
            mb(WayResult::total(&r.resident)),
            mb(WayResult::total(&r.footprint)),
            mb(WayResult::total(&r.peak_used)),
            r.tasks.iter().sum::<u64>(),
            format!("{:.0}", r.tput.median)
        ));
    }
}

/// Is `text` a chip's DEVICE_OUT_OF_MEMORY failure as L3 reports it?
fn is_device_oom(text: &str) -> bool {
    text.contains(&format!(
        "{} (code {})",
        StatusCode::DeviceOutOfMemory.name(),
        StatusCode::DeviceOutOfMemory as u32
    ))
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b11",
        "device_memory",
        "device memory reserved by global, per-task and automatic ring sizing (L3, 4 chips)",
        opts,
    );
    let reps = opts.reps.max(5);
    let batch = if opts.quick { 10 } else { 100 };
    let tight_n = 3;
    let mut ways = vec![];
    let mut notes = vec![];
    for way in WAYS {
        match way.configs() {
            Ok(c) => ways.push((way, c)),
            Err(note) => {
                b.say(&format!("   {}: skipped — {note}", way.label()));
                notes.push(json!({ "way": way.label(), "skipped": note }));
            }
        }
    }
    let samples = 3 * reps;
    let mut prog = Progress::new("b11", samples);
    let res = main_variant(&ways, samples, batch, &mut prog)?;
    prog.done();
    table(&b, &res);
    if let Some(r) = res.first() {
        let p = &r.attn_peak;
        b.say(&format!(
            "   attention-like task's peak use per ring: window {:?}, heap {:?} bytes, dep pool {:?}",
            &p[..4],
            &p[4..8],
            &p[8..]
        ));
    }
    let tight = tight_variant(&ways, tight_n)?;

    let find = |w: Way| res.iter().find(|r| r.way == w);
    let (a, pt) = (
        find(Way::Global).ok_or("way (a) did not run")?,
        find(Way::PerTask).ok_or("way (b) did not run")?,
    );
    let (ra, rb) = (
        WayResult::total(&a.resident),
        WayResult::total(&pt.resident),
    );
    let mem_ratio = rb as f64 / ra as f64;
    let tput_ratio = pt.tput.median / a.tput.median;
    let mem_ok = mem_ratio <= 0.25;
    let tput_ok = tput_ratio >= 0.95;
    let pf = |ok: bool| if ok { "PASS" } else { "MISS" };
    b.say(&format!(
        "   (b)/(a): reserved {:.1} % (bar ≤ 25 %: {}), throughput {:.3}x (bar ≥ 0.95x: {})",
        100.0 * mem_ratio,
        pf(mem_ok),
        tput_ratio,
        pf(tput_ok)
    ));
    let tightest = tightest_single_sizing()?;
    let tightest_bytes = device_footprint(&tightest) * CHIPS as u64;
    b.say(&format!(
        "   for reference: one per-ring sizing covering every task would reserve {} MB in all; (b) is {:.1} % of it",
        mb(tightest_bytes),
        100.0 * rb as f64 / tightest_bytes as f64
    ));

    let ta = tight.iter().find(|t| t.way == Way::Global);
    let tb = tight.iter().find(|t| t.way == Way::PerTask);
    for t in &tight {
        b.say(&format!(
            "   tight ({} MiB per chip) {}: {}",
            TIGHT >> 20,
            t.way.label(),
            match &t.error {
                Some(e) => format!("failed after {} dispatches: {e}", t.ran),
                None => format!(
                    "{} dispatches ran, {} MB reserved in all",
                    t.ran,
                    mb(t.resident)
                ),
            }
        ));
    }
    let a_oom = ta.is_some_and(|t| t.error.as_deref().is_some_and(is_device_oom));
    let b_runs = tb.is_some_and(|t| t.error.is_none() && t.ran == tight_n);
    b.say(&format!(
        "   tight: (a) fails with DEVICE_OUT_OF_MEMORY: {}; (b) runs: {}",
        pf(a_oom),
        pf(b_runs)
    ));

    for r in &res {
        let mut c = Case::new(
            r.way.label(),
            &format!(
                "dispatches/s of one L3 run (1 attention-like task on chip {BIG_CHIP}, {SMALL_TASKS} element-wise tasks over {CHIPS} chips), median of {samples} batches of {batch}, the ways interleaved"
            ),
            r.tput.clone(),
        )
        .extra(r.json());
        if r.way == Way::PerTask {
            c = c
                .with_baseline(
                    "a_global",
                    a.tput.clone(),
                    "per-task throughput / global throughput",
                    tput_ratio,
                )
                .bar(
                    format!(
                        "(b) reserves ≤ 25 % of (a)'s device memory ({:.1} %)",
                        100.0 * mem_ratio
                    ),
                    mem_ok,
                )
                .bar(
                    format!("(b) at ≥ 0.95× (a)'s throughput ({tput_ratio:.3}×)"),
                    tput_ok,
                );
        }
        b.push(c);
    }
    let tight_json: Vec<_> = tight
        .iter()
        .map(|t| json!({ "way": t.way.label(), "dispatches": t.ran, "error": t.error, "resident_bytes": t.resident }))
        .collect();
    b.push(
        Case::new(
            "tight_device_memory",
            &format!(
                "dispatches run (of {tight_n}) on 4 chips of {} MiB each",
                TIGHT >> 20
            ),
            Series::new("dispatches", vec![tb.map(|t| t.ran).unwrap_or(0) as f64]),
        )
        .bar(
            "with a tight device memory, (a) fails with DEVICE_OUT_OF_MEMORY while (b) runs",
            a_oom && b_runs,
        )
        .extra(json!({ "ways": tight_json })),
    );
    let summary = format!(
        "reserved (a) {} MB, (b) {} MB = {:.1} % (bar ≤ 25 %: {}); throughput (b)/(a) {:.3}x ({:.0}/{:.0} dispatches/s, bar ≥ 0.95x: {}); tight {} MiB: (a) DEVICE_OUT_OF_MEMORY {}, (b) runs {}; auto skipped",
        mb(ra),
        mb(rb),
        100.0 * mem_ratio,
        pf(mem_ok),
        tput_ratio,
        pt.tput.median,
        a.tput.median,
        pf(tput_ok),
        TIGHT >> 20,
        pf(a_oom),
        pf(b_runs),
    );
    let configs: Vec<_> = ways
        .iter()
        .map(|(w, (big, small))| {
            json!({ "way": w.label(), "attention_like": format!("{:?}", big.runtime_env),
                "elementwise": format!("{:?}", small.runtime_env) })
        })
        .collect();
    Ok(b.finish_as(
        "b11",
        json!({ "reps": reps, "samples": samples, "dispatches_per_sample": batch, "chips": CHIPS, "chip_cores": 1,
            "big_chip": BIG_CHIP, "small_tasks_per_dispatch": SMALL_TASKS,
            "small_task_bytes": SMALL_ELEMS * 4, "attention_buffers_bytes": 3 * ATTN_ELEMS as u64 * 4,
            "attention_tasks_in_scope": ATTN_TILES + 2,
            "device_memory_bytes": ROOMY, "tight_device_memory_bytes": TIGHT,
            "configs": configs, "skipped": notes,
            "tightest_single_sizing": { "sizing": tightest.to_string(), "reserved_bytes_all_chips": tightest_bytes },
            "tight_dispatches": tight_n }),
        summary,
    ))
}
