//! The layering of `docs/architecture.md`, checked on the source: a module may use the
//! modules of its own layer and of the layers below it, never one above.
//!
//! ```text
//! cluster → node → nextlevel → replay → chip → arena → engine → {kernel, dfx, sync}
//!   → {config, tensor, mem}
//! ```
//!
//! Every `crate::<module>` path outside a file's unit tests (`#[cfg(test)] mod tests`,
//! which may build fixtures from anywhere) and outside comments counts, grouped imports
//! (`use crate::{a, b::c}`) included.

use std::path::{Path, PathBuf};

/// Layer of each top-level module: 0 is the top.
const LAYERS: &[(&str, u32)] = &[
    ("cluster", 0),
    ("node", 1),
    ("nextlevel", 2),
    ("replay", 3),
    ("chip", 4),
    ("arena", 5),
    ("engine", 6),
    ("kernel", 7),
    ("dfx", 7),
    ("sync", 7),
    ("config", 8),
    ("tensor", 8),
    ("mem", 8),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of `text` before its unit tests, without comments (line comments and doc
/// comments; the crate has no block comments in code).
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| match l.find("//") {
            // A `//` inside a string literal is kept (good enough: no module path
            // follows one in this crate).
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a piece of code names through `crate::`.
fn used_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the first path segment of each item at
            // depth 0.
            let mut depth = 0;
            let mut item_start = true;
            for (j, ch) in group.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => {
                        let name: String = group[j..]
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        out.push(name);
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    out
}

#[test]
fn no_module_uses_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut checked = 0;
    let mut up = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .expect("utf-8 path")
            .trim_end_matches(".rs")
            .to_string();
        let Some(own) = layer(&top) else {
            continue; // lib.rs: the crate root re-exports from every layer
        };
        let text = std::fs::read_to_string(f).expect("read source");
        for m in used_modules(&code(&text)) {
            if let Some(l) = layer(&m) {
                checked += 1;
                if l < own {
                    up.push(format!("{} ({top}) uses crate::{m}", rel.display()));
                }
            }
        }
    }
    assert!(checked > 100, "the scan found only {checked} crate:: paths");
    up.sort();
    up.dedup();
    assert!(up.is_empty(), "arrows back up:\n{}", up.join("\n"));
}

#[test]
fn the_scanner_reads_grouped_imports_and_skips_comments_and_tests() {
    let text = "use crate::{chip::Arg, engine::{a, b}, tensor};\n\
                // crate::node in a comment\n\
                let x = crate::arena::f(); // crate::cluster\n\
                #[cfg(test)]\nmod tests {\n use crate::cluster::X;\n}\n";
    assert_eq!(
        used_modules(&code(text)),
        vec!["chip", "engine", "tensor", "arena"]
    );
}
