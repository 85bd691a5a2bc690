//! Soak and churn: keep N calls up for a long time, each call lasting a bounded random length and
//! replaced when it ends (so calls keep arriving), and sample what the gateway process holds every
//! interval — resident memory, fds, sockets, threads — next to its sender's late ticks and
//! underruns and the calls completed, failed and refused. With churn, more callers than the
//! gateway's admission limit keep offering calls, so it runs at the limit and refuses the rest
//! with 503 (counted as refused, not failed).
//!
//! The figures (tallies, summaries, duration parsing) are pure and unit-tested; [`run`] drives
//! the callers and the sampling.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ontime_sender::Controller;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::caller::{run_caller, CallerSetup, Record, RecordKind};
use crate::procstat::{self, ProcSample};
use crate::prom::{HistogramDelta, Scrape};
use crate::run::GatewayView;
use crate::stats::slope;

/// Parse a duration: plain seconds (`90`, `1.5`) or numbers with units `ms`, `s`, `m`, `h`
/// (`500ms`, `10m`, `1h30m`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("`{text}`: {why} (e.g. 90, 90s, 10m, 1h, 1h30m)");
    let t = text.trim();
    if t.is_empty() {
        return Err(bad("empty"));
    }
    if let Ok(secs) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| bad("not a duration"));
    }
    let mut total = 0.0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("a number without a unit"))?;
        let value: f64 = rest[..digits].parse().map_err(|_| bad("not a number"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad("unknown unit")),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad("not a duration"))
}

/// How a soak goes.
#[derive(Debug, Clone, Serialize)]
pub struct SoakPlan {
    /// Callers kept busy at once (with churn: the admission limit plus the extra callers).
    pub callers: usize,
    /// The gateway's admission limit, when the harness knows it.
    pub admission_limit: Option<usize>,
    /// Offer calls beyond the limit (callers > limit; 503s are expected).
    pub churn: bool,
    /// Calls-up time, seconds (from the first call placed to the hang-up of all).
    pub duration_s: f64,
    /// Seconds between samples.
    pub sample_interval_s: f64,
    /// Seconds from the start before samples count as steady state ("RSS after warm-up").
    pub warmup_s: f64,
    /// Callers start evenly over this many seconds.
    pub ramp_s: f64,
    /// Shortest call, seconds.
    pub call_min_s: f64,
    /// Longest call, seconds.
    pub call_max_s: f64,
    /// Seed of call lengths, back-offs and the callers' own choices.
    pub seed: u64,
}

/// A refused or failed caller waits this long (random in range) before it calls again.
const RETRY_MIN: Duration = Duration::from_millis(500);
/// Longest such wait.
const RETRY_MAX: Duration = Duration::from_millis(1500);
/// After the hang-up, how long the gateway gets to free its calls before the last sample.
const SETTLE: Duration = Duration::from_secs(5);

/// How one call ended, for the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Answered, and hung up by its caller.
    Completed,
    /// 503 from the gateway.
    Refused,
    /// Not set up (no answer, bad answer, error).
    Failed,
    /// Answered, then ended by the gateway.
    Dropped,
    /// Stopped by the end of the soak before it was answered.
    Abandoned,
}

/// One call's records, seen by its caller slot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallTrace {
    answered: bool,
    refused: bool,
    failed: bool,
    dropped: bool,
}

impl CallTrace {
    /// Take one record of the call into account.
    pub fn note(&mut self, kind: &RecordKind) {
        match kind {
            RecordKind::Answered { .. } => self.answered = true,
            RecordKind::Refused => self.refused = true,
            RecordKind::Failed(_) => self.failed = true,
            RecordKind::DroppedByGateway(_) => self.dropped = true,
            _ => {}
        }
    }

    /// The call was answered.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// How the call ended, once its caller has returned.
    pub fn outcome(&self) -> Outcome {
        if self.refused {
            Outcome::Refused
        } else if self.dropped {
            Outcome::Dropped
        } else if self.failed {
            Outcome::Failed
        } else if self.answered {
            Outcome::Completed
        } else {
            Outcome::Abandoned
        }
    }
}

/// What caller slots report to the sampler.
#[derive(Debug)]
enum SlotEvent {
    Placed,
    Record(Record),
    Ended { outcome: Outcome, answered: bool },
}

/// Running counts of the calls, as callers saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Tally {
    /// INVITEs sent.
    pub placed: u64,
    /// Calls answered.
    pub answered: u64,
    /// Calls up now (answered, not yet ended).
    pub up: u64,
    /// Calls answered and hung up by their caller.
    pub completed: u64,
    /// Calls not set up (other than 503).
    pub failed: u64,
    /// Calls ended by the gateway while up.
    pub dropped: u64,
    /// Calls refused with 503.
    pub refused: u64,
    /// Calls stopped by the soak's end before being answered.
    pub abandoned: u64,
    /// Turns answered by the agent.
    pub turns: u64,
    /// Turns without an answer within the answer timeout.
    pub unanswered: u64,
    /// Underruns callers heard (60 ms playout model).
    pub heard_underruns: u64,
    /// Agent audio callers heard, seconds.
    pub agent_audio_s: f64,
}

impl Tally {
    fn on_event(&mut self, event: &SlotEvent) {
        match event {
            SlotEvent::Placed => self.placed += 1,
            SlotEvent::Record(r) => self.on_record(&r.kind),
            SlotEvent::Ended { outcome, answered } => self.on_end(*outcome, *answered),
        }
    }

    /// Count one record.
    pub fn on_record(&mut self, kind: &RecordKind) {
        match kind {
            RecordKind::Answered { .. } => {
                self.answered += 1;
                self.up += 1;
            }
            RecordKind::Turn { .. } => self.turns += 1,
            RecordKind::Unanswered { .. } => self.unanswered += 1,
            RecordKind::Agent(u) => {
                self.heard_underruns += u.underruns;
                self.agent_audio_s += u.audio().as_secs_f64();
            }
            _ => {}
        }
    }

    /// Count one ended call.
    pub fn on_end(&mut self, outcome: Outcome, answered: bool) {
        if answered {
            self.up = self.up.saturating_sub(1);
        }
        match outcome {
            Outcome::Completed => self.completed += 1,
            Outcome::Refused => self.refused += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Dropped => self.dropped += 1,
            Outcome::Abandoned => self.abandoned += 1,
        }
    }

    /// Failed calls in the "failed calls" sense: not set up, or dropped while up (503s are not).
    pub fn failed_calls(&self) -> u64 {
        self.failed + self.dropped
    }
}

/// One sample: the gateway process and the calls at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SoakSample {
    /// Seconds since the first caller started (negative: before).
    pub t_s: f64,
    /// Wall clock, UTC.
    pub utc: String,
    /// `idle` (before calls), `warmup`, `soak` (steady state) or `after` (calls hung up).
    pub phase: String,
    /// Gateway resident memory, KiB.
    pub rss_kib: Option<u64>,
    /// Gateway open fds.
    pub fds: Option<usize>,
    /// Gateway sockets (distinct, any family).
    pub sockets: Option<usize>,
    /// Gateway UDP sockets.
    pub udp_sockets: Option<usize>,
    /// Gateway threads.
    pub threads: Option<u64>,
    /// Gateway CPU since the previous sample, % of one core.
    pub cpu_pct: Option<f64>,
    /// Gateway sender ticks later than 20 ms since the soak began.
    pub late_ticks: Option<u64>,
    /// Gateway sender underruns since the soak began.
    pub underruns: Option<u64>,
    /// Upper bound of the worst gateway tick-lateness bucket since the soak began, ms.
    pub worst_tick_ms: Option<f64>,
    /// Calls the gateway has up (`ontime_calls_active`).
    pub gateway_calls_active: Option<u64>,
    /// INVITEs the gateway refused since the soak began (`ontime_calls_rejected_total`).
    pub gateway_rejected: Option<u64>,
    /// Calls the gateway counted failed since the soak began (`ontime_calls_total{result=failed}`).
    pub gateway_failed: Option<u64>,
    /// The callers' counts so far.
    pub calls: Tally,
    /// Harness sender ticks later than 20 ms since the soak began (its callers' speech was late).
    pub harness_late_ticks: u64,
    /// The machine's 1-minute load average.
    pub load_1m: Option<f64>,
}

/// Smallest and largest of a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MinMax<T> {
    /// Smallest.
    pub min: T,
    /// Largest.
    pub max: T,
}

impl<T: Copy + PartialOrd> MinMax<T> {
    /// Over `values`; `None` when empty.
    pub fn of(values: impl IntoIterator<Item = T>) -> Option<MinMax<T>> {
        values.into_iter().fold(None, |acc, v| {
            Some(match acc {
                None => MinMax { min: v, max: v },
                Some(MinMax { min, max }) => MinMax {
                    min: if v < min { v } else { min },
                    max: if v > max { v } else { max },
                },
            })
        })
    }
}

/// What the gateway held when no call was up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IdleState {
    /// Resident memory, MiB.
    pub rss_mb: Option<f64>,
    /// Open fds.
    pub fds: Option<usize>,
    /// Sockets.
    pub sockets: Option<usize>,
    /// Threads.
    pub threads: Option<u64>,
}

impl IdleState {
    fn of(s: &SoakSample) -> IdleState {
        IdleState {
            rss_mb: s.rss_kib.map(mib),
            fds: s.fds,
            sockets: s.sockets,
            threads: s.threads,
        }
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A soak's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SoakSummary {
    /// Samples taken.
    pub samples: usize,
    /// Steady-state samples (after warm-up, calls up).
    pub steady_samples: usize,
    /// Seconds from the first caller to the last loaded sample.
    pub loaded_s: f64,
    /// The gateway before the first call.
    pub idle_before: Option<IdleState>,
    /// The gateway after every call was hung up.
    pub idle_after: Option<IdleState>,
    /// Resident memory at the first steady-state sample, MiB.
    pub rss_warm_mb: Option<f64>,
    /// Resident memory at the last loaded sample, MiB.
    pub rss_end_mb: Option<f64>,
    /// Largest resident memory while loaded, MiB.
    pub rss_max_mb: Option<f64>,
    /// Least-squares trend of resident memory over the steady state, MiB per hour.
    pub rss_trend_mb_per_h: Option<f64>,
    /// Open fds, steady state.
    pub fds: Option<MinMax<usize>>,
    /// Sockets, steady state.
    pub sockets: Option<MinMax<usize>>,
    /// UDP sockets, steady state.
    pub udp_sockets: Option<MinMax<usize>>,
    /// Threads, steady state.
    pub threads: Option<MinMax<u64>>,
    /// Calls up as callers saw them, steady state.
    pub calls_up: Option<MinMax<u64>>,
    /// Calls up as the gateway counted them, steady state.
    pub gateway_calls_active: Option<MinMax<u64>>,
    /// Gateway CPU per sample, steady state, % of one core.
    pub cpu_pct: Option<MinMax<f64>>,
    /// 1-minute load average over the whole soak (other work on the machine).
    pub load_1m: Option<MinMax<f64>>,
    /// Gateway sender late ticks over the soak.
    pub late_ticks: Option<u64>,
    /// Gateway sender underruns over the soak.
    pub underruns: Option<u64>,
    /// Worst gateway tick-lateness bucket over the soak, ms.
    pub worst_tick_ms: Option<f64>,
    /// INVITEs the gateway refused.
    pub gateway_rejected: Option<u64>,
    /// Calls the gateway counted failed.
    pub gateway_failed: Option<u64>,
    /// Harness sender late ticks (its callers' speech late: the harness was starved).
    pub harness_late_ticks: u64,
    /// The callers' final counts.
    pub calls: Tally,
    /// Failed calls (not set up, or dropped; 503s excluded).
    pub failed_calls: u64,
    /// Underruns heard per minute of agent audio.
    pub heard_underruns_per_min: f64,
}

/// The figures of a soak from its samples (in order).
pub fn summarize(samples: &[SoakSample]) -> SoakSummary {
    let loaded: Vec<&SoakSample> = samples
        .iter()
        .filter(|s| s.phase == "warmup" || s.phase == "soak")
        .collect();
    let steady: Vec<&SoakSample> = samples.iter().filter(|s| s.phase == "soak").collect();
    let last_loaded = loaded.last();
    let calls = samples.last().map(|s| s.calls).unwrap_or_default();
    let trend: Vec<(f64, f64)> = steady
        .iter()
        .filter_map(|s| Some((s.t_s / 3600.0, mib(s.rss_kib?))))
        .collect();
    SoakSummary {
        samples: samples.len(),
        steady_samples: steady.len(),
        loaded_s: last_loaded.map_or(0.0, |s| s.t_s.max(0.0)),
        idle_before: samples
            .iter()
            .find(|s| s.phase == "idle")
            .map(IdleState::of),
        idle_after: samples
            .iter()
            .rfind(|s| s.phase == "after")
            .map(IdleState::of),
        rss_warm_mb: steady.iter().find_map(|s| s.rss_kib).map(mib),
        rss_end_mb: last_loaded.and_then(|s| s.rss_kib).map(mib),
        rss_max_mb: loaded.iter().filter_map(|s| s.rss_kib).max().map(mib),
        rss_trend_mb_per_h: slope(&trend),
        fds: MinMax::of(steady.iter().filter_map(|s| s.fds)),
        sockets: MinMax::of(steady.iter().filter_map(|s| s.sockets)),
        udp_sockets: MinMax::of(steady.iter().filter_map(|s| s.udp_sockets)),
        threads: MinMax::of(steady.iter().filter_map(|s| s.threads)),
        calls_up: MinMax::of(steady.iter().map(|s| s.calls.up)),
        gateway_calls_active: MinMax::of(steady.iter().filter_map(|s| s.gateway_calls_active)),
        cpu_pct: MinMax::of(steady.iter().filter_map(|s| s.cpu_pct)),
        load_1m: MinMax::of(samples.iter().filter_map(|s| s.load_1m)),
        // Counters are cumulative since the soak began: the latest sample that has them.
        late_ticks: samples.iter().rev().find_map(|s| s.late_ticks),
        underruns: samples.iter().rev().find_map(|s| s.underruns),
        worst_tick_ms: samples.iter().rev().find_map(|s| s.worst_tick_ms),
        gateway_rejected: samples.iter().rev().find_map(|s| s.gateway_rejected),
        gateway_failed: samples.iter().rev().find_map(|s| s.gateway_failed),
        harness_late_ticks: samples.last().map_or(0, |s| s.harness_late_ticks),
        failed_calls: calls.failed_calls(),
        heard_underruns_per_min: if calls.agent_audio_s > 0.0 {
            calls.heard_underruns as f64 / (calls.agent_audio_s / 60.0)
        } else {
            0.0
        },
        calls,
    }
}

fn show<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn show_f(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

fn show_range<T: std::fmt::Display>(v: Option<MinMax<T>>) -> String {
    v.map_or("-".into(), |m| format!("{}–{}", m.min, m.max))
}

fn show_idle(v: Option<IdleState>) -> String {
    v.map_or("-".into(), |i| {
        format!(
            "RSS {} MiB, {} fds, {} sockets, {} threads",
            show_f(i.rss_mb, 1),
            show(i.fds),
            show(i.sockets),
            show(i.threads)
        )
    })
}

/// The summary as text, one figure per line.
pub fn summary_text(s: &SoakSummary) -> String {
    let c = &s.calls;
    [
        format!(
            "samples: {} ({} steady), loaded {:.0} s",
            s.samples, s.steady_samples, s.loaded_s
        ),
        format!("idle before: {}", show_idle(s.idle_before)),
        format!(
            "RSS: {} MiB after warm-up, {} MiB at the end, max {} MiB, trend {} MiB/h",
            show_f(s.rss_warm_mb, 1),
            show_f(s.rss_end_mb, 1),
            show_f(s.rss_max_mb, 1),
            show_f(s.rss_trend_mb_per_h, 2)
        ),
        format!(
            "fds {}, sockets {}, UDP sockets {}, threads {} (steady state, min–max)",
            show_range(s.fds),
            show_range(s.sockets),
            show_range(s.udp_sockets),
            show_range(s.threads)
        ),
        format!("idle after: {}", show_idle(s.idle_after)),
        format!(
            "calls up {} (gateway: {}), gateway CPU {} % of a core, load average {}",
            show_range(s.calls_up),
            show_range(s.gateway_calls_active),
            s.cpu_pct
                .map_or("-".into(), |m| format!("{:.1}–{:.1}", m.min, m.max)),
            s.load_1m
                .map_or("-".into(), |m| format!("{:.2}–{:.2}", m.min, m.max)),
        ),
        format!(
            "gateway sender: {} late ticks, {} underruns, worst tick bucket {} ms; harness late ticks {}",
            show(s.late_ticks),
            show(s.underruns),
            show_f(s.worst_tick_ms, 1),
            s.harness_late_ticks
        ),
        format!(
            "calls: {} placed, {} completed, {} failed ({} not set up, {} dropped), {} refused (503; gateway rejected {}, failed {}), {} cut by the end",
            c.placed,
            c.completed,
            s.failed_calls,
            c.failed,
            c.dropped,
            c.refused,
            show(s.gateway_rejected),
            show(s.gateway_failed),
            c.abandoned
        ),
        format!(
            "turns: {} answered, {} unanswered; callers heard {} underruns ({:.3}/min of agent audio)",
            c.turns, c.unanswered, c.heard_underruns, s.heard_underruns_per_min
        ),
    ]
    .join("\n")
        + "\n"
}

/// One sample as a progress line.
pub fn sample_line(s: &SoakSample) -> String {
    let c = &s.calls;
    format!(
        "t={:>6.0}s {:<6} rss {} MiB fds {} sock {} udp {} thr {} cpu {}% | up {} done {} fail {} refused {} | late {} undr {} | load {}",
        s.t_s,
        s.phase,
        show_f(s.rss_kib.map(mib), 1),
        show(s.fds),
        show(s.sockets),
        show(s.udp_sockets),
        show(s.threads),
        show_f(s.cpu_pct, 1),
        c.up,
        c.completed,
        c.failed_calls(),
        c.refused,
        show(s.late_ticks),
        show(s.underruns),
        show_f(s.load_1m, 2),
    )
}

/// One caller slot: calls, hangs up after a random length, calls again; after a refusal or a
/// failure it waits a little first. Stops (hanging up) when `stop` turns true.
async fn slot(
    index: usize,
    plan: Arc<SoakPlan>,
    setup: Arc<CallerSetup>,
    ids: Arc<AtomicUsize>,
    mut stop: watch::Receiver<bool>,
    events: mpsc::UnboundedSender<SlotEvent>,
) {
    let mut rng = StdRng::seed_from_u64(plan.seed ^ ((index as u64) << 32) ^ 0x50a6);
    let delay = Duration::from_secs_f64(plan.ramp_s * index as f64 / plan.callers.max(1) as f64);
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        _ = stop.changed() => return,
    }
    let (min_ms, max_ms) = (
        (plan.call_min_s * 1000.0) as u64,
        (plan.call_max_s * 1000.0).max(plan.call_min_s * 1000.0) as u64,
    );
    loop {
        if *stop.borrow() {
            return;
        }
        let id = ids.fetch_add(1, Relaxed);
        let length = Duration::from_millis(rng.random_range(min_ms..=max_ms));
        let hang_up_at = Instant::now() + length;
        let (call_stop_tx, call_stop_rx) = watch::channel(false);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _ = events.send(SlotEvent::Placed);
        let caller = tokio::spawn(run_caller(
            id,
            Arc::clone(&setup),
            rng.random(),
            call_stop_rx,
            tx,
        ));
        let mut trace = CallTrace::default();
        let (mut hanging_up, mut quitting) = (false, false);
        // Until the caller returns (its record sender then drops).
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Some(r) => {
                        trace.note(&r.kind);
                        let _ = events.send(SlotEvent::Record(r));
                    }
                    None => break,
                },
                () = tokio::time::sleep_until(hang_up_at.into()), if !hanging_up => {
                    hanging_up = true;
                    let _ = call_stop_tx.send(true);
                }
                _ = stop.changed(), if !hanging_up => {
                    hanging_up = true;
                    quitting = true;
                    let _ = call_stop_tx.send(true);
                }
            }
        }
        let _ = caller.await;
        let outcome = trace.outcome();
        let _ = events.send(SlotEvent::Ended {
            outcome,
            answered: trace.answered(),
        });
        if quitting {
            return;
        }
        if outcome != Outcome::Completed {
            let wait =
                rng.random_range(RETRY_MIN.as_millis() as u64..=RETRY_MAX.as_millis() as u64);
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

/// The gateway's counters at the start of the soak, to report deltas.
struct Baseline {
    scrape: Option<Scrape>,
    harness_late_ticks: u64,
}

/// Reads the gateway at each sample.
struct Sampler<'a> {
    gw: &'a GatewayView<'a>,
    harness: Controller,
    origin: Instant,
    base: Baseline,
    last_proc: Option<ProcSample>,
}

impl Sampler<'_> {
    async fn scrape(&self) -> Option<Scrape> {
        let url = self.gw.metrics.as_ref()?;
        match url.get(Duration::from_secs(5)).await {
            Ok(text) => Some(Scrape::parse(&text)),
            Err(e) => {
                tracing::warn!(error = %e, "metrics scrape failed");
                None
            }
        }
    }

    /// One sample; `None` when the gateway process has gone.
    async fn sample(&mut self, phase: &str, calls: Tally) -> Option<SoakSample> {
        let proc = self.gw.pid.map(procstat::sample);
        if matches!(proc, Some(None)) {
            return None;
        }
        let proc = proc.flatten();
        let files = self.gw.pid.and_then(procstat::open_files);
        let scrape = self.scrape().await;
        let delta = |name: &str, filter: &[(&str, &str)]| -> Option<u64> {
            let now = scrape.as_ref()?.sum(name, filter)?;
            let then = self
                .base
                .scrape
                .as_ref()
                .and_then(|b| b.sum(name, filter))
                .unwrap_or(0.0);
            Some((now - then).max(0.0) as u64)
        };
        let now = Instant::now();
        let cpu_pct = match (&self.last_proc, &proc) {
            (Some(a), Some(b)) => {
                Some(procstat::cpu_between(a, b, crate::os::clock_ticks_per_second()).process_pct)
            }
            _ => None,
        };
        let sample = SoakSample {
            t_s: if now >= self.origin {
                now.duration_since(self.origin).as_secs_f64()
            } else {
                -self.origin.duration_since(now).as_secs_f64()
            },
            utc: crate::report::utc_now(),
            phase: phase.to_owned(),
            rss_kib: proc.as_ref().map(|p| p.rss_kib),
            fds: files.map(|f| f.fds),
            sockets: files.map(|f| f.sockets),
            udp_sockets: files.map(|f| f.udp_sockets),
            threads: proc.as_ref().map(|p| p.thread_count),
            cpu_pct,
            late_ticks: delta("ontime_sender_late_ticks_total", &[]),
            underruns: delta("ontime_sender_underruns_total", &[]),
            worst_tick_ms: match (&self.base.scrape, &scrape) {
                (Some(a), Some(b)) => {
                    HistogramDelta::between(a, b, "ontime_sender_tick_lateness_seconds")
                        .max_upper_bound()
                        .map(|v| v * 1000.0)
                }
                _ => None,
            },
            gateway_calls_active: scrape
                .as_ref()
                .and_then(|s| s.sum("ontime_calls_active", &[]))
                .map(|v| v.max(0.0) as u64),
            gateway_rejected: delta("ontime_calls_rejected_total", &[]),
            gateway_failed: delta("ontime_calls_total", &[("result", "failed")]),
            calls,
            harness_late_ticks: self
                .harness
                .stats()
                .late_ticks
                .saturating_sub(self.base.harness_late_ticks),
            load_1m: crate::report::load_average_1m(),
        };
        if proc.is_some() {
            self.last_proc = proc;
        }
        Some(sample)
    }
}

/// How a soak ended and what it saw.
#[derive(Debug, Clone, Serialize)]
pub struct SoakResults {
    /// `duration` (ran to its end), `gateway exited`, or the signal that stopped it.
    pub ended_by: String,
    /// The figures.
    pub summary: SoakSummary,
    /// Every sample, in order.
    #[serde(skip)]
    pub samples: Vec<SoakSample>,
}

/// Run a soak: start `plan.callers` caller slots, sample every `plan.sample_interval_s` until
/// `plan.duration_s` has passed (or `stop` resolves, or the gateway exits), hang up, take a last
/// sample with no call up, and summarize. `on_sample` sees every sample as it is taken.
pub async fn run(
    plan: &SoakPlan,
    setup: Arc<CallerSetup>,
    gw: &GatewayView<'_>,
    stop: impl Future<Output = &'static str>,
    mut on_sample: impl FnMut(&SoakSample),
) -> SoakResults {
    let mut sampler = Sampler {
        gw,
        harness: setup.sender.clone(),
        origin: Instant::now(),
        base: Baseline {
            scrape: None,
            harness_late_ticks: setup.sender.stats().late_ticks,
        },
        last_proc: None,
    };
    sampler.base.scrape = sampler.scrape().await;
    let mut samples = Vec::new();
    let mut tally = Tally::default();
    let mut ended_by = String::from("duration");
    match sampler.sample("idle", tally).await {
        Some(s) => {
            on_sample(&s);
            samples.push(s);
        }
        None => {
            return SoakResults {
                ended_by: "gateway exited".into(),
                summary: summarize(&samples),
                samples,
            }
        }
    }

    let plan_arc = Arc::new(plan.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let ids = Arc::new(AtomicUsize::new(0));
    let origin = Instant::now();
    sampler.origin = origin;
    let slots: Vec<_> = (0..plan.callers)
        .map(|i| {
            tokio::spawn(slot(
                i,
                Arc::clone(&plan_arc),
                Arc::clone(&setup),
                Arc::clone(&ids),
                stop_rx.clone(),
                events_tx.clone(),
            ))
        })
        .collect();
    drop(events_tx);
    let interval = Duration::from_secs_f64(plan.sample_interval_s.max(0.1));
    let end = origin + Duration::from_secs_f64(plan.duration_s);
    let warm = origin + Duration::from_secs_f64(plan.warmup_s);
    let mut tick = tokio::time::interval_at((origin + interval).into(), interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            e = events.recv() => {
                if let Some(e) = e {
                    tally.on_event(&e);
                }
            }
            _ = tick.tick() => {
                let now = Instant::now();
                let phase = if now < warm { "warmup" } else { "soak" };
                match sampler.sample(phase, tally).await {
                    Some(s) => {
                        on_sample(&s);
                        samples.push(s);
                    }
                    None => {
                        ended_by = "gateway exited".into();
                        break;
                    }
                }
            }
            () = tokio::time::sleep_until(end.into()) => break,
            signal = &mut stop => {
                ended_by = signal.to_owned();
                break;
            }
        }
    }
    // The last loaded sample closes the loaded window (unless the gateway is gone).
    // (A sample taken under a second ago already does.)
    let fresh = Duration::from_secs(1).min(interval / 2);
    let last_at = samples.last().map(|s| s.t_s).unwrap_or(0.0);
    if ended_by != "gateway exited"
        && origin.elapsed().as_secs_f64() - last_at >= fresh.as_secs_f64()
    {
        let now = Instant::now();
        let phase = if now < warm { "warmup" } else { "soak" };
        while let Ok(e) = events.try_recv() {
            tally.on_event(&e);
        }
        if let Some(s) = sampler.sample(phase, tally).await {
            on_sample(&s);
            samples.push(s);
        }
    }
    let _ = stop_tx.send(true);
    let hang_up = async {
        for s in slots {
            let _ = s.await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(15), hang_up).await;
    while let Ok(e) = events.try_recv() {
        tally.on_event(&e);
    }
    if ended_by != "gateway exited" {
        tokio::time::sleep(SETTLE).await;
        if let Some(s) = sampler.sample("after", tally).await {
            on_sample(&s);
            samples.push(s);
        }
    }
    SoakResults {
        ended_by,
        summary: summarize(&samples),
        samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listen::AgentUtterance;

    #[test]
    fn durations() {
        let s = |v: f64| Ok(Duration::from_secs_f64(v));
        assert_eq!(parse_duration("90"), s(90.0));
        assert_eq!(parse_duration("1.5"), s(1.5));
        assert_eq!(parse_duration("90s"), s(90.0));
        assert_eq!(parse_duration("10m"), s(600.0));
        assert_eq!(parse_duration("1h"), s(3600.0));
        assert_eq!(parse_duration("1h30m"), s(5400.0));
        assert_eq!(parse_duration("500ms"), s(0.5));
        assert_eq!(parse_duration(" 2m10s "), s(130.0));
        for bad in ["", "h", "10x", "1h30", "-5", "1..2s", "s10"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn outcomes() {
        let trace = |kinds: &[RecordKind]| {
            let mut t = CallTrace::default();
            for k in kinds {
                t.note(k);
            }
            t.outcome()
        };
        let answered = RecordKind::Answered {
            setup: Duration::from_millis(5),
        };
        assert_eq!(trace(&[]), Outcome::Abandoned);
        assert_eq!(trace(std::slice::from_ref(&answered)), Outcome::Completed);
        assert_eq!(trace(&[RecordKind::Refused]), Outcome::Refused);
        assert_eq!(trace(&[RecordKind::Failed("x".into())]), Outcome::Failed);
        assert_eq!(
            trace(&[answered.clone(), RecordKind::Failed("sender".into())]),
            Outcome::Failed
        );
        assert_eq!(
            trace(&[answered, RecordKind::DroppedByGateway("BYE".into())]),
            Outcome::Dropped
        );
    }

    #[test]
    fn tally_counts_calls_and_refusals_apart() {
        let mut t = Tally::default();
        t.on_record(&RecordKind::Answered {
            setup: Duration::ZERO,
        });
        t.on_record(&RecordKind::Answered {
            setup: Duration::ZERO,
        });
        assert_eq!(t.up, 2);
        t.on_record(&RecordKind::Turn {
            latency: Duration::from_millis(400),
            paused: false,
            short: false,
        });
        t.on_record(&RecordKind::Agent(AgentUtterance {
            started: Duration::ZERO,
            ended: Duration::from_secs(61),
            frames: 3000,
            underruns: 1,
            missing_frames: 4,
        }));
        t.on_end(Outcome::Completed, true);
        t.on_end(Outcome::Dropped, true);
        t.on_end(Outcome::Refused, false);
        t.on_end(Outcome::Refused, false);
        t.on_end(Outcome::Failed, false);
        assert_eq!(t.up, 0);
        assert_eq!((t.completed, t.refused, t.failed_calls()), (1, 2, 2));
        assert_eq!((t.turns, t.heard_underruns), (1, 1));
        assert!((t.agent_audio_s - 60.0).abs() < 1e-9);
    }

    fn sample(t_s: f64, phase: &str, rss_mib: u64, fds: usize, threads: u64) -> SoakSample {
        SoakSample {
            t_s,
            phase: phase.into(),
            rss_kib: Some(rss_mib * 1024),
            fds: Some(fds),
            sockets: Some(fds - 10),
            udp_sockets: Some(fds - 12),
            threads: Some(threads),
            late_ticks: Some(0),
            underruns: Some(0),
            load_1m: Some(1.0 + t_s / 3600.0),
            ..SoakSample::default()
        }
    }

    #[test]
    fn summary_of_a_flat_soak() {
        let mut samples = vec![sample(-0.1, "idle", 60, 20, 12)];
        samples.push(sample(10.0, "warmup", 100, 120, 14));
        for i in 1..=6u64 {
            let t = 600.0 * i as f64;
            let mut s = sample(t, "soak", 110 + (i % 2), 118 + (i % 3) as usize, 14);
            s.late_ticks = Some(i / 4);
            s.calls.up = 47 + (i % 2);
            s.calls.completed = 100 * i;
            samples.push(s);
        }
        let mut after = sample(3610.0, "after", 80, 21, 12);
        after.late_ticks = Some(1);
        after.calls.completed = 700;
        after.calls.refused = 3;
        after.calls.heard_underruns = 2;
        after.calls.agent_audio_s = 120.0;
        samples.push(after);

        let s = summarize(&samples);
        assert_eq!((s.samples, s.steady_samples), (9, 6));
        assert_eq!(s.loaded_s, 3600.0);
        assert_eq!(s.idle_before.and_then(|i| i.rss_mb), Some(60.0));
        assert_eq!(s.idle_after.and_then(|i| i.fds), Some(21));
        assert_eq!(s.rss_warm_mb, Some(111.0));
        assert_eq!(s.rss_end_mb, Some(110.0));
        assert_eq!(s.rss_max_mb, Some(111.0));
        assert!(s.rss_trend_mb_per_h.is_some_and(|v| v.abs() < 1.0));
        assert_eq!(s.fds, Some(MinMax { min: 118, max: 120 }));
        assert_eq!(s.udp_sockets, Some(MinMax { min: 106, max: 108 }));
        assert_eq!(s.threads, Some(MinMax { min: 14, max: 14 }));
        assert_eq!(s.calls_up, Some(MinMax { min: 47, max: 48 }));
        assert_eq!(s.late_ticks, Some(1));
        assert_eq!(
            (s.calls.completed, s.calls.refused, s.failed_calls),
            (700, 3, 0)
        );
        assert!((s.heard_underruns_per_min - 1.0).abs() < 1e-9);
        assert!(s.load_1m.is_some_and(|m| m.min < m.max));
        let text = summary_text(&s);
        assert!(text.contains("111.0 MiB after warm-up"), "{text}");
        assert!(text.contains("fds 118–120"), "{text}");
    }

    #[test]
    fn summary_sees_growth_and_survives_no_samples() {
        // 1 MiB per 10 minutes: 6 MiB an hour.
        let samples: Vec<SoakSample> = (0..=6)
            .map(|i| sample(600.0 * i as f64, "soak", 100 + i as u64, 100, 14))
            .collect();
        let s = summarize(&samples);
        assert!(s.rss_trend_mb_per_h.is_some_and(|v| (v - 6.0).abs() < 1e-9));
        let empty = summarize(&[]);
        assert_eq!(empty.samples, 0);
        assert_eq!(empty.rss_warm_mb, None);
        assert_eq!(empty.fds, None);
        let _ = summary_text(&empty);
    }

    #[test]
    fn min_max() {
        assert_eq!(MinMax::of([3, 1, 2]), Some(MinMax { min: 1, max: 3 }));
        assert_eq!(MinMax::<u32>::of([]), None);
        assert_eq!(slope(&[(0.0, 1.0), (1.0, 3.0)]), Some(2.0));
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 3.0)]), None);
    }
}
