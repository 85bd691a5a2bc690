//! The front parser and the stream framer on arbitrary bytes: no panic, and what parses
//! yields its typed fields without panicking either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ontime_sip::message::{parse_message, Framing, Limits, StreamFramer};

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
    }
    let mut framer = StreamFramer::new();
    for chunk in data.chunks(7) {
        framer.push(chunk);
        while let Ok(Some(msg)) = framer.next_message(&limits) {
            let _ = parse_message(&msg, &limits, Framing::Stream);
        }
    }
});
