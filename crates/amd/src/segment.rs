//! Speech or not, frame by frame, from energy alone: for calls without a VAD's segments. A frame
//! is speech when it is audible and stands well above the quietest of the last second; a
//! line's steady hiss or hum sets that floor itself and so never counts, while speech, whose
//! level swings between syllables and words, keeps finding quieter frames to rise above.

use crate::tone::AUDIBLE_DBFS;

/// Frames in one block of the floor's memory (200 ms).
const FRAMES_PER_BLOCK: u32 = 10;
/// Blocks remembered besides the current one (1 s).
const BLOCKS: usize = 5;
/// How far above the floor a frame must be to be speech, in dB. Steady noise over a 160-sample
/// frame swings by about 1 dB; syllables stand 15–30 dB above the gaps between words.
const ABOVE_FLOOR_DB: f32 = 10.0;

/// The floor's memory: the quietest frame of each of the last blocks.
#[derive(Debug, Clone)]
pub(crate) struct EnergySegmenter {
    block_minima: [f32; BLOCKS],
    /// Blocks of `block_minima` filled so far, up to [`BLOCKS`].
    blocks_filled: usize,
    /// Where the next finished block goes.
    next_block: usize,
    current_minimum: f32,
    frames_in_current: u32,
}

impl EnergySegmenter {
    pub fn new() -> EnergySegmenter {
        EnergySegmenter {
            block_minima: [f32::INFINITY; BLOCKS],
            blocks_filled: 0,
            next_block: 0,
            current_minimum: f32::INFINITY,
            frames_in_current: 0,
        }
    }

    /// Whether a frame of `energy_dbfs` is speech; `tone` frames (a beep, a fax's call) never are.
    pub fn is_speech(&mut self, energy_dbfs: f32, tone: bool) -> bool {
        self.current_minimum = self.current_minimum.min(energy_dbfs);
        let floor = self.block_minima[..self.blocks_filled]
            .iter()
            .fold(self.current_minimum, |a, &b| a.min(b));
        self.frames_in_current += 1;
        if self.frames_in_current == FRAMES_PER_BLOCK {
            self.block_minima[self.next_block] = self.current_minimum;
            self.next_block = (self.next_block + 1) % BLOCKS;
            self.blocks_filled = (self.blocks_filled + 1).min(BLOCKS);
            self.current_minimum = f32::INFINITY;
            self.frames_in_current = 0;
        }
        !tone && energy_dbfs >= AUDIBLE_DBFS && energy_dbfs >= floor + ABOVE_FLOOR_DB
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_level_is_not_speech_a_rise_over_it_is() {
        let mut segmenter = EnergySegmenter::new();
        let steady = (0..100)
            .filter(|_| segmenter.is_speech(-35.0, false))
            .count();
        assert_eq!(steady, 0);
        assert!(segmenter.is_speech(-20.0, false));
        assert!(!segmenter.is_speech(-20.0, true), "a tone is not speech");
        // A second of the louder level: it has become the floor.
        for _ in 0..60 {
            segmenter.is_speech(-20.0, false);
        }
        assert!(!segmenter.is_speech(-20.0, false));
    }

    #[test]
    fn quiet_frames_are_never_speech() {
        let mut segmenter = EnergySegmenter::new();
        for _ in 0..20 {
            segmenter.is_speech(-120.0, false);
        }
        assert!(!segmenter.is_speech(-55.0, false));
        assert!(segmenter.is_speech(-45.0, false));
    }
}
