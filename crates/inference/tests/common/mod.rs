//! Shared test helpers: locate the runtime and models, fixtures, external tools.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use ontime_inference::ModelPaths;

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// True under CI, where a missing prerequisite is a failure, not a skip.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Skips (prints why, returns true) or, under CI, fails.
pub fn skip(reason: &str) -> bool {
    if in_ci() {
        panic!("CI is set but {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    true
}

/// The runtime and model paths (env, else `<workspace>/.cache/models`), if all present.
pub fn model_paths() -> Option<ModelPaths> {
    let paths = ModelPaths::from_env_or(workspace_root().join(".cache/models"));
    match paths.check() {
        Ok(()) => Some(paths),
        Err(e) => {
            skip(&format!("{e}"));
            None
        }
    }
}

/// The one speech segment Silero VAD and pipecat's defaults find in `pcm` (8 kHz), offline.
pub fn one_segment(
    env: &ort::environment::Environment,
    paths: &ModelPaths,
    pcm: &[i16],
) -> (std::time::Duration, std::time::Duration) {
    let mut vad = ontime_inference::SileroVad::load(env, &paths.silero_vad).expect("vad");
    let probs = vad.probabilities(pcm, 8000).expect("probabilities");
    let segs = ontime_inference::speech::segments(&probs, &ontime_inference::VadParams::default());
    assert_eq!(segs.len(), 1, "one segment expected: {segs:?}");
    segs[0]
}

pub fn read_wav(path: &Path) -> (u32, Vec<i16>) {
    let mut r = hound::WavReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rate = r.spec().sample_rate;
    let pcm = r.samples::<i16>().map(|s| s.expect("wav sample")).collect();
    (rate, pcm)
}

pub fn fixture(name: &str) -> PathBuf {
    workspace_root().join("fixtures/speech").join(name)
}

fn has_command(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Python with onnxruntime and numpy, espeak-ng and sox: the independent reference's tools.
pub fn reference_tools() -> bool {
    let py = Command::new("python3")
        .args(["-c", "import onnxruntime, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !py {
        return !skip(
            "python3 with onnxruntime and numpy is missing (scripts/setup.sh installs them)",
        );
    }
    if !has_command("espeak-ng", "--version") {
        return !skip("espeak-ng is missing");
    }
    if !has_command("sox", "--version") {
        return !skip("sox is missing");
    }
    true
}

/// Fresh speech the models have never seen: espeak-ng with a sentence, voice, speed and pitch
/// picked from the clock, resampled by sox to `rate`. Returns the WAV path and what was said.
pub fn fresh_speech(dir: &Path, rate: u32, tag: &str) -> (PathBuf, String) {
    const SENTENCES: [&str; 6] = [
        "Could you move my appointment to Thursday afternoon instead",
        "The parcel never arrived, and I have been waiting since Monday.",
        "My account number is four seven two, and the name is Jordan.",
        "I think we should probably talk about the invoice before",
        "Yes, that works for me. Thank you very much.",
        "Is there any chance you could check whether the",
    ];
    const VOICES: [&str; 4] = ["en-us", "en-gb", "en-us+f3", "en-gb-scotland"];
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as usize + d.as_secs() as usize)
        .unwrap_or(7);
    let text = SENTENCES[nanos % SENTENCES.len()];
    let voice = VOICES[(nanos / 7) % VOICES.len()];
    let speed = 130 + (nanos / 31) % 50;
    let pitch = 30 + (nanos / 131) % 40;
    let raw = dir.join(format!("{tag}_raw.wav"));
    let out = dir.join(format!("{tag}_{rate}.wav"));
    let st = Command::new("espeak-ng")
        .args([
            "-v",
            voice,
            "-s",
            &speed.to_string(),
            "-p",
            &pitch.to_string(),
            "-w",
        ])
        .arg(&raw)
        .arg(text)
        .status()
        .expect("espeak-ng runs");
    assert!(st.success(), "espeak-ng failed");
    let st = Command::new("sox")
        // No dither: its noise is random, and the verdicts would change from run to run.
        .arg("-D")
        .arg(&raw)
        .args(["-r", &rate.to_string(), "-c", "1", "-b", "16"])
        .arg(&out)
        .args(["pad", "0.4", "0.4"])
        .status()
        .expect("sox runs");
    assert!(st.success(), "sox failed");
    (
        out,
        format!("{text:?} voice {voice} speed {speed} pitch {pitch}"),
    )
}

/// Resamples a WAV with sox (the reference's independent resampler).
pub fn sox_resample(input: &Path, rate: u32, out: &Path) {
    let st = Command::new("sox")
        // No dither: its noise is random, and the verdicts would change from run to run.
        .arg("-D")
        .arg(input)
        .args(["-r", &rate.to_string()])
        .arg(out)
        .status()
        .expect("sox runs");
    assert!(st.success(), "sox resample failed");
}

/// Runs a reference script; returns its stdout parsed as JSON.
pub fn run_reference(script: &str, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let out = Command::new("python3")
        .arg(workspace_root().join("scripts/reference").join(script))
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reference prints JSON")
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "ontime-inference-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&p).expect("temp dir");
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 16-bit PCM of a µ-law WAV's data chunk.
pub fn ulaw_wav(path: &Path) -> Vec<i16> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let at = bytes
        .windows(4)
        .position(|w| w == b"data")
        .expect("data chunk")
        + 8;
    bytes[at..]
        .iter()
        .map(|&b| ontime_rtp::g711::ulaw_decode(b))
        .collect()
}

/// Every recording the repository ships, 8 kHz.
pub fn recordings() -> Vec<(String, Vec<i16>)> {
    let mut out = Vec::new();
    for name in ["book_table_8k.wav", "book_table_trailing_8k.wav"] {
        let (rate, pcm) = read_wav(&fixture(name));
        assert_eq!(rate, 8000, "{name}");
        out.push((name.to_string(), pcm));
    }
    for i in 1..=4 {
        let path = workspace_root().join(format!("fixtures/callers/utterance_{i}.ulaw.wav"));
        out.push((format!("utterance_{i}"), ulaw_wav(&path)));
    }
    out
}

/// Runs `ours` and `published` on every recording cut after every 400 ms (turns of every
/// length up to the model's 8 s, some mid-word, some after a pause) and asserts the same
/// probability, bit for bit, on each; the turns compared.
pub fn assert_same_probabilities(
    ours: &mut ontime_inference::SmartTurn,
    published: &mut ontime_inference::SmartTurn,
) -> usize {
    let step = 8000 * 400 / 1000;
    let mut compared = 0usize;
    let mut expected = 0usize;
    for (name, pcm) in recordings() {
        expected += pcm.len() / step;
        for end in (step..=pcm.len()).step_by(step) {
            let turn = &pcm[end.saturating_sub(8 * 8000)..end];
            let a = ours.predict_pcm(turn, 8000).expect("edited graph's run");
            let b = published.predict_pcm(turn, 8000).expect("published run");
            assert_eq!(a.to_bits(), b.to_bits(), "{name} to {end}: {a} against {b}");
            compared += 1;
        }
    }
    println!("{compared} turns compared");
    assert_eq!(compared, expected);
    compared
}
