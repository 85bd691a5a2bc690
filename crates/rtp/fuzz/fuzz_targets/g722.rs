//! G.722 from the network: a caller's payloads of any bytes and any length, decoded and halved
//! to 8 kHz as a call does; and any 8 kHz samples doubled and encoded as a reply is. No panic
//! (arithmetic overflow included), every output sample in range, and the counts exact.
//!
//! Input: the first byte picks a payload length (1..=255); the rest is cut into payloads of that
//! length, then read again as little-endian samples for the encoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ontime_rtp::g722::{Decoder, Encoder};
use ontime_rtp::resample::{Downsampler, Upsampler};

fuzz_target!(|data: &[u8]| {
    let Some((&len, rest)) = data.split_first() else {
        return;
    };
    let len = usize::from(len.max(1));
    let mut decoder = Decoder::new();
    let mut down = Downsampler::new();
    let mut wide = [0i16; 512];
    let mut narrow = [0i16; 256];
    for payload in rest.chunks(len) {
        let n = decoder.decode(payload, &mut wide);
        assert_eq!(n, 2 * payload.len());
        let m = down.process(&wide[..n], &mut narrow);
        assert!(m <= n / 2 + 1);
    }
    let samples: Vec<i16> = rest
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let mut encoder = Encoder::after_silence();
    let mut up = Upsampler::new();
    let mut bytes = [0u8; 256];
    for chunk in samples.chunks(128) {
        let n = up.process(chunk, &mut wide);
        assert_eq!(n, 2 * chunk.len());
        assert_eq!(encoder.encode(&wide[..n], &mut bytes), chunk.len());
    }
    let n = up.flush(&mut wide);
    assert_eq!(n, Upsampler::DELAY_16K);
});
