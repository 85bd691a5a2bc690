//! Per-step figures and the ok rule (every call answered or refused with 503, no call failed, no
//! unanswered turn, underruns and p95 turn latency within bounds, no sender tick more than 20 ms
//! late), as pure functions of what was recorded. The rule judges the calls the gateway admitted:
//! a gateway that refuses what it cannot carry is behaving, one that admits it and then fails the
//! callers is not.

use serde::Serialize;

/// Underruns per minute of agent audio a step may have and stay ok.
pub const MAX_UNDERRUNS_PER_MIN: f64 = 1.0;
/// How far p95 turn latency may rise above the first step's median and stay ok.
pub const LATENCY_MARGIN_MS: f64 = 300.0;

/// Least-squares slope of `(x, y)` points; `None` with fewer than two distinct x.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Nearest-rank percentile (`q` in 0..=1) of unsorted values; `None` when empty.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// One step's results: the seed's columns and ontime's.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct StepReport {
    /// Concurrent calls placed.
    pub calls: usize,
    /// Their media: `rtp` or `srtp`.
    pub media: crate::caller::Media,
    /// The step passed the ok rule.
    pub ok: bool,
    /// Why it did not (empty when ok).
    pub reasons: Vec<String>,
    /// The harness itself fell behind: the step measures the harness, not the gateway.
    pub client_bound: bool,
    /// Calls answered.
    pub answered_calls: usize,
    /// Calls the harness tried to place (callers started; `calls` unless the step was cut short).
    pub offered: usize,
    /// Calls the gateway admitted (answered 2xx): `answered_calls` again, under the name the
    /// admission view reads. `offered` = `admitted` + `refused` + the calls that failed to set
    /// up or were still unanswered when the step ended.
    pub admitted: usize,
    /// Calls the gateway refused with a final 503 (over its admission limit or headroom, or
    /// draining). Not failures: they are counted apart from `failed_calls`.
    pub refused: usize,
    /// Calls that failed to set up (any other final answer, no answer, a local error) or were
    /// dropped by the gateway once up.
    pub failed_calls: usize,
    /// Turns answered in the window.
    pub turns: usize,
    /// Turns with no agent audio within the answer timeout.
    pub unanswered_turns: usize,
    /// The same, by the utterance the caller had said.
    pub unanswered_by_utterance: std::collections::BTreeMap<String, usize>,
    /// Agent audio that began before the caller had finished (no latency sample).
    pub early_replies: usize,
    /// Mid-sentence pauses the callers made and resumed from (`--mid-pause`).
    pub paused_turns: usize,
    /// Of those, pauses in which agent audio began: the caller was cut off.
    pub replies_in_pause: usize,
    /// Answered turns by how they were said (with `--mid-pause`): with the pause, long ones in
    /// one go, and short answers; with each one's latency median, ms.
    pub paused_lat: (usize, Option<f64>),
    /// See `paused_lat`.
    pub one_go_lat: (usize, Option<f64>),
    /// See `paused_lat`.
    pub short_lat: (usize, Option<f64>),
    /// Turn latency median, ms.
    pub lat_p50_ms: Option<f64>,
    /// Turn latency p95, ms.
    pub lat_p95_ms: Option<f64>,
    /// Worst turn latency, ms.
    pub lat_max_ms: Option<f64>,
    /// Playout-buffer underruns callers heard in the window.
    pub underruns: u64,
    /// Agent audio callers heard, minutes.
    pub agent_audio_min: f64,
    /// Underruns per minute of agent audio.
    pub underruns_per_min: f64,
    /// Gateway sender ticks later than 20 ms.
    pub late_ticks: Option<u64>,
    /// Upper bound of the gateway's worst tick lateness bucket, ms.
    pub worst_tick_ms: Option<f64>,
    /// Gateway sender underruns (its rings ran dry mid-utterance).
    pub gateway_underruns: Option<u64>,
    /// Smart Turn inferences the gateway ran in the window (`ontime_inference_jobs_total`,
    /// `model="smart_turn"`): one per turn end, plus the speculative runs.
    pub smart_turn_runs: Option<u64>,
    /// Of the speculative Smart Turn verdicts, those thrown away because the caller went on
    /// (`ontime_inference_turn_speculative_total`, `outcome="discarded"`).
    pub speculative_discarded: Option<u64>,
    /// The gateway's own estimate of how many more calls fit (`ontime_admission_headroom_calls`)
    /// at the end of the measuring window, with the step's calls still up.
    pub gateway_headroom_calls: Option<f64>,
    /// p99 (bucket upper bound) of the wait for the inference thread, ms.
    pub inference_wait_p99_ms: Option<f64>,
    /// Gateway process CPU, % of one core.
    pub cpu_pct: Option<f64>,
    /// The sender thread's CPU, % of one core.
    pub sender_cpu_pct: Option<f64>,
    /// The inference thread's CPU, % of one core.
    pub inference_cpu_pct: Option<f64>,
    /// The tokio workers' CPU, % of one core.
    pub io_cpu_pct: Option<f64>,
    /// Share of CFS periods throttled.
    pub throttle_ratio: Option<f64>,
    /// Time the host took from the gateway's dedicated core over the window (its `steal` in
    /// `/proc/stat`), % of that core; only with `--cpuset`. Above a few tenths of a percent the
    /// step's CPU and lateness figures carry the host's load as well as the gateway's.
    pub core_steal_pct: Option<f64>,
    /// Peak resident memory in the window, MB (MiB).
    pub rss_mb: Option<f64>,
    /// Harness sender ticks later than 20 ms.
    pub harness_late_ticks: u64,
    /// Upper bound of the harness's worst tick lateness bucket, ms.
    pub harness_worst_tick_ms: Option<f64>,
    /// The harness's receive-loop lag p99, ms.
    pub harness_lag_p99_ms: Option<f64>,
    /// The harness's receive-loop lag max, ms.
    pub harness_lag_max_ms: Option<f64>,
    /// Length of the measuring window, s.
    pub measure_s: f64,
    /// SRTP packets from the gateway whose authentication failed, over the step's calls.
    pub srtp_auth_failures: u64,
    /// Other SRTP refusals over the step's calls (received packets replayed, too old or
    /// malformed; the callers' own packets that could not be protected).
    pub srtp_other_drops: u64,
    /// SRTP/SRTCP packets the gateway dropped in the window (`ontime_srtp_dropped_total`).
    pub gateway_srtp_drops: Option<u64>,
    /// The same by the gateway's `reason` label (only reasons with drops).
    pub gateway_srtp_drops_by_reason: std::collections::BTreeMap<String, u64>,
}

impl StepReport {
    /// Apply the ok rule with `baseline_p50_ms` (the first step's median turn latency) and set
    /// `ok`, `reasons` and `client_bound`.
    pub fn judge(&mut self, baseline_p50_ms: Option<f64>) {
        let mut reasons = Vec::new();
        // Judged over the admitted calls: a 503 is the gateway declining load it says it cannot
        // carry, which is what admission control is for, so refusals alone never fail a step.
        // A call neither admitted nor refused (failed, or never answered) still does, and so
        // does a step with nothing admitted: it measured nothing.
        if self.failed_calls > 0 || self.admitted + self.refused < self.calls || self.admitted == 0
        {
            reasons.push(format!(
                "{} of {} calls answered, {} refused, {} failed",
                self.admitted, self.calls, self.refused, self.failed_calls
            ));
        }
        if self.unanswered_turns > 0 {
            reasons.push(format!("{} unanswered turns", self.unanswered_turns));
        }
        if self.turns == 0 {
            reasons.push("no answered turn in the window".into());
        }
        if self.underruns_per_min > MAX_UNDERRUNS_PER_MIN {
            reasons.push(format!(
                "{:.2} underruns per minute of agent audio (> {MAX_UNDERRUNS_PER_MIN})",
                self.underruns_per_min
            ));
        }
        if let (Some(p95), Some(base)) = (self.lat_p95_ms, baseline_p50_ms) {
            if p95 > base + LATENCY_MARGIN_MS {
                reasons.push(format!(
                    "p95 turn latency {p95:.0} ms > first step's median {base:.0} + {LATENCY_MARGIN_MS:.0} ms"
                ));
            }
        }
        // A refused packet is one the other side protected wrongly (or an attack): never ok.
        let srtp_drops = self.srtp_auth_failures + self.srtp_other_drops;
        if srtp_drops > 0 {
            reasons.push(format!(
                "{srtp_drops} SRTP packets from the gateway refused ({} failed authentication)",
                self.srtp_auth_failures
            ));
        }
        if let Some(drops) = self.gateway_srtp_drops.filter(|&d| d > 0) {
            reasons.push(format!("{drops} SRTP packets dropped by the gateway"));
        }
        if let Some(late) = self.late_ticks.filter(|&l| l > 0) {
            reasons.push(format!(
                "{late} gateway sender ticks late by more than 20 ms"
            ));
        }
        // The callers' clock is the harness's sender; arrivals carry kernel timestamps, so the
        // runtime's own lag (reported) does not bend what callers heard.
        self.client_bound = self.harness_late_ticks > 0;
        self.ok = reasons.is_empty();
        self.reasons = reasons;
    }
}

/// The most calls carried cleanly: the largest number admitted in a step with every step up to
/// it ok (steps in the order run), and the first step that was not ok. Admitted, not offered: an
/// ok step whose excess was refused carried only what it admitted (without refusals the two
/// are the step's N).
pub fn capacity(steps: &[StepReport]) -> (usize, Option<&StepReport>) {
    let mut cap = 0;
    for s in steps {
        if !s.ok {
            return (cap, Some(s));
        }
        cap = cap.max(s.admitted);
    }
    (cap, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good(calls: usize) -> StepReport {
        StepReport {
            calls,
            answered_calls: calls,
            offered: calls,
            admitted: calls,
            turns: 10,
            lat_p50_ms: Some(400.0),
            lat_p95_ms: Some(500.0),
            late_ticks: Some(0),
            ..Default::default()
        }
    }

    #[test]
    fn percentiles() {
        assert_eq!(percentile(&[], 0.5), None);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.95), Some(95.0));
        assert_eq!(percentile(&v, 1.0), Some(100.0));
        assert_eq!(percentile(&[3.0], 0.0), Some(3.0));
    }

    #[test]
    fn ok_rule() {
        let mut s = good(4);
        s.judge(Some(400.0));
        assert!(s.ok, "{:?}", s.reasons);
        let mut slow = good(8);
        slow.lat_p95_ms = Some(701.0);
        slow.judge(Some(400.0));
        assert!(!slow.ok);
        let mut gappy = good(8);
        gappy.underruns_per_min = 1.5;
        gappy.judge(Some(400.0));
        assert!(!gappy.ok && gappy.reasons[0].contains("underruns"));
        let mut failed = good(8);
        (failed.answered_calls, failed.admitted) = (7, 7);
        failed.judge(Some(400.0));
        assert!(!failed.ok);
        let mut late = good(8);
        late.late_ticks = Some(2);
        late.harness_late_ticks = 1;
        late.judge(Some(400.0));
        assert!(!late.ok && late.client_bound);
        let mut forged = good(8);
        forged.srtp_auth_failures = 3;
        forged.judge(Some(400.0));
        assert!(!forged.ok && forged.reasons[0].contains("3 failed authentication"));
        let mut refused = good(8);
        refused.gateway_srtp_drops = Some(2);
        refused.judge(Some(400.0));
        assert!(!refused.ok && refused.reasons[0].contains("dropped by the gateway"));
        assert_eq!(capacity(&[s.clone(), slow.clone()]).0, 4);
        assert_eq!(capacity(&[slow, s]).0, 0);
    }

    #[test]
    fn refusals_do_not_fail_a_step_and_capacity_counts_what_was_admitted() {
        // 6 offered, 4 admitted and fine, 2 refused with 503: ok, and it carried 4.
        let mut refusing = good(6);
        (refusing.answered_calls, refusing.admitted, refusing.refused) = (4, 4, 2);
        refusing.judge(Some(400.0));
        assert!(refusing.ok, "{:?}", refusing.reasons);
        let mut one = good(1);
        one.judge(Some(400.0));
        assert_eq!(capacity(&[one, refusing.clone()]), (4, None));
        // One of the 2 failed instead of being refused: not ok.
        let mut failing = refusing.clone();
        (failing.refused, failing.failed_calls) = (1, 1);
        failing.judge(Some(400.0));
        assert!(!failing.ok);
        assert_eq!(
            failing.reasons[0],
            "4 of 6 calls answered, 1 refused, 1 failed"
        );
        // Every call refused: nothing was measured, not ok.
        let mut shut = good(6);
        (shut.answered_calls, shut.admitted, shut.refused, shut.turns) = (0, 0, 6, 0);
        shut.judge(Some(400.0));
        assert!(!shut.ok && shut.reasons[0] == "0 of 6 calls answered, 6 refused, 0 failed");
        // Admitted calls are still held to the rule.
        let mut slow = refusing.clone();
        slow.lat_p95_ms = Some(701.0);
        slow.judge(Some(400.0));
        assert!(!slow.ok);
        assert_eq!(capacity(&[refusing, slow]).0, 4);
    }
}
