//! Replays a call recorded by the gateway (`--record DIR`) through a fresh echo canceller and
//! prints where it placed the line's echo and when, and which frames it passed on as the caller
//! while a reply was playing: the first thing to read when a reply was barged in on by its own
//! echo. The two tracks are what the sender sent and the caller's audio as it was played out,
//! one 20 ms frame per frame: the canceller's timelines on a call whose jitter buffer did not
//! stretch.
//!
//! `cargo run --release -p ontime-echo --example echo_replay -- DIR/CALL_ID.agent.wav DIR/CALL_ID.caller.wav`

use ontime_echo::{EchoCanceller, EchoConfig, Verdict, FRAME_SAMPLES};

/// Passed frames quieter than this (mean square of full scale, about −45 dBFS) are not listed:
/// a VAD would not hear them.
const AUDIBLE: f32 = 3e-5;

fn read(path: &str) -> Result<Vec<i16>, String> {
    let mut wav = hound::WavReader::open(path).map_err(|e| format!("{path}: {e}"))?;
    let spec = wav.spec();
    if spec.sample_rate != 8000 || spec.channels != 1 || spec.bits_per_sample != 16 {
        return Err(format!(
            "{path}: {} Hz, {} channel(s), {} bits; the canceller takes 8000 Hz mono 16-bit",
            spec.sample_rate, spec.channels, spec.bits_per_sample
        ));
    }
    wav.samples::<i16>()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{path}: {e}"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [agent, caller] = args.as_slice() else {
        eprintln!("usage: echo_replay AGENT.wav CALLER.wav");
        std::process::exit(2);
    };
    let (played, heard) = match (read(agent), read(caller)) {
        (Ok(p), Ok(c)) => (p, c),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let frames = played.len().min(heard.len()) / FRAME_SAMPLES;
    let mut aec = match EchoCanceller::new(&EchoConfig::default()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let mut last = aec.report();
    let mut passed = Vec::new();
    for k in 0..frames {
        let span = k * FRAME_SAMPLES..(k + 1) * FRAME_SAMPLES;
        let at = span.start as u64;
        let mut reference = [0i16; FRAME_SAMPLES];
        reference.copy_from_slice(&played[span.clone()]);
        aec.push_reference(at, &reference);
        let mut frame = [0i16; FRAME_SAMPLES];
        frame.copy_from_slice(&heard[span]);
        let verdict = aec.process(at, &mut frame);
        let energy = frame
            .iter()
            .map(|s| (f32::from(*s) / 32768.0).powi(2))
            .sum::<f32>()
            / FRAME_SAMPLES as f32;
        if verdict == Verdict::Caller && energy > AUDIBLE {
            passed.push(k * 20);
        }
        let report = aec.report();
        if report.delay != last.delay {
            println!(
                "{:>7} ms  echo placed at {:?} (was {:?}; path changes {}, ERLE before {:?} dB)",
                k * 20,
                report.delay,
                last.delay,
                report.path_changes,
                last.erle_db
            );
        }
        last = report;
    }
    println!("passed on as the caller over a reply (ms into the call): {passed:?}");
    println!("at the end: {last:?}");
}
