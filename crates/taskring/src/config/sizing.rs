//! The resolved ring sizes of one dispatch: [`RingSizing`] (the precedence
//! per resource and per ring, [`RingSizing::key`] for the arena cache) and
//! where each value came from ([`SizeSource`]).

use std::fmt;
use std::hash::{Hash, Hasher};

use super::{
    parse_env_value, ConfigError, ConfigErrorKind, EnvSnapshot, EnvWarning, RingField, RuntimeEnv,
    DEFAULT_RING_DEP_POOL, DEFAULT_RING_HEAP, DEFAULT_RING_TASK_WINDOW, RUNTIME_ENV_RING_COUNT,
};

/// Where a resolved ring size came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SizeSource {
    /// A non-zero `CallConfig.runtime_env` entry (or an explicit constructor value).
    CallConfig = 0,
    /// A non-zero entry of the field's `PTO2_RING_*` environment variable.
    Env = 1,
    /// The built-in default.
    Default = 2,
    /// `"auto"` (`RuntimeEnv::AUTO`, from the config or the env var): the chip sizes it
    /// to the program's measured need.
    Auto = 3,
}

impl SizeSource {
    /// `"call_config"`, `"env"`, `"default"` or `"auto"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SizeSource::CallConfig => "call_config",
            SizeSource::Env => "env",
            SizeSource::Default => "default",
            SizeSource::Auto => "auto",
        }
    }

    /// All sources, in the order of their codes (see [`code`](Self::code)).
    const BY_CODE: [SizeSource; 4] = [
        SizeSource::CallConfig,
        SizeSource::Env,
        SizeSource::Default,
        SizeSource::Auto,
    ];

    /// The source's code for crossing a process boundary: 0 call_config, 1 env,
    /// 2 default, 3 auto.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The source of `code` ([`code`](Self::code)); an unknown code is
    /// [`SizeSource::CallConfig`] (an explicit value).
    pub(crate) fn from_code(code: u8) -> SizeSource {
        Self::BY_CODE
            .get(usize::from(code))
            .copied()
            .unwrap_or(SizeSource::CallConfig)
    }
}

impl fmt::Display for SizeSource {
    /// Writes [`SizeSource::as_str`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
///
/// ```
/// use taskring::{RingField, RingSizing, RuntimeEnv, SizeSource};
///
/// // Explicit values on every ring (as a benchmark or a prewarm list would give them).
/// let small = RingSizing::uniform(64, 64 << 10, 128).unwrap();
/// assert_eq!(small.task_window, [64; 4]);
/// assert_eq!(small.source(RingField::Heap, 0), SizeSource::CallConfig);
///
/// // A dispatch's sizing: its `runtime_env` over the process's `PTO2_RING_*` variables.
/// let mut env = RuntimeEnv::default();
/// env.ring_task_window = [64; 4];
/// env.ring_heap = [64 << 10; 4];
/// env.ring_dep_pool = [128; 4];
/// let resolved = RingSizing::resolve_from_process(&env).unwrap();
/// assert_eq!(resolved, small); // equal values are the same sizing (same arena)
/// assert_eq!(resolved.key(), small.key());
///
/// // A value that breaks its rule is refused.
/// assert!(RingSizing::uniform(3, 64 << 10, 128).is_err());
/// ```
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
    /// Applies the precedence of `docs/api.md` §1, independently for every resource
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
                // "auto" holds the default until the chip sizes it (`is_auto`).
                let (value, source) = if from_cfg[ring] == RuntimeEnv::AUTO
                    || (from_cfg[ring] == 0 && from_env[ring] == RuntimeEnv::AUTO)
                {
                    (f.default_value(), SizeSource::Auto)
                } else if from_cfg[ring] != 0 {
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
        for w in &warnings {
            w.print_once();
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
        sizing.validate()?;
        Ok(sizing)
    }

    /// Check every entry against its field's rule, with the error of
    /// [`from_values`](Self::from_values). A sizing built by this type's constructors
    /// passes; one whose public fields were changed since may not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for ring in 0..RUNTIME_ENV_RING_COUNT {
            for f in RingField::ALL {
                let v = self.get(f)[ring];
                if !f.check(v) {
                    return Err(ConfigErrorKind::RingSizingEntry {
                        field: f,
                        ring,
                        value: v,
                    }
                    .into());
                }
            }
        }
        Ok(())
    }

    /// Does any entry come from `"auto"`?
    pub fn is_auto(&self) -> bool {
        self.sources
            .iter()
            .flatten()
            .any(|&s| s == SizeSource::Auto)
    }

    /// Set the value of an entry (the chip sizing an `"auto"` entry; `v` must satisfy
    /// the field's rule). Its source stays as it is.
    pub(crate) fn set_value(&mut self, f: RingField, ring: usize, v: u64) {
        debug_assert!(f.check(v));
        self.values_mut(f)[ring] = v;
    }

    /// Sources as 12 codes (0 call_config, 1 env, 2 default, 3 auto), field-major — the order
    /// of [`RingSizing::key`]; for carrying a sizing across a process boundary.
    pub fn source_codes(&self) -> [u8; 12] {
        let mut out = [0u8; 12];
        for (code, source) in out.iter_mut().zip(self.sources.iter().flatten()) {
            *code = source.code();
        }
        out
    }

    /// Rebuild a sizing from its key and [`RingSizing::source_codes`] (validated).
    pub fn from_key_and_sources(
        key: [u64; 12],
        codes: [u8; 12],
    ) -> Result<RingSizing, ConfigError> {
        let mut s = RingSizing::from_values(
            [key[0], key[1], key[2], key[3]],
            [key[4], key[5], key[6], key[7]],
            [key[8], key[9], key[10], key[11]],
        )?;
        for (source, code) in s.sources.iter_mut().flatten().zip(codes) {
            *source = SizeSource::from_code(code);
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
    use crate::config::call::tests::rt_env;
    use crate::config::env::tests::env;
    use crate::config::{CallConfig, MAX_RING_DEP_POOL};
    use std::collections::hash_map::DefaultHasher;
    use std::collections::HashSet;

    const W: RingField = RingField::TaskWindow;
    const H: RingField = RingField::Heap;
    const D: RingField = RingField::DepPool;

    fn hash_of<T: Hash>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn size_source_strings() {
        assert_eq!(SizeSource::CallConfig.as_str(), "call_config");
        assert_eq!(SizeSource::Env.as_str(), "env");
        assert_eq!(SizeSource::Default.as_str(), "default");
        assert_eq!(SizeSource::Env.to_string(), "env");
        for (code, source) in SizeSource::BY_CODE.into_iter().enumerate() {
            assert_eq!(source.code(), code as u8);
            assert_eq!(SizeSource::from_code(code as u8), source);
        }
        assert_eq!(SizeSource::from_code(7), SizeSource::CallConfig);
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
                rule: "must be a non-negative integer or auto".to_owned(),
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
