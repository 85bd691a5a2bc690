//! Silero VAD over a WAV file: per-chunk speech probabilities and speech segments.
//!
//! ```text
//! cargo run --example vad_file -- FILE.wav [--json]
//! ```
//! FILE.wav: mono 16-bit PCM at 8 kHz (256-sample chunks, the gateway's path) or 16 kHz (512).
//! Runtime and model from `ORT_DYLIB_PATH` / `ONTIME_MODELS_DIR`, else `.cache/models`
//! (`scripts/fetch-models.sh`). Segments use pipecat's defaults (confidence 0.7, start and stop
//! 0.2 s). `--json` prints
//! `{"sample_rate":N,"chunk_samples":N,"probabilities":[..],"segments":[{"start_ms","end_ms"}]}`.

use anyhow::{bail, Context};
use ontime::inference::speech::segments;
use ontime::inference::{runtime, ModelPaths, SileroVad, VadParams};
use serde_json::json;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let as_json = args.iter().any(|a| a == "--json");
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        bail!("usage: vad_file FILE.wav [--json]");
    };
    let mut reader = hound::WavReader::open(path).with_context(|| format!("opening {path}"))?;
    let spec = reader.spec();
    if spec.channels != 1
        || spec.bits_per_sample != 16
        || spec.sample_format != hound::SampleFormat::Int
    {
        bail!("{path}: need mono 16-bit PCM, got {spec:?}");
    }
    let rate = spec.sample_rate;
    if rate != 8000 && rate != 16_000 {
        bail!("{path}: {rate} Hz; 8000 or 16000 supported");
    }
    let pcm: Vec<i16> = reader.samples::<i16>().collect::<Result<_, _>>()?;

    let paths = ModelPaths::from_env_or(concat!(env!("CARGO_MANIFEST_DIR"), "/.cache/models"));
    let env = runtime::load_runtime(&paths.ort_dylib)?;
    let mut vad = SileroVad::load(&env, &paths.silero_vad)?;
    let probabilities = vad.probabilities(&pcm, rate)?;
    let chunk_samples = if rate == 8000 { 256 } else { 512 };
    let segs = segments(&probabilities, &VadParams::default());

    if as_json {
        let segments: Vec<_> = segs
            .iter()
            .map(|(s, e)| json!({"start_ms": s.as_millis() as u64, "end_ms": e.as_millis() as u64}))
            .collect();
        println!(
            "{}",
            json!({
                "sample_rate": rate,
                "chunk_samples": chunk_samples,
                "probabilities": probabilities,
                "segments": segments,
            })
        );
    } else {
        let chunk_ms = chunk_samples as f64 * 1000.0 / f64::from(rate);
        for (i, p) in probabilities.iter().enumerate() {
            println!("{:8.0} ms  {p:.4}", i as f64 * chunk_ms);
        }
        for (s, e) in &segs {
            println!("speech {} ms – {} ms", s.as_millis(), e.as_millis());
        }
    }
    Ok(())
}
