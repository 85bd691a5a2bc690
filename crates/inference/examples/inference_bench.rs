//! Measures the inference costs `docs/inference.md` reports, and the same through Python
//! onnxruntime in the same run (`scripts/reference/bench_ref.py`), with their ratio:
//! Silero VAD per chunk unbatched and batched at B = 1, 10, 50, 100; Smart Turn (features and
//! model); RSS with both sessions loaded and per added call.
//!
//! ```text
//! cargo run --release -p ontime-inference --example inference_bench
//! ```
//! One thread, sessions as the pool builds them. Wall time per chunk = batch time / B.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ontime_inference::speech::VAD_CHUNK_SAMPLES;
use ontime_inference::vad::pcm_to_f32;
use ontime_inference::{
    runtime, thread_cpu_time, InferencePool, ModelPaths, PoolConfig, SileroVad, SmartTurn,
    VadStream,
};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn read_wav(path: &Path) -> Vec<i16> {
    let mut r = hound::WavReader::open(path).expect("fixture WAV");
    r.samples::<i16>().map(|s| s.expect("sample")).collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let paths = ModelPaths::from_env_or(root.join(".cache/models"));
    if let Err(e) = paths.check() {
        eprintln!("{e}");
        std::process::exit(2);
    }
    let pcm = read_wav(&root.join("fixtures/speech/book_table_8k.wav"));
    let rss_start = rss_kib();
    let chunks_in = pcm.len() / VAD_CHUNK_SAMPLES;
    // RSS: a pool (its own two sessions) and 100 calls with 8 s of audio each.
    let pool = InferencePool::start(PoolConfig::new(paths.clone())).expect("pool");
    let rss_pool = rss_kib();
    // Warm-up call: the first Smart Turn run sizes the session's arena (tens of MiB), a fixed cost
    // of the process, not of each call.
    {
        let (mut call, events) = pool.register_call().expect("call");
        call.push_pcm(&pcm).expect("push");
        while let Ok(e) = events.recv_timeout(Duration::from_secs(60)) {
            if matches!(e, ontime_inference::InferenceEvent::TurnEnded { .. }) {
                break;
            }
        }
    }
    let rss_warm = rss_kib();
    let mut calls: Vec<_> = (0..100)
        .map(|_| pool.register_call().expect("call"))
        .collect();
    // Real time: every call gets a 20 ms frame every 20 ms, as from the RTP path.
    let t0 = Instant::now();
    for (f, frame) in pcm.chunks_exact(160).enumerate() {
        for (call, _) in &mut calls {
            call.push_pcm(frame).expect("push");
        }
        let next = t0 + Duration::from_millis(20 * (f as u64 + 1));
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let want = pool.stats().vad_chunks + 100 * (pcm.len() / 160 * 160 / VAD_CHUNK_SAMPLES) as u64;
    let t = Instant::now();
    while pool.stats().vad_chunks < want && t.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rss_calls = rss_kib();
    let per_call_kib = (rss_calls.saturating_sub(rss_warm)) as f64 / 100.0;
    let stats = pool.stats();
    drop(calls);
    drop(pool);

    let rss_before_bench = rss_kib();
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let mut vad = SileroVad::load(&env, &paths.silero_vad).expect("vad");
    let mut turn = SmartTurn::load(&env, &paths.smart_turn).expect("turn");

    // Audio for 100 streams: the fixture at different offsets.
    let mut audio = vec![0.0f32; pcm.len()];
    pcm_to_f32(&pcm, &mut audio);
    let chunk = |s: usize, c: usize| {
        let i = (s * 7 + c) % chunks_in;
        &audio[i * VAD_CHUNK_SAMPLES..(i + 1) * VAD_CHUNK_SAMPLES]
    };

    // Unbatched: one stream, chunk after chunk.
    let mut st = VadStream::default();
    for c in 0..200 {
        vad.run_one(&mut st, chunk(0, c)).expect("warm-up");
    }
    let n = 3000;
    let (t0, c0) = (Instant::now(), thread_cpu_time());
    for c in 0..n {
        vad.run_one(&mut st, chunk(0, c)).expect("run");
    }
    let unbatched_us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    let unbatched_cpu_us = (thread_cpu_time() - c0).as_secs_f64() * 1e6 / n as f64;

    let mut batched = Vec::new();
    for b in [1usize, 10, 50, 100] {
        let mut streams = vec![VadStream::default(); b];
        let runs = (6000 / b).max(30);
        let mut step = |k: usize, vad: &mut SileroVad| {
            vad.begin_batch(b);
            for (i, s) in streams.iter().enumerate() {
                vad.set_row(i, s, chunk(i, k)).expect("row");
            }
            vad.run().expect("batch");
            for (i, s) in streams.iter_mut().enumerate() {
                vad.finish_row(i, s).expect("finish");
            }
        };
        for k in 0..10 {
            step(k, &mut vad);
        }
        let (t0, c0) = (Instant::now(), thread_cpu_time());
        for k in 0..runs {
            step(k, &mut vad);
        }
        let per_batch_us = t0.elapsed().as_secs_f64() * 1e6 / runs as f64;
        let cpu_per_chunk_us = (thread_cpu_time() - c0).as_secs_f64() * 1e6 / (runs * b) as f64;
        batched.push((b, per_batch_us, per_batch_us / b as f64, cpu_per_chunk_us));
    }

    // Smart Turn: 8 s of 16 kHz audio (the fixture upsampled in Rust, padded to 8 s).
    let mut features_ms = Vec::new();
    let mut model_ms = Vec::new();
    let mut up = Vec::new();
    ontime_inference::resample::upsample_2x(&audio, &mut up);
    let mut upsample_ms = Vec::new();
    let mut features_cpu = Vec::new();
    let mut model_cpu = Vec::new();
    for _ in 0..3 {
        turn.predict_pcm(&pcm, 8000).expect("warm-up");
    }
    for _ in 0..15 {
        let t = Instant::now();
        ontime_inference::resample::upsample_2x(&audio, &mut up);
        upsample_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let (t, c) = (Instant::now(), thread_cpu_time());
        let f = turn.features_of(&up);
        features_ms.push(t.elapsed().as_secs_f64() * 1e3);
        features_cpu.push((thread_cpu_time() - c).as_secs_f64() * 1e3);
        let (t, c) = (Instant::now(), thread_cpu_time());
        turn.predict_features(&f).expect("model");
        model_ms.push(t.elapsed().as_secs_f64() * 1e3);
        model_cpu.push((thread_cpu_time() - c).as_secs_f64() * 1e3);
    }
    let (up_ms, feat_ms, mdl_ms, feat_cpu, mdl_cpu) = (
        median(&mut upsample_ms),
        median(&mut features_ms),
        median(&mut model_ms),
        median(&mut features_cpu),
        median(&mut model_cpu),
    );
    drop(vad);
    drop(turn);

    // Python onnxruntime, same machine, same run.
    let py = Command::new("python3")
        .arg(root.join("scripts/reference/bench_ref.py"))
        .arg(paths.silero_vad.parent().unwrap_or(Path::new(".")))
        .arg(root.join("fixtures/speech/book_table_8k.wav"))
        .output();
    let py: Option<serde_json::Value> = match py {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).ok(),
        Ok(o) => {
            eprintln!(
                "python reference failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            None
        }
        Err(e) => {
            eprintln!("python3 not runnable: {e}");
            None
        }
    };
    let pyv = |k: &str| py.as_ref().and_then(|v| v[k].as_f64());
    let _ = rss_before_bench;
    let _ratio = |py: Option<f64>, rust: f64| {
        py.map_or("–".to_string(), |p| format!("{p:.1} ({:.2}×)", p / rust))
    };

    let both = |rust_wall: f64, rust_cpu: f64, key: &str| {
        let w = pyv(key);
        let c = pyv(&format!(
            "{}_cpu{}",
            key.trim_end_matches("_us").trim_end_matches("_ms"),
            if key.ends_with("_us") { "_us" } else { "_ms" }
        ));
        let fmt = |p: Option<f64>, r: f64| {
            p.map_or("–".to_string(), |p| format!("{p:.1} ({:.2}×)", p / r))
        };
        format!(
            "{rust_wall:.1} / {rust_cpu:.1} | {} / {}",
            fmt(w, rust_wall),
            fmt(c, rust_cpu)
        )
    };
    println!("| measure (wall / thread CPU) | ontime (Rust) | Python onnxruntime (× Rust) |");
    println!("| --- | --- | --- |");
    println!(
        "| VAD per chunk, unbatched (µs) | {} |",
        both(unbatched_us, unbatched_cpu_us, "vad_unbatched_us")
    );
    for (b, per_batch, per_chunk, cpu) in &batched {
        println!(
            "| VAD per chunk, batched B = {b} (µs; batch {per_batch:.0} µs wall) | {} |",
            both(*per_chunk, *cpu, &format!("vad_b{b}_per_chunk_us"))
        );
    }
    println!("| Smart Turn: 8→16 kHz upsample, 6.9 s (ms) | {up_ms:.2} | – |");
    println!(
        "| Smart Turn: Whisper features (ms) | {} |",
        both(feat_ms, feat_cpu, "turn_features_ms")
    );
    println!(
        "| Smart Turn: model (ms) | {} |",
        both(mdl_ms, mdl_cpu, "turn_model_ms")
    );
    println!(
        "| RSS: process before loading (MiB) | {:.1} | {} |",
        rss_start as f64 / 1024.0,
        pyv("rss_start_mib").map_or("–".into(), |v| format!("{v:.1} (onnxruntime imported)"))
    );
    println!(
        "| RSS: both sessions loaded (MiB) | {:.1} | {} |",
        rss_pool as f64 / 1024.0,
        pyv("rss_loaded_mib").map_or("–".into(), |v| format!("{v:.1}"))
    );
    println!(
        "| RSS after the first Smart Turn run (MiB) | {:.1} | – |",
        rss_warm as f64 / 1024.0
    );
    println!(
        "| RSS per added call (KiB; 100 calls, 6.9 s real-time audio each) | {per_call_kib:.0} | – |"
    );
    eprintln!("pool stats after the RSS run: {stats:?}");
}
