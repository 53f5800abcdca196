//! The L4 frames between rank 0 and a host rank, in the node's frame format
//! ([`crate::node::wire`]: the same header, the same `CallConfig` encoding).
//!
//! ```text
//! task   : seq u64, data_tag i32, callable u32, name_len u16, name bytes,
//!          config (as in a chip task: thread count, DFX flags, 12 ring values, prefix),
//!          n_args u32, per arg: kind u8 (1 shipped tensor, 4 host-resident tensor,
//!          2 int, 3 float); a tensor: dir u8 (0 in, 1 out, 2 inout), dtype u8,
//!          ndims u8, shape [u64; ndims], and for a resident one its id u64;
//!          a scalar: bits u64
//! close  : empty body
//! reply  : seq u64, status u32 (0 ok), error_len u32, error, elapsed_s f64,
//!          n_chip_tasks u32, per chip task: worker u32, callable u32, has_report u8,
//!          then the chip's run report (sizing, peak, sources, tasks, arena_hit, times;
//!          zeros when has_report is 0),
//!          has_error u8, error_len u32, error; n_outputs u32
//! ```
//!
//! Ring values, shapes, resident ids, report sizes, peaks and task counts are LEB128
//! integers here (`Ints::Var`: a frame of more than ~250 bytes leaves Open MPI's
//! shared-memory fast path); the chip mailbox's frames keep them 8 bytes wide.
//!
//! After a task frame rank 0 sends the data of each shipped IN/INOUT tensor, in argument
//! order, with the frame's `data_tag`; after a reply the host sends the data of each
//! shipped OUT/INOUT tensor (`n_outputs` of them; none when the task failed) with the
//! same tag. A tensor of more than [`CHUNK_BYTES`] goes in several messages.
//!
//! Decoding never panics and bounds every count: a malformed frame is a
//! [`FrameError`], which fails that task (never the host).

use crate::config::CallConfig;
use crate::node::wire::{
    dtype_of, finish, get_config, get_report, header, open, put_config, put_report, FrameError,
    Ints, MAX_ERROR_BYTES, MAX_PREFIX_BYTES, R, VAR_MAX_BYTES, W,
};
use crate::node::{ChipTaskReport, NodeRunReport};
use crate::tensor::DType;

pub const KIND_L4_TASK: u16 = 16;
pub const KIND_L4_CLOSE: u16 = 17;
pub const KIND_L4_REPLY: u16 = 18;
/// Most dimensions an L4 tensor argument has (as a chip tensor).
pub const MAX_L4_DIMS: usize = crate::tensor::MAX_DIMS;
/// Most arguments of one L4 task.
pub const MAX_L4_ARGS: usize = 4096;
/// Most chip tasks one reply reports.
pub const MAX_L4_CHIP_TASKS: usize = 1 << 20;
/// Longest program name a task frame carries.
pub const MAX_NAME_BYTES: usize = 256;
/// Largest single data message; a bigger tensor goes in several (MPI counts are `int`).
pub const CHUNK_BYTES: usize = 1 << 30;

/// How an L4 task uses a tensor argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4Dir {
    In = 0,
    Out = 1,
    InOut = 2,
}

impl L4Dir {
    /// Rank 0 ships its data to the host before the task.
    pub fn sent(self) -> bool {
        self != L4Dir::Out
    }
    /// The host ships its data back after the task.
    pub fn returned(self) -> bool {
        self != L4Dir::In
    }
}

/// A tensor argument's type and shape (row-major, contiguous).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L4Tensor {
    pub dir: L4Dir,
    pub dtype: DType,
    pub shape: Vec<u64>,
}

impl L4Tensor {
    /// Its size in bytes (None when it overflows).
    pub fn nbytes(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(self.dtype.size_bytes() as u64, |acc, &d| acc.checked_mul(d))
    }
}

/// One argument of an L4 task.
#[derive(Clone, Debug, PartialEq)]
pub enum L4Arg {
    /// A rank-0 array: its data travels with the task (and back, for outputs).
    Shipped(L4Tensor),
    /// A tensor that lives on the host (`alloc_tensor(..., worker=h)`), by id.
    Resident(L4Tensor, u64),
    Int(i64),
    Float(f64),
}

/// One L4 task for a host.
#[derive(Clone, Debug, PartialEq)]
pub struct L4Task {
    /// Rank 0's sequence number of the dispatch (the reply carries it back).
    pub seq: u64,
    /// The tag of the task's data messages and of its reply.
    pub data_tag: i32,
    /// Index of the registered `DistributedProgram` (the same on every rank).
    pub callable: u32,
    /// Its name, checked by the host (a mismatch means the ranks registered differently).
    pub name: String,
    pub config: CallConfig,
    pub args: Vec<L4Arg>,
}

/// A host's answer to one L4 task.
#[derive(Clone, Debug, PartialEq)]
pub struct L4Reply {
    pub seq: u64,
    /// 0 when the task ran; else it failed with `error`.
    pub status: u32,
    pub error: String,
    /// The host's own report of its L3 run (its chip tasks).
    pub elapsed_s: f64,
    pub chip_tasks: Vec<ChipTaskReport>,
    /// Data messages that follow (one per returned tensor; 0 when the task failed).
    pub n_outputs: u32,
}

impl L4Reply {
    /// The host's run report.
    pub fn report(&self) -> NodeRunReport {
        NodeRunReport {
            tasks: self.chip_tasks.clone(),
            elapsed_s: self.elapsed_s,
        }
    }
}

fn put_str(w: &mut W<'_>, s: &str, max: usize) -> Result<(), FrameError> {
    let mut cut = s.len().min(max);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    w.u32(cut as u32)?;
    w.put(&s.as_bytes()[..cut])
}

fn get_str(r: &mut R<'_>, max: usize, what: &str) -> Result<String, FrameError> {
    let n = r.u32()? as usize;
    if n > max {
        return Err(FrameError::Field(format!("{what} length {n}")));
    }
    String::from_utf8(r.take(n)?.to_vec())
        .map_err(|_| FrameError::Field(format!("{what} is not UTF-8")))
}

fn put_tensor(w: &mut W<'_>, t: &L4Tensor) -> Result<(), FrameError> {
    if t.shape.is_empty() || t.shape.len() > MAX_L4_DIMS {
        return Err(FrameError::Field(format!("{} dimensions", t.shape.len())));
    }
    w.u8(t.dir as u8)?;
    w.u8(t.dtype as u8)?;
    w.u8(t.shape.len() as u8)?;
    for d in &t.shape {
        w.var(*d)?;
    }
    Ok(())
}

fn get_tensor(r: &mut R<'_>) -> Result<L4Tensor, FrameError> {
    let dir = match r.u8()? {
        0 => L4Dir::In,
        1 => L4Dir::Out,
        2 => L4Dir::InOut,
        d => return Err(FrameError::Field(format!("direction {d}"))),
    };
    let dtype = dtype_of(r.u8()?)?;
    let ndims = r.u8()? as usize;
    if ndims == 0 || ndims > MAX_L4_DIMS {
        return Err(FrameError::Field(format!("ndims {ndims}")));
    }
    let mut shape = Vec::with_capacity(ndims);
    for _ in 0..ndims {
        shape.push(r.var()?);
    }
    let t = L4Tensor { dir, dtype, shape };
    // A tensor's bytes must be addressable here (the host allocates them).
    match t.nbytes() {
        Some(n) if n <= isize::MAX as u64 => Ok(t),
        _ => Err(FrameError::Field(format!(
            "tensor of shape {:?} is too large",
            t.shape
        ))),
    }
}

/// Encode an L4 task frame into `buf`; returns its length.
pub fn encode_task(t: &L4Task, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut w = W { buf, at: 0 };
    header(&mut w, KIND_L4_TASK)?;
    w.u64(t.seq)?;
    w.u32(t.data_tag as u32)?;
    w.u32(t.callable)?;
    let name = t.name.as_bytes();
    if name.len() > MAX_NAME_BYTES {
        return Err(FrameError::Field(format!(
            "program name of {} bytes",
            name.len()
        )));
    }
    w.u16(name.len() as u16)?;
    w.put(name)?;
    put_config(&mut w, &t.config, Ints::Var)?;
    if t.args.len() > MAX_L4_ARGS {
        return Err(FrameError::Field(format!("{} arguments", t.args.len())));
    }
    w.u32(t.args.len() as u32)?;
    for a in &t.args {
        match a {
            L4Arg::Shipped(ten) => {
                w.u8(1)?;
                put_tensor(&mut w, ten)?;
            }
            L4Arg::Resident(ten, id) => {
                w.u8(4)?;
                put_tensor(&mut w, ten)?;
                w.var(*id)?;
            }
            L4Arg::Int(v) => {
                w.u8(2)?;
                w.u64(*v as u64)?;
            }
            L4Arg::Float(v) => {
                w.u8(3)?;
                w.u64(v.to_bits())?;
            }
        }
    }
    Ok(finish(w))
}

/// Encode the close frame (rank 0 → every host when it closes).
pub fn encode_close(buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut w = W { buf, at: 0 };
    header(&mut w, KIND_L4_CLOSE)?;
    Ok(finish(w))
}

/// What a host receives: a task or the close frame.
#[derive(Clone, Debug, PartialEq)]
pub enum HostRequest {
    Task(L4Task),
    Close,
}

/// Decode what rank 0 sent a host.
pub fn decode_request(buf: &[u8]) -> Result<HostRequest, FrameError> {
    if buf.len() >= 8 && u16::from_le_bytes([buf[6], buf[7]]) == KIND_L4_CLOSE {
        open(buf, KIND_L4_CLOSE)?;
        return Ok(HostRequest::Close);
    }
    let mut r = open(buf, KIND_L4_TASK)?;
    let seq = r.u64()?;
    let data_tag = r.u32()? as i32;
    let callable = r.u32()?;
    let nlen = r.u16()? as usize;
    if nlen > MAX_NAME_BYTES {
        return Err(FrameError::Field(format!("program name length {nlen}")));
    }
    let name = String::from_utf8(r.take(nlen)?.to_vec())
        .map_err(|_| FrameError::Field("program name is not UTF-8".into()))?;
    let config = get_config(&mut r, Ints::Var)?;
    let n = r.u32()? as usize;
    if n > MAX_L4_ARGS {
        return Err(FrameError::Field(format!("{n} arguments")));
    }
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        args.push(match r.u8()? {
            1 => L4Arg::Shipped(get_tensor(&mut r)?),
            4 => {
                let t = get_tensor(&mut r)?;
                L4Arg::Resident(t, r.var()?)
            }
            2 => L4Arg::Int(r.u64()? as i64),
            3 => L4Arg::Float(f64::from_bits(r.u64()?)),
            k => return Err(FrameError::Field(format!("argument kind {k}"))),
        });
    }
    Ok(HostRequest::Task(L4Task {
        seq,
        data_tag,
        callable,
        name,
        config,
        args,
    }))
}

/// A bound on the reply frame's size for `r` (every LEB128 integer at its longest), to
/// size its buffer.
pub fn reply_len(r: &L4Reply) -> usize {
    let chip = |c: &ChipTaskReport| {
        4 + 4
            + 1
            + (12 * 2 + 1) * VAR_MAX_BYTES
            + 12
            + 1
            + 16
            + 1
            + 4
            + c.error.as_ref().map_or(0, |e| e.len().min(MAX_ERROR_BYTES))
    };
    12 + 8
        + 4
        + 4
        + r.error.len().min(MAX_ERROR_BYTES)
        + 8
        + 4
        + r.chip_tasks.iter().map(chip).sum::<usize>()
        + 4
}

/// A bound on the task frame's size for `t` (every LEB128 integer at its longest, the
/// name and prefix at most their limits), to size its buffer.
pub fn task_len(t: &L4Task) -> usize {
    let arg = |a: &L4Arg| match a {
        L4Arg::Shipped(x) => 1 + 3 + x.shape.len() * VAR_MAX_BYTES,
        L4Arg::Resident(x, _) => 1 + 3 + (x.shape.len() + 1) * VAR_MAX_BYTES,
        L4Arg::Int(_) | L4Arg::Float(_) => 1 + 8,
    };
    12 + 8
        + 4
        + 4
        + 2
        + t.name.len().min(MAX_NAME_BYTES)
        + 12
        + 12 * VAR_MAX_BYTES
        + 4
        + t.config.output_prefix.len().min(MAX_PREFIX_BYTES)
        + 4
        + t.args.iter().map(arg).sum::<usize>()
}

/// Encode a host's reply into `buf` (error texts are cut to [`MAX_ERROR_BYTES`]).
pub fn encode_reply(r: &L4Reply, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut w = W { buf, at: 0 };
    header(&mut w, KIND_L4_REPLY)?;
    w.u64(r.seq)?;
    w.u32(r.status)?;
    put_str(&mut w, &r.error, MAX_ERROR_BYTES)?;
    w.u64(r.elapsed_s.to_bits())?;
    w.u32(r.chip_tasks.len() as u32)?;
    for c in &r.chip_tasks {
        w.u32(c.worker as u32)?;
        w.u32(c.callable)?;
        w.u8(c.run.is_some() as u8)?;
        put_report(&mut w, &crate::node::wire_report(c.run.as_ref()), Ints::Var)?;
        w.u8(c.error.is_some() as u8)?;
        put_str(&mut w, c.error.as_deref().unwrap_or(""), MAX_ERROR_BYTES)?;
    }
    w.u32(r.n_outputs)?;
    Ok(finish(w))
}

/// Decode a host's reply.
pub fn decode_reply(buf: &[u8]) -> Result<L4Reply, FrameError> {
    let mut r = open(buf, KIND_L4_REPLY)?;
    let seq = r.u64()?;
    let status = r.u32()?;
    let error = get_str(&mut r, MAX_ERROR_BYTES, "error")?;
    let elapsed_s = f64::from_bits(r.u64()?);
    let n = r.u32()? as usize;
    if n > MAX_L4_CHIP_TASKS {
        return Err(FrameError::Field(format!("{n} chip tasks")));
    }
    let mut chip_tasks = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let worker = r.u32()? as usize;
        let callable = r.u32()?;
        let has_report = r.u8()? != 0;
        let wire = get_report(&mut r, Ints::Var)?;
        let has_error = r.u8()? != 0;
        let err = get_str(&mut r, MAX_ERROR_BYTES, "error")?;
        chip_tasks.push(crate::node::report_of(
            worker,
            callable,
            has_report.then_some(&wire),
            has_error.then_some(err),
        ));
    }
    let n_outputs = r.u32()?;
    if n_outputs as usize > MAX_L4_ARGS {
        return Err(FrameError::Field(format!("{n_outputs} outputs")));
    }
    Ok(L4Reply {
        seq,
        status,
        error,
        elapsed_s,
        chip_tasks,
        n_outputs,
    })
}

/// The data messages a tensor of `nbytes` bytes takes.
pub fn chunks(nbytes: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let n = nbytes.div_ceil(CHUNK_BYTES).max(1);
    (0..n).map(move |i| i * CHUNK_BYTES..((i + 1) * CHUNK_BYTES).min(nbytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RingSizing, RuntimeEnv};

    fn full_config() -> CallConfig {
        let mut c = CallConfig::default();
        c.aicpu_thread_num = u32::MAX;
        c.enable_chip_swimlane = 3;
        c.enable_scope_stats = true;
        c.enable_dep_gen = true;
        c.runtime_env = RuntimeEnv {
            ring_task_window: [4, 1 << 20, 64, u64::MAX],
            ring_heap: [1024, 1 << 40, 0, 7],
            ring_dep_pool: [16, 0, u64::MAX - 1, 1],
        };
        c.output_prefix = format!("{}{}", "é".repeat(2000), "x".repeat(96)); // 4096 bytes
        c
    }

    #[test]
    fn task_round_trip_keeps_every_config_field() {
        let t = L4Task {
            seq: u64::MAX,
            data_tag: 0x7fff_fff0,
            callable: 3,
            name: "host_orch".into(),
            config: full_config(),
            args: vec![
                L4Arg::Shipped(L4Tensor {
                    dir: L4Dir::In,
                    dtype: DType::F32,
                    shape: vec![2, 3, 4, 5, 6],
                }),
                L4Arg::Resident(
                    L4Tensor {
                        dir: L4Dir::InOut,
                        dtype: DType::I64,
                        shape: vec![7],
                    },
                    0xdead_beef,
                ),
                L4Arg::Int(-5),
                L4Arg::Float(2.5),
            ],
        };
        let mut buf = vec![0u8; 65536];
        let n = encode_task(&t, &mut buf).unwrap();
        assert_eq!(decode_request(&buf[..n]).unwrap(), HostRequest::Task(t));
        let n = encode_close(&mut buf).unwrap();
        assert_eq!(decode_request(&buf[..n]).unwrap(), HostRequest::Close);
    }

    #[test]
    fn reply_round_trip_keeps_the_chip_reports() {
        let sizing = RingSizing::from_key_and_sources(
            [
                64,
                64,
                64,
                64,
                1 << 20,
                1 << 20,
                1 << 20,
                1 << 20,
                256,
                256,
                256,
                256,
            ],
            [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2],
        )
        .unwrap();
        let c = crate::node::ChipTaskReport {
            worker: 1,
            callable: 2,
            run: Some(crate::chip::RunReport {
                ring_sizing: sizing,
                peak: Default::default(),
                tasks: 12,
                arena_hit: true,
                arena_build_s: 0.125,
                elapsed_s: 0.25,
                replayed: false,
                device_memory: crate::chip::DeviceMemory::of_sizing(&sizing),
            }),
            error: Some("chip 1 (pid 9): boom".into()),
        };
        let r = L4Reply {
            seq: 42,
            status: 1,
            error: "x".repeat(MAX_ERROR_BYTES),
            elapsed_s: 1.5,
            chip_tasks: vec![c.clone(), crate::node::report_of(0, 0, None, None)],
            n_outputs: 2,
        };
        let mut buf = vec![0u8; reply_len(&r)];
        let n = encode_reply(&r, &mut buf).unwrap();
        assert!(n <= buf.len());
        let back = decode_reply(&buf[..n]).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn malformed_frames_are_errors() {
        let mut buf = vec![0u8; 4096];
        let t = L4Task {
            seq: 1,
            data_tag: 2,
            callable: 0,
            name: "p".into(),
            config: CallConfig::default(),
            args: vec![L4Arg::Shipped(L4Tensor {
                dir: L4Dir::Out,
                dtype: DType::F32,
                shape: vec![u64::MAX, 2],
            })],
        };
        let n = encode_task(&t, &mut buf).unwrap();
        assert!(
            decode_request(&buf[..n]).is_err(),
            "an overflowing shape is refused"
        );
        for cut in 0..n {
            assert!(decode_request(&buf[..cut]).is_err());
        }
        assert!(decode_reply(&buf[..n]).is_err());
    }

    #[test]
    fn integers_go_as_leb128_and_bad_ones_are_errors() {
        for (v, len) in [
            (0u64, 1usize),
            (127, 1),
            (128, 2),
            (16383, 2),
            (16384, 3),
            (1 << 28, 5),
            (u64::MAX >> 1, 9),
            (1 << 63, 10),
            (u64::MAX, 10),
        ] {
            let mut buf = [0u8; 16];
            let mut w = W {
                buf: &mut buf,
                at: 0,
            };
            w.var(v).unwrap();
            assert_eq!(w.at, len, "{v}");
            let mut r = R {
                buf: &buf[..len],
                at: 0,
            };
            assert_eq!(r.var().unwrap(), v);
            assert_eq!(r.at, len);
            let mut short = R {
                buf: &buf[..len - 1],
                at: 0,
            };
            assert!(short.var().is_err(), "{v} cut short");
        }
        // Bits beyond 64 in the tenth byte, and an eleventh byte.
        let over = [0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(R { buf: &over, at: 0 }.var().is_err());
        let long = [0x80u8; 11];
        assert!(R { buf: &long, at: 0 }.var().is_err());
    }

    /// The point of LEB128 here: a one-chip-task reply and a task with a few
    /// arguments stay under Open MPI's ~250-byte shared-memory fast path (see `Ints`).
    #[test]
    fn a_common_reply_and_task_fit_the_fast_path() {
        let sizing = RingSizing::default();
        let report = crate::chip::RunReport {
            ring_sizing: sizing,
            peak: Default::default(),
            tasks: 1,
            arena_hit: true,
            arena_build_s: 0.0,
            elapsed_s: 2.5e-6,
            replayed: false,
            device_memory: crate::chip::DeviceMemory::of_sizing(&sizing),
        };
        let r = L4Reply {
            seq: 1 << 20,
            status: 0,
            error: String::new(),
            elapsed_s: 1e-5,
            chip_tasks: vec![crate::node::ChipTaskReport {
                worker: 1,
                callable: 0,
                run: Some(report),
                error: None,
            }],
            n_outputs: 1,
        };
        let mut buf = vec![0u8; reply_len(&r)];
        let n = encode_reply(&r, &mut buf).unwrap();
        assert!(n <= 200, "a one-chip-task reply takes {n} bytes");
        let t = L4Task {
            seq: 1 << 20,
            data_tag: 2,
            callable: 0,
            name: "host_orchestration".into(),
            config: CallConfig::default(),
            args: vec![
                L4Arg::Shipped(L4Tensor {
                    dir: L4Dir::In,
                    dtype: DType::F32,
                    shape: vec![1024, 1024],
                });
                3
            ]
            .into_iter()
            .chain([L4Arg::Int(7), L4Arg::Float(0.5)])
            .collect(),
        };
        let mut buf = vec![0u8; task_len(&t)];
        let n = encode_task(&t, &mut buf).unwrap();
        assert!(n <= 160, "a 5-argument task takes {n} bytes");
    }

    /// `task_len` bounds the largest frame the limits allow.
    #[test]
    fn the_task_bound_holds_at_the_limits() {
        let shape = vec![u64::MAX; MAX_L4_DIMS];
        let t = L4Task {
            seq: u64::MAX,
            data_tag: i32::MAX,
            callable: u32::MAX,
            name: "n".repeat(MAX_NAME_BYTES),
            config: full_config(),
            args: (0..64)
                .map(|i| {
                    let x = L4Tensor {
                        dir: L4Dir::InOut,
                        dtype: DType::I64,
                        shape: shape.clone(),
                    };
                    match i % 4 {
                        0 => L4Arg::Shipped(x),
                        1 => L4Arg::Resident(x, u64::MAX),
                        2 => L4Arg::Int(i64::MIN),
                        _ => L4Arg::Float(f64::MIN),
                    }
                })
                .collect(),
        };
        let mut buf = vec![0u8; task_len(&t)];
        let n = encode_task(&t, &mut buf).expect("fits its bound");
        assert!(n <= buf.len());
    }

    #[test]
    fn chunks_cover_a_tensor() {
        assert_eq!(chunks(0).collect::<Vec<_>>(), vec![0..0]);
        assert_eq!(chunks(10).collect::<Vec<_>>(), vec![0..10]);
        let big = 2 * CHUNK_BYTES + 5;
        let c: Vec<_> = chunks(big).collect();
        assert_eq!(c.len(), 3);
        assert_eq!(c[2], 2 * CHUNK_BYTES..big);
    }
}
