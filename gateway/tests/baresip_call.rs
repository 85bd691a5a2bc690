//! A second real SIP client: headless baresip (Debian's package, with a minimal headless
//! configuration this test writes) dials the gateway, speaks a WAV padded with silence, records what it
//! hears, and hangs up when its WAV ends. The recording must hold the stub's reply after the
//! caller's speech, and the gateway must have heard baresip's RTCP.

mod common;

use std::process::{Command, Stdio};

use common::*;

fn rms(samples: &[i16]) -> f64 {
    (samples.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / samples.len().max(1) as f64)
        .sqrt()
}

#[test]
fn baresip_caller_hears_the_reply() {
    if !require("baresip") || !require("sox") {
        return;
    }
    let gw = start_gateway(&[]);
    let dir = gw.log.parent().unwrap().join("baresip");
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    // Speech (a committed utterance, decoded to 16-bit) followed by 9 s of silence to listen.
    let speech = dir.join("speech.wav");
    let ok = Command::new("sox")
        .arg(workspace().join("fixtures/callers/utterance_1.ulaw.wav"))
        .args(["-r", "8000", "-c", "1", "-b", "16", "-e", "signed-integer"])
        .arg(&speech)
        .args(["pad", "0.5", "9"])
        .status()
        .unwrap();
    assert!(ok.success());
    let speech_secs = 0.5 + 3.74;
    let sip_port = free_udp_port();
    let (rtp_lo, rtp_hi) = free_port_range(20);
    std::fs::write(
        dir.join("config"),
        format!(
            "poll_method epoll\nsip_listen 127.0.0.1:{sip_port}\nnet_interface 127.0.0.1\ncall_local_timeout 30\ncall_max_calls 1\n\
             audio_player aubridge,nil\naudio_source aufile,{}\naudio_alert aubridge,nil\nausrc_srate 8000\nauplay_srate 8000\n\
             ausrc_channels 1\nauplay_channels 1\nausrc_format s16\nauplay_format s16\nauenc_format s16\naudec_format s16\n\
             rtp_ports {rtp_lo}-{rtp_hi}\nrtcp_mux no\njitter_buffer_delay 5-10\nrtp_stats yes\n\
             module_path /usr/lib/baresip/modules\nmodule g711.so\nmodule sndfile.so\nsnd_path {}\nmodule aufile.so\nmodule aubridge.so\n\
             module_tmp account.so\nmodule_app menu.so\n",
            speech.display(),
            rec.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("accounts"),
        "<sip:baresip@127.0.0.1>;regint=0;audio_codecs=PCMU\n",
    )
    .unwrap();
    // -e dials; the menu hangs up when the WAV ends; -t bounds the process.
    let out = Command::new("timeout")
        .args(["40", "baresip", "-f"])
        .arg(&dir)
        .args(["-e", &format!("/dial sip:bot@{}", gw.sip), "-t", "20"])
        .stdin(Stdio::null())
        .output()
        .expect("run baresip");
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let dec = std::fs::read_dir(&rec)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-dec.wav"))
        .unwrap_or_else(|| panic!("baresip recorded nothing:\n{log}\n{}", gw.stderr()));
    let heard: Vec<i16> = hound::WavReader::open(&dec)
        .unwrap()
        .into_samples::<i16>()
        .map(|s| s.unwrap())
        .collect();
    let frames: Vec<f64> = heard.chunks(160).map(rms).collect();
    let loud = |f: &f64| *f > 32768.0 * 10f64.powf(-40.0 / 20.0);
    let first_loud = frames
        .iter()
        .position(loud)
        .unwrap_or_else(|| panic!("baresip heard only silence:\n{log}"));
    let loud_frames = frames.iter().filter(|f| loud(f)).count();
    eprintln!(
        "baresip heard {loud_frames} loud frames, first at {:.2} s",
        first_loud as f64 * 0.02
    );
    assert!(
        first_loud as f64 * 0.02 > speech_secs,
        "reply began before the caller's speech ended"
    );
    assert!(loud_frames > 100, "only {loud_frames} frames of reply");

    let body = gw.metrics_text();
    assert_eq!(
        metric_value(&body, "ontime_calls_total{result=\"completed\"}"),
        Some(1.0),
        "{body}"
    );
    assert_utterance_1_turns(&body, "baresip");
    assert!(
        metric_value(&body, "ontime_rtcp_reports_received_total").unwrap_or(0.0) >= 1.0,
        "baresip's RTCP reports on our stream were not seen"
    );
}
