//! Pins math libraries' thread pools to one thread.

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
/// math libraries size their pools once, when first loaded. Why: in the seeds each of these pools
/// fanned out over every core, spent the container's CFS quota early in the period and froze the
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
