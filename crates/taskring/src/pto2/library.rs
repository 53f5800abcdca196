//! Loading the shared libraries of a C++ program: from a path, or from bytes (written
//! once, under a name made of their content hash, to a private directory, then opened
//! from there). A loaded library stays loaded for the life of the process: an
//! orchestration's thread-local runtime pointer and the kernels' code must outlive every
//! task that can still reach them, and `dlopen` of the same file again returns the same
//! handle, so loading the same program twice costs nothing.

use super::CallableError;
use libloading::Library;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// Where a library comes from.
#[derive(Clone, Copy, Debug)]
pub enum Binary<'a> {
    Path(&'a Path),
    Bytes(&'a [u8]),
}

impl<'a> From<&'a Path> for Binary<'a> {
    fn from(p: &'a Path) -> Binary<'a> {
        Binary::Path(p)
    }
}

impl<'a> From<&'a [u8]> for Binary<'a> {
    fn from(b: &'a [u8]) -> Binary<'a> {
        Binary::Bytes(b)
    }
}

/// An opened library (never closed: see the module doc).
pub(crate) struct Loaded {
    pub lib: &'static Library,
    pub path: PathBuf,
}

impl Loaded {
    /// The address of `symbol`, or None when the library has no such symbol.
    pub fn symbol(&self, symbol: &str) -> Option<*const std::ffi::c_void> {
        // SAFETY: the symbol is only looked up, as an untyped address; the caller gives
        // it the type the ABI documents before calling it.
        unsafe {
            self.lib
                .get::<*const std::ffi::c_void>(symbol.as_bytes())
                .ok()
                .map(|s| *s)
        }
    }
}

/// Open `bin` (see the module doc).
pub(crate) fn load(bin: Binary<'_>, what: &str) -> Result<Loaded, CallableError> {
    let path = match bin {
        Binary::Path(p) => {
            if !p.exists() {
                return Err(CallableError::Missing {
                    what: what.to_string(),
                    path: p.to_path_buf(),
                });
            }
            p.to_path_buf()
        }
        Binary::Bytes(b) => write_bytes(b, what)?,
    };
    // SAFETY: loading runs the library's initialisers: it is the user's code, trusted as
    // a native kernel is (docs/api.md §11).
    let lib = unsafe { Library::new(&path) }.map_err(|e| CallableError::Open {
        what: what.to_string(),
        path: path.clone(),
        reason: crate::kernel::native::with_sources(&e),
    })?;
    Ok(Loaded {
        lib: Box::leak(Box::new(lib)),
        path,
    })
}

/// The directory for libraries given as bytes.
fn lib_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir()
        .join(format!("taskring-{uid}"))
        .join("lib")
}

/// Write `bytes` to `<lib_dir>/<hash>.so` (once) and return the path.
fn write_bytes(bytes: &[u8], what: &str) -> Result<PathBuf, CallableError> {
    let io = |e: std::io::Error, p: &Path| CallableError::Write {
        what: what.to_string(),
        path: p.to_path_buf(),
        reason: e.to_string(),
    };
    if bytes.len() < 4 || &bytes[..4] != b"\x7fELF" {
        return Err(CallableError::NotElf {
            what: what.to_string(),
            len: bytes.len(),
        });
    }
    let dir = lib_dir();
    std::fs::create_dir_all(&dir).map_err(|e| io(e, &dir))?;
    let path = dir.join(format!("{}.so", content_hash(bytes)));
    if let Ok(m) = std::fs::metadata(&path) {
        if m.len() == bytes.len() as u64 {
            return Ok(path);
        }
    }
    // A private name first, then rename: another process writing the same bytes at the
    // same time never sees a half-written file.
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        content_hash(bytes),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).map_err(|e| io(e, &tmp))?;
    std::fs::rename(&tmp, &path).map_err(|e| io(e, &path))?;
    Ok(path)
}

/// 128 bits of two differently keyed SipHashes of the bytes, as hex.
fn content_hash(bytes: &[u8]) -> String {
    let mut a = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut a);
    let mut b = std::collections::hash_map::DefaultHasher::new();
    (bytes.len() as u64 ^ 0x9e37_79b9_7f4a_7c15).hash(&mut b);
    bytes.hash(&mut b);
    format!("{:016x}{:016x}", a.finish(), b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_no_library_are_refused_before_anything_is_written() {
        match load(Binary::Bytes(b"not a library"), "orchestration") {
            Err(CallableError::NotElf { len, .. }) => assert_eq!(len, 13),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("loaded"),
        }
    }

    #[test]
    fn a_missing_path_names_itself() {
        let e = load(
            Binary::Path(Path::new("/nonexistent/liborch.so")),
            "orchestration",
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("/nonexistent/liborch.so"), "{e}");
    }

    #[test]
    fn equal_bytes_share_a_name_and_different_bytes_do_not() {
        assert_eq!(content_hash(b"\x7fELFabc"), content_hash(b"\x7fELFabc"));
        assert_ne!(content_hash(b"\x7fELFabc"), content_hash(b"\x7fELFabd"));
    }
}
