//! The sizing advisor: from a run's recorded peaks, the smallest valid ring sizes that
//! would have held it with some headroom, and what it has to say about them.

use super::scope_stats::RecordedPeaks;
use crate::config::RingField;

/// The headroom of `taskring sizing` and `suggest_sizing` unless given.
pub const DEFAULT_HEADROOM: f64 = 1.25;

/// Suggested ring sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct SizingAdvice {
    /// The recorded peaks (and failure) the advice is for.
    pub peaks: RecordedPeaks,
    pub task_window: [u64; 4],
    pub heap: [u64; 4],
    pub dep_pool: [u64; 4],
    pub headroom: f64,
    /// Recorded needs that no valid size holds (the advice for them is the largest
    /// valid size, which is still too small: the program must change).
    pub unfit: Vec<Unfit>,
}

/// A recorded need beyond the largest valid size of its resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unfit {
    /// `ring_task_window`, `ring_heap` or `ring_dep_pool`.
    pub field: &'static str,
    pub ring: usize,
    /// The size the recorded peak (or the failure's `needed`) asks for, in the
    /// resource's unit (slots, bytes, entries).
    pub need: u64,
    /// The largest valid size.
    pub max: u64,
}

/// `v × headroom` rounded up, saturating, and never below `v` (a float product of a
/// large `v` may round down).
fn scaled(v: u64, headroom: f64) -> u64 {
    // (`as` saturates: NaN -> 0, beyond u64::MAX -> u64::MAX.)
    (((v as f64) * headroom).ceil() as u64).max(v)
}

/// The smallest valid size of `field` (config rules) that is at least `need`, or the
/// largest valid size and `false` when none is.
fn valid_at_least(field: RingField, need: u64) -> (u64, bool) {
    use crate::config::{
        MAX_RING_DEP_POOL, MAX_RING_TASK_WINDOW, MIN_RING_DEP_POOL, MIN_RING_HEAP,
        MIN_RING_TASK_WINDOW,
    };
    let (min, max, pow2) = match field {
        RingField::TaskWindow => (MIN_RING_TASK_WINDOW, MAX_RING_TASK_WINDOW, true),
        RingField::Heap => (MIN_RING_HEAP, 1u64 << 63, true),
        RingField::DepPool => (MIN_RING_DEP_POOL, MAX_RING_DEP_POOL, false),
    };
    let v = need.max(min);
    let v = if pow2 {
        v.checked_next_power_of_two().unwrap_or(u64::MAX)
    } else {
        v
    };
    let r = if v <= max { (v, true) } else { (max, false) };
    debug_assert!(field.check(r.0));
    r
}

/// The smallest valid sizes per ring that would have held `p` with `headroom` (≥ 1):
/// window = the next power of two above `peak × headroom` (a ring holds window − 1
/// tasks), at least 4; heap = the next power of two at or above `peak × headroom`, at
/// least 1024; dep pool = `peak × headroom`, at least 4. Every suggestion is a valid
/// size (config rules) and never below the recorded peak; a need beyond the largest
/// valid size is listed in `unfit` (and the suggestion is that largest size). For a
/// failed run the advice never goes below the sizes it ran with (rounded up to valid
/// sizes), and the failure's `needed` size raises its ring's resource to at least that:
/// a failed run only shows the part that ran, so the advice is a next step (run again
/// with it and re-read the stats), not a final answer. Arithmetic saturates.
///
/// The window and heap peaks of a program are deterministic; the dependency-pool peak is
/// not quite: an edge found through the tensormap to a producer that has already
/// completed needs no node, so a slower run can need a few more. Keep headroom there.
///
/// A `headroom` that is not a finite number ≥ 1 counts as 1 (the command line rejects
/// it: [`check_headroom`]).
pub fn advise(p: &RecordedPeaks, headroom: f64) -> SizingAdvice {
    let headroom = if headroom.is_finite() && headroom >= 1.0 {
        headroom
    } else {
        1.0
    };
    let mut a = SizingAdvice {
        peaks: p.clone(),
        task_window: [4; 4],
        heap: [1024; 4],
        dep_pool: [4; 4],
        headroom,
        unfit: Vec::new(),
    };
    let raise = |a: &mut SizingAdvice, field: RingField, r: usize, need: u64| {
        let (v, fits) = valid_at_least(field, need);
        let slot = match field {
            RingField::TaskWindow => &mut a.task_window[r],
            RingField::Heap => &mut a.heap[r],
            RingField::DepPool => &mut a.dep_pool[r],
        };
        *slot = (*slot).max(v);
        if !fits {
            let (max, _) = valid_at_least(field, u64::MAX);
            if let Some(u) = a
                .unfit
                .iter_mut()
                .find(|u| u.field == field.name() && u.ring == r)
            {
                u.need = u.need.max(need);
            } else {
                a.unfit.push(Unfit {
                    field: field.name(),
                    ring: r,
                    need,
                    max,
                });
            }
        }
    };
    for r in 0..4 {
        // A window holds window − 1 live tasks.
        raise(
            &mut a,
            RingField::TaskWindow,
            r,
            scaled(p.task_window[r], headroom).saturating_add(1),
        );
        raise(&mut a, RingField::Heap, r, scaled(p.heap[r], headroom));
        raise(
            &mut a,
            RingField::DepPool,
            r,
            scaled(p.dep_pool[r], headroom),
        );
    }
    if let Some((w, h, d)) = &p.floor {
        for r in 0..4 {
            // The sizes the failed run had (a crafted file may hold invalid ones: they
            // are rounded up to valid sizes, or capped at the largest).
            a.task_window[r] = a.task_window[r].max(valid_at_least(RingField::TaskWindow, w[r]).0);
            a.heap[r] = a.heap[r].max(valid_at_least(RingField::Heap, h[r]).0);
            a.dep_pool[r] = a.dep_pool[r].max(valid_at_least(RingField::DepPool, d[r]).0);
        }
    }
    if let Some(f) = &p.failure {
        // The size that holds the run, else at least the lower bound the failure saw.
        if let (Some(r), Some(res), Some(n)) =
            (f.ring, f.resource.as_deref(), f.needed.or(f.at_least))
        {
            let r = r.min(3);
            if let Some(field) = RingField::ALL.into_iter().find(|fl| fl.name() == res) {
                raise(&mut a, field, r, scaled(n, headroom));
            }
        }
    }
    a
}

/// The `--headroom` rule: a finite number ≥ 1 (`"1.25"`).
pub fn check_headroom(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(h) if h.is_finite() && h >= 1.0 => Ok(h),
        _ => Err(format!("--headroom must be a finite number >= 1 (a factor on the recorded peaks), got '{text}'")),
    }
}

impl SizingAdvice {
    /// The advisor's notes, one sentence each: the recorded peaks, the failure of a
    /// failed run, each need no valid size holds, and the headroom of the suggestion
    /// (the `#` lines of `taskring sizing`, without their `# `).
    pub fn notes(&self) -> Vec<String> {
        let peaks = &self.peaks;
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let mut o = vec![format!(
            "recorded peaks per ring: task_window={:?} heap={:?} dep_pool={:?}",
            peaks.task_window, peaks.heap, peaks.dep_pool
        )];
        if let Some(f) = &peaks.failure {
            o.push(format!(
                "the run failed: {} (code {}){}",
                f.name,
                f.code,
                // A failure of no ring (DEVICE_OUT_OF_MEMORY, ...) has no sizes to show.
                match (f.ring, f.resource.as_deref()) {
                    (Some(r), Some(res)) => format!(
                        " on ring {r}, {res} configured {}, needed {}{}",
                        opt(f.configured),
                        opt(f.needed),
                        f.at_least
                            .map_or(String::new(), |n| format!(" (at least {n})"))
                    ),
                    (Some(r), None) => format!(" on ring {r}"),
                    _ => String::new(),
                }
            ));
        }
        for u in &self.unfit {
            o.push(format!(
                "no valid size fits: ring {} needs {} >= {} but the largest valid {} is {}; the advice below caps it there, which is still too small: change the program (split the scope or the graph)",
                u.ring, u.field, u.need, u.field, u.max
            ));
        }
        o.push(format!("suggested sizes (headroom {:.2}):", self.headroom));
        o
    }

    /// What `taskring sizing` prints: the notes as `#` lines, then the suggestion as a
    /// `runtime_env` line and as `PTO2_RING_*` lines.
    pub fn report(&self) -> String {
        let mut o = String::new();
        for n in self.notes() {
            o.push_str("# ");
            o.push_str(&n);
            o.push('\n');
        }
        o.push_str(&self.runtime_env());
        o.push('\n');
        o.push_str(&self.env_lines());
        o.push('\n');
        o
    }

    /// The suggested size of `field` per ring.
    pub fn sizes(&self, field: RingField) -> [u64; 4] {
        match field {
            RingField::TaskWindow => self.task_window,
            RingField::Heap => self.heap,
            RingField::DepPool => self.dep_pool,
        }
    }

    /// One field's sizes as `runtime_env` takes them: one number when the rings agree
    /// (`Ok`), else the four.
    pub fn one_or_four(v: [u64; 4]) -> Result<u64, [u64; 4]> {
        if v.iter().all(|&x| x == v[0]) {
            Ok(v[0])
        } else {
            Err(v)
        }
    }
    fn python_value(v: &[u64; 4]) -> String {
        match Self::one_or_four(*v) {
            Ok(x) => x.to_string(),
            Err(v) => format!("[{}, {}, {}, {}]", v[0], v[1], v[2], v[3]),
        }
    }
    fn env_value(v: &[u64; 4]) -> String {
        match Self::one_or_four(*v) {
            Ok(x) => x.to_string(),
            Err(v) => format!("{},{},{},{}", v[0], v[1], v[2], v[3]),
        }
    }

    /// A ready-to-paste `runtime_env` mapping (scene-test / `CallConfig` style).
    pub fn runtime_env(&self) -> String {
        format!(
            "runtime_env = {{\"ring_task_window\": {}, \"ring_heap\": {}, \"ring_dep_pool\": {}}}",
            Self::python_value(&self.task_window),
            Self::python_value(&self.heap),
            Self::python_value(&self.dep_pool)
        )
    }

    /// The same as `PTO2_RING_*` environment lines.
    pub fn env_lines(&self) -> String {
        format!(
            "PTO2_RING_TASK_WINDOW={}\nPTO2_RING_HEAP={}\nPTO2_RING_DEP_POOL={}",
            Self::env_value(&self.task_window),
            Self::env_value(&self.heap),
            Self::env_value(&self.dep_pool)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dfx::scope_stats::{read_peaks, test_header, FailureRecord, ScopeSample};
    use crate::dfx::sizing_report;

    #[test]
    fn advice_from_header_peaks() {
        let h = test_header(Some(([3, 3, 3, 3], [0, 1024, 1024, 1024], [0, 2, 2, 2])));
        let text = serde_json::to_string(&h).unwrap();
        let p = read_peaks(&text).unwrap();
        let a = advise(&p, 1.0);
        assert_eq!(a.task_window, [4; 4]);
        assert_eq!(a.heap, [1024; 4]);
        assert_eq!(a.dep_pool, [4; 4]);
        assert_eq!(
            a.runtime_env(),
            "runtime_env = {\"ring_task_window\": 4, \"ring_heap\": 1024, \"ring_dep_pool\": 4}"
        );
        let a = advise(
            &RecordedPeaks {
                task_window: [100, 7, 0, 0],
                heap: [5000, 0, 0, 0],
                dep_pool: [10, 0, 0, 0],
                failure: None,
                floor: None,
            },
            1.25,
        );
        assert_eq!(a.task_window, [128, 16, 4, 4]);
        assert_eq!(a.heap, [8192, 1024, 1024, 1024]);
        assert_eq!(a.dep_pool, [13, 4, 4, 4]);
        assert_eq!(a.env_lines(), "PTO2_RING_TASK_WINDOW=128,16,4,4\nPTO2_RING_HEAP=8192,1024,1024,1024\nPTO2_RING_DEP_POOL=13,4,4,4");
    }

    #[test]
    fn advice_from_samples_and_failure() {
        let h = test_header(None);
        let b = ScopeSample {
            site: "x.rs:1".into(),
            phase: "begin".into(),
            depth: 1,
            ring: 1,
            task_window_start: 10,
            task_window_end: 10,
            heap_start: 0,
            heap_end: 0,
            dep_pool_start: 5,
            dep_pool_end: 5,
            tensormap: 0,
        };
        let mut e = b.clone();
        e.phase = "end".into();
        e.task_window_end = 30;
        e.heap_end = 3000;
        e.dep_pool_end = 25;
        let text = format!(
            "{}\n{}\n{}\n",
            serde_json::to_string(&h).unwrap(),
            serde_json::to_string(&b).unwrap(),
            serde_json::to_string(&e).unwrap()
        );
        let p = read_peaks(&text).unwrap();
        assert_eq!((p.task_window[1], p.heap[1], p.dep_pool[1]), (20, 3000, 20));
        let mut p2 = p.clone();
        p2.failure = Some(FailureRecord {
            code: 1,
            name: "SCOPE_DEADLOCK".into(),
            ring: Some(2),
            resource: Some("ring_task_window".into()),
            configured: Some(4),
            needed: Some(64),
            at_least: None,
        });
        let a = advise(&p2, 1.0);
        assert_eq!(a.task_window[1], 32);
        assert_eq!(a.task_window[2], 64);
        // An unknown needed size: the lower bound the failure saw raises the entry.
        let mut p3 = p.clone();
        p3.failure = Some(FailureRecord {
            code: 2,
            name: "HEAP_RING_DEADLOCK".into(),
            ring: Some(1),
            resource: Some("ring_heap".into()),
            configured: Some(4096),
            needed: None,
            at_least: Some(1 << 20),
        });
        assert_eq!(advise(&p3, 1.0).heap[1], 1 << 20);
        assert!(read_peaks("{\"version\":5}").is_err());
        assert!(read_peaks("").is_err());
    }

    fn all_valid(a: &SizingAdvice) {
        for r in 0..4 {
            assert!(RingField::TaskWindow.check(a.task_window[r]), "{a:?}");
            assert!(RingField::Heap.check(a.heap[r]), "{a:?}");
            assert!(RingField::DepPool.check(a.dep_pool[r]), "{a:?}");
        }
    }

    fn peaks(w: [u64; 4], h: [u64; 4], d: [u64; 4]) -> RecordedPeaks {
        RecordedPeaks {
            task_window: w,
            heap: h,
            dep_pool: d,
            failure: None,
            floor: None,
        }
    }

    #[test]
    fn huge_peaks_saturate_and_are_reported_unfit() {
        // next_power_of_two of these wrapped to the minimum suggestion.
        let p = peaks(
            [u64::MAX, 1 << 30, (1 << 30) - 1, 0],
            [(1 << 63) + 1, 1 << 63, u64::MAX, 5],
            [u64::MAX, i32::MAX as u64, 4, 0],
        );
        for h in [1.0, 1.25, 1e300] {
            let a = advise(&p, h);
            all_valid(&a);
            assert_eq!(a.task_window[0], 1 << 30);
            assert_eq!(a.heap[0], 1 << 63);
            assert_eq!(a.dep_pool[0], i32::MAX as u64);
            if h < 2.0 {
                assert_eq!(a.heap[3], 1024);
            }
            if h == 1.0 {
                // Never below a recorded peak when a valid size holds it.
                assert_eq!(a.task_window[2], 1 << 30);
                assert_eq!(a.heap[1], 1 << 63);
                assert_eq!(a.dep_pool[1], i32::MAX as u64);
            }
            let unfit: Vec<(&str, usize)> = a.unfit.iter().map(|u| (u.field, u.ring)).collect();
            for want in [
                ("ring_task_window", 0),
                ("ring_task_window", 1),
                ("ring_heap", 0),
                ("ring_heap", 2),
                ("ring_dep_pool", 0),
            ] {
                assert!(unfit.contains(&want), "{want:?} not in {:?}", a.unfit);
            }
            let u = a
                .unfit
                .iter()
                .find(|u| (u.field, u.ring) == ("ring_task_window", 1))
                .unwrap();
            assert_eq!(u.max, 1 << 30);
            assert!(u.need > 1 << 30);
        }
        let a = advise(
            &peaks([(1 << 30) - 1; 4], [1 << 63; 4], [i32::MAX as u64; 4]),
            1.0,
        );
        assert!(a.unfit.is_empty(), "{:?}", a.unfit);
        let text = sizing_report(
            &serde_json::to_string(&test_header(Some((
                [u64::MAX; 4],
                [u64::MAX; 4],
                [u64::MAX; 4],
            ))))
            .unwrap(),
            1.25,
        )
        .unwrap();
        assert!(text.contains("# no valid size fits: ring 0 needs ring_task_window >= 18446744073709551615 but the largest valid ring_task_window is 1073741824;"), "{text}");
        assert!(text.contains("\"ring_task_window\": 1073741824, \"ring_heap\": 9223372036854775808, \"ring_dep_pool\": 2147483647"), "{text}");
    }

    #[test]
    fn invalid_sizes_of_a_failed_run_become_valid_suggestions() {
        let mut h = test_header(Some(([1, 1, 1, 1], [0; 4], [0; 4])));
        h.fatal = true;
        h.task_window_max = [5, 5, 16, 1 << 40];
        h.heap_max = [3000, 1023, 0, u64::MAX];
        h.dep_pool_max = [3, 5, 0, u64::MAX];
        let p = read_peaks(&serde_json::to_string(&h).unwrap()).unwrap();
        let a = advise(&p, 1.0);
        all_valid(&a);
        assert_eq!(a.task_window, [8, 8, 16, 1 << 30]);
        assert_eq!(a.heap, [4096, 1024, 1024, 1 << 63]);
        assert_eq!(a.dep_pool, [4, 5, 4, i32::MAX as u64]);
        // A failure's needed size beyond the largest valid size is reported, not wrapped.
        let mut p2 = p.clone();
        p2.failure = Some(FailureRecord {
            code: 2,
            name: "HEAP_RING_DEADLOCK".into(),
            ring: Some(1),
            resource: Some("ring_heap".into()),
            configured: Some(1024),
            needed: Some(u64::MAX),
            at_least: None,
        });
        let a = advise(&p2, 1.25);
        all_valid(&a);
        assert_eq!(a.heap[1], 1 << 63);
        assert_eq!(
            a.unfit,
            vec![Unfit {
                field: "ring_heap",
                ring: 1,
                need: u64::MAX,
                max: 1 << 63
            }]
        );
    }

    #[test]
    fn the_failure_line_shows_sizes_only_for_a_ring() {
        let mut h = test_header(Some(([1; 4], [0; 4], [0; 4])));
        h.fatal = true;
        h.failure = Some(FailureRecord {
            code: 202,
            name: "DEVICE_OUT_OF_MEMORY".into(),
            ring: None,
            resource: None,
            configured: None,
            needed: None,
            at_least: None,
        });
        let text = sizing_report(&serde_json::to_string(&h).unwrap(), 1.25).unwrap();
        assert!(
            text.contains("# the run failed: DEVICE_OUT_OF_MEMORY (code 202)\n"),
            "{text}"
        );
        h.failure = Some(FailureRecord {
            code: 2,
            name: "HEAP_RING_DEADLOCK".into(),
            ring: Some(1),
            resource: Some("ring_heap".into()),
            configured: Some(4096),
            needed: None,
            at_least: Some(8192),
        });
        let text = sizing_report(&serde_json::to_string(&h).unwrap(), 1.25).unwrap();
        assert!(
            text.contains("# the run failed: HEAP_RING_DEADLOCK (code 2) on ring 1, ring_heap configured 4096, needed - (at least 8192)\n"),
            "{text}"
        );
    }
}
