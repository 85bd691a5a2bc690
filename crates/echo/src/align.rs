//! Fine alignment: the echo's delay to the sample, by cross-correlating the waveforms around the
//! lag the envelope search found.
//!
//! The envelope correlation peaks broadly (a syllable's envelope is tens of milliseconds wide),
//! so its lock can sit 10 ms off the echo: outside the adaptive filter's window, which then never
//! converges, and the gate compares the caller with the reply at the wrong moment (a reply's
//! echo passed as the caller now and then). The waveform's correlation peaks within a sample or
//! two of the path's main reflection. Done once per lock, and again while the filter fails to
//! converge, over a few hundred milliseconds: a million multiply-adds, not a continuous cost.

use crate::nlms::dot;

/// Normalised correlation the best fine lag needs to be taken over the envelope's.
pub(crate) const FINE_CORRELATION: f32 = 0.3;

/// The best alignment of `mic` against `reference`: `reference` holds the reply from
/// `longest` samples before `mic`'s first sample up to `shortest` samples before its end, so
/// `mic[i]` pairs with `reference[i + k]` at a lag of `longest − k`. Returns the lag and its
/// normalised correlation (absolute: a hybrid may invert), or `None` when either side is silent
/// or the slices do not fit.
pub(crate) fn best_lag(
    mic: &[f32],
    reference: &[f32],
    longest: usize,
    shortest: usize,
) -> Option<(usize, f32)> {
    let span = longest.checked_sub(shortest)?;
    if mic.is_empty() || reference.len() != mic.len() + span {
        return None;
    }
    let mic_energy: f32 = mic.iter().map(|x| x * x).sum();
    // The reference energy under the window at each k, slid along rather than summed anew.
    let mut ref_energy: f32 = reference[..mic.len()].iter().map(|x| x * x).sum();
    let floor = 1e-9;
    let mut best: Option<(usize, f32)> = None;
    for k in 0..=span {
        if k > 0 {
            let (gone, come) = (reference[k - 1], reference[k + mic.len() - 1]);
            ref_energy = (ref_energy - gone * gone + come * come).max(0.0);
        }
        if mic_energy < floor || ref_energy < floor {
            continue;
        }
        let c = dot(mic, &reference[k..k + mic.len()]);
        let ncc = c.abs() / (mic_energy * ref_energy).sqrt();
        if best.is_none_or(|(_, b)| ncc > b) {
            best = Some((longest - k, ncc));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// The reply at positions `0..len`, the caller's window from `start`, echoing `lag` later
    /// through `taps`, `gain` down.
    fn line(lag: usize, taps: &[f32], gain: f32) -> (Vec<f32>, Vec<f32>, usize, usize) {
        let played = noise(8000, 7);
        let (start, window) = (4000, 1600);
        let mic: Vec<f32> = (start..start + window)
            .map(|p| {
                taps.iter()
                    .enumerate()
                    .map(|(j, t)| t * played[p - lag - j])
                    .sum::<f32>()
                    * gain
            })
            .collect();
        let (longest, shortest) = (lag + 100, lag - 100);
        let reference = played[start - longest..start - shortest + window].to_vec();
        (mic, reference, longest, shortest)
    }

    #[test]
    fn finds_a_pure_delay_to_the_sample() {
        let (mic, reference, longest, shortest) = line(1700, &[1.0], 0.25);
        let (lag, ncc) = best_lag(&mic, &reference, longest, shortest).unwrap();
        assert_eq!(lag, 1700);
        assert!(ncc > 0.99, "{ncc}");
    }

    #[test]
    fn finds_a_hybrids_main_reflection_inverted_or_not() {
        for sign in [1.0, -1.0] {
            let taps: Vec<f32> = [0.3, 0.8, -0.1, -0.45, -0.2, 0.1]
                .iter()
                .map(|t| t * sign)
                .collect();
            let (mic, reference, longest, shortest) = line(900, &taps, 0.25);
            let (lag, _) = best_lag(&mic, &reference, longest, shortest).unwrap();
            assert_eq!(lag, 901, "sign {sign}");
        }
    }

    #[test]
    fn silence_and_misfit_slices_find_nothing() {
        let mic = vec![0.0; 100];
        assert_eq!(best_lag(&mic, &[0.5; 110], 20, 10), None);
        assert_eq!(best_lag(&[0.5; 100], &[0.5; 105], 20, 10), None);
        assert_eq!(best_lag(&[0.5; 100], &[0.5; 110], 10, 20), None);
        assert_eq!(best_lag(&[], &[0.5; 10], 20, 10), None);
    }
}
