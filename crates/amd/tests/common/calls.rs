//! Generated calls for the detector's tests and its labelled-set example (`#[path]`-included by
//! both): the repository's synthesised speech, tones, line noise, and a run of a whole call
//! through G.711 µ-law into a detector.
// Each includer uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use ontime_amd::{AmdConfig, Detector, Verdict, FRAME_SAMPLES};
use ontime_rtp::g711::{ulaw_decode, ulaw_encode};
use rand::{Rng, SeedableRng};

/// Samples a second.
pub const RATE: usize = 8000;

/// The samples of a committed 8 kHz µ-law WAV (`fixtures/callers`).
pub fn utterance(n: u32) -> Vec<i16> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../fixtures/callers/utterance_{n}.ulaw.wav"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut at = 12;
    while at + 8 <= bytes.len() {
        let size = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let body = &bytes[at + 8..(at + 8 + size).min(bytes.len())];
        if &bytes[at..at + 4] == b"data" {
            return body.iter().map(|&c| ulaw_decode(c)).collect();
        }
        at += 8 + size + size % 2;
    }
    panic!("{}: no data chunk", path.display())
}

/// Milliseconds from the start of `audio` to the end of its last audible sample: synthesised
/// speech ends in silence of its own.
pub fn audible_until_ms(audio: &[i16]) -> u128 {
    let last = audio
        .iter()
        .rposition(|&s| s.unsigned_abs() > 300)
        .unwrap_or(0);
    ((last + 1) * 1000 / RATE) as u128
}

/// `ms` of digital silence.
pub fn silence(ms: usize) -> Vec<i16> {
    vec![0; RATE * ms / 1000]
}

/// `ms` of a sine of `hz` at `amplitude`.
pub fn tone(hz: f32, ms: usize, amplitude: f32) -> Vec<i16> {
    (0..RATE * ms / 1000)
        .map(|i| {
            (amplitude * (2.0 * std::f32::consts::PI * hz * i as f32 / RATE as f32).sin()) as i16
        })
        .collect()
}

/// Gaussian-ish line noise (sum of uniforms), seeded.
pub fn noise(ms: usize, rms: f32, seed: u64) -> Vec<i16> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..RATE * ms / 1000)
        .map(|_| {
            let sum: f32 = (0..12).map(|_| rng.random::<f32>()).sum::<f32>() - 6.0;
            (sum * rms) as i16
        })
        .collect()
}

/// A voicemail greeting of about 4 s: two sentences with a breath between them.
pub fn greeting() -> Vec<i16> {
    let mut audio = utterance(2);
    audio.extend(silence(300));
    audio.extend(utterance(3));
    audio
}

/// Feed `audio` (through µ-law, in 20 ms frames, each at its arrival time) to a detector for
/// a call answered at the first frame, then the clock alone up to a minute; the verdict.
pub fn detect(config: &AmdConfig, audio: &[i16]) -> Verdict {
    let answered = Instant::now();
    let mut detector = Detector::new(config, answered).unwrap();
    let mut verdict = None;
    let mut frames = 0u32;
    for chunk in audio.chunks(FRAME_SAMPLES) {
        let mut frame = [0i16; FRAME_SAMPLES];
        for (out, &s) in frame.iter_mut().zip(chunk) {
            *out = ulaw_decode(ulaw_encode(s));
        }
        frames += 1;
        let now = answered + Duration::from_millis(20) * frames;
        if let Some(v) = detector.push_frame(now, &frame) {
            assert_eq!(verdict, None, "one verdict per call");
            verdict = Some(v);
        }
    }
    for ms in (0..60_000).step_by(20) {
        let now = answered + Duration::from_millis(20) * frames + Duration::from_millis(ms);
        if let Some(v) = detector.poll(now) {
            assert_eq!(verdict, None, "one verdict per call");
            verdict = Some(v);
        }
    }
    assert_eq!(detector.verdict(), verdict);
    verdict.expect("a verdict by the timeout")
}

/// `audio` with seeded line noise of `rms` added under it (none when `rms` is 0).
pub fn with_noise(mut audio: Vec<i16>, rms: f32, seed: u64) -> Vec<i16> {
    if rms > 0.0 {
        let hiss = noise(audio.len() * 1000 / RATE + 20, rms, seed);
        for (sample, n) in audio.iter_mut().zip(hiss) {
            *sample = sample.saturating_add(n);
        }
    }
    audio
}
