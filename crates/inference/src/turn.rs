//! Smart Turn v3.2: the session, and the per-call turn audio buffer (sans-IO).

use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;

use ort::environment::Environment;
use ort::session::Session;
use ort::value::TensorRef;

use crate::features::{MelFrontend, N_FRAMES, N_MELS, TURN_SAMPLE_RATE_HZ};
use crate::resample::upsample_2x;
use crate::runtime::{one_thread_session, one_thread_session_from_memory, read_model_file};
use crate::{Error, Result};

const MODEL: &str = "Smart Turn v3.2";
const MODEL_FILE: &str = "Smart Turn v3.2 model";
/// The attention layers of Smart Turn v3.2 (Whisper tiny's encoder): the softmaxes
/// [`TurnGraph::FloatAttentionSoftmax`] rewires.
const ATTENTION_LAYERS: usize = 4;

/// Which arithmetic the Smart Turn session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TurnGraph {
    /// The model as published, run as ONNX Runtime optimises it (and as pipecat runs it):
    /// probabilities bit-identical to the Python reference.
    #[default]
    Published,
    /// The attention scores stay in float into the softmax ([`crate::turn_graph`]): about a
    /// fifth less CPU per run, verdicts of a slightly different arithmetic.
    FloatAttentionSoftmax,
}

/// The Smart Turn session, its feature front end and reusable buffers.
pub struct SmartTurn {
    session: Session,
    mel: MelFrontend,
    audio: Vec<f32>,
    upsampled: Vec<f32>,
    features: Vec<f32>,
}

impl std::fmt::Debug for SmartTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmartTurn").finish_non_exhaustive()
    }
}

impl SmartTurn {
    /// Loads the model as published on a one-thread session.
    pub fn load(env: &Environment, model: &Path) -> Result<Self> {
        Self::load_graph(env, model, TurnGraph::Published)
    }

    /// Loads the model on a one-thread session, its graph as `graph` says.
    pub fn load_graph(env: &Environment, model: &Path, graph: TurnGraph) -> Result<Self> {
        let session = match graph {
            TurnGraph::Published => one_thread_session(env, model, MODEL_FILE)?,
            TurnGraph::FloatAttentionSoftmax => {
                let bytes = read_model_file(model, MODEL_FILE)?;
                let (edited, rewired) = crate::turn_graph::float_attention_softmax(&bytes)?;
                if rewired != ATTENTION_LAYERS {
                    // Another model than Smart Turn v3.2's: not the graph the option was
                    // measured on.
                    return Err(Error::ModelFormat(format!(
                        "{} has {rewired} quantised attention softmaxes, Smart Turn v3.2 has \
                         {ATTENTION_LAYERS}",
                        model.display()
                    )));
                }
                one_thread_session_from_memory(env, &edited, MODEL_FILE)?
            }
        };
        Ok(Self {
            session,
            mel: MelFrontend::new(),
            audio: Vec::new(),
            upsampled: Vec::new(),
            features: Vec::new(),
        })
    }

    /// Probability that the turn is complete, from `[1, 80, 800]` features (already a sigmoid).
    pub fn predict_features(&mut self, features: &[f32]) -> Result<f32> {
        if features.len() != N_MELS * N_FRAMES {
            return Err(Error::UnsupportedAudio(format!(
                "{} feature values; Smart Turn takes {N_MELS} × {N_FRAMES}",
                features.len()
            )));
        }
        let outputs = self
            .session
            .run(ort::inputs![TensorRef::from_array_view((
                [1, N_MELS, N_FRAMES],
                features
            ))
            .map_err(Error::ort("Smart Turn input tensor"))?])
            .map_err(Error::ort("Smart Turn run"))?;
        let (_, p) = outputs["logits"]
            .try_extract_tensor::<f32>()
            .map_err(Error::ort("Smart Turn output"))?;
        match p {
            [p] if p.is_finite() => Ok(*p),
            _ => Err(Error::BadModelOutput {
                model: MODEL,
                what: format!("{p:?} instead of one finite probability"),
            }),
        }
    }

    /// Probability of a complete turn for 16-bit PCM at 8 kHz (upsampled in Rust) or 16 kHz.
    pub fn predict_pcm(&mut self, pcm: &[i16], sample_rate_hz: u32) -> Result<f32> {
        self.audio.clear();
        self.audio
            .extend(pcm.iter().map(|&s| f32::from(s) / 32768.0));
        let audio_16k = if sample_rate_hz == TURN_SAMPLE_RATE_HZ {
            &self.audio
        } else if sample_rate_hz == ontime_rtp::SAMPLE_RATE_HZ {
            upsample_2x(&self.audio, &mut self.upsampled);
            &self.upsampled
        } else {
            return Err(Error::UnsupportedAudio(format!(
                "Smart Turn audio at {sample_rate_hz} Hz; 8000 or 16000 supported"
            )));
        };
        let mut features = std::mem::take(&mut self.features);
        self.mel.compute(audio_16k, &mut features);
        let p = self.predict_features(&features);
        self.features = features;
        p
    }

    /// The feature front end (for tests comparing features with a reference).
    pub fn features_of(&mut self, audio_16k: &[f32]) -> Vec<f32> {
        let mut out = Vec::new();
        self.mel.compute(audio_16k, &mut out);
        out
    }
}

/// One call's turn audio (8 kHz, or 16 kHz from a wideband call), like pipecat's turn analyzer:
/// while quiet it keeps only the recent past (enough to reach 500 ms before a speech onset that
/// the VAD confirms later); from the onset it keeps the turn, at most the last 8 s. Stream
/// positions are absolute sample indices at the buffer's rate.
#[derive(Debug, Clone)]
pub struct TurnAudioBuffer {
    samples: VecDeque<i16>,
    /// Absolute index of `samples[0]`.
    first_sample: u64,
    in_turn: bool,
    pre_speech_samples: u64,
    quiet_keep_samples: usize,
    max_samples: usize,
}

fn samples_in(d: Duration, rate_hz: u32) -> u64 {
    d.as_micros() as u64 * u64::from(rate_hz) / 1_000_000
}

impl TurnAudioBuffer {
    /// `pre_speech` kept before an onset, `confirm_delay` the longest the VAD takes to confirm an
    /// onset (its start duration plus one chunk), `max_audio` the most kept in a turn; 8 kHz.
    pub fn new(pre_speech: Duration, confirm_delay: Duration, max_audio: Duration) -> Self {
        Self::at_rate(
            ontime_rtp::SAMPLE_RATE_HZ,
            pre_speech,
            confirm_delay,
            max_audio,
        )
    }

    /// [`TurnAudioBuffer::new`] for audio at `rate_hz`.
    pub fn at_rate(
        rate_hz: u32,
        pre_speech: Duration,
        confirm_delay: Duration,
        max_audio: Duration,
    ) -> Self {
        let samples_in = |d| samples_in(d, rate_hz);
        let pre = samples_in(pre_speech);
        let max_samples = samples_in(max_audio) as usize;
        Self {
            samples: VecDeque::new(),
            first_sample: 0,
            in_turn: false,
            pre_speech_samples: pre,
            quiet_keep_samples: (pre + samples_in(confirm_delay)) as usize,
            max_samples,
        }
    }

    /// Appends audio (the stream's next samples).
    pub fn push(&mut self, pcm: &[i16]) {
        self.samples.extend(pcm.iter().copied());
        let cap = if self.in_turn {
            self.max_samples
        } else {
            self.quiet_keep_samples
        };
        let excess = self.samples.len().saturating_sub(cap);
        if excess > 0 {
            self.samples.drain(..excess);
            self.first_sample += excess as u64;
        }
    }

    /// Speech started at absolute sample `onset`: the turn starts `pre_speech` before it.
    pub fn speech_started(&mut self, onset: u64) {
        if self.in_turn {
            return;
        }
        self.in_turn = true;
        let from = onset
            .saturating_sub(self.pre_speech_samples)
            .max(self.first_sample);
        let drop = (from - self.first_sample) as usize;
        self.samples.drain(..drop.min(self.samples.len()));
        self.first_sample += drop as u64;
    }

    /// True between a speech start and the turn's end.
    pub fn in_turn(&self) -> bool {
        self.in_turn
    }

    /// Copies the turn's audio (at most `max_audio`) into `out`.
    pub fn copy_turn(&self, out: &mut Vec<i16>) {
        out.clear();
        out.extend(self.samples.iter().copied());
    }

    /// The pitch of the turn's last 100 ms of voice against the voice before it, in semitones
    /// ([`crate::prosody::final_pitch_level`]).
    pub fn final_pitch_level(&self) -> Option<f32> {
        crate::prosody::final_pitch_level(&self.samples, self.samples.len())
    }

    /// The turn ended (complete): back to keeping only the recent past.
    pub fn end_turn(&mut self) {
        self.in_turn = false;
        let excess = self.samples.len().saturating_sub(self.quiet_keep_samples);
        self.samples.drain(..excess);
        self.first_sample += excess as u64;
    }

    /// Absolute index of the first sample held (the turn's start while in a turn).
    pub fn start(&self) -> u64 {
        self.first_sample
    }

    /// Absolute index one past the last sample held.
    pub fn end(&self) -> u64 {
        self.first_sample + self.samples.len() as u64
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn buf() -> TurnAudioBuffer {
        TurnAudioBuffer::new(
            Duration::from_millis(500),
            Duration::from_millis(224),
            Duration::from_secs(8),
        )
    }

    #[test]
    fn turn_starts_500_ms_before_onset() {
        let mut b = buf();
        let pcm: Vec<i16> = (0..16_000).map(|i| (i % 1000) as i16).collect();
        b.push(&pcm); // 2 s quiet: keeps 724 ms
        assert_eq!(b.len(), 5792);
        b.speech_started(16_000 - 1600); // onset 200 ms ago
        assert_eq!(b.len(), 4000 + 1600);
        let mut out = Vec::new();
        b.copy_turn(&mut out);
        assert_eq!(out[0], ((16_000 - 5600) % 1000) as i16);
    }

    #[test]
    fn turn_keeps_last_8_s() {
        let mut b = buf();
        b.speech_started(0);
        b.push(&vec![1; 100_000]);
        assert_eq!(b.len(), 64_000);
        b.end_turn();
        assert_eq!(b.len(), 5792);
    }

    proptest! {
        #[test]
        fn accounting_holds(ops in proptest::collection::vec((0usize..3000, 0u8..4), 0..200)) {
            let mut b = buf();
            let mut total = 0u64;
            for (n, op) in ops {
                b.push(&vec![0; n]);
                total += n as u64;
                match op {
                    0 => b.speech_started(total.saturating_sub(1000)),
                    1 => b.end_turn(),
                    _ => {}
                }
                prop_assert_eq!(b.first_sample + b.len() as u64, total);
                prop_assert!(b.len() <= 64_000);
                if !b.in_turn() { prop_assert!(b.len() <= 5792); }
            }
        }
    }
}
