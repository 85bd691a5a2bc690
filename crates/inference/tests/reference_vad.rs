//! Done-when: Silero VAD in Rust matches an independent Python onnxruntime reference within 1e-3
//! per chunk at 8 kHz, on speech generated at test time (never seen before).

mod common;

use common::*;
use ontime_inference::{runtime, SileroVad};

#[test]
fn vad_matches_python_reference_on_fresh_speech() {
    let Some(paths) = model_paths() else { return };
    if !reference_tools() {
        return;
    }
    let dir = TempDir::new("vad-ref");
    let (wav, what) = fresh_speech(&dir.0, 8000, "vad");
    let reference = run_reference(
        "silero_vad_ref.py",
        &[paths.silero_vad.as_os_str(), wav.as_os_str()],
    );
    let want: Vec<f64> = reference["probabilities"]
        .as_array()
        .expect("probabilities")
        .iter()
        .map(|v| v.as_f64().expect("number"))
        .collect();

    let env = runtime::load_runtime(&paths.ort_dylib).expect("runtime");
    let mut vad = SileroVad::load(&env, &paths.silero_vad).expect("model");
    let (rate, pcm) = read_wav(&wav);
    assert_eq!(rate, 8000);
    let got = vad.probabilities(&pcm, rate).expect("vad");

    assert_eq!(got.len(), want.len(), "chunk count ({what})");
    assert!(got.len() > 30, "too little speech generated ({what})");
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let d = (f64::from(*g) - w).abs();
        worst = worst.max(d);
        assert!(d <= 1e-3, "chunk {i}: rust {g} vs python {w} ({what})");
    }
    assert!(
        got.iter().any(|&p| p > 0.5),
        "no chunk detected as speech ({what})"
    );
    eprintln!("{} chunks, worst |Δ| = {worst:.2e} ({what})", got.len());
}
