//! The Task Bench kernels a task runs: `empty`, `busy_wait`, `compute_bound` (Task Bench's
//! arithmetic: 16 independent 4-wide FMA chains with AVX2/FMA, the same lanes in plain
//! arrays without) and `memory_bound` (copies within a per-thread scratch buffer).

use super::name_of;
use std::cell::RefCell;
use std::hint::black_box;

/// A Task Bench kernel (`-kernel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KernelKind {
    Empty,
    BusyWait,
    ComputeBound,
    MemoryBound,
}

pub(super) const KERNELS: [(&str, KernelKind); 4] = [
    ("empty", KernelKind::Empty),
    ("busy_wait", KernelKind::BusyWait),
    ("compute_bound", KernelKind::ComputeBound),
    ("memory_bound", KernelKind::MemoryBound),
];

impl KernelKind {
    pub(super) fn name(self) -> &'static str {
        name_of(&KERNELS, &self)
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Task (t, i)'s kernel, as the graph's flags give it (`-kernel`, `-iter`, `-scratch`).
#[inline]
pub(super) fn run_kernel(
    kernel: KernelKind,
    iter: u64,
    scratch: u64,
    t: i64,
    i: i64,
) -> Result<(), String> {
    match kernel {
        KernelKind::Empty => {}
        KernelKind::BusyWait => {
            let mut acc: u64 = 1 + ((t * 31 + i) as u64 % 1000);
            for _ in 0..iter {
                acc = acc * 139 % 2_147_483_647;
            }
            black_box(acc);
        }
        KernelKind::ComputeBound => {
            black_box(compute_bound(iter));
        }
        KernelKind::MemoryBound => return memory_bound(iter, scratch as usize),
    }
    Ok(())
}

/// Task Bench's `compute_bound` arithmetic (`execute_kernel_compute` in its
/// `core/core_kernel.cc`): 64 doubles in 16 lanes of 4, each lane `(4, 3, 2, 1)`, updated
/// `iter` times by `a = a * a + a`, then multiplied together: `128 * iter + 64` FLOPs as
/// Task Bench counts. The values overflow to +inf after about ten rounds, as upstream's
/// do; infinities cost nothing extra on x86, denormals never occur.
///
/// The 16 lanes are independent chains, as in the C source; on x86-64 with AVX2 and FMA
/// (detected at run time, the build stays portable) each round is 16 register-only
/// `vfmadd` on 4-wide vectors, the code gcc emits for upstream's AVX2 build. Otherwise
/// the same lanes as plain arrays, which LLVM turns into SSE2 multiplies and adds.
fn compute_bound(iter: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // safety: the features were detected.
            return unsafe { compute_bound_avx2(iter) };
        }
    }
    compute_bound_lanes(iter)
}

/// One lane's starting values, in memory order (`_mm256_set_pd(1, 2, 3, 4)`).
const LANE0: [f64; 4] = [4.0, 3.0, 2.0, 1.0];

/// The portable form: the same 16 lanes of 4 and the same product.
fn compute_bound_lanes(iter: u64) -> f64 {
    let mut a = [LANE0; 16];
    for _ in 0..iter {
        for lane in a.iter_mut() {
            for v in lane.iter_mut() {
                *v = *v * *v + *v;
            }
        }
    }
    a.iter().flatten().product()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn compute_bound_avx2(iter: u64) -> f64 {
    use std::arch::x86_64::*;
    let mut a = [_mm256_set_pd(1.0, 2.0, 3.0, 4.0); 16];
    for _ in 0..iter {
        for v in a.iter_mut() {
            *v = _mm256_fmadd_pd(*v, *v, *v);
        }
    }
    let mut out = [[0f64; 4]; 16];
    for (o, v) in out.iter_mut().zip(&a) {
        _mm256_storeu_pd(o.as_mut_ptr(), *v);
    }
    out.iter().flatten().product()
}

/// `iter` copies of one half of a per-thread scratch buffer of `bytes` into the other.
fn memory_bound(iter: u64, bytes: usize) -> Result<(), String> {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < bytes {
            // Fallible: a scratch buffer the machine cannot give fails the task (the
            // setup already checked one such buffer can be had), it does not abort.
            let more = bytes - s.len();
            s.try_reserve_exact(more).map_err(|e| format!("memory_bound: could not allocate the {bytes}-byte scratch buffer of this core: {e}"))?;
            s.resize(bytes, 1);
        }
        let half = bytes / 2;
        let (a, b) = s.split_at_mut(half);
        for it in 0..iter {
            if it & 1 == 0 {
                b[..half].copy_from_slice(&a[..half]);
            } else {
                a[..half].copy_from_slice(&b[..half]);
            }
            black_box(&mut *a);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_bound_forms_agree() {
        // The lanes stay exact integers for four rounds (below 2^53) and both forms multiply
        // them in the same order, so they agree bit for bit; later every value is +inf.
        let lanes: Vec<f64> = (0..5).map(compute_bound_lanes).collect();
        assert_eq!(lanes[0], 24f64.powi(16));
        assert_eq!(compute_bound_lanes(64), f64::INFINITY);
        for (k, v) in lanes.iter().enumerate() {
            assert_eq!(compute_bound(k as u64), *v, "{k} rounds");
        }
        assert_eq!(compute_bound(64), f64::INFINITY);
    }
}
