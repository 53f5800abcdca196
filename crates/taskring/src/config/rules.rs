//! The per-entry rules of the three ring resources: [`RingField`] (names, env
//! variables, defaults, the rule and its phrase) and the size constants of
//! `docs/api.md` §1.
//!
//! Every other part of `config` (and the Python bindings) asks [`RingField`]
//! whether a value is a valid size and how to name the rule it breaks; no
//! rule is written anywhere else.

use std::fmt;

/// Number of scope-depth rings (ring = `min(scope_depth, 3)`).
pub const RUNTIME_ENV_RING_COUNT: usize = 4;
/// Built-in default task window per ring (in-flight task slots).
pub const DEFAULT_RING_TASK_WINDOW: u64 = 16384;
/// Built-in default task-output heap per ring, in bytes (256 MiB).
pub const DEFAULT_RING_HEAP: u64 = 256 << 20;
/// Built-in default dependency-edge pool entries per ring.
pub const DEFAULT_RING_DEP_POOL: u64 = 16384;
/// Smallest allowed task window.
pub(crate) const MIN_RING_TASK_WINDOW: u64 = 4;
/// Largest allowed task window (`2^30`).
pub(crate) const MAX_RING_TASK_WINDOW: u64 = 1 << 30;
/// Smallest allowed heap per ring, in bytes.
pub(crate) const MIN_RING_HEAP: u64 = 1024;
/// Smallest allowed dependency pool.
pub(crate) const MIN_RING_DEP_POOL: u64 = 4;
/// Largest allowed dependency pool (`INT32_MAX`).
pub(crate) const MAX_RING_DEP_POOL: u64 = i32::MAX as u64;

/// The window rule of `RunConfig` for a power of 2 above [`MAX_RING_TASK_WINDOW`].
const RUN_CONFIG_WINDOW_CAP: &str = "be a power of 2 >= 4 and <= 1073741824";

/// An integer argument as a rule needs to see it, whichever language gave it:
/// Python integers have no upper bound, and a value that is not an integer at
/// all (a bool, a float, a string, a numpy scalar) must break the rule too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntArg {
    /// Not an integer, or a negative one: never a size.
    NotASize,
    /// A non-negative integer below `2^64`.
    U64(u64),
    /// An integer at or above `2^64` (no ring can be that large).
    Huge {
        /// Whether it is a power of 2 (the window's rule names the cap then).
        power_of_two: bool,
    },
}

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

    /// The per-entry rule of `docs/api.md` §1 for a non-zero value:
    /// window a power of 2 in `[4, 2^30]`, heap a power of 2 `>= 1024`,
    /// dep pool in `[4, 2^31 - 1]`.
    ///
    /// `check(0)` is `false`: zero is not a size. Callers that treat `0` as
    /// "unset" (such as [`RuntimeEnv::validate`](super::RuntimeEnv::validate)) skip zeros before checking.
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

    /// The field named `name` (`"ring_task_window"`, `"ring_heap"` or
    /// `"ring_dep_pool"`), the inverse of [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<RingField> {
        RingField::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The name of `RingSizing`'s attribute for this field: `"task_window"`, `"heap"`
    /// or `"dep_pool"` (the field's name without `ring_`).
    pub fn sizing_attr(self) -> &'static str {
        &self.name()["ring_".len()..]
    }

    /// The field named `name` either way: [`name`](Self::name) or
    /// [`sizing_attr`](Self::sizing_attr) (`RingSizing.source` takes both).
    pub fn from_name_or_attr(name: &str) -> Option<RingField> {
        RingField::ALL
            .into_iter()
            .find(|f| f.name() == name || f.sizing_attr() == name)
    }

    /// The rule of the high-level `RunConfig` (`docs/api.md` §1.1) as the phrase
    /// that follows "must": `"be a power of 2 >= 4"`,
    /// `"be a power of 2 >= 1024 (bytes per ring)"` or `"be in [4, INT32_MAX]"`.
    pub fn run_config_rule(self) -> &'static str {
        match self {
            RingField::TaskWindow => "be a power of 2 >= 4",
            RingField::Heap => "be a power of 2 >= 1024 (bytes per ring)",
            RingField::DepPool => "be in [4, INT32_MAX]",
        }
    }

    /// `None` when `v` is a size of this field ([`check`](Self::check));
    /// otherwise the `RunConfig` phrase it breaks: [`run_config_rule`](Self::run_config_rule),
    /// or for a window that is a power of 2 above `2^30`,
    /// `"be a power of 2 >= 4 and <= 1073741824"`. Zero is not a size here.
    pub fn run_config_rule_broken(self, v: IntArg) -> Option<&'static str> {
        match v {
            IntArg::U64(v) if self.check(v) => None,
            IntArg::U64(v)
                if self == RingField::TaskWindow
                    && v.is_power_of_two()
                    && v > MAX_RING_TASK_WINDOW =>
            {
                Some(RUN_CONFIG_WINDOW_CAP)
            }
            IntArg::Huge { power_of_two: true } if self == RingField::TaskWindow => {
                Some(RUN_CONFIG_WINDOW_CAP)
            }
            _ => Some(self.run_config_rule()),
        }
    }

    /// Row of this field in the 3 × 4 layouts (window 0, heap 1, dep pool 2).
    pub(crate) fn index(self) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;

    const W: RingField = RingField::TaskWindow;
    const H: RingField = RingField::Heap;
    const D: RingField = RingField::DepPool;

    // ---------------------------------------------------------------- fields

    #[test]
    fn field_by_name_or_sizing_attr() {
        for f in RingField::ALL {
            assert_eq!(RingField::from_name(f.name()), Some(f));
            assert_eq!(RingField::from_name_or_attr(f.name()), Some(f));
            assert_eq!(RingField::from_name_or_attr(f.sizing_attr()), Some(f));
            assert_eq!(RingField::from_name(f.sizing_attr()), None);
        }
        assert_eq!(RingField::TaskWindow.sizing_attr(), "task_window");
        assert_eq!(RingField::Heap.sizing_attr(), "heap");
        assert_eq!(RingField::DepPool.sizing_attr(), "dep_pool");
        assert_eq!(RingField::from_name_or_attr("window"), None);
    }

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
            assert_eq!(RingField::from_name(f.name()), Some(f));
        }
        assert_eq!(RingField::from_name("ring_window"), None);
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
    fn run_config_rules() {
        let base = |f: RingField| Some(f.run_config_rule());
        let cap = Some("be a power of 2 >= 4 and <= 1073741824");
        for v in [4, 8, 1 << 30] {
            assert_eq!(W.run_config_rule_broken(IntArg::U64(v)), None, "{v}");
        }
        for v in [0, 2, 3, 12, (1 << 30) + 4, u64::MAX] {
            assert_eq!(W.run_config_rule_broken(IntArg::U64(v)), base(W), "{v}");
        }
        assert_eq!(W.run_config_rule_broken(IntArg::U64(1 << 31)), cap);
        assert_eq!(W.run_config_rule_broken(IntArg::U64(1 << 63)), cap);
        assert_eq!(
            W.run_config_rule_broken(IntArg::Huge { power_of_two: true }),
            cap
        );
        assert_eq!(
            W.run_config_rule_broken(IntArg::Huge {
                power_of_two: false
            }),
            base(W)
        );
        assert_eq!(H.run_config_rule_broken(IntArg::U64(1 << 63)), None);
        for v in [
            IntArg::U64(0),
            IntArg::U64(1536),
            IntArg::Huge { power_of_two: true },
        ] {
            assert_eq!(H.run_config_rule_broken(v), base(H), "{v:?}");
        }
        assert_eq!(D.run_config_rule_broken(IntArg::U64(2_147_483_647)), None);
        assert_eq!(
            D.run_config_rule_broken(IntArg::U64(2_147_483_648)),
            base(D)
        );
        for f in RingField::ALL {
            assert_eq!(f.run_config_rule_broken(IntArg::NotASize), base(f));
        }
    }
}
