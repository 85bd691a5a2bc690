//! Real SIP clients calling the gateway over TLS with SRTP mandatory, and a caller refused for
//! offering plain RTP when SRTP is required.
//!
//! - baresip (Debian's package; its `srtp-mand` media encryption) dials the gateway's TLS
//!   listener, trusting the test CA, speaks a fresh espeak-ng sentence and records what it hears.
//! - linphonec (Debian's `linphone-cli`, driven on its standard input in file mode) does the same
//!   with `media_encryption=srtp` and `media_encryption_mandatory=1`.
//!
//! The wire is encrypted, so the reply is checked on the client's decoded audio; the wire itself
//! is checked in a capture (no frame of the peer's or the gateway's stream decodes as the
//! plaintext silence it carries), the answer in the client's SIP trace (`RTP/SAVP`, `a=crypto`),
//! the CDR (`"transport":"tls"`, `"srtp":true`) and the metrics.
//!
//! Neither client sends only SRTP to the media ports: baresip 1.0 sends an RTCP APP "PING" in the
//! clear before its SRTP starts (and its RTCP BYE in the clear after it stops); linphone's
//! mediastreamer sends STUN binding requests to both ports. The gateway drops those as SRTP it
//! cannot authenticate (`ontime_srtp_dropped_total`), so the tests count what the client sent
//! that is not SRTP in the capture and require every SRTP drop to be one of those, while every
//! SRTP packet the client sent must have been accepted (the CDR's `packets_in`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use common::*;

/// The padding before and after the caller's sentence, in seconds.
const LEAD_SECS: f64 = 0.5;
const LISTEN_SECS: f64 = 9.0;

fn rms(samples: &[i16]) -> f64 {
    (samples.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / samples.len().max(1) as f64)
        .sqrt()
}

/// A gateway with a TLS listener (certificate from a fresh test CA) and the SRTP policy given.
struct TlsGateway {
    gw: Gateway,
    tls_port: u16,
    dir: PathBuf,
    pki: pki::TestPki,
}

fn tls_gateway(srtp: &str) -> TlsGateway {
    let tls_port = free_tcp_port();
    let dir =
        std::env::temp_dir().join(format!("ontime-interop-{}-{tls_port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pki = pki::test_pki(&dir.join("pki"));
    let gw = start_gateway(&[
        "--sip-listen-tls",
        &format!("127.0.0.1:{tls_port}"),
        "--tls-cert",
        pki.cert.to_str().unwrap(),
        "--tls-key",
        pki.key.to_str().unwrap(),
        "--srtp",
        srtp,
    ]);
    TlsGateway {
        gw,
        tls_port,
        dir,
        pki,
    }
}

/// A fresh sentence as 8 kHz 16-bit WAV, padded with silence to listen: its path and the end of
/// the speech in seconds.
fn caller_wav(dir: &Path, text: &str) -> (PathBuf, f64) {
    let ulaw = fresh_speech(dir, text);
    let wav = dir.join("speech.wav");
    let ok = Command::new("sox")
        .arg(&ulaw)
        .args(["-r", "8000", "-c", "1", "-b", "16", "-e", "signed-integer"])
        .arg(&wav)
        .args(["pad", &LEAD_SECS.to_string(), &LISTEN_SECS.to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "sox could not pad {}", ulaw.display());
    let reader = hound::WavReader::open(&wav).unwrap();
    let total = f64::from(reader.duration()) / f64::from(reader.spec().sample_rate);
    (wav, total - LISTEN_SECS)
}

/// The client's decoded recording must hold the stub's reply after the caller's speech (the
/// criterion of `baresip_call.rs`: -40 dBFS frames, the first after the speech, over 2 s of them).
fn assert_heard_reply(recording: &Path, speech_end: f64, peer: &str, log: &str) {
    let reader = hound::WavReader::open(recording)
        .unwrap_or_else(|e| panic!("{peer} recording {}: {e}\n{log}", recording.display()));
    let rate = reader.spec().sample_rate as usize;
    // mediastreamer's recorder writes the file's size as the data chunk's (44 bytes too many):
    // read the samples there are.
    let heard: Vec<i16> = reader.into_samples::<i16>().map_while(Result::ok).collect();
    let frame = rate / 50;
    let frames: Vec<f64> = heard.chunks(frame).map(rms).collect();
    let loud = |f: &f64| *f > 32768.0 * 10f64.powf(-40.0 / 20.0);
    let first_loud = frames
        .iter()
        .position(loud)
        .unwrap_or_else(|| panic!("{peer} heard only silence:\n{log}"));
    let loud_frames = frames.iter().filter(|f| loud(f)).count();
    eprintln!(
        "{peer} heard {loud_frames} loud frames, first at {:.2} s",
        first_loud as f64 * 0.02
    );
    assert!(
        first_loud as f64 * 0.02 > speech_end,
        "{peer}: reply began before the caller's speech ended"
    );
    assert!(
        loud_frames > 100,
        "{peer}: only {loud_frames} frames of reply"
    );
}

/// One UDP datagram of a capture.
struct Datagram {
    src: u16,
    dst: u16,
    bytes: Vec<u8>,
}

fn datagrams(pcap: &Path) -> Vec<Datagram> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-T", "fields", "-e", "udp.srcport", "-e", "udp.dstport"])
        .args(["-e", "udp.payload"])
        .output()
        .expect("tshark -r");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let hex = f.get(2)?.replace(':', "");
            Some(Datagram {
                src: f[0].parse().ok()?,
                dst: f[1].parse().ok()?,
                bytes: (0..hex.len() / 2)
                    .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
                    .collect(),
            })
        })
        .collect()
}

/// A STUN message (RFC 7983: first byte 0-3, RFC 5389 magic cookie).
fn is_stun(b: &[u8]) -> bool {
    b.len() >= 20 && b[0] < 4 && b[4..8] == [0x21, 0x12, 0xA4, 0x42]
}

/// Plain (unprotected) RTCP: a compound whose length fields add up to the datagram exactly,
/// which an SRTCP packet (index and tag appended) never does.
fn is_cleartext_rtcp(b: &[u8]) -> bool {
    let mut at = 0;
    while at + 4 <= b.len() {
        if b[at] >> 6 != 2 || !(200..=206).contains(&b[at + 1]) {
            return false;
        }
        at += 4 * (usize::from(u16::from_be_bytes([b[at + 2], b[at + 3]])) + 1);
    }
    at == b.len() && at > 0
}

/// An RTP (SRTP) packet of PCMU: version 2, payload type 0, no CSRC or extension.
fn is_pcmu_rtp(b: &[u8]) -> bool {
    b.len() >= 12 + 160 && b[0] == 0x80 && b[1] & 0x7F == 0
}

/// What the capture of one SRTP call says about the wire.
struct Wire {
    /// PCMU packets the peer sent to the gateway's RTP port.
    peer_rtp: usize,
    /// Datagrams the peer sent to the gateway that are not SRTP/SRTCP (STUN, cleartext RTCP).
    peer_not_srtp: usize,
}

/// Check that both directions of the call are encrypted: the caller's WAV and the gateway's
/// stream start with silence, whose plaintext frames µ-law decodes as silent; under SRTP none of
/// the first frames does. Returns what the peer sent.
fn check_wire(pcap: &Path, gw: &Gateway, peer: &str) -> Wire {
    let all = datagrams(pcap);
    let gw_port = |p: u16| (gw.rtp_ports.0..=gw.rtp_ports.1).contains(&p);
    let from_peer: Vec<&Datagram> = all.iter().filter(|d| gw_port(d.dst)).collect();
    let to_peer: Vec<&Datagram> = all.iter().filter(|d| gw_port(d.src)).collect();
    let peer_rtp: Vec<&Datagram> = from_peer
        .iter()
        .copied()
        .filter(|d| d.dst % 2 == 0 && is_pcmu_rtp(&d.bytes))
        .collect();
    let gw_rtp: Vec<&Datagram> = to_peer
        .iter()
        .copied()
        .filter(|d| d.src % 2 == 0 && is_pcmu_rtp(&d.bytes))
        .collect();
    assert!(
        peer_rtp.len() > 100 && gw_rtp.len() > 100,
        "{peer}: capture holds {} RTP packets from the peer, {} from the gateway",
        peer_rtp.len(),
        gw_rtp.len()
    );
    // 0.4 s: within the caller's leading silence and the gateway's silence while it listens.
    for (who, stream) in [(peer, &peer_rtp), ("the gateway", &gw_rtp)] {
        let silent = stream[..20]
            .iter()
            .filter(|d| ulaw_is_silent(&d.bytes[12..12 + 160]))
            .count();
        assert_eq!(
            silent, 0,
            "{who}'s first 20 RTP payloads include {silent} plaintext silent frames: not encrypted"
        );
    }
    let peer_not_srtp = from_peer
        .iter()
        .filter(|d| is_stun(&d.bytes) || is_cleartext_rtcp(&d.bytes))
        .count();
    Wire {
        peer_rtp: peer_rtp.len(),
        peer_not_srtp,
    }
}

/// The CDR of the one call (the `end` record in the gateway's JSON log).
fn end_record(gw: &Gateway) -> String {
    let log = std::fs::read_to_string(&gw.log).unwrap();
    let ends: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\\\"record\\\":\\\"end\\\""))
        .collect();
    assert_eq!(ends.len(), 1, "{log}");
    ends[0].replace("\\\"", "\"")
}

/// A numeric field of a CDR line.
fn cdr_number(cdr: &str, field: &str) -> u64 {
    let key = format!("\"{field}\":");
    let at = cdr
        .find(&key)
        .unwrap_or_else(|| panic!("no {field} in {cdr}"))
        + key.len();
    cdr[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{field} is not a number in {cdr}"))
}

/// The gateway's SDP answer, as the client logged it: SRTP in kind.
fn assert_srtp_answer(peer_log: &str, peer: &str) {
    let at = peer_log
        .find("o=ontime ")
        .unwrap_or_else(|| panic!("{peer} logged no answer from the gateway:\n{peer_log}"));
    let answer: String = peer_log[at..].chars().take(600).collect();
    assert!(
        answer.contains("RTP/SAVP"),
        "{peer}: answer not SRTP:\n{answer}"
    );
    assert!(
        answer.contains("a=crypto:") && answer.contains("AES_CM_128_HMAC_SHA1_"),
        "{peer}: answer has no crypto line:\n{answer}"
    );
}

/// The metrics and the record every TLS + SRTP call must leave, given what the wire showed.
fn assert_tls_srtp_call(gw: &Gateway, wire: &Wire, peer: &str) {
    let cdr = end_record(gw);
    assert!(cdr.contains("\"transport\":\"tls\""), "{cdr}");
    assert!(cdr.contains("\"srtp\":true"), "{cdr}");
    // Every SRTP packet the peer sent was authenticated and taken.
    assert_eq!(
        cdr_number(&cdr, "packets_in"),
        wire.peer_rtp as u64,
        "{peer}: the gateway took fewer SRTP packets than the peer sent: {cdr}"
    );
    let body = gw.metrics_text();
    let value = |s: &str| metric_value(&body, s).unwrap_or_else(|| panic!("no {s}:\n{body}"));
    assert_eq!(
        value("ontime_calls_answered_total{transport=\"tls\",media=\"srtp\"}"),
        1.0,
        "{body}"
    );
    assert_eq!(
        value("ontime_calls_total{result=\"completed\"}"),
        1.0,
        "{body}"
    );
    // One utterance, one turn.
    assert_eq!(value("ontime_turns_total"), 1.0, "{body}");
    // SRTP drops: only what the peer sent that was not SRTP (never a replay or a bad packet).
    for reason in ["replayed", "too_old", "malformed"] {
        assert_eq!(
            value(&format!("ontime_srtp_dropped_total{{reason=\"{reason}\"}}")),
            0.0,
            "{peer}: {reason}\n{body}"
        );
    }
    let dropped = value("ontime_srtp_dropped_total{reason=\"too_short\"}")
        + value("ontime_srtp_dropped_total{reason=\"auth_failed\"}");
    eprintln!(
        "{peer}: {} SRTP packets taken, {dropped} datagrams dropped of {} not SRTP",
        wire.peer_rtp, wire.peer_not_srtp
    );
    assert!(
        dropped <= wire.peer_not_srtp as f64,
        "{peer}: {dropped} SRTP drops, but the peer sent only {} datagrams that were not SRTP\n{body}",
        wire.peer_not_srtp
    );
}

/// The two peer calls run one at a time: each counts the SRTP packets sent to its gateway's
/// whole RTP port range, and two gateways' ranges picked at the same moment can overlap, so a
/// concurrent call's stream was counted as the peer's (1209 sent, 604 taken).
fn one_call_at_a_time() -> MutexGuard<'static, ()> {
    static CALLS: Mutex<()> = Mutex::new(());
    CALLS.lock().unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn baresip_over_tls_with_srtp_mandatory_hears_the_reply() {
    if !require("baresip") || !require("sox") || !require("tshark") || !require("espeak-ng") {
        return;
    }
    let _one = one_call_at_a_time();
    let t = tls_gateway("optional");
    let dir = t.dir.join("baresip");
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let (speech, speech_end) =
        caller_wav(&dir, "Could you book me a table for two tonight please.");
    let (rtp_lo, rtp_hi) = free_port_range(10);
    let cap = capture(&(rtp_lo..=rtp_hi).collect::<Vec<_>>());
    // tshark says it captures a moment before it does; baresip's first RTCP is at once.
    std::thread::sleep(Duration::from_secs(1));
    // sip_listen on port 0: UDP, TCP and TLS each on a free port of their own.
    std::fs::write(
        dir.join("config"),
        format!(
            "poll_method epoll\nsip_listen 127.0.0.1:0\nsip_cafile {}\nnet_interface 127.0.0.1\n\
             call_local_timeout 30\ncall_max_calls 1\n\
             audio_player aubridge,nil\naudio_source aufile,{}\naudio_alert aubridge,nil\nausrc_srate 8000\nauplay_srate 8000\n\
             ausrc_channels 1\nauplay_channels 1\nausrc_format s16\nauplay_format s16\nauenc_format s16\naudec_format s16\n\
             rtp_ports {rtp_lo}-{rtp_hi}\nrtcp_mux no\njitter_buffer_delay 5-10\nrtp_stats yes\n\
             module_path /usr/lib/baresip/modules\nmodule g711.so\nmodule srtp.so\nmodule sndfile.so\nsnd_path {}\n\
             module aufile.so\nmodule aubridge.so\nmodule_tmp account.so\nmodule_app menu.so\n",
            t.pki.ca.display(),
            speech.display(),
            rec.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("accounts"),
        "<sip:baresip@127.0.0.1>;regint=0;audio_codecs=PCMU;mediaenc=srtp-mand\n",
    )
    .unwrap();
    // -s traces SIP (the answer is checked in it); the menu hangs up when the WAV ends; -t and
    // timeout bound the process.
    let out = Command::new("timeout")
        .args(["40", "baresip", "-s", "-f"])
        .arg(&dir)
        .args([
            "-e",
            &format!("/dial sip:bot@127.0.0.1:{};transport=tls", t.tls_port),
            "-t",
            "25",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run baresip");
    let pcap = cap.finish();
    let log =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("SRTP is Enabled"),
        "baresip did not enable SRTP:\n{log}\n{}",
        t.gw.stderr()
    );
    assert_srtp_answer(&log, "baresip");
    let dec = std::fs::read_dir(&rec)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-dec.wav"))
        .unwrap_or_else(|| panic!("baresip recorded nothing:\n{log}\n{}", t.gw.stderr()));
    assert_heard_reply(&dec, speech_end, "baresip", &log);
    let wire = check_wire(&pcap, &t.gw, "baresip");
    assert_tls_srtp_call(&t.gw, &wire, "baresip");
    let _ = std::fs::remove_file(&pcap);
    let _ = std::fs::remove_dir_all(&t.dir);
}

#[test]
fn linphonec_over_tls_with_srtp_mandatory_hears_the_reply() {
    if !require("linphonec") || !require("sox") || !require("tshark") || !require("espeak-ng") {
        return;
    }
    let _one = one_call_at_a_time();
    let t = tls_gateway("optional");
    let dir = t.dir.join("linphone");
    std::fs::create_dir_all(&dir).unwrap();
    let (speech, speech_end) = caller_wav(
        &dir,
        "I would like to change the date of my flight to Friday.",
    );
    let heard = dir.join("heard.wav");
    let rtp = free_port_range(10);
    let cap = capture(&(rtp.0..=rtp.1).collect::<Vec<_>>());
    // tshark says it captures a moment before it does; linphone's first STUN is at once.
    std::thread::sleep(Duration::from_secs(1));
    // No UDP or TCP listener, TLS on a free port; the test CA as the only root, with the name
    // checked.
    let mut lp = linphone::Linphonec::start(
        &dir,
        &format!(
            "sip_port=0\nsip_tcp_port=0\nsip_tls_port=-1\n\
             contact=\"linphone\" <sip:linphone@127.0.0.1>\nroot_ca={}\nverify_server_certs=1\n\
             verify_server_cn=1\nmedia_encryption=srtp\nmedia_encryption_mandatory=1",
            t.pki.ca.display()
        ),
        rtp,
        "",
    );
    // The certificate names localhost (and 127.0.0.1 as an IP SAN, which this linphone's TLS
    // library does not match): dial the name.
    for cmd in [
        "soundcard use files".to_string(),
        format!("play {}", speech.display()),
        format!("record {}", heard.display()),
        format!("call sip:bot@localhost:{};transport=tls", t.tls_port),
    ] {
        lp.send(&cmd);
    }
    let answered = wait_until(Duration::from_secs(20), || {
        t.gw.metric("ontime_calls_active") == Some(1.0)
    });
    assert!(
        answered,
        "linphonec's call was not answered:\n{}\n{}",
        lp.logs(),
        t.gw.stderr()
    );
    // Let the WAV play out (speech, then the reply heard over its trailing silence), hang up.
    std::thread::sleep(Duration::from_secs_f64(speech_end + LISTEN_SECS - 1.0));
    let (ended, log) = lp.hang_up(|| t.gw.metric("ontime_calls_active") == Some(0.0));
    let pcap = cap.finish();
    assert!(ended, "linphonec's call did not end:\n{log}");
    assert!(
        log.contains("Media streams established"),
        "linphonec's media did not start:\n{log}"
    );
    assert_srtp_answer(&log, "linphonec");
    assert_heard_reply(&heard, speech_end, "linphonec", &log);
    let wire = check_wire(&pcap, &t.gw, "linphonec");
    assert_tls_srtp_call(&t.gw, &wire, "linphonec");
    let _ = std::fs::remove_file(&pcap);
    let _ = std::fs::remove_dir_all(&t.dir);
}

#[test]
fn a_plain_rtp_offer_gets_488_with_warning_when_srtp_is_required() {
    if !require("sipp") {
        return;
    }
    let t = tls_gateway("required");
    let media_port = free_media_port();
    let scen = scenario(
        "caller_expects_488_warning.xml",
        &[("@WARNING@", "SRTP required")],
    );
    let (ok, out) = sipp(&t.gw, &scen, 1, media_port, Duration::from_secs(15));
    assert!(
        ok,
        "sipp expected 488 with Warning \"SRTP required\":\n{out}"
    );
    // The check bites: another Warning text fails the call.
    let scen = scenario(
        "caller_expects_488_warning.xml",
        &[("@WARNING@", "no common codec at all")],
    );
    let (ok, out) = sipp(&t.gw, &scen, 1, media_port, Duration::from_secs(15));
    assert!(!ok, "sipp's Warning check passed on the wrong text:\n{out}");
    assert_eq!(
        t.gw.metric("ontime_calls_rejected_total{reason=\"srtp\"}"),
        Some(2.0),
        "{}",
        t.gw.metrics_text()
    );
    assert_eq!(
        t.gw.metric("ontime_calls_answered_total{transport=\"udp\",media=\"rtp\"}"),
        Some(0.0)
    );
    let _ = std::fs::remove_dir_all(&t.dir);
}
