//! CPU per call of the echo canceller: one minute of a call whose line echoes the reply (150 ms,
//! 12 dB, −60 dBFS noise), the reply playing half the time, run through one canceller on this
//! thread; prints the time per 20 ms frame and the share of one core a call costs.
//!
//! `cargo run --release -p ontime-echo --example echo_cost`

use std::time::Instant;

use ontime_echo::{EchoCanceller, EchoConfig, FRAME_SAMPLES};

fn main() {
    let frames = 3000; // one minute
    let mut state = 0x2545_f491_u32;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state % 64) as i16 - 32
    };
    // A speech-like reference: a 200 Hz buzz whose loudness follows a 4 Hz syllable rate,
    // playing for two seconds in every four.
    let reference: Vec<i16> = (0..frames * FRAME_SAMPLES)
        .map(|n| {
            let t = n as f32 / 8000.0;
            let on = (t as u32 / 2).is_multiple_of(2);
            let envelope = (std::f32::consts::TAU * 4.0 * t).sin().abs();
            let buzz = (std::f32::consts::TAU * 200.0 * t).sin()
                + 0.5 * (std::f32::consts::TAU * 600.0 * t).sin();
            if on {
                (6000.0 * envelope * buzz) as i16
            } else {
                0
            }
        })
        .collect();
    let delay = 150 * 8;
    let caller: Vec<i16> = (0..reference.len())
        .map(|n| {
            let echo = n.checked_sub(delay).map_or(0, |m| reference[m] / 4);
            echo.saturating_add(noise())
        })
        .collect();
    let mut aec = EchoCanceller::new(&EchoConfig::default()).expect("default config");
    let start = Instant::now();
    for k in 0..frames {
        let at = (k * FRAME_SAMPLES) as u64;
        let r: &[i16; FRAME_SAMPLES] = reference[k * FRAME_SAMPLES..][..FRAME_SAMPLES]
            .try_into()
            .expect("frame");
        aec.push_reference(at, r);
        let mut c: [i16; FRAME_SAMPLES] = caller[k * FRAME_SAMPLES..][..FRAME_SAMPLES]
            .try_into()
            .expect("frame");
        aec.process(at, &mut c);
    }
    let took = start.elapsed();
    let per_frame = took.as_secs_f64() / frames as f64;
    let report = aec.report();
    println!(
        "{frames} frames in {:.1} ms: {:.1} µs a frame, {:.3} % of a core per call (delay found {:?}, ERLE {:?} dB)",
        took.as_secs_f64() * 1e3,
        per_frame * 1e6,
        per_frame / 0.020 * 100.0,
        report.delay,
        report.erle_db,
    );
}
