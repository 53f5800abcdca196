//! L4: several hosts over MPI (docs/api.md §9). Rank 0 runs the same engine as L2 and L3 with
//! a *host-endpoint* executor; ranks 1..N are hosts 0..N-1, each an L3 node with its
//! own chip processes.
//!
//! The rooms (the same names as L3's in `node`):
//!
//! - `wire`: the L4 frames (task with its whole `CallConfig`, close, reply with the
//!   host's `NodeRunReport`), in the node's frame format. Always built (and fuzzed).
//! - `transport` (feature `mpi`): MPI — rsmpi over Open MPI, initialised with
//!   `MPI_THREAD_MULTIPLE`; waits are matched probes under a spin/yield/sleep backoff.
//! - `driver` (feature `mpi`): `Cluster`, rank 0's engine whose "kernel" ships an L4
//!   task to its host and waits for the reply (one dispatch thread per task in flight,
//!   two per host), with dependencies between L4 tasks inferred by rank 0's tensormap.
//! - `executor` (feature `mpi`): `Hosts`, rank 0's executor: one task's round trip to
//!   its host, liveness pings, a host's order of service.
//! - `worker` (feature `mpi`): what a host rank does with a request — receive the task
//!   and its inputs straight into the caller's (shared) buffers, answer with the report
//!   and the outputs. The serving loop itself (running the host's L3 orchestration) is
//!   the embedding's (Python's `Worker(level=4).init()` on a host).
//! - `timeline`: the L4 timeline of a traced run (rank 0's dispatches and every host's L3
//!   timeline in one `merged_swimlane.json`).
//!
//! Traffic is MPI point to point in `MPI_COMM_WORLD` only: requests with tag
//! `TAG_REQUEST`, each task's data and reply with a tag of its own, liveness (rank 0's
//! pings, a host's answers, its close acknowledgement and leaving notice) with
//! `TAG_LIVE`. Chips are forked by
//! a host *before* it initialises MPI (Open MPI's progress and PMIx threads then do not
//! exist in the fork's child, and a chip never touches MPI).

// Without MPI the L4 frames are only the fuzz tests' (through `internals`).
#[cfg_attr(not(any(feature = "mpi", feature = "internals")), allow(dead_code))]
pub(crate) mod wire;
pub use wire::{HostRequest, L4Arg, L4Dir, L4Task, L4Tensor};

#[cfg(feature = "mpi")]
mod driver;
#[cfg(feature = "mpi")]
mod executor;
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod timeline;
#[cfg(feature = "mpi")]
pub(crate) mod transport;
#[cfg(feature = "mpi")]
pub mod worker;
#[cfg(feature = "mpi")]
pub use driver::{Cluster, ClusterOrchestrator};

use crate::config::ConfigError;
use crate::engine::RuntimeFailure;
use crate::nextlevel::ArgDir;
use crate::node::NodeRunReport;

/// A registered L4 program (a `DistributedProgram`): its name and signature.
#[derive(Clone, Debug)]
pub struct ClusterProgram {
    pub name: String,
    pub signature: Vec<ArgDir>,
}

/// MPI in this process (feature `mpi`): initialised once with `MPI_THREAD_MULTIPLE`
/// ([`init`](mpi::init)), finalized once ([`finalize`](mpi::finalize), or at exit with
/// the exit status in hand: [`finalize_at_exit`](mpi::finalize_at_exit)), or the job
/// aborted. The messages themselves are the crate's own (`transport`).
#[cfg(feature = "mpi")]
pub mod mpi {
    pub use super::transport::{
        abort, finalize, finalize_at_exit, init, initialized, say_at_sigterm, world, World,
        SIGTERM_TEXT,
    };
}

/// What rank 0 learnt of one L4 task.
#[derive(Clone, Debug)]
pub struct HostTaskReport {
    /// The host (0-based; its MPI rank is `worker + 1`).
    pub worker: usize,
    pub rank: usize,
    /// The registered program's handle.
    pub callable: u32,
    /// The host's own report of its L3 run (None when no reply came).
    pub report: Option<NodeRunReport>,
    /// Dispatch to reply, seen from rank 0 (includes both transfers).
    pub elapsed_s: f64,
    pub error: Option<String>,
}

/// What one L4 run did.
#[derive(Clone, Debug)]
pub struct ClusterRunReport {
    /// One report per L4 task, in submission order.
    pub tasks: Vec<HostTaskReport>,
    pub elapsed_s: f64,
}

/// Why an L4 run (or its start) failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A host's failure: `host {worker} (rank {rank}): {its error}`.
    #[error("{0}")]
    Host(String),
    /// The runtime's own failure of the run (rank 0's engine).
    #[error("{0}")]
    Failure(RuntimeFailure),
    /// The run was cancelled (Ctrl-C on rank 0).
    #[error("{0}")]
    Interrupted(String),
    #[error("the L4 worker is closed")]
    Closed,
    /// MPI is missing, not launched, or refused.
    #[error("{0}")]
    Mpi(String),
}

/// The prefix of a host's errors as rank 0 reports them.
pub fn host_prefix(worker: usize) -> String {
    format!("host {worker} (rank {})", worker + 1)
}

/// A range of address space with no memory behind it (`PROT_NONE`): rank 0's stand-in
/// for a host-resident tensor, whose address is the tensor's identity in rank 0's
/// tensormap (dependencies between L4 tasks through it are inferred as for any array).
/// Nothing is ever read or written there.
pub struct Reservation {
    addr: usize,
    len: usize,
}

impl Reservation {
    /// Reserve `bytes` (at least one page) of address space.
    pub fn new(bytes: usize) -> std::io::Result<Reservation> {
        let len = bytes.max(1).next_multiple_of(4096);
        // safety: an anonymous private mapping with no access; unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Reservation {
            addr: p as usize,
            len,
        })
    }

    pub fn addr(&self) -> u64 {
        self.addr as u64
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // safety: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// The rank and size of an MPI launch as its launcher's environment tells them
/// (Open MPI's `OMPI_COMM_WORLD_*`, else PMI's `PMI_RANK`/`PMI_SIZE`), read without
/// initialising MPI — a host forks its chips before it does.
pub fn launch_env() -> Option<(usize, usize)> {
    let get = |k: &str| std::env::var(k).ok()?.trim().parse::<usize>().ok();
    let rank = get("OMPI_COMM_WORLD_RANK").or_else(|| get("PMI_RANK"))?;
    let size = get("OMPI_COMM_WORLD_SIZE").or_else(|| get("PMI_SIZE"))?;
    (rank < size).then_some((rank, size))
}

/// Whether this build speaks MPI (the `mpi` feature).
pub const MPI_BUILT: bool = cfg!(feature = "mpi");
