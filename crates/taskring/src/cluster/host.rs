//! A host rank's side of L4: take the next request from rank 0, receive a task's inputs
//! straight into the buffers its L3 run uses (shared memory the chips see: no second
//! copy on the host), and answer with the report and the outputs.

use super::comm::{self, TAG_REQUEST};
use super::wire::{self, HostRequest, L4Arg, L4Reply, L4Task};
use crate::node::frame::{FrameError, FRAME_MAGIC};
use crate::node::NodeRunReport;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Longest sleep of a host waiting for its next request: an idle host wakes about 100
/// times a second (each look is an `MPI_Improbe`, which runs Open MPI's progress engine:
/// measured 0.8–0.9 % of a core idle for the whole host process, against 1.2 % at 4 ms
/// and 2.4 % at 1 ms); the first request after an idle spell of more than ~20 ms waits
/// up to this long. A stream of tasks never gets there (the wait yields first).
pub const REQUEST_MAX_SLEEP: Duration = Duration::from_millis(10);

/// A request rank 0 sent that could not be decoded. When its sequence number and tag
/// could be read, the task can be failed (`reply_failure`) instead of lost.
#[derive(Debug)]
pub struct Malformed {
    pub ids: Option<(u64, i32)>,
    pub error: FrameError,
}

/// A host that had a request less than this long ago is busy: a wait for the next one
/// that outlasts the yields sleeps 50 µs at a time for this long before its sleeps grow
/// (rank 0 is only slow for a moment on a busy machine; a host that slept 10 ms then
/// made rank 0's dispatch threads sleep too — B8's throughput fell to 0.4 k L4 tasks/s
/// in such runs). A host idle for longer goes to long sleeps at once: short ones would
/// wake it every 50 µs for nothing, and those wake-ups slowed B8's round trip by
/// 30–40 µs on the other host.
pub const BUSY_FOR: Duration = Duration::from_millis(20);

/// When this host last took a request (nanoseconds on a process-local clock; 0: never).
static LAST_REQUEST_NS: AtomicU64 = AtomicU64::new(0);

fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

/// How long a host that last took a request at `last_ns` (0: never) waits for the next
/// one in short sleeps, at `now_ns`: [`BUSY_FOR`] if it is busy, else not at all.
fn short_sleeps_for(last_ns: u64, now_ns: u64) -> Duration {
    let busy = last_ns != 0 && now_ns.saturating_sub(last_ns) < BUSY_FOR.as_nanos() as u64;
    if busy {
        BUSY_FOR
    } else {
        Duration::ZERO
    }
}

/// The next request from rank 0; `None` when `give_up()` said to stop waiting.
pub fn next_request(give_up: impl FnMut() -> bool) -> Option<Result<HostRequest, Malformed>> {
    let short_for = short_sleeps_for(LAST_REQUEST_NS.load(Relaxed), now_ns());
    let (msg, status) =
        comm::wait_message(0, Some(TAG_REQUEST), REQUEST_MAX_SLEEP, short_for, give_up)?;
    LAST_REQUEST_NS.store(now_ns(), Relaxed);
    let buf = comm::receive_vec(msg, &status);
    Some(wire::decode_request(&buf).map_err(|error| Malformed {
        ids: peek_ids(&buf),
        error,
    }))
}

/// The sequence number and data tag of a task frame whose body is damaged.
fn peek_ids(buf: &[u8]) -> Option<(u64, i32)> {
    if buf.len() < 24 || buf[..4] != FRAME_MAGIC.to_le_bytes() {
        return None;
    }
    let seq = u64::from_le_bytes(buf[12..20].try_into().ok()?);
    let tag = u32::from_le_bytes(buf[20..24].try_into().ok()?) as i32;
    (comm::FIRST_DATA_TAG..comm::FIRST_DATA_TAG + comm::DATA_TAGS as i32)
        .contains(&tag)
        .then_some((seq, tag))
}

/// Byte sizes of the task's inputs that travel (shipped IN/INOUT tensors, in order).
pub fn input_sizes(task: &L4Task) -> Vec<usize> {
    shipped(task, true)
}

/// Byte sizes of the task's outputs that travel back (shipped OUT/INOUT, in order).
pub fn output_sizes(task: &L4Task) -> Vec<usize> {
    shipped(task, false)
}

fn shipped(task: &L4Task, inputs: bool) -> Vec<usize> {
    task.args
        .iter()
        .filter_map(|a| match a {
            L4Arg::Shipped(t) if (inputs && t.dir.sent()) || (!inputs && t.dir.returned()) => {
                Some(t.nbytes().unwrap_or(0) as usize)
            }
            _ => None,
        })
        .collect()
}

/// Receive the task's inputs into `bufs` (one per [`input_sizes`] entry, of that size).
pub fn receive_inputs(
    task: &L4Task,
    bufs: &mut [&mut [u8]],
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    let sizes = input_sizes(task);
    if sizes.len() != bufs.len() || sizes.iter().zip(bufs.iter()).any(|(s, b)| *s != b.len()) {
        return Err("the input buffers do not match the task's inputs".into());
    }
    for b in bufs.iter_mut() {
        comm::receive_data(0, task.data_tag, b, give_up)?;
    }
    Ok(())
}

/// Answer a task: its host report (None when the run failed before one), the error
/// (None: it ran), and on success its outputs' bytes (one per [`output_sizes`] entry).
pub fn reply(
    seq: u64,
    data_tag: i32,
    report: Option<&NodeRunReport>,
    error: Option<&str>,
    outputs: &[&[u8]],
) {
    let outputs = if error.is_some() { &[][..] } else { outputs };
    let r = L4Reply {
        seq,
        status: error.is_some() as u32,
        error: error.unwrap_or("").to_string(),
        elapsed_s: report.map_or(0.0, |r| r.elapsed_s),
        chip_tasks: report.map_or_else(Vec::new, |r| r.tasks.clone()),
        n_outputs: outputs.len() as u32,
    };
    let mut buf = vec![0u8; wire::reply_len(&r)];
    let n = wire::encode_reply(&r, &mut buf).expect("a reply fits its computed length");
    buf.truncate(n);
    comm::send_posted(0, data_tag, buf);
    for o in outputs {
        comm::send_data(0, data_tag, o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_busy_for_20_ms_after_a_request() {
        let ms = |m: u64| m * 1_000_000;
        assert_eq!(
            short_sleeps_for(0, ms(5)),
            Duration::ZERO,
            "never had a request"
        );
        assert_eq!(short_sleeps_for(ms(100), ms(100)), BUSY_FOR);
        assert_eq!(short_sleeps_for(ms(100), ms(119)), BUSY_FOR);
        assert_eq!(
            short_sleeps_for(ms(100), ms(120)),
            Duration::ZERO,
            "idle 20 ms"
        );
    }
}
