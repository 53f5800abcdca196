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
//! - (c) `auto`: the runtime sizing each task from its measured need — every entry of
//!   both tasks' `runtime_env` is `RuntimeEnv::AUTO` (`docs/api.md` §12.1). Each chip
//!   process learns each program's need (per program name and argument signature) on
//!   its first dispatch, which runs on the defaults (halved to fit the device memory)
//!   and whose arena is dropped afterwards; later dispatches get need × 1.25 rounded up.
//!
//! The ways run on separate nodes with the same device memory (1 GiB per chip), their
//! dispatches interleaved in rounds: per round, `batch` dispatches of each way in turn
//! (`round_order`: each way first, and after each other way, equally often), one
//! dispatches/s sample per way. Rounds come in blocks,
//! each block on fresh nodes (made in a rotating order) after two warm-up dispatches of
//! each way (for (c): the learning dispatch and one learned one), which are reported
//! apart and not measured; a first block warms up the process and is reported, not
//! judged. Throughput against (a) is judged per round (the two ways' samples of one
//! round form a ratio), per block (the median of its rounds' ratios) and over the blocks
//! (their geometric mean with a 95 % interval, `paired.rs`): the bar is met when the
//! whole interval is at or above it, missed when the whole interval is below it, and
//! undecided otherwise. Blocks are added until every verdict is decided or a cap is
//! reached. After the first measured block each chip reports its arena cache
//! (`Node::chip_arena_stats`: resident device bytes); the chip task
//! reports of that block's measured dispatches give each chip's distinct sizings (the sum of
//! their `device_footprint`) and its peak use. Then the tight variant: 4 chips of
//! 256 MiB, where (a)'s arena (≈ 539 MB) cannot fit and its dispatch fails with
//! DEVICE_OUT_OF_MEMORY, while (b)'s arenas (≈ 135 MB on chip 0) do; (c) gets one
//! learning dispatch and then the same dispatches as the others, each outcome kept.
//!
//! Bars (`docs/benchmarks.md`): (b) and (c) each reserve ≤ 25 % of (a)'s device memory
//! at ≥ 0.95× its throughput; with the tight device memory, (a) fails with
//! DEVICE_OUT_OF_MEMORY while (b) runs, and (c) runs every dispatch after its learning
//! one.

use super::paired::{BlockedRatios, PairedRatios, Verdict};
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
/// The bars: (b) and (c) reserve at most this share of (a)'s device memory …
const MEM_BAR: f64 = 0.25;
/// … at no less than this share of its throughput.
const TPUT_BAR: f64 = 0.95;
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

    /// The configs of (the attention-like task, a small task).
    fn configs(self) -> (CallConfig, CallConfig) {
        match self {
            Way::Global => {
                let g = env([128; 4], [128 << 20; 4], [256; 4]);
                (g.clone(), g)
            }
            Way::PerTask => (
                env(
                    [16, 128, 4, 4],
                    [16 << 10, 128 << 20, 1024, 1024],
                    [16, 256, 4, 4],
                ),
                env([16, 4, 4, 4], [16 << 10, 1024, 1024, 1024], [16, 4, 4, 4]),
            ),
            Way::Auto => {
                let mut c = CallConfig::default();
                for f in RingField::ALL {
                    c.runtime_env.set_all(f, RuntimeEnv::AUTO);
                }
                (c.clone(), c)
            }
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
    /// Per chip and callable, the distinct sizings it ran with (their one-line form).
    program_sizings: BTreeMap<(usize, u32), Vec<String>>,
    /// Sizing entries whose source was not auto (counted for way (c) only).
    not_auto: u64,
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
            let line = sizing_line(&r.ring_sizing);
            let seen = self.program_sizings.entry((w, t.callable)).or_default();
            if !seen.contains(&line) {
                seen.push(line);
            }
            for f in RingField::ALL {
                for ring in 0..4 {
                    if r.ring_sizing.source(f, ring) != SizeSource::Auto {
                        self.not_auto += 1;
                    }
                }
            }
        }
    }

    /// `program_sizings` as JSON.
    fn sizings_json(&self) -> serde_json::Value {
        let v: Vec<_> = self
            .program_sizings
            .iter()
            .map(|((w, c), s)| json!({ "chip": w, "program": program_name(*c), "sizings": s }))
            .collect();
        json!(v)
    }
}

fn program_name(callable: u32) -> &'static str {
    if callable == ATTN {
        "attention_like"
    } else {
        "elementwise"
    }
}

/// A sizing on one line: window, heap and dep pool per ring.
fn sizing_line(s: &RingSizing) -> String {
    let k = s.key();
    format!(
        "window {:?} heap {:?} dep_pool {:?} ({} MB)",
        &k[..4],
        &k[4..8],
        &k[8..],
        mb(device_footprint(s))
    )
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
    /// Resident bytes per chip after the two warm-up dispatches.
    warm_resident: [u64; CHIPS],
    /// What the warm-up dispatches ran with (per chip and program).
    warm_sizings: serde_json::Value,
    /// What the measured dispatches ran with (per chip and program).
    sizings: serde_json::Value,
    /// Sizing entries of the measured dispatches whose source was not auto.
    not_auto: u64,
}

impl WayResult {
    /// Per chip and program: the warm-up's first sizing (the learning dispatch's) and
    /// the sizings of the measured dispatches.
    fn learning(&self) -> Vec<(u64, String, String, String)> {
        let (Some(warm), Some(meas)) = (self.warm_sizings.as_array(), self.sizings.as_array())
        else {
            return vec![];
        };
        warm.iter()
            .map(|e| {
                let (w, p) = (&e["chip"], &e["program"]);
                let first = e["sizings"][0].as_str().unwrap_or("?").to_string();
                let later = meas
                    .iter()
                    .find(|m| &m["chip"] == w && &m["program"] == p)
                    .map_or("?".to_string(), |m| m["sizings"].to_string());
                (
                    w.as_u64().unwrap_or(0),
                    p.as_str().unwrap_or("?").to_string(),
                    first,
                    later,
                )
            })
            .collect()
    }
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
                "heap": &self.attn_peak[4..8], "dep_pool": &self.attn_peak[8..] },
            "warmup": { "resident_bytes": self.warm_resident, "sizings": self.warm_sizings },
            "sizings": self.sizings })
    }
}

/// How the main variant's throughput is sampled: blocks of `rounds` rounds, each block
/// on fresh nodes; at least `min_blocks`, then more until every throughput verdict
/// against (a) is decided, at most `max_blocks` or `max_time` of measuring.
struct Plan {
    rounds: usize,
    batch: usize,
    min_blocks: usize,
    max_blocks: usize,
    max_time: Duration,
}

/// One block of the main variant: the runnable ways on fresh nodes of `ROOMY` chips
/// (made in an order rotated by `block`), two warm-up dispatches each, then `rounds`
/// rounds of `batch` dispatches of each way in turn, in `round_order`.
fn main_block(
    ways: &[(Way, (CallConfig, CallConfig))],
    block: usize,
    plan: &Plan,
    prog: &mut Progress,
) -> Result<Vec<WayResult>, String> {
    let tensors = Tensors::new()?;
    let mut made: Vec<Option<Node>> = ways.iter().map(|_| None).collect();
    for i in 0..ways.len() {
        let k = (i + block) % ways.len();
        made[k] = Some(make_node(ROOMY)?);
    }
    let mut nodes: Vec<Node> = made.into_iter().flatten().collect();
    let mut usage: Vec<Usage> = ways.iter().map(|_| Usage::default()).collect();
    // Warm-up, not measured: each chip builds its arenas; under (c) each chip learns
    // each program's need on the first dispatch and runs the learned sizing on the
    // second.
    let mut warm: Vec<Usage> = ways.iter().map(|_| Usage::default()).collect();
    let mut warm_resident = vec![];
    for ((node, (_, cfgs)), u) in nodes.iter_mut().zip(ways).zip(&mut warm) {
        for _ in 0..2 {
            u.add(&dispatch(node, &tensors, cfgs)?);
        }
        warm_resident.push(resident_of(node)?);
    }
    let mut samples: Vec<Vec<f64>> = ways.iter().map(|_| vec![]).collect();
    for round in 0..plan.rounds {
        for k in round_order(ways.len(), round) {
            let (node, (_, cfgs)) = (&mut nodes[k], &ways[k]);
            let mut reports = Vec::with_capacity(plan.batch);
            let t0 = Instant::now();
            for _ in 0..plan.batch {
                reports.push(dispatch(node, &tensors, cfgs)?);
            }
            samples[k].push(plan.batch as f64 / t0.elapsed().as_secs_f64());
            reports.iter().for_each(|r| usage[k].add(r));
        }
        prog.tick("rounds");
    }
    let mut out = vec![];
    for ((((node, (way, _)), u), s), (wu, wr)) in nodes
        .iter()
        .zip(ways)
        .zip(usage)
        .zip(samples)
        .zip(warm.iter().zip(warm_resident))
    {
        out.push(WayResult {
            way: *way,
            tput: Series::new("dispatches/s", s),
            resident: resident_of(node)?,
            footprint: u.sizings.each_ref().map(|m| m.values().sum()),
            peak_used: u.peak_used,
            arenas: u.sizings.each_ref().map(|m| m.len()),
            tasks: u.tasks,
            attn_peak: u.attn_peak,
            warm_resident: wr,
            warm_sizings: wu.sizings_json(),
            sizings: u.sizings_json(),
            not_auto: u.not_auto,
        });
    }
    Ok(out)
}

/// The order of `n` ways in round `round`: rotated by `round / 2`, reversed in odd
/// rounds. Each way goes first, and follows each other way, equally often (for 3 ways
/// every 6 rounds run the 6 orders), so neither machine noise nor what the previous
/// way's chips leave behind favours one way.
fn round_order(n: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.rotate_left((round / 2) % n.max(1));
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// The main variant's blocks, measured after one warm-up block.
struct Blocks {
    /// The first measured block's results (its memory figures; every block resolves
    /// the same sizings), each way's throughput samples being those of all blocks.
    res: Vec<WayResult>,
    /// Per way (in `ways` order) and measured block, the rounds' dispatches/s.
    per_block: Vec<Vec<Vec<f64>>>,
    /// Per way and measured block, the resident bytes of all chips after the block.
    resident: Vec<Vec<u64>>,
    /// The warm-up block's per-round ratios of each way over the first (reported, not
    /// judged: in several runs the first block after the process started lay furthest
    /// from the others).
    warmup_ratios: Vec<Vec<f64>>,
    /// What stopped the blocks.
    stop: &'static str,
}

/// The main variant: one warm-up block, then blocks of `main_block` as `plan` says.
fn main_variant(ways: &[(Way, (CallConfig, CallConfig))], plan: &Plan) -> Result<Blocks, String> {
    let mut prog = Progress::new("b11", (plan.max_blocks + 1) * plan.rounds);
    let warm = main_block(ways, 0, plan, &mut prog)?;
    let warmup_ratios = warm
        .iter()
        .map(|r| PairedRatios::new(&r.tput.samples, &warm[0].tput.samples).ratios)
        .collect();
    let t0 = Instant::now();
    let mut first: Option<Vec<WayResult>> = None;
    let mut per_block: Vec<Vec<Vec<f64>>> = ways.iter().map(|_| vec![]).collect();
    let mut resident: Vec<Vec<u64>> = ways.iter().map(|_| vec![]).collect();
    let mut stop = "the block limit";
    for block in 1..=plan.max_blocks {
        let res = main_block(ways, block, plan, &mut prog)?;
        for (k, r) in res.iter().enumerate() {
            per_block[k].push(r.tput.samples.clone());
            resident[k].push(WayResult::total(&r.resident));
        }
        first.get_or_insert(res);
        if block >= plan.min_blocks {
            let decided = per_block[1..]
                .iter()
                .all(|x| throughput_vs(x, &per_block[0]).at_least(TPUT_BAR) != Verdict::Undecided);
            if decided {
                stop = "every verdict decided";
                break;
            }
            if t0.elapsed() >= plan.max_time {
                stop = "the time limit";
                break;
            }
        }
    }
    prog.done();
    let mut res = first.ok_or("no block ran")?;
    for (r, blocks) in res.iter_mut().zip(&per_block) {
        r.tput = Series::new("dispatches/s", blocks.concat());
    }
    Ok(Blocks {
        res,
        per_block,
        resident,
        warmup_ratios,
        stop,
    })
}

/// Way `x`'s throughput over (a)'s: per block the rounds' paired ratios.
fn throughput_vs(x: &[Vec<f64>], a: &[Vec<f64>]) -> BlockedRatios {
    BlockedRatios::new(
        x.iter()
            .zip(a)
            .map(|(x, a)| PairedRatios::new(x, a))
            .collect(),
    )
}

/// Each chip's resident arena bytes.
fn resident_of(node: &Node) -> Result<[u64; CHIPS], String> {
    let mut resident = [0; CHIPS];
    for (w, r) in resident.iter_mut().enumerate() {
        *r = node
            .chip_arena_stats(w)
            .map_err(|e| format!("arena stats of chip {w}: {e}"))?
            .resident_bytes;
    }
    Ok(resident)
}

/// The tight variant's outcome for one way: dispatches run, or the failure's text.
struct TightResult {
    way: Way,
    /// Dispatches that ran (after the learning one, for (c)).
    ran: usize,
    /// The first failure (after the learning dispatch, for (c)).
    error: Option<String>,
    /// (c) only: the learning dispatch's outcome (None: it ran).
    learning: Option<Option<String>>,
    /// (c) only: each later dispatch's failure, if any.
    outcomes: Vec<Option<String>>,
    resident: u64,
}

/// Each way on a fresh node of `TIGHT` chips: `n` dispatches, stopping at the first
/// failure; (c) first gets its learning dispatch, and its `n` dispatches all run (an
/// auto entry that failed for capacity grows for the next one).
fn tight_variant(
    ways: &[(Way, (CallConfig, CallConfig))],
    n: usize,
) -> Result<Vec<TightResult>, String> {
    let tensors = Tensors::new()?;
    let mut out = vec![];
    for (way, cfgs) in ways {
        let mut node = make_node(TIGHT)?;
        let auto = *way == Way::Auto;
        let learning = auto.then(|| dispatch(&mut node, &tensors, cfgs).err());
        let (mut ran, mut error, mut outcomes) = (0, None, vec![]);
        for _ in 0..n {
            let r = dispatch(&mut node, &tensors, cfgs);
            outcomes.push(r.as_ref().err().cloned());
            match r {
                Ok(_) => ran += 1,
                Err(e) => {
                    error.get_or_insert(e);
                    if !auto {
                        break;
                    }
                }
            }
        }
        let resident = resident_of(&node)?.iter().sum();
        out.push(TightResult {
            way: *way,
            ran,
            error,
            learning,
            outcomes: if auto { outcomes } else { vec![] },
            resident,
        });
    }
    Ok(out)
}

/// The tightest single sizing that fits every task: each ring and resource at the
/// largest of (b)'s entries (for reference beside (a)'s one value for all rings).
fn tightest_single_sizing() -> Result<RingSizing, String> {
    let (big, small) = Way::PerTask.configs();
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

/// One way's figures against (a): the reserved ratio and its bar, the throughput's
/// paired ratios per round in blocks and their verdict.
struct Judged {
    mem_ratio: f64,
    mem_ok: bool,
    tput: BlockedRatios,
    tput_verdict: Verdict,
    /// The ratio of the two ways' median throughputs over all rounds (for reference).
    medians_ratio: f64,
}

fn judge(a: &WayResult, x: &WayResult, x_blocks: &[Vec<f64>], a_blocks: &[Vec<f64>]) -> Judged {
    let mem_ratio = WayResult::total(&x.resident) as f64 / WayResult::total(&a.resident) as f64;
    let tput = throughput_vs(x_blocks, a_blocks);
    Judged {
        mem_ratio,
        mem_ok: mem_ratio <= MEM_BAR,
        tput_verdict: tput.at_least(TPUT_BAR),
        medians_ratio: x.tput.median / a.tput.median,
        tput,
    }
}

fn pf(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

/// The short name of a way in the bar texts: "(b)", "(c)".
fn tag(w: Way) -> &'static str {
    match w {
        Way::Global => "(a)",
        Way::PerTask => "(b)",
        Way::Auto => "(c)",
    }
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b11",
        "device_memory",
        "device memory reserved by global, per-task and automatic ring sizing (L3, 4 chips)",
        opts,
    );
    let reps = opts.reps.max(5);
    let plan = if opts.quick {
        Plan {
            rounds: 10,
            batch: 10,
            min_blocks: 3,
            max_blocks: 5,
            max_time: Duration::from_secs(15),
        }
    } else {
        Plan {
            rounds: 25,
            batch: 20,
            min_blocks: reps,
            max_blocks: 40.max(reps),
            max_time: Duration::from_secs(90),
        }
    };
    let batch = plan.batch;
    let tight_n = 3;
    let ways: Vec<_> = WAYS.iter().map(|&w| (w, w.configs())).collect();
    let Blocks {
        res,
        per_block,
        resident: block_resident,
        warmup_ratios,
        stop,
    } = main_variant(&ways, &plan)?;
    let blocks = per_block[0].len();
    let samples = res[0].tput.samples.len();
    table(&b, &res);
    let find = |w: Way| {
        res.iter()
            .find(|r| r.way == w)
            .ok_or(format!("way {} did not run", tag(w)))
    };
    let (a, pt, au) = (find(Way::Global)?, find(Way::PerTask)?, find(Way::Auto)?);
    let p = &a.attn_peak;
    b.say(&format!(
        "   attention-like task's peak use per ring: window {:?}, heap {:?} bytes, dep pool {:?}",
        &p[..4],
        &p[4..8],
        &p[8..]
    ));
    for (w, prog, first, learned) in au.learning() {
        b.say(&format!(
            "   (c) chip {w} {prog}: learning dispatch {first}; measured dispatches {learned}"
        ));
    }
    b.say(&format!(
        "   (c) resident after the warm-up: {} MB in all (the learning dispatches' arenas dropped)",
        mb(WayResult::total(&au.warm_resident))
    ));
    b.say(&format!(
        "   (c) sizing entries of the measured dispatches whose source is not auto: {}",
        au.not_auto
    ));

    let way_index = |w: Way| WAYS.iter().position(|&x| x == w).unwrap_or(0);
    let blocks_of = |w: Way| &per_block[way_index(w)];
    let (jb, jc) = (
        judge(a, pt, blocks_of(Way::PerTask), blocks_of(Way::Global)),
        judge(a, au, blocks_of(Way::Auto), blocks_of(Way::Global)),
    );
    b.say(&format!(
        "   throughput: {blocks} blocks (fresh nodes each, after a warm-up block) of {} rounds of {batch} dispatches per way, stopped by {stop}; per round each way's dispatches/s over (a)'s, the median per block, the geometric mean over blocks",
        plan.rounds
    ));
    for (w, j) in [(Way::PerTask, &jb), (Way::Auto, &jc)] {
        b.say(&format!(
            "   {}/(a): reserved {:.1} % (bar ≤ 25 %: {}), throughput {} (bar ≥ 0.95×: {}); ratio of the medians over all rounds {:.3}×",
            tag(w),
            100.0 * j.mem_ratio,
            pf(j.mem_ok),
            j.tput.line(),
            j.tput_verdict.word(),
            j.medians_ratio
        ));
    }
    let (ra, rb, rc) = (
        WayResult::total(&a.resident),
        WayResult::total(&pt.resident),
        WayResult::total(&au.resident),
    );
    let tightest = tightest_single_sizing()?;
    let tightest_bytes = device_footprint(&tightest) * CHIPS as u64;
    b.say(&format!(
        "   for reference: one per-ring sizing covering every task would reserve {} MB in all; (b) is {:.1} % of it, (c) {:.1} %",
        mb(tightest_bytes),
        100.0 * rb as f64 / tightest_bytes as f64,
        100.0 * rc as f64 / tightest_bytes as f64
    ));

    let tight = tight_variant(&ways, tight_n)?;
    let tfind = |w: Way| tight.iter().find(|t| t.way == w);
    for t in &tight {
        if let Some(l) = &t.learning {
            b.say(&format!(
                "   tight ({} MiB per chip) {} learning dispatch: {}",
                TIGHT >> 20,
                t.way.label(),
                l.as_deref()
                    .map_or("ran".to_string(), |e| format!("failed: {e}"))
            ));
        }
        b.say(&format!(
            "   tight ({} MiB per chip) {}: {}",
            TIGHT >> 20,
            t.way.label(),
            match &t.error {
                Some(e) => format!("{} of {tight_n} dispatches ran; first failure: {e}", t.ran),
                None => format!(
                    "{} dispatches ran, {} MB reserved in all",
                    t.ran,
                    mb(t.resident)
                ),
            }
        ));
    }
    let a_oom = tfind(Way::Global).is_some_and(|t| t.error.as_deref().is_some_and(is_device_oom));
    let runs = |w: Way| tfind(w).is_some_and(|t| t.error.is_none() && t.ran == tight_n);
    let (b_runs, c_runs) = (runs(Way::PerTask), runs(Way::Auto));
    let c_learned = tfind(Way::Auto).is_some_and(|t| t.learning == Some(None));
    b.say(&format!(
        "   tight: (a) fails with DEVICE_OUT_OF_MEMORY: {}; (b) runs: {}; (c) runs after its learning dispatch: {} (the learning dispatch itself {})",
        pf(a_oom),
        pf(b_runs),
        pf(c_runs),
        if c_learned { "ran" } else { "failed" }
    ));

    for r in &res {
        let mut c = Case::new(
            r.way.label(),
            &format!(
                "dispatches/s of one L3 run (1 attention-like task on chip {BIG_CHIP}, {SMALL_TASKS} element-wise tasks over {CHIPS} chips), one sample per round of {batch} dispatches, {samples} rounds in {blocks} blocks, the ways interleaved"
            ),
            r.tput.clone(),
        )
        .extra(r.json());
        let j = match r.way {
            Way::Global => None,
            Way::PerTask => Some(&jb),
            Way::Auto => Some(&jc),
        };
        if let Some(j) = j {
            let t = tag(r.way);
            let mut extra = r.json();
            extra["throughput_vs_a"] = json!({ "paired": j.tput.json(),
                "verdict": j.tput_verdict, "ratio_of_medians": j.medians_ratio });
            c = c
                .with_baseline(
                    "a_global",
                    a.tput.clone(),
                    &format!(
                        "geometric mean over blocks of the median over a block's rounds of ({} dispatches/s / global dispatches/s in the same round)",
                        r.way.label()
                    ),
                    j.tput.mean,
                )
                .bar(
                    format!(
                        "{t} reserves ≤ 25 % of (a)'s device memory ({:.1} %)",
                        100.0 * j.mem_ratio
                    ),
                    j.mem_ok,
                )
                .bar(
                    format!(
                        "{t} at ≥ 0.95× (a)'s throughput: {}, {}",
                        j.tput.line(),
                        j.tput_verdict.word()
                    ),
                    j.tput_verdict == Verdict::Met,
                )
                .extra(extra);
        }
        b.push(c);
    }
    let tight_json: Vec<_> = tight
        .iter()
        .map(|t| {
            json!({ "way": t.way.label(), "dispatches": t.ran, "error": t.error,
                "learning_dispatch_error": t.learning, "outcomes": t.outcomes,
                "resident_bytes": t.resident })
        })
        .collect();
    b.push(
        Case::new(
            "tight_device_memory",
            &format!(
                "dispatches run (of {tight_n}) by (b) and by (c) after its learning dispatch, on 4 chips of {} MiB each",
                TIGHT >> 20
            ),
            Series::new(
                "dispatches",
                [Way::PerTask, Way::Auto]
                    .iter()
                    .map(|&w| tfind(w).map_or(0, |t| t.ran) as f64)
                    .collect(),
            ),
        )
        .bar(
            "with a tight device memory, (a) fails with DEVICE_OUT_OF_MEMORY while (b) runs",
            a_oom && b_runs,
        )
        .bar(
            format!(
                "with a tight device memory, (c) runs (every dispatch after its learning one; the learning dispatch {})",
                if c_learned { "ran" } else { "failed" }
            ),
            c_runs,
        )
        .extra(json!({ "ways": tight_json })),
    );
    let summary = format!(
        "reserved (a) {} MB, (b) {} MB = {:.1} % ({}), (c) {} MB = {:.1} % ({}); throughput vs (a) {:.0}/s over {} blocks of paired rounds, [95 % CI] (block medians): (b) {:.3}x [{}] ({:.3}-{:.3}) {}, (c) {:.3}x [{}] ({:.3}-{:.3}) {}; tight {} MiB: (a) DEVICE_OUT_OF_MEMORY {}, (b) runs {}, (c) runs {}; load {} -> {}",
        mb(ra),
        mb(rb),
        100.0 * jb.mem_ratio,
        pf(jb.mem_ok),
        mb(rc),
        100.0 * jc.mem_ratio,
        pf(jc.mem_ok),
        a.tput.median,
        blocks,
        jb.tput.mean,
        jb.tput.ci_text(),
        jb.tput.block_range().0,
        jb.tput.block_range().1,
        jb.tput_verdict.word(),
        jc.tput.mean,
        jc.tput.ci_text(),
        jc.tput.block_range().0,
        jc.tput.block_range().1,
        jc.tput_verdict.word(),
        TIGHT >> 20,
        pf(a_oom),
        pf(b_runs),
        pf(c_runs),
        b.machine.loadavg_start,
        loadavg(),
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
        json!({ "reps": reps, "blocks": blocks, "rounds": samples, "rounds_per_block": plan.rounds,
            "dispatches_per_round": batch,
            "plan": { "min_blocks": plan.min_blocks, "max_blocks": plan.max_blocks,
                "max_time_s": plan.max_time.as_secs_f64(), "stopped_by": stop },
            "warmup_block_ratios": WAYS.iter().zip(&warmup_ratios)
                .map(|(w, r)| json!({ "way": w.label(), "ratios_over_a": r })).collect::<Vec<_>>(),
            "resident_bytes_per_block": WAYS.iter().zip(&block_resident)
                .map(|(w, r)| json!({ "way": w.label(), "total": r })).collect::<Vec<_>>(),
            "chips": CHIPS, "chip_cores": 1,
            "big_chip": BIG_CHIP, "small_tasks_per_dispatch": SMALL_TASKS,
            "small_task_bytes": SMALL_ELEMS * 4, "attention_buffers_bytes": 3 * ATTN_ELEMS as u64 * 4,
            "attention_tasks_in_scope": ATTN_TILES + 2,
            "device_memory_bytes": ROOMY, "tight_device_memory_bytes": TIGHT,
            "configs": configs, "warmup_dispatches": 2,
            "auto_entries_not_auto_source": au.not_auto,
            "tightest_single_sizing": { "sizing": tightest.to_string(), "reserved_bytes_all_chips": tightest_bytes },
            "tight_dispatches": tight_n }),
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::round_order;

    #[test]
    fn every_way_goes_first_and_follows_every_other_equally_often() {
        let orders: Vec<_> = (0..6).map(|r| round_order(3, r)).collect();
        let mut sorted = orders.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 6, "{orders:?}");
        for w in 0..3 {
            assert_eq!(orders.iter().filter(|o| o[0] == w).count(), 2);
        }
        assert_eq!(round_order(1, 5), vec![0]);
    }
}
