//! Smart Turn v3.2: the session, and the per-call turn audio buffer (sans-IO).

use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;

use ort::environment::Environment;
use ort::session::Session;
use ort::value::TensorRef;

use crate::attention_matmul::{Dims, QuantisedMatMul};
use crate::attention_softmax::{
    lookup_table, output_multiplier, reproducible, softmax_u8, ShiftLog,
};
use crate::features::{MelFrontend, N_FRAMES, N_MELS, TURN_SAMPLE_RATE_HZ};
use crate::resample::upsample_2x;
use crate::runtime::{
    one_thread_builder, one_thread_session, one_thread_session_from_memory, read_model_file,
};
use crate::turn_graph::{
    own_attention_products, own_softmax_kernel, QuantisedProduct, QuantisedSoftmax,
};
use crate::{Error, Result};

const MODEL: &str = "Smart Turn v3.2";
const MODEL_FILE: &str = "Smart Turn v3.2 model";
/// The attention layers of Smart Turn v3.2 (Whisper tiny's encoder): the softmaxes
/// [`TurnGraph::FloatAttentionSoftmax`] rewires and [`TurnGraph::OwnSoftmaxKernel`] replaces.
const ATTENTION_LAYERS: usize = 4;
/// The length of an attention softmax's rows: the encoder's time steps, its second
/// convolution halving the 800 feature frames.
pub const ATTENTION_LENGTH: usize = N_FRAMES / 2;

/// Which graph the Smart Turn session runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TurnGraph {
    /// The published graph with its attention layers' quantised softmaxes and products of two
    /// activations (`Q·Kᵀ`, `P·V`) on ontime's kernels ([`crate::attention_softmax`],
    /// [`crate::attention_matmul`]): the same bytes as ONNX Runtime's `QLinearSoftmax` and
    /// `QLinearMatMul`, so the same probabilities, bit for bit, for less CPU. Each kernel is used
    /// only when it gives ONNX Runtime's bytes on the model's own chains at load
    /// ([`softmax_agreement`], [`product_agreement`]); otherwise ONNX Runtime's runs, with a
    /// warning ([`SmartTurn::graph`] says which graph runs).
    #[default]
    OwnAttentionKernels,
    /// Only the attention softmaxes on ontime's kernel (as [`TurnGraph::OwnAttentionKernels`]
    /// less the products): what the default falls back to where the products' kernel cannot
    /// run (no AVX-512 VNNI) or differs from ONNX Runtime's.
    OwnSoftmaxKernel,
    /// The model as published, run as ONNX Runtime optimises it (and as pipecat runs it):
    /// probabilities bit-identical to the Python reference.
    Published,
    /// The attention scores stay in float into the softmax ([`crate::turn_graph`]): about a
    /// fifth less CPU per run, verdicts of a slightly different arithmetic.
    FloatAttentionSoftmax,
}

/// The Smart Turn session, its feature front end and reusable buffers.
pub struct SmartTurn {
    session: Session,
    graph: TurnGraph,
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
    /// Loads the model on a one-thread session, its attention softmaxes and products on
    /// ontime's kernels where they give ONNX Runtime's bytes ([`TurnGraph::OwnAttentionKernels`]).
    pub fn load(env: &Environment, model: &Path) -> Result<Self> {
        Self::load_graph(env, model, TurnGraph::OwnAttentionKernels)
    }

    /// Loads the model on a one-thread session, its graph as `graph` says.
    pub fn load_graph(env: &Environment, model: &Path, graph: TurnGraph) -> Result<Self> {
        let (session, graph) = match graph {
            TurnGraph::Published => (
                one_thread_session(env, model, MODEL_FILE)?,
                TurnGraph::Published,
            ),
            wanted @ (TurnGraph::OwnAttentionKernels | TurnGraph::OwnSoftmaxKernel) => {
                let bytes = read_model_file(model, MODEL_FILE)?;
                match own_kernel_session(env, &bytes, wanted == TurnGraph::OwnAttentionKernels) {
                    Ok(ran) => ran,
                    Err(e) => {
                        tracing::warn!(error = %e, "Smart Turn: the attention softmax stays on ONNX Runtime's kernel");
                        (
                            one_thread_session_from_memory(env, &bytes, MODEL_FILE)?,
                            TurnGraph::Published,
                        )
                    }
                }
            }
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
                (
                    one_thread_session_from_memory(env, &edited, MODEL_FILE)?,
                    TurnGraph::FloatAttentionSoftmax,
                )
            }
        };
        Ok(Self {
            session,
            graph,
            mel: MelFrontend::new(),
            audio: Vec::new(),
            upsampled: Vec::new(),
            features: Vec::new(),
        })
    }

    /// The graph the session runs.
    pub fn graph(&self) -> TurnGraph {
        self.graph
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

/// The session on the published graph with its attention softmaxes on ontime's kernel, if
/// [`softmax_agreement`] finds the kernel identical to ONNX Runtime's for this model and
/// runtime (otherwise an error saying why not), and, if `products` asks, its attention
/// products too where [`product_agreement`] finds that kernel identical (otherwise they stay
/// on ONNX Runtime's, with a warning); with the graph that runs.
fn own_kernel_session(
    env: &Environment,
    model: &[u8],
    products: bool,
) -> Result<(Session, TurnGraph)> {
    // Edited once with the shift ONNX Runtime's source asks for; again only if the comparison
    // finds the runtime does otherwise.
    let (edited, chains) = own_softmax_kernel(model, ShiftLog::Single)?;
    let agreement = compare_chains(env, &chains)?;
    let edited = match agreement.identical() {
        Some(ShiftLog::Single) => edited,
        Some(other) => own_softmax_kernel(model, other)?.0,
        None => {
            return Err(Error::ModelFormat(format!(
                "ontime's attention softmax differs from ONNX Runtime's: {agreement:?}"
            )))
        }
    };
    let (edited, graph) = if !products {
        (edited, TurnGraph::OwnSoftmaxKernel)
    } else if !crate::attention_matmul::fast_path_available() {
        // Not a fault: ontime's kernel is only faster with VNNI.
        tracing::info!(
            "Smart Turn: the attention products stay on ONNX Runtime's kernel (this CPU has no \
             AVX-512 VNNI)"
        );
        (edited, TurnGraph::OwnSoftmaxKernel)
    } else {
        match with_own_products(env, &edited) {
            Ok(with_products) => (with_products, TurnGraph::OwnAttentionKernels),
            Err(e) => {
                tracing::warn!(error = %e, "Smart Turn: the attention products stay on ONNX Runtime's kernel");
                (edited, TurnGraph::OwnSoftmaxKernel)
            }
        }
    };
    let session = one_thread_builder(env)?
        .with_operators(crate::softmax_op::domain()?)
        .map_err(Error::ort("registering the attention operators"))?
        .commit_from_memory(&edited)
        .map_err(Error::ort(MODEL_FILE))?;
    Ok((session, graph))
}

/// `model` with its attention products on ontime's kernel, if [`product_agreement`] finds it
/// identical to ONNX Runtime's on every chain.
fn with_own_products(env: &Environment, model: &[u8]) -> Result<Vec<u8>> {
    let (edited, chains) = own_attention_products(model)?;
    let agreement = compare_products(env, &chains)?;
    if agreement.identical() {
        Ok(edited)
    } else {
        Err(Error::ModelFormat(format!(
            "ontime's attention products differ from ONNX Runtime's: {agreement:?}"
        )))
    }
}

/// How ontime's attention product kernel compared with ONNX Runtime's `QLinearMatMul` on one
/// model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductAgreement {
    /// The quantised products of two activations found (Smart Turn v3.2 has two per attention
    /// layer).
    pub chains: usize,
    /// Bytes compared, over every chain.
    pub bytes_compared: usize,
    /// Of those, the bytes that differ.
    pub differing: usize,
}

impl ProductAgreement {
    /// Every byte of every chain the same, on a model with Smart Turn v3.2's chains.
    pub fn identical(&self) -> bool {
        self.chains == 2 * ATTENTION_LAYERS && self.bytes_compared > 0 && self.differing == 0
    }
}

/// The shapes each product chain is compared on at load (`batch, m, k, n`): an attention
/// layer's `Q·Kᵀ` and `P·V` (six heads, 400 steps, 64 values a head), and a small odd one
/// that takes every edge of the kernel's tiles.
const PRODUCT_CHECK_SHAPES: [(usize, usize, usize, usize); 3] = [
    (6, 400, 64, ATTENTION_LENGTH),
    (6, ATTENTION_LENGTH, 400, 64),
    (2, 13, 36, 21),
];

/// Runs each quantised product of two activations of `model` alone on ONNX Runtime (which
/// fuses it into its `QLinearMatMul`, with the model's scales and zero points) and on ontime's
/// kernel, on the same pseudo-random operands of a layer's two shapes and a small odd one, and counts the bytes
/// that differ.
pub fn product_agreement(env: &Environment, model: &[u8]) -> Result<ProductAgreement> {
    compare_products(env, &own_attention_products(model)?.1)
}

/// [`product_agreement`] on chains already found.
fn compare_products(env: &Environment, chains: &[QuantisedProduct]) -> Result<ProductAgreement> {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut kernel = QuantisedMatMul::new();
    let (mut bytes_compared, mut differing) = (0, 0);
    for chain in chains {
        let mut reference = one_thread_session_from_memory(
            env,
            &chain.reference_model(),
            "the attention product's reference model",
        )?;
        for (batch, m, k, n) in PRODUCT_CHECK_SHAPES {
            let a: Vec<u8> = (0..batch * m * k).map(|_| (next() >> 32) as u8).collect();
            let b: Vec<u8> = (0..batch * k * n).map(|_| (next() >> 32) as u8).collect();
            let outputs = reference
                .run(ort::inputs![
                    TensorRef::from_array_view(([batch, m, k], &a[..]))
                        .map_err(Error::ort("product reference input"))?,
                    TensorRef::from_array_view(([batch, k, n], &b[..]))
                        .map_err(Error::ort("product reference input"))?
                ])
                .map_err(Error::ort("product reference run"))?;
            let (_, theirs) = outputs[0]
                .try_extract_tensor::<u8>()
                .map_err(Error::ort("product reference output"))?;
            let mut ours = vec![0u8; batch * m * n];
            let dims = Dims { batch, m, k, n };
            if theirs.len() != ours.len()
                || !kernel.run(&a, &b, dims, &chain.requantisation, &mut ours)
            {
                differing += ours.len();
            } else {
                differing += ours.iter().zip(theirs).filter(|(x, y)| x != y).count();
            }
            bytes_compared += ours.len();
        }
    }
    Ok(ProductAgreement {
        chains: chains.len(),
        bytes_compared,
        differing,
    })
}

/// How ontime's attention softmax kernel compared with ONNX Runtime's on one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftmaxAgreement {
    /// The quantised softmax chains found (Smart Turn v3.2 has one per attention layer).
    pub chains: usize,
    /// Bytes compared, over every chain.
    pub bytes_compared: usize,
    /// Rows among them on which the two [`ShiftLog`]s give different bytes on ontime's kernel
    /// (found by [`telling_rows`]): the comparison can tell them apart only on such rows.
    pub telling_rows: usize,
    /// For each way of evaluating the table's shift, the bytes (over every chain) that differ
    /// from ONNX Runtime's kernel.
    pub differing: Vec<(ShiftLog, usize)>,
}

impl SoftmaxAgreement {
    /// The shift evaluation that gave every byte of every chain, if the model has the chains
    /// Smart Turn v3.2 has. When both did (no row told them apart), [`ShiftLog::Single`]: what
    /// ONNX Runtime's source asks for (`log` of a `float` is `std::log(float)`), and what its
    /// pinned build was found to do (`tests/own_softmax.rs`).
    pub fn identical(&self) -> Option<ShiftLog> {
        if self.chains != ATTENTION_LAYERS {
            return None;
        }
        let matching: Vec<ShiftLog> = self
            .differing
            .iter()
            .filter(|(_, n)| *n == 0)
            .map(|(log, _)| *log)
            .collect();
        match matching[..] {
            [only] => Some(only),
            [] => None,
            _ => Some(ShiftLog::Single),
        }
    }
}

/// Rows per chain of [`check_rows`] in the load-time comparison (a layer has 2 400).
const CHECK_ROWS: usize = 1_200;
/// Candidate rows per chain [`telling_rows`] tries at load (about 10 ms each thousand).
const TELLING_CANDIDATES: usize = 6_000;

/// Runs each quantised attention softmax chain of `model` alone on ONNX Runtime (which fuses it
/// into its own `QLinearSoftmax`, with the model's scales) and on ontime's kernel with each
/// [`ShiftLog`], on the same rows ([`check_rows`] and, for the chain's scales,
/// [`telling_rows`]), and counts the bytes that differ.
pub fn softmax_agreement(env: &Environment, model: &[u8]) -> Result<SoftmaxAgreement> {
    compare_chains(env, &own_softmax_kernel(model, ShiftLog::Single)?.1)
}

/// [`softmax_agreement`] on chains already found.
fn compare_chains(env: &Environment, chains: &[QuantisedSoftmax]) -> Result<SoftmaxAgreement> {
    let mut differing: Vec<(ShiftLog, usize)> = ShiftLog::ALL.iter().map(|&l| (l, 0)).collect();
    let mut bytes_compared = 0;
    let mut telling = 0;
    let mut scratch = Vec::new();
    for chain in chains {
        let multiplier = output_multiplier(chain.y_scale);
        let d = ATTENTION_LENGTH;
        let tables = ShiftLog::ALL.map(|log| lookup_table(chain.x_scale, d, log));
        let mut x = check_rows(CHECK_ROWS, d);
        let told = telling_rows(
            &tables,
            multiplier,
            chain.y_zero_point,
            d,
            TELLING_CANDIDATES,
        );
        telling += told.len() / d;
        x.extend(told);
        let theirs = reference_softmax(env, chain, d, &x)?;
        let mut ours = vec![0u8; x.len()];
        for ((_, count), table) in differing.iter_mut().zip(&tables) {
            if !reproducible(table, multiplier)
                || theirs.len() != x.len()
                || !softmax_u8(
                    &x,
                    d,
                    table,
                    multiplier,
                    chain.y_zero_point,
                    &mut ours,
                    &mut scratch,
                )
            {
                *count += x.len();
                continue;
            }
            *count += ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        }
        bytes_compared += x.len();
    }
    Ok(SoftmaxAgreement {
        chains: chains.len(),
        bytes_compared,
        telling_rows: telling,
        differing,
    })
}

/// ONNX Runtime's bytes for rows `x` of length `d` through `chain` alone.
fn reference_softmax(
    env: &Environment,
    chain: &QuantisedSoftmax,
    d: usize,
    x: &[u8],
) -> Result<Vec<u8>> {
    let mut reference = one_thread_session_from_memory(
        env,
        &chain.reference_model(d),
        "the attention softmax's reference model",
    )?;
    let outputs = reference
        .run(ort::inputs![TensorRef::from_array_view((
            [x.len() / d, d],
            x
        ))
        .map_err(Error::ort("softmax reference input"))?])
        .map_err(Error::ort("softmax reference run"))?;
    let (_, theirs) = outputs[0]
        .try_extract_tensor::<u8>()
        .map_err(Error::ort("softmax reference output"))?;
    Ok(theirs.to_vec())
}

/// A deterministic pseudo-random stream (xorshift), so every load compares the same rows.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// `rows` rows of `d` uint8 attention scores: narrow and wide spreads at every level and
/// single peaks over a floor, so the table's every entry and both saturation ends are read.
pub fn check_rows(rows: usize, d: usize) -> Vec<u8> {
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let mut x = Vec::with_capacity(rows * d);
    for r in 0..rows {
        let centre = (r * 37 % 256) as i64;
        let spread = [1i64, 4, 12, 30, 64, 128][r % 6];
        let peak = r % 7 == 3;
        for j in 0..d {
            let v = if peak {
                if j == r % d {
                    255
                } else {
                    centre / 2
                }
            } else {
                centre + (next() % (2 * spread as u64 + 1)) as i64 - spread
            };
            x.push(v.clamp(0, 255) as u8);
        }
    }
    x
}

/// The rows of `d` values, among `candidates` from a fixed search, on which the kernel gives
/// different bytes with the two `tables` (one per [`ShiftLog`]): rows with a few values at the
/// top and the rest some way below, so that the top values' quotients fall mid-range, where a
/// change of a few units in the last place of the row's sum moves a rounding. Such rows are
/// rare (a few in ten thousand here): the two tables differ by a common factor, which cancels
/// out of every quotient but for rounding.
pub fn telling_rows(
    tables: &[[f32; 256]; 2],
    multiplier: f32,
    zero_point: u8,
    d: usize,
    candidates: usize,
) -> Vec<u8> {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let mut found = Vec::new();
    let mut row = vec![0u8; d];
    let mut a = vec![0u8; d];
    let mut b = vec![0u8; d];
    let mut scratch = Vec::new();
    if !tables.iter().all(|t| reproducible(t, multiplier)) {
        return found;
    }
    for _ in 0..candidates {
        let gap = 10 + (next() % 40) as i64;
        let width = (next() % 16) as i64;
        for v in row.iter_mut() {
            let level = 255 - gap + (next() % (2 * width as u64 + 1)) as i64 - width;
            *v = level.clamp(0, 255) as u8;
        }
        for _ in 0..1 + next() % 4 {
            let j = (next() % d as u64) as usize;
            row[j] = 255 - (next() % 3) as u8;
        }
        let told_apart = softmax_u8(
            &row,
            d,
            &tables[0],
            multiplier,
            zero_point,
            &mut a,
            &mut scratch,
        ) && softmax_u8(
            &row,
            d,
            &tables[1],
            multiplier,
            zero_point,
            &mut b,
            &mut scratch,
        ) && a != b;
        if told_apart {
            found.extend_from_slice(&row);
        }
    }
    found
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
