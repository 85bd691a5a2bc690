//! `examples/custom_agent.rs` — a program embedding the gateway library with its own Rust agent
//! and its own metrics recorder — answers a real sipp call: the caller hears its own turn echoed
//! back, and `/metrics` serves the gateway's metrics next to the program's own.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;

/// Build the example (the facade crate owns it) and return its path.
fn build_example() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "-p",
            "ontime",
            "--example",
            "custom_agent",
        ])
        .current_dir(workspace())
        .status()
        .expect("run cargo");
    assert!(
        status.success(),
        "cargo build --example custom_agent failed"
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    target.join("debug/examples/custom_agent")
}

#[test]
fn custom_agent_example_echoes_the_callers_turn() {
    if !require("sipp") || !require("tshark") {
        return;
    }
    let program = build_example();
    let gw = start_program(&program, &[]);
    let dir = gw.log.parent().unwrap().to_path_buf();
    let speech = fresh_speech(&dir, "Please repeat after me the numbers one two three.");
    let media_port = free_media_port();
    let cap = capture(&[media_port]);
    let scen = scenario(
        "caller_speaks.xml",
        &[
            ("@SPEECH@", speech.to_str().unwrap()),
            ("@LISTEN_MS@", "9000"),
        ],
    );
    let (ok, log) = sipp(&gw, &scen, 1, media_port, Duration::from_secs(40));
    let pcap = cap.finish();
    assert!(ok, "sipp call failed:\n{log}\nprogram:\n{}", gw.stderr());

    let rows = rtp_rows(&pcap, media_port);
    let caller: Vec<&RtpRow> = rows
        .iter()
        .filter(|r| r.src_port == media_port && !r.silent)
        .collect();
    let echo: Vec<&RtpRow> = rows
        .iter()
        .filter(|r| r.dst_port == media_port && !r.silent)
        .collect();
    let last_speech = caller.iter().map(|r| r.time).fold(f64::MIN, f64::max);
    eprintln!(
        "caller spoke {} packets, echo {} packets",
        caller.len(),
        echo.len()
    );
    assert!(caller.len() > 50, "the caller said too little");
    assert!(!echo.is_empty(), "the caller heard no echo");
    assert!(
        echo[0].time > last_speech - 0.5,
        "the echo started before the caller's turn ended"
    );
    // The echo is the caller's turn: about as long as what the caller said (the VAD trims the
    // start, the pre-roll adds some back, espeak's quiet tails are not counted as speech).
    let ratio = echo.len() as f64 / caller.len() as f64;
    assert!(
        (0.6..=1.6).contains(&ratio),
        "echo of {} packets for {} spoken",
        echo.len(),
        caller.len()
    );

    let body = gw.metrics_text();
    let v = |s: &str| {
        metric_value(&body, s).unwrap_or_else(|| panic!("{s} missing from /metrics:\n{body}"))
    };
    let turns = v("ontime_turns_total");
    // One utterance, one turn.
    assert_eq!(turns, 1.0);
    // The program's own metric, counted by its agent, in its own recorder.
    assert_eq!(v("custom_agent_turns_echoed_total"), turns);
    assert_eq!(
        v("ontime_sip_messages_total{method=\"INVITE\",direction=\"in\"}"),
        1.0
    );
    assert!(
        gw.stdout().contains("turn 1 ended: echoing"),
        "{}",
        gw.stdout()
    );
}
