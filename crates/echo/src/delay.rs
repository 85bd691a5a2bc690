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
    /// Mean-removed RMS envelope of the reference, a ring by block number laid out backwards
    /// and written twice (block `k` at `R−1−(k mod R)` and `2R−1−(k mod R)`), so the blocks
    /// every lag of one caller block correlates with are one contiguous slice, lag 0 first:
    /// the per-lag update is three streams of multiply-adds the compiler vectorises. (Indexed
    /// per lag through the ring's mask, the loop cost 43 % of a core at 80 calls in the load
    /// harness.)
    ref_env: Vec<f32>,
    /// 1.0 where the reference block was audible reply, laid out as `ref_env`.
    ref_active: Vec<f32>,
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
            ref_env: vec![0.0; 2 * ring_blocks],
            ref_active: vec![0.0; 2 * ring_blocks],
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
        self.ref_active.fill(0.0);
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
        let i = self.reversed(block);
        let active = if rms > ACTIVE_RMS { 1.0 } else { 0.0 };
        for at in [i, i + self.mask + 1] {
            self.ref_env[at] = rms - self.ref_mean;
            self.ref_active[at] = active;
        }
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
        // Lag `l` pairs this block with reference block `block − l`, known if it is in
        // `oldest..ref_upto`: the lags `lo..hi`. The others only decay.
        let lags = self.corr.len() as u64;
        let lo = (block + 1).saturating_sub(ref_upto).min(lags) as usize;
        let hi = match block.checked_sub(oldest) {
            Some(d) => (d + 1).min(lags) as usize,
            None => 0,
        }
        .max(lo);
        let decay = |x: &mut [f32]| x.iter_mut().for_each(|v| *v *= keep);
        for acc in [&mut self.corr, &mut self.ref_power, &mut self.evidence] {
            decay(&mut acc[..lo]);
            decay(&mut acc[hi..]);
        }
        let start = self.mask - (block as usize & self.mask);
        let r = &self.ref_env[start + lo..start + hi];
        let a = &self.ref_active[start + lo..start + hi];
        let known = self.corr[lo..hi]
            .iter_mut()
            .zip(&mut self.ref_power[lo..hi])
            .zip(&mut self.evidence[lo..hi])
            .zip(r.iter().zip(a));
        for (((c, p), n), (r, a)) in known {
            *c = keep * *c + m * r;
            *p = keep * *p + r * r;
            *n = keep * *n + a;
        }
    }

    /// Where block `k` sits in the backwards rings (its first copy).
    fn reversed(&self, k: u64) -> usize {
        self.mask - (k as usize & self.mask)
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
