//! `sizing_command`: the sizing advisor's command (`taskring::dfx::sizing_command`) for
//! `python -m taskring sizing`, so that it and the Rust `taskring sizing` are one
//! implementation with the same output, byte for byte.

use pyo3::prelude::*;

/// Run `taskring sizing <args>`: `(exit status, stdout text, stderr text)`.
#[pyfunction]
pub fn sizing_command(args: Vec<String>) -> (u8, String, String) {
    let o = taskring::dfx::sizing_command(&args);
    (o.status, o.stdout, o.stderr)
}
