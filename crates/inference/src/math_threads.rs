//! The process environment the inference thread needs, set before any thread starts: math
//! libraries' thread pools pinned to one thread, and ONNX Runtime's telemetry off.

/// The variables OpenMP, MKL, OpenBLAS and PyTorch read for their thread-pool sizes.
pub const MATH_THREAD_VARS: [&str; 4] = [
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TORCH_NUM_THREADS",
];

/// Sets `OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `OPENBLAS_NUM_THREADS` and `TORCH_NUM_THREADS` to 1
/// unless already set, and returns the names it set.
///
/// Call it first thing in `main`, **before any thread starts** (tokio runtime, logging, the pool):
/// modifying the environment while another thread reads it is undefined behaviour in glibc, and
/// math libraries size their pools once, when first loaded. Why: in Python voice stacks each of
/// these pools fanned out over every core, spent the container's CFS quota early in the period and froze the
/// audio clock. A period's CPU must cover the steady work plus the largest burst times the threads
/// it runs on, so one thread per library keeps that product small.
pub fn pin_math_threads_to_one() -> Vec<&'static str> {
    let mut set = Vec::new();
    for var in MATH_THREAD_VARS {
        if std::env::var_os(var).is_none() {
            std::env::set_var(var, "1");
            set.push(var);
        }
    }
    set
}

/// The variable ONNX Runtime (1.29 and later, official builds) reads once, at initialisation, to
/// turn its telemetry off completely on Linux: no uploader, no events, no device identifier, no
/// DNS lookups of the collector. `ort`'s `with_telemetry(false)` only suppresses events after the
/// uploader has started.
pub const ORT_DISABLE_TELEMETRY_VAR: &str = "ORT_DISABLE_TELEMETRY";

/// Sets `ORT_DISABLE_TELEMETRY=1` unless the variable is already set; returns whether it set it.
/// Same rule as [`pin_math_threads_to_one`]: call it first thing in `main`, before any thread
/// starts. A telephony box talks to its trunk and its bot, and to nothing else.
pub fn disable_runtime_telemetry() -> bool {
    if std::env::var_os(ORT_DISABLE_TELEMETRY_VAR).is_some() {
        return false;
    }
    std::env::set_var(ORT_DISABLE_TELEMETRY_VAR, "1");
    true
}

/// Both of the above: what a program embedding the inference pool calls first in `main`.
pub fn prepare_process_environment() {
    pin_math_threads_to_one();
    disable_runtime_telemetry();
}

/// Whether ONNX Runtime will start with its telemetry off (checked when the runtime loads, to
/// warn a host program that forgot [`disable_runtime_telemetry`]).
pub fn runtime_telemetry_disabled() -> bool {
    std::env::var_os(ORT_DISABLE_TELEMETRY_VAR).is_some_and(|v| v == "1")
}
