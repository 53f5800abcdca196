//! Submit, stage by stage (the numbered steps of the module doc of [`super`]). Each stage
//! is one function whose doc states what it guarantees to the next:
//!
//! 1. arguments — [`canonical_order`] (in `canonical.rs`, with stage 3b), [`Orchestrator::canonicalize`] (every view and
//!    output spec valid, every producer live, the heap demand summed) and
//!    [`Orchestrator::check_call`] (the kernel's own check, explicit deps): nothing of
//!    the run has changed when one of them fails;
//! 2. [`Orchestrator::admit`]: scope admission;
//! 3. [`Orchestrator::take_slot`] and [`place_outputs`] (3b): the task's id, slot and output
//!    block;
//! 4. fan-in — [`Orchestrator::gather_fanin`] (explicit deps, creator edges, tensormap
//!    lookups), [`Orchestrator::insert_writers`] (step 5: this task as the new writer),
//!    [`Orchestrator::claim_fanin`];
//! 5. publish — [`Orchestrator::finish_submit`]: the pools ([`spill_demand`]), the
//!    payload ([`Orchestrator::write_payload`]), then [`Orchestrator::wire_and_publish`].
//!
//! The completion protocol's part of the claims, the fanin record and the wiring with
//! the publication is not written here but in `engine/shared/fanin.rs`
//! ([`shared::claim_fanin`], [`shared::write_fanin_record`], [`shared::wire_and_publish`]),
//! which the loom models (`src/loom_models/ring.rs`) call too; the methods here call them
//! with the orchestrator's fanin list and pool reservations.
//!
//! The stages are `#[inline(always)]`: each runs once per submit, and the hot path is
//! one function after inlining, as it was before the split (B2 measures it).

use super::canonical::{
    canonical_order, output_block_bytes, output_spec_error, output_spec_ok, place_outputs,
    CanonicalArgs,
};
use super::{add_fanin_to, DryScope, Orchestrator, ScopeFrame, TaskOutputs, What};
use super::{Blocked, PREFETCH_AHEAD};
use crate::engine::shared::{self, DEP_RETAIN, DEP_WAIT};
use crate::engine::{ArgKind, ArgTag, KernelRef, RuntimeFailure, TaskArgs, FANIN_INLINE};
use crate::tensor::{TaskId, Tensor};
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering::*;

/// What `finish_submit` needs to know of the task besides its tensors and scalars.
#[derive(Clone, Copy)]
pub(super) struct Submitted {
    pub(super) id: TaskId,
    pub(super) kernel: Option<KernelRef>,
    pub(super) inline_complete: bool,
    pub(super) n_inputs: usize,
    pub(super) scalar_float_mask: u16,
    /// The ready queue ([`crate::kernel::Kernel::ready_queue`]; a dummy task: `Any`'s).
    pub(super) queue: u8,
}

/// Fanin spill entries a task needs: its producers beyond the [`FANIN_INLINE`] held in
/// the payload. `live_edges` are the producers claimed or found live, `finished` the
/// overlapping writers found completed by the tensormap lookup: both count, as in
/// upstream's fanin list, so whether a task fits its pool does not depend on how fast
/// its producers happen to complete.
#[inline(always)]
fn spill_demand(live_edges: usize, finished: usize) -> u64 {
    (live_edges + finished).saturating_sub(FANIN_INLINE) as u64
}

impl<'r> Orchestrator<'r> {
    /// Submit (module doc of [`super`], steps 1–7), or count it while a SCOPE_DEADLOCK is
    /// being counted. `inline_complete`: an `alloc()` (outputs only, completes at once).
    #[inline(always)]
    pub(super) fn submit_impl(
        &mut self,
        kernel: Option<KernelRef>,
        args: &TaskArgs,
        inline_complete: bool,
    ) -> Result<TaskOutputs, RuntimeFailure> {
        // The outputs are written where the caller's result goes: returned from the
        // (large, not inlined) body they were a ~0.5 KiB copy per submit.
        let mut out = std::mem::MaybeUninit::<TaskOutputs>::uninit();
        self.submit_into(kernel, args, inline_complete, &mut out)?;
        // safety: `submit_into` returned Ok, so it wrote `out`.
        Ok(unsafe { out.assume_init() })
    }

    /// [`Orchestrator::submit_impl`]'s body: on success the task's outputs are in `out`.
    #[inline(never)]
    fn submit_into(
        &mut self,
        kernel: Option<KernelRef>,
        args: &TaskArgs,
        inline_complete: bool,
        out: &mut MaybeUninit<TaskOutputs>,
    ) -> Result<(), RuntimeFailure> {
        // The last submits' ready pushes woke nobody yet (`wake_debt`): now they do, if
        // a core that could take them is parked.
        self.look_at_wakes();
        self.check_fatal()?;
        if self.dry.is_some() {
            out.write(self.count_dry(args)?);
            return Ok(());
        }
        self.st.fanin.clear();
        let ring = self.current_ring();
        let what = What::new(kernel, inline_complete);
        if let Some(e) = args.error {
            return Err(self.invalid(ring, format!("{what}: {e}")));
        }
        let mut c = CanonicalArgs::new();
        self.canonicalize(args, &what, ring, inline_complete, &mut c)?;
        self.check_call(kernel, args, &c, &what, ring)?;
        let Some(frame) = self.admit(ring, &what)? else {
            out.write(self.count_dry(args)?);
            return Ok(());
        };
        let (id, base) = self.take_slot(ring, c.heap_bytes, &what)?;
        let outputs = out.write(TaskOutputs::new(id));
        place_outputs(&mut c, base, outputs);
        let manual = frame.manual || self.in_manual_scope();
        // A task whose one tensormap write is an inout may take, in its lookup, the
        // entry of a writer it supersedes (`TensorMap::set_writer`): later lookups of
        // the same submit (inouts come after inputs) cannot meet it.
        let single = !manual && c.tm_inserts == 1;
        if single {
            self.st.tensormap.set_writer(id);
        }
        let finished_producers = self.gather_fanin(args, &c, manual);
        let replaced = single && self.st.tensormap.take_writer();
        if !manual && c.tm_inserts > replaced as u32 {
            self.insert_writers(&c, id, ring, &what)?;
        }
        if self.st.recording {
            let head = crate::engine::recording::TaskHead {
                id,
                kernel,
                alloc: inline_complete,
                heap_bytes: c.heap_bytes,
                n_inputs: c.n_inputs as u8,
                scalar_float_mask: args.scalar_float_mask,
            };
            let n = c.n;
            self.st.record(
                &head,
                base,
                frame.id,
                c.tensors(),
                c.tags(),
                &c.order[..n],
                args,
                !manual,
            );
        }
        let task = Submitted {
            id,
            kernel,
            inline_complete,
            n_inputs: c.n_inputs,
            scalar_float_mask: args.scalar_float_mask,
            queue: kernel.map_or(2, |k| k.0.ready_queue()) as u8,
        };
        self.finish_submit(
            &task,
            &what,
            c.tensors(),
            args.scalars(),
            finished_producers,
        )
    }

    /// Latch and return an INVALID_ARGS failure of ring `ring`.
    #[cold]
    #[inline(never)]
    fn invalid(&self, ring: usize, detail: impl Into<String>) -> RuntimeFailure {
        self.fail(RuntimeFailure::invalid_args(Some(ring), detail))
    }

    /// Stage 1b: the tensor arguments of `args` into `c`, in canonical order, each
    /// validated — an OUTPUT spec can be materialised ([`output_spec_error`]), an
    /// existing tensor is a valid view whose producer, if any, is a task of this run
    /// whose scope is still open; `alloc()` has outputs only. On success every entry of
    /// `c` is initialised and the heap demand and tensormap inserts are summed; on
    /// failure (INVALID_ARGS, naming the tensor by its canonical index) nothing of the
    /// run has changed but the latched failure.
    #[inline(always)]
    fn canonicalize(
        &self,
        args: &TaskArgs,
        what: &What,
        ring: usize,
        alloc: bool,
        c: &mut CanonicalArgs,
    ) -> Result<(), RuntimeFailure> {
        let kinds = args.kinds();
        let entries = args.tensor_entries();
        canonical_order(kinds, &mut c.order);
        for k in 0..kinds.len() {
            let i = c.order[k] as usize;
            let n = c.n;
            let tag = match kinds[i] {
                ArgKind::Existing(tag) => {
                    c.tensors[n].write(entries[i]);
                    tag
                }
                ArgKind::Spec => {
                    let s = &args.spec_at(i);
                    if !output_spec_ok(s) {
                        let e = output_spec_error(s).unwrap_or_default();
                        return Err(self.invalid(ring, format!("{what}: tensor {n} (OUTPUT): {e}")));
                    }
                    c.tensors[n].write(s.materialize(0, TaskId::INVALID));
                    ArgTag::Output
                }
            };
            // safety: written just above.
            let t = unsafe { c.tensors[n].assume_init_ref() };
            if alloc && tag != ArgTag::Output {
                return Err(
                    self.invalid(ring, "alloc(): only runtime-allocated outputs are allowed")
                );
            }
            if matches!(kinds[i], ArgKind::Existing(..)) {
                if let Err(e) = t.validate() {
                    let name = tag.name();
                    return Err(self.invalid(ring, format!("{what}: tensor {n} ({name}): {e}")));
                }
            }
            if tag == ArgTag::Output {
                let size = output_block_bytes(t.nbytes());
                c.out_size[n].write(size);
                c.heap_bytes = c.heap_bytes.saturating_add(size);
            } else if t.owner.is_valid() {
                if let Err(msg) = self.check_owner_live(t.owner) {
                    let name = tag.name();
                    return Err(self.invalid(ring, format!("{what}: tensor {n} ({name}): {msg}")));
                }
            }
            if tag == ArgTag::Input {
                c.n_inputs += 1;
            }
            if matches!(tag, ArgTag::Inout | ArgTag::OutputExisting) && !t.manual_dep {
                c.tm_inserts += 1;
            }
            c.tags[n] = tag;
            c.n += 1;
        }
        Ok(())
    }

    /// Stage 1c: the kernel's own check of the canonical arguments, and that every
    /// explicit dependency names a task already submitted in this run (INVALID_ARGS
    /// otherwise; nothing of the run has changed).
    #[inline(always)]
    fn check_call(
        &self,
        kernel: Option<KernelRef>,
        args: &TaskArgs,
        c: &CanonicalArgs,
        what: &What,
        ring: usize,
    ) -> Result<(), RuntimeFailure> {
        if let Some(k) = kernel {
            if let Err(msg) = k.0.check(c.tensors(), c.n_inputs, args.scalars()) {
                return Err(self.invalid(ring, format!("{what}: {msg}")));
            }
        }
        for &(d, _) in args.deps() {
            if !d.is_valid() || (d.0 >> 32) > 3 || d.local() >= self.st.rings[d.ring()].next {
                return Err(self.invalid(
                    ring,
                    format!("{what}: explicit dependency {d:?} is not a task of this run"),
                ));
            }
        }
        Ok(())
    }

    /// Stage 2, scope admission: the innermost scope may own at most `window - 1` tasks.
    /// Returns that scope's frame when the task fits. When it does not, the failure is
    /// structural (the scope can never fit): SCOPE_DEADLOCK at once, or — when counting
    /// is on — `None`: the rest of the scope is now counted without running anything
    /// (the caller returns [`Orchestrator::count_dry`]) and reported at its end with the
    /// window that would have held it.
    #[inline(always)]
    fn admit(&mut self, ring: usize, what: &What) -> Result<Option<ScopeFrame>, RuntimeFailure> {
        let window = self.sizing.task_window[ring];
        let (frame, owned) = self.innermost_scope();
        if owned + 1 < window {
            return Ok(Some(frame));
        }
        let d = DryScope {
            level: self.st.scopes.len(),
            ring,
            depth: self.depth(),
            window,
            owned,
            counted: 0,
            what: what.to_string(),
        };
        if !self.probe.counts_scope_overflow() {
            let d = DryScope {
                owned: owned + 1,
                ..d
            };
            return Err(self.fail(d.failure(false)));
        }
        self.dry = Some(d);
        Ok(None)
    }

    /// Step 3: a slot and `heap_bytes` of the current ring's heap (back-pressure, or
    /// the capacity failure). Returns the task's id and the address of its output block;
    /// the slot is prepared (published as the ring's newest, not yet runnable) and its
    /// orchestrator record holds the heap end and the pool marks of the task.
    #[inline(always)]
    pub(super) fn take_slot(
        &mut self,
        ring: usize,
        heap_bytes: u64,
        what: &What,
    ) -> Result<(TaskId, u64), RuntimeFailure> {
        let (local, heap_off, heap_end) = self.alloc_slot(ring, heap_bytes, what)?;
        let id = TaskId::new(ring as u8, local);
        let rs = &self.sh.rings[ring];
        rs.prepare(local);
        rs.prefetch_slot(local.wrapping_add(PREFETCH_AHEAD));
        {
            let r = &self.st.rings[ring];
            let ahead = (local.wrapping_add(PREFETCH_AHEAD) & r.mask) as usize;
            crate::mem::prefetch_write(r.slots.as_ptr().wrapping_add(ahead) as *const u8, 1);
        }
        self.st.scope_tasks.push(id);
        self.st.tasks += 1;
        let r = &mut self.st.rings[ring];
        let (dep_mark, spill_mark, heap_base) = (r.deps.top, r.spill.top, r.heap_base);
        let os = r.slot_mut(local);
        os.heap_end = heap_end;
        os.dep_mark = dep_mark;
        os.spill_mark = spill_mark;
        Ok((id, heap_base + heap_off))
    }

    /// Step 4, gathering the fan-in into `self.st.fanin` (one edge per producer, flags
    /// merged): the explicit deps, then — outside manual scopes — the creator of every
    /// runtime output read (WAIT + RETAIN) and the last overlapping writers the
    /// tensormap knows for inputs and inouts (WAIT; an inout also removes them as
    /// writers). Producers below the cached watermarks are skipped: a stale watermark
    /// only keeps an edge that the claim then finds gone (generation check). Returns the
    /// overlapping writers found already completed (no edge, but they count in the
    /// spill demand, [`spill_demand`]).
    #[inline(always)]
    fn gather_fanin(&mut self, args: &TaskArgs, c: &CanonicalArgs, manual: bool) -> usize {
        let rr = &self.st.rings;
        let la = [rr[0].seen_la, rr[1].seen_la, rr[2].seen_la, rr[3].seen_la];
        self.begin_fanin();
        for &(d, flags) in args.deps() {
            if d.local() >= la[d.ring()] {
                self.add_fanin(d, flags);
            }
        }
        let mut finished_producers = 0usize;
        if manual {
            return finished_producers;
        }
        let (tensors, tags) = (c.tensors(), c.tags());
        for (t, &tag) in tensors.iter().zip(tags) {
            if tag != ArgTag::Output && t.owner.is_valid() && t.owner.local() >= la[t.owner.ring()]
            {
                self.add_fanin(t.owner, DEP_WAIT | DEP_RETAIN);
            }
            if (tag == ArgTag::Input || tag == ArgTag::Inout)
                && !t.manual_dep
                && !self.st.tensormap.bucket_empty(t.addr)
            {
                let remove = tag == ArgTag::Inout;
                let st = &mut *self.st;
                let (tm, fanin, rings, epoch) =
                    (&mut st.tensormap, &mut st.fanin, &mut st.rings, st.epoch);
                let sh = self.sh;
                let done_edges = &mut finished_producers;
                tm.lookup_pending(
                    t,
                    remove,
                    &la,
                    |p| sh.is_completed(p),
                    |p| add_fanin_to(fanin, rings, epoch, p, DEP_WAIT, true),
                    |_| *done_edges += 1,
                );
            }
        }
        finished_producers
    }

    /// Step 5: this task becomes the last writer of its INOUT and OUTPUT_EXISTING
    /// regions (not no-dep ones) in the tensormap, after room for all of them was
    /// reserved (waiting, or TENSORMAP_OVERFLOW).
    #[inline(always)]
    fn insert_writers(
        &mut self,
        c: &CanonicalArgs,
        id: TaskId,
        ring: usize,
        what: &What,
    ) -> Result<(), RuntimeFailure> {
        self.reserve_tensormap(c.tm_inserts, ring, what)?;
        for (t, &tag) in c.tensors().iter().zip(c.tags()) {
            if matches!(tag, ArgTag::Inout | ArgTag::OutputExisting) && !t.manual_dep {
                let ok = self.st.tensormap.insert(t, id);
                debug_assert!(ok);
            }
        }
        Ok(())
    }

    /// Steps 4 (claims) to 7 of a submit whose slot is taken and whose fanin
    /// (`self.st.fanin`) is gathered: the pools, the payload, wiring and publication.
    /// On success the task is published: ready (pushed) or waiting for its producers;
    /// an `alloc()` is completed.
    #[inline(always)]
    pub(super) fn finish_submit(
        &mut self,
        task: &Submitted,
        what: &What,
        tensors: &[Tensor],
        scalars: &[u64],
        finished_producers: usize,
    ) -> Result<(), RuntimeFailure> {
        let (ring, local) = (task.id.ring(), task.id.local());
        let (waits, live_edges) = self.claim_fanin();
        // 6. fanin record + dependency nodes.
        let spill_need = spill_demand(live_edges, finished_producers);
        let spill_start = if spill_need > 0 {
            self.reserve_pool(ring, spill_need, Blocked::Spill, what)?
        } else {
            0
        };
        // Nodes are reserved for every claimed WAIT edge, not only for producers still
        // running at claim time: the pool demand of a program then does not depend on
        // how fast its producers happen to complete (so sizes that fit once fit again).
        let dep_start = if waits > 0 {
            self.reserve_pool(ring, waits as u64, Blocked::Deps, what)?
        } else {
            0
        };
        self.write_payload(task, tensors, scalars, spill_start);
        if task.inline_complete {
            self.sh.rings[ring].slot(local).mark_completed();
            self.eng.completed.fetch_add(1, Relaxed);
            self.record_marks(ring, local);
            return Ok(());
        }
        if spill_need > 0 || waits > 0 {
            // The pools moved since the slot's marks were taken at allocation.
            self.record_marks(ring, local);
        }
        self.wire_and_publish(task, waits, dep_start);
        Ok(())
    }

    /// Step 4, claims ([`shared::claim_fanin`]): claim the producer of every RETAIN edge
    /// of `self.st.fanin` under its lock, look at the producer of every WAIT-only edge
    /// without one, and keep only the edges still needed (a producer gone, or completed
    /// with a WAIT-only edge, is dropped). Returns the kept WAIT edges (each needs a
    /// dependency node) and the live producers (kept, or completed but not yet
    /// consumed: the spill demand).
    #[inline(always)]
    fn claim_fanin(&mut self) -> (u32, usize) {
        if self.st.fanin.is_empty() {
            return (0, 0);
        }
        let c = shared::claim_fanin(self.sh, &mut self.st.fanin);
        self.st.fanin.truncate(c.kept);
        (c.waits, c.live)
    }

    /// Step 6, the payload: what a core runs the task with (kernel, tensors, scalars) and
    /// its fanin record ([`shared::write_fanin_record`]: inline, then from `spill_start`
    /// in the spill pool), written into the prepared, unpublished slot; made visible to
    /// the cores by the publication (a release) that follows.
    #[inline(always)]
    fn write_payload(
        &self,
        task: &Submitted,
        tensors: &[Tensor],
        scalars: &[u64],
        spill_start: u64,
    ) {
        let (id, kernel, n) = (task.id, task.kernel, tensors.len());
        let rs = &self.sh.rings[id.ring()];
        // safety: the slot was just prepared and is not yet published; payload memory
        // is zero-initialised at arena build (every field is valid at zero) or holds
        // a previous task's payload, so it may be referenced.
        let p = unsafe { rs.payload_mut(id.local()) }.as_mut_ptr();
        if let Some(k) = kernel {
            // `EngineShared::unbounded`, asked of each new kernel in a row only.
            let addr = k.0 as *const dyn crate::kernel::Kernel as *const () as usize;
            if addr != self.st.bounded_seen.get() {
                self.st.bounded_seen.set(addr);
                if !k.0.bounded() {
                    self.eng.unbounded.store(true, Relaxed);
                }
            }
        }
        // safety: as above; the spill entries from `spill_start` are reserved for this
        // submit.
        unsafe {
            (*p).kernel = kernel;
            (*p).queue = task.queue;
            (*p).id = id;
            (*p).n_tensors = n as u8;
            (*p).n_inputs = task.n_inputs as u8;
            (*p).n_scalars = scalars.len() as u8;
            (*p).scalar_float_mask = task.scalar_float_mask;
            // Element by element: a task has few tensors, and a `memcpy` call for a
            // few hundred bytes costs more than the inline moves.
            for (dst, src) in (&mut (*p).tensors)[..n].iter_mut().zip(tensors.iter()) {
                *dst = *src;
            }
            // (No `memcpy` call when there are none.)
            if !scalars.is_empty() {
                (&mut (*p).scalars)[..scalars.len()].copy_from_slice(scalars);
            }
            shared::write_fanin_record(self.sh, id, p, &self.st.fanin, spill_start);
        }
    }

    /// Step 7, wiring and publication ([`shared::wire_and_publish`]): link the task
    /// behind each kept WAIT producer (dependency nodes from `dep_start`), then release
    /// the `+1` of `fanin_count`; the task is pushed to a
    /// ready queue here if no producer is left to do it (exactly once, `shared/slot.rs`).
    #[inline(always)]
    fn wire_and_publish(&self, task: &Submitted, waits: u32, dep_start: u64) {
        let id = task.id;
        let ready = shared::wire_and_publish(self.sh, id, &self.st.fanin, waits, dep_start, || {});
        if ready {
            // The wake-up is owed, not made: see `Orchestrator::wake_debt`.
            // safety: the orchestrator of the engine's run is the one thread that
            // submits (runs of an engine do not overlap).
            let bit = unsafe { self.eng.push_owned_quiet(id, task.queue as usize) };
            self.owe_wakes(bit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spill_demand_counts_producers_beyond_the_inline_record() {
        assert_eq!(spill_demand(0, 0), 0);
        assert_eq!(spill_demand(FANIN_INLINE, 0), 0);
        assert_eq!(spill_demand(FANIN_INLINE, 1), 1);
        assert_eq!(spill_demand(FANIN_INLINE - 3, 5), 2);
        assert_eq!(spill_demand(40, 8), (48 - FANIN_INLINE) as u64);
    }
}
