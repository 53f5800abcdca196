//! B5 arena: what a ring sizing costs to build and to keep, and what the arena cache
//! saves.
//!
//! - cold build: `Arena::build` per sizing over a grid of windows (4..16384, dep pool =
//!   window) × heaps (1 KiB..256 MiB), all four rings alike; time and RSS growth
//!   (`/proc/self/statm` before/after the build, the arena alive); the default sizing is
//!   the grid's (16384, 256 MiB, 16384) point, and is also built with shared-memory heaps
//!   (what an L3 node builds);
//! - cache hit: `ArenaCache::acquire` of a resident key + `Arena::reset`, with 1 resident
//!   arena and with 4 (rotating over the four keys: each acquire moves one to the front);
//! - alternation: 100 dispatches of a 1-task program alternating two sizings (the
//!   default and window 1024 / heap 16 MiB / pool 1024) on a chip with
//!   `arena_cache_slots` = 1 vs 4: wall time and arena builds.

use super::*;
use serde_json::json;
use taskring::builtin::NOOP;
use taskring::*;

/// `reps` + 1 cold builds of sizing `s` (the first dropped): µs and RSS growth (KiB)
/// of each, the arena alive.
fn build_samples(s: &RingSizing, shared: bool, reps: usize) -> Result<(Series, Series), String> {
    let (mut tv, mut rv) = (vec![], vec![]);
    for i in 0..reps + 1 {
        let r0 = rss_now();
        let t0 = Instant::now();
        let a = Arena::build_with(s, shared).map_err(|e| e.to_string())?;
        let dt = t0.elapsed().as_secs_f64() * 1e6;
        let grown = rss_now().saturating_sub(r0);
        drop(a);
        if i > 0 {
            tv.push(dt);
            rv.push(grown as f64 / 1024.0);
        }
    }
    Ok((Series::new("µs", tv), Series::new("KiB", rv)))
}

/// The cold-build grid (windows × heaps), then the default sizing with shared-memory
/// heaps; returns the default sizing's (build µs, RSS KiB) and the grid's JSON rows.
fn cold_builds(
    b: &mut Bench,
    windows: &[u64],
    heaps: &[u64],
    reps: usize,
    prog: &mut Progress,
) -> Result<((f64, u64), Vec<serde_json::Value>), String> {
    b.say(&format!(
        "   {:>7} {:>11} {:>9} {:>12} {:>12}",
        "window", "heap", "dep_pool", "build µs", "RSS KiB"
    ));
    let mut default_build = (f64::NAN, 0u64);
    let mut grid = vec![];
    for &w in windows {
        for &h in heaps {
            let s = RingSizing::uniform(w, h, w).map_err(|e| e.to_string())?;
            let (t, r) = build_samples(&s, false, reps)?;
            prog.tick(&format!("build w={w} h={h}"));
            b.say(&format!(
                "   {:>7} {:>11} {:>9} {:>12.1} {:>12.0}",
                w, h, w, t.median, r.median
            ));
            let is_default = s.key() == RingSizing::default().key();
            if is_default {
                default_build = (t.median, r.median as u64);
            }
            grid.push(json!({ "window": w, "heap": h, "dep_pool": w, "build_us": t.median, "rss_kib": r.median }));
            let mut c = Case::new(
                &format!("build_w{w}_h{h}"),
                "µs of one cold Arena::build (the previous one unmapped)",
                t,
            )
            .extra(json!({ "rss_growth_kib": r, "default_sizing": is_default }));
            if is_default {
                let rss_mib = c.extra["rss_growth_kib"]["median"]
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    / 1024.0;
                let tm = c.value.median;
                c = c
                    .bar("default sizing build ≤ 1 ms", tm <= 1000.0)
                    .bar("default sizing ≤ 16 MiB RSS", rss_mib <= 16.0);
            }
            b.push(c);
        }
    }
    let (t, r) = build_samples(&RingSizing::default(), true, reps)?;
    prog.tick("build shared");
    b.say(&format!(
        "   default sizing with shared-memory heaps (L3 node): {:.1} µs, {:.0} KiB",
        t.median, r.median
    ));
    b.push(
        Case::new(
            "build_default_shared_heaps",
            "µs of one cold Arena::build_with(default, shared heaps)",
            t,
        )
        .extra(json!({ "rss_growth_kib": r })),
    );
    Ok((default_build, grid))
}

/// Cache hits: `reps` samples of the mean ns of `batch` acquire + reset, with 1 and
/// with 4 resident arenas; returns (1 resident, 4 resident).
fn cache_hits(
    b: &mut Bench,
    reps: usize,
    batch: usize,
    prog: &mut Progress,
) -> Result<(Series, Series), String> {
    let def = RingSizing::default();
    let keys: Vec<RingSizing> = [16384u64, 8192, 4096, 2048]
        .iter()
        .map(|&w| RingSizing::from_values([w; 4], def.heap, def.dep_pool).unwrap())
        .collect();
    let mut c1 = ArenaCache::new(4);
    c1.prewarm(&def).map_err(|e| e.to_string())?;
    let mut c4 = ArenaCache::new(4);
    for k in &keys {
        c4.prewarm(k).map_err(|e| e.to_string())?;
    }
    let (mut h1, mut h4) = (vec![], vec![]);
    for _ in 0..reps {
        let t0 = Instant::now();
        for _ in 0..batch {
            let (a, acq) = c1.acquire(&def).map_err(|e| e.to_string())?;
            debug_assert!(acq.hit);
            a.reset();
        }
        h1.push(t0.elapsed().as_secs_f64() * 1e9 / batch as f64);
        let t0 = Instant::now();
        for i in 0..batch {
            // The least recently used key: always at the back of the LRU list.
            let (a, _) = c4.acquire(&keys[i % 4]).map_err(|e| e.to_string())?;
            a.reset();
        }
        h4.push(t0.elapsed().as_secs_f64() * 1e9 / batch as f64);
    }
    prog.tick("hits");
    if c1.stats().builds != 1 || c4.stats().builds != 4 {
        return Err(format!(
            "cache hits built arenas: {:?} {:?}",
            c1.stats(),
            c4.stats()
        ));
    }
    let h1 = Series::new("ns", h1);
    let h4 = Series::new("ns", h4);
    b.say(&format!(
        "   cache hit + reset: {:.0} ns (1 resident), {:.0} ns (4 resident, LRU-last key)",
        h1.median, h4.median
    ));
    b.push(
        Case::new(
            "hit_1_resident",
            &format!("ns per ArenaCache::acquire (hit) + Arena::reset, mean of {batch}"),
            h1.clone(),
        )
        .bar("hit ≤ 5 µs", h1.median <= 5000.0),
    );
    b.push(
        Case::new(
            "hit_4_resident",
            &format!("ns per acquire (hit, the LRU-last of 4 keys) + reset, mean of {batch}"),
            h4.clone(),
        )
        .bar("hit ≤ 5 µs", h4.median <= 5000.0),
    );
    Ok((h1, h4))
}

/// A fresh chip of `threads` core threads with `slots` arena cache slots.
fn chip_with_slots(threads: usize, slots: usize) -> Result<ChipWorker, String> {
    ChipWorker::new(ChipOptions {
        cores: threads,
        arena_cache_slots: slots,
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

/// A cold dispatch: the first run of a sizing on a chip (build + first-touch page
/// faults of what the run uses), then the same dispatch warm.
fn first_dispatch(
    b: &mut Bench,
    opts: &Opts,
    reps: usize,
    one: &Program,
    a_s: &RingSizing,
) -> Result<(), String> {
    let (mut cold, mut warm, mut cold_rss) = (vec![], vec![], vec![]);
    for _ in 0..reps {
        let mut chip = chip_with_slots(opts.threads, 1)?;
        let r0 = rss_now();
        let t0 = Instant::now();
        chip.run_with_sizing(one, &[], a_s)
            .map_err(|e| e.to_string())?;
        cold.push(t0.elapsed().as_secs_f64() * 1e6);
        cold_rss.push(rss_now().saturating_sub(r0) as f64 / 1024.0);
        let t0 = Instant::now();
        chip.run_with_sizing(one, &[], a_s)
            .map_err(|e| e.to_string())?;
        warm.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let cold = Series::new("µs", cold);
    let warm = Series::new("µs", warm);
    let cold_rss = Series::new("KiB", cold_rss);
    b.say(&format!(
        "   first dispatch of the default sizing on a fresh chip: {:.1} µs (RSS +{:.0} KiB), the next one {:.1} µs",
        cold.median, cold_rss.median, warm.median
    ));
    b.push(
        Case::new("first_dispatch_default", "µs of the first 1-task dispatch of the default sizing on a new chip (arena build + first touch)", cold.clone())
            .with_baseline("the second (warm) dispatch", warm.clone(), "cold time / warm time", cold.median / warm.median)
            .extra(json!({ "rss_growth_kib": cold_rss })),
    );
    Ok(())
}

/// `reps` samples, each on a fresh chip with `slots` arena cache slots, of the ms for 100
/// dispatches alternating sizings `a_s` and `b_s`; and the last chip's arena builds.
fn alternate(
    opts: &Opts,
    reps: usize,
    one: &Program,
    (a_s, b_s): (&RingSizing, &RingSizing),
    slots: usize,
) -> Result<(Series, u64), String> {
    let mut v = vec![];
    let mut builds = 0;
    for _ in 0..reps {
        let mut chip = chip_with_slots(opts.threads, slots)?;
        let t0 = Instant::now();
        for i in 0..100 {
            let s = if i % 2 == 0 { a_s } else { b_s };
            chip.run_with_sizing(one, &[], s)
                .map_err(|e| e.to_string())?;
        }
        v.push(t0.elapsed().as_secs_f64() * 1e3);
        builds = chip.arena_stats().builds;
    }
    Ok((Series::new("ms", v), builds))
}

/// The alternation's line and cases: slots=1 against slots=4.
fn judge_alternate(b: &mut Bench, (t1, b1): &(Series, u64), (t4, b4): &(Series, u64)) {
    let ratio = t1.median / t4.median;
    b.say(&format!(
        "   100 dispatches alternating 2 sizings: slots=1 {:.2} ms ({} builds), slots=4 {:.2} ms ({} builds), ratio {:.2}",
        t1.median, b1, t4.median, b4, ratio
    ));
    b.push(
        Case::new("alternate_slots1", "ms for 100 dispatches of a 1-task program alternating two sizings, arena_cache_slots=1", t1.clone())
            .with_baseline("the same with arena_cache_slots=4", t4.clone(), "slots=1 time / slots=4 time", ratio)
            .extra(json!({ "builds_slots1": b1, "builds_slots4": b4 })),
    );
    b.push(
        Case::new(
            "alternate_slots4",
            "ms for the same 100 dispatches, arena_cache_slots=4",
            t4.clone(),
        )
        .extra(json!({ "builds": b4 })),
    );
}

pub fn run(opts: &Opts) -> Result<Report, String> {
    let mut b = Bench::start(
        "b5",
        "arena",
        "arena build time and RSS per sizing, cache hit cost, slots=1 vs slots=4",
        opts,
    );
    let reps = opts.reps.max(5);
    let windows: Vec<u64> = vec![4, 64, 1024, 16384];
    let heaps: Vec<u64> = vec![1 << 10, 1 << 16, 1 << 24, 1 << 28];
    let mut prog = Progress::new("b5", windows.len() * heaps.len() + 5);

    let ((bt, br), grid) = cold_builds(&mut b, &windows, &heaps, reps, &mut prog)?;
    let batch = if opts.quick { 2000 } else { 20000 };
    let (h1, h4) = cache_hits(&mut b, reps, batch, &mut prog)?;
    let hit_ok = h1.median <= 5000.0 && h4.median <= 5000.0;

    // Alternating two sizings (after the first dispatch of one of them on a fresh chip).
    let one = Program::new("one", |o, _| o.submit(NOOP, &TaskArgs::new()).map(|_| ()));
    let a_s = RingSizing::default();
    let b_s = RingSizing::uniform(1024, 16 << 20, 1024).map_err(|e| e.to_string())?;
    first_dispatch(&mut b, opts, reps, &one, &a_s)?;
    prog.tick("cold dispatch");
    let slots1 = alternate(opts, reps, &one, (&a_s, &b_s), 1)?;
    prog.tick("alternate slots=1");
    let slots4 = alternate(opts, reps, &one, (&a_s, &b_s), 4)?;
    prog.tick("alternate slots=4");
    prog.done();
    judge_alternate(&mut b, &slots1, &slots4);
    let ((t1, b1), (t4, b4)) = (slots1, slots4);
    let summary = format!(
        "default build {:.1} µs / {:.0} KiB RSS (bars ≤ 1 ms, ≤ 16 MiB: {}), hit {:.0} ns (bar ≤ 5 µs: {}), alternate slots=1 {:.1} ms/{} builds vs slots=4 {:.1} ms/{} builds",
        bt,
        br,
        if bt <= 1000.0 && (br as f64) <= 16.0 * 1024.0 { "met" } else { "missed" },
        h1.median.max(h4.median),
        if hit_ok { "met" } else { "missed" },
        t1.median,
        b1,
        t4.median,
        b4
    );
    Ok(b.finish(
        json!({ "reps": reps, "windows": windows, "heaps": heaps, "dep_pool": "= window", "grid": grid, "hit_batch": batch,
            "alternate": { "dispatches": 100, "sizing_a": a_s.to_string(), "sizing_b": b_s.to_string(), "chip_cores": opts.threads } }),
        summary,
    ))
}
