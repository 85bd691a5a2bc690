//! The crate's one error type.

use std::path::PathBuf;

/// What went wrong in `ontime-inference`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A runtime library or model file is not where the configuration says.
    #[error(
        "{what} not found at {path}: run `scripts/fetch-models.sh` (or set {})",
        override_hint(env_var)
    )]
    MissingFile {
        /// Which file ("ONNX Runtime library", "Silero VAD model", ...).
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// The environment variable that overrides the path.
        env_var: &'static str,
    },
    /// ONNX Runtime could not be loaded or initialised.
    #[error("loading ONNX Runtime from {path}: {message}")]
    RuntimeLoad {
        /// The library path tried.
        path: PathBuf,
        /// ONNX Runtime's or the loader's message.
        message: String,
    },
    /// ONNX Runtime refused a session option, a model or a run.
    #[error("ONNX Runtime ({context}): {message}")]
    Ort {
        /// What the pool was doing.
        context: &'static str,
        /// ONNX Runtime's message.
        message: String,
    },
    /// A model returned an output of an unexpected shape or type.
    #[error("{model} returned {what}")]
    BadModelOutput {
        /// The model.
        model: &'static str,
        /// What was unexpected.
        what: String,
    },
    /// A model file exists but could not be read.
    #[error("reading the model at {path}: {source}")]
    ModelRead {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A model file's bytes are not the protobuf an edit of its graph expects.
    #[error("the model is not a well-formed ONNX protobuf: {0}")]
    ModelFormat(String),
    /// The inference queue is full; the job was dropped (counted), the caller was not blocked.
    #[error("inference queue full ({capacity} jobs): job dropped")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
    /// The inference thread has stopped (shut down or failed).
    #[error("the inference thread has stopped")]
    PoolStopped,
    /// A configuration value is out of range.
    #[error("invalid inference configuration: {0}")]
    InvalidConfig(String),
    /// Audio input of an unsupported format.
    #[error("unsupported audio: {0}")]
    UnsupportedAudio(String),
    /// Reading the CPU quota from the cgroup failed.
    #[error("reading the CPU quota: {0}")]
    Cgroup(#[from] ontime_cgroup::Error),
    /// Spawning the inference thread failed.
    #[error("spawning the inference thread: {0}")]
    Spawn(#[source] std::io::Error),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an `ort` error with what the pool was doing.
    pub(crate) fn ort<R>(context: &'static str) -> impl FnOnce(ort::Error<R>) -> Error {
        move |e| Error::Ort {
            context,
            message: e.to_string(),
        }
    }
}

/// The variables that can point at a missing file, each named once.
fn override_hint(env_var: &str) -> String {
    if env_var == crate::env_vars::MODELS_DIR_ENV {
        env_var.to_string()
    } else {
        format!("{env_var} or {}", crate::env_vars::MODELS_DIR_ENV)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_names_each_variable_once() {
        let model = Error::MissingFile {
            what: "Silero VAD model",
            path: "/m/silero_vad.onnx".into(),
            env_var: crate::env_vars::MODELS_DIR_ENV,
        };
        assert_eq!(
            model.to_string(),
            "Silero VAD model not found at /m/silero_vad.onnx: run `scripts/fetch-models.sh` (or set ONTIME_MODELS_DIR)"
        );
        let lib = Error::MissingFile {
            what: "ONNX Runtime library",
            path: "/m/libonnxruntime.so".into(),
            env_var: crate::env_vars::ORT_DYLIB_ENV,
        };
        assert_eq!(
            lib.to_string(),
            "ONNX Runtime library not found at /m/libonnxruntime.so: run `scripts/fetch-models.sh` (or set ORT_DYLIB_PATH or ONTIME_MODELS_DIR)"
        );
    }
}
