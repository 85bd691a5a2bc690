//! The step runner: for each N, ramp N callers up, warm up, measure, hang up; then the figures.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use ontime_cgroup::{ChildCgroup, CpuStat};
use ontime_sender::{Controller, SenderStats, LATENESS_BUCKET_BOUNDS};
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::caller::{run_caller, CallerSetup, Media, Record, RecordKind};
use crate::http::MetricsUrl;
use crate::procstat::{self, ProcSample, INFERENCE_THREAD, IO_THREAD, SENDER_THREAD};
use crate::prom::{HistogramDelta, Scrape};
use crate::stats::{capacity, percentile, StepReport};

/// Step windows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Windows {
    /// Calls are started evenly over this long.
    pub ramp_s: f64,
    /// Then this long before measuring.
    pub warmup_s: f64,
    /// The measuring window.
    pub measure_s: f64,
}

/// What the runner can observe of the gateway besides what callers hear.
#[derive(Debug, Default)]
pub struct GatewayView<'a> {
    /// Its metrics page.
    pub metrics: Option<MetricsUrl>,
    /// Its process (same machine).
    pub pid: Option<u32>,
    /// Its quota cgroup, when the harness made one.
    pub cgroup: Option<&'a ChildCgroup>,
    /// The core it has to itself (`--cpuset`), whose steal time each step reports.
    pub core: Option<usize>,
}

/// How the run goes.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// Concurrent calls per step, in order.
    pub steps: Vec<usize>,
    /// The media of each step, in order: with more than one kind every step runs once per kind,
    /// back to back, with the same seed (the callers say the same things).
    pub media: Vec<Media>,
    /// Step windows.
    pub windows: Windows,
    /// Stop after the first step that is not ok.
    pub stop_on_degrade: bool,
    /// Seed of the callers' random choices (pauses, utterances).
    pub seed: u64,
}

/// A whole run's results (without machine and commit, which the binary adds).
#[derive(Debug, Clone, Serialize)]
pub struct RunResults {
    /// Per step.
    pub steps: Vec<StepReport>,
    /// Most calls admitted in a step with every step up to it ok (`stats::capacity`).
    pub capacity: usize,
    /// What stopped capacity growing: `gateway` (a step was not ok), `harness` (that step was
    /// client-bound), `admission` (every step ok, but the gateway refused calls: capacity is what
    /// it admitted) or `none`.
    pub limited_by: String,
    /// The first step's median turn latency, the latency rule's baseline.
    pub baseline_p50_ms: Option<f64>,
    /// The gateway's resident memory before the first call, MiB.
    pub idle_rss_mb: Option<f64>,
    /// Resident memory added per call (least squares over the steps' peak RSS), MiB.
    pub rss_per_call_mb: Option<f64>,
}

/// How late a 20 ms timer fires on the harness's runtime: the callers' receive path runs there,
/// so its lag is the error of their arrival times.
#[derive(Debug, Clone, Default)]
pub struct LagProbe {
    lags_us: Arc<Mutex<Vec<u32>>>,
}

impl LagProbe {
    /// Start probing on the current runtime.
    pub fn start() -> LagProbe {
        let probe = LagProbe::default();
        let lags = Arc::clone(&probe.lags_us);
        tokio::spawn(async move {
            let period = ontime_rtp::FRAME;
            let mut next = Instant::now() + period;
            loop {
                tokio::time::sleep_until(next.into()).await;
                let lag = Instant::now().saturating_duration_since(next);
                if let Ok(mut l) = lags.lock() {
                    l.push(u32::try_from(lag.as_micros()).unwrap_or(u32::MAX));
                }
                next += period;
                let now = Instant::now();
                if next < now {
                    next = now + period;
                }
            }
        });
        probe
    }

    /// Lags since the last call, in ms.
    pub fn take_ms(&self) -> Vec<f64> {
        self.lags_us
            .lock()
            .map(|mut l| l.drain(..).map(|us| f64::from(us) / 1000.0).collect())
            .unwrap_or_default()
    }
}

struct Snapshot {
    scrape: Option<Scrape>,
    proc: Option<ProcSample>,
    cgroup: Option<CpuStat>,
    /// The gateway's core's steal time since boot.
    steal: Option<Duration>,
    harness: SenderStats,
}

async fn snapshot(gw: &GatewayView<'_>, harness: &Controller) -> Snapshot {
    let scrape = match &gw.metrics {
        Some(url) => match url.get(Duration::from_secs(5)).await {
            Ok(text) => Some(Scrape::parse(&text)),
            Err(e) => {
                tracing::warn!(error = %e, "metrics scrape failed");
                None
            }
        },
        None => None,
    };
    Snapshot {
        scrape,
        proc: gw.pid.and_then(procstat::sample),
        cgroup: gw.cgroup.and_then(|c| c.stat().ok()),
        steal: gw.core.and_then(ontime_sender::core_steal),
        harness: harness.stats(),
    }
}

fn counter_delta(a: &Option<Scrape>, b: &Option<Scrape>, name: &str) -> Option<f64> {
    Some(b.as_ref()?.sum(name, &[])? - a.as_ref()?.sum(name, &[]).unwrap_or(0.0))
}

/// Upper bound (ms) of the highest lateness bucket the harness's sender used between snapshots.
fn harness_worst_tick_ms(a: &SenderStats, b: &SenderStats) -> Option<f64> {
    let counts = b
        .histogram
        .counts
        .iter()
        .zip(a.histogram.counts.iter())
        .map(|(after, before)| after.saturating_sub(*before));
    let worst = counts
        .enumerate()
        .filter(|(_, c)| *c > 0)
        .map(|(i, _)| i)
        .next_back()?;
    let bound = LATENESS_BUCKET_BOUNDS
        .get(worst)
        .or(LATENESS_BUCKET_BOUNDS.last())?;
    Some(bound.as_secs_f64() * 1000.0)
}

/// Progress line for one step.
fn progress_message(calls: usize, phase: &str, records: &[Record], elapsed: Duration) -> String {
    let answered = records
        .iter()
        .filter(|r| matches!(r.kind, RecordKind::Answered { .. }))
        .count();
    let refused = records
        .iter()
        .filter(|r| matches!(r.kind, RecordKind::Refused))
        .count();
    let lat: Vec<f64> = records
        .iter()
        .filter_map(|r| match r.kind {
            RecordKind::Turn { latency, .. } => Some(latency.as_secs_f64() * 1000.0),
            _ => None,
        })
        .collect();
    let underruns: u64 = records
        .iter()
        .filter_map(|r| match &r.kind {
            RecordKind::Agent(u) => Some(u.underruns),
            _ => None,
        })
        .sum();
    format!(
        "N={calls:<3} {phase:<8} {:>4.0}s  up {answered}/{calls}  refused {refused}  turns {}  lat p50 {}  underruns {underruns}",
        elapsed.as_secs_f64(),
        lat.len(),
        percentile(&lat, 0.5).map_or("-".into(), |p| format!("{p:.0} ms")),
    )
}

/// Run one step of `calls` callers with `setup.media`.
pub async fn run_step(
    calls: usize,
    plan: &RunPlan,
    setup: &Arc<CallerSetup>,
    gw: &GatewayView<'_>,
    probe: &LagProbe,
    bar: &ProgressBar,
) -> StepReport {
    let Windows {
        ramp_s,
        warmup_s,
        measure_s,
    } = plan.windows;
    let (records_tx, mut records_rx) = mpsc::unbounded_channel::<Record>();
    let (stop_tx, stop_rx) = watch::channel(false);
    let start = Instant::now();
    // Counted where a caller starts, not from its records: a caller still waiting for an answer
    // when the step stops records nothing, and was offered all the same.
    let offered = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::with_capacity(calls);
    for i in 0..calls {
        let delay = Duration::from_secs_f64(ramp_s * i as f64 / calls.max(1) as f64);
        let setup = Arc::clone(setup);
        let stop = stop_rx.clone();
        let tx = records_tx.clone();
        let offered = Arc::clone(&offered);
        let seed = plan.seed ^ ((calls as u64) << 32) ^ i as u64;
        callers.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if !*stop.borrow() {
                offered.fetch_add(1, Relaxed);
                run_caller(i, setup, seed, stop, tx).await;
            }
        }));
    }
    drop(records_tx);
    let measure_start = start + Duration::from_secs_f64(ramp_s + warmup_s);
    let measure_end = measure_start + Duration::from_secs_f64(measure_s);
    let mut records: Vec<Record> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut before: Option<Snapshot> = None;
    let mut rss_peak_kib: Option<u64> = None;
    let mut last_rss = Instant::now();
    loop {
        tick.tick().await;
        while let Ok(r) = records_rx.try_recv() {
            records.push(r);
        }
        let now = Instant::now();
        if before.is_none() && now >= measure_start {
            probe.take_ms();
            before = Some(snapshot(gw, &setup.sender).await);
        }
        if before.is_some() && now.duration_since(last_rss) >= Duration::from_secs(1) {
            last_rss = now;
            if let Some(s) = gw.pid.and_then(procstat::sample) {
                rss_peak_kib = Some(rss_peak_kib.unwrap_or(0).max(s.rss_kib));
            }
        }
        if now >= measure_end {
            break;
        }
        let phase = if now < start + Duration::from_secs_f64(ramp_s) {
            "ramp"
        } else if now < measure_start {
            "warmup"
        } else {
            "measure"
        };
        bar.set_message(progress_message(calls, phase, &records, now - start));
    }
    let after = snapshot(gw, &setup.sender).await;
    let lags = probe.take_ms();
    let _ = stop_tx.send(true);
    for c in callers {
        let _ = tokio::time::timeout(Duration::from_secs(5), c).await;
    }
    while let Some(r) = records_rx.recv().await {
        records.push(r);
    }
    let before = before.unwrap_or(Snapshot {
        scrape: None,
        proc: None,
        cgroup: None,
        steal: None,
        harness: after.harness,
    });
    let mut step = summarize(
        calls,
        &records,
        measure_start,
        measure_end,
        &before,
        &after,
        &lags,
        rss_peak_kib,
    );
    step.media = setup.media;
    step.offered = offered.load(Relaxed);
    step
}

/// The `reason` labels of the gateway's `ontime_srtp_dropped_total` (`ontime_srtp::Error::reason`).
const GATEWAY_SRTP_DROP_REASONS: &[&str] = &[
    "auth_failed",
    "replayed",
    "too_old",
    "too_short",
    "malformed",
    "buffer_too_small",
    "index_exhausted",
    "bad_key",
];

/// The step's calls by how they went, over the whole step (ramp and warm-up too: a call is set up
/// once, mostly before the window): answered, refused with 503, failed; and SRTP refusals.
fn count_calls(records: &[Record], s: &mut StepReport) {
    for r in records {
        match &r.kind {
            RecordKind::Answered { .. } => s.answered_calls += 1,
            // Apart from failures: the ok rule judges the admitted calls (`StepReport::judge`).
            RecordKind::Refused => s.refused += 1,
            RecordKind::Failed(_) | RecordKind::DroppedByGateway(_) => s.failed_calls += 1,
            // Like failed calls: a forged packet in the ramp counts too.
            RecordKind::SrtpDropped { auth_failed, other } => {
                s.srtp_auth_failures += auth_failed;
                s.srtp_other_drops += other;
            }
            _ => {}
        }
    }
    s.admitted = s.answered_calls;
}

#[allow(clippy::too_many_arguments)] // one step's inputs; grouping them would only rename them
fn summarize(
    calls: usize,
    records: &[Record],
    from: Instant,
    to: Instant,
    before: &Snapshot,
    after: &Snapshot,
    lags_ms: &[f64],
    rss_peak_kib: Option<u64>,
) -> StepReport {
    let in_window = |r: &&Record| r.at >= from && r.at <= to;
    let mut latencies = Vec::new();
    let (mut paused_l, mut one_go_l, mut short_l) = (Vec::new(), Vec::new(), Vec::new());
    let mut s = StepReport {
        calls,
        measure_s: to.duration_since(from).as_secs_f64(),
        ..Default::default()
    };
    let mut agent_audio = Duration::ZERO;
    count_calls(records, &mut s);
    for r in records.iter().filter(in_window) {
        match &r.kind {
            RecordKind::Turn {
                latency,
                paused,
                short,
            } => {
                let ms = latency.as_secs_f64() * 1000.0;
                latencies.push(ms);
                match (paused, short) {
                    (true, _) => paused_l.push(ms),
                    (false, true) => short_l.push(ms),
                    (false, false) => one_go_l.push(ms),
                }
            }
            RecordKind::PausedTurn { reply_in_pause } => {
                s.paused_turns += 1;
                s.replies_in_pause += usize::from(*reply_in_pause);
            }
            RecordKind::Unanswered { utterance } => {
                s.unanswered_turns += 1;
                *s.unanswered_by_utterance
                    .entry(utterance.clone())
                    .or_default() += 1;
            }
            RecordKind::EarlyAgentAudio => s.early_replies += 1,
            RecordKind::Agent(u) => {
                s.underruns += u.underruns;
                agent_audio += u.audio();
            }
            _ => {}
        }
    }
    s.turns = latencies.len();
    s.lat_p50_ms = percentile(&latencies, 0.5);
    s.lat_p95_ms = percentile(&latencies, 0.95);
    s.lat_max_ms = percentile(&latencies, 1.0);
    for (v, into) in [
        (&paused_l, &mut s.paused_lat),
        (&one_go_l, &mut s.one_go_lat),
        (&short_l, &mut s.short_lat),
    ] {
        *into = (v.len(), percentile(v, 0.5));
    }
    s.agent_audio_min = agent_audio.as_secs_f64() / 60.0;
    s.underruns_per_min = if s.agent_audio_min > 0.0 {
        s.underruns as f64 / s.agent_audio_min
    } else {
        0.0
    };
    let (a, b) = (&before.scrape, &after.scrape);
    // A gauge: its value at the end, with the step's calls up, is what one more call would meet.
    s.gateway_headroom_calls = b
        .as_ref()
        .and_then(|b| b.sum("ontime_admission_headroom_calls", &[]));
    s.late_ticks = counter_delta(a, b, "ontime_sender_late_ticks_total").map(|v| v as u64);
    s.gateway_underruns = counter_delta(a, b, "ontime_sender_underruns_total").map(|v| v as u64);
    s.gateway_srtp_drops = counter_delta(a, b, "ontime_srtp_dropped_total").map(|v| v as u64);
    let labelled_delta = |name: &str, label: (&str, &str)| {
        let at = |x: &Scrape| x.sum(name, &[label]);
        Some((at(b.as_ref()?)? - at(a.as_ref()?).unwrap_or(0.0)) as u64)
    };
    s.smart_turn_runs = labelled_delta("ontime_inference_jobs_total", ("model", "smart_turn"));
    s.speculative_discarded = labelled_delta(
        "ontime_inference_turn_speculative_total",
        ("outcome", "discarded"),
    );
    if let (Some(a), Some(b)) = (a, b) {
        for reason in GATEWAY_SRTP_DROP_REASONS {
            let at = |x: &Scrape| x.sum("ontime_srtp_dropped_total", &[("reason", reason)]);
            let n = at(b).unwrap_or(0.0) - at(a).unwrap_or(0.0);
            if n > 0.0 {
                s.gateway_srtp_drops_by_reason
                    .insert((*reason).to_owned(), n as u64);
            }
        }
    }
    if let (Some(a), Some(b)) = (a, b) {
        s.worst_tick_ms = HistogramDelta::between(a, b, "ontime_sender_tick_lateness_seconds")
            .max_upper_bound()
            .map(|v| v * 1000.0);
        s.inference_wait_p99_ms =
            HistogramDelta::between(a, b, "ontime_inference_queue_wait_seconds")
                .quantile_upper_bound(0.99)
                .map(|v| v * 1000.0);
    }
    s.throttle_ratio = match (&before.cgroup, &after.cgroup) {
        (Some(x), Some(y)) => y.since(x).throttle_ratio(),
        _ => {
            let periods = counter_delta(a, b, "ontime_cgroup_periods_total");
            let throttled = counter_delta(a, b, "ontime_cgroup_throttled_periods_total");
            match (periods, throttled) {
                (Some(p), Some(t)) if p > 0.0 => Some(t / p),
                _ => None,
            }
        }
    };
    if let (Some(x), Some(y)) = (&before.proc, &after.proc) {
        let cpu = procstat::cpu_between(x, y, crate::os::clock_ticks_per_second());
        s.cpu_pct = Some(cpu.process_pct);
        s.sender_cpu_pct = Some(cpu.thread_pct(SENDER_THREAD));
        s.inference_cpu_pct = Some(cpu.thread_pct(INFERENCE_THREAD));
        s.io_cpu_pct = Some(cpu.thread_pct(IO_THREAD));
    }
    if let (Some(x), Some(y)) = (before.steal, after.steal) {
        s.core_steal_pct = Some(y.saturating_sub(x).as_secs_f64() / s.measure_s * 100.0);
    }
    s.rss_mb = rss_peak_kib.map(|k| k as f64 / 1024.0);
    s.harness_late_ticks = after
        .harness
        .late_ticks
        .saturating_sub(before.harness.late_ticks);
    s.harness_worst_tick_ms = harness_worst_tick_ms(&before.harness, &after.harness);
    s.harness_lag_p99_ms = percentile(lags_ms, 0.99);
    s.harness_lag_max_ms = percentile(lags_ms, 1.0);
    s
}

/// Least-squares slope of peak RSS against calls, MiB per call.
pub fn rss_slope(steps: &[StepReport]) -> Option<f64> {
    let points: Vec<(f64, f64)> = steps
        .iter()
        .filter_map(|s| Some((s.calls as f64, s.rss_mb?)))
        .collect();
    crate::stats::slope(&points)
}

/// Run every step of `plan`; `on_step` sees each report as it completes.
pub async fn run(
    plan: &RunPlan,
    setup: Arc<CallerSetup>,
    gw: &GatewayView<'_>,
    bar: &ProgressBar,
    mut on_step: impl FnMut(&StepReport),
) -> RunResults {
    let probe = LagProbe::start();
    let idle_rss_mb = gw
        .pid
        .and_then(procstat::sample)
        .map(|s| s.rss_kib as f64 / 1024.0);
    let mut steps: Vec<StepReport> = Vec::new();
    let mut baseline = None;
    let kinds: &[Media] = if plan.media.is_empty() {
        &[Media::Rtp]
    } else {
        &plan.media
    };
    let setups: Vec<Arc<CallerSetup>> = kinds
        .iter()
        .map(|&media| {
            Arc::new(CallerSetup {
                media,
                ..(*setup).clone()
            })
        })
        .collect();
    'steps: for &calls in &plan.steps {
        for setup in &setups {
            let mut step = run_step(calls, plan, setup, gw, &probe, bar).await;
            if baseline.is_none() {
                baseline = step.lat_p50_ms;
            }
            step.judge(baseline);
            on_step(&step);
            let ok = step.ok;
            steps.push(step);
            // Let the gateway finish the last BYEs before the next step.
            tokio::time::sleep(Duration::from_secs(1)).await;
            if !ok && plan.stop_on_degrade {
                break 'steps;
            }
        }
    }
    let (cap, failed) = capacity(&steps);
    let limited_by = match failed {
        Some(s) if s.client_bound => "harness",
        Some(_) => "gateway",
        // Every step ok, yet calls were refused: the gateway's admission, not its service,
        // set the capacity.
        None if steps.iter().any(|s| s.refused > 0) => "admission",
        None => "none",
    };
    RunResults {
        capacity: cap,
        limited_by: limited_by.into(),
        baseline_p50_ms: baseline,
        idle_rss_mb,
        rss_per_call_mb: rss_slope(&steps),
        steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_admitted_refused_or_failed() {
        let at = Instant::now();
        let record = |caller, kind| Record { caller, at, kind };
        let answered = || RecordKind::Answered {
            setup: Duration::from_millis(3),
        };
        let records = [
            record(0, answered()),
            record(1, answered()),
            record(2, answered()),
            record(2, RecordKind::DroppedByGateway("BYE".into())),
            record(3, RecordKind::Refused),
            record(4, RecordKind::Refused),
            record(5, RecordKind::Failed("not answered: 486".into())),
            record(
                0,
                RecordKind::SrtpDropped {
                    auth_failed: 1,
                    other: 2,
                },
            ),
        ];
        let mut s = StepReport::default();
        count_calls(&records, &mut s);
        assert_eq!(
            (s.answered_calls, s.admitted, s.refused, s.failed_calls),
            (3, 3, 2, 2)
        );
        assert_eq!((s.srtp_auth_failures, s.srtp_other_drops), (1, 2));
    }
}
