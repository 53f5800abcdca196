//! `"auto"` ring sizes: the chip sizes a resource to the program's measured need.
//!
//! A dispatch whose sizing has an `"auto"` entry (`RuntimeEnv::AUTO`, source
//! [`SizeSource::Auto`]) is keyed by its program's name and its arguments' signature
//! (each tensor's shape and dtype, each scalar's value). The first dispatch of a key runs
//! with the built-in defaults in the auto entries (halved, the entry that frees the
//! most first, until the arena fits the device memory) while the engine records its task
//! graph, as a capture does: no kernel runs twice and no array is written twice. The
//! graph's structural demand per ring (`engine::replay::Needs`: what must be held at
//! once whatever the timing, `Captured::structural_needs`) is the need; every later
//! dispatch of the key
//! gets, in each auto entry, the need × [`AUTO_HEADROOM`] rounded up to a valid size
//! ([`auto_size`]). The first dispatch's arena is dropped when the learned sizing differs
//! and the dispatch built it (a prewarmed or shared one stays), so only the smaller one
//! stays charged to device memory.
//!
//! A program whose need grows with its data can still meet a capacity failure under
//! its learned sizing, and a learning dispatch shrunk to fit the device memory can meet
//! one too: the failing auto entry then doubles, at least to the size the failure says
//! would have held it, for the next dispatch of the key (a learning dispatch makes room
//! by shrinking its other auto entries, and learns again), not beyond what the chip's
//! device memory holds; the error says so. The failed dispatch is not run again (its
//! kernels may have written).

use super::capture::arg_buffer;
use super::{Arg, ChipWorker, Diagnostics, Program, RunReport};
use crate::config::{RingField, RingSizing, SizeSource, RUNTIME_ENV_RING_COUNT};
use crate::engine::replay::{Needs, Recorder};
use crate::engine::{Resource, RuntimeFailure};
use std::hash::{Hash, Hasher};

/// The headroom over the measured need an `"auto"` entry gets (before rounding up to a
/// valid size).
pub const AUTO_HEADROOM: f64 = 1.25;

/// The valid size for `need` units of field `f` with [`AUTO_HEADROOM`]: at least the
/// field's minimum, a power of two for the window and the heap.
pub fn auto_size(f: RingField, need: u64) -> u64 {
    let want = ((need as f64) * AUTO_HEADROOM).ceil();
    let want = if want >= u64::MAX as f64 {
        u64::MAX
    } else {
        want as u64
    };
    let v = match f {
        RingField::TaskWindow | RingField::Heap => {
            want.checked_next_power_of_two().unwrap_or(1 << 63)
        }
        RingField::DepPool => want,
    };
    clamp_valid(f, v)
}

/// `v` brought into field `f`'s valid range.
fn clamp_valid(f: RingField, v: u64) -> u64 {
    use crate::config::{
        MAX_RING_DEP_POOL, MAX_RING_TASK_WINDOW, MIN_RING_DEP_POOL, MIN_RING_HEAP,
        MIN_RING_TASK_WINDOW,
    };
    match f {
        RingField::TaskWindow => v.clamp(MIN_RING_TASK_WINDOW, MAX_RING_TASK_WINDOW),
        RingField::Heap => v.max(MIN_RING_HEAP),
        RingField::DepPool => v.clamp(MIN_RING_DEP_POOL, MAX_RING_DEP_POOL),
    }
}

/// What the chip learned of one program with one argument signature.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Learned {
    /// The need per field and ring (window: live slots + 1; heap bytes; dep entries),
    /// once `known`.
    need: [[u64; RUNTIME_ENV_RING_COUNT]; 3],
    /// A floor per field and ring (0: none), raised when a dispatch failed for
    /// capacity; before the need is known, the sizes the next learning dispatch runs on.
    floor: [[u64; RUNTIME_ENV_RING_COUNT]; 3],
    /// Entries grown after a capacity failure: the learning dispatch never shrinks them
    /// to fit the device memory.
    pinned: [[bool; RUNTIME_ENV_RING_COUNT]; 3],
    /// The need was learned from a recorded graph (else the next dispatch learns).
    known: bool,
}

impl Learned {
    /// The need from a recorded graph (its structural demand: what must be held at
    /// once whatever the timing; a run's peaks depend on the timing).
    fn of(needs: &Needs) -> Learned {
        let mut need = [[0; RUNTIME_ENV_RING_COUNT]; 3];
        need[RingField::TaskWindow.index()] = needs.slots.map(|s| s + 1);
        need[RingField::Heap.index()] = needs.heap;
        need[RingField::DepPool.index()] = needs.deps;
        Learned {
            need,
            known: true,
            ..Learned::default()
        }
    }

    /// `sizing` with its auto entries sized: from the need once known, else (a learning
    /// dispatch) the floors where set and the defaults elsewhere.
    fn apply(&self, mut sizing: RingSizing) -> RingSizing {
        for f in RingField::ALL {
            for r in 0..RUNTIME_ENV_RING_COUNT {
                if sizing.source(f, r) == SizeSource::Auto {
                    let floor = self.floor[f.index()][r];
                    let v = if self.known {
                        auto_size(f, self.need[f.index()][r]).max(floor)
                    } else if floor > 0 {
                        floor
                    } else {
                        continue;
                    };
                    sizing.set_value(f, r, clamp_valid(f, v));
                }
            }
        }
        sizing
    }
}

/// The key of a program with its arguments' signature.
fn auto_key(name: &str, args: &[Arg<'_>]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    for a in args {
        match a {
            Arg::Tensor(t) => {
                let t = t.tensor();
                0u8.hash(&mut h);
                t.shape().hash(&mut h);
                (t.dtype as u8).hash(&mut h);
            }
            Arg::Scalar(s) => {
                1u8.hash(&mut h);
                format!("{s:?}").hash(&mut h);
            }
        }
    }
    h.finish()
}

/// The field of a capacity failure's resource (None for the tensormap).
fn field_of(r: Resource) -> Option<RingField> {
    match r {
        Resource::TaskWindow => Some(RingField::TaskWindow),
        Resource::Heap => Some(RingField::Heap),
        Resource::DepPool => Some(RingField::DepPool),
        Resource::Tensormap => None,
    }
}

impl ChipWorker {
    /// A dispatch whose sizing has `"auto"` entries (see the module doc).
    pub(super) fn run_auto(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        sizing: RingSizing,
        hook: Option<&dyn Fn(bool)>,
        diag: &Diagnostics,
    ) -> Result<RunReport, RuntimeFailure> {
        let key = auto_key(program.name(), args);
        let l = self.auto.get(&key).copied().unwrap_or_default();
        if l.known {
            let s = l.apply(sizing);
            return self
                .run_inner(program, args, &s, hook, diag)
                .map_err(|e| self.grow(key, l, &s, e));
        }
        // A learning dispatch: record the graph while it runs.
        let first = self.shrink_to_fit(l.apply(sizing), &l.pinned);
        let built = !self.cache.contains(&first);
        let mut rec = Some(Box::new(Recorder::new(
            args.iter().map(arg_buffer).collect(),
        )));
        let r = self.run_body(
            program.name(),
            &|o, a| program.call(o, a),
            args,
            &first,
            hook,
            diag,
            Some(&mut rec),
            false,
        );
        // The learning arena goes if this dispatch built it (one that was resident
        // before, a prewarm's or another dispatch's, stays), unless it is the learned one.
        let r = match r {
            Ok(rep) => {
                let graph = rec.expect("the recorder comes back from the run").finish();
                let learned = Learned::of(&Needs::of(&graph));
                self.auto.insert(key, learned);
                if built && learned.apply(sizing).key() != first.key() {
                    drop(self.cache.take(&first));
                }
                return Ok(rep);
            }
            Err(e) => self.grow(key, l, &first, e),
        };
        if built {
            drop(self.cache.take(&first));
        }
        Err(r)
    }

    /// The device memory an arena may take: the capacity less what is held outside the
    /// cache.
    fn room(&self) -> u64 {
        self.cache
            .capacity()
            .saturating_sub(self.cache.outside_bytes())
    }

    /// `sizing` with its auto entries that are not `pinned` halved, the one that frees
    /// the most device memory first, until the arena fits the chip's device memory (a
    /// need beyond that shows as a capacity failure, which grows and pins the entry).
    fn shrink_to_fit(
        &self,
        mut sizing: RingSizing,
        pinned: &[[bool; RUNTIME_ENV_RING_COUNT]; 3],
    ) -> RingSizing {
        let room = self.room();
        while crate::arena::device_footprint(&sizing) > room {
            let unit = |f: RingField| match f {
                RingField::TaskWindow => crate::arena::SLOT_RECORD_BYTES,
                RingField::Heap => 1,
                RingField::DepPool => crate::arena::DEP_ENTRY_BYTES,
            };
            let best = RingField::ALL
                .into_iter()
                .flat_map(|f| (0..RUNTIME_ENV_RING_COUNT).map(move |r| (f, r)))
                .filter(|&(f, r)| sizing.source(f, r) == SizeSource::Auto && !pinned[f.index()][r])
                .map(|(f, r)| {
                    let v = sizing.get(f)[r];
                    let to = clamp_valid(f, v / 2);
                    (f, r, to, (v - to.min(v)).saturating_mul(unit(f)))
                })
                .filter(|&(_, _, _, saved)| saved > 0)
                .max_by_key(|&(_, _, _, saved)| saved);
            let Some((f, r, to, _)) = best else { break };
            sizing.set_value(f, r, to);
        }
        sizing
    }

    /// After a failed auto dispatch: a capacity failure of an auto entry doubles it (at
    /// least to the size the failure says would have held it) for the next dispatch of
    /// `key`, within the device memory; a learning dispatch makes room for it by
    /// shrinking its other auto entries. The error says what happens.
    fn grow(
        &mut self,
        key: u64,
        mut l: Learned,
        ran: &RingSizing,
        mut e: RuntimeFailure,
    ) -> RuntimeFailure {
        let (Some(f), Some(r)) = (e.resource.and_then(field_of), e.ring) else {
            return e;
        };
        if ran.source(f, r) != SizeSource::Auto {
            return e;
        }
        let now = ran.get(f)[r];
        let mut to = clamp_valid(f, now.saturating_mul(2));
        if let Some(n) = e.needed {
            to = to.max(clamp_valid(f, n));
        }
        let mut next = *ran;
        next.set_value(f, r, to);
        let mut pinned = l.pinned;
        pinned[f.index()][r] = true;
        if !l.known {
            next = self.shrink_to_fit(next, &pinned);
        }
        let capacity = self.cache.capacity();
        if crate::arena::device_footprint(&next) > self.room() {
            e.detail.push_str(&format!(
                "; auto: {}[{r}] cannot grow from {now} to {to}: that sizing does not fit the device memory ({capacity} bytes)",
                f.name()
            ));
            return e;
        }
        l.pinned = pinned;
        if l.known {
            l.floor[f.index()][r] = to;
        } else {
            // The next learning dispatch runs on `next`.
            for g in RingField::ALL {
                for q in 0..RUNTIME_ENV_RING_COUNT {
                    if next.source(g, q) == SizeSource::Auto {
                        l.floor[g.index()][q] = next.get(g)[q];
                    }
                }
            }
        }
        self.auto.insert(key, l);
        e.detail.push_str(&format!(
            "; auto: {}[{r}] grows from {now} to {to} for the next dispatch of this program with these arguments",
            f.name()
        ));
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_sizes_are_valid_and_within_twice_the_need_before_headroom() {
        for f in RingField::ALL {
            for need in [0u64, 1, 3, 4, 5, 17, 100, 1000, 1024, 1025, 65_537, 1 << 20] {
                let v = auto_size(f, need);
                assert!(f.check(v), "{f:?} {need} -> {v}");
                assert!(
                    v as f64 >= need as f64 * AUTO_HEADROOM,
                    "{f:?} {need} -> {v}"
                );
                let floor = match f {
                    RingField::TaskWindow => 4,
                    RingField::Heap => 1024,
                    RingField::DepPool => 4,
                };
                assert!(
                    v <= floor || v as f64 / AUTO_HEADROOM <= 2.0 * need as f64,
                    "{f:?} {need} -> {v}"
                );
            }
        }
        assert!(RingField::Heap.check(auto_size(RingField::Heap, u64::MAX)));
    }
}
