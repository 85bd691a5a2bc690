//! The gateway under abuse, over real sockets: strangers (any loopback address outside
//! `--trunk-cidr`) flood it, forge in-dialog requests, race the caller for its media, and the
//! process is killed mid-call. Each test fails on the gateway as it was before its defence.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::uac::{header, start_line, RawUac};
use common::*;

/// Only 127.0.0.1 is the trunk; 127.0.0.2.. are strangers.
const TRUNK_ONLY: &[&str] = &["--trunk-cidr", "127.0.0.1/32"];

#[test]
fn strangers_get_silence_by_default_and_one_stateless_403_when_asked() {
    let gw = start_gateway(TRUNK_ONLY);
    let stranger = RawUac::new("127.0.0.2", gw.sip);
    stranger.send(&stranger.invite_text("scan-1@x", "t1"));
    stranger.send(&stranger.options_text("scan-2@x"));
    let replies = stranger.recv_all(Duration::from_secs(3));
    assert!(replies.is_empty(), "a stranger got answers: {replies:?}");
    assert!(wait_until(Duration::from_secs(3), || gw
        .metric("ontime_sip_dropped_total{reason=\"untrusted\"}")
        == Some(2.0)));
    assert_eq!(
        gw.metric("ontime_calls_rejected_total{reason=\"not_trunk\"}"),
        Some(0.0)
    );

    // `--untrusted-sip reject`: exactly one 403 per INVITE, never retransmitted, no version.
    let gw = start_gateway(&["--trunk-cidr", "127.0.0.1/32", "--untrusted-sip", "reject"]);
    let stranger = RawUac::new("127.0.0.2", gw.sip);
    stranger.send(&stranger.invite_text("scan-3@x", "t3"));
    // T1 retransmissions of a stateful 403 would come at 0.5, 1.5, 3.5 s.
    let replies = stranger.recv_all(Duration::from_secs(5));
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(start_line(&replies[0]), "SIP/2.0 403 Forbidden");
    if let Some(server) = header(&replies[0], "Server") {
        assert!(!server.contains('/'), "a version in `Server: {server}`");
    }
    assert_eq!(gw.metric("ontime_sip_untrusted_rejected_total"), Some(1.0));
}

#[test]
fn no_version_in_the_server_header_of_trunk_responses() {
    let gw = start_gateway(&[]);
    let uac = RawUac::new("127.0.0.1", gw.sip);
    uac.send(&uac.options_text("opt-1@x"));
    let reply = uac
        .final_response("OPTIONS", Duration::from_secs(3))
        .expect("200 to OPTIONS");
    assert_eq!(start_line(&reply), "SIP/2.0 200 OK");
    assert_eq!(header(&reply, "Server"), Some("ontime-gateway"));
    // RFC 3581: the response says where the request came from.
    let via = header(&reply, "Via").unwrap();
    assert!(
        via.contains(&format!("rport={}", uac.local().port()))
            && via.contains("received=127.0.0.1"),
        "{via}"
    );
}

/// 2000 requests/s from outside the trunk for 10 s while a trunk call is up: the call's BYE
/// gets 200, a new trunk call during the flood is answered, the strangers get nothing.
#[test]
fn an_outside_flood_cannot_lock_the_trunk_out() {
    let gw = start_gateway(TRUNK_ONLY);
    let mut first = RawUac::new("127.0.0.1", gw.sip);
    let call = first.call().expect("the first trunk call is answered");

    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, answers, sent) = (stop.clone(), answers.clone(), sent.clone());
        let target = gw.sip;
        std::thread::spawn(move || {
            let sock = UdpSocket::bind("127.0.0.2:0").unwrap();
            sock.set_nonblocking(true).unwrap();
            let local = sock.local_addr().unwrap();
            let started = Instant::now();
            let mut buf = [0u8; 4096];
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(10) {
                // 2000/s: 20 requests every 10 ms, each a new transaction.
                for _ in 0..20 {
                    i += 1;
                    let msg = format!(
                        "INVITE sip:bot@{target} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bKf{i}\r\n\
                         From: <sip:flood@{local}>;tag=f{i}\r\nTo: <sip:bot@{target}>\r\nCall-ID: flood-{i}@x\r\n\
                         CSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
                    );
                    if sock.send_to(msg.as_bytes(), target).is_ok() {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
                while sock.recv_from(&mut buf).is_ok() {
                    answers.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_secs(1));
            while sock.recv_from(&mut buf).is_ok() {
                answers.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    // A new trunk call in the middle of the flood.
    let mut second = RawUac::new("127.0.0.1", gw.sip);
    let second_call = second
        .call()
        .expect("a trunk call during the flood is answered");
    std::thread::sleep(Duration::from_secs(2));
    let bye = first
        .bye(&call)
        .expect("a response to the first call's BYE");
    assert_eq!(start_line(&bye), "SIP/2.0 200 OK");
    flood.join().unwrap();
    let bye = second
        .bye(&second_call)
        .expect("a response to the second call's BYE");
    assert_eq!(start_line(&bye), "SIP/2.0 200 OK");
    let sent = sent.load(Ordering::Relaxed);
    eprintln!("flood: {sent} requests sent");
    assert!(
        sent >= 10_000,
        "the flood was too slow to mean anything: {sent}"
    );
    assert_eq!(
        answers.load(Ordering::Relaxed),
        0,
        "the strangers got answers"
    );
    assert!(wait_until(Duration::from_secs(5), || gw
        .metric("ontime_calls_total{result=\"completed\"}")
        == Some(2.0)));
    let dropped = gw
        .metric("ontime_sip_dropped_total{reason=\"untrusted\"}")
        .unwrap();
    assert_eq!(
        dropped, sent as f64,
        "every flood datagram dropped and counted"
    );
    assert!(
        gw.stdout()
            .matches("\\\"cause\\\":\\\"caller_bye\\\"")
            .count()
            == 2
    );
}

/// A stranger with the call's Call-ID and both tags: its re-INVITE (steering the audio to
/// itself), INFO (a digit) and BYE change nothing.
#[test]
fn forged_in_dialog_requests_from_outside_change_nothing() {
    let gw = start_gateway(TRUNK_ONLY);
    let mut caller = RawUac::new("127.0.0.1", gw.sip);
    let ids = caller.call().expect("answered");
    let stranger = RawUac::new("127.0.0.3", gw.sip);
    let sdp = format!(
        "v=0\r\no=- 1 2 IN IP4 127.0.0.3\r\ns=-\r\nc=IN IP4 127.0.0.3\r\nt=0 0\r\n\
         m=audio {} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n",
        stranger.media.local_addr().unwrap().port()
    );
    stranger.send(&stranger.in_dialog_text(
        &ids,
        "INVITE",
        5,
        "Content-Type: application/sdp\r\n",
        &sdp,
    ));
    stranger.send(&stranger.in_dialog_text(
        &ids,
        "INFO",
        6,
        "Content-Type: application/dtmf-relay\r\n",
        "Signal=5\r\nDuration=160\r\n",
    ));
    stranger.send(&stranger.in_dialog_text(&ids, "BYE", 7, "", ""));
    assert!(stranger.recv_all(Duration::from_secs(2)).is_empty());
    // The call is up, its audio still comes to the caller, and no digit was counted.
    assert_eq!(gw.metric("ontime_calls_active"), Some(1.0));
    assert!(RawUac::count_rtp(&caller.media, Duration::from_secs(1)) > 30);
    assert_eq!(
        RawUac::count_rtp(&stranger.media, Duration::from_secs(1)),
        0
    );
    assert_eq!(gw.metric("ontime_dtmf_digits_total"), Some(0.0));
    let bye = caller.bye(&ids).expect("a response to the caller's BYE");
    assert_eq!(start_line(&bye), "SIP/2.0 200 OK");
    assert!(wait_until(Duration::from_secs(5), || gw
        .stdout()
        .contains("\\\"cause\\\":\\\"caller_bye\\\"")));
}

/// A sender on the caller's IP but another port speaks first; the caller, sending from the
/// address its SDP named, still hears the gateway.
#[test]
fn the_latch_race_leaves_the_caller_hearing_the_gateway() {
    let gw = start_gateway(&[]);
    let mut caller = RawUac::new("127.0.0.1", gw.sip);
    let ids = caller.call().expect("answered");
    // Where the gateway listens for this call's RTP: the 200's SDP.
    let rtp_port = gw_rtp_port(&gw, &ids.call_id);
    let gw_rtp: SocketAddr = SocketAddr::new(gw.sip.ip(), rtp_port);
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    attacker
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    // The attacker's run comes first: it is latched.
    RawUac::send_rtp(&attacker, gw_rtp, 0xBAD, 1000, 10);
    // Then both talk for 3 s, the caller from its SDP address, as a caller does: without pause.
    let talk = |sock: &UdpSocket, ssrc: u32, seq: u16| {
        let sock = sock.try_clone().unwrap();
        std::thread::spawn(move || RawUac::send_rtp(&sock, gw_rtp, ssrc, seq, 150))
    };
    let attacker_talks = talk(&attacker, 0xBAD, 1010);
    let caller_talks = talk(&caller.media, 0xCA11, 1);
    // What was sent before the caller's first packet is not the question: drop the backlog.
    std::thread::sleep(Duration::from_millis(300));
    let _ = RawUac::count_rtp(&attacker, Duration::from_millis(200));
    let _ = RawUac::count_rtp(&caller.media, Duration::from_millis(100));
    // Over the next second the gateway's stream goes to the caller only.
    let attacker_count = {
        let attacker = attacker.try_clone().unwrap();
        std::thread::spawn(move || RawUac::count_rtp(&attacker, Duration::from_secs(1)))
    };
    let to_caller = RawUac::count_rtp(&caller.media, Duration::from_secs(1));
    let to_attacker = attacker_count.join().unwrap();
    attacker_talks.join().unwrap();
    caller_talks.join().unwrap();
    eprintln!("after the race: {to_caller} packets to the caller, {to_attacker} to the attacker");
    assert!(
        to_caller >= 40,
        "the caller hears {to_caller} packets a second"
    );
    assert_eq!(to_attacker, 0);
    let _ = caller.bye(&ids);
}

/// SIGKILL mid-call: the call's start record (and an interim one) is in the log, and its
/// recording is a readable WAV.
#[test]
fn a_crash_leaves_a_record_and_a_readable_recording() {
    let dir = std::env::temp_dir().join(format!("ontime-crash-rec-{}", std::process::id()));
    let mut gw = start_gateway(&[
        "--record",
        dir.to_str().unwrap(),
        "--interim-record-interval",
        "1s",
    ]);
    let mut caller = RawUac::new("127.0.0.1", gw.sip);
    let ids = caller.call().expect("answered");
    RawUac::send_rtp(
        &caller.media,
        SocketAddr::new(gw.sip.ip(), gw_rtp_port(&gw, &ids.call_id)),
        7,
        1,
        130,
    );
    gw.proc.signal("KILL");
    gw.proc
        .wait_timeout(Duration::from_secs(5))
        .expect("killed");
    let log = gw.stdout();
    let records: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["fields"]["cdr"].as_str().map(str::to_owned))
        .map(|cdr| serde_json::from_str(&cdr).unwrap())
        .filter(|r: &serde_json::Value| r["call_id"] == ids.call_id.as_str())
        .collect();
    let kinds: Vec<&str> = records
        .iter()
        .filter_map(|r| r["record"].as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"start"), "{log}");
    assert!(kinds.contains(&"interim"), "{kinds:?}");
    assert!(
        !kinds.contains(&"end"),
        "a killed gateway wrote an end record?"
    );
    let interim = records.iter().rfind(|r| r["record"] == "interim").unwrap();
    assert!(interim["packets_in"].as_u64().unwrap() > 0, "{interim}");
    // The recording of the call, never finalised, reads as a WAV.
    let wav = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".caller.wav"))
        .expect("a caller recording");
    let reader = hound::WavReader::open(&wav).expect("a readable WAV after SIGKILL");
    assert!(reader.len() >= 8000, "{} samples", reader.len());
    let _ = std::fs::remove_dir_all(&dir);
}
