//! B11's measurement: one way's figures, the main variant's blocks of interleaved
//! rounds on fresh nodes, and the tight variant.

use super::*;

/// One way's figures after its repetitions.
pub(super) struct WayResult {
    pub(super) way: Way,
    /// Dispatches per second, one sample per batch.
    pub(super) tput: Series,
    pub(super) resident: [u64; CHIPS],
    pub(super) footprint: [u64; CHIPS],
    pub(super) peak_used: [u64; CHIPS],
    pub(super) arenas: [usize; CHIPS],
    pub(super) tasks: [u64; CHIPS],
    pub(super) attn_peak: [u64; 12],
    /// Resident bytes per chip after the two warm-up dispatches.
    pub(super) warm_resident: [u64; CHIPS],
    /// What the warm-up dispatches ran with (per chip and program).
    pub(super) warm_sizings: serde_json::Value,
    /// What the measured dispatches ran with (per chip and program).
    pub(super) sizings: serde_json::Value,
    /// Sizing entries of the measured dispatches whose source was not auto.
    pub(super) not_auto: u64,
}

impl WayResult {
    /// Per chip and program: the warm-up's first sizing (the learning dispatch's) and
    /// the sizings of the measured dispatches.
    pub(super) fn learning(&self) -> Vec<(u64, String, String, String)> {
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
    pub(super) fn total(v: &[u64; CHIPS]) -> u64 {
        v.iter().sum()
    }
    pub(super) fn json(&self) -> serde_json::Value {
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
pub(super) struct Plan {
    pub(super) rounds: usize,
    pub(super) batch: usize,
    pub(super) min_blocks: usize,
    pub(super) max_blocks: usize,
    pub(super) max_time: Duration,
}

/// One block of the main variant: the runnable ways on fresh nodes of `ROOMY` chips
/// (made in an order rotated by `block`), two warm-up dispatches each, then `rounds`
/// rounds of `batch` dispatches of each way in turn, in `round_order`.
pub(super) fn main_block(
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
pub(super) fn round_order(n: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.rotate_left((round / 2) % n.max(1));
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// The main variant's blocks, measured after one warm-up block.
pub(super) struct Blocks {
    /// The first measured block's results (its memory figures; every block resolves
    /// the same sizings), each way's throughput samples being those of all blocks.
    pub(super) res: Vec<WayResult>,
    /// Per way (in `ways` order) and measured block, the rounds' dispatches/s.
    pub(super) per_block: Vec<Vec<Vec<f64>>>,
    /// Per way and measured block, the resident bytes of all chips after the block.
    pub(super) resident: Vec<Vec<u64>>,
    /// The warm-up block's per-round ratios of each way over the first (reported, not
    /// judged: in several runs the first block after the process started lay furthest
    /// from the others).
    pub(super) warmup_ratios: Vec<Vec<f64>>,
    /// What stopped the blocks.
    pub(super) stop: &'static str,
}

/// The main variant: one warm-up block, then blocks of `main_block` as `plan` says.
pub(super) fn main_variant(
    ways: &[(Way, (CallConfig, CallConfig))],
    plan: &Plan,
) -> Result<Blocks, String> {
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
pub(super) fn throughput_vs(x: &[Vec<f64>], a: &[Vec<f64>]) -> BlockedRatios {
    BlockedRatios::new(
        x.iter()
            .zip(a)
            .map(|(x, a)| PairedRatios::new(x, a))
            .collect(),
    )
}

/// Each chip's resident arena bytes.
pub(super) fn resident_of(node: &Node) -> Result<[u64; CHIPS], String> {
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
pub(super) struct TightResult {
    pub(super) way: Way,
    /// Dispatches that ran (after the learning one, for (c)).
    pub(super) ran: usize,
    /// The first failure (after the learning dispatch, for (c)).
    pub(super) error: Option<String>,
    /// (c) only: the learning dispatch's outcome (None: it ran).
    pub(super) learning: Option<Option<String>>,
    /// (c) only: each later dispatch's failure, if any.
    pub(super) outcomes: Vec<Option<String>>,
    pub(super) resident: u64,
}

/// Each way on a fresh node of `TIGHT` chips: `n` dispatches, stopping at the first
/// failure; (c) first gets its learning dispatch, and its `n` dispatches all run (an
/// auto entry that failed for capacity grows for the next one).
pub(super) fn tight_variant(
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
pub(super) fn tightest_single_sizing() -> Result<RingSizing, String> {
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
