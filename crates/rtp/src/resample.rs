//! 2× resampling between 8 kHz (G.711, [`SAMPLE_RATE_HZ`](crate::SAMPLE_RATE_HZ)) and 16 kHz
//! (G.722 and the models, [`WIDEBAND_RATE_HZ`](crate::WIDEBAND_RATE_HZ)), with one half-band
//! filter.
//!
//! # The filter
//!
//! A 2× half-band interpolator: even output samples are the input samples unchanged; odd ones are
//! the band-limited midpoints `y[2k+1] = Σ_i h[i] · x[k + 32 − i]`, i = 0..64, with
//! `h[i] = sinc(i − 31.5) · kaiser64,β=8[i]` normalised to unit DC gain (`kaiser` as numpy's
//! `np.kaiser(64, 8)`): [`MIDPOINT_TAPS`]. A symmetric 64-tap windowed sinc: linear phase, −6 dB
//! at 4 kHz, transition about 3.7–4.4 kHz (−0.008 dB at 3.7 kHz, −60 dB at 4.3 kHz), pass band
//! flat to within 7·10⁻⁵ up to 3.5 kHz, stop band below −82 dB from 4.4 kHz (−126 dB at
//! 6 kHz). `scripts/reference/smart_turn_ref.py --upsample-8k` implements the same filter in numpy.
//! Why by hand: the whole filter is these few lines, and it avoids a resampling crate's buffering
//! API for one fixed 2× ratio.
//!
//! Seen at 16 kHz, the interpolator is the low-pass `f[0] = 1`, `f[2i − 63] = h[i]` applied to
//! the input with zeros stuffed between its samples. Its half, `g = f / 2` (centre tap ½, odd taps
//! `MIDPOINT_TAPS / 2`, 127 taps, unit DC gain), is the decimator's anti-alias filter, so the two
//! directions share one pass band and one stop band, and a down/up round trip of an in-band signal
//! comes back.
//!
//! # Streaming
//!
//! `ontime-inference`'s one-shot `upsample_2x` (f32 in, f64 sums, bit-exact to numpy) treats a
//! whole utterance at once and reads zeros beyond its edges. The per-call audio path needs the same
//! filter on a stream of 20 ms frames, causal and allocation-free: [`Upsampler`] (8 → 16 kHz,
//! lags by [`Upsampler::DELAY_16K`] = 64 output samples, 4 ms) and [`Downsampler`] (16 → 8 kHz,
//! lags by [`Downsampler::DELAY_8K`] = 31 output samples, 3.875 ms). Both keep their history in
//! fixed arrays, compute in f32 (taps precomputed from [`MIDPOINT_TAPS`]) and round each output
//! to the nearest i16, saturating. A round trip 8 → 16 → 8 kHz lags by
//! `DELAY_16K / 2 + DELAY_8K` = 63 samples at 8 kHz (7.875 ms).
//!
//! ```
//! use ontime_rtp::resample::{Downsampler, Upsampler};
//! use ontime_rtp::{SAMPLES_PER_FRAME, WIDEBAND_SAMPLES_PER_FRAME};
//!
//! let mut up = Upsampler::new();
//! let mut down = Downsampler::new();
//! let frame = [1000i16; SAMPLES_PER_FRAME];
//! let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
//! let mut narrow = [0i16; SAMPLES_PER_FRAME];
//! for _ in 0..3 {
//!     assert_eq!(up.process(&frame, &mut wide), WIDEBAND_SAMPLES_PER_FRAME);
//!     assert_eq!(down.process(&wide, &mut narrow), SAMPLES_PER_FRAME);
//! }
//! // After the round trip's 63-sample lag, DC comes back as it went in.
//! assert_eq!(narrow[SAMPLES_PER_FRAME - 1], 1000);
//! // At the end of a stream, the upsampler's held-back tail.
//! let mut tail = [0i16; Upsampler::DELAY_16K];
//! assert_eq!(up.flush(&mut tail), Upsampler::DELAY_16K);
//! ```

/// Taps on each side of the midpoint.
pub const HALF_TAPS: usize = 32;

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

/// Samples in a filter window: the 64 inputs a midpoint reads (upsampler), or the 64 odd-indexed
/// inputs the decimator's odd taps read.
const WINDOW: usize = 2 * HALF_TAPS;

/// [`MIDPOINT_TAPS`] in f32, in window order (oldest sample first): `UP_TAPS[j]` weighs the
/// window's sample j, which is `x[k + 32 − (63 − j)]`.
const UP_TAPS: [f32; WINDOW] = {
    let mut t = [0.0f32; WINDOW];
    let mut j = 0;
    while j < WINDOW {
        t[j] = MIDPOINT_TAPS[WINDOW - 1 - j] as f32;
        j += 1;
    }
    t
};

/// The decimator's odd taps, `MIDPOINT_TAPS / 2` in f32, in window order (oldest odd-indexed
/// sample first).
const DOWN_TAPS: [f32; WINDOW] = {
    let mut t = [0.0f32; WINDOW];
    let mut j = 0;
    while j < WINDOW {
        t[j] = (MIDPOINT_TAPS[WINDOW - 1 - j] / 2.0) as f32;
        j += 1;
    }
    t
};

/// `Σ taps[j] · window[j]` in eight interleaved f32 lanes (so it vectorises), summed pairwise.
#[inline]
fn dot(taps: &[f32; WINDOW], window: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (t, w) in taps.chunks_exact(8).zip(window.chunks_exact(8)) {
        for ((a, &t), &w) in acc.iter_mut().zip(t).zip(w) {
            *a += t * w;
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Rounds to the nearest i16 (halves away from zero), saturating at the i16 range.
#[inline]
fn to_i16(v: f32) -> i16 {
    // `as` saturates (and maps NaN, which i16 inputs cannot produce, to 0).
    v.round() as i16
}

/// 8 kHz → 16 kHz, streaming: even outputs are the inputs, odd ones the band-limited midpoints
/// ([`MIDPOINT_TAPS`]). Causal: the output lags the input by [`HALF_TAPS`] input samples (4 ms,
/// [`Upsampler::DELAY_16K`] output samples) because each midpoint needs 32 samples ahead.
///
/// Output sample `m` of the stream is `y[m − DELAY_16K]`, where `y` is the one-shot
/// interpolation of everything pushed so far with zeros before the first sample; after
/// [`flush`](Upsampler::flush) the whole output, shifted by the delay, is the one-shot result of
/// the stream with zeros after its end too (as `ontime-inference`'s `upsample_2x`, to within
/// 1 LSB of rounding). The first `DELAY_16K` outputs are the filter's lead-in: zeros at the even
/// places, the midpoints' pre-ringing of the first samples at the odd ones.
///
/// No allocation after construction, no panic on any input.
#[derive(Clone, Debug)]
pub struct Upsampler {
    /// The last [`WINDOW`] inputs, twice over (`hist[i] == hist[i + WINDOW]`), so the window
    /// `hist[pos..pos + WINDOW]` is contiguous, oldest first.
    hist: [f32; 2 * WINDOW],
    /// Where the next input goes; always `< WINDOW`.
    pos: usize,
}

impl Default for Upsampler {
    fn default() -> Self {
        Self::new()
    }
}

impl Upsampler {
    /// The lag, in output (16 kHz) samples: `2 * HALF_TAPS` = 64 (4 ms).
    pub const DELAY_16K: usize = 2 * HALF_TAPS;

    /// A new stream (silence before its first sample).
    pub const fn new() -> Upsampler {
        Upsampler {
            hist: [0.0; 2 * WINDOW],
            pos: 0,
        }
    }

    /// Pushes one input; returns the output pair it completes: the input and the midpoint from
    /// [`HALF_TAPS`] inputs ago.
    #[inline]
    fn push(&mut self, x: f32) -> (i16, i16) {
        let pos = self.pos;
        self.hist[pos] = x;
        self.hist[pos + WINDOW] = x;
        self.pos = (pos + 1) % WINDOW;
        // Oldest first: window[63] is the input just pushed, x[n]; the pair is y[2k], y[2k+1]
        // for k = n − 32, which reads x[k − 31 ..= k + 32] = the whole window.
        let window = &self.hist[self.pos..self.pos + WINDOW];
        let even = window[WINDOW - 1 - HALF_TAPS];
        (to_i16(even), to_i16(dot(&UP_TAPS, window)))
    }

    /// Pushes `input` (8 kHz) and writes `2 * input.len()` samples (16 kHz) into `out`; returns
    /// the samples written. `out.len()` must be at least `2 * input.len()`: a shorter `out` gets
    /// what fits and the rest of this call's output is lost (the whole input is still pushed, so
    /// the stream's timing holds).
    pub fn process(&mut self, input: &[i16], out: &mut [i16]) -> usize {
        let mut written = 0;
        for &x in input {
            let (even, odd) = self.push(f32::from(x));
            for v in [even, odd] {
                if let Some(slot) = out.get_mut(written) {
                    *slot = v;
                    written += 1;
                }
            }
        }
        written
    }

    /// Ends the stream: pushes [`HALF_TAPS`] zeros, writing the last [`Self::DELAY_16K`] output
    /// samples still held back (so a stream's tail is not lost) into `out`; returns the samples
    /// written (all 64 if `out` is long enough, else what fits). After it the state is as new.
    pub fn flush(&mut self, out: &mut [i16]) -> usize {
        let written = self.process(&[0; HALF_TAPS], out);
        self.reset();
        written
    }

    /// Forgets the history, without writing it out: as new.
    pub fn reset(&mut self) {
        *self = Self::new();
    }
}

/// 16 kHz → 8 kHz, streaming: the half-band low-pass (centre tap ½, odd taps
/// `MIDPOINT_TAPS / 2`: the [`Upsampler`]'s filter, so a down/up round trip of an in-band
/// signal comes back) then every other sample. Causal: the output lags by
/// [`Downsampler::DELAY_8K`] = 31 output samples (62 input samples, 3.875 ms).
///
/// Output sample `j` is the low-passed input at 16 kHz index `2 · (j − DELAY_8K)` (an even
/// index, so 8 kHz samples that went up through an [`Upsampler`] come back on their own grid),
/// with zeros before the stream's first sample. It is written once input `2j + 1` has arrived:
/// the filter's 127 taps reach 63 samples ahead of the centre.
///
/// No allocation after construction, no panic on any input.
#[derive(Clone, Debug)]
pub struct Downsampler {
    /// The last [`WINDOW`] odd-indexed inputs, twice over (`odd[i] == odd[i + WINDOW]`), so
    /// `odd[opos..opos + WINDOW]` is contiguous, oldest first.
    odd: [f32; 2 * WINDOW],
    /// Where the next odd-indexed input goes; always `< WINDOW`.
    opos: usize,
    /// The last [`HALF_TAPS`] even-indexed inputs (a ring; the oldest is the centre tap's).
    even: [f32; HALF_TAPS],
    /// Where the next even-indexed input goes; always `< HALF_TAPS`.
    epos: usize,
    /// An even-indexed input waiting for its odd partner (from a call with an odd count).
    held: Option<i16>,
}

impl Default for Downsampler {
    fn default() -> Self {
        Self::new()
    }
}

impl Downsampler {
    /// The lag, in output (8 kHz) samples: `HALF_TAPS − 1` = 31 (3.875 ms). An 8 → 16 → 8 kHz
    /// round trip lags by `Upsampler::DELAY_16K / 2 + DELAY_8K` = 63 samples.
    pub const DELAY_8K: usize = HALF_TAPS - 1;

    /// A new stream (silence before its first sample).
    pub const fn new() -> Downsampler {
        Downsampler {
            odd: [0.0; 2 * WINDOW],
            opos: 0,
            even: [0.0; HALF_TAPS],
            epos: 0,
            held: None,
        }
    }

    /// Pushes the input pair `v[2j]`, `v[2j + 1]`; returns output `j`.
    #[inline]
    fn push_pair(&mut self, even: f32, odd: f32) -> i16 {
        let opos = self.opos;
        self.odd[opos] = odd;
        self.odd[opos + WINDOW] = odd;
        self.opos = (opos + 1) % WINDOW;
        self.even[self.epos] = even;
        self.epos = (self.epos + 1) % HALF_TAPS;
        // The centre c = 2(j − 31): its even sample is v[2j − 62], the oldest of the last 32
        // even-indexed inputs; the odd taps read v[c + 63 − 2i] = v[2j + 1 − 2i], i = 0..64, the
        // last 64 odd-indexed inputs.
        let centre = self.even[self.epos];
        let window = &self.odd[self.opos..self.opos + WINDOW];
        to_i16(0.5 * centre + dot(&DOWN_TAPS, window))
    }

    /// Pushes `input` (16 kHz) and writes one sample (8 kHz) per completed input pair into `out`:
    /// `input.len() / 2`, or `(input.len() + 1) / 2` when the previous call left an odd sample
    /// over. An odd sample at the end is kept for the next call. Returns the samples written.
    /// `out.len()` must be at least that count: a shorter `out` gets what fits and the rest of this
    /// call's output is lost (the whole input is still pushed, so the stream's timing holds).
    pub fn process(&mut self, input: &[i16], out: &mut [i16]) -> usize {
        let mut written = 0;
        for &v in input {
            match self.held.take() {
                None => self.held = Some(v),
                Some(even) => {
                    let y = self.push_pair(f32::from(even), f32::from(v));
                    if let Some(slot) = out.get_mut(written) {
                        *slot = y;
                        written += 1;
                    }
                }
            }
        }
        written
    }

    /// Ends the stream: pushes zeros until the last [`Self::DELAY_8K`] output samples still held
    /// back (and one more for an odd input sample left over) are written into `out`, so a
    /// stream's tail is not lost; returns the samples written (all of them if `out` is long
    /// enough, else what fits). After it the state is as new.
    pub fn flush(&mut self, out: &mut [i16]) -> usize {
        let zeros = [0i16; 2 * Self::DELAY_8K + 1];
        let n = 2 * Self::DELAY_8K + usize::from(self.held.is_some());
        let written = self.process(&zeros[..n], out);
        self.reset();
        written
    }

    /// Forgets the history and any held sample: as new.
    pub fn reset(&mut self) {
        *self = Self::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SAMPLES_PER_FRAME, WIDEBAND_SAMPLES_PER_FRAME};
    use proptest::prelude::*;
    use std::f64::consts::PI;

    const KAISER_BETA: f64 = 8.0;

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

    /// The taps from their definition (for the test that checks the constants).
    fn computed_taps() -> [f64; 2 * HALF_TAPS] {
        let n = (2 * HALF_TAPS) as f64;
        let mut raw = [0.0f64; 2 * HALF_TAPS];
        for (i, r) in raw.iter_mut().enumerate() {
            // Tap i weighs input x[k + 32 − i], which sits t = i − 31.5 input samples before the
            // midpoint k + ½.
            let t = i as f64 - (HALF_TAPS as f64 - 0.5);
            let sinc = (PI * t).sin() / (PI * t);
            // Kaiser window over the 2·HALF_TAPS taps (numpy's `np.kaiser(64, 8)`: endpoints at ±1).
            let pos = 2.0 * i as f64 / (n - 1.0) - 1.0;
            let w =
                bessel_i0(KAISER_BETA * (1.0 - pos * pos).max(0.0).sqrt()) / bessel_i0(KAISER_BETA);
            *r = sinc * w;
        }
        let sum: f64 = raw.iter().sum();
        raw.map(|r| r / sum)
    }

    #[test]
    fn taps_match_their_definition() {
        let t = computed_taps();
        for i in 0..2 * HALF_TAPS {
            assert!((t[i] - MIDPOINT_TAPS[i]).abs() < 1e-12, "tap {i}");
            assert!((MIDPOINT_TAPS[i] - MIDPOINT_TAPS[2 * HALF_TAPS - 1 - i]).abs() < 1e-12);
        }
    }

    /// Clamps and rounds an f64 reference the way the resamplers round their f32 sums.
    fn round_sat(v: f64) -> i16 {
        v.round().clamp(f64::from(i16::MIN), f64::from(i16::MAX)) as i16
    }

    /// `ontime-inference`'s one-shot `upsample_2x`, reimplemented on i16 input: even outputs the
    /// inputs, odd ones `Σ_i h[i] · x[k + 32 − i]` summed in tap order in f64 with zeros beyond
    /// the edges, rounded once to f32 (as `upsample_2x` returns them). `ontime-inference`'s own
    /// tests compare the streaming filter with the real `upsample_2x` too.
    fn one_shot_up(x: &[i16]) -> Vec<f32> {
        let n = x.len() as isize;
        let mut y = Vec::with_capacity(2 * x.len());
        for k in 0..n {
            y.push(f32::from(x[k as usize]));
            let mut acc = 0.0f64;
            for (i, &t) in MIDPOINT_TAPS.iter().enumerate() {
                let idx = k + HALF_TAPS as isize - i as isize;
                if (0..n).contains(&idx) {
                    acc += t * f64::from(x[idx as usize]);
                }
            }
            y.push(acc as f32);
        }
        y
    }

    /// The decimator, directly from its definition in f64: output j is
    /// `½ v[c] + Σ_i h[i]/2 · v[c + 63 − 2i]` at c = 2(j − DELAY_8K), zeros outside the input,
    /// for the `v.len() / 2` outputs a stream of `v` produces.
    fn direct_down(v: &[i16]) -> Vec<f64> {
        let at = |i: isize| {
            usize::try_from(i)
                .ok()
                .and_then(|i| v.get(i))
                .map_or(0.0, |&s| f64::from(s))
        };
        (0..v.len() / 2)
            .map(|j| {
                let c = 2 * (j as isize - Downsampler::DELAY_8K as isize);
                let odd: f64 = MIDPOINT_TAPS
                    .iter()
                    .enumerate()
                    .map(|(i, &h)| h / 2.0 * at(c + 2 * HALF_TAPS as isize - 1 - 2 * i as isize))
                    .sum();
                0.5 * at(c) + odd
            })
            .collect()
    }

    /// Phase of the test tones at t = 0: off the 45° grid a 1 kHz tone at 8 kHz would sample,
    /// so the inputs' rounding is not the same few values.
    const PHASE: f64 = 0.3;

    fn tone(freq: f64, rate: f64, amplitude: f64, len: usize) -> Vec<i16> {
        (0..len)
            .map(|n| round_sat(amplitude * (2.0 * PI * freq * n as f64 / rate + PHASE).sin()))
            .collect()
    }

    /// A deterministic noise-like signal over the whole i16 range.
    fn noise(len: usize, seed: u64) -> Vec<i16> {
        let mut s = seed | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 48) as u16 as i16
            })
            .collect()
    }

    fn up_frames(x: &[i16], frame: usize, flush: bool) -> Vec<i16> {
        let mut up = Upsampler::new();
        let mut y = Vec::new();
        let mut buf = vec![0i16; 2 * frame.max(HALF_TAPS)];
        for chunk in x.chunks(frame.max(1)) {
            let n = up.process(chunk, &mut buf);
            assert_eq!(n, 2 * chunk.len());
            y.extend_from_slice(&buf[..n]);
        }
        if flush {
            let n = up.flush(&mut buf);
            assert_eq!(n, Upsampler::DELAY_16K);
            y.extend_from_slice(&buf[..n]);
        }
        y
    }

    fn down_chunks(v: &[i16], sizes: &[usize]) -> Vec<i16> {
        let mut down = Downsampler::new();
        let mut z = Vec::new();
        let mut buf = vec![0i16; v.len() / 2 + 1];
        let mut rest = v;
        let mut held = 0;
        for &size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (chunk, tail) = rest.split_at(size.min(rest.len()));
            rest = tail;
            let n = down.process(chunk, &mut buf);
            assert_eq!(n, (held + chunk.len()) / 2);
            held = (held + chunk.len()) % 2;
            z.extend_from_slice(&buf[..n]);
        }
        z
    }

    /// Largest |a − b| over paired samples, in LSB.
    fn max_err(a: impl IntoIterator<Item = f64>, b: impl IntoIterator<Item = f64>) -> f64 {
        a.into_iter()
            .zip(b)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max)
    }

    fn rms(v: &[i16]) -> f64 {
        (v.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
    }

    #[test]
    fn upsampler_reproduces_a_tone_at_16k() {
        // A 1 kHz tone at 8 kHz, in 20 ms frames, must come out as the same tone sampled at
        // 16 kHz, DELAY_16K samples late. Past the lead-in (the delay plus the filter's 64
        // output samples of start-up) the error is the inputs' and the outputs' rounding:
        // measured 0.87 LSB at amplitude 20 000.
        let (amplitude, f) = (20_000.0, 1000.0);
        let x = tone(f, 8000.0, amplitude, 50 * SAMPLES_PER_FRAME);
        let y = up_frames(&x, SAMPLES_PER_FRAME, false);
        assert_eq!(y.len(), 2 * x.len());
        let skip = Upsampler::DELAY_16K + 2 * HALF_TAPS * 2;
        let want = (skip..y.len()).map(|m| {
            let t = (m - Upsampler::DELAY_16K) as f64 / 16_000.0;
            amplitude * (2.0 * PI * f * t + PHASE).sin()
        });
        let err = max_err(y[skip..].iter().map(|&s| f64::from(s)), want);
        eprintln!("upsampler 1 kHz tone: max error {err:.3} LSB of {amplitude}");
        assert!(err <= 1.5, "max error {err} LSB");
    }

    #[test]
    fn upsampler_frames_equal_one_call() {
        let x = noise(3000, 7);
        let whole = up_frames(&x, x.len(), true);
        for frame in [1, 7, SAMPLES_PER_FRAME, 161, 999] {
            assert_eq!(up_frames(&x, frame, true), whole, "frames of {frame}");
        }
    }

    #[test]
    fn upsampler_even_outputs_are_delayed_inputs() {
        let x = noise(2000, 11);
        let y = up_frames(&x, SAMPLES_PER_FRAME, true);
        assert_eq!(y.len(), 2 * x.len() + Upsampler::DELAY_16K);
        // Lead-in: the zeros before the stream.
        assert!(y[..Upsampler::DELAY_16K].iter().step_by(2).all(|&s| s == 0));
        for (n, &s) in x.iter().enumerate() {
            assert_eq!(y[2 * n + Upsampler::DELAY_16K], s, "input {n}");
        }
    }

    #[test]
    fn flush_writes_the_tail_of_the_one_shot_result() {
        // The streamed output, shifted by the delay and flushed, must be `upsample_2x`'s result
        // (reimplemented here on the same f64 taps, zeros beyond both edges: ontime-rtp cannot
        // depend on ontime-inference, whose own test compares with the real function). The
        // stream sums in f32, the one-shot in f64: the rounded outputs may differ by 1 LSB where
        // the exact value sits next to a half; noise over the full i16 range, saturating at the
        // rails, is the hardest case.
        for (seed, len) in [(3, 2000), (5, 161), (9, 1)] {
            let x = noise(len, seed);
            let mut up = Upsampler::new();
            let mut y = vec![0i16; 2 * len];
            assert_eq!(up.process(&x, &mut y), 2 * len);
            let mut tail = [0i16; 2 * Upsampler::DELAY_16K];
            assert_eq!(up.flush(&mut tail), Upsampler::DELAY_16K);
            // After a flush the state is as new.
            assert_eq!(format!("{up:?}"), format!("{:?}", Upsampler::new()));
            y.extend_from_slice(&tail[..Upsampler::DELAY_16K]);

            let want: Vec<i16> = one_shot_up(&x)
                .iter()
                .map(|&v| round_sat(f64::from(v)))
                .collect();
            let got = &y[Upsampler::DELAY_16K..];
            assert_eq!(got.len(), want.len());
            let mut off_by_one = 0;
            for (m, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (i32::from(g) - i32::from(w)).abs() <= 1,
                    "sample {m}: {g} vs {w}"
                );
                off_by_one += usize::from(g != w);
            }
            eprintln!("flush vs one-shot, {len} inputs: {off_by_one} samples off by 1 LSB");
            // The flushed samples are the one-shot result's last DELAY_16K.
            let tail_want = &want[want.len().saturating_sub(Upsampler::DELAY_16K)..];
            let tail_got = &tail[Upsampler::DELAY_16K - tail_want.len()..Upsampler::DELAY_16K];
            assert!(tail_got
                .iter()
                .zip(tail_want)
                .all(|(&g, &w)| (i32::from(g) - i32::from(w)).abs() <= 1));
        }
    }

    #[test]
    fn upsampler_writes_what_fits() {
        let x = noise(100, 13);
        let whole = up_frames(&x, x.len(), false);
        let mut up = Upsampler::new();
        let mut short = [0i16; 51];
        assert_eq!(up.process(&x[..50], &mut short), 51);
        assert_eq!(short[..], whole[..51]);
        // The whole input was pushed: the stream goes on in step.
        let mut rest = [0i16; 100];
        assert_eq!(up.process(&x[50..], &mut rest), 100);
        assert_eq!(rest[..], whole[100..]);
        assert_eq!(up.process(&x, &mut []), 0);
        assert_eq!(up.flush(&mut []), 0);
        assert_eq!(format!("{up:?}"), format!("{:?}", Upsampler::default()));
    }

    #[test]
    fn downsampler_reproduces_a_tone_at_8k() {
        // A 1 kHz tone at 16 kHz comes out as the same tone at 8 kHz, DELAY_8K samples late.
        // Measured: 0.40 LSB at amplitude 20 000 past the lead-in.
        let (amplitude, f) = (20_000.0, 1000.0);
        let v = tone(f, 16_000.0, amplitude, 50 * WIDEBAND_SAMPLES_PER_FRAME);
        let z = down_chunks(&v, &[WIDEBAND_SAMPLES_PER_FRAME]);
        assert_eq!(z.len(), v.len() / 2);
        let skip = Downsampler::DELAY_8K + 2 * HALF_TAPS;
        let want = (skip..z.len()).map(|j| {
            let t = (j - Downsampler::DELAY_8K) as f64 / 8000.0;
            amplitude * (2.0 * PI * f * t + PHASE).sin()
        });
        let err = max_err(z[skip..].iter().map(|&s| f64::from(s)), want);
        eprintln!("downsampler 1 kHz tone: max error {err:.3} LSB of {amplitude}");
        assert!(err <= 1.5, "max error {err} LSB");
    }

    #[test]
    fn downsampler_rejects_the_stop_band() {
        // Full-scale tones above 4 kHz would alias into the 8 kHz band. The filter's stop band
        // (its response from the f64 taps) is below −82 dB from 4.4 kHz: past the lead-in every
        // tone from 4.5 to 7.9 kHz must come out at least 76 dB down, the stop band minus 6 dB
        // for the outputs' rounding (alone −98 dB of a full-scale sine). Measured: 84.4 dB down
        // at worst (4.5–7.9 kHz). At 6 kHz the filter gives −126 dB, 0.02 LSB: the stream
        // outputs exact silence.
        let amplitude = 32_000.0;
        let skip = Downsampler::DELAY_8K + 2 * HALF_TAPS;
        let mut worst = f64::INFINITY;
        for f in (0..=34).map(|i| 4500.0 + 100.0 * f64::from(i)) {
            let v = tone(f, 16_000.0, amplitude, 25 * WIDEBAND_SAMPLES_PER_FRAME);
            let z = down_chunks(&v, &[WIDEBAND_SAMPLES_PER_FRAME]);
            let out = rms(&z[skip..]);
            // All-zero output: attenuation beyond measure (infinite).
            let atten = 20.0 * (amplitude / 2f64.sqrt() / out).log10();
            let response = stop_band_response(f);
            assert!(response <= -82.0, "{f} Hz: filter {response:.1} dB");
            assert!(atten >= 76.0, "{f} Hz: only {atten:.1} dB down");
            if f == 6000.0 {
                eprintln!("6 kHz tone: {atten:.1} dB down (filter {response:.1} dB)");
                assert!(z[skip..].iter().all(|&s| s == 0), "6 kHz leaks: rms {out}");
            }
            worst = worst.min(atten);
        }
        eprintln!("4.5–7.9 kHz tones: worst {worst:.1} dB down");
    }

    /// The decimator's response at `f` Hz (16 kHz rate) in dB, from the f64 taps.
    fn stop_band_response(f: f64) -> f64 {
        let w = 2.0 * PI * f / 16_000.0;
        // g is symmetric: H(w) = ½ + Σ_i h[i]/2 · cos(w · (2i − 63)).
        let h: f64 = 0.5
            + MIDPOINT_TAPS
                .iter()
                .enumerate()
                .map(|(i, &t)| t / 2.0 * (w * (2.0 * i as f64 - 63.0)).cos())
                .sum::<f64>();
        20.0 * h.abs().log10()
    }

    #[test]
    fn downsampler_odd_frames_equal_one_call() {
        let v = noise(4001, 17);
        let whole = down_chunks(&v, &[v.len()]);
        assert_eq!(whole.len(), 2000);
        for sizes in [&[1][..], &[3], &[159, 161], &[1, 2, 5, 320, 7], &[319]] {
            assert_eq!(down_chunks(&v, sizes), whole, "chunks of {sizes:?}");
        }
    }

    #[test]
    fn downsampler_matches_its_definition() {
        // f32 sums against the f64 definition: at most 1 LSB apart, also where the output
        // saturates (noise over the full range).
        let v = noise(3001, 19);
        let z = down_chunks(&v, &[WIDEBAND_SAMPLES_PER_FRAME]);
        let want = direct_down(&v);
        assert_eq!(z.len(), want.len());
        for (j, (&g, &w)) in z.iter().zip(&want).enumerate() {
            let w = round_sat(w);
            assert!(
                (i32::from(g) - i32::from(w)).abs() <= 1,
                "sample {j}: {g} vs {w}"
            );
        }
    }

    #[test]
    fn downsampler_holds_an_odd_sample_and_writes_what_fits() {
        let v = noise(101, 23);
        let whole = down_chunks(&v, &[v.len()]);
        let mut down = Downsampler::new();
        let mut out = [0i16; 60];
        assert_eq!(down.process(&v[..1], &mut out), 0);
        assert_eq!(down.process(&v[1..2], &mut out), 1);
        assert_eq!(out[0], whole[0]);
        assert_eq!(down.process(&v[2..21], &mut out[..3]), 3);
        assert_eq!(out[..3], whole[1..4]);
        // v[20] is held; the rest continues in step with the whole-call output.
        assert_eq!(down.process(&v[21..], &mut out), 40);
        assert_eq!(out[..40], whole[10..]);
        down.reset();
        assert_eq!(format!("{down:?}"), format!("{:?}", Downsampler::default()));
    }

    #[test]
    fn round_trip_returns_the_tone() {
        // down(up(x)) of a 1 kHz tone is x, DELAY_16K / 2 + DELAY_8K = 63 samples late.
        // Measured: 0 LSB at amplitude 20 000 (half of each output is the input itself, exact;
        // the midpoints' rounding, halved, stays under ½ LSB); allowed: 1 LSB.
        let amplitude = 20_000.0;
        let x = tone(1000.0, 8000.0, amplitude, 50 * SAMPLES_PER_FRAME);
        let mut up = Upsampler::new();
        let mut down = Downsampler::new();
        let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        let mut narrow = [0i16; SAMPLES_PER_FRAME];
        let mut r = Vec::new();
        for frame in x.chunks(SAMPLES_PER_FRAME) {
            let n = up.process(frame, &mut wide);
            let m = down.process(&wide[..n], &mut narrow);
            assert_eq!(m, frame.len());
            r.extend_from_slice(&narrow[..m]);
        }
        let delay = Upsampler::DELAY_16K / 2 + Downsampler::DELAY_8K;
        assert_eq!(delay, 63);
        let skip = delay + 2 * HALF_TAPS;
        let err = max_err(
            r[skip..].iter().map(|&s| f64::from(s)),
            x.iter().map(|&s| f64::from(s)).skip(skip - delay),
        );
        eprintln!("round trip 1 kHz tone: max error {err} LSB of {amplitude}");
        assert!(err <= 1.0, "max error {err} LSB");
    }

    #[test]
    fn flushed_round_trip_returns_the_last_samples_too() {
        // A 1 kHz tone faded in and out over a frame each (its ends stay in band), up and
        // flushed, then down and flushed, comes back whole, 63 samples late: its last samples
        // are not left in either filter. Measured: 0 LSB; allowed: 1.
        let len = 20 * SAMPLES_PER_FRAME;
        let fade = SAMPLES_PER_FRAME;
        let mut x = tone(1000.0, 8000.0, 20_000.0, len);
        for i in 0..fade {
            let g = 0.5 - 0.5 * (PI * i as f64 / fade as f64).cos();
            x[i] = round_sat(f64::from(x[i]) * g);
            x[len - 1 - i] = round_sat(f64::from(x[len - 1 - i]) * g);
        }
        let mut up = Upsampler::new();
        let mut wide = vec![0i16; 2 * len + Upsampler::DELAY_16K];
        let mut n = up.process(&x, &mut wide);
        n += up.flush(&mut wide[n..]);
        assert_eq!(n, 2 * len + Upsampler::DELAY_16K);
        let mut down = Downsampler::new();
        let mut r = vec![0i16; len + 64];
        let mut m = down.process(&wide, &mut r);
        m += down.flush(&mut r[m..]);
        let delay = Upsampler::DELAY_16K / 2 + Downsampler::DELAY_8K;
        assert_eq!(m, len + delay);
        assert_eq!(format!("{down:?}"), format!("{:?}", Downsampler::new()));
        let err = max_err(
            r[delay..m].iter().map(|&s| f64::from(s)),
            x.iter().map(|&s| f64::from(s)),
        );
        eprintln!("flushed round trip: max error {err} LSB");
        assert!(err <= 1.0, "max error {err} LSB");
        // An odd input sample left over is flushed with its own output.
        let mut down = Downsampler::new();
        assert_eq!(down.process(&[1000; 3], &mut [0; 4]), 1);
        assert_eq!(down.flush(&mut [0; 64]), Downsampler::DELAY_8K + 1);
        assert_eq!(
            down.flush(&mut [0; 64]),
            Downsampler::DELAY_8K,
            "as new after a flush"
        );
    }

    #[test]
    fn full_scale_square_waves_saturate() {
        // Square waves between the rails overshoot (Gibbs) past them: the outputs must clamp,
        // matching the f64 definitions clamped, never wrap.
        for period in [2usize, 3, 4, 8, 33, 160] {
            let x: Vec<i16> = (0..1600)
                .map(|n| {
                    if n % period < period / 2 {
                        i16::MAX
                    } else {
                        i16::MIN
                    }
                })
                .collect();
            let y = up_frames(&x, SAMPLES_PER_FRAME, true);
            let want: Vec<i16> = one_shot_up(&x)
                .iter()
                .map(|&v| round_sat(f64::from(v)))
                .collect();
            for (m, (&g, &w)) in y[Upsampler::DELAY_16K..].iter().zip(&want).enumerate() {
                assert!(
                    (i32::from(g) - i32::from(w)).abs() <= 1,
                    "period {period}, {m}"
                );
            }
            let z = down_chunks(&x, &[WIDEBAND_SAMPLES_PER_FRAME]);
            for (j, (&g, w)) in z.iter().zip(direct_down(&x)).enumerate() {
                let w = round_sat(w);
                assert!(
                    (i32::from(g) - i32::from(w)).abs() <= 1,
                    "period {period}, {j}"
                );
            }
            let r = down_chunks(&y, &[WIDEBAND_SAMPLES_PER_FRAME]);
            assert_eq!(r.len(), x.len() + HALF_TAPS);
            if period >= 8 {
                // The overshoot is there, and clamped.
                assert!(
                    y.contains(&i16::MAX) && y.contains(&i16::MIN),
                    "period {period}"
                );
                assert!(
                    z.contains(&i16::MAX) && z.contains(&i16::MIN),
                    "period {period}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn any_input_any_chunking(
            x in proptest::collection::vec(any::<i16>(), 0..700),
            sizes in proptest::collection::vec(1usize..200, 1..8),
            short in 0usize..400,
        ) {
            // Upsampler: chunked == one call == the one-shot definition (±1 LSB).
            let mut up = Upsampler::new();
            let mut y = Vec::new();
            let mut buf = [0i16; 400];
            let mut rest = &x[..];
            for &size in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (chunk, tail) = rest.split_at(size.min(rest.len()));
                rest = tail;
                let n = up.process(chunk, &mut buf);
                prop_assert_eq!(n, 2 * chunk.len());
                y.extend_from_slice(&buf[..n]);
            }
            let n = up.flush(&mut buf);
            y.extend_from_slice(&buf[..n]);
            prop_assert_eq!(&y, &up_frames(&x, x.len(), true));
            let want = one_shot_up(&x);
            for (&g, &w) in y[Upsampler::DELAY_16K..].iter().zip(&want) {
                prop_assert!((i32::from(g) - i32::from(round_sat(f64::from(w)))).abs() <= 1);
            }

            // Downsampler: chunked == one call == its definition (±1 LSB).
            let z = down_chunks(&x, &sizes);
            prop_assert_eq!(&z, &down_chunks(&x, &[x.len().max(1)]));
            for (&g, w) in z.iter().zip(direct_down(&x)) {
                prop_assert!((i32::from(g) - i32::from(round_sat(w))).abs() <= 1);
            }

            // Too short an output: what fits, no panic.
            let mut small = vec![0i16; short];
            prop_assert_eq!(Upsampler::new().process(&x, &mut small), short.min(2 * x.len()));
            prop_assert_eq!(Downsampler::new().process(&x, &mut small), short.min(x.len() / 2));
        }
    }
}
