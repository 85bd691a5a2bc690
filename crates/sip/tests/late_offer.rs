//! Late offer (RFC 3261 §13.2.1, RFC 3264): an INVITE without SDP gets our offer in the 200 and
//! the caller's answer in the ACK; and the Warning headers of refusals (RFC 3261 §20.43).

mod common;

use std::time::Instant;

use common::*;
use ontime_sip::sdp::{self, LocalMedia, SessionDescription};
use ontime_sip::{stateless_response_with_headers, warning_header, EndReason, Endpoint, Event};

const ANSWER: &str = "v=0\r\no=- 7 7 IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
                      m=audio 4000 RTP/AVP 0\r\n";

fn request(method: &str, cseq: u32, to_tag: &str, extra: &str, body: &str) -> Vec<u8> {
    let ct = if body.is_empty() {
        String::new()
    } else {
        "Content-Type: application/sdp\r\n".into()
    };
    format!(
        "{method} sip:bot@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{method}{cseq}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@10.0.0.1>;tag=a\r\nTo: <sip:bot@10.0.0.2>{to_tag}\r\n\
         Call-ID: late-1\r\nCSeq: {cseq} {method}\r\nContact: <sip:alice@10.0.0.1:5060>\r\n{extra}{ct}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An INVITE without SDP answered with our offer; returns the UAS, the call, the To tag and
/// the 200.
fn answered_late_offer() -> (
    Endpoint,
    ontime_sip::CallHandle,
    String,
    ontime_sip::Message,
) {
    let mut uas = Endpoint::new(config(UAS_ADDR));
    let now = Instant::now();
    uas.handle_datagram(&request("INVITE", 1, "", "", ""), addr(UAC_ADDR), now);
    drain(&mut uas);
    let Some(Event::IncomingCall(inc)) = uas.poll_event() else {
        panic!("no call")
    };
    assert_eq!(inc.offer, None);
    let offer = sdp::build_offer(&LocalMedia::new(addr("10.0.0.2:50000"), 9));
    uas.answer(inc.call, &offer, now).unwrap();
    let ok = parse(&drain(&mut uas)[0].payload);
    assert_eq!(ok.status(), Some(200));
    let body = SessionDescription::parse(&ok.body).unwrap();
    assert_eq!(body, offer, "our offer in the 200");
    let tag = format!(";tag={}", ok.to().unwrap().tag().unwrap());
    (uas, inc.call, tag, ok)
}

#[test]
fn the_answer_comes_in_the_ack() {
    let (mut uas, call, tag, _) = answered_late_offer();
    let ack = request("ACK", 1, &tag, "", ANSWER);
    uas.handle_datagram(&ack, addr(UAC_ADDR), Instant::now());
    let answer = SessionDescription::parse(ANSWER.as_bytes()).unwrap();
    let local = LocalMedia::new(addr("10.0.0.2:50000"), 9);
    let media = sdp::read_answer(&answer, &local).unwrap();
    assert_eq!(media.remote_rtp, Some(addr("10.0.0.1:4000")));
    assert_eq!(
        events(&mut uas),
        [
            Event::AckAnswer { call, answer },
            Event::Established { call }
        ]
    );
    assert!(drain(&mut uas).is_empty(), "no 2xx retransmission, no BYE");
    // A retransmitted ACK changes nothing.
    uas.handle_datagram(&ack, addr(UAC_ADDR), Instant::now());
    assert!(events(&mut uas).is_empty());
}

#[test]
fn an_ack_without_an_answer_ends_the_call_with_bye() {
    for body in ["", "v=0\r\nthis is not SDP\r\n"] {
        let (mut uas, call, tag, _) = answered_late_offer();
        let ack = request("ACK", 1, &tag, "", body);
        uas.handle_datagram(&ack, addr(UAC_ADDR), Instant::now());
        let out = drain(&mut uas);
        assert_eq!(out.len(), 1);
        assert!(first_line(&out[0].payload).starts_with("BYE sip:alice@10.0.0.1:5060"));
        assert_eq!(
            events(&mut uas),
            [Event::Ended {
                call,
                reason: EndReason::AckWithoutAnswer
            }],
            "{body:?}"
        );
    }
}

#[test]
fn an_ordinary_ack_after_an_offer_in_the_invite_needs_no_body() {
    let mut net = Net::new();
    let (_, uas_call) = net.connected_call();
    assert!(!net
        .uas_events
        .iter()
        .any(|e| matches!(e, Event::AckAnswer { .. })));
    assert!(net
        .uas_events
        .contains(&Event::Established { call: uas_call }));
}

fn warning_of(bytes: &[u8]) -> String {
    parse(bytes)
        .header("Warning")
        .expect("a Warning")
        .to_string()
}

#[test]
fn refusals_say_why_in_a_warning() {
    // The application's reject, and the helper quoting safely.
    let mut uas = Endpoint::new(config(UAS_ADDR));
    let now = Instant::now();
    uas.handle_datagram(&request("INVITE", 1, "", "", ANSWER), addr(UAC_ADDR), now);
    drain(&mut uas);
    let Some(Event::IncomingCall(inc)) = uas.poll_event() else {
        panic!("no call")
    };
    let w = uas.warning_header(305, "SRTP \"required\"");
    assert_eq!(w.1, "305 10.0.0.2:5060 \"SRTP \\\"required\\\"\"");
    uas.reject(inc.call, 488, &[w], now).unwrap();
    let resp = drain(&mut uas).remove(0).payload;
    assert!(first_line(&resp).starts_with("SIP/2.0 488"));
    assert_eq!(
        warning_of(&resp),
        "305 10.0.0.2:5060 \"SRTP \\\"required\\\"\""
    );

    // The endpoint's own 420 and 415.
    let mut uas = Endpoint::new(config(UAS_ADDR));
    let req = request("INVITE", 1, "", "Require: 100rel\r\n", "");
    uas.handle_datagram(&req, addr(UAC_ADDR), now);
    let resp = drain(&mut uas).remove(0).payload;
    assert!(first_line(&resp).starts_with("SIP/2.0 420"));
    assert_eq!(
        warning_of(&resp),
        "399 10.0.0.2:5060 \"unsupported extension: 100rel\""
    );
    let req = request("INVITE", 2, "", "", "").replace_body_type();
    uas.handle_datagram(&req, addr(UAC_ADDR), now);
    let resp = drain(&mut uas).remove(0).payload;
    assert!(first_line(&resp).starts_with("SIP/2.0 415"));
    assert!(warning_of(&resp).starts_with("304 10.0.0.2:5060 "));

    // A re-INVITE's offer rejected with a Warning.
    let mut net = Net::new();
    let (uac_call, uas_call) = net.connected_call();
    let mut offer = sdp::build_offer(&LocalMedia::new(addr("10.0.0.1:40002"), 11));
    offer.session_version += 1;
    net.uac.reinvite(uac_call, &offer, net.now).unwrap();
    net.pump();
    let w = net.uas.warning_header(305, "no common codec");
    net.uas
        .reject_update_with_headers(uas_call, 488, &[w], net.now)
        .unwrap();
    net.pump();
    let resp = net
        .wire
        .iter()
        .find(|s| s.line.starts_with("SIP/2.0 488"))
        .unwrap();
    assert_eq!(
        warning_of(&resp.payload),
        "305 10.0.0.2:5060 \"no common codec\""
    );

    // Stateless.
    let req = request("INVITE", 3, "", "", "");
    let w = warning_header(381, "sips.example", "SIPS required");
    let resp = stateless_response_with_headers(&req, 606, None, &[w]).unwrap();
    assert!(first_line(&resp).starts_with("SIP/2.0 606"));
    assert_eq!(warning_of(&resp), "381 sips.example \"SIPS required\"");
}

trait BodyType {
    fn replace_body_type(self) -> Vec<u8>;
}

impl BodyType for Vec<u8> {
    /// The request with a text/plain body.
    fn replace_body_type(self) -> Vec<u8> {
        String::from_utf8(self)
            .unwrap()
            .replace(
                "Content-Length: 0\r\n\r\n",
                "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi",
            )
            .into_bytes()
    }
}
