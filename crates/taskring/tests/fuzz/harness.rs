//! The budget and the runner every property shares: how many cases (`TASKRING_FUZZ_CASES`,
//! else `PROPTEST_CASES`, else the property's default), which seed (`TASKRING_FUZZ_SEED`,
//! else fixed per property under `make test` and new per run under `make fuzz`), and a
//! panic hook kept quiet while proptest catches and shrinks.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::cell::Cell;
use std::sync::Once;
use std::time::Instant;

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Panics inside a property are failures proptest catches and shrinks; keep the default
/// hook from printing every one of them (thousands while shrinking).
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                default(info);
            }
        }));
    });
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Cases per property: the budget from the environment, else `default`.
pub(crate) fn cases(default: u32) -> u32 {
    env_u64("TASKRING_FUZZ_CASES")
        .or_else(|| env_u64("PROPTEST_CASES"))
        .map(|v| v.clamp(1, u32::MAX as u64) as u32)
        .unwrap_or(default)
}

/// Runs `test` on `cases(default)` values of `strategy`; panics with the shrunk input.
pub(crate) fn fuzz<S: Strategy>(
    name: &str,
    default: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    fuzz_n(name, cases(default), strategy, test)
}

/// Runs `test` on `n` values of `strategy`.
pub(crate) fn fuzz_n<S: Strategy>(
    name: &str,
    n: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    quiet_panics();
    // `make test` (no TASKRING_FUZZ_CASES) runs each property from a fixed seed, so that
    // a test run is repeatable; `make fuzz` draws a new seed every run (how new inputs
    // are found; a failure prints its seed for TASKRING_FUZZ_SEED).
    let seed = env_u64("TASKRING_FUZZ_SEED").unwrap_or_else(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = if env_u64("TASKRING_FUZZ_CASES").is_some() {
            std::collections::hash_map::RandomState::new().build_hasher()
        } else {
            std::collections::hash_map::DefaultHasher::new()
        };
        h.write(name.as_bytes());
        h.finish()
    });
    let mut seed_bytes = [0u8; 32];
    for (i, c) in seed_bytes.chunks_mut(8).enumerate() {
        c.copy_from_slice(&(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes());
    }
    let config = Config {
        cases: n,
        failure_persistence: None,
        max_shrink_iters: 20_000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let t = Instant::now();
    QUIET.with(|q| q.set(true));
    let ran = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&strategy, |v| {
        ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        test(v)
    });
    QUIET.with(|q| q.set(false));
    let secs = t.elapsed().as_secs_f64();
    let ran = ran.into_inner();
    eprintln!("fuzz {name}: {n} cases in {secs:.2} s (seed {seed}; {ran} calls incl. shrinking)");
    if let Err(e) = result {
        panic!("fuzz {name} failed (replay with TASKRING_FUZZ_SEED={seed}): {e}");
    }
}

/// Runs `f` with the panic hook quiet: `Err` with the panic's message if it panics.
pub(crate) fn catch_quietly<R>(
    f: impl FnOnce() -> R + std::panic::UnwindSafe,
) -> Result<R, String> {
    QUIET.with(|q| q.set(true));
    quiet_panics();
    let r = std::panic::catch_unwind(f);
    QUIET.with(|q| q.set(false));
    r.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}
