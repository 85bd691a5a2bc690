//! 8 kHz → 16 kHz for Smart Turn, in Rust.
//!
//! A 2× half-band interpolator: even output samples are the input samples unchanged; odd ones are
//! the band-limited midpoints `y[2k+1] = Σ_i h[i] · x[k + 32 − i]`, i = 0..64, with
//! `h[i] = sinc(i − 31.5) · kaiser64,β=8[i]` normalised to unit DC gain (`kaiser` as numpy's
//! `np.kaiser(64, 8)`). A symmetric 64-tap windowed sinc: linear phase with no delay (the output
//! lines up with the input), −6 dB at 4 kHz, transition about 3.7–4.3 kHz, stop band about −80 dB.
//! The edges read zeros beyond the input. `scripts/reference/smart_turn_ref.py --upsample-8k`
//! implements the same filter in numpy. Why by hand: the whole filter is these few lines, and it avoids a
//! resampling crate's buffering API for one fixed 2× ratio.

/// Taps on each side of the midpoint.
pub const HALF_TAPS: usize = 32;
#[cfg(test)]
const KAISER_BETA: f64 = 8.0;

#[cfg(test)]
fn bessel_i0(x: f64) -> f64 {
    // Power series; converges fast for the β used here.
    let mut sum = 1.0;
    let mut term = 1.0;
    let q = x * x / 4.0;
    for k in 1..50 {
        term *= q / (k * k) as f64;
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

/// Midpoint taps: for the midpoint k + ½, `MIDPOINT_TAPS[i]` weighs `x[k + 32 − i]`. The values
/// of `h = np.sinc(i − 31.5) · np.kaiser(64, 8); h /= h.sum()` as numpy computes them (written
/// out so the Rust and numpy filters are bit-identical; `taps_match_their_definition` recomputes
/// them): the model downstream is quantised, and a last-bit difference in its input can flip a
/// quantisation step.
pub const MIDPOINT_TAPS: [f64; 2 * HALF_TAPS] = [
    -2.3634329625342884e-05,
    5.5633130265332376e-05,
    -0.00010534809090739338,
    0.0001783249583321232,
    -0.0002810794268973903,
    0.0004211572579700433,
    -0.0006071902584821928,
    0.000848951284925534,
    -0.0011574135603161593,
    0.0015448223743683104,
    -0.002024790933714583,
    0.0026124371370890545,
    -0.003324585004966929,
    0.004180064423170691,
    -0.005200157460244729,
    0.006409261635014336,
    -0.007835875032204299,
    0.009514063710441039,
    -0.011485664084644298,
    0.013803631366357214,
    -0.016537227391165213,
    0.01978026536997229,
    -0.023664650160186766,
    0.028383555304669936,
    -0.03423320467346799,
    0.04169326026382748,
    -0.05159490811014619,
    0.06551300745305116,
    -0.08683036101280027,
    0.124355954407663,
    -0.21041555018523453,
    0.6360272496378867,
    0.6360272496378867,
    -0.21041555018523453,
    0.124355954407663,
    -0.08683036101280027,
    0.06551300745305116,
    -0.05159490811014619,
    0.04169326026382748,
    -0.03423320467346799,
    0.028383555304669936,
    -0.023664650160186766,
    0.01978026536997229,
    -0.016537227391165213,
    0.013803631366357214,
    -0.011485664084644298,
    0.009514063710441039,
    -0.007835875032204299,
    0.006409261635014336,
    -0.005200157460244729,
    0.004180064423170691,
    -0.003324585004966929,
    0.0026124371370890545,
    -0.002024790933714583,
    0.0015448223743683104,
    -0.0011574135603161593,
    0.000848951284925534,
    -0.0006071902584821928,
    0.0004211572579700433,
    -0.0002810794268973903,
    0.0001783249583321232,
    -0.00010534809090739338,
    5.5633130265332376e-05,
    -2.3634329625342884e-05,
];

/// The taps from their definition (for the test that checks the constants).
#[cfg(test)]
fn computed_taps() -> [f64; 2 * HALF_TAPS] {
    let n = (2 * HALF_TAPS) as f64;
    let mut raw = [0.0f64; 2 * HALF_TAPS];
    for (i, r) in raw.iter_mut().enumerate() {
        // Tap i weighs input x[k + 32 − i], which sits t = i − 31.5 input samples before the
        // midpoint k + ½.
        let t = i as f64 - (HALF_TAPS as f64 - 0.5);
        let sinc = (std::f64::consts::PI * t).sin() / (std::f64::consts::PI * t);
        // Kaiser window over the 2·HALF_TAPS taps (numpy's `np.kaiser(64, 8)`: endpoints at ±1).
        let pos = 2.0 * i as f64 / (n - 1.0) - 1.0;
        let w = bessel_i0(KAISER_BETA * (1.0 - pos * pos).max(0.0).sqrt()) / bessel_i0(KAISER_BETA);
        *r = sinc * w;
    }
    let sum: f64 = raw.iter().sum();
    raw.map(|r| r / sum)
}

/// Upsamples 8 kHz to 16 kHz into `out` (cleared first; twice the input's length).
pub fn upsample_2x(input: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.reserve(input.len() * 2);
    let n = input.len() as isize;
    for k in 0..n {
        out.push(input[k as usize]);
        // Midpoint between x[k] and x[k+1]: inputs x[k−31] ..= x[k+32], summed in tap order in
        // f64 (as the numpy reference), rounded once to f32.
        let mut acc = 0.0f64;
        let (lo, hi) = (k - HALF_TAPS as isize + 1, k + HALF_TAPS as isize);
        if lo >= 0 && hi < n {
            // Interior: no edge checks. Same order as below (tap 0 first).
            let window = &input[lo as usize..=hi as usize];
            for (&t, &x) in MIDPOINT_TAPS.iter().zip(window.iter().rev()) {
                acc += t * f64::from(x);
            }
        } else {
            for (i, &t) in MIDPOINT_TAPS.iter().enumerate() {
                let idx = k + HALF_TAPS as isize - i as isize;
                let x = if (0..n).contains(&idx) {
                    f64::from(input[idx as usize])
                } else {
                    0.0
                };
                acc += t * x;
            }
        }
        out.push(acc as f32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taps_match_their_definition() {
        let t = computed_taps();
        for i in 0..2 * HALF_TAPS {
            assert!((t[i] - MIDPOINT_TAPS[i]).abs() < 1e-12, "tap {i}");
            assert!((MIDPOINT_TAPS[i] - MIDPOINT_TAPS[2 * HALF_TAPS - 1 - i]).abs() < 1e-12);
        }
    }

    #[test]
    fn reproduces_a_tone_at_16k() {
        // A 1 kHz tone at 8 kHz upsampled must equal the same tone sampled at 16 kHz.
        let f = 1000.0f32;
        let x: Vec<f32> = (0..800)
            .map(|n| (2.0 * std::f32::consts::PI * f * n as f32 / 8000.0).sin())
            .collect();
        let mut y = Vec::new();
        upsample_2x(&x, &mut y);
        assert_eq!(y.len(), 1600);
        for (m, &v) in y.iter().enumerate().skip(200).take(1200) {
            let want = (2.0 * std::f32::consts::PI * f * m as f32 / 16000.0).sin();
            assert!((v - want).abs() < 2e-3, "sample {m}: {v} vs {want}");
        }
    }

    #[test]
    fn passes_even_samples_through() {
        let x = [0.1f32, -0.5, 0.25, 0.9];
        let mut y = Vec::new();
        upsample_2x(&x, &mut y);
        for (i, &v) in x.iter().enumerate() {
            assert_eq!(y[2 * i], v);
        }
    }
}
