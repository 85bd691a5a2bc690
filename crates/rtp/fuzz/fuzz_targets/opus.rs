//! Opus from the network: a caller's packets of any bytes and any length, checked as the
//! gateway checks them on arrival, decoded when the check passes, and concealed from the next
//! packet's FEC as a lost one would be. No panic; a packet the check accepts decodes to exactly
//! 20 ms; concealment always yields 20 ms.
//!
//! Only the Rust side is instrumented (libopus is C, built by CMake without SanitizerCoverage):
//! the fuzzer steers by our checks and decode paths, and libopus's own robustness rests on its
//! upstream fuzzing; a crash inside it would still fail the run.
//!
//! Input: the first byte picks a packet length (1..=255); the rest is cut into packets of that
//! length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ontime_rtp::opus::{check_packet, Decoder};
use ontime_rtp::WIDEBAND_SAMPLES_PER_FRAME;

fuzz_target!(|data: &[u8]| {
    let Some((&len, rest)) = data.split_first() else {
        return;
    };
    let len = usize::from(len.max(1));
    let mut decoder = Decoder::new().expect("libopus starts a decoder");
    let mut out = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
    let packets: Vec<&[u8]> = rest.chunks(len).collect();
    for (i, packet) in packets.iter().enumerate() {
        if check_packet(packet).is_ok() {
            decoder
                .decode(packet, &mut out)
                .expect("a packet that passed the check decodes");
        } else {
            assert!(decoder.decode(packet, &mut out).is_err());
            decoder
                .conceal(packets.get(i + 1).copied(), &mut out)
                .expect("concealment yields 20 ms");
        }
    }
});
