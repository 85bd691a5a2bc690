//! Loading ONNX Runtime (dynamically, from the PyPI wheel's library) and building sessions with
//! one thread and no spinning.

use std::path::Path;
use std::sync::OnceLock;

use ort::environment::Environment;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::session::Session;

use crate::{Error, Result};

static ENVIRONMENT: OnceLock<Environment> = OnceLock::new();

/// Loads the ONNX Runtime library at `dylib` (once per process; later calls reuse the first
/// library, whatever path they pass) and returns the process's environment.
pub fn load_runtime(dylib: &Path) -> Result<Environment> {
    if let Some(env) = ENVIRONMENT.get() {
        return Ok(env.clone());
    }
    if !dylib.is_file() {
        return Err(Error::MissingFile {
            what: "ONNX Runtime library",
            path: dylib.to_path_buf(),
            env_var: crate::config::ORT_DYLIB_ENV,
        });
    }
    if !crate::math_threads::runtime_telemetry_disabled() {
        tracing::warn!(
            "ORT_DISABLE_TELEMETRY is not 1: ONNX Runtime may look up and send to its telemetry \
             collector; call ontime_inference::disable_runtime_telemetry() first in main"
        );
    }
    let builder = ort::init_from(dylib).map_err(|e| Error::RuntimeLoad {
        path: dylib.to_path_buf(),
        message: e.to_string(),
    })?;
    // No telemetry: a telephony box talks to its trunk and its bot, nothing else.
    let env = builder
        .with_name("ontime")
        .with_telemetry(false)
        .build()
        .map_err(|e| Error::RuntimeLoad {
            path: dylib.to_path_buf(),
            message: e.to_string(),
        })?;
    Ok(ENVIRONMENT.get_or_init(|| env).clone())
}

/// A session on one thread: intra-op = inter-op = 1, sequential execution, spinning off (a
/// spinning worker burns CPU the budget cannot see coming), all graph optimisations (as Python
/// onnxruntime's default, so the reference runs the same graph).
pub fn one_thread_session(env: &Environment, model: &Path, what: &'static str) -> Result<Session> {
    model_file(model, what)?;
    one_thread_builder(env)?
        .commit_from_file(model)
        .map_err(Error::ort(what))
}

/// A model file's bytes (to edit its graph before [`one_thread_session_from_memory`]).
pub fn read_model_file(model: &Path, what: &'static str) -> Result<Vec<u8>> {
    model_file(model, what)?;
    std::fs::read(model).map_err(|source| Error::ModelRead {
        path: model.to_path_buf(),
        source,
    })
}

/// A missing model file named with the variable that moves it.
fn model_file(model: &Path, what: &'static str) -> Result<()> {
    if model.is_file() {
        return Ok(());
    }
    Err(Error::MissingFile {
        what,
        path: model.to_path_buf(),
        env_var: crate::config::MODELS_DIR_ENV,
    })
}

/// [`one_thread_session`] on a model already in memory (an edited graph).
pub fn one_thread_session_from_memory(
    env: &Environment,
    model: &[u8],
    what: &'static str,
) -> Result<Session> {
    one_thread_builder(env)?
        .commit_from_memory(model)
        .map_err(Error::ort(what))
}

/// The options of [`one_thread_session`] before a model is loaded (the `session_options`
/// example measures variants on top of them).
pub fn one_thread_builder(env: &Environment) -> Result<SessionBuilder> {
    Session::builder(env)
        .map_err(Error::ort("creating session options"))?
        .with_intra_threads(1)
        .map_err(Error::ort("intra-op threads"))?
        .with_inter_threads(1)
        .map_err(Error::ort("inter-op threads"))?
        .with_parallel_execution(false)
        .map_err(Error::ort("sequential execution"))?
        .with_intra_op_spinning(false)
        .map_err(Error::ort("session.intra_op.allow_spinning"))?
        .with_inter_op_spinning(false)
        .map_err(Error::ort("session.inter_op.allow_spinning"))?
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(Error::ort("optimisation level"))
}
