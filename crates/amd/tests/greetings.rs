//! The detector on generated calls with exact verdicts: voicemail greetings (the repository's
//! synthesised speech, concatenated) with and without a beep, a short "Yes." then silence,
//! a fax's CNG, silence and line noise. Every call passes through G.711 µ-law, as it would
//! arrive from a trunk.

mod common;

use std::time::{Duration, Instant};

use common::calls::*;
use ontime_amd::{AmdConfig, AnsweredBy, Detector, Mode, Verdict, FRAME_SAMPLES};

/// A verdict of `answered_by`, `after_ms` after the answer.
fn expected(answered_by: AnsweredBy, after_ms: u64) -> Verdict {
    Verdict {
        answered_by,
        after: Duration::from_millis(after_ms),
    }
}

/// `verdict` is `answered_by`, given `from_ms` to `to_ms` (excluded) after the answer.
fn check(verdict: Verdict, answered_by: AnsweredBy, from_ms: u128, to_ms: u128) {
    assert_eq!(verdict.answered_by, answered_by, "{verdict:?}");
    assert!(
        (from_ms..to_ms).contains(&verdict.after.as_millis()),
        "{verdict:?}, expected after {from_ms}..{to_ms} ms"
    );
}

fn mode(mode: Mode) -> AmdConfig {
    AmdConfig {
        mode,
        ..AmdConfig::default()
    }
}

fn voicemail(beep: bool) -> Vec<i16> {
    let mut audio = silence(400);
    audio.extend(greeting());
    audio.extend(silence(300));
    if beep {
        audio.extend(tone(1000.0, 400, 8000.0));
    }
    audio.extend(silence(3000));
    audio
}

#[test]
fn the_greeting_is_about_four_seconds() {
    let secs = greeting().len() as f64 / RATE as f64;
    assert!((3.5..4.5).contains(&secs), "{secs}");
}

#[test]
fn a_greeting_with_a_beep_is_a_machine_at_its_start_and_at_the_beep() {
    let start = detect(&mode(Mode::Enable), &voicemail(true));
    // 400 ms of silence, then 2.4 s of speech activity.
    check(start, AnsweredBy::MachineStart, 2700, 3000);
    let end = detect(&mode(Mode::DetectMessageEnd), &voicemail(true));
    let beep_starts_ms = (400 + greeting().len() * 1000 / RATE + 300) as u128;
    check(
        end,
        AnsweredBy::MachineEndBeep,
        beep_starts_ms + 250,
        beep_starts_ms + 320,
    );
}

#[test]
fn a_beep_that_starts_as_the_silence_nearly_ends_the_greeting_is_still_a_beep() {
    // The greeting's own trailing silence, 800 ms more, then the beep: speech has been over
    // for the end threshold while the beep is being confirmed.
    let mut audio = silence(400);
    audio.extend(greeting());
    audio.extend(silence(800));
    audio.extend(tone(1000.0, 400, 8000.0));
    audio.extend(silence(3000));
    let beep_starts_ms = (400 + greeting().len() * 1000 / RATE + 800) as u128;
    let greeting_ends_ms = audible_until_ms(&audio[..RATE * beep_starts_ms as usize / 1000]);
    assert!(
        (greeting_ends_ms + 1000..greeting_ends_ms + 1200).contains(&beep_starts_ms),
        "the beep starts within the end threshold, is confirmed after it"
    );
    let end = detect(&mode(Mode::DetectMessageEnd), &audio);
    assert_eq!(end.answered_by, AnsweredBy::MachineEndBeep, "{end:?}");
}

#[test]
fn a_greeting_then_silence_ends_in_silence() {
    assert_eq!(
        detect(&mode(Mode::Enable), &voicemail(false)).answered_by,
        AnsweredBy::MachineStart
    );
    let end = detect(&mode(Mode::DetectMessageEnd), &voicemail(false));
    assert_eq!(end.answered_by, AnsweredBy::MachineEndSilence);
    let greeting_ends_ms = audible_until_ms(&voicemail(false));
    check(
        end,
        AnsweredBy::MachineEndSilence,
        greeting_ends_ms + 1200,
        greeting_ends_ms + 1300,
    );
}

#[test]
fn a_greeting_that_never_ends_is_machine_end_other_at_the_timeout() {
    let config = AmdConfig {
        mode: Mode::DetectMessageEnd,
        timeout: Duration::from_secs(10),
        ..AmdConfig::default()
    };
    let mut audio = Vec::new();
    while audio.len() < RATE * 12 {
        audio.extend(greeting());
        audio.extend(silence(200));
    }
    let verdict = detect(&config, &audio);
    assert_eq!(verdict, expected(AnsweredBy::MachineEndOther, 10000));
}

#[test]
fn a_short_hello_then_silence_is_a_person() {
    for config in [mode(Mode::Enable), mode(Mode::DetectMessageEnd)] {
        let mut audio = silence(500);
        audio.extend(utterance(3));
        audio.extend(silence(6000));
        let verdict = detect(&config, &audio);
        assert_eq!(verdict.answered_by, AnsweredBy::Human, "{config:?}");
        let hello_ends_ms = audible_until_ms(&audio);
        check(
            verdict,
            AnsweredBy::Human,
            hello_ends_ms + 1200,
            hello_ends_ms + 1300,
        );
    }
}

#[test]
fn a_fax_calling_tone_is_a_fax() {
    let mut audio = silence(300);
    for _ in 0..3 {
        audio.extend(tone(1100.0, 500, 6000.0));
        audio.extend(silence(3000));
    }
    for config in [mode(Mode::Enable), mode(Mode::DetectMessageEnd)] {
        let verdict = detect(&config, &audio);
        check(verdict, AnsweredBy::Fax, 750, 800);
    }
}

#[test]
fn a_fax_is_a_fax_when_the_vad_takes_its_tone_for_speech() {
    let answered = Instant::now();
    let mut detector = Detector::new(&mode(Mode::Enable), answered).unwrap();
    detector.use_vad_segments();
    let cng = tone(1100.0, 500, 6000.0);
    let mut verdict = None;
    for (n, frame) in cng.chunks(FRAME_SAMPLES).enumerate() {
        let now = answered + Duration::from_millis(300 + 20 * (n as u64 + 1));
        if n == 5 {
            assert_eq!(detector.speech_started(now), None);
        }
        verdict = verdict.or(detector.push_frame(now, frame));
    }
    check(verdict.expect("a verdict"), AnsweredBy::Fax, 760, 780);
}

#[test]
fn a_short_beep_alone_is_a_machine_not_a_fax() {
    // `ms` of a tone of `hz` between 300 ms and 2 s of silence.
    let lone_tone = |hz: f32, ms: usize| {
        let mut audio = silence(300);
        audio.extend(tone(hz, ms, 6000.0));
        audio.extend(silence(2000));
        detect(&mode(Mode::Enable), &audio).answered_by
    };
    // An 1100 Hz tone too short for CNG but long enough for a beep: once it ends.
    assert_eq!(lone_tone(1100.0, 300), AnsweredBy::MachineStart);
    // A tone too short to be a beep is nothing.
    assert_eq!(lone_tone(1000.0, 200), AnsweredBy::Unknown);
}

#[test]
fn silence_is_unknown_at_the_silence_timeout() {
    for config in [mode(Mode::Enable), mode(Mode::DetectMessageEnd)] {
        assert_eq!(
            detect(&config, &silence(8000)),
            expected(AnsweredBy::Unknown, 5000)
        );
    }
}

#[test]
fn line_noise_is_unknown_at_the_silence_timeout() {
    for (rms, seed) in [(100.0, 1), (400.0, 2), (1500.0, 3)] {
        assert_eq!(
            detect(&mode(Mode::DetectMessageEnd), &noise(8000, rms, seed)),
            expected(AnsweredBy::Unknown, 5000),
            "noise of rms {rms}"
        );
    }
}

#[test]
fn a_callee_that_never_sends_audio_is_unknown_at_the_silence_timeout() {
    let verdict = detect(&mode(Mode::Enable), &[]);
    assert_eq!(verdict, expected(AnsweredBy::Unknown, 5000));
}

#[test]
fn speech_from_a_vad_decides_as_speech_from_energy() {
    let answered = Instant::now();
    let at = |ms: u64| answered + Duration::from_millis(ms);
    let mut detector = Detector::new(&mode(Mode::Enable), answered).unwrap();
    detector.use_vad_segments();
    // Speech energy is ignored once a VAD's segments are used.
    let loud = tone(300.0, 20, 8000.0);
    for n in 1..=100 {
        assert_eq!(detector.push_frame(at(20 * n), &loud), None);
    }
    assert_eq!(detector.speech_started(at(2100)), None);
    assert_eq!(detector.speech_stopped(at(2700)), None);
    assert_eq!(detector.poll(at(3899)), None);
    assert_eq!(
        detector.poll(at(3900)),
        Some(expected(AnsweredBy::Human, 3900))
    );
    assert_eq!(detector.poll(at(9000)), None, "one verdict");

    let mut detector = Detector::new(&mode(Mode::Enable), answered).unwrap();
    detector.use_vad_segments();
    assert_eq!(detector.speech_started(at(500)), None);
    assert_eq!(detector.speech_stopped(at(1500)), None);
    // A pause shorter than the end threshold is bridged.
    assert_eq!(detector.speech_started(at(2000)), None);
    assert_eq!(
        detector.poll(at(2900)),
        Some(expected(AnsweredBy::MachineStart, 2900))
    );
}

#[test]
fn frames_of_the_wrong_length_are_not_analysed() {
    let answered = Instant::now();
    let mut detector = Detector::new(&AmdConfig::default(), answered).unwrap();
    let beep = tone(1000.0, 1000, 8000.0);
    for n in 1..=50u32 {
        assert_eq!(
            detector.push_frame(answered + Duration::from_millis(20) * n, &beep[..100]),
            None
        );
    }
}

#[test]
fn a_config_outside_its_bounds_is_refused_by_name() {
    let config = AmdConfig {
        speech_end_threshold: Duration::ZERO,
        ..AmdConfig::default()
    };
    let e = Detector::new(&config, Instant::now()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "answering-machine detection: speech_end_threshold is 0 ms, expected 20 ms to 600 s"
    );
}
