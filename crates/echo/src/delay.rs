//! The echo path's bulk delay, found by correlating the RMS envelopes of the reference (what
//! was played to the caller) and the caller's audio over every lag up to the longest delay.
//!
//! Envelopes in 2 ms blocks make the search cheap (400 lags for 800 ms, a few thousand
//! multiply-adds a frame) where a full-rate cross-correlation would cost tens of millions a
//! second per call; the adaptive filter then finds the path's fine structure in its window
//! around the lag found here. Envelopes also survive what a line does to the waveform (G.711
//! twice, the hybrid's filtering, a little clock skew).

/// Samples per envelope block (2 ms at 8 kHz).
pub(crate) const BLOCK: usize = 16;
/// Envelope means follow over about this many blocks (100 ms): the correlation sees the
/// syllable-rate modulation, not the level.
const MEAN_BLOCKS: f32 = 50.0;
/// The correlation forgets over about this many blocks (1.5 s).
const MEMORY_BLOCKS: f32 = 750.0;
/// Normalised correlation a lag needs to count as the echo's.
const LOCK_CORRELATION: f32 = 0.6;
/// Consecutive evaluations (one a frame) that must agree on a lag before it is taken.
const LOCK_AGREEMENT: u32 = 5;
/// Blocks of audible reply (200 ms, counted with the correlation's memory) a lag must have
/// been correlated over before it may be taken: over a handful of blocks the normalised
/// correlation of line noise with the reply's first syllable reaches 0.6 by chance, and a
/// lock on such a lag, made before the real echo has come back, let that echo through the
/// gate as the caller (a bot speaking at call start barged in on itself 0.4 s in).
const LOCK_EVIDENCE: f32 = 100.0;
/// A reference block louder than this (RMS, about −60 dBFS) is reply a lag can learn from.
const ACTIVE_RMS: f32 = 1e-3;

/// Running envelope-correlation search over `lags` block lags.
#[derive(Debug)]
pub(crate) struct DelayEstimator {
    /// Mean-removed RMS envelope of the reference, ring indexed by block number.
    ref_env: Vec<f32>,
    /// Whether each reference block of the ring was audible reply.
    ref_active: Vec<bool>,
    mask: usize,
    ref_mean: f32,
    mic_mean: f32,
    corr: Vec<f32>,
    ref_power: Vec<f32>,
    /// Blocks of audible reply each lag's correlation was summed over (with its memory).
    evidence: Vec<f32>,
    mic_power: f32,
    candidate: Option<(usize, u32)>,
    locked: Option<usize>,
    best_correlation: f32,
}

impl DelayEstimator {
    /// `ring_blocks` must be a power of two larger than `lags` plus a frame.
    pub(crate) fn new(lags: usize, ring_blocks: usize) -> DelayEstimator {
        debug_assert!(ring_blocks.is_power_of_two() && ring_blocks > lags + 10);
        DelayEstimator {
            ref_env: vec![0.0; ring_blocks],
            ref_active: vec![false; ring_blocks],
            mask: ring_blocks - 1,
            ref_mean: 0.0,
            mic_mean: 0.0,
            corr: vec![0.0; lags],
            ref_power: vec![0.0; lags],
            evidence: vec![0.0; lags],
            mic_power: 0.0,
            candidate: None,
            locked: None,
            best_correlation: 0.0,
        }
    }

    /// Forget everything (a new path: the stream restarted).
    pub(crate) fn reset(&mut self) {
        self.ref_env.fill(0.0);
        self.ref_active.fill(false);
        self.corr.fill(0.0);
        self.evidence.fill(0.0);
        self.ref_power.fill(0.0);
        self.mic_power = 0.0;
        self.ref_mean = 0.0;
        self.mic_mean = 0.0;
        self.candidate = None;
        self.locked = None;
        self.best_correlation = 0.0;
    }

    /// The reference's block `block` has energy `energy` (sum of squares).
    pub(crate) fn reference_block(&mut self, block: u64, energy: f32) {
        let rms = (energy / BLOCK as f32).sqrt();
        self.ref_mean += (rms - self.ref_mean) / MEAN_BLOCKS;
        self.ref_env[block as usize & self.mask] = rms - self.ref_mean;
        self.ref_active[block as usize & self.mask] = rms > ACTIVE_RMS;
    }

    /// The caller's block `block` has energy `energy`; `ref_upto` is the first reference block
    /// not yet known. Updates the correlation at every lag the reference covers.
    pub(crate) fn caller_block(&mut self, block: u64, energy: f32, ref_upto: u64) {
        let rms = (energy / BLOCK as f32).sqrt();
        self.mic_mean += (rms - self.mic_mean) / MEAN_BLOCKS;
        let m = rms - self.mic_mean;
        let keep = 1.0 - 1.0 / MEMORY_BLOCKS;
        self.mic_power = keep * self.mic_power + m * m;
        let oldest = ref_upto.saturating_sub(self.mask as u64);
        let lags = self
            .corr
            .iter_mut()
            .zip(&mut self.ref_power)
            .zip(&mut self.evidence);
        for (lag, ((c, p), n)) in lags.enumerate() {
            let (r, active) = match block.checked_sub(lag as u64) {
                Some(k) if k < ref_upto && k >= oldest => {
                    let i = k as usize & self.mask;
                    (self.ref_env[i], self.ref_active[i])
                }
                _ => (0.0, false),
            };
            *c = keep * *c + m * r;
            *p = keep * *p + r * r;
            *n = keep * *n + if active { 1.0 } else { 0.0 };
        }
    }

    /// Look at the correlation once a frame: returns the lag (in blocks) when a new one has
    /// just been locked.
    pub(crate) fn evaluate(&mut self) -> Option<usize> {
        let mut best = (0usize, 0.0f32);
        let floor = 1e-12;
        let lags = self.corr.iter().zip(&self.ref_power).zip(&self.evidence);
        for (lag, ((c, p), n)) in lags.enumerate() {
            if *n < LOCK_EVIDENCE {
                continue;
            }
            let ncc = c / (p * self.mic_power + floor).sqrt();
            if ncc > best.1 {
                best = (lag, ncc);
            }
        }
        self.best_correlation = best.1;
        if best.1 < LOCK_CORRELATION {
            self.candidate = None;
            return None;
        }
        let agreed = match self.candidate {
            Some((lag, n)) if lag.abs_diff(best.0) <= 1 => n + 1,
            _ => 1,
        };
        self.candidate = Some((best.0, agreed));
        if agreed < LOCK_AGREEMENT {
            return None;
        }
        match self.locked {
            Some(lag) if lag.abs_diff(best.0) <= 2 => None,
            _ => {
                self.locked = Some(best.0);
                Some(best.0)
            }
        }
    }

    /// The lag locked on, in blocks.
    pub(crate) fn locked(&self) -> Option<usize> {
        self.locked
    }

    /// The best normalised correlation at the last evaluation.
    pub(crate) fn best_correlation(&self) -> f32 {
        self.best_correlation
    }
}
