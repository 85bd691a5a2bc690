//! The speculative end of turn on the real models: the verdict comes from the audio up to the
//! first quiet chunk (the covering audio), is ready at the confirmed stop, and on generated turns
//! (complete sentences and the same sentences cut mid-phrase) the verdicts equal today's rule's.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::Receiver;
use ontime_inference::speech::VAD_CHUNK;
use ontime_inference::{runtime, InferenceEvent, InferencePool, PoolConfig, SmartTurn};

/// Events until the feed's last TurnEnded: waits until `quiet` passes without an event.
fn drain(rx: &Receiver<InferenceEvent>, quiet: Duration, limit: Duration) -> Vec<InferenceEvent> {
    let t = Instant::now();
    let mut out = Vec::new();
    while t.elapsed() < limit {
        match rx.recv_timeout(quiet) {
            Ok(e) => out.push(e),
            Err(_) => break,
        }
    }
    out
}

fn wait_for<F: Fn() -> bool>(what: &str, limit: Duration, done: F) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn speculative_verdict_is_on_the_audio_to_the_first_quiet_chunk() {
    let Some(paths) = model_paths() else { return };
    let (_, pcm) = read_wav(&fixture("book_table_8k.wav"));
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let (start, end) = one_segment(&env, &paths, &pcm);
    let sample = |d: Duration| (d.as_micros() as u64 * 8 / 1000) as usize;
    // The turn from 500 ms before the onset to the end of the first quiet chunk, then the five
    // quiet chunks still to come before the confirmation as digital silence.
    let from = sample(start).saturating_sub(4000);
    let to = sample(end + VAD_CHUNK);
    let mut judged = pcm[from..to].to_vec();
    judged.resize(judged.len() + 5 * 256, 0);
    let mut turn = SmartTurn::load(&env, &paths.smart_turn).expect("turn");
    let want_p = turn.predict_pcm(&judged, 8000).expect("predict");

    let mut config = PoolConfig::new(paths);
    config.turn.speculate_after = Some(VAD_CHUNK);
    config.turn.speculate_pad = true;
    config.turn.early_end = None;
    let pool = InferencePool::start(config).expect("pool");
    let (mut call, rx) = pool.register_call().expect("register");
    call.push_pcm(&pcm).expect("push");
    // Quiet for 10 s before giving up: with a speculation at every one-chunk dip, a slow host
    // (≈ 250 ms a Smart Turn run, more in a debug build) can go seconds between two events.
    let events = drain(&rx, Duration::from_secs(10), Duration::from_secs(120));
    let verdicts: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, InferenceEvent::TurnEnded { .. }))
        .collect();
    let [InferenceEvent::TurnEnded {
        probability,
        at,
        audio,
        latency,
        timed_out: false,
        ..
    }] = verdicts.as_slice()
    else {
        panic!("one verdict expected: {events:?}");
    };
    assert_eq!(*at, end + VAD_CHUNK * 6, "emitted at the confirmed stop");
    assert_eq!(*audio, Duration::from_micros(judged.len() as u64 * 125));
    assert_eq!(*probability, want_p, "bit-identical to the offline run");
    assert_eq!(
        *latency,
        Duration::ZERO,
        "ready when the stop was confirmed"
    );
    let stats = pool.stats();
    assert_eq!(stats.speculative_used, 1);
    assert_eq!(stats.speculative_skipped, 0);
    // Each dip inside the speech started a speculation that speech resuming discarded.
    assert_eq!(stats.turn_runs, 1 + stats.speculative_discarded);
}

/// Two complete sentences and the same recordings cut mid-phrase, as `scripts/turnset.py` makes
/// them (espeak-ng → sox 8 kHz → µ-law → decoded), with 300 ms before and 1.2 s after.
fn generated_turns(dir: &std::path::Path) -> Vec<(String, Vec<i16>)> {
    // Two of the set's turns (voice and rate as the generator picked them) whose cut versions
    // Smart Turn calls incomplete, so both verdicts are exercised.
    const TURNS: [(&str, &str, u32, f64); 2] = [
        (
            "Could you move my appointment to Thursday afternoon instead",
            "en-gb",
            176,
            0.45,
        ),
        (
            "The parcel never arrived and I have been waiting since Monday",
            "en-us+f3",
            130,
            0.45,
        ),
    ];
    let mut out = Vec::new();
    for (i, (text, voice, rate, cut)) in TURNS.iter().enumerate() {
        let raw = dir.join(format!("t{i}.wav"));
        let ulaw = dir.join(format!("t{i}.ulaw.wav"));
        let st = Command::new("espeak-ng")
            .args(["-v", voice, "-s", &rate.to_string(), "-w"])
            .arg(&raw)
            .arg(text)
            .status()
            .expect("espeak-ng runs");
        assert!(st.success());
        let st = Command::new("sox")
            // No dither: its noise is random, and the models' verdicts near a threshold
            // would change from run to run.
            .arg("-D")
            .arg(&raw)
            .args(["-r", "8000", "-c", "1", "-e", "mu-law"])
            .arg(&ulaw)
            .args(["pad", "0.3", "1.2"])
            .status()
            .expect("sox runs");
        assert!(st.success());
        let back = dir.join(format!("t{i}.pcm.wav"));
        let st = Command::new("sox")
            // No dither: its noise is random, and the models' verdicts near a threshold
            // would change from run to run.
            .arg("-D")
            .arg(&ulaw)
            .args(["-b", "16", "-e", "signed-integer"])
            .arg(&back)
            .status()
            .expect("sox runs");
        assert!(st.success());
        let (_, pcm) = read_wav(&back);
        // Cut at the quietest 20 ms near `cut` of the recording (a gap between words).
        let frames = pcm.len() / 160;
        let target = (frames as f64 * cut) as usize;
        let energy = |f: usize| -> i64 {
            pcm[f * 160..(f + 1) * 160]
                .iter()
                .map(|&s| i64::from(s) * i64::from(s))
                .sum()
        };
        let gap = (target - 10..=target + 10)
            .min_by_key(|&f| energy(f))
            .expect("frames");
        let mut cut_pcm = pcm[..gap * 160].to_vec();
        cut_pcm.extend(std::iter::repeat_n(0i16, 9600));
        out.push((format!("{text:?} complete"), pcm));
        out.push((format!("{text:?} cut"), cut_pcm));
    }
    out
}

#[test]
fn generated_turns_get_todays_verdicts_from_speculation() {
    let Some(paths) = model_paths() else { return };
    for (tool, arg) in [("espeak-ng", "--version"), ("sox", "--version")] {
        let ok = Command::new(tool)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            skip(&format!("{tool} is missing"));
            return;
        }
    }
    let dir = TempDir::new("speculative");
    let turns = generated_turns(&dir.0);
    let mut today = PoolConfig::new(paths.clone());
    today.turn.speculate_after = None;
    let mut spec = PoolConfig::new(paths);
    spec.turn.speculate_after = Some(VAD_CHUNK);
    spec.turn.speculate_pad = true;
    spec.turn.early_end = None;
    let today = InferencePool::start(today).expect("pool");
    let spec = InferencePool::start(spec).expect("pool");
    // Every turn on its own call, pushed at once: verdicts do not depend on pacing (Smart Turn
    // jobs run before the next VAD batch) nor on batching (bit-identical rows).
    let calls: Vec<_> = turns
        .iter()
        .map(|(_, pcm)| {
            let (mut a, rx_a) = today.register_call().expect("register");
            let (mut b, rx_b) = spec.register_call().expect("register");
            a.push_pcm(pcm).expect("push");
            b.push_pcm(pcm).expect("push");
            (a, rx_a, b, rx_b)
        })
        .collect();
    let chunks: u64 = turns.iter().map(|(_, p)| (p.len() / 256) as u64).sum();
    wait_for("every chunk", Duration::from_secs(60), || {
        today.stats().vad_chunks == chunks && spec.stats().vad_chunks == chunks
    });
    let mut stops = 0u64;
    let mut verdicts = [0usize; 2];
    for ((what, _), (_, rx_a, _, rx_b)) in turns.iter().zip(&calls) {
        let ev_a = drain(rx_a, Duration::from_millis(500), Duration::from_secs(30));
        let ev_b = drain(rx_b, Duration::from_millis(500), Duration::from_secs(30));
        // Same starts, stops and verdicts (probabilities differ: the audio judged is shorter).
        let shape = |ev: &[InferenceEvent]| -> Vec<String> {
            ev.iter()
                .map(|e| match e {
                    InferenceEvent::SpeechStarted { onset, .. } => format!("start {onset:?}"),
                    InferenceEvent::SpeechStopped { end, .. } => format!("stop {end:?}"),
                    InferenceEvent::TurnEnded {
                        complete,
                        timed_out,
                        at,
                        ..
                    } => format!("turn complete={complete} timed_out={timed_out} at {at:?}"),
                })
                .collect()
        };
        let probabilities = |ev: &[InferenceEvent]| -> Vec<f32> {
            ev.iter()
                .filter_map(|e| match e {
                    InferenceEvent::TurnEnded { probability, .. } => Some(*probability),
                    _ => None,
                })
                .collect()
        };
        eprintln!(
            "{what}: {:?}, p today {:?}, speculative {:?}",
            shape(&ev_b),
            probabilities(&ev_a),
            probabilities(&ev_b)
        );
        assert_eq!(shape(&ev_a), shape(&ev_b), "{what}");
        let n_stops = ev_a
            .iter()
            .filter(|e| matches!(e, InferenceEvent::SpeechStopped { .. }))
            .count() as u64;
        assert!(n_stops > 0, "{what}: no speech stop: {ev_a:?}");
        stops += n_stops;
        for e in &ev_a {
            if let InferenceEvent::TurnEnded { complete, .. } = e {
                verdicts[usize::from(*complete)] += 1;
            }
        }
    }
    let (a, b) = (today.stats(), spec.stats());
    // Today: one Smart Turn run per confirmed stop, no speculation.
    assert_eq!(a.turn_runs, stops);
    assert_eq!(
        (
            a.speculative_used,
            a.speculative_discarded,
            a.speculative_skipped
        ),
        (0, 0, 0)
    );
    // Speculative: every stop's verdict came from speculation; every other run was discarded.
    assert_eq!(b.speculative_used, stops);
    assert_eq!(b.speculative_skipped, 0);
    assert_eq!(b.turn_runs, b.speculative_used + b.speculative_discarded);
    assert_eq!(b.early_ends, 0);
    assert!(
        verdicts[0] > 0 && verdicts[1] > 0,
        "both verdicts exercised: {verdicts:?} (incomplete, complete)"
    );
}
