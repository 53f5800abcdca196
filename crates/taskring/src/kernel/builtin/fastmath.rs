//! A branch-free `exp` for `f32` that the compiler vectorises: the libm call per element
//! cost `softmax_rows` ~6 µs for a `[4, 256]` row block (a decode step's softmax, its
//! largest kernel), ~23 ns per element on the 2-core box.
//!
//! The method (the classic one of Cephes' `expf`): `exp(x) = 2^k · exp(r)` with
//! `k = round(x / ln 2)` and `r = x - k·ln 2` in `[-ln2/2, ln2/2]` (`ln 2` split in a
//! high part exact in `f32` and a low correction), `exp(r)` by a degree-6 polynomial,
//! `2^k` built in the exponent bits. Within 2 ulp of the exact value over the whole
//! range (checked against `f64` below); below the smallest normal result (`x < -87.33`)
//! it returns 0 — denormal results are flushed — and above `88.37` it returns `+inf`
//! (the exact value at 88.72 is `f32::MAX`); NaN stays NaN.

/// `exp(x)`, see the module doc. `#[inline(always)]` so that a loop calling it
/// vectorises in its caller (and takes the caller's target features).
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // ln 2 rounded to 12 bits: k·LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4; // ln 2 - LN2_HI
    /// 1.5·2^23: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    const LO: f32 = -87.336_55; // ln(f32::MIN_POSITIVE)
    const HI: f32 = 88.376_26; // ln(2^127.5): k stays <= 127
                               // Clamped so that k fits the exponent field; the ends are fixed up at the return.
    let c = x.clamp(LO, HI);
    // k + 1.5·2^23, exactly: its low mantissa bits hold k (two's complement).
    let kf = c * LOG2E + ROUND;
    let k = kf - ROUND;
    let r = c - k * LN2_HI - k * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    // 2^k for k in [-126, 127]: a normal float with exponent field k + 127 (integer
    // arithmetic on the bits: no float-to-int conversion, which does not vectorise).
    let ki = kf.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(ki.wrapping_add(127) << 23);
    let y = e * scale;
    if x < LO {
        0.0
    } else if x > HI {
        f32::INFINITY
    } else {
        // NaN: `c`, so `y`, is NaN too.
        y
    }
}

#[cfg(test)]
mod tests {
    use super::exp_f32;

    /// Distance in ulps between two positive finite floats.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn within_two_ulp_of_f64_exp_over_the_normal_range() {
        let mut worst = 0;
        let mut x = -87.3f32;
        while x < 88.3 {
            let want = (x as f64).exp() as f32;
            let got = exp_f32(x);
            worst = worst.max(ulps(got, want));
            x += 0.000_97;
        }
        assert!(worst <= 2, "worst error {worst} ulp");
    }

    #[test]
    fn ends_and_special_values() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(100.0), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!((exp_f32(1.0) - std::f32::consts::E).abs() <= f32::EPSILON * 3.0);
        // The smallest normal result and just above it.
        assert!(exp_f32(-87.33) > 0.0 && exp_f32(-87.33).is_normal());
    }
}
