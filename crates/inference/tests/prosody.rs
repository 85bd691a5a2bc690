//! The final pitch level (`ontime_inference::prosody`) on the committed synthetic speech: where
//! each utterance ends, and where the load harness pauses it (its quietest 20 ms between 40 %
//! and 70 % of the voice, `ontime-load --mid-pause`). Counted exactly: the ends whose voice fell
//! the hold-back's 2.5 semitones (`FINAL_FALL_ST` in the gateway), and the pauses that did.

mod common;

use common::*;
use ontime_inference::prosody::final_pitch_level;

const FALL_ST: f32 = -2.5;

/// The harness's pause point: the quietest 20 ms frame between 40 % and 70 % of the span from
/// the first to the last frame with a sample of magnitude 64 or more.
fn pause_point(pcm: &[i16]) -> usize {
    let frames: Vec<&[i16]> = pcm.chunks(160).collect();
    let voiced = |f: &&[i16]| f.iter().any(|s| s.unsigned_abs() >= 64);
    let first = frames.iter().position(voiced).unwrap();
    let last = frames.iter().rposition(voiced).unwrap();
    let span = last - first;
    let (from, to) = (first + span * 40 / 100, first + span * 70 / 100);
    let energy = |f: &[i16]| f.iter().map(|&s| i64::from(s).pow(2)).sum::<i64>();
    let quietest = (from..=to).min_by_key(|&i| energy(frames[i])).unwrap();
    quietest * 160
}

#[test]
fn the_voice_falls_at_the_fixtures_ends_and_not_in_their_pauses() {
    let mut ends = Vec::new();
    let mut pauses = Vec::new();
    for i in 1..=4 {
        let pcm =
            ulaw_wav(&workspace_root().join(format!("fixtures/callers/utterance_{i}.ulaw.wav")));
        let end = final_pitch_level(pcm.as_slice(), pcm.len());
        let at = pause_point(&pcm);
        let pause = final_pitch_level(&pcm[..at], at);
        eprintln!(
            "utterance_{i}: {:.2} s, end {end:?}, pause at {:.2} s {pause:?}",
            pcm.len() as f64 / 8000.0,
            at as f64 / 8000.0
        );
        ends.push(end);
        pauses.push(pause);
    }
    for name in ["book_table_8k.wav", "book_table_trailing_8k.wav"] {
        let (_, pcm) = read_wav(&fixture(name));
        let end = final_pitch_level(pcm.as_slice(), pcm.len());
        let at = pause_point(&pcm);
        let pause = final_pitch_level(&pcm[..at], at);
        eprintln!(
            "{name}: end {end:?}, pause at {:.2} s {pause:?}",
            at as f64 / 8000.0
        );
        ends.push(end);
        pauses.push(pause);
    }
    let fell = |v: &[Option<f32>]| v.iter().filter(|l| l.is_some_and(|l| l <= FALL_ST)).count();
    // Ends: utterance_1 and both book_table recordings fell (−3.3, −3.7, −3.0 st);
    // utterance_2 ends rising (+1.2), utterance_4's last 100 ms read +9.3 (the tracker jumps
    // on its final syllable), utterance_3 ("Yes.", 0.7 s) has too little voice to tell.
    // Pauses: none fell (+1.4, −2.1, −0.1, −1.5, −1.1).
    assert_eq!((fell(&ends), fell(&pauses)), (3, 0));
    assert_eq!(ends.iter().filter(|l| l.is_none()).count(), 1);
}
