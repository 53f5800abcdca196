//! `"auto"` ring sizes: the chip sizes a resource to the program's measured need.
//!
//! A dispatch whose sizing has an `"auto"` entry (`RuntimeEnv::AUTO`, source
//! [`SizeSource::Auto`]) is keyed by its program's identity ([`Program::identity`]: two
//! programs of one name learn apart) and its arguments' signature: each tensor's shape
//! and dtype, and each scalar's kind. Scalar values are not part of the key until they
//! show that they change the graph (below), so a step counter does not make every
//! dispatch a new key. The chip remembers at most [`AUTO_KEYS`] keys, forgetting the
//! least recently used.
//!
//! 1. **Learning.** The first dispatch of a key runs with the built-in defaults in its
//!    auto entries (halved, the entry that frees the most device memory first, until
//!    the arena fits the device memory) while the engine records its task graph, as a
//!    capture does: no kernel runs twice, no array is written twice. The graph's
//!    structural demand per ring (what must be held at once whatever the timing; the
//!    recording side computes it, [`PerEntry`]) is the need. Its arena is dropped when
//!    the learned sizing differs and the dispatch built it (a prewarmed or shared one
//!    stays), so only the smaller one stays charged to device memory.
//! 2. **Known.** Later dispatches of the key get, in each auto entry, the need ×
//!    [`AUTO_HEADROOM`] rounded up to a valid size ([`auto_size`]).
//! 3. **A need that grows** (the orchestration reads data, or a scalar changes the
//!    graph): a capacity failure of an auto entry fails that dispatch (it is not run
//!    again: its kernels may have written), raises that entry at least to twice its
//!    size and to what the failure says would have held it, and the next dispatch of
//!    the key learns again (step 1, with the raised entry as its floor and kept there
//!    when the arena is shrunk to fit), so every short resource is sized from the whole
//!    graph at once: one failed dispatch per jump in need. When the failed dispatch's
//!    scalar values differ from those the need was learned with, the key splits by
//!    scalar values from then on (each value set learns for itself). When the raised
//!    entry cannot fit the device memory, the failure becomes DEVICE_OUT_OF_MEMORY
//!    naming the free bytes and what holds them; later dispatches of the key are
//!    refused the same way, before anything runs, until the memory is there.
//! 4. **A need that falls again.** A need raised by a failure is checked downwards: every
//!    [`CHECK_EVERY`]th dispatch of the key records its graph while it runs on the
//!    learned sizing; after [`CHECKS`] such records the need becomes the largest of
//!    them, so one spike does not keep a large arena for good. A record that needs more
//!    than the learned need raises it at once.

use super::policy::RunPolicy;
use super::run::Dispatch;
use super::{Arg, ChipWorker, Diagnostics, Program, RunReport};
use crate::config::{RingField, RingSizing, SizeSource, RUNTIME_ENV_RING_COUNT};
use crate::engine::{Resource, RuntimeFailure, Scalar, StatusCode};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The headroom over the measured need an `"auto"` entry gets (before rounding up to a
/// valid size).
pub const AUTO_HEADROOM: f64 = 1.25;

/// The most (program, argument signature) keys a chip remembers; beyond it the least
/// recently used key is forgotten (its next dispatch learns again).
pub const AUTO_KEYS: usize = 256;

/// A need raised by a failure is checked at every this many dispatches of its key.
const CHECK_EVERY: u32 = 8;

/// After this many checks the need becomes the largest need they recorded.
const CHECKS: u32 = 4;

/// The most scalar-value sets a key is split into: beyond, the scalars are taken not
/// to shape the graph after all (a step counter that met a jump in need), and the key
/// goes back to one entry for every value, for good.
const SPLIT_KEYS: u32 = 8;

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

/// The smallest valid size of field `f` of at least `v` (a power of two for the window
/// and the heap), or the largest valid one.
fn valid_at_least(f: RingField, v: u64) -> u64 {
    let v = match f {
        RingField::TaskWindow | RingField::Heap => v.checked_next_power_of_two().unwrap_or(1 << 63),
        RingField::DepPool => v,
    };
    clamp_valid(f, v)
}

/// A value per field and ring (indexed by `RingField::index`, then ring). The need of
/// a recorded graph is one: window: live slots + 1; heap bytes; dep entries — its
/// structural demand, what must be held at once whatever the timing (a run's peaks
/// depend on the timing); the recording side computes it (`replay::graph::Needs`).
pub(crate) type PerEntry<T> = [[T; RUNTIME_ENV_RING_COUNT]; 3];

/// Entry-wise maximum.
fn max_of(a: PerEntry<u64>, b: PerEntry<u64>) -> PerEntry<u64> {
    let mut m = a;
    for (mf, bf) in m.iter_mut().zip(b) {
        for (x, y) in mf.iter_mut().zip(bf) {
            *x = (*x).max(y);
        }
    }
    m
}

/// What the chip learned of one key.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Learned {
    /// The need per field and ring, once `known`.
    need: PerEntry<u64>,
    /// A floor per field and ring (0: none), raised when a dispatch failed for
    /// capacity: the entry is at least this in every later dispatch, also when a
    /// learning dispatch is shrunk to fit the device memory.
    floor: PerEntry<u64>,
    /// The need was learned from a recorded graph (else the next dispatch learns).
    known: bool,
    /// The need was raised by a failure: it is checked downwards (step 4).
    raised: bool,
    /// Dispatches on the learned sizing since the last check.
    since: u32,
    /// Checks since the need was set, and the largest need they recorded.
    checks: u32,
    recent: PerEntry<u64>,
}

impl Learned {
    /// `sizing` (as resolved: auto entries hold the defaults) with its auto entries
    /// sized: from the need once known, else (a learning dispatch) the defaults; never
    /// below a floor.
    fn apply(&self, sizing: RingSizing) -> RingSizing {
        self.apply_with(sizing, true)
    }

    /// [`Learned::apply`], with the known need given its headroom or not (the smallest
    /// valid size that holds it).
    fn apply_with(&self, mut sizing: RingSizing, headroom: bool) -> RingSizing {
        for f in RingField::ALL {
            for r in 0..RUNTIME_ENV_RING_COUNT {
                if sizing.source(f, r) == SizeSource::Auto {
                    let floor = self.floor[f.index()][r];
                    let v = if self.known && headroom {
                        auto_size(f, self.need[f.index()][r])
                    } else if self.known {
                        valid_at_least(f, self.need[f.index()][r])
                    } else {
                        sizing.get(f)[r]
                    };
                    sizing.set_value(f, r, clamp_valid(f, v.max(floor)));
                }
            }
        }
        sizing
    }

    /// The need is now `need` (learned, or adopted after checks).
    fn learn(&mut self, need: PerEntry<u64>) {
        *self = Learned {
            need,
            known: true,
            raised: self.raised,
            ..Learned::default()
        };
    }

    /// A check's recorded need (step 4): more than the need raises it now; after
    /// [`CHECKS`] checks the need becomes the largest recorded.
    fn check(&mut self, need: PerEntry<u64>) {
        if max_of(need, self.need) != self.need {
            let raised = max_of(need, self.need);
            self.learn(raised);
            self.raised = true;
            return;
        }
        self.recent = max_of(self.recent, need);
        self.checks += 1;
        if self.checks >= CHECKS {
            let recent = self.recent;
            self.learn(recent);
            self.raised = false;
        }
    }
}

/// One remembered key.
struct Entry {
    learned: Learned,
    /// The hash of the scalar values the need was learned with.
    scalars: u64,
    /// Scalar values changed this key's graph: dispatches are keyed by them too (the
    /// entry stays as the marker).
    by_scalars: bool,
    /// Split entries made for this base key, and whether it went back to one entry for
    /// good ([`SPLIT_KEYS`]).
    splits: u32,
    unsplit: bool,
    /// Last use (the table's clock), for forgetting the least recently used.
    used: u64,
    /// Keeps the program (and so its identity) alive while the key is remembered: no
    /// other program can take the identity meanwhile.
    _program: Program,
}

/// What the chip learned, by key (see the module doc); at most [`AUTO_KEYS`] keys.
#[derive(Default)]
pub(super) struct AutoTable {
    entries: HashMap<u64, Entry>,
    clock: u64,
}

/// A dispatch's key: `key` is `base` (program identity and argument signature) or,
/// once the base is split by scalar values, `base` with the `scalars` hash.
#[derive(Clone, Copy, Debug)]
struct AutoKey {
    key: u64,
    base: u64,
    scalars: u64,
}

impl AutoTable {
    fn key(&self, program: &Program, args: &[Arg<'_>]) -> AutoKey {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        program.identity().hash(&mut h);
        let mut v = std::collections::hash_map::DefaultHasher::new();
        for a in args {
            match a {
                Arg::Tensor(t) => {
                    let t = t.tensor();
                    0u8.hash(&mut h);
                    t.shape().hash(&mut h);
                    (t.dtype as u8).hash(&mut h);
                }
                Arg::Scalar(s) => {
                    let kind = match s {
                        Scalar::F64(_) => 1u8,
                        Scalar::I64(_) => 2u8,
                    };
                    kind.hash(&mut h);
                    s.bits().hash(&mut v);
                }
            }
        }
        self.key_of_parts(h.finish(), v.finish())
    }

    /// What is learned of `k` (nothing yet: the default), used now.
    fn get(&mut self, k: &AutoKey) -> Learned {
        self.clock += 1;
        if k.key != k.base {
            if let Some(b) = self.entries.get_mut(&k.base) {
                b.used = self.clock;
            }
        }
        match self.entries.get_mut(&k.key) {
            Some(e) => {
                e.used = self.clock;
                e.learned
            }
            None => Learned::default(),
        }
    }

    /// Remember `l` for `k`; a newly learned need records the scalar values it was
    /// learned with.
    fn put(&mut self, k: &AutoKey, program: &Program, l: Learned, learned_now: bool) {
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(&k.key) {
            e.learned = l;
            e.used = self.clock;
            if learned_now {
                e.scalars = k.scalars;
            }
            return;
        }
        if k.key != k.base {
            // A new value set of a split key: past SPLIT_KEYS the values are taken not
            // to shape the graph, and the key goes back to one entry.
            if let Some(b) = self.entries.get_mut(&k.base) {
                b.splits += 1;
                if b.splits > SPLIT_KEYS {
                    b.by_scalars = false;
                    b.unsplit = true;
                }
            }
        }
        if self.entries.len() >= AUTO_KEYS {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(&k, _)| k);
            if let Some(o) = oldest {
                self.entries.remove(&o);
            }
        }
        self.entries.insert(
            k.key,
            Entry {
                learned: l,
                scalars: k.scalars,
                by_scalars: false,
                splits: 0,
                unsplit: false,
                used: self.clock,
                _program: program.clone(),
            },
        );
    }

    /// The key of a dispatch whose base key and scalar hash are given (as
    /// [`AutoTable::key`] makes it).
    fn key_of_parts(&self, base: u64, scalars: u64) -> AutoKey {
        let key = if self.entries.get(&base).is_some_and(|e| e.by_scalars) {
            split_key(base, scalars)
        } else {
            base
        };
        AutoKey { key, base, scalars }
    }

    /// Did `k`'s need come from other scalar values than `k`'s (then they may have
    /// changed the graph)?
    fn other_scalars(&self, k: &AutoKey) -> bool {
        k.key == k.base
            && self
                .entries
                .get(&k.base)
                .is_some_and(|e| e.scalars != k.scalars && !e.unsplit)
    }

    /// Key `k`'s base by scalar values from now on; `k` split.
    fn split(&mut self, k: &AutoKey) -> AutoKey {
        if let Some(e) = self.entries.get_mut(&k.base) {
            e.by_scalars = true;
        }
        AutoKey {
            key: split_key(k.base, k.scalars),
            ..*k
        }
    }

    /// How many keys are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The key of `base` split by the scalar values hashed to `scalars`.
fn split_key(base: u64, scalars: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (base, scalars, 1u8).hash(&mut h);
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
    pub(super) fn run_auto<P: RunPolicy>(
        &mut self,
        policy: P,
        program: &Program,
        args: &[Arg<'_>],
        sizing: RingSizing,
        hook: Option<&dyn Fn(bool)>,
        diag: &Diagnostics,
    ) -> Result<RunReport, RuntimeFailure> {
        let key = self.auto.key(program, args);
        let mut l = self.auto.get(&key);
        if l.known {
            let s = self.fitted(&l, sizing);
            if !l.raised {
                return self
                    .cycle(policy, Dispatch::program(program, args, &s, hook, diag))
                    .map_err(|e| self.grow(key, program, l, &sizing, &s, e));
            }
            l.since += 1;
            if l.since < CHECK_EVERY {
                self.auto.put(&key, program, l, false);
                return self
                    .cycle(policy, Dispatch::program(program, args, &s, hook, diag))
                    .map_err(|e| self.grow(key, program, l, &sizing, &s, e));
            }
            // A check (step 4): record the graph while it runs on the learned sizing.
            l.since = 0;
            let (r, need) =
                self.run_learning(policy, Dispatch::program(program, args, &s, hook, diag));
            let mut rep = r.map_err(|e| self.grow(key, program, l, &sizing, &s, e))?;
            l.check(need.expect("a run that succeeded gives its graph's need"));
            let next = self.fitted(&l, sizing);
            self.auto.put(&key, program, l, false);
            if next.key() != s.key() {
                drop(self.cache.take(&s));
                rep.device_memory = self.device_memory(&s);
            }
            return Ok(rep);
        }
        // A learning dispatch (step 1): record the graph while it runs.
        let first = self.shrink_to_fit(l.apply(sizing), &l.floor);
        let built = !self.cache.contains(&first);
        let (r, need) =
            self.run_learning(policy, Dispatch::program(program, args, &first, hook, diag));
        match r {
            Ok(mut rep) => {
                let before = l;
                l.learn(need.expect("a run that succeeded gives its graph's need"));
                // A need learned again after a failure is checked downwards later.
                l.raised = before.floor.iter().flatten().any(|&f| f > 0);
                self.auto.put(&key, program, l, true);
                // The learning arena goes if this dispatch built it (one that was
                // resident before, a prewarm's or another dispatch's, stays), unless
                // it is the learned one.
                if built && self.fitted(&l, sizing).key() != first.key() {
                    drop(self.cache.take(&first));
                    rep.device_memory = self.device_memory(&first);
                }
                Ok(rep)
            }
            Err(e) => {
                let e = self.grow(key, program, l, &sizing, &first, e);
                if built {
                    drop(self.cache.take(&first));
                }
                Err(e)
            }
        }
    }

    /// The sizing a capture or a replay with auto entries runs on: what the chip
    /// learned of `program` with `args` when it knows its need, else the learning
    /// sizing (the defaults shrunk to fit the device memory). `learn` (a capture that
    /// succeeded) records the captured graph's need as learned.
    pub(crate) fn auto_sizing_for(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        sizing: RingSizing,
    ) -> RingSizing {
        let key = self.auto.key(program, args);
        let l = self.auto.get(&key);
        if l.known {
            self.fitted(&l, sizing)
        } else {
            self.shrink_to_fit(l.apply(sizing), &l.floor)
        }
    }

    /// Record `need` (a captured graph's, of `program` with `args`) as the need of their
    /// key when it is not known yet, as a learning dispatch does.
    pub(crate) fn auto_learn_from(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        need: PerEntry<u64>,
    ) {
        let key = self.auto.key(program, args);
        let mut l = self.auto.get(&key);
        if !l.known {
            let before = l;
            l.learn(need);
            l.raised = before.floor.iter().flatten().any(|&f| f > 0);
            self.auto.put(&key, program, l, true);
        }
    }

    /// After a capture with auto entries failed (it ran on `ran`; `asked`: the sizing
    /// as resolved): what a failed dispatch does (step 3 of the module doc).
    pub(crate) fn auto_failed(
        &mut self,
        program: &Program,
        args: &[Arg<'_>],
        asked: &RingSizing,
        ran: &RingSizing,
        e: RuntimeFailure,
    ) -> RuntimeFailure {
        let key = self.auto.key(program, args);
        let l = self.auto.get(&key);
        self.grow(key, program, l, asked, ran, e)
    }

    /// `sizing` with its auto entries sized for a captured graph's own `need` (it is
    /// known exactly), fitted to the device memory.
    pub(crate) fn sized_for(&self, sizing: RingSizing, need: PerEntry<u64>) -> RingSizing {
        let mut l = Learned::default();
        l.learn(need);
        self.fitted(&l, sizing)
    }

    /// The sizing of a known need: need × headroom, or where that does not fit the
    /// device memory, the need without headroom (no larger than the learning sizing
    /// that held the run).
    fn fitted(&self, l: &Learned, sizing: RingSizing) -> RingSizing {
        let s = l.apply(sizing);
        if crate::arena::device_footprint(&s) <= self.room() {
            return s;
        }
        l.apply_with(sizing, false)
    }

    /// The device memory an arena may take: the capacity less what is held outside the
    /// cache.
    fn room(&self) -> u64 {
        self.cache
            .capacity()
            .saturating_sub(self.cache.outside_bytes())
    }

    /// `sizing` with its auto entries halved (never below their `floor`), the one that
    /// frees the most device memory first, until the arena fits the chip's device
    /// memory (a need beyond that shows as a capacity failure, which raises the floor).
    pub(super) fn shrink_to_fit(
        &self,
        mut sizing: RingSizing,
        floor: &PerEntry<u64>,
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
                .filter(|&(f, r)| sizing.source(f, r) == SizeSource::Auto)
                .map(|(f, r)| {
                    let v = sizing.get(f)[r];
                    let to = clamp_valid(f, (v / 2).max(floor[f.index()][r]));
                    (f, r, to, (v - to.min(v)).saturating_mul(unit(f)))
                })
                .filter(|&(_, _, _, saved)| saved > 0)
                .max_by_key(|&(_, _, _, saved)| saved);
            let Some((f, r, to, _)) = best else { break };
            sizing.set_value(f, r, to);
        }
        sizing
    }

    /// After a failed auto dispatch that ran on `ran` (`asked`: the sizing as resolved):
    /// a capacity failure of an auto entry raises it (at least ×2 and to the size the
    /// failure says would have held it) and the next dispatch of the key learns again
    /// (step 3 of the module doc). The error says what happens.
    #[allow(clippy::too_many_arguments)]
    fn grow(
        &mut self,
        mut key: AutoKey,
        program: &Program,
        mut l: Learned,
        asked: &RingSizing,
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
        // The size that holds the run where the failure knows it, else the lower bound
        // it saw.
        let seen = e.needed.or(e.at_least).unwrap_or(0);
        let to = valid_at_least(f, now.saturating_mul(2).max(seen));
        let mut split = false;
        if l.known && self.auto.other_scalars(&key) {
            // The scalars this dispatch had may change the graph: learn them apart.
            key = self.auto.split(&key);
            l = self.auto.get(&key);
            split = true;
        }
        l.known = false;
        l.since = 0;
        l.floor[f.index()][r] = l.floor[f.index()][r].max(to);
        self.auto.put(&key, program, l, false);
        let next = self.shrink_to_fit(l.apply(*asked), &l.floor);
        let field = f.name();
        if let Err(oom) = self.cache.check_fits(&next) {
            // The raised entry cannot fit: say how much memory there is and what holds
            // it (the next dispatch of the key is refused the same way, before it runs).
            return RuntimeFailure::new(
                StatusCode::DeviceOutOfMemory,
                None,
                format!(
                    "auto: {field}[{r}] must grow from {now} to {to}, and {oom}; the dispatch failed with {} on ring {r}: {}",
                    e.name(),
                    e.detail
                ),
            );
        }
        let whose = if split {
            "of this program with these scalar values"
        } else {
            "of this program with these arguments"
        };
        let said = format!(
            "; auto: {field}[{r}] grows from {now} to {to}, and the next dispatch {whose} learns its need again"
        );
        // The description still ends with the partly-written note (§6).
        let suffix = format!("; {}", super::run::PARTLY_WRITTEN);
        e.detail = match e.detail.strip_suffix(&suffix) {
            Some(head) => format!("{head}{said}{suffix}"),
            None => format!("{}{said}", e.detail),
        };
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

    fn prog() -> Program {
        Program::new("p", |_, _| Ok(()))
    }

    #[test]
    fn the_table_forgets_the_least_recently_used_key_beyond_its_bound() {
        let mut t = AutoTable::default();
        let p = prog();
        let keys: Vec<AutoKey> = (0..AUTO_KEYS as u64 + 10)
            .map(|i| AutoKey {
                key: i,
                base: i,
                scalars: 0,
            })
            .collect();
        let mut l = Learned::default();
        l.learn([[7; 4]; 3]);
        for k in &keys {
            t.put(k, &p, l, true);
            // key 0 stays in use
            assert!(t.get(&keys[0]).known);
        }
        assert_eq!(t.len(), AUTO_KEYS);
        assert!(t.get(&keys[0]).known);
        assert!(!t.get(&keys[1]).known, "the least recently used went");
        assert!(t.get(&keys[AUTO_KEYS + 9]).known);
    }

    #[test]
    fn programs_of_one_name_have_their_own_identity_and_clones_share_it() {
        let (a, b) = (prog(), prog());
        assert_ne!(a.identity(), b.identity());
        assert_eq!(a.identity(), a.clone().identity());
        let t = AutoTable::default();
        assert_ne!(t.key(&a, &[]).key, t.key(&b, &[]).key);
    }

    #[test]
    fn a_learned_need_whose_headroom_does_not_fit_runs_without_it() {
        let w = ChipWorker::new(crate::chip::ChipOptions {
            cores: 1,
            device_memory: 16 << 20,
            ..Default::default()
        })
        .unwrap();
        let mut env = crate::config::RuntimeEnv::default();
        for f in RingField::ALL {
            env.set_all(f, crate::config::RuntimeEnv::AUTO);
        }
        let asked = RingSizing::resolve_from_process(&env).unwrap();
        let mut need = [[1; 4]; 3];
        need[RingField::Heap.index()][1] = 7 << 20;
        let mut l = Learned::default();
        l.learn(need);
        // x 1.25 rounds up to 16 MiB: more than the chip holds beside the rest.
        assert_eq!(l.apply(asked).heap[1], 16 << 20);
        let s = w.fitted(&l, asked);
        assert_eq!(s.heap[1], 8 << 20);
        assert!(crate::arena::device_footprint(&s) <= 16 << 20);
        // Where it fits, the headroom stays.
        l.learn([[1; 4]; 3]);
        assert_eq!(w.fitted(&l, asked).key(), l.apply(asked).key());
    }

    #[test]
    fn a_key_split_by_too_many_value_sets_goes_back_to_one_entry() {
        let mut t = AutoTable::default();
        let p = prog();
        let base = AutoKey {
            key: 1,
            base: 1,
            scalars: 0,
        };
        let mut l = Learned::default();
        l.learn([[7; 4]; 3]);
        t.put(&base, &p, l, true);
        let step = |i: u64| AutoKey {
            key: 1,
            base: 1,
            scalars: i,
        };
        assert!(t.other_scalars(&step(1)));
        t.split(&step(1));
        for i in 1..=SPLIT_KEYS as u64 + 1 {
            let k = t.key_of_parts(1, i);
            assert_ne!(k.key, k.base, "value set {i} is split");
            t.put(&k, &p, l, true);
        }
        // Past SPLIT_KEYS value sets: one key again, for good.
        let k = t.key_of_parts(1, 99);
        assert_eq!(k.key, k.base);
        assert!(!t.other_scalars(&step(100)));
    }

    #[test]
    fn checks_bring_a_raised_need_down_to_the_largest_recorded() {
        let mut l = Learned::default();
        l.learn([[100; 4]; 3]);
        l.raised = true;
        for i in 0..CHECKS {
            assert_eq!(l.need, [[100; 4]; 3], "check {i}");
            l.check([[5 + i as u64; 4]; 3]);
        }
        assert_eq!(l.need, [[5 + CHECKS as u64 - 1; 4]; 3]);
        assert!(!l.raised && l.known);
        // a record above the need raises it at once
        l.check([[50; 4]; 3]);
        assert_eq!(l.need, [[50; 4]; 3]);
        assert!(l.raised);
    }
}
