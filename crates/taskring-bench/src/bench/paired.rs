//! Paired ratios of interleaved rounds, grouped in blocks, and their verdict against a
//! bar.
//!
//! A benchmark that measures two things in turn, round after round, forms one ratio per
//! round (`x[k] / a[k]`): noise that lasts longer than a round (another process's
//! build, a frequency change) moves both sides of that ratio alike. Rounds of one setup
//! are not independent samples of everything that varies, though: in B11 each setup is
//! a set of forked chip processes, and on a 2-CPU machine one set's median ratio can lie
//! 20 % from the next set's while each set's own rounds give it a 95 % interval of
//! ±5 %. So the rounds come in blocks, each on a fresh setup:
//!
//! 1. within a block, the figure is the median of its rounds' ratios
//!    ([`PairedRatios`]);
//! 2. over the blocks, the figure is the geometric mean of the block medians, with a
//!    95 % Student-t interval on their logarithms ([`BlockedRatios`]): the spread that
//!    counts is the one between setups;
//! 3. against a bar "ratio ≥ t" the verdict is met when the whole interval is at or
//!    above `t`, missed when the whole interval is below it, and undecided otherwise —
//!    more blocks narrow the interval.
//!
//! Used by B11 (`device_memory.rs`), which adds blocks until each verdict is decided or a cap is
//! reached.

use serde::Serialize;
use serde_json::json;

/// A verdict against a bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The whole 95 % interval is on the bar's side.
    Met,
    /// The whole 95 % interval is on the other side.
    Missed,
    /// The interval straddles the bar (or there are too few blocks for one).
    Undecided,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "MISSED",
            Verdict::Undecided => "UNDECIDED",
        }
    }
}

/// The per-round ratios of two interleaved series of one block.
#[derive(Clone, Debug)]
pub struct PairedRatios {
    /// `x[k] / a[k]` for each round `k`, in round order.
    pub ratios: Vec<f64>,
    pub median: f64,
    /// Lower and upper quartile of the ratios.
    pub q1: f64,
    pub q3: f64,
}

impl PairedRatios {
    /// The ratios `x[k] / a[k]` over the rounds both have (`x` and `a` in round order).
    pub fn new(x: &[f64], a: &[f64]) -> PairedRatios {
        let ratios: Vec<f64> = x.iter().zip(a).map(|(x, a)| x / a).collect();
        let mut s = ratios.clone();
        s.sort_by(|p, q| p.total_cmp(q));
        PairedRatios {
            median: quantile(&s, 0.5),
            q1: quantile(&s, 0.25),
            q3: quantile(&s, 0.75),
            ratios,
        }
    }
}

/// The quantile `q` of sorted `s`, interpolating linearly between order statistics
/// (numpy's default); NaN when `s` is empty.
fn quantile(s: &[f64], q: f64) -> f64 {
    if s.is_empty() {
        return f64::NAN;
    }
    let pos = q * (s.len() - 1) as f64;
    let (i, f) = (pos.floor() as usize, pos - pos.floor());
    s[i] + f * (s[(i + 1).min(s.len() - 1)] - s[i])
}

/// Blocks of paired ratios, each on a fresh setup: the geometric mean of the block
/// medians and its 95 % interval.
#[derive(Clone, Debug)]
pub struct BlockedRatios {
    pub blocks: Vec<PairedRatios>,
    /// The geometric mean of the blocks' medians.
    pub mean: f64,
    /// The 95 % Student-t interval of `mean` (on the logarithms); `None` with fewer than
    /// 2 blocks.
    pub ci95: Option<(f64, f64)>,
}

impl BlockedRatios {
    pub fn new(blocks: Vec<PairedRatios>) -> BlockedRatios {
        let logs: Vec<f64> = blocks.iter().map(|b| b.median.ln()).collect();
        let n = logs.len();
        let m = logs.iter().sum::<f64>() / n as f64;
        let ci95 = (n >= 2).then(|| {
            let var = logs.iter().map(|l| (l - m) * (l - m)).sum::<f64>() / (n - 1) as f64;
            let half = t975(n - 1) * (var / n as f64).sqrt();
            ((m - half).exp(), (m + half).exp())
        });
        BlockedRatios {
            blocks,
            mean: m.exp(),
            ci95,
        }
    }

    /// The verdict against the bar "ratio ≥ `t`".
    pub fn at_least(&self, t: f64) -> Verdict {
        match self.ci95 {
            Some((lo, _)) if lo >= t => Verdict::Met,
            Some((_, hi)) if hi < t => Verdict::Missed,
            _ => Verdict::Undecided,
        }
    }

    /// The lowest and highest block median.
    pub fn block_range(&self) -> (f64, f64) {
        let it = self.blocks.iter().map(|b| b.median);
        (
            it.clone().fold(f64::INFINITY, f64::min),
            it.fold(f64::NEG_INFINITY, f64::max),
        )
    }

    /// "0.976× (95 % CI 0.961–0.990; block medians 0.93–1.02; 8 blocks of 25 rounds)".
    pub fn line(&self) -> String {
        let (lo, hi) = self.block_range();
        format!(
            "{:.3}× (95 % CI {}; block medians {lo:.3}–{hi:.3}; {} blocks, {} rounds)",
            self.mean,
            self.ci_text(),
            self.blocks.len(),
            self.blocks.iter().map(|b| b.ratios.len()).sum::<usize>()
        )
    }

    /// "lo–hi" of the interval, or "n/a".
    pub fn ci_text(&self) -> String {
        self.ci95
            .map_or("n/a".to_string(), |(lo, hi)| format!("{lo:.3}–{hi:.3}"))
    }

    pub fn json(&self) -> serde_json::Value {
        let blocks: Vec<_> = self
            .blocks
            .iter()
            .map(|b| json!({ "median": b.median, "q1": b.q1, "q3": b.q3, "ratios": b.ratios }))
            .collect();
        json!({ "geometric_mean_of_block_medians": self.mean,
            "ci95": self.ci95.map(|(lo, hi)| [lo, hi]), "blocks": blocks })
    }
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom (`df` ≥ 1; above 30,
/// the normal's 1.96 plus the first-order correction).
fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        _ => 1.96 + 2.4 / df as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_paired_by_round() {
        // The rounds' levels differ 4× (machine noise); the ratio within each is 0.9.
        let a = [100.0, 400.0, 200.0, 100.0, 400.0, 200.0, 300.0, 100.0];
        let x: Vec<f64> = a.iter().map(|v| 0.9 * v).collect();
        let p = PairedRatios::new(&x, &a);
        assert!(p.ratios.iter().all(|r| (r - 0.9).abs() < 1e-12));
        assert!((p.median - 0.9).abs() < 1e-12);
    }

    /// A block whose rounds' ratios are `m` × (0.9, 1.0, 1.1).
    fn block(m: f64) -> PairedRatios {
        PairedRatios::new(&[0.9 * m, m, 1.1 * m], &[1.0; 3])
    }

    #[test]
    fn blocks_that_agree_decide_the_verdict() {
        let b = BlockedRatios::new([0.99, 1.0, 1.01, 1.0].map(block).to_vec());
        assert!((b.mean - 1.0).abs() < 1e-3);
        let (lo, hi) = b.ci95.unwrap();
        assert!(lo > 0.98 && hi < 1.02, "{lo} {hi}");
        assert_eq!(b.at_least(0.95), Verdict::Met);
        let b = BlockedRatios::new([0.80, 0.82, 0.81].map(block).to_vec());
        assert_eq!(b.at_least(0.95), Verdict::Missed);
    }

    #[test]
    fn blocks_that_disagree_leave_it_undecided() {
        // Each block alone looks decided; together the setups' spread straddles 0.95.
        let b = BlockedRatios::new([0.85, 1.02, 0.79, 1.06].map(block).to_vec());
        assert_eq!(b.block_range(), (0.79, 1.06));
        let (lo, hi) = b.ci95.unwrap();
        assert!(lo < 0.95 && hi > 0.95);
        assert_eq!(b.at_least(0.95), Verdict::Undecided);
        // One block has no interval at all.
        let b = BlockedRatios::new(vec![block(2.0)]);
        assert_eq!((b.ci95, b.at_least(0.95)), (None, Verdict::Undecided));
    }

    #[test]
    fn t_quantiles() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(7), 2.365);
        assert!(t975(31) < t975(30) && t975(31) > 1.96);
    }
}
