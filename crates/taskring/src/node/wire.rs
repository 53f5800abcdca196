//! The task frame: a versioned, fixed-layout little-endian encoding of one L2 task on its
//! way to a chip (callable id, the whole `CallConfig` with all 12 ring values, the
//! arguments), and of the chip's reply (status, error text, `ChipTaskReport`).
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! header  : magic u32 = "TRNG", version u16, kind u16, body_len u32
//! task    : callable u32, aicpu_thread_num u32, enable_chip_swimlane u32, flags u32
//!           (bit 0 scope stats, bit 1 dep gen), ring_task_window [u64; 4],
//!           ring_heap [u64; 4], ring_dep_pool [u64; 4], prefix_len u32, prefix bytes,
//!           n_args u32, then per arg: kind u8 (1 tensor, 2 int scalar, 3 float scalar),
//!           and for a tensor: dtype u8, ndims u8, pad u8, region u64, region_bytes u64,
//!           offset_bytes u64, shape [u32; 5], strides [u32; 5] (elements); for a
//!           scalar: bits u64
//! reply   : status u32 (0 ok, else a status code), error_len u32, error bytes,
//!           has_report u8, then sizing [u64; 12], peak [u64; 12], sources [u8; 12]
//!           (0 call_config, 1 env, 2 default), tasks u64,
//!           arena_hit u8, arena_build_s f64, elapsed_s f64; has_stats u8, then
//!           builds, hits, misses, evictions u64, build_s f64, n u64, n × [u64; 12]
//! stats   : (request) empty body
//! ```
//!
//! Decoding never panics: a wrong magic, version, kind or length, or a truncated body,
//! is a [`FrameError`].

use crate::config::CallConfig;
use crate::tensor::{DType, MAX_DIMS};

pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"TRNG");
/// Version 2: L4 frames write their wide integers as LEB128 (`Ints::Var`).
pub const FRAME_VERSION: u16 = 2;
pub const KIND_TASK: u16 = 1;
pub const KIND_REPLY: u16 = 2;
/// A request for the chip's arena statistics (empty body).
pub const KIND_STATS: u16 = 3;
/// The bytes of device-resident tensors the chip holds (body: one u64); the reply is
/// the chip's arena statistics, or a DEVICE_OUT_OF_MEMORY failure.
pub const KIND_HOLD: u16 = 4;
/// A program registered after the chip started (body: its index, u32, then the bytes the
/// node's `late_callable` hook rebuilds it from); the reply is the chip's arena
/// statistics, or a failure saying why it could not.
pub const KIND_REGISTER: u16 = 5;
/// Longest `output_prefix` a frame carries.
pub const MAX_PREFIX_BYTES: usize = 4096;
/// Longest error text a reply carries (longer texts are cut).
pub const MAX_ERROR_BYTES: usize = 8192;
const HEADER_BYTES: usize = 12;

/// Why a frame could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame too short: {0} bytes")]
    Short(usize),
    #[error("bad frame magic {0:#010x}")]
    Magic(u32),
    #[error("unsupported frame version {0} (this build speaks {FRAME_VERSION})")]
    Version(u16),
    #[error("unexpected frame kind {0}")]
    Kind(u16),
    #[error("frame body length {body} does not fit the {available} bytes received")]
    Length { body: usize, available: usize },
    #[error("frame body truncated at byte {0}")]
    Truncated(usize),
    #[error("bad field in frame: {0}")]
    Field(String),
    #[error("frame needs {need} bytes but the mailbox holds {cap}")]
    TooBig { need: usize, cap: usize },
}

/// A tensor argument as shared-memory coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireTensor {
    pub dtype: DType,
    pub ndims: u8,
    /// Unique id of the shared region holding the buffer.
    pub region: u64,
    pub region_bytes: u64,
    /// Byte offset of element `[0, ...]` of the view inside the region.
    pub offset_bytes: u64,
    pub shape: [u32; MAX_DIMS],
    pub strides: [u32; MAX_DIMS],
}

/// One argument of a chip task.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WireArg {
    Tensor(WireTensor),
    Int(i64),
    Float(f64),
}

/// An L2 task for a chip.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskFrame {
    pub callable: u32,
    pub config: CallConfig,
    pub args: Vec<WireArg>,
}

/// What a chip reports for one task.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WireReport {
    pub sizing: [u64; 12],
    /// Where each sizing value came from in the chip (see `RingSizing::source_codes`).
    pub sources: [u8; 12],
    pub peak: [u64; 12],
    pub tasks: u64,
    pub arena_hit: bool,
    pub arena_build_s: f64,
    pub elapsed_s: f64,
}

/// A chip's arena-cache counters.
#[derive(Clone, Debug, PartialEq)]
pub struct WireStats {
    pub builds: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub build_s: f64,
    pub resident: Vec<[u64; 12]>,
}

/// The chip's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplyFrame {
    pub status: u32,
    pub error: String,
    pub report: Option<WireReport>,
    pub stats: Option<WireStats>,
}

/// A frame writer over a caller's buffer (also the L4 frames' writer, `cluster::wire`).
pub(crate) struct W<'a> {
    pub(crate) buf: &'a mut [u8],
    pub(crate) at: usize,
}

impl W<'_> {
    pub(crate) fn put(&mut self, b: &[u8]) -> Result<(), FrameError> {
        let end = self.at + b.len();
        if end > self.buf.len() {
            return Err(FrameError::TooBig {
                need: end,
                cap: self.buf.len(),
            });
        }
        self.buf[self.at..end].copy_from_slice(b);
        self.at = end;
        Ok(())
    }
    pub(crate) fn u8(&mut self, v: u8) -> Result<(), FrameError> {
        self.put(&[v])
    }
    pub(crate) fn u16(&mut self, v: u16) -> Result<(), FrameError> {
        self.put(&v.to_le_bytes())
    }
    pub(crate) fn u32(&mut self, v: u32) -> Result<(), FrameError> {
        self.put(&v.to_le_bytes())
    }
    pub(crate) fn u64(&mut self, v: u64) -> Result<(), FrameError> {
        self.put(&v.to_le_bytes())
    }
    /// `v` as LEB128: 7 bits a byte, low first, the high bit set on all but the last
    /// (1 byte below 128, at most [`VAR_MAX_BYTES`]).
    pub(crate) fn var(&mut self, mut v: u64) -> Result<(), FrameError> {
        let mut b = [0u8; VAR_MAX_BYTES];
        let mut n = 0;
        loop {
            let low = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                b[n] = low;
                n += 1;
                break;
            }
            b[n] = low | 0x80;
            n += 1;
        }
        self.put(&b[..n])
    }
    /// A wide integer in the frame's encoding.
    pub(crate) fn int(&mut self, v: u64, ints: Ints) -> Result<(), FrameError> {
        match ints {
            Ints::Fixed => self.u64(v),
            Ints::Var => self.var(v),
        }
    }
}

/// How a frame writes its wide integers (ring sizes, peaks, counts): 8 bytes each in
/// the chip mailbox's frames (shared memory: size is free, fixed offsets are cheapest)
/// or LEB128 in L4's frames over MPI, where a message of more than ~250 bytes leaves
/// Open MPI's shared-memory fast path (a 300-byte round trip took 1.8–1.9 µs against
/// 1.5 µs at 248 bytes on the 2-vCPU box) and an L4 reply with one chip report was ~290.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ints {
    Fixed,
    Var,
}

/// Longest LEB128 encoding of a `u64`.
pub(crate) const VAR_MAX_BYTES: usize = 10;

/// A frame reader: every read checks the bounds.
pub(crate) struct R<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> R<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(FrameError::Truncated(self.at))?;
        if end > self.buf.len() {
            return Err(FrameError::Truncated(self.at));
        }
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// The reverse of [`W::var`]; more than [`VAR_MAX_BYTES`] bytes, or bits beyond
    /// 64, is a malformed frame.
    pub(crate) fn var(&mut self) -> Result<u64, FrameError> {
        let at = self.at;
        let mut v = 0u64;
        for i in 0..VAR_MAX_BYTES {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if i == VAR_MAX_BYTES - 1 && bits > 1 {
                return Err(FrameError::Field(format!(
                    "integer at byte {at} exceeds 64 bits"
                )));
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(FrameError::Field(format!(
            "integer at byte {at} exceeds 64 bits"
        )))
    }
    /// A wide integer in the frame's encoding.
    pub(crate) fn int(&mut self, ints: Ints) -> Result<u64, FrameError> {
        match ints {
            Ints::Fixed => self.u64(),
            Ints::Var => self.var(),
        }
    }
}

pub(crate) fn header(w: &mut W<'_>, kind: u16) -> Result<(), FrameError> {
    w.u32(FRAME_MAGIC)?;
    w.u16(FRAME_VERSION)?;
    w.u16(kind)?;
    w.u32(0) // body length, patched at the end
}

pub(crate) fn finish(w: W<'_>) -> usize {
    let body = (w.at - HEADER_BYTES) as u32;
    w.buf[8..12].copy_from_slice(&body.to_le_bytes());
    w.at
}

pub(crate) fn open(buf: &[u8], kind: u16) -> Result<R<'_>, FrameError> {
    if buf.len() < HEADER_BYTES {
        return Err(FrameError::Short(buf.len()));
    }
    let mut r = R { buf, at: 0 };
    let magic = r.u32()?;
    if magic != FRAME_MAGIC {
        return Err(FrameError::Magic(magic));
    }
    let version = r.u16()?;
    if version != FRAME_VERSION {
        return Err(FrameError::Version(version));
    }
    let k = r.u16()?;
    if k != kind {
        return Err(FrameError::Kind(k));
    }
    let body = r.u32()? as usize;
    if HEADER_BYTES + body > buf.len() {
        return Err(FrameError::Length {
            body,
            available: buf.len() - HEADER_BYTES,
        });
    }
    Ok(R {
        buf: &buf[..HEADER_BYTES + body],
        at: HEADER_BYTES,
    })
}

/// A `CallConfig`, whole: thread count, DFX flags, the 12 ring values, `output_prefix`.
pub(crate) fn put_config(w: &mut W<'_>, c: &CallConfig, ints: Ints) -> Result<(), FrameError> {
    w.u32(c.aicpu_thread_num)?;
    w.u32(c.enable_chip_swimlane)?;
    w.u32(c.enable_scope_stats as u32 | (c.enable_dep_gen as u32) << 1)?;
    for v in c
        .runtime_env
        .ring_task_window
        .iter()
        .chain(&c.runtime_env.ring_heap)
        .chain(&c.runtime_env.ring_dep_pool)
    {
        w.int(*v, ints)?;
    }
    let p = c.output_prefix.as_bytes();
    if p.len() > MAX_PREFIX_BYTES {
        return Err(FrameError::Field(format!(
            "output_prefix is {} bytes; at most {MAX_PREFIX_BYTES}",
            p.len()
        )));
    }
    w.u32(p.len() as u32)?;
    w.put(p)?;
    Ok(())
}

/// Encode `f` into `buf`; returns the frame's length.
pub fn encode_task(f: &TaskFrame, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut w = W { buf, at: 0 };
    header(&mut w, KIND_TASK)?;
    w.u32(f.callable)?;
    put_config(&mut w, &f.config, Ints::Fixed)?;
    w.u32(f.args.len() as u32)?;
    for a in &f.args {
        match a {
            WireArg::Tensor(t) => {
                w.u8(1)?;
                w.u8(t.dtype as u8)?;
                w.u8(t.ndims)?;
                w.u8(0)?;
                w.u64(t.region)?;
                w.u64(t.region_bytes)?;
                w.u64(t.offset_bytes)?;
                for s in t.shape {
                    w.u32(s)?;
                }
                for s in t.strides {
                    w.u32(s)?;
                }
            }
            WireArg::Int(v) => {
                w.u8(2)?;
                w.u64(*v as u64)?;
            }
            WireArg::Float(v) => {
                w.u8(3)?;
                w.u64(v.to_bits())?;
            }
        }
    }
    Ok(finish(w))
}

pub(crate) fn dtype_of(v: u8) -> Result<DType, FrameError> {
    DType::ALL
        .get(v as usize)
        .copied()
        .ok_or_else(|| FrameError::Field(format!("dtype {v}")))
}

/// The reverse of [`put_config`].
pub(crate) fn get_config(r: &mut R<'_>, ints: Ints) -> Result<CallConfig, FrameError> {
    let mut c = CallConfig {
        aicpu_thread_num: r.u32()?,
        enable_chip_swimlane: r.u32()?,
        ..Default::default()
    };
    let flags = r.u32()?;
    c.enable_scope_stats = flags & 1 != 0;
    c.enable_dep_gen = flags & 2 != 0;
    for i in 0..12 {
        let v = r.int(ints)?;
        match i / 4 {
            0 => c.runtime_env.ring_task_window[i % 4] = v,
            1 => c.runtime_env.ring_heap[i % 4] = v,
            _ => c.runtime_env.ring_dep_pool[i % 4] = v,
        }
    }
    let plen = r.u32()? as usize;
    if plen > MAX_PREFIX_BYTES {
        return Err(FrameError::Field(format!("output_prefix length {plen}")));
    }
    c.output_prefix = String::from_utf8(r.take(plen)?.to_vec())
        .map_err(|_| FrameError::Field("output_prefix is not UTF-8".into()))?;
    Ok(c)
}

/// Decode a task frame.
pub fn decode_task(buf: &[u8]) -> Result<TaskFrame, FrameError> {
    let mut r = open(buf, KIND_TASK)?;
    let callable = r.u32()?;
    let c = get_config(&mut r, Ints::Fixed)?;
    let n = r.u32()? as usize;
    if n > 4096 {
        return Err(FrameError::Field(format!("{n} arguments")));
    }
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        match r.u8()? {
            1 => {
                let dtype = dtype_of(r.u8()?)?;
                let ndims = r.u8()?;
                let _ = r.u8()?;
                if ndims == 0 || ndims as usize > MAX_DIMS {
                    return Err(FrameError::Field(format!("ndims {ndims}")));
                }
                let region = r.u64()?;
                let region_bytes = r.u64()?;
                let offset_bytes = r.u64()?;
                let mut shape = [0u32; MAX_DIMS];
                let mut strides = [0u32; MAX_DIMS];
                for s in shape.iter_mut() {
                    *s = r.u32()?;
                }
                for s in strides.iter_mut() {
                    *s = r.u32()?;
                }
                args.push(WireArg::Tensor(WireTensor {
                    dtype,
                    ndims,
                    region,
                    region_bytes,
                    offset_bytes,
                    shape,
                    strides,
                }));
            }
            2 => args.push(WireArg::Int(r.u64()? as i64)),
            3 => args.push(WireArg::Float(f64::from_bits(r.u64()?))),
            k => return Err(FrameError::Field(format!("argument kind {k}"))),
        }
    }
    Ok(TaskFrame {
        callable,
        config: c,
        args,
    })
}

/// Encode a reply (the error text is cut to [`MAX_ERROR_BYTES`]).
pub fn encode_reply(f: &ReplyFrame, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut w = W { buf, at: 0 };
    header(&mut w, KIND_REPLY)?;
    w.u32(f.status)?;
    let mut e = f.error.as_bytes();
    if e.len() > MAX_ERROR_BYTES {
        let mut cut = MAX_ERROR_BYTES;
        while !f.error.is_char_boundary(cut) {
            cut -= 1;
        }
        e = &e[..cut];
    }
    w.u32(e.len() as u32)?;
    w.put(e)?;
    match &f.report {
        None => w.u8(0)?,
        Some(rep) => {
            w.u8(1)?;
            put_report(&mut w, rep, Ints::Fixed)?;
        }
    }
    match &f.stats {
        None => w.u8(0)?,
        Some(st) => {
            w.u8(1)?;
            for v in [
                st.builds,
                st.hits,
                st.misses,
                st.evictions,
                st.build_s.to_bits(),
                st.resident.len() as u64,
            ] {
                w.u64(v)?;
            }
            for k in &st.resident {
                for v in k {
                    w.u64(*v)?;
                }
            }
        }
    }
    Ok(finish(w))
}

/// A chip's report of one task (after its presence flag).
pub(crate) fn put_report(w: &mut W<'_>, rep: &WireReport, ints: Ints) -> Result<(), FrameError> {
    for v in rep.sizing.iter().chain(&rep.peak) {
        w.int(*v, ints)?;
    }
    w.put(&rep.sources)?;
    w.int(rep.tasks, ints)?;
    w.u8(rep.arena_hit as u8)?;
    w.u64(rep.arena_build_s.to_bits())?;
    w.u64(rep.elapsed_s.to_bits())
}

/// The reverse of [`put_report`].
pub(crate) fn get_report(r: &mut R<'_>, ints: Ints) -> Result<WireReport, FrameError> {
    let mut sizing = [0u64; 12];
    let mut peak = [0u64; 12];
    for v in sizing.iter_mut().chain(peak.iter_mut()) {
        *v = r.int(ints)?;
    }
    let sources: [u8; 12] = r.take(12)?.try_into().expect("12 bytes");
    Ok(WireReport {
        sizing,
        sources,
        peak,
        tasks: r.int(ints)?,
        arena_hit: r.u8()? != 0,
        arena_build_s: f64::from_bits(r.u64()?),
        elapsed_s: f64::from_bits(r.u64()?),
    })
}

/// Encode a statistics request.
pub fn encode_stats_request(buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut w = W { buf, at: 0 };
    header(&mut w, KIND_STATS)?;
    Ok(finish(w))
}

/// A request telling the chip it holds `bytes` of device-resident tensors.
pub fn encode_hold_request(buf: &mut [u8], bytes: u64) -> Result<usize, FrameError> {
    let mut w = W { buf, at: 0 };
    header(&mut w, KIND_HOLD)?;
    w.u64(bytes)?;
    Ok(finish(w))
}

/// The bytes of a hold request.
pub fn decode_hold_request(buf: &[u8]) -> Result<u64, FrameError> {
    open(buf, KIND_HOLD)?.u64()
}

/// A request registering program `index`, described by `desc`, on a chip.
pub fn encode_register_request(
    buf: &mut [u8],
    index: u32,
    desc: &[u8],
) -> Result<usize, FrameError> {
    let mut w = W { buf, at: 0 };
    header(&mut w, KIND_REGISTER)?;
    w.u32(index)?;
    w.u32(desc.len() as u32)?;
    w.put(desc)?;
    Ok(finish(w))
}

/// The index and description of a register request.
pub fn decode_register_request(buf: &[u8]) -> Result<(u32, &[u8]), FrameError> {
    let mut r = open(buf, KIND_REGISTER)?;
    let index = r.u32()?;
    let n = r.u32()? as usize;
    Ok((index, r.take(n)?))
}

/// The kind of a request frame (after checking magic, version and length).
pub fn request_kind(buf: &[u8]) -> Result<u16, FrameError> {
    if buf.len() < HEADER_BYTES {
        return Err(FrameError::Short(buf.len()));
    }
    let kind = u16::from_le_bytes([buf[6], buf[7]]);
    open(buf, kind)?;
    Ok(kind)
}

/// Decode a reply.
pub fn decode_reply(buf: &[u8]) -> Result<ReplyFrame, FrameError> {
    let mut r = open(buf, KIND_REPLY)?;
    let status = r.u32()?;
    let elen = r.u32()? as usize;
    if elen > MAX_ERROR_BYTES {
        return Err(FrameError::Field(format!("error length {elen}")));
    }
    let error = String::from_utf8_lossy(r.take(elen)?).into_owned();
    let report = match r.u8()? {
        0 => None,
        1 => Some(get_report(&mut r, Ints::Fixed)?),
        k => return Err(FrameError::Field(format!("report flag {k}"))),
    };
    let stats = match r.u8()? {
        0 => None,
        1 => {
            let (builds, hits, misses, evictions) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            let build_s = f64::from_bits(r.u64()?);
            let n = r.u64()? as usize;
            if n > 1024 {
                return Err(FrameError::Field(format!("{n} resident arenas")));
            }
            let mut resident = Vec::with_capacity(n);
            for _ in 0..n {
                let mut k = [0u64; 12];
                for v in k.iter_mut() {
                    *v = r.u64()?;
                }
                resident.push(k);
            }
            Some(WireStats {
                builds,
                hits,
                misses,
                evictions,
                build_s,
                resident,
            })
        }
        k => return Err(FrameError::Field(format!("stats flag {k}"))),
    };
    Ok(ReplyFrame {
        status,
        error,
        report,
        stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RuntimeEnv;

    fn full_task() -> TaskFrame {
        TaskFrame {
            callable: u32::MAX,
            config: CallConfig {
                aicpu_thread_num: 8,
                runtime_env: RuntimeEnv {
                    ring_task_window: [4, 1 << 30, 0, 16384],
                    ring_heap: [1024, u64::MAX, 0, 1 << 40],
                    ring_dep_pool: [4, (1 << 31) - 1, 0, 16384],
                },
                enable_scope_stats: true,
                enable_chip_swimlane: 4,
                enable_dep_gen: true,
                output_prefix: "/tmp/ü-out".repeat(10),
            },
            args: vec![
                WireArg::Tensor(WireTensor {
                    dtype: DType::BF16,
                    ndims: 5,
                    region: u64::MAX,
                    region_bytes: u64::MAX,
                    offset_bytes: 12345,
                    shape: [u32::MAX, 1, 2, 3, 4],
                    strides: [1, 2, 3, 4, u32::MAX],
                }),
                WireArg::Int(i64::MIN),
                WireArg::Float(-0.0),
                WireArg::Float(f64::MAX),
            ],
        }
    }

    #[test]
    fn task_round_trip_at_limits() {
        let f = full_task();
        let mut buf = vec![0u8; 1 << 16];
        let n = encode_task(&f, &mut buf).unwrap();
        let g = decode_task(&buf[..n]).unwrap();
        assert_eq!(f.callable, g.callable);
        assert_eq!(f.config, g.config);
        assert_eq!(format!("{:?}", f.args), format!("{:?}", g.args));
        // The default config round-trips too.
        let d = TaskFrame {
            callable: 0,
            config: CallConfig::default(),
            args: vec![],
        };
        let n = encode_task(&d, &mut buf).unwrap();
        assert_eq!(decode_task(&buf[..n]).unwrap(), d);
    }

    #[test]
    fn reply_round_trip() {
        let r = ReplyFrame {
            status: 200,
            error: "kernel 'x' failed".into(),
            report: Some(WireReport {
                sizing: [u64::MAX; 12],
                sources: [0, 1, 2, 0, 1, 2, 0, 1, 2, 2, 2, 255],
                peak: [7; 12],
                tasks: u64::MAX,
                arena_hit: true,
                arena_build_s: 1e-9,
                elapsed_s: 3.5,
            }),
            stats: Some(WireStats {
                builds: 3,
                hits: u64::MAX,
                misses: 0,
                evictions: 1,
                build_s: 0.25,
                resident: vec![[9; 12], [u64::MAX; 12]],
            }),
        };
        let mut buf = vec![0u8; 1 << 16];
        let n = encode_reply(&r, &mut buf).unwrap();
        assert_eq!(decode_reply(&buf[..n]).unwrap(), r);
        let long = ReplyFrame {
            status: 1,
            error: "é".repeat(MAX_ERROR_BYTES),
            report: None,
            stats: None,
        };
        let n = encode_reply(&long, &mut buf).unwrap();
        let back = decode_reply(&buf[..n]).unwrap();
        assert!(back.error.len() <= MAX_ERROR_BYTES && back.error.chars().all(|c| c == 'é'));
    }

    #[test]
    fn bad_frames_are_errors() {
        let f = full_task();
        let mut buf = vec![0u8; 1 << 16];
        let n = encode_task(&f, &mut buf).unwrap();
        assert_eq!(decode_task(&buf[..5]).unwrap_err(), FrameError::Short(5));
        let mut v = buf[..n].to_vec();
        v[4] = 9;
        assert_eq!(decode_task(&v).unwrap_err(), FrameError::Version(9));
        let mut v = buf[..n].to_vec();
        v[0] = 0;
        assert!(matches!(decode_task(&v).unwrap_err(), FrameError::Magic(_)));
        assert!(matches!(
            decode_task(&buf[..n - 3]).unwrap_err(),
            FrameError::Length { .. }
        ));
        assert_eq!(
            decode_reply(&buf[..n]).unwrap_err(),
            FrameError::Kind(KIND_TASK)
        );
        // Every truncation of the body is an error, never a panic.
        for cut in HEADER_BYTES..n {
            let mut v = buf[..cut].to_vec();
            let body = (cut - HEADER_BYTES) as u32;
            v[8..12].copy_from_slice(&body.to_le_bytes());
            assert!(decode_task(&v).is_err(), "cut at {cut}");
        }
        let n = encode_stats_request(&mut buf).unwrap();
        assert_eq!(request_kind(&buf[..n]).unwrap(), KIND_STATS);
        assert_eq!(request_kind(&buf[..3]).unwrap_err(), FrameError::Short(3));
        // Too small a mailbox.
        let mut small = [0u8; 32];
        assert!(matches!(
            encode_task(&f, &mut small).unwrap_err(),
            FrameError::TooBig { .. }
        ));
    }
}
