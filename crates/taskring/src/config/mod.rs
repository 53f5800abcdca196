//! Ring sizing configuration: per-call configuration, environment overrides and
//! the resolved, validated ring sizes (contract: `docs/api.md` §1 and §1.2).
//!
//! # What this module owns
//!
//! * The low-level per-call configuration ([`CallConfig`], with its
//!   [`RuntimeEnv`] of 3 × 4 ring sizes) and its validation, with the exact
//!   error texts of the contract ([`ConfigError`]).
//! * Parsing of the `PTO2_RING_TASK_WINDOW` / `PTO2_RING_HEAP` /
//!   `PTO2_RING_DEP_POOL` environment variables ([`parse_env_value`],
//!   [`EnvSnapshot`], [`EnvWarning`]).
//! * The precedence rule and the resolved result ([`RingSizing::resolve`]):
//!   per resource and per ring, a non-zero `CallConfig.runtime_env` entry wins
//!   over a non-zero env var entry, which wins over the built-in default.
//!
//! # Invariants
//!
//! * In a [`RuntimeEnv`], `0` means "unset for this ring"; every non-zero entry
//!   that passed [`RuntimeEnv::validate`] satisfies [`RingField::check`].
//! * Every [`RingSizing`] produced by a constructor of this module holds twelve
//!   values that all satisfy [`RingField::check`] (no zeros).
//! * An env var that fails to parse, or breaks a rule, is ignored as a whole and
//!   reported as one [`EnvWarning`]; it never makes resolution fail.
//! * Resolution is a pure function of its inputs ([`RingSizing::resolve`]); only
//!   [`EnvSnapshot::from_process`] / [`RingSizing::resolve_from_process`] read
//!   the process environment, at the moment they are called. Nothing here
//!   caches the environment or writes to it.
//!
//! # Who calls it
//!
//! Every entry point that takes a [`CallConfig`] (worker prewarm, run, submit,
//! next-level submit, the Python bindings) calls [`CallConfig::validate`] before
//! dispatching, then resolves the ring sizes of each dispatch with
//! [`RingSizing::resolve_from_process`] (or [`RingSizing::resolve`] with an
//! injected environment, for tests and tools). The chip builds its rings from
//! the resulting [`RingSizing`], and the arena cache is keyed on
//! [`RingSizing::key`].
//!
//! # Parts
//!
//! * `rules.rs`: [`RingField`] and the size constants — the
//!   one place each rule and its phrase are written.
//! * `error.rs`: [`ConfigError`] and [`ConfigErrorKind`] — every message text.
//! * `call.rs`: [`RuntimeEnv`] and [`CallConfig`] and their validation.
//! * `env.rs`: the `PTO2_RING_*` variables ([`EnvSnapshot`], [`parse_env_value`],
//!   [`EnvWarning`]).
//! * `run_config.rs`: the field rules of the high-level `RunConfig`, as methods of
//!   [`RingField`] and [`CallConfig`] (the Python dataclass validates through them).
//! * `sizing.rs`: [`RingSizing`] and [`SizeSource`] (precedence, `key()`, `source()`).

mod call;
mod env;
mod error;
mod rules;
mod run_config;
mod sizing;

pub use call::{CallConfig, RuntimeEnv};
pub use env::{parse_env_value, EnvSnapshot, EnvWarning};
pub use error::{ConfigError, ConfigErrorKind};
pub use rules::{
    IntArg, RingField, DEFAULT_RING_DEP_POOL, DEFAULT_RING_HEAP, DEFAULT_RING_TASK_WINDOW,
    RUNTIME_ENV_RING_COUNT,
};
pub(crate) use rules::{
    MAX_RING_DEP_POOL, MAX_RING_TASK_WINDOW, MIN_RING_DEP_POOL, MIN_RING_HEAP, MIN_RING_TASK_WINDOW,
};
pub use sizing::{RingSizing, SizeSource};
