//! The SIP endpoint's counters as Prometheus series: `ontime_sip::Endpoint` counts in plain
//! numbers ([`EndpointStats`]) and the driver that flushes it adds each increment here
//! ([`record`]), so the endpoint needs no metrics facade and the names live with the gateway's.
//! `ontime_sip_messages_total` and `ontime_sip_invalid_messages_total` are described in
//! [`super::metrics`] (the transport counts unreadable stream messages in the latter too).

use metrics::{counter, describe_counter};
use ontime_sip::{Budget, EndpointStats};

use super::metrics::{SIP_INVALID_MESSAGES_TOTAL, SIP_MESSAGES_TOTAL};

/// In-dialog requests refused because they are not the dialog peer's, by `reason`
/// (`wrong_tag`: answered 481; `wrong_source`: answered 403; ACKs dropped).
pub const SIP_DIALOG_REQUESTS_REFUSED_TOTAL: &str = "ontime_sip_dialog_requests_refused_total";
/// New requests answered 503 because their transaction budget was full, by `budget`
/// (`out_of_dialog`, `in_dialog`).
pub const SIP_BUDGET_EXHAUSTED_TOTAL: &str = "ontime_sip_budget_exhausted_total";
/// New INVITEs answered 401 (`trunk_auth`), by `reason` (`missing`, `stale`, `invalid`).
pub const SIP_AUTH_CHALLENGES_SENT_TOTAL: &str = "ontime_sip_auth_challenges_sent_total";
/// 401/407 to our requests, by `outcome` (`answered`, `failed`).
pub const SIP_AUTH_CHALLENGES_RECEIVED_TOTAL: &str = "ontime_sip_auth_challenges_received_total";
/// Final results of our REGISTERs, by `result` (`ok`, `failed`).
pub const SIP_REGISTRATIONS_TOTAL: &str = "ontime_sip_registrations_total";

const BUDGETS: [Budget; 2] = [Budget::OutOfDialog, Budget::InDialog];

/// Describes the endpoint's series besides the two [`super::metrics`] has, and registers the ones
/// that count trouble at zero so that a dashboard or an alert sees `0`, not an absent series.
pub(crate) fn describe() {
    describe_counter!(
        SIP_DIALOG_REQUESTS_REFUSED_TOTAL,
        "In-dialog requests refused: wrong From tag (481) or untrusted source (403)"
    );
    describe_counter!(
        SIP_BUDGET_EXHAUSTED_TOTAL,
        "New requests answered 503 because their transaction budget was full"
    );
    describe_counter!(
        SIP_AUTH_CHALLENGES_SENT_TOTAL,
        "New INVITEs answered 401 for missing, stale or invalid digest credentials"
    );
    describe_counter!(
        SIP_AUTH_CHALLENGES_RECEIVED_TOTAL,
        "401/407 to our requests: answered with credentials, or failed"
    );
    describe_counter!(
        SIP_REGISTRATIONS_TOTAL,
        "Final results of our REGISTERs: ok (2xx) or failed"
    );
    for reason in ["wrong_tag", "wrong_source"] {
        counter!(SIP_DIALOG_REQUESTS_REFUSED_TOTAL, "reason" => reason).increment(0);
    }
    for budget in BUDGETS {
        counter!(SIP_BUDGET_EXHAUSTED_TOTAL, "budget" => budget.label()).increment(0);
    }
    for reason in ["missing", "stale", "invalid"] {
        counter!(SIP_AUTH_CHALLENGES_SENT_TOTAL, "reason" => reason).increment(0);
    }
    counter!(SIP_AUTH_CHALLENGES_RECEIVED_TOTAL, "outcome" => "failed").increment(0);
    counter!(SIP_REGISTRATIONS_TOTAL, "result" => "failed").increment(0);
}

/// Adds what the endpoint counted since the last call (`Endpoint::poll_stats`) to the series.
/// Only counts that moved are touched, so a series first appears when it first counts (or at
/// zero from [`describe`]), as it did when the endpoint counted through the facade itself.
pub(crate) fn record(delta: &EndpointStats) {
    // `counter!` registers its series; checking first creates none for a zero.
    macro_rules! add {
        ($n:expr, $($series:tt)+) => {
            if $n > 0 {
                counter!($($series)+).increment($n);
            }
        };
    }
    for (direction, counts) in [("in", &delta.messages_in), ("out", &delta.messages_out)] {
        for (kind, n) in counts.iter() {
            add!(n, SIP_MESSAGES_TOTAL, "method" => kind.label(), "direction" => direction);
        }
    }
    add!(delta.invalid_messages, SIP_INVALID_MESSAGES_TOTAL);
    add!(delta.refused_wrong_tag, SIP_DIALOG_REQUESTS_REFUSED_TOTAL, "reason" => "wrong_tag");
    add!(delta.refused_wrong_source, SIP_DIALOG_REQUESTS_REFUSED_TOTAL, "reason" => "wrong_source");
    for budget in BUDGETS {
        add!(
            delta.budget_exhausted(budget),
            SIP_BUDGET_EXHAUSTED_TOTAL,
            "budget" => budget.label()
        );
    }
    add!(delta.challenges_sent_missing, SIP_AUTH_CHALLENGES_SENT_TOTAL, "reason" => "missing");
    add!(delta.challenges_sent_stale, SIP_AUTH_CHALLENGES_SENT_TOTAL, "reason" => "stale");
    add!(delta.challenges_sent_invalid, SIP_AUTH_CHALLENGES_SENT_TOTAL, "reason" => "invalid");
    add!(delta.challenges_answered, SIP_AUTH_CHALLENGES_RECEIVED_TOTAL, "outcome" => "answered");
    add!(delta.challenges_failed, SIP_AUTH_CHALLENGES_RECEIVED_TOTAL, "outcome" => "failed");
    add!(delta.registrations_ok, SIP_REGISTRATIONS_TOTAL, "result" => "ok");
    add!(delta.registrations_failed, SIP_REGISTRATIONS_TOTAL, "result" => "failed");
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
    use ontime_sip::{Config, Endpoint};

    use super::*;

    /// Counters by `name{label="value",...}`, labels in the order they were given.
    #[derive(Default)]
    struct Counters(Mutex<BTreeMap<String, Arc<AtomicU64>>>);

    impl Counters {
        fn all(&self) -> Vec<(String, u64)> {
            let map = self.0.lock().expect("not poisoned");
            map.iter()
                .map(|(k, c)| (k.clone(), c.load(Ordering::Relaxed)))
                .collect()
        }
    }

    impl metrics::Recorder for Counters {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
                .collect();
            let name = if labels.is_empty() {
                key.name().to_string()
            } else {
                format!("{}{{{}}}", key.name(), labels.join(","))
            };
            let mut map = self.0.lock().expect("not poisoned");
            Counter::from_arc(Arc::clone(map.entry(name).or_default()))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    fn pairs(expected: &[(&str, u64)]) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = expected.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        v.sort();
        v
    }

    #[test]
    fn describe_registers_the_trouble_series_at_zero() {
        let recorder = Counters::default();
        metrics::with_local_recorder(&recorder, describe);
        assert_eq!(
            recorder.all(),
            pairs(&[
                (
                    "ontime_sip_auth_challenges_received_total{outcome=\"failed\"}",
                    0
                ),
                (
                    "ontime_sip_auth_challenges_sent_total{reason=\"invalid\"}",
                    0
                ),
                (
                    "ontime_sip_auth_challenges_sent_total{reason=\"missing\"}",
                    0
                ),
                ("ontime_sip_auth_challenges_sent_total{reason=\"stale\"}", 0),
                ("ontime_sip_budget_exhausted_total{budget=\"in_dialog\"}", 0),
                (
                    "ontime_sip_budget_exhausted_total{budget=\"out_of_dialog\"}",
                    0
                ),
                (
                    "ontime_sip_dialog_requests_refused_total{reason=\"wrong_source\"}",
                    0
                ),
                (
                    "ontime_sip_dialog_requests_refused_total{reason=\"wrong_tag\"}",
                    0
                ),
                ("ontime_sip_registrations_total{result=\"failed\"}", 0),
            ])
        );
    }

    #[test]
    fn an_endpoints_increments_land_in_the_same_series_once() {
        let recorder = Counters::default();
        let mut cfg = Config::new("127.0.0.1:5060".parse().unwrap());
        cfg.limits.max_transactions = 1;
        let mut ep = Endpoint::new(cfg);
        let peer = "127.0.0.1:5070".parse().unwrap();
        let now = Instant::now();
        let options = |cseq: u32| {
            format!(
                "OPTIONS sip:bot@127.0.0.1 SIP/2.0\r\n\
                 Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKo{cseq}\r\nMax-Forwards: 70\r\n\
                 From: <sip:alice@127.0.0.1:5070>;tag=a\r\nTo: <sip:bot@127.0.0.1>\r\n\
                 Call-ID: stats-{cseq}\r\nCSeq: {cseq} OPTIONS\r\nContent-Length: 0\r\n\r\n"
            )
        };
        metrics::with_local_recorder(&recorder, || {
            ep.handle_datagram(options(1).as_bytes(), peer, now);
            while ep.poll_transmit().is_some() {}
            record(&ep.poll_stats().expect("counted"));
            // The transaction of the first OPTIONS (timer J) holds the budget of one: a 503.
            ep.handle_datagram(options(2).as_bytes(), peer, now);
            ep.handle_datagram(b"\x00 not sip", peer, now);
            while ep.poll_transmit().is_some() {}
            record(&ep.poll_stats().expect("counted"));
            assert_eq!(ep.poll_stats(), None);
        });
        assert_eq!(
            recorder.all(),
            pairs(&[
                (
                    "ontime_sip_messages_total{method=\"OPTIONS\",direction=\"in\"}",
                    2
                ),
                (
                    "ontime_sip_messages_total{method=\"other\",direction=\"in\"}",
                    1
                ),
                (
                    "ontime_sip_messages_total{method=\"2xx\",direction=\"out\"}",
                    1
                ),
                (
                    "ontime_sip_messages_total{method=\"5xx\",direction=\"out\"}",
                    1
                ),
                ("ontime_sip_invalid_messages_total", 1),
                (
                    "ontime_sip_budget_exhausted_total{budget=\"out_of_dialog\"}",
                    1
                ),
            ])
        );
    }
}
