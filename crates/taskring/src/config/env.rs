//! The `PTO2_RING_TASK_WINDOW` / `PTO2_RING_HEAP` / `PTO2_RING_DEP_POOL`
//! environment variables: a snapshot of them ([`EnvSnapshot`]), the parser of
//! one value ([`parse_env_value`]) and the warning for a value that is ignored
//! as a whole ([`EnvWarning`]). Only [`EnvSnapshot::from_process`] reads the
//! process environment; nothing here writes or caches it.

use std::fmt;
use std::num::IntErrorKind;
use std::sync::Mutex;

use super::{RingField, RUNTIME_ENV_RING_COUNT};

/// Warning rule for a token that is neither a non-negative decimal integer nor `auto`.
const RULE_NON_NEGATIVE_INTEGER: &str = "must be a non-negative integer or auto";
/// Warning rule for an env var with neither one nor four values.
const RULE_VALUE_COUNT: &str = "expected one value or exactly 4 comma-separated values";

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
    ///
    /// One pass over the C library's `environ` for the shared prefix `PTO2_RING_`
    /// (every run reads it, at every level: three `getenv` scans under std's lock
    /// cost ~120 ns with 60 variables set, more under `mpirun`). Like `getenv`, the
    /// first entry of a name wins.
    pub fn from_process() -> Self {
        let mut snap = EnvSnapshot::default();
        for_each_prefixed(PREFIX, |name, value| {
            let Some(f) = RingField::ALL
                .into_iter()
                .find(|f| f.env_var().as_bytes() == name)
            else {
                return;
            };
            let slot = match f {
                RingField::TaskWindow => &mut snap.task_window,
                RingField::Heap => &mut snap.heap,
                RingField::DepPool => &mut snap.dep_pool,
            };
            if slot.is_none() {
                *slot = Some(String::from_utf8_lossy(value).into_owned());
            }
        });
        snap
    }

    /// Reads the three variables through `f` (an injected environment, for
    /// tests and tools); `f` receives the variable name.
    pub fn from_lookup(f: impl Fn(&str) -> Option<String>) -> Self {
        match Self::try_from_lookup(|name| Ok::<_, std::convert::Infallible>(f(name))) {
            Ok(snapshot) => snapshot,
            Err(never) => match never {},
        }
    }

    /// [`from_lookup`](Self::from_lookup) through a lookup that can fail (a
    /// Python mapping); the first error is returned.
    pub fn try_from_lookup<E>(
        mut f: impl FnMut(&str) -> Result<Option<String>, E>,
    ) -> Result<Self, E> {
        Ok(EnvSnapshot {
            task_window: f(RingField::TaskWindow.env_var())?,
            heap: f(RingField::Heap.env_var())?,
            dep_pool: f(RingField::DepPool.env_var())?,
        })
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

/// The prefix all three variables share.
const PREFIX: &[u8] = b"PTO2_RING_";

/// Calls `f(name, value)` for each entry of the process environment whose name starts
/// with `prefix` (which holds no `=` or NUL), in `environ`'s order.
fn for_each_prefixed(prefix: &[u8], mut f: impl FnMut(&[u8], &[u8])) {
    extern "C" {
        static environ: *const *const std::ffi::c_char;
    }
    // safety: `environ` is the C library's NULL-terminated array of NUL-terminated
    // `NAME=value` strings, read here as `getenv` reads it. An entry is compared
    // byte by byte and left at its first mismatch (its NUL at the latest), so only
    // matching entries are measured. (std's own reads also take a lock that only
    // `std::env::set_var` honours; a write through the C library, Python's
    // `os.environ` for one, never takes it either.)
    unsafe {
        let mut p = environ;
        if p.is_null() {
            return;
        }
        while !(*p).is_null() {
            let e = (*p).cast::<u8>();
            if prefix.iter().enumerate().all(|(i, &b)| *e.add(i) == b) {
                let entry = std::ffi::CStr::from_ptr(*p).to_bytes();
                let eq = entry.iter().position(|&b| b == b'=').unwrap_or(entry.len());
                f(&entry[..eq], entry.get(eq + 1..).unwrap_or(&[]));
            }
            p = p.add(1);
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
    /// The broken rule, e.g. `"must be a non-negative integer or auto"`.
    pub rule: String,
}

impl EnvWarning {
    /// Prints the warning on stderr unless this process already printed one for the
    /// same variable and value (a bad variable is reported once, not at every
    /// dispatch; a new bad value again).
    pub(crate) fn print_once(&self) {
        static SEEN: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());
        let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !seen
            .iter()
            .any(|(var, value)| *var == self.var && *value == self.value)
        {
            seen.push((self.var, self.value.clone()));
            eprintln!("{self}");
        }
    }
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
        if crate::config::RuntimeEnv::is_auto_word(token) {
            *slot = crate::config::RuntimeEnv::AUTO;
            continue;
        }
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

#[cfg(test)]
pub(in crate::config) mod tests {
    use super::*;

    const W: RingField = RingField::TaskWindow;
    const H: RingField = RingField::Heap;
    const D: RingField = RingField::DepPool;

    pub(in crate::config) fn env(
        window: Option<&str>,
        heap: Option<&str>,
        dep: Option<&str>,
    ) -> EnvSnapshot {
        EnvSnapshot {
            task_window: window.map(str::to_owned),
            heap: heap.map(str::to_owned),
            dep_pool: dep.map(str::to_owned),
        }
    }

    fn warning(f: RingField, value: &str) -> EnvWarning {
        match parse_env_value(f, value) {
            Ok(v) => panic!("expected {value:?} to be rejected, got {v:?}"),
            Err(w) => w,
        }
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
        assert_eq!(
            warning(W, "6 4").rule,
            "must be a non-negative integer or auto"
        );
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
            assert_eq!(
                w.rule, "must be a non-negative integer or auto",
                "value {bad:?}"
            );
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
            "taskring: PTO2_RING_HEAP=abc ignored: must be a non-negative integer or auto"
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
        let failed = EnvSnapshot::try_from_lookup(|name| match name {
            "PTO2_RING_HEAP" => Err(name.to_owned()),
            _ => Ok(Some("4".to_owned())),
        });
        assert_eq!(failed, Err("PTO2_RING_HEAP".to_owned()));
    }
}
