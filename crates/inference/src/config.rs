//! Where the runtime and the models are, and the pool's tunables.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::budget::CpuQuota;
use crate::speech::VadParams;
use crate::{Error, Result};

pub use crate::env_vars::{MODELS_DIR_ENV, ORT_DYLIB_ENV};
/// File name of the ONNX Runtime library fetched by `scripts/fetch-models.sh`.
pub const ORT_DYLIB_FILE: &str = "libonnxruntime.so.1.31.1";
/// File name of the Silero VAD model (silero-vad 6.2.3 wheel).
pub const SILERO_VAD_FILE: &str = "silero_vad.onnx";
/// File name of the Smart Turn v3.2 CPU model (pipecat-ai 1.14.0 wheel).
pub const SMART_TURN_FILE: &str = "smart-turn-v3.2-cpu.onnx";

/// Paths of the ONNX Runtime library and the two models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPaths {
    /// `libonnxruntime.so` (at least 1.31, the `api-31` level `ort` is built for).
    pub ort_dylib: PathBuf,
    /// `silero_vad.onnx`.
    pub silero_vad: PathBuf,
    /// `smart-turn-v3.2-cpu.onnx`.
    pub smart_turn: PathBuf,
}

impl ModelPaths {
    /// All three files in one folder, with the names `scripts/fetch-models.sh` gives them.
    pub fn in_dir(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        Self {
            ort_dylib: dir.join(ORT_DYLIB_FILE),
            silero_vad: dir.join(SILERO_VAD_FILE),
            smart_turn: dir.join(SMART_TURN_FILE),
        }
    }

    /// Paths from the environment: models in `$ONTIME_MODELS_DIR` (else `default_dir`), the runtime at
    /// `$ORT_DYLIB_PATH` (else in the models folder). Tests and examples pass the workspace's
    /// `.cache/models` as `default_dir`; a deployed binary passes its configured folder.
    pub fn from_env_or(default_dir: impl AsRef<Path>) -> Self {
        let dir = std::env::var_os(MODELS_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| default_dir.as_ref().to_path_buf());
        let mut paths = Self::in_dir(dir);
        if let Some(dylib) = std::env::var_os(ORT_DYLIB_ENV).filter(|v| !v.is_empty()) {
            paths.ort_dylib = PathBuf::from(dylib);
        }
        paths
    }

    /// Checks that every file exists; the error names the file and `scripts/fetch-models.sh`.
    pub fn check(&self) -> Result<()> {
        check_file("ONNX Runtime library", &self.ort_dylib, ORT_DYLIB_ENV)?;
        check_file("Silero VAD model", &self.silero_vad, MODELS_DIR_ENV)?;
        check_file("Smart Turn v3.2 model", &self.smart_turn, MODELS_DIR_ENV)
    }

    /// True when all three files exist.
    pub fn all_present(&self) -> bool {
        self.check().is_ok()
    }
}

fn check_file(what: &'static str, path: &Path, env_var: &'static str) -> Result<()> {
    if path.is_file() {
        Ok(())
    } else {
        Err(Error::MissingFile {
            what,
            path: path.to_path_buf(),
            env_var,
        })
    }
}

/// Smart Turn tunables (pipecat's `LocalSmartTurnAnalyzerV3` defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnParams {
    /// Audio kept from before the speech onset (pipecat `pre_speech_ms` = 500 ms).
    pub pre_speech: Duration,
    /// The most audio analysed: the last this-much of the turn (pipecat `max_duration_secs` = 8 s,
    /// also the model's 800-frame input).
    pub max_audio: Duration,
    /// Probability above which a turn is complete (the model's output is already a sigmoid).
    pub complete_threshold: f32,
    /// After an *incomplete* verdict, silence this long ends the turn anyway (pipecat `stop_secs` = 3 s).
    pub incomplete_timeout: Duration,
    /// Start Smart Turn speculatively once the caller has been quiet this long (rounded to whole
    /// 32 ms VAD chunks, at least one, and shorter than the VAD's stop duration), so its verdict
    /// is ready when the stop is confirmed (`crate::speculative`). Default 96 ms (three chunks);
    /// `None`: only after the stop, as pipecat does.
    pub speculate_after: Option<Duration>,
    /// Append digital silence to the speculative run's audio so it is as long as the audio the
    /// confirmed stop would judge. Smart Turn weighs the trailing quiet heavily (a complete
    /// sentence scored 0.86 with 192 ms of trailing silence and 0.12 with 32 ms), so unpadded
    /// speculation disagrees with today's rule; see docs/inference.md for the figures.
    pub speculate_pad: bool,
    /// End the turn before the VAD's stop duration when the speculative verdict is confident
    /// (default p ≥ 0.9 after 160 ms, which changed no verdict on the labelled set,
    /// docs/inference.md; `None`: never, the stop is always confirmed first).
    /// Inert without `speculate_after` (it uses the speculative verdict).
    pub early_end: Option<EarlyEnd>,
    /// Measure each complete verdict's final pitch level (`TurnEnded::final_pitch`,
    /// [`crate::prosody`]): about 1.7 ms of the inference thread per complete verdict in a
    /// release build. Off: `final_pitch` is always `None`.
    pub final_pitch: bool,
}

/// A confident speculative verdict ends the turn without waiting for the full stop duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EarlyEnd {
    /// The speculative probability must be at least this.
    pub probability: f32,
    /// And the caller quiet at least this long (rounded up to whole VAD chunks).
    pub min_quiet: Duration,
}

impl Default for TurnParams {
    fn default() -> Self {
        Self {
            pre_speech: Duration::from_millis(500),
            max_audio: Duration::from_secs(8),
            complete_threshold: 0.5,
            incomplete_timeout: Duration::from_secs(3),
            // Three quiet chunks: the verdict (≈ 50 ms cold) is still ready for the early end
            // at 160 ms and the stop at 192 ms (docs/inference.md, "Speculative end of turn");
            // the audio the run judges ends after the soft tail of a word the VAD already calls
            // quiet (from one chunk, "…my order please." was cut before its last fricative and
            // judged incomplete); and the 64–96 ms dips between words inside speech, which
            // two chunks let start a run that speech then discarded, start none (a sixth of
            // all Smart Turn runs at 8 calls in the load harness).
            speculate_after: Some(Duration::from_millis(96)),
            speculate_pad: true,
            // The labelled set (docs/inference.md): p ≥ 0.9 after 160 ms changes no decision of
            // the speculative rule (97 false ends of turn, today's rule 98) and takes the median
            // from 260 to 221 ms; 0.95 or 0.9 after 128 ms, or 0.95 after 96 ms, added 4-5.
            early_end: Some(EarlyEnd {
                probability: 0.9,
                min_quiet: Duration::from_millis(160),
            }),
            final_pitch: true,
        }
    }
}

/// [`PoolConfig::vad_gather`]'s default: off. On a dedicated core a 32 ms window saved 1–3 points
/// of a core at 8–48 calls; under a 0.5-CPU quota it let the turn latency's p95 reach 602–702 ms
/// where 446 was measured without it (docs/inference.md).
pub const DEFAULT_VAD_GATHER: Duration = Duration::ZERO;

/// The longest [`PoolConfig::vad_gather`] accepted (two chunks).
pub const MAX_VAD_GATHER: Duration = Duration::from_millis(64);

/// [`PoolConfig::vad_pair_after`]'s default: pair a speaking call's chunks from the start of its
/// speech (the detector is in Speaking only once the onset is confirmed).
pub const DEFAULT_VAD_PAIR_AFTER: Option<Duration> = Some(Duration::ZERO);

/// Everything [`crate::InferencePool::start`] needs.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Runtime and model files.
    pub paths: ModelPaths,
    /// Capacity of the job queue (audio pushes, registrations). A full queue rejects, never blocks.
    pub queue_capacity: usize,
    /// Most calls in one batched VAD run; more ready calls run in further batches.
    pub max_vad_batch: usize,
    /// Speech start/stop detection.
    pub vad: VadParams,
    /// End-of-turn detection.
    pub turn: TurnParams,
    /// The container's CPU quota; `None` = unlimited (no budget applied).
    pub quota: Option<CpuQuota>,
    /// CPU per CFS period left for the sender and I/O: inference may use at most quota − reserve.
    pub budget_reserve: Duration,
    /// The quiet guard: while a call is quiet (no speech starting), a 32 ms chunk whose every
    /// sample is below this magnitude is called non-speech without a Silero run
    /// ([`crate::vad::is_quiet_chunk`]) and deferred; the deferred chunks are run back to back
    /// just before the call's next chunk the model judges, so Silero's state is the one it would
    /// have had, and the 5 s state reset drops those not needed. Each run after the thread slept
    /// costs about eight times one run back to back (docs/inference.md), so at small N most of a
    /// quiet line's VAD cost goes. Default [`crate::vad::QUIET_PEAK`] (64, about −54 dBFS);
    /// `None` judges every chunk as it comes. On `tests/quiet_guard.rs`'s fixed set and the
    /// labelled set no onset or stop moves.
    pub vad_quiet_peak: Option<i16>,
    /// How long a call's ready chunk may wait for the other calls' chunks to join its VAD run.
    /// Each run starts cold (its weights out of cache after the thread slept): on the reference
    /// VM a batch of one costs 490 µs of CPU at the 32 ms cadence against 63 µs back to back
    /// (`examples/session_options.rs --cadence`), and calls at their own RTP phases made many
    /// small runs.
    /// The batch runs once every call that has sent audio in the last 100 ms has a chunk ready,
    /// or once the first ready chunk has waited this long. Zero: run as soon as any chunk is
    /// ready (the default, [`DEFAULT_VAD_GATHER`]); 32 ms (one chunk) makes it one run per 32 ms
    /// however many calls.
    pub vad_gather: Duration,
    /// Speech pairing: once a call's speech has lasted this long since its onset, and while the
    /// VAD holds it speaking, its chunks go to Silero two at a time, back to back; the first
    /// waits up to 50 ms for the second (`PAIR_HOLD` in the pool). A run right after another
    /// finds the model in the caches: on the reference VM ≈ 60 µs against ≈ 490 after the thread
    /// slept 32 ms (docs/inference.md, *Each run starts cold*), so at small N the VAD's cost
    /// during speech falls by about 40 %. Only while speaking: a quiet chunk that begins a stop
    /// is judged at most one chunk later, and the chunks after it, which count the stop, as they
    /// come, so no stop confirmation, speculative start or early end moves, and no decision at
    /// all (each call's chunks run in order from the same state). What waits is the judged
    /// progress ([`crate::CallInference::judged`]) inside a speech: a reader deciding on it
    /// early in a speech (a barge-in that waits for a minimum length) sets this past that
    /// horizon. Default [`DEFAULT_VAD_PAIR_AFTER`] (from the onset's confirmation); `None`
    /// judges every chunk as it comes.
    pub vad_pair_after: Option<Duration>,
    /// Smart Turn's graph: the published one with its attention softmaxes and products on
    /// ontime's kernels (the default, [`crate::TurnGraph::OwnAttentionKernels`]: pipecat's
    /// probabilities bit for bit, checked at load), with the softmaxes alone on ontime's kernel,
    /// as published, or with the attention softmax in float
    /// ([`crate::TurnGraph::FloatAttentionSoftmax`], about a fifth less CPU per run;
    /// docs/inference.md, *Float attention softmax*).
    pub turn_graph: crate::TurnGraph,
    /// Silero VAD's graph for 8 kHz chunks: the lean one (the default; the published graph's
    /// arithmetic without its control flow, checked bit for bit against it at load,
    /// [`crate::VadGraph::Lean`]) or the published one.
    pub vad_graph: crate::VadGraph,
}

impl PoolConfig {
    /// Defaults with the given paths: queue 4096, batch ≤ 128, pipecat's VAD and turn defaults, no
    /// quota, 20 ms reserve per period, the quiet guard at [`crate::vad::QUIET_PEAK`], no gather
    /// window, speech pairing from the onset.
    pub fn new(paths: ModelPaths) -> Self {
        Self {
            paths,
            queue_capacity: 4096,
            max_vad_batch: 128,
            vad: VadParams::default(),
            turn: TurnParams::default(),
            quota: None,
            budget_reserve: Duration::from_millis(20),
            vad_quiet_peak: Some(crate::vad::QUIET_PEAK),
            vad_gather: DEFAULT_VAD_GATHER,
            vad_pair_after: DEFAULT_VAD_PAIR_AFTER,
            turn_graph: crate::TurnGraph::OwnAttentionKernels,
            vad_graph: crate::VadGraph::Lean,
        }
    }

    /// Sets `quota` from this process's CPU cgroup (`None` when unlimited).
    pub fn with_cgroup_quota(mut self) -> Result<Self> {
        self.quota = CpuQuota::of_current_process()?;
        Ok(self)
    }

    /// Rejects values the pool cannot run with.
    pub fn validate(&self) -> Result<()> {
        if self.queue_capacity == 0 {
            return Err(Error::InvalidConfig(
                "queue_capacity must be at least 1".into(),
            ));
        }
        if self.max_vad_batch == 0 {
            return Err(Error::InvalidConfig(
                "max_vad_batch must be at least 1".into(),
            ));
        }
        self.vad.validate()?;
        if self.vad_quiet_peak.is_some_and(|p| p <= 0) {
            return Err(Error::InvalidConfig(format!(
                "vad_quiet_peak {:?} must be positive (None turns the quiet guard off)",
                self.vad_quiet_peak
            )));
        }
        if self.vad_gather > MAX_VAD_GATHER {
            return Err(Error::InvalidConfig(format!(
                "vad_gather {:?} is over {MAX_VAD_GATHER:?}: a chunk held longer delays every \
                 speech decision by as much",
                self.vad_gather
            )));
        }
        if !(0.0..=1.0).contains(&self.turn.complete_threshold) {
            return Err(Error::InvalidConfig(format!(
                "turn complete_threshold {} is outside 0..=1",
                self.turn.complete_threshold
            )));
        }
        if self.turn.max_audio.is_zero() || self.turn.max_audio > Duration::from_secs(8) {
            return Err(Error::InvalidConfig(format!(
                "turn max_audio {:?} must be in (0, 8 s] (the model's input is 8 s)",
                self.turn.max_audio
            )));
        }
        if let Some(after) = self.turn.speculate_after {
            let chunks = crate::speech::chunks_for(after);
            if chunks >= self.vad.stop_chunks() {
                return Err(Error::InvalidConfig(format!(
                    "turn speculate_after {after:?} is {chunks} VAD chunks; it must be fewer than \
                     the stop duration's {} chunks",
                    self.vad.stop_chunks()
                )));
            }
        }
        if let Some(early) = &self.turn.early_end {
            if !(0.0..=1.0).contains(&early.probability) {
                return Err(Error::InvalidConfig(format!(
                    "turn early_end probability {} is outside 0..=1",
                    early.probability
                )));
            }
        }
        if let Some(q) = &self.quota {
            q.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_names_the_fetch_script() {
        let paths = ModelPaths::in_dir("/nonexistent/ontime-models");
        let err = paths.check().expect_err("files are missing");
        let msg = err.to_string();
        assert!(msg.contains("scripts/fetch-models.sh"), "{msg}");
        assert!(msg.contains("libonnxruntime.so.1.31.1"), "{msg}");
        assert!(msg.contains("ORT_DYLIB_PATH"), "{msg}");
    }

    #[test]
    fn rejects_bad_config() {
        let mut c = PoolConfig::new(ModelPaths::in_dir("/x"));
        assert!(c.validate().is_ok());
        c.queue_capacity = 0;
        assert!(c.validate().is_err());
        c.queue_capacity = 1;
        c.turn.max_audio = Duration::from_secs(9);
        assert!(c.validate().is_err());
        c.turn.max_audio = Duration::from_secs(8);
        c.vad.confidence = 1.5;
        assert!(c.validate().is_err());
        c.vad.confidence = 0.7;
        assert!(c.validate().is_ok());
        c.vad_quiet_peak = Some(0);
        assert!(c.validate().is_err());
        c.vad_quiet_peak = None;
        assert!(c.validate().is_ok());
        c.turn.speculate_after = Some(Duration::from_millis(192));
        assert!(
            c.validate().is_err(),
            "speculating at the stop is no speculation"
        );
        c.turn.speculate_after = None;
        assert!(c.validate().is_ok(), "today's rule: early end is inert");
        c.turn.early_end = Some(EarlyEnd {
            probability: 1.5,
            min_quiet: Duration::from_millis(64),
        });
        assert!(c.validate().is_err());
    }
}
