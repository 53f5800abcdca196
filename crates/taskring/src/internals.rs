//! The wire formats and transports of L3 and L4, for the benchmarks (`taskring-bench`,
//! and the bare MPI of B8 and the L4 tests in the binding's `taskring._mpi_tools`) and
//! the fuzz tests (feature `internals`; not part of the API). The paths mirror the
//! crate's own: `internals::node::wire` is the crate's `node::wire`.

/// L3's internals.
pub mod node {
    /// The L3 frames: a task with its whole `CallConfig`, the chip's reply, the arena
    /// requests.
    pub mod wire {
        pub use crate::node::wire::*;
    }
    /// A chip's mailbox: the futex words and frame buffers a request and its reply
    /// travel through, and the spin-then-futex wait on them.
    pub mod mailbox {
        pub use crate::node::mailbox::*;
    }
}

/// L4's internals.
pub mod cluster {
    /// The L4 frames: a task, close, a reply with the host's report.
    pub mod wire {
        pub use crate::cluster::wire::*;
    }
    /// The MPI transport: byte messages, data in chunks, waits under a backoff.
    #[cfg(feature = "mpi")]
    pub mod transport {
        pub use crate::cluster::transport::*;
    }
}
