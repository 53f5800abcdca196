//! The low-level per-call configuration: [`RuntimeEnv`] (3 resources × 4
//! rings, `0` = unset) and [`CallConfig`], with their validation in the
//! contract's order and texts (`docs/api.md` §1.2).

use super::{ConfigError, ConfigErrorKind, RingField, RUNTIME_ENV_RING_COUNT};

/// Per-call ring sizes: 3 resources × 4 rings, `0` = unset for that ring
/// (fall through to the env var, then to the built-in default).
///
/// ```
/// use taskring::{RingField, RuntimeEnv};
///
/// let mut env = RuntimeEnv::default();
/// assert!(env.is_unset());
/// env.ring_heap = [1 << 20, 0, 0, 0]; // ring 0 only; rings 1..3 fall through
/// env.set_all(RingField::DepPool, 1024); // one value for every ring
/// assert_eq!(env.get(RingField::DepPool), [1024; 4]);
/// env.validate().unwrap();
///
/// env.ring_task_window[2] = 100; // not a power of 2
/// assert_eq!(
///     env.validate().unwrap_err().to_string(),
///     "RuntimeEnv: ring_task_window[2] must be a power of 2 in [4, 1073741824], got 100"
/// );
/// ```
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
    /// The entry meaning "size this resource to the program's measured need"
    /// (`"auto"` in `RunConfig` and `PTO2_RING_*`): the chip learns the need on the
    /// first dispatch of a program with given arguments and sizes later ones to it.
    pub const AUTO: u64 = u64::MAX;

    /// Does `s` spell [`AUTO`](Self::AUTO)? The one rule wherever a ring entry may be a
    /// string (`RunConfig`, `RuntimeEnv`, `CallConfig.derive`, `PTO2_RING_*`): the four
    /// letters `auto` in any case, whitespace around them ignored (as around the numbers
    /// of `PTO2_RING_*`).
    pub fn is_auto_word(s: &str) -> bool {
        s.trim().eq_ignore_ascii_case("auto")
    }

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
                if v != 0 && v != Self::AUTO && !f.check(v) {
                    return Err(ConfigErrorKind::RuntimeEnvEntry {
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
}

/// Low-level per-call configuration (Simpler-style `CallConfig`).
///
/// Every dispatch carries one; its [`runtime_env`](Self::runtime_env) sizes that
/// dispatch's rings (see [`RingSizing`](crate::RingSizing) for the precedence).
///
/// ```
/// use taskring::{CallConfig, RingField};
///
/// let mut config = CallConfig::default().with_ring(RingField::TaskWindow, [256, 64, 0, 0]);
/// config.runtime_env.ring_heap[0] = 16 << 20;
/// config.validate().unwrap();
///
/// // Diagnostics need a directory to write to.
/// config.enable_scope_stats = true;
/// assert!(config.validate().is_err());
/// config.output_prefix = "out".into();
/// config.validate().unwrap();
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct CallConfig {
    /// Scheduler thread count: `0` = auto, else in `[2, 8]`. Validated and carried to
    /// the chips for compatibility with upstream configs, but it sizes nothing in this
    /// build: every core does its own scheduling (the core count is
    /// `ChipOptions::cores`; see `docs/engine.md`).
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
            return Err(ConfigErrorKind::OutputPrefixRequired.into());
        }
        self.runtime_env.validate()?;
        let n = self.aicpu_thread_num;
        if n != 0 && !(2..=8).contains(&n) {
            return Err(ConfigErrorKind::AicpuThreadNum { got: n.to_string() }.into());
        }
        let lane = self.enable_chip_swimlane;
        if lane > 4 {
            return Err(ConfigErrorKind::ChipSwimlaneLevel { level: lane }.into());
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

#[cfg(test)]
pub(in crate::config) mod tests {
    use super::*;

    const W: RingField = RingField::TaskWindow;
    const H: RingField = RingField::Heap;
    const D: RingField = RingField::DepPool;

    fn validate_msg(cfg: &CallConfig) -> String {
        match cfg.validate() {
            Ok(()) => panic!("expected a validation error for {cfg:?}"),
            Err(e) => e.to_string(),
        }
    }

    pub(in crate::config) fn rt_env(f: RingField, ring: usize, v: u64) -> RuntimeEnv {
        let mut e = RuntimeEnv::default();
        e.get_mut(f)[ring] = v;
        e
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
    fn auto_is_spelled_one_way_everywhere() {
        for yes in ["auto", "AUTO", "Auto", " auto", "auto ", "\tAuTo\n"] {
            assert!(RuntimeEnv::is_auto_word(yes), "{yes:?}");
            // PTO2_RING_* takes the same spellings, alone and as an entry.
            let v = format!("0,{yes},0,0");
            assert_eq!(
                crate::config::parse_env_value(RingField::Heap, yes),
                Ok([RuntimeEnv::AUTO; 4]),
                "{yes:?}"
            );
            assert_eq!(
                crate::config::parse_env_value(RingField::Heap, &v),
                Ok([0, RuntimeEnv::AUTO, 0, 0]),
                "{v:?}"
            );
        }
        for no in ["autox", "au to", "", "auto auto", "0auto", "automatic"] {
            assert!(!RuntimeEnv::is_auto_word(no), "{no:?}");
            assert!(
                crate::config::parse_env_value(RingField::Heap, no).is_err(),
                "{no:?}"
            );
        }
    }

    #[test]
    fn runtime_env_auto_passes_everywhere() {
        for f in [W, H, D] {
            for ring in 0..4 {
                assert_eq!(rt_env(f, ring, RuntimeEnv::AUTO).validate(), Ok(()));
            }
        }
    }

    #[test]
    fn runtime_env_window_messages() {
        for ring in 0..4 {
            for ok in [4, 8, 1 << 30] {
                assert_eq!(rt_env(W, ring, ok).validate(), Ok(()), "window {ok}");
            }
            for bad in [1u64, 3, 12, (1 << 30) + 4, 1 << 31, u64::MAX - 1] {
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
            for bad in [1u64, 512, 1023, 1025, 1536, u64::MAX - 1] {
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
            for bad in [1u64, 3, 2_147_483_648, u64::MAX - 1] {
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
}
