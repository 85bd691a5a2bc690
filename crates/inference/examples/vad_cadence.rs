//! Thread CPU per Silero VAD run (batch of one) at the gateway's cadence against back to back:
//! the pool runs one call's chunk every 32 ms and sleeps between, where `session_options` and
//! `inference_bench` run batches back to back.
//!
//! ```text
//! cargo run --release -p ontime-inference --example vad_cadence [-- RUNS]
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use ort::session::Session;
use ort::value::TensorRef;

use ontime_inference::speech::{VAD_CHUNK_SAMPLES, VAD_CONTEXT_SAMPLES};
use ontime_inference::vad::{VAD_ROW, VAD_STATE};
use ontime_inference::{runtime, thread_cpu_time, ModelPaths};

fn read_wav(path: &Path) -> Vec<i16> {
    let mut r = hound::WavReader::open(path).expect("fixture WAV");
    r.samples::<i16>().map(|s| s.expect("sample")).collect()
}

/// µs of thread CPU and of wall time per run, `gap` slept between runs.
fn runs(session: &mut Session, pcm: &[f32], n: usize, gap: Duration) -> (f64, f64) {
    let chunks = pcm.len() / VAD_CHUNK_SAMPLES - 1;
    let mut input = vec![0.0f32; VAD_ROW];
    let mut state = vec![0.0f32; VAD_STATE];
    let sr = [8000i64];
    let (mut cpu, mut wall) = (Duration::ZERO, Duration::ZERO);
    for run in 0..n + 20 {
        let c = run % chunks;
        let start = (c + 1) * VAD_CHUNK_SAMPLES - VAD_CONTEXT_SAMPLES;
        input.copy_from_slice(&pcm[start..start + VAD_ROW]);
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
        let (t0, c0) = (Instant::now(), thread_cpu_time());
        let outputs = session
            .run(ort::inputs![
                TensorRef::from_array_view(([1, VAD_ROW], &input[..])).expect("input"),
                TensorRef::from_array_view(([2, 1, 128], &state[..])).expect("state"),
                TensorRef::from_array_view(((), &sr[..])).expect("sr"),
            ])
            .expect("VAD run");
        let (_, s) = outputs["stateN"]
            .try_extract_tensor::<f32>()
            .expect("stateN");
        state.copy_from_slice(s);
        drop(outputs);
        if run >= 20 {
            cpu += thread_cpu_time().saturating_sub(c0);
            wall += t0.elapsed();
        }
    }
    (
        cpu.as_secs_f64() * 1e6 / n as f64,
        wall.as_secs_f64() * 1e6 / n as f64,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(300);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let paths = ModelPaths::from_env_or(root.join(".cache/models"));
    if let Err(e) = paths.check() {
        eprintln!("{e}");
        std::process::exit(2);
    }
    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let pcm: Vec<f32> = read_wav(&root.join("fixtures/speech/book_table_8k.wav"))
        .iter()
        .map(|&s| f32::from(s) / 32768.0)
        .collect();
    let mut session =
        runtime::one_thread_session(&env, &paths.silero_vad, "Silero VAD").expect("session");
    println!("| cadence | CPU µs / run | wall µs / run |");
    println!("| --- | --- | --- |");
    for (name, gap) in [
        ("back to back", Duration::ZERO),
        ("one every 32 ms", Duration::from_millis(32)),
        ("back to back again", Duration::ZERO),
    ] {
        let (cpu, wall) = runs(&mut session, &pcm, n, gap);
        println!("| {name} | {cpu:.1} | {wall:.1} |");
    }
}
