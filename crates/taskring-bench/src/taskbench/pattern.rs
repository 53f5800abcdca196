//! Dependence patterns: which points exist at each timestep of a graph and which points
//! of the previous timestep each one depends on, as sorted, disjoint point intervals.

use super::name_of;

/// Most dependency intervals one task may have (bounds spread / random_nearest radix).
pub(super) const MAX_IV: usize = 64;

/// A Task Bench dependence type (`-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pattern {
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

pub(super) const PATTERNS: [(&str, Pattern); 11] = [
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
    pub(super) fn name(self) -> &'static str {
        name_of(&PATTERNS, &self)
    }
    /// Patterns whose dependence set changes with the timestep's period.
    pub(super) fn uses_period(self) -> bool {
        matches!(self, Pattern::Spread | Pattern::RandomNearest)
    }
}

/// Up to `MAX_IV` inclusive point intervals, kept sorted and disjoint by `normalize`.
#[derive(Clone, Copy)]
pub(super) struct Intervals {
    v: [(i64, i64); MAX_IV],
    n: usize,
}

impl Intervals {
    pub(super) fn new() -> Intervals {
        Intervals {
            v: [(0, 0); MAX_IV],
            n: 0,
        }
    }
    #[inline]
    pub(super) fn clear(&mut self) {
        self.n = 0;
    }
    #[inline]
    pub(super) fn push(&mut self, lo: i64, hi: i64) {
        // Bounded by construction (check_spec caps the radix of the point-list patterns).
        assert!(self.n < MAX_IV, "more than {MAX_IV} dependency intervals");
        self.v[self.n] = (lo, hi);
        self.n += 1;
    }
    #[inline]
    pub(super) fn as_slice(&self) -> &[(i64, i64)] {
        &self.v[..self.n]
    }
    /// Sort by start and merge overlapping or adjacent intervals.
    pub(super) fn normalize(&mut self) {
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
    pub(super) fn clip(&mut self, lo: i64, hi: i64) {
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
    pub(super) fn count(&self) -> i64 {
        self.as_slice().iter().map(|&(a, b)| b - a + 1).sum()
    }
    pub(super) fn contains(&self, p: i64) -> bool {
        self.as_slice().iter().any(|&(a, b)| a <= p && p <= b)
    }
}

/// The shape of one graph: which points exist at each timestep and what they depend on.
#[derive(Clone, Debug)]
pub(super) struct Shape {
    pub(super) pattern: Pattern,
    pub(super) steps: i64,
    pub(super) width: i64,
    radix: i64,
    pub(super) period: i64,
    fraction: f64,
    /// Number of distinct dependence sets (fft: log2 width; spread/random_nearest: period).
    pub(super) ndsets: i64,
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
    /// The shape of a graph of `pattern` with the flags `-steps -width -radix -period
    /// -fraction` (`period` as given; -1: unset).
    pub(super) fn new(
        pattern: Pattern,
        steps: i64,
        width: i64,
        radix: i64,
        period: i64,
        fraction: f64,
    ) -> Shape {
        let period = if pattern.uses_period() && period <= 0 {
            3
        } else {
            period
        };
        let ndsets = match pattern {
            Pattern::Fft => ceil_log2(width).max(1),
            Pattern::Spread | Pattern::RandomNearest => period.max(1),
            _ => 1,
        };
        Shape {
            pattern,
            steps,
            width,
            radix,
            period,
            fraction,
            ndsets,
        }
    }

    /// First point of timestep `t` (the diamond of `dom` slides right in its second half).
    #[inline]
    pub(super) fn offset_at(&self, t: i64) -> i64 {
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
    pub(super) fn width_at(&self, t: i64) -> i64 {
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
    pub(super) fn dset_at(&self, t: i64) -> i64 {
        match self.pattern {
            // timestep 1 uses stride 1, then 2, 4, ...
            Pattern::Fft => (t + self.ndsets - 1) % self.ndsets,
            Pattern::Spread | Pattern::RandomNearest => t % self.ndsets,
            _ => 0,
        }
    }

    /// The points of the previous timestep that point `i` depends on under set `dset`,
    /// before clipping to the points that exist (normalized).
    pub(super) fn raw_deps(&self, dset: i64, i: i64, out: &mut Intervals) {
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
    pub(super) fn deps_at(&self, t: i64, i: i64, out: &mut Intervals) {
        if t <= 0 {
            out.clear();
            return;
        }
        self.raw_deps(self.dset_at(t), i, out);
        let lo = self.offset_at(t - 1);
        out.clip(lo, lo + self.width_at(t - 1) - 1);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::taskbench) fn shape(p: Pattern, steps: i64, width: i64, radix: i64) -> Shape {
        let g = crate::taskbench::cli::GraphSpec::default();
        Shape::new(p, steps, width, radix, g.period, g.fraction)
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
