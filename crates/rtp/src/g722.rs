//! G.722 at 64 kbit/s (ITU-T G.722 mode 1): 16 kHz audio, one byte per pair of samples.
//!
//! # The algorithm
//!
//! A quadrature mirror filter (24 taps) splits each pair of 16 kHz input samples into one 8 kHz
//! sample of the lower band (0–4 kHz) and one of the upper band (4–8 kHz). Each band is coded by
//! backward-adaptive ADPCM: a pole-zero predictor (two poles, six zeros, sign-sign adapted) guesses
//! the next sub-band sample, and the prediction error is quantized on a scale that follows the
//! signal's level. The lower band gets 6 bits (of which the predictor only ever sees the 4 most
//! significant, which is what makes the code embedded), the upper band 2 bits; together one byte,
//! `high << 6 | low`. Decoding runs the same predictors on the codes and the mirror QMF puts the
//! bands back together; the two filters delay the audio by 22 samples (1.375 ms).
//!
//! The arithmetic is the integer arithmetic of the ITU reference as Steve Underwood's spandsp
//! `g722.c` has it (public domain, after a CMU codec of unrestricted use), written here in its own
//! structure: one `Band` type carries a sub-band's scale factor and predictor and is shared by the
//! encoder and the decoder. `tests/g722_spandsp.rs` checks the encoder bit for bit against
//! Debian's libspandsp2 (0.0.6), and the decoder too except where that version lets a decoded
//! sample wrap around past full scale: this decoder saturates (as later spandsp releases do).
//!
//! # Why it is written by hand
//!
//! G.722's coder carries state from byte to byte, and the receiving phone's decoder reconstructs
//! that state from the bytes alone. Between utterances the real-time sender keeps the stream going
//! with [`SILENCE_BYTE`], so by the time a reply starts the caller's decoder has settled into
//! the state a run of that byte leaves. A reply encoded from the ITU reset state starts out of step
//! with it, and the caller hears the first 100–200 ms of every reply garbled (measured on the gateway: an SNR of
//! −7 dB over the first 100 ms, 25 dB over the next 100 ms, agreement only after about 400 ms). The
//! encoder must therefore be put into the state the far decoder is in, which means reaching into
//! the band state; the one crate on offer (`ezk-g722`) keeps that state private, allocates a `Vec`
//! per frame and comes with a whole media framework. The codec itself is small: this module
//! allocates nothing, has no `unsafe` and cannot panic on any input (every intermediate value stays
//! far inside `i32`; the bounds are noted where they matter).
//!
//! # Silence and the far decoder's state
//!
//! A long run of [`SILENCE_BYTE`] drives both scale factors to their minimum, where its quantized
//! difference is exactly 0 in both bands; the decoder's state then stops changing after at most
//! about 1450 bytes (≈ 90 ms). From the reset state that fixed point is one known state,
//! [`Encoder::after_silence`], and it decodes to digital silence.
//!
//! From any other state it is not: with a zero difference the zero-predictor coefficients only
//! leak, and the reference's rounding towards −∞ leaves any coefficient in −255..=0 where it is;
//! likewise the pole section holds a small negative offset in place. So after a reply and a fill,
//! the caller's decoder keeps a residue of that reply (a DC offset of up to a few tens, inaudible),
//! and a reply encoded from [`Encoder::after_silence`] then agrees with it only approximately: in
//! the tests, 29 dB SNR over the first 100 ms and bit-exact from 250 ms on; over thirty
//! speech-like earlier replies, 25 dB and 325 ms at worst (the reset state, for comparison: −0.1 dB
//! and 500 ms). No constant fill byte avoids this: of all 256, the only ones whose run forgets the
//! past drive the decoder to full scale. The encoder that produced
//! the previous reply knows the residue exactly:
//! [`Encoder::settle_into_silence`] takes it to the state the caller's decoder reaches through the
//! fill, and the next reply is then in step from its first byte.

use std::sync::OnceLock;

/// The byte the sender fills silence with on a G.722 stream.
///
/// `0xFD` is the smallest positive step in both bands (low code 61, high code 3): a run of it
/// drives both scale factors down to their minimum, where its quantized difference is exactly 0,
/// so the decoder's output dies away instead of being pushed anywhere. From the reset state it
/// decodes to all zeros. After speech, all a run plays past its first 100 ms is the decoder's
/// leftover DC offset: its loudest sample is 44 after the three speech-like states of the test
/// `silence_byte_is_the_quietest_fill`, where no byte does better (`0xFC` ties; `0xFF`: 46), and
/// at most 52 over thirty such states (`0xFF`: 54).
pub const SILENCE_BYTE: u8 = 0xFD;

/// The QMF's 24 taps are symmetric; these are the first 12, in units of 2⁻¹³.
const QMF: [i32; 12] = [3, -11, 12, 32, -210, 951, 3876, -805, 362, -156, 53, -11];

/// Lower band: decision levels of the 6-bit quantizer (QUANTL, `Q6`); 1..=29 are used.
const Q6: [i32; 30] = [
    0, 35, 72, 110, 150, 190, 233, 276, 323, 370, 422, 473, 530, 587, 650, 714, 786, 858, 940,
    1023, 1121, 1219, 1339, 1458, 1612, 1765, 1980, 2195, 2557, 2919,
];
/// Lower band: the 6-bit code of quantizer interval 1..=30 for a negative difference (`ILN`).
const CODE_NEGATIVE: [u8; 31] = [
    0, 63, 62, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11,
    10, 9, 8, 7, 6, 5, 4,
];
/// Lower band: the 6-bit code of quantizer interval 1..=30 for a positive difference (`ILP`).
const CODE_POSITIVE: [u8; 31] = [
    0, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39,
    38, 37, 36, 35, 34, 33, 32,
];
/// Lower band: inverse quantizer of the whole 6-bit code, the decoder's output (`QM6`).
const QM6: [i32; 64] = [
    -136, -136, -136, -136, -24808, -21904, -19008, -16704, -14984, -13512, -12280, -11192, -10232,
    -9360, -8576, -7856, -7192, -6576, -6000, -5456, -4944, -4464, -4008, -3576, -3168, -2776,
    -2400, -2032, -1688, -1360, -1040, -728, 24808, 21904, 19008, 16704, 14984, 13512, 12280,
    11192, 10232, 9360, 8576, 7856, 7192, 6576, 6000, 5456, 4944, 4464, 4008, 3576, 3168, 2776,
    2400, 2032, 1688, 1360, 1040, 728, 432, 136, -432, -136,
];
/// Lower band: inverse quantizer of the code's 4-bit core, what the predictor sees (`QM4`).
const QM4: [i32; 16] = [
    0, -20456, -12896, -8968, -6288, -4240, -2584, -1200, 20456, 12896, 8968, 6288, 4240, 2584,
    1200, 0,
];
/// Lower band: step of the log scale factor for each 4-bit core (`WL` through `RL42`).
const LOG_STEP_LOW: [i32; 16] = [
    -60, 3042, 1198, 538, 334, 172, 58, -30, 3042, 1198, 538, 334, 172, 58, -30, -60,
];
/// Upper band: inverse quantizer of the 2-bit code (`QM2`).
const QM2: [i32; 4] = [-7408, -1616, 7408, 1616];
/// Upper band: step of the log scale factor for each 2-bit code (`WH` through `RH2`).
const LOG_STEP_HIGH: [i32; 4] = [798, -214, 798, -214];
/// Mantissas of the log-to-linear scale factor conversion (`ILB`).
const ANTILOG: [i32; 32] = [
    2048, 2093, 2139, 2186, 2233, 2282, 2332, 2383, 2435, 2489, 2543, 2599, 2656, 2714, 2774, 2834,
    2896, 2960, 3025, 3091, 3158, 3228, 3298, 3371, 3444, 3520, 3597, 3676, 3756, 3838, 3922, 4008,
];

/// Fill bytes [`Encoder::settle_into_silence`] runs at most: 1 s, against the ≈ 1450 the slowest
/// state needs to converge.
const MAX_SETTLE_BYTES: usize = 16_000;

/// The reference's 16-bit saturation.
#[inline]
fn sat16(x: i32) -> i32 {
    x.clamp(i32::from(i16::MIN), i32::from(i16::MAX))
}

/// One sub-band's adaptive state: scale factor (blocks 3L/3H) and predictor (block 4).
///
/// Bounds (which keep every product far below 2³¹): `nb` ≤ 22528, so `det` ≤ 16384 and
/// `|d|` ≤ 12404; everything else is saturated to 16 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Band {
    /// Log scale factor (`NBL`/`NBH`).
    nb: i32,
    /// Linear scale factor (`DETL`/`DETH`).
    det: i32,
    /// Signal estimate (`SL`/`SH`): the prediction of the next sub-band sample.
    s: i32,
    /// The zero section's share of the estimate (`SZL`/`SZH`).
    sz: i32,
    /// Pole coefficients a1, a2.
    a: [i32; 2],
    /// Reconstructed signal r(n−1), r(n−2).
    r: [i32; 2],
    /// Partially reconstructed signal p(n−1), p(n−2).
    p: [i32; 2],
    /// Zero coefficients b1..b6.
    b: [i32; 6],
    /// Quantized differences d(n−1)..d(n−6).
    d: [i32; 6],
}

impl Band {
    /// The ITU reset state with the band's smallest linear scale factor.
    const fn reset(det: i32) -> Band {
        Band {
            nb: 0,
            det,
            s: 0,
            sz: 0,
            a: [0; 2],
            r: [0; 2],
            p: [0; 2],
            b: [0; 6],
            d: [0; 6],
        }
    }

    /// Adapts the log scale factor by `step` (limited to `0..=max`) and converts it to the
    /// linear one; `exponent` is 8 in the lower band and 10 in the upper.
    #[inline]
    fn scale(&mut self, step: i32, max: i32, exponent: i32) {
        self.nb = (((self.nb * 127) >> 7) + step).clamp(0, max);
        let mantissa = ANTILOG[((self.nb >> 6) & 31) as usize];
        // nb ≤ 22528, so the shift is at least −1 and det at most 4096 << 2.
        let shift = exponent - (self.nb >> 11);
        let linear = if shift < 0 {
            mantissa << -shift
        } else {
            mantissa >> shift
        };
        self.det = linear << 2;
    }

    /// Lower band: takes the 4-bit core of a 6-bit code.
    #[inline]
    fn adapt_low(&mut self, core: u8) {
        let core = usize::from(core & 0x0F);
        let d = (self.det * QM4[core]) >> 15;
        self.scale(LOG_STEP_LOW[core], 18432, 8);
        self.predict(d);
    }

    /// Upper band: takes a 2-bit code.
    #[inline]
    fn adapt_high(&mut self, code: u8) {
        let code = usize::from(code & 0x03);
        let d = (self.det * QM2[code]) >> 15;
        self.scale(LOG_STEP_HIGH[code], 22528, 10);
        self.predict(d);
    }

    /// Block 4: from the quantized difference `d`, reconstructs the sample, adapts the pole and
    /// zero coefficients and predicts the next sample.
    fn predict(&mut self, d: i32) {
        let r0 = sat16(self.s + d);
        let p0 = sat16(self.sz + d);

        // Poles (UPPOL2, UPPOL1): sign-sign adaptation on the partial reconstruction, a2 first,
        // then a1 within the stability triangle |a1| ≤ 15360 − a2.
        let same1 = p0 >> 15 == self.p[0] >> 15;
        let same2 = p0 >> 15 == self.p[1] >> 15;
        let wd = sat16(self.a[0] << 2);
        let wd = (if same1 { -wd } else { wd }).min(32767);
        let a2 = ((wd >> 7) + if same2 { 128 } else { -128 } + ((self.a[1] * 32512) >> 15))
            .clamp(-12288, 12288);
        let limit = sat16(15360 - a2);
        let a1 = sat16(if same1 { 192 } else { -192 } + ((self.a[0] * 32640) >> 15))
            .clamp(-limit, limit);

        // Zeros (UPZERO): sign-sign adaptation on the quantized differences, with leakage.
        let step = if d == 0 { 0 } else { 128 };
        for (b, &past) in self.b.iter_mut().zip(&self.d) {
            let toward = if past >> 15 == d >> 15 { step } else { -step };
            *b = sat16(toward + ((*b * 32640) >> 15));
        }

        // Delays (DELAYA, DELAYL).
        self.d.copy_within(0..5, 1);
        self.d[0] = d;
        self.r = [r0, self.r[0]];
        self.p = [p0, self.p[0]];
        self.a = [a1, a2];

        // Predictors (FILTEP, FILTEZ, PREDIC).
        let poles = self
            .a
            .iter()
            .zip(&self.r)
            .map(|(&a, &r)| (a * sat16(r * 2)) >> 15)
            .sum::<i32>();
        self.sz = sat16(
            self.b
                .iter()
                .zip(&self.d)
                .map(|(&b, &d)| (b * sat16(d * 2)) >> 15)
                .sum::<i32>(),
        );
        self.s = sat16(sat16(poles) + self.sz);
    }
}

/// Both sub-bands' adaptive state: all that encoder and far decoder must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bands {
    low: Band,
    high: Band,
}

impl Bands {
    /// The ITU reset state.
    const RESET: Bands = Bands {
        low: Band::reset(32),
        high: Band::reset(8),
    };

    /// Quantizes one pair of sub-band samples to a code byte, and adapts to it.
    #[inline]
    fn encode(&mut self, xlow: i32, xhigh: i32) -> u8 {
        // Lower band (SUBTRA, QUANTL): the interval of |error| among the scaled levels.
        let el = sat16(xlow - self.low.s);
        let magnitude = if el >= 0 { el } else { -(el + 1) };
        let det = self.low.det;
        let interval = (1..Q6.len())
            .find(|&i| magnitude < (Q6[i] * det) >> 12)
            .unwrap_or(Q6.len());
        let low = if el < 0 {
            CODE_NEGATIVE[interval]
        } else {
            CODE_POSITIVE[interval]
        };
        self.low.adapt_low(low >> 2);

        // Upper band (SUBTRA, QUANTH): sign and one magnitude threshold.
        let eh = sat16(xhigh - self.high.s);
        let magnitude = if eh >= 0 { eh } else { -(eh + 1) };
        let outer = magnitude >= (564 * self.high.det) >> 12;
        let high = match (eh < 0, outer) {
            (true, true) => 0,
            (true, false) => 1,
            (false, true) => 2,
            (false, false) => 3,
        };
        self.high.adapt_high(high);

        (high << 6) | low
    }

    /// Reconstructs the pair of sub-band samples of one code byte, and adapts to it.
    #[inline]
    fn decode(&mut self, code: u8) -> (i32, i32) {
        let low = code & 0x3F;
        let rlow =
            (self.low.s + ((self.low.det * QM6[usize::from(low)]) >> 15)).clamp(-16384, 16383);
        self.low.adapt_low(low >> 2);

        let high = code >> 6;
        let rhigh =
            (self.high.s + ((self.high.det * QM2[usize::from(high)]) >> 15)).clamp(-16384, 16383);
        self.high.adapt_high(high);

        (rlow, rhigh)
    }

    /// Decodes [`SILENCE_BYTE`] until the state stops changing (or [`MAX_SETTLE_BYTES`]).
    fn settle(&mut self) {
        for _ in 0..MAX_SETTLE_BYTES {
            let before = *self;
            self.decode(SILENCE_BYTE);
            if *self == before {
                return;
            }
        }
    }
}

/// A G.722 encoder at 64 kbit/s: 16 kHz PCM in, one code byte per pair of samples out
/// (unpacked, as RTP carries it).
///
/// ```
/// use ontime_rtp::g722::{Decoder, Encoder};
/// use ontime_rtp::{FRAME_BYTES, WIDEBAND_SAMPLES_PER_FRAME};
///
/// let pcm: Vec<i16> = (0..WIDEBAND_SAMPLES_PER_FRAME)
///     .map(|n| (n as i16 % 64 - 32) * 100)
///     .collect();
/// let mut payload = [0u8; FRAME_BYTES];
/// assert_eq!(Encoder::after_silence().encode(&pcm, &mut payload), FRAME_BYTES);
/// let mut decoded = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
/// assert_eq!(Decoder::new().decode(&payload, &mut decoded), WIDEBAND_SAMPLES_PER_FRAME);
/// ```
#[derive(Clone, Debug)]
pub struct Encoder {
    /// The analysis QMF's input history, oldest first.
    x: [i32; 24],
    bands: Bands,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder in the ITU reset state (what a decoder starts in).
    pub const fn new() -> Encoder {
        Encoder {
            x: [0; 24],
            bands: Bands::RESET,
        }
    }

    /// An encoder in the state the far decoder reaches after a long run of [`SILENCE_BYTE`], the
    /// sender's fill between utterances, when it decoded nothing else before (see the
    /// [module documentation](self) for what an earlier reply leaves behind): the band states of
    /// a reset decoder that has decoded the silence byte until its state stopped changing, and an
    /// empty QMF history. Computed once per process.
    pub fn after_silence() -> Encoder {
        static AFTER_SILENCE: OnceLock<Bands> = OnceLock::new();
        let bands = *AFTER_SILENCE.get_or_init(|| {
            let mut bands = Bands::RESET;
            bands.settle();
            bands
        });
        Encoder { x: [0; 24], bands }
    }

    /// Moves this encoder to the state the far decoder reaches when a long run of
    /// [`SILENCE_BYTE`] follows the bytes this encoder has produced, and empties the QMF
    /// history: the state to encode the next utterance of the same stream from. Exact when the
    /// far decoder received every byte this encoder produced and then at least ≈ 90 ms of fill
    /// (up to 1450 bytes; this runs the fill until the state stops changing).
    pub fn settle_into_silence(&mut self) {
        self.bands.settle();
        self.x = [0; 24];
    }

    /// Encodes `pcm` (16 kHz) into `out`, one byte per pair of samples, and returns the number of
    /// bytes written: `min(pcm.len() / 2, out.len())`. An odd trailing sample is ignored.
    pub fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> usize {
        let mut written = 0;
        for (pair, byte) in pcm.chunks_exact(2).zip(out.iter_mut()) {
            // Analysis QMF: |Σ| ≤ 32768 · 6482 per half, far inside i32.
            self.x.copy_within(2.., 0);
            self.x[22] = i32::from(pair[0]);
            self.x[23] = i32::from(pair[1]);
            let (mut odd, mut even) = (0, 0);
            for ((x, &c), &c_reversed) in self.x.chunks_exact(2).zip(&QMF).zip(QMF.iter().rev()) {
                odd += x[0] * c;
                even += x[1] * c_reversed;
            }
            *byte = self.bands.encode((even + odd) >> 14, (even - odd) >> 14);
            written += 1;
        }
        written
    }
}

/// A G.722 decoder at 64 kbit/s: code bytes in, two 16 kHz samples per byte out.
#[derive(Clone, Debug)]
pub struct Decoder {
    /// The synthesis QMF's history of sub-band sums and differences, oldest first.
    x: [i32; 24],
    bands: Bands,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder in the ITU reset state.
    pub const fn new() -> Decoder {
        Decoder {
            x: [0; 24],
            bands: Bands::RESET,
        }
    }

    /// Decodes `payload` into `out`, two samples (16 kHz) per byte, and returns the number of
    /// samples written: `min(2 * payload.len(), out.len())` rounded down to even. Samples past
    /// full scale saturate.
    pub fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> usize {
        let mut written = 0;
        for (&code, pair) in payload.iter().zip(out.chunks_exact_mut(2)) {
            let (rlow, rhigh) = self.bands.decode(code);
            // Synthesis QMF: |rlow ± rhigh| ≤ 32768, |Σ| ≤ 32768 · 6482.
            self.x.copy_within(2.., 0);
            self.x[22] = rlow + rhigh;
            self.x[23] = rlow - rhigh;
            let (mut first, mut second) = (0, 0);
            for ((x, &c), &c_reversed) in self.x.chunks_exact(2).zip(&QMF).zip(QMF.iter().rev()) {
                second += x[0] * c;
                first += x[1] * c_reversed;
            }
            pair[0] = to_i16(first >> 11);
            pair[1] = to_i16(second >> 11);
            written += 2;
        }
        written
    }
}

/// Saturates to an `i16`.
#[inline]
fn to_i16(x: i32) -> i16 {
    // In range after the clamp.
    sat16(x) as i16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FRAME_BYTES, WIDEBAND_SAMPLES_PER_FRAME};
    use proptest::prelude::*;

    /// A fixed-seed xorshift generator.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn sample(&mut self) -> i64 {
            i64::from((self.next() >> 48) as u16 as i16)
        }
    }

    /// Speech-like audio in integer arithmetic (so the same on every platform): glottal pulses
    /// at a gliding pitch through two formant resonators (700 and 1800 Hz), 200 ms voiced in
    /// every 250 ms, hiss in between, under a syllable envelope.
    fn speech_like(seed: u64, len: usize) -> Vec<i16> {
        let mut noise = XorShift(seed | 1);
        let (mut f1, mut f2) = ([0i64; 2], [0i64; 2]);
        let mut next_pulse = 0;
        let period = 80 + (seed as usize % 7) * 10;
        (0..len)
            .map(|n| {
                let phase = n % 4000;
                let excitation = if phase < 3200 {
                    if n >= next_pulse {
                        next_pulse = n + period + (n / 320) % 40;
                        3000
                    } else {
                        0
                    }
                } else {
                    noise.sample() / 4
                };
                let y1 = excitation + ((30_592 * f1[0] - 15_416 * f1[1]) >> 14);
                f1 = [y1, f1[0]];
                let y2 = excitation + ((23_671 * f2[0] - 14_787 * f2[1]) >> 14);
                f2 = [y2, f2[0]];
                let envelope = if phase < 3200 {
                    1600 - (phase as i64 - 1600).abs()
                } else {
                    800
                };
                let v = (y1 + y2 / 2) * envelope / 6400;
                v.clamp(-32768, 32767) as i16
            })
            .collect()
    }

    fn encode_all(encoder: &mut Encoder, pcm: &[i16]) -> Vec<u8> {
        let mut out = vec![0u8; pcm.len() / 2];
        for (frame, bytes) in pcm
            .chunks(WIDEBAND_SAMPLES_PER_FRAME)
            .zip(out.chunks_mut(FRAME_BYTES))
        {
            assert_eq!(encoder.encode(frame, bytes), frame.len() / 2);
        }
        out
    }

    fn decode_all(decoder: &mut Decoder, bytes: &[u8]) -> Vec<i16> {
        let mut out = vec![0i16; 2 * bytes.len()];
        for (payload, pcm) in bytes
            .chunks(FRAME_BYTES)
            .zip(out.chunks_mut(WIDEBAND_SAMPLES_PER_FRAME))
        {
            assert_eq!(decoder.decode(payload, pcm), 2 * payload.len());
        }
        out
    }

    /// Decodes `bytes` of fill.
    fn fill(decoder: &mut Decoder, bytes: usize) -> Vec<i16> {
        decode_all(decoder, &vec![SILENCE_BYTE; bytes])
    }

    fn snr_db(reference: &[i16], test: &[i16]) -> f64 {
        assert_eq!(reference.len(), test.len());
        let (mut signal, mut noise) = (0.0, 0.0);
        for (&r, &t) in reference.iter().zip(test) {
            signal += f64::from(r).powi(2);
            noise += (f64::from(r) - f64::from(t)).powi(2);
        }
        10.0 * (signal / noise).log10()
    }

    /// The decoder an encoder's output would meet if the far end were in the encoder's state.
    fn in_step(encoder: &Encoder) -> Decoder {
        Decoder {
            x: [0; 24],
            bands: encoder.bands,
        }
    }

    fn last_difference(a: &[i16], b: &[i16]) -> Option<usize> {
        a.iter().zip(b).rposition(|(x, y)| x != y)
    }

    fn differing(a: &[i16], b: &[i16]) -> usize {
        a.iter().zip(b).filter(|(x, y)| x != y).count()
    }

    fn sine(freq: f64, amplitude: f64, len: usize) -> Vec<i16> {
        (0..len)
            .map(|n| {
                let t = n as f64 / 16_000.0;
                (amplitude * (2.0 * std::f64::consts::PI * freq * t).sin()).round() as i16
            })
            .collect()
    }

    /// The codec's delay, analysis and synthesis QMF together: 22 samples (1.375 ms).
    const DELAY: usize = 22;

    #[test]
    fn tones_come_back_with_their_stated_snr() {
        // (frequency, amplitude, measured SNR in dB, asserted bound): 1 s each from the reset
        // state, the first 100 ms (adaptation) left out, compared at the codec's delay.
        for (freq, amplitude, measured, bound) in [
            (300.0, 10_000.0, 62.3, 59.0),
            (1000.0, 10_000.0, 47.2, 44.0),
            (1000.0, 300.0, 36.2, 33.0),
            (3000.0, 10_000.0, 41.0, 38.0),
            (6000.0, 5000.0, 26.6, 23.0),
        ] {
            let x = sine(freq, amplitude, 16_000);
            let y = decode_all(&mut Decoder::new(), &encode_all(&mut Encoder::new(), &x));
            let snr = snr_db(&x[1600..16_000 - DELAY], &y[1600 + DELAY..]);
            assert!(
                snr > bound,
                "{freq} Hz at {amplitude}: SNR {snr:.2} dB, measured {measured} dB"
            );
        }
    }

    #[test]
    fn speech_like_audio_comes_back_at_the_codec_delay() {
        let x = speech_like(1, 32_000);
        let y = decode_all(&mut Decoder::new(), &encode_all(&mut Encoder::new(), &x));
        let at = |lag: usize| snr_db(&x[1600..32_000 - 64], &y[1600 + lag..32_000 - 64 + lag]);
        let best = (0..64).max_by(|&a, &b| at(a).total_cmp(&at(b)));
        assert_eq!(best, Some(DELAY));
        // Measured 29.1 dB.
        assert!(at(DELAY) > 26.0, "SNR {:.2} dB", at(DELAY));
    }

    #[test]
    fn fill_from_reset_decodes_to_digital_silence_and_ends_in_after_silence() {
        let mut decoder = Decoder::new();
        let out = fill(&mut decoder, 16_000);
        assert_eq!(out.iter().filter(|&&s| s != 0).count(), 0);
        assert_eq!(decoder.bands, Encoder::after_silence().bands);
        assert_eq!(decoder.x, [0; 24]);
    }

    #[test]
    fn after_silence_is_the_fixed_point_of_the_fill() {
        let settled = Encoder::after_silence().bands;
        let mut bands = settled;
        bands.decode(SILENCE_BYTE);
        assert_eq!(bands, settled);
        // From reset, the first 219 bytes of fill change the state, the 220th does not.
        assert_eq!(changing_bytes(Bands::RESET), Some(219));
        assert_ne!(settled, Bands::RESET);
        assert_eq!(Encoder::after_silence().x, [0; 24]);
    }

    /// How many bytes of fill change `bands` before one leaves it as it is (`None`: more than
    /// `MAX_SETTLE_BYTES`).
    fn changing_bytes(mut bands: Bands) -> Option<usize> {
        (0..MAX_SETTLE_BYTES).find(|_| {
            let before = bands;
            bands.decode(SILENCE_BYTE);
            bands == before
        })
    }

    #[test]
    fn the_fill_converges_within_100_ms_from_any_state() {
        let mut random = XorShift(7);
        let noise: Vec<u8> = (0..5000).map(|_| random.next() as u8).collect();
        let loud: Vec<u8> = (0..5000)
            .map(|_| random.next() as u8 & 0x3F | 0x20)
            .collect();
        let speech = [1, 2, 3].map(|seed| {
            encode_all(
                &mut Encoder::new(),
                &speech_like(seed, 20_000 + 999 * seed as usize),
            )
        });
        let steps = [&speech[0][..], &speech[1], &speech[2], &noise, &loud].map(|history| {
            let mut decoder = Decoder::new();
            decode_all(&mut decoder, history);
            changing_bytes(decoder.bands)
        });
        // At most 1448 bytes: 90.5 ms.
        assert_eq!(steps, [938, 1016, 948, 1087, 1448].map(Some));
    }

    #[test]
    fn silence_byte_is_the_quietest_fill() {
        // After three speech-like histories, the loudest sample of each byte's run from 100 to
        // 150 ms, when the decoder's state has stopped changing (after at most 1448 bytes, see
        // the_fill_converges_within_100_ms_from_any_state).
        let histories = [1, 2, 3].map(|seed| {
            let pcm = speech_like(seed, 20_000 + 1999 * seed as usize);
            let mut decoder = Decoder::new();
            decode_all(&mut decoder, &encode_all(&mut Encoder::new(), &pcm));
            decoder
        });
        let mut out = [0i16; 2 * 2400];
        let loudest: Vec<i32> = (0..=255u8)
            .map(|byte| {
                let mut loudest = 0;
                for history in &histories {
                    let mut decoder = history.clone();
                    decoder.decode(&[byte; 2400], &mut out);
                    let run = out[3200..].iter().map(|&s| i32::from(s).abs());
                    loudest = run.fold(loudest, i32::max);
                }
                loudest
            })
            .collect();
        let quietest = loudest.iter().copied().min();
        let winners: Vec<usize> = (0..256).filter(|&b| Some(loudest[b]) == quietest).collect();
        assert_eq!(quietest, Some(loudest[usize::from(SILENCE_BYTE)]));
        assert_eq!(winners, [0xFC, 0xFD]);
        // What is left is the decoders' stuck DC offset (see the module documentation).
        assert_eq!(loudest[usize::from(SILENCE_BYTE)], 44);
        assert_eq!(loudest[0xFF], 46);
    }

    #[test]
    fn a_reply_from_after_silence_is_in_step_with_a_decoder_that_heard_only_fill() {
        let reply = speech_like(4, 16_000);
        // The caller's decoder: reset, 1 s of fill, then the reply.
        let mut far = Decoder::new();
        fill(&mut far, 16_000);
        let mut encoder = Encoder::after_silence();
        let mut ideal = in_step(&encoder);
        let mut far_out = Vec::new();
        let mut ideal_out = Vec::new();
        for frame in reply.chunks(WIDEBAND_SAMPLES_PER_FRAME) {
            let bytes = encode_all(&mut encoder, frame);
            far_out.extend(decode_all(&mut far, &bytes));
            ideal_out.extend(decode_all(&mut ideal, &bytes));
            assert_eq!(far.bands, encoder.bands);
        }
        assert_eq!(differing(&far_out, &ideal_out), 0);

        // The contrast: the same reply from the reset state.
        let bytes = encode_all(&mut Encoder::new(), &reply);
        let mut far = Decoder::new();
        fill(&mut far, 16_000);
        let far_out = decode_all(&mut far, &bytes);
        let ideal_out = decode_all(&mut Decoder::new(), &bytes);
        // 1585 of the first 1600 samples (100 ms) differ, at an SNR of −0.1 dB (16.5 dB over
        // the next 100 ms); the last difference is at 502 ms.
        assert_eq!(differing(&far_out[..1600], &ideal_out[..1600]), 1585);
        assert!(snr_db(&ideal_out[..1600], &far_out[..1600]) < 0.0);
        assert!(snr_db(&ideal_out[1600..3200], &far_out[1600..3200]) < 17.0);
        assert_eq!(last_difference(&far_out, &ideal_out), Some(8037));
    }

    #[test]
    fn an_earlier_reply_leaves_a_residue_that_settle_into_silence_follows() {
        let earlier = speech_like(5, 24_002);
        let reply = speech_like(6, 16_000);
        let mut encoder = Encoder::after_silence();
        let mut far = Decoder::new();
        fill(&mut far, 16_000);
        decode_all(&mut far, &encode_all(&mut encoder, &earlier));
        // The fill plays a DC offset of −26, and the lower band's state is stuck away from
        // after_silence(): its estimate at −13 and two zero coefficients at −255.
        let tail = fill(&mut far, 16_000);
        assert_eq!(tail[tail.len() - 2..], [-26, -26]);
        assert_eq!(
            (far.bands.low.s, far.bands.low.b),
            (-13, [0, 0, 0, 0, -255, -255])
        );
        assert_eq!(far.bands.high, Encoder::after_silence().bands.high);

        // From after_silence(): approximately in step only.
        let bytes = encode_all(&mut Encoder::after_silence(), &reply);
        let far_out = decode_all(&mut far.clone(), &bytes);
        let ideal_out = decode_all(&mut in_step(&Encoder::after_silence()), &bytes);
        // 2911 samples differ, the last at 250 ms; SNR 29.3 dB over the first 100 ms and
        // 38.3 dB over the next.
        assert_eq!(differing(&far_out, &ideal_out), 2911);
        assert_eq!(last_difference(&far_out, &ideal_out), Some(3999));
        assert!(snr_db(&ideal_out[..1600], &far_out[..1600]) < 30.0);

        // From the encoder of the earlier reply, settled: in step from the first byte.
        encoder.settle_into_silence();
        assert_eq!(encoder.bands, far.bands);
        let mut ideal = in_step(&encoder);
        let mut far_out = Vec::new();
        let mut ideal_out = Vec::new();
        for frame in reply.chunks(WIDEBAND_SAMPLES_PER_FRAME) {
            let bytes = encode_all(&mut encoder, frame);
            far_out.extend(decode_all(&mut far, &bytes));
            ideal_out.extend(decode_all(&mut ideal, &bytes));
            assert_eq!(far.bands, encoder.bands);
        }
        // The band states agree throughout; the output too, once the DC offset the fill left in
        // the far decoder's synthesis QMF has passed through its 24 taps (16 of the first 24
        // samples differ by it).
        assert_eq!(differing(&far_out[..24], &ideal_out[..24]), 16);
        assert_eq!(differing(&far_out[24..], &ideal_out[24..]), 0);
    }

    /// Every state variable within the bounds the arithmetic relies on.
    fn assert_bounded(bands: &Bands) {
        for (band, max_nb, min_det) in [(&bands.low, 18432, 32), (&bands.high, 22528, 8)] {
            assert!((0..=max_nb).contains(&band.nb), "{band:?}");
            assert!((min_det..=16384).contains(&band.det), "{band:?}");
            assert!(band.a[1].abs() <= 12288, "{band:?}");
            assert!(band.a[0].abs() <= 15360 - band.a[1], "{band:?}");
            assert!(band.d.iter().all(|d| d.abs() <= 12404), "{band:?}");
        }
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_is_counted_and_bounded(
            payload in proptest::collection::vec(any::<u8>(), 0..3000),
            room in 0usize..7000,
        ) {
            let mut decoder = Decoder::new();
            let mut out = vec![0i16; room];
            let n = decoder.decode(&payload, &mut out);
            prop_assert_eq!(n, (2 * payload.len()).min(room / 2 * 2));
            assert_bounded(&decoder.bands);
        }

        #[test]
        fn encoding_any_pcm_is_counted_and_the_decoder_follows(
            pcm in proptest::collection::vec(any::<i16>(), 0..3000),
            room in 0usize..2000,
        ) {
            let mut encoder = Encoder::new();
            let mut out = vec![0u8; room];
            let n = encoder.encode(&pcm, &mut out);
            prop_assert_eq!(n, (pcm.len() / 2).min(room));
            assert_bounded(&encoder.bands);
            let mut decoder = Decoder::new();
            let mut decoded = vec![0i16; 2 * n];
            prop_assert_eq!(decoder.decode(&out[..n], &mut decoded), 2 * n);
            prop_assert_eq!(decoder.bands, encoder.bands);
        }

        #[test]
        fn chunking_changes_nothing(
            pcm in proptest::collection::vec(any::<i16>(), 0..2000),
            sizes in proptest::collection::vec(1usize..300, 1..10),
        ) {
            let whole = encode_all(&mut Encoder::new(), &pcm[..pcm.len() / 2 * 2]);
            let mut encoder = Encoder::new();
            let mut chunked = Vec::new();
            let mut rest = &pcm[..pcm.len() / 2 * 2];
            for size in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (chunk, tail) = rest.split_at((2 * size).min(rest.len()));
                let mut out = vec![0u8; chunk.len() / 2];
                prop_assert_eq!(encoder.encode(chunk, &mut out), chunk.len() / 2);
                chunked.extend(out);
                rest = tail;
            }
            prop_assert_eq!(&chunked, &whole);
            let decoded = decode_all(&mut Decoder::new(), &whole);
            let mut decoder = Decoder::new();
            let mut pieces = Vec::new();
            let mut rest = &whole[..];
            for size in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (chunk, tail) = rest.split_at((*size).min(rest.len()));
                let mut out = vec![0i16; 2 * chunk.len()];
                prop_assert_eq!(decoder.decode(chunk, &mut out), 2 * chunk.len());
                pieces.extend(out);
                rest = tail;
            }
            prop_assert_eq!(pieces, decoded);
        }
    }

    #[test]
    fn lengths_are_counted_as_documented() {
        let mut encoder = Encoder::new();
        let mut out = [0u8; 4];
        assert_eq!(encoder.encode(&[1, 2, 3], &mut out), 1);
        assert_eq!(encoder.encode(&[1; 20], &mut out), 4);
        assert_eq!(encoder.encode(&[], &mut out), 0);
        let mut decoder = Decoder::default();
        let mut pcm = [0i16; 7];
        assert_eq!(decoder.decode(&[SILENCE_BYTE; 10], &mut pcm), 6);
        assert_eq!(decoder.decode(&[SILENCE_BYTE; 2], &mut pcm), 4);
        assert_eq!(decoder.decode(&[SILENCE_BYTE; 2], &mut pcm[..1]), 0);
        assert_eq!(Encoder::default().bands, Encoder::new().bands);
    }
}
