//! Admission by measured headroom, sans-IO: from what the gateway measures each second — the
//! inference thread's CPU and its jobs' queue wait, the sender's late ticks, the cgroup's
//! throttled periods — estimate how many more calls fit before the ok rule (every turn answered
//! in time, no late tick, no underrun) would break, so new calls are refused *before* the core
//! degrades for everyone on it. `max_calls` stays the hard ceiling on top.
//!
//! The estimate is a capacity, not a prediction of the future: calls cost CPU on the one
//! inference thread in proportion to their number (the measured cost per call is smoothed),
//! and a warning sign that the thread or the container is already saturated (queue wait,
//! lateness, throttling) says "no more" whatever the arithmetic says.
//!
//! How full the gateway may be is a queueing question, not a fixed share. A turn's verdict waits
//! behind the jobs ahead of it, and that wait grows like ρ/(1−ρ) with the utilisation ρ long
//! before the CPU is full (Pollaczek–Khinchine: the mean wait of an M/G/1 queue is
//! ρ·E\[S²\]/(2·E\[S\]·(1−ρ)); the long jobs here are Smart Turn runs of S ≈ 30–60 ms). The extra
//! p95 turn latency is modelled as `wait_factor · S · ρ/(1−ρ)` and kept within
//! `queueing_budget`, which gives the utilisation calls may fill: ρ* = B / (B + k·S), capped at
//! `target_utilisation`. On a dedicated core every thread of the gateway shares the core, so ρ
//! is the process's as much as the inference thread's, and the same ρ* bounds both.
//!
//! Calibrated on the reference VM (docs/capacity.md, 2026-12-01, dedicated core, steps 1, 64,
//! 128): the extra p95 over the first step's was 80 ms at ρ = 0.54, 300 ms at 0.73 and 400 ms at
//! 0.83 (process utilisation), i.e. k·S = 67–113 ms with Smart Turn runs measured at 27 ms:
//! k = 4.2 takes the worst. With B = 250 ms (the harness allows 300 ms over the first step's
//! median, whose own p95 is some 40–50 ms above it), ρ* = 0.69 at S = 27 ms, and 0.50 at the
//! 60 ms prior before a run is measured. The linear 0.75 admitted 128 calls at 0.83 and p95
//! 684 ms where the bound was 544.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One reading of the gateway's counters (all monotonic except `calls`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When it was read.
    pub at: Instant,
    /// Calls admitted now.
    pub calls: usize,
    /// Calls admitted since the start (monotonic): with `calls`, how many are young.
    pub admitted: u64,
    /// CPU the models have used on the inference thread so far.
    pub inference_cpu: Duration,
    /// CPU the whole process has used so far (sender, tokio, inference: on a dedicated core
    /// they share it).
    pub process_cpu: Duration,
    /// Queue waits of inference jobs so far, summed, and how many.
    pub queue_wait: Duration,
    /// See `queue_wait`.
    pub queue_waits: u64,
    /// The sender's late ticks so far.
    pub late_ticks: u64,
    /// Smart Turn's share of `inference_cpu`, and its runs so far: its mean run is the long
    /// service time turns queue behind.
    pub turn_cpu: Duration,
    /// See `turn_cpu`.
    pub turn_runs: u64,
    /// The cgroup's CFS periods and throttled periods so far (0 without a quota).
    pub periods: u64,
    /// See `periods`.
    pub throttled: u64,
}

/// Where the estimate draws its lines.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadroomLimits {
    /// CPU the inference thread may use, in cores (at most 1: it is one thread; under a quota,
    /// what the quota leaves after the sender).
    pub inference_cores: f64,
    /// CPU the whole process may use, in cores (its CPU affinity, or its quota if smaller).
    pub process_cores: f64,
    /// The most of `inference_cores` calls may fill, whatever the queue model allows.
    pub target_utilisation: f64,
    /// Extra p95 turn latency queueing may add at the admitted load (the load harness's ok
    /// rule allows 300 ms over the first step's median; a single call's p95 sits 40–50 ms over
    /// its median already).
    pub queueing_budget: Duration,
    /// p95 queueing delay per unit of `S·ρ/(1−ρ)` (module docs: 4.2 on the reference VM; an
    /// exponential wait's p95 is 3× its mean, a turn's verdict may wait for two runs,
    /// speculative and final, and the VAD batches and tokio share the core).
    pub wait_factor: f64,
    /// Smart Turn's CPU per run before one has been measured.
    pub prior_turn_run: Duration,
    /// Mean queue wait over a window above which no call is added.
    pub max_queue_wait: Duration,
    /// Throttled share of CFS periods above which no call is added.
    pub max_throttle_ratio: f64,
    /// Inference CPU of a settled call, in cores, before one has been measured.
    pub prior_cost: f64,
    /// Whole-process CPU of a settled call, in cores, before one has been measured.
    pub prior_process_cost: f64,
    /// How close together the first turns of calls admitted together land (`None`: calls
    /// are not charged for arriving together). Calls answered within this window of each
    /// other end their first turns within it too, so each brings one Smart Turn run onto the
    /// inference thread at once: `S / window` of a core while it lasts, on top of the steady
    /// cost every call pays.
    pub first_turn_spread: Option<Duration>,
}

impl Default for HeadroomLimits {
    fn default() -> Self {
        HeadroomLimits {
            inference_cores: 1.0,
            process_cores: 1.0,
            target_utilisation: 0.75,
            queueing_budget: Duration::from_millis(250),
            wait_factor: 4.2,
            prior_turn_run: PRIOR_TURN_RUN,
            // A turn's verdict waiting 100 ms on average already eats most of the latency
            // margin the ok rule leaves.
            max_queue_wait: Duration::from_millis(100),
            max_throttle_ratio: 0.02,
            // Measured on this project's reference VM at 64 settled calls on a dedicated core
            // (docs/capacity.md, SRTP vs plain RTP): the inference thread 0.0044 core a call,
            // the whole process 0.0059; rounded up, since a prior that is too low admits a
            // ramp's calls before the first settled window can correct it.
            prior_cost: 0.005,
            prior_process_cost: 0.007,
            // The load harness's callers start speaking within a second of the answer and
            // their first utterances last 1.5–3 s: 128 calls answered within a second ended
            // their first turns within about two, and the 80 admitted at once then waited up
            // to 1.4 s for their verdicts (docs/capacity.md, 2026-12-02).
            first_turn_spread: Some(FIRST_TURN_SPREAD),
        }
    }
}

/// The estimate: how many more calls fit now, and what limits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// More calls that fit.
    pub calls: usize,
    /// What holds it at zero (or down): `cpu`, `queue_wait`, `late_ticks`, `throttled`;
    /// `None` while there is room.
    pub limited_by: Option<&'static str>,
}

/// See [`HeadroomLimits::first_turn_spread`].
pub const FIRST_TURN_SPREAD: Duration = Duration::from_secs(2);

/// The inference thread's utilisation calls arriving together may take it to while their
/// first turns last. Above the steady limit of the queue model (which bounds the waiting of
/// a load that lasts): a burst of a few seconds queues little while the thread keeps up, and
/// builds a backlog only when it cannot (80 calls answered within a second brought 1.5 cores
/// of work and waited up to 1.4 s; 64 over five seconds, 0.7 of a core, waited 60 ms at p95).
const BURST_UTILISATION: f64 = 0.8;

/// CPU of one Smart Turn run on the reference VM (docs/inference.md, *CPU budget*: 60–70 ms),
/// before the gateway has measured its own.
pub const PRIOR_TURN_RUN: Duration = Duration::from_millis(60);

/// Smooths the measured cost per call over readings.
#[derive(Debug)]
pub struct HeadroomEstimator {
    limits: HeadroomLimits,
    previous: Option<Sample>,
    /// Readings of the last [`SETTLE`] (and the one before it), oldest first: `(at, admitted)`,
    /// to count the calls admitted within it.
    admissions: VecDeque<(Instant, u64)>,
    /// Inference CPU per call, in cores (smoothed).
    cost: Option<f64>,
    /// Whole-process CPU per call, in cores, over the idle process's (smoothed).
    process_cost: Option<f64>,
    /// Whole-process CPU with no call, in cores (smoothed; the sender's ticks, the runtime,
    /// the metrics): charged once, not per call, or one call measured alone would look like
    /// a call costing the whole idle gateway (0.023 core instead of 0.006 here).
    idle_process: Option<f64>,
    /// Smart Turn's CPU per run, in seconds (smoothed).
    turn_run: Option<f64>,
    /// Calls admitted within the last `first_turn_spread`, at the last reading.
    arriving: usize,
}

fn smooth(previous: Option<f64>, sample: f64) -> f64 {
    match previous {
        Some(c) => c + COST_WEIGHT * (sample - c),
        None => sample,
    }
}

/// Readings closer together than this are too noisy to difference.
const MIN_WINDOW: Duration = Duration::from_millis(500);
/// Weight of a new cost reading in the running estimate.
const COST_WEIGHT: f64 = 0.3;
/// How long a call is young: long enough for a caller's first turn (and its Smart Turn runs)
/// to have been paid for. The load harness's callers start speaking within a second and end
/// their first turn within about four.
pub const SETTLE: Duration = Duration::from_secs(10);
/// The share of young calls above which a window does not update the cost.
const MAX_YOUNG_SHARE: f64 = 0.25;
/// Settled calls a window needs to update the cost. A few calls cost more each than many: a
/// VAD batch has a fixed cost whatever its size, and one caller's Smart Turn run (about 60 ms)
/// swings a handful's average. One call measured alone cost 0.02 core of inference, four
/// times what each of 64 costs, and the next step of the harness was refused at 5 of 32 calls.
/// Below this the prior stands.
const MIN_MEASURED_CALLS: f64 = 16.0;

impl HeadroomEstimator {
    /// An estimator with these limits.
    pub fn new(limits: HeadroomLimits) -> HeadroomEstimator {
        HeadroomEstimator {
            limits,
            previous: None,
            admissions: VecDeque::new(),
            cost: None,
            process_cost: None,
            idle_process: None,
            turn_run: None,
            arriving: 0,
        }
    }

    /// The utilisation calls may fill: where the modelled queueing delay of a turn's verdict
    /// reaches the budget, at most `target_utilisation` (module docs).
    pub fn utilisation_limit(&self) -> f64 {
        let service = self
            .turn_run
            .unwrap_or(self.limits.prior_turn_run.as_secs_f64());
        let budget = self.limits.queueing_budget.as_secs_f64();
        let queueing = budget / (budget + self.limits.wait_factor * service);
        if queueing.is_finite() {
            queueing.clamp(0.0, self.limits.target_utilisation)
        } else {
            self.limits.target_utilisation
        }
    }

    /// The estimate before anything was measured: an idle gateway charged the prior cost per
    /// call. The gateway starts from it, so `/readyz`, the metric and the very first OPTIONS
    /// answer agree from the moment the SIP port is bound (a front door marks a destination
    /// down on its first failed ping).
    pub fn prior(&self) -> Estimate {
        self.estimate(0, None)
    }

    /// The measured cost of a call, in cores (None before any call was measured).
    #[cfg(test)]
    pub fn cost_per_call(&self) -> Option<f64> {
        self.cost
    }

    /// Calls of `s` admitted within the last [`SETTLE`] (calls present at the first reading
    /// count as settled: their age is unknown, and a gateway's first reading has none).
    fn young_calls(&mut self, s: &Sample) -> usize {
        // Keep the newest reading at least SETTLE old as the baseline, drop older ones.
        while self.admissions.len() >= 2
            && s.at.saturating_duration_since(self.admissions[1].0) >= SETTLE
        {
            self.admissions.pop_front();
        }
        let since = match self.admissions.front() {
            Some(&(at, admitted)) if s.at.saturating_duration_since(at) >= SETTLE => admitted,
            // No reading SETTLE old yet: admissions since the first reading are young.
            Some(&(_, admitted)) => admitted,
            None => s.admitted,
        };
        self.admissions.push_back((s.at, s.admitted));
        (s.admitted.saturating_sub(since) as usize).min(s.calls)
    }

    /// Calls of `s` admitted within the last `first_turn_spread` (by the readings kept for
    /// [`SETTLE`]; before a reading that old, since the first one).
    fn arriving_calls(&self, s: &Sample) -> usize {
        let Some(spread) = self.limits.first_turn_spread else {
            return 0;
        };
        let since = self
            .admissions
            .iter()
            .rev()
            .find(|(at, _)| s.at.saturating_duration_since(*at) >= spread)
            .or(self.admissions.front())
            .map_or(s.admitted, |&(_, admitted)| admitted);
        (s.admitted.saturating_sub(since) as usize).min(s.calls)
    }

    /// Take a reading and estimate.
    pub fn update(&mut self, s: Sample) -> Estimate {
        let mut warning = None;
        if let Some(p) = self.previous {
            if s.at.saturating_duration_since(p.at) < MIN_WINDOW {
                return self.estimate(s.calls, None);
            }
        }
        self.arriving = self.arriving_calls(&s);
        let young = self.young_calls(&s) as f64;
        if let Some(p) = self.previous {
            let secs = s.at.saturating_duration_since(p.at).as_secs_f64();
            let share = s
                .inference_cpu
                .saturating_sub(p.inference_cpu)
                .as_secs_f64()
                / secs;
            let calls = (s.calls + p.calls) as f64 / 2.0;
            let settled = (calls - young).max(0.0);
            let process_share = s.process_cpu.saturating_sub(p.process_cpu).as_secs_f64() / secs;
            // Charged to the settled calls alone: the young ones cost less, so this errs on
            // the side of refusing, by at most a third (a quarter of the calls young). A window
            // in which many calls ended says nothing of a call's cost either: the average of
            // its two counts charges its CPU to calls that were gone for most of it (64 calls
            // hanging up in one window halved the cost per call, and the next ramp of 128 was
            // admitted whole against a capacity of 103).
            let ended = p.calls.saturating_sub(s.calls) as f64;
            if p.calls > 0
                && young <= MAX_YOUNG_SHARE * calls
                && ended <= MAX_YOUNG_SHARE * calls
                && settled >= MIN_MEASURED_CALLS
            {
                self.cost = Some(smooth(self.cost, share / settled));
                let idle = self.idle_process.unwrap_or(0.0);
                let per_call = (process_share - idle).max(0.0) / settled;
                self.process_cost = Some(smooth(self.process_cost, per_call));
            } else if s.calls == 0 && p.calls == 0 {
                self.idle_process = Some(smooth(self.idle_process, process_share));
            }
            let runs = s.turn_runs.saturating_sub(p.turn_runs);
            if runs > 0 {
                let run = s.turn_cpu.saturating_sub(p.turn_cpu).as_secs_f64() / runs as f64;
                self.turn_run = Some(smooth(self.turn_run, run));
            }
            let waits = s.queue_waits.saturating_sub(p.queue_waits);
            if waits > 0 {
                let mean = s.queue_wait.saturating_sub(p.queue_wait) / waits as u32;
                if mean > self.limits.max_queue_wait {
                    warning = Some("queue_wait");
                }
            }
            if s.late_ticks > p.late_ticks {
                warning = Some("late_ticks");
            }
            let periods = s.periods.saturating_sub(p.periods);
            if periods > 0 {
                let ratio = s.throttled.saturating_sub(p.throttled) as f64 / periods as f64;
                if ratio > self.limits.max_throttle_ratio {
                    warning = Some("throttled");
                }
            }
        }
        self.previous = Some(s);
        self.estimate(s.calls, warning)
    }

    fn estimate(&self, calls: usize, warning: Option<&'static str>) -> Estimate {
        if let Some(w) = warning {
            return Estimate {
                calls: 0,
                limited_by: Some(w),
            };
        }
        let utilisation = self.utilisation_limit();
        let fits = |cores: f64, idle: f64, cost: Option<f64>, prior: f64| {
            let cost = cost.unwrap_or(prior).max(1e-6);
            let n = ((cores * utilisation - idle).max(0.0) / cost).floor();
            if n.is_finite() {
                n.min(1e6) as usize
            } else {
                0
            }
        };
        // The inference thread is one thread (at most a core), and the whole process shares
        // its cores with it: whichever fills first is the capacity.
        let capacity = fits(
            self.limits.inference_cores,
            0.0,
            self.cost,
            self.limits.prior_cost,
        )
        .min(fits(
            self.limits.process_cores,
            self.idle_process.unwrap_or(0.0),
            self.process_cost,
            self.limits.prior_process_cost,
        ));
        let more = capacity.saturating_sub(calls);
        let arriving = self.arrivals_that_fit(calls);
        if arriving < more {
            return Estimate {
                calls: arriving,
                limited_by: (arriving == 0).then_some("arrivals"),
            };
        }
        Estimate {
            calls: more,
            limited_by: (more == 0).then_some("cpu"),
        }
    }

    /// More calls that may be admitted now on top of those arriving already: the inference
    /// thread carries every call's steady cost, and for `first_turn_spread` after calls
    /// arrive together, one Smart Turn run each spread over it (their first turns), all within
    /// [`BURST_UTILISATION`].
    fn arrivals_that_fit(&self, calls: usize) -> usize {
        let Some(spread) = self.limits.first_turn_spread else {
            return usize::MAX;
        };
        let run = self
            .turn_run
            .unwrap_or(self.limits.prior_turn_run.as_secs_f64());
        let per_arrival = run / spread.as_secs_f64().max(1e-3);
        let cost = self.cost.unwrap_or(self.limits.prior_cost).max(1e-6);
        let room = self.limits.inference_cores * BURST_UTILISATION
            - calls as f64 * cost
            - self.arriving as f64 * per_arrival;
        let n = (room / (per_arrival + cost)).floor();
        if n.is_finite() && n > 0.0 {
            n.min(1e6) as usize
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU arithmetic alone: a queueing budget so large that `target_utilisation` (0.75)
    /// is the limit.
    fn cpu_only() -> HeadroomLimits {
        HeadroomLimits {
            queueing_budget: Duration::from_secs(1_000_000),
            first_turn_spread: None,
            ..HeadroomLimits::default()
        }
    }

    fn sample(t0: Instant, secs: u64, calls: usize, cpu_ms: u64) -> Sample {
        Sample {
            at: t0 + Duration::from_secs(secs),
            calls,
            // Every call present from the first reading on: settled.
            admitted: 0,
            inference_cpu: Duration::from_millis(cpu_ms),
            // Nothing but inference: both limits give the same capacity.
            process_cpu: Duration::from_millis(cpu_ms),
            queue_wait: Duration::ZERO,
            queue_waits: 0,
            late_ticks: 0,
            turn_cpu: Duration::ZERO,
            turn_runs: 0,
            periods: 0,
            throttled: 0,
        }
    }

    #[test]
    fn capacity_follows_the_measured_cost_per_call() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(cpu_only());
        // No call measured yet: the priors (0.005 core of inference, 0.007 of the process)
        // give 150 and 107 calls on 0.75 of a core; the process fills first.
        assert_eq!(e.update(sample(t0, 0, 0, 0)).calls, 107);
        // 20 calls using 0.3 core: 0.015 a call → 50 fit, 30 more.
        assert_eq!(e.update(sample(t0, 1, 20, 300)).calls, 87);
        let est = e.update(sample(t0, 2, 20, 600));
        assert!((e.cost_per_call().unwrap() - 0.015).abs() < 1e-9);
        assert_eq!(est.calls, 30);
        assert_eq!(est.limited_by, None);
        // Full: 50 calls at that cost leave none, limited by CPU.
        let est = e.update(sample(t0, 3, 50, 1350));
        assert_eq!(
            est,
            Estimate {
                calls: 0,
                limited_by: Some("cpu")
            }
        );
    }

    #[test]
    fn the_prior_is_what_the_first_reading_gives_an_idle_gateway() {
        let e = HeadroomEstimator::new(cpu_only());
        assert_eq!(
            e.prior(),
            Estimate {
                calls: 107,
                limited_by: None
            }
        );
        let mut measured = HeadroomEstimator::new(cpu_only());
        assert_eq!(measured.update(sample(Instant::now(), 0, 0, 0)), e.prior());
    }

    fn admitted(mut s: Sample, admitted: u64) -> Sample {
        s.admitted = admitted;
        s
    }

    #[test]
    fn a_ramp_of_new_calls_is_charged_the_prior_until_they_settle() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(cpu_only());
        assert_eq!(e.update(sample(t0, 0, 0, 0)).calls, 107);
        // 13 calls a second, each costing 0.001 core before its caller's first turn: measured
        // so, 0.75 / 0.001 would fit 750. Charged the prior, 107 fit.
        assert_eq!(e.update(admitted(sample(t0, 1, 13, 13), 13)).calls, 94);
        assert_eq!(e.update(admitted(sample(t0, 2, 26, 39), 26)).calls, 81);
        assert_eq!(e.cost_per_call(), None);
    }

    #[test]
    fn new_calls_are_charged_the_settled_cost_not_their_first_seconds() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(cpu_only());
        e.update(admitted(sample(t0, 0, 20, 0), 20));
        // 20 settled calls at 0.01 core each: 75 fit, 55 more.
        assert_eq!(e.update(admitted(sample(t0, 1, 20, 200), 20)).calls, 55);
        // 40 new calls in a second, costing 0.001 core each so far. Averaged in, the cost
        // would fall to 0.006 and 125 would fit; charged the settled 0.01, 15 more.
        let mut cpu = 200 + 240;
        assert_eq!(e.update(admitted(sample(t0, 2, 60, cpu), 60)).calls, 15);
        assert!((e.cost_per_call().unwrap() - 0.01).abs() < 1e-9);
        // Their first turns: 0.6 core for the 60. Young until SETTLE after their arrival, so
        // the cost stands; then the first settled window measures them.
        for t in 3..12 {
            cpu += 600;
            assert_eq!(
                e.update(admitted(sample(t0, t, 60, cpu), 60)).calls,
                15,
                "{t}"
            );
        }
        cpu += 300;
        // Settled, they cost 0.005 each: smoothed, 0.0085 → 88 fit, 28 more.
        assert_eq!(e.update(admitted(sample(t0, 12, 60, cpu), 60)).calls, 28);
    }

    #[test]
    fn few_calls_do_not_set_the_cost() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(cpu_only());
        e.update(sample(t0, 0, 1, 0));
        // One call alone: 0.02 core (a VAD batch of one costs nearly what a batch of ten
        // does). Taken as the cost, 37 would fit; below 16 calls the prior stands: 107.
        let mut s = sample(t0, 1, 1, 20);
        s.process_cpu = Duration::from_millis(20);
        assert_eq!(e.update(s).calls, 106);
        assert_eq!(e.cost_per_call(), None);
    }

    #[test]
    fn the_idle_gateway_is_charged_once_not_per_call() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(cpu_only());
        // No call: the process idles at 0.02 core (no model runs).
        let idle = |secs| {
            let mut s = sample(t0, secs, 0, 0);
            s.process_cpu = Duration::from_millis(20 * secs);
            s
        };
        e.update(idle(0));
        e.update(idle(1));
        // 20 calls: 0.005 core of inference each, the process 0.14 core in all, 0.006 a call
        // over its idle 0.02. Settled (10 s on), (0.75 − 0.02) / 0.006 = 121 fit, 101 more;
        // charged 0.007 a call with the idle share in it, 107 would fit, 87 more.
        let mut last = None;
        for t in 2..=12u64 {
            let mut s = admitted(sample(t0, t, 20, 100 * (t - 1)), 20);
            s.process_cpu = Duration::from_millis(20 + 140 * (t - 1));
            last = Some(e.update(s));
        }
        assert_eq!(last.map(|est| est.calls), Some(101));
    }

    #[test]
    fn the_process_fills_its_cores_before_the_inference_thread_does() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(cpu_only());
        e.update(sample(t0, 0, 20, 0));
        // 20 calls: inference 0.2 core, the whole process 0.5 (sender, tokio): on one core
        // the process is the limit, 0.75 / 0.025 = 30 calls, 10 more.
        let mut s = sample(t0, 1, 20, 200);
        s.process_cpu = Duration::from_millis(500);
        assert_eq!(e.update(s).calls, 10);
    }

    #[test]
    fn saturation_signs_refuse_whatever_the_arithmetic_says() {
        let t0 = Instant::now();
        for (what, tweak) in [
            (
                "queue_wait",
                Box::new(|s: &mut Sample| {
                    s.queue_wait = Duration::from_millis(50 * 150);
                    s.queue_waits = 50;
                }) as Box<dyn Fn(&mut Sample)>,
            ),
            ("late_ticks", Box::new(|s: &mut Sample| s.late_ticks = 1)),
            (
                "throttled",
                Box::new(|s: &mut Sample| {
                    s.periods = 10;
                    s.throttled = 1;
                }),
            ),
        ] {
            let mut e = HeadroomEstimator::new(cpu_only());
            e.update(sample(t0, 0, 20, 0));
            let mut s = sample(t0, 1, 20, 200);
            tweak(&mut s);
            assert_eq!(
                e.update(s),
                Estimate {
                    calls: 0,
                    limited_by: Some(what)
                },
                "{what}"
            );
            // The sign gone in the next window: room again.
            let mut next = s;
            next.at += Duration::from_secs(1);
            next.inference_cpu += Duration::from_millis(200);
            next.process_cpu += Duration::from_millis(200);
            // 0.2 core for 20 calls again: 0.01 a call, 75 fit on 0.75 of a core, 55 more.
            assert_eq!(e.update(next).calls, 55, "{what}");
        }
    }

    #[test]
    fn waits_below_the_limit_and_short_windows_change_nothing() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(cpu_only());
        e.update(sample(t0, 0, 10, 0));
        let mut s = sample(t0, 1, 10, 100);
        s.queue_wait = Duration::from_millis(20 * 40);
        s.queue_waits = 40;
        assert_eq!(e.update(s).limited_by, None);
        // 100 ms later: too short to difference, the estimate stands.
        let mut soon = s;
        soon.at += Duration::from_millis(100);
        soon.late_ticks = 5;
        assert_eq!(e.update(soon).limited_by, None);
    }

    /// The defaults without the charge for calls arriving together: the queue model alone.
    fn queue_only() -> HeadroomLimits {
        HeadroomLimits {
            first_turn_spread: None,
            ..HeadroomLimits::default()
        }
    }

    /// `s` with Smart Turn's CPU (ms) and runs so far.
    fn with_turns(mut s: Sample, turn_cpu_ms: u64, turn_runs: u64) -> Sample {
        s.turn_cpu = Duration::from_millis(turn_cpu_ms);
        s.turn_runs = turn_runs;
        s
    }

    /// The prior Smart Turn run (60 ms) with the default budget and factor: ρ* = 0.25 / (0.25 +
    /// 4.2 · 0.06) = 0.498, below the 0.75 cap.
    #[test]
    fn the_utilisation_limit_comes_from_the_queueing_budget() {
        let e = HeadroomEstimator::new(queue_only());
        assert!((e.utilisation_limit() - 0.25 / 0.502).abs() < 1e-9);
        // An idle gateway: 0.498 of a core at the priors (0.005 and 0.007 a call) is 71 calls
        // by the process, 99 by the thread; the process fills first.
        assert_eq!(e.prior().calls, 71);
        // A budget large enough leaves the cap.
        let loose = HeadroomEstimator::new(HeadroomLimits {
            queueing_budget: Duration::from_secs(100),
            ..queue_only()
        });
        assert_eq!(loose.utilisation_limit(), 0.75);
    }

    /// 64 settled calls at 0.415 of a core (0.0065 a call) with 60 ms Smart Turn runs. The
    /// linear rule (0.75) would take the gateway to 115 calls, 51 more; the queue model stops at
    /// 0.498 / 0.0065 = 76 calls, 12 more.
    #[test]
    fn sixty_four_calls_at_forty_percent_leave_room_for_twelve_not_fifty_one() {
        let t0 = Instant::now();
        let run = |limits: HeadroomLimits| {
            let mut e = HeadroomEstimator::new(limits);
            e.update(with_turns(sample(t0, 0, 64, 0), 0, 0));
            // 0.415 s of model CPU a second; Smart Turn ran 4 times at 60 ms each.
            e.update(with_turns(sample(t0, 1, 64, 415), 240, 4)).calls
        };
        let no_process_limit = |l: HeadroomLimits| HeadroomLimits {
            process_cores: 100.0,
            ..l
        };
        assert_eq!(run(no_process_limit(queue_only())), 12);
        let linear = HeadroomLimits {
            queueing_budget: Duration::from_secs(1_000_000),
            ..queue_only()
        };
        assert_eq!(run(no_process_limit(linear)), 51);
    }

    /// Longer Smart Turn runs (a slower CPU) mean longer waits at the same utilisation: the
    /// measured service time lowers the limit. 120 ms runs: ρ* = 0.25 / (0.25 + 0.504) = 0.33.
    #[test]
    fn a_slower_smart_turn_lowers_the_utilisation_calls_may_fill() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(queue_only());
        e.update(with_turns(sample(t0, 0, 0, 0), 0, 0));
        // Two runs (a test call's turns, say), and nothing else of the process measured.
        let mut r = with_turns(sample(t0, 1, 0, 240), 240, 2);
        r.process_cpu = Duration::ZERO;
        e.update(r);
        assert!((e.utilisation_limit() - 0.25 / 0.754).abs() < 1e-9);
        // Fewer than 16 calls measured: the cost per call is still the prior, so the limit
        // alone moved the capacity: 0.3316 / 0.007 = 47 calls.
        assert_eq!(e.prior().calls, 47);
    }

    /// Calls hanging up leave the cost alone: 64 settled calls at 0.4 of a core, then a window
    /// in which all of them end (0.05 of a core spent) and an idle one; the capacity stays what
    /// the 64 measured.
    #[test]
    fn a_window_of_hang_ups_does_not_lower_the_cost_per_call() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(cpu_only());
        e.update(sample(t0, 0, 64, 0));
        e.update(sample(t0, 1, 64, 400));
        let cost = e.cost_per_call().unwrap();
        assert!((cost - 0.4 / 64.0).abs() < 1e-12);
        e.update(sample(t0, 2, 0, 450));
        e.update(sample(t0, 3, 0, 450));
        assert_eq!(e.cost_per_call(), Some(cost));
    }

    /// Calls arriving together each bring a Smart Turn run within `first_turn_spread` (2 s):
    /// with the prior run (60 ms: 0.03 core a call while it lasts) and cost (0.005), 22 fit in
    /// 0.8 of an idle thread at once (the CPU alone would take 107); with those 22 just
    /// arrived, none more; two seconds later, 19 more (their steady cost stays).
    #[test]
    fn calls_arriving_together_are_admitted_as_their_first_turns_fit() {
        let t0 = Instant::now();
        let mut e = HeadroomEstimator::new(HeadroomLimits {
            queueing_budget: Duration::from_secs(1_000_000),
            ..HeadroomLimits::default()
        });
        assert_eq!(
            e.update(sample(t0, 0, 0, 0)),
            Estimate {
                calls: 22,
                limited_by: None
            }
        );
        assert_eq!(
            e.update(admitted(sample(t0, 1, 22, 0), 22)),
            Estimate {
                calls: 0,
                limited_by: Some("arrivals")
            }
        );
        assert_eq!(e.update(admitted(sample(t0, 2, 22, 0), 22)).calls, 0);
        assert_eq!(e.update(admitted(sample(t0, 3, 22, 0), 22)).calls, 19);
        // Without the charge (no spread given), the CPU alone decides.
        let mut cpu = HeadroomEstimator::new(cpu_only());
        assert_eq!(cpu.update(sample(t0, 0, 0, 0)).calls, 107);
    }
}
