//! Write-after-read orderings. taskring infers read-after-write and write-after-write
//! dependencies from the tensors, not write-after-read: a task that overwrites its row
//! must also wait for the readers of the row's previous value that are not among its own
//! inputs. These tables find those readers per dependence set.

use super::pattern::{Intervals, Pattern, Shape};

/// Most (dependence set, point) entries of the write-after-read tables (each a small
/// vector of reader points): 2^26, about 1.5 GiB of vector headers.
const MAX_WAR_ENTRIES: u64 = 1 << 26;

/// Reverse dependence sets, for the write-after-read orderings taskring does not infer.
pub(super) struct War {
    /// `readers[dset][j]`: points `k` with `j` in `raw_deps(dset, k)`.
    readers: Vec<Vec<Vec<u32>>>,
    /// `needed[d]`: some point of a timestep using set `d` misses a reader of its row.
    needed: Vec<bool>,
}

impl War {
    /// `None` when no timestep can need an explicit ordering; an error when its tables
    /// would not fit in memory.
    pub(super) fn build(s: &Shape) -> Result<Option<War>, String> {
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
    pub(super) fn for_each_missing(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taskbench::pattern::tests::shape;

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
}
