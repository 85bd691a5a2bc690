//! Runs the labelled end-of-turn set (`scripts/turnset.py <dir>`) through the real pipeline
//! (Silero VAD + Smart Turn, ONNX models, the pool's thread) under three rules at once and reports
//! how each agrees with the labels and with today's rule, its false end-of-turns and its turn
//! latency.
//!
//! ```text
//! scripts/turnset.py /tmp/turnset
//! cargo run --release -p ontime-inference --example turnset_eval -- /tmp/turnset [--limit N]
//!     [--kinds complete,cut,paused] [--rules today,spec,spec-unpadded,early:P:MS]
//!     [--speculate-after MS] [--split tune|held_out] [--json]
//! ```
//!
//! Rules: **today** (Smart Turn after the confirmed stop); **spec** (Smart Turn from
//! `--speculate-after` of quiet, default `TurnParams::default()`'s (64 ms), on the audio so far padded with silence to the
//! confirmed length, its verdict used at the confirmed stop when it covers the turn);
//! **spec-unpadded** (the same without the padding); **early:P:MS** (spec, and a verdict ≥ P
//! ends the turn after MS of quiet). Default `--rules today,spec,spec-unpadded,early:0.95:96`;
//! "agreement with today" compares with the first rule listed. A rule name ending in `+float`
//! (`today+float`) runs that rule on Smart Turn's float-softmax graph
//! (`TurnGraph::FloatAttentionSoftmax`).
//! One pool per rule, each with one call per turn, fed the same decoded µ-law audio in real time
//! (one 20 ms frame every 20 ms, absolute deadlines; each rule 400 ms after the previous so their
//! Smart Turn runs do not overlap), so latencies are wall times as a caller would see them at one
//! call.
//!
//! Definitions:
//! - **turn latency**: the harness's (docs/capacity.md): from the send time of the caller's last
//!   voiced 20 ms frame (some decoded sample ≥ 64 of 32767, `ontime_loadgen::audio`'s
//!   `SILENCE_THRESHOLD`) to the complete `TurnEnded` (the gateway starts the reply on it), for
//!   turns the rule ended at their real end.
//! - **premature end**: a complete `TurnEnded` before the last voiced frame (mid-utterance, e.g.
//!   in a paused turn's inner pause).
//! - **false end of turn**: a premature end, or a complete verdict on a turn labelled incomplete.
//! - **decision**: `premature`, else the first verdict after the last voiced frame (`complete` /
//!   `incomplete`), else `none`; agreement compares decisions.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ontime_inference::{EarlyEnd, InferenceEvent, InferencePool, ModelPaths, PoolConfig};

/// Decoded samples of this magnitude make a frame voiced (the load harness's silence threshold).
const VOICED_THRESHOLD: i16 = 64;
/// 20 ms at 8 kHz: one RTP frame.
const FRAME: usize = 160;
/// Audio fed after the last voiced frame: today's verdict comes ≈ 0.3 s after it.
const FEED_AFTER_VOICE: Duration = Duration::from_millis(900);
/// Delay between the rules' copies of a turn.
const STAGGER: Duration = Duration::from_millis(400);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Premature,
    Complete,
    Incomplete,
    None,
}

impl Decision {
    fn name(self) -> &'static str {
        match self {
            Decision::Premature => "premature",
            Decision::Complete => "complete",
            Decision::Incomplete => "incomplete",
            Decision::None => "none",
        }
    }
}

#[derive(Debug, Clone)]
struct Outcome {
    decision: Decision,
    /// Wall time from the last voiced frame's send to the complete verdict at the real end.
    latency: Option<Duration>,
    /// Every Smart Turn verdict of the turn: where it was on the turn's audio (ms, from the
    /// turn file's start), its probability and whether it called the turn complete.
    /// (stream ms, probability, complete, final pitch level in semitones).
    verdicts: Vec<(u64, f32, bool, Option<f32>)>,
}

struct Turn {
    file: String,
    kind: String,
    /// `tune` or `held_out` (`scripts/turnset.py --extended`), else empty.
    split: String,
    complete: bool,
    pcm: Vec<i16>,
    /// Index one past the last voiced frame's samples.
    voiced_end: usize,
}

fn parse_ulaw_wav(bytes: &[u8], path: &Path) -> Vec<u8> {
    let le32 = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    assert!(
        bytes.get(0..4) == Some(b"RIFF") && bytes.get(8..12) == Some(b"WAVE"),
        "{}: not a WAVE file",
        path.display()
    );
    let mut at = 12;
    let mut ulaw = false;
    while at + 8 <= bytes.len() {
        let id = &bytes[at..at + 4];
        let size = le32(at + 4) as usize;
        let body = at + 8;
        if id == b"fmt " {
            let tag = u16::from_le_bytes([bytes[body], bytes[body + 1]]);
            let rate = le32(body + 4);
            ulaw = tag == 7 && rate == 8000;
        } else if id == b"data" {
            assert!(ulaw, "{}: not 8 kHz µ-law", path.display());
            return bytes[body..(body + size).min(bytes.len())].to_vec();
        }
        at = body + size + (size & 1);
    }
    panic!("{}: no data chunk", path.display());
}

fn load_turns(dir: &Path, limit: usize) -> Vec<Turn> {
    let labels: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("labels.json")).expect("labels.json (run scripts/turnset.py)"),
    )
    .expect("labels.json is JSON");
    let mut out = Vec::new();
    for t in labels["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .take(limit)
    {
        let file = t["file"].as_str().expect("file").to_string();
        let path = dir.join(&file);
        let codes = parse_ulaw_wav(&std::fs::read(&path).expect("turn file"), &path);
        // The gateway's decode path: G.711 µ-law → 16-bit linear at 8 kHz.
        let mut pcm = vec![0i16; codes.len()];
        ontime_rtp::g711::ulaw_decode_slice(&codes, &mut pcm);
        let voiced_end = pcm
            .chunks(FRAME)
            .enumerate()
            .rev()
            .find(|(_, f)| {
                f.iter()
                    .any(|s| s.unsigned_abs() >= VOICED_THRESHOLD as u16)
            })
            .map_or(0, |(i, f)| i * FRAME + f.len());
        out.push(Turn {
            file,
            kind: t["kind"].as_str().expect("kind").to_string(),
            split: t["split"].as_str().unwrap_or_default().to_string(),
            complete: t["complete"].as_bool().expect("complete"),
            pcm,
            voiced_end,
        });
    }
    out
}

struct Rule {
    name: String,
    pool: InferencePool,
}

type Log = Arc<Mutex<Vec<(Instant, InferenceEvent)>>>;

/// Feeds one turn to every rule's pool in real time; returns each rule's outcome.
fn run_turn(rules: &[Rule], turn: &Turn) -> Vec<Outcome> {
    let logs: Vec<Log> = rules.iter().map(|_| Log::default()).collect();
    let mut calls: Vec<_> = rules
        .iter()
        .zip(&logs)
        .map(|(r, log)| {
            let log = log.clone();
            r.pool
                .register_call_with_sink(move |e| {
                    if let Ok(mut l) = log.lock() {
                        l.push((Instant::now(), e));
                    }
                })
                .expect("register")
        })
        .collect();
    let feed_end = (turn.voiced_end
        + (FEED_AFTER_VOICE.as_micros() as usize * 8 / 1000).div_ceil(FRAME) * FRAME)
        .min(turn.pcm.len());
    let last_voiced_frame = turn.voiced_end.saturating_sub(1) / FRAME;
    let frames: Vec<&[i16]> = turn.pcm[..feed_end].chunks(FRAME).collect();
    // Each rule hears the turn STAGGER later than the previous one, so that their Smart Turn
    // runs (all near the end of speech) do not compete for the two cores.
    let mut schedule: Vec<(Duration, usize, usize)> = (0..calls.len())
        .flat_map(|k| {
            (0..frames.len()).map(move |i| {
                (
                    STAGGER * k as u32 + Duration::from_millis(20 * i as u64),
                    k,
                    i,
                )
            })
        })
        .collect();
    schedule.sort();
    let start = Instant::now();
    let mut last_voiced_sent = vec![start; calls.len()];
    for (offset, k, i) in schedule {
        if let Some(wait) = (start + offset).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let sent = Instant::now();
        calls[k].push_pcm(frames[i]).expect("push");
        if i == last_voiced_frame {
            last_voiced_sent[k] = sent;
        }
    }
    // Stragglers: a verdict still running when the feed ended.
    std::thread::sleep(Duration::from_millis(300));
    drop(calls);
    let voiced_end_time = Duration::from_micros(turn.voiced_end as u64 * 125);
    logs.iter()
        .zip(last_voiced_sent)
        .map(|(log, last_voiced_sent)| {
            let log = log.lock().expect("log").clone();
            let mut decision = Decision::None;
            let mut latency = None;
            let verdicts = log
                .iter()
                .filter_map(|(_, e)| match e {
                    InferenceEvent::TurnEnded {
                        complete,
                        timed_out: false,
                        at,
                        probability,
                        final_pitch,
                        ..
                    } => Some((at.as_millis() as u64, *probability, *complete, *final_pitch)),
                    _ => None,
                })
                .collect();
            for (when, e) in &log {
                let InferenceEvent::TurnEnded {
                    complete,
                    timed_out: false,
                    at,
                    ..
                } = e
                else {
                    continue;
                };
                if *at < voiced_end_time {
                    if *complete {
                        decision = Decision::Premature;
                        break;
                    }
                    continue;
                }
                decision = if *complete {
                    latency = Some(when.saturating_duration_since(last_voiced_sent));
                    Decision::Complete
                } else {
                    Decision::Incomplete
                };
                break;
            }
            Outcome {
                decision,
                latency,
                verdicts,
            }
        })
        .collect()
}

fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    Some(sorted[i])
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.0}", d.as_secs_f64() * 1e3))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir: Option<PathBuf> = None;
    let mut limit = usize::MAX;
    let mut rule_list = "today,spec,spec-unpadded,early:0.95:96".to_string();
    let mut kinds: Option<String> = None;
    let mut split: Option<String> = None;
    let mut speculate_after = ontime_inference::TurnParams::default()
        .speculate_after
        .unwrap_or(Duration::from_millis(64));
    let mut json = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--limit" => limit = args.next().and_then(|v| v.parse().ok()).expect("--limit N"),
            "--rules" => rule_list = args.next().expect("--rules LIST"),
            "--kinds" => kinds = args.next(),
            "--split" => split = args.next(),
            "--speculate-after" => {
                speculate_after = Duration::from_millis(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .expect("--speculate-after MS"),
                )
            }
            "--json" => json = true,
            _ => dir = Some(PathBuf::from(a)),
        }
    }
    let Some(dir) = dir else {
        eprintln!(
            "usage: turnset_eval <dir from scripts/turnset.py> [--limit N] [--kinds complete,cut,paused,mid,short] [--split tune|held_out] \
             [--rules today,spec,spec-unpadded,early:P:MS[+float]] [--speculate-after MS] [--json]"
        );
        std::process::exit(2);
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let paths = ModelPaths::from_env_or(root.join(".cache/models"));
    if let Err(e) = paths.check() {
        eprintln!("{e}");
        std::process::exit(2);
    }
    let mut turns = load_turns(&dir, usize::MAX);
    if let Some(k) = &kinds {
        turns.retain(|t| k.split(',').any(|k| k == t.kind));
    }
    if let Some(s) = &split {
        turns.retain(|t| &t.split == s);
    }
    turns.truncate(limit);
    let rules: Vec<Rule> = rule_list
        .split(',')
        .map(|name| {
            let mut c = PoolConfig::new(paths.clone());
            c.turn.speculate_after = Some(speculate_after);
            c.turn.speculate_pad = true;
            c.turn.early_end = None;
            // `+float`: the same rule on Smart Turn's float-softmax graph.
            let (base, float) = match name.strip_suffix("+float") {
                Some(b) => (b, true),
                None => (name, false),
            };
            if float {
                c.turn_graph = ontime_inference::TurnGraph::FloatAttentionSoftmax;
            }
            match base.split(':').collect::<Vec<_>>().as_slice() {
                ["today"] => c.turn.speculate_after = None,
                ["spec"] => {}
                ["spec-unpadded"] => c.turn.speculate_pad = false,
                ["early", p, ms] => {
                    c.turn.early_end = Some(EarlyEnd {
                        probability: p.parse().expect("early:P:MS"),
                        min_quiet: Duration::from_millis(ms.parse().expect("early:P:MS")),
                    })
                }
                _ => panic!("unknown rule {name:?}"),
            }
            Rule {
                name: name.to_string(),
                pool: InferencePool::start(c).expect("pool"),
            }
        })
        .collect();
    // Warm-up: the first Smart Turn run sizes the session's arena; not counted.
    if let Some(t) = turns.first() {
        run_turn(&rules, t);
    }
    let mut results: Vec<Vec<Outcome>> = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let r = run_turn(&rules, t);
        eprintln!(
            "{:>3}/{} {:<24} {:<8} label {:<10} {}",
            i + 1,
            turns.len(),
            t.file,
            t.kind,
            if t.complete { "complete" } else { "incomplete" },
            r.iter()
                .zip(&rules)
                .map(|(o, rule)| format!(
                    "{}={}{}",
                    rule.name,
                    o.decision.name(),
                    o.latency
                        .map_or(String::new(), |l| format!("@{:.0}", l.as_secs_f64() * 1e3)),
                ) + &format!(
                    " verdicts {}",
                    o.verdicts
                        .iter()
                        .map(|(at, p, c, level)| {
                            let level = level.map_or(String::new(), |l| format!(":{l:.2}"));
                            format!("{at}:{p:.3}:{}{level}", u8::from(*c))
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                ))
                .collect::<Vec<_>>()
                .join(" ")
        );
        results.push(r);
    }
    let n = turns.len();
    let mut report = Vec::new();
    for (k, rule) in rules.iter().enumerate() {
        let agree_label = turns
            .iter()
            .zip(&results)
            .filter(|(t, r)| {
                r[k].decision
                    == if t.complete {
                        Decision::Complete
                    } else {
                        Decision::Incomplete
                    }
            })
            .count();
        let agree_today = results
            .iter()
            .filter(|r| r[k].decision == r[0].decision)
            .count();
        let premature = results
            .iter()
            .filter(|r| r[k].decision == Decision::Premature)
            .count();
        let false_eot = turns
            .iter()
            .zip(&results)
            .filter(|(t, r)| {
                r[k].decision == Decision::Premature
                    || (!t.complete && r[k].decision == Decision::Complete)
            })
            .count();
        let none = results
            .iter()
            .filter(|r| r[k].decision == Decision::None)
            .count();
        let mut lat: Vec<Duration> = results.iter().filter_map(|r| r[k].latency).collect();
        lat.sort();
        // Latency over the turns every rule ended at their end: the same turns for each rule.
        let mut lat_common: Vec<Duration> = results
            .iter()
            .filter(|r| r.iter().all(|o| o.latency.is_some()))
            .filter_map(|r| r[k].latency)
            .collect();
        lat_common.sort();
        let stats = rule.pool.stats();
        report.push(serde_json::json!({
            "rule": rule.name,
            "turns": n,
            "agree_label": agree_label,
            "agree_today": agree_today,
            "false_eot": false_eot,
            "premature": premature,
            "no_verdict": none,
            "completes": lat.len(),
            "latency_p50_ms": percentile(&lat, 0.5).map(|d| d.as_secs_f64() * 1e3),
            "latency_p95_ms": percentile(&lat, 0.95).map(|d| d.as_secs_f64() * 1e3),
            "common_turns": lat_common.len(),
            "common_latency_p50_ms": percentile(&lat_common, 0.5).map(|d| d.as_secs_f64() * 1e3),
            "common_latency_p95_ms": percentile(&lat_common, 0.95).map(|d| d.as_secs_f64() * 1e3),
            "smart_turn_runs": stats.turn_runs,
            "speculative_used": stats.speculative_used,
            "speculative_discarded": stats.speculative_discarded,
            "speculative_skipped": stats.speculative_skipped,
            "early_ends": stats.early_ends,
        }));
        if !json {
            println!(
                "{:<12} turns {n}  agree(label) {agree_label} ({:.1} %)  agree(today) {agree_today} ({:.1} %)  false EOT {false_eot} (premature {premature})  no verdict {none}  \
                 latency p50/p95 {}/{} ms over {} completes; common {} turns {}/{} ms  Smart Turn runs {} (spec used {}, discarded {}, skipped {}, early ends {})",
                rule.name,
                100.0 * agree_label as f64 / n as f64,
                100.0 * agree_today as f64 / n as f64,
                ms(percentile(&lat, 0.5)),
                ms(percentile(&lat, 0.95)),
                lat.len(),
                lat_common.len(),
                ms(percentile(&lat_common, 0.5)),
                ms(percentile(&lat_common, 0.95)),
                stats.turn_runs,
                stats.speculative_used,
                stats.speculative_discarded,
                stats.speculative_skipped,
                stats.early_ends,
            );
        }
    }
    if json {
        println!("{}", serde_json::Value::Array(report));
    }
}
