//! Arenas (all memory one ring sizing needs) and the per-chip arena cache.
//!
//! An [`Arena`] holds, per ring, the slot table, payload table, dependency-node and
//! fanin-spill pools, the heap, and the orchestrator's private per-slot records, plus
//! the tensormap. Every table is an anonymous mapping ([`crate::mem::ZeroedArray`]):
//! building an arena reserves address space and touches nothing, so the default sizing
//! (4 × 256 MiB heaps, 4 × 16384 slots) builds in microseconds and costs RSS only for
//! what a run touches. Reset between runs is O(rings): counters go back to zero; slots
//! are re-initialised lazily when the orchestrator prepares them, and the tensormap and
//! the fanin dedup marks use epochs.
//!
//! [`ArenaCache`] keeps up to `slots` arenas keyed by [`RingSizing::key`] in LRU order;
//! evicting one unmaps its memory. `slots = 1` is upstream's single slot: every change
//! of sizing rebuilds.
//!
//! # Device memory
//!
//! Host memory is committed lazily, but a device allocates an arena whole. Each arena is
//! charged at its device footprint ([`device_footprint`]) against the chip's device
//! memory (`ChipOptions::device_memory`): per ring, task-window slots ×
//! [`SLOT_RECORD_BYTES`] + heap bytes + dep-pool entries × [`DEP_ENTRY_BYTES`], plus one
//! tensormap sized from the windows ([`tensormap_bytes`]). An arena that does not fit beside the cached ones
//! evicts idle cached arenas, least recently used first; one that cannot fit even
//! then is refused ([`AcquireError::OutOfMemory`]) before anything is evicted.

use crate::config::RingSizing;
use crate::engine::shared::{ArenaShared, DepNode, PayloadCell, RingShared, SlotState};
use crate::engine::OrchState;
use crate::mem::{ReserveError, ZeroedArray};
use std::time::Instant;

/// Device bytes of one task-window slot: its state, its payload and the orchestrator's
/// record of it.
pub const SLOT_RECORD_BYTES: u64 = (std::mem::size_of::<SlotState>()
    + std::mem::size_of::<PayloadCell>()
    + crate::engine::orch::ORCH_SLOT_BYTES) as u64;

/// Device bytes of one dependency-pool entry: a fanout node and a fanin spill word.
pub const DEP_ENTRY_BYTES: u64 =
    (std::mem::size_of::<DepNode>() + std::mem::size_of::<u64>()) as u64;

/// Device bytes of the tensormap of an arena whose rings have `windows` slots: its
/// pool, sized from the windows (a power of two in [1024, 65536]: the windows' sum × 16
/// tensors a task may write), and its 4096 buckets.
pub fn tensormap_bytes(windows: &[u64; 4]) -> u64 {
    crate::engine::tensormap::tensormap_bytes(crate::engine::tensormap::pool_entries(windows))
        as u64
}

/// The device footprint of an arena of `sizing` (see the module doc), saturating.
pub fn device_footprint(sizing: &RingSizing) -> u64 {
    (0..4).fold(tensormap_bytes(&sizing.task_window), |b, r| {
        b.saturating_add(sizing.task_window[r].saturating_mul(SLOT_RECORD_BYTES))
            .saturating_add(sizing.heap[r])
            .saturating_add(sizing.dep_pool[r].saturating_mul(DEP_ENTRY_BYTES))
    })
}

/// [`device_footprint`] of a sizing given by its [`RingSizing::key`] (windows, heaps,
/// dep pools).
pub fn key_footprint(key: &[u64; 12]) -> u64 {
    let windows = [key[0], key[1], key[2], key[3]];
    (0..4).fold(tensormap_bytes(&windows), |b, r| {
        b.saturating_add(key[r].saturating_mul(SLOT_RECORD_BYTES))
            .saturating_add(key[4 + r])
            .saturating_add(key[8 + r].saturating_mul(DEP_ENTRY_BYTES))
    })
}

/// A sizing in a few words (for messages that list several).
pub(crate) fn sizing_words(s: &RingSizing) -> String {
    format!(
        "window={:?} heap={:?} dep_pool={:?}",
        s.task_window, s.heap, s.dep_pool
    )
}

/// Why [`ArenaCache::acquire`] gave no arena.
#[derive(Clone, Debug, thiserror::Error)]
pub enum AcquireError {
    /// The host could not reserve the memory.
    #[error("{0}")]
    Reserve(#[from] ReserveError),
    /// The arena does not fit the chip's device memory, even with every idle cached
    /// arena evicted.
    #[error("the arena for this sizing ({sizing}) needs {needed} bytes, {free} of {capacity} are free (held: {held})")]
    OutOfMemory {
        sizing: String,
        needed: u64,
        free: u64,
        capacity: u64,
        /// What holds the rest, e.g. `arena window=[..] ...: N bytes, ...` or `nothing`.
        held: String,
    },
}
/// All memory one ring sizing needs. See the module doc.
pub struct Arena {
    sizing: RingSizing,
    /// [`device_footprint`] of the sizing.
    device_bytes: u64,
    pub(crate) shared: ArenaShared,
    pub(crate) orch: OrchState,
    heaps: Vec<HeapMemory>,
    build_s: f64,
}

/// A ring's heap: private (L2 chips) or shared with chip processes (L3 nodes, whose
/// runtime outputs are read by chips).
enum HeapMemory {
    Private(ZeroedArray<u8>),
    Shared(crate::mem::shm::SharedBuffer),
}

impl HeapMemory {
    fn base(&self) -> u64 {
        match self {
            HeapMemory::Private(a) => a.as_ptr() as u64,
            HeapMemory::Shared(b) => b.as_ptr() as u64,
        }
    }
    fn reserved(&self) -> u64 {
        match self {
            HeapMemory::Private(a) => a.reserved_bytes() as u64,
            HeapMemory::Shared(b) => b.len() as u64,
        }
    }
}

impl Arena {
    /// Reserve everything for `sizing`.
    pub fn build(sizing: &RingSizing) -> Result<Arena, ReserveError> {
        Arena::build_with(sizing, false)
    }

    /// Build with heaps in shared memory (`shared_heaps`) or private memory.
    pub fn build_with(sizing: &RingSizing, shared_heaps: bool) -> Result<Arena, ReserveError> {
        let t0 = Instant::now();
        let mut heaps = Vec::with_capacity(4);
        for r in 0..4 {
            heaps.push(if shared_heaps {
                HeapMemory::Shared(
                    crate::mem::shm::SharedBuffer::new(sizing.heap[r] as usize).map_err(|e| {
                        ReserveError {
                            bytes: sizing.heap[r],
                            reason: e.to_string(),
                        }
                    })?,
                )
            } else {
                HeapMemory::Private(ZeroedArray::<u8>::new(sizing.heap[r] as usize)?)
            });
        }
        let ring = |r: usize| RingShared::new(sizing.task_window[r], sizing.dep_pool[r]);
        let shared = ArenaShared {
            rings: [ring(0)?, ring(1)?, ring(2)?, ring(3)?],
        };
        let bases = [0, 1, 2, 3].map(|r| heaps[r].base());
        let orch = OrchState::new(sizing, bases)?;
        Ok(Arena {
            sizing: *sizing,
            device_bytes: device_footprint(sizing),
            shared,
            orch,
            heaps,
            build_s: t0.elapsed().as_secs_f64(),
        })
    }

    pub fn sizing(&self) -> &RingSizing {
        &self.sizing
    }

    /// Seconds the build took.
    pub fn build_s(&self) -> f64 {
        self.build_s
    }

    /// Prepare for a new run (O(rings)).
    pub fn reset(&mut self) {
        for r in &self.shared.rings {
            r.reset();
        }
        self.orch.reset();
    }

    /// The arena's device footprint ([`device_footprint`]).
    pub fn device_bytes(&self) -> u64 {
        self.device_bytes
    }

    /// Bytes of address space reserved by the heaps.
    pub fn heap_reserved_bytes(&self) -> u64 {
        self.heaps.iter().map(|h| h.reserved()).sum()
    }
}

/// Counters of an [`ArenaCache`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ArenaStats {
    pub builds: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Keys of the resident arenas, most recently used first.
    pub resident: Vec<[u64; 12]>,
    /// Total seconds spent building.
    pub build_s: f64,
    /// Device bytes of the resident arenas.
    pub resident_bytes: u64,
    /// Device bytes held outside the cache (arenas set aside for a stuck kernel).
    pub held_bytes: u64,
    /// The chip's device memory.
    pub capacity_bytes: u64,
}

/// LRU cache of arenas. See the module doc.
pub struct ArenaCache {
    slots: usize,
    shared_heaps: bool,
    /// Most recently used first. Boxed: a run holds pointers into its arena while the
    /// LRU order of the vector changes, so an arena must not move.
    #[allow(clippy::vec_box)]
    arenas: Vec<Box<Arena>>,
    stats: ArenaStats,
    /// Device memory the arenas are charged against.
    capacity: u64,
    /// Device memory held outside the cache, with what holds it.
    outside: Vec<(String, u64)>,
}

/// What [`ArenaCache::acquire`] did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Acquired {
    pub hit: bool,
    pub build_s: f64,
}

impl ArenaCache {
    /// A cache of `slots` arenas (at least 1).
    pub fn new(slots: usize) -> ArenaCache {
        ArenaCache {
            slots: slots.max(1),
            shared_heaps: false,
            arenas: Vec::new(),
            stats: ArenaStats::default(),
            capacity: u64::MAX,
            outside: Vec::new(),
        }
    }

    /// Charge the arenas against `bytes` of device memory (default: unlimited).
    pub fn with_device_memory(mut self, bytes: u64) -> ArenaCache {
        self.capacity = bytes;
        self
    }

    /// Device memory held outside the cache now (what, bytes); counted as used.
    pub(crate) fn set_outside(&mut self, held: Vec<(String, u64)>) {
        self.outside = held;
    }

    /// Device bytes of the resident arenas.
    pub fn resident_bytes(&self) -> u64 {
        self.arenas
            .iter()
            .map(|a| a.device_bytes)
            .fold(0, u64::saturating_add)
    }

    pub(crate) fn outside_bytes(&self) -> u64 {
        self.outside
            .iter()
            .map(|h| h.1)
            .fold(0, u64::saturating_add)
    }

    /// Device bytes in use: resident arenas and what is held outside.
    pub fn used_bytes(&self) -> u64 {
        self.resident_bytes().saturating_add(self.outside_bytes())
    }

    /// Evict idle cached arenas, least recently used first, while the device memory in
    /// use exceeds the capacity; true if it fits then.
    pub(crate) fn evict_to_fit(&mut self) -> bool {
        while self.used_bytes() > self.capacity && !self.arenas.is_empty() {
            self.arenas.pop();
            self.stats.evictions += 1;
        }
        self.used_bytes() <= self.capacity
    }

    /// What holds the device memory now, for a message (`nothing` when empty).
    pub(crate) fn holders(&self) -> String {
        let mut held: Vec<String> = self
            .arenas
            .iter()
            .map(|a| {
                format!(
                    "arena {}: {} bytes (idle)",
                    sizing_words(&a.sizing),
                    a.device_bytes
                )
            })
            .collect();
        held.extend(self.outside.iter().map(|(w, b)| format!("{w}: {b} bytes")));
        if held.is_empty() {
            "nothing".into()
        } else {
            held.join(", ")
        }
    }

    /// The device memory the arenas are charged against.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Make room for an arena of `sizing`: refuse it if it cannot fit even with every
    /// cached arena gone (nothing is evicted then), else evict the least recently used
    /// until it fits.
    fn make_room(&mut self, sizing: &RingSizing) -> Result<(), AcquireError> {
        self.check_fits(sizing)?;
        let needed = device_footprint(sizing);
        while self.used_bytes().saturating_add(needed) > self.capacity && !self.arenas.is_empty() {
            self.arenas.pop();
            self.stats.evictions += 1;
        }
        Ok(())
    }

    /// Could an arena of `sizing` fit, with every idle cached arena evicted? The
    /// refusal names the free bytes and what holds the rest. Evicts nothing.
    pub(crate) fn check_fits(&self, sizing: &RingSizing) -> Result<(), AcquireError> {
        let needed = device_footprint(sizing);
        if needed > self.capacity.saturating_sub(self.outside_bytes()) {
            return Err(AcquireError::OutOfMemory {
                sizing: sizing_words(sizing),
                needed,
                free: self.capacity.saturating_sub(self.used_bytes()),
                capacity: self.capacity,
                held: self.holders(),
            });
        }
        Ok(())
    }

    /// A cache whose arenas keep their heaps in shared memory (L3 nodes).
    pub(crate) fn new_shared(slots: usize) -> ArenaCache {
        ArenaCache {
            shared_heaps: true,
            ..ArenaCache::new(slots)
        }
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Is an arena for `sizing` resident?
    pub fn contains(&self, sizing: &RingSizing) -> bool {
        let k = sizing.key();
        self.arenas.iter().any(|a| a.sizing.key() == k)
    }

    /// Build `sizing`'s arena into the cache unless resident (prewarm). Counts as a
    /// build, not as a hit or miss.
    pub fn prewarm(&mut self, sizing: &RingSizing) -> Result<(), AcquireError> {
        if self.contains(sizing) {
            return Ok(());
        }
        self.insert_new(sizing)?;
        Ok(())
    }

    fn insert_new(&mut self, sizing: &RingSizing) -> Result<f64, AcquireError> {
        self.make_room(sizing)?;
        if self.arenas.len() >= self.slots {
            // Drop the least recently used first so its memory is returned before the
            // new reservation.
            self.arenas.pop();
            self.stats.evictions += 1;
        }
        // A reservation that fails (address space or shared memory exhausted) first
        // returns the idle cached arenas' memory, least recently used first.
        let a = loop {
            match Arena::build_with(sizing, self.shared_heaps) {
                Ok(a) => break a,
                Err(_) if !self.arenas.is_empty() => {
                    self.arenas.pop();
                    self.stats.evictions += 1;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let s = a.build_s;
        self.stats.builds += 1;
        self.stats.build_s += s;
        self.arenas.insert(0, Box::new(a));
        Ok(s)
    }

    /// The arena for `sizing`, most recently used now; built if absent.
    pub fn acquire(&mut self, sizing: &RingSizing) -> Result<(&mut Arena, Acquired), AcquireError> {
        let k = sizing.key();
        if let Some(i) = self.arenas.iter().position(|a| a.sizing.key() == k) {
            self.stats.hits += 1;
            let a = self.arenas.remove(i);
            self.arenas.insert(0, a);
            return Ok((
                &mut self.arenas[0],
                Acquired {
                    hit: true,
                    build_s: 0.0,
                },
            ));
        }
        self.stats.misses += 1;
        let s = self.insert_new(sizing)?;
        Ok((
            &mut self.arenas[0],
            Acquired {
                hit: false,
                build_s: s,
            },
        ))
    }

    /// The resident arena for `sizing`, without touching the LRU order or counters.
    pub(crate) fn acquire_resident(&mut self, sizing: &RingSizing) -> Option<(&mut Arena, ())> {
        let k = sizing.key();
        self.arenas
            .iter_mut()
            .find(|a| a.sizing.key() == k)
            .map(|a| (&mut **a, ()))
    }

    /// Remove `sizing`'s arena from the cache and hand it over (it stays mapped while
    /// the caller keeps it). Counted as an eviction.
    pub(crate) fn take(&mut self, sizing: &RingSizing) -> Option<Box<Arena>> {
        let k = sizing.key();
        let i = self.arenas.iter().position(|a| a.sizing.key() == k)?;
        self.stats.evictions += 1;
        Some(self.arenas.remove(i))
    }

    pub fn stats(&self) -> ArenaStats {
        let mut s = self.stats.clone();
        s.resident = self.arenas.iter().map(|a| a.sizing.key()).collect();
        s.resident_bytes = self.resident_bytes();
        s.held_bytes = self.outside_bytes();
        s.capacity_bytes = self.capacity;
        s
    }

    /// Drop every arena.
    pub fn clear(&mut self) {
        self.stats.evictions += self.arenas.len() as u64;
        self.arenas.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::rss_bytes;

    fn sz(w: u64) -> RingSizing {
        RingSizing::uniform(w, 1 << 20, 64).unwrap()
    }

    #[test]
    fn default_build_is_cheap() {
        let before = rss_bytes();
        let a = Arena::build(&RingSizing::default()).unwrap();
        let grown = rss_bytes().saturating_sub(before);
        assert!(
            grown < 16 << 20,
            "default arena build grew RSS by {grown} bytes"
        );
        assert_eq!(a.heap_reserved_bytes(), 4 << 28);
    }

    #[test]
    fn lru_and_counters() {
        let mut c = ArenaCache::new(2);
        c.prewarm(&sz(4)).unwrap();
        assert_eq!(c.stats().builds, 1);
        let (_, h) = c.acquire(&sz(4)).unwrap();
        assert!(h.hit);
        let (_, h) = c.acquire(&sz(8)).unwrap();
        assert!(!h.hit);
        let (_, h) = c.acquire(&sz(16)).unwrap(); // evicts 4 (LRU)
        assert!(!h.hit);
        let s = c.stats();
        assert_eq!((s.builds, s.hits, s.misses, s.evictions), (3, 1, 2, 1));
        assert_eq!(s.resident, vec![sz(16).key(), sz(8).key()]);
        assert!(!c.contains(&sz(4)));
    }

    #[test]
    fn a_failed_reservation_evicts_idle_arenas_and_retries() {
        // Two sizings of 4 x 2^44-byte heaps do not fit a 47-bit address space together.
        let big = |w: u64| RingSizing::uniform(w, 1 << 44, 64).unwrap();
        if Arena::build(&big(4)).is_err() {
            return; // this machine cannot reserve even one (e.g. an address-space limit)
        }
        let mut c = ArenaCache::new(4);
        c.prewarm(&sz(4)).unwrap();
        c.prewarm(&big(8)).unwrap();
        let (_, h) = c.acquire(&big(16)).unwrap();
        assert!(!h.hit);
        let s = c.stats();
        assert_eq!(s.resident[0], big(16).key());
        assert!(!s.resident.contains(&big(8).key()), "{:?}", s.resident);
        assert!(s.evictions >= 1);
    }

    /// A slot's state, its payload and the orchestrator's record of it.
    const SLOT_BYTES_PINNED: u64 = 1696;
    /// A fanout node and a spill word.
    const DEP_BYTES_PINNED: u64 = 24;
    /// A tensormap entry.
    const ENTRY_BYTES_PINNED: u64 = 96;
    /// 4096 buckets of 8 bytes.
    const BUCKET_BYTES_PINNED: u64 = 4096 * 8;

    #[test]
    fn device_footprint_by_hand() {
        // The records the formula counts, pinned: a change of layout shows here.
        assert_eq!(
            (
                SLOT_RECORD_BYTES,
                DEP_ENTRY_BYTES,
                crate::engine::tensormap::ENTRY_BYTES as u64
            ),
            (SLOT_BYTES_PINNED, DEP_BYTES_PINNED, ENTRY_BYTES_PINNED)
        );
        // Windows 16 + 32 + 64 + 128 = 240 slots x 16 tensors = 3840 -> 4096 entries.
        let s =
            RingSizing::from_values([16, 32, 64, 128], [1024, 2048, 4096, 8192], [64, 4, 8, 16])
                .unwrap();
        let want = 4096 * ENTRY_BYTES_PINNED
            + BUCKET_BYTES_PINNED
            + (16 + 32 + 64 + 128) * SLOT_BYTES_PINNED
            + (1024 + 2048 + 4096 + 8192)
            + (64 + 4 + 8 + 16) * DEP_BYTES_PINNED;
        assert_eq!(device_footprint(&s), want);
        assert_eq!(key_footprint(&s.key()), want);
        // The pool's bounds: 1024 entries for the smallest windows, 65536 at most.
        let tiny = RingSizing::uniform(4, 1024, 4).unwrap();
        assert_eq!(
            tensormap_bytes(&tiny.task_window),
            1024 * 96 + BUCKET_BYTES_PINNED
        );
        let default = RingSizing::default();
        assert_eq!(
            tensormap_bytes(&default.task_window),
            65536 * 96 + BUCKET_BYTES_PINNED
        );
        // Saturates instead of wrapping.
        let huge = RingSizing::uniform(1 << 30, 1 << 62, 64).unwrap();
        assert_eq!(device_footprint(&huge), u64::MAX);
    }

    #[test]
    fn an_arena_that_does_not_fit_evicts_idle_ones_lru_first() {
        let (a, b, c) = (sz(4), sz(8), sz(16));
        let per = device_footprint(&c);
        // Room for two arenas of these sizes, not three.
        let mut cache = ArenaCache::new(8).with_device_memory(2 * per + per / 2);
        cache.acquire(&a).unwrap();
        cache.acquire(&b).unwrap();
        cache.acquire(&a).unwrap(); // a is now the most recently used
        assert_eq!(cache.stats().evictions, 0);
        cache.acquire(&c).unwrap(); // evicts b, the least recently used
        let s = cache.stats();
        assert_eq!(s.resident, vec![c.key(), a.key()]);
        assert_eq!(s.evictions, 1);
        assert_eq!(
            s.resident_bytes,
            device_footprint(&a) + device_footprint(&c)
        );
        assert!(s.resident_bytes <= s.capacity_bytes);
    }

    #[test]
    fn an_arena_larger_than_the_device_is_refused_and_nothing_is_evicted() {
        let small = sz(4);
        let mut cache = ArenaCache::new(4).with_device_memory(device_footprint(&small) + (4 << 20));
        cache.acquire(&small).unwrap();
        let big = RingSizing::uniform(16, 16 << 20, 64).unwrap();
        match cache.acquire(&big) {
            Err(AcquireError::OutOfMemory {
                needed,
                free,
                capacity,
                held,
                ..
            }) => {
                assert_eq!(needed, device_footprint(&big));
                assert_eq!(capacity, cache.capacity());
                assert_eq!(free, capacity - device_footprint(&small));
                assert!(
                    held.contains("arena window=[4, 4, 4, 4]") && held.contains("(idle)"),
                    "{held}"
                );
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("an arena larger than the device was built"),
        }
        assert_eq!(cache.stats().resident, vec![small.key()]);
        assert_eq!(cache.stats().evictions, 0);
    }

    #[test]
    fn single_slot_rebuilds_on_every_switch() {
        let mut c = ArenaCache::new(1);
        for i in 0..6 {
            let w = if i % 2 == 0 { 4 } else { 8 };
            c.acquire(&sz(w)).unwrap();
        }
        assert_eq!(c.stats().builds, 6);
        let mut c = ArenaCache::new(2);
        for i in 0..6 {
            let w = if i % 2 == 0 { 4 } else { 8 };
            c.acquire(&sz(w)).unwrap();
        }
        assert_eq!(c.stats().builds, 2);
    }
}
