//! 8 kHz → 16 kHz for Smart Turn, in Rust.
//!
//! A 2× half-band interpolator: even output samples are the input samples unchanged; odd ones are
//! the band-limited midpoints `y[2k+1] = Σ_i h[i] · x[k + 32 − i]`, i = 0..64, with the taps
//! `h` = [`MIDPOINT_TAPS`] (a 64-tap Kaiser-windowed sinc, β = 8, unit DC gain). The filter is
//! defined, and its design explained, in [`ontime_rtp::resample`], which also streams it for the
//! per-call audio path; this one-shot version works on a whole utterance, with no delay (the
//! output lines up with the input), reading zeros beyond the input's edges, summing in f64 in tap
//! order to be bit-identical to `scripts/reference/smart_turn_ref.py --upsample-8k` (numpy).

pub use ontime_rtp::resample::{HALF_TAPS, MIDPOINT_TAPS};

/// Midpoints computed side by side in the interior: each keeps its own f64 sum in tap order
/// (so every output is bit-identical to the one-at-a-time sum), and the eight independent sums
/// vectorise. One at a time, each midpoint was a chain of 64 dependent f64 additions: 10 ms for
/// a 7 s turn, a fifth of a Smart Turn run, paid again at every run on the same audio.
const LANES: usize = 8;

/// Upsamples 8 kHz to 16 kHz into `out` (cleared first; twice the input's length).
pub fn upsample_2x(input: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.resize(input.len() * 2, 0.0);
    let n = input.len();
    // Midpoint k reads x[k − 31] ..= x[k + 32]: it is interior (no zeros read) when
    // HALF_TAPS − 1 ≤ k and k + HALF_TAPS < n.
    let first_interior = HALF_TAPS - 1;
    let mut k = 0;
    while k < n {
        if k >= first_interior && k + LANES - 1 + HALF_TAPS < n {
            let mut acc = [0.0f64; LANES];
            for (i, &t) in MIDPOINT_TAPS.iter().enumerate() {
                // Output k + j reads x[k + j + HALF_TAPS − i] for tap i.
                let x = &input[k + HALF_TAPS - i..k + HALF_TAPS - i + LANES];
                for (a, &v) in acc.iter_mut().zip(x) {
                    *a += t * f64::from(v);
                }
            }
            for (j, a) in acc.iter().enumerate() {
                out[2 * (k + j)] = input[k + j];
                out[2 * (k + j) + 1] = *a as f32;
            }
            k += LANES;
        } else {
            out[2 * k] = input[k];
            out[2 * k + 1] = midpoint_at_edge(input, k);
            k += 1;
        }
    }
}

/// The midpoint between `x[k]` and `x[k+1]` near an edge: inputs `x[k−31] ..= x[k+32]`, zeros
/// beyond the input, summed in tap order in f64 (as the numpy reference), rounded once to f32.
fn midpoint_at_edge(input: &[f32], k: usize) -> f32 {
    let n = input.len() as isize;
    let k = k as isize;
    let mut acc = 0.0f64;
    for (i, &t) in MIDPOINT_TAPS.iter().enumerate() {
        let idx = k + HALF_TAPS as isize - i as isize;
        let x = if (0..n).contains(&idx) {
            f64::from(input[idx as usize])
        } else {
            0.0
        };
        acc += t * x;
    }
    acc as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_rtp::resample::Upsampler;

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
    fn every_midpoint_is_the_tap_order_sum_to_the_bit() {
        // The side-by-side interior must give what one sum at a time in tap order gives, for
        // every length around the lane and filter sizes (edges, a partial last block).
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for n in [0usize, 1, 31, 63, 64, 65, 70, 71, 72, 73, 80, 200, 4001] {
            let x: Vec<f32> = (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
                })
                .collect();
            let mut y = Vec::new();
            upsample_2x(&x, &mut y);
            assert_eq!(y.len(), 2 * n);
            for k in 0..n {
                assert_eq!(y[2 * k].to_bits(), x[k].to_bits(), "n {n}, even sample {k}");
                let want = midpoint_at_edge(&x, k);
                assert_eq!(
                    y[2 * k + 1].to_bits(),
                    want.to_bits(),
                    "n {n}, midpoint {k}"
                );
            }
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

    #[test]
    fn streaming_upsampler_matches_upsample_2x() {
        // ontime-rtp's streaming Upsampler (f32 sums, i16 out) on the same filter: streamed in
        // 20 ms frames and flushed, then shifted by its delay, it is this one-shot result rounded
        // to i16, to within 1 LSB (the f32 and f64 sums can round to either side of a half).
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let x: Vec<i16> = (0..4000)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 48) as u16 as i16 / 2
            })
            .collect();
        let mut up = Upsampler::new();
        let mut streamed = Vec::new();
        let mut buf = [0i16; 320];
        for frame in x.chunks(160) {
            let n = up.process(frame, &mut buf);
            streamed.extend_from_slice(&buf[..n]);
        }
        let n = up.flush(&mut buf);
        assert_eq!(n, Upsampler::DELAY_16K);
        streamed.extend_from_slice(&buf[..n]);

        let input: Vec<f32> = x.iter().map(|&v| f32::from(v)).collect();
        let mut y = Vec::new();
        upsample_2x(&input, &mut y);
        let streamed = &streamed[Upsampler::DELAY_16K..];
        assert_eq!(streamed.len(), y.len());
        for (m, (&got, &want)) in streamed.iter().zip(&y).enumerate() {
            let want = want.round().clamp(-32768.0, 32767.0);
            assert!(
                (f32::from(got) - want).abs() <= 1.0,
                "sample {m}: {got} vs {want}"
            );
        }
    }
}
