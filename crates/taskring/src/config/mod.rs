//! Ring sizing configuration: per-call configuration, environment overrides and
//! the resolved, validated ring sizes (contract: `API.md` §1 and §1.2).
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

use std::fmt;
use std::hash::{Hash, Hasher};
use std::num::IntErrorKind;

/// Number of scope-depth rings (ring = `min(scope_depth, 3)`).
pub const RUNTIME_ENV_RING_COUNT: usize = 4;
/// Built-in default task window per ring (in-flight task slots).
pub const DEFAULT_RING_TASK_WINDOW: u64 = 16384;
/// Built-in default task-output heap per ring, in bytes (256 MiB).
pub const DEFAULT_RING_HEAP: u64 = 256 << 20;
/// Built-in default dependency-edge pool entries per ring.
pub const DEFAULT_RING_DEP_POOL: u64 = 16384;
/// Smallest allowed task window.
pub const MIN_RING_TASK_WINDOW: u64 = 4;
/// Largest allowed task window (`2^30`).
pub const MAX_RING_TASK_WINDOW: u64 = 1 << 30;
/// Smallest allowed heap per ring, in bytes.
pub const MIN_RING_HEAP: u64 = 1024;
/// Smallest allowed dependency pool.
pub const MIN_RING_DEP_POOL: u64 = 4;
/// Largest allowed dependency pool (`INT32_MAX`).
pub const MAX_RING_DEP_POOL: u64 = i32::MAX as u64;

/// Warning rule for a token that is not a non-negative decimal integer.
const RULE_NON_NEGATIVE_INTEGER: &str = "must be a non-negative integer";
/// Warning rule for an env var with neither one nor four values.
const RULE_VALUE_COUNT: &str = "expected one value or exactly 4 comma-separated values";

/// One of the three per-ring resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingField {
    /// In-flight task slots of a ring (`ring_task_window`).
    TaskWindow,
    /// Bytes of task-output heap of a ring (`ring_heap`).
    Heap,
    /// Dependency-edge pool entries of a ring (`ring_dep_pool`).
    DepPool,
}

impl RingField {
    /// All fields, in contract order (window, heap, dep pool).
    pub const ALL: [RingField; 3] = [RingField::TaskWindow, RingField::Heap, RingField::DepPool];

    /// Field name as used by `RuntimeEnv` / `RunConfig`: `"ring_task_window"`,
    /// `"ring_heap"` or `"ring_dep_pool"`.
    pub fn name(self) -> &'static str {
        match self {
            RingField::TaskWindow => "ring_task_window",
            RingField::Heap => "ring_heap",
            RingField::DepPool => "ring_dep_pool",
        }
    }

    /// Environment variable that overrides this field: `"PTO2_RING_TASK_WINDOW"`,
    /// `"PTO2_RING_HEAP"` or `"PTO2_RING_DEP_POOL"`.
    pub fn env_var(self) -> &'static str {
        match self {
            RingField::TaskWindow => "PTO2_RING_TASK_WINDOW",
            RingField::Heap => "PTO2_RING_HEAP",
            RingField::DepPool => "PTO2_RING_DEP_POOL",
        }
    }

    /// Built-in default value of this field for every ring.
    pub fn default_value(self) -> u64 {
        match self {
            RingField::TaskWindow => DEFAULT_RING_TASK_WINDOW,
            RingField::Heap => DEFAULT_RING_HEAP,
            RingField::DepPool => DEFAULT_RING_DEP_POOL,
        }
    }

    /// The per-entry rule of `API.md` §1 for a non-zero value:
    /// window a power of 2 in `[4, 2^30]`, heap a power of 2 `>= 1024`,
    /// dep pool in `[4, 2^31 - 1]`.
    ///
    /// `check(0)` is `false`: zero is not a size. Callers that treat `0` as
    /// "unset" (such as [`RuntimeEnv::validate`]) skip zeros before checking.
    pub fn check(self, v: u64) -> bool {
        match self {
            RingField::TaskWindow => {
                v.is_power_of_two() && (MIN_RING_TASK_WINDOW..=MAX_RING_TASK_WINDOW).contains(&v)
            }
            RingField::Heap => v.is_power_of_two() && v >= MIN_RING_HEAP,
            RingField::DepPool => (MIN_RING_DEP_POOL..=MAX_RING_DEP_POOL).contains(&v),
        }
    }

    /// The rule of [`check`](Self::check) as a phrase that follows "must be":
    /// `"a power of 2 in [4, 1073741824]"`, `"a power of 2 >= 1024 (bytes per ring)"`
    /// or `"in [4, 2147483647]"`.
    pub fn rule(self) -> &'static str {
        match self {
            RingField::TaskWindow => "a power of 2 in [4, 1073741824]",
            RingField::Heap => "a power of 2 >= 1024 (bytes per ring)",
            RingField::DepPool => "in [4, 2147483647]",
        }
    }

    /// Row of this field in the 3 × 4 layouts (window 0, heap 1, dep pool 2).
    fn index(self) -> usize {
        match self {
            RingField::TaskWindow => 0,
            RingField::Heap => 1,
            RingField::DepPool => 2,
        }
    }
}

impl fmt::Display for RingField {
    /// Writes [`RingField::name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A configuration validation error.
///
/// `Display` is exactly the contract's message text, without any prefix (the
/// Python layer raises it as `ValueError(message)`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The full message text.
    pub message: String,
}

impl ConfigError {
    /// An error with the given message text.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            message: message.into(),
        }
    }
}

/// Per-call ring sizes: 3 resources × 4 rings, `0` = unset for that ring
/// (fall through to the env var, then to the built-in default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RuntimeEnv {
    /// Task window per ring (`0` = unset).
    pub ring_task_window: [u64; RUNTIME_ENV_RING_COUNT],
    /// Heap bytes per ring (`0` = unset).
    pub ring_heap: [u64; RUNTIME_ENV_RING_COUNT],
    /// Dependency pool entries per ring (`0` = unset).
    pub ring_dep_pool: [u64; RUNTIME_ENV_RING_COUNT],
}

impl RuntimeEnv {
    /// The four entries of field `f`.
    pub fn get(&self, f: RingField) -> [u64; RUNTIME_ENV_RING_COUNT] {
        match f {
            RingField::TaskWindow => self.ring_task_window,
            RingField::Heap => self.ring_heap,
            RingField::DepPool => self.ring_dep_pool,
        }
    }

    /// Mutable access to the four entries of field `f`.
    pub fn get_mut(&mut self, f: RingField) -> &mut [u64; RUNTIME_ENV_RING_COUNT] {
        match f {
            RingField::TaskWindow => &mut self.ring_task_window,
            RingField::Heap => &mut self.ring_heap,
            RingField::DepPool => &mut self.ring_dep_pool,
        }
    }

    /// Sets every ring of field `f` to `v` (scalar broadcast; `0` unsets all).
    pub fn set_all(&mut self, f: RingField, v: u64) {
        *self.get_mut(f) = [v; RUNTIME_ENV_RING_COUNT];
    }

    /// `true` when every entry is zero (nothing set).
    pub fn is_unset(&self) -> bool {
        RingField::ALL
            .iter()
            .all(|&f| self.get(f).iter().all(|&v| v == 0))
    }

    /// Checks every non-zero entry against its field's rule, in the order
    /// ring 0..3 and, within a ring, window, heap, dep pool. The first failure
    /// is returned as `"RuntimeEnv: {field}[{ring}] must be {rule}, got {v}"`.
    /// Zero entries always pass.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for ring in 0..RUNTIME_ENV_RING_COUNT {
            for f in RingField::ALL {
                let v = self.get(f)[ring];
                if v != 0 && !f.check(v) {
                    return Err(ConfigError::new(format!(
                        "RuntimeEnv: {}[{ring}] must be {}, got {v}",
                        f.name(),
                        f.rule()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Low-level per-call configuration (Simpler-style `CallConfig`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct CallConfig {
    /// Scheduler thread count: `0` = auto, else in `[2, 8]`.
    pub aicpu_thread_num: u32,
    /// Per-call ring sizes (`0` entries fall through).
    pub runtime_env: RuntimeEnv,
    /// Write `scope_stats/scope_stats.jsonl` under [`output_prefix`](Self::output_prefix).
    pub enable_scope_stats: bool,
    /// Swimlane trace level in `[0, 4]` (`0` = off).
    pub enable_chip_swimlane: u32,
    /// Write `deps.json` under [`output_prefix`](Self::output_prefix).
    pub enable_dep_gen: bool,
    /// Output directory of the diagnostics; required when any `enable_*` is on.
    pub output_prefix: String,
}

impl CallConfig {
    /// Validates the configuration; the first failure wins, in this order:
    ///
    /// 1. diagnostics: any `enable_*` on while `output_prefix` is empty;
    /// 2. [`RuntimeEnv::validate`] (rings 0..3; window, heap, dep pool);
    /// 3. `aicpu_thread_num` is `0` or in `[2, 8]`;
    /// 4. `enable_chip_swimlane` is in `[0, 4]`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let diagnostics_on =
            self.enable_scope_stats || self.enable_chip_swimlane != 0 || self.enable_dep_gen;
        if diagnostics_on && self.output_prefix.is_empty() {
            return Err(ConfigError::new(
                "CallConfig: output_prefix must be set whenever any of enable_chip_swimlane / \
                 enable_dep_gen / enable_scope_stats is enabled",
            ));
        }
        self.runtime_env.validate()?;
        let n = self.aicpu_thread_num;
        if n != 0 && !(2..=8).contains(&n) {
            return Err(ConfigError::new(format!(
                "aicpu_thread_num must be 0 (auto) or in [2, 8], got {n}"
            )));
        }
        let lane = self.enable_chip_swimlane;
        if lane > 4 {
            return Err(ConfigError::new(format!(
                "enable_chip_swimlane must be in [0, 4], got {lane}"
            )));
        }
        Ok(())
    }

    /// Returns the config with the four entries of field `f` replaced by
    /// `values` (not validated; call [`validate`](Self::validate)).
    pub fn with_ring(mut self, f: RingField, values: [u64; RUNTIME_ENV_RING_COUNT]) -> Self {
        *self.runtime_env.get_mut(f) = values;
        self
    }
}

/// Where a resolved ring size came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SizeSource {
    /// A non-zero `CallConfig.runtime_env` entry (or an explicit constructor value).
    CallConfig,
    /// A non-zero entry of the field's `PTO2_RING_*` environment variable.
    Env,
    /// The built-in default.
    Default,
}

impl SizeSource {
    /// `"call_config"`, `"env"` or `"default"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SizeSource::CallConfig => "call_config",
            SizeSource::Env => "env",
            SizeSource::Default => "default",
        }
    }
}

impl fmt::Display for SizeSource {
    /// Writes [`SizeSource::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The three `PTO2_RING_*` variables as read at one moment (`None` = not set).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvSnapshot {
    /// Value of `PTO2_RING_TASK_WINDOW`.
    pub task_window: Option<String>,
    /// Value of `PTO2_RING_HEAP`.
    pub heap: Option<String>,
    /// Value of `PTO2_RING_DEP_POOL`.
    pub dep_pool: Option<String>,
}

impl EnvSnapshot {
    /// Reads the three variables from the process environment now. Values that
    /// are not valid UTF-8 are converted lossily (and then fail to parse).
    pub fn from_process() -> Self {
        Self::from_lookup(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Reads the three variables through `f` (an injected environment, for
    /// tests and tools); `f` receives the variable name.
    pub fn from_lookup(f: impl Fn(&str) -> Option<String>) -> Self {
        EnvSnapshot {
            task_window: f(RingField::TaskWindow.env_var()),
            heap: f(RingField::Heap.env_var()),
            dep_pool: f(RingField::DepPool.env_var()),
        }
    }

    /// A snapshot with none of the variables set.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The raw value of field `f`'s variable, if set.
    pub fn get(&self, f: RingField) -> Option<&str> {
        match f {
            RingField::TaskWindow => self.task_window.as_deref(),
            RingField::Heap => self.heap.as_deref(),
            RingField::DepPool => self.dep_pool.as_deref(),
        }
    }
}

/// One environment variable that was ignored as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvWarning {
    /// Variable name, e.g. `"PTO2_RING_HEAP"`.
    pub var: &'static str,
    /// The variable's raw value.
    pub value: String,
    /// The broken rule, e.g. `"must be a non-negative integer"`.
    pub rule: String,
}

impl fmt::Display for EnvWarning {
    /// `"taskring: {var}={value} ignored: {rule}"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "taskring: {}={} ignored: {}",
            self.var, self.value, self.rule
        )
    }
}

/// Parses one `PTO2_RING_*` value for `field`.
///
/// The value is either one integer (broadcast to the four rings) or exactly four
/// comma-separated integers (rings 0..3); whitespace around each token is
/// trimmed. Tokens are base-10 `u64` (an optional leading `+` is accepted, like
/// `strtoull`). A `0` entry means "fall through" and stays `0` in the result.
///
/// Any empty, non-numeric or negative token, a wrong count (2, 3, 5 values, a
/// trailing comma), a `u64` overflow, or a non-zero value that breaks the
/// field's rule ([`RingField::check`]) yields an [`EnvWarning`]: the whole
/// variable is to be ignored.
pub fn parse_env_value(
    field: RingField,
    value: &str,
) -> Result<[u64; RUNTIME_ENV_RING_COUNT], EnvWarning> {
    let warn = |rule: String| EnvWarning {
        var: field.env_var(),
        value: value.to_owned(),
        rule,
    };
    let tokens: Vec<&str> = value.split(',').map(str::trim).collect();
    if tokens.len() != 1 && tokens.len() != RUNTIME_ENV_RING_COUNT {
        return Err(warn(RULE_VALUE_COUNT.to_owned()));
    }
    let mut parsed = [0u64; RUNTIME_ENV_RING_COUNT];
    for (slot, token) in parsed.iter_mut().zip(&tokens) {
        let v = match token.parse::<u64>() {
            Ok(v) => v,
            Err(e) if *e.kind() == IntErrorKind::PosOverflow => {
                return Err(warn(format!("must be {}", field.rule())));
            }
            Err(_) => return Err(warn(RULE_NON_NEGATIVE_INTEGER.to_owned())),
        };
        if v != 0 && !field.check(v) {
            return Err(warn(format!("must be {}", field.rule())));
        }
        *slot = v;
    }
    if tokens.len() == 1 {
        parsed = [parsed[0]; RUNTIME_ENV_RING_COUNT];
    }
    Ok(parsed)
}

/// The resolved, validated ring sizes of one dispatch: 3 resources × 4 rings,
/// plus where each value came from.
///
/// Equality and hashing consider the twelve values only (as in [`key`](Self::key)),
/// never the sources: an explicit value equal to the default is the same sizing.
///
/// The value fields are public for reading; constructors of this module
/// guarantee every entry satisfies [`RingField::check`]. Writing to them
/// directly bypasses that check.
#[derive(Clone, Copy, Debug)]
pub struct RingSizing {
    /// Task window per ring.
    pub task_window: [u64; RUNTIME_ENV_RING_COUNT],
    /// Heap bytes per ring.
    pub heap: [u64; RUNTIME_ENV_RING_COUNT],
    /// Dependency pool entries per ring.
    pub dep_pool: [u64; RUNTIME_ENV_RING_COUNT],
    /// Source of each value, indexed `[field row][ring]`.
    sources: [[SizeSource; RUNTIME_ENV_RING_COUNT]; 3],
}

impl PartialEq for RingSizing {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for RingSizing {}

impl Hash for RingSizing {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl Default for RingSizing {
    /// The built-in defaults on every ring, all with source [`SizeSource::Default`].
    fn default() -> Self {
        RingSizing {
            task_window: [DEFAULT_RING_TASK_WINDOW; RUNTIME_ENV_RING_COUNT],
            heap: [DEFAULT_RING_HEAP; RUNTIME_ENV_RING_COUNT],
            dep_pool: [DEFAULT_RING_DEP_POOL; RUNTIME_ENV_RING_COUNT],
            sources: [[SizeSource::Default; RUNTIME_ENV_RING_COUNT]; 3],
        }
    }
}

impl RingSizing {
    /// Applies the precedence of `API.md` §1, independently for every resource
    /// and every ring: non-zero `env_cfg` entry > non-zero entry of the env var
    /// in `env` > built-in default.
    ///
    /// `env_cfg` is validated first ([`RuntimeEnv::validate`]); its error is
    /// returned unchanged. Env vars that fail [`parse_env_value`] are ignored as
    /// a whole and returned as warnings (at most one per variable, in field
    /// order). Pure: does not read the process environment.
    pub fn resolve(
        env_cfg: &RuntimeEnv,
        env: &EnvSnapshot,
    ) -> Result<(RingSizing, Vec<EnvWarning>), ConfigError> {
        env_cfg.validate()?;
        let mut sizing = RingSizing::default();
        let mut warnings = Vec::new();
        for f in RingField::ALL {
            let from_env = match env.get(f).map(|raw| parse_env_value(f, raw)) {
                None => [0; RUNTIME_ENV_RING_COUNT],
                Some(Ok(values)) => values,
                Some(Err(w)) => {
                    warnings.push(w);
                    [0; RUNTIME_ENV_RING_COUNT]
                }
            };
            let from_cfg = env_cfg.get(f);
            for ring in 0..RUNTIME_ENV_RING_COUNT {
                let (value, source) = if from_cfg[ring] != 0 {
                    (from_cfg[ring], SizeSource::CallConfig)
                } else if from_env[ring] != 0 {
                    (from_env[ring], SizeSource::Env)
                } else {
                    (f.default_value(), SizeSource::Default)
                };
                sizing.values_mut(f)[ring] = value;
                sizing.sources[f.index()][ring] = source;
            }
        }
        Ok((sizing, warnings))
    }

    /// [`resolve`](Self::resolve) against [`EnvSnapshot::from_process`] (read
    /// now), printing each warning on stderr once per process and value (a bad
    /// variable is reported once, not at every dispatch; a new bad value again).
    pub fn resolve_from_process(env_cfg: &RuntimeEnv) -> Result<RingSizing, ConfigError> {
        let (sizing, warnings) = Self::resolve(env_cfg, &EnvSnapshot::from_process())?;
        if !warnings.is_empty() {
            static SEEN: std::sync::Mutex<Vec<(&'static str, String)>> = std::sync::Mutex::new(Vec::new());
            let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
            for w in &warnings {
                if !seen.iter().any(|(var, value)| *var == w.var && *value == w.value) {
                    seen.push((w.var, w.value.clone()));
                    eprintln!("{w}");
                }
            }
        }
        Ok(sizing)
    }

    /// A sizing from explicit values; every entry must satisfy its field's rule
    /// (`0` is not allowed). All sources are [`SizeSource::CallConfig`].
    ///
    /// The first failure (rings 0..3; window, heap, dep pool) is returned as
    /// `"RingSizing: {field}[{ring}] must be {rule}, got {v}"`.
    pub fn from_values(
        task_window: [u64; RUNTIME_ENV_RING_COUNT],
        heap: [u64; RUNTIME_ENV_RING_COUNT],
        dep_pool: [u64; RUNTIME_ENV_RING_COUNT],
    ) -> Result<RingSizing, ConfigError> {
        let sizing = RingSizing {
            task_window,
            heap,
            dep_pool,
            sources: [[SizeSource::CallConfig; RUNTIME_ENV_RING_COUNT]; 3],
        };
        for ring in 0..RUNTIME_ENV_RING_COUNT {
            for f in RingField::ALL {
                let v = sizing.get(f)[ring];
                if !f.check(v) {
                    return Err(ConfigError::new(format!(
                        "RingSizing: {}[{ring}] must be {}, got {v}",
                        f.name(),
                        f.rule()
                    )));
                }
            }
        }
        Ok(sizing)
    }

    /// Sources as 12 codes (0 call_config, 1 env, 2 default), field-major — the order
    /// of [`RingSizing::key`]; for carrying a sizing across a process boundary.
    pub fn source_codes(&self) -> [u8; 12] {
        let mut out = [0u8; 12];
        for (fi, row) in self.sources.iter().enumerate() {
            for (r, s) in row.iter().enumerate() {
                out[fi * 4 + r] = match s {
                    SizeSource::CallConfig => 0,
                    SizeSource::Env => 1,
                    SizeSource::Default => 2,
                };
            }
        }
        out
    }

    /// Rebuild a sizing from its key and [`RingSizing::source_codes`] (validated).
    pub fn from_key_and_sources(key: [u64; 12], codes: [u8; 12]) -> Result<RingSizing, ConfigError> {
        let mut s = RingSizing::from_values(
            [key[0], key[1], key[2], key[3]],
            [key[4], key[5], key[6], key[7]],
            [key[8], key[9], key[10], key[11]],
        )?;
        for i in 0..12 {
            s.sources[i / 4][i % 4] = match codes[i] {
                1 => SizeSource::Env,
                2 => SizeSource::Default,
                _ => SizeSource::CallConfig,
            };
        }
        Ok(s)
    }

    /// [`from_values`](Self::from_values) with the same value on every ring.
    pub fn uniform(task_window: u64, heap: u64, dep_pool: u64) -> Result<RingSizing, ConfigError> {
        Self::from_values(
            [task_window; RUNTIME_ENV_RING_COUNT],
            [heap; RUNTIME_ENV_RING_COUNT],
            [dep_pool; RUNTIME_ENV_RING_COUNT],
        )
    }

    /// The four values of field `f`.
    pub fn get(&self, f: RingField) -> [u64; RUNTIME_ENV_RING_COUNT] {
        match f {
            RingField::TaskWindow => self.task_window,
            RingField::Heap => self.heap,
            RingField::DepPool => self.dep_pool,
        }
    }

    /// The twelve values the arena cache is keyed on:
    /// `task_window[0..4]`, then `heap[0..4]`, then `dep_pool[0..4]`.
    pub fn key(&self) -> [u64; 3 * RUNTIME_ENV_RING_COUNT] {
        let mut key = [0u64; 3 * RUNTIME_ENV_RING_COUNT];
        for f in RingField::ALL {
            let start = f.index() * RUNTIME_ENV_RING_COUNT;
            key[start..start + RUNTIME_ENV_RING_COUNT].copy_from_slice(&self.get(f));
        }
        key
    }

    /// Where the value of field `f` on `ring` came from.
    ///
    /// # Panics
    ///
    /// If `ring >= RUNTIME_ENV_RING_COUNT`.
    pub fn source(&self, f: RingField, ring: usize) -> SizeSource {
        self.sources[f.index()][ring]
    }

    /// Mutable access to the four values of field `f` (private: keeps the validation invariant).
    fn values_mut(&mut self, f: RingField) -> &mut [u64; RUNTIME_ENV_RING_COUNT] {
        match f {
            RingField::TaskWindow => &mut self.task_window,
            RingField::Heap => &mut self.heap,
            RingField::DepPool => &mut self.dep_pool,
        }
    }
}

impl fmt::Display for RingSizing {
    /// One line: `Ring buffer sizes: ring0 window=16384 heap=268435456
    /// dep_pool=16384; ring1 window=...; ring2 ...; ring3 ...` (entries separated
    /// by `"; "`, no trailing separator).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ring buffer sizes: ")?;
        for ring in 0..RUNTIME_ENV_RING_COUNT {
            if ring > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "ring{ring} window={} heap={} dep_pool={}",
                self.task_window[ring], self.heap[ring], self.dep_pool[ring]
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;
    use std::collections::HashSet;

    const W: RingField = RingField::TaskWindow;
    const H: RingField = RingField::Heap;
    const D: RingField = RingField::DepPool;

    fn env(window: Option<&str>, heap: Option<&str>, dep: Option<&str>) -> EnvSnapshot {
        EnvSnapshot {
            task_window: window.map(str::to_owned),
            heap: heap.map(str::to_owned),
            dep_pool: dep.map(str::to_owned),
        }
    }

    fn hash_of<T: Hash>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    fn validate_msg(cfg: &CallConfig) -> String {
        match cfg.validate() {
            Ok(()) => panic!("expected a validation error for {cfg:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn rt_env(f: RingField, ring: usize, v: u64) -> RuntimeEnv {
        let mut e = RuntimeEnv::default();
        e.get_mut(f)[ring] = v;
        e
    }

    fn warning(f: RingField, value: &str) -> EnvWarning {
        match parse_env_value(f, value) {
            Ok(v) => panic!("expected {value:?} to be rejected, got {v:?}"),
            Err(w) => w,
        }
    }

    // ---------------------------------------------------------------- fields

    #[test]
    fn constants() {
        assert_eq!(RUNTIME_ENV_RING_COUNT, 4);
        assert_eq!(DEFAULT_RING_TASK_WINDOW, 16384);
        assert_eq!(DEFAULT_RING_HEAP, 268_435_456);
        assert_eq!(DEFAULT_RING_DEP_POOL, 16384);
        assert_eq!(MAX_RING_TASK_WINDOW, 1_073_741_824);
        assert_eq!(MIN_RING_HEAP, 1024);
        assert_eq!(MAX_RING_DEP_POOL, 2_147_483_647);
    }

    #[test]
    fn field_names_env_vars_defaults() {
        assert_eq!(RingField::ALL, [W, H, D]);
        assert_eq!(W.name(), "ring_task_window");
        assert_eq!(H.name(), "ring_heap");
        assert_eq!(D.name(), "ring_dep_pool");
        assert_eq!(W.env_var(), "PTO2_RING_TASK_WINDOW");
        assert_eq!(H.env_var(), "PTO2_RING_HEAP");
        assert_eq!(D.env_var(), "PTO2_RING_DEP_POOL");
        assert_eq!(W.default_value(), DEFAULT_RING_TASK_WINDOW);
        assert_eq!(H.default_value(), DEFAULT_RING_HEAP);
        assert_eq!(D.default_value(), DEFAULT_RING_DEP_POOL);
        assert_eq!(W.to_string(), "ring_task_window");
        for f in RingField::ALL {
            assert!(
                f.check(f.default_value()),
                "{f} default must satisfy its rule"
            );
            assert!(!f.check(0), "{f}: 0 is not a size");
        }
    }

    #[test]
    fn check_task_window_boundaries() {
        assert!(!W.check(2));
        assert!(!W.check(3));
        assert!(W.check(4));
        assert!(!W.check(5));
        assert!(W.check(8));
        assert!(!W.check(12));
        assert!(W.check(1 << 29));
        assert!(W.check(1 << 30));
        assert!(!W.check((1 << 30) + 1));
        assert!(!W.check(1 << 31));
        assert!(!W.check(1 << 63));
        assert!(!W.check(u64::MAX));
    }

    #[test]
    fn check_heap_boundaries() {
        assert!(!H.check(512));
        assert!(!H.check(1023));
        assert!(H.check(1024));
        assert!(!H.check(1025));
        assert!(!H.check(1536));
        assert!(H.check(2048));
        assert!(H.check(1 << 63));
        assert!(!H.check(u64::MAX));
    }

    #[test]
    fn check_dep_pool_boundaries() {
        assert!(!D.check(3));
        assert!(D.check(4));
        assert!(D.check(5));
        assert!(D.check(12));
        assert!(D.check(2_147_483_647));
        assert!(!D.check(2_147_483_648));
        assert!(!D.check(u64::MAX));
    }

    #[test]
    fn size_source_strings() {
        assert_eq!(SizeSource::CallConfig.as_str(), "call_config");
        assert_eq!(SizeSource::Env.as_str(), "env");
        assert_eq!(SizeSource::Default.as_str(), "default");
        assert_eq!(SizeSource::Env.to_string(), "env");
    }

    // ------------------------------------------------------------ RuntimeEnv

    #[test]
    fn runtime_env_accessors() {
        let mut e = RuntimeEnv::default();
        assert!(e.is_unset());
        e.set_all(H, 4096);
        assert_eq!(e.get(H), [4096; 4]);
        assert_eq!(e.ring_heap, [4096; 4]);
        assert!(!e.is_unset());
        e.get_mut(W)[2] = 64;
        assert_eq!(e.ring_task_window, [0, 0, 64, 0]);
        e.get_mut(D)[3] = 9;
        assert_eq!(e.get(D), [0, 0, 0, 9]);
        e.set_all(H, 0);
        e.set_all(W, 0);
        e.set_all(D, 0);
        assert!(e.is_unset());
        assert_eq!(e, RuntimeEnv::default());
    }

    #[test]
    fn runtime_env_zeros_pass() {
        assert_eq!(RuntimeEnv::default().validate(), Ok(()));
        assert_eq!(CallConfig::default().validate(), Ok(()));
    }

    #[test]
    fn runtime_env_window_messages() {
        for ring in 0..4 {
            for ok in [4, 8, 1 << 30] {
                assert_eq!(rt_env(W, ring, ok).validate(), Ok(()), "window {ok}");
            }
            for bad in [1u64, 3, 12, (1 << 30) + 4, 1 << 31, u64::MAX] {
                let err = rt_env(W, ring, bad).validate().expect_err("must fail");
                assert_eq!(
                    err.to_string(),
                    format!(
                        "RuntimeEnv: ring_task_window[{ring}] must be a power of 2 in \
                         [4, 1073741824], got {bad}"
                    )
                );
            }
        }
    }

    #[test]
    fn runtime_env_heap_messages() {
        for ring in 0..4 {
            for ok in [1024, 2048, 1 << 40] {
                assert_eq!(rt_env(H, ring, ok).validate(), Ok(()), "heap {ok}");
            }
            for bad in [1u64, 512, 1023, 1025, 1536, u64::MAX] {
                let err = rt_env(H, ring, bad).validate().expect_err("must fail");
                assert_eq!(
                    err.message,
                    format!(
                        "RuntimeEnv: ring_heap[{ring}] must be a power of 2 >= 1024 \
                         (bytes per ring), got {bad}"
                    )
                );
            }
        }
    }

    #[test]
    fn runtime_env_dep_pool_messages() {
        for ring in 0..4 {
            for ok in [4, 5, 12, 2_147_483_647] {
                assert_eq!(rt_env(D, ring, ok).validate(), Ok(()), "dep pool {ok}");
            }
            for bad in [1u64, 3, 2_147_483_648, u64::MAX] {
                let err = rt_env(D, ring, bad).validate().expect_err("must fail");
                assert_eq!(
                    err.to_string(),
                    format!(
                        "RuntimeEnv: ring_dep_pool[{ring}] must be in [4, 2147483647], got {bad}"
                    )
                );
            }
        }
    }

    #[test]
    fn runtime_env_exact_message_examples() {
        assert_eq!(
            rt_env(W, 2, 12).validate().expect_err("bad").to_string(),
            "RuntimeEnv: ring_task_window[2] must be a power of 2 in [4, 1073741824], got 12"
        );
        assert_eq!(
            rt_env(H, 0, 1023).validate().expect_err("bad").to_string(),
            "RuntimeEnv: ring_heap[0] must be a power of 2 >= 1024 (bytes per ring), got 1023"
        );
        assert_eq!(
            rt_env(D, 3, 3).validate().expect_err("bad").to_string(),
            "RuntimeEnv: ring_dep_pool[3] must be in [4, 2147483647], got 3"
        );
    }

    #[test]
    fn runtime_env_first_failure_wins_ring_major() {
        // Ring 1's dep pool fails before ring 2's window.
        let e = RuntimeEnv {
            ring_task_window: [0, 0, 3, 0],
            ring_heap: [0, 0, 0, 5],
            ring_dep_pool: [0, 2, 0, 0],
        };
        assert_eq!(
            e.validate().expect_err("bad").message,
            "RuntimeEnv: ring_dep_pool[1] must be in [4, 2147483647], got 2"
        );
        // Within one ring: window before heap before dep pool.
        let e = RuntimeEnv {
            ring_task_window: [0, 0, 3, 0],
            ring_heap: [0, 0, 5, 0],
            ring_dep_pool: [0, 0, 2, 0],
        };
        assert_eq!(
            e.validate().expect_err("bad").message,
            "RuntimeEnv: ring_task_window[2] must be a power of 2 in [4, 1073741824], got 3"
        );
        let e = RuntimeEnv {
            ring_task_window: [0, 0, 64, 0],
            ring_heap: [0, 0, 5, 0],
            ring_dep_pool: [0, 0, 2, 0],
        };
        assert_eq!(
            e.validate().expect_err("bad").message,
            "RuntimeEnv: ring_heap[2] must be a power of 2 >= 1024 (bytes per ring), got 5"
        );
        // Ring 0's heap fails before ring 3's window.
        let e = RuntimeEnv {
            ring_task_window: [16, 0, 0, 7],
            ring_heap: [100, 0, 0, 0],
            ring_dep_pool: [0; 4],
        };
        assert_eq!(
            e.validate().expect_err("bad").message,
            "RuntimeEnv: ring_heap[0] must be a power of 2 >= 1024 (bytes per ring), got 100"
        );
    }

    // ------------------------------------------------------------ CallConfig

    const PREFIX_MSG: &str = "CallConfig: output_prefix must be set whenever any of \
        enable_chip_swimlane / enable_dep_gen / enable_scope_stats is enabled";

    #[test]
    fn call_config_output_prefix_rule() {
        let on: [fn(&mut CallConfig); 4] = [
            |c| c.enable_scope_stats = true,
            |c| c.enable_dep_gen = true,
            |c| c.enable_chip_swimlane = 1,
            |c| c.enable_chip_swimlane = 4,
        ];
        for enable in on {
            let mut cfg = CallConfig::default();
            enable(&mut cfg);
            assert_eq!(validate_msg(&cfg), PREFIX_MSG);
            cfg.output_prefix = "/tmp/out".into();
            assert_eq!(cfg.validate(), Ok(()));
        }
        // A prefix without diagnostics is fine.
        let cfg = CallConfig {
            output_prefix: "/tmp/out".into(),
            ..Default::default()
        };
        assert_eq!(cfg.validate(), Ok(()));
    }

    #[test]
    fn call_config_order_prefix_then_rings_then_threads_then_swimlane() {
        let mut cfg = CallConfig {
            aicpu_thread_num: 1,
            enable_chip_swimlane: 9,
            ..Default::default()
        }
        .with_ring(W, [0, 3, 0, 0]);
        assert_eq!(validate_msg(&cfg), PREFIX_MSG);
        cfg.output_prefix = "out".into();
        assert_eq!(
            validate_msg(&cfg),
            "RuntimeEnv: ring_task_window[1] must be a power of 2 in [4, 1073741824], got 3"
        );
        cfg.runtime_env.ring_task_window = [0, 4, 0, 0];
        assert_eq!(
            validate_msg(&cfg),
            "aicpu_thread_num must be 0 (auto) or in [2, 8], got 1"
        );
        cfg.aicpu_thread_num = 8;
        assert_eq!(
            validate_msg(&cfg),
            "enable_chip_swimlane must be in [0, 4], got 9"
        );
        cfg.enable_chip_swimlane = 4;
        assert_eq!(cfg.validate(), Ok(()));
    }

    #[test]
    fn call_config_rings_checked_after_prefix() {
        let cfg = CallConfig {
            enable_dep_gen: true,
            ..Default::default()
        }
        .with_ring(H, [5; 4]);
        assert_eq!(validate_msg(&cfg), PREFIX_MSG);
        let cfg = CallConfig::default().with_ring(H, [2048, 5, 0, 0]);
        assert_eq!(
            validate_msg(&cfg),
            "RuntimeEnv: ring_heap[1] must be a power of 2 >= 1024 (bytes per ring), got 5"
        );
    }

    #[test]
    fn call_config_aicpu_thread_num_boundaries() {
        for ok in [0, 2, 3, 4, 8] {
            let cfg = CallConfig {
                aicpu_thread_num: ok,
                ..Default::default()
            };
            assert_eq!(cfg.validate(), Ok(()), "aicpu_thread_num {ok}");
        }
        for bad in [1, 9, u32::MAX] {
            let cfg = CallConfig {
                aicpu_thread_num: bad,
                ..Default::default()
            };
            assert_eq!(
                validate_msg(&cfg),
                format!("aicpu_thread_num must be 0 (auto) or in [2, 8], got {bad}")
            );
        }
    }

    #[test]
    fn call_config_swimlane_boundaries() {
        for ok in 0..=4 {
            let cfg = CallConfig {
                enable_chip_swimlane: ok,
                output_prefix: "p".into(),
                ..Default::default()
            };
            assert_eq!(cfg.validate(), Ok(()), "swimlane {ok}");
        }
        let cfg = CallConfig {
            enable_chip_swimlane: 5,
            output_prefix: "p".into(),
            ..Default::default()
        };
        assert_eq!(
            validate_msg(&cfg),
            "enable_chip_swimlane must be in [0, 4], got 5"
        );
    }

    #[test]
    fn call_config_with_ring_and_value_semantics() {
        let base = CallConfig::default();
        let cfg = base
            .clone()
            .with_ring(W, [128, 0, 0, 16])
            .with_ring(D, [0, 0, 0, 100]);
        assert_eq!(cfg.runtime_env.ring_task_window, [128, 0, 0, 16]);
        assert_eq!(cfg.runtime_env.ring_heap, [0; 4]);
        assert_eq!(cfg.runtime_env.ring_dep_pool, [0, 0, 0, 100]);
        assert_ne!(cfg, base);
        assert_eq!(cfg.clone(), cfg);
        assert_eq!(base.clone().with_ring(W, [0; 4]), base);
    }

    #[test]
    fn config_error_display_is_message() {
        let e = ConfigError::new("boom");
        assert_eq!(e.to_string(), "boom");
        assert_eq!(e.message, "boom");
        let _: &dyn std::error::Error = &e;
    }

    // ----------------------------------------------------------- env parsing

    #[test]
    fn parse_scalar_broadcasts() {
        assert_eq!(parse_env_value(W, "64"), Ok([64; 4]));
        assert_eq!(parse_env_value(H, "1048576"), Ok([1 << 20; 4]));
        assert_eq!(parse_env_value(D, "7"), Ok([7; 4]));
        assert_eq!(parse_env_value(W, "+64"), Ok([64; 4]));
    }

    #[test]
    fn parse_four_values() {
        assert_eq!(parse_env_value(W, "4,8,16,32"), Ok([4, 8, 16, 32]));
        assert_eq!(
            parse_env_value(H, "1024,2048,4096,8192"),
            Ok([1024, 2048, 4096, 8192])
        );
        assert_eq!(
            parse_env_value(D, "4,5,6,2147483647"),
            Ok([4, 5, 6, 2_147_483_647])
        );
    }

    #[test]
    fn parse_zeros_fall_through() {
        assert_eq!(parse_env_value(W, "0"), Ok([0; 4]));
        assert_eq!(parse_env_value(H, "0,0,0,0"), Ok([0; 4]));
        assert_eq!(parse_env_value(W, "64,0,32,0"), Ok([64, 0, 32, 0]));
        assert_eq!(parse_env_value(D, "00"), Ok([0; 4]));
    }

    #[test]
    fn parse_whitespace_trimmed() {
        assert_eq!(parse_env_value(W, "  64 "), Ok([64; 4]));
        assert_eq!(parse_env_value(W, " 4 ,8,\t16 , 32\n"), Ok([4, 8, 16, 32]));
        // Whitespace inside a token is not trimmed away.
        assert_eq!(warning(W, "6 4").rule, "must be a non-negative integer");
    }

    #[test]
    fn parse_garbage_negative_empty() {
        for bad in [
            "abc",
            "64k",
            "0x40",
            "1.5",
            "1e3",
            "-1",
            "-0",
            "-64",
            "",
            "   ",
            "+",
            "64,abc,0,0",
            "64,-1,0,0",
            "64,,0,0",
            "4,8,16,",
            ",4,8,16",
        ] {
            let w = warning(W, bad);
            assert_eq!(w.var, "PTO2_RING_TASK_WINDOW");
            assert_eq!(w.value, bad);
            assert_eq!(w.rule, "must be a non-negative integer", "value {bad:?}");
        }
    }

    #[test]
    fn parse_wrong_count() {
        for bad in [
            "64,64",
            "64,64,64",
            "4,8,16,32,64",
            "4,8,16,32,",
            ",",
            "1,x",
            "1,2,3,4,5,6",
        ] {
            let w = warning(H, bad);
            assert_eq!(w.var, "PTO2_RING_HEAP");
            assert_eq!(w.value, bad);
            assert_eq!(
                w.rule, "expected one value or exactly 4 comma-separated values",
                "value {bad:?}"
            );
        }
    }

    #[test]
    fn parse_overflow_is_out_of_range() {
        let too_big = "18446744073709551616"; // u64::MAX + 1
        assert_eq!(
            warning(W, too_big).rule,
            "must be a power of 2 in [4, 1073741824]"
        );
        assert_eq!(
            warning(H, too_big).rule,
            "must be a power of 2 >= 1024 (bytes per ring)"
        );
        assert_eq!(
            warning(D, "4,4,4,99999999999999999999999").rule,
            "must be in [4, 2147483647]"
        );
        // u64::MAX itself parses, then breaks the rule.
        assert_eq!(
            warning(D, "18446744073709551615").rule,
            "must be in [4, 2147483647]"
        );
    }

    #[test]
    fn parse_out_of_range() {
        for bad in ["3", "12", "1073741825", "2147483648", "64,0,12,0"] {
            assert_eq!(
                warning(W, bad).rule,
                "must be a power of 2 in [4, 1073741824]",
                "{bad}"
            );
        }
        assert_eq!(parse_env_value(W, "1073741824"), Ok([1 << 30; 4]));
        for bad in ["1023", "1536", "1024,0,0,1025"] {
            assert_eq!(
                warning(H, bad).rule,
                "must be a power of 2 >= 1024 (bytes per ring)"
            );
        }
        for bad in ["3", "2147483648", "0,0,0,1"] {
            assert_eq!(warning(D, bad).rule, "must be in [4, 2147483647]");
        }
    }

    #[test]
    fn env_warning_display_names_var_value_rule() {
        let w = warning(H, "abc");
        assert_eq!(
            w.to_string(),
            "taskring: PTO2_RING_HEAP=abc ignored: must be a non-negative integer"
        );
        let w = warning(W, "12");
        assert_eq!(
            w.to_string(),
            "taskring: PTO2_RING_TASK_WINDOW=12 ignored: must be a power of 2 in [4, 1073741824]"
        );
        let w = warning(D, "1,2");
        assert_eq!(
            w.to_string(),
            "taskring: PTO2_RING_DEP_POOL=1,2 ignored: expected one value or exactly 4 \
             comma-separated values"
        );
    }

    // --------------------------------------------------------- EnvSnapshot

    #[test]
    fn env_snapshot_from_lookup_and_empty() {
        let snap = EnvSnapshot::from_lookup(|name| match name {
            "PTO2_RING_TASK_WINDOW" => Some("64".to_owned()),
            "PTO2_RING_DEP_POOL" => Some("1,2".to_owned()),
            "PTO2_RING_HEAP" => None,
            other => panic!("unexpected lookup of {other}"),
        });
        assert_eq!(snap, env(Some("64"), None, Some("1,2")));
        assert_eq!(snap.get(W), Some("64"));
        assert_eq!(snap.get(H), None);
        assert_eq!(snap.get(D), Some("1,2"));
        assert_eq!(EnvSnapshot::empty(), env(None, None, None));
    }

    #[test]
    fn from_process_does_not_panic_and_full_config_ignores_env() {
        // Reads whatever the process has; no test here writes the process env.
        let _ = EnvSnapshot::from_process();
        let cfg = RuntimeEnv {
            ring_task_window: [64; 4],
            ring_heap: [4096; 4],
            ring_dep_pool: [100; 4],
        };
        let sizing = RingSizing::resolve_from_process(&cfg).expect("valid config");
        assert_eq!(sizing, RingSizing::uniform(64, 4096, 100).expect("valid"));
        for f in RingField::ALL {
            for ring in 0..4 {
                assert_eq!(sizing.source(f, ring), SizeSource::CallConfig);
            }
        }
        let bad = rt_env(W, 0, 3);
        assert!(RingSizing::resolve_from_process(&bad).is_err());
    }

    // ------------------------------------------------------------ resolution

    #[test]
    fn resolve_nothing_set_gives_defaults() {
        let (s, warnings) =
            RingSizing::resolve(&RuntimeEnv::default(), &EnvSnapshot::empty()).expect("valid");
        assert!(warnings.is_empty());
        assert_eq!(s, RingSizing::default());
        assert_eq!(s.task_window, [16384; 4]);
        assert_eq!(s.heap, [268_435_456; 4]);
        assert_eq!(s.dep_pool, [16384; 4]);
        for f in RingField::ALL {
            for ring in 0..4 {
                assert_eq!(s.source(f, ring), SizeSource::Default);
            }
        }
    }

    #[test]
    fn resolve_precedence_per_resource_per_ring() {
        // Per ring: 0 -> call_config (shadows env), 1 -> default (both 0),
        // 2 -> env, 3 -> call_config.
        let cfg = CallConfig::default()
            .with_ring(W, [128, 0, 0, 16])
            .with_ring(H, [1 << 20, 0, 0, 4096])
            .with_ring(D, [100, 0, 0, 50]);
        let snap = env(Some("64,0,32,0"), Some("2048,0,8192,0"), Some("7,0,9,0"));
        let (s, warnings) = RingSizing::resolve(&cfg.runtime_env, &snap).expect("valid");
        assert!(warnings.is_empty(), "{warnings:?}");

        assert_eq!(s.task_window, [128, DEFAULT_RING_TASK_WINDOW, 32, 16]);
        assert_eq!(s.heap, [1 << 20, DEFAULT_RING_HEAP, 8192, 4096]);
        assert_eq!(s.dep_pool, [100, DEFAULT_RING_DEP_POOL, 9, 50]);
        assert_eq!(s.get(W), s.task_window);
        assert_eq!(s.get(H), s.heap);
        assert_eq!(s.get(D), s.dep_pool);

        let expected = [
            SizeSource::CallConfig,
            SizeSource::Default,
            SizeSource::Env,
            SizeSource::CallConfig,
        ];
        for f in RingField::ALL {
            for (ring, want) in expected.iter().enumerate() {
                assert_eq!(s.source(f, ring), *want, "{f}[{ring}]");
            }
        }
    }

    #[test]
    fn resolve_resources_are_independent() {
        // Window from config only, heap from a scalar env var only, dep pool default.
        let cfg = RuntimeEnv {
            ring_task_window: [0, 256, 0, 0],
            ..Default::default()
        };
        let snap = env(None, Some("65536"), None);
        let (s, warnings) = RingSizing::resolve(&cfg, &snap).expect("valid");
        assert!(warnings.is_empty());
        assert_eq!(s.task_window, [16384, 256, 16384, 16384]);
        assert_eq!(s.heap, [65536; 4]);
        assert_eq!(s.dep_pool, [16384; 4]);
        assert_eq!(s.source(W, 0), SizeSource::Default);
        assert_eq!(s.source(W, 1), SizeSource::CallConfig);
        for ring in 0..4 {
            assert_eq!(s.source(H, ring), SizeSource::Env);
            assert_eq!(s.source(D, ring), SizeSource::Default);
        }
    }

    #[test]
    fn resolve_bad_env_var_ignored_whole_others_apply() {
        let snap = env(Some("64"), Some("1024,abc,0,0"), Some("100,0,0,0"));
        let (s, warnings) = RingSizing::resolve(&RuntimeEnv::default(), &snap).expect("valid");
        assert_eq!(
            warnings,
            vec![EnvWarning {
                var: "PTO2_RING_HEAP",
                value: "1024,abc,0,0".to_owned(),
                rule: "must be a non-negative integer".to_owned(),
            }]
        );
        assert_eq!(s.task_window, [64; 4]);
        assert_eq!(
            s.heap, [DEFAULT_RING_HEAP; 4],
            "valid ring-0 entry must not leak through"
        );
        assert_eq!(s.dep_pool, [100, 16384, 16384, 16384]);
        for ring in 0..4 {
            assert_eq!(s.source(W, ring), SizeSource::Env);
            assert_eq!(s.source(H, ring), SizeSource::Default);
        }
        assert_eq!(s.source(D, 0), SizeSource::Env);
        assert_eq!(s.source(D, 1), SizeSource::Default);
    }

    #[test]
    fn resolve_one_warning_per_bad_var_in_field_order() {
        let snap = env(Some("12"), Some("1,2"), Some("-5"));
        let (s, warnings) = RingSizing::resolve(&RuntimeEnv::default(), &snap).expect("valid");
        assert_eq!(s, RingSizing::default());
        let vars: Vec<_> = warnings.iter().map(|w| w.var).collect();
        assert_eq!(
            vars,
            [
                "PTO2_RING_TASK_WINDOW",
                "PTO2_RING_HEAP",
                "PTO2_RING_DEP_POOL"
            ]
        );
    }

    #[test]
    fn resolve_config_overrides_bad_env_but_still_warns() {
        let cfg = RuntimeEnv {
            ring_heap: [4096; 4],
            ..Default::default()
        };
        let (s, warnings) =
            RingSizing::resolve(&cfg, &env(None, Some("garbage"), None)).expect("valid");
        assert_eq!(s.heap, [4096; 4]);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].var, "PTO2_RING_HEAP");
    }

    #[test]
    fn resolve_validates_config_first() {
        let cfg = RuntimeEnv {
            ring_dep_pool: [0, 0, 3, 0],
            ..Default::default()
        };
        let err = RingSizing::resolve(&cfg, &env(Some("bad"), None, None)).expect_err("invalid");
        assert_eq!(
            err.message,
            "RuntimeEnv: ring_dep_pool[2] must be in [4, 2147483647], got 3"
        );
    }

    // ------------------------------------------------------- RingSizing API

    #[test]
    fn from_values_and_uniform() {
        let s = RingSizing::from_values([4, 8, 16, 32], [1024, 2048, 4096, 8192], [4, 5, 6, 7])
            .expect("valid");
        assert_eq!(s.task_window, [4, 8, 16, 32]);
        assert_eq!(s.heap, [1024, 2048, 4096, 8192]);
        assert_eq!(s.dep_pool, [4, 5, 6, 7]);
        for f in RingField::ALL {
            for ring in 0..4 {
                assert_eq!(s.source(f, ring), SizeSource::CallConfig);
            }
        }
        let u = RingSizing::uniform(64, 4096, 100).expect("valid");
        assert_eq!(u.task_window, [64; 4]);
        assert_eq!(u.heap, [4096; 4]);
        assert_eq!(u.dep_pool, [100; 4]);
    }

    #[test]
    fn from_values_rejects_zero_and_rule_breaks_in_order() {
        let err =
            RingSizing::from_values([16; 4], [1024, 1024, 0, 1024], [4; 4]).expect_err("zero");
        assert_eq!(
            err.message,
            "RingSizing: ring_heap[2] must be a power of 2 >= 1024 (bytes per ring), got 0"
        );
        let err =
            RingSizing::from_values([16, 16, 16, 12], [1024; 4], [4, 3, 4, 4]).expect_err("bad");
        assert_eq!(
            err.message,
            "RingSizing: ring_dep_pool[1] must be in [4, 2147483647], got 3"
        );
        let err = RingSizing::uniform(1 << 31, 1024, 4).expect_err("bad");
        assert_eq!(
            err.message,
            "RingSizing: ring_task_window[0] must be a power of 2 in [4, 1073741824], got 2147483648"
        );
        assert!(RingSizing::uniform(0, 0, 0).is_err());
        assert!(RingSizing::uniform(4, 1024, 4).is_ok());
        assert!(RingSizing::uniform(1 << 30, 1 << 62, MAX_RING_DEP_POOL).is_ok());
    }

    #[test]
    fn key_order() {
        let s = RingSizing::from_values([4, 8, 16, 32], [1024, 2048, 4096, 8192], [5, 6, 7, 9])
            .expect("valid");
        assert_eq!(s.key(), [4, 8, 16, 32, 1024, 2048, 4096, 8192, 5, 6, 7, 9]);
        let d = RingSizing::default().key();
        assert_eq!(&d[0..4], &[DEFAULT_RING_TASK_WINDOW; 4]);
        assert_eq!(&d[4..8], &[DEFAULT_RING_HEAP; 4]);
        assert_eq!(&d[8..12], &[DEFAULT_RING_DEP_POOL; 4]);
    }

    #[test]
    fn display_exact() {
        assert_eq!(
            RingSizing::default().to_string(),
            "Ring buffer sizes: \
             ring0 window=16384 heap=268435456 dep_pool=16384; \
             ring1 window=16384 heap=268435456 dep_pool=16384; \
             ring2 window=16384 heap=268435456 dep_pool=16384; \
             ring3 window=16384 heap=268435456 dep_pool=16384"
        );
        let s = RingSizing::from_values([4, 8, 16, 32], [1024, 2048, 4096, 8192], [5, 6, 7, 9])
            .expect("valid");
        assert_eq!(
            s.to_string(),
            "Ring buffer sizes: ring0 window=4 heap=1024 dep_pool=5; \
             ring1 window=8 heap=2048 dep_pool=6; ring2 window=16 heap=4096 dep_pool=7; \
             ring3 window=32 heap=8192 dep_pool=9"
        );
    }

    #[test]
    fn eq_and_hash_ignore_sources() {
        let explicit = RingSizing::uniform(
            DEFAULT_RING_TASK_WINDOW,
            DEFAULT_RING_HEAP,
            DEFAULT_RING_DEP_POOL,
        )
        .expect("valid");
        let default = RingSizing::default();
        assert_eq!(explicit.source(W, 0), SizeSource::CallConfig);
        assert_eq!(default.source(W, 0), SizeSource::Default);
        assert_eq!(explicit, default);
        assert_eq!(hash_of(&explicit), hash_of(&default));

        // Same values reached through env vars.
        let snap = env(Some("16384"), Some("268435456"), Some("16384"));
        let (via_env, _) = RingSizing::resolve(&RuntimeEnv::default(), &snap).expect("valid");
        assert_eq!(via_env.source(H, 3), SizeSource::Env);
        assert_eq!(via_env, default);

        let set: HashSet<RingSizing> = [explicit, default, via_env].into_iter().collect();
        assert_eq!(set.len(), 1);

        let other = RingSizing::uniform(16384, 268_435_456, 16383).expect("valid");
        assert_ne!(other, default);
        let set: HashSet<RingSizing> = [other, default].into_iter().collect();
        assert_eq!(set.len(), 2);
    }
}
