//! The UAS core against odd and hostile requests: the responses RFC 3261 §8.2 owes them, RFC 2543
//! transaction matching, the transaction cap, and property tests that no bytes or sequence of
//! inputs panics the endpoint or leaks transactions.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ontime_sip::{Config, Endpoint, Event, Limits};
use proptest::prelude::*;

fn request(method: &str, to_tag: &str, branch: &str, extra: &str) -> String {
    format!(
        "{method} sip:bot@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060{branch}\r\nMax-Forwards: 70\r\n\
From: <sip:a@10.0.0.1>;tag=f1\r\nTo: <sip:bot@10.0.0.2>{to_tag}\r\nCall-ID: h-1\r\nCSeq: 1 {method}\r\n{extra}Content-Length: 0\r\n\r\n"
    )
}

fn responses(ep: &mut Endpoint, msg: &str) -> Vec<String> {
    ep.handle_datagram(msg.as_bytes(), addr(UAC_ADDR), Instant::now());
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit() {
        assert_eq!(t.destination, addr(UAC_ADDR));
        out.push(String::from_utf8_lossy(&t.payload).into_owned());
    }
    out
}

fn uas() -> Endpoint {
    Endpoint::new(config(UAS_ADDR))
}

fn status_lines(r: &[String]) -> Vec<&str> {
    r.iter().map(|s| s.split("\r\n").next().unwrap()).collect()
}

#[test]
fn unknown_dialog_gets_481() {
    let mut ep = uas();
    for m in ["BYE", "INVITE", "UPDATE", "INFO", "OPTIONS", "NOTIFY"] {
        let r = responses(
            &mut ep,
            &request(m, ";tag=nope", &format!(";branch=z9hG4bK{m}"), ""),
        );
        assert_eq!(
            status_lines(&r),
            ["SIP/2.0 481 Call/Transaction Does Not Exist"],
            "{m}"
        );
    }
    let r = responses(&mut ep, &request("CANCEL", "", ";branch=z9hG4bKnone", ""));
    assert_eq!(
        status_lines(&r),
        ["SIP/2.0 481 Call/Transaction Does Not Exist"]
    );
    // ACKs are never answered.
    assert!(responses(
        &mut ep,
        &request("ACK", ";tag=nope", ";branch=z9hG4bKack", "")
    )
    .is_empty());
}

#[test]
fn methods_not_served_get_405_with_allow_and_unknown_ones_501() {
    let mut ep = uas();
    // NOTIFY is served, inside a dialog only (tests/refer.rs); we send REFER but take none.
    for m in [
        "REGISTER",
        "SUBSCRIBE",
        "MESSAGE",
        "REFER",
        "PUBLISH",
        "PRACK",
    ] {
        let r = responses(&mut ep, &request(m, "", &format!(";branch=z9hG4bK{m}"), ""));
        assert_eq!(status_lines(&r), ["SIP/2.0 405 Method Not Allowed"], "{m}");
        assert!(
            r[0].contains("\r\nAllow: INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE, INFO, NOTIFY\r\n")
        );
    }
    let r = responses(&mut ep, &request("FROB", "", ";branch=z9hG4bKfrob", ""));
    assert_eq!(status_lines(&r), ["SIP/2.0 501 Not Implemented"]);
}

#[test]
fn require_with_unknown_option_gets_420_listing_it() {
    let mut ep = uas();
    let r = responses(
        &mut ep,
        &request(
            "OPTIONS",
            "",
            ";branch=z9hG4bKr",
            "Require: timer, foo, 100rel\r\n",
        ),
    );
    assert_eq!(status_lines(&r), ["SIP/2.0 420 Bad Extension"]);
    assert!(
        r[0].contains("\r\nUnsupported: foo, 100rel\r\n"),
        "{}",
        r[0]
    );
}

#[test]
fn malformed_request_gets_400_with_a_warning_and_garbage_is_dropped() {
    let mut ep = uas();
    let bad = request("OPTIONS", "", ";branch=z9hG4bKm", "")
        .replace("CSeq: 1 OPTIONS", "CSeq: one OPTIONS");
    let r = responses(&mut ep, &bad);
    assert_eq!(status_lines(&r), ["SIP/2.0 400 Bad Request"]);
    assert!(
        r[0].contains("Warning: 399 10.0.0.2:5060 \"CSeq number"),
        "{}",
        r[0]
    );
    assert!(responses(&mut ep, "\r\n\r\n").is_empty());
    assert!(responses(&mut ep, "hello").is_empty());
    assert_eq!(ep.invalid_messages(), 3);
}

#[test]
fn rfc2543_invite_without_cookie_is_matched_by_its_fields() {
    let mut ep = uas();
    let inv = request("INVITE", "", ";branch=old-style", "");
    let r = responses(&mut ep, &inv);
    assert_eq!(status_lines(&r), ["SIP/2.0 100 Trying"]);
    // A retransmission is absorbed (the 100 again), not a second call.
    assert_eq!(
        status_lines(&responses(&mut ep, &inv)),
        ["SIP/2.0 100 Trying"]
    );
    let call = match ep.poll_event() {
        Some(Event::IncomingCall(c)) => c.call,
        e => panic!("{e:?}"),
    };
    assert_eq!(ep.poll_event(), None);
    ep.reject(call, 486, &[], Instant::now()).unwrap();
    let busy = ep.poll_transmit().unwrap();
    let text = String::from_utf8_lossy(&busy.payload).into_owned();
    let tag = text
        .split("To: <sip:bot@10.0.0.2>;tag=")
        .nth(1)
        .unwrap()
        .split("\r\n")
        .next()
        .unwrap();
    // The ACK (same Via, our To tag) matches the transaction: no retransmission of the 486 after.
    let ack = request("ACK", &format!(";tag={tag}"), ";branch=old-style", "");
    assert!(responses(&mut ep, &ack).is_empty());
    ep.handle_timeout(Instant::now() + Duration::from_secs(1));
    assert!(ep.poll_transmit().is_none(), "confirmed: timer G stopped");
}

#[test]
fn transaction_cap_answers_503_statelessly() {
    let mut cfg = Config::new(addr(UAS_ADDR));
    cfg.limits = Limits {
        max_transactions: 2,
        ..Limits::default()
    };
    let mut ep = Endpoint::new(cfg);
    for i in 0..2 {
        let r = responses(
            &mut ep,
            &request("OPTIONS", "", &format!(";branch=z9hG4bKc{i}"), ""),
        );
        assert_eq!(status_lines(&r), ["SIP/2.0 200 OK"]);
    }
    let r = responses(&mut ep, &request("OPTIONS", "", ";branch=z9hG4bKc3", ""));
    assert_eq!(status_lines(&r), ["SIP/2.0 503 Service Unavailable"]);
    assert!(r[0].contains("Retry-After: 5\r\n"));
    assert_eq!(ep.active_transactions(), 2);
}

#[test]
fn responses_go_to_the_via_port_or_the_source_with_rport() {
    let mut ep = uas();
    let msg =
        request("OPTIONS", "", ";branch=z9hG4bKp", "").replace("10.0.0.1:5060;", "10.0.0.1:5099;");
    ep.handle_datagram(msg.as_bytes(), addr("10.0.0.1:40000"), Instant::now());
    assert_eq!(
        ep.poll_transmit().unwrap().destination,
        addr("10.0.0.1:5099")
    );
    let msg = request("OPTIONS", "", ";branch=z9hG4bKq;rport", "")
        .replace("10.0.0.1:5060;", "10.0.0.1:5099;");
    ep.handle_datagram(msg.as_bytes(), addr("10.0.0.1:40000"), Instant::now());
    assert_eq!(
        ep.poll_transmit().unwrap().destination,
        addr("10.0.0.1:40000")
    );
}

/// A valid INVITE to mutate.
fn invite() -> Vec<u8> {
    let body = "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\n";
    format!(
        "INVITE sip:bot@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKprop\r\nMax-Forwards: 70\r\n\
From: <sip:a@10.0.0.1>;tag=f1\r\nTo: <sip:bot@10.0.0.2>\r\nCall-ID: p-1\r\nCSeq: 1 INVITE\r\n\
Contact: <sip:a@10.0.0.1:5060>\r\nSupported: timer\r\nSession-Expires: 100\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Arbitrary bytes, then mutated INVITEs, then time: nothing panics, and once time has run
    /// far enough every transaction and call is gone (no leak).
    #[test]
    fn endpoint_survives_anything_and_drains(
        junk in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..4),
        mutations in proptest::collection::vec((0usize..600, any::<u8>()), 0..6),
        answer in any::<bool>(),
        steps in proptest::collection::vec(0u64..40_000, 1..6),
    ) {
        let mut ep = uas();
        let t0 = Instant::now();
        for j in &junk {
            ep.handle_datagram(j, addr(UAC_ADDR), t0);
        }
        let mut inv = invite();
        for (pos, byte) in &mutations {
            let p = pos % inv.len();
            inv[p] = *byte;
        }
        ep.handle_datagram(&inv, addr(UAC_ADDR), t0);
        ep.handle_datagram(&inv, addr(UAC_ADDR), t0);
        while let Some(e) = ep.poll_event() {
            if let Event::IncomingCall(c) = e {
                let local = ontime_sip::LocalMedia::new(addr("10.0.0.2:50000"), 1);
                match c.offer.as_ref().map(|o| ontime_sip::sdp::answer_offer(o, &local)) {
                    Some(Ok((a, _))) if answer => ep.answer(c.call, &a, t0).unwrap(),
                    _ => ep.reject(c.call, 488, &[], t0).unwrap(),
                }
            }
        }
        let mut now = t0;
        for s in steps {
            now += Duration::from_millis(s);
            ep.handle_timeout(now);
            while ep.poll_transmit().is_some() {}
        }
        // Far in the future: every timer has fired (a refresh re-INVITE times out, BYEs end).
        for _ in 0..6 {
            now += Duration::from_secs(200);
            ep.handle_timeout(now);
        }
        while ep.poll_event().is_some() {}
        prop_assert_eq!(ep.active_transactions(), 0);
        prop_assert_eq!(ep.active_calls(), 0);
        prop_assert!(ep.poll_timeout().is_none());
    }
}

#[test]
fn ipv6_dialog_reaches_the_bracketed_contact() {
    let mut ep = Endpoint::new(Config::new(addr("[2001:db8::2]:5060")));
    let body = "v=0\r\no=- 1 1 IN IP6 2001:db8::1\r\ns=-\r\nc=IN IP6 2001:db8::1\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n";
    let invite = format!(
        "INVITE sip:bot@[2001:db8::2] SIP/2.0\r\nVia: SIP/2.0/UDP [2001:db8::1]:5060;branch=z9hG4bK6\r\nMax-Forwards: 70\r\n\
From: <sip:a@[2001:db8::1]>;tag=f6\r\nTo: <sip:bot@[2001:db8::2]>\r\nCall-ID: v6\r\nCSeq: 1 INVITE\r\n\
Contact: <sip:a@[2001:db8::1]:5062>\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let now = Instant::now();
    ep.handle_datagram(invite.as_bytes(), addr("[2001:db8::1]:5060"), now);
    let Some(Event::IncomingCall(c)) = ep.poll_event() else {
        panic!("no call")
    };
    let local = ontime_sip::LocalMedia::new(addr("[2001:db8::2]:50000"), 1);
    let (answer, media) = ontime_sip::sdp::answer_offer(c.offer.as_ref().unwrap(), &local).unwrap();
    assert_eq!(media.remote_rtp, Some(addr("[2001:db8::1]:4000")));
    ep.answer(c.call, &answer, now).unwrap();
    while ep.poll_transmit().is_some() {}
    ep.hangup(c.call, now).unwrap();
    let bye = ep.poll_transmit().unwrap();
    assert_eq!(bye.destination, addr("[2001:db8::1]:5062"));
    assert_eq!(
        first_line(&bye.payload),
        "BYE sip:a@[2001:db8::1]:5062 SIP/2.0"
    );
    assert!(String::from_utf8_lossy(&bye.payload)
        .contains("Via: SIP/2.0/UDP [2001:db8::2]:5060;branch=z9hG4bK"));
}
