//! Simpler's C++ programs on taskring (`docs/api.md` §13.1): an orchestration library
//! written against the PTO2 orchestration API (`include/pto2/pto_orchestration_api.h`)
//! and kernel libraries with `extern "C" void kernel_entry(int64_t *args)`, run by a
//! chip like any [`Program`].
//!
//! - [`CoreCallable`]: a kernel library (its `kernel_entry`), its core type and
//!   signature.
//! - [`ChipCallable`]: an orchestration library, its entry's name, its signature and its
//!   kernels by func_id. [`ChipCallable::program`] is the [`Program`] a
//!   [`ChipWorker`](crate::ChipWorker) runs; [`ChipCallable::for_node`] the callable an
//!   L3 node registers.
//!
//! A run calls the library's `aicpu_orchestration_config` (when it has one: the argument
//! count check) and its entry on the chip's orchestrator thread, inside the run's root
//! scope, with the run's record bound as the thread's `PTO2Runtime` (`ops.rs`). Every
//! submit goes through the run's [`Orchestrator`]; each C++ task's engine kernel calls
//! its parts' `kernel_entry` (`kernel.rs`). Libraries stay loaded for the life of the
//! process (`library.rs`).

mod abi;
mod kernel;
mod library;
mod ops;

pub use abi::ChipTensorAbi;
pub use library::Binary;

use crate::chip::{Arg, Program};
use crate::engine::{Orchestrator, RuntimeFailure};
use crate::kernel::{CoreKind, KernelRef};
use crate::nextlevel::ArgDir;
use abi::{ConfigTrampoline, EnterTrampoline, EntryArgs, KernelEntry};
use kernel::{KernelKey, PtoKernel};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Why a library could not be made a callable.
#[derive(Debug, thiserror::Error)]
pub enum CallableError {
    #[error("{what} library {path} does not exist")]
    Missing { what: String, path: PathBuf },
    #[error("cannot open {what} library {path}: {reason}")]
    Open {
        what: String,
        path: PathBuf,
        reason: String,
    },
    #[error("cannot write {what} library to {path}: {reason}")]
    Write {
        what: String,
        path: PathBuf,
        reason: String,
    },
    #[error("{what} binary of {len} bytes is not a shared library (no ELF header)")]
    NotElf { what: String, len: usize },
    #[error("{what} library {path} has no symbol '{symbol}'")]
    Symbol {
        what: String,
        path: PathBuf,
        symbol: String,
    },
    #[error(
        "orchestration library {path} was not built against taskring's pto_orchestration_api.h \
         (it has no '{symbol}'); rebuild it with include dirs from \
         KernelCompiler.get_orchestration_include_dirs()"
    )]
    NotTaskring { path: PathBuf, symbol: String },
    #[error("func_id {0} is given twice")]
    DuplicateFuncId(i32),
    #[error("a CoreCallable's core type must be AIC or AIV, got {0:?}")]
    CoreType(CoreKind),
}

/// A kernel library: `kernel_entry`, its core type and signature.
#[derive(Clone)]
pub struct CoreCallable {
    entry: KernelEntry,
    core: CoreKind,
    signature: Vec<ArgDir>,
    path: PathBuf,
}

impl std::fmt::Debug for CoreCallable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreCallable")
            .field("core", &self.core)
            .field("signature", &self.signature)
            .field("path", &self.path)
            .finish()
    }
}

impl CoreCallable {
    /// Load a kernel library from a path or bytes; `core` is `Aic` or `Aiv`.
    pub fn load<'b>(
        binary: impl Into<Binary<'b>>,
        core: CoreKind,
        signature: &[ArgDir],
    ) -> Result<CoreCallable, CallableError> {
        if core == CoreKind::Any {
            return Err(CallableError::CoreType(core));
        }
        let lib = library::load(binary.into(), "kernel")?;
        let entry = lib
            .symbol("kernel_entry")
            .ok_or_else(|| CallableError::Symbol {
                what: "kernel".into(),
                path: lib.path.clone(),
                symbol: "kernel_entry".into(),
            })?;
        Ok(CoreCallable {
            // SAFETY: kernel_entry has the documented ABI (`void(int64_t *)`).
            entry: unsafe { std::mem::transmute::<*const std::ffi::c_void, KernelEntry>(entry) },
            core,
            signature: signature.to_vec(),
            path: lib.path,
        })
    }

    pub fn from_path(
        path: impl AsRef<std::path::Path>,
        core: CoreKind,
        signature: &[ArgDir],
    ) -> Result<CoreCallable, CallableError> {
        CoreCallable::load(Binary::Path(path.as_ref()), core, signature)
    }

    pub fn from_bytes(
        bytes: &[u8],
        core: CoreKind,
        signature: &[ArgDir],
    ) -> Result<CoreCallable, CallableError> {
        CoreCallable::load(Binary::Bytes(bytes), core, signature)
    }

    pub fn core(&self) -> CoreKind {
        self.core
    }

    pub fn signature(&self) -> &[ArgDir] {
        &self.signature
    }
}

/// What a [`ChipCallable`]'s program holds.
pub(crate) struct Inner {
    name: String,
    path: PathBuf,
    /// The entry's symbol.
    entry_name: String,
    config: Option<*const std::ffi::c_void>,
    entry: *const std::ffi::c_void,
    config_tramp: ConfigTrampoline,
    enter_tramp: EnterTrampoline,
    signature: Vec<ArgDir>,
    /// Sorted by func_id.
    children: Vec<(i32, CoreCallable)>,
    /// The engine kernels made for this callable's submits (see [`kernel`]).
    kernels: Mutex<HashMap<KernelKey, KernelRef>>,
}

// SAFETY: the raw pointers are addresses of functions in a library that is never
// unloaded; calling them is what every thread of the chip may do.
unsafe impl Send for Inner {}
// SAFETY: as for Send; the kernel registry is behind a mutex.
unsafe impl Sync for Inner {}

/// The most distinct engine kernels one callable makes (func_ids × argument patterns ×
/// block counts × predicates × initial values); beyond it a submit fails INVALID_ARGS.
const MAX_KERNELS: usize = 4096;

impl Inner {
    /// The engine kernel for `key`: made on first use, then shared by every run.
    pub(crate) fn kernel_for(&self, key: &KernelKey) -> Result<KernelRef, String> {
        let mut reg = self.kernels.lock();
        if let Some(k) = reg.get(key) {
            return Ok(*k);
        }
        if reg.len() >= MAX_KERNELS {
            return Err(format!(
                "the callable made {MAX_KERNELS} distinct task kernels (func_ids x argument \
                 tags x block_num x predicate x initial values); a value that changes with \
                 every submit (an initial value or predicate target?) makes a new one each time"
            ));
        }
        let mut entries: [Option<KernelEntry>; 3] = [None; 3];
        for (slot, &id) in key.ids.iter().enumerate() {
            if id < 0 {
                continue;
            }
            let c = self
                .children
                .binary_search_by_key(&id, |(i, _)| *i)
                .map(|i| &self.children[i].1)
                .map_err(|_| {
                    let have: Vec<String> =
                        self.children.iter().map(|(i, _)| i.to_string()).collect();
                    format!(
                        "no kernel with func_id {id} in callable '{}' (it has: {})",
                        self.name,
                        if have.is_empty() {
                            "none".to_string()
                        } else {
                            have.join(", ")
                        }
                    )
                })?;
            entries[slot] = Some(c.entry);
        }
        // "<callable>:func<aic>+<aiv0>+<aiv1>", the parts present.
        let ids: Vec<String> = key
            .ids
            .iter()
            .filter(|i| **i >= 0)
            .map(|i| i.to_string())
            .collect();
        let name = format!("{}:func{}", self.name, ids.join("+"));
        let k = KernelRef::leak(PtoKernel::new(key, entries, name));
        reg.insert(key.clone(), k);
        Ok(k)
    }

    /// One run: the config check, then the entry with the run bound.
    fn run(&self, o: &mut Orchestrator<'_>, args: &[Arg<'_>]) -> Result<(), RuntimeFailure> {
        let mut tensors = Vec::new();
        let mut scalars = Vec::new();
        for a in args {
            match a {
                Arg::Tensor(t) => tensors.push(abi::ChipTensorAbi::of(&t.tensor())),
                // F64 as its bits, I64 as is (upstream's u64 scalar slots).
                Arg::Scalar(s) => scalars.push(s.bits()),
            }
        }
        // The signature names the tensors' directions (what an L3 host stages and copies
        // back); as upstream, it is not checked against the arguments here.
        let given = tensors.len() + scalars.len();
        let entry_args = EntryArgs {
            tensors: tensors.as_ptr(),
            scalars: scalars.as_ptr(),
            tensor_count: tensors.len() as i32,
            scalar_count: scalars.len() as i32,
        };
        if let Some(cfg) = self.config {
            let mut version = 0u32;
            // SAFETY: the trampoline of the library's own header calls its config
            // function with a ChipTaskArgs built from `entry_args`, valid for the call.
            let expected = unsafe { (self.config_tramp)(cfg, &entry_args, &mut version) };
            if version != abi::ABI_VERSION {
                return Err(RuntimeFailure::invalid_args(
                    None,
                    format!(
                        "orchestration library {} was built against taskring PTO2 ABI version \
                         {version}; this taskring speaks version {}: rebuild it",
                        self.path.display(),
                        abi::ABI_VERSION
                    ),
                ));
            }
            if expected > 0 && (given as i64) < expected as i64 {
                return Err(RuntimeFailure::invalid_args(
                    None,
                    format!(
                        "aicpu_orchestration_config of '{}' expects {expected} arguments, got \
                         {given}",
                        self.name
                    ),
                ));
            }
        }
        let depth = o.depth();
        let mut rt = ops::Runtime::new(o, self);
        // SAFETY: the trampoline binds `rt` for this thread, calls the entry with the
        // arguments (valid for the call) and unbinds; the table's functions only run
        // inside it, on this thread, while `rt` lives.
        let caught = unsafe { (self.enter_tramp)(rt.head(), self.entry, &entry_args) };
        let _ = caught; // a caught exception was reported through report_fatal
                        // Scopes the orchestration left open end here, as the root scope's end would
                        // end them.
        let o = rt.orchestrator();
        while !o.is_fatal() && o.depth() > depth {
            if o.end_scope().is_err() {
                break;
            }
        }
        match o.failure() {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }
}

/// Reads a [`ChipCallable::describe`] description.
struct DescReader<'a> {
    d: &'a [u8],
    at: usize,
}

impl<'a> DescReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .d
            .get(self.at..self.at + n)
            .ok_or_else(|| "a truncated callable description".to_string())?;
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn text(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn path(&mut self) -> Result<PathBuf, String> {
        Ok(PathBuf::from(
            String::from_utf8_lossy(self.text()?).into_owned(),
        ))
    }
    fn sig(&mut self) -> Result<Vec<ArgDir>, String> {
        let n = self.u32()? as usize;
        self.take(n)?
            .iter()
            .map(|&b| match b {
                0 => Ok(ArgDir::In),
                1 => Ok(ArgDir::Out),
                2 => Ok(ArgDir::InOut),
                3 => Ok(ArgDir::Scalar),
                _ => Err(format!("argument direction {b} in a callable description")),
            })
            .collect()
    }
}

/// An orchestration library with its entry, signature and kernels by func_id.
#[derive(Clone)]
pub struct ChipCallable {
    inner: Arc<Inner>,
    program: Program,
}

impl std::fmt::Debug for ChipCallable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChipCallable")
            .field("name", &self.inner.name)
            .field("path", &self.inner.path)
            .field("signature", &self.inner.signature)
            .field(
                "children",
                &self
                    .inner
                    .children
                    .iter()
                    .map(|(i, _)| *i)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ChipCallable {
    /// Load an orchestration library (path or bytes) whose entry is `entry`
    /// (upstream's default `aicpu_orchestration_entry`), with its kernels by func_id.
    pub fn load<'b>(
        binary: impl Into<Binary<'b>>,
        entry: &str,
        signature: &[ArgDir],
        children: Vec<(i32, CoreCallable)>,
    ) -> Result<ChipCallable, CallableError> {
        let lib = library::load(binary.into(), "orchestration")?;
        let sym = |s: &str| lib.symbol(s);
        let entry_fn = sym(entry).ok_or_else(|| CallableError::Symbol {
            what: "orchestration".into(),
            path: lib.path.clone(),
            symbol: entry.to_string(),
        })?;
        let tramp = |s: &str| {
            sym(s).ok_or_else(|| CallableError::NotTaskring {
                path: lib.path.clone(),
                symbol: s.to_string(),
            })
        };
        let config_tramp = tramp("taskring_pto2_config")?;
        let enter_tramp = tramp("taskring_pto2_enter")?;
        let mut children = children;
        children.sort_by_key(|(i, _)| *i);
        if let Some(w) = children.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(CallableError::DuplicateFuncId(w[0].0));
        }
        let name = lib
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "orchestration".into());
        let inner = Arc::new(Inner {
            name: if matches!(entry, "aicpu_orchestration_entry") {
                name
            } else {
                format!("{name}:{entry}")
            },
            path: lib.path.clone(),
            entry_name: entry.to_string(),
            config: sym("aicpu_orchestration_config"),
            entry: entry_fn,
            // SAFETY: the symbols the API header emits, of the ABI header's types.
            config_tramp: unsafe {
                std::mem::transmute::<*const std::ffi::c_void, ConfigTrampoline>(config_tramp)
            },
            // SAFETY: as above.
            enter_tramp: unsafe {
                std::mem::transmute::<*const std::ffi::c_void, EnterTrampoline>(enter_tramp)
            },
            signature: signature.to_vec(),
            children,
            kernels: Mutex::new(HashMap::new()),
        });
        let run = inner.clone();
        let program =
            Program::with_identity(&inner.name, Arc::as_ptr(&inner) as usize, move |o, args| {
                run.run(o, args)
            });
        Ok(ChipCallable { inner, program })
    }

    pub fn from_path(
        path: impl AsRef<std::path::Path>,
        entry: &str,
        signature: &[ArgDir],
        children: Vec<(i32, CoreCallable)>,
    ) -> Result<ChipCallable, CallableError> {
        ChipCallable::load(Binary::Path(path.as_ref()), entry, signature, children)
    }

    pub fn from_bytes(
        bytes: &[u8],
        entry: &str,
        signature: &[ArgDir],
        children: Vec<(i32, CoreCallable)>,
    ) -> Result<ChipCallable, CallableError> {
        ChipCallable::load(Binary::Bytes(bytes), entry, signature, children)
    }

    /// The program a chip runs (`ChipWorker::run`, `capture`, ...).
    pub fn program(&self) -> Program {
        self.program.clone()
    }

    /// The callable an L3 node registers (its chips run the program; the signature
    /// says which arguments are read and written).
    pub fn for_node(&self) -> crate::node::ChipCallable {
        crate::node::ChipCallable {
            program: self.program.clone(),
            signature: self.inner.signature.clone(),
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn signature(&self) -> &[ArgDir] {
        &self.inner.signature
    }

    /// What another process of this machine needs to load the same callable: its
    /// libraries' paths (bytes given to `from_bytes` are kept under a content-hash name),
    /// entry, signatures and func_ids ([`ChipCallable::from_description`]).
    pub fn describe(&self) -> Vec<u8> {
        let mut d = Vec::new();
        let sig = |d: &mut Vec<u8>, s: &[ArgDir]| {
            d.extend((s.len() as u32).to_le_bytes());
            d.extend(s.iter().map(|&a| a as u8));
        };
        let text = |d: &mut Vec<u8>, t: &[u8]| {
            d.extend((t.len() as u32).to_le_bytes());
            d.extend_from_slice(t);
        };
        text(&mut d, self.inner.path.as_os_str().as_encoded_bytes());
        text(&mut d, self.inner.entry_name.as_bytes());
        sig(&mut d, &self.inner.signature);
        d.extend((self.inner.children.len() as u32).to_le_bytes());
        for (id, k) in &self.inner.children {
            d.extend(id.to_le_bytes());
            d.push(u8::from(k.core == CoreKind::Aic));
            text(&mut d, k.path.as_os_str().as_encoded_bytes());
            sig(&mut d, &k.signature);
        }
        d
    }

    /// The callable [`ChipCallable::describe`] describes, loaded in this process.
    pub fn from_description(d: &[u8]) -> Result<ChipCallable, String> {
        let mut r = DescReader { d, at: 0 };
        let orch = r.path()?;
        let entry = String::from_utf8_lossy(r.text()?).into_owned();
        let signature = r.sig()?;
        let n = r.u32()?;
        let mut children = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let id = r.u32()? as i32;
            let core = if r.take(1)?[0] == 1 {
                CoreKind::Aic
            } else {
                CoreKind::Aiv
            };
            let p = r.path()?;
            let s = r.sig()?;
            children.push((
                id,
                CoreCallable::from_path(&p, core, &s).map_err(|e| e.to_string())?,
            ));
        }
        ChipCallable::from_path(&orch, &entry, &signature, children).map_err(|e| e.to_string())
    }
}

/// The level of orchestration log lines printed (`TASKRING_LOG`: `error`, `warn`
/// (default), `info`, `debug`); LOG_ALWAYS lines always print.
pub(crate) fn log_level() -> i32 {
    static LEVEL: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        match std::env::var("TASKRING_LOG")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .as_str()
        {
            "error" => ops::abi_log::ERROR,
            "info" => ops::abi_log::INFO,
            "debug" | "trace" => ops::abi_log::DEBUG,
            _ => ops::abi_log::WARN,
        }
    })
}
