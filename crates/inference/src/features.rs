//! Whisper log-mel features for Smart Turn v3, in Rust.
//!
//! Numerically the pipeline of pipecat's `LocalSmartTurnAnalyzerV3` (transformers'
//! `WhisperFeatureExtractor(chunk_length=8)`, numpy path): 16 kHz f32 audio; keep the last 8 s or
//! left-pad with zeros; normalise `(x − mean) / sqrt(var + 1e-7)`; reflect-pad 200 samples each
//! side; periodic Hann window of 400; 400-point real FFT every 160 samples; power |X|²; 80 mel
//! filters (Slaney scale, Slaney area normalisation, 0–8000 Hz, on the bin frequencies
//! `linspace(0, 8000, 201)`); `log10(max(1e-10, ·))`; drop the last of the 801 frames; clamp
//! below at max − 8; `(x + 4) / 4`. Output is [80, 800], mel-major, as the model's
//! `input_features` [1, 80, 800]. Like transformers, the FFT and mel sums run in f64.

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

/// Smart Turn's sample rate.
pub const TURN_SAMPLE_RATE_HZ: u32 = 16_000;
/// Samples the model sees: 8 s at 16 kHz.
pub const TURN_SAMPLES: usize = 8 * TURN_SAMPLE_RATE_HZ as usize;
/// Mel bands.
pub const N_MELS: usize = 80;
/// Frames the model takes.
pub const N_FRAMES: usize = 800;
/// FFT size (25 ms).
pub const N_FFT: usize = 400;
/// Hop (10 ms).
pub const HOP: usize = 160;
const N_BINS: usize = N_FFT / 2 + 1;

/// One mel filter: weights over a contiguous range of FFT bins.
#[derive(Debug, Clone)]
struct MelFilter {
    first_bin: usize,
    weights: Vec<f64>,
}

/// Precomputed window, mel filters and FFT plan; reusable buffers.
pub struct MelFrontend {
    window: Vec<f64>,
    filters: Vec<MelFilter>,
    fft: Arc<dyn RealToComplex<f64>>,
    frame: Vec<f64>,
    spectrum: Vec<Complex<f64>>,
    scratch: Vec<Complex<f64>>,
    padded: Vec<f64>,
    power: Vec<f64>,
    logs: Vec<f64>,
    window_f32: Vec<f32>,
    deviations: Vec<f32>,
}

impl std::fmt::Debug for MelFrontend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MelFrontend").finish_non_exhaustive()
    }
}

impl Default for MelFrontend {
    fn default() -> Self {
        Self::new()
    }
}

fn hz_to_mel_slaney(hz: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if hz >= min_log_hz {
        min_log_mel + (hz / min_log_hz).ln() / logstep
    } else {
        hz / f_sp
    }
}

fn mel_to_hz_slaney(mel: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if mel >= min_log_mel {
        min_log_hz * (logstep * (mel - min_log_mel)).exp()
    } else {
        mel * f_sp
    }
}

fn linspace(a: f64, b: f64, n: usize) -> impl Iterator<Item = f64> {
    let step = (b - a) / (n - 1) as f64;
    (0..n).map(move |i| if i == n - 1 { b } else { a + step * i as f64 })
}

/// The 80 × 201 Slaney mel filter bank (dense, mel-major) as transformers' `mel_filter_bank`.
pub fn mel_filter_bank() -> Vec<[f64; N_BINS]> {
    let max_hz = f64::from(TURN_SAMPLE_RATE_HZ / 2);
    let fft_freqs: Vec<f64> = linspace(0.0, max_hz, N_BINS).collect();
    let filter_freqs: Vec<f64> =
        linspace(hz_to_mel_slaney(0.0), hz_to_mel_slaney(max_hz), N_MELS + 2)
            .map(mel_to_hz_slaney)
            .collect();
    let mut bank = vec![[0.0f64; N_BINS]; N_MELS];
    for (m, row) in bank.iter_mut().enumerate() {
        let (lo, mid, hi) = (filter_freqs[m], filter_freqs[m + 1], filter_freqs[m + 2]);
        let enorm = 2.0 / (hi - lo);
        for (k, w) in row.iter_mut().enumerate() {
            let f = fft_freqs[k];
            let down = (f - lo) / (mid - lo);
            let up = (hi - f) / (hi - mid);
            *w = down.min(up).max(0.0) * enorm;
        }
    }
    bank
}

/// numpy's float32 `add.reduce` of a contiguous array: pairwise summation with 8 accumulators in
/// blocks of at most 128 (numpy `pairwise_sum`), in f32. Written out so Rust's mean and variance
/// round exactly like the reference's.
pub fn numpy_pairwise_sum(a: &[f32]) -> f32 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0f32;
        for &v in a {
            res += v;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f32; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - n % 8 {
            for (j, acc) in r.iter_mut().enumerate() {
                *acc += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &v in &a[i..] {
            res += v;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        numpy_pairwise_sum(&a[..n2]) + numpy_pairwise_sum(&a[n2..])
    }
}

impl MelFrontend {
    /// Builds the window, filters and FFT plan.
    pub fn new() -> Self {
        // Periodic Hann: 0.5 − 0.5 cos(2πn / N), n < N.
        let window = (0..N_FFT)
            .map(|n| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / N_FFT as f64).cos())
            .collect();
        let filters = mel_filter_bank()
            .into_iter()
            .map(|row| {
                let first = row.iter().position(|&w| w > 0.0).unwrap_or(0);
                let last = row.iter().rposition(|&w| w > 0.0).unwrap_or(0);
                MelFilter {
                    first_bin: first,
                    weights: row[first..=last.max(first)].to_vec(),
                }
            })
            .collect();
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(N_FFT);
        let spectrum = fft.make_output_vec();
        let scratch = fft.make_scratch_vec();
        Self {
            window,
            filters,
            fft,
            frame: vec![0.0; N_FFT],
            spectrum,
            scratch,
            padded: Vec::with_capacity(TURN_SAMPLES + N_FFT),
            power: vec![0.0; N_BINS],
            logs: vec![0.0; N_MELS * N_FRAMES],
            window_f32: Vec::with_capacity(TURN_SAMPLES),
            deviations: Vec::with_capacity(TURN_SAMPLES),
        }
    }

    /// Features of 16 kHz audio (any length: the last 8 s are used, shorter audio is left-padded
    /// with zeros) into `out` (resized to 80 × 800, mel-major).
    pub fn compute(&mut self, audio_16k: &[f32], out: &mut Vec<f32>) {
        // Keep the last 8 s, left-pad with zeros.
        let tail = &audio_16k[audio_16k.len().saturating_sub(TURN_SAMPLES)..];
        let pad = TURN_SAMPLES - tail.len();
        let x = &mut self.window_f32;
        x.clear();
        x.resize(pad, 0.0);
        x.extend_from_slice(tail);
        // Normalise over the padded 8 s, in f32 exactly as numpy does it (`x.mean()`, `x.var()`:
        // pairwise f32 sums, divided in f64, rounded to f32): the model is quantised, so the last
        // bit of its input matters.
        let n = TURN_SAMPLES as f64;
        let mean32 = (f64::from(numpy_pairwise_sum(x)) / n) as f32;
        let dev = &mut self.deviations;
        dev.clear();
        dev.extend(x.iter().map(|&v| {
            let d = v - mean32;
            d * d
        }));
        let var32 = (f64::from(numpy_pairwise_sum(dev)) / n) as f32;
        let denom32 = (var32 + 1e-7f32).sqrt();
        let norm = |v: f32| f64::from((v - mean32) / denom32);
        let half = N_FFT / 2;
        let padded = &mut self.padded;
        padded.clear();
        padded.resize(TURN_SAMPLES + 2 * half, 0.0);
        for (i, p) in padded[half..half + TURN_SAMPLES].iter_mut().enumerate() {
            *p = if i < pad {
                norm(0.0)
            } else {
                norm(tail[i - pad])
            };
        }
        // Reflect padding (numpy "reflect": the edge sample is not repeated).
        for i in 0..half {
            padded[half - 1 - i] = padded[half + 1 + i];
            padded[half + TURN_SAMPLES + i] = padded[half + TURN_SAMPLES - 2 - i];
        }
        let frames_total = 1 + (padded.len() - N_FFT) / HOP; // 801
        out.clear();
        out.resize(N_MELS * N_FRAMES, 0.0);
        let mut max_log = f64::NEG_INFINITY;
        let logs = &mut self.logs;
        logs.clear();
        logs.resize(N_MELS * N_FRAMES, 0.0);
        for t in 0..frames_total.min(N_FRAMES) {
            let start = t * HOP;
            for (f, (&x, &w)) in self
                .frame
                .iter_mut()
                .zip(padded[start..start + N_FFT].iter().zip(&self.window))
            {
                *f = x * w;
            }
            // ok: buffers are sized by the plan itself.
            self.fft
                .process_with_scratch(&mut self.frame, &mut self.spectrum, &mut self.scratch)
                .expect("FFT buffers sized by the plan");
            for (p, c) in self.power.iter_mut().zip(&self.spectrum) {
                *p = c.norm_sqr();
            }
            for (m, filter) in self.filters.iter().enumerate() {
                let bins = &self.power[filter.first_bin..filter.first_bin + filter.weights.len()];
                let e: f64 = bins.iter().zip(&filter.weights).map(|(p, w)| p * w).sum();
                let l = e.max(1e-10).log10();
                logs[m * N_FRAMES + t] = l;
                max_log = max_log.max(l);
            }
        }
        // The reference drops the 801st frame before clamping, so its max excludes it: same here.
        let floor = max_log - 8.0;
        for (o, &l) in out.iter_mut().zip(logs.iter()) {
            *o = ((l.max(floor) + 4.0) / 4.0) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slaney_scale_round_trips() {
        for hz in [0.0, 500.0, 999.0, 1000.0, 4000.0, 8000.0] {
            assert!((mel_to_hz_slaney(hz_to_mel_slaney(hz)) - hz).abs() < 1e-9);
        }
        assert!((hz_to_mel_slaney(1000.0) - 15.0).abs() < 1e-12);
    }

    #[test]
    fn filters_cover_band_with_unit_area_in_hz() {
        // Slaney normalisation: each triangle's area (in Hz × weight) is 1.
        let bank = mel_filter_bank();
        let df = 8000.0 / 200.0;
        for (m, row) in bank.iter().enumerate().skip(10) {
            let area: f64 = row.iter().sum::<f64>() * df;
            assert!((area - 1.0).abs() < 0.1, "filter {m} area {area}");
        }
    }

    #[test]
    fn silence_gives_flat_features() {
        let mut fe = MelFrontend::new();
        let mut out = Vec::new();
        fe.compute(&[], &mut out);
        assert_eq!(out.len(), N_MELS * N_FRAMES);
        // All log10(1e-10) = -10 → (−10 + 4) / 4 = −1.5.
        assert!(out.iter().all(|&x| (x + 1.5).abs() < 1e-6));
    }

    #[test]
    fn tone_peaks_in_its_band() {
        let mut fe = MelFrontend::new();
        let audio: Vec<f32> = (0..TURN_SAMPLES)
            .map(|n| (2.0 * std::f32::consts::PI * 440.0 * n as f32 / 16000.0).sin() * 0.3)
            .collect();
        let mut out = Vec::new();
        fe.compute(&audio, &mut out);
        let frame = 400;
        let col: Vec<f32> = (0..N_MELS).map(|m| out[m * N_FRAMES + frame]).collect();
        let peak = col
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .unwrap_or(0);
        // Band centres are 36.8 Hz apart below 1 kHz (82 points over 0–45.25 Slaney mel), the
        // centre of band m at 36.8 (m + 1) Hz: 440 Hz peaks in band 11.
        assert!((10..=12).contains(&peak), "peak band {peak}");
    }
}
