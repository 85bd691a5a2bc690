//! CPU per call of answering-machine detection at its most expensive: a minute of loud,
//! speech-like audio (every frame audible, so every frame runs the 33 Goertzel filters) through
//! one detector set never to decide; prints the time per 20 ms frame and the share of one core
//! a call costs while it is detecting.
//!
//! `cargo run --release -p ontime-amd --example amd_cost`

use std::time::{Duration, Instant};

use ontime_amd::{AmdConfig, Detector, Mode, FRAME_SAMPLES};

fn main() {
    let frames = 3000u32; // one minute
                          // A 150 Hz buzz with harmonics whose loudness follows a 4 Hz syllable rate, never silent.
    let audio: Vec<i16> = (0..frames as usize * FRAME_SAMPLES)
        .map(|n| {
            let t = n as f32 / 8000.0;
            let envelope = 0.3 + 0.7 * (std::f32::consts::TAU * 4.0 * t).sin().abs();
            let buzz = (1..=8)
                .map(|h| (std::f32::consts::TAU * 150.0 * h as f32 * t).sin() / h as f32)
                .sum::<f32>();
            (4000.0 * envelope * buzz) as i16
        })
        .collect();
    let never = Duration::from_secs(600);
    let config = AmdConfig {
        mode: Mode::DetectMessageEnd,
        timeout: never,
        speech_threshold: never,
        speech_end_threshold: never,
        silence_timeout: never,
    };
    let answered = Instant::now();
    let mut detector = Detector::new(&config, answered).expect("a valid config");
    // Speech from a VAD that never calls it: the frames only feed the tone and energy analysis.
    detector.use_vad_segments();
    let start = Instant::now();
    let mut verdicts = 0;
    for (k, frame) in audio.chunks_exact(FRAME_SAMPLES).enumerate() {
        let now = answered + Duration::from_millis(20) * (k as u32 + 1);
        verdicts += usize::from(detector.push_frame(now, frame).is_some());
    }
    let took = start.elapsed();
    let per_frame = took.as_secs_f64() / f64::from(frames);
    println!(
        "{frames} frames in {:.1} ms: {:.2} µs a frame, {:.3} % of a core per call ({verdicts} verdicts)",
        took.as_secs_f64() * 1e3,
        per_frame * 1e6,
        per_frame / 0.020 * 100.0
    );
}
