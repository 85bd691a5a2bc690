//! The pool end to end on the real models: events per call from pushed PCM, turn analysis on the
//! buffered audio, queue-full rejection, the CPU budget's deferrals, unregistering.

mod common;

use std::time::{Duration, Instant};

use common::*;
use crossbeam_channel::Receiver;
use ontime_inference::speech::VAD_CHUNK;
use ontime_inference::{
    runtime, CpuQuota, Error, InferenceEvent, InferencePool, PoolConfig, SmartTurn,
};

fn wait_for<F: Fn() -> bool>(what: &str, limit: Duration, done: F) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn collect_until_turn(rx: &Receiver<InferenceEvent>, limit: Duration) -> Vec<InferenceEvent> {
    let t = Instant::now();
    let mut out = Vec::new();
    while t.elapsed() < limit {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(e) => {
                let end = matches!(e, InferenceEvent::TurnEnded { .. });
                out.push(e);
                if end {
                    return out;
                }
            }
            Err(_) => continue,
        }
    }
    panic!("no TurnEnded within {limit:?}; got {out:?}");
}

#[test]
fn events_match_offline_analysis() {
    let Some(paths) = model_paths() else { return };
    let (_, pcm) = read_wav(&fixture("book_table_8k.wav"));

    // Offline: the expected segment and the turn verdict on the audio the pool should buffer.
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let (start, end) = one_segment(&env, &paths, &pcm);
    let stop_detected = end + VAD_CHUNK * 6;
    let sample = |d: Duration| (d.as_micros() as u64 * 8 / 1000) as usize;
    let turn_from = sample(start).saturating_sub(4000);
    let turn_to = sample(stop_detected);
    let mut turn = SmartTurn::load(&env, &paths.smart_turn).expect("turn");
    let want_p = turn
        .predict_pcm(&pcm[turn_from..turn_to], 8000)
        .expect("predict");

    // Today's rule: Smart Turn on the confirmed stop's audio (tests/speculative.rs covers the
    // speculative rule).
    let mut config = PoolConfig::new(paths);
    config.turn.speculate_after = None;
    let pool = InferencePool::start(config).expect("pool");
    // Three calls pushing the same audio in different frame sizes, interleaved.
    let mut calls: Vec<_> = (0..3)
        .map(|_| pool.register_call().expect("register"))
        .collect();
    let frame_sizes = [160usize, 333, 1000];
    let mut pos = [0usize; 3];
    while pos.iter().any(|&p| p < pcm.len()) {
        for (i, (call, _)) in calls.iter_mut().enumerate() {
            let n = frame_sizes[i].min(pcm.len() - pos[i]);
            if n > 0 {
                call.push_pcm(&pcm[pos[i]..pos[i] + n]).expect("push");
                pos[i] += n;
            }
        }
    }
    for (i, (_, rx)) in calls.iter().enumerate() {
        let events = collect_until_turn(rx, Duration::from_secs(60));
        let [InferenceEvent::SpeechStarted {
            onset,
            detected: d0,
        }, InferenceEvent::SpeechStopped {
            end: e,
            detected: d1,
        }, InferenceEvent::TurnEnded {
            probability,
            complete,
            timed_out,
            at,
            audio,
            ..
        }] = events.as_slice()
        else {
            panic!("call {i}: unexpected events {events:?}");
        };
        assert_eq!(*onset, start, "call {i}");
        assert_eq!(*d0, start + VAD_CHUNK * 6, "call {i}");
        assert_eq!(*e, end, "call {i}");
        assert_eq!(*d1, stop_detected, "call {i}");
        assert_eq!(*at, stop_detected, "call {i}");
        assert!(!timed_out);
        let want_audio = Duration::from_micros((turn_to - turn_from) as u64 * 125);
        assert_eq!(*audio, want_audio, "call {i}: turn audio length");
        assert!(
            (probability - want_p).abs() < 1e-5,
            "call {i}: pool p {probability} vs offline {want_p}"
        );
        assert_eq!(*complete, want_p > 0.5);
    }
    let all_chunks = 3 * (pcm.len() / 256) as u64;
    wait_for("the trailing chunks", Duration::from_secs(30), || {
        pool.stats().vad_chunks == all_chunks
    });
    let stats = pool.stats();
    assert_eq!(stats.turn_runs, 3);
    assert!(
        stats.vad_batches < stats.vad_chunks,
        "calls were batched: {stats:?}"
    );
    assert_eq!(stats.calls, 3);
    drop(calls);
    wait_for("unregistering", Duration::from_secs(10), || {
        pool.stats().calls == 0
    });
}

/// A wideband call pushes its 16 kHz audio beside the 8 kHz the VAD hears: Smart Turn judges
/// the turn on the 16 kHz audio as pushed (the same probability as offline on that audio, which
/// carries a 6 kHz tone the 8 kHz stream cannot), while a narrowband call's turn is its 8 kHz
/// audio upsampled; both turns span the same stream time.
#[test]
fn a_wideband_calls_turn_is_judged_on_its_16k_audio() {
    let Some(paths) = model_paths() else { return };
    let (_, pcm) = read_wav(&fixture("book_table_8k.wav"));
    let mut up = ontime_rtp::resample::Upsampler::new();
    let mut wide = vec![0i16; 2 * pcm.len()];
    up.process(&pcm, &mut wide);
    for (n, w) in wide.iter_mut().enumerate() {
        let tone = 600.0 * (2.0 * std::f32::consts::PI * 6000.0 * n as f32 / 16000.0).sin();
        *w = w.saturating_add(tone as i16);
    }

    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let (start, end) = one_segment(&env, &paths, &pcm);
    let stop_detected = end + VAD_CHUNK * 6;
    let sample = |d: Duration| (d.as_micros() as u64 * 8 / 1000) as usize;
    let (from, to) = (sample(start).saturating_sub(4000), sample(stop_detected));
    let mut turn = SmartTurn::load(&env, &paths.smart_turn).expect("turn");
    let want_narrow = turn.predict_pcm(&pcm[from..to], 8000).expect("8 kHz");
    let want_wide = turn
        .predict_pcm(&wide[2 * from..2 * to], 16000)
        .expect("16 kHz");
    assert!(
        (want_wide - want_narrow).abs() > 1e-4,
        "the tone changes the verdict: {want_wide} vs {want_narrow}"
    );

    let mut config = PoolConfig::new(paths);
    config.turn.speculate_after = None;
    let pool = InferencePool::start(config).expect("pool");
    let (mut wideband, wide_rx) = pool.register_call().expect("register");
    let (mut narrowband, narrow_rx) = pool.register_call().expect("register");
    assert!(matches!(
        wideband.push_pcm_wide(&pcm[..160], &wide[..160]),
        Err(Error::UnsupportedAudio(_))
    ));
    for (n, w) in pcm.chunks(160).zip(wide.chunks(320)) {
        wideband.push_pcm_wide(n, w).expect("push");
        narrowband.push_pcm(n).expect("push");
    }
    let verdict = |rx| match collect_until_turn(rx, Duration::from_secs(60)).last() {
        Some(InferenceEvent::TurnEnded {
            probability, audio, ..
        }) => (*probability, *audio),
        other => panic!("no verdict: {other:?}"),
    };
    let (p_wide, audio_wide) = verdict(&wide_rx);
    let (p_narrow, audio_narrow) = verdict(&narrow_rx);
    assert!(
        (p_wide - want_wide).abs() < 1e-5,
        "wideband: pool {p_wide}, offline at 16 kHz {want_wide}"
    );
    assert!(
        (p_narrow - want_narrow).abs() < 1e-5,
        "narrowband: pool {p_narrow}, offline at 8 kHz {want_narrow}"
    );
    let want_audio = Duration::from_micros((to - from) as u64 * 125);
    assert_eq!((audio_wide, audio_narrow), (want_audio, want_audio));
    let stats = pool.stats();
    assert_eq!((stats.turn_runs, stats.turn_runs_wideband), (2, 1));
}

#[test]
fn full_queue_rejects_without_blocking() {
    let Some(paths) = model_paths() else { return };
    let mut config = PoolConfig::new(paths);
    config.queue_capacity = 4;
    let pool = InferencePool::start(config).expect("pool");
    let (mut call, _rx) = pool.register_call().expect("register");
    let frame = [100i16; 160];
    let mut rejected = 0u64;
    for _ in 0..2000 {
        match call.push_pcm(&frame) {
            Ok(()) => {}
            Err(Error::QueueFull { capacity: 4 }) => rejected += 1,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(
        rejected > 0,
        "2000 pushes into a 4-slot queue never filled it"
    );
    assert_eq!(pool.stats().queue_full, rejected);
}

/// A pool with `window` of inference per 100 ms (2 ms of its quota reserved) and 8 calls, each
/// pushed `seconds` of speech at once: far more work than one window lets through.
fn starved_pool(
    paths: ontime_inference::ModelPaths,
    seconds: usize,
    window: Duration,
) -> (
    InferencePool,
    Vec<(ontime_inference::CallInference, Receiver<InferenceEvent>)>,
) {
    let (_, pcm) = read_wav(&fixture("book_table_trailing_8k.wav"));
    let mut config = PoolConfig::new(paths);
    config.quota = Some(CpuQuota {
        quota: window + Duration::from_millis(2),
        period: Duration::from_millis(100),
    });
    config.budget_reserve = Duration::from_millis(2);
    let pool = InferencePool::start(config).expect("pool");
    let mut calls: Vec<_> = (0..8)
        .map(|_| pool.register_call().expect("register"))
        .collect();
    for (call, _) in &mut calls {
        call.push_pcm(&pcm[..8000 * seconds]).expect("push");
    }
    (pool, calls)
}

#[test]
fn budget_defers_work_under_a_tiny_quota() {
    let Some(paths) = model_paths() else { return };
    let seconds = 2;
    // 8 ms windows: with 2 ms ones the whole backlog took 50 s unloaded (each batch, run after
    // the thread slept out its window, cost ~15 ms of CPU rather than ~1 ms) and over 120 s
    // under CI's parallel load.
    let (pool, _calls) = starved_pool(paths, seconds, Duration::from_millis(8));
    let chunks = 8 * (8000 * seconds / 256) as u64;
    wait_for("all chunks", Duration::from_secs(120), || {
        pool.stats().vad_chunks == chunks
    });
    let stats = pool.stats();
    // 62 batches of 8 chunks, at ≥ 0.2 ms each, pushed at once cannot fit in one 8 ms window.
    assert!(
        stats.budget_deferrals > 0,
        "no deferral with 2 ms per window: {stats:?}"
    );
    eprintln!("{stats:?}");
}

/// CPU time of this process's thread named `name` (utime + stime from `/proc`), if any.
/// (task id, CPU) of every `ontime-inference` thread of this process.
fn pool_threads_cpu() -> Vec<(String, Duration)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            (comm.trim() == "ontime-inferenc").then_some(())?;
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks: u32 =
                fields.get(11)?.parse::<u32>().ok()? + fields.get(12)?.parse::<u32>().ok()?;
            Some((
                task.file_name().to_string_lossy().into_owned(),
                Duration::from_millis(10) * ticks,
            ))
        })
        .collect()
}

#[test]
fn the_thread_sleeps_when_calls_end_while_the_budget_defers_their_work() {
    let Some(paths) = model_paths() else { return };
    // The backlog of 8 calls is deferred for seconds.
    let (pool, calls) = starved_pool(paths, 2, Duration::from_millis(2));
    wait_for("a deferral", Duration::from_secs(30), || {
        pool.stats().budget_deferrals > 0
    });
    // The calls end with their audio still deferred.
    drop(calls);
    wait_for("the calls to leave", Duration::from_secs(10), || {
        pool.stats().calls == 0
    });
    std::thread::sleep(Duration::from_millis(200));
    // Every idle pool thread of this binary (tests run in parallel, each with its own pool):
    // the same task ids read twice, so a thread of another test ending between the reads
    // cannot be mistaken for this one.
    let before = pool_threads_cpu();
    assert!(!before.is_empty(), "the pool's thread in /proc");
    std::thread::sleep(Duration::from_secs(1));
    let after = pool_threads_cpu();
    let used = before
        .iter()
        .filter_map(|(tid, b)| Some(after.iter().find(|(t, _)| t == tid)?.1.saturating_sub(*b)))
        .min()
        .expect("a pool thread still there");
    // Idle, it blocks on its queues: a few ticks at most. Spinning, it used the whole second.
    assert!(
        used <= Duration::from_millis(50),
        "the idle inference thread used {used:?} of CPU in 1 s"
    );
}

#[test]
fn incomplete_turn_times_out_after_silence() {
    let Some(paths) = model_paths() else { return };
    // Smart Turn calls this robot-voiced request incomplete (p ≈ 0.01; fixtures/speech/README.md).
    let (_, pcm) = read_wav(&fixture("book_table_8k.wav"));
    let pool = InferencePool::start(PoolConfig::new(paths)).expect("pool");
    let (mut call, rx) = pool.register_call().expect("register");
    // Pushes under the 8 s backlog cap: the recording, then (after its verdict) 4 s of silence.
    call.push_pcm(&pcm).expect("push");
    let first = collect_until_turn(&rx, Duration::from_secs(60));
    call.push_pcm(&[0i16; 8000 * 4]).expect("push silence");
    let Some(InferenceEvent::TurnEnded {
        complete: false,
        timed_out: false,
        at,
        probability,
        ..
    }) = first.last()
    else {
        panic!("expected an incomplete verdict first: {first:?}");
    };
    let second = collect_until_turn(&rx, Duration::from_secs(60));
    let [InferenceEvent::TurnEnded {
        complete: true,
        timed_out: true,
        at: at2,
        probability: p2,
        ..
    }] = second.as_slice()
    else {
        panic!("expected the timeout to end the turn: {second:?}");
    };
    assert_eq!(p2, probability);
    // 3 s of silence after the stop detection, to the chunk.
    let waited = *at2 - *at;
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(3) + VAD_CHUNK,
        "timed out after {waited:?}"
    );
}

#[test]
fn backlog_over_8_s_drops_oldest_and_keeps_stream_time() {
    let Some(paths) = model_paths() else { return };
    let (_, speech) = read_wav(&fixture("book_table_8k.wav"));
    // 4 s of silence then the recording: 10.9 s in one push, past the 8 s backlog cap.
    let mut pcm = vec![0i16; 8000 * 4];
    pcm.extend_from_slice(&speech);
    let pool = InferencePool::start(PoolConfig::new(paths)).expect("pool");
    let (mut call, rx) = pool.register_call().expect("register");
    call.push_pcm(&pcm).expect("push");
    let events = collect_until_turn(&rx, Duration::from_secs(60));
    let dropped = pool.stats().dropped_samples;
    // The handle sends whole chunks (the last partial one waits for more audio); the thread
    // drops whole chunks of the oldest until 8 s or less is left.
    let sent = pcm.len() as u64 / 256 * 256;
    assert_eq!(
        dropped,
        (sent - 64_000).div_ceil(256) * 256,
        "whole chunks are dropped"
    );
    // The stop is where the recording puts it, shifted by the 4 s of silence.
    let Some(InferenceEvent::SpeechStopped { end, .. }) = events
        .iter()
        .find(|e| matches!(e, InferenceEvent::SpeechStopped { .. }))
    else {
        panic!("no speech stop: {events:?}");
    };
    assert_eq!(*end, Duration::from_secs(4) + Duration::from_millis(5792));
}
