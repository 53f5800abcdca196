//! `taskring._mpi_tools`: bare MPI for B8's baselines (`mpi_pingpong`) and the L4 tests'
//! hand-made frames (`mpi_send_bytes`, `mpi_recv_bytes`, `l4_decode_reply`). Not the
//! package's: `taskring._native` does not hold them, and nothing under
//! `python/taskring` imports them. A module of its own in the same extension (built with
//! the `mpi` feature only), importable once `taskring` is.

use crate::errors::mpi_err;
use crate::gil::signal_check;
use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use taskring::cluster::mpi;
use taskring::internals::cluster::{transport as comm, wire};

/// The module's name in `sys.modules`.
const NAME: &str = "taskring._mpi_tools";

/// Make `taskring._mpi_tools` (registered in `sys.modules`, so that
/// `from taskring import _mpi_tools` finds it).
pub fn register(py: Python<'_>) -> PyResult<()> {
    let m = PyModule::new(py, NAME)?;
    m.add_function(wrap_pyfunction!(mpi_pingpong, &m)?)?;
    m.add_function(wrap_pyfunction!(mpi_send_bytes, &m)?)?;
    m.add_function(wrap_pyfunction!(mpi_recv_bytes, &m)?)?;
    m.add_function(wrap_pyfunction!(l4_decode_reply, &m)?)?;
    py.import("sys")?.getattr("modules")?.set_item(NAME, m)?;
    Ok(())
}

/// A bare MPI exchange between rank 0 and `peer` (B8's baselines): `rounds` times,
/// rank 0 sends `nbytes` and the peer answers with the same bytes (`echo`, a
/// ping-pong) or with one byte (a one-way transfer and its acknowledgement), received
/// with MPI's own blocking receive; returns
/// the seconds of `rounds` rounds after one untimed round. The peer calls it with
/// `peer=0` and the same arguments.
#[pyfunction]
#[pyo3(signature = (peer, nbytes, rounds, echo=true))]
fn mpi_pingpong(
    py: Python<'_>,
    peer: i32,
    nbytes: usize,
    rounds: usize,
    echo: bool,
) -> PyResult<f64> {
    py.detach(|| {
        let me = mpi::world().rank;
        let mut buf = vec![0u8; nbytes];
        let mut ack = [0u8; 1];
        let tag = comm::FIRST_DATA_TAG + comm::DATA_TAGS as i32; // no L4 message uses it
        let mut t0 = std::time::Instant::now();
        // One untimed round first: buffers touched, connection warm.
        for round in 0..=rounds {
            if round == 1 {
                t0 = std::time::Instant::now();
            }
            if me == 0 {
                comm::send_data(peer, tag, &buf);
                if echo {
                    comm::receive_blocking(peer, tag, &mut buf);
                } else {
                    comm::receive_blocking(peer, tag, &mut ack);
                }
            } else {
                comm::receive_blocking(peer, tag, &mut buf);
                if echo {
                    comm::send_data(peer, tag, &buf);
                } else {
                    comm::send_data(peer, tag, &ack);
                }
            }
        }
        Ok(t0.elapsed().as_secs_f64())
    })
    .map_err(mpi_err)
}

/// Send raw bytes to rank `dest` with `tag` (tests and benchmarks).
#[pyfunction]
fn mpi_send_bytes(py: Python<'_>, dest: i32, tag: i32, data: Vec<u8>) {
    py.detach(|| comm::send(dest, tag, &data))
}

/// Receive one message from rank `source` with `tag` (tests and benchmarks).
#[pyfunction]
fn mpi_recv_bytes(py: Python<'_>, source: i32, tag: i32) -> PyResult<Vec<u8>> {
    let pending = Mutex::new(None);
    let got = py.detach(|| {
        comm::wait_message(
            source,
            Some(tag),
            std::time::Duration::from_millis(1),
            comm::Backoff::EXPECTED,
            signal_check(&pending),
        )
        .map(|(m, s)| comm::receive_vec(m, &s))
    });
    if let Some(e) = pending.lock().take() {
        return Err(e);
    }
    got.ok_or_else(|| PyRuntimeError::new_err("interrupted"))
}

/// `(seq, status, error, n_outputs)` of an L4 reply frame (tests).
#[pyfunction]
fn l4_decode_reply(data: Vec<u8>) -> PyResult<(u64, u32, String, u32)> {
    let r = wire::decode_reply(&data).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((r.seq, r.status, r.error, r.n_outputs))
}
