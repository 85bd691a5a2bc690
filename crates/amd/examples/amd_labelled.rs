//! Accuracy and time to decision of answering-machine detection on a labelled set of generated
//! calls (the repository's synthesised speech, tones and line noise, through G.711 µ-law, with
//! Twilio's default settings and speech from energy, as on a call the VAD does not serve):
//! prints one markdown row per label with how many calls got it and how soon.
//!
//! `cargo run --release -p ontime-amd --example amd_labelled`

#[path = "../tests/common/calls.rs"]
mod calls;

use std::time::Duration;

use calls::*;
use ontime_amd::{AmdConfig, AnsweredBy, Mode};

/// One labelled call.
struct Call {
    audio: Vec<i16>,
    mode: Mode,
    label: AnsweredBy,
}

/// Line noise under the calls: none, faint, a noisy line (rms of 16-bit samples).
const NOISE_RMS: [f32; 3] = [0.0, 60.0, 200.0];

/// Voicemail greetings: two sentences with a breath, one long sentence, another, three.
fn greetings() -> Vec<Vec<i16>> {
    let joined = |parts: &[u32]| {
        let mut audio = Vec::new();
        for &n in parts {
            audio.extend(utterance(n));
            audio.extend(silence(250));
        }
        audio
    };
    vec![
        joined(&[2, 3]),
        joined(&[1]),
        joined(&[4]),
        joined(&[3, 1, 2]),
    ]
}

fn labelled() -> Vec<Call> {
    let mut calls = Vec::new();
    let mut seed = 0;
    let mut call = |audio: Vec<i16>, rms: f32, mode: Mode, label: AnsweredBy| {
        seed += 1;
        calls.push(Call {
            audio: with_noise(audio, rms, seed),
            mode,
            label,
        });
    };
    for rms in NOISE_RMS {
        // People: "Yes." after a moment, once or twice.
        for lead_ms in [200, 600, 1200] {
            let mut audio = silence(lead_ms);
            audio.extend(utterance(3));
            audio.extend(silence(4000));
            call(audio, rms, Mode::Enable, AnsweredBy::Human);
        }
        let mut twice = silence(500);
        twice.extend(utterance(3));
        twice.extend(silence(600));
        twice.extend(utterance(3));
        twice.extend(silence(4000));
        call(twice, rms, Mode::Enable, AnsweredBy::Human);
        for greeting in greetings() {
            let mut audio = silence(400);
            audio.extend(greeting.iter());
            // Machines at their start; at their beep (any pitch); at the silence after them.
            let mut then_silent = audio.clone();
            then_silent.extend(silence(4000));
            call(
                then_silent.clone(),
                rms,
                Mode::Enable,
                AnsweredBy::MachineStart,
            );
            call(
                then_silent,
                rms,
                Mode::DetectMessageEnd,
                AnsweredBy::MachineEndSilence,
            );
            for hz in [500.0, 1000.0, 1400.0, 1900.0] {
                let mut beeped = audio.clone();
                beeped.extend(silence(300));
                beeped.extend(tone(hz, 400, 7000.0));
                beeped.extend(silence(3000));
                call(
                    beeped,
                    rms,
                    Mode::DetectMessageEnd,
                    AnsweredBy::MachineEndBeep,
                );
            }
        }
        // A fax calling: CNG, 0.5 s on, 3 s off.
        let mut fax = silence(300);
        for _ in 0..3 {
            fax.extend(tone(1100.0, 500, 6000.0));
            fax.extend(silence(3000));
        }
        call(fax, rms, Mode::Enable, AnsweredBy::Fax);
        // Nobody: a silent or hissing line.
        call(silence(8000), rms, Mode::Enable, AnsweredBy::Unknown);
    }
    // Louder hiss alone.
    for rms in [400.0, 1500.0] {
        call(silence(8000), rms, Mode::Enable, AnsweredBy::Unknown);
    }
    calls
}

fn main() {
    let calls = labelled();
    println!("| AnsweredBy expected | mode | calls | correct | time to decision (median, max) | wrong verdicts |");
    println!("|---|---|---|---|---|---|");
    let (mut total, mut right) = (0, 0);
    for label in AnsweredBy::ALL {
        for mode in [Mode::Enable, Mode::DetectMessageEnd] {
            let mut times: Vec<Duration> = Vec::new();
            let mut wrong: Vec<&str> = Vec::new();
            let mut n = 0;
            for c in calls.iter().filter(|c| c.label == label && c.mode == mode) {
                n += 1;
                let config = AmdConfig {
                    mode,
                    ..AmdConfig::default()
                };
                let verdict = detect(&config, &c.audio);
                if verdict.answered_by == label {
                    times.push(verdict.after);
                } else {
                    wrong.push(verdict.answered_by.as_str());
                }
            }
            if n == 0 {
                continue;
            }
            total += n;
            right += times.len();
            times.sort();
            let ms = |d: Option<&Duration>| {
                d.map_or("-".to_string(), |d| format!("{} ms", d.as_millis()))
            };
            println!(
                "| `{label}` | {mode:?} | {n} | {} | {}, {} | {} |",
                times.len(),
                ms(times.get(times.len() / 2)),
                ms(times.last()),
                if wrong.is_empty() {
                    "none".to_string()
                } else {
                    wrong.join(", ")
                }
            );
        }
    }
    println!("\n{right} of {total} calls decided as labelled");
}
