//! The tensormap: which live task last wrote which region of which buffer.
//!
//! Owned by the orchestrator thread (no sharing). Keyed on the buffer base address, so
//! all views of one buffer share a bucket; a bucket is a singly linked chain, newest
//! entry first. An entry is *live* while its producer has not retired
//! (`producer.local >= last_alive[producer.ring]`); dead entries are unlinked lazily by
//! the lookups that meet them, or by [`TensorMap::sweep`] when the pool runs dry.
//!
//! The bucket of a base address ([`TensorMap::bucket_of`]) keeps neighbours apart: the
//! address space is cut into blocks of as many 64-byte lines as there are buckets; a
//! block's lines map one-to-one onto the buckets, turned by a multiplicative hash of
//! the block number. Buffers laid out one after the other (cells of a grid, a
//! program's tiles) then take buckets of their own, in order, within a block (across a
//! block's edge the two parts are turned apart and may meet), where a hash of the whole
//! address puts two of them in one bucket about as often as not once the map holds as
//! many entries as buckets; buffers a block or more apart still land spread out.
//!
//! Reset for a new run is O(1): buckets carry an epoch stamp; a stale stamp reads as an
//! empty bucket.
//!
//! Overlap (upstream's test): a newer probe version is conservatively overlapping; disjoint
//! element ranges do not overlap; views of identical stride structure are compared per
//! dimension (disjoint / covered / partial); anything else is conservatively overlapping.

use crate::mem::{ReserveError, ZeroValid, ZeroedArray};
use crate::tensor::{TaskId, Tensor};

/// The most entries a pool has (upstream's fixed size).
pub(crate) const TENSORMAP_POOL_ENTRIES: usize = 65536;
/// The fewest entries a pool has.
pub(crate) const TENSORMAP_MIN_ENTRIES: usize = 1024;
/// Hash buckets (power of two).
pub(crate) const TENSORMAP_BUCKETS: usize = 4096;

/// Entries of the pool of an arena whose rings have `windows` task-window slots: every
/// live task can hold an entry per tensor it writes, so the sum of the windows times
/// the tensors a task may have bounds what is live at once; rounded up to a power of
/// two within [`TENSORMAP_MIN_ENTRIES`, `TENSORMAP_POOL_ENTRIES`] (stale entries are
/// swept when the pool runs dry).
pub(crate) fn pool_entries(windows: &[u64; 4]) -> usize {
    let live = windows
        .iter()
        .fold(0u64, |a, &w| a.saturating_add(w))
        .saturating_mul(crate::engine::MAX_TASK_TENSORS as u64);
    (live.min(TENSORMAP_POOL_ENTRIES as u64) as usize)
        .next_power_of_two()
        .clamp(TENSORMAP_MIN_ENTRIES, TENSORMAP_POOL_ENTRIES)
}

/// Bytes of one pool entry.
pub(crate) const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();

/// Bytes of a tensormap of `entries` pool entries: its pool and its buckets.
pub(crate) fn tensormap_bytes(entries: usize) -> usize {
    entries * ENTRY_BYTES + TENSORMAP_BUCKETS * std::mem::size_of::<Bucket>()
}
const NIL: u32 = u32::MAX;

/// Result of the overlap test between a probe and an entry of the same buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overlap {
    None,
    /// The probe contains the entry entirely.
    Covered,
    /// Overlapping (or not provably disjoint).
    Other,
}

/// The overlap test of the module doc. The common cases — a newer probe version, the
/// same view again — are inlined into the lookup; the rest is [`check_overlap_views`].
#[inline(always)]
pub(crate) fn check_overlap(probe: &Tensor, e: &Tensor) -> Overlap {
    if probe.version > e.version {
        return Overlap::Other;
    }
    // The same view again (a chain of INOUTs on one tensor, a consumer of a producer's
    // whole output): it covers the entry, and the general test below would divide.
    let n = (probe.ndims as usize).min(crate::tensor::MAX_DIMS);
    if n == e.ndims as usize
        && probe.offset == e.offset
        && probe.dtype == e.dtype
        && (0..n).all(|i| probe.shape[i] == e.shape[i] && probe.strides[i] == e.strides[i])
    {
        return Overlap::Covered;
    }
    check_overlap_views(probe, e)
}

/// [`check_overlap`] of two different views of one version: element ranges, then the
/// per-dimension comparison.
#[inline(never)]
fn check_overlap_views(probe: &Tensor, e: &Tensor) -> Overlap {
    let (p0, p1) = (probe.offset, probe.offset + probe.extent());
    let (e0, e1) = (e.offset, e.offset + e.extent());
    if p1 <= e0 || e1 <= p0 {
        return Overlap::None;
    }
    match structured_overlap(probe, e) {
        Some(o) => o,
        None => Overlap::Other,
    }
}

/// Per-dimension comparison when both views share one stride structure.
fn structured_overlap(p: &Tensor, e: &Tensor) -> Option<Overlap> {
    let n = p.ndims as usize;
    if p.dtype != e.dtype || n == 0 || n != e.ndims as usize || p.strides() != e.strides() {
        return None;
    }
    let st = p.strides();
    if st[n - 1] != 1 {
        return None;
    }
    // Reference shape A: A[i] = st[i-1] / st[i]; A[0] = elems / st[0].
    let mut a = [0u64; crate::tensor::MAX_DIMS];
    for i in 1..n {
        if !st[i - 1].is_multiple_of(st[i]) {
            return None;
        }
        a[i] = (st[i - 1] / st[i]) as u64;
    }
    let elems = p.capacity_elems().max(e.capacity_elems());
    if !elems.is_multiple_of(st[0] as u64) {
        return None;
    }
    a[0] = elems / st[0] as u64;
    let coords = |off: u64| -> Option<[u64; crate::tensor::MAX_DIMS]> {
        let mut c = [0u64; crate::tensor::MAX_DIMS];
        let mut rem = off;
        for i in 0..n {
            c[i] = rem / st[i] as u64;
            rem %= st[i] as u64;
            if i > 0 && c[i] >= a[i] {
                return None;
            }
        }
        (rem == 0).then_some(c)
    };
    let pc = coords(p.offset)?;
    let ec = coords(e.offset)?;
    let mut covered = true;
    for i in 0..n {
        let (ps, pe) = (pc[i], pc[i] + p.shape[i] as u64);
        let (es, ee) = (ec[i], ec[i] + e.shape[i] as u64);
        if pe > a[i] || ee > a[i] {
            return None;
        }
        if pe <= es || ee <= ps {
            return Some(Overlap::None);
        }
        if !(ps <= es && ee <= pe) {
            covered = false;
        }
    }
    Some(if covered {
        Overlap::Covered
    } else {
        Overlap::Other
    })
}

#[derive(Clone, Copy)]
struct Entry {
    tensor: Tensor,
    producer: TaskId,
    next: u32,
}

// safety: Tensor and TaskId are plain data whose zero pattern is valid (DType 0 = F32).
unsafe impl ZeroValid for Entry {}

#[derive(Clone, Copy)]
struct Bucket {
    epoch: u32,
    head: u32,
}
// safety: two integers.
unsafe impl ZeroValid for Bucket {}

/// See the module doc.
pub struct TensorMap {
    buckets: ZeroedArray<Bucket>,
    pool: ZeroedArray<Entry>,
    epoch: u32,
    bump: u32,
    free_head: u32,
    live: u32,
    peak: u32,
    /// The task whose INOUT lookup may take an entry it removes as its own
    /// ([`TensorMap::set_writer`]); `TaskId::INVALID`: none.
    writer: TaskId,
    /// `writer`'s lookup took an entry.
    took: bool,
}

/// Is `producer` still alive given the per-ring watermarks?
#[inline]
fn alive(producer: TaskId, last_alive: &[u32; 4]) -> bool {
    producer.local() >= last_alive[producer.ring()]
}

impl TensorMap {
    /// A tensormap with a pool of `entries` (see `pool_entries`).
    pub fn new(entries: usize) -> Result<TensorMap, ReserveError> {
        Ok(TensorMap {
            buckets: ZeroedArray::new(TENSORMAP_BUCKETS)?,
            pool: ZeroedArray::new(entries.max(1))?,
            epoch: 1,
            bump: 0,
            free_head: NIL,
            live: 0,
            peak: 0,
            writer: TaskId::INVALID,
            took: false,
        })
    }

    /// Forget everything (O(1)).
    pub fn reset(&mut self) {
        self.epoch = self.epoch.wrapping_add(1).max(1);
        self.bump = 0;
        self.free_head = NIL;
        self.live = 0;
        self.peak = 0;
        self.writer = TaskId::INVALID;
        self.took = false;
    }

    /// The next INOUT lookups ([`TensorMap::lookup_pending`] with `remove_covered`) are
    /// `writer`'s, whose one tensormap write is that inout: the first entry such a
    /// lookup would remove (superseded, retired or completed: every entry of the walk
    /// is in the probe's bucket) is not removed but becomes the entry
    /// [`TensorMap::insert`] would add for the probe written by `writer`, in place — a
    /// chain of INOUTs on one tensor keeps one entry, rewritten by each task.
    /// `TaskId::INVALID`: no lookup takes an entry. [`TensorMap::take_writer`] ends it.
    #[inline(always)]
    pub(crate) fn set_writer(&mut self, writer: TaskId) {
        self.writer = writer;
        self.took = false;
    }

    /// Ends [`TensorMap::set_writer`]: whether a lookup took an entry as the writer's
    /// (then the writer inserts nothing).
    #[inline(always)]
    pub(crate) fn take_writer(&mut self) -> bool {
        self.writer = TaskId::INVALID;
        self.took
    }

    /// Entries in use (live or not yet unlinked).
    pub fn used(&self) -> u32 {
        self.live
    }
    pub fn peak(&self) -> u32 {
        self.peak
    }
    pub fn capacity(&self) -> u32 {
        self.pool.len() as u32
    }
    /// Entries that can be inserted without a sweep.
    pub fn free(&self) -> u32 {
        self.capacity() - self.live
    }

    /// No entry can match `addr` (its bucket is empty): the caller may skip the lookup.
    #[inline(always)]
    pub(crate) fn bucket_empty(&self, addr: u64) -> bool {
        self.head(Self::bucket_of(addr)) == NIL
    }

    /// The bucket of base address `addr` (module doc): its 64-byte line within its
    /// block of `TENSORMAP_BUCKETS` lines, turned by a hash of the block.
    #[inline]
    fn bucket_of(addr: u64) -> usize {
        let bits = TENSORMAP_BUCKETS.trailing_zeros();
        let line = addr >> 6;
        let block = line >> bits;
        let rotate = block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits);
        (line.wrapping_add(rotate) as usize) & (TENSORMAP_BUCKETS - 1)
    }

    /// Bucket `b`'s record. Unchecked: `b` comes from [`TensorMap::bucket_of`], below
    /// `TENSORMAP_BUCKETS`, the length of `buckets`.
    #[inline(always)]
    fn bucket_mut(&mut self, b: usize) -> &mut Bucket {
        debug_assert!(b < self.buckets.len());
        // safety: in bounds (above); `&mut self` is unique.
        unsafe { &mut *self.buckets.as_ptr().add(b) }
    }

    /// Pool entry `i`. Unchecked: every index the map holds (a bucket head of this
    /// epoch, an entry's `next`, the free list) was handed out by `insert`, below
    /// `pool.len()`.
    #[inline(always)]
    fn entry_mut(&mut self, i: u32) -> &mut Entry {
        debug_assert!((i as usize) < self.pool.len());
        // safety: in bounds (above); `&mut self` is unique.
        unsafe { &mut *self.pool.as_ptr().add(i as usize) }
    }

    #[inline]
    fn head(&self, b: usize) -> u32 {
        debug_assert!(b < self.buckets.len());
        // safety: `b` comes from `bucket_of` (see `bucket_mut`).
        let bk = unsafe { *self.buckets.as_ptr().add(b) };
        if bk.epoch == self.epoch {
            bk.head
        } else {
            NIL
        }
    }

    #[inline]
    fn free_entry(&mut self, i: u32) {
        self.entry_mut(i).next = self.free_head;
        self.free_head = i;
        self.live -= 1;
    }

    /// Call `f(producer)` for every live entry of `probe`'s buffer that overlaps it; when
    /// `remove_covered`, entries the probe covers are removed (an INOUT supersedes them).
    #[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
    pub fn lookup(
        &mut self,
        probe: &Tensor,
        remove_covered: bool,
        last_alive: &[u32; 4],
        f: impl FnMut(TaskId),
    ) {
        self.lookup_pending(probe, remove_covered, last_alive, |_| false, f, |_| {})
    }

    /// As [`TensorMap::lookup`], also dropping entries whose producer `done` says has
    /// completed: an edge to it would only be skipped (tensormap edges are WAIT-only),
    /// and keeping it would make every later lookup on the buffer walk past it — the
    /// chain of a buffer written view by view would grow with every task of the scope.
    /// A dropped entry that overlaps the probe is reported to `on_done` (the caller
    /// still counts it in the task's fanin demand, which then does not depend on how
    /// fast producers complete).
    pub(crate) fn lookup_pending(
        &mut self,
        probe: &Tensor,
        remove_covered: bool,
        last_alive: &[u32; 4],
        done: impl Fn(TaskId) -> bool,
        mut f: impl FnMut(TaskId),
        mut on_done: impl FnMut(TaskId),
    ) {
        let b = Self::bucket_of(probe.addr);
        let mut prev = NIL;
        let mut cur = self.head(b);
        while cur != NIL {
            // safety: every index in a chain (a bucket head of this epoch, an entry's
            // `next`) was handed out by `insert`, below `pool.len()`; a stale bucket
            // reads as empty (`head`), so no chain reaches an earlier epoch's links.
            let e = unsafe { self.pool.get_unchecked(cur as usize) };
            let next = e.next;
            let mut unlink = false;
            if e.tensor.addr == probe.addr {
                if !alive(e.producer, last_alive) {
                    unlink = true;
                } else if done(e.producer) {
                    unlink = true;
                    if check_overlap(probe, &e.tensor) != Overlap::None {
                        on_done(e.producer);
                    }
                } else {
                    match check_overlap(probe, &e.tensor) {
                        Overlap::None => {}
                        Overlap::Covered => {
                            f(e.producer);
                            unlink = remove_covered;
                        }
                        Overlap::Other => f(e.producer),
                    }
                }
            } else if !alive(e.producer, last_alive) {
                unlink = true;
            }
            if unlink && remove_covered && self.writer.is_valid() {
                let writer = std::mem::replace(&mut self.writer, TaskId::INVALID);
                let e = self.entry_mut(cur);
                e.tensor = *probe;
                e.producer = writer;
                self.took = true;
                prev = cur;
            } else if unlink {
                if prev == NIL {
                    let epoch = self.epoch;
                    *self.bucket_mut(b) = Bucket { epoch, head: next };
                } else {
                    self.entry_mut(prev).next = next;
                }
                self.free_entry(cur);
            } else {
                prev = cur;
            }
            cur = next;
        }
    }

    /// Record that `producer` writes `t`. Returns false when the pool is full (call
    /// [`TensorMap::sweep`] or wait for retirement first).
    pub fn insert(&mut self, t: &Tensor, producer: TaskId) -> bool {
        let idx = if self.free_head != NIL {
            let i = self.free_head;
            self.free_head = self.entry_mut(i).next;
            i
        } else if (self.bump as usize) < self.pool.len() {
            self.bump += 1;
            self.bump - 1
        } else {
            return false;
        };
        let b = Self::bucket_of(t.addr);
        let head = self.head(b);
        *self.entry_mut(idx) = Entry {
            tensor: *t,
            producer,
            next: head,
        };
        let epoch = self.epoch;
        *self.bucket_mut(b) = Bucket { epoch, head: idx };
        self.live += 1;
        self.peak = self.peak.max(self.live);
        true
    }

    /// Unlink every entry whose producer retired. Returns how many were freed.
    pub fn sweep(&mut self, last_alive: &[u32; 4]) -> u32 {
        let before = self.live;
        for b in 0..TENSORMAP_BUCKETS {
            let mut prev = NIL;
            let mut cur = self.head(b);
            while cur != NIL {
                let e = self.pool[cur as usize];
                if !alive(e.producer, last_alive) {
                    if prev == NIL {
                        self.buckets[b] = Bucket {
                            epoch: self.epoch,
                            head: e.next,
                        };
                    } else {
                        self.pool[prev as usize].next = e.next;
                    }
                    self.free_entry(cur);
                } else {
                    prev = cur;
                }
                cur = e.next;
            }
        }
        before - self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;

    fn buf() -> Tensor {
        Tensor::from_raw(0x10000, &[8, 8], DType::F32)
    }

    #[test]
    fn overlap_disjoint_covered_partial() {
        let t = buf();
        let top = t.rows_slice(0, 4).unwrap();
        let bottom = t.rows_slice(4, 8).unwrap();
        assert_eq!(check_overlap(&top, &bottom), Overlap::None);
        assert_eq!(check_overlap(&t, &top), Overlap::Covered);
        assert_eq!(check_overlap(&top, &t), Overlap::Other);
        let mid = t.rows_slice(2, 6).unwrap();
        assert_eq!(check_overlap(&top, &mid), Overlap::Other);
        assert_eq!(check_overlap(&t, &t), Overlap::Covered);
    }

    /// The same view again covers the entry, whatever its strides (the general test
    /// would call a stride structure it cannot reason about overlapping, not covered);
    /// a newer probe version stays conservatively overlapping.
    #[test]
    fn an_identical_view_is_covered() {
        let t = buf();
        let every_other = t.view(&[8, 4], 0, Some(&[8, 2])).unwrap();
        assert_eq!(check_overlap(&every_other, &every_other), Overlap::Covered);
        let col = t.view(&[8, 1], 3, Some(&[8, 1])).unwrap();
        assert_eq!(check_overlap(&col, &col), Overlap::Covered);
        let shifted = t.view(&[8, 1], 4, Some(&[8, 1])).unwrap();
        assert_eq!(check_overlap(&col, &shifted), Overlap::None);
        let mut newer = col;
        newer.version = col.version + 1;
        assert_eq!(check_overlap(&newer, &col), Overlap::Other);
    }

    #[test]
    fn overlap_strided_column_blocks() {
        let t = buf();
        let left = t.view(&[8, 4], 0, Some(&[8, 1])).unwrap();
        let right = t.view(&[8, 4], 4, Some(&[8, 1])).unwrap();
        // Element ranges interleave, but the per-dim test proves them disjoint.
        assert_eq!(check_overlap(&left, &right), Overlap::None);
        let inner = t.view(&[2, 2], 8 * 3 + 1, Some(&[8, 1])).unwrap();
        assert_eq!(check_overlap(&left, &inner), Overlap::Covered);
        assert_eq!(check_overlap(&right, &inner), Overlap::None);
        // Different stride structure: conservatively overlapping.
        let every_other = t.view(&[8, 4], 0, Some(&[8, 2])).unwrap();
        assert_eq!(check_overlap(&every_other, &right), Overlap::Other);
    }

    #[test]
    fn overlap_versions() {
        let t = buf();
        let top = t.rows_slice(0, 4).unwrap();
        let mut bottom = t.rows_slice(4, 8).unwrap();
        bottom.version = 1;
        assert_eq!(check_overlap(&bottom, &top), Overlap::Other);
        assert_eq!(check_overlap(&top, &bottom), Overlap::None);
    }

    #[test]
    fn insert_lookup_remove_and_retire() {
        let mut m = TensorMap::new(TENSORMAP_POOL_ENTRIES).unwrap();
        let t = buf();
        let la = [0u32; 4];
        assert!(m.insert(&t.rows_slice(0, 4).unwrap(), TaskId::new(1, 0)));
        assert!(m.insert(&t.rows_slice(4, 8).unwrap(), TaskId::new(1, 1)));
        let mut seen = vec![];
        m.lookup(&t.rows_slice(0, 2).unwrap(), false, &la, |p| seen.push(p));
        assert_eq!(seen, vec![TaskId::new(1, 0)]);
        seen.clear();
        // An INOUT over the whole buffer covers both and removes them.
        m.lookup(&t, true, &la, |p| seen.push(p));
        assert_eq!(seen.len(), 2);
        assert_eq!(m.used(), 0);
        // Retirement hides entries and frees them lazily.
        assert!(m.insert(&t, TaskId::new(2, 5)));
        seen.clear();
        m.lookup(&t, false, &[0, 0, 6, 0], |p| seen.push(p));
        assert!(seen.is_empty());
        assert_eq!(m.used(), 0);
        // Sweep and reset.
        assert!(m.insert(&t, TaskId::new(0, 3)));
        assert_eq!(m.sweep(&[4, 0, 0, 0]), 1);
        assert!(m.insert(&t, TaskId::new(0, 9)));
        m.reset();
        seen.clear();
        m.lookup(&t, false, &la, |p| seen.push(p));
        assert!(seen.is_empty());
    }

    /// Neighbouring buffers take buckets of their own; buffers a block apart, or at a
    /// stride that walks line and block together, still spread over the buckets.
    #[test]
    fn buckets_keep_neighbours_apart_and_spread_strides() {
        let distinct = |addrs: &mut dyn Iterator<Item = u64>| {
            let mut seen = vec![false; TENSORMAP_BUCKETS];
            addrs
                .filter(|&a| !std::mem::replace(&mut seen[TensorMap::bucket_of(a)], true))
                .count()
        };
        let n = TENSORMAP_BUCKETS as u64;
        // The n lines of a block: one bucket each.
        for block in [0u64, 0x7f00_0000_0000 / (64 * n), 12345] {
            let start = block * 64 * n;
            let d = distinct(&mut (0..n).map(|k| start + 64 * k));
            assert_eq!(d, TENSORMAP_BUCKETS);
        }
        // n lines in a row across a block's edge: each part one bucket per line, the
        // two parts overlapping by at most the shorter one.
        for start in [
            0x7f00_0000_1240u64,
            0x5555_5555_5540,
            64 * n * 7 + 64 * (n / 2),
        ] {
            let d = distinct(&mut (0..n).map(|k| start + 64 * k));
            assert!(d >= TENSORMAP_BUCKETS / 2, "from {start:#x}: {d} buckets");
        }
        // Two 64-byte buffers in one line share the line's bucket (the key is the base).
        assert_eq!(TensorMap::bucket_of(0x1000), TensorMap::bucket_of(0x1010));
        // Strides of a block, a page, and a block plus a line: well spread (a perfect
        // spread of random throws fills 1 - 1/e of the buckets).
        for stride in [64 * n, 4096, 64 * n + 64, 1 << 20] {
            let d = distinct(&mut (0..n).map(|k| 0x10_0000_0000 + stride * k));
            assert!(d > TENSORMAP_BUCKETS / 2, "stride {stride}: {d} buckets");
        }
    }

    #[test]
    fn completed_producers_are_dropped_from_the_chain() {
        let mut m = TensorMap::new(TENSORMAP_POOL_ENTRIES).unwrap();
        let t = buf();
        let la = [0u32; 4];
        for r in 0..8u64 {
            assert!(m.insert(&t.rows_slice(r, r + 1).unwrap(), TaskId::new(1, r as u32)));
        }
        assert_eq!(m.used(), 8);
        // Producers 0..6 completed: a lookup reports only the pending ones and unlinks
        // the rest, so the chain no longer grows with every finished writer.
        let mut seen = vec![];
        let mut dropped = 0;
        m.lookup_pending(
            &t,
            false,
            &la,
            |p| p.local() < 6,
            |p| seen.push(p.local()),
            |_| dropped += 1,
        );
        seen.sort();
        assert_eq!(seen, vec![6, 7]);
        assert_eq!(dropped, 6);
        assert_eq!(m.used(), 2);
    }

    /// A writer's INOUT lookup takes the first entry it would remove as its own: one
    /// entry where remove + insert would leave one, seen the same by later lookups;
    /// an INPUT lookup, or a lookup with no writer set, takes nothing.
    #[test]
    fn a_writer_takes_a_removed_entry_in_place() {
        let mut m = TensorMap::new(TENSORMAP_POOL_ENTRIES).unwrap();
        let t = buf();
        let la = [0u32; 4];
        let (a, b, c) = (TaskId::new(1, 0), TaskId::new(1, 1), TaskId::new(1, 2));
        assert!(m.insert(&t, a));
        // `writer` looks up `probe` (an inout when `inout`), with producers below `done`
        // completed: whether it took an entry, the producers reported, the completed.
        let look = |m: &mut TensorMap, probe: &Tensor, inout: bool, writer: TaskId, done: u32| {
            let (mut seen, mut gone) = (vec![], 0);
            m.set_writer(writer);
            m.lookup_pending(
                probe,
                inout,
                &la,
                |p| p.local() < done,
                |p| seen.push(p),
                |_| gone += 1,
            );
            (m.take_writer(), seen, gone)
        };
        // Reading takes nothing.
        assert_eq!(look(&mut m, &t, false, b, 0), (false, vec![a], 0));
        // b's INOUT depends on a and takes its entry.
        assert_eq!(look(&mut m, &t, true, b, 0), (true, vec![a], 0));
        assert_eq!(m.used(), 1);
        assert_eq!(
            look(&mut m, &t, false, TaskId::INVALID, 0),
            (false, vec![b], 0)
        );
        // b completed: c's INOUT counts it as done and takes the entry.
        assert_eq!(look(&mut m, &t, true, c, 2), (true, vec![], 1));
        assert_eq!(m.used(), 1);
        // A partial INOUT does not cover c's entry: nothing removed, nothing taken.
        let d = TaskId::new(1, 3);
        let half = t.rows_slice(0, 4).unwrap();
        assert_eq!(look(&mut m, &half, true, d, 0), (false, vec![c], 0));
        // A retired entry of another buffer in the probe's bucket is taken too.
        let other = Tensor::from_raw(t.addr + 32, &[4], DType::F32);
        assert_eq!(
            TensorMap::bucket_of(other.addr),
            TensorMap::bucket_of(t.addr)
        );
        let e = TaskId::new(1, 9);
        m.set_writer(e);
        let mut seen = vec![];
        m.lookup_pending(
            &other,
            true,
            &[0, 4, 0, 0],
            |_| false,
            |p| seen.push(p),
            |_| {},
        );
        assert!(m.take_writer() && seen.is_empty());
        assert_eq!(m.used(), 1);
        m.lookup(&other, false, &la, |p| seen.push(p));
        assert_eq!(seen, vec![e]);
        // With no writer set, an INOUT removes what it covers.
        seen.clear();
        m.lookup(&other, true, &la, |p| seen.push(p));
        assert_eq!((seen, m.used()), (vec![e], 0));
    }
}
