//! Metric names (`ontime_inference_*`, relied on by dashboards and alerts) and their registration.

/// Queue wait before a model run, by `model` (histogram, seconds).
pub const QUEUE_WAIT_SECONDS: &str = "ontime_inference_queue_wait_seconds";
/// Model run time (features included for Smart Turn), by `model` (histogram, seconds).
pub const RUN_SECONDS: &str = "ontime_inference_run_seconds";
/// Jobs run, by `model`: VAD chunks (batch rows), Smart Turn inferences (counter).
pub const JOBS_TOTAL: &str = "ontime_inference_jobs_total";
/// Jobs deferred to the next CFS window by the CPU budget (counter).
pub const BUDGET_DEFERRALS_TOTAL: &str = "ontime_inference_budget_deferrals_total";
/// Audio pushes rejected because the queue was full (counter).
pub const QUEUE_FULL_TOTAL: &str = "ontime_inference_queue_full_total";

/// Speculative Smart Turn verdicts by `outcome`: `used` (it was the turn's verdict),
/// `discarded` (speech resumed or it did not cover the confirmed turn), `skipped` (not run: no CPU
/// budget left) (counter).
pub const TURN_SPECULATIVE_TOTAL: &str = "ontime_inference_turn_speculative_total";
/// Turns ended early by a confident speculative verdict, before the full stop duration (counter).
pub const TURN_EARLY_END_TOTAL: &str = "ontime_inference_turn_early_end_total";
/// Smart Turn inferences on a wideband call's own 16 kHz audio (the others judge 8 kHz audio
/// upsampled) (counter).
pub const TURN_WIDEBAND_TOTAL: &str = "ontime_inference_turn_wideband_total";

/// The `model` label of Silero VAD.
pub const MODEL_VAD: &str = "silero_vad";
/// The `model` label of Smart Turn.
pub const MODEL_TURN: &str = "smart_turn";

/// Describes every inference metric and registers it at zero, so dashboards see 0, not absence.
/// [`crate::InferencePool::start`] calls it; calling it again is harmless.
pub fn describe_metrics() {
    use metrics::{counter, describe_counter, describe_histogram, histogram, Unit};
    describe_histogram!(
        QUEUE_WAIT_SECONDS,
        Unit::Seconds,
        "Time a job waited for the inference thread"
    );
    describe_histogram!(
        RUN_SECONDS,
        Unit::Seconds,
        "Model run time on the inference thread"
    );
    describe_counter!(
        JOBS_TOTAL,
        "Inference jobs run (VAD: chunks; Smart Turn: inferences)"
    );
    describe_counter!(
        BUDGET_DEFERRALS_TOTAL,
        "Inference jobs deferred to the next CFS window by the CPU budget"
    );
    describe_counter!(
        QUEUE_FULL_TOTAL,
        "Audio pushes rejected: inference queue full"
    );
    for model in [MODEL_VAD, MODEL_TURN] {
        counter!(JOBS_TOTAL, "model" => model).increment(0);
        // Touch the histograms so the series exist.
        let _ = histogram!(QUEUE_WAIT_SECONDS, "model" => model);
        let _ = histogram!(RUN_SECONDS, "model" => model);
    }
    describe_counter!(
        TURN_WIDEBAND_TOTAL,
        "Smart Turn inferences on a wideband call's own 16 kHz audio"
    );
    counter!(TURN_WIDEBAND_TOTAL).increment(0);
    describe_counter!(
        TURN_SPECULATIVE_TOTAL,
        "Speculative Smart Turn verdicts, by outcome (used, discarded, skipped)"
    );
    describe_counter!(
        TURN_EARLY_END_TOTAL,
        "Turns ended by a confident speculative verdict before the full stop duration"
    );
    for outcome in ["used", "discarded", "skipped"] {
        counter!(TURN_SPECULATIVE_TOTAL, "outcome" => outcome).increment(0);
    }
    counter!(TURN_EARLY_END_TOTAL).increment(0);
    counter!(BUDGET_DEFERRALS_TOTAL).increment(0);
    counter!(QUEUE_FULL_TOTAL).increment(0);
}
