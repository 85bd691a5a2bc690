//! `examples/send_wav.rs` end to end over real loopback UDP: a WAV of known length goes through
//! the real-time sender to the example's own `--listen` socket and its live jitter buffer, and
//! every count that does not depend on timing is checked exactly. Lateness (late ticks, p99) is
//! only printed: it depends on the machine's load. The example's command line is parsed as
//! `main` parses it, and its errors are checked to name the bad argument.

#[path = "../examples/send_wav.rs"]
#[allow(dead_code)]
mod send_wav;

use std::net::UdpSocket;
use std::path::{Path, PathBuf};

use clap::Parser;
use send_wav::{frames_of, read_wav, run, Args};

/// A scratch directory unique to this test process.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ontime-send-wav-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Writes a 440 Hz tone of `samples` samples (no all-silent frame) as a 16-bit PCM WAV.
fn write_tone(path: &Path, sample_rate: u32, channels: u16, samples: usize) {
    let spec = hound::WavSpec {
        channels,
        sample_rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).expect("create WAV");
    for i in 0..samples {
        let t = i as f64 / f64::from(sample_rate);
        let v = (8000.0 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()) as i16;
        for _ in 0..channels {
            w.write_sample(v).expect("write sample");
        }
    }
    w.finalize().expect("finalize WAV");
}

/// A loopback UDP address that was free a moment ago.
fn free_loopback_addr() -> String {
    let probe = UdpSocket::bind("127.0.0.1:0").expect("bind probe");
    probe.local_addr().expect("probe addr").to_string()
}

fn args(argv: &[&str]) -> Result<Args, clap::Error> {
    Args::try_parse_from(std::iter::once("send_wav").chain(argv.iter().copied()))
}

#[test]
fn sends_every_frame_on_time_to_its_own_listener() {
    // 50 whole frames and a partial one: 51 packets carry the file (1.02 s).
    const SAMPLES: usize = 50 * 160 + 37;
    const FRAMES: u64 = 51;
    let dir = scratch_dir("e2e");
    let wav = dir.join("tone.wav");
    write_tone(&wav, 8000, 1, SAMPLES);
    assert_eq!(frames_of(SAMPLES), FRAMES);

    let addr = free_loopback_addr();
    let args = args(&[
        wav.to_str().expect("utf-8 path"),
        "--to",
        &addr,
        "--listen",
        &addr,
        "--json",
    ])
    .expect("the command line parses");
    let report = run(&args).expect("send_wav runs");
    let json = serde_json::to_string(&report).expect("report serialises");
    println!("{json}");
    let _ = std::fs::remove_dir_all(&dir);

    // The JSON line carries what the summary prints.
    let value: serde_json::Value = serde_json::from_str(&json).expect("one JSON object");
    assert_eq!(value["frames"], FRAMES);
    assert_eq!(value["sender"]["audio_packets"], FRAMES);
    assert_eq!(value["receiver"]["wav_frames_received"], FRAMES);

    let s = &report.sender;
    println!(
        "sender: {} packets ({} audio, {} silence), {} ticks, {} late, p99 <= {:?} ms, worst {} ms, realtime {}",
        s.packets_sent,
        s.audio_packets,
        s.silence_packets,
        s.ticks,
        s.late_ticks,
        s.p99_lateness_bound_ms,
        s.worst_lateness_ms,
        s.realtime
    );
    assert_eq!(report.samples, SAMPLES as u64);
    assert_eq!(report.frames, FRAMES);
    assert_eq!(
        s.audio_packets, FRAMES,
        "one packet per 20 ms frame of the file"
    );
    assert_eq!(s.send_errors, 0);
    assert_eq!(s.underruns, 0, "the whole file was queued before it played");
    assert_eq!(
        s.packets_sent,
        s.audio_packets + s.silence_packets,
        "every packet is audio or silence"
    );

    let rx = report.receiver.expect("--listen reports the receiver");
    println!(
        "receiver: {} received, {} WAV frames intact, {} played, {} lost, {} discarded ({} late), depth {} ms (max {} ms)",
        rx.received,
        rx.wav_frames_received,
        rx.played,
        rx.lost,
        rx.discarded,
        rx.late,
        rx.depth_ms,
        rx.max_depth_ms
    );
    assert_eq!(
        rx.received, s.packets_sent,
        "every packet sent arrived over loopback"
    );
    assert_eq!(
        rx.wav_frames_received, FRAMES,
        "the file's frames arrived byte for byte, in order"
    );
    assert_eq!(rx.lost, 0);
    assert_eq!(rx.invalid, 0);
    assert_eq!(rx.duplicates, 0);
    assert_eq!(
        rx.played + rx.discarded,
        rx.received,
        "every packet received was played or discarded"
    );
}

#[test]
fn bad_input_names_the_argument() {
    let dir = scratch_dir("errors");

    // Each rejected file: the error names the WAV argument, the file and what is wrong.
    let missing = dir.join("missing.wav");
    let wideband = dir.join("16k.wav");
    write_tone(&wideband, 16_000, 1, 1600);
    let stereo = dir.join("stereo.wav");
    write_tone(&stereo, 8000, 2, 1600);
    for (path, what) in [
        (&missing, "cannot read it"),
        (&wideband, "sample rate is 16000 Hz, need 8000 Hz"),
        (&stereo, "2 channels, need mono"),
    ] {
        let text = format!("{:#}", read_wav(path).expect_err(what));
        let name = path.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(
            text.contains("WAV argument") && text.contains(name) && text.contains(what),
            "{text}"
        );
    }

    // run() fails the same way before it sends anything.
    let path = missing.to_str().expect("utf-8 path");
    let parsed = args(&[path, "--to", "127.0.0.1:9"]).expect("parses");
    let text = format!("{:#}", run(&parsed).expect_err("missing WAV"));
    assert!(text.contains("WAV argument"), "{text}");

    let text = args(&[path, "--to", "nowhere"])
        .expect_err("bad address")
        .to_string();
    assert!(text.contains("--to"), "{text}");
    let text = args(&[path]).expect_err("no --to").to_string();
    assert!(text.contains("--to"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
