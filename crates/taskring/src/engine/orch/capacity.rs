//! Back-pressure: the allocators' waits for ring space (slot and heap, dependency pools,
//! tensormap), the structural and no-progress verdicts, and the texts of the capacity
//! failures they give (sizes in the resource's own unit, `needed` only where known).

use super::*;

#[derive(Clone, Copy)]
pub(super) enum Blocked {
    Window,
    Heap,
    Deps,
    Spill,
    Tensormap,
}

impl<'r> Orchestrator<'r> {
    // ----- capacity -----------------------------------------------------------------

    /// Catch up with the ring's watermark: free slots, heap bytes and pool entries.
    #[inline(always)]
    pub(super) fn observe(&mut self, ring: usize) {
        let la = self.sh.rings[ring].last_alive.load(Acquire);
        if la != self.st.rings[ring].seen_la {
            self.catch_up(ring, la);
        }
    }

    /// [`Orchestrator::observe`] when the watermark moved to `la`.
    #[inline(never)]
    pub(super) fn catch_up(&mut self, ring: usize, la: u32) {
        let r = &mut self.st.rings[ring];
        (r.peak_slots, r.peak_heap, r.peak_deps) = r.peaks();
        let last = r.slots[((la - 1) & r.mask) as usize];
        let old_tail = r.heap.tail;
        r.heap.retire_to(la, last.heap_end);
        let t = r.heap.tail;
        r.heap_retired += if t >= old_tail {
            t - old_tail
        } else {
            r.heap.size - old_tail + t
        };
        r.deps.retire_to(last.dep_mark);
        r.spill.retire_to(last.spill_mark);
        r.seen_la = la;
    }

    /// Is the ring's head task pinned so that it can never retire while we wait?
    pub(super) fn head_pinned(&self, ring: usize) -> Option<TaskId> {
        let r = &self.st.rings[ring];
        if r.seen_la == r.next {
            return None;
        }
        let head = TaskId::new(ring as u8, r.seen_la);
        let s = self.sh.slot(head);
        if !s.scope_released()
            || self
                .st
                .fanin
                .iter()
                .any(|e| e.claimed && e.producer == head)
        {
            Some(head)
        } else {
            None
        }
    }

    #[inline(always)]
    pub(super) fn alloc_slot(
        &mut self,
        ring: usize,
        heap_bytes: u64,
        what: &What,
    ) -> Result<(u32, u64, u64), RuntimeFailure> {
        let heap_size = self.sizing.heap[ring];
        let window = self.sizing.task_window[ring];
        if heap_bytes > heap_size {
            let needed = heap_bytes.checked_next_power_of_two();
            let fit = match needed {
                Some(n) => format!("a ring_heap of at least {n} bytes is needed"),
                None => {
                    "no valid ring_heap (a power of 2 of at most 2^63 bytes) holds them".to_string()
                }
            };
            return Err(self.fail(RuntimeFailure::capacity(
                StatusCode::HeapRingDeadlock,
                ring,
                Resource::Heap,
                heap_size,
                // A lower bound (other live tasks hold bytes too): not a size that holds
                // the run.
                None,
                format!("{what}: its outputs need {heap_bytes} bytes (each output rounded up to 1 KiB) but ring {ring}'s ring_heap={heap_size} bytes; {fit}"),
            )
            .with_at_least(needed)));
        }
        // Built at the first wait (most submits never wait).
        let mut clock: Option<Backstop> = None;
        loop {
            self.observe(ring);
            let r = &mut self.st.rings[ring];
            let local = r.next;
            let win_ok = window_admits(local, r.seen_la, window);
            if win_ok {
                if let HeapAlloc::At { offset, end } = r.heap.try_alloc(heap_bytes, local) {
                    r.next += 1;
                    return Ok((local, offset, end));
                }
            }
            let blocked = if win_ok {
                Blocked::Heap
            } else {
                Blocked::Window
            };
            self.wait_or_fail(
                ring,
                blocked,
                heap_bytes,
                what,
                clock.get_or_insert_with(Backstop::new),
            )?;
        }
    }

    /// `need` consecutive entries of `ring`'s dependency pool (`Blocked::Deps`) or
    /// spill pool (`Blocked::Spill`): their start. Waits for retirements while they do
    /// not fit; a demand beyond the pool, or no progress, is the DEP_POOL_OVERFLOW
    /// failure. The room-at-once case is inlined into the submit; the rest is
    /// [`Orchestrator::reserve_pool_waiting`].
    #[inline(always)]
    pub(super) fn reserve_pool(
        &mut self,
        ring: usize,
        need: u64,
        which: Blocked,
        what: &What,
    ) -> Result<u64, RuntimeFailure> {
        if need <= self.sizing.dep_pool[ring] {
            self.observe(ring);
            if let Some(start) = self.try_pool(ring, need, which) {
                return Ok(start);
            }
        }
        self.reserve_pool_waiting(ring, need, which, what)
    }

    /// Take `need` entries of the pool if they fit now (the peak: `OrchRing::peaks`).
    #[inline(always)]
    pub(super) fn try_pool(&mut self, ring: usize, need: u64, which: Blocked) -> Option<u64> {
        let r = &mut self.st.rings[ring];
        let pool = match which {
            Blocked::Spill => &mut r.spill,
            _ => &mut r.deps,
        };
        Some(pool.try_alloc(need)? as u64)
    }

    /// [`Orchestrator::reserve_pool`] when the entries do not fit at once.
    #[cold]
    #[inline(never)]
    pub(super) fn reserve_pool_waiting(
        &mut self,
        ring: usize,
        need: u64,
        which: Blocked,
        what: &What,
    ) -> Result<u64, RuntimeFailure> {
        let cap = self.sizing.dep_pool[ring];
        if need > cap {
            let (noun, extra) = match which {
                Blocked::Spill => ("fanin edges beyond the 16 held inline", ""),
                _ => ("dependency-list entries", " for producers still running"),
            };
            return Err(self.fail(RuntimeFailure::capacity(
                StatusCode::DepPoolOverflow,
                ring,
                Resource::DepPool,
                cap,
                // A lower bound, as for the heap above.
                None,
                format!("{what}: the task needs {need} {noun}{extra} but ring {ring}'s ring_dep_pool={cap} entries; a ring_dep_pool of at least {need} entries is needed"),
            )
            .with_at_least(Some(need))));
        }
        // Built at the first wait (most submits never wait).
        let mut clock: Option<Backstop> = None;
        loop {
            self.observe(ring);
            if let Some(start) = self.try_pool(ring, need, which) {
                return Ok(start);
            }
            self.wait_or_fail(
                ring,
                which,
                need,
                what,
                clock.get_or_insert_with(Backstop::new),
            )?;
        }
    }

    pub(super) fn reserve_tensormap(
        &mut self,
        need: u32,
        ring: usize,
        what: &What,
    ) -> Result<(), RuntimeFailure> {
        let cap = self.st.tensormap.capacity();
        if need > cap {
            return Err(self.fail(RuntimeFailure::capacity(
                StatusCode::TensormapOverflow,
                ring,
                Resource::Tensormap,
                cap as u64,
                Some(need as u64),
                format!("{what}: needs {need} tensormap entries"),
            )));
        }
        // Built at the first wait (most submits never wait).
        let mut clock: Option<Backstop> = None;
        loop {
            if self.st.tensormap.free() >= need {
                return Ok(());
            }
            let la = self.watermarks();
            self.st.tensormap.sweep(&la);
            if self.st.tensormap.free() >= need {
                return Ok(());
            }
            self.wait_or_fail(
                ring,
                Blocked::Tensormap,
                need as u64,
                what,
                clock.get_or_insert_with(Backstop::new),
            )?;
        }
    }

    /// Either prove a deadlock, time out, or wait for progress: the submit is blocked on
    /// `blocked` of `ring` needing `need` more of it. Returns `Ok` after a wait (the
    /// caller retries its allocation); fails at once when the ring's head is pinned by an
    /// open scope (structural), and after the backstop (or the scheduler timeout) without
    /// progress.
    pub(super) fn wait_or_fail(
        &mut self,
        ring: usize,
        blocked: Blocked,
        need: u64,
        what: &What,
        clock: &mut Backstop,
    ) -> Result<(), RuntimeFailure> {
        self.check_fatal()?;
        if !matches!(blocked, Blocked::Tensormap) {
            if let Some(head) = self.head_pinned(ring) {
                let s = self.shortage(ring, blocked, need);
                return Err(self.fail(s.pinned(what, head)));
            }
        }
        match clock.check(self) {
            Verdict::Wait => {}
            Verdict::Deadlock => {
                let s = self.shortage(ring, blocked, need);
                return Err(self.fail(s.no_progress(what, self.policy.backstop)));
            }
            Verdict::Stalled(f) => return Err(self.fail(f)),
        }
        self.wait_for_space(ring, blocked);
        Ok(())
    }

    /// The numbers of `blocked` of `ring` for a submit needing `need` more of it (built
    /// only when a failure is reported).
    #[cold]
    pub(super) fn shortage(&self, ring: usize, blocked: Blocked, need: u64) -> Shortage {
        let (code, resource, configured) = match blocked {
            Blocked::Window => (
                StatusCode::FlowControlDeadlock,
                Resource::TaskWindow,
                self.sizing.task_window[ring],
            ),
            Blocked::Heap => (
                StatusCode::HeapRingDeadlock,
                Resource::Heap,
                self.sizing.heap[ring],
            ),
            Blocked::Deps | Blocked::Spill => (
                StatusCode::DepPoolOverflow,
                Resource::DepPool,
                self.sizing.dep_pool[ring],
            ),
            Blocked::Tensormap => (
                StatusCode::TensormapOverflow,
                Resource::Tensormap,
                self.st.tensormap.capacity() as u64,
            ),
        };
        let r = &self.st.rings[ring];
        let live = (r.next - r.seen_la) as u64;
        let in_use = match blocked {
            Blocked::Window => live,
            Blocked::Heap => r.heap.used(),
            Blocked::Deps => r.deps.used(),
            Blocked::Spill => r.spill.used(),
            Blocked::Tensormap => self.st.tensormap.used() as u64,
        };
        Shortage {
            code,
            resource,
            configured,
            in_use,
            needed: needed_size(blocked, in_use, need, configured),
            more: if matches!(blocked, Blocked::Window) {
                1
            } else {
                need
            },
            unit: match blocked {
                Blocked::Window => "slot",
                Blocked::Heap => "bytes",
                Blocked::Deps | Blocked::Spill | Blocked::Tensormap => "entries",
            },
            ring,
            live,
            window: self.sizing.task_window[ring],
            heap_used: r.heap.used(),
            heap_size: self.sizing.heap[ring],
        }
    }

    /// Wait (briefly) for a watermark to move, or anything to fail: the ring's own, or,
    /// for the tensormap (whose entries belong to producers of every ring), any ring's.
    /// When the executor helps ([`ExecutorProbe::help`](super::ExecutorProbe::help)), run
    /// a ready task instead (its completion may be what frees the space). Spins, yields, then parks on [`Progress`](super::shared::park::Progress) for at
    /// most 20 ms (or the backstop if shorter).
    pub(super) fn wait_for_space(&self, ring: usize, blocked: Blocked) {
        // The cores must see every task pushed so far: their completions free the space.
        self.pay_wakes();
        let seen: [u32; 4] = if matches!(blocked, Blocked::Tensormap) {
            self.watermarks()
        } else {
            [self.st.rings[ring].seen_la; 4]
        };
        let rings: &[usize] = if matches!(blocked, Blocked::Tensormap) {
            &[0, 1, 2, 3]
        } else {
            std::slice::from_ref(&ring)
        };
        let sh = self.sh;
        let eng = self.eng;
        // A core completing tasks back to back advances the watermark once it finds no
        // task, every 32 tasks, or once it sees the orchestrator asleep here
        // (`chip/core.rs` `Held`): so the watermark counts as moved as soon as the task
        // at it is consumed, and the orchestrator advances over it itself (the advance
        // combines; any thread may make it) instead of waiting for the core.
        let moved = || {
            eng.fatal.load(Acquire)
                || rings.iter().any(|&r| {
                    let rs = &sh.rings[r];
                    rs.last_alive.load(Acquire) != seen[if rings.len() == 1 { 0 } else { r }]
                        || (rs.head_consumed() && {
                            rs.advance();
                            true
                        })
                })
        };
        // Back to submitting at once if something was freed — before helping, which
        // would first run a whole task.
        self.wait_until(moved);
    }

    /// Return once `done()` holds, or after a while: at once if it holds already or a
    /// ready task could be run here instead (the executor helps), else after spinning
    /// and yielding a little, else after parking on the engine's progress for at most
    /// 20 ms (or the backstop if shorter). The caller looks again and decides.
    pub(super) fn wait_until(&self, done: impl Fn() -> bool) {
        if done() || self.probe.help() {
            return;
        }
        for i in 0..64 {
            if done() {
                return;
            }
            if i < 48 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Some(h) = self.blocking_hook {
            h(true);
        }
        self.eng
            .progress
            .wait(done, Duration::from_millis(20).min(self.policy.backstop));
        if let Some(h) = self.blocking_hook {
            h(false);
        }
    }
}

/// How short a blocked resource is: what its capacity failure reports.
pub(super) struct Shortage {
    pub(super) code: StatusCode,
    pub(super) resource: Resource,
    /// The configured size, in the resource's unit.
    pub(super) configured: u64,
    pub(super) in_use: u64,
    /// The size that would hold what is live now plus this submit ([`needed_size`]).
    pub(super) needed: Option<u64>,
    /// What the resource lacks, in its own unit: one more slot for the task window, the
    /// submit's bytes for the heap, its entries for the pools.
    pub(super) more: u64,
    pub(super) unit: &'static str,
    pub(super) ring: usize,
    pub(super) live: u64,
    pub(super) window: u64,
    pub(super) heap_used: u64,
    pub(super) heap_size: u64,
}

impl Shortage {
    /// `unit`, in the singular or plural `n` takes.
    pub(super) fn unit_of(&self, n: u64) -> &'static str {
        if self.unit == "slot" && n != 1 {
            "slots"
        } else if self.unit == "entries" && n == 1 {
            "entry"
        } else {
            self.unit
        }
    }

    /// The ring's use of every resource, for the message.
    pub(super) fn usage(&self) -> String {
        let Shortage {
            ring,
            live,
            window,
            heap_used,
            heap_size,
            in_use,
            configured,
            more,
            ..
        } = *self;
        format!(
            "ring {ring}: {live} live tasks of window {window}, heap {heap_used} of {heap_size} bytes in use, {} {in_use} of {configured} {} in use, {more} more {} needed",
            self.resource.name(),
            self.unit_of(configured),
            self.unit_of(more),
        )
    }

    /// The structural failure: the ring's oldest live task `head` is pinned by an open
    /// scope, so no completion can free space while the orchestrator waits.
    pub(super) fn pinned(&self, what: &What, head: TaskId) -> RuntimeFailure {
        let fit = match self.needed {
            Some(n) => format!(
                "{} of at least {n} {} would be needed",
                self.resource.name(),
                self.unit_of(n)
            ),
            None => format!("no valid {} holds that much", self.resource.name()),
        };
        RuntimeFailure::capacity(
            self.code,
            self.ring,
            self.resource,
            self.configured,
            // What is live now plus this submit: a lower bound of what holds the run.
            None,
            format!(
                "{what}: provable head-of-line deadlock: the ring's oldest live task {head:?} is held by a scope that is still open, and no scope can end while the orchestrator waits here ({}); {fit}",
                self.usage(),
            ),
        )
        .with_at_least(self.needed)
    }

    /// The backstop's failure: nothing completed, ran or was ready for `backstop`.
    pub(super) fn no_progress(&self, what: &What, backstop: Duration) -> RuntimeFailure {
        RuntimeFailure::capacity(
            self.code,
            self.ring,
            self.resource,
            self.configured,
            None,
            format!(
                "{what}: no reclaim progress for ~{} ms: no task completed, ran on a core or waited to run ({})",
                backstop.as_millis(),
                self.usage()
            ),
        )
        .with_at_least(self.needed)
    }
}

/// The size of `blocked` that would hold `in_use` plus a submit needing `need` more
/// (`None`: no valid size of the resource would). A task window keeps one slot free, so
/// it must exceed `in_use + 1` (a power of two). A heap is never the configured size
/// itself: a heap ring that failed at this size does not fit it (the end gap a wrap
/// abandons, and the strict tail rule of `HeapRing::try_alloc`), so the next size up.
pub(super) fn needed_size(
    blocked: Blocked,
    in_use: u64,
    need: u64,
    configured: u64,
) -> Option<u64> {
    match blocked {
        Blocked::Window => (in_use + 2)
            .checked_next_power_of_two()
            .filter(|&n| n <= crate::config::MAX_RING_TASK_WINDOW),
        Blocked::Heap => in_use
            .saturating_add(need)
            .checked_next_power_of_two()
            .map(|n| {
                if n <= configured {
                    configured.saturating_mul(2)
                } else {
                    n
                }
            }),
        Blocked::Deps | Blocked::Spill => {
            Some(in_use + need).filter(|&n| n <= crate::config::MAX_RING_DEP_POOL)
        }
        Blocked::Tensormap => Some(in_use + need),
    }
}

/// The no-progress clock, started lazily at the first wait (the uncontended path reads
/// no clock). Progress is a task completing anywhere; and while a task runs on a core
/// or waits in a ready queue the orchestrator is not stalled either — it waits for that
/// task, up to the scheduler timeout (then SCHEDULER_TIMEOUT names the task on the core
/// or the ready task nobody runs). Only when nothing completes, runs or is ready for
/// the backstop is the wait a capacity deadlock.
pub(super) struct Backstop {
    /// Last completion seen (or the first wait).
    pub(super) since: Option<Instant>,
    pub(super) completed: u64,
    /// Since when nothing ran or was ready (None while something does).
    pub(super) idle_since: Option<Instant>,
}

pub(super) enum Verdict {
    Wait,
    /// Nothing completed, ran or was ready for the backstop.
    Deadlock,
    /// Tasks ran (or were ready) but none completed for the scheduler timeout.
    Stalled(RuntimeFailure),
}

impl Backstop {
    pub(super) fn new() -> Backstop {
        Backstop {
            since: None,
            completed: 0,
            idle_since: None,
        }
    }
    pub(super) fn check(&mut self, o: &Orchestrator<'_>) -> Verdict {
        let c = o.eng.completed.load(Relaxed);
        let now = Instant::now();
        let since = match self.since {
            Some(t) if c == self.completed => t,
            _ => {
                self.completed = c;
                self.since = Some(now);
                self.idle_since = Some(now);
                return Verdict::Wait;
            }
        };
        if o.probe.busy() {
            self.idle_since = None;
            if now.saturating_duration_since(since) >= o.policy.scheduler_timeout {
                return Verdict::Stalled(o.probe.stall(o.policy.scheduler_timeout, o.st.tasks));
            }
            Verdict::Wait
        } else {
            let idle = *self.idle_since.get_or_insert(now);
            if now.saturating_duration_since(idle) >= o.policy.backstop {
                Verdict::Deadlock
            } else {
                Verdict::Wait
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_window_keeps_a_slot_free() {
        // 3 live + this submit, one slot always free: 8 (a power of two above 4).
        assert_eq!(needed_size(Blocked::Window, 3, 1, 4), Some(8));
        assert_eq!(needed_size(Blocked::Window, 6, 1, 8), Some(8));
        assert_eq!(needed_size(Blocked::Window, 0, 1, 2), Some(2));
        let max = crate::config::MAX_RING_TASK_WINDOW;
        assert_eq!(needed_size(Blocked::Window, max - 1, 1, max), None);
    }

    #[test]
    fn needed_heap_is_never_the_failing_size() {
        assert_eq!(needed_size(Blocked::Heap, 1000, 3000, 1024), Some(4096));
        // Fits by bytes, but failed at this size: the next size up.
        assert_eq!(needed_size(Blocked::Heap, 1024, 1024, 4096), Some(8192));
        assert_eq!(needed_size(Blocked::Heap, u64::MAX, 1, 1024), None);
    }

    #[test]
    fn needed_pools_add_the_demand() {
        assert_eq!(needed_size(Blocked::Deps, 10, 5, 12), Some(15));
        assert_eq!(needed_size(Blocked::Spill, 0, 40, 16), Some(40));
        let max = crate::config::MAX_RING_DEP_POOL;
        assert_eq!(needed_size(Blocked::Deps, max, 1, max), None);
        assert_eq!(needed_size(Blocked::Tensormap, 100, 3, 100), Some(103));
    }

    #[test]
    fn shortage_units_agree_with_their_numbers() {
        let s = Shortage {
            code: StatusCode::FlowControlDeadlock,
            resource: Resource::TaskWindow,
            configured: 4,
            in_use: 3,
            needed: Some(8),
            more: 1,
            unit: "slot",
            ring: 1,
            live: 3,
            window: 4,
            heap_used: 0,
            heap_size: 1024,
        };
        assert_eq!(s.unit_of(1), "slot");
        assert_eq!(s.unit_of(4), "slots");
        assert!(
            s.usage()
                .ends_with("3 of 4 slots in use, 1 more slot needed"),
            "{}",
            s.usage()
        );
        let pool = Shortage {
            unit: "entries",
            ..s
        };
        assert_eq!(pool.unit_of(1), "entry");
        assert_eq!(pool.unit_of(2), "entries");
    }
}
