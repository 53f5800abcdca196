//! peers: the B3 patterns (independent, chain, fanout, fanin, wavefront; [`super::overhead`]) run
//! by taskring — submitted task by task (B3's dynamic path) and replayed (B9) — and by two
//! real peers, in the same run, samples interleaved:
//!
//! - oneTBB `flow_graph`, a `continue_node` per task and a `make_edge` per dependency,
//!   (a) built, run and destroyed in every sample ("built each run"), and (b) built once and
//!   re-run ("prebuilt": each sample puts the roots and waits for the graph);
//! - OpenMP tasks with `depend` clauses (libgomp), created in submission order by one
//!   thread of the team.
//!
//! The peers are `benches/peers/peers.cpp`, built by `make peers-build` (`g++ -O2 -fopenmp
//! … -ltbb`) into `target/peers/peers` (or the path in `TASKRING_PEERS`). Each peer sample
//! is one process running the pattern twice untimed and once timed, which prints its ns
//! per task (and, built each run, the build, run and teardown parts); the pattern's task
//! and edge counts it prints must be B3's. Every runtime gets `--threads` threads: the
//! peers count the calling thread among them (oneTBB: `global_control`
//! max_allowed_parallelism and a `task_arena` of that many slots; OpenMP: `num_threads`),
//! taskring runs on B3's two chips — `--threads` core threads with the orchestrator
//! submitting, and `--threads − 1` core threads with the orchestrator running ready tasks
//! while it waits (as many threads as the peers).
//!
//! Bars (`docs/benchmarks.md`): the dynamic path ≤ 1.0× oneTBB built each run, replay ≤
//! 0.5× oneTBB prebuilt, on every pattern, judged on the chip of `--threads` cores; the
//! other chip's figures and ratios are in each case's `extra`.
//!
//! Before each pattern of each round, the cache-line round trip between the first two
//! CPUs is measured ([`super::cpus::cross_cpu_rtt`]): on a virtual machine it moves
//! between levels as the hypervisor moves the virtual CPUs (on the machines of
//! `docs/performance.md`: ~35 ns, ~100–130 ns and ~400–550 ns), and taskring's
//! hand-offs between threads pay it where the peers' chains, run on one thread, do not.
//! Each dynamic case's `extra` has the median of its paired ratios (dynamic sample / the
//! oneTBB built-each-run sample of the same round) over the samples of each of
//! [`RTT_BINS`]. The bars do not use them.

use super::cpus::cross_cpu_rtt;
use super::overhead::{
    helper_config, pattern_args, patterns_param, run_taskring, tree_tasks, Pattern,
};
use super::overhead::{Rig, LEAVES};
use super::replay::replay_once;
use super::*;
use serde_json::json;
use std::path::PathBuf;
use taskring::*;

/// The B3 patterns the peers run (wavefront_views is taskring's own variant of wavefront:
/// the same DAG, its cells row views of one buffer).
pub const PATTERNS: [&str; 5] = ["independent", "chain", "fanout", "fanin", "wavefront"];

/// The peer modes: (mode argument of the peer binary, what it is).
pub const MODES: [(&str, &str); 3] = [
    (
        "tbb_build",
        "oneTBB flow_graph built each run (build + run + teardown)",
    ),
    ("tbb_prebuilt", "oneTBB flow_graph built once, re-run"),
    ("omp", "OpenMP task depend (libgomp)"),
];

/// Environment variable naming the peer binary (default `target/peers/peers` of the source
/// tree).
pub const PEERS_ENV: &str = "TASKRING_PEERS";

/// The peer binary: `$TASKRING_PEERS`, else `target/peers/peers` of the source tree; an
/// error saying how to build it when it is missing.
pub fn peer_binary() -> Result<PathBuf, String> {
    let path = match std::env::var_os(PEERS_ENV) {
        Some(p) => PathBuf::from(p),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/peers/peers"),
    };
    if path.is_file() {
        Ok(std::fs::canonicalize(&path).unwrap_or(path))
    } else {
        Err(format!(
            "peer binary {} not found: build it with `make peers-build` (g++ with OpenMP and \
             oneTBB; as root `make peers-build` installs Debian's libtbb-dev, else apt-get \
             install -y libtbb-dev), or name it in {PEERS_ENV}",
            path.display()
        ))
    }
}

/// The SIZE argument of the peer binary for B3's pattern `p` (its task count is checked
/// against the one the peer reports).
pub fn peer_size(p: &Pattern) -> Result<String, String> {
    let per = |n: u64| {
        if n > 0 && p.tasks.is_multiple_of(n) {
            Ok(p.tasks / n)
        } else {
            Err(format!(
                "{}: {} tasks is not a multiple of {n}",
                p.name, p.tasks
            ))
        }
    };
    Ok(match p.name {
        "independent" | "chain" => p.tasks.to_string(),
        "fanout" => format!("{}x{FANOUT_K}", per(FANOUT_K + 1)?),
        "fanin" => per(tree_tasks())?.to_string(),
        "wavefront" => format!("{}x{GRID}x{GRID}", per(GRID * GRID)?),
        other => return Err(format!("no peer for pattern {other}")),
    })
}

/// B3's fan-out degree and wavefront grid side.
const FANOUT_K: u64 = 1000;
const GRID: u64 = 64;

/// One peer sample: ns per task (total and its parts) and the DAG the peer ran.
#[derive(Clone, Debug, Default)]
pub struct PeerSample {
    pub ns: f64,
    pub build: f64,
    pub run: f64,
    pub teardown: f64,
    pub tasks: u64,
    pub edges: u64,
}

/// Parses the `sample key=value …` line of the peer binary.
pub fn parse_sample(out: &str) -> Option<PeerSample> {
    let line = out.lines().find(|l| l.starts_with("sample "))?;
    let mut s = PeerSample::default();
    for kv in line.split_whitespace().skip(1) {
        let (k, v) = kv.split_once('=')?;
        match k {
            "ns_per_task" => s.ns = v.parse().ok()?,
            "build_ns_per_task" => s.build = v.parse().ok()?,
            "run_ns_per_task" => s.run = v.parse().ok()?,
            "teardown_ns_per_task" => s.teardown = v.parse().ok()?,
            "tasks" => s.tasks = v.parse().ok()?,
            "edges" => s.edges = v.parse().ok()?,
            _ => {}
        }
    }
    Some(s)
}

/// One timed peer sample of `mode` on `p` (a process of its own: two untimed runs, one
/// timed).
fn run_peer(
    bin: &std::path::Path,
    p: &Pattern,
    size: &str,
    mode: &str,
    threads: usize,
    edges: usize,
) -> Result<PeerSample, String> {
    let out = std::process::Command::new(bin)
        .args([p.name, size, mode, "1", &threads.to_string(), "2"])
        .env("OMP_NUM_THREADS", threads.to_string())
        .output()
        .map_err(|e| format!("could not run {}: {e}", bin.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{} {} {size} {mode}: {} {}",
            bin.display(),
            p.name,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let s = parse_sample(&stdout)
        .ok_or_else(|| format!("{} {mode}: no sample line in {stdout:?}", p.name))?;
    if s.tasks != p.tasks || s.edges != edges as u64 {
        return Err(format!(
            "{} {mode}: the peer ran {} tasks and {} edges, B3's DAG has {} and {edges}",
            p.name, s.tasks, s.edges, p.tasks
        ));
    }
    Ok(s)
}

/// B3's rig with only the peers' patterns, each captured on both chips, and each
/// pattern's size argument and edge count.
struct Setup {
    rig: Rig,
    graphs: Vec<Captured>,
    hgraphs: Vec<Captured>,
    sizes: Vec<String>,
    edges: Vec<usize>,
    bin: PathBuf,
}

fn setup(opts: &Opts) -> Result<Setup, String> {
    let bin = peer_binary()?;
    let mut rig = Rig::new(opts)?;
    let pats = std::mem::take(&mut rig.pats);
    let bufs = std::mem::take(&mut rig.bufs);
    for (p, b) in pats.into_iter().zip(bufs) {
        if PATTERNS.contains(&p.name) {
            rig.pats.push(p);
            rig.bufs.push(b);
        }
    }
    let cfg = CallConfig::default();
    let (mut graphs, mut hgraphs, mut sizes, mut edges) = (vec![], vec![], vec![], vec![]);
    let s = &mut rig;
    for (i, p) in s.pats.iter().enumerate() {
        sizes.push(peer_size(p)?);
        edges.push((p.edges)().1.len());
        for (w, gs) in [(&mut s.chip, &mut graphs), (&mut s.helper, &mut hgraphs)] {
            let g = w
                .capture(&p.program, &pattern_args(p, &mut s.bufs[i]), &cfg)
                .map_err(|e| format!("capture of {}: {e}", p.name))?;
            if g.tasks() as u64 != p.tasks {
                return Err(format!("capture of {}: {} tasks", p.name, g.tasks()));
            }
            gs.push(g);
        }
        // One untimed run of each kind (arena pages, allocator).
        run_taskring(&mut s.chip, p, &mut s.bufs[i], &s.sizing)?;
        run_taskring(&mut s.helper, p, &mut s.bufs[i], &s.sizing)?;
        replay_once(
            &mut s.chip,
            &graphs[i],
            &pattern_args(p, &mut s.bufs[i]),
            p.tasks,
        )?;
        replay_once(
            &mut s.helper,
            &hgraphs[i],
            &pattern_args(p, &mut s.bufs[i]),
            p.tasks,
        )?;
    }
    Ok(Setup {
        rig,
        graphs,
        hgraphs,
        sizes,
        edges,
        bin,
    })
}

/// ns-per-task samples of one pattern: taskring dynamic and replayed on each chip, and
/// each peer mode.
#[derive(Default)]
struct Samples {
    dynamic: Vec<f64>,
    dynamic_h: Vec<f64>,
    replay: Vec<f64>,
    replay_h: Vec<f64>,
    peers: [Vec<PeerSample>; 3],
    /// The cross-CPU round trip (ns) measured just before the round's samples (None:
    /// fewer than two CPUs).
    rtt: Vec<Option<f64>>,
}

/// Round trips of a probe ([`cross_cpu_rtt`]): 1 to 11 ms.
const RTT_TRIPS: u64 = 20_000;

/// The bins of round trips the paired ratios are grouped by: (JSON name, table label,
/// lowest ns).
const RTT_BINS: [(&str, &str, f64); 3] = [
    ("under_60ns", "<60", 0.0),
    ("60_250ns", "60-250", 60.0),
    ("over_250ns", ">250", 250.0),
];

/// The bin of a round trip (None: not measured).
fn rtt_bin(ns: Option<f64>) -> Option<usize> {
    let ns = ns?;
    RTT_BINS.iter().rposition(|&(_, _, lo)| ns >= lo)
}

/// One round: every pattern, each runtime once (taskring dynamic and replayed on both
/// chips, then each peer mode).
fn round(
    s: &mut Setup,
    m: &mut [Samples],
    threads: usize,
    prog: &mut Progress,
) -> Result<(), String> {
    let r = &mut s.rig;
    for (i, p) in r.pats.iter().enumerate() {
        let per = |t: f64| t * 1e9 / p.tasks as f64;
        m[i].rtt.push(cross_cpu_rtt(RTT_TRIPS));
        m[i].dynamic.push(per(run_taskring(
            &mut r.chip,
            p,
            &mut r.bufs[i],
            &r.sizing,
        )?));
        m[i].dynamic_h.push(per(run_taskring(
            &mut r.helper,
            p,
            &mut r.bufs[i],
            &r.sizing,
        )?));
        let args = pattern_args(p, &mut r.bufs[i]);
        m[i].replay
            .push(per(replay_once(&mut r.chip, &s.graphs[i], &args, p.tasks)?));
        let args = pattern_args(p, &mut r.bufs[i]);
        m[i].replay_h.push(per(replay_once(
            &mut r.helper,
            &s.hgraphs[i],
            &args,
            p.tasks,
        )?));
        for (k, (mode, _)) in MODES.iter().enumerate() {
            let ps = run_peer(&s.bin, p, &s.sizes[i], mode, threads, s.edges[i])?;
            m[i].peers[k].push(ps);
        }
        prog.tick(p.name);
    }
    Ok(())
}

fn ns(v: &[f64]) -> Series {
    Series::new("ns/task", v.to_vec())
}

fn peer_series(v: &[PeerSample], f: impl Fn(&PeerSample) -> f64) -> Series {
    ns(&v.iter().map(f).collect::<Vec<_>>())
}

/// The median of the paired ratios `a[k] / b[k]` over the rounds `k` that `keep`, and
/// how many there are.
fn paired(a: &[f64], b: &[f64], keep: impl Fn(usize) -> bool) -> (usize, f64) {
    let r: Vec<f64> = a
        .iter()
        .zip(b)
        .enumerate()
        .filter(|&(k, _)| keep(k))
        .map(|(_, (x, y))| x / y)
        .collect();
    (r.len(), median(&r))
}

/// Pattern `i`'s dynamic samples against oneTBB built each run, by CPU placement: the
/// round trips, and each bin's count and median paired ratio.
fn by_placement(m: &Samples, tb: &Series) -> (serde_json::Value, String) {
    if m.rtt.iter().all(Option::is_none) {
        return (json!(null), "   (one CPU: no round trip)".into());
    }
    let rtt: Vec<f64> = m.rtt.iter().map(|x| x.unwrap_or(f64::NAN)).collect();
    let mut line = format!("{:>8.0}", median(&rtt));
    let mut bins = serde_json::Map::new();
    for (b, (name, _, _)) in RTT_BINS.iter().enumerate() {
        let (n, r) = paired(&m.dynamic, &tb.samples, |k| rtt_bin(m.rtt[k]) == Some(b));
        line += &if n == 0 {
            format!(" {:>4} {:>6}", 0, "-")
        } else {
            format!(" {n:>4} {r:>6.2}")
        };
        bins.insert(
            (*name).into(),
            json!({"samples": n, "dyn_over_tbb_build_paired": r}),
        );
    }
    let (_, all) = paired(&m.dynamic, &tb.samples, |_| true);
    line += &format!(" {all:>7.2}");
    let v = json!({
        "cross_cpu_rtt_ns": Series::new("ns", rtt),
        "bins": bins,
        "all_paired": all,
    });
    (v, line)
}

/// Pattern `i`'s line and its two cases (dynamic vs oneTBB built each run, replay vs
/// oneTBB prebuilt); returns its part of the summary and its line of the placement
/// table.
fn judge(b: &mut Bench, s: &Setup, m: &Samples, i: usize, threads: usize) -> (String, String) {
    let p = &s.rig.pats[i];
    let (dy, dh, rp, rh) = (
        ns(&m.dynamic),
        ns(&m.dynamic_h),
        ns(&m.replay),
        ns(&m.replay_h),
    );
    let [tb, tp, om] = [0, 1, 2].map(|k| peer_series(&m.peers[k], |x| x.ns));
    let tb_parts = json!({
        "build": peer_series(&m.peers[0], |x| x.build),
        "run": peer_series(&m.peers[0], |x| x.run),
        "teardown": peer_series(&m.peers[0], |x| x.teardown),
        "build_plus_run": peer_series(&m.peers[0], |x| x.build + x.run),
    });
    let r_dyn = dy.median / tb.median;
    let r_rep = rp.median / tp.median;
    let (placement, pline) = by_placement(m, &tb);
    b.say(&format!(
        "   {:<12} {:>7} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>7.2}",
        p.name,
        p.tasks,
        dy.median,
        dh.median,
        rp.median,
        rh.median,
        tb.median,
        tp.median,
        om.median,
        r_dyn,
        dh.median / tb.median,
        r_rep,
        rh.median / tp.median,
        dy.median / om.median,
    ));
    let peers = json!({
        "tbb_build": tb, "tbb_build_parts": tb_parts, "tbb_prebuilt": tp, "omp": om,
    });
    let helper = |dyn_or_rep: &Series, peer: &Series| {
        json!({
            "config": helper_config(threads),
            "ns_per_task": dyn_or_rep,
            "ratio": dyn_or_rep.median / peer.median,
        })
    };
    b.push(
        Case::new(
            p.name,
            &format!(
                "wall ns per task of one dynamic run ({}), {threads} core threads",
                p.desc
            ),
            dy.clone(),
        )
        .with_baseline(
            MODES[0].1,
            tb.clone(),
            "taskring time / oneTBB built-each-run time",
            r_dyn,
        )
        .bar("≤ 1.0× oneTBB flow_graph built each run", r_dyn <= 1.0)
        .extra(json!({
            "tasks": p.tasks,
            "edges": s.edges[i],
            "size_arg": s.sizes[i],
            "peers": peers,
            "ratio_vs_tbb_prebuilt": dy.median / tp.median,
            "ratio_vs_omp": dy.median / om.median,
            "orchestrator_helps": helper(&dh, &tb),
            "by_cpu_placement": placement,
        })),
    );
    b.push(
        Case::new(
            &format!("{}_replay", p.name),
            &format!(
                "wall ns per task of one replay ({}), {threads} core threads",
                p.desc
            ),
            rp.clone(),
        )
        .with_baseline(
            MODES[1].1,
            tp.clone(),
            "replay time / oneTBB prebuilt time",
            r_rep,
        )
        .bar("≤ 0.5× oneTBB flow_graph prebuilt", r_rep <= 0.5)
        .extra(json!({
            "tasks": p.tasks,
            "ratio_vs_omp": rp.median / om.median,
            "orchestrator_helps": helper(&rh, &tp),
        })),
    );
    (
        format!("{} {:.2}x/{:.2}x", p.name, r_dyn, r_rep),
        format!("   {:<12} {pline}", p.name),
    )
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "peers",
        "tbb_omp",
        "B3 patterns: taskring dynamic and replayed vs oneTBB flow_graph and OpenMP task depend",
        opts,
    );
    let threads = opts.threads;
    let reps = opts.reps.max(5);
    let mut s = setup(opts)?;
    b.say(&format!("   peers: {}", s.bin.display()));
    let n = s.rig.pats.len();
    let mut m: Vec<Samples> = (0..n).map(|_| Samples::default()).collect();
    let mut prog = Progress::new("peers", reps * n);
    for _ in 0..reps {
        round(&mut s, &mut m, threads, &mut prog)?;
    }
    prog.done();
    b.say("   ns/task (medians); dyn = submitted task by task, rep = replayed; (h) = the chip of threads-1 cores + helping orchestrator");
    b.say(&format!(
        "   {:<12} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "pattern",
        "tasks",
        "dyn",
        "dyn(h)",
        "rep",
        "rep(h)",
        "tbb_bld",
        "tbb_pre",
        "omp",
        "dyn/bld",
        "(h)",
        "rep/pre",
        "(h)",
        "dyn/omp"
    ));
    let (parts, plines): (Vec<String>, Vec<String>) =
        (0..n).map(|i| judge(&mut b, &s, &m[i], i, threads)).unzip();
    b.say("   by CPU placement (cache-line round trip between two CPUs before each round): dyn / tbb_bld, median of paired ratios per round-trip bin");
    let mut header = format!("   {:<12} {:>8}", "pattern", "rtt_ns");
    for (_, label, _) in RTT_BINS {
        header += &format!(" {:>4} {label:>6}", "n");
    }
    b.say(&format!("{header} {:>7}", "all"));
    for l in &plines {
        b.say(l);
    }
    let mut counts = [0usize; RTT_BINS.len()];
    for b in m
        .iter()
        .flat_map(|x| x.rtt.iter())
        .filter_map(|&r| rtt_bin(r))
    {
        counts[b] += 1;
    }
    let placement = if counts.iter().sum::<usize>() == 0 {
        String::new()
    } else {
        let join =
            |f: &dyn Fn(usize) -> String| (0..RTT_BINS.len()).map(f).collect::<Vec<_>>().join("/");
        format!(
            "; round trips {} ns in {} samples",
            join(&|k| RTT_BINS[k].1.to_string()),
            join(&|k| counts[k].to_string())
        )
    };
    let summary = format!(
        "dynamic / oneTBB built each run, replay / oneTBB prebuilt: {}{placement}",
        parts.join(", "),
    );
    Ok(b.finish_as(
        "peers",
        json!({
            "threads": threads,
            "chip": { "cores": threads, "sizing": "default" },
            "helper_chip": helper_config(threads),
            "peers": {
                "binary": s.bin.display().to_string(),
                "source": "benches/peers/peers.cpp",
                "modes": MODES
                    .iter()
                    .map(|(k, d)| json!({"mode": k, "what": d}))
                    .collect::<Vec<_>>(),
                "threads": threads,
                "per_sample": "one process: 2 untimed runs, then 1 timed",
            },
            "patterns": patterns_param(&s.rig.pats),
            "fanin_leaves": LEAVES,
            "reps": reps,
            "cross_cpu_rtt": {
                "trips": RTT_TRIPS,
                "when": "before each pattern of each round",
                "bins_ns": RTT_BINS.iter().map(|(n, _, lo)| json!({"bin": n, "from_ns": lo})).collect::<Vec<_>>(),
            },
        }),
        summary,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::overhead;
    use super::*;

    /// The size arguments name B3's patterns (full and quick sizes).
    #[test]
    fn peer_sizes_match_b3() {
        for quick in [false, true] {
            for p in overhead::patterns(quick)
                .iter()
                .filter(|p| PATTERNS.contains(&p.name))
            {
                let size = peer_size(p).unwrap();
                let f: Vec<u64> = size.split('x').map(|v| v.parse().unwrap()).collect();
                let tasks = match p.name {
                    "independent" | "chain" => f[0],
                    "fanout" => f[0] * (f[1] + 1),
                    "fanin" => f[0] * overhead::tree_tasks(),
                    _ => f[0] * f[1] * f[2],
                };
                assert_eq!(tasks, p.tasks, "{} {size}", p.name);
            }
        }
        let line = "sample pattern=chain mode=omp threads=2 tasks=10 edges=9 ns_per_task=5.5 \
                    build_ns_per_task=0.00 run_ns_per_task=5.5 teardown_ns_per_task=0.00";
        let s = parse_sample(line).unwrap();
        assert_eq!((s.tasks, s.edges, s.ns), (10, 9, 5.5));
    }

    /// When the peer binary is built: it runs B3's DAGs (task and edge counts) and its
    /// own dependency check passes.
    #[test]
    fn peer_binary_runs_b3_dags() {
        let Ok(bin) = peer_binary() else {
            eprintln!("peer binary not built (make peers-build): skipped");
            return;
        };
        let out = std::process::Command::new(&bin)
            .args(["check", "2"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for p in [
            overhead::independent(2500),
            overhead::chain(2500),
            overhead::fanout(3, FANOUT_K),
            overhead::fanin(1),
            overhead::wavefront(2, GRID, GRID, false),
        ] {
            let edges = (p.edges)().1.len();
            let size = peer_size(&p).unwrap();
            for (mode, _) in MODES {
                run_peer(&bin, &p, &size, mode, 2, edges).unwrap();
            }
        }
    }
}
