//! Starting a node's chips: each chip's mailbox and host pipe, then the chip as a forked
//! child process or a thread of the host, and the wait until every chip reports READY.

use super::mailbox::{self, Mailbox, STATE_FAILED, STATE_READY, STATE_STARTING};
use super::transport::{host_pipes, Beat, Chip, Ctl};
use super::wire;
use super::worker::{chip_main, host_main, ChipContext};
use super::{ChipCallable, ForkHooks, NodeError, NodeOptions};
use crate::nextlevel::LevelOptions;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::AtomicI32;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The node's own engine: its "cores" are dispatch threads (one per chip unless
/// `node_cores` says), its heaps shared with the chips. Each chip has a *lane* (a ready
/// queue of its own; `min(node_cores, chips)` lanes, chip `w` in lane `w % lanes`) and
/// each dispatch thread serves one lane (thread `i` lane `i % lanes`), so a chip's
/// backlog, or a stopped chip, holds up no thread of another lane. One thread per chip:
/// a chip serves one request at a time, and a second thread of the same chip could
/// only wait for the first's turn (its wake-up at every hand-off cost ~5 µs per task,
/// and two threads per chip without lanes were 25–40 % slower with 2 chips).
pub(super) fn node_engine_options(opts: &NodeOptions) -> LevelOptions {
    let chips = opts.device_ids.len();
    let hosts = host_count(opts);
    let node_cores = if opts.node_cores == 0 {
        chips.max(1)
    } else {
        opts.node_cores
    };
    let chip_lanes = chip_lanes(opts);
    // Host worker `i` has lane `chip_lanes + i` (one task at a time each): with host
    // workers every lane gets the same number of threads, at least one.
    let (threads, lanes) = if hosts == 0 {
        (node_cores, chip_lanes.max(1))
    } else {
        let lanes = chip_lanes + hosts;
        let per_lane = node_cores.div_ceil(chip_lanes.max(1)).max(1);
        (lanes * per_lane, lanes)
    };
    // One node task is a whole L2 dispatch: the level's engine has no L2-sized timeouts
    // (a dead chip is caught by waitpid; a chip's own hangs by the chip's timeouts).
    LevelOptions {
        threads,
        lanes,
        arena_cache_slots: opts.arena_cache_slots,
        // The host's own memory, not a device's.
        device_memory: u64::MAX,
    }
}

/// Host workers of a node.
pub(super) fn host_count(opts: &NodeOptions) -> usize {
    opts.host.as_ref().map_or(0, |h| h.labels.len())
}

/// Lanes of a node's chips: `min(node_cores, chips)`.
pub(super) fn chip_lanes(opts: &NodeOptions) -> usize {
    let chips = opts.device_ids.len();
    let node_cores = if opts.node_cores == 0 {
        chips
    } else {
        opts.node_cores
    };
    node_cores.min(chips)
}

/// Start chip `worker`: its mailbox, its host pipe (chip processes), then the chip
/// itself — a forked child ([`fork_chip`]) or a thread of this process. The chip then
/// builds its worker and reports READY or FAILED in its mailbox ([`wait_chips_ready`]).
/// On an error nothing of this chip is left behind (the caller shuts down the others).
pub(super) fn start_chip(
    worker: usize,
    opts: &NodeOptions,
    callables: &Arc<RwLock<Vec<ChipCallable>>>,
    hooks: &dyn ForkHooks,
    host_pid: i32,
) -> Result<Chip, NodeError> {
    // Host workers (after the chips) are always processes.
    let host = worker.checked_sub(opts.device_ids.len());
    let process = opts.chip_processes || host.is_some();
    let label = host.and_then(|i| opts.host.as_ref().map(|h| h.labels[i].clone()));
    let mb = Arc::new(Mailbox::new().map_err(|e| NodeError::start(worker, "mailbox", e))?);
    let (pipe_r, pipe_w) = if process {
        host_pipes::create()
            .map_err(|e| NodeError::start(worker, format!("host pipe of chip {worker}"), e))?
    } else {
        (-1, -1)
    };
    let ctx = ChipContext {
        worker,
        host_pid,
        in_process: !process,
        opts: opts.clone(),
        callables: callables.clone(),
        pipe: pipe_r,
        host,
    };
    let (pid, thread) = if process {
        let pid = fork_chip(ctx, &mb, hooks, (pipe_r, pipe_w))
            .map_err(|e| NodeError::start(worker, format!("fork of chip {worker}"), e))?;
        (pid, None)
    } else {
        let m = mb.clone();
        let t = std::thread::Builder::new()
            .name(format!("taskring-chip{worker}"))
            .spawn(move || {
                chip_main(ctx, &m);
            })
            .map_err(|e| NodeError::start(worker, "chip thread", e))?;
        (host_pid, Some(t))
    };
    let now = Instant::now();
    Ok(Chip {
        worker,
        label,
        pid,
        process,
        mailbox: mb,
        seq: Mutex::new(0),
        dead: Mutex::new(None),
        held: std::sync::atomic::AtomicU64::new(0),
        alive_at: std::sync::atomic::AtomicU64::new(0),
        thread: Mutex::new(thread),
        pipe: AtomicI32::new(pipe_w),
        beat: Mutex::new(Beat {
            value: 0,
            since: now,
            looked: now,
            stopped: false,
        }),
    })
}

/// Fork a chip process running `chip_main(ctx)`; returns its pid. `pipe` is the host
/// pipe `(read end, write end)`: the child keeps the read end, the host the write end
/// (both closed here if the fork fails).
fn fork_chip(
    ctx: ChipContext,
    mb: &Arc<Mailbox>,
    hooks: &dyn ForkHooks,
    (pipe_r, pipe_w): (i32, i32),
) -> Result<i32, std::io::Error> {
    let host_pid = ctx.host_pid;
    hooks.before();
    // safety: fork; the child runs only `chip_main` and then `_exit`s, never
    // returning into the caller's code or running destructors.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        hooks.after_child();
        // A lock another host thread held at fork() stays locked in the child: std's
        // stderr lock is one the default panic hook takes, so a panicking kernel could
        // hang the chip. Panics are reported through their payload (the task's error
        // text); print nothing here.
        std::panic::set_hook(Box::new(|_| {}));
        // The atfork handler closed every host pipe's write end here (ours too): the
        // chip's watchdog reads EOF when the host dies (module doc). No
        // PR_SET_PDEATHSIG: it fires when the forking *thread* exits, not the host
        // process. Ctrl-C is the host's to handle.
        // safety: signal with SIG_IGN installs no handler code, getppid has no
        // preconditions, and _exit ends the child without running any host code.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            if libc::getppid() != host_pid {
                libc::_exit(1);
            }
        }
        let code = match ctx.host {
            Some(i) => host_main(ctx, mb, i),
            None => chip_main(ctx, mb),
        };
        // safety: _exit ends the forked child at once, running no destructors or atexit
        // handlers of the host's state it inherited.
        unsafe { libc::_exit(code) };
    }
    hooks.after_parent();
    // safety: our own fd; the child has its copy.
    unsafe { libc::close(pipe_r) };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        host_pipes::unregister(pipe_w);
        // safety: our own fd.
        unsafe { libc::close(pipe_w) };
        return Err(e);
    }
    Ok(pid)
}

/// Wait until every chip reported READY, with one deadline `init_timeout` from now (a
/// chip that stops beating fails sooner). The error names the first chip that did not
/// (its own FAILED reason when it gave one).
pub(super) fn wait_chips_ready(
    chips: &[Chip],
    ctl: &Ctl,
    init_timeout: Duration,
) -> Result<(), NodeError> {
    let deadline = Instant::now() + init_timeout;
    for c in chips {
        let h = c.mailbox.header();
        let r = c.wait(
            ctl,
            (&h.state, None),
            || h.state.load(Acquire) != STATE_STARTING,
            Some(deadline),
        );
        let state = h.state.load(Acquire);
        if r.is_ok() && state == STATE_READY {
            continue;
        }
        let fault = if state == STATE_FAILED {
            let len = (h.resp_len.load(Acquire) as usize).min(mailbox::FRAME_BYTES);
            // safety: the chip published FAILED after writing its reason.
            let buf = unsafe { &c.mailbox.resp_buf()[..len] };
            c.fault(
                wire::decode_reply(buf)
                    .map(|r| r.error)
                    .unwrap_or_else(|e| e.to_string()),
            )
        } else if let Err(Some(e)) = r {
            e
        } else {
            c.fault(format!("not ready within {} ms", init_timeout.as_millis()))
        };
        return Err(NodeError::Chip(fault));
    }
    Ok(())
}
