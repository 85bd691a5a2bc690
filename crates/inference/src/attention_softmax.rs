//! Smart Turn's quantised attention softmax, computed to the same bits as ONNX Runtime's
//! `QLinearSoftmax` kernel, several rows at a time.
//!
//! Smart Turn v3.2's CPU model quantises each attention layer's scores to uint8
//! (`DequantizeLinear → Softmax → QuantizeLinear`), and ONNX Runtime fuses that chain into its
//! contrib kernel `QLinearSoftmax`. For uint8 that kernel does, for each row of `D` values:
//!
//! 1. a lookup table of 256 exponentials built from the input scale (in `f64`, stored as `f32`),
//!    indexed by `x − max(row) + 255`;
//! 2. `sum` = the table values added one after the other in row order, in `f32`;
//! 3. `y = min(255, nearbyint(t · ⌊1 / y_scale⌋ / sum) + y_zero_point)` per value.
//!
//! Step 2 is a chain of dependent float additions: the scalar loop waits on the adder's latency
//! for every one of the 400 values of a row, 9 600 rows a run. This module keeps every operation
//! and its order (so every output byte is the same) and only changes what runs alongside what:
//! eight rows' sums advance together, each in its own accumulator, and step 3, which has no
//! dependency between values, runs on whole vectors. A general-purpose crate cannot do this
//! for us: the point is to reproduce one library's rounding exactly, which only a kernel
//! written against that library's loop can.
//!
//! Bit-identity is not taken on trust: [`crate::turn`] compares this kernel with ONNX Runtime's
//! own on the model's scales at every load, and runs the published graph when they differ.

/// Rows whose sums advance together (independent accumulators the CPU can overlap).
const ROWS_AT_ONCE: usize = 8;

/// Head room the kernel keeps below `f32::MAX` for the sum of a row, in natural-log units
/// (ONNX Runtime's `reserve_bit` for a float table).
const SUM_HEADROOM_LN: f64 = 5.0;

/// Round-to-nearest-even of a float in `[0, 2²³)`: adding 2²³ leaves no fraction bits, so the
/// FPU's default rounding (ties to even, the mode `nearbyintf` uses) does the rounding. Written
/// this way because `f32::round_ties_even` is a library call on baseline x86-64 and would not
/// vectorise.
const ROUNDING_BIAS: f32 = 8_388_608.0;

/// How the kernel's `log(FLT_MAX / D)` was evaluated when ONNX Runtime was compiled: in `f64`
/// on the `f32` quotient, or in `f32`. Both are plausible from the C++ source; the load-time
/// comparison picks the one that reproduces the runtime at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShiftLog {
    /// `ln` in `f64` of the `f32` quotient (C's `log(double)`).
    Double,
    /// `ln` in `f32` (C++'s `std::log(float)`), widened to `f64`.
    Single,
}

impl ShiftLog {
    /// Every variant, in the order the load-time check tries them.
    pub const ALL: [ShiftLog; 2] = [ShiftLog::Double, ShiftLog::Single];

    /// The value of the node attribute that carries the variant into the kernel.
    pub fn attribute(self) -> i64 {
        match self {
            ShiftLog::Double => 0,
            ShiftLog::Single => 1,
        }
    }

    /// The variant an attribute value names.
    pub fn from_attribute(value: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.attribute() == value)
    }
}

/// The 256 exponentials for a row length `d` and input scale `x_scale`: entry `i` is
/// `exp((i − 255 + shift) · x_scale)`, with `shift` chosen so that a row's sum stays below
/// `f32::MAX`.
pub fn lookup_table(x_scale: f32, d: usize, log: ShiftLog) -> [f32; 256] {
    // C++ divides the float maximum by a `size_t`: the length converts to `f32` first.
    let quotient = f32::MAX / d as f32;
    let ln = match log {
        ShiftLog::Double => f64::from(quotient).ln(),
        ShiftLog::Single => f64::from(quotient.ln()),
    };
    let x_scale = f64::from(x_scale);
    let shift = (ln - SUM_HEADROOM_LN).max(0.0) / x_scale;
    let mut table = [0.0f32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        *t = ((i as f64 - 255.0 + shift) * x_scale).exp() as f32;
    }
    table
}

/// The output multiplier the kernel uses: `⌊1 / y_scale⌋`, in `f32`.
pub fn output_multiplier(y_scale: f32) -> f32 {
    (1.0f32 / y_scale).floor()
}

/// Whether [`softmax_u8`] reproduces the kernel for an output multiplier: its rounding trick
/// needs `t · multiplier / sum` (at most `multiplier`) below 2²³.
fn multiplier_in_range(multiplier: f32) -> bool {
    multiplier.is_finite() && (0.0..ROUNDING_BIAS).contains(&multiplier)
}

/// Whether [`softmax_u8`] gives the kernel's bytes with this table and multiplier: the
/// multiplier in range, and `t · multiplier` finite for the largest entry (a short row leaves
/// the table too little head room, and the C++ kernel then converts infinity to an integer,
/// which C++ leaves undefined).
pub fn reproducible(table: &[f32; 256], multiplier: f32) -> bool {
    multiplier_in_range(multiplier) && (table[255] * multiplier).is_finite()
}

/// Softmax of `x`, rows of `d` uint8 values, into `y` (the same length), to the same bytes as
/// ONNX Runtime's uint8 `QLinearSoftmax` with `table` ([`lookup_table`]) and `multiplier`
/// ([`output_multiplier`]), when [`reproducible`] says so. `scratch` holds the table values of the
/// rows in flight between the two passes (`ROWS_AT_ONCE · d` floats once grown). Returns
/// `false`, writing nothing, when `x` is not whole rows of `d` or `y` is not its length.
pub fn softmax_u8(
    x: &[u8],
    d: usize,
    table: &[f32; 256],
    multiplier: f32,
    zero_point: u8,
    y: &mut [u8],
    scratch: &mut Vec<f32>,
) -> bool {
    if d == 0 || !x.len().is_multiple_of(d) || x.len() != y.len() {
        return false;
    }
    debug_assert!(reproducible(table, multiplier));
    scratch.resize(ROWS_AT_ONCE * d, 0.0);
    for (xs, ys) in x
        .chunks(ROWS_AT_ONCE * d)
        .zip(y.chunks_mut(ROWS_AT_ONCE * d))
    {
        let rows = xs.len() / d;
        let mut offset = [0usize; ROWS_AT_ONCE];
        for (o, row) in offset.iter_mut().zip(xs.chunks_exact(d)) {
            // The table is indexed by x − max + 255: the row's largest value reads entry 255.
            *o = 255 - usize::from(row.iter().copied().max().unwrap_or(0));
        }
        let mut sums = [0.0f32; ROWS_AT_ONCE];
        if rows == ROWS_AT_ONCE {
            sum_rows_together(
                xs,
                d,
                table,
                &offset,
                &mut scratch[..ROWS_AT_ONCE * d],
                &mut sums,
            );
        } else {
            for r in 0..rows {
                let mut sum = 0.0f32;
                for (s, &v) in scratch[r * d..(r + 1) * d]
                    .iter_mut()
                    .zip(&xs[r * d..(r + 1) * d])
                {
                    let t = table[(offset[r] + usize::from(v)) & 255];
                    *s = t;
                    sum += t;
                }
                sums[r] = sum;
            }
        }
        for r in 0..rows {
            quantise_row(
                &scratch[r * d..(r + 1) * d],
                sums[r],
                multiplier,
                zero_point,
                &mut ys[r * d..(r + 1) * d],
            );
        }
    }
    true
}

/// Eight rows' table values into `scratch` and their sums, each row's sum in row order.
#[inline(always)]
fn sum_rows_together(
    xs: &[u8],
    d: usize,
    table: &[f32; 256],
    offset: &[usize; ROWS_AT_ONCE],
    scratch: &mut [f32],
    sums: &mut [f32; ROWS_AT_ONCE],
) {
    let x: [&[u8]; ROWS_AT_ONCE] = std::array::from_fn(|r| &xs[r * d..(r + 1) * d]);
    let mut out = scratch.chunks_exact_mut(d);
    let s: [&mut [f32]; ROWS_AT_ONCE] = std::array::from_fn(|_| out.next().unwrap_or_default());
    let mut acc = [0.0f32; ROWS_AT_ONCE];
    for j in 0..d {
        for r in 0..ROWS_AT_ONCE {
            // `& 255` never changes the index (x ≤ max, so offset + x ≤ 255); it lets the
            // compiler drop the bounds check.
            let t = table[(offset[r] + usize::from(x[r][j])) & 255];
            s[r][j] = t;
            acc[r] += t;
        }
    }
    *sums = acc;
}

/// `y = min(255, nearbyint(t · multiplier / sum) + zero_point)`: no dependency between values,
/// so the compiler runs it on whole vectors, each lane the same IEEE operations as the scalar
/// kernel's.
fn quantise_row(t: &[f32], sum: f32, multiplier: f32, zero_point: u8, y: &mut [u8]) {
    let zero_point = u32::from(zero_point);
    for (y, &t) in y.iter_mut().zip(t) {
        // t ≤ sum (sum adds t and other positive values), so the quotient is in
        // [0, multiplier] and adding the bias rounds it exactly; the rounded integer is then
        // the low mantissa bits (the float is 2²³ + q, q < 2²³).
        let q = ((t * multiplier) / sum + ROUNDING_BIAS).to_bits() & 0x7f_ffff;
        *y = (q + zero_point).min(255) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ONNX Runtime's uint8 loop, one row after another, as its source reads.
    fn scalar_kernel(x: &[u8], d: usize, table: &[f32; 256], multiplier: f32, zp: u8) -> Vec<u8> {
        let mut y = Vec::with_capacity(x.len());
        for row in x.chunks_exact(d) {
            let max = *row.iter().max().expect("row");
            let shifted = &table[255 - usize::from(max)..];
            let mut sum = 0.0f32;
            for &v in row {
                sum += shifted[usize::from(v)];
            }
            for &v in row {
                let q = ((shifted[usize::from(v)] * multiplier) / sum).round_ties_even() as u32
                    + u32::from(zp);
                y.push(if q > 255 { 255 } else { q as u8 });
            }
        }
        y
    }

    /// A deterministic byte stream (xorshift), so a failure names a reproducible input.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn rows_together_give_the_scalar_loops_bytes() {
        let d = 400;
        // 21 rows: two groups of eight and a tail of five.
        let mut x = bytes(7, 21 * d);
        // Edge rows: all equal, one peak over a floor, a ramp, a narrow band near the top.
        x[..d].fill(77);
        x[d..2 * d].fill(0);
        x[d + 3] = 255;
        for (j, v) in x[2 * d..3 * d].iter_mut().enumerate() {
            *v = (j % 256) as u8;
        }
        for (j, v) in x[3 * d..4 * d].iter_mut().enumerate() {
            *v = 250 + (j % 6) as u8;
        }
        let mut scratch = Vec::new();
        let mut compared = 0;
        for (x_scale, y_scale, zp) in [
            (0.208_193_59f32, 0.003_875_13f32, 0u8),
            (0.120_033_14, 0.003_870_92, 0),
            (0.05, 1.0 / 256.0, 3),
        ] {
            for log in ShiftLog::ALL {
                let table = lookup_table(x_scale, d, log);
                let m = output_multiplier(y_scale);
                let mut y = vec![0u8; x.len()];
                assert!(softmax_u8(&x, d, &table, m, zp, &mut y, &mut scratch));
                assert_eq!(y, scalar_kernel(&x, d, &table, m, zp));
                compared += y.len();
            }
        }
        assert_eq!(compared, 3 * 2 * 21 * d);
    }

    #[test]
    fn a_row_of_one_peak_saturates_like_the_kernel() {
        // One value far above the rest: its quotient is the multiplier (258 here), which the
        // kernel clamps to 255; the rest round to 0.
        let d = 400;
        let table = lookup_table(0.2, d, ShiftLog::Double);
        let m = output_multiplier(0.003_875_13);
        assert_eq!(m, 258.0);
        let mut x = vec![0u8; d];
        x[17] = 255;
        let mut y = vec![9u8; d];
        assert!(softmax_u8(&x, d, &table, m, 0, &mut y, &mut Vec::new()));
        assert_eq!(y.iter().filter(|&&v| v == 255).count(), 1);
        assert_eq!(y[17], 255);
        assert_eq!(y.iter().filter(|&&v| v == 0).count(), d - 1);
        assert_eq!(y, scalar_kernel(&x, d, &table, m, 0));
    }

    #[test]
    fn a_row_too_short_for_the_tables_headroom_is_refused() {
        // A one-value row: the table's largest entry times the multiplier overflows `f32`,
        // where the C++ kernel's float-to-integer conversion is undefined.
        let m = output_multiplier(0.003_875_13);
        assert!(!reproducible(&lookup_table(0.2, 1, ShiftLog::Double), m));
        assert!(reproducible(&lookup_table(0.2, 400, ShiftLog::Double), m));
    }

    #[test]
    fn rows_that_do_not_fit_are_refused_and_nothing_written() {
        let table = lookup_table(0.2, 4, ShiftLog::Single);
        let m = output_multiplier(0.003_875_13);
        let mut scratch = Vec::new();
        let mut y = [7u8; 8];
        assert!(!softmax_u8(&[1; 8], 0, &table, m, 0, &mut y, &mut scratch));
        assert!(!softmax_u8(
            &[1; 6],
            4,
            &table,
            m,
            0,
            &mut y[..6],
            &mut scratch
        ));
        assert!(!softmax_u8(
            &[1; 8],
            4,
            &table,
            m,
            0,
            &mut y[..4],
            &mut scratch
        ));
        assert_eq!(y, [7; 8]);
        assert!(softmax_u8(&[1; 8], 4, &table, m, 0, &mut y, &mut scratch));
        // Four equal values: a quarter of 258 each, 64.5, rounded to even as `nearbyintf` does.
        assert_eq!(y, [64; 8]);
    }

    #[test]
    fn multipliers_outside_the_rounding_range_are_refused() {
        assert!(multiplier_in_range(258.0));
        assert!(!multiplier_in_range(ROUNDING_BIAS));
        assert!(!multiplier_in_range(f32::INFINITY));
        assert!(!multiplier_in_range(f32::NAN));
    }
}
