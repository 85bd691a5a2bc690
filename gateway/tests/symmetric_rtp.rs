//! Symmetric RTP over real sockets: a caller whose SDP names one address (its "private" media
//! socket, 127.0.0.1) while its packets come from another (a "NAT", 127.0.0.7). By default the
//! gateway hears none of them and keeps sending to the SDP's address; with `--symmetric-rtp`
//! (or its env twin) it latches to the NAT after the 5-packet run, and audio flows both ways
//! there; once latched, a stranger's full run changes nothing.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::uac::RawUac;
use common::*;

fn socket_on(ip: &str) -> UdpSocket {
    let s = UdpSocket::bind((ip, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

/// The counters the gateway exposes for one call's inbound RTP.
#[derive(Debug, PartialEq, Eq)]
struct Inbound {
    received: u64,
    latch_pending: u64,
    wrong_source: u64,
}

fn inbound(gw: &Gateway) -> Inbound {
    let body = gw.metrics_text();
    let v = |series: &str| metric_value(&body, series).unwrap_or(-1.0) as u64;
    Inbound {
        received: v("ontime_rtp_packets_received_total"),
        latch_pending: v("ontime_rtp_invalid_packets_total{reason=\"latch_pending\"}"),
        wrong_source: v("ontime_rtp_invalid_packets_total{reason=\"wrong_source\"}"),
    }
}

/// What the caller saw over one call: packets the gateway sent to the NAT and to the SDP's
/// address in the last second of the NAT's 3 s of audio, and the gateway's counters.
#[derive(Debug)]
struct Seen {
    to_nat: usize,
    to_sdp: usize,
    counters: Inbound,
    packets_in: u64,
}

/// One call: the NAT sends 150 packets (3 s); after 2 s both sockets count for 1 s.
fn nat_call(gw: &Gateway) -> Seen {
    let mut caller = RawUac::new("127.0.0.1", gw.sip);
    let ids = caller.call().expect("answered");
    let gw_rtp = SocketAddr::new(gw.sip.ip(), gw_rtp_port(gw, &ids.call_id));
    let nat = socket_on("127.0.0.7");
    let talk = {
        let nat = nat.try_clone().unwrap();
        std::thread::spawn(move || RawUac::send_rtp(&nat, gw_rtp, 0xCA11, 1, 150))
    };
    // The latch (if any) is 5 packets in: by 2 s the stream has settled where it goes.
    std::thread::sleep(Duration::from_secs(2));
    let _ = RawUac::count_rtp(&nat, Duration::from_millis(60));
    let _ = RawUac::count_rtp(&caller.media, Duration::from_millis(60));
    let sdp_count = {
        let media = caller.media.try_clone().unwrap();
        std::thread::spawn(move || RawUac::count_rtp(&media, Duration::from_secs(1)))
    };
    let to_nat = RawUac::count_rtp(&nat, Duration::from_secs(1));
    let to_sdp = sdp_count.join().unwrap();
    talk.join().unwrap();
    // The last packets are handled within a few ms; the counters are then final.
    std::thread::sleep(Duration::from_millis(300));
    let counters = inbound(gw);
    assert!(caller
        .bye(&ids)
        .is_some_and(|r| r.starts_with("SIP/2.0 200")));
    assert!(wait_until(Duration::from_secs(5), || gw
        .stdout()
        .contains("\\\"cause\\\":\\\"caller_bye\\\"")));
    // The call's end record (a JSON string in the log line's `cdr` field).
    let packets_in = gw
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["fields"]["cdr"].as_str().map(str::to_owned))
        .map(|cdr| serde_json::from_str::<serde_json::Value>(&cdr).unwrap())
        .find(|r| r["call_id"] == ids.call_id.as_str() && r["record"] == "end")
        .and_then(|r| r["packets_in"].as_u64())
        .expect("end record with packets_in");
    Seen {
        to_nat,
        to_sdp,
        counters,
        packets_in,
    }
}

#[test]
fn a_nat_caller_is_heard_and_hears_only_with_symmetric_rtp() {
    // Default: the hardening rule, nothing from the NAT is taken, nothing is sent there.
    let gw = start_gateway(&[]);
    let off = nat_call(&gw);
    eprintln!("default: {off:?}");
    assert_eq!(
        off.counters,
        Inbound {
            received: 0,
            latch_pending: 0,
            wrong_source: 150
        }
    );
    assert_eq!(off.packets_in, 0);
    assert_eq!(off.to_nat, 0);
    assert!(
        off.to_sdp >= 40,
        "the SDP address gets the stream: {}",
        off.to_sdp
    );
    drop(gw);

    // Opted in by the environment twin: latched after 5 packets; the 4 before are held back.
    let gw = start_gateway_env(&[], &[("ONTIME_SYMMETRIC_RTP", "true")]);
    let on = nat_call(&gw);
    eprintln!("symmetric: {on:?}");
    assert_eq!(
        on.counters,
        Inbound {
            received: 146,
            latch_pending: 4,
            wrong_source: 0
        }
    );
    assert_eq!(on.packets_in, 146);
    assert!(
        on.to_nat >= 40,
        "the NAT hears {} packets a second",
        on.to_nat
    );
    assert_eq!(on.to_sdp, 0);
}

/// Latched to the NAT, the call cannot be taken: a stranger's run (from another address, while
/// the caller is quiet for longer than the same-IP re-latch wait) is `wrong_source`, packet for
/// packet, and the stream stays with the caller.
#[test]
fn symmetric_rtp_cannot_be_hijacked_once_latched() {
    let gw = start_gateway(&["--symmetric-rtp", "true"]);
    let mut caller = RawUac::new("127.0.0.1", gw.sip);
    let ids = caller.call().expect("answered");
    let gw_rtp = SocketAddr::new(gw.sip.ip(), gw_rtp_port(&gw, &ids.call_id));
    let nat = socket_on("127.0.0.7");
    let stranger = socket_on("127.0.0.9");
    RawUac::send_rtp(&nat, gw_rtp, 0xCA11, 1, 10);
    // Quiet for 1.5 s, then the stranger sends 50 while the caller sends 50 more.
    std::thread::sleep(Duration::from_millis(1500));
    let _ = RawUac::count_rtp(&nat, Duration::from_millis(60));
    let stranger_talks = {
        let s = stranger.try_clone().unwrap();
        std::thread::spawn(move || RawUac::send_rtp(&s, gw_rtp, 0xBAD, 5000, 50))
    };
    std::thread::sleep(Duration::from_millis(200));
    let caller_talks = {
        let n = nat.try_clone().unwrap();
        std::thread::spawn(move || RawUac::send_rtp(&n, gw_rtp, 0xCA11, 11, 50))
    };
    let stranger_count = {
        let s = stranger.try_clone().unwrap();
        std::thread::spawn(move || RawUac::count_rtp(&s, Duration::from_secs(1)))
    };
    let to_nat = RawUac::count_rtp(&nat, Duration::from_secs(1));
    let to_stranger = stranger_count.join().unwrap();
    stranger_talks.join().unwrap();
    caller_talks.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let counters = inbound(&gw);
    eprintln!("{counters:?}, {to_nat} to the caller, {to_stranger} to the stranger");
    assert_eq!(
        counters,
        Inbound {
            received: 10 - 4 + 50,
            latch_pending: 4,
            wrong_source: 50
        }
    );
    assert_eq!(to_stranger, 0);
    assert!(to_nat >= 40, "the caller hears {to_nat} packets a second");
    let _ = caller.bye(&ids);
}
