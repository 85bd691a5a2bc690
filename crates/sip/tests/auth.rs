//! Digest authentication (RFC 3261 §22, RFC 7616) on simulated time: our UAC answering our UAS's
//! challenge, refused and stale credentials, 407 from a proxy inside a dialog, and the server's
//! nonces.

mod common;

use std::time::Duration;

use common::*;
use ontime_sip::digest::{Challenge, DigestResponse};
use ontime_sip::sdp::{self, LocalMedia};
use ontime_sip::{
    CallParams, Credentials, EndReason, Endpoint, Event, MessageKind, Transport, NONCE_LIFETIME,
};

fn trunk() -> Credentials {
    Credentials::new("trunk", "s3cret").for_realm("ontime.test")
}

fn net(uac_credentials: Option<Credentials>) -> Net {
    let mut uac = config(UAC_ADDR);
    uac.credentials = uac_credentials;
    let mut uas = config(UAS_ADDR);
    uas.trunk_auth = Some(trunk());
    Net::with_configs(uac, uas)
}

fn sent(net: &Net, from_uac: bool, prefix: &str) -> Vec<ontime_sip::Message> {
    net.wire
        .iter()
        .filter(|s| s.from_uac == from_uac && s.line.starts_with(prefix))
        .map(|s| parse(&s.payload))
        .collect()
}

#[test]
fn challenged_invite_is_sent_again_with_credentials() {
    let mut net = net(Some(Credentials::new("trunk", "s3cret")));
    let (uac_call, uas_call) = net.connected_call();
    assert_eq!(
        net.lines()[..5],
        [
            "> INVITE sip:bot@10.0.0.2:5060 SIP/2.0",
            "< SIP/2.0 401 Unauthorized",
            "> ACK sip:bot@10.0.0.2:5060 SIP/2.0",
            "> INVITE sip:bot@10.0.0.2:5060 SIP/2.0",
            "< SIP/2.0 100 Trying",
        ]
    );
    let invites = sent(&net, true, "INVITE");
    let (first, second) = (&invites[0], &invites[1]);
    // RFC 3261 §22.2: same Call-ID and From tag, next CSeq, new branch.
    assert_eq!(first.call_id(), second.call_id());
    assert_eq!(first.header("From"), second.header("From"));
    assert_eq!(first.header("To"), second.header("To"));
    assert_eq!((first.cseq().0, second.cseq().0), (1, 2));
    assert_ne!(
        first.top_via().unwrap().branch(),
        second.top_via().unwrap().branch()
    );
    assert!(first.header("Authorization").is_none());
    let challenge = sent(&net, false, "SIP/2.0 401");
    let offered: Vec<&str> = challenge[0].headers_named("WWW-Authenticate").collect();
    assert_eq!(offered.len(), 2, "SHA-256 and MD5");
    assert!(offered[0].contains("algorithm=SHA-256") && offered[1].contains("algorithm=MD5"));
    assert!(offered[0].contains("realm=\"ontime.test\"") && offered[0].contains("qop=\"auth\""));
    // The ACK of the 401 is in its transaction: the first INVITE's branch and CSeq.
    let ack = &sent(&net, true, "ACK")[0];
    assert_eq!(
        ack.top_via().unwrap().branch(),
        first.top_via().unwrap().branch()
    );
    assert_eq!(ack.cseq().0, 1);
    let auth = DigestResponse::parse(second.header("Authorization").unwrap()).unwrap();
    assert_eq!(auth.algorithm.as_str(), "SHA-256", "the stronger one");
    assert_eq!((auth.nc, auth.qop.as_deref()), (Some(1), Some("auth")));
    assert_eq!(auth.uri, "sip:bot@10.0.0.2:5060");
    assert!(auth.verify("INVITE", "trunk", &"s3cret".into()));
    assert!(!format!("{:?}", net.uac.config()).contains("s3cret"));

    // The ACK of the 2xx repeats the INVITE's credentials (RFC 3261 §13.2.2.4); the BYE signs
    // with the same nonce, counted on.
    let ack2 = &sent(&net, true, "ACK")[1];
    assert_eq!(ack2.cseq().0, 2);
    assert_eq!(ack2.header("Authorization"), second.header("Authorization"));
    net.uac.hangup(uac_call, net.now).unwrap();
    net.pump();
    let bye = &sent(&net, true, "BYE")[0];
    assert_eq!(bye.cseq().0, 3);
    let bye_auth = DigestResponse::parse(bye.header("Authorization").unwrap()).unwrap();
    assert_eq!(
        (bye_auth.nonce.as_str(), bye_auth.nc),
        (auth.nonce.as_str(), Some(2))
    );
    assert!(bye_auth.verify("BYE", "trunk", &"s3cret".into()));
    assert_eq!(
        ended(&net.uas_events, uas_call),
        Some(EndReason::RemoteHangup)
    );
}

#[test]
fn wrong_password_fails_after_one_retry() {
    let mut net = net(Some(Credentials::new("trunk", "guess")));
    let call = net.place_call();
    assert_eq!(
        net.lines(),
        [
            "> INVITE sip:bot@10.0.0.2:5060 SIP/2.0",
            "< SIP/2.0 401 Unauthorized",
            "> ACK sip:bot@10.0.0.2:5060 SIP/2.0",
            "> INVITE sip:bot@10.0.0.2:5060 SIP/2.0",
            "< SIP/2.0 401 Unauthorized",
            "> ACK sip:bot@10.0.0.2:5060 SIP/2.0",
        ]
    );
    assert!(matches!(
        ended(&net.uac_events, call),
        Some(EndReason::Refused { status: 401, .. })
    ));
    assert!(!net
        .uas_events
        .iter()
        .any(|e| matches!(e, Event::IncomingCall(_))));
    assert_eq!(net.uas.active_calls(), 0);
    // Counted exactly: the first challenge answered, the second not; on the other side, one
    // INVITE without credentials and one with the wrong ones.
    let (uac, uas) = (net.uac.stats(), net.uas.stats());
    assert_eq!((uac.challenges_answered, uac.challenges_failed), (1, 1));
    assert_eq!(
        (
            uas.challenges_sent_missing,
            uas.challenges_sent_stale,
            uas.challenges_sent_invalid
        ),
        (1, 0, 1)
    );
    assert_eq!(uac.messages_out.get(MessageKind::Invite), 2);
    assert_eq!(uas.messages_in.get(MessageKind::Invite), 2);
    assert_eq!(uas.messages_out.get(MessageKind::Status4xx), 2);
    assert_eq!(uac.invalid_messages + uas.invalid_messages, 0);
}

#[test]
fn no_credentials_or_another_realm_is_a_refusal() {
    for creds in [
        None,
        Some(Credentials::new("trunk", "s3cret").for_realm("elsewhere")),
    ] {
        let mut net = net(creds);
        let call = net.place_call();
        assert_eq!(net.count(true, "INVITE"), 1);
        assert!(matches!(
            ended(&net.uac_events, call),
            Some(EndReason::Refused { status: 401, .. })
        ));
    }
}

/// A raw INVITE from 10.0.0.1:5070 with an optional Authorization value.
fn invite(n: u32, auth: Option<&str>) -> Vec<u8> {
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!(
        "INVITE sip:bot@10.0.0.2 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bKinv{n}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:alice@10.0.0.1>;tag=a{n}\r\nTo: <sip:bot@10.0.0.2>\r\n\
         Call-ID: auth-{n}\r\nCSeq: 1 INVITE\r\nContact: <sip:alice@10.0.0.1:5070>\r\n{auth}\
         Content-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

/// Sends `bytes`, returns the final response (or none) and whether a call came in.
fn offer(
    uas: &mut Endpoint,
    bytes: &[u8],
    source: &str,
    now: std::time::Instant,
) -> (Option<ontime_sip::Message>, bool) {
    uas.handle_datagram(bytes, addr(source), now);
    let last = drain(uas)
        .into_iter()
        .map(|t| parse(&t.payload))
        .find(|m| m.status().is_some_and(|s| s >= 200));
    let call = events(uas)
        .iter()
        .any(|e| matches!(e, Event::IncomingCall(_)));
    (last, call)
}

fn challenge_of(resp: &ontime_sip::Message) -> Challenge {
    let c = Challenge::parse(resp.header("WWW-Authenticate").unwrap()).unwrap();
    assert_eq!(resp.status(), Some(401));
    c
}

#[test]
fn server_nonces_expire_and_are_bound_to_the_source() {
    let mut cfg = config(UAS_ADDR);
    cfg.trunk_auth = Some(Credentials::new("trunk", "s3cret")); // realm: our IP
    let mut uas = Endpoint::new(cfg);
    let start = std::time::Instant::now();
    let creds = Credentials::new("trunk", "s3cret");
    let (resp, call) = offer(&mut uas, &invite(1, None), "10.0.0.1:5070", start);
    assert!(!call);
    let c = challenge_of(&resp.unwrap());
    assert_eq!((c.realm.as_str(), c.stale), ("10.0.0.2", false));
    let sign = |c: &Challenge, uri: &str, creds: &Credentials| {
        c.authorization(creds, "INVITE", uri, "cn", 1).unwrap()
    };
    let good = sign(&c, "sip:bot@10.0.0.2", &creds);

    // Wrong uri, wrong password, wrong user, another source's nonce: challenged again, not stale.
    let wrong = [
        (sign(&c, "sip:other@10.0.0.2", &creds), "10.0.0.1:5070"),
        (
            sign(&c, "sip:bot@10.0.0.2", &Credentials::new("trunk", "x")),
            "10.0.0.1:5070",
        ),
        (
            sign(&c, "sip:bot@10.0.0.2", &Credentials::new("admin", "s3cret")),
            "10.0.0.1:5070",
        ),
        (good.clone(), "10.0.0.9:5070"),
        ("Digest garbage".to_string(), "10.0.0.1:5070"),
    ];
    for (i, (auth, source)) in wrong.iter().enumerate() {
        let (resp, call) = offer(&mut uas, &invite(10 + i as u32, Some(auth)), source, start);
        assert!(!call, "{auth}");
        assert!(!challenge_of(&resp.unwrap()).stale);
    }
    // Right, within the nonce's lifetime: a call.
    let (resp, call) = offer(&mut uas, &invite(2, Some(&good)), "10.0.0.1:5070", start);
    assert!(call && resp.is_none());
    // The same, after it: stale=true with a new nonce, which works.
    let later = start + NONCE_LIFETIME + Duration::from_secs(1);
    let (resp, call) = offer(&mut uas, &invite(3, Some(&good)), "10.0.0.1:5070", later);
    assert!(!call);
    let fresh = challenge_of(&resp.unwrap());
    assert!(fresh.stale);
    assert_ne!(fresh.nonce, c.nonce);
    let auth = sign(&fresh, "sip:bot@10.0.0.2", &creds);
    let (_, call) = offer(&mut uas, &invite(4, Some(&auth)), "10.0.0.1:5070", later);
    assert!(call);
    // MD5 works too.
    let md5 = Challenge::parse(&format!(
        "Digest realm=\"10.0.0.2\", nonce=\"{}\", algorithm=MD5, qop=\"auth\"",
        fresh.nonce
    ))
    .unwrap();
    let auth = sign(&md5, "sip:bot@10.0.0.2", &creds);
    let (_, call) = offer(&mut uas, &invite(5, Some(&auth)), "10.0.0.1:5070", later);
    assert!(call);
}

/// A UAC with credentials calling a hand-driven peer: answered 200, then what the test does.
struct Hand {
    uac: Endpoint,
    now: std::time::Instant,
    call: ontime_sip::CallHandle,
}

impl Hand {
    fn new() -> Hand {
        let mut cfg = config(UAC_ADDR);
        cfg.credentials = Some(Credentials::new("alice", "pw"));
        let mut uac = Endpoint::new(cfg);
        let now = std::time::Instant::now();
        let offer = sdp::build_offer(&LocalMedia::new(addr("10.0.0.1:40000"), 1));
        let call = uac
            .place_call(
                CallParams {
                    headers: Vec::new(),
                    target: "sip:bot@10.0.0.2:5060".into(),
                    from: None,
                    destination: addr(UAS_ADDR),
                    transport: Transport::Udp,
                    offer,
                },
                now,
            )
            .unwrap();
        let inv = drain(&mut uac).remove(0).payload;
        let answer = "v=0\r\no=- 2 2 IN IP4 10.0.0.2\r\ns=-\r\nc=IN IP4 10.0.0.2\r\nt=0 0\r\n\
                      m=audio 50000 RTP/AVP 0\r\n";
        let ok = response(
            &inv,
            200,
            Some("b"),
            &[("Contact", "<sip:bot@10.0.0.2:5060>")],
            answer,
        );
        uac.handle_datagram(&ok, addr(UAS_ADDR), now);
        let ack = drain(&mut uac);
        assert!(first_line(&ack[0].payload).starts_with("ACK"));
        Hand { uac, now, call }
    }

    /// Answers the one request the UAC sent with `status` and `extra`; returns it.
    fn answer(&mut self, status: u16, extra: &[(&str, &str)]) -> ontime_sip::Message {
        let mut out = drain(&mut self.uac);
        assert_eq!(
            out.len(),
            1,
            "{:?}",
            out.iter()
                .map(|t| first_line(&t.payload))
                .collect::<Vec<_>>()
        );
        let req = out.remove(0).payload;
        self.uac.handle_datagram(
            &response(&req, status, None, extra, ""),
            addr(UAS_ADDR),
            self.now,
        );
        parse(&req)
    }
}

const PROXY: &str = "Digest realm=\"proxy.test\", nonce=\"n1\", qop=\"auth\", opaque=\"o\"";

#[test]
fn proxy_challenge_inside_the_dialog_is_answered_and_reused() {
    let mut hand = Hand::new();
    hand.uac
        .refer(hand.call, "sip:agent@10.0.0.7", None, hand.now)
        .unwrap();
    let refer = hand.answer(407, &[("Proxy-Authenticate", PROXY)]);
    assert!(refer.header("Proxy-Authorization").is_none());
    let refer2 = hand.answer(202, &[]);
    assert_eq!(refer2.cseq().0, refer.cseq().0 + 1);
    let auth = DigestResponse::parse(refer2.header("Proxy-Authorization").unwrap()).unwrap();
    assert_eq!((auth.realm.as_str(), auth.nc), ("proxy.test", Some(1)));
    assert_eq!(auth.opaque.as_deref(), Some("o"));
    assert!(auth.verify("REFER", "alice", &"pw".into()));
    let evs = events(&mut hand.uac);
    assert!(
        evs.contains(&Event::ReferResponse {
            call: hand.call,
            status: 202
        }),
        "{evs:?}"
    );
    assert!(!evs
        .iter()
        .any(|e| matches!(e, Event::ReferResponse { status: 407, .. })));

    // The next request carries the proxy's credentials at once, nonce count 2.
    hand.uac.hangup(hand.call, hand.now).unwrap();
    let bye = hand.answer(200, &[]);
    assert_eq!(bye.cseq().0, refer2.cseq().0 + 1);
    let auth = DigestResponse::parse(bye.header("Proxy-Authorization").unwrap()).unwrap();
    assert_eq!(auth.nc, Some(2));
    assert!(auth.verify("BYE", "alice", &"pw".into()));
    assert_eq!(
        ended(&events(&mut hand.uac), hand.call),
        Some(EndReason::LocalHangup { confirmed: true })
    );
}

#[test]
fn stale_challenges_are_answered_again_and_refusals_end_it() {
    let mut hand = Hand::new();
    hand.uac.hangup(hand.call, hand.now).unwrap();
    let www = |nonce: &str, stale: bool| {
        format!(
            "Digest realm=\"r\", nonce=\"{nonce}\", algorithm=MD5{}",
            if stale { ", stale=true" } else { "" }
        )
    };
    hand.answer(401, &[("WWW-Authenticate", &www("a", false))]);
    // Second challenge, stale: answered with the new nonce.
    let bye2 = hand.answer(401, &[("WWW-Authenticate", &www("b", true))]);
    assert!(bye2
        .header("Authorization")
        .unwrap()
        .contains("nonce=\"a\""));
    // Third, not stale: the credentials were refused; the BYE's result is the 401.
    let bye3 = hand.answer(401, &[("WWW-Authenticate", &www("c", false))]);
    let auth = DigestResponse::parse(bye3.header("Authorization").unwrap()).unwrap();
    assert_eq!(
        (auth.nonce.as_str(), auth.nc, auth.qop.as_deref()),
        ("b", None, None),
        "RFC 2069 mode"
    );
    assert!(auth.verify("BYE", "alice", &"pw".into()));
    assert!(drain(&mut hand.uac).is_empty());
    assert_eq!(
        ended(&events(&mut hand.uac), hand.call),
        Some(EndReason::LocalHangup { confirmed: true })
    );
}

#[test]
fn auth_int_only_and_unknown_algorithms_are_not_answered() {
    for challenge in [
        "Digest realm=\"r\", nonce=\"n\", qop=\"auth-int\"",
        "Digest realm=\"r\", nonce=\"n\", algorithm=SHA-512-256",
        "Basic realm=\"r\"",
    ] {
        let mut hand = Hand::new();
        hand.uac.hangup(hand.call, hand.now).unwrap();
        hand.answer(401, &[("WWW-Authenticate", challenge)]);
        assert!(drain(&mut hand.uac).is_empty(), "{challenge}");
    }
}
