//! The SDES crypto attribute parser and the offer/answer choice on arbitrary text: no panic, and
//! whatever parses formats back to a line that parses to the same attribute.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ontime_srtp::{answer_offer, CryptoAttribute};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        match CryptoAttribute::parse(line) {
            Ok(a) => {
                let again = CryptoAttribute::parse(&a.to_sdp_line()).expect("our own line parses");
                assert_eq!(again, a);
            }
            Err(e) => {
                let _ = (e.reason(), e.to_string());
            }
        }
    }
    let _ = answer_offer(text.lines().take(16));
});
