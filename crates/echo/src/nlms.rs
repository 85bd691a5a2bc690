//! The adaptive filter: normalised least mean squares over a short window of the reference
//! placed at the bulk delay. A hybrid's impulse response is a few milliseconds long, so 16 ms
//! of taps around the delay the envelope search found covers it, at a few million
//! multiply-adds a second per call, only while there is reference audio to cancel.

/// Step size: fast convergence on speech (a few hundred milliseconds), stable with
/// normalisation.
const STEP: f32 = 0.5;
/// Regularisation per tap: the reference's power below which a window counts as silent
/// (about −60 dBFS), so quiet windows do not blow the update up.
const REGULARISATION_PER_TAP: f32 = 1e-6;

/// Taps in the order of the reference window they multiply (oldest sample first).
#[derive(Debug)]
pub(crate) struct Nlms {
    weights: Vec<f32>,
    /// The taps at the last two checkpoints, newest first, and how many of them are held.
    checkpoints: [Vec<f32>; 2],
    held: usize,
}

impl Nlms {
    pub(crate) fn new(taps: usize) -> Nlms {
        Nlms {
            weights: vec![0.0; taps],
            checkpoints: [vec![0.0; taps], vec![0.0; taps]],
            held: 0,
        }
    }

    /// Keep the taps as they are now; the older of the two kept before is dropped.
    pub(crate) fn checkpoint(&mut self) {
        self.checkpoints.swap(0, 1);
        self.checkpoints[0].copy_from_slice(&self.weights);
        self.held = (self.held + 1).min(2);
    }

    /// Go back to the older checkpoint (the newer may already hold what corrupted the taps),
    /// if there is one; it is kept as the only checkpoint.
    pub(crate) fn restore(&mut self) -> bool {
        let Some(i) = self.held.checked_sub(1) else {
            return false;
        };
        self.weights.copy_from_slice(&self.checkpoints[i]);
        self.checkpoints.swap(0, i);
        self.held = 1;
        true
    }

    pub(crate) fn taps(&self) -> usize {
        self.weights.len()
    }

    /// Start again from no echo (the path moved).
    pub(crate) fn reset(&mut self) {
        self.weights.fill(0.0);
        self.held = 0;
    }

    /// Move the window `by` samples further into the past (negative: nearer the present),
    /// keeping what was learnt about each lag still inside it; lags new to it start at zero.
    pub(crate) fn shift(&mut self, by: isize) {
        let [a, b] = &mut self.checkpoints;
        for weights in [&mut self.weights, a, b] {
            shift_taps(weights, by);
        }
    }

    /// The echo estimate for the window `x` (`taps` samples, oldest first).
    pub(crate) fn estimate(&self, x: &[f32]) -> f32 {
        dot(&self.weights, x)
    }

    /// One update towards `error` (the caller's sample less the estimate) for window `x`.
    pub(crate) fn adapt(&mut self, x: &[f32], error: f32) {
        let power = dot(x, x) + REGULARISATION_PER_TAP * self.weights.len() as f32;
        let g = STEP * error / power;
        for (w, xi) in self.weights.iter_mut().zip(x) {
            *w += g * xi;
        }
    }
}

/// [`Nlms::shift`] on one set of taps.
fn shift_taps(weights: &mut [f32], by: isize) {
    let n = weights.len();
    let d = by.unsigned_abs().min(n);
    // Tap `i` multiplies the sample `offset + n − 1 − i` back: the same lag is tap `i + by`
    // once the window's offset grows by `by`.
    if by > 0 {
        weights.copy_within(0..n - d, d);
        weights[..d].fill(0.0);
    } else {
        weights.copy_within(d..n, 0);
        weights[n - d..].fill(0.0);
    }
}

/// A dot product in four independent lanes, so the compiler vectorises it without fast-math.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let (ca, ra) = a.as_chunks::<4>();
    let (cb, rb) = b.as_chunks::<4>();
    for (x, y) in ca.iter().zip(cb) {
        for i in 0..4 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc[0] + acc[1] + acc[2] + acc[3] + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shift_keeps_each_lags_tap() {
        let mut f = Nlms::new(6);
        f.weights.copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        f.shift(2);
        assert_eq!(f.weights, [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
        f.shift(-3);
        assert_eq!(f.weights, [2.0, 3.0, 4.0, 0.0, 0.0, 0.0]);
        f.shift(9);
        assert_eq!(f.weights, [0.0; 6]);
    }

    #[test]
    fn restore_goes_back_to_the_older_checkpoint_and_follows_shifts() {
        let mut f = Nlms::new(4);
        assert!(!f.restore(), "nothing kept yet");
        f.weights.copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
        f.checkpoint();
        f.weights.copy_from_slice(&[5.0, 6.0, 7.0, 8.0]);
        f.checkpoint();
        f.weights.copy_from_slice(&[9.0; 4]);
        f.shift(1);
        assert!(f.restore());
        assert_eq!(f.weights, [0.0, 1.0, 2.0, 3.0]);
        // The one checkpoint left is what was restored.
        f.weights.fill(0.5);
        assert!(f.restore());
        assert_eq!(f.weights, [0.0, 1.0, 2.0, 3.0]);
        f.reset();
        assert!(!f.restore(), "a reset forgets the checkpoints");
    }

    #[test]
    fn dot_matches_the_plain_sum_for_every_length() {
        for n in 0..11 {
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            let b: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert_eq!(dot(&a, &b), plain);
        }
    }

    #[test]
    fn learns_a_pure_delay_and_gain() {
        // White-ish input through a path of gain 0.25 at tap 7.
        let mut f = Nlms::new(16);
        let mut state = 12345u32;
        let mut x = vec![0.0f32; 16];
        for _ in 0..4000 {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            x.rotate_left(1);
            x[15] = (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
            let echo = 0.25 * x[7];
            let e = echo - f.estimate(&x);
            f.adapt(&x, e);
        }
        assert!((f.weights[7] - 0.25).abs() < 1e-3, "{:?}", f.weights);
    }
}
