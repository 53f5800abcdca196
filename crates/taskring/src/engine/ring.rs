//! The per-ring resources as seen by the orchestrator: task window, heap ring, and the
//! linear-counter pools (fanout dependency nodes, fanin spill entries).
//!
//! All three are allocated in task order by the single orchestrator thread and reclaimed
//! together when the ring's `last_task_alive` watermark advances (the orchestrator reads
//! the watermark and calls [`HeapRing::retire_to`] and [`LinearPool::retire_to`]). Nothing here is shared
//! between threads; the shared side (slot states, the watermark itself) lives in
//! `engine::shared`.
//!
//! Rules (upstream's, per ring):
//! - window: local ids `[last_alive, next)` are live; admission needs
//!   `next - last_alive + 1 < window`, so at most `window - 1` tasks are live;
//! - heap: each task's outputs are packed (each output rounded up to 1 KiB); a
//!   request never straddles the end: if it does not fit before the end it wraps to 0
//!   when `tail > size` (strictly), abandoning the end gap; an empty ring parked at a
//!   non-zero offset rebases to 0; the tail is derived from the `heap_end` of the last
//!   retired task (ignored until the rebasing task retires);
//! - pools: `top`/`tail` linear counters, full when `top - tail == capacity`; the tail
//!   moves to the mark the last retired task recorded.

/// Each runtime-allocated output is rounded up to this many bytes.
pub(crate) const OUTPUT_ALIGN_BYTES: u64 = 1024;

/// Round `bytes` up to the output alignment.
#[inline]
pub(crate) const fn align_output(bytes: u64) -> u64 {
    (bytes + OUTPUT_ALIGN_BYTES - 1) & !(OUTPUT_ALIGN_BYTES - 1)
}

/// The heap ring's allocator state (offsets into `[0, size)`).
#[derive(Clone, Debug)]
pub struct HeapRing {
    pub size: u64,
    pub top: u64,
    pub tail: u64,
    /// Local id of the task that rebased the ring; tail updates from older tasks are
    /// ignored until it retires.
    pub rebase_anchor: Option<u32>,
}

/// Outcome of a heap request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeapAlloc {
    /// Offset of the packed outputs; `end` is what the task records as its `heap_end`.
    At { offset: u64, end: u64 },
    /// Does not fit now.
    Full,
}

impl HeapRing {
    pub fn new(size: u64) -> HeapRing {
        HeapRing {
            size,
            top: 0,
            tail: 0,
            rebase_anchor: None,
        }
    }

    pub fn reset(&mut self) {
        self.top = 0;
        self.tail = 0;
        self.rebase_anchor = None;
    }

    /// Bytes in use (including an abandoned end gap while wrapped).
    #[inline]
    pub fn used(&self) -> u64 {
        if self.top >= self.tail {
            self.top - self.tail
        } else {
            self.size - self.tail + self.top
        }
    }

    /// Try to reserve `size` bytes for the task with local id `local`.
    pub(crate) fn try_alloc(&mut self, size: u64, local: u32) -> HeapAlloc {
        if size == 0 {
            return HeapAlloc::At {
                offset: self.top,
                end: self.top,
            };
        }
        if self.top >= self.tail {
            if self.size - self.top >= size {
                let offset = self.top;
                self.top += size;
                return HeapAlloc::At {
                    offset,
                    end: self.top,
                };
            }
            if self.tail > size {
                self.top = size;
                return HeapAlloc::At {
                    offset: 0,
                    end: size,
                };
            }
            if self.top == self.tail && size <= self.size {
                self.top = size;
                self.tail = 0;
                self.rebase_anchor = Some(local);
                return HeapAlloc::At {
                    offset: 0,
                    end: size,
                };
            }
            HeapAlloc::Full
        } else if self.tail - self.top > size {
            let offset = self.top;
            self.top += size;
            HeapAlloc::At {
                offset,
                end: self.top,
            }
        } else {
            HeapAlloc::Full
        }
    }

    /// The watermark moved to `last_alive`; `end_of_last_retired` is the `heap_end` of
    /// task `last_alive - 1`.
    pub fn retire_to(&mut self, last_alive: u32, end_of_last_retired: u64) {
        if let Some(anchor) = self.rebase_anchor {
            if last_alive <= anchor {
                return;
            }
            self.rebase_anchor = None;
        }
        self.tail = end_of_last_retired;
    }
}

/// A linear-counter pool (dependency nodes or fanin spill entries).
#[derive(Clone, Debug)]
pub struct LinearPool {
    pub capacity: u64,
    pub top: u64,
    pub tail: u64,
    /// `top % capacity`, kept as `top` moves (no division per reservation).
    top_index: u64,
}

impl LinearPool {
    pub fn new(capacity: u64) -> LinearPool {
        LinearPool {
            capacity,
            top: 0,
            tail: 0,
            top_index: 0,
        }
    }
    pub fn reset(&mut self) {
        self.top = 0;
        self.tail = 0;
        self.top_index = 0;
    }
    #[inline]
    pub fn used(&self) -> u64 {
        self.top - self.tail
    }
    #[inline]
    pub fn free(&self) -> u64 {
        self.capacity - self.used()
    }
    /// Reserve `n` consecutive linear indices; `None` if they do not fit now. Returns
    /// the physical index of the first ([`LinearPool::index`] of it; the rest follow
    /// it, wrapping at `capacity`).
    #[inline]
    pub(crate) fn try_alloc(&mut self, n: u64) -> Option<usize> {
        if self.free() >= n {
            let start = self.top_index;
            self.top += n;
            // n <= free <= capacity: one subtraction wraps it.
            self.top_index += n;
            if self.top_index >= self.capacity {
                self.top_index -= self.capacity;
            }
            debug_assert_eq!(self.top_index, self.top % self.capacity);
            Some(start as usize)
        } else {
            None
        }
    }
    /// Physical index of linear index `i`.
    #[inline]
    #[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
    pub fn index(&self, i: u64) -> usize {
        (i % self.capacity) as usize
    }
    /// Tasks up to the watermark retired; the last recorded `mark`.
    #[inline]
    pub fn retire_to(&mut self, mark: u64) {
        debug_assert!(mark >= self.tail && mark <= self.top);
        self.tail = mark;
    }
}

/// Task window admission: may one more task be allocated?
#[inline]
pub fn window_admits(next_local: u32, last_alive: u32, window: u64) -> bool {
    ((next_local - last_alive) as u64) + 1 < window
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align() {
        assert_eq!(align_output(0), 0);
        assert_eq!(align_output(1), 1024);
        assert_eq!(align_output(1024), 1024);
        assert_eq!(align_output(1025), 2048);
    }

    #[test]
    fn window_holds_w_minus_one() {
        let w = 4;
        assert!(window_admits(0, 0, w));
        assert!(window_admits(2, 0, w));
        assert!(!window_admits(3, 0, w)); // 3 live already
        assert!(window_admits(3, 1, w));
    }

    #[test]
    fn heap_bump_and_full() {
        let mut h = HeapRing::new(4096);
        assert_eq!(
            h.try_alloc(1024, 0),
            HeapAlloc::At {
                offset: 0,
                end: 1024
            }
        );
        assert_eq!(
            h.try_alloc(2048, 1),
            HeapAlloc::At {
                offset: 1024,
                end: 3072
            }
        );
        assert_eq!(h.used(), 3072);
        // 2048 does not fit before the end; tail == 0 so no wrap.
        assert_eq!(h.try_alloc(2048, 2), HeapAlloc::Full);
        assert_eq!(
            h.try_alloc(1024, 2),
            HeapAlloc::At {
                offset: 3072,
                end: 4096
            }
        );
        assert_eq!(h.used(), 4096);
        assert_eq!(
            h.try_alloc(0, 3),
            HeapAlloc::At {
                offset: 4096,
                end: 4096
            }
        );
    }

    #[test]
    fn heap_wrap_abandons_end_gap() {
        let mut h = HeapRing::new(4096);
        h.try_alloc(2048, 0);
        h.try_alloc(1024, 1); // top = 3072
        h.retire_to(1, 2048); // task 0 retired -> tail 2048
                              // 2048 does not fit in [3072, 4096); tail (2048) > 2048 is false -> full.
        assert_eq!(h.try_alloc(2048, 2), HeapAlloc::Full);
        // 1024 fits before the end.
        // A 1536-byte request (rounded by caller) would not fit the end gap of 1024:
        h.top = 3072;
        assert_eq!(
            h.try_alloc(1024 + 512, 2),
            HeapAlloc::At {
                offset: 0,
                end: 1536
            }
        );
        assert_eq!(h.top, 1536);
        assert!(h.top < h.tail);
        // used counts the abandoned gap: (4096 - 2048) + 1536
        assert_eq!(h.used(), 2048 + 1536);
        // top < tail: strict inequality tail - top > size
        assert_eq!(h.try_alloc(512, 3), HeapAlloc::Full); // 2048-1536 = 512, not > 512
        assert_eq!(
            h.try_alloc(256, 3),
            HeapAlloc::At {
                offset: 1536,
                end: 1792
            }
        );
    }

    #[test]
    fn heap_rebase_when_empty_at_offset() {
        let mut h = HeapRing::new(4096);
        h.try_alloc(3072, 0);
        h.retire_to(1, 3072); // empty, parked at 3072
        assert_eq!(h.used(), 0);
        // 2048 does not fit at the end; tail (3072) > 2048 -> plain wrap.
        assert_eq!(
            h.try_alloc(2048, 1),
            HeapAlloc::At {
                offset: 0,
                end: 2048
            }
        );
        h.retire_to(2, 2048);
        // Now parked at 2048: a 4096 request can only fit by rebasing.
        assert_eq!(
            h.try_alloc(4096, 2),
            HeapAlloc::At {
                offset: 0,
                end: 4096
            }
        );
        assert_eq!(h.rebase_anchor, Some(2));
        assert_eq!(h.tail, 0);
        // A stale marker from an older task is ignored until the anchor retires.
        h.retire_to(2, 2048);
        assert_eq!(h.tail, 0);
        h.retire_to(3, 4096);
        assert_eq!(h.tail, 4096);
        assert_eq!(h.rebase_anchor, None);
        assert_eq!(h.used(), 0);
    }

    #[test]
    fn heap_never_fits_oversize() {
        let mut h = HeapRing::new(1024);
        assert_eq!(h.try_alloc(32 * 1024, 0), HeapAlloc::Full);
    }

    #[test]
    fn pool_counters() {
        let mut p = LinearPool::new(4);
        assert_eq!(p.try_alloc(3), Some(0));
        assert_eq!(p.try_alloc(2), None);
        assert_eq!(p.try_alloc(1), Some(3));
        assert_eq!(p.free(), 0);
        p.retire_to(2);
        // Linear indices 4 and 5: physical 0 and 1.
        assert_eq!(p.try_alloc(2), Some(0));
        assert_eq!(p.index(5), 1);
        assert_eq!(p.used(), 4);
        p.retire_to(6);
        assert_eq!(p.try_alloc(3), Some(2), "linear 6..9, physical 2, 3, 0");
        assert_eq!(p.try_alloc(1), Some(1));
    }
}
