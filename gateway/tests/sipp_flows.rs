//! Signalling flows against real sipp callers: CANCEL while ringing, 488 without a common codec,
//! 503 above max-calls, OPTIONS while full and free, BYE from the gateway on RTP timeout, the
//! SIGTERM drain, and a thread count that does not grow with calls.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

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
    let (ok, log) = sipp(&gw, &scen, 1, free_udp_port() & !1, Duration::from_secs(20));
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
    let (ok, log) = sipp(&gw, &scen, 1, free_udp_port() & !1, Duration::from_secs(20));
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
        free_udp_port() & !1,
        Duration::from_secs(10),
    );
    assert!(ok, "OPTIONS while free should get 200:\n{log}");

    // A silent caller holds the only slot until the RTP timeout hangs it up.
    let silent = scenario("caller_silent_waits_bye.xml", &[]);
    let holder = {
        let (sip, media) = (gw.sip, free_udp_port() & !1);
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
    let (ok, log) = sipp(
        &gw,
        &refused,
        1,
        free_udp_port() & !1,
        Duration::from_secs(10),
    );
    assert!(
        ok,
        "INVITE above max-calls should get 503 with Retry-After:\n{log}"
    );
    let options_503 = scenario("options_503.xml", &[]);
    let (ok, log) = sipp(
        &gw,
        &options_503,
        1,
        free_udp_port() & !1,
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
        let (sip, media) = (gw.sip, free_udp_port() & !1);
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
    assert!(
        wait_until(Duration::from_secs(10), || gw.metric("ontime_calls_active")
            == Some(1.0)),
        "call not up"
    );
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
        free_udp_port() & !1,
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
        let (sip, media) = (gw.sip, free_udp_port() & !1);
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
