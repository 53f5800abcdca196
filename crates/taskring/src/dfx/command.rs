//! `taskring sizing <scope_stats.jsonl> [--headroom H]`: the command line of the advisor.

use super::advisor::{advise, check_headroom, DEFAULT_HEADROOM};
use super::scope_stats::read_peaks;

/// What a command prints and its exit status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutput {
    pub status: u8,
    pub stdout: String,
    pub stderr: String,
}

/// Usage of the sizing command.
pub(crate) const SIZING_USAGE: &str = "usage: taskring sizing <scope_stats.jsonl> [--headroom H]
  Suggested ring sizes (runtime_env and PTO2_RING_* lines) from a run's scope stats
  (CallConfig.enable_scope_stats). H: a factor >= 1 on the recorded peaks (default 1.25).";

/// `taskring sizing <scope_stats.jsonl> [--headroom H]` — the one implementation behind
/// the Rust `taskring sizing` and `python -m taskring sizing` (through the native
/// module): same arguments, same output, same exit status (0; 2 for bad arguments or an
/// unreadable file).
pub fn sizing_command(args: &[String]) -> CommandOutput {
    let usage_err = |msg: String| CommandOutput {
        status: 2,
        stdout: String::new(),
        stderr: format!("taskring sizing: {msg}\n{SIZING_USAGE}\n"),
    };
    let mut file: Option<&str> = None;
    let mut headroom = DEFAULT_HEADROOM;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-h" || a == "--help" {
            return CommandOutput {
                status: 0,
                stdout: format!("{SIZING_USAGE}\n"),
                stderr: String::new(),
            };
        }
        let value = if a == "--headroom" {
            i += 1;
            match args.get(i) {
                Some(v) => Some(v.as_str()),
                None => return usage_err("--headroom needs a value".into()),
            }
        } else {
            a.strip_prefix("--headroom=")
        };
        if let Some(v) = value {
            headroom = match check_headroom(v) {
                Ok(h) => h,
                Err(e) => return usage_err(e),
            };
        } else if a.starts_with('-') && a.len() > 1 {
            return usage_err(format!("unknown option '{a}'"));
        } else if file.replace(a).is_some() {
            return usage_err(format!("one scope-stats file only (got '{}' too)", a));
        }
        i += 1;
    }
    let Some(file) = file else {
        return usage_err("the scope-stats file is missing".into());
    };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            return CommandOutput {
                status: 2,
                stdout: String::new(),
                stderr: format!("taskring sizing: cannot read {file}: {e}\n"),
            }
        }
    };
    match sizing_report(&text, headroom) {
        Ok(out) => CommandOutput {
            status: 0,
            stdout: out,
            stderr: String::new(),
        },
        Err(e) => CommandOutput {
            status: 2,
            stdout: String::new(),
            stderr: format!("taskring sizing: {file}: {e}\n"),
        },
    }
}

/// The sizing command's report for a scope-stats file's text
/// ([`SizingAdvice::report`](super::SizingAdvice::report)).
pub fn sizing_report(text: &str, headroom: f64) -> Result<String, String> {
    Ok(advise(&read_peaks(text)?, headroom).report())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_must_be_a_finite_factor_of_at_least_one() {
        for bad in [
            "nan", "NaN", "-1", "0", "0.5", "inf", "-inf", "", "x", "1e400",
        ] {
            let e = check_headroom(bad).unwrap_err();
            assert_eq!(e, format!("--headroom must be a finite number >= 1 (a factor on the recorded peaks), got '{bad}'"));
        }
        assert_eq!(check_headroom("1"), Ok(1.0));
        assert_eq!(check_headroom("1.25"), Ok(1.25));
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let o = sizing_command(&args(&["x.jsonl", "--headroom", "nan"]));
        assert_eq!(o.status, 2);
        assert!(o.stdout.is_empty());
        assert!(
            o.stderr
                .starts_with("taskring sizing: --headroom must be a finite number >= 1"),
            "{}",
            o.stderr
        );
        for a in [
            &["x.jsonl", "--headroom"][..],
            &["--headroom=0", "x.jsonl"],
            &[],
            &["a", "b"],
            &["x.jsonl", "--bogus"],
        ] {
            let o = sizing_command(&args(a));
            assert_eq!(o.status, 2, "{a:?}");
            assert!(
                o.stderr.starts_with("taskring sizing: "),
                "{a:?}: {}",
                o.stderr
            );
        }
        let o = sizing_command(&args(&["/nonexistent/scope_stats.jsonl"]));
        assert_eq!(o.status, 2);
        assert!(
            o.stderr
                .starts_with("taskring sizing: cannot read /nonexistent/scope_stats.jsonl: "),
            "{}",
            o.stderr
        );
        assert_eq!(sizing_command(&args(&["-h"])).status, 0);
    }
}
