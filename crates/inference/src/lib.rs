//! # ontime-inference
//!
//! Owns all model work: one OS thread running ONNX Runtime sessions (one per model per process)
//! with intra-op = inter-op = 1 thread: Silero VAD batched across every call, and Smart Turn v3
//! on Whisper log-mel features computed in Rust, never starting a job that would overrun the
//! container's CPU quota in the current CFS period.
