//! The Task Bench kernels a task runs: `empty`, `busy_wait`, `compute_bound` (AVX2 FMA
//! chains, scalar without AVX2/FMA) and `memory_bound` (copies within a per-thread scratch
//! buffer).

use super::cli::{name_of, GraphSpec};
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

/// Task (t, i)'s kernel, as the graph's flags give it.
#[inline]
pub(super) fn run_kernel(spec: &GraphSpec, t: i64, i: i64) -> Result<(), String> {
    match spec.kernel {
        KernelKind::Empty => {}
        KernelKind::BusyWait => {
            let mut acc: u64 = 1 + ((t * 31 + i) as u64 % 1000);
            for _ in 0..spec.iter {
                acc = acc * 139 % 2_147_483_647;
            }
            black_box(acc);
        }
        KernelKind::ComputeBound => {
            black_box(compute_bound(spec.iter, 0.5 + (i % 16) as f64 * 0.01));
        }
        KernelKind::MemoryBound => return memory_bound(spec.iter, spec.scratch as usize),
    }
    Ok(())
}

/// `iter` rounds of `x = x*x - 1.5` on 64 doubles (the map stays in [-1.5, 0.75], so no
/// overflow and no denormals), then a sum: `128 * iter + 64` FLOPs as Task Bench counts.
fn compute_bound(iter: u64, x0: f64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // safety: the features were detected.
            return unsafe { compute_bound_avx2(iter, x0) };
        }
    }
    let mut x = [0f64; 64];
    for (k, v) in x.iter_mut().enumerate() {
        *v = x0 + 0.001 * k as f64;
    }
    for _ in 0..iter {
        for v in x.iter_mut() {
            *v = *v * *v - 1.5;
        }
    }
    x.iter().sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn compute_bound_avx2(iter: u64, x0: f64) -> f64 {
    use std::arch::x86_64::*;
    // 32-byte aligned: a misaligned `c` makes every FMA a cache-line-split load on
    // some stack layouts, which halves the kernel's throughput.
    let c = _mm256_set1_pd(-1.5);
    let mut a = [_mm256_setzero_pd(); 16];
    for (k, v) in a.iter_mut().enumerate() {
        let b = x0 + 0.001 * k as f64;
        *v = _mm256_set_pd(b, b + 0.05, b + 0.1, b + 0.15);
    }
    if iter > 0 {
        // 16 independent FMA chains in the 16 ymm registers, `c` read from memory (as
        // gcc compiles the C baseline's loop); LLVM would keep `c` in a register and
        // spill an accumulator.
        let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7, mut a8, mut a9, mut a10, mut a11, mut a12, mut a13, mut a14, mut a15] =
            a;
        std::arch::asm!(
            "2:",
            "vfmadd213pd {a0}, {a0}, ymmword ptr [{c}]",
            "vfmadd213pd {a1}, {a1}, ymmword ptr [{c}]",
            "vfmadd213pd {a2}, {a2}, ymmword ptr [{c}]",
            "vfmadd213pd {a3}, {a3}, ymmword ptr [{c}]",
            "vfmadd213pd {a4}, {a4}, ymmword ptr [{c}]",
            "vfmadd213pd {a5}, {a5}, ymmword ptr [{c}]",
            "vfmadd213pd {a6}, {a6}, ymmword ptr [{c}]",
            "vfmadd213pd {a7}, {a7}, ymmword ptr [{c}]",
            "vfmadd213pd {a8}, {a8}, ymmword ptr [{c}]",
            "vfmadd213pd {a9}, {a9}, ymmword ptr [{c}]",
            "vfmadd213pd {a10}, {a10}, ymmword ptr [{c}]",
            "vfmadd213pd {a11}, {a11}, ymmword ptr [{c}]",
            "vfmadd213pd {a12}, {a12}, ymmword ptr [{c}]",
            "vfmadd213pd {a13}, {a13}, ymmword ptr [{c}]",
            "vfmadd213pd {a14}, {a14}, ymmword ptr [{c}]",
            "vfmadd213pd {a15}, {a15}, ymmword ptr [{c}]",
            "dec {n}",
            "jnz 2b",
            a0 = inout(ymm_reg) a0, a1 = inout(ymm_reg) a1, a2 = inout(ymm_reg) a2, a3 = inout(ymm_reg) a3,
            a4 = inout(ymm_reg) a4, a5 = inout(ymm_reg) a5, a6 = inout(ymm_reg) a6, a7 = inout(ymm_reg) a7,
            a8 = inout(ymm_reg) a8, a9 = inout(ymm_reg) a9, a10 = inout(ymm_reg) a10, a11 = inout(ymm_reg) a11,
            a12 = inout(ymm_reg) a12, a13 = inout(ymm_reg) a13, a14 = inout(ymm_reg) a14, a15 = inout(ymm_reg) a15,
            c = in(reg) &c as *const __m256d,
            n = inout(reg) iter => _,
            options(nostack, readonly),
        );
        a = [
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
        ];
    }
    let mut s = a[0];
    for v in &a[1..] {
        s = _mm256_add_pd(s, *v);
    }
    let mut out = [0f64; 4];
    _mm256_storeu_pd(out.as_mut_ptr(), s);
    out[0] + out[1] + out[2] + out[3]
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
