//! A host rank's side of L4: take the next request from rank 0 ([`HostSession`]),
//! receive a task's inputs straight into the buffers its L3 run uses (shared memory the
//! chips see: no second copy on the host), and answer with the report and the outputs
//! ([`receive_inputs`], [`reply`]: they keep no state of their own).
//!
//! A [`HostSession`] is all the state of a serving host: when it last took a request,
//! whether it has one in hand, whether it left, and its watchdog thread. It starts once
//! MPI is up and ends with [`HostSession::finalize`] (or its drop), which stops the
//! watchdog.
//!
//! Liveness: while a host serves, a watchdog thread answers rank 0's pings whatever the
//! serving thread does (a long task, Python holding the GIL), so rank 0 tells a busy
//! host from a stopped one. It looks for pings every [`WATCHDOG_PERIOD`] while the host
//! has a request in hand, and only reads a flag otherwise (rank 0 pings only a host it
//! waits on, which takes its request within [`REQUEST_MAX_SLEEP`]). A host that stops
//! serving on its own says so ([`HostSession::leave`]); the close frame is
//! acknowledged.

use super::transport::{self, TAG_LIVE, TAG_REQUEST};
use super::wire::{self, HostRequest, L4Arg, L4Reply, L4Task};
use crate::node::wire::{FrameError, FRAME_MAGIC};
use crate::node::NodeRunReport;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
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

/// Where host `worker` writes a task's DFX files (its node's scope stats, `deps.json`
/// and timeline, and its chips' `chip{w}/` directories): `{prefix}/host{worker}`, so
/// that hosts given one prefix (on one machine, or one shared file system) do not
/// overwrite each other's. A prefix that already ends in that directory is used as it
/// is.
pub fn host_dir(prefix: &str, worker: usize) -> String {
    let p = std::path::Path::new(prefix);
    let name = format!("host{worker}");
    if p.file_name().is_some_and(|n| n == name.as_str()) {
        prefix.to_string()
    } else {
        p.join(name).to_string_lossy().into_owned()
    }
}

/// Whether a task run with `config` ends with the host's timeline: after a successful
/// reply and its outputs, the host sends its `merged_swimlane.json` (empty when it has
/// none) as one more message with the task's tag, for rank 0's L4 timeline. Rank 0 and
/// the host decide it from the same config (the host's prefix is only longer).
pub fn ships_timeline(config: &crate::config::CallConfig) -> bool {
    config.enable_chip_swimlane > 0 && !config.output_prefix.is_empty()
}

/// Send the host's timeline of the task just answered (see [`ships_timeline`]; the task
/// ran with `config`, its prefix this host's directory).
pub fn send_timeline(data_tag: i32, config: &crate::config::CallConfig) {
    let path = std::path::Path::new(&config.output_prefix).join("merged_swimlane.json");
    let bytes = std::fs::read(path)
        .ok()
        .filter(|b| b.len() <= wire::CHUNK_BYTES)
        .unwrap_or_default();
    transport::send(0, data_tag, &bytes);
}

/// How often the watchdog looks for pings while the host has a request in hand.
pub const WATCHDOG_PERIOD: Duration = Duration::from_millis(20);

/// What a serving host and its watchdog thread share.
#[derive(Default)]
struct Liveness {
    /// The host has a request in hand (from its receipt to the next wait for one).
    busy: AtomicBool,
    /// The host stopped serving ([`HostSession::leave`]).
    left: AtomicBool,
}

/// The thread that answers rank 0's pings (see the module doc).
struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    fn start(live: Arc<Liveness>) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("taskring-l4-watchdog".into())
            .spawn(move || {
                while !stop2.load(Relaxed) {
                    std::thread::sleep(WATCHDOG_PERIOD);
                    let answers =
                        live.busy.load(Relaxed) && !live.left.load(Relaxed) && !stop2.load(Relaxed);
                    if answers {
                        answer_pings();
                    }
                }
            })
            .expect("spawn the L4 watchdog thread");
        Watchdog { stop, thread }
    }

    /// Stop the thread and wait for it.
    fn stop(self) {
        self.stop.store(true, Relaxed);
        let _ = self.thread.join();
    }
}

/// Answer every ping that is there.
fn answer_pings() {
    while let Some(m) = transport::try_receive(0, TAG_LIVE) {
        if m.first() == Some(&transport::LIVE_PING) {
            transport::send_detached(0, TAG_LIVE, &[transport::LIVE_PONG]);
        }
    }
}

/// A host rank serving rank 0's requests: all its state, from [`HostSession::start`]
/// (MPI initialised) to [`HostSession::finalize`].
pub struct HostSession {
    /// This host (0-based; its MPI rank is `worker + 1`).
    worker: usize,
    /// When this host last took a request (nanoseconds on a process-local clock; 0:
    /// never).
    last_request_ns: u64,
    live: Arc<Liveness>,
    /// None: no thread answers pings (a session that only takes requests), or finalized.
    watchdog: Option<Watchdog>,
}

impl HostSession {
    /// Start serving as this process's MPI rank (MPI initialised). With `answer_pings`
    /// (a serving loop), a watchdog thread answers rank 0's pings while the host has a
    /// request in hand, until [`finalize`](Self::finalize).
    pub fn start(answer_pings: bool) -> HostSession {
        let live = Arc::new(Liveness::default());
        HostSession {
            worker: transport::world().rank.max(1) as usize - 1,
            last_request_ns: 0,
            watchdog: answer_pings.then(|| Watchdog::start(live.clone())),
            live,
        }
    }

    /// The next request from rank 0; `None` when `give_up()` said to stop waiting. A task's
    /// `output_prefix` comes back as this host's directory in it ([`host_dir`]); the close
    /// frame is acknowledged (`LIVE_CLOSED` on the liveness tag).
    pub fn next_request(
        &mut self,
        give_up: impl FnMut() -> bool,
    ) -> Option<Result<HostRequest, Malformed>> {
        self.live.busy.store(false, Relaxed);
        let short_for = short_sleeps_for(self.last_request_ns, now_ns());
        let (msg, status) =
            transport::wait_message(0, Some(TAG_REQUEST), REQUEST_MAX_SLEEP, short_for, give_up)?;
        self.live.busy.store(true, Relaxed);
        self.last_request_ns = now_ns();
        let buf = transport::receive_vec(msg, &status);
        let req = wire::decode_request(&buf).map_err(|error| Malformed {
            ids: peek_ids(&buf),
            error,
        });
        Some(req.map(|r| match r {
            HostRequest::Task(mut t) => {
                if !t.config.output_prefix.is_empty() {
                    t.config.output_prefix = host_dir(&t.config.output_prefix, self.worker);
                }
                HostRequest::Task(t)
            }
            HostRequest::Close => {
                transport::send_detached(0, TAG_LIVE, &[transport::LIVE_CLOSED]);
                HostRequest::Close
            }
        }))
    }

    /// This host stops serving on its own (`why`: e.g. `SystemExit: 3`): rank 0 is told
    /// (before the failed task's reply, if any, so that it knows when it reads that
    /// reply), and pings are no longer answered.
    pub fn leave(&mut self, why: &str) {
        self.live.left.store(true, Relaxed);
        let mut m = Vec::with_capacity(1 + why.len());
        m.push(transport::LIVE_LEAVING);
        m.extend_from_slice(why.as_bytes());
        transport::send_detached(0, TAG_LIVE, Box::leak(m.into_boxed_slice()));
    }

    /// The end of serving: the watchdog stops and its thread is joined (before
    /// `MPI_Finalize`).
    pub fn finalize(mut self) {
        self.stop_watchdog();
    }

    fn stop_watchdog(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.stop();
        }
    }
}

impl Drop for HostSession {
    /// A session that ends without [`finalize`](Self::finalize) (an unwinding serving
    /// loop) stops its watchdog all the same.
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}

/// The sequence number and data tag of a task frame whose body is damaged.
fn peek_ids(buf: &[u8]) -> Option<(u64, i32)> {
    if buf.len() < 24 || buf[..4] != FRAME_MAGIC.to_le_bytes() {
        return None;
    }
    let seq = u64::from_le_bytes(buf[12..20].try_into().ok()?);
    let tag = u32::from_le_bytes(buf[20..24].try_into().ok()?) as i32;
    (transport::FIRST_DATA_TAG..transport::FIRST_DATA_TAG + transport::DATA_TAGS as i32)
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
        transport::receive_data(0, task.data_tag, b, give_up)?;
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
    transport::send_posted(0, data_tag, buf);
    for o in outputs {
        transport::send_data(0, data_tag, o);
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
