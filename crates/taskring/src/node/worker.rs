//! A chip: the process (or thread) that serves one chip's tasks — its watchdog (the
//! heartbeat, and the end of the process when its host's pipe closes), start-up (its
//! worker, the prewarm, READY or FAILED) and the loop that answers each request in its
//! mailbox: one L2 task with its whole `CallConfig`, its arena statistics, or a
//! device-memory hold.

use super::mailbox::{self, futex_wake, Mailbox, STATE_FAILED, STATE_READY, STATE_SHUTDOWN};
use super::wire::{self, ReplyFrame, WireArg, WireReport};
use super::{shm, trace, ChipCallable, NodeOptions};
use crate::chip::{Arg, CallerTensor, ChipOptions, ChipWorker, RunError, RunReport};
use crate::config::{CallConfig, RingSizing};
use crate::engine::{Scalar, StatusCode};
use crate::tensor::Tensor;
use parking_lot::RwLock;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::Duration;

/// What a chip (process or thread) needs to serve tasks.
pub(super) struct ChipContext {
    /// This chip's index in the node.
    pub(super) worker: usize,
    pub(super) host_pid: i32,
    pub(super) in_process: bool,
    pub(super) opts: NodeOptions,
    pub(super) callables: Arc<RwLock<Vec<ChipCallable>>>,
    /// Read end of the host pipe (chip processes; -1 for chip threads).
    pub(super) pipe: i32,
    /// A host worker's index (`NodeOptions::host`); None for a chip.
    pub(super) host: Option<usize>,
}

/// Write a start-up failure into the reply buffer and publish FAILED.
pub(super) fn report_start_failure(mb: &Mailbox, text: &str) {
    let r = ReplyFrame {
        status: StatusCode::RuntimeSetup.code(),
        error: text.to_string(),
        report: None,
        stats: None,
    };
    // safety: the chip side owns the reply buffer while starting.
    if let Ok(n) = wire::encode_reply(&r, unsafe { mb.resp_buf() }) {
        mb.header().resp_len.store(n as u32, Release);
    }
    mb.header().state.store(STATE_FAILED, Release);
    futex_wake(&mb.header().state);
}

/// A chip process's watchdog: bumps the heartbeat every [`mailbox::HEARTBEAT`] and
/// `_exit`s the process as soon as the host pipe reads EOF (the host died or closed
/// the node), whatever the chip's other threads are doing.
fn watchdog(mb: Arc<Mailbox>, pipe: i32) {
    let h = mb.header();
    loop {
        let mut p = libc::pollfd {
            fd: pipe,
            events: libc::POLLIN,
            revents: 0,
        };
        // safety: poll on our own fd.
        let r = unsafe { libc::poll(&mut p, 1, mailbox::HEARTBEAT.as_millis() as i32) };
        if r > 0 {
            let mut b = [0u8; 64];
            // safety: read into a local buffer. The host never writes: data or not, a
            // readable pipe here means EOF (or an error) — the host is gone.
            let n = unsafe { libc::read(pipe, b.as_mut_ptr() as *mut libc::c_void, b.len()) };
            if n <= 0
                && !(n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted)
            {
                // safety: ends the process without running anything of it.
                unsafe { libc::_exit(0) };
            }
        }
        h.heartbeat.fetch_add(1, Release);
    }
}

/// Start the watchdog of a worker process (none for a chip thread); false when it could
/// not start (reported as the start failure).
fn start_watchdog(ctx: &ChipContext, mb: &Arc<Mailbox>) -> bool {
    if ctx.pipe >= 0 {
        let m = mb.clone();
        let pipe = ctx.pipe;
        if let Err(e) = std::thread::Builder::new()
            .name("taskring-chip-watchdog".into())
            .spawn(move || watchdog(m, pipe))
        {
            report_start_failure(mb, &format!("could not start the watchdog thread: {e}"));
            return false;
        }
    }
    true
}

/// Wait for the next request (`served` is the last one answered): its frame, or None at
/// shutdown (or when the host is gone).
fn next_request<'m>(ctx: &ChipContext, mb: &'m Mailbox, served: &mut u32) -> Option<&'m [u8]> {
    let h = mb.header();
    // safety: getppid has no preconditions and cannot fail.
    let host_gone = || !ctx.in_process && unsafe { libc::getppid() } != ctx.host_pid;
    let last = *served;
    let ok = mailbox::wait_until_spun(
        &h.req_seq,
        Some(&h.req_sleeping),
        || h.req_seq.load(Acquire) != last || h.state.load(Acquire) == STATE_SHUTDOWN,
        || host_gone() || h.state.load(Acquire) == STATE_SHUTDOWN,
        Duration::from_millis(500),
        &mailbox::REQUEST_SPIN,
    );
    if !ok || h.state.load(Acquire) == STATE_SHUTDOWN {
        return None;
    }
    *served = h.req_seq.load(Acquire);
    let len = (h.req_len.load(Acquire) as usize).min(mailbox::FRAME_BYTES);
    // safety: the host wrote the request before publishing req_seq (acquired above)
    // and does not touch it until we reply.
    Some(unsafe { &mb.req_buf()[..len] })
}

/// Publish `reply` to request `served` (a reply too big for the frame becomes its
/// encoding error).
fn publish_reply(mb: &Mailbox, served: u32, reply: &ReplyFrame) {
    let h = mb.header();
    // safety: we own the reply buffer until we publish resp_seq.
    let n = match wire::encode_reply(reply, unsafe { mb.resp_buf() }) {
        Ok(n) => n,
        Err(e) => wire::encode_reply(
            &ReplyFrame {
                status: StatusCode::RuntimeSetup.code(),
                error: format!("cannot encode the reply: {e}"),
                report: None,
                stats: None,
            },
            // safety: as above: the reply buffer is ours until we publish resp_seq.
            unsafe { mb.resp_buf() },
        )
        .unwrap_or(0),
    };
    h.resp_len.store(n as u32, Release);
    mailbox::publish(&h.resp_seq, served, &h.resp_sleeping);
}

/// A host worker's life (`NodeOptions::host`): its start hook, READY, then each task
/// through its entry until shutdown, then its stop hook. Returns an exit code.
pub(super) fn host_main(ctx: ChipContext, mb: &Arc<Mailbox>, index: usize) -> i32 {
    let Some(hw) = ctx.opts.host.clone() else {
        report_start_failure(mb, "no host workers are configured");
        return 1;
    };
    if !start_watchdog(&ctx, mb) {
        return 1;
    }
    if let Some(start) = &hw.start {
        if let Err(e) = start(index) {
            report_start_failure(mb, &e);
            return 1;
        }
    }
    let h = mb.header();
    h.state.store(STATE_READY, Release);
    futex_wake(&h.state);
    // What it maps, its own children (a host worker that is a node) may be handed.
    let mut regions = shm::RegionMap::exporting(ctx.host_pid);
    let mut served = 0u32;
    while let Some(req) = next_request(&ctx, mb, &mut served) {
        let reply = match wire::request_kind(req) {
            Ok(wire::KIND_STATS) | Ok(wire::KIND_HOLD) => failed_reply(
                StatusCode::InvalidArgs,
                "a host worker has no device memory or arenas".into(),
            ),
            _ => match wire::decode_task(req) {
                Err(e) => failed_reply(StatusCode::InvalidArgs, format!("bad task frame: {e}")),
                Ok(task) => match host_args(&mut regions, &task.args) {
                    Err(e) => failed_reply(StatusCode::InvalidArgs, e),
                    Ok(args) => {
                        let call = super::HostCall {
                            worker: index,
                            callable: task.callable,
                            args: &args,
                            config: &task.config,
                        };
                        match (hw.entry)(&call) {
                            Ok(()) => ReplyFrame {
                                status: 0,
                                error: String::new(),
                                report: None,
                                stats: None,
                            },
                            Err(e) => failed_reply(StatusCode::TaskFailed, e),
                        }
                    }
                },
            },
        };
        publish_reply(mb, served, &reply);
    }
    if let Some(stop) = &hw.stop {
        let _ = stop(index);
    }
    0
}

/// A host worker's task arguments in its process: tensors in shared memory mapped as a
/// chip maps them, the others (region 0) at the address they have in the host.
fn host_args(
    regions: &mut shm::RegionMap,
    wire: &[WireArg],
) -> Result<Vec<super::HostArg>, String> {
    let mut args = Vec::with_capacity(wire.len());
    for (i, a) in wire.iter().enumerate() {
        args.push(match a {
            WireArg::Int(v) => super::HostArg::Int(*v),
            WireArg::Float(v) => super::HostArg::Float(*v),
            WireArg::Tensor(w) if w.region == 0 => {
                super::HostArg::Tensor(view_at(w.offset_bytes, 0, w))
            }
            WireArg::Tensor(w) => {
                let base = regions
                    .resolve(w.region, w.region_bytes)
                    .map_err(|e| format!("argument {i}: {e}"))?;
                super::HostArg::Tensor(view_at(base, w.offset_bytes, w))
            }
        });
    }
    Ok(args)
}

/// The view `w` describes, over a buffer at `base` in this process whose element
/// `[0, ...]` is `offset_bytes` in.
fn view_at(base: u64, offset_bytes: u64, w: &wire::WireTensor) -> Tensor {
    let mut t = Tensor::from_raw(base, &[1], w.dtype);
    t.buf_bytes = w.region_bytes;
    t.offset = offset_bytes / w.dtype.size_bytes() as u64;
    t.ndims = w.ndims;
    t.shape = w.shape;
    t.strides = w.strides;
    t
}

/// A chip's life: build, prewarm, report, serve until shutdown. Returns an exit code.
pub(super) fn chip_main(ctx: ChipContext, mb: &Arc<Mailbox>) -> i32 {
    // Over 80 lines: a chip's whole life in order (watchdog, worker, prewarm, READY,
    // the serve loop with its heartbeat); each phase is a few lines around a call.
    let h = mb.header();
    if !start_watchdog(&ctx, mb) {
        return 1;
    }
    let mut sizings = vec![];
    if let Some(c) = &ctx.opts.prewarm {
        match RingSizing::resolve_from_process(&c.runtime_env) {
            Ok(s) => sizings.push(s),
            Err(e) => {
                report_start_failure(mb, &e.message);
                return 1;
            }
        }
    }
    let copts = ChipOptions {
        cores: ctx.opts.chip_cores,
        arena_cache_slots: ctx.opts.arena_cache_slots,
        prewarm: if ctx.opts.prewarm_if_fits {
            vec![]
        } else {
            sizings.clone()
        },
        prewarm_if_fits: if ctx.opts.prewarm_if_fits {
            sizings
        } else {
            vec![]
        },
        device_memory: ctx.opts.device_memory,
        ..ChipOptions::default()
    };
    let mut chip = match ChipWorker::new(copts) {
        Ok(c) => c,
        Err(e) => {
            report_start_failure(mb, &e.to_string());
            return 1;
        }
    };
    h.state.store(STATE_READY, Release);
    futex_wake(&h.state);
    let mut regions = shm::RegionMap::new(ctx.host_pid, ctx.in_process);
    let mut served = 0u32;
    // The serving thread's id for the timeline, asked once (a syscall per reply cost
    // ~0.5 % of a busy chip's time).
    let tid = trace::gettid() as u32;
    loop {
        let Some(req) = next_request(&ctx, mb, &mut served) else {
            return 0;
        };
        let served_ns = trace::mono_ns();
        let (mut reply, trace_t0_ns) = serve(&ctx, &mut chip, &mut regions, req);
        // A kernel this chip gave up on can still write the host's shared memory,
        // which the host hands to other chips and tasks: the chip process ends after
        // this reply, and its kernel with it.
        let stuck = !ctx.in_process && reply.status != 0 && !chip.stuck_kernels().is_empty();
        if stuck {
            reply.error.push_str(
                "; the chip process exits: a kernel it gave up on could still write shared memory",
            );
        }
        h.served_tid.store(tid, Relaxed);
        h.served_ns.store(served_ns, Relaxed);
        h.trace_t0_ns.store(trace_t0_ns, Relaxed);
        h.replied_ns.store(trace::mono_ns(), Relaxed);
        publish_reply(mb, served, &reply);
        if stuck {
            // safety: ends this process at once; the host sees it gone.
            unsafe { libc::_exit(STUCK_KERNEL_EXIT) };
        }
    }
}

/// The exit status of a chip process that ended because a kernel it gave up on could
/// still write shared memory (a status kernels are unlikely to choose; the message
/// still gives the number).
pub(super) const STUCK_KERNEL_EXIT: i32 = 117;

/// Where chip `worker` writes a task's DFX files (scope stats, `deps.json`, its
/// swimlane): `{prefix}/chip{worker}`, so that the chips of a node do not overwrite each
/// other's. A prefix that already ends in that directory is used as it is.
pub fn chip_dir(prefix: &str, worker: usize) -> std::path::PathBuf {
    let p = std::path::Path::new(prefix);
    let name = format!("chip{worker}");
    if p.file_name().is_some_and(|n| n == name.as_str()) {
        p.to_path_buf()
    } else {
        p.join(name)
    }
}

/// Run one request on this chip; with the reply, the start of the swimlane it recorded
/// on `CLOCK_MONOTONIC` (0 for none).
fn serve(
    ctx: &ChipContext,
    chip: &mut ChipWorker,
    regions: &mut shm::RegionMap,
    req: &[u8],
) -> (ReplyFrame, u64) {
    let mut traced = false;
    let r = serve_request(ctx, chip, regions, req, &mut traced);
    let t0 = if traced {
        chip.trace_start().map(trace::instant_ns).unwrap_or(0)
    } else {
        0
    };
    (r, t0)
}

/// Serve one request frame on this chip: arena stats, or one L2 task (its arguments
/// resolved in this chip's mappings, its DFX files sent to the chip's own directory,
/// run, its report or failure as the reply).
fn serve_request(
    ctx: &ChipContext,
    chip: &mut ChipWorker,
    regions: &mut shm::RegionMap,
    req: &[u8],
    traced: &mut bool,
) -> ReplyFrame {
    match wire::request_kind(req) {
        Ok(wire::KIND_STATS) => return stats_reply(chip),
        Ok(wire::KIND_REGISTER) => return register_late(ctx, chip, req),
        Ok(wire::KIND_HOLD) => {
            return match wire::decode_hold_request(req) {
                Ok(bytes) => match chip.hold_resident_tensors(bytes) {
                    Ok(()) => stats_reply(chip),
                    Err(f) => failed_reply(f.code, f.to_string()),
                },
                Err(e) => failed_reply(StatusCode::InvalidArgs, format!("bad hold frame: {e}")),
            }
        }
        _ => {}
    }
    let task = match wire::decode_task(req) {
        Ok(t) => t,
        Err(e) => return failed_reply(StatusCode::InvalidArgs, format!("bad task frame: {e}")),
    };
    let callable = match ctx.callables.read().get(task.callable as usize) {
        Some(c) => c.clone(),
        None => {
            return failed_reply(
                StatusCode::InvalidArgs,
                format!(
                    "unknown callable {} (registered after this chip started?)",
                    task.callable
                ),
            )
        }
    };
    let args = match chip_args(regions, &task.args) {
        Ok(a) => a,
        Err(e) => return failed_reply(StatusCode::InvalidArgs, e),
    };
    let config = chip_config(ctx, task.config, traced);
    let r = chip.run_with_hook(
        &callable.program,
        &args,
        &config,
        ctx.opts
            .blocking_hook
            .as_deref()
            .map(|h| h as &dyn Fn(bool)),
    );
    match r {
        Ok(rep) => report_reply(&rep),
        Err(RunError::Config(e)) => failed_reply(StatusCode::InvalidArgs, e.message),
        Err(RunError::Failure(f)) => failed_reply(f.code, f.to_string()),
    }
}

/// Register a program sent after this chip started, at the index the host gave it
/// (a retry of an index overwrites it); the reply is this chip's statistics.
fn register_late(ctx: &ChipContext, chip: &ChipWorker, req: &[u8]) -> ReplyFrame {
    let (index, desc) = match wire::decode_register_request(req) {
        Ok(r) => r,
        Err(e) => return failed_reply(StatusCode::InvalidArgs, format!("bad register frame: {e}")),
    };
    let Some(rebuild) = &ctx.opts.late_callable else {
        return failed_reply(
            StatusCode::InvalidArgs,
            "this node's chips take no programs registered after they started".into(),
        );
    };
    let callable = match rebuild(desc) {
        Ok(c) => c,
        Err(e) => return failed_reply(StatusCode::InvalidArgs, e),
    };
    let mut reg = ctx.callables.write();
    let i = index as usize;
    if i < reg.len() {
        reg[i] = callable;
    } else if i == reg.len() {
        reg.push(callable);
    } else {
        return failed_reply(
            StatusCode::InvalidArgs,
            format!(
                "program {i} registered out of order (this chip has {})",
                reg.len()
            ),
        );
    }
    stats_reply(chip)
}

/// A reply that carries only a status and its text.
fn failed_reply(status: StatusCode, error: String) -> ReplyFrame {
    ReplyFrame {
        status: status.code(),
        error,
        report: None,
        stats: None,
    }
}

/// The reply to a stats request: this chip's arena cache counters.
fn stats_reply(chip: &ChipWorker) -> ReplyFrame {
    let st = chip.arena_stats();
    ReplyFrame {
        status: 0,
        error: String::new(),
        report: None,
        stats: Some(wire::WireStats {
            builds: st.builds,
            hits: st.hits,
            misses: st.misses,
            evictions: st.evictions,
            build_s: st.build_s,
            resident: st.resident,
        }),
    }
}

/// The reply to a task that ran: its run report on the wire.
fn report_reply(rep: &RunReport) -> ReplyFrame {
    ReplyFrame {
        status: 0,
        error: String::new(),
        report: Some(wire_report(Some(rep))),
        stats: None,
    }
}

/// A task's report on the wire (a chip's reply, a host's reply at L4): the sizing's key
/// and sources and the 12 peak values; all zeros when there is no report.
pub(crate) fn wire_report(rep: Option<&RunReport>) -> WireReport {
    let Some(rep) = rep else {
        return WireReport::default();
    };
    WireReport {
        sizing: rep.ring_sizing.key(),
        sources: rep.ring_sizing.source_codes(),
        peak: rep.peak.to_array(),
        tasks: rep.tasks,
        arena_hit: rep.arena_hit,
        arena_build_s: rep.arena_build_s,
        elapsed_s: rep.elapsed_s,
    }
}

/// A task's arguments in this chip: scalars as they are, tensors resolved in the
/// chip's mappings of the host's regions and validated (bounds, alignment). The error
/// names the argument.
fn chip_args<'a>(regions: &mut shm::RegionMap, wire: &[WireArg]) -> Result<Vec<Arg<'a>>, String> {
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(wire.len());
    for (i, a) in wire.iter().enumerate() {
        match a {
            WireArg::Int(v) => args.push(Arg::Scalar(Scalar::I64(*v))),
            WireArg::Float(v) => args.push(Arg::Scalar(Scalar::F64(*v))),
            WireArg::Tensor(w) => {
                let base = regions
                    .resolve(w.region, w.region_bytes)
                    .map_err(|e| format!("argument {i}: {e}"))?;
                if w.offset_bytes % w.dtype.size_bytes() as u64 != 0 {
                    return Err(format!("argument {i}: misaligned offset"));
                }
                let t = view_at(base, w.offset_bytes, w);
                t.validate().map_err(|e| format!("argument {i}: {e}"))?;
                // safety: the region is mapped for this chip's lifetime and the host
                // keeps the buffer alive while the task runs.
                args.push(Arg::Tensor(unsafe { CallerTensor::from_raw(t) }));
            }
        }
    }
    Ok(args)
}

/// The task's config as this chip runs it: its DFX files go to the chip's own directory
/// (see `chip_dir`), where a stale swimlane must not pass for this task's (`traced`
/// says one will be written).
fn chip_config(ctx: &ChipContext, mut config: CallConfig, traced: &mut bool) -> CallConfig {
    let dfx = config.enable_scope_stats || config.enable_dep_gen || config.enable_chip_swimlane > 0;
    if dfx && !config.output_prefix.is_empty() {
        let dir = chip_dir(&config.output_prefix, ctx.worker);
        if config.enable_chip_swimlane > 0 {
            let _ = std::fs::remove_file(dir.join("merged_swimlane.json"));
            *traced = true;
        }
        config.output_prefix = dir.to_string_lossy().into_owned();
    }
    config
}
