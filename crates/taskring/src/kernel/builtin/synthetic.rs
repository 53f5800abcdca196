//! Synthetic kernels: they touch no tensor (`noop`, `busy_wait`), for benchmarks and
//! tests of the runtime itself.

use super::check::{check_scalars, fail};
use crate::kernel::{Kernel, KernelCall};
use crate::tensor::Tensor;

/// `noop`: does nothing.
///
/// Tensors: any number, any dtype, any split (none are touched). Scalars: any (ignored).
/// Core: any.
pub struct NoopKernel;

impl Kernel for NoopKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn bounded(&self) -> bool {
        true
    }
    fn check(&self, _tensors: &[Tensor], _n_inputs: usize, _scalars: &[u64]) -> Result<(), String> {
        Ok(())
    }
    fn run(&self, _call: &KernelCall<'_>) {}
}

/// `busy_wait(iterations)`: spins `iterations` rounds of a cheap loop the optimiser cannot
/// remove, to simulate compute time.
///
/// Tensors: any number, any dtype, any split (none are touched).
/// Scalars: 0 = `iterations` (`i64`, must be `>= 0`). Core: any.
pub struct BusyWaitKernel;

impl Kernel for BusyWaitKernel {
    fn name(&self) -> &str {
        Self::NAME
    }
    fn check(&self, _tensors: &[Tensor], _n_inputs: usize, scalars: &[u64]) -> Result<(), String> {
        check_scalars(Self::NAME, &["iterations"], scalars)?;
        let n = scalars[0] as i64;
        if n < 0 {
            return fail(Self::NAME, format!("iterations must be >= 0, got {n}"));
        }
        Ok(())
    }
    fn run(&self, call: &KernelCall<'_>) {
        let n = call.scalar_i64(0).max(0) as u64;
        let mut acc = 0u64;
        for i in 0..n {
            acc = std::hint::black_box(acc.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i));
        }
        std::hint::black_box(acc);
    }
}

#[cfg(test)]
mod tests {
    use crate::kernel::builtin::testing::{data, err, exec, t};
    use crate::kernel::builtin::{BUSY_WAIT, NOOP};
    use crate::tensor::{DType, Tensor};

    #[test]
    fn noop_accepts_anything() {
        let mut v = vec![0i32; 4];
        let ti = Tensor::from_raw(v.as_mut_ptr() as u64, &[4], DType::I32);
        exec(NOOP, &[], 0, &[]);
        exec(NOOP, &[ti, ti], 1, &[1, 2, 3]);
        assert_eq!(v, [0; 4]);
    }

    #[test]
    fn busy_wait_runs_and_checks() {
        let mut v = data(4, 1);
        let before = v.clone();
        let tv = t(&mut v, &[4]);
        exec(BUSY_WAIT, &[tv], 1, &[1000i64 as u64]);
        exec(BUSY_WAIT, &[], 0, &[0]);
        assert_eq!(v, before);
        assert_eq!(
            err(BUSY_WAIT, &[], 0, &[]),
            "kernel 'busy_wait': needs 1 scalar (iterations), got 0"
        );
        assert_eq!(
            err(BUSY_WAIT, &[], 0, &[(-5i64) as u64]),
            "kernel 'busy_wait': iterations must be >= 0, got -5"
        );
    }
}
