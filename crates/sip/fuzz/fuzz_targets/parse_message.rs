//! The front parser and the stream framer on arbitrary bytes: no panic, and what parses
//! yields its typed fields without panicking either, digest challenges and credentials
//! included (read, answered and verified).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ontime_sip::digest::{parse_challenges, DigestResponse};
use ontime_sip::message::{parse_message, Framing, Limits, StreamFramer};
use ontime_sip::Credentials;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    if let Ok(m) = parse_message(data, &limits, Framing::Datagram) {
        let _ = (
            m.vias(),
            m.from(),
            m.to(),
            m.contact(),
            m.cseq(),
            m.content_type(),
        );
        let _ = m.option_tags("Require");
        let credentials = Credentials::new("user", "pw");
        for name in ["WWW-Authenticate", "Proxy-Authenticate"] {
            for value in m.headers_named(name) {
                for challenge in parse_challenges(value).into_iter().flatten() {
                    let _ = challenge.to_header_value();
                    let _ = challenge.authorization(&credentials, "INVITE", "sip:a@b", "c", 1);
                }
            }
        }
        for name in ["Authorization", "Proxy-Authorization"] {
            for value in m.headers_named(name) {
                if let Ok(r) = DigestResponse::parse(value) {
                    let _ = r.names_user("user");
                    let _ = r.verify("INVITE", "user", &credentials.password);
                }
            }
        }
    }
    let mut framer = StreamFramer::new();
    for chunk in data.chunks(7) {
        framer.push(chunk);
        while let Ok(Some(msg)) = framer.next_message(&limits) {
            let _ = parse_message(&msg, &limits, Framing::Stream);
        }
    }
});
