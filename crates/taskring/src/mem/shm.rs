//! Shared memory that chip processes can see: [`SharedBuffer`] (a memfd mapping owned by
//! the host process), the process-wide registry that turns a host address into
//! `(region id, offset)`, and [`RegionMap`], which maps a region into a chip process on
//! first use.
//!
//! A region id is `(serial << 32) | fd`: the chip opens `/proc/<host pid>/fd/<fd>` to map
//! it, and the serial makes a reused fd number a different id, so a chip never confuses
//! a freed region with a new one. Regions are private to the user (memfd, never named in
//! the file system) and disappear when their last mapping and fd go.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Copy, Debug)]
struct RegionInfo {
    id: u64,
    len: u64,
}

static REGISTRY: Mutex<BTreeMap<u64, RegionInfo>> = Mutex::new(BTreeMap::new());
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// Failure to create or map shared memory.
#[derive(Debug, Clone, thiserror::Error)]
#[error("shared memory: {0}")]
pub struct ShmError(pub String);

fn os_err(what: &str) -> ShmError {
    ShmError(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// A shared, lazily committed, zero-filled buffer (memfd + `MAP_SHARED`).
pub struct SharedBuffer {
    id: u64,
    fd: i32,
    base: *mut u8,
    len: usize,
}

// safety: the buffer owns its mapping and fd, neither tied to the thread that made them;
// any thread may unmap and close them in Drop.
unsafe impl Send for SharedBuffer {}
// safety: `&SharedBuffer` exposes only the base address, length and id; the bytes are
// reached through the raw `as_ptr`, whose users answer for their sharing.
unsafe impl Sync for SharedBuffer {}

impl SharedBuffer {
    /// Create and register a buffer of `len` bytes (at least 1).
    pub fn new(len: usize) -> Result<SharedBuffer, ShmError> {
        let len = len.max(1);
        // safety: plain syscalls with checked results.
        unsafe {
            let fd = libc::memfd_create(c"taskring".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(os_err("memfd_create"));
            }
            if libc::ftruncate(fd, len as libc::off_t) != 0 {
                let e = os_err("ftruncate");
                libc::close(fd);
                return Err(e);
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd,
                0,
            );
            if p == libc::MAP_FAILED {
                let e = os_err("mmap");
                libc::close(fd);
                return Err(e);
            }
            let id = (SERIAL.fetch_add(1, Ordering::Relaxed) << 32) | fd as u64;
            REGISTRY.lock().insert(
                p as u64,
                RegionInfo {
                    id,
                    len: len as u64,
                },
            );
            Ok(SharedBuffer {
                id,
                fd,
                base: p as *mut u8,
                len,
            })
        }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for SharedBuffer {
    fn drop(&mut self) {
        REGISTRY.lock().remove(&(self.base as u64));
        // safety: our own mapping and fd.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
            libc::close(self.fd);
        }
    }
}

/// The region holding `[addr, addr + bytes)`: `(id, region_len, offset)`.
pub fn locate(addr: u64, bytes: u64) -> Option<(u64, u64, u64)> {
    let reg = REGISTRY.lock();
    let (&base, info) = reg.range(..=addr).next_back()?;
    let off = addr - base;
    (off + bytes <= info.len).then_some((info.id, info.len, off))
}

/// Checks the buffers a caller gives by raw address for a task's shipped tensors of one
/// kind (`what`: "inputs", "outputs"; `sizes`, the tensors' byte sizes in order): one
/// address per tensor, each the start of the tensor's bytes inside one shared-memory
/// region of this process, no two overlapping. The error names the first buffer that
/// is not (an L4 host's Python code hands these addresses to the runtime, which then
/// reads or writes them without the GIL).
pub fn check_buffers(what: &str, sizes: &[usize], addrs: &[u64]) -> Result<(), String> {
    if sizes.len() != addrs.len() {
        return Err(format!(
            "the task has {} shipped {what}, got {} buffers",
            sizes.len(),
            addrs.len()
        ));
    }
    let mut spans = Vec::with_capacity(addrs.len());
    for (i, (&addr, &size)) in addrs.iter().zip(sizes).enumerate() {
        let size = size as u64;
        let inside = locate(addr, 0).is_some_and(|(_, len, off)| size <= len - off);
        if !inside {
            return Err(format!(
                "buffer {i} of the task's {what} ({size} bytes at {addr:#x}) is not inside one SharedMem of this process"
            ));
        }
        spans.push((addr, addr + size, i));
    }
    spans.sort_unstable();
    if let Some(w) = spans.windows(2).find(|w| w[1].0 < w[0].1) {
        return Err(format!(
            "buffers {} and {} of the task's {what} overlap",
            w[0].2.min(w[1].2),
            w[0].2.max(w[1].2)
        ));
    }
    Ok(())
}

/// Base address of a region registered in this process.
fn local_base(id: u64) -> Option<(u64, u64)> {
    REGISTRY
        .lock()
        .iter()
        .find(|(_, i)| i.id == id)
        .map(|(&b, i)| (b, i.len))
}

/// Regions mapped into a chip (a process, or a thread of the host itself).
pub struct RegionMap {
    host_pid: i32,
    in_process: bool,
    /// Regions mapped here are registered in this process too (their fd kept open), so
    /// that its own children can map them in turn.
    export: bool,
    cache: HashMap<u64, (u64, u64)>,
    /// Mappings made here: base, length, and the fd kept open for an exported one (-1).
    owned: Vec<(u64, usize, i32)>,
}

/// Unmap a mapping a [`RegionMap`] made (and unregister and close an exported one).
///
/// # Safety
/// `(p, l, fd)` is an entry of a map's `owned` that no task refers to any more.
unsafe fn unmap_owned((p, l, fd): (u64, usize, i32)) {
    if fd >= 0 {
        REGISTRY.lock().remove(&p);
        libc::close(fd);
    }
    libc::munmap(p as *mut libc::c_void, l);
}

impl RegionMap {
    /// For a chip of the host process `host_pid`; `in_process` when the chip is a
    /// thread of the host (regions are then used where they are).
    pub fn new(host_pid: i32, in_process: bool) -> RegionMap {
        RegionMap {
            host_pid,
            in_process,
            export: false,
            cache: HashMap::new(),
            owned: Vec::new(),
        }
    }

    /// For a child process of `host_pid` whose own children may be handed what it maps
    /// (a host worker that is itself a node): each region it maps is registered here as
    /// a region of this process.
    pub fn exporting(host_pid: i32) -> RegionMap {
        let mut m = RegionMap::new(host_pid, false);
        m.export = true;
        m
    }

    /// Base address of region `id` (of `len` bytes) in this chip, mapping it on first use.
    pub fn resolve(&mut self, id: u64, len: u64) -> Result<u64, ShmError> {
        if let Some(&(b, l)) = self.cache.get(&id) {
            if l >= len {
                return Ok(b);
            }
        }
        if self.in_process {
            let (b, l) = local_base(id)
                .ok_or_else(|| ShmError(format!("region {id:#x} is not registered")))?;
            if l < len {
                return Err(ShmError(format!(
                    "region {id:#x} holds {l} bytes, {len} expected"
                )));
            }
            self.cache.insert(id, (b, l));
            return Ok(b);
        }
        let fd = id as u32 as i32;
        // A new region on an fd number seen before: the host closed the old region
        // (fd numbers are reused only after close), so its mapping can go — this keeps a
        // chip's mappings bounded by the host's open regions.
        let stale: Vec<u64> = self
            .cache
            .keys()
            .copied()
            .filter(|&k| k as u32 as i32 == fd && k != id)
            .collect();
        for k in stale {
            if let Some((b, _)) = self.cache.remove(&k) {
                if let Some(i) = self.owned.iter().position(|&(p, _, _)| p == b) {
                    let o = self.owned.swap_remove(i);
                    // safety: a mapping this map created, no longer referenced by any
                    // task (its region was closed by the host before the fd was reused).
                    unsafe { unmap_owned(o) };
                }
            }
        }
        let path = format!("/proc/{}/fd/{}\0", self.host_pid, fd);
        // safety: plain syscalls with checked results; the mapping is recorded and
        // unmapped when the map is dropped.
        unsafe {
            let f = libc::open(
                path.as_ptr() as *const libc::c_char,
                libc::O_RDWR | libc::O_CLOEXEC,
            );
            if f < 0 {
                return Err(os_err(&format!("open {}", path.trim_end_matches('\0'))));
            }
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(f, &mut st) != 0 || (st.st_size as u64) < len {
                libc::close(f);
                return Err(ShmError(format!(
                    "region {id:#x}: size {} smaller than {len}",
                    st.st_size
                )));
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                f,
                0,
            );
            if p == libc::MAP_FAILED {
                let e = os_err("mmap of a shared region");
                libc::close(f);
                return Err(e);
            }
            let kept = if self.export {
                let id = (SERIAL.fetch_add(1, Ordering::Relaxed) << 32) | f as u64;
                REGISTRY.lock().insert(p as u64, RegionInfo { id, len });
                f
            } else {
                libc::close(f);
                -1
            };
            self.owned.push((p as u64, len as usize, kept));
            self.cache.insert(id, (p as u64, len));
            Ok(p as u64)
        }
    }
}

impl Drop for RegionMap {
    fn drop(&mut self) {
        for &o in &self.owned {
            // safety: mappings this map created.
            unsafe { unmap_owned(o) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an L4 host's raw addresses must be: inside one region of this process,
    /// one per tensor, not overlapping. A heap array, a null pointer, a buffer running
    /// past its region's end, two buffers sharing bytes and a wrong count are refused,
    /// naming the buffer.
    #[test]
    fn raw_buffers_are_checked_before_use() {
        let a = SharedBuffer::new(8192).unwrap();
        let b = SharedBuffer::new(4096).unwrap();
        let (pa, pb) = (a.as_ptr() as u64, b.as_ptr() as u64);
        assert_eq!(
            check_buffers("inputs", &[4096, 4096, 100], &[pa, pa + 4096, pb]),
            Ok(())
        );
        assert_eq!(check_buffers("outputs", &[], &[]), Ok(()));
        let heap = Box::new([0u8; 64]);
        let e = check_buffers("inputs", &[64], &[heap.as_ptr() as u64]).unwrap_err();
        assert!(
            e.starts_with("buffer 0 of the task's inputs (64 bytes at"),
            "{e}"
        );
        assert!(
            e.ends_with("is not inside one SharedMem of this process"),
            "{e}"
        );
        let e = check_buffers("outputs", &[8, 8], &[pb, 0]).unwrap_err();
        assert!(e.starts_with("buffer 1 of the task's outputs"), "{e}");
        let e = check_buffers("inputs", &[4097], &[pb]).unwrap_err();
        assert!(
            e.starts_with("buffer 0 of the task's inputs (4097 bytes"),
            "{e}"
        );
        let e = check_buffers("inputs", &[100, 8, 100], &[pa, pb, pa + 50]).unwrap_err();
        assert_eq!(e, "buffers 0 and 2 of the task's inputs overlap");
        let e = check_buffers("outputs", &[8, 8], &[pa]).unwrap_err();
        assert_eq!(e, "the task has 2 shipped outputs, got 1 buffers");
    }

    #[test]
    fn locate_and_map_in_process() {
        let b = SharedBuffer::new(8192).unwrap();
        let base = b.as_ptr() as u64;
        assert_eq!(locate(base + 100, 50), Some((b.id(), 8192, 100)));
        assert_eq!(locate(base + 8000, 500), None);
        let mut m = RegionMap::new(std::process::id() as i32, true);
        assert_eq!(m.resolve(b.id(), 8192).unwrap(), base);
        // Through /proc, as a chip process would (here: our own pid).
        let mut m = RegionMap::new(std::process::id() as i32, false);
        let other = m.resolve(b.id(), 8192).unwrap();
        assert_ne!(other, base);
        // safety: `b` is alive, so both `base` (its own mapping) and `other` (a second
        // mapping of the same memfd) are 8192 valid bytes; byte 17 is in range and no
        // reference to either exists.
        unsafe {
            *(base as *mut u8).add(17) = 42;
            assert_eq!(*(other as *const u8).add(17), 42);
        }
        let id = b.id();
        drop(b);
        assert_eq!(locate(base, 1), None);
        assert!(RegionMap::new(std::process::id() as i32, true)
            .resolve(id, 1)
            .is_err());
        // A new region reusing the fd number replaces the old mapping.
        let b2 = SharedBuffer::new(4096).unwrap();
        if b2.id() as u32 == id as u32 {
            let before = m.owned.len();
            m.resolve(b2.id(), 4096).unwrap();
            assert_eq!(m.owned.len(), before);
            assert!(!m.cache.contains_key(&id));
        }
    }
}
