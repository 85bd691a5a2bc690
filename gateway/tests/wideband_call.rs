//! Real SIP clients that offer only G.722 call the gateway over plain UDP and must hear the stub's
//! reply as the stub has it (not merely something loud): the wideband counterpart of
//! `baresip_call.rs` and of the linphonec call in `tls_srtp_interop.rs`.
//!
//! - baresip (Debian's package, only its `g722` audio codec module loaded and the account's
//!   `audio_codecs` limited to `G722/16000/1`) runs its audio at 16 kHz: it speaks a committed
//!   utterance resampled to 16 kHz and records what it decodes.
//! - linphonec (Debian's `linphone-cli`, in file mode) has every codec of its list disabled but
//!   G722.
//! - A gateway told to speak only G.711 (`--codecs PCMU,PCMA`) refuses baresip's G.722-only offer
//!   with 488 and counts it as `no_common_codec`.
//!
//! What the callers heard is compared with the reply itself: the stub's WAV (8 kHz) resampled
//! by sox to the recording's rate (16 kHz), then the normalised cross-correlation of the two at
//! every lag where the whole reply fits in the recording (computed with an FFT). The recording
//! is kept at 16 kHz rather than decimated to 8 kHz so that whatever the wideband path puts
//! above 4 kHz (the gateway's 8 → 16 kHz upsampler's images, G.722's upper sub-band noise)
//! counts against the figure instead of being filtered away; the figure on the recording
//! decimated to 8 kHz is printed beside it, to tell such out-of-band noise from a garbled reply.
//!
//! Both callers can decode nothing but G.722 (baresip has no other codec module loaded;
//! linphone negotiated G.722 only), so a reply heard and matching the reference also says that
//! the gateway's packets carried payload type 9.

#[path = "common/bot.rs"]
mod bot;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The padding before and after the caller's utterance, in seconds. The reply (5.2 s) usually
/// starts 0.4-0.6 s after the speech; when Smart Turn judges the turn incomplete it starts 3 s
/// later, on the silence timeout, and must still fit.
const LEAD_SECS: f64 = 0.5;
const LISTEN_SECS: f64 = 10.0;

/// The least normalised cross-correlation between the reference reply and what a caller heard.
/// Measured over loopback: baresip 0.9998, linphonec 0.9992 (mediastreamer decodes G.722 6 dB
/// louder than spandsp does, so the reply's peaks clip in its recording), run after run. The
/// bound is white noise at 17 dB SNR on baresip's recording; the first 200 ms of the reply
/// garbled gives 0.92, one 20 ms frame slipped 0.66, another sentence 0.10.
const MIN_CORRELATION: f64 = 0.99;

fn rms(samples: &[i16]) -> f64 {
    (samples.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / samples.len().max(1) as f64)
        .sqrt()
}

/// A run folder for one test.
fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ontime-wideband-{}-{name}-{}",
        std::process::id(),
        free_udp_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether a frame is louder than -40 dBFS RMS (the criterion of `baresip_call.rs`).
fn loud(frame: &[i16]) -> bool {
    rms(frame) > 32768.0 * 10f64.powf(-40.0 / 20.0)
}

/// The caller's WAV: a committed utterance as 16-bit WAV at `rate`, padded with silence to
/// listen.
struct CallerWav {
    path: PathBuf,
    /// The end of the speech in seconds: of its last frame over -40 dBFS (the utterance's own
    /// quiet tail is not speech, and the reply may begin within it).
    speech_end: f64,
    /// The whole WAV's length in seconds.
    secs: f64,
}

fn caller_wav(dir: &Path, rate: u32) -> CallerWav {
    let wav = dir.join(format!("speech-{rate}.wav"));
    let ok = Command::new("sox")
        .arg(workspace().join("fixtures/callers/utterance_1.ulaw.wav"))
        .args(["-r", &rate.to_string(), "-c", "1", "-b", "16"])
        .args(["-e", "signed-integer"])
        .arg(&wav)
        .args(["pad", &LEAD_SECS.to_string(), &LISTEN_SECS.to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "sox could not make {}", wav.display());
    let samples: Vec<i16> = hound::WavReader::open(&wav)
        .unwrap()
        .into_samples::<i16>()
        .map_while(Result::ok)
        .collect();
    let frame = rate as usize / 50;
    let last = samples
        .chunks(frame)
        .rposition(loud)
        .expect("the utterance has a loud frame");
    CallerWav {
        path: wav,
        speech_end: (last + 1) as f64 * 0.02,
        secs: samples.len() as f64 / f64::from(rate),
    }
}

/// Headless baresip in `dir` that offers G.722 only, at 16 kHz: speaks `speech`, records what it
/// decodes (`*-dec.wav`) in `dir/rec`. Only the `g722` codec module is loaded, and the account
/// lists only `G722/16000/1` as well. SIP listens on free ports (`sip_listen` port 0).
fn write_baresip_config(dir: &Path, speech: &Path) -> PathBuf {
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let (rtp_lo, rtp_hi) = free_port_range(10);
    std::fs::write(
        dir.join("config"),
        format!(
            "poll_method epoll\nsip_listen 127.0.0.1:0\nnet_interface 127.0.0.1\n\
             call_local_timeout 30\ncall_max_calls 1\n\
             audio_player aubridge,nil\naudio_source aufile,{}\naudio_alert aubridge,nil\n\
             ausrc_srate 16000\nauplay_srate 16000\nausrc_channels 1\nauplay_channels 1\n\
             ausrc_format s16\nauplay_format s16\nauenc_format s16\naudec_format s16\n\
             rtp_ports {rtp_lo}-{rtp_hi}\nrtcp_mux no\njitter_buffer_delay 5-10\nrtp_stats yes\n\
             module_path /usr/lib/baresip/modules\nmodule g722.so\nmodule sndfile.so\nsnd_path {}\n\
             module aufile.so\nmodule aubridge.so\nmodule_tmp account.so\nmodule_app menu.so\n",
            speech.display(),
            rec.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("accounts"),
        "<sip:baresip@127.0.0.1>;regint=0;audio_codecs=G722/16000/1\n",
    )
    .unwrap();
    rec
}

/// Run the baresip of `dir` (see [`write_baresip_config`]) dialling the gateway, with its SIP
/// traced (`-s`): it hangs up when its WAV ends, or is refused. Once it logs the call's end
/// (or `limit` passes), it is told to quit (SIGTERM, killed on drop after 5 s more). Its log,
/// and whether the call ended within `limit`.
fn run_baresip(dir: &Path, gw: &Gateway, limit: Duration) -> (String, bool) {
    let out_file = dir.join("baresip.out");
    let err_file = dir.join("baresip.err");
    // -t bounds the process on its own too.
    let child = Command::new("baresip")
        .args(["-s", "-f"])
        .arg(dir)
        .args(["-e", &format!("/dial sip:bot@{}", gw.sip)])
        .args(["-t", &(limit.as_secs() + 5).to_string()])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .expect("spawn baresip");
    let mut baresip = Proc {
        child,
        name: "baresip".into(),
    };
    let read = || {
        std::fs::read_to_string(&out_file).unwrap_or_default()
            + &std::fs::read_to_string(&err_file).unwrap_or_default()
    };
    // "Call with … terminated" when it hangs up, "session closed: 488 …" when refused.
    let ended = wait_until(limit, || {
        let log = read();
        log.contains("session closed") || log.contains(" terminated (duration")
    });
    // Its closing statistics come after the call's end.
    std::thread::sleep(Duration::from_millis(500));
    baresip.signal("TERM");
    let _ = baresip.wait_timeout(Duration::from_secs(5));
    drop(baresip);
    (read(), ended)
}

/// The codecs of the first audio section of the SDP in `text` at or after `from` (a marker such
/// as `INVITE sip:` or `o=ontime `), as `PT NAME/rate` (static payload types named by RFC 3551
/// when they have no rtpmap); telephone-event left out.
fn sdp_codecs(text: &str, from: &str, who: &str) -> Vec<String> {
    let at = text
        .find(from)
        .unwrap_or_else(|| panic!("{who}: no `{from}` in the log:\n{text}"));
    let rest = &text[at..];
    let m_at = rest
        .find("m=audio ")
        .unwrap_or_else(|| panic!("{who}: no m=audio after `{from}`:\n{rest}"));
    let sdp = &rest[m_at..];
    let m_line = sdp.lines().next().unwrap();
    // The section's attributes: up to the next m= line or the end of this message.
    let section: Vec<&str> = sdp
        .lines()
        .skip(1)
        .take_while(|l| l.trim().len() > 1 && !l.starts_with("m="))
        .collect();
    m_line
        .split_whitespace()
        .skip(3)
        .map(|pt| {
            let prefix = format!("a=rtpmap:{pt} ");
            section
                .iter()
                .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
                .map(|enc| enc.trim())
                .or(match pt {
                    "0" => Some("PCMU/8000"),
                    "8" => Some("PCMA/8000"),
                    "9" => Some("G722/8000"),
                    _ => None,
                })
                .map_or_else(|| format!("{pt} ?"), |enc| format!("{pt} {enc}"))
        })
        .filter(|c| !c.contains(" telephone-event/"))
        .collect()
}

/// 16-bit mono samples of a WAV and its rate. mediastreamer's recorder writes the file's size as
/// the data chunk's (44 bytes too many): read the samples there are.
fn wav_samples(path: &Path, who: &str, log: &str) -> (Vec<i16>, u32) {
    let reader = hound::WavReader::open(path)
        .unwrap_or_else(|e| panic!("{who} recording {}: {e}\n{log}", path.display()));
    let spec = reader.spec();
    assert_eq!(
        (spec.channels, spec.bits_per_sample),
        (1, 16),
        "{who}: {} is not 16-bit mono",
        path.display()
    );
    let samples = reader.into_samples::<i16>().map_while(Result::ok).collect();
    (samples, spec.sample_rate)
}

/// A WAV resampled by sox to `rate` (16-bit mono), read back. `-G` lowers the gain rather than
/// clip the filter's overshoot (a reply at full scale), `-V1` keeps sox to its errors (it warns
/// of mediastreamer's data chunk size).
fn resampled(path: &Path, rate: u32, out: &Path) -> Vec<i16> {
    let ok = Command::new("sox")
        .args(["-V1", "-G"])
        .arg(path)
        .args(["-r", &rate.to_string(), "-c", "1", "-b", "16"])
        .args(["-e", "signed-integer"])
        .arg(out)
        .status()
        .unwrap();
    assert!(ok.success(), "sox could not resample {}", path.display());
    hound::WavReader::open(out)
        .unwrap()
        .into_samples::<i16>()
        .map_while(Result::ok)
        .collect()
}

/// In-place radix-2 FFT (`re.len()` a power of two); unscaled both ways.
fn fft(re: &mut [f64], im: &mut [f64], inverse: bool) {
    let n = re.len();
    let mut j = 0;
    for i in 1..n {
        let mut bit = n >> 1;
        while j & bit != 0 {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if i < j {
            re.swap(i, j);
            im.swap(i, j);
        }
    }
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut len = 2;
    while len <= n {
        let half = len / 2;
        let step = sign * 2.0 * std::f64::consts::PI / len as f64;
        let twiddles: Vec<(f64, f64)> = (0..half)
            .map(|k| ((step * k as f64).cos(), (step * k as f64).sin()))
            .collect();
        for start in (0..n).step_by(len) {
            for (k, &(wr, wi)) in twiddles.iter().enumerate() {
                let (a, b) = (start + k, start + k + half);
                let xr = re[b] * wr - im[b] * wi;
                let xi = re[b] * wi + im[b] * wr;
                re[b] = re[a] - xr;
                im[b] = im[a] - xi;
                re[a] += xr;
                im[a] += xi;
            }
        }
        len <<= 1;
    }
}

/// The best match of `reference` in `heard`: the lag (in samples) where the normalised
/// cross-correlation `Σ ref[n]·heard[n+lag] / (‖ref‖·‖heard[lag..lag+N]‖)` is highest, over
/// every lag at which the whole reference fits in the recording (segments quieter than 40 dB
/// under the reference are skipped: no match in silence), and its value.
fn best_match(reference: &[i16], heard: &[i16]) -> Option<(usize, f64)> {
    if heard.len() < reference.len() {
        return None;
    }
    let size = (heard.len() + reference.len()).next_power_of_two();
    let mut hr = vec![0.0; size];
    let mut hi = vec![0.0; size];
    for (d, &s) in hr.iter_mut().zip(heard) {
        *d = f64::from(s);
    }
    let mut rr = vec![0.0; size];
    let mut ri = vec![0.0; size];
    for (d, &s) in rr.iter_mut().zip(reference) {
        *d = f64::from(s);
    }
    fft(&mut hr, &mut hi, false);
    fft(&mut rr, &mut ri, false);
    // heard × conj(reference): its inverse is Σ ref[n]·heard[n+lag] at index lag.
    for k in 0..size {
        let (a, b, c, d) = (hr[k], hi[k], rr[k], ri[k]);
        hr[k] = a * c + b * d;
        hi[k] = b * c - a * d;
    }
    fft(&mut hr, &mut hi, true);
    let ref_energy: f64 = reference.iter().map(|&s| f64::from(s).powi(2)).sum();
    let mut prefix = vec![0.0; heard.len() + 1];
    for (i, &s) in heard.iter().enumerate() {
        prefix[i + 1] = prefix[i] + f64::from(s).powi(2);
    }
    (0..=heard.len() - reference.len())
        .filter_map(|lag| {
            let energy = prefix[lag + reference.len()] - prefix[lag];
            (energy > ref_energy * 1e-4)
                .then(|| (lag, hr[lag] / size as f64 / (ref_energy * energy).sqrt()))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The caller's recording must hold the stub's reply after the caller's speech (the criterion
/// of `baresip_call.rs`: -40 dBFS frames, the first after the speech, over 2 s of them) and
/// match the reference reply: normalised cross-correlation over [`MIN_CORRELATION`], the
/// reference's first loud frame placed after the speech too.
fn assert_heard_reply(recording: &Path, speech_end: f64, who: &str, log: &str) {
    let (heard, rate) = wav_samples(recording, who, log);
    let frame = rate as usize / 50;
    let frames: Vec<bool> = heard.chunks(frame).map(loud).collect();
    let first_loud = frames
        .iter()
        .position(|&l| l)
        .unwrap_or_else(|| panic!("{who} heard only silence ({rate} Hz recording):\n{log}"));
    let loud_frames = frames.iter().filter(|&&l| l).count();
    eprintln!(
        "{who} heard {loud_frames} loud frames at {rate} Hz, first at {:.2} s",
        first_loud as f64 * 0.02
    );
    assert!(
        first_loud as f64 * 0.02 > speech_end,
        "{who}: reply began before the caller's speech ended ({speech_end:.2} s)"
    );
    assert!(
        loud_frames > 100,
        "{who}: only {loud_frames} frames of reply"
    );

    // The reference at the recording's rate.
    let stub = workspace().join("gateway/assets/stub_reply.wav");
    let reference = resampled(
        &stub,
        rate,
        &recording.with_file_name(format!("reference-{rate}.wav")),
    );
    let ref_lead = reference
        .chunks(frame)
        .position(loud)
        .expect("the reference reply has a loud frame")
        * frame;
    let started = Instant::now();
    let (lag, rho) = best_match(&reference, &heard).unwrap_or_else(|| {
        panic!(
            "{who}: the recording ({:.2} s) is shorter than the reply ({:.2} s)",
            heard.len() as f64 / f64::from(rate),
            reference.len() as f64 / f64::from(rate)
        )
    });
    // The same on the recording decimated to 8 kHz against the reply as the stub has it: a
    // diagnostic only (see the file's notes).
    let narrow = if rate == 8000 {
        None
    } else {
        let heard8 = resampled(recording, 8000, &recording.with_file_name("heard-8000.wav"));
        let reference8 = hound::WavReader::open(&stub)
            .unwrap()
            .into_samples::<i16>()
            .map_while(Result::ok)
            .collect::<Vec<_>>();
        best_match(&reference8, &heard8)
    };
    eprintln!(
        "{who}: reply matched at {:.4} s with normalised cross-correlation {rho:.4} at {rate} Hz \
         (8 kHz: {}), searched in {:.2} s",
        lag as f64 / f64::from(rate),
        narrow.map_or("n/a".into(), |(l, r)| format!(
            "{r:.4} at {:.4} s",
            l as f64 / 8000.0
        )),
        started.elapsed().as_secs_f64()
    );
    assert!(
        rho > MIN_CORRELATION,
        "{who}: what the caller heard does not match the reply: peak normalised \
         cross-correlation {rho:.4} (at {:.3} s) is not above {MIN_CORRELATION} (8 kHz figure: \
         {narrow:?}): the G.722 reply is garbled, or cut (recording {:.2} s, loud from {:.2} s, \
         reply {:.2} s)",
        lag as f64 / f64::from(rate),
        heard.len() as f64 / f64::from(rate),
        first_loud as f64 * 0.02,
        reference.len() as f64 / f64::from(rate),
    );
    let voiced_at = (lag + ref_lead) as f64 / f64::from(rate);
    assert!(
        voiced_at > speech_end,
        "{who}: the best match of the reply starts at {voiced_at:.2} s, before the caller's \
         speech ended ({speech_end:.2} s)"
    );
}

/// The one call of a test ended completed on G.722, with one turn: the metrics, the gateway's
/// admission line and its CDR say so.
fn assert_completed_g722_call(gw: &Gateway, who: &str) {
    let body = gw.metrics_text();
    let value = |s: &str| metric_value(&body, s).unwrap_or_else(|| panic!("no {s}:\n{body}"));
    assert_eq!(
        value("ontime_calls_total{result=\"completed\"}"),
        1.0,
        "{who}:\n{body}"
    );
    assert_eq!(value("ontime_turns_total"), 1.0, "{who}:\n{body}");
    // Smart Turn judged the caller's own 16 kHz audio, every run (speculative ones too).
    let turn_runs = value("ontime_inference_jobs_total{model=\"smart_turn\"}");
    assert!(turn_runs >= 1.0, "{who}: no Smart Turn run:\n{body}");
    assert_eq!(
        value("ontime_inference_turn_wideband_total"),
        turn_runs,
        "{who}:\n{body}"
    );
    assert_eq!(
        value("ontime_calls_rejected_total{reason=\"no_common_codec\"}"),
        0.0,
        "{who}:\n{body}"
    );
    // The gateway's own account of the codec: the admission line, the CDR, the metric.
    let log = gw.stdout();
    let admitted: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.contains("call admitted"))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(admitted.len(), 1, "{who}:\n{log}");
    assert_eq!(
        admitted[0]["fields"]["codec"], "G722",
        "{who}: the gateway admitted the call on another codec:\n{log}"
    );
    let ends = common::pipecat::cdr_end_records(gw);
    assert_eq!(ends.len(), 1, "{who}:\n{log}");
    assert_eq!(ends[0]["codec"], "G722", "{who}: CDR {}", ends[0]);
    assert_eq!(
        value("ontime_calls_by_codec_total{codec=\"G722\"}"),
        1.0,
        "{who}:\n{body}"
    );
    for other in ["PCMU", "PCMA"] {
        assert_eq!(
            value(&format!("ontime_calls_by_codec_total{{codec=\"{other}\"}}")),
            0.0,
            "{who}:\n{body}"
        );
    }
}

#[test]
fn baresip_offering_only_g722_hears_the_reply() {
    if !require("baresip") || !require("sox") {
        return;
    }
    let gw = start_gateway(&[]);
    let dir = run_dir("baresip");
    let caller = caller_wav(&dir, 16000);
    let rec = write_baresip_config(&dir, &caller.path);
    let (log, ended) = run_baresip(&dir, &gw, Duration::from_secs(40));
    // The offer was G.722 only, the gateway answered it with payload type 9 `G722/8000`, and
    // baresip ran the call on G.722 at 16 kHz.
    assert_eq!(
        sdp_codecs(&log, "INVITE sip:bot@", "baresip"),
        ["9 G722/8000"],
        "baresip offered more than G.722:\n{log}"
    );
    assert!(
        !log.contains("488 Not Acceptable Here"),
        "the gateway refused baresip's G.722-only offer (no G.722 in the gateway yet?):\n{log}\n{}",
        gw.stderr()
    );
    assert_eq!(
        sdp_codecs(&log, "o=ontime ", "baresip"),
        ["9 G722/8000"],
        "the gateway's answer:\n{log}"
    );
    // What baresip set up for the received stream: the G.722 decoder at 16 kHz, and no packet
    // of another payload type made it switch (it logs "Audio decoder changed payload").
    assert!(
        log.contains("audio: Set audio decoder: G722 16000Hz 1ch"),
        "baresip's log does not name its G722/16000 decoder:\n{log}"
    );
    let rx = log
        .lines()
        .find(|l| l.starts_with("audio rx pipeline:"))
        .unwrap_or_else(|| panic!("baresip logged no rx pipeline:\n{log}"));
    assert!(rx.trim_end().ends_with("<--- G722"), "{rx}");
    assert!(
        !log.contains("Audio decoder changed payload"),
        "the gateway's stream changed payload type:\n{log}"
    );
    assert!(
        ended,
        "baresip's call did not end in 40 s:\n{log}\n{}",
        gw.stderr()
    );
    let dec = std::fs::read_dir(&rec)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-dec.wav"))
        .unwrap_or_else(|| panic!("baresip recorded nothing:\n{log}\n{}", gw.stderr()));
    assert_heard_reply(&dec, caller.speech_end, "baresip", &log);
    assert_completed_g722_call(&gw, "baresip");
    let _ = std::fs::remove_dir_all(&dir);
}

/// linphone's codec list (liblinphone 5.1), all in one `[audio_codec_N]` section each: those
/// left out of the configuration would come back with their default (opus, speex, PCMU, PCMA
/// and G729 enabled).
const LINPHONE_CODECS: &[(&str, u32, u32)] = &[
    ("G722", 8000, 1),
    ("opus", 48000, 2),
    ("speex", 16000, 1),
    ("speex", 8000, 1),
    ("PCMU", 8000, 1),
    ("PCMA", 8000, 1),
    ("GSM", 8000, 1),
    ("G729", 8000, 1),
    ("speex", 32000, 1),
    ("G726-16", 8000, 1),
    ("G726-24", 8000, 1),
    ("G726-32", 8000, 1),
    ("G726-40", 8000, 1),
    ("AAL2-G726-16", 8000, 1),
    ("AAL2-G726-24", 8000, 1),
    ("AAL2-G726-32", 8000, 1),
    ("AAL2-G726-40", 8000, 1),
    ("L16", 44100, 2),
    ("L16", 44100, 1),
];

#[test]
fn linphonec_offering_only_g722_hears_the_reply() {
    if !require("linphonec") || !require("sox") {
        return;
    }
    let gw = start_gateway(&[]);
    let dir = run_dir("linphone");
    let caller = caller_wav(&dir, 16000);
    let heard = dir.join("heard.wav");
    // UDP on a random port, no TCP or TLS listener; G722 the only codec enabled.
    let codecs: String = LINPHONE_CODECS
        .iter()
        .enumerate()
        .map(|(i, (mime, rate, channels))| {
            format!(
                "[audio_codec_{i}]\nmime={mime}\nrate={rate}\nchannels={channels}\nenabled={}\n\n",
                u8::from(*mime == "G722")
            )
        })
        .collect();
    let mut lp = linphone::Linphonec::start(
        &dir,
        "sip_port=-1\nsip_tcp_port=0\nsip_tls_port=0\n\
         contact=\"linphone\" <sip:linphone@127.0.0.1>\nmedia_encryption=none",
        free_port_range(10),
        &codecs,
    );
    for cmd in [
        "codec list".to_string(),
        "soundcard use files".to_string(),
        format!("play {}", caller.path.display()),
        format!("record {}", heard.display()),
        format!("call sip:bot@{}", gw.sip),
    ] {
        lp.send(&cmd);
    }
    // Answered, or refused (then the assertion says so at once).
    let answered = wait_until(Duration::from_secs(20), || {
        gw.metric("ontime_calls_active") == Some(1.0)
            || gw.metric("ontime_calls_rejected_total{reason=\"no_common_codec\"}") != Some(0.0)
    }) && gw.metric("ontime_calls_active") == Some(1.0);
    assert!(
        answered,
        "linphonec's call was not answered (no G.722 in the gateway yet?): {}\n{}\n{}",
        gw.metrics_text()
            .lines()
            .find(|l| l.starts_with("ontime_calls_rejected_total{reason=\"no_common_codec\"}"))
            .unwrap_or("no rejection metric"),
        lp.logs(),
        gw.stderr()
    );
    // Let the WAV play out (speech, then the reply heard over its trailing silence), hang up.
    std::thread::sleep(Duration::from_secs_f64(caller.secs));
    let out = lp.output();
    let (ended, log) = lp.hang_up(|| gw.metric("ontime_calls_active") == Some(0.0));
    assert!(ended, "linphonec's call did not end:\n{log}");
    // Its codec list had G722 alone enabled, it offered G722 alone, the gateway answered with it.
    let enabled: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_end().ends_with(" enabled"))
        .map(|l| l.trim())
        .collect();
    assert!(
        enabled.len() == 1 && enabled[0].contains("G722 (8000) enabled"),
        "linphonec's enabled codecs: {enabled:?}\n{out}"
    );
    assert_eq!(
        sdp_codecs(&log, "INVITE sip:bot@", "linphonec"),
        ["9 G722/8000"],
        "linphonec offered more than G.722:\n{log}"
    );
    assert_eq!(
        sdp_codecs(&log, "o=ontime ", "linphonec"),
        ["9 G722/8000"],
        "the gateway's answer:\n{log}"
    );
    assert!(
        log.contains("Media streams established"),
        "linphonec's media did not start:\n{log}"
    );
    assert_heard_reply(&heard, caller.speech_end, "linphonec", &log);
    assert_completed_g722_call(&gw, "linphonec");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_g711_only_gateway_refuses_a_g722_only_caller_with_488() {
    if !require("baresip") || !require("sox") {
        return;
    }
    let gw = start_gateway(&["--codecs", "PCMU,PCMA"]);
    let dir = run_dir("refused");
    let caller = caller_wav(&dir, 16000);
    let rec = write_baresip_config(&dir, &caller.path);
    let (log, closed) = run_baresip(&dir, &gw, Duration::from_secs(15));
    assert!(
        closed,
        "baresip's call did not end in 15 s:\n{log}\n{}",
        gw.stderr()
    );
    assert_eq!(
        sdp_codecs(&log, "INVITE sip:bot@", "baresip"),
        ["9 G722/8000"],
        "baresip offered more than G.722:\n{log}"
    );
    assert!(
        log.contains("session closed: 488 Not Acceptable Here"),
        "baresip's G.722-only call did not end in 488:\n{log}"
    );
    let warning = log
        .lines()
        .find(|l| l.starts_with("Warning:"))
        .unwrap_or_else(|| panic!("the 488 carries no Warning:\n{log}"));
    eprintln!("the gateway refused baresip's G.722-only offer: {warning}");
    assert!(
        warning.contains("no common codec"),
        "the 488's Warning does not say why: {warning}"
    );
    assert!(
        !log.contains("o=ontime "),
        "the gateway answered with SDP:\n{log}"
    );
    let body = gw.metrics_text();
    let value = |s: &str| metric_value(&body, s).unwrap_or_else(|| panic!("no {s}:\n{body}"));
    assert_eq!(
        value("ontime_calls_rejected_total{reason=\"no_common_codec\"}"),
        1.0,
        "{body}"
    );
    for result in ["completed", "failed", "cancelled"] {
        assert_eq!(
            value(&format!("ontime_calls_total{{result=\"{result}\"}}")),
            0.0,
            "{body}"
        );
    }
    assert_eq!(value("ontime_calls_active"), 0.0, "{body}");
    for codec in ["PCMU", "PCMA", "G722"] {
        assert_eq!(
            value(&format!("ontime_calls_by_codec_total{{codec=\"{codec}\"}}")),
            0.0,
            "{body}"
        );
    }
    // Nothing was recorded: no media ever flowed.
    let recorded = std::fs::read_dir(&rec).unwrap().count();
    assert_eq!(
        recorded, 0,
        "baresip recorded {recorded} files of a refused call"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The power of `hz` in `samples` at `rate` (Goertzel), as an amplitude: a full sine of
/// amplitude A reads A.
fn tone_amplitude(samples: &[i16], rate: u32, hz: f64) -> f64 {
    let w = 2.0 * std::f64::consts::PI * hz / f64::from(rate);
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &x in samples {
        let s0 = f64::from(x) + 2.0 * w.cos() * s1 - s2;
        s2 = s1;
        s1 = s0;
    }
    let power = s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2;
    2.0 * power.sqrt() / samples.len() as f64
}

/// 16 kHz end to end: a baresip caller on G.722 with a 6 kHz whistle in its speech, and a bot
/// that takes `audio/l16;rate=16000` and answers with a 5.5 kHz tone over a 440 Hz one. 8 kHz
/// audio cannot carry either tone; the bot hears the caller's whistle, and the caller hears
/// the bot's tone, each within a few dB of what was sent.
#[test]
fn a_16k_bot_and_a_g722_caller_hear_each_other_above_4_khz() {
    if !require("baresip") || !require("sox") {
        return;
    }
    const REPLY_AMPLITUDE: f64 = 4000.0;
    const WHISTLE_AMPLITUDE: f64 = 3000.0;
    // The bot's reply: 2 s of 440 Hz + 5.5 kHz at 16 kHz, little-endian.
    let reply: Vec<u8> = (0..32000)
        .flat_map(|n| {
            let t = n as f64 / 16000.0;
            let s = 4000.0 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()
                + REPLY_AMPLITUDE * (2.0 * std::f64::consts::PI * 5500.0 * t).sin();
            (s as i16).to_le_bytes()
        })
        .collect();
    let bot = bot::TestBot::start(vec![
        bot::Step::WaitMedia(150),
        bot::Step::Media {
            ulaw: std::sync::Arc::new(reply),
            chunk: 3333,
        },
        bot::Step::Mark("tone".into()),
    ]);
    let gw = start_gateway(&[
        "--agent",
        &bot.url(),
        "--ws-content-type",
        "audio/l16;rate=16000",
    ]);
    let dir = run_dir("l16-bot");
    // The caller: its utterance at 16 kHz with a 6 kHz whistle from 1.0 to 2.0 s.
    let caller = caller_wav(&dir, 16000);
    let mut speech: Vec<i16> = hound::WavReader::open(&caller.path)
        .unwrap()
        .into_samples::<i16>()
        .map_while(Result::ok)
        .collect();
    for (n, s) in speech.iter_mut().enumerate().take(32000).skip(16000) {
        let t = n as f64 / 16000.0;
        let whistle = WHISTLE_AMPLITUDE * (2.0 * std::f64::consts::PI * 6000.0 * t).sin();
        *s = (f64::from(*s) + whistle).clamp(-32768.0, 32767.0) as i16;
    }
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&caller.path, spec).unwrap();
    for s in &speech {
        w.write_sample(*s).unwrap();
    }
    w.finalize().unwrap();
    let rec = write_baresip_config(&dir, &caller.path);
    let (log, ended) = run_baresip(&dir, &gw, Duration::from_secs(40));
    assert!(ended, "baresip's call did not end:\n{log}\n{}", gw.stderr());
    let conn = bot
        .connection(0)
        .expect("the gateway never connected to the bot");
    assert_eq!(
        conn.events("start")[0].1["start"]["mediaFormat"],
        serde_json::json!({"encoding":"audio/l16","sampleRate":16000,"channels":1})
    );
    // What the bot heard: 640 bytes every 20 ms, the caller's own 16 kHz audio.
    let media = conn.events("media");
    let mut heard = Vec::new();
    for (_, m) in &media {
        let payload = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            m["media"]["payload"].as_str().unwrap(),
        )
        .unwrap();
        assert_eq!(payload.len(), 640);
        heard.extend(
            payload
                .chunks_exact(2)
                .map(|b| i16::from_le_bytes([b[0], b[1]])),
        );
    }
    assert!(media.len() > 300, "only {} media messages", media.len());
    // The loudest 0.5 s window of the whistle in what the bot heard (its position depends on
    // when the call's audio started).
    let whistle = heard
        .chunks(8000)
        .map(|c| tone_amplitude(c, 16000, 6000.0))
        .fold(0.0, f64::max);
    eprintln!("the bot heard the caller's 6 kHz whistle at amplitude {whistle:.0} (sent {WHISTLE_AMPLITUDE})");
    assert!(
        (WHISTLE_AMPLITUDE * 0.7..=WHISTLE_AMPLITUDE * 1.4).contains(&whistle),
        "the bot heard the 6 kHz whistle at {whistle:.0}, sent at {WHISTLE_AMPLITUDE}"
    );
    // What the caller heard: the bot's 5.5 kHz tone.
    let dec = std::fs::read_dir(&rec)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-dec.wav"))
        .unwrap_or_else(|| panic!("baresip recorded nothing:\n{log}\n{}", gw.stderr()));
    let (played, rate) = wav_samples(&dec, "baresip", &log);
    assert_eq!(rate, 16000);
    let tone = played
        .chunks(8000)
        .map(|c| tone_amplitude(c, 16000, 5500.0))
        .fold(0.0, f64::max);
    eprintln!(
        "baresip heard the bot's 5.5 kHz tone at amplitude {tone:.0} (sent {REPLY_AMPLITUDE})"
    );
    assert!(
        (REPLY_AMPLITUDE * 0.7..=REPLY_AMPLITUDE * 1.4).contains(&tone),
        "the caller heard the bot's 5.5 kHz tone at {tone:.0}, sent at {REPLY_AMPLITUDE}"
    );
    let body = gw.metrics_text();
    assert_eq!(
        metric_value(&body, "ontime_calls_by_codec_total{codec=\"G722\"}"),
        Some(1.0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
