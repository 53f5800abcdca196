//! Lazily committed memory: anonymous mappings that cost address space, not RSS.
//!
//! [`ZeroedArray<T>`] maps `len * size_of::<T>()` bytes of zero-filled anonymous memory
//! (`MAP_NORESERVE`): building one is O(1) whatever its length, and the OS commits a
//! page only when it is first touched. Dropping it unmaps the memory, returning it to the
//! OS. `T` must be valid when all-zero bytes ([`ZeroValid`]).
//!
//! Who uses it: the arena (slot tables, heaps, dependency pools, tensormap pool).
//!
//! [`shm`] is the other kind of memory: memfd regions shared with chip processes (the
//! arena's heaps at L3, the node's host tensors), with the registry that turns a host
//! address into `(region, offset)` and the chip side's region map. It lives here, below
//! the arena, so that L2 (`arena`) does not depend on L3 (`node`), which re-exports it as
//! `node::shm`.

pub mod shm;

use std::marker::PhantomData;
use std::ptr::NonNull;

/// Types for which the all-zero bit pattern is a valid value.
///
/// # Safety
/// Implementors guarantee that `mem::zeroed::<Self>()` is a valid, initialised value.
pub unsafe trait ZeroValid {}

// safety: every bit pattern of an integer is valid, zero included.
unsafe impl ZeroValid for u8 {}
// safety: every bit pattern of an integer is valid, zero included.
unsafe impl ZeroValid for u32 {}
// safety: every bit pattern of an integer is valid, zero included.
unsafe impl ZeroValid for u64 {}
// safety: an atomic has the layout of its integer, and zero is the atomic holding 0.
unsafe impl ZeroValid for std::sync::atomic::AtomicU32 {}
// safety: an atomic has the layout of its integer, and zero is the atomic holding 0.
unsafe impl ZeroValid for std::sync::atomic::AtomicU64 {}
// safety: a MaybeUninit makes no claim about its bytes, so any pattern is valid.
unsafe impl<T> ZeroValid for std::mem::MaybeUninit<T> {}
// safety: an UnsafeCell has the layout of its T, which is valid at zero by the bound.
unsafe impl<T: ZeroValid> ZeroValid for std::cell::UnsafeCell<T> {}
// safety: an array is N Ts with no padding between them, each valid at zero by the bound.
unsafe impl<T: ZeroValid, const N: usize> ZeroValid for [T; N] {}

/// Failure to reserve memory.
#[derive(Debug, Clone, thiserror::Error)]
#[error("could not reserve {bytes} bytes of address space: {reason}")]
pub struct ReserveError {
    pub bytes: u64,
    pub reason: String,
}

/// A fixed-length array of `T` in its own anonymous mapping. See the module doc.
pub struct ZeroedArray<T: ZeroValid> {
    ptr: NonNull<T>,
    len: usize,
    map_bytes: usize,
    _own: PhantomData<T>,
}

// safety: the array owns its mapping and the Ts in it like a Box<[T]>, so moving it to
// another thread moves Ts, which `T: Send` allows.
unsafe impl<T: ZeroValid + Send> Send for ZeroedArray<T> {}
// safety: as for Box<[T]>: a shared `&ZeroedArray` gives out only `&[T]` (Deref), which
// `T: Sync` lets threads share; writes through the raw `as_ptr` are for its callers to
// justify, as with any raw pointer.
unsafe impl<T: ZeroValid + Sync> Sync for ZeroedArray<T> {}

impl<T: ZeroValid> ZeroedArray<T> {
    /// Reserve `len` zeroed elements.
    pub fn new(len: usize) -> Result<Self, ReserveError> {
        let bytes = (len as u128) * (std::mem::size_of::<T>() as u128);
        if bytes > isize::MAX as u128 {
            return Err(ReserveError {
                bytes: u64::MAX,
                reason: "size overflows the address space".into(),
            });
        }
        let map_bytes = (bytes as usize).max(1);
        // safety: anonymous private mapping; no file, no fixed address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ReserveError {
                bytes: map_bytes as u64,
                reason: std::io::Error::last_os_error().to_string(),
            });
        }
        debug_assert_eq!(p as usize % std::mem::align_of::<T>().min(4096), 0);
        Ok(ZeroedArray {
            ptr: NonNull::new(p as *mut T).expect("mmap returned null"),
            len,
            map_bytes,
            _own: PhantomData,
        })
    }

    /// [`new`](Self::new), asking for transparent huge pages when the array spans at
    /// least two of them. For dense, hot tables whose 4 KiB pages would each cost a TLB
    /// miss on the hot path (the payload table of a large window is tens of MiB, and
    /// every submit writes a new slot): the first touch of a 2 MiB region then commits
    /// (and zeroes) all of it. A hint: where THP is off, nothing changes.
    #[cfg_attr(loom, allow(dead_code))] // the loom build's tables are boxes
    pub fn new_huge(len: usize) -> Result<Self, ReserveError> {
        let a = Self::new(len)?;
        #[cfg(target_os = "linux")]
        if a.map_bytes >= (4 << 20) {
            // safety: advice on our own mapping; failure (THP unsupported) is harmless.
            unsafe {
                libc::madvise(
                    a.ptr.as_ptr() as *mut libc::c_void,
                    a.map_bytes,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
        Ok(a)
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    #[inline]
    pub fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
    /// Bytes of address space reserved.
    pub fn reserved_bytes(&self) -> usize {
        self.map_bytes
    }

    /// Give the pages back to the OS while keeping the mapping (contents become zero).
    #[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
    pub fn discard(&mut self) {
        // safety: the range is our own mapping; MADV_DONTNEED on private anonymous
        // memory zero-fills on next touch, which is a valid state for T: ZeroValid.
        unsafe {
            libc::madvise(
                self.ptr.as_ptr() as *mut libc::c_void,
                self.map_bytes,
                libc::MADV_DONTNEED,
            );
        }
    }
}

impl<T: ZeroValid> std::ops::Deref for ZeroedArray<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // safety: `len` elements are mapped and zero-valid (or written since).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: ZeroValid> std::ops::DerefMut for ZeroedArray<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // safety: as in Deref, and we hold the unique borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: ZeroValid> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        // safety: unmapping exactly the region we mapped; T needs no destructor beyond
        // what zero-valid plain data has (types stored here hold no owned resources).
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.map_bytes);
        }
    }
}

/// Resident set size of this process in bytes (Linux `/proc/self/statm`), or 0.
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // safety: sysconf is always safe to call.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(0) as u64
}

/// Hint that the `lines` cache lines from `p` will be written soon (a no-op where the
/// target has no prefetch instruction, and under loom). The submit path uses it for the
/// slot it will fill a few tasks ahead, so the stores of the next submits hit lines that
/// are already on their way instead of stalling the publishing `lock xadd` on misses.
#[inline(always)]
pub(crate) fn prefetch_write(p: *const u8, lines: usize) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    for i in 0..lines {
        // safety: prefetch never faults and has no architectural effect.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
            _mm_prefetch::<_MM_HINT_ET0>(p.wrapping_add(i * 64) as *const i8);
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = (p, lines);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_reservation_is_cheap_and_zeroed() {
        let before = rss_bytes();
        let mut a: ZeroedArray<u64> = ZeroedArray::new(1 << 27).unwrap(); // 1 GiB virtual
        let after = rss_bytes();
        assert!(
            after.saturating_sub(before) < 16 << 20,
            "reservation committed memory"
        );
        assert_eq!(a[12345], 0);
        a[7] = 9;
        assert_eq!(a[7], 9);
        a.discard();
        assert_eq!(a[7], 0);
    }
}
