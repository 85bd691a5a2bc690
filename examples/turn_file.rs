//! Smart Turn v3.2 on a WAV file: is the speaker's turn complete?
//!
//! ```text
//! cargo run --example turn_file -- FILE.wav [--json]
//! ```
//! FILE.wav: mono 16-bit PCM at 16 kHz, or 8 kHz (upsampled to 16 kHz in Rust). The last 8 s are
//! analysed. `--json` prints `{"probability":F,"complete":bool,"run_ms":F}`; `run_ms` is the wall
//! time of features + model on one thread (after one warm-up run).

use std::time::Instant;

use anyhow::{bail, Context};
use ontime::inference::{runtime, ModelPaths, SmartTurn};
use serde_json::json;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let as_json = args.iter().any(|a| a == "--json");
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        bail!("usage: turn_file FILE.wav [--json]");
    };
    let mut reader = hound::WavReader::open(path).with_context(|| format!("opening {path}"))?;
    let spec = reader.spec();
    if spec.channels != 1
        || spec.bits_per_sample != 16
        || spec.sample_format != hound::SampleFormat::Int
    {
        bail!("{path}: need mono 16-bit PCM, got {spec:?}");
    }
    let pcm: Vec<i16> = reader.samples::<i16>().collect::<Result<_, _>>()?;

    let paths = ModelPaths::from_env_or(concat!(env!("CARGO_MANIFEST_DIR"), "/.cache/models"));
    let env = runtime::load_runtime(&paths.ort_dylib)?;
    let mut turn = SmartTurn::load(&env, &paths.smart_turn)?;
    // Warm-up: the first run allocates the session's buffers.
    turn.predict_pcm(&pcm, spec.sample_rate)?;
    let t0 = Instant::now();
    let probability = turn.predict_pcm(&pcm, spec.sample_rate)?;
    let run_ms = t0.elapsed().as_secs_f64() * 1e3;
    let complete = probability > 0.5;
    if as_json {
        println!(
            "{}",
            json!({"probability": probability, "complete": complete, "run_ms": run_ms})
        );
    } else {
        println!(
            "probability {probability:.4}  {}  ({run_ms:.1} ms)",
            if complete { "complete" } else { "incomplete" }
        );
    }
    Ok(())
}
