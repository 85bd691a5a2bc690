//! The transaction and dialog layers: the input is split into datagrams fed to a UAS endpoint
//! at advancing times; calls are answered (INVITEs without SDP with our offer) or rejected;
//! inputs of odd length meet an endpoint that challenges INVITEs (digest); nothing may panic.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ontime_sip::{sdp, Config, Credentials, Endpoint, Event};

fuzz_target!(|data: &[u8]| {
    let mut config = Config::new("10.0.0.2:5060".parse().unwrap());
    if data.len() % 2 == 1 {
        config.trunk_auth = Some(Credentials::new("trunk", "pw"));
    }
    let mut ep = Endpoint::new(config);
    let source = "10.0.0.1:5060".parse().unwrap();
    let mut now = Instant::now();
    // Datagrams are separated by a 0xFF byte followed by a time step in 100 ms units.
    let mut parts = data.split(|b| *b == 0xFF);
    if let Some(first) = parts.next() {
        ep.handle_datagram(first, source, now);
    }
    for part in parts {
        let (step, msg) = part.split_first().map(|(s, m)| (*s, m)).unwrap_or((0, &[]));
        now += Duration::from_millis(u64::from(step) * 100);
        ep.handle_timeout(now);
        ep.handle_datagram(msg, source, now);
        while ep.poll_transmit().is_some() {}
        while let Some(e) = ep.poll_event() {
            if let Event::IncomingCall(c) = e {
                let local = sdp::LocalMedia::new("10.0.0.2:50000".parse().unwrap(), 1);
                match c.offer.as_ref().map(|o| sdp::answer_offer(o, &local)) {
                    Some(Ok((answer, _))) => {
                        let _ = ep.answer(c.call, &answer, now);
                    }
                    None => {
                        let _ = ep.answer(c.call, &sdp::build_offer(&local), now);
                    }
                    _ => {
                        let _ = ep.reject(c.call, 488, &[], now);
                    }
                }
            }
        }
    }
    for _ in 0..8 {
        now += Duration::from_secs(100);
        ep.handle_timeout(now);
    }
});
