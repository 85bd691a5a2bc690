//! A real pipecat bot for the gateway's tests: `integrations/pipecat/examples/reply_bot.py` run
//! with the venv `scripts/setup.sh` makes (`.cache/pipecat-venv`, pipecat-ai 1.14) on a free
//! loopback port, killed on drop. It appends one JSON line per finished call to its record file:
//! what it saw (close code, turns, replies, interruptions, ontime events).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_tcp_port, http_get, ulaw_is_silent, workspace, Gateway, Proc, RtpRow};

/// The venv's Python.
pub fn venv_python() -> PathBuf {
    workspace().join(".cache/pipecat-venv/bin/python")
}

/// Whether the pipecat venv is there (with pipecat 1.14); in CI its absence is a failure,
/// elsewhere a printed skip.
pub fn require_pipecat() -> bool {
    let ok = Command::new(venv_python())
        .args([
            "-c",
            "import importlib.metadata as m, sys; sys.exit(0 if m.version('pipecat-ai').startswith('1.14.') else 1)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("the pipecat venv (.cache/pipecat-venv, pipecat-ai 1.14) is required in CI (scripts/setup.sh makes it)");
        }
        eprintln!("SKIP: no pipecat venv at .cache/pipecat-venv (run scripts/setup.sh)");
    }
    ok
}

/// The `ontime_pipecat` sources, put on the bot's and pytest's path.
pub fn package_src() -> PathBuf {
    workspace().join("integrations/pipecat/src")
}

/// A running `reply_bot.py`.
pub struct PipecatBot {
    pub proc: Proc,
    pub port: u16,
    pub record: PathBuf,
    pub log: PathBuf,
}

/// Start the bot with extra flags (`--turn own|ontime`, `--interruptions on|off`, `--goodbye`…);
/// waits until it answers HTTP (bounded: 60 s, pipecat imports are slow on a busy machine).
pub fn start_bot(extra: &[&str]) -> PipecatBot {
    start_example("reply_bot.py", extra, &[])
}

/// Start another bot of `integrations/pipecat/examples` (one that takes `--port` and `--record`
/// and answers `/healthz`, as `reply_bot.py` does) with extra flags and environment variables.
pub fn start_example(script: &str, extra: &[&str], env: &[(&str, &str)]) -> PipecatBot {
    let port = free_tcp_port();
    let dir = std::env::temp_dir().join(format!("ontime-pipecat-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("calls.jsonl");
    let log = dir.join("bot.log");
    let child = Command::new(venv_python())
        .arg(
            workspace()
                .join("integrations/pipecat/examples")
                .join(script),
        )
        .args(["--port", &port.to_string()])
        .arg("--record")
        .arg(&record)
        .args(extra)
        .env("PYTHONPATH", package_src())
        .env("PYTHONUNBUFFERED", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.join("bot.err")).unwrap())
        .spawn()
        .expect("spawn the pipecat bot");
    let mut bot = PipecatBot {
        proc: Proc {
            child,
            name: script.into(),
        },
        port,
        record,
        log,
    };
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((200, _)) = http_get(addr, "/healthz") {
            break;
        }
        if let Ok(Some(status)) = bot.proc.child.try_wait() {
            panic!(
                "the pipecat bot exited early with {status}:\n{}",
                bot.stderr()
            );
        }
        assert!(
            Instant::now() < until,
            "the pipecat bot did not answer in 60 s:\n{}",
            bot.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    bot
}

impl PipecatBot {
    /// The URL for `--agent`.
    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}/media-stream", self.port)
    }
    /// The bot's log (pipecat logs to stderr).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.log.with_file_name("bot.err")).unwrap_or_default()
    }
    /// The calls the bot has finished, one JSON object each.
    pub fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
    /// Wait (bounded) until the bot has recorded `n` finished calls; what it has then.
    pub fn wait_records(&self, n: usize, limit: Duration) -> Vec<Value> {
        let until = Instant::now() + limit;
        loop {
            let r = self.records();
            if r.len() >= n || Instant::now() >= until {
                return r;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The gateway's end-of-call records (JSON on the log target `cdr`, `record` = `end` or absent).
pub fn cdr_end_records(gw: &Gateway) -> Vec<Value> {
    gw.stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["fields"]["cdr"].as_str().map(str::to_owned))
        .filter_map(|cdr| serde_json::from_str::<Value>(&cdr).ok())
        .filter(|r| r.get("record").is_none_or(|k| k == "end"))
        .collect()
}

/// The 20 ms frames of a 16-bit mono WAV (8 kHz), cut at `max_secs`, that are not silent once
/// µ-law encoded (the same -45 dBFS test as the capture's rows).
pub fn wav_speech_frames(path: &Path, max_secs: Option<f64>) -> usize {
    let mut r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    assert_eq!(
        (spec.sample_rate, spec.channels, spec.bits_per_sample),
        (8000, 1, 16)
    );
    let mut samples: Vec<i16> = r.samples::<i16>().map(|s| s.unwrap()).collect();
    if let Some(s) = max_secs {
        samples.truncate((s * 8000.0) as usize);
    }
    samples
        .chunks(160)
        .filter(|c| {
            let mut codes = vec![0u8; c.len()];
            ontime_rtp::g711::ulaw_encode_slice(c, &mut codes);
            !ulaw_is_silent(&codes)
        })
        .count()
}

/// Duration of an 8 kHz µ-law WAV (one byte a sample; the header is ignored).
pub fn ulaw_wav_secs(path: &Path) -> f64 {
    let len = std::fs::metadata(path).unwrap().len();
    len.saturating_sub(58) as f64 / 8000.0
}

/// Start times of the caller's utterances: the first non-silent packet, and each non-silent
/// packet that follows a gap of more than `gap` seconds.
pub fn utterance_onsets(caller: &[&RtpRow], gap: f64) -> Vec<f64> {
    let mut speech: Vec<f64> = caller
        .iter()
        .filter(|r| !r.silent)
        .map(|r| r.time)
        .collect();
    speech.sort_by(f64::total_cmp);
    let mut out = Vec::new();
    let mut last = f64::MIN;
    for t in speech {
        if t - last > gap {
            out.push(t);
        }
        last = t;
    }
    out
}

/// Run `pytest` on `integrations/pipecat` in the venv: success and its output.
pub fn run_pytest() -> (bool, String) {
    let out = Command::new(venv_python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(workspace().join("integrations/pipecat"))
        .current_dir(workspace())
        .env("PYTHONPATH", package_src())
        .stdin(Stdio::null())
        .output()
        .expect("run pytest");
    (
        out.status.success(),
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
