//! [`ConfigError`]: a configuration that breaks a rule of `docs/api.md` §1, with the
//! broken rule as data ([`ConfigErrorKind`]) and the contract's exact text as
//! its `Display`.
//!
//! Every message of the contract's configuration rules is written here once;
//! the Rust validation (`call.rs`, `sizing.rs`, `run_config.rs`) and the
//! Python bindings build their errors from these kinds.

use super::RingField;

/// Which rule a configuration broke, with the values a user needs to act.
///
/// `Display` is the contract's message text (`docs/api.md` §1.1, §1.2). Where a
/// variant carries `got: String`, it is the offending value as the caller's
/// language prints it (Python's `repr`, or a Rust integer's `Display`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// A diagnostics switch (`enable_*`) is on while `output_prefix` is empty.
    #[error(
        "CallConfig: output_prefix must be set whenever any of enable_chip_swimlane / \
         enable_dep_gen / enable_scope_stats is enabled"
    )]
    OutputPrefixRequired,
    /// A non-zero `RuntimeEnv` entry breaks its field's rule.
    #[error("RuntimeEnv: {field}[{ring}] must be {rule}, got {value}", rule = .field.rule())]
    RuntimeEnvEntry {
        /// The resource.
        field: RingField,
        /// The ring (0..3).
        ring: usize,
        /// The entry.
        value: u64,
    },
    /// A value given to a `RingSizing` constructor breaks its field's rule
    /// (`0` included: a sizing has no unset entries).
    #[error("RingSizing: {field}[{ring}] must be {rule}, got {value}", rule = .field.rule())]
    RingSizingEntry {
        /// The resource.
        field: RingField,
        /// The ring (0..3).
        ring: usize,
        /// The value.
        value: u64,
    },
    /// `aicpu_thread_num` is neither `0` (auto) nor in `[2, 8]`.
    #[error("aicpu_thread_num must be 0 (auto) or in [2, 8], got {got}")]
    AicpuThreadNum {
        /// The value as given.
        got: String,
    },
    /// `CallConfig.enable_chip_swimlane` is above 4.
    #[error("enable_chip_swimlane must be in [0, 4], got {level}")]
    ChipSwimlaneLevel {
        /// The level.
        level: u32,
    },
    /// `RunConfig.enable_chip_swimlane` is neither a bool nor an int in `[0, 4]`.
    #[error("enable_chip_swimlane must be a bool or an int in [0, 4], got {got}")]
    ChipSwimlaneValue {
        /// The value as given.
        got: String,
    },
    /// A value given for `CallConfig.enable_chip_swimlane` is not a bool or an
    /// integer at all (raised as `TypeError` by the Python bindings).
    #[error("enable_chip_swimlane must be a bool or an int in [0, 4]")]
    ChipSwimlaneType,
    /// A scalar `RunConfig` ring value breaks its rule; `rule` is the phrase
    /// after "must" ([`RingField::run_config_rule_broken`]).
    #[error("{field} must {rule}, or 'auto', got {got}")]
    RunConfigRing {
        /// The resource.
        field: RingField,
        /// The broken rule, e.g. `"be a power of 2 >= 4"`.
        rule: &'static str,
        /// The value as given.
        got: String,
    },
    /// An entry of a `RunConfig` ring list breaks its rule (zero entries pass).
    #[error("{field} entries must {rule}, or 'auto' (or 0 to keep default), got {got}")]
    RunConfigRingEntry {
        /// The resource.
        field: RingField,
        /// The broken rule, e.g. `"be in [4, INT32_MAX]"`.
        rule: &'static str,
        /// The entry as given.
        got: String,
    },
    /// A `RunConfig` ring list does not have one entry per ring.
    #[error("{field} must have exactly 4 entries (one per scope-depth ring), got {len}")]
    RunConfigRingLength {
        /// The resource.
        field: RingField,
        /// The list's length.
        len: usize,
    },
    /// A value assigned to a `RuntimeEnv` field is neither an integer nor a
    /// list of integers.
    #[error("RuntimeEnv.{field} must be an int or 'auto' (broadcast), or a list of 4 of them")]
    RuntimeEnvValue {
        /// The resource.
        field: RingField,
    },
    /// A list assigned to a `RuntimeEnv` field does not have four entries.
    #[error("RuntimeEnv.{field} list must contain exactly 4 entries")]
    RuntimeEnvLength {
        /// The resource.
        field: RingField,
    },
}

/// A configuration validation error.
///
/// `Display` is exactly the contract's message text, without any prefix (the
/// Python layer raises it as `ValueError(message)`); [`kind`](Self::kind) is
/// the broken rule as data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    kind: ConfigErrorKind,
    /// The full message text (the kind's `Display`), for callers that hand the
    /// text on as a string.
    pub message: String,
}

impl ConfigError {
    /// The broken rule.
    pub fn kind(&self) -> &ConfigErrorKind {
        &self.kind
    }
}

impl From<ConfigErrorKind> for ConfigError {
    fn from(kind: ConfigErrorKind) -> Self {
        let message = kind.to_string();
        ConfigError { kind, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_error_display_is_message() {
        let e = ConfigError::from(ConfigErrorKind::RuntimeEnvEntry {
            field: RingField::DepPool,
            ring: 3,
            value: 3,
        });
        let text = "RuntimeEnv: ring_dep_pool[3] must be in [4, 2147483647], got 3";
        assert_eq!(e.to_string(), text);
        assert_eq!(e.message, text);
        assert!(matches!(
            e.kind(),
            ConfigErrorKind::RuntimeEnvEntry { ring: 3, .. }
        ));
        let _: &dyn std::error::Error = &e;
    }

    #[test]
    fn run_config_and_binding_texts() {
        let f = RingField::TaskWindow;
        let text = |k: ConfigErrorKind| ConfigError::from(k).message;
        assert_eq!(
            text(ConfigErrorKind::RunConfigRing {
                field: f,
                rule: "be a power of 2 >= 4",
                got: "3".into()
            }),
            "ring_task_window must be a power of 2 >= 4, or 'auto', got 3"
        );
        assert_eq!(
            text(ConfigErrorKind::RunConfigRingEntry {
                field: RingField::DepPool,
                rule: "be in [4, INT32_MAX]",
                got: "True".into()
            }),
            "ring_dep_pool entries must be in [4, INT32_MAX], or 'auto' (or 0 to keep default), got True"
        );
        assert_eq!(
            text(ConfigErrorKind::RunConfigRingLength {
                field: RingField::Heap,
                len: 3
            }),
            "ring_heap must have exactly 4 entries (one per scope-depth ring), got 3"
        );
        assert_eq!(
            text(ConfigErrorKind::RuntimeEnvValue { field: f }),
            "RuntimeEnv.ring_task_window must be an int or 'auto' (broadcast), or a list of 4 of them"
        );
        assert_eq!(
            text(ConfigErrorKind::RuntimeEnvLength { field: f }),
            "RuntimeEnv.ring_task_window list must contain exactly 4 entries"
        );
        assert_eq!(
            text(ConfigErrorKind::ChipSwimlaneValue { got: "'x'".into() }),
            "enable_chip_swimlane must be a bool or an int in [0, 4], got 'x'"
        );
        assert_eq!(
            text(ConfigErrorKind::ChipSwimlaneType),
            "enable_chip_swimlane must be a bool or an int in [0, 4]"
        );
    }
}
