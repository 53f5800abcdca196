//! The kernel body of the oracle and replay property tests: a deterministic mix of a
//! task's readable views into its writable ones, plus a hash of what it wrote.

use taskring::Tensor;

/// A view's elements, row by row.
pub fn read_view(t: &Tensor) -> (usize, usize, Vec<f32>) {
    let (rows, cols, stride) = t.as_rows().expect("views used here are row-major");
    let p = t.data_ptr() as *const f32;
    let mut v = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        for c in 0..cols {
            // safety: the view was validated by the runtime (or built by the oracle) and
            // lies inside live memory; conflicting writers are ordered by the runtime.
            v.push(unsafe { p.add(r * stride + c).read() });
        }
    }
    (rows, cols, v)
}

/// The kernel body shared by the runtime and the oracle. `ts` is in canonical order
/// (inputs, inouts, outputs); readable = inputs and inouts, writable = inouts and outputs.
/// Each writable element = 0.3 * Σ readable_k[r % rows_k][c % cols_k] (+ 0.2 * old for an
/// inout) + salt + 0.125 * (its index among the writables). Returns a hash of everything
/// written.
pub fn compute(ts: &[Tensor], n_in: usize, n_inout: usize, salt: f64) -> u64 {
    let snaps: Vec<(usize, usize, Vec<f32>)> = ts[..n_in + n_inout].iter().map(read_view).collect();
    for (k, t) in ts[n_in..].iter().enumerate() {
        let (rows, cols, stride) = t.as_rows().expect("views used here are row-major");
        let p = t.data_ptr() as *mut f32;
        for r in 0..rows {
            for c in 0..cols {
                let mut acc = 0f64;
                for (rr, cc, d) in &snaps {
                    acc += d[(r % rr) * cc + (c % cc)] as f64;
                }
                let mut v = 0.3 * acc + salt + 0.125 * k as f64;
                if k < n_inout {
                    v += 0.2 * snaps[n_in + k].2[r * cols + c] as f64;
                }
                // safety: as in read_view; this task is the only one touching it now.
                unsafe { p.add(r * stride + c).write(v as f32) };
            }
        }
    }
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for t in &ts[n_in..] {
        for x in read_view(t).2 {
            h = (h ^ x.to_bits() as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}
