//! Fuzz tests (proptest; there is no nightly / cargo-fuzz on this machine) of the parsers
//! that read bytes or text from outside the process:
//!
//! - (a) the L3 task frame and reply decoders (`taskring::internals::node::wire`, `fuzz/frame.rs`):
//!   arbitrary bytes, valid headers over random bodies and mutated valid frames never
//!   panic and always give `Ok` or a typed `FrameError`; encode → decode is the identity
//!   (and decode → encode → decode is stable for whatever a mutated frame decodes to); a
//!   tensor argument off the wire that `Tensor::validate` accepts stays inside its
//!   shared-memory region (`fuzz/tensor_views.rs`); the L4 frames of
//!   `taskring::internals::cluster::wire` likewise (`fuzz/l4.rs`);
//! - (b) `PTO2_RING_*` parsing (taskring's config, `fuzz/env.rs`): arbitrary strings are
//!   either a value that passes the field's rule or one warning naming the variable
//!   (checked against an independent model of the rule), and resolution never panics and
//!   never yields an invalid sizing — also through the real process environment (child
//!   processes, with non-UTF-8 values);
//! - (c) the scope-stats reader (`fuzz/scope_stats.rs`) and the sizing advisor
//!   (`fuzz/advisor.rs`) of `taskring::dfx`: arbitrary text and crafted JSONL (huge
//!   numbers, negative, NaN, wrong types, missing fields) never panic; advice is always a
//!   valid ring size and never below a recorded peak (when a valid size at or above the
//!   peak exists); the `taskring sizing` command never panics and the `PTO2_RING_*` lines
//!   it prints parse back to the advice.
//!
//! Budget (`fuzz/harness.rs`): every property runs `TASKRING_FUZZ_CASES` cases when set,
//! else `PROPTEST_CASES`, else its own default (the defaults keep this whole test target
//! at a few seconds in the debug test build on 2 cores — `make test`). `make fuzz` runs
//! the long budget (200000 cases per property, about 2.5 minutes on 2 cores) in the same
//! build. Each property prints `fuzz <name>: N cases in T s (seed S)` on stderr (visible
//! with `--nocapture`); a failure prints the shrunk input and the seed.
//! `TASKRING_FUZZ_SEED=<u64>` replays a seed. `make test` uses a fixed seed per property
//! (repeatable); `make fuzz` a random one per run. A view whose element count overflows
//! is refused by `Tensor::validate` (`TooManyElements`).
//!
//! `dfx_advise_known_cases` holds, as fixed inputs, the classes of advisor input that
//! need care: huge peaks whose scaling overflows and a failed run's invalid recorded
//! sizes, which must not reach the advice.
//!
//! Shared input generators (limit values, Unicode text, call configs, frame mutations)
//! are in `fuzz/generators.rs`.

#[path = "fuzz/advisor.rs"]
mod advisor;
#[path = "fuzz/env.rs"]
mod env;
#[path = "fuzz/frame.rs"]
mod frame;
#[path = "fuzz/generators.rs"]
mod generators;
#[path = "fuzz/harness.rs"]
mod harness;
#[path = "fuzz/l4.rs"]
mod l4;
#[path = "fuzz/scope_stats.rs"]
mod scope_stats;
#[path = "fuzz/tensor_views.rs"]
mod tensor_views;
