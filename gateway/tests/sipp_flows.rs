//! Signalling flows against real sipp callers: CANCEL while ringing, 488 without a common codec,
//! 503 above max-calls, OPTIONS while full and free, BYE from the gateway on RTP timeout, the
//! SIGTERM drain, and a thread count that does not grow with calls.

mod common;

use std::time::Duration;

use common::*;

fn threads_of(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().parse().ok()))?
        })
        .unwrap_or(0)
}

#[test]
fn cancel_while_ringing_gets_487_and_is_counted() {
    if !require("sipp") {
        return;
    }
    let gw = start_gateway(&["--answer-delay", "4s"]);
    let scen = scenario("caller_cancels.xml", &[]);
    let (ok, log) = sipp(&gw, &scen, 1, free_media_port(), Duration::from_secs(20));
    assert!(ok, "CANCEL flow failed:\n{log}\n{}", gw.stderr());
    assert!(wait_until(Duration::from_secs(5), || gw
        .metric("ontime_calls_total{result=\"cancelled\"}")
        == Some(1.0)));
    assert_eq!(gw.metric("ontime_calls_active"), Some(0.0));
    assert!(
        gw.stdout().contains("\\\"cause\\\":\\\"cancelled\\\""),
        "no CDR for the cancelled call:\n{}",
        gw.stdout()
    );
}

#[test]
fn offer_without_common_codec_gets_488() {
    if !require("sipp") {
        return;
    }
    let gw = start_gateway(&[]);
    let scen = scenario("caller_no_codec.xml", &[]);
    let (ok, log) = sipp(&gw, &scen, 1, free_media_port(), Duration::from_secs(20));
    assert!(ok, "488 flow failed:\n{log}");
    assert_eq!(
        gw.metric("ontime_calls_rejected_total{reason=\"no_common_codec\"}"),
        Some(1.0)
    );
}

#[test]
fn full_gateway_refuses_with_503_options_follow_and_rtp_timeout_hangs_up() {
    if !require("sipp") {
        return;
    }
    let gw = start_gateway(&["--max-calls", "1", "--rtp-timeout", "6s"]);
    let options_200 = scenario("options_200.xml", &[]);
    let (ok, log) = sipp(
        &gw,
        &options_200,
        1,
        free_media_port(),
        Duration::from_secs(10),
    );
    assert!(ok, "OPTIONS while free should get 200:\n{log}");

    // A silent caller holds the only slot until the RTP timeout hangs it up.
    let silent = scenario("caller_silent_waits_bye.xml", &[]);
    let holder = {
        let (sip, media) = (gw.sip, free_media_port());
        let silent = silent.clone();
        std::thread::spawn(move || {
            let g = Gateway::borrowed(sip);
            sipp(&g, &silent, 1, media, Duration::from_secs(40))
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || gw.metric("ontime_calls_active")
            == Some(1.0)),
        "call not up"
    );
    assert_eq!(
        http_get(gw.metrics, "/readyz").map(|r| r.0),
        Some(503),
        "/readyz while full"
    );

    let refused = scenario("caller_expects_503.xml", &[]);
    let (ok, log) = sipp(&gw, &refused, 1, free_media_port(), Duration::from_secs(10));
    assert!(
        ok,
        "INVITE above max-calls should get 503 with Retry-After:\n{log}"
    );
    let options_503 = scenario("options_503.xml", &[]);
    let (ok, log) = sipp(
        &gw,
        &options_503,
        1,
        free_media_port(),
        Duration::from_secs(10),
    );
    assert!(ok, "OPTIONS while full should get 503:\n{log}");
    assert_eq!(
        gw.metric("ontime_calls_rejected_total{reason=\"max_calls\"}"),
        Some(1.0)
    );

    let (ok, log) = holder.join().unwrap();
    assert!(ok, "the silent caller should get the gateway's BYE:\n{log}");
    assert_eq!(gw.metric("ontime_rtp_timeouts_total"), Some(1.0));
    assert!(wait_until(Duration::from_secs(5), || gw
        .metric("ontime_calls_active")
        == Some(0.0)));
    assert!(
        gw.stdout().contains("rtp_timeout"),
        "CDR should name the cause"
    );
}

#[test]
fn sigterm_drains_then_hangs_up_and_exits_zero() {
    if !require("sipp") {
        return;
    }
    let mut gw = start_gateway(&["--drain-timeout", "3s", "--rtp-timeout", "60s"]);
    let silent = scenario("caller_silent_waits_bye.xml", &[]);
    let holder = {
        let (sip, media) = (gw.sip, free_media_port());
        std::thread::spawn(move || {
            sipp(
                &Gateway::borrowed(sip),
                &silent,
                1,
                media,
                Duration::from_secs(40),
            )
        })
    };
    if !wait_until(Duration::from_secs(10), || {
        gw.metric("ontime_calls_active") == Some(1.0)
    }) {
        // What sipp and the gateway said (sipp gives up within its own 40 s limit).
        let (ok, log) = holder.join().unwrap();
        panic!("call not up (sipp ok: {ok}):\n{log}\n{}", gw.stdout());
    }
    gw.proc.signal("TERM");
    assert!(
        wait_until(Duration::from_secs(2), || http_get(gw.metrics, "/readyz")
            .map(|r| r.0)
            == Some(503)),
        "/readyz should say 503 while draining"
    );
    let options_503 = scenario("options_503.xml", &[]);
    let (ok, log) = sipp(
        &gw,
        &options_503,
        1,
        free_media_port(),
        Duration::from_secs(10),
    );
    assert!(ok, "OPTIONS while draining should get 503:\n{log}");
    let (ok, log) = holder.join().unwrap();
    assert!(
        ok,
        "the call should be hung up with BYE at the drain timeout:\n{log}"
    );
    let status = gw
        .proc
        .wait_timeout(Duration::from_secs(15))
        .expect("gateway did not exit after the drain");
    assert!(status.success(), "exit status {status}: {}", gw.stderr());
    assert!(
        gw.stdout().contains("drained"),
        "CDR cause should be drained:\n{}",
        gw.stdout()
    );
}

#[test]
fn thread_count_does_not_grow_with_twenty_calls() {
    if !require("sipp") {
        return;
    }
    let gw = start_gateway(&["--rtp-timeout", "8s"]);
    let pid = gw.proc.child.id();
    let idle = threads_of(pid);
    let silent = scenario("caller_silent_waits_bye.xml", &[]);
    let holder = {
        let (sip, media) = (gw.sip, free_media_port());
        std::thread::spawn(move || {
            sipp(
                &Gateway::borrowed(sip),
                &silent,
                20,
                media,
                Duration::from_secs(40),
            )
        })
    };
    assert!(
        wait_until(Duration::from_secs(15), || gw.metric("ontime_calls_active")
            == Some(20.0)),
        "20 calls not up: {:?}",
        gw.metric("ontime_calls_active")
    );
    let busy = threads_of(pid);
    let (ok, log) = holder.join().unwrap();
    assert!(ok, "calls failed:\n{log}");
    eprintln!("threads idle {idle}, at 20 calls {busy}");
    assert!(
        busy <= idle + 2,
        "threads grew with calls: {idle} idle, {busy} at 20 calls"
    );
}

#[test]
fn invite_from_outside_the_trunk_gets_403_when_asked_to_reject() {
    if !require("sipp") {
        return;
    }
    // Only 192.0.2.0/24 (TEST-NET-1) may call: loopback is outside. By default strangers get
    // silence (tests/hardening.rs); `--untrusted-sip reject` answers one stateless 403.
    let gw = start_gateway(&["--trunk-cidr", "192.0.2.0/24", "--untrusted-sip", "reject"]);
    let scen = scenario("caller_expects_403.xml", &[]);
    let (ok, log) = sipp(&gw, &scen, 1, free_media_port(), Duration::from_secs(20));
    assert!(ok, "403 flow failed:\n{log}");
    assert_eq!(gw.metric("ontime_sip_untrusted_rejected_total"), Some(1.0));
    // sipp's ACK to the 403 is a stranger's too: dropped.
    assert_eq!(
        gw.metric("ontime_sip_dropped_total{reason=\"untrusted\"}"),
        Some(1.0)
    );
    assert_eq!(gw.metric("ontime_calls_active"), Some(0.0));
}

#[test]
fn rfc4733_digits_reach_the_call_record_once_each() {
    if !require("sipp") {
        return;
    }
    let pcap = |d: u8| format!("/usr/share/sip-tester/dtmf_2833_{d}.pcap");
    if !std::path::Path::new(&pcap(4)).exists() {
        eprintln!("SKIP: sip-tester's DTMF captures are not installed");
        return;
    }
    let gw = start_gateway(&[]);
    let scen = scenario(
        "caller_dtmf.xml",
        &[("@PCAP1@", &pcap(4)), ("@PCAP2@", &pcap(7))],
    );
    let (ok, log) = sipp(&gw, &scen, 1, free_media_port(), Duration::from_secs(30));
    assert!(ok, "DTMF call failed:\n{log}");
    assert!(wait_until(Duration::from_secs(5), || gw
        .metric("ontime_calls_total{result=\"completed\"}")
        == Some(1.0)));
    assert_eq!(
        gw.metric("ontime_dtmf_digits_total"),
        Some(2.0),
        "{}",
        gw.stdout()
    );
    assert!(
        gw.stdout().contains(r#"\"dtmf\":\"47\""#),
        "CDR should list 4 then 7:\n{}",
        gw.stdout()
    );
}

#[test]
fn malformed_sip_gets_400_or_is_dropped_and_counted() {
    let gw = start_gateway(&[]);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let local = sock.local_addr().unwrap();
    // Garbage is dropped silently; a request with a broken header gets 400 (RFC 3261 §21.4.1).
    sock.send_to(&[0xFF, 0x00, 0x13, 0x37, b'\r', b'\n'], gw.sip)
        .unwrap();
    let bad = format!(
        "OPTIONS sip:bot@{gw} SIP/2.0\r\nVia: SIP/2.0/UDP {local};branch=z9hG4bK-bad1\r\nFrom: <sip:x@{local}>;tag=1\r\n\
         To: <sip:bot@{gw}>\r\nCall-ID: bad-1\r\nCSeq: notanumber OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n",
        gw = gw.sip
    );
    sock.send_to(bad.as_bytes(), gw.sip).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = sock
        .recv_from(&mut buf)
        .expect("a 400 for the malformed request");
    let reply = String::from_utf8_lossy(&buf[..n]);
    assert!(reply.starts_with("SIP/2.0 400"), "{reply}");
    assert!(
        wait_until(Duration::from_secs(3), || gw
            .metric("ontime_sip_invalid_messages_total")
            .unwrap_or(0.0)
            >= 2.0),
        "invalid messages not counted: {:?}",
        gw.metric("ontime_sip_invalid_messages_total")
    );
    // Each counted exactly once (the endpoint is the only place that counts).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(gw.metric("ontime_sip_invalid_messages_total"), Some(2.0));
    // The gateway still serves.
    assert_eq!(http_get(gw.metrics, "/healthz").map(|r| r.0), Some(200));
}
