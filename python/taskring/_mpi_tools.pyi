"""`taskring._mpi_tools`: bare MPI for B8's baselines and the L4 tests' hand-made frames
(crates/taskring-py/src/mpi_tools.rs). Not the package's: it exists in a build with MPI,
once `taskring` is imported."""

def mpi_pingpong(peer: int, nbytes: int, rounds: int, echo: bool = True) -> float:
    """A bare MPI ping-pong (`echo`) or one-way transfer with a 1-byte acknowledgement, with `peer` (B8's baselines); returns the seconds."""

def mpi_send_bytes(dest: int, tag: int, data: bytes) -> None:
    """Send raw bytes to rank `dest` with `tag`."""

def mpi_recv_bytes(source: int, tag: int) -> bytes:
    """Receive one message from rank `source` with `tag`."""

def l4_decode_reply(data: bytes) -> tuple[int, int, str, int]:
    """`(seq, status, error, n_outputs)` of an L4 reply frame."""
