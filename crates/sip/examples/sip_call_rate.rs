//! Measures the SIP core's cost: parsing an INVITE, and whole calls (INVITE → 100 → 180 → 200 →
//! ACK → BYE → 200) between two endpoints in memory, on simulated time. Prints the figures
//! `docs/sip.md` quotes.
//!
//! `cargo run --release -p ontime-sip --example sip_call_rate -- 20000`

use std::time::{Duration, Instant};

use ontime_sip::message::{parse_message, Framing, Limits};
use ontime_sip::sdp::{self, LocalMedia};
use ontime_sip::{CallParams, Config, Endpoint, Event, Transport};

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let uac_addr = "10.0.0.1:5060".parse().unwrap();
    let uas_addr = "10.0.0.2:5060".parse().unwrap();
    let mut uac = Endpoint::new(Config::new(uac_addr));
    let mut uas = Endpoint::new(Config::new(uas_addr));
    let local = LocalMedia::new("10.0.0.2:50000".parse().unwrap(), 1);
    let offer = sdp::build_offer(&LocalMedia::new("10.0.0.1:40000".parse().unwrap(), 2));
    let mut now = Instant::now();
    let mut messages = 0usize;
    let mut invite = Vec::new();
    let started = Instant::now();
    for _ in 0..calls {
        let params = CallParams {
            headers: Vec::new(),
            target: "sip:bot@10.0.0.2:5060".into(),
            from: None,
            destination: uas_addr,
            transport: Transport::Udp,
            offer: offer.clone(),
        };
        let call = uac.place_call(params, now).expect("valid target");
        let mut hung_up = false;
        loop {
            let mut any = false;
            while let Some(t) = uac.poll_transmit() {
                if invite.is_empty() {
                    invite = t.payload.clone();
                }
                any = true;
                messages += 1;
                uas.handle_datagram(&t.payload, uac_addr, now);
            }
            while let Some(t) = uas.poll_transmit() {
                any = true;
                messages += 1;
                uac.handle_datagram(&t.payload, uas_addr, now);
            }
            while let Some(e) = uas.poll_event() {
                if let Event::IncomingCall(c) = e {
                    uas.ring(c.call, now).expect("ringing");
                    let (answer, _) =
                        sdp::answer_offer(c.offer.as_ref().expect("offer"), &local).expect("codec");
                    uas.answer(c.call, &answer, now).expect("answer");
                    any = true;
                }
            }
            while let Some(e) = uac.poll_event() {
                if matches!(e, Event::Answered { .. }) && !hung_up {
                    uac.hangup(call, now).expect("hangup");
                    hung_up = true;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        // Let wait timers (K, L, M) expire so state does not pile up across calls.
        now += Duration::from_secs(40);
        uac.handle_timeout(now);
        uas.handle_timeout(now);
    }
    let elapsed = started.elapsed();
    assert_eq!(uac.active_calls() + uas.active_calls(), 0);
    println!(
        "{calls} calls, {messages} messages in {:.3} s: {:.1} µs per call (both sides), {:.2} µs per message",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / calls as f64,
        elapsed.as_secs_f64() * 1e6 / messages as f64
    );
    let limits = Limits::default();
    let n = 200_000;
    let t = Instant::now();
    for _ in 0..n {
        let m = parse_message(&invite, &limits, Framing::Datagram).expect("our own INVITE parses");
        std::hint::black_box(m);
    }
    let per = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!(
        "parse_message on a {}-byte INVITE: {per:.2} µs",
        invite.len()
    );
}
