//! Silero VAD (v6, 8 kHz) on one session, batched across streams.
//!
//! At 8 kHz the model takes `input` [B, 288] — 32 samples of the stream's previous audio (its
//! *context*) then the 256-sample chunk, as f32 in [-1, 1) — `state` [2, B, 128] (the recurrent
//! state carried between chunks) and `sr` = 8000 (int64 scalar); it returns `output` [B, 1] (speech
//! probability) and `stateN` [2, B, 128]. Each row of a batch is independent, so many calls' next
//! chunks run in one call to ONNX Runtime; [`VadStream`] keeps one stream's context and state.

use std::path::{Path, PathBuf};

use ort::environment::Environment;
use ort::session::Session;
use ort::value::TensorRef;

use crate::runtime::{one_thread_session, one_thread_session_from_memory, read_model_file};
use crate::speech::{VAD_CHUNK_SAMPLES, VAD_CONTEXT_SAMPLES};
use crate::{Error, Result};

/// Width of one input row: context + chunk.
pub const VAD_ROW: usize = VAD_CONTEXT_SAMPLES + VAD_CHUNK_SAMPLES;
/// Floats in one stream's recurrent state (2 × 128).
pub const VAD_STATE: usize = 2 * 128;
const HALF_STATE: usize = 128;

/// One audio stream's Silero state: the last 32 samples and the recurrent state. A fresh stream
/// (and a reset one) has both zeroed, as silero's `OnnxWrapper.reset_states`.
#[derive(Debug, Clone, PartialEq)]
pub struct VadStream {
    context: [f32; VAD_CONTEXT_SAMPLES],
    state: [f32; VAD_STATE],
}

impl Default for VadStream {
    fn default() -> Self {
        Self {
            context: [0.0; VAD_CONTEXT_SAMPLES],
            state: [0.0; VAD_STATE],
        }
    }
}

impl VadStream {
    /// Zeroes context and state.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Stands in for a model run on a quiet chunk that will never run: the context becomes the
    /// chunk's last 32 samples, so the next model run sees the real audio before it; the
    /// recurrent state stays the one the last run left. The pool defers quiet chunks and replays
    /// them instead (`PoolConfig::vad_quiet_peak`): on `tests/quiet_guard.rs`, skipping them this
    /// way moved the onsets of 11 calls in 75 (the state carries the quiet's history), the
    /// replay none. It uses this only if a backlog outgrew the 5 s state reset.
    pub fn skip_quiet(&mut self, chunk: &[i16]) {
        let tail = &chunk[chunk.len().saturating_sub(VAD_CONTEXT_SAMPLES)..];
        self.context = [0.0; VAD_CONTEXT_SAMPLES];
        pcm_to_f32(tail, &mut self.context[VAD_CONTEXT_SAMPLES - tail.len()..]);
    }
}

/// Peak magnitude (of 32767) below which the quiet guard may decide a chunk without the model:
/// 64, about −54 dBFS, the load harness's voiced threshold. Line noise at −72 dBFS RMS and
/// G.711's idle codes stay below it; the first 32 ms of any audible onset do not.
pub const QUIET_PEAK: i16 = 64;

/// True when every sample of `pcm` is below `peak` in magnitude: a chunk the quiet guard
/// treats as non-speech without running Silero (the pool only does so while its call is
/// quiet, `PoolConfig::vad_quiet_peak`). Peak, not energy: one audible sample is enough to
/// send the chunk to the model, so a soft onset's first chunk is never skipped.
pub fn is_quiet_chunk<I>(pcm: I, peak: i16) -> bool
where
    I: IntoIterator<Item = i16>,
{
    pcm.into_iter()
        .all(|s| s.unsigned_abs() < peak.unsigned_abs())
}

/// Converts 16-bit PCM to the model's f32 scale (x / 32768), as pipecat and silero do.
pub fn pcm_to_f32(pcm: &[i16], out: &mut [f32]) {
    for (o, &s) in out.iter_mut().zip(pcm) {
        *o = f32::from(s) / 32768.0;
    }
}

/// Which graph the 8 kHz VAD runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VadGraph {
    /// The 8 kHz branch without its control flow ([`crate::vad_graph`]): the same arithmetic
    /// in 20 nodes a run instead of 55, about a third less CPU per run at the gateway's cadence.
    /// Used only when it gives bit-identical probabilities and states to the published graph
    /// on a fixed input at load ([`SileroVad::graph`] says which one runs).
    #[default]
    Lean,
    /// The model as published (both sample rates behind an `If` on `sr`).
    Published,
}

/// The Silero VAD session plus reusable input buffers.
pub struct SileroVad {
    /// The session that runs 8 kHz chunks: the graph [`SileroVad::graph`] names.
    session: Session,
    /// The published graph when `session` runs the lean one, loaded from `model` the first
    /// time a 16 kHz recording ([`SileroVad::probabilities`]) needs its other branch: the
    /// gateway's 8 kHz calls never do, so it holds no memory there.
    published: Option<Session>,
    graph: VadGraph,
    /// What loads `published` on demand.
    env: Environment,
    model: PathBuf,
    input: Vec<f32>,
    state: Vec<f32>,
    probabilities: Vec<f32>,
}

impl std::fmt::Debug for SileroVad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SileroVad").finish_non_exhaustive()
    }
}

const MODEL: &str = "Silero VAD";
const MODEL_FILE: &str = "Silero VAD model";

impl SileroVad {
    /// Loads the model on a one-thread session, 8 kHz chunks on the lean graph
    /// ([`VadGraph::Lean`]).
    pub fn load(env: &Environment, model: &Path) -> Result<Self> {
        Self::load_graph(env, model, VadGraph::Lean)
    }

    /// Loads the model on a one-thread session, 8 kHz chunks on `graph`. The lean graph is
    /// built from the model's own weights and runs only if it matches the published graph bit
    /// for bit on [`agreement_check`]'s input; otherwise (another model, another ONNX Runtime
    /// whose kernels differ) the published graph runs, with a warning.
    pub fn load_graph(env: &Environment, model: &Path, graph: VadGraph) -> Result<Self> {
        let published = Self::on(
            one_thread_session(env, model, MODEL_FILE)?,
            VadGraph::Published,
            env,
            model,
        );
        if graph == VadGraph::Published {
            return Ok(published);
        }
        let lean = read_model_file(model, MODEL_FILE)
            .and_then(|bytes| crate::vad_graph::lean_silero_8k(&bytes))
            .and_then(|bytes| one_thread_session_from_memory(env, &bytes, MODEL_FILE));
        let mut published = published;
        let mut lean = match lean {
            Ok(session) => Self::on(session, VadGraph::Lean, env, model),
            Err(e) => {
                tracing::warn!(error = %e, "Silero VAD: no lean 8 kHz graph from this model; running the published graph");
                return Ok(published);
            }
        };
        match agreement_check(&mut published, &mut lean)? {
            // The published session goes here: `probabilities` loads it again only if a
            // 16 kHz recording asks for it.
            None => Ok(lean),
            Some(difference) => {
                tracing::warn!(%difference, "Silero VAD: the lean 8 kHz graph differs from the published one; running the published graph");
                Ok(published)
            }
        }
    }

    fn on(session: Session, graph: VadGraph, env: &Environment, model: &Path) -> Self {
        Self {
            session,
            published: None,
            graph,
            env: env.clone(),
            model: model.to_path_buf(),
            input: Vec::new(),
            state: Vec::new(),
            probabilities: Vec::new(),
        }
    }

    /// The graph 8 kHz chunks run on.
    pub fn graph(&self) -> VadGraph {
        self.graph
    }

    /// Starts assembling a batch of `b` rows (low-level API for callers that keep their streams in
    /// their own structures): then [`SileroVad::set_row`] each row, [`SileroVad::run`], and
    /// [`SileroVad::finish_row`] each row.
    pub fn begin_batch(&mut self, b: usize) {
        self.input.clear();
        self.input.resize(b * VAD_ROW, 0.0);
        self.state.clear();
        self.state.resize(b * VAD_STATE, 0.0);
        self.probabilities.clear();
    }

    /// Rows in the batch being assembled.
    pub fn batch_len(&self) -> usize {
        self.input.len() / VAD_ROW
    }

    /// Fills row `i` from a stream and its next 256-sample chunk.
    pub fn set_row(&mut self, i: usize, stream: &VadStream, chunk: &[f32]) -> Result<()> {
        let b = self.batch_len();
        if i >= b || chunk.len() != VAD_CHUNK_SAMPLES {
            return Err(Error::UnsupportedAudio(format!(
                "VAD row {i} of {b} with a chunk of {} samples; the 8 kHz model takes {VAD_CHUNK_SAMPLES}",
                chunk.len()
            )));
        }
        let row = &mut self.input[i * VAD_ROW..(i + 1) * VAD_ROW];
        row[..VAD_CONTEXT_SAMPLES].copy_from_slice(&stream.context);
        row[VAD_CONTEXT_SAMPLES..].copy_from_slice(chunk);
        // [2, B, 128]: h of every row first, then c of every row.
        self.state[i * HALF_STATE..(i + 1) * HALF_STATE]
            .copy_from_slice(&stream.state[..HALF_STATE]);
        self.state[(b + i) * HALF_STATE..(b + i + 1) * HALF_STATE]
            .copy_from_slice(&stream.state[HALF_STATE..]);
        Ok(())
    }

    /// Runs the assembled batch; the new states wait in the pool's buffer for `finish_row`.
    pub fn run(&mut self) -> Result<()> {
        let b = self.batch_len();
        self.probabilities.clear();
        if b == 0 {
            return Ok(());
        }
        let sr = [i64::from(ontime_rtp::SAMPLE_RATE_HZ)];
        let outputs = self
            .session
            .run(ort::inputs![
                TensorRef::from_array_view(([b, VAD_ROW], &self.input[..]))
                    .map_err(Error::ort("VAD input tensor"))?,
                TensorRef::from_array_view(([2, b, HALF_STATE], &self.state[..]))
                    .map_err(Error::ort("VAD state tensor"))?,
                TensorRef::from_array_view(((), &sr[..])).map_err(Error::ort("VAD sr tensor"))?,
            ])
            .map_err(Error::ort("Silero VAD run"))?;
        let (_, probs) = outputs["output"]
            .try_extract_tensor::<f32>()
            .map_err(Error::ort("VAD output"))?;
        let (_, state_n) = outputs["stateN"]
            .try_extract_tensor::<f32>()
            .map_err(Error::ort("VAD stateN"))?;
        if probs.len() != b || state_n.len() != b * VAD_STATE {
            return Err(Error::BadModelOutput {
                model: MODEL,
                what: format!(
                    "{} probabilities and {} state values for a batch of {b}",
                    probs.len(),
                    state_n.len()
                ),
            });
        }
        self.probabilities.extend_from_slice(probs);
        // The input buffer is rebuilt per batch: keep the new state in `state`.
        self.state.copy_from_slice(state_n);
        Ok(())
    }

    /// After [`SileroVad::run`]: row `i`'s probability; stores the row's new state and context
    /// (the last 32 samples of `chunk`) into `stream`.
    pub fn finish_row(&self, i: usize, stream: &mut VadStream) -> Result<f32> {
        let b = self.batch_len();
        let Some(&p) = self.probabilities.get(i) else {
            return Err(Error::UnsupportedAudio(format!(
                "VAD row {i} of {b} has no result"
            )));
        };
        stream.state[..HALF_STATE]
            .copy_from_slice(&self.state[i * HALF_STATE..(i + 1) * HALF_STATE]);
        stream.state[HALF_STATE..]
            .copy_from_slice(&self.state[(b + i) * HALF_STATE..(b + i + 1) * HALF_STATE]);
        let row = &self.input[i * VAD_ROW..(i + 1) * VAD_ROW];
        stream
            .context
            .copy_from_slice(&row[VAD_ROW - VAD_CONTEXT_SAMPLES..]);
        Ok(p)
    }

    /// Runs one chunk of each stream in one batch: `chunks[i]` (256 samples, f32) belongs to
    /// `streams[i]`. Updates each stream's context and state and returns the probabilities in
    /// order. Rows are independent: the result equals running each stream alone.
    pub fn run_batch(
        &mut self,
        streams: &mut [&mut VadStream],
        chunks: &[&[f32]],
    ) -> Result<Vec<f32>> {
        if chunks.len() != streams.len() {
            return Err(Error::UnsupportedAudio(format!(
                "{} chunks for {} VAD streams",
                chunks.len(),
                streams.len()
            )));
        }
        self.begin_batch(streams.len());
        for (i, (stream, chunk)) in streams.iter().zip(chunks).enumerate() {
            self.set_row(i, stream, chunk)?;
        }
        self.run()?;
        streams
            .iter_mut()
            .enumerate()
            .map(|(i, stream)| self.finish_row(i, stream))
            .collect()
    }

    /// Runs one chunk of one stream (a batch of 1).
    pub fn run_one(&mut self, stream: &mut VadStream, chunk: &[f32]) -> Result<f32> {
        self.begin_batch(1);
        self.set_row(0, stream, chunk)?;
        self.run()?;
        self.finish_row(0, stream)
    }

    /// Probabilities of every whole chunk of a mono recording at 8 kHz (256-sample chunks, the
    /// pool's path) or 16 kHz (512-sample chunks with 64 samples of context, silero's 16 kHz
    /// mode), from a fresh stream; a trailing partial chunk is left out.
    pub fn probabilities(&mut self, pcm: &[i16], sample_rate_hz: u32) -> Result<Vec<f32>> {
        if sample_rate_hz == ontime_rtp::SAMPLE_RATE_HZ {
            let mut stream = VadStream::default();
            let mut chunk = [0.0f32; VAD_CHUNK_SAMPLES];
            let mut out = Vec::with_capacity(pcm.len() / VAD_CHUNK_SAMPLES);
            for block in pcm.chunks_exact(VAD_CHUNK_SAMPLES) {
                pcm_to_f32(block, &mut chunk);
                out.push(self.run_one(&mut stream, &chunk)?);
            }
            return Ok(out);
        }
        if sample_rate_hz != 16_000 {
            return Err(Error::UnsupportedAudio(format!(
                "Silero VAD at {sample_rate_hz} Hz; 8000 or 16000 supported"
            )));
        }
        const CHUNK: usize = 2 * VAD_CHUNK_SAMPLES;
        const CONTEXT: usize = 2 * VAD_CONTEXT_SAMPLES;
        let mut input = vec![0.0f32; CONTEXT + CHUNK];
        let mut state = vec![0.0f32; VAD_STATE];
        let sr = [16_000i64];
        let mut out = Vec::with_capacity(pcm.len() / CHUNK);
        for block in pcm.chunks_exact(CHUNK) {
            input.copy_within(CHUNK.., 0);
            pcm_to_f32(block, &mut input[CONTEXT..]);
            let session = match (self.graph, &mut self.published) {
                (VadGraph::Published, _) => &mut self.session,
                (VadGraph::Lean, Some(published)) => published,
                (VadGraph::Lean, published @ None) => {
                    published.insert(one_thread_session(&self.env, &self.model, MODEL_FILE)?)
                }
            };
            let outputs = session
                .run(ort::inputs![
                    TensorRef::from_array_view(([1, CONTEXT + CHUNK], &input[..]))
                        .map_err(Error::ort("VAD input tensor"))?,
                    TensorRef::from_array_view(([2, 1, HALF_STATE], &state[..]))
                        .map_err(Error::ort("VAD state tensor"))?,
                    TensorRef::from_array_view(((), &sr[..]))
                        .map_err(Error::ort("VAD sr tensor"))?,
                ])
                .map_err(Error::ort("Silero VAD run"))?;
            let (_, p) = outputs["output"]
                .try_extract_tensor::<f32>()
                .map_err(Error::ort("VAD output"))?;
            let (_, s) = outputs["stateN"]
                .try_extract_tensor::<f32>()
                .map_err(Error::ort("VAD stateN"))?;
            match (p, s.len()) {
                ([p], VAD_STATE) => {
                    out.push(*p);
                    state.copy_from_slice(s);
                }
                _ => {
                    return Err(Error::BadModelOutput {
                        model: MODEL,
                        what: format!("{} probabilities and {} state values", p.len(), s.len()),
                    })
                }
            }
        }
        Ok(out)
    }
}

/// Where two VAD sessions part on a fixed input, or `None` when every probability and state
/// value is the same bit for bit: streams of 1 and 3 rows, 40 chunks each with states carried,
/// of a deterministic signal that is silent, then quiet noise, then loud tones and noise, so
/// the recurrent state goes through the ranges calls take it through.
pub fn agreement_check(a: &mut SileroVad, b: &mut SileroVad) -> Result<Option<String>> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    for rows in [1usize, 3] {
        let mut streams_a = vec![VadStream::default(); rows];
        let mut streams_b = vec![VadStream::default(); rows];
        for k in 0..40 {
            let chunks: Vec<Vec<f32>> = (0..rows)
                .map(|r| {
                    (0..VAD_CHUNK_SAMPLES)
                        .map(|n| {
                            let t = (k * VAD_CHUNK_SAMPLES + n) as f32 / 8000.0;
                            match (k + 3 * r) % 20 {
                                0..=3 => 0.0,
                                4..=7 => 0.003 * noise(),
                                _ => {
                                    0.4 * (2.0
                                        * std::f32::consts::PI
                                        * (140.0 + 40.0 * r as f32)
                                        * t)
                                        .sin()
                                        + 0.1 * noise()
                                }
                            }
                        })
                        .collect()
                })
                .collect();
            let chunk_refs: Vec<&[f32]> = chunks.iter().map(Vec::as_slice).collect();
            let pa = a.run_batch(&mut streams_a.iter_mut().collect::<Vec<_>>(), &chunk_refs)?;
            let pb = b.run_batch(&mut streams_b.iter_mut().collect::<Vec<_>>(), &chunk_refs)?;
            let same_p = pa.iter().zip(&pb).all(|(x, y)| x.to_bits() == y.to_bits());
            let same_state = streams_a.iter().zip(&streams_b).all(|(x, y)| {
                x.state
                    .iter()
                    .zip(&y.state)
                    .all(|(p, q)| p.to_bits() == q.to_bits())
            });
            if !same_p || !same_state {
                return Ok(Some(format!(
                    "batch of {rows}, chunk {k}: probabilities {pa:?} against {pb:?}{}",
                    if same_state { "" } else { ", states differ" }
                )));
            }
        }
    }
    Ok(None)
}
