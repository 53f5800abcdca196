//! `"auto"` ring sizes: the chip sizes a resource to the program's measured need.
//!
//! A dispatch whose sizing has an `"auto"` entry (`RuntimeEnv::AUTO`, source
//! [`SizeSource::Auto`]) is keyed by its program's name and its arguments' signature
//! (each tensor's shape and dtype, each scalar's value). The first dispatch of a key runs
//! with the built-in defaults in the auto entries (halved, heaps first, until the arena
//! fits the device memory) while the engine records its task
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
//! its learned sizing: the failing auto entry then doubles (not beyond what the chip's
//! device memory holds) for the next dispatch of the key, and the error says so. The
//! failed dispatch is not run again (its kernels may have written).

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
    /// The need per field and ring (window: live slots + 1; heap bytes; dep entries).
    need: [[u64; RUNTIME_ENV_RING_COUNT]; 3],
    /// A floor per field and ring, raised when a dispatch failed for capacity.
    floor: [[u64; RUNTIME_ENV_RING_COUNT]; 3],
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
            floor: [[0; RUNTIME_ENV_RING_COUNT]; 3],
        }
    }

    /// `sizing` with its auto entries sized.
    fn apply(&self, mut sizing: RingSizing) -> RingSizing {
        for f in RingField::ALL {
            for r in 0..RUNTIME_ENV_RING_COUNT {
                if sizing.source(f, r) == SizeSource::Auto {
                    let v = auto_size(f, self.need[f.index()][r]).max(self.floor[f.index()][r]);
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
        if let Some(l) = self.auto.get(&key).copied() {
            let s = l.apply(sizing);
            return self
                .run_inner(program, args, &s, hook, diag)
                .map_err(|e| self.grow(key, l, &s, e));
        }
        let sizing = self.first_pass_sizing(sizing);
        let mut rec = Some(Box::new(Recorder::new(
            args.iter().map(arg_buffer).collect(),
        )));
        let r = self.run_body(
            program.name(),
            &|o, a| program.call(o, a),
            args,
            &sizing,
            hook,
            diag,
            Some(&mut rec),
            false,
        );
        match r {
            Ok(rep) => {
                let graph = rec.expect("the recorder comes back from the run").finish();
                let l = Learned::of(&Needs::of(&graph));
                self.auto.insert(key, l);
                // Only the learned sizing's arena stays charged: the first pass's goes
                // if this dispatch built it (one that was resident before, a prewarm's
                // or another dispatch's, stays).
                if !rep.arena_hit && l.apply(sizing).key() != sizing.key() {
                    drop(self.cache.take(&sizing));
                }
                Ok(rep)
            }
            Err(e) => Err(self.grow(key, Learned::default(), &sizing, e)),
        }
    }

    /// The sizing of a key's first dispatch: the defaults in the auto entries, with the
    /// auto heaps (then windows and dep pools) halved, largest first, until the arena
    /// fits the chip's device memory (a need beyond that shows as a capacity failure,
    /// which grows the entry).
    fn first_pass_sizing(&self, mut sizing: RingSizing) -> RingSizing {
        let room = self
            .cache
            .capacity()
            .saturating_sub(self.cache.outside_bytes());
        for f in [RingField::Heap, RingField::TaskWindow, RingField::DepPool] {
            while crate::arena::device_footprint(&sizing) > room {
                let Some((r, v)) = (0..RUNTIME_ENV_RING_COUNT)
                    .filter(|&r| sizing.source(f, r) == SizeSource::Auto)
                    .map(|r| (r, sizing.get(f)[r]))
                    .filter(|&(_, v)| clamp_valid(f, v / 2) < v)
                    .max_by_key(|&(_, v)| v)
                else {
                    break;
                };
                sizing.set_value(f, r, clamp_valid(f, v / 2));
            }
        }
        sizing
    }

    /// After a failed auto dispatch: a capacity failure of an auto entry doubles it
    /// (at least to the size the failure says was needed) for the next dispatch of
    /// `key`, within the device memory; the error says so.
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
            to = to.max(auto_size(f, n));
        }
        let mut next = *ran;
        next.set_value(f, r, to);
        let (capacity, outside) = (self.cache.capacity(), self.cache.outside_bytes());
        if crate::arena::device_footprint(&next) > capacity.saturating_sub(outside) {
            e.detail.push_str(&format!(
                "; auto: {}[{r}] cannot grow from {now} to {to}: that sizing does not fit the device memory ({capacity} bytes)",
                f.name()
            ));
            return e;
        }
        l.floor[f.index()][r] = to;
        if l.need == [[0; RUNTIME_ENV_RING_COUNT]; 3] {
            // No need learned yet (the first dispatch failed): the other auto entries
            // keep what they ran with.
            for g in RingField::ALL {
                for q in 0..RUNTIME_ENV_RING_COUNT {
                    if ran.source(g, q) == SizeSource::Auto && l.floor[g.index()][q] == 0 {
                        l.floor[g.index()][q] = ran.get(g)[q];
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
