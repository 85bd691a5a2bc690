//! Hardening against peers that are not the dialog's: dialog matching on Call-ID and both tags
//! and the source rule (RFC 3261 §12.2.2), `received`/`rport` (RFC 3261 §18.2.1, RFC 3581),
//! transaction budgets a flood cannot exhaust, no amplification, stateless responses, and no
//! product version unless configured.

mod common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use ontime_sip::sdp::{self, LocalMedia};
use ontime_sip::{
    stateless_response, Budget, CallHandle, Config, EndReason, Endpoint, Event, Limits, Transmit,
    Transport,
};

/// The caller's address (the INVITE's source).
const TRUNK: &str = "10.0.0.1:5060";
/// Somebody else.
const STRANGER: &str = "10.0.0.9:5060";

/// One UAS fed raw requests.
struct Uas {
    ep: Endpoint,
    now: Instant,
    call: CallHandle,
    /// Our To tag.
    tag: String,
    cseq: u32,
}

fn offer_sdp(version: u64) -> String {
    format!(
        "v=0\r\no=- 1 {version} IN IP4 10.0.0.1\r\ns=-\r\nc=IN IP4 10.0.0.1\r\nt=0 0\r\n\
         m=audio 4000 RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n"
    )
}

/// A request in call `sec-1` from the trunk: `from_tag` and `to_tag` as given.
fn request(
    method: &str,
    cseq: u32,
    from_tag: &str,
    to_tag: &str,
    content_type: &str,
    body: &str,
) -> String {
    let ct = if content_type.is_empty() {
        String::new()
    } else {
        format!("Content-Type: {content_type}\r\n")
    };
    let cseq_method = if method == "ACK" { "ACK" } else { method };
    format!(
        "{method} sip:bot@10.0.0.2 SIP/2.0\r\n\
         Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{method}{cseq}{from_tag}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:trunk@10.0.0.1>;tag={from_tag}\r\n\
         To: <sip:bot@10.0.0.2>{to_tag}\r\nCall-ID: sec-1\r\nCSeq: {cseq} {cseq_method}\r\n\
         Contact: <sip:trunk@10.0.0.1:5060>\r\n{ct}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

impl Uas {
    fn with_config(cfg: Config) -> Uas {
        let mut ep = Endpoint::new(cfg);
        let now = Instant::now();
        let (call, tag) = answered_call(&mut ep, now);
        let mut uas = Uas {
            ep,
            now,
            call,
            tag,
            cseq: 1,
        };
        let ack = uas.req("ACK", "t1", "", "");
        uas.ep.handle_datagram(ack.as_bytes(), addr(TRUNK), now);
        assert_eq!(
            uas.ep.poll_event(),
            Some(Event::Established { call: uas.call })
        );
        uas
    }

    /// With `max_transactions` and `max_in_dialog_transactions` as given.
    fn with_budgets(out_of_dialog: usize, in_dialog: usize) -> Uas {
        let mut cfg = config(UAS_ADDR);
        cfg.limits = Limits {
            max_transactions: out_of_dialog,
            max_in_dialog_transactions: in_dialog,
            ..Limits::default()
        };
        Uas::with_config(cfg)
    }

    fn new() -> Uas {
        Uas::with_config(config(UAS_ADDR))
    }

    /// A request in the dialog with our To tag and `from_tag`; a fresh CSeq (ACK: the INVITE's).
    fn req(&mut self, method: &str, from_tag: &str, content_type: &str, body: &str) -> String {
        let cseq = if method == "ACK" {
            1
        } else {
            self.cseq += 1;
            self.cseq
        };
        let to_tag = format!(";tag={}", self.tag);
        request(method, cseq, from_tag, &to_tag, content_type, body)
    }

    /// The peer's BYE from `source`: 200 and the call ends.
    fn bye_from(&mut self, source: &str) {
        let bye = self.req("BYE", "t1", "", "");
        let (lines, events) = self.feed(&bye, source);
        assert_eq!(lines, ["SIP/2.0 200 OK"]);
        let ended = Event::Ended {
            call: self.call,
            reason: EndReason::RemoteHangup,
        };
        assert_eq!(events, [ended]);
    }

    /// Feeds `msg` from `source`; the status lines of what went out, and the events.
    fn feed(&mut self, msg: &str, source: &str) -> (Vec<String>, Vec<Event>) {
        self.ep
            .handle_datagram(msg.as_bytes(), addr(source), self.now);
        let lines = drain(&mut self.ep)
            .iter()
            .map(|t| first_line(&t.payload))
            .collect();
        let mut events = Vec::new();
        while let Some(e) = self.ep.poll_event() {
            events.push(e);
        }
        (lines, events)
    }
}

/// Feeds the trunk's INVITE to `ep` and answers it: the call and our To tag.
fn answered_call(ep: &mut Endpoint, now: Instant) -> (CallHandle, String) {
    let invite = request("INVITE", 1, "t1", "", "application/sdp", &offer_sdp(1));
    ep.handle_datagram(invite.as_bytes(), addr(TRUNK), now);
    let Some(Event::IncomingCall(inc)) = ep.poll_event() else {
        panic!("no call")
    };
    let (answer, _) = sdp::answer_offer(
        inc.offer.as_ref().unwrap(),
        &LocalMedia::new(addr("10.0.0.2:50000"), 2),
    )
    .unwrap();
    ep.answer(inc.call, &answer, now).unwrap();
    let ok = drain(ep).pop().unwrap();
    (inc.call, to_tag(&ok.payload))
}

/// The tag of the To header of a message.
fn to_tag(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let to = text.split("\r\n").find(|l| l.starts_with("To: ")).unwrap();
    to.split(";tag=").nth(1).unwrap().to_string()
}

fn drain(ep: &mut Endpoint) -> Vec<Transmit> {
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit() {
        out.push(t);
    }
    out
}

const DTMF: &str = "Signal=5\r\nDuration=160\r\n";

/// BYE, INFO and re-INVITE of the dialog, each with its content type and body.
fn in_dialog_requests() -> [(&'static str, &'static str, String); 3] {
    [
        ("INFO", "application/dtmf-relay", DTMF.to_string()),
        ("INVITE", "application/sdp", offer_sdp(2)),
        ("BYE", "", String::new()),
    ]
}

#[test]
fn in_dialog_requests_with_a_wrong_from_tag_get_481_and_change_nothing() {
    let mut uas = Uas::new();
    for (method, ct, body) in in_dialog_requests() {
        let msg = uas.req(method, "intruder", ct, &body);
        let (lines, events) = uas.feed(&msg, TRUNK);
        assert_eq!(
            lines,
            ["SIP/2.0 481 Call/Transaction Does Not Exist"],
            "{method}"
        );
        assert_eq!(events, [], "{method}");
    }
    // No From tag at all is no better.
    let msg = uas.req("BYE", "t1", "", "").replace(";tag=t1", "");
    let (lines, events) = uas.feed(&msg, TRUNK);
    assert_eq!(lines, ["SIP/2.0 481 Call/Transaction Does Not Exist"]);
    assert_eq!(events, []);
    assert_eq!(uas.ep.active_calls(), 1);
    // The peer's own requests still work: the CSeq the intruder used changed nothing either.
    let msg = uas.req("INFO", "t1", "application/dtmf-relay", DTMF);
    let (lines, events) = uas.feed(&msg, TRUNK);
    assert_eq!(lines, ["SIP/2.0 200 OK"]);
    assert_eq!(
        events,
        [Event::Dtmf {
            call: uas.call,
            digit: '5',
            duration_ms: Some(160)
        }]
    );
}

#[test]
fn in_dialog_requests_from_another_source_get_403_and_change_nothing() {
    let mut uas = Uas::new();
    for (method, ct, body) in in_dialog_requests() {
        let msg = uas.req(method, "t1", ct, &body);
        let (lines, events) = uas.feed(&msg, STRANGER);
        assert_eq!(lines, ["SIP/2.0 403 Forbidden"], "{method}");
        assert_eq!(events, [], "{method}");
    }
    assert_eq!(uas.ep.active_calls(), 1);
}

#[test]
fn in_dialog_requests_from_the_invites_source_work() {
    let mut uas = Uas::new();
    // From the INVITE's IP on another port too (the source rule is by IP).
    let msg = uas.req("INFO", "t1", "application/dtmf-relay", DTMF);
    let (lines, events) = uas.feed(&msg, "10.0.0.1:7000");
    assert_eq!(lines, ["SIP/2.0 200 OK"]);
    assert!(matches!(events[..], [Event::Dtmf { digit: '5', .. }]));

    let msg = uas.req("INVITE", "t1", "application/sdp", &offer_sdp(2));
    let (lines, events) = uas.feed(&msg, TRUNK);
    assert_eq!(lines, ["SIP/2.0 100 Trying"]);
    assert!(
        matches!(events[..], [Event::OfferReceived { call, .. }] if call == uas.call),
        "{events:?}"
    );
    uas.ep.reject_update(uas.call, 488, uas.now).unwrap();
    drain(&mut uas.ep);
    let ack = uas
        .req("ACK", "t1", "", "")
        .replace("CSeq: 1 ACK", "CSeq: 3 ACK");
    uas.feed(&ack, TRUNK);

    uas.bye_from(TRUNK);
}

#[test]
fn a_trusted_source_or_the_remote_targets_ip_may_send_in_dialog_requests() {
    let mut cfg = config(UAS_ADDR);
    let trunk_b: IpAddr = "10.0.0.7".parse().unwrap();
    cfg.trusted_peer = Some(Arc::new(move |ip| ip == trunk_b));
    let mut uas = Uas::with_config(cfg);
    let msg = uas.req("INFO", "t1", "application/dtmf-relay", DTMF);
    assert_eq!(uas.feed(&msg, "10.0.0.7:5060").0, ["SIP/2.0 200 OK"]);
    let msg = uas.req("INFO", "t1", "application/dtmf-relay", DTMF);
    assert_eq!(uas.feed(&msg, STRANGER).0, ["SIP/2.0 403 Forbidden"]);

    // The remote target (Contact) names another IP literal: that IP is the peer's too.
    let mut uas = Uas::new();
    let msg = uas.req("INFO", "t1", "", "").replace(
        "Contact: <sip:trunk@10.0.0.1:5060>",
        "Contact: <sip:trunk@10.0.0.5:5060>",
    );
    assert_eq!(uas.feed(&msg, TRUNK).0, ["SIP/2.0 200 OK"]);
    let msg = uas.req("INVITE", "t1", "", "").replace(
        "Contact: <sip:trunk@10.0.0.1:5060>",
        "Contact: <sip:trunk@10.0.0.5:5060>",
    );
    // A re-INVITE without an offer is a target refresh (RFC 3261 §12.2.2), answered at once.
    assert_eq!(uas.feed(&msg, TRUNK).0, ["SIP/2.0 200 OK"]);
    uas.bye_from("10.0.0.5:5062");
    assert_eq!(uas.ep.active_calls(), 0);
}

#[test]
fn acks_that_are_not_the_peers_do_not_establish_the_call() {
    let mut ep = Endpoint::new(config(UAS_ADDR));
    let now = Instant::now();
    let (call, tag) = answered_call(&mut ep, now);
    let ack = |from_tag: &str| request("ACK", 1, from_tag, &format!(";tag={tag}"), "", "");
    ep.handle_datagram(ack("intruder").as_bytes(), addr(TRUNK), now);
    ep.handle_datagram(ack("t1").as_bytes(), addr(STRANGER), now);
    assert_eq!(ep.poll_event(), None);
    assert!(drain(&mut ep).is_empty(), "ACKs are never answered");
    ep.handle_datagram(ack("t1").as_bytes(), addr(TRUNK), now);
    assert_eq!(ep.poll_event(), Some(Event::Established { call }));
}

/// The Via line of a response.
fn via_of(t: &Transmit) -> Vec<String> {
    String::from_utf8_lossy(&t.payload)
        .split("\r\n")
        .filter(|l| l.starts_with("Via: "))
        .map(str::to_string)
        .collect()
}

fn options(via: &str) -> String {
    format!(
        "OPTIONS sip:bot@10.0.0.2 SIP/2.0\r\nVia: {via}\r\nMax-Forwards: 70\r\n\
         From: <sip:a@10.0.0.1>;tag=f1\r\nTo: <sip:bot@10.0.0.2>\r\nCall-ID: via-1\r\n\
         CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    )
}

fn answer_from(msg: &str, source: &str) -> Transmit {
    let mut ep = Endpoint::new(config(UAS_ADDR));
    ep.handle_datagram(msg.as_bytes(), addr(source), Instant::now());
    let t = ep.poll_transmit().unwrap();
    assert!(ep.poll_transmit().is_none());
    t
}

#[test]
fn responses_carry_received_when_the_sent_by_host_is_not_the_source() {
    // (top Via, source, Via of the response, where it goes: no rport, the Via port).
    let cases = [
        (
            "SIP/2.0/UDP pbx.example.com:5070;branch=z9hG4bKr1",
            "10.0.0.1:5070",
            "Via: SIP/2.0/UDP pbx.example.com:5070;branch=z9hG4bKr1;received=10.0.0.1",
            "10.0.0.1:5070",
        ),
        (
            "SIP/2.0/UDP 192.0.2.4:5070;branch=z9hG4bKr2",
            "10.0.0.1:40000",
            "Via: SIP/2.0/UDP 192.0.2.4:5070;branch=z9hG4bKr2;received=10.0.0.1",
            "10.0.0.1:5070",
        ),
        // The sent-by is the source IP: the Via is echoed as written.
        (
            "SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bKr3",
            "10.0.0.1:5070",
            "Via: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bKr3",
            "10.0.0.1:5070",
        ),
    ];
    for (via, source, echoed, destination) in cases {
        let t = answer_from(&options(via), source);
        assert_eq!(via_of(&t), [echoed]);
        assert_eq!(t.destination, addr(destination));
    }
}

#[test]
fn responses_to_an_empty_rport_carry_rport_and_received_and_go_to_the_source() {
    let t = answer_from(
        &options("SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bKp1;rport"),
        "10.0.0.1:40000",
    );
    assert_eq!(
        via_of(&t),
        ["Via: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bKp1;rport=40000;received=10.0.0.1"]
    );
    assert_eq!(t.destination, addr("10.0.0.1:40000"));

    // Behind a NAT, the rest of the Via list kept as written.
    let t = answer_from(
        &options(
            "SIP/2.0/UDP 192.168.1.20:5060;rport;branch=z9hG4bKp2, \
             SIP/2.0/UDP 192.168.1.30:5060;branch=z9hG4bKp3",
        ),
        "203.0.113.7:61000",
    );
    assert_eq!(
        via_of(&t),
        [
            "Via: SIP/2.0/UDP 192.168.1.20:5060;rport=61000;branch=z9hG4bKp2;\
             received=203.0.113.7, SIP/2.0/UDP 192.168.1.30:5060;branch=z9hG4bKp3"
        ]
    );
    assert_eq!(t.destination, addr("203.0.113.7:61000"));
}

#[test]
fn a_flood_of_out_of_dialog_requests_cannot_make_the_endpoint_refuse_a_bye() {
    let mut uas = Uas::with_budgets(4, 2);
    // The INVITE's transaction (Accepted, timer L) holds one out-of-dialog place.
    assert_eq!(uas.ep.transactions_in_budget(Budget::OutOfDialog), 1);
    assert_eq!(uas.ep.budget_exhausted_since(), None);
    let flood = |i: u32| {
        options(&format!(
            "SIP/2.0/UDP 10.0.0.66:5060;branch=z9hG4bKflood{i}"
        ))
        .replace("Call-ID: via-1", &format!("Call-ID: flood-{i}"))
    };
    let mut statuses = Vec::new();
    for i in 0..10 {
        statuses.extend(uas.feed(&flood(i), "10.0.0.66:5060").0);
    }
    assert_eq!(statuses[..3], ["SIP/2.0 200 OK"; 3]);
    assert_eq!(statuses[3..], ["SIP/2.0 503 Service Unavailable"; 7]);
    assert_eq!(uas.ep.budget_exhausted_since(), Some(uas.now));
    assert_eq!(uas.ep.transactions_in_budget(Budget::OutOfDialog), 4);
    // Requests that merely name the dialog take from the full out-of-dialog budget...
    let fake = uas.req("BYE", "intruder", "", "");
    assert_eq!(
        uas.feed(&fake, TRUNK).0,
        ["SIP/2.0 503 Service Unavailable"]
    );
    let fake = uas.req("BYE", "t1", "", "");
    assert_eq!(
        uas.feed(&fake, STRANGER).0,
        ["SIP/2.0 503 Service Unavailable"]
    );
    // ...the peer's own requests have their own.
    let info = uas.req("INFO", "t1", "", "");
    assert_eq!(uas.feed(&info, TRUNK).0, ["SIP/2.0 200 OK"]);
    uas.bye_from(TRUNK);
    assert_eq!(uas.ep.transactions_in_budget(Budget::InDialog), 2);
    // Timer J (64·T1) ends the OPTIONS transactions: the budget has room again.
    uas.now += Duration::from_secs(33);
    uas.ep.handle_timeout(uas.now);
    assert_eq!(uas.ep.transactions_in_budget(Budget::OutOfDialog), 0);
    assert_eq!(uas.ep.transactions_in_budget(Budget::InDialog), 0);
    assert_eq!(uas.ep.budget_exhausted_since(), None);
}

#[test]
fn a_full_in_dialog_budget_answers_503_and_leaves_the_other_alone() {
    let mut uas = Uas::with_budgets(10, 1);
    let info = uas.req("INFO", "t1", "", "");
    assert_eq!(uas.feed(&info, TRUNK).0, ["SIP/2.0 200 OK"]);
    let info = uas.req("INFO", "t1", "", "");
    assert_eq!(
        uas.feed(&info, TRUNK).0,
        ["SIP/2.0 503 Service Unavailable"]
    );
    assert_eq!(uas.ep.budget_exhausted_since(), Some(uas.now));
    let ping = options("SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKping");
    assert_eq!(uas.feed(&ping, TRUNK).0, ["SIP/2.0 200 OK"]);
}

#[test]
fn each_request_gets_one_response_and_no_more() {
    let mut ep = Endpoint::new(config(UAS_ADDR));
    let start = Instant::now();
    let msg = options("SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKamp");
    for i in 0..20 {
        ep.handle_datagram(
            msg.as_bytes(),
            addr(TRUNK),
            start + Duration::from_millis(i),
        );
        assert_eq!(drain(&mut ep).len(), 1);
    }
    // Nothing of our own for a non-INVITE request: no retransmission, until timer J ends it.
    let mut now = start;
    while let Some(t) = ep.poll_timeout() {
        now = t;
        ep.handle_timeout(now);
        assert!(drain(&mut ep).is_empty());
    }
    // Timer J runs from the first final response.
    assert_eq!(now - start, Duration::from_secs(32));
    assert_eq!(ep.active_transactions(), 0);

    // An INVITE rejected and never ACKed: timer G's retransmissions until timer H, no more.
    let invite = request("INVITE", 1, "t1", "", "application/sdp", &offer_sdp(1));
    ep.handle_datagram(invite.as_bytes(), addr(TRUNK), start);
    let Some(Event::IncomingCall(inc)) = ep.poll_event() else {
        panic!("no call")
    };
    ep.reject(inc.call, 486, &[], start).unwrap();
    let mut busy = drain(&mut ep)
        .iter()
        .filter(|t| t.payload.starts_with(b"SIP/2.0 486"))
        .count();
    while let Some(t) = ep.poll_timeout() {
        ep.handle_timeout(t);
        busy += drain(&mut ep).len();
    }
    // 0, then 0.5, 1.5, 3.5, 7.5, 11.5, ... 31.5 s: 1 + 10 (timer H at 32 s).
    assert_eq!(busy, 11);
}

const OPTIONS_REQ: &str = "OPTIONS sip:bot@10.0.0.2 SIP/2.0\r\n\
Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKst;rport\r\nMax-Forwards: 70\r\n\
From: <sip:a@10.0.0.1>;tag=f1\r\nTo: <sip:bot@10.0.0.2>\r\nCall-ID: st-1\r\n\
CSeq: 7 OPTIONS\r\nAccept: application/sdp\r\nContent-Length: 0\r\n\r\n";

#[test]
fn stateless_response_copies_the_request_and_adds_a_to_tag() {
    let resp = stateless_response(OPTIONS_REQ.as_bytes(), 403, None).unwrap();
    let tag = to_tag(&resp);
    let resp = String::from_utf8(resp).unwrap();
    assert_eq!(tag.len(), 16);
    assert_eq!(
        resp,
        format!(
            "SIP/2.0 403 Forbidden\r\n\
             Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKst;rport\r\n\
             From: <sip:a@10.0.0.1>;tag=f1\r\nTo: <sip:bot@10.0.0.2>;tag={tag}\r\n\
             Call-ID: st-1\r\nCSeq: 7 OPTIONS\r\nContent-Length: 0\r\n\r\n"
        )
    );
    // The same request gets the same tag (a retransmission), another one another tag.
    assert_eq!(
        stateless_response(OPTIONS_REQ.as_bytes(), 403, None).unwrap(),
        resp.as_bytes()
    );
    let other = OPTIONS_REQ.replace("z9hG4bKst", "z9hG4bKsu");
    assert!(
        !String::from_utf8(stateless_response(other.as_bytes(), 403, None).unwrap())
            .unwrap()
            .contains(&tag)
    );
    // A Server header only when asked; a To tag kept as it is.
    let resp = stateless_response(OPTIONS_REQ.as_bytes(), 503, Some("acme")).unwrap();
    let resp = String::from_utf8(resp).unwrap();
    assert!(resp.starts_with("SIP/2.0 503 Service Unavailable\r\n"));
    assert!(resp.contains("\r\nServer: acme\r\nContent-Length: 0\r\n\r\n"));
    let tagged = OPTIONS_REQ.replace("To: <sip:bot@10.0.0.2>", "To: <sip:bot@10.0.0.2>;tag=x");
    let resp =
        String::from_utf8(stateless_response(tagged.as_bytes(), 481, None).unwrap()).unwrap();
    assert!(resp.contains("\r\nTo: <sip:bot@10.0.0.2>;tag=x\r\n"));
}

#[test]
fn stateless_response_refuses_acks_responses_and_garbage() {
    let ack = OPTIONS_REQ
        .replace("OPTIONS sip", "ACK sip")
        .replace("7 OPTIONS", "7 ACK");
    assert_eq!(stateless_response(ack.as_bytes(), 403, None), None);
    let resp = stateless_response(OPTIONS_REQ.as_bytes(), 403, None).unwrap();
    assert_eq!(stateless_response(&resp, 403, None), None);
    assert_eq!(stateless_response(b"\x00garbage", 403, None), None);
    assert_eq!(stateless_response(b"", 403, None), None);
    let no_cseq = OPTIONS_REQ.replace("CSeq: 7 OPTIONS\r\n", "");
    assert_eq!(stateless_response(no_cseq.as_bytes(), 403, None), None);
    assert_eq!(stateless_response(OPTIONS_REQ.as_bytes(), 99, None), None);
    assert_eq!(stateless_response(OPTIONS_REQ.as_bytes(), 700, None), None);
}

#[test]
fn no_server_or_user_agent_header_unless_configured() {
    let ping = options("SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKua");
    for user_agent in [None, Some("acme-gw")] {
        let mut cfg = config(UAS_ADDR);
        cfg.user_agent = user_agent.map(str::to_string);
        let mut ep = Endpoint::new(cfg);
        ep.handle_datagram(ping.as_bytes(), addr(TRUNK), Instant::now());
        let dest = addr(TRUNK);
        ep.send_options("sip:10.0.0.1", dest, Transport::Udp, Instant::now())
            .unwrap();
        // The 200 to the OPTIONS, then our OPTIONS.
        let sent: Vec<String> = drain(&mut ep)
            .iter()
            .map(|t| String::from_utf8_lossy(&t.payload).into_owned())
            .collect();
        let header = |i: usize, name: &str| {
            sent[i]
                .split("\r\n")
                .find_map(|l| l.strip_prefix(name).map(str::to_string))
        };
        let expected = user_agent.map(str::to_string);
        assert_eq!(header(0, "Server: "), expected);
        assert_eq!(header(1, "User-Agent: "), expected);
    }
}

#[test]
fn the_default_config_names_no_product() {
    let cfg = Config::new(addr(UAS_ADDR));
    assert_eq!(cfg.user_agent, None);
    assert!(cfg.trusted_peer.is_none());
    assert!(format!("{cfg:?}").contains("trusted_peer: None"));
}
