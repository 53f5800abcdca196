//! B5 probe: cold arena build time and RSS growth per sizing, cache-hit cost, and the
//! fixed cost of a warm 1-task run.
use std::time::Instant;
use taskring::mem::rss_bytes;
use taskring::*;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    println!("{:>8} {:>12} {:>10} {:>14} {:>14}", "window", "heap", "dep_pool", "build_us(med)", "rss_grow_KiB");
    for (w, h, d) in [(4u64, 1024u64, 4u64), (64, 1 << 16, 64), (1024, 1 << 20, 1024), (16384, 256 << 20, 16384), (65536, 1 << 30, 65536)] {
        let s = RingSizing::uniform(w, h, d).unwrap();
        let mut times = vec![];
        let mut grow = 0;
        for _ in 0..7 {
            let r0 = rss_bytes();
            let t0 = Instant::now();
            let a = Arena::build(&s).unwrap();
            times.push(t0.elapsed().as_secs_f64() * 1e6);
            grow = rss_bytes().saturating_sub(r0);
            drop(a);
        }
        println!("{:>8} {:>12} {:>10} {:>14.1} {:>14}", w, h, d, median(times), grow / 1024);
    }
    let mut cache = ArenaCache::new(4);
    let s = RingSizing::default();
    cache.acquire(&s).unwrap();
    let n = 100_000;
    let t0 = Instant::now();
    for _ in 0..n {
        let (a, _) = cache.acquire(&s).unwrap();
        a.reset();
    }
    println!("cache hit + reset: {:.0} ns", t0.elapsed().as_secs_f64() * 1e9 / n as f64);
    let mut chip = ChipWorker::new(ChipOptions::default()).unwrap();
    let p = Program::new("one", |o, _| o.submit(builtin::NOOP, &TaskArgs::new()).map(|_| ()));
    let cfg = CallConfig::default();
    for _ in 0..100 {
        chip.run(&p, &[], &cfg).unwrap();
    }
    let mut v = vec![];
    for _ in 0..2000 {
        let t0 = Instant::now();
        chip.run(&p, &[], &cfg).unwrap();
        v.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    println!("warm 1-task run (CallConfig, env resolved per dispatch): median {:.1} us", median(v));
}
