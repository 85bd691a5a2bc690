//! A short "Yes." after long silence must still be heard. Without the pool's periodic Silero state
//! reset (pipecat's 5 s rule) the carried state went deaf: `ontime-load` saw 1–3 % of turns
//! unanswered, all of them this utterance, and offline the same audio lost 6 of 8 repetitions.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ontime_inference::{InferenceEvent, InferencePool, PoolConfig};

/// The committed caller fixture "Yes." (0.7 s, 8 kHz µ-law WAV) as 16-bit PCM.
fn yes_pcm() -> Vec<i16> {
    ulaw_wav(&workspace_root().join("fixtures/callers/utterance_3.ulaw.wav"))
}

#[test]
fn short_utterances_after_long_silence_are_all_heard() {
    let Some(paths) = model_paths() else { return };
    let pool = InferencePool::start(PoolConfig::new(paths)).expect("pool");
    let (mut call, events) = pool.register_call().expect("register");
    let yes = yes_pcm();
    let silence = |secs: f64| vec![0i16; (secs * 8000.0) as usize];
    let mut audio = Vec::new();
    for gap in [6.3f64, 6.3, 20.1, 6.3, 6.3, 20.1, 0.0] {
        audio.extend_from_slice(&yes);
        audio.extend(silence(gap.max(1.0)));
    }
    // Push 0.5 s at a time, at most 2 s ahead of what the thread has judged: its backlog cap is
    // 8 s, and on a slow host a Smart Turn run after each "Yes." holds it for ≈ 250 ms (more in
    // a debug build), while a fixed pace would have overrun the cap there and dropped a "Yes.".
    let mut pushed = Duration::ZERO;
    for chunk in audio.chunks(4000) {
        let ahead = Instant::now() + Duration::from_secs(60);
        while pushed.saturating_sub(call.judged()) > Duration::from_secs(2)
            && Instant::now() < ahead
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        call.push_pcm(chunk).expect("push");
        pushed += Duration::from_micros(chunk.len() as u64 * 125);
    }
    let until = Instant::now() + Duration::from_secs(20);
    let mut started = 0;
    while Instant::now() < until {
        match events.recv_timeout(Duration::from_millis(200)) {
            Ok(InferenceEvent::SpeechStarted { .. }) => started += 1,
            Ok(_) => {}
            Err(_) if pool.stats().vad_chunks as usize >= audio.len() / 256 => break,
            Err(_) => {}
        }
    }
    assert_eq!(started, 7, "every \"Yes.\" should start speech");
}
