//! The SDP parser and the offer/answer rules on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ontime_sip::sdp::{answer_offer, read_answer, LocalMedia, SessionDescription};

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = SessionDescription::parse(data) {
        let local = LocalMedia::new("10.0.0.2:50000".parse().unwrap(), 1);
        let _ = answer_offer(&s, &local);
        let _ = read_answer(&s, &local);
        let _ = SessionDescription::parse(s.to_sdp_string().as_bytes());
    }
});
