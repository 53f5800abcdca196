//! Model checks of the concurrent core under loom (a separate build with `--cfg loom`,
//! `make test-loom`): the ring/completion core (`ring`), the chip's abort handshake
//! (`chip`), the mailbox's wake-up elision (`mailbox`), idle cores parking and waking
//! (`park`) and the orchestrator's own ready ring (`queue`). They drive the crate's own code (its `sync` facade is loom's in this build),
//! so they live inside the crate.
//!
mod chip;
mod mailbox;
mod park;
mod queue;
mod ring;

/// Check `f` in every interleaving loom explores within preemption bound `bound`.
pub(crate) fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() && std::env::var_os("LOOM_UNBOUNDED").is_none() {
        b.preemption_bound = Some(bound);
    }
    b.max_branches = b.max_branches.max(50_000);
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = runs.clone();
    let t0 = std::time::Instant::now();
    b.check(move || {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    eprintln!(
        "{}: {} interleavings explored (preemption bound {:?}) in {:.1?}",
        std::thread::current().name().unwrap_or("model"),
        runs.load(std::sync::atomic::Ordering::Relaxed),
        b.preemption_bound,
        t0.elapsed()
    );
}
