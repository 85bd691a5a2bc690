//! # ontime-inference
//!
//! Owns all model work: one OS thread running ONNX Runtime sessions (one per model per process)
//! with intra-op = inter-op = 1 thread: Silero VAD batched across every call, and Smart Turn v3
//! on Whisper log-mel features computed in Rust, never starting a job that would overrun the
//! container's CPU quota in the current CFS period.
//!
//! ```no_run
//! use ontime_inference::{prepare_process_environment, InferenceEvent, InferencePool, ModelPaths, PoolConfig};
//!
//! # fn main() -> ontime_inference::Result<()> {
//! prepare_process_environment(); // first thing in main, before any thread starts
//! let paths = ModelPaths::from_env_or(".cache/models");
//! let pool = InferencePool::start(PoolConfig::new(paths))?;
//! let (mut call, events) = pool.register_call()?;
//! call.push_pcm(&[0i16; 160])?; // 20 ms of decoded 8 kHz audio, as it arrives
//! while let Ok(event) = events.try_recv() {
//!     if let InferenceEvent::TurnEnded { complete: true, .. } = event { /* reply */ }
//! }
//! drop(call); // unregisters
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`pool`] (the thread and the per-call API), [`vad`] (Silero session, batched rows),
//! [`vad_graph`] (Silero's 8 kHz graph without its control flow), [`turn_graph`] (Smart Turn's
//! graph edits: its attention softmax on ontime's kernel, the optional float softmax),
//! [`attention_softmax`] (that kernel: ONNX Runtime's `QLinearSoftmax` bytes, eight rows at a
//! time),
//! [`speech`] (pipecat's speech state machine, sans-IO), [`turn`] (Smart Turn session and the turn
//! audio buffer), [`speculative`] (the speculative end of turn and Smart Turn job order, sans-IO),
//! [`features`] (Whisper log-mel), [`resample`] (8→16 kHz), [`budget`] (CPU per CFS window,
//! sans-IO), [`runtime`] (loading ONNX Runtime), [`config`], [`metrics`].

// The README's examples are compiled and run with the doctests, so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod attention_matmul;
pub mod attention_softmax;
pub mod budget;
pub mod config;
mod env_vars;
mod error;
pub mod features;
mod handoff;
mod math_threads;
mod matmul_op;
pub mod metrics;
mod onnx_wire;
mod op_input;
pub mod pool;
pub mod prosody;
pub mod resample;
pub mod runtime;
mod softmax_op;
pub mod speculative;
pub mod speech;
mod thread_cpu;
pub mod turn;
pub mod turn_graph;
pub mod vad;
pub mod vad_graph;

pub use budget::{BudgetDecision, CpuBudget, CpuQuota};
pub use config::{EarlyEnd, ModelPaths, PoolConfig, TurnParams};
pub use error::{Error, Result};
pub use math_threads::{
    disable_runtime_telemetry, pin_math_threads_to_one, prepare_process_environment,
    runtime_telemetry_disabled, MATH_THREAD_VARS, ORT_DISABLE_TELEMETRY_VAR,
};
pub use pool::{CallId, CallInference, InferenceEvent, InferencePool, PoolStats};
pub use speech::{SpeechDetector, SpeechState, SpeechTransition, VadParams};
pub use thread_cpu::{process_cpu_time, thread_cpu_time};
pub use turn::{SmartTurn, TurnGraph};
pub use vad::{SileroVad, VadGraph, VadStream};
