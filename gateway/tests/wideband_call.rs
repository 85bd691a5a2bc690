//! Real SIP clients that offer only one wideband codec, G.722 or Opus, call the gateway over
//! plain UDP and must hear the stub's reply as the stub has it (not merely something loud): the
//! wideband counterpart of `baresip_call.rs` and of the linphonec call in `tls_srtp_interop.rs`.
//!
//! - baresip (Debian's package, only the codec's module loaded, `g722` or `opus`, and the
//!   account's `audio_codecs` limited to `G722/16000/1` or `opus/48000/2`) runs its audio at
//!   16 kHz: it speaks a committed utterance resampled to 16 kHz and records what it decodes
//!   (G.722 at 16 kHz; Opus at 48 kHz in two channels, both carrying the gateway's mono).
//! - linphonec (Debian's `linphone-cli`, in file mode) has every codec of its list disabled but
//!   the one.
//! - baresip on Opus once more with 5 % of the call's RTP packets dropped at random each way
//!   on loopback (`common/netem.rs`): the reply must still be heard.
//! - A gateway told to speak only G.711 (`--codecs PCMU,PCMA`) refuses baresip's G.722-only offer
//!   with 488 and counts it as `no_common_codec`.
//!
//! What the callers heard is compared with the reply itself: the stub's WAV (8 kHz) resampled
//! by sox to the recording's rate (16 or 48 kHz; a recording's channels are mixed down), then
//! the normalised cross-correlation of the two at every lag where the whole reply fits in the
//! recording (computed with an FFT). The recording is kept at its rate rather than decimated
//! to 8 kHz so that whatever the wideband path puts above 4 kHz (the gateway's 8 → 16 kHz
//! upsampler's images, the codec's noise there) counts against the figure instead of being
//! filtered away; the figure on the recording decimated to 8 kHz is printed beside it, to tell
//! such out-of-band noise from a garbled reply. (baresip's Opus recording reads low there, 0.92
//! against 0.96: its decoding delay is not a whole number of 8 kHz samples, and half a sample
//! off costs much at 8 kHz.)
//!
//! Each caller can decode nothing but the one codec (baresip has no other codec module loaded;
//! linphone negotiated that one only), so a reply heard and matching the reference also says
//! that the gateway's packets carried the negotiated payload type.

#[path = "common/bot.rs"]
mod bot;
mod common;
#[path = "common/netem.rs"]
mod netem;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The padding before and after the caller's utterance, in seconds. The reply (5.2 s) usually
/// starts 0.4-0.6 s after the speech; when Smart Turn judges the turn incomplete it starts 3 s
/// later, on the silence timeout, and must still fit.
const LEAD_SECS: f64 = 0.5;
const LISTEN_SECS: f64 = 10.0;

/// The one codec a test's caller offers, as each party names it.
struct Offer {
    /// The gateway's name for it: in `--codecs`, its admission line, the CDR and the label of
    /// `ontime_calls_by_codec_total`.
    name: &'static str,
    /// Its `a=rtpmap` encoding as [`sdp_codecs`] renders it.
    rtpmap: &'static str,
    /// baresip's codec module (`<module>.so`), the only one it loads.
    baresip_module: &'static str,
    /// The account's `audio_codecs`: the codec alone.
    baresip_codec: &'static str,
    /// The decoder baresip sets up for it (`audio: Set audio decoder: …`).
    baresip_decoder: &'static str,
    /// linphone's `[audio_codec_N]` mime and rate of it, the one entry left enabled.
    linphone: (&'static str, u32),
    /// The least normalised cross-correlation between the reference reply and what a caller
    /// heard.
    min_correlation: f64,
}

const G722: Offer = Offer {
    name: "G722",
    rtpmap: "G722/8000",
    baresip_module: "g722",
    baresip_codec: "G722/16000/1",
    baresip_decoder: "G722 16000Hz 1ch",
    linphone: ("G722", 8000),
    // Measured over loopback: baresip 0.9998, linphonec 0.9992 (mediastreamer decodes G.722
    // 6 dB louder than spandsp does, so the reply's peaks clip in its recording), run after
    // run. The bound is white noise at 17 dB SNR on baresip's recording; the first 200 ms of
    // the reply garbled gives 0.92, one 20 ms frame slipped 0.66, another sentence 0.10.
    min_correlation: 0.99,
};

const OPUS: Offer = Offer {
    name: "opus",
    rtpmap: "opus/48000/2",
    baresip_module: "opus",
    baresip_codec: "opus/48000/2",
    baresip_decoder: "opus 48000Hz 2ch",
    linphone: ("opus", 48000),
    // SILK keeps the reply's sound more than its waveform (G.722 codes the waveform): baresip
    // and linphonec both hear 0.9636, run after run. The bound is white noise at 15 dB SNR on
    // baresip's recording; the first 200 ms of the reply garbled gives 0.895, one 20 ms frame
    // slipped 0.56.
    min_correlation: 0.95,
};

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

/// Headless baresip in `dir` that offers `offer`'s codec only, with its audio at 16 kHz: speaks
/// `speech`, records what it decodes (`*-dec.wav`) in `dir/rec`. Only the codec's module is
/// loaded, and the account lists only that codec as well. SIP listens on free ports
/// (`sip_listen` port 0); `extra` is appended to its configuration. The recordings' folder,
/// and the ports its RTP may take.
fn write_baresip_config(
    dir: &Path,
    speech: &Path,
    offer: &Offer,
    extra: &str,
) -> (PathBuf, (u16, u16)) {
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
             module_path /usr/lib/baresip/modules\nmodule {}.so\nmodule sndfile.so\nsnd_path {}\n\
             module aufile.so\nmodule aubridge.so\nmodule_tmp account.so\nmodule_app menu.so\n\
             {extra}",
            speech.display(),
            offer.baresip_module,
            rec.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("accounts"),
        format!(
            "<sip:baresip@127.0.0.1>;regint=0;audio_codecs={}\n",
            offer.baresip_codec
        ),
    )
    .unwrap();
    (rec, (rtp_lo, rtp_hi))
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
    // Its closing statistics (`rtp_stats yes`) come when it frees the call, after the BYE: on a
    // busy machine that has taken longer than half a second, so wait for the table itself. A
    // refused call has none.
    if read().contains(" terminated (duration") {
        wait_until(Duration::from_secs(5), || {
            baresip_rtp_stats(&read()).is_some()
        });
    }
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

/// 16-bit samples of a WAV, its channels mixed down, and its rate. mediastreamer's recorder
/// writes the file's size as the data chunk's (44 bytes too many): read the samples there are.
fn wav_samples(path: &Path, who: &str, log: &str) -> (Vec<i16>, u32) {
    let reader = hound::WavReader::open(path)
        .unwrap_or_else(|e| panic!("{who} recording {}: {e}\n{log}", path.display()));
    let spec = reader.spec();
    assert_eq!(
        spec.bits_per_sample,
        16,
        "{who}: {} is not 16-bit",
        path.display()
    );
    let channels = usize::from(spec.channels);
    let samples: Vec<i16> = reader.into_samples::<i16>().map_while(Result::ok).collect();
    let mixed = samples
        .chunks_exact(channels)
        .map(|frame| (frame.iter().map(|&s| i32::from(s)).sum::<i32>() / channels as i32) as i16)
        .collect();
    (mixed, spec.sample_rate)
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

/// The length of the pieces [`pieces_match`] cuts the reply into, in seconds, and how many
/// whole 20 ms frames from the whole's lag each may sit.
const PIECE_SECS: f64 = 0.2;
const PIECE_SLIP_FRAMES: isize = 5;

/// The reference matched piece by piece around `lag` (the whole's best): each [`PIECE_SECS`]
/// of it at `lag` or up to [`PIECE_SLIP_FRAMES`] whole frames from it, wherever it matches
/// best, and the pieces' normalised cross-correlation pooled,
/// `Σ⟨ref_k, heard_k⟩ / (‖ref‖·√Σ‖heard_k‖²)`: the whole's figure when every piece sits at
/// `lag`. Whole frames only, because that is how a caller's concealment that plays one frame
/// for a run of lost packets shifts what follows. With each piece's offset from `lag`, in
/// frames.
fn pieces_match(reference: &[i16], heard: &[i16], lag: usize, rate: u32) -> (f64, Vec<isize>) {
    let piece = (PIECE_SECS * f64::from(rate)) as usize;
    let frame = rate as isize / 50;
    let energy = |s: &[i16]| s.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>();
    let dot = |a: &[i16], b: &[i16]| {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum::<f64>()
    };
    let (mut pooled_dot, mut heard_energy, mut offsets) = (0.0, 0.0, Vec::new());
    for (k, part) in reference.chunks(piece).enumerate() {
        let at = (lag + k * piece) as isize;
        let (d, e, slip) = (-PIECE_SLIP_FRAMES..=PIECE_SLIP_FRAMES)
            .filter_map(|slip| {
                let start = usize::try_from(at + slip * frame).ok()?;
                let matched = heard.get(start..start + part.len())?;
                Some((dot(part, matched), energy(matched), slip))
            })
            .max_by(|a, b| {
                let score = |(d, e, _): &(f64, f64, isize)| d / e.max(1.0).sqrt();
                score(a).total_cmp(&score(b))
            })
            .expect("the whole's lag fits the reference in the recording");
        pooled_dot += d;
        heard_energy += e;
        offsets.push(slip);
    }
    (
        pooled_dot / (energy(reference) * heard_energy).sqrt(),
        offsets,
    )
}

/// How closely what a caller heard must match the reply.
#[derive(Debug, Clone, Copy)]
enum Likeness {
    /// The whole reply at one lag: normalised cross-correlation above this.
    Whole(f64),
    /// The reply's pieces each at its own whole-frame offset ([`pieces_match`]): pooled
    /// normalised cross-correlation above this.
    Pieces(f64),
}

/// The caller's recording must hold the stub's reply after the caller's speech (the criterion
/// of `baresip_call.rs`: -40 dBFS frames, the first after the speech, over 2 s of them) and
/// match the reference reply as `likeness` asks, the reference's first loud frame placed
/// after the speech too.
fn assert_heard_reply(recording: &Path, speech_end: f64, likeness: Likeness, who: &str, log: &str) {
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
    let (figure, min, pieces) = match likeness {
        Likeness::Whole(min) => (rho, min, String::new()),
        Likeness::Pieces(min) => {
            let (pooled, offsets) = pieces_match(&reference, &heard, lag, rate);
            let slips: Vec<String> = offsets
                .iter()
                .enumerate()
                .filter(|&(k, &o)| k == 0 || o != offsets[k - 1])
                .map(|(k, &o)| format!("{o:+} from {:.1} s", k as f64 * PIECE_SECS))
                .collect();
            let pieces = format!(
                "; its {PIECE_SECS} s pieces, each at its best whole-frame offset, {pooled:.4} \
                 (offsets in frames: {})",
                slips.join(", ")
            );
            eprintln!("{who}: reply matched piece by piece{pieces}");
            (pooled, min, pieces)
        }
    };
    assert!(
        figure > min,
        "{who}: what the caller heard does not match the reply: peak normalised \
         cross-correlation {rho:.4} (at {:.3} s){pieces}, not above {min} (8 kHz figure: \
         {narrow:?}): the reply is garbled, or cut (recording {:.2} s, loud from {:.2} s, \
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

/// Every codec the gateway speaks, by its name.
const GATEWAY_CODECS: [&str; 4] = ["PCMU", "PCMA", "G722", "opus"];

/// The one call of a test ended completed on `offer`'s codec, with utterance 1's turns (or, with
/// `split_turn`, more, each but the last cut by the caller's next words): the metrics, the
/// gateway's admission line and its CDR say so.
fn assert_completed_call(gw: &Gateway, who: &str, offer: &Offer, split_turn: bool) {
    let body = gw.metrics_text();
    let value = |s: &str| metric_value(&body, s).unwrap_or_else(|| panic!("no {s}:\n{body}"));
    assert_eq!(
        value("ontime_calls_total{result=\"completed\"}"),
        1.0,
        "{who}:\n{body}"
    );
    let turns = value("ontime_turns_total");
    if split_turn {
        assert!(turns >= 1.0, "{who}: no turn:\n{body}");
        assert_eq!(
            value("ontime_barge_ins_total"),
            turns - 1.0,
            "{who}: turns other than the last not cut by the caller:\n{body}"
        );
    } else {
        assert_utterance_1_turns(&body, who);
    }
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
    // The gateway's own account of the codec: the CDR, the metric, the admission line.
    let log = gw.stdout();
    let ends = common::pipecat::cdr_end_records(gw);
    assert_eq!(ends.len(), 1, "{who}:\n{log}");
    assert_eq!(ends[0]["codec"], offer.name, "{who}: CDR {}", ends[0]);
    for codec in GATEWAY_CODECS {
        assert_eq!(
            value(&format!("ontime_calls_by_codec_total{{codec=\"{codec}\"}}")),
            if codec == offer.name { 1.0 } else { 0.0 },
            "{who}:\n{body}"
        );
    }
    let admitted: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| l.contains("call admitted"))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(admitted.len(), 1, "{who}:\n{log}");
    assert_eq!(
        admitted[0]["fields"]["codec"], offer.name,
        "{who}: the gateway's admission line names the codec otherwise than its SDP, CDR and \
         metrics do"
    );
}

/// The caller's offer (in `log`) held `offer`'s codec alone, and the gateway answered with it,
/// on the offer's payload type.
fn assert_offered_and_answered(log: &str, who: &str, offer: &Offer) {
    let offered = sdp_codecs(log, "INVITE sip:bot@", who);
    assert!(
        offered.len() == 1 && offered[0].split_once(' ').map(|(_, enc)| enc) == Some(offer.rtpmap),
        "{who} did not offer {} alone: {offered:?}\n{log}",
        offer.rtpmap
    );
    assert_eq!(
        sdp_codecs(log, "o=ontime ", who),
        offered,
        "the gateway's answer:\n{log}"
    );
}

/// From baresip's closing statistics (`rtp_stats yes`): the RTP packets it sent, and those it
/// counted lost of the ones sent to it.
fn baresip_rtp_stats(log: &str) -> Option<(u64, u64)> {
    let table = &log[log.find("Transmit:")?..];
    let row = |name: &str| -> Option<(u64, u64)> {
        let line = table.lines().find(|l| l.starts_with(name))?;
        let mut values = line[name.len()..].split_whitespace().map(str::parse);
        Some((values.next()?.ok()?, values.next()?.ok()?))
    };
    Some((row("packets:")?.0, row("lost:")?.1))
}

/// Random loss on a call's RTP, and how well the reply must still be heard through it.
struct Lossy {
    /// The share of packets dropped, each way.
    percent: u32,
    /// The least pooled normalised cross-correlation of the reply's pieces ([`pieces_match`]).
    min_pooled: f64,
    /// Lines for the caller's configuration.
    caller_config: &'static str,
    /// Whether the caller's packets carry FEC, so that the gateway rebuilds lost ones from it.
    caller_fec: bool,
}

/// baresip offering `offer`'s codec alone calls a gateway with its default codecs, speaks, and
/// must hear the reply. With `loss`, the call's RTP packets are dropped at random on loopback,
/// each way.
fn baresip_hears_the_reply(offer: &Offer, loss: Option<Lossy>) {
    if !require("baresip") || !require("sox") {
        return;
    }
    let gw = start_gateway(&[]);
    let dir = run_dir("baresip");
    let caller = caller_wav(&dir, 16000);
    let (rec, caller_rtp) = write_baresip_config(
        &dir,
        &caller.path,
        offer,
        loss.as_ref().map_or("", |l| l.caller_config),
    );
    // Destination ports: the gateway's range takes what baresip sends, baresip's what the
    // gateway sends. SIP is on other ports, so signalling stays whole.
    let guard = match loss
        .as_ref()
        .map(|l| netem::Loss::on_loopback(l.percent, &[gw.rtp_ports, caller_rtp]))
    {
        None => None,
        Some(Ok(guard)) => Some(guard),
        Some(Err(netem::Refusal::Unavailable(why))) => {
            eprintln!("SKIP: no packet loss on loopback: {why}");
            return;
        }
        Some(Err(netem::Refusal::Busy(why))) => panic!("{why}"),
    };
    let (log, ended) = run_baresip(&dir, &gw, Duration::from_secs(40));
    let dropped = guard.as_ref().map(netem::Loss::dropped);
    drop(guard);
    assert!(
        !log.contains("488 Not Acceptable Here"),
        "the gateway refused baresip's {}-only offer:\n{log}\n{}",
        offer.name,
        gw.stderr()
    );
    assert_offered_and_answered(&log, "baresip", offer);
    // What baresip set up for the received stream: the codec's decoder, and no packet of
    // another payload type made it switch (it logs "Audio decoder changed payload").
    assert!(
        log.contains(&format!(
            "audio: Set audio decoder: {}",
            offer.baresip_decoder
        )),
        "baresip's log does not name its {} decoder:\n{log}",
        offer.baresip_decoder
    );
    let rx = log
        .lines()
        .find(|l| l.starts_with("audio rx pipeline:"))
        .unwrap_or_else(|| panic!("baresip logged no rx pipeline:\n{log}"));
    let decoder = offer.baresip_decoder.split(' ').next().unwrap();
    assert!(rx.trim_end().ends_with(&format!("<--- {decoder}")), "{rx}");
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
    let likeness = match (&loss, dropped) {
        (Some(loss), Some(dropped)) => {
            assert_lost_both_ways(&gw, &log, loss, dropped);
            Likeness::Pieces(loss.min_pooled)
        }
        _ => Likeness::Whole(offer.min_correlation),
    };
    assert_heard_reply(&dec, caller.speech_end, likeness, "baresip", &log);
    // Under loss the gateway's jitter buffer now and then takes a lost packet for a late one:
    // on a path without jitter it plays a frame behind, so the next packet arrives just as the
    // lost one is due, and when it is not there yet the buffer grows a frame and conceals. The
    // VAD does not hear that inserted frame: heard, it stretched the utterance's pause after
    // its first word (160-190 ms) to the VAD's 192 ms stop, and the reply began on the first
    // word alone.
    assert_completed_call(&gw, "baresip", offer, loss.is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The loss filter dropped what `loss` comes to of the call's RTP packets (its own counter,
/// `dropped`, against a bound from the packets both ends sent), both ends saw packets go
/// missing, none but those the filter dropped, and the gateway rebuilt some from the caller's
/// FEC when it carries any.
fn assert_lost_both_ways(gw: &Gateway, log: &str, loss: &Lossy, dropped: u64) {
    let (caller_sent, caller_lost) = baresip_rtp_stats(log)
        .unwrap_or_else(|| panic!("baresip printed no RTP statistics:\n{log}"));
    let ends = common::pipecat::cdr_end_records(gw);
    let cdr = ends
        .first()
        .unwrap_or_else(|| panic!("no CDR:\n{}", gw.stdout()));
    let count = |field: &str| {
        cdr[field]
            .as_u64()
            .unwrap_or_else(|| panic!("CDR without {field}: {cdr}"))
    };
    let (gateway_sent, gateway_lost, rebuilt) =
        (count("packets_out"), count("lost"), count("fec_recovered"));
    // RTCP crosses the same ports and may be dropped too: counting RTP alone keeps the bound
    // on the safe side.
    let packets = caller_sent + gateway_sent;
    let least = netem::least_drops(packets, loss.percent);
    eprintln!(
        "loss: {dropped} packets dropped of {packets} RTP sent ({caller_sent} by baresip, \
         {gateway_sent} by the gateway; at least {least} expected at {} %); baresip counted \
         {caller_lost} lost, the gateway {gateway_lost} lost and {rebuilt} of them rebuilt from FEC",
        loss.percent
    );
    assert!(
        dropped >= least,
        "the filter dropped {dropped} of {packets} RTP packets, under the {least} that {} % \
         comes to at the least",
        loss.percent
    );
    assert!(
        caller_lost > 0,
        "baresip lost none of the gateway's packets:\n{log}"
    );
    assert!(
        gateway_lost > 0,
        "the gateway lost none of baresip's packets: {cdr}"
    );
    assert!(
        caller_lost + gateway_lost <= dropped,
        "the ends lost {caller_lost} + {gateway_lost} packets, more than the {dropped} dropped"
    );
    if loss.caller_fec {
        assert!(
            rebuilt > 0,
            "the gateway rebuilt none of {gateway_lost} lost packets from the caller's FEC: {cdr}"
        );
    }
}

#[test]
fn baresip_offering_only_g722_hears_the_reply() {
    baresip_hears_the_reply(&G722, None);
}

#[test]
fn baresip_offering_only_opus_hears_the_reply() {
    baresip_hears_the_reply(&OPUS, None);
}

#[test]
fn baresip_offering_only_opus_hears_the_reply_under_5_percent_loss() {
    baresip_hears_the_reply(
        &OPUS,
        Some(Lossy {
            percent: 5,
            // Measured 0.93-0.96 over 16 runs (0.9636 without loss; the lowest, 0.927, with
            // three slips). The bound is a tenth of the reply's loud frames silenced (0.893 on
            // a recording without loss), or white noise at 8 dB SNR (0.894).
            min_pooled: 0.9,
            // Makes baresip rebuild a lost packet from the FEC the gateway's next one carries,
            // and send FEC itself (the answer says `useinbandfec=1`): planning for that much
            // loss turns its encoder to SILK, the mode that carries it.
            caller_config: "opus_packet_loss 10\n",
            caller_fec: true,
        }),
    );
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

/// linphonec with `offer`'s codec alone enabled calls a gateway with its default codecs,
/// speaks, and must hear the reply.
fn linphonec_hears_the_reply(offer: &Offer) {
    if !require("linphonec") || !require("sox") {
        return;
    }
    let gw = start_gateway(&[]);
    let dir = run_dir("linphone");
    let caller = caller_wav(&dir, 16000);
    let heard = dir.join("heard.wav");
    // UDP on a random port, no TCP or TLS listener; the offer's codec the only one enabled.
    let codecs: String = LINPHONE_CODECS
        .iter()
        .enumerate()
        .map(|(i, (mime, rate, channels))| {
            format!(
                "[audio_codec_{i}]\nmime={mime}\nrate={rate}\nchannels={channels}\nenabled={}\n\n",
                u8::from((*mime, *rate) == offer.linphone)
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
        "linphonec's {}-only call was not answered: {}\n{}\n{}",
        offer.name,
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
    // Its codec list had the one codec enabled, it offered that alone, the gateway answered
    // with it.
    let enabled: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_end().ends_with(" enabled"))
        .map(|l| l.trim())
        .collect();
    let (mime, rate) = offer.linphone;
    assert!(
        enabled.len() == 1 && enabled[0].contains(&format!("{mime} ({rate}) enabled")),
        "linphonec's enabled codecs: {enabled:?}\n{out}"
    );
    assert_offered_and_answered(&log, "linphonec", offer);
    assert!(
        log.contains("Media streams established"),
        "linphonec's media did not start:\n{log}"
    );
    assert_heard_reply(
        &heard,
        caller.speech_end,
        Likeness::Whole(offer.min_correlation),
        "linphonec",
        &log,
    );
    assert_completed_call(&gw, "linphonec", offer, false);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn linphonec_offering_only_g722_hears_the_reply() {
    linphonec_hears_the_reply(&G722);
}

#[test]
fn linphonec_offering_only_opus_hears_the_reply() {
    linphonec_hears_the_reply(&OPUS);
}

#[test]
fn a_g711_only_gateway_refuses_a_g722_only_caller_with_488() {
    if !require("baresip") || !require("sox") {
        return;
    }
    let gw = start_gateway(&["--codecs", "PCMU,PCMA"]);
    let dir = run_dir("refused");
    let caller = caller_wav(&dir, 16000);
    let (rec, _) = write_baresip_config(&dir, &caller.path, &G722, "");
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
    for codec in GATEWAY_CODECS {
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
    let (rec, _) = write_baresip_config(&dir, &caller.path, &G722, "");
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
