//! The field rules of the high-level `RunConfig` (`docs/api.md` §1.1): ring values
//! (an int, or a list of exactly 4 ints with `0` = keep the default),
//! `aicpu_thread_num` and `enable_chip_swimlane`.
//!
//! The Python dataclass `taskring.RunConfig` validates through these (via
//! `taskring._native`): [`RingField::check_run_config`] and
//! [`RingField::check_run_config_list`] for the ring fields,
//! [`CallConfig::check_run_config_thread_num`] and
//! [`CallConfig::check_run_config_swimlane`], so each rule is written once, in
//! [`RingField`], and each message once, in [`ConfigErrorKind`]. Values are given as [`IntArg`]
//! and printed, only when a rule is broken, by the caller's `got` closure
//! (Python's `repr`).

use super::{CallConfig, ConfigError, ConfigErrorKind, IntArg, RingField, RUNTIME_ENV_RING_COUNT};

impl RingField {
    /// Checks one scalar `RunConfig` value of this field (`0` is rejected: unset is
    /// `None`, which the caller does not pass here).
    pub fn check_run_config(
        self,
        v: IntArg,
        got: impl FnOnce() -> String,
    ) -> Result<(), ConfigError> {
        match self.run_config_rule_broken(v) {
            None => Ok(()),
            Some(rule) => Err(ConfigErrorKind::RunConfigRing {
                field: self,
                rule,
                got: got(),
            }
            .into()),
        }
    }

    /// Checks a `RunConfig` list of this field: first its length (one entry per ring),
    /// then its entries in order, `0` passing; `got(i)` prints entry `i`.
    pub fn check_run_config_list(
        self,
        entries: &[IntArg],
        got: impl Fn(usize) -> String,
    ) -> Result<(), ConfigError> {
        if entries.len() != RUNTIME_ENV_RING_COUNT {
            return Err(ConfigErrorKind::RunConfigRingLength {
                field: self,
                len: entries.len(),
            }
            .into());
        }
        for (i, &v) in entries.iter().enumerate() {
            if v == IntArg::U64(0) {
                continue;
            }
            if let Some(rule) = self.run_config_rule_broken(v) {
                return Err(ConfigErrorKind::RunConfigRingEntry {
                    field: self,
                    rule,
                    got: got(i),
                }
                .into());
            }
        }
        Ok(())
    }
}

impl CallConfig {
    /// Checks `RunConfig.aicpu_thread_num`: `0` (auto) or in `[2, 8]`.
    pub fn check_run_config_thread_num(
        v: IntArg,
        got: impl FnOnce() -> String,
    ) -> Result<(), ConfigError> {
        match v {
            IntArg::U64(0 | 2..=8) => Ok(()),
            _ => Err(ConfigErrorKind::AicpuThreadNum { got: got() }.into()),
        }
    }

    /// Checks a non-bool `RunConfig.enable_chip_swimlane`: an int in `[0, 4]` (a bool
    /// is always valid; the caller does not pass it here).
    pub fn check_run_config_swimlane(
        v: IntArg,
        got: impl FnOnce() -> String,
    ) -> Result<(), ConfigError> {
        match v {
            IntArg::U64(0..=4) => Ok(()),
            _ => Err(ConfigErrorKind::ChipSwimlaneValue { got: got() }.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: RingField = RingField::TaskWindow;
    const H: RingField = RingField::Heap;
    const D: RingField = RingField::DepPool;

    fn msg(r: Result<(), ConfigError>) -> String {
        r.expect_err("must fail").message
    }

    #[test]
    fn scalar_messages() {
        let got = || "12".to_owned();
        assert_eq!(W.check_run_config(IntArg::U64(16), got), Ok(()));
        assert_eq!(
            msg(W.check_run_config(IntArg::U64(12), got)),
            "ring_task_window must be a power of 2 >= 4, or 'auto', got 12"
        );
        assert_eq!(
            msg(W.check_run_config( IntArg::U64(1 << 31), || {
                "2147483648".into()
            })),
            "ring_task_window must be a power of 2 >= 4 and <= 1073741824, or 'auto', got 2147483648"
        );
        assert_eq!(
            msg(H.check_run_config(IntArg::NotASize, || "1024.0".into())),
            "ring_heap must be a power of 2 >= 1024 (bytes per ring), or 'auto', got 1024.0"
        );
        assert_eq!(
            msg(D.check_run_config(IntArg::U64(0), || "0".into())),
            "ring_dep_pool must be in [4, INT32_MAX], or 'auto', got 0"
        );
    }

    #[test]
    fn list_length_then_first_bad_entry() {
        let reprs = ["0", "1000", "3", "True"];
        let got = |i: usize| reprs[i].to_owned();
        let entries = [
            IntArg::U64(0),
            IntArg::U64(1000),
            IntArg::U64(3),
            IntArg::NotASize,
        ];
        assert_eq!(
            msg(H.check_run_config_list(&entries[..3], got)),
            "ring_heap must have exactly 4 entries (one per scope-depth ring), got 3"
        );
        assert_eq!(
            msg(H.check_run_config_list(&entries, got)),
            "ring_heap entries must be a power of 2 >= 1024 (bytes per ring), or 'auto' (or 0 \
             to keep default), got 1000"
        );
        assert_eq!(
            msg(D.check_run_config_list( &entries, got)),
            "ring_dep_pool entries must be in [4, INT32_MAX], or 'auto' (or 0 to keep default), got 3"
        );
        assert_eq!(W.check_run_config_list(&[IntArg::U64(0); 4], got), Ok(()));
    }

    #[test]
    fn thread_num_and_swimlane() {
        for ok in [0, 2, 8] {
            assert_eq!(
                CallConfig::check_run_config_thread_num(IntArg::U64(ok), String::new),
                Ok(())
            );
        }
        assert_eq!(
            msg(CallConfig::check_run_config_thread_num(
                IntArg::U64(1),
                || "1".into()
            )),
            "aicpu_thread_num must be 0 (auto) or in [2, 8], got 1"
        );
        assert!(CallConfig::check_run_config_thread_num(IntArg::NotASize, String::new).is_err());
        assert_eq!(
            CallConfig::check_run_config_swimlane(IntArg::U64(4), String::new),
            Ok(())
        );
        assert_eq!(
            msg(CallConfig::check_run_config_swimlane(
                IntArg::U64(5),
                || "5".into()
            )),
            "enable_chip_swimlane must be a bool or an int in [0, 4], got 5"
        );
    }
}
