//! Synchronisation facade, in the style of tokio's `loom` module: the concurrent core
//! ([`crate::engine::shared`]) names its atomics, locks, spin hints and shared cells
//! only through this module, so that a `--cfg loom` build swaps all of them for
//! [loom](https://docs.rs/loom)'s model-checked versions.
//!
//! | item | normal build | `cfg(loom)` |
//! | --- | --- | --- |
//! | `AtomicBool/U32/U64/Usize`, `fence`, `Ordering` | `std::sync::atomic` | `loom::sync::atomic` |
//! | `Mutex`, `MutexGuard`, `Condvar` | std's, behind parking_lot's API | loom's, behind the same API |
//! | `spin_loop`, `yield_now` | `std::hint` / `std::thread` | `loom::hint` / `loom::thread` (a scheduling point) |
//! | [`UnsafeCell`] | `std::cell::UnsafeCell` (transparent) | `loom::cell::UnsafeCell` (access-checked) |
//! | [`Table`] | [`ZeroedArray`](crate::mem::ZeroedArray) (mmap, zero-valid) | `Box<[T]>` built with [`Fresh`] |
//!
//! Under loom a condition variable never times out: a timed wait is a plain wait, so a
//! lost wake-up shows up as a deadlock instead of being hidden by the timeout.

#[cfg(not(loom))]
mod imp {
    pub use std::hint::spin_loop;
    /// The lock primitives the wrappers below sit on: std's futex-based ones (no
    /// process-global state — unlike parking_lot's parking table, nothing a thread of
    /// the host held at `fork()` can stay locked in a chip process).
    pub(super) use std::sync as base;
    pub use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    pub use std::thread::yield_now;

    /// A slot table: one anonymous mapping, all-zero initial contents.
    pub type Table<T> = crate::mem::ZeroedArray<T>;
}

#[cfg(loom)]
mod imp {
    pub use loom::hint::spin_loop;
    pub use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
    pub use loom::thread::yield_now;

    /// The lock primitives the wrappers below sit on.
    pub(super) use loom::sync as base;

    /// A slot table under loom: boxed, every element built by [`Fresh`] (loom's
    /// atomics and cells carry model state and are not valid as zero bytes).
    pub struct Table<T>(Box<[T]>);

    impl<T: super::Fresh> Table<T> {
        pub fn new(len: usize) -> Result<Table<T>, crate::mem::ReserveError> {
            Ok(Table((0..len).map(|_| T::fresh()).collect()))
        }
        pub fn new_huge(len: usize) -> Result<Table<T>, crate::mem::ReserveError> {
            Self::new(len)
        }
    }

    impl<T> std::ops::Deref for Table<T> {
        type Target = [T];
        fn deref(&self) -> &[T] {
            &self.0
        }
    }
}

pub use imp::*;

/// A mutex behind parking_lot's API (`lock()` returns the guard; poisoning ignored),
/// over std's mutex, or loom's under `cfg(loom)`.
#[derive(Debug, Default)]
pub struct Mutex<T>(imp::base::Mutex<T>);

impl<T> Mutex<T> {
    pub fn new(v: T) -> Mutex<T> {
        Mutex(imp::base::Mutex::new(v))
    }
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        MutexGuard(Some(self.0.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

/// The guard; an `Option` so that a condvar wait can take it by value.
pub struct MutexGuard<'a, T>(Option<imp::base::MutexGuard<'a, T>>);

impl<T> std::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().expect("guard present")
    }
}
impl<T> std::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.as_mut().expect("guard present")
    }
}

/// A condition variable behind parking_lot's API.
#[derive(Debug, Default)]
pub struct Condvar(imp::base::Condvar);

impl Condvar {
    pub fn new() -> Condvar {
        Condvar(imp::base::Condvar::new())
    }
    pub fn notify_one(&self) {
        self.0.notify_one();
    }
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
    /// Wait at most `timeout` (spurious wake-ups possible). Under loom the wait does
    /// not time out, so a lost wake-up shows up as a deadlock.
    pub fn wait_for<T>(&self, g: &mut MutexGuard<'_, T>, timeout: std::time::Duration) {
        let inner = g.0.take().expect("guard present");
        #[cfg(not(loom))]
        let inner = self
            .0
            .wait_timeout(inner, timeout)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
        #[cfg(loom)]
        let inner = {
            let _ = timeout;
            self.0.wait(inner).unwrap_or_else(|e| e.into_inner())
        };
        g.0 = Some(inner);
    }
}

/// A scheduling hint for loom, a no-op otherwise: under loom the calling thread lets
/// the other threads run first. For a point right after a release after which the
/// calling thread keeps going but may no longer rely on what it released (a reference
/// on a slot that another thread may now retire and reuse). loom 0.7's DPOR remembers
/// only the last access per object, so a late read there can be masked by another
/// thread's access to the same atomic and never explored; the hint makes loom try
/// "everyone else runs here" explicitly. Each hint multiplies the interleavings loom
/// explores: use sparingly (today: once, in the completion's fanout walk).
#[inline(always)]
pub(crate) fn schedule_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// How a [`Table`] element is built under loom (the normal build zero-fills instead).
#[cfg_attr(not(all(test, loom)), allow(dead_code))] // used by the loom models
pub trait Fresh {
    fn fresh() -> Self;
}

impl<T: crate::mem::ZeroValid> Fresh for UnsafeCell<T> {
    fn fresh() -> Self {
        // safety: `T: ZeroValid`.
        UnsafeCell::new(unsafe { std::mem::zeroed() })
    }
}

/// A shared cell, tokio-style: accessed through [`with`](UnsafeCell::with) (read) and
/// [`with_mut`](UnsafeCell::with_mut) (write), which loom checks against the
/// happens-before order of the other accesses. [`get`](UnsafeCell::get) hands out the
/// raw pointer for writers outside the facade (the orchestrator); under loom it is
/// checked as a write at the point of the call.
#[cfg(not(loom))]
#[repr(transparent)]
pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    #[inline]
    pub const fn new(v: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
    #[inline]
    pub fn get(&self) -> *mut T {
        self.0.get()
    }
}

// safety: transparent over `std::cell::UnsafeCell<T>`, valid at zero when `T` is.
#[cfg(not(loom))]
unsafe impl<T: crate::mem::ZeroValid> crate::mem::ZeroValid for UnsafeCell<T> {}

#[cfg(loom)]
pub struct UnsafeCell<T>(loom::cell::UnsafeCell<T>);

#[cfg(loom)]
impl<T> UnsafeCell<T> {
    pub fn new(v: T) -> UnsafeCell<T> {
        UnsafeCell(loom::cell::UnsafeCell::new(v))
    }
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        self.0.with(f)
    }
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        self.0.with_mut(f)
    }
    /// Checked as a write now; the pointer must be used right away, by this thread.
    pub fn get(&self) -> *mut T {
        self.0.with_mut(|p| p)
    }
}

impl<T: Default> Default for UnsafeCell<T> {
    fn default() -> UnsafeCell<T> {
        UnsafeCell::new(T::default())
    }
}
