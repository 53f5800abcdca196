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

mod rounds;
mod workload;

use rounds::*;
use workload::*;

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
