//! B11's workload: the ways of sizing it, its two programs, its nodes and tensors,
//! one dispatch, and what the chips reported of their sizings.

use super::*;
use taskring::node::ChipCallable;

/// A way of sizing the workload's tasks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Way {
    Global,
    PerTask,
    Auto,
}

pub(super) const WAYS: [Way; 3] = [Way::Global, Way::PerTask, Way::Auto];

impl Way {
    pub(super) fn label(self) -> &'static str {
        match self {
            Way::Global => "a_global",
            Way::PerTask => "b_per_task",
            Way::Auto => "c_auto",
        }
    }

    /// The configs of (the attention-like task, a small task).
    pub(super) fn configs(self) -> (CallConfig, CallConfig) {
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

pub(super) fn env(window: [u64; 4], heap: [u64; 4], dep_pool: [u64; 4]) -> CallConfig {
    let mut c = CallConfig::default();
    c.runtime_env.ring_task_window = window;
    c.runtime_env.ring_heap = heap;
    c.runtime_env.ring_dep_pool = dep_pool;
    c
}

pub(super) fn callables() -> Arc<RwLock<Vec<ChipCallable>>> {
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

pub(super) fn make_node(device_memory: u64) -> Result<Node, String> {
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
pub(super) struct Tensors {
    pub(super) _buf: SharedBuffer,
    pub(super) q: Tensor,
    pub(super) attn_out: Tensor,
    pub(super) small: Vec<(Tensor, Tensor)>,
}

impl Tensors {
    pub(super) fn new() -> Result<Tensors, String> {
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
pub(super) struct Usage {
    pub(super) sizings: [BTreeMap<[u64; 12], u64>; CHIPS],
    pub(super) peak_used: [u64; CHIPS],
    pub(super) tasks: [u64; CHIPS],
    /// The attention-like task's largest peak per ring and resource.
    pub(super) attn_peak: [u64; 12],
    /// Per chip and callable, the distinct sizings it ran with (their one-line form).
    pub(super) program_sizings: BTreeMap<(usize, u32), Vec<String>>,
    /// Sizing entries whose source was not auto (counted for way (c) only).
    pub(super) not_auto: u64,
}

impl Usage {
    pub(super) fn add(&mut self, rep: &NodeRunReport) {
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
    pub(super) fn sizings_json(&self) -> serde_json::Value {
        let v: Vec<_> = self
            .program_sizings
            .iter()
            .map(|((w, c), s)| json!({ "chip": w, "program": program_name(*c), "sizings": s }))
            .collect();
        json!(v)
    }
}

pub(super) fn program_name(callable: u32) -> &'static str {
    if callable == ATTN {
        "attention_like"
    } else {
        "elementwise"
    }
}

/// A sizing on one line: window, heap and dep pool per ring.
pub(super) fn sizing_line(s: &RingSizing) -> String {
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
pub(super) fn dispatch(
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
