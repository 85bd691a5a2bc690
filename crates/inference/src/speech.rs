//! Speech start/stop from per-chunk VAD probabilities: pipecat's four-state machine, sans-IO.
//!
//! Each VAD chunk (256 samples = 32 ms at 8 kHz) is *speaking* when its probability is at least
//! `confidence`. Quiet → Starting on a speaking chunk; Starting → Speaking after `start_chunks`
//! speaking chunks in a row (a quiet chunk drops back to Quiet); Speaking → Stopping on a quiet chunk;
//! Stopping → Quiet after `stop_chunks` quiet chunks in a row (a speaking chunk returns to Speaking).
//! `start_chunks = round(start / chunk)` and `stop_chunks = round(stop / chunk)` as pipecat's
//! `VADAnalyzer.set_params`, so the defaults (0.2 s) give 6 chunks (192 ms).
//!
//! Left out from pipecat: the `min_volume` loudness gate (pyloudnorm on each chunk). Phone audio at
//! 8 kHz is level-normalised by the network; the model's confidence alone decides here.

use std::time::Duration;

use crate::{Error, Result};

/// Samples in one Silero VAD chunk at 8 kHz (the model's fixed window).
pub const VAD_CHUNK_SAMPLES: usize = 256;
/// Samples of left context Silero VAD prepends at 8 kHz.
pub const VAD_CONTEXT_SAMPLES: usize = 32;
/// One VAD chunk's duration at 8 kHz: 32 ms.
pub const VAD_CHUNK: Duration =
    Duration::from_micros(VAD_CHUNK_SAMPLES as u64 * 1_000_000 / ontime_rtp::SAMPLE_RATE_HZ as u64);

/// Speech detection parameters; the defaults are pipecat's `VADParams`.
#[derive(Debug, Clone, PartialEq)]
pub struct VadParams {
    /// A chunk is speech when its probability is at least this (pipecat 0.7).
    pub confidence: f32,
    /// Speech must last this long to start (pipecat 0.2 s).
    pub start: Duration,
    /// Silence must last this long to stop (pipecat 0.2 s).
    pub stop: Duration,
}

impl Default for VadParams {
    fn default() -> Self {
        Self {
            confidence: 0.7,
            start: Duration::from_millis(200),
            stop: Duration::from_millis(200),
        }
    }
}

impl VadParams {
    /// Rejects a confidence outside 0..=1.
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.confidence) {
            return Err(Error::InvalidConfig(format!(
                "VAD confidence {} is outside 0..=1",
                self.confidence
            )));
        }
        Ok(())
    }

    /// Consecutive speaking chunks needed to start (at least 1).
    pub fn start_chunks(&self) -> u32 {
        chunks_for(self.start)
    }

    /// Consecutive quiet chunks needed to stop (at least 1).
    pub fn stop_chunks(&self) -> u32 {
        chunks_for(self.stop)
    }
}

/// Whole VAD chunks in `d` (rounded, at least 1).
pub(crate) fn chunks_for(d: Duration) -> u32 {
    let n = (d.as_secs_f64() / VAD_CHUNK.as_secs_f64()).round();
    // ok: durations are config values; clamp into a sane range instead of trusting them.
    (n.clamp(1.0, 1_000_000.0)) as u32
}

/// The detector's state (pipecat's `VADState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeechState {
    /// No speech.
    Quiet,
    /// Speech seen, not yet long enough.
    Starting,
    /// Speaking.
    Speaking,
    /// Silence seen after speech, not yet long enough.
    Stopping,
}

/// A transition the detector reports, with chunk indices (0-based, 32 ms each) of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeechTransition {
    /// Speech started: `onset_chunk` is the first speaking chunk of the run that confirmed it.
    Started {
        /// First speaking chunk of the confirming run.
        onset_chunk: u64,
    },
    /// Speech stopped: `end_chunk` is the first quiet chunk of the run that confirmed it.
    Stopped {
        /// First quiet chunk of the confirming run.
        end_chunk: u64,
    },
}

/// Pipecat's speech state machine over chunk probabilities. Reset only by [`SpeechDetector::reset`]
/// (the pool resets it when a call registers).
#[derive(Debug, Clone)]
pub struct SpeechDetector {
    confidence: f32,
    start_chunks: u32,
    stop_chunks: u32,
    state: SpeechState,
    run: u32,
    run_first_chunk: u64,
    next_chunk: u64,
}

impl SpeechDetector {
    /// A quiet detector.
    pub fn new(params: &VadParams) -> Self {
        Self {
            confidence: params.confidence,
            start_chunks: params.start_chunks(),
            stop_chunks: params.stop_chunks(),
            state: SpeechState::Quiet,
            run: 0,
            run_first_chunk: 0,
            next_chunk: 0,
        }
    }

    /// Back to Quiet at chunk 0.
    pub fn reset(&mut self) {
        self.state = SpeechState::Quiet;
        self.run = 0;
        self.run_first_chunk = 0;
        self.next_chunk = 0;
    }

    /// The current state.
    pub fn state(&self) -> SpeechState {
        self.state
    }

    /// Chunks seen so far.
    pub fn chunks_seen(&self) -> u64 {
        self.next_chunk
    }

    /// Quiet chunks in a row since speech was last seen, while [`SpeechState::Stopping`] (else 0).
    pub fn quiet_run(&self) -> u32 {
        if self.state == SpeechState::Stopping {
            self.run
        } else {
            0
        }
    }

    /// Confirms the stop now, before the stop duration has passed (an early end of turn): from
    /// [`SpeechState::Stopping`], goes to Quiet and returns the transition `push` would have
    /// returned; in any other state does nothing. Speech after it is a new start.
    pub fn stop_now(&mut self) -> Option<SpeechTransition> {
        if self.state != SpeechState::Stopping {
            return None;
        }
        self.state = SpeechState::Quiet;
        self.run = 0;
        Some(SpeechTransition::Stopped {
            end_chunk: self.run_first_chunk,
        })
    }

    /// Feeds the next chunk's probability; returns a transition when one completes.
    pub fn push(&mut self, probability: f32) -> Option<SpeechTransition> {
        let chunk = self.next_chunk;
        self.next_chunk += 1;
        let speaking = probability >= self.confidence;
        match (self.state, speaking) {
            (SpeechState::Quiet, true) => {
                self.state = SpeechState::Starting;
                self.run = 1;
                self.run_first_chunk = chunk;
            }
            (SpeechState::Starting, true) => self.run += 1,
            (SpeechState::Starting, false) => {
                self.state = SpeechState::Quiet;
                self.run = 0;
            }
            (SpeechState::Speaking, false) => {
                self.state = SpeechState::Stopping;
                self.run = 1;
                self.run_first_chunk = chunk;
            }
            (SpeechState::Stopping, false) => self.run += 1,
            (SpeechState::Stopping, true) => {
                self.state = SpeechState::Speaking;
                self.run = 0;
            }
            (SpeechState::Quiet, false) | (SpeechState::Speaking, true) => {}
        }
        if self.state == SpeechState::Starting && self.run >= self.start_chunks {
            self.state = SpeechState::Speaking;
            self.run = 0;
            return Some(SpeechTransition::Started {
                onset_chunk: self.run_first_chunk,
            });
        }
        if self.state == SpeechState::Stopping && self.run >= self.stop_chunks {
            self.state = SpeechState::Quiet;
            self.run = 0;
            return Some(SpeechTransition::Stopped {
                end_chunk: self.run_first_chunk,
            });
        }
        None
    }
}

/// Speech segments of a whole recording, as `vad_file` prints them: (start, end) in stream time,
/// from onset chunk to the first quiet chunk; a segment still open at the end closes at the end.
pub fn segments(probabilities: &[f32], params: &VadParams) -> Vec<(Duration, Duration)> {
    let mut det = SpeechDetector::new(params);
    let mut out = Vec::new();
    let mut open: Option<u64> = None;
    for &p in probabilities {
        match det.push(p) {
            Some(SpeechTransition::Started { onset_chunk }) => open = Some(onset_chunk),
            Some(SpeechTransition::Stopped { end_chunk }) => {
                if let Some(start) = open.take() {
                    out.push((chunk_time(start), chunk_time(end_chunk)));
                }
            }
            None => {}
        }
    }
    if let Some(start) = open {
        out.push((chunk_time(start), chunk_time(probabilities.len() as u64)));
    }
    out
}

/// Stream time at the start of chunk `index`.
pub fn chunk_time(index: u64) -> Duration {
    Duration::from_micros(index.saturating_mul(VAD_CHUNK.as_micros() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pipecat_defaults_need_six_chunks() {
        let p = VadParams::default();
        assert_eq!(VAD_CHUNK, Duration::from_millis(32));
        assert_eq!(p.start_chunks(), 6);
        assert_eq!(p.stop_chunks(), 6);
    }

    #[test]
    fn start_and_stop_after_six_chunks() {
        let mut d = SpeechDetector::new(&VadParams::default());
        for _ in 0..3 {
            assert_eq!(d.push(0.1), None);
        }
        for i in 0..5 {
            assert_eq!(d.push(0.9), None, "chunk {i}");
        }
        assert_eq!(
            d.push(0.9),
            Some(SpeechTransition::Started { onset_chunk: 3 })
        );
        assert_eq!(d.state(), SpeechState::Speaking);
        // A short dip does not stop speech.
        for _ in 0..5 {
            assert_eq!(d.push(0.2), None);
        }
        assert_eq!(d.push(0.95), None);
        assert_eq!(d.state(), SpeechState::Speaking);
        for _ in 0..5 {
            assert_eq!(d.push(0.0), None);
        }
        assert_eq!(
            d.push(0.0),
            Some(SpeechTransition::Stopped { end_chunk: 15 })
        );
        assert_eq!(d.state(), SpeechState::Quiet);
    }

    #[test]
    fn stop_now_confirms_early_and_speech_after_it_starts_anew() {
        let mut d = SpeechDetector::new(&VadParams::default());
        assert_eq!(d.stop_now(), None, "quiet: nothing to stop");
        for _ in 0..6 {
            d.push(0.9);
        }
        assert_eq!(d.quiet_run(), 0);
        assert_eq!(d.stop_now(), None, "speaking: nothing to stop");
        d.push(0.1);
        d.push(0.1);
        assert_eq!(d.quiet_run(), 2);
        assert_eq!(
            d.stop_now(),
            Some(SpeechTransition::Stopped { end_chunk: 6 })
        );
        assert_eq!(d.state(), SpeechState::Quiet);
        assert_eq!(d.quiet_run(), 0);
        for _ in 0..5 {
            assert_eq!(d.push(0.9), None);
        }
        assert_eq!(
            d.push(0.9),
            Some(SpeechTransition::Started { onset_chunk: 8 })
        );
    }

    #[test]
    fn confidence_is_inclusive() {
        let p = VadParams {
            start: VAD_CHUNK,
            ..VadParams::default()
        };
        let mut d = SpeechDetector::new(&p);
        assert_eq!(
            d.push(0.7),
            Some(SpeechTransition::Started { onset_chunk: 0 })
        );
    }

    #[test]
    fn segments_close_at_end() {
        let mut probs = vec![0.0; 10];
        probs.extend([0.9; 20]);
        let segs = segments(&probs, &VadParams::default());
        assert_eq!(segs, vec![(chunk_time(10), chunk_time(30))]);
    }

    proptest! {
        #[test]
        fn transitions_alternate(probs in proptest::collection::vec(0.0f32..1.0, 0..400)) {
            let mut d = SpeechDetector::new(&VadParams::default());
            let mut last_started = false;
            let mut last_chunk = 0u64;
            for p in probs {
                if let Some(t) = d.push(p) {
                    match t {
                        SpeechTransition::Started { onset_chunk } => {
                            prop_assert!(!last_started);
                            prop_assert!(onset_chunk >= last_chunk);
                            last_chunk = onset_chunk;
                            last_started = true;
                        }
                        SpeechTransition::Stopped { end_chunk } => {
                            prop_assert!(last_started);
                            prop_assert!(end_chunk > last_chunk);
                            last_chunk = end_chunk;
                            last_started = false;
                        }
                    }
                }
            }
        }
    }
}
