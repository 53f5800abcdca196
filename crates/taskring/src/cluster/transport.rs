//! The MPI transport of L4 (rsmpi over the system's Open MPI): initialisation with
//! `MPI_THREAD_MULTIPLE`, byte messages, and waits that do not burn a core.
//!
//! Every wait polls `MPI_Improbe` (a *matched* probe: the message it finds can only be
//! received by the thread that found it, so several dispatch threads of rank 0 can
//! wait on their own replies at once) under a [`Backoff`]: a few hundred spins and
//! yields (a reply that is already on its way is picked up within a microsecond or
//! two), then sleeps growing to 1 ms. Open MPI's own blocking receive polls at full
//! speed, which on a 2-core machine would take a core from the chips for as long as a
//! host waits; this costs at most 1 ms of latency after an idle spell.

use mpi::datatype::Equivalence;
use mpi::point_to_point::{Destination, Message, Source, Status};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::Relaxed};
use std::time::Duration;

/// The tag of request frames (tasks, close) from rank 0 to a host.
pub const TAG_REQUEST: i32 = 1;
/// Data and reply tags are taken from `FIRST_DATA_TAG..FIRST_DATA_TAG + DATA_TAGS`
/// (well under the 32767 every MPI supports).
pub const FIRST_DATA_TAG: i32 = 2;
pub const DATA_TAGS: u64 = 30_000;
/// The tag of liveness messages (one byte, then text for [`LIVE_LEAVING`]): rank 0's
/// [`LIVE_PING`]s to a host it waits on, and a host's [`LIVE_PONG`] answers, its
/// [`LIVE_CLOSED`] acknowledgement of the close frame and its [`LIVE_LEAVING`] notice.
/// (`FIRST_DATA_TAG + DATA_TAGS` is B8's bare exchange.)
pub const TAG_LIVE: i32 = FIRST_DATA_TAG + DATA_TAGS as i32 + 1;
/// Rank 0 to a host: are you there?
pub const LIVE_PING: u8 = b'?';
/// A host's answer to a ping (sent by its watchdog thread, whatever its task does).
pub const LIVE_PONG: u8 = b'!';
/// A host's answer to the close frame: it stops serving, as asked.
pub const LIVE_CLOSED: u8 = b'C';
/// A host stops serving on its own (an exception such as `SystemExit` or
/// `KeyboardInterrupt` ended its serving loop); the reason follows as UTF-8.
pub const LIVE_LEAVING: u8 = b'L';

static UNIVERSE: Mutex<Option<mpi::environment::Universe>> = Mutex::new(None);

/// The world's shape, once MPI is initialised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct World {
    pub rank: i32,
    pub size: i32,
}

/// Initialise MPI with `MPI_THREAD_MULTIPLE` (once per process; MPI cannot be
/// initialised again after [`finalize`]).
pub fn init() -> Result<World, String> {
    let mut u = UNIVERSE.lock();
    if u.is_none() {
        if mpi::environment::is_finalized() {
            return Err("MPI was finalized in this process; an L4 worker can be initialised once per process".into());
        }
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or_else(|| {
                "MPI was already initialised by someone else in this process".to_string()
            })?;
        if threading != Threading::Multiple {
            return Err(format!(
                "the MPI library offers {threading:?} threading; L4 needs MPI_THREAD_MULTIPLE"
            ));
        }
        *u = Some(universe);
    }
    Ok(world())
}

/// Whether [`init`] ran (and [`finalize`] did not).
pub fn initialized() -> bool {
    UNIVERSE.lock().is_some()
}

/// This process's rank and the world's size (after [`init`]).
pub fn world() -> World {
    let w = SimpleCommunicator::world();
    World {
        rank: w.rank(),
        size: w.size(),
    }
}

/// Why this process must not call `MPI_Finalize` (set once a host was found not
/// responding: `MPI_Finalize` waits for every rank, so [`finalize`] aborts the job).
static NO_FINALIZE: Mutex<Option<String>> = Mutex::new(None);

/// The job cannot end with `MPI_Finalize` (a rank is lost): [`finalize`] ends it with
/// `MPI_Abort`, saying `why`.
pub fn forbid_finalize(why: String) {
    NO_FINALIZE.lock().get_or_insert(why);
}

/// `MPI_Finalize` (idempotent); or, when a rank was lost (`forbid_finalize`), a line
/// on stderr and `MPI_Abort` of the job, which `MPI_Finalize` would wait for forever. A
/// host's serving session has ended before (`HostSession::finalize` stops its watchdog,
/// the only thread of it that uses MPI).
pub fn finalize() {
    if initialized() {
        if let Some(why) = NO_FINALIZE.lock().clone() {
            eprintln!("taskring: {why}; ending the job with MPI_Abort (MPI_Finalize would wait for that rank)");
            abort(1);
        }
        // Rank 0 has taken every reply of a host it closed; a host that left on its own
        // may have sent one that rank 0 no longer waits for.
        if !complete_posted_within(Duration::from_secs(2)) {
            eprintln!(
                "taskring: a reply to rank 0 was not taken within 2 s; finalizing without it"
            );
        }
    }
    drop(UNIVERSE.lock().take());
}

/// Finalize MPI when this process exits, with its exit status in hand (rank 0; glibc's
/// `on_exit`, which runs after the embedding's own exit handlers — Python's `atexit`,
/// where rank 0 closes its worker): status 0 is [`finalize`]; any other status (an
/// uncaught exception, `sys.exit(n)`) is a line on stderr and `MPI_Abort(status)`.
/// `MPI_Finalize` waits for every rank, and a host that rank 0 failed to serve may be
/// waiting for rank 0 in turn (B8's host waits for its bare ping-pong): only an abort
/// ends that job. Returns false where `on_exit` does not exist (then the embedding
/// finalizes in its own exit handler, as a host does).
pub fn finalize_at_exit() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn on_exit(
                f: extern "C" fn(libc::c_int, *mut libc::c_void),
                arg: *mut libc::c_void,
            ) -> libc::c_int;
        }
        extern "C" fn at_exit(status: libc::c_int, _: *mut libc::c_void) {
            end_at_exit(status);
        }
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        let mut ok = true;
        REGISTERED.call_once(|| {
            OWNER_PID.store(std::process::id() as i32, Relaxed);
            // safety: `at_exit` is a plain function with no captured state; glibc calls
            // it once, from `exit`.
            ok = unsafe { on_exit(at_exit, std::ptr::null_mut()) } == 0;
        });
        ok
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// The process that registered [`finalize_at_exit`] or [`say_at_sigterm`]: a child it
/// forks inherits both, and must neither finalize nor speak for it.
static OWNER_PID: AtomicI32 = AtomicI32::new(0);

fn is_owner() -> bool {
    // safety: getpid has no preconditions (and is async-signal-safe).
    OWNER_PID.load(Relaxed) == unsafe { libc::getpid() }
}

/// What [`finalize_at_exit`] does at the exit with `status`.
fn end_at_exit(status: i32) {
    if !initialized() || !is_owner() {
        return;
    }
    if status != 0 {
        let rank = world().rank;
        eprintln!(
            "taskring: rank {rank} is exiting with status {status} (an uncaught exception or \
             sys.exit) with MPI initialised; ending the job with MPI_Abort (the other ranks \
             may be waiting for this one)"
        );
        abort(status);
    }
    finalize();
}

/// What rank 0 prints when SIGTERM comes ([`say_at_sigterm`]).
pub const SIGTERM_TEXT: &str =
    "taskring: rank 0 got SIGTERM: the job is being ended (by mpirun when \
another rank died or the launch was stopped, or by a batch system); in mpirun's messages rank r is \
host r-1\n";

/// Rank 0 says why it ends when SIGTERM comes, then dies of it as it would have. When a
/// rank dies, mpirun ends the job with SIGCONT, SIGTERM and (to a rank still there)
/// SIGKILL, `odls_base_sigkill_timeout` seconds apart — at once when that is 0. The line
/// is written by the signal handler itself (`write(2)`, async-signal-safe), whatever
/// rank 0's main thread is doing: a Python-level handler runs only when the main thread
/// next looks at its signals, and missed the line in 2 of 4 tries with a 1 s timeout.
/// Only when SIGTERM has its default action (a handler of the script's own stays);
/// false otherwise.
pub fn say_at_sigterm() -> bool {
    extern "C" fn on_term(_: libc::c_int) {
        // safety: write, signal and raise are async-signal-safe; the text is static.
        unsafe {
            if is_owner() && !ABORTING.load(Relaxed) {
                libc::write(2, SIGTERM_TEXT.as_ptr().cast(), SIGTERM_TEXT.len());
            }
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::raise(libc::SIGTERM);
        }
    }
    // safety: sigaction with a zeroed struct and an empty mask is the documented way to
    // read and to set a disposition; `on_term` is a plain function.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return false;
        }
        OWNER_PID.store(libc::getpid(), Relaxed);
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_term as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(libc::SIGTERM, &new, std::ptr::null_mut()) == 0
    }
}

/// Set by [`abort`]: the job ends by this process's own doing, and the SIGTERM that
/// mpirun then sends it is no news ([`say_at_sigterm`] stays silent).
static ABORTING: AtomicBool = AtomicBool::new(false);

/// `MPI_Abort` of the whole job.
pub fn abort(code: i32) -> ! {
    ABORTING.store(true, Relaxed);
    SimpleCommunicator::world().abort(code)
}

/// Send `bytes` to `dest` with `tag` (blocking standard send; `bytes` ≤ 2 GiB).
pub fn send(dest: i32, tag: i32, bytes: &[u8]) {
    debug_assert!(bytes.len() <= i32::MAX as usize);
    SimpleCommunicator::world()
        .process_at_rank(dest)
        .send_with_tag(bytes, tag);
}

/// Send `bytes` to `dest` with `tag`, waiting until the send completed or `give_up()`
/// says to stop (checked between tests of the send; false: the send is abandoned —
/// `MPI_Request_free`, so MPI may still read `bytes` later: the caller leaks an owned
/// buffer, and gives up only on a rank that is lost). A blocking `MPI_Send` would wait
/// forever for a rank that is stopped: beyond Open MPI's shared-memory fast path a send
/// completes only when the receiver takes the message. A small message completes at
/// once (`MPI_Isend` sends it inline).
pub fn send_until(dest: i32, tag: i32, bytes: &[u8], mut give_up: impl FnMut() -> bool) -> bool {
    debug_assert!(bytes.len() <= i32::MAX as usize);
    // safety: the request is completed below, or freed only when the caller gives up
    // (see the doc: the buffer then stays the caller's concern).
    let data: &'static [u8] = unsafe { std::mem::transmute::<&[u8], &'static [u8]>(bytes) };
    let mut request = SimpleCommunicator::world()
        .process_at_rank(dest)
        .immediate_send_with_tag(mpi::request::StaticScope, data, tag);
    let mut b = Backoff::new(Duration::from_millis(1), Backoff::EXPECTED);
    loop {
        match request.test() {
            Ok(_) => return true,
            Err(r) => request = r,
        }
        if give_up() {
            free_request(request);
            return false;
        }
        b.snooze();
    }
}

/// Send a short message and never wait for it (liveness messages: `bytes` stay valid).
pub fn send_detached(dest: i32, tag: i32, bytes: &'static [u8]) {
    let request = SimpleCommunicator::world()
        .process_at_rank(dest)
        .immediate_send_with_tag(mpi::request::StaticScope, bytes, tag);
    free_request(request);
}

/// `MPI_Request_free` of a send that may still be under way (MPI completes it on its
/// own; its buffer must stay valid).
fn free_request(request: mpi::request::Request<'static, [u8], mpi::request::StaticScope>) {
    // safety: the request is live and freed once; its buffer is 'static (or the
    // caller's concern, see `send_until`).
    unsafe {
        let (mut raw, _, _) = request.into_raw();
        mpi::ffi::MPI_Request_free(&mut raw);
    }
}

/// A message sent by [`send_posted`] whose send may not have completed: its request and
/// its buffer (a leaked box, taken back once the request completes).
struct Posted {
    request: mpi::request::Request<'static, [u8], mpi::request::StaticScope>,
    buf: *mut [u8],
}

// safety: the request and the buffer belong to no thread (MPI_THREAD_MULTIPLE: any
// thread may complete a request), and only the holder of `POSTED`'s lock touches them.
unsafe impl Send for Posted {}

static POSTED: Mutex<Option<Posted>> = Mutex::new(None);

/// Send `bytes` to `dest` with `tag` without waiting for the send to complete
/// (`MPI_Isend`): Open MPI's shared-memory transport completes even a small send only
/// when the receiver has taken it, so a blocking `MPI_Send` of a host's reply held the
/// host until rank 0's next poll, and then until the host's own progress saw it — a few
/// microseconds in which the host could already be waiting for its next request. At
/// most one such send is outstanding: the previous one is completed first (by then it
/// long has). Messages to one rank with one tag still arrive in the order they were
/// sent (MPI's non-overtaking rule covers immediate sends).
pub fn send_posted(dest: i32, tag: i32, bytes: Vec<u8>) {
    complete_posted();
    let buf: &'static mut [u8] = Box::leak(bytes.into_boxed_slice());
    let ptr: *mut [u8] = buf;
    // safety: `buf` is freed only after the request completed (`complete_posted`).
    let request = SimpleCommunicator::world()
        .process_at_rank(dest)
        .immediate_send_with_tag(mpi::request::StaticScope, unsafe { &*ptr }, tag);
    *POSTED.lock() = Some(Posted { request, buf: ptr });
}

/// Complete the outstanding [`send_posted`] send, if any, and free its buffer.
pub fn complete_posted() {
    if let Some(p) = POSTED.lock().take() {
        p.request.wait_without_status();
        // safety: leaked by `send_posted`; the send completed, MPI no longer reads it.
        drop(unsafe { Box::from_raw(p.buf) });
    }
}

/// [`complete_posted`] waiting at most `limit`; false: the send was abandoned (its
/// buffer leaked: MPI may still read it).
fn complete_posted_within(limit: Duration) -> bool {
    let Some(p) = POSTED.lock().take() else {
        return true;
    };
    let t0 = std::time::Instant::now();
    let mut request = p.request;
    let mut b = Backoff::new(Duration::from_millis(1), Duration::ZERO);
    loop {
        match request.test() {
            Ok(_) => {
                // safety: leaked by `send_posted`; the send completed.
                drop(unsafe { Box::from_raw(p.buf) });
                return true;
            }
            Err(r) => request = r,
        }
        if t0.elapsed() >= limit {
            free_request(request);
            return false;
        }
        b.snooze();
    }
}

/// Send a tensor's bytes in [`super::wire::chunks`].
pub fn send_data(dest: i32, tag: i32, bytes: &[u8]) {
    for c in super::wire::chunks(bytes.len()) {
        send(dest, tag, &bytes[c]);
    }
}

/// [`send_data`] with [`send_until`]'s give-up (false: given up).
pub fn send_data_until(
    dest: i32,
    tag: i32,
    bytes: &[u8],
    give_up: &mut dyn FnMut() -> bool,
) -> bool {
    super::wire::chunks(bytes.len()).all(|c| send_until(dest, tag, &bytes[c], &mut *give_up))
}

/// The next message from `source` with `tag`, if one is there (no wait).
pub fn try_receive(source: i32, tag: i32) -> Option<Vec<u8>> {
    let (msg, status) = SimpleCommunicator::world()
        .process_at_rank(source)
        .immediate_matched_probe_with_tag(tag)?;
    Some(receive_vec(msg, &status))
}

/// Spin briefly, then yield the core for up to [`Backoff::YIELD_FOR`], then sleep: 50 µs
/// sleeps for `short_for` ([`Backoff::EXPECTED`] for a message that is on its way, zero
/// for one that may never come), then doubling to `max`. Yielding is what
/// keeps a busy exchange fast on an oversubscribed machine (a reply usually comes within
/// a few hundred microseconds, and `sched_yield` hands the core to whoever is runnable,
/// e.g. the chips computing that reply); sleeping is what keeps an idle host cheap. The
/// short sleeps first, for rank 0's replies and the data of a transfer under way: such a
/// wait outlasts the yields only because the machine is busy, and sleeping long then
/// makes the other side, which waits on this one, sleep long too — B8's throughput fell
/// into such a mode (0.4–11 k L4 tasks/s from launch to launch). Not for a host waiting
/// for requests: an idle host waking every 50 µs for 20 ms slowed B8's round trip.
pub struct Backoff {
    n: u32,
    start: Option<std::time::Instant>,
    sleep: Duration,
    max: Duration,
    short_for: Duration,
}

impl Backoff {
    const SPINS: u32 = 64;
    /// How long a waiter yields before it starts to sleep.
    pub const YIELD_FOR: Duration = Duration::from_micros(500);
    /// How long a waiter for an expected message sleeps 50 µs at a time before its
    /// sleeps grow.
    pub const EXPECTED: Duration = Duration::from_millis(20);

    pub fn new(max: Duration, short_for: Duration) -> Self {
        Backoff {
            n: 0,
            start: None,
            sleep: Duration::from_micros(50),
            max,
            short_for,
        }
    }

    pub fn snooze(&mut self) {
        self.n = self.n.saturating_add(1);
        if self.n <= Self::SPINS {
            std::hint::spin_loop();
            return;
        }
        let start = *self.start.get_or_insert_with(std::time::Instant::now);
        match self.pause(start.elapsed(), yield_for()) {
            Pause::Yield => std::thread::yield_now(),
            Pause::Sleep(d) => std::thread::sleep(d),
        }
    }

    /// The pause after the spins, `waited` into them (yields for `yield_for`): a yield,
    /// or a sleep — and the next sleep's length.
    fn pause(&mut self, waited: Duration, yield_for: Duration) -> Pause {
        if waited < yield_for {
            return Pause::Yield;
        }
        let d = self.sleep;
        if waited >= self.short_for {
            self.sleep = (self.sleep * 2).min(self.max);
        }
        Pause::Sleep(d)
    }
}

/// What [`Backoff::snooze`] does after its spins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pause {
    Yield,
    Sleep(Duration),
}

fn yield_for() -> Duration {
    static V: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var("TASKRING_L4_YIELD_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros)
            .unwrap_or(Backoff::YIELD_FOR)
    })
}

/// Wait for a message from `source` with `tag` (`None`: any tag) until `give_up()`
/// says to stop (checked between polls); the found message is this caller's.
pub fn wait_message(
    source: i32,
    tag: Option<i32>,
    max_sleep: Duration,
    short_for: Duration,
    mut give_up: impl FnMut() -> bool,
) -> Option<(Message, Status)> {
    let world = SimpleCommunicator::world();
    let p = world.process_at_rank(source);
    let mut b = Backoff::new(max_sleep, short_for);
    loop {
        let found = match tag {
            Some(t) => p.immediate_matched_probe_with_tag(t),
            None => p.immediate_matched_probe(),
        };
        if found.is_some() {
            return found;
        }
        if give_up() {
            return None;
        }
        b.snooze();
    }
}

/// Receive `buf.len()` bytes from `source` with `tag` with MPI's own blocking receive
/// (Open MPI polls at full speed meanwhile): the bare baseline of B8 (through
/// `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn receive_blocking(source: i32, tag: i32, buf: &mut [u8]) {
    let world = SimpleCommunicator::world();
    for c in super::wire::chunks(buf.len()) {
        let (msg, _) = world.process_at_rank(source).matched_probe_with_tag(tag);
        msg.matched_receive_into(&mut buf[c]);
    }
}

/// The byte count of a probed message.
pub fn count(status: &Status) -> usize {
    status.count(u8::equivalent_datatype()).max(0) as usize
}

/// Receive a probed message into `buf` (exactly its size).
pub fn receive_into(msg: Message, buf: &mut [u8]) {
    msg.matched_receive_into(buf);
}

/// Receive a probed message as a new buffer.
pub fn receive_vec(msg: Message, status: &Status) -> Vec<u8> {
    let mut v = vec![0u8; count(status)];
    msg.matched_receive_into(&mut v[..]);
    v
}

/// Receive a tensor's data from `source` (sent by [`send_data`] with `tag`) into `buf`.
/// A message of the wrong size is an error (the buffer is left partly written).
pub fn receive_data(
    source: i32,
    tag: i32,
    buf: &mut [u8],
    give_up: &mut dyn FnMut() -> bool,
) -> Result<(), String> {
    let len = buf.len();
    for c in super::wire::chunks(len) {
        let (msg, status) = wait_message(
            source,
            Some(tag),
            Duration::from_millis(1),
            Backoff::EXPECTED,
            &mut *give_up,
        )
        .ok_or_else(|| "interrupted".to_string())?;
        let n = count(&status);
        if n != c.len() {
            // Take the message off the queue, then report the mismatch.
            drop(receive_vec(msg, &status));
            return Err(format!(
                "a data message of {n} bytes arrived where {} were expected (of a {len}-byte tensor)",
                c.len()
            ));
        }
        receive_into(msg, &mut buf[c]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeps(b: &mut Backoff, at_ms: &[u64]) -> Vec<u64> {
        at_ms
            .iter()
            .map(
                |&t| match b.pause(Duration::from_millis(t), Backoff::YIELD_FOR) {
                    Pause::Sleep(d) => d.as_micros() as u64,
                    Pause::Yield => 0,
                },
            )
            .collect()
    }

    #[test]
    fn yields_first_then_sleeps_that_grow_to_the_cap() {
        let mut b = Backoff::new(Duration::from_micros(300), Duration::ZERO);
        assert_eq!(
            b.pause(Duration::from_micros(499), Backoff::YIELD_FOR),
            Pause::Yield
        );
        assert_eq!(
            sleeps(&mut b, &[1, 1, 1, 1, 1]),
            vec![50, 100, 200, 300, 300]
        );
    }

    #[test]
    fn an_expected_message_is_waited_for_in_short_sleeps_first() {
        let mut b = Backoff::new(Duration::from_millis(1), Backoff::EXPECTED);
        // Short sleeps for 20 ms of waiting, then growth to the cap.
        assert_eq!(sleeps(&mut b, &[1, 5, 19]), vec![50, 50, 50]);
        assert_eq!(
            sleeps(&mut b, &[20, 21, 22, 23, 24, 25]),
            vec![50, 100, 200, 400, 800, 1000]
        );
    }
}
