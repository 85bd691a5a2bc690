//! The environment variables that point at the runtime and the models. A leaf module: `config`
//! reads them and re-exports them, and `error` names them in its hints, so neither has to import
//! the other (no module cycle, `tests/module_cycles.rs` at the workspace root).

/// The environment variable naming the ONNX Runtime shared library.
pub const ORT_DYLIB_ENV: &str = "ORT_DYLIB_PATH";
/// The environment variable naming the folder holding the models (and, by default, the runtime).
pub const MODELS_DIR_ENV: &str = "ONTIME_MODELS_DIR";
