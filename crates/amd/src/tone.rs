//! One frame's level and its steady single tone, if it is one: Goertzel filters at the frame's
//! own bin spacing (8000 Hz / 160 samples = 50 Hz) from 400 to 2000 Hz, where answering
//! machines beep and fax machines call (CNG, 1100 Hz).

/// Samples in one 20 ms frame at 8 kHz.
pub const FRAME_SAMPLES: usize = 160;
/// Lowest tone looked for, in Hz.
pub const LOWEST_TONE_HZ: u32 = 400;
/// Highest tone looked for, in Hz.
pub const HIGHEST_TONE_HZ: u32 = 2000;
/// Spacing of the filters: one DFT bin of a 160-sample frame, so that a tone on a bin leaks
/// nothing into the others.
const BIN_HZ: u32 = 8000 / FRAME_SAMPLES as u32;
/// Filters from [`LOWEST_TONE_HZ`] to [`HIGHEST_TONE_HZ`], both included.
pub(crate) const TONE_BINS: usize = ((HIGHEST_TONE_HZ - LOWEST_TONE_HZ) / BIN_HZ) as usize + 1;
/// Share of a frame's energy that one bin and its stronger neighbour must hold for the frame
/// to be a tone. A G.711 sine scores above 0.95 (µ-law's quantising noise is ~38 dB down), a
/// sine halfway between two bins about 0.8; voiced speech spreads its energy over harmonics
/// and the band below 400 Hz and stays well under.
const TONE_ENERGY_SHARE: f32 = 0.7;
/// Frames quieter than this (dBFS) are neither tone nor speech: a line's hiss.
pub(crate) const AUDIBLE_DBFS: f32 = -50.0;

/// What one frame is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FrameLevel {
    /// Mean square over the frame, in dB relative to a full-scale square wave.
    pub energy_dbfs: f32,
    /// The index of the tone's bin (0 is [`LOWEST_TONE_HZ`]) when the frame is one steady tone.
    pub tone_bin: Option<usize>,
}

/// The Goertzel coefficients, computed once.
#[derive(Debug, Clone)]
pub(crate) struct ToneAnalyser {
    coefficients: [f32; TONE_BINS],
}

impl ToneAnalyser {
    pub fn new() -> ToneAnalyser {
        let mut coefficients = [0.0; TONE_BINS];
        for (bin, c) in coefficients.iter_mut().enumerate() {
            let hz = bin_hz(bin) as f32;
            *c = 2.0 * (2.0 * std::f32::consts::PI * hz / 8000.0).cos();
        }
        ToneAnalyser { coefficients }
    }

    /// The level of `frame` ([`FRAME_SAMPLES`] samples) and its tone, if any.
    pub fn analyse(&self, frame: &[i16; FRAME_SAMPLES]) -> FrameLevel {
        let energy: f32 = frame
            .iter()
            .map(|&s| {
                let x = f32::from(s) / 32768.0;
                x * x
            })
            .sum();
        let energy_dbfs = 10.0 * (energy / FRAME_SAMPLES as f32 + 1e-12).log10();
        if energy_dbfs < AUDIBLE_DBFS {
            return FrameLevel {
                energy_dbfs,
                tone_bin: None,
            };
        }
        let mut powers = [0.0f32; TONE_BINS];
        for (power, &coefficient) in powers.iter_mut().zip(&self.coefficients) {
            let (mut s1, mut s2) = (0.0f32, 0.0f32);
            for &sample in frame {
                let s = f32::from(sample) / 32768.0 + coefficient * s1 - s2;
                s2 = s1;
                s1 = s;
            }
            *power = s1 * s1 + s2 * s2 - coefficient * s1 * s2;
        }
        let (best, &best_power) = powers
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap_or((0, &0.0));
        let neighbour = [best.wrapping_sub(1), best + 1]
            .iter()
            .filter_map(|&i| powers.get(i))
            .fold(0.0f32, |a, &b| a.max(b));
        // A sine of amplitude A on a bin has power (A·N/2)² and energy A²·N/2: this share is 1.
        let share = 2.0 * (best_power + neighbour) / (FRAME_SAMPLES as f32 * energy);
        FrameLevel {
            energy_dbfs,
            tone_bin: (share >= TONE_ENERGY_SHARE).then_some(best),
        }
    }
}

/// The frequency of a bin, in Hz.
pub(crate) const fn bin_hz(bin: usize) -> u32 {
    LOWEST_TONE_HZ + bin as u32 * BIN_HZ
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(hz: f32, amplitude: f32) -> [i16; FRAME_SAMPLES] {
        std::array::from_fn(|i| {
            (amplitude * (2.0 * std::f32::consts::PI * hz * i as f32 / 8000.0).sin()) as i16
        })
    }

    #[test]
    fn a_sine_on_or_between_bins_is_a_tone_at_its_bin() {
        let analyser = ToneAnalyser::new();
        assert_eq!(analyser.analyse(&sine(1000.0, 8000.0)).tone_bin, Some(12));
        assert_eq!(bin_hz(12), 1000);
        let between = analyser.analyse(&sine(1425.0, 8000.0)).tone_bin;
        assert!(matches!(between, Some(20 | 21)), "{between:?}");
        assert_eq!(analyser.analyse(&sine(300.0, 8000.0)).tone_bin, None);
    }

    #[test]
    fn silence_and_two_tones_are_not_a_tone() {
        let analyser = ToneAnalyser::new();
        let silent = analyser.analyse(&[0; FRAME_SAMPLES]);
        assert_eq!(silent.tone_bin, None);
        assert!(silent.energy_dbfs < -100.0);
        let (a, b) = (sine(600.0, 6000.0), sine(1600.0, 6000.0));
        let chord: [i16; FRAME_SAMPLES] = std::array::from_fn(|i| a[i] + b[i]);
        assert_eq!(analyser.analyse(&chord).tone_bin, None);
    }
}
