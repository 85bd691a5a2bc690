//! The endpoint's message counters. They are counted here and nowhere else, so an application
//! that installs a `metrics` recorder gets them without counting anything itself.

use crate::message::Message;

/// `ontime_sip_messages_total{method, direction}`: SIP messages, counted by the endpoint alone.
///
/// - `direction="in"`: every message handed to [`super::Endpoint::handle_datagram`] or
///   [`super::Endpoint::handle_message`], readable or not;
/// - `direction="out"`: every message handed out by [`super::Endpoint::poll_transmit`],
///   retransmissions included (they are on the wire too).
///
/// `method` is the request's method (`INVITE`, `ACK`, `BYE`, `CANCEL`, `OPTIONS`, `INFO`,
/// `UPDATE`, `REFER`, `NOTIFY`, `REGISTER`, else `other`) or the response's status class (`1xx`
/// … `6xx`). A message that cannot be parsed counts here as well (labelled from its start line: the method
/// or status class when the line names one, else `other`) and in [`INVALID_MESSAGES_TOTAL`].
const MESSAGES_TOTAL: &str = "ontime_sip_messages_total";

/// `ontime_sip_invalid_messages_total`: messages received that could not be parsed (answered 400
/// or the like when they can be answered, else dropped), and NOTIFYs of our REFER whose
/// `message/sipfrag` body could not be (answered 400). Each one also counts once in
/// [`MESSAGES_TOTAL`] with `direction="in"`.
const INVALID_MESSAGES_TOTAL: &str = "ontime_sip_invalid_messages_total";

/// `ontime_sip_dialog_requests_refused_total{reason}`: requests inside a dialog refused
/// because they do not belong to its peer (ACKs, which are never answered, are dropped):
///
/// - `reason="wrong_tag"`: the Call-ID and our To tag name a live dialog but the From tag is not
///   the peer's; answered 481 like any request for a dialog that does not exist;
/// - `reason="wrong_source"`: Call-ID and both tags match but the request comes from an address
///   the dialog does not trust ([`super::Config::trusted_peer`]); answered 403.
const DIALOG_REQUESTS_REFUSED_TOTAL: &str = "ontime_sip_dialog_requests_refused_total";

/// `ontime_sip_budget_exhausted_total{budget}`: new requests answered with a stateless 503
/// because their transaction budget was full (`budget="out_of_dialog"`: new INVITEs, OPTIONS
/// and other requests outside a live dialog, bounded by [`crate::Limits::max_transactions`];
/// `budget="in_dialog"`: requests of live dialogs and CANCELs of INVITE transactions we hold, bounded by
/// [`crate::Limits::max_in_dialog_transactions`]).
const BUDGET_EXHAUSTED_TOTAL: &str = "ontime_sip_budget_exhausted_total";

/// `ontime_sip_auth_challenges_sent_total{reason}`: new INVITEs we answered 401 because
/// [`super::Config::trunk_auth`] is set and they lacked valid credentials:
///
/// - `reason="missing"`: no credentials for our realm;
/// - `reason="stale"`: right credentials with a nonce of ours that expired (`stale=true`);
/// - `reason="invalid"`: credentials that failed (wrong user or password, a nonce not ours, a
///   uri that is not the Request-URI, an unreadable header): the failures to watch.
const AUTH_CHALLENGES_SENT_TOTAL: &str = "ontime_sip_auth_challenges_sent_total";

/// `ontime_sip_auth_challenges_received_total{outcome}`: 401/407 responses to our requests.
/// `outcome="answered"`: the request went again with credentials; `outcome="failed"`: it could
/// not (no credentials configured, none for the realm, only `auth-int` or unknown algorithms
/// offered, or a second challenge without `stale=true`: the credentials were refused), so the
/// challenge is the request's final response.
const AUTH_CHALLENGES_RECEIVED_TOTAL: &str = "ontime_sip_auth_challenges_received_total";

/// `ontime_sip_registrations_total{result}`: final results of our REGISTERs (after any digest
/// round trip): `result="ok"` a 2xx (a registration, its refreshes and the unregistration),
/// `result="failed"` anything else, timeouts included.
const REGISTRATIONS_TOTAL: &str = "ontime_sip_registrations_total";

/// Why we challenged an INVITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChallengeReason {
    /// No credentials for our realm.
    Missing,
    /// Valid credentials, expired nonce.
    Stale,
    /// Credentials that failed.
    Invalid,
}

impl ChallengeReason {
    fn label(self) -> &'static str {
        match self {
            ChallengeReason::Missing => "missing",
            ChallengeReason::Stale => "stale",
            ChallengeReason::Invalid => "invalid",
        }
    }
}

/// Counts an INVITE we challenged.
pub(super) fn count_challenge_sent(reason: ChallengeReason) {
    metrics::counter!(AUTH_CHALLENGES_SENT_TOTAL, "reason" => reason.label()).increment(1);
}

/// Counts a challenge to one of our requests: answered or not.
pub(super) fn count_challenge_received(answered: bool) {
    let outcome = if answered { "answered" } else { "failed" };
    metrics::counter!(AUTH_CHALLENGES_RECEIVED_TOTAL, "outcome" => outcome).increment(1);
}

/// Counts the final result of a REGISTER.
pub(super) fn count_registration(ok: bool) {
    let result = if ok { "ok" } else { "failed" };
    metrics::counter!(REGISTRATIONS_TOTAL, "result" => result).increment(1);
}

/// Why an in-dialog request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The From tag is not the dialog's remote tag.
    WrongTag,
    /// The source is not one the dialog trusts.
    WrongSource,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::WrongTag => "wrong_tag",
            Refusal::WrongSource => "wrong_source",
        }
    }
}

/// Counts a refused in-dialog request.
pub(super) fn count_refused(refusal: Refusal) {
    metrics::counter!(DIALOG_REQUESTS_REFUSED_TOTAL, "reason" => refusal.label()).increment(1);
}

/// Counts a request refused because its budget was full.
pub(super) fn count_budget_exhausted(budget: super::Budget) {
    metrics::counter!(BUDGET_EXHAUSTED_TOTAL, "budget" => budget.label()).increment(1);
}

/// Describes the endpoint's counters and registers the ones that count trouble at zero, so a
/// dashboard or an alert sees `0` rather than an absent series. [`super::Endpoint::new`] calls
/// it (so it registers with the recorder installed at that time); calling it again is harmless.
pub fn describe_metrics() {
    metrics::describe_counter!(MESSAGES_TOTAL, "SIP messages received (in) and sent (out)");
    metrics::describe_counter!(
        INVALID_MESSAGES_TOTAL,
        "SIP messages received that could not be parsed"
    );
    metrics::describe_counter!(
        DIALOG_REQUESTS_REFUSED_TOTAL,
        "In-dialog requests refused: wrong From tag (481) or untrusted source (403)"
    );
    metrics::describe_counter!(
        BUDGET_EXHAUSTED_TOTAL,
        "New requests answered 503 because their transaction budget was full"
    );
    metrics::describe_counter!(
        AUTH_CHALLENGES_SENT_TOTAL,
        "New INVITEs answered 401 for missing, stale or invalid digest credentials"
    );
    metrics::describe_counter!(
        AUTH_CHALLENGES_RECEIVED_TOTAL,
        "401/407 to our requests: answered with credentials, or failed"
    );
    metrics::describe_counter!(
        REGISTRATIONS_TOTAL,
        "Final results of our REGISTERs: ok (2xx) or failed"
    );
    metrics::counter!(INVALID_MESSAGES_TOTAL).increment(0);
    for reason in [
        ChallengeReason::Missing,
        ChallengeReason::Stale,
        ChallengeReason::Invalid,
    ] {
        metrics::counter!(AUTH_CHALLENGES_SENT_TOTAL, "reason" => reason.label()).increment(0);
    }
    metrics::counter!(AUTH_CHALLENGES_RECEIVED_TOTAL, "outcome" => "failed").increment(0);
    metrics::counter!(REGISTRATIONS_TOTAL, "result" => "failed").increment(0);
    for refusal in [Refusal::WrongTag, Refusal::WrongSource] {
        metrics::counter!(DIALOG_REQUESTS_REFUSED_TOTAL, "reason" => refusal.label()).increment(0);
    }
    for budget in [super::Budget::OutOfDialog, super::Budget::InDialog] {
        metrics::counter!(BUDGET_EXHAUSTED_TOTAL, "budget" => budget.label()).increment(0);
    }
}

/// Label of messages whose method or status class has no label of its own.
const OTHER: &str = "other";

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    /// Received.
    In,
    /// Handed out to be sent.
    Out,
}

impl Direction {
    fn label(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

/// The `method` label of a request method's token.
fn method_label(token: &[u8]) -> &'static str {
    match token {
        b"INVITE" => "INVITE",
        b"ACK" => "ACK",
        b"BYE" => "BYE",
        b"CANCEL" => "CANCEL",
        b"OPTIONS" => "OPTIONS",
        b"INFO" => "INFO",
        b"UPDATE" => "UPDATE",
        b"REFER" => "REFER",
        b"NOTIFY" => "NOTIFY",
        b"REGISTER" => "REGISTER",
        _ => OTHER,
    }
}

/// The `method` label of a response: its status class.
fn status_label(first_digit: u8) -> &'static str {
    match first_digit {
        b'1' => "1xx",
        b'2' => "2xx",
        b'3' => "3xx",
        b'4' => "4xx",
        b'5' => "5xx",
        b'6' => "6xx",
        _ => OTHER,
    }
}

/// The `method` label of a parsed message.
pub(super) fn message_label(msg: &Message) -> &'static str {
    match (msg.method(), msg.status()) {
        (Some(method), _) => method_label(method.as_str().as_bytes()),
        (None, Some(code)) if (100..=699).contains(&code) => {
            status_label(b'0' + (code / 100) as u8)
        }
        _ => OTHER,
    }
}

/// The `method` label read from the start line of raw bytes (what we send, or what we could not
/// parse), without parsing the rest.
pub(super) fn start_line_label(bytes: &[u8]) -> &'static str {
    let line = bytes
        .trim_ascii_start()
        .split(|b| *b == b'\r' || *b == b'\n')
        .next()
        .unwrap_or_default();
    let mut words = line.split(|b| *b == b' ');
    let first = words.next().unwrap_or_default();
    if first == b"SIP/2.0" {
        let code = words.next().unwrap_or_default();
        if code.len() == 3 && code.iter().all(u8::is_ascii_digit) {
            return status_label(code[0]);
        }
        return OTHER;
    }
    method_label(first)
}

/// Counts a received message whose body the endpoint must read but could not (a NOTIFY's
/// `message/sipfrag`) in [`INVALID_MESSAGES_TOTAL`]; the message itself already counted in
/// [`MESSAGES_TOTAL`] when it arrived.
pub(super) fn count_unreadable_body() {
    metrics::counter!(INVALID_MESSAGES_TOTAL).increment(1);
}

/// Counts one message in [`MESSAGES_TOTAL`].
pub(super) fn count_message(label: &'static str, direction: Direction) {
    metrics::counter!(MESSAGES_TOTAL, "method" => label, "direction" => direction.label())
        .increment(1);
}

/// Counts a received message that could not be parsed: in [`INVALID_MESSAGES_TOTAL`] and in
/// [`MESSAGES_TOTAL`] under the label of its start line.
pub(super) fn count_invalid(bytes: &[u8]) {
    count_message(start_line_label(bytes), Direction::In);
    metrics::counter!(INVALID_MESSAGES_TOTAL).increment(1);
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};

    use super::*;
    use crate::endpoint::{Config, Endpoint, Event};

    /// Counters by `name{label="value",...}`, labels in the order they were given.
    #[derive(Default)]
    struct Counters(Mutex<HashMap<String, Arc<AtomicU64>>>);

    impl Counters {
        fn get(&self, key: &str) -> u64 {
            let map = self.0.lock().expect("ok: not poisoned");
            map.get(key).map_or(0, |c| c.load(Ordering::Relaxed))
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
            let mut map = self.0.lock().expect("ok: not poisoned");
            Counter::from_arc(Arc::clone(map.entry(name).or_default()))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    fn messages(method: &str, direction: &str) -> String {
        format!("{MESSAGES_TOTAL}{{method=\"{method}\",direction=\"{direction}\"}}")
    }

    const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
                       m=audio 4000 RTP/AVP 0\r\n";

    fn request(method: &str, cseq: u32, to_tag: &str, body: &str) -> String {
        let content_type = if body.is_empty() {
            ""
        } else {
            "Content-Type: application/sdp\r\n"
        };
        format!(
            "{method} sip:bot@127.0.0.1 SIP/2.0\r\n\
             Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK{method}{cseq}\r\nMax-Forwards: 70\r\n\
             From: <sip:alice@127.0.0.1:5070>;tag=a\r\nTo: <sip:bot@127.0.0.1>{to_tag}\r\n\
             Call-ID: counters-1\r\nCSeq: {cseq} {method}\r\n\
             Contact: <sip:alice@127.0.0.1:5070>\r\n{content_type}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// Answers the incoming call the endpoint reported.
    fn answer_incoming(uas: &mut Endpoint, now: Instant) {
        let Some(Event::IncomingCall(call)) = uas.poll_event() else {
            panic!("no call")
        };
        let local = crate::sdp::LocalMedia::new("127.0.0.1:20000".parse().unwrap(), 1);
        let (answer, _) = crate::sdp::answer_offer(call.offer.as_ref().unwrap(), &local).unwrap();
        uas.answer(call.call, &answer, now).unwrap();
    }

    /// `;tag=<our tag>` from the To of a response.
    fn to_tag_param(payload: &[u8]) -> String {
        String::from_utf8_lossy(payload)
            .lines()
            .find_map(|l| l.strip_prefix("To: ").map(str::to_string))
            .and_then(|to| to.split_once(";tag=").map(|(_, t)| format!(";tag={t}")))
            .unwrap()
    }

    #[test]
    fn labels() {
        assert_eq!(start_line_label(b"INVITE sip:a@b SIP/2.0\r\n"), "INVITE");
        assert_eq!(start_line_label(b"\r\nBYE sip:a@b SIP/2.0\r\n"), "BYE");
        assert_eq!(start_line_label(b"SIP/2.0 183 Session Progress\r\n"), "1xx");
        assert_eq!(start_line_label(b"SIP/2.0 603 Decline\r\n"), "6xx");
        assert_eq!(start_line_label(b"SIP/2.0 99 Odd\r\n"), "other");
        assert_eq!(start_line_label(b"MESSAGE sip:a@b SIP/2.0\r\n"), "other");
        assert_eq!(start_line_label(b"REFER sip:a@b SIP/2.0\r\n"), "REFER");
        assert_eq!(start_line_label(b"NOTIFY sip:a@b SIP/2.0\r\n"), "NOTIFY");
        assert_eq!(start_line_label(b"invite sip:a@b SIP/2.0\r\n"), "other");
        assert_eq!(start_line_label(b""), "other");
    }

    #[test]
    fn every_message_in_and_out_counts_once() {
        let recorder = Counters::default();
        let mut uas = Endpoint::new(Config::new("127.0.0.1:5060".parse().unwrap()));
        let peer = "127.0.0.1:5070".parse().unwrap();
        let now = Instant::now();
        metrics::with_local_recorder(&recorder, || {
            uas.handle_datagram(request("INVITE", 1, "", SDP).as_bytes(), peer, now);
            // Out counts when handed out, not when queued.
            assert_eq!(recorder.get(&messages("INVITE", "in")), 1);
            assert_eq!(recorder.get(&messages("1xx", "out")), 0);
            let trying = uas.poll_transmit().unwrap();
            assert!(trying.payload.starts_with(b"SIP/2.0 100 Trying"));
            assert_eq!(recorder.get(&messages("1xx", "out")), 1);

            answer_incoming(&mut uas, now);
            let ok = uas.poll_transmit().unwrap();
            assert_eq!(recorder.get(&messages("2xx", "out")), 1);
            // The 2xx retransmission is on the wire too.
            uas.handle_timeout(now + Duration::from_millis(500));
            assert_eq!(uas.poll_transmit().unwrap().payload, ok.payload);
            assert_eq!(recorder.get(&messages("2xx", "out")), 2);

            let to_tag = to_tag_param(&ok.payload);
            uas.handle_datagram(request("ACK", 1, &to_tag, "").as_bytes(), peer, now);
            uas.handle_datagram(request("BYE", 2, &to_tag, "").as_bytes(), peer, now);
            while uas.poll_transmit().is_some() {}
            assert_eq!(recorder.get(&messages("ACK", "in")), 1);
            assert_eq!(recorder.get(&messages("BYE", "in")), 1);
            assert_eq!(recorder.get(&messages("2xx", "out")), 3);

            // Unparseable: once in invalid_messages_total, once in messages_total under its
            // start line's label.
            assert_eq!(recorder.get(INVALID_MESSAGES_TOTAL), 0);
            uas.handle_datagram(b"INVITE sip:bot@127.0.0.1 SIP/2.0\r\n\r\n", peer, now);
            uas.handle_datagram(b"\x00\x01 garbage", peer, now);
            assert_eq!(recorder.get(INVALID_MESSAGES_TOTAL), 2);
            assert_eq!(uas.invalid_messages(), 2);
            assert_eq!(recorder.get(&messages("INVITE", "in")), 2);
            assert_eq!(recorder.get(&messages("other", "in")), 1);

            // A response in.
            uas.handle_datagram(
                b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKx\r\n\
                  From: <sip:bot@127.0.0.1>;tag=b\r\nTo: <sip:alice@127.0.0.1:5070>;tag=c\r\n\
                  Call-ID: counters-2\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
                peer,
                now,
            );
            assert_eq!(recorder.get(&messages("2xx", "in")), 1);
        });
        // Nothing else was counted.
        let mut all: Vec<(String, u64)> = recorder
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, c)| (k.clone(), c.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        all.sort();
        let mut expected = vec![
            (messages("INVITE", "in"), 2),
            (messages("ACK", "in"), 1),
            (messages("BYE", "in"), 1),
            (messages("other", "in"), 1),
            (messages("2xx", "in"), 1),
            (messages("1xx", "out"), 1),
            (messages("2xx", "out"), 3),
            (INVALID_MESSAGES_TOTAL.to_string(), 2),
        ];
        expected.sort();
        assert_eq!(all, expected);
    }

    #[test]
    fn digest_challenges_count_by_reason() {
        let recorder = Counters::default();
        let sent = |r: &str| format!("{AUTH_CHALLENGES_SENT_TOTAL}{{reason=\"{r}\"}}");
        let peer = "127.0.0.1:5070".parse().unwrap();
        let now = Instant::now();
        metrics::with_local_recorder(&recorder, || {
            let mut cfg = Config::new("127.0.0.1:5060".parse().unwrap());
            cfg.trunk_auth = Some(crate::Credentials::new("trunk", "pw"));
            let mut uas = Endpoint::new(cfg);
            for key in [sent("missing"), sent("stale"), sent("invalid")] {
                assert!(recorder.0.lock().unwrap().contains_key(&key), "{key}");
            }
            uas.handle_datagram(request("INVITE", 1, "", SDP).as_bytes(), peer, now);
            let bad = request("INVITE", 2, "", SDP).replace(
                "Contact:",
                "Authorization: Digest username=\"trunk\", realm=\"127.0.0.1\", nonce=\"x\", \
                 uri=\"sip:bot@127.0.0.1\", response=\"00\"\r\nContact:",
            );
            uas.handle_datagram(bad.as_bytes(), peer, now);
            assert_eq!(recorder.get(&sent("missing")), 1);
            assert_eq!(recorder.get(&sent("invalid")), 1);
            assert_eq!(recorder.get(&sent("stale")), 0);
            assert!(uas.poll_event().is_none());
        });
    }

    #[test]
    fn refusals_and_exhausted_budgets_count_from_zero() {
        let recorder = Counters::default();
        let refused = |r: &str| format!("{DIALOG_REQUESTS_REFUSED_TOTAL}{{reason=\"{r}\"}}");
        let exhausted = |b: &str| format!("{BUDGET_EXHAUSTED_TOTAL}{{budget=\"{b}\"}}");
        let peer = "127.0.0.1:5070".parse().unwrap();
        let stranger = "127.0.0.9:5070".parse().unwrap();
        let now = Instant::now();
        metrics::with_local_recorder(&recorder, || {
            let mut cfg = Config::new("127.0.0.1:5060".parse().unwrap());
            cfg.limits.max_transactions = 2;
            let mut uas = Endpoint::new(cfg);
            // Registered at zero by Endpoint::new.
            let map_has = |k: &str| recorder.0.lock().unwrap().contains_key(k);
            for key in [
                refused("wrong_tag"),
                refused("wrong_source"),
                exhausted("out_of_dialog"),
                exhausted("in_dialog"),
            ] {
                assert!(map_has(&key), "{key}");
                assert_eq!(recorder.get(&key), 0);
            }
            uas.handle_datagram(request("INVITE", 1, "", SDP).as_bytes(), peer, now);
            answer_incoming(&mut uas, now);
            let mut ok = None;
            while let Some(t) = uas.poll_transmit() {
                ok = Some(t);
            }
            let to_tag = to_tag_param(&ok.unwrap().payload);
            // The From tag only: our random To tag may begin with an `a` too.
            let wrong_tag =
                request("INFO", 2, &to_tag, "").replace(";tag=a\r\nTo:", ";tag=z\r\nTo:");
            uas.handle_datagram(wrong_tag.as_bytes(), peer, now);
            uas.handle_datagram(request("ACK", 1, &to_tag, "").as_bytes(), stranger, now);
            assert_eq!(recorder.get(&refused("wrong_tag")), 1);
            assert_eq!(recorder.get(&refused("wrong_source")), 1);
            // INVITE and INFO hold the out-of-dialog budget of 2: the next OPTIONS is refused.
            uas.handle_datagram(request("OPTIONS", 3, "", "").as_bytes(), peer, now);
            assert_eq!(recorder.get(&exhausted("out_of_dialog")), 1);
            assert_eq!(recorder.get(&exhausted("in_dialog")), 0);
            assert_eq!(uas.budget_exhausted_since(), Some(now));
        });
    }
}
