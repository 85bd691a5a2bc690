//! Caller speech fixtures (8 kHz mono µ-law WAV) and the silence test for received frames; the
//! same speech as a G.722 or Opus caller sends it ([`G722Speech`], [`OpusSpeech`]), and the ear
//! that judges a G.722 or Opus stream's frames ([`Ear`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ontime_rtp::resample::{Downsampler, Upsampler};
use ontime_rtp::{
    g722, Codec, FRAME_BYTES, PT_G722, SAMPLES_PER_FRAME, WIDEBAND_SAMPLES_PER_FRAME,
};
use ontime_rtp::{PT_PCMA, PT_PCMU, SAMPLE_RATE_HZ};

use crate::{Error, Result};

/// WAVE format tag of ITU-T G.711 µ-law (RFC 2361, `WAVE_FORMAT_MULAW`).
const WAVE_FORMAT_MULAW: u16 = 7;

/// A frame is agent audio when some sample reaches this magnitude (of 32767, about −54 dBFS):
/// the gateway's idle packets are digital silence, espeak's pauses stay below it.
pub const SILENCE_THRESHOLD: i16 = 64;

/// Speech shorter than this is never split by a mid-sentence pause ([`Utterance::pause_point`]).
pub const MIN_PAUSABLE: std::time::Duration = std::time::Duration::from_millis(1200);

/// One recorded caller utterance.
#[derive(Debug, Clone)]
pub struct Utterance {
    /// File name, for logs.
    pub name: String,
    /// The G.711 µ-law bytes (8000 per second).
    pub ulaw: Arc<[u8]>,
}

impl Utterance {
    /// An utterance from µ-law bytes.
    pub fn new(name: impl Into<String>, ulaw: impl Into<Arc<[u8]>>) -> Utterance {
        Utterance {
            name: name.into(),
            ulaw: ulaw.into(),
        }
    }

    /// Bytes up to the end of the last frame that is not silence: the speech ends there, and
    /// the file's trailing quiet is not part of the turn.
    pub fn voiced_end(&self) -> usize {
        let frame = ontime_rtp::FRAME_BYTES;
        let frames = self.ulaw.len().div_ceil(frame);
        (0..frames)
            .rev()
            .find(|&i| {
                let end = ((i + 1) * frame).min(self.ulaw.len());
                !is_silent_payload(&self.ulaw[i * frame..end], PT_PCMU)
            })
            .map_or(0, |i| ((i + 1) * frame).min(self.ulaw.len()))
    }

    /// Where a caller could pause mid-sentence: the byte index of the start of the quietest
    /// 20 ms frame between 40 % and 70 % of the speech (a gap between two words; quietest by
    /// the decoded frame's energy). None for speech shorter than [`MIN_PAUSABLE`] (a short
    /// answer such as "Yes." is said in one go).
    pub fn pause_point(&self) -> Option<usize> {
        let frame = ontime_rtp::FRAME_BYTES;
        let voiced_end = self.voiced_end();
        let first = (0..voiced_end / frame)
            .find(|&i| !is_silent_payload(&self.ulaw[i * frame..(i + 1) * frame], PT_PCMU))?;
        let frames = voiced_end / frame - first;
        if (frames * frame) < MIN_PAUSABLE.as_millis() as usize * 8 {
            return None;
        }
        let energy = |i: usize| -> u64 {
            let mut pcm = [0i16; ontime_rtp::FRAME_BYTES];
            ontime_rtp::g711::ulaw_decode_slice(&self.ulaw[i * frame..(i + 1) * frame], &mut pcm);
            pcm.iter()
                .map(|&s| (i64::from(s) * i64::from(s)) as u64)
                .sum()
        };
        let (lo, hi) = (first + frames * 2 / 5, first + frames * 7 / 10);
        (lo..=hi).min_by_key(|&i| energy(i)).map(|i| i * frame)
    }

    /// Length in milliseconds.
    pub fn duration_ms(&self) -> u64 {
        self.ulaw.len() as u64 * 1000 / u64::from(SAMPLE_RATE_HZ)
    }
}

fn wav_err(path: &Path, reason: impl Into<String>) -> Error {
    Error::Wav {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The µ-law samples of an 8 kHz mono µ-law WAV. Parsed by hand because `hound` reads only PCM
/// and float WAVs; a RIFF chunk walk is all µ-law needs.
pub fn parse_ulaw_wav(bytes: &[u8], path: &Path) -> Result<Vec<u8>> {
    if bytes.get(0..4) != Some(b"RIFF") || bytes.get(8..12) != Some(b"WAVE") {
        return Err(wav_err(path, "not a RIFF/WAVE file"));
    }
    let mut at = 12usize;
    let mut format_ok = false;
    while let (Some(id), Some(size)) = (bytes.get(at..at + 4), le_u32(bytes, at + 4)) {
        let body = at + 8;
        let size = size as usize;
        let Some(chunk) = bytes.get(body..body.saturating_add(size)) else {
            return Err(wav_err(
                path,
                format!("chunk at byte {at} claims {size} bytes past the end of the file"),
            ));
        };
        match id {
            b"fmt " => {
                let (Some(tag), Some(channels), Some(rate), Some(bits)) = (
                    le_u16(chunk, 0),
                    le_u16(chunk, 2),
                    le_u32(chunk, 4),
                    le_u16(chunk, 14),
                ) else {
                    return Err(wav_err(path, "fmt chunk shorter than 16 bytes"));
                };
                if tag != WAVE_FORMAT_MULAW || channels != 1 || rate != SAMPLE_RATE_HZ || bits != 8
                {
                    return Err(wav_err(
                        path,
                        format!(
                            "format tag {tag}, {channels} channel(s), {rate} Hz, {bits} bits; \
                             need µ-law (7), mono, {SAMPLE_RATE_HZ} Hz, 8 bits \
                             (sox in.wav -r 8000 -c 1 -e mu-law out.wav)"
                        ),
                    ));
                }
                format_ok = true;
            }
            b"data" if format_ok => {
                if chunk.is_empty() {
                    return Err(wav_err(path, "empty data chunk"));
                }
                return Ok(chunk.to_vec());
            }
            b"data" => return Err(wav_err(path, "data chunk before the fmt chunk")),
            _ => {}
        }
        // RIFF chunks are padded to an even length.
        at = body + size + (size & 1);
    }
    Err(wav_err(path, "no data chunk"))
}

/// Load one µ-law WAV.
pub fn load_ulaw_wav(path: &Path) -> Result<Utterance> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        action: "read caller WAV",
        path: path.to_owned(),
        source,
    })?;
    let ulaw = parse_ulaw_wav(&bytes, path)?;
    Ok(Utterance::new(
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        ulaw,
    ))
}

/// Every `*.ulaw.wav` in `dir`, sorted by name.
pub fn load_callers_dir(dir: &Path) -> Result<Vec<Utterance>> {
    let io = |source| Error::Io {
        action: "list caller fixtures in",
        path: dir.to_owned(),
        source,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".ulaw.wav"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(Error::Invalid {
            what: "callers directory",
            reason: format!("{} holds no *.ulaw.wav", dir.display()),
        });
    }
    paths.iter().map(|p| load_ulaw_wav(p)).collect()
}

/// Whether a received G.711 payload is silence (every sample below [`SILENCE_THRESHOLD`]).
/// Other payload types count as silence here: G.722 needs the stream's decoder ([`Ear`]).
pub fn is_silent_payload(payload: &[u8], payload_type: u8) -> bool {
    let mut samples = [0i16; ontime_rtp::FRAME_BYTES];
    let mut rest = payload;
    while !rest.is_empty() {
        let n = rest.len().min(samples.len());
        let decoded = match payload_type {
            PT_PCMU => ontime_rtp::g711::ulaw_decode_slice(&rest[..n], &mut samples[..n]),
            PT_PCMA => ontime_rtp::g711::alaw_decode_slice(&rest[..n], &mut samples[..n]),
            _ => return true,
        };
        if samples[..decoded]
            .iter()
            .any(|s| s.unsigned_abs() >= SILENCE_THRESHOLD.unsigned_abs())
        {
            return false;
        }
        rest = &rest[n..];
    }
    true
}

/// One utterance as a G.722 caller sends it: the µ-law recording decoded, upsampled to 16 kHz
/// (`ontime_rtp::resample`, lead-in dropped, so byte `i` of every piece covers the same 125 µs
/// as µ-law byte `i`: G.722 at 64 kbit/s is one byte per 8 kHz sample, and
/// [`Utterance::voiced_end`] and [`Utterance::pause_point`] index both alike) and G.722-encoded
/// ahead of time. Each piece the caller pushes on its own is encoded from
/// [`g722::Encoder::after_silence`]: the caller's sender fills the line with
/// [`g722::SILENCE_BYTE`] before it (between turns, and in a mid-sentence pause), which leaves
/// the far decoder in that state, so the gateway decodes each piece as it was meant: exactly
/// from a new decoder; after earlier speech the fill leaves a small residue (see
/// `ontime_rtp::g722`), and on the committed fixtures, which start with quiet frames, a piece's
/// first 100 ms then decode within 51 dB or better of an in-step decode, and identically after.
#[derive(Debug, Clone)]
pub struct G722Speech {
    /// The utterance said in one go (the bytes before and after its speech's end are pushed
    /// back to back, so they are one piece).
    pub whole: Arc<[u8]>,
    /// Paused at [`Utterance::pause_point`]: the part before the pause point and the part
    /// from it to the end, each encoded on its own. None when the utterance has no pause point.
    pub split: Option<G722Split>,
}

/// An utterance cut at its pause point for G.722, each part encoded from the after-silence
/// state (the caller's mid-sentence pause is line silence between them).
#[derive(Debug, Clone)]
pub struct G722Split {
    /// Up to the pause point.
    pub head: Arc<[u8]>,
    /// From the pause point to the end.
    pub tail: Arc<[u8]>,
}

impl G722Speech {
    /// Encodes `utterance` (µ-law) for a G.722 caller.
    pub fn new(utterance: &Utterance) -> G722Speech {
        let wide = upsample_ulaw(&utterance.ulaw);
        G722Speech {
            whole: encode_g722_after_silence(&wide).into(),
            split: utterance.pause_point().map(|at| G722Split {
                head: encode_g722_after_silence(&wide[..2 * at]).into(),
                tail: encode_g722_after_silence(&wide[2 * at..]).into(),
            }),
        }
    }
}

/// µ-law (8 kHz) to 16 kHz PCM, two samples per byte, with no lag: the upsampler's
/// [`Upsampler::DELAY_16K`] lead-in is dropped and its held-back tail flushed, so sample `2i`
/// is µ-law sample `i` (the interpolation of the recording with silence around it).
pub fn upsample_ulaw(ulaw: &[u8]) -> Vec<i16> {
    let mut narrow = vec![0i16; ulaw.len()];
    ontime_rtp::g711::ulaw_decode_slice(ulaw, &mut narrow);
    let mut wide = vec![0i16; 2 * ulaw.len() + Upsampler::DELAY_16K];
    let mut up = Upsampler::new();
    let n = up.process(&narrow, &mut wide);
    let n = n + up.flush(&mut wide[n..]);
    wide.truncate(n);
    wide.drain(..Upsampler::DELAY_16K.min(wide.len()));
    wide
}

/// One utterance as an Opus caller sends it: upsampled like [`G722Speech`] and encoded ahead of
/// time into 20 ms packets padded to [`ontime_rtp::FRAME_BYTES`] bytes (libopus with
/// the gateway's own settings, `ontime_rtp::opus`). Packet `k` covers µ-law bytes
/// `160k..160k+160`, so byte positions that are whole frames index both alike; the last packet
/// is padded with silence to its 20 ms. Cut points (the pause point) must be whole frames.
#[derive(Debug, Clone)]
pub struct OpusSpeech {
    /// The utterance said in one go.
    pub whole: Arc<[u8]>,
    /// Paused at [`Utterance::pause_point`] (a whole frame): before it and from it, each
    /// encoded on its own.
    pub split: Option<G722Split>,
}

impl OpusSpeech {
    /// Encodes `utterance` (µ-law) for an Opus caller.
    pub fn new(utterance: &Utterance) -> std::result::Result<OpusSpeech, String> {
        let wide = upsample_ulaw(&utterance.ulaw);
        let split = match utterance.pause_point() {
            Some(at) => {
                let at = at / ontime_rtp::FRAME_BYTES * ontime_rtp::FRAME_BYTES;
                Some(G722Split {
                    head: encode_opus(&wide[..2 * at])?.into(),
                    tail: encode_opus(&wide[2 * at..])?.into(),
                })
            }
            None => None,
        };
        Ok(OpusSpeech {
            whole: encode_opus(&wide)?.into(),
            split,
        })
    }
}

/// libopus's default complexity, which a phone's encoder runs at unless told otherwise.
const PHONE_COMPLEXITY: i32 = 9;

/// 16 kHz PCM to constant-size Opus packets, back to back, the last padded with silence.
pub fn encode_opus(pcm16k: &[i16]) -> std::result::Result<Vec<u8>, String> {
    let opus_err = |e: ontime_rtp::Error| format!("Opus encoder: {e}");
    // A phone's encoder: libopus's default complexity, not the gateway's cheap one (the models
    // judge what the caller's phone sent, and a lower complexity moves their verdicts:
    // docs/capacity.md, *Opus calls*).
    let mut encoder =
        ontime_rtp::opus::Encoder::with_complexity(PHONE_COMPLEXITY).map_err(opus_err)?;
    let mut out = Vec::with_capacity(pcm16k.len() / 2 + ontime_rtp::FRAME_BYTES);
    for chunk in pcm16k.chunks(WIDEBAND_SAMPLES_PER_FRAME) {
        let mut frame = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        frame[..chunk.len()].copy_from_slice(chunk);
        let mut packet = [0u8; ontime_rtp::FRAME_BYTES];
        encoder.encode(&frame, &mut packet).map_err(opus_err)?;
        out.extend_from_slice(&packet);
    }
    Ok(out)
}

/// 16 kHz PCM to G.722 (one byte per two samples), encoded from the state a far decoder is in
/// after a run of [`g722::SILENCE_BYTE`].
pub fn encode_g722_after_silence(pcm16k: &[i16]) -> Vec<u8> {
    let mut encoder = g722::Encoder::after_silence();
    let mut out = vec![g722::SILENCE_BYTE; pcm16k.len() / 2];
    let n = encoder.encode(pcm16k, &mut out);
    out.truncate(n);
    out
}

/// How a caller judges the frames of its stream, sent or received: G.711 frames each on its own
/// ([`is_silent_payload`]); G.722 frames through one decoder and one 16 → 8 kHz downsampler per
/// stream, which must be fed every frame of the stream, silence included, in order (G.722 is
/// backward-adaptive ADPCM: a frame decodes right only after the ones before it). A G.722 frame
/// is silence when every sample of its 8 kHz version is below [`SILENCE_THRESHOLD`]: the G.711
/// rule on the same band. Why 8 kHz and not the decoded 16 kHz samples: after speech, the
/// silence fill decodes to a residue of the decoder's state (`ontime_rtp::g722`: up to about 50
/// of 32767 at 16 kHz), and part of it is upper-band ringing that the downsampler's low-pass
/// removes (after 200 ms faint 1 kHz tones, peak 20–60: 0–26 at 8 kHz, 16–50 at 16 kHz):
/// judged at 16 kHz, line silence would sit just below the threshold. The cost is the
/// downsampler's 31-sample (3.9 ms) lag, on top of the codec's own 11 (1.4 ms): a frame's verdict
/// covers audio that ends 42 samples before the packet's end, so an edge in a packet's last
/// 5.25 ms counts in the next packet, on the sending and the receiving side alike.
/// Payload types other than the stream's are judged as [`is_silent_payload`] does and do not
/// touch the decoder. No allocation after construction.
/// Opus frames go the same way through one libopus decoder (at 16 kHz) and downsampler: the
/// payload type is [`ontime_rtp::PT_OPUS_OFFER`], the one the callers offer and the gateway
/// answers with; a packet libopus refuses is silence.
#[derive(Debug, Default)]
pub struct Ear {
    g722: Option<Box<(g722::Decoder, Downsampler)>>,
    opus: Option<Box<(ontime_rtp::opus::Decoder, Downsampler)>>,
}

impl Ear {
    /// An ear for a stream of `codec` (a fresh decoder for G.722 and Opus).
    pub fn new(codec: Codec) -> Ear {
        Ear {
            g722: (codec == Codec::G722)
                .then(|| Box::new((g722::Decoder::new(), Downsampler::new()))),
            opus: (codec == Codec::Opus)
                .then(|| ontime_rtp::opus::Decoder::new().ok())
                .flatten()
                .map(|d| Box::new((d, Downsampler::new()))),
        }
    }

    /// Whether the ear keeps state, so that every frame must go through [`Ear::is_silent`].
    pub fn is_stateful(&self) -> bool {
        self.g722.is_some() || self.opus.is_some()
    }

    /// Whether `payload` (of `payload_type`) is silence; G.722 and Opus payloads are decoded,
    /// in order.
    pub fn is_silent(&mut self, payload: &[u8], payload_type: u8) -> bool {
        match (&mut self.g722, &mut self.opus, payload_type) {
            (Some(g722), _, PT_G722) => {
                let (decoder, down) = &mut **g722;
                is_silent_g722(decoder, down, payload)
            }
            (_, Some(opus), ontime_rtp::PT_OPUS_OFFER) => {
                let (decoder, down) = &mut **opus;
                let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                let mut narrow = [0i16; SAMPLES_PER_FRAME];
                if decoder.decode(payload, &mut wide).is_err() {
                    return true;
                }
                let n = down.process(&wide, &mut narrow);
                narrow[..n]
                    .iter()
                    .all(|s| s.unsigned_abs() < SILENCE_THRESHOLD.unsigned_abs())
            }
            _ => is_silent_payload(payload, payload_type),
        }
    }
}

/// Decodes and downsamples all of `payload` (every byte, whatever the verdict: the decoder's
/// and the downsampler's state must follow the stream) and says whether every 8 kHz sample is
/// below the threshold.
fn is_silent_g722(decoder: &mut g722::Decoder, down: &mut Downsampler, payload: &[u8]) -> bool {
    let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
    let mut narrow = [0i16; SAMPLES_PER_FRAME];
    let mut silent = true;
    for chunk in payload.chunks(FRAME_BYTES) {
        let n = decoder.decode(chunk, &mut wide);
        let n = down.process(&wide[..n], &mut narrow);
        silent &= narrow[..n]
            .iter()
            .all(|s| s.unsigned_abs() < SILENCE_THRESHOLD.unsigned_abs());
    }
    silent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav(tag: u16, rate: u32, data: &[u8]) -> Vec<u8> {
        let mut v = b"RIFF\0\0\0\0WAVEfmt ".to_vec();
        v.extend(18u32.to_le_bytes());
        v.extend(tag.to_le_bytes());
        v.extend(1u16.to_le_bytes());
        v.extend(rate.to_le_bytes());
        v.extend(rate.to_le_bytes());
        v.extend(1u16.to_le_bytes());
        v.extend(8u16.to_le_bytes());
        v.extend(0u16.to_le_bytes());
        v.extend(b"data");
        v.extend((data.len() as u32).to_le_bytes());
        v.extend(data);
        v
    }

    #[test]
    fn parses_ulaw_and_rejects_others() {
        let p = Path::new("x.wav");
        assert_eq!(
            parse_ulaw_wav(&wav(7, 8000, &[1, 2, 3]), p).unwrap(),
            [1, 2, 3]
        );
        let e = parse_ulaw_wav(&wav(1, 8000, &[1]), p).unwrap_err();
        assert!(e.to_string().contains("format tag 1"), "{e}");
        let e = parse_ulaw_wav(&wav(7, 16000, &[1]), p).unwrap_err();
        assert!(e.to_string().contains("16000 Hz"), "{e}");
        let mut truncated = wav(7, 8000, &[1, 2, 3]);
        truncated.truncate(truncated.len() - 2);
        assert!(parse_ulaw_wav(&truncated, p).is_err());
        assert!(parse_ulaw_wav(b"RIFX", p).is_err());
    }

    #[test]
    fn committed_fixtures_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/callers");
        let all = load_callers_dir(&dir).unwrap();
        // utterance_1 … utterance_4.
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|u| u.duration_ms() > 500));
        for u in &all {
            let end = u.voiced_end();
            assert!(
                end > u.ulaw.len() / 2 && end <= u.ulaw.len(),
                "{}: {end}",
                u.name
            );
        }
        let quiet_tail = Utterance::new("t", [&[0x10u8; 320][..], &[0xFF; 500][..]].concat());
        assert_eq!(quiet_tail.voiced_end(), 320);
    }

    #[test]
    fn the_fixtures_pause_between_words_and_the_short_answer_does_not() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/callers");
        let all = load_callers_dir(&dir).unwrap();
        let points: Vec<Option<usize>> = all.iter().map(Utterance::pause_point).collect();
        // "Yes." (utterance 3) is said in one go; the three sentences get a point on a frame
        // boundary inside their speech.
        assert_eq!(
            points.iter().filter(|p| p.is_none()).count(),
            1,
            "{points:?}"
        );
        for (u, p) in all.iter().zip(&points) {
            let Some(p) = *p else {
                assert!(u.name.contains("utterance_3"), "{}", u.name);
                continue;
            };
            assert_eq!(p % ontime_rtp::FRAME_BYTES, 0);
            assert!(
                p > u.voiced_end() / 3 && p < u.voiced_end(),
                "{}: {p}",
                u.name
            );
        }
        // On made-up audio: the one quiet frame in the middle is the point.
        let mut speech = vec![0x10u8; 160 * 100];
        speech[160 * 55..160 * 56].fill(0xFF);
        assert_eq!(Utterance::new("s", speech).pause_point(), Some(160 * 55));
        assert_eq!(
            Utterance::new("short", vec![0x10u8; 160 * 50]).pause_point(),
            None
        );
    }

    #[test]
    fn silence_test() {
        assert!(is_silent_payload(&[0xFF; 160], PT_PCMU));
        assert!(is_silent_payload(&[0xD5; 160], PT_PCMA));
        let mut loud = [0xFF; 160];
        loud[80] = 0x10;
        assert!(!is_silent_payload(&loud, PT_PCMU));
    }

    fn fixtures() -> Vec<Utterance> {
        load_callers_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/callers"))
            .unwrap()
    }

    /// The frames of a byte stream cut into 20 ms payloads, judged by `ear`: true where voiced.
    fn voiced(ear: &mut Ear, payload_type: u8, stream: &[u8]) -> Vec<bool> {
        stream
            .chunks(FRAME_BYTES)
            .map(|frame| !ear.is_silent(frame, payload_type))
            .collect()
    }

    /// A sine at 8 kHz (`peak` of 32767), `n` samples.
    fn tone(hz: f64, peak: f64, n: usize) -> Vec<i16> {
        (0..n)
            .map(|i| (peak * (2.0 * std::f64::consts::PI * hz * i as f64 / 8000.0).sin()) as i16)
            .collect()
    }

    fn ulaw_of(pcm: &[i16]) -> Vec<u8> {
        let mut out = vec![0u8; pcm.len()];
        ontime_rtp::g711::ulaw_encode_slice(pcm, &mut out);
        out
    }

    #[test]
    fn g722_speech_keeps_the_recordings_byte_for_byte_timing() {
        let all = fixtures();
        assert_eq!(all.len(), 4);
        for u in &all {
            let g = G722Speech::new(u);
            // One G.722 byte per µ-law byte: the same 64 kbit/s, the same instants.
            assert_eq!(g.whole.len(), u.ulaw.len(), "{}", u.name);
            match (u.pause_point(), &g.split) {
                (Some(at), Some(split)) => {
                    assert_eq!(
                        (split.head.len(), split.tail.len()),
                        (at, u.ulaw.len() - at),
                        "{}",
                        u.name
                    );
                }
                (None, None) => assert!(u.name.contains("utterance_3"), "{}", u.name),
                (p, s) => panic!("{}: pause point {p:?}, split {:?}", u.name, s.is_some()),
            }
        }
        for n in [0, 1, 7, 160] {
            assert_eq!(upsample_ulaw(&vec![0x80; n]).len(), 2 * n);
            assert_eq!(encode_g722_after_silence(&vec![0; 2 * n]).len(), n);
        }
    }

    #[test]
    fn upsampled_speech_keeps_each_sample_in_its_place() {
        // A 440 Hz tone: every even 16 kHz sample is the 8 kHz sample it came from (no lag), to
        // within the half-band filter's ripple, away from the edges' lead-in and tail.
        let pcm = tone(440.0, 8000.0, 800);
        let ulaw = ulaw_of(&pcm);
        let mut narrow = vec![0i16; ulaw.len()];
        ontime_rtp::g711::ulaw_decode_slice(&ulaw, &mut narrow);
        let wide = upsample_ulaw(&ulaw);
        let worst = (64..736)
            .map(|i| (i32::from(wide[2 * i]) - i32::from(narrow[i])).abs())
            .max()
            .unwrap();
        assert!(worst <= 2, "worst difference {worst}");
    }

    /// Best lag (in 8 kHz samples, 0..=max_lag) of `got` behind `want`, and the SNR there (dB).
    fn snr_at_best_lag(want: &[i16], got: &[i16], max_lag: usize) -> (usize, f64) {
        (0..=max_lag)
            .map(|lag| {
                let (mut signal, mut noise) = (0f64, 0f64);
                for (i, &w) in want.iter().enumerate() {
                    let g = got.get(i + lag).copied().unwrap_or(0);
                    signal += f64::from(w).powi(2);
                    noise += (f64::from(w) - f64::from(g)).powi(2);
                }
                (lag, 10.0 * (signal / noise.max(1.0)).log10())
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
    }

    #[test]
    fn g722_speech_decodes_back_to_the_recording_after_line_silence() {
        for u in fixtures() {
            let g = G722Speech::new(&u);
            // The gateway's decoder: new, then line silence, then the utterance and silence.
            let mut stream = vec![g722::SILENCE_BYTE; 25 * FRAME_BYTES];
            stream.extend_from_slice(&g.whole);
            stream.extend_from_slice(&[g722::SILENCE_BYTE; 10 * FRAME_BYTES]);
            let mut decoder = g722::Decoder::new();
            let mut wide = vec![0i16; 2 * stream.len()];
            assert_eq!(decoder.decode(&stream, &mut wide), 2 * stream.len());
            let mut narrow = vec![0i16; stream.len()];
            assert_eq!(Downsampler::new().process(&wide, &mut narrow), stream.len());
            let mut want = vec![0i16; u.ulaw.len()];
            ontime_rtp::g711::ulaw_decode_slice(&u.ulaw, &mut want);
            let (lag, snr) = snr_at_best_lag(&want, &narrow[25 * FRAME_BYTES..], 80);
            eprintln!("{}: lag {lag} samples, SNR {snr:.1} dB", u.name);
            // The codec's own 11 samples plus the downsampler's 31, nothing from the encoding
            // (the upsampling adds no lag); 33.5–35.4 dB on the four fixtures.
            assert_eq!(lag, 11 + Downsampler::DELAY_8K, "{}", u.name);
            assert!(snr >= 30.0, "{}: SNR {snr:.1} dB", u.name);
        }
    }

    #[test]
    fn a_g722_stream_is_voiced_in_the_frames_the_ulaw_one_is() {
        let mut got = Vec::new();
        for u in fixtures() {
            let g = G722Speech::new(&u);
            // As a caller sends it: line silence, the utterance (its last frame padded with
            // silence), silence; and, where it has a pause point, paused there for 7271 bytes
            // (909 ms: the frames after the pause are off the utterance's 20 ms grid).
            let quiet = 7271;
            let stream = |silence: u8, pieces: &[&[u8]]| -> Vec<u8> {
                let mut v = vec![silence; 10 * FRAME_BYTES];
                for (i, piece) in pieces.iter().enumerate() {
                    if i > 0 {
                        v.extend(std::iter::repeat_n(silence, quiet));
                    }
                    v.extend_from_slice(piece);
                }
                let padded = v.len().next_multiple_of(FRAME_BYTES);
                v.resize(padded + 25 * FRAME_BYTES, silence);
                v
            };
            let mut cases = vec![(
                stream(0xFF, &[&u.ulaw]),
                stream(g722::SILENCE_BYTE, &[&g.whole]),
            )];
            if let (Some(at), Some(split)) = (u.pause_point(), &g.split) {
                cases.push((
                    stream(0xFF, &[&u.ulaw[..at], &u.ulaw[at..]]),
                    stream(g722::SILENCE_BYTE, &[&split.head, &split.tail]),
                ));
            }
            for (ulaw, g722) in cases {
                assert_eq!(ulaw.len(), g722.len());
                let heard_ulaw = voiced(&mut Ear::new(Codec::Pcmu), PT_PCMU, &ulaw);
                let heard_g722 = voiced(&mut Ear::new(Codec::G722), PT_G722, &g722);
                let count = |v: &[bool]| v.iter().filter(|&&x| x).count();
                let last = |v: &[bool]| v.iter().rposition(|&x| x);
                let first = |v: &[bool]| v.iter().position(|&x| x);
                let differ: Vec<usize> = (0..heard_ulaw.len())
                    .filter(|&i| heard_ulaw[i] != heard_g722[i])
                    .collect();
                eprintln!(
                    "{}: {} frames, voiced µ-law {} / G.722 {}, first {:?}/{:?}, last {:?}/{:?}, differ at {differ:?}",
                    u.name,
                    heard_ulaw.len(),
                    count(&heard_ulaw),
                    count(&heard_g722),
                    first(&heard_ulaw),
                    first(&heard_g722),
                    last(&heard_ulaw),
                    last(&heard_g722),
                );
                // The turn's edges are the same frames: where speech starts and where it ends.
                got.push((
                    count(&heard_ulaw),
                    count(&heard_g722),
                    first(&heard_ulaw),
                    first(&heard_g722),
                    last(&heard_ulaw),
                    last(&heard_g722),
                    differ.len(),
                ));
            }
        }
        // Per stream (utterances 1–4 said in one go, then 1, 2 and 4 paused): voiced frames
        // µ-law / G.722, the first voiced frame (µ-law, G.722), the last, and how many frames
        // the two disagree on. Speech starts in the same frame in every stream. Said in one go,
        // it ends in the same frame too; paused (the second piece off the 20 ms grid), the
        // G.722 verdict lags by 42 samples (codec 11 + downsampler 31) and two of the three end
        // one frame later. The other 11 of the 13 frames (of 1518) that differ are quiet between
        // words, either side of the threshold.
        let s = Some;
        assert_eq!(
            got,
            [
                (154, 154, s(10), s(10), s(179), s(179), 2),
                (154, 155, s(10), s(10), s(224), s(225), 3),
                (136, 136, s(12), s(12), s(150), s(150), 0),
                (135, 137, s(12), s(12), s(195), s(196), 2),
                (18, 18, s(10), s(10), s(27), s(27), 0),
                (181, 180, s(10), s(10), s(196), s(196), 1),
                (181, 182, s(10), s(10), s(242), s(242), 5),
            ]
        );
    }

    #[test]
    fn g722_silence_and_a_voiced_frame() {
        let mut ear = Ear::new(Codec::G722);
        assert!(ear.is_stateful() && !Ear::new(Codec::Pcmu).is_stateful());
        // Line silence from a new decoder: every frame silent.
        let line = [g722::SILENCE_BYTE; 50 * FRAME_BYTES];
        assert_eq!(voiced(&mut ear, PT_G722, &line), vec![false; 50]);
        // One frame of a 1 kHz tone at −20 dBFS, encoded from the after-silence state: voiced.
        let loud = encode_g722_after_silence(&upsample_ulaw(&ulaw_of(&tone(1000.0, 3277.0, 160))));
        assert_eq!(loud.len(), FRAME_BYTES);
        assert!(!ear.is_silent(&loud, PT_G722));
        // Then silence again: the frame after it carries the tone's last 42 samples (the
        // codec's and the downsampler's lag), every one after that is silent.
        let after = voiced(&mut ear, PT_G722, &line);
        assert_eq!(after.iter().filter(|&&v| v).count(), 1, "{after:?}");
        assert!(after[0]);
        // A tone whose samples stay below the threshold (peak 40) is silence, in µ-law as in
        // G.722 (decoded after line silence, as the gateway does).
        let faint_ulaw = ulaw_of(&tone(1000.0, 40.0, 800));
        assert!(is_silent_payload(&faint_ulaw, PT_PCMU));
        let faint = encode_g722_after_silence(&upsample_ulaw(&faint_ulaw));
        let mut fresh = Ear::new(Codec::G722);
        let mut stream = line[..10 * FRAME_BYTES].to_vec();
        stream.extend_from_slice(&faint);
        stream.extend_from_slice(&line[..10 * FRAME_BYTES]);
        assert_eq!(voiced(&mut fresh, PT_G722, &stream), vec![false; 25]);
        // A G.711 packet on a G.722 stream is judged as G.711 and leaves the decoder alone: a
        // second ear fed the same G.722 frames without it judges every frame alike.
        let mut twin = Ear::new(Codec::G722);
        let mut first = Ear::new(Codec::G722);
        let mut beep = [0xFFu8; FRAME_BYTES];
        beep[3] = 0x10;
        let frames = [
            &line[..FRAME_BYTES],
            &loud[..],
            &line[..FRAME_BYTES],
            &loud[..],
        ];
        let mut verdicts = Vec::new();
        for (i, frame) in frames.iter().enumerate() {
            if i == 2 {
                assert!(!first.is_silent(&beep, PT_PCMU));
            }
            let verdict = first.is_silent(frame, PT_G722);
            assert_eq!(verdict, twin.is_silent(frame, PT_G722), "frame {i}");
            verdicts.push(verdict);
        }
        assert_eq!(verdicts, [true, false, false, false]);
        // A PCMU ear is the stateless test, and does not hear G.722.
        let mut pcmu = Ear::new(Codec::Pcmu);
        assert!(pcmu.is_silent(&[0xFF; FRAME_BYTES], PT_PCMU));
        assert!(!pcmu.is_silent(&beep, PT_PCMU));
        assert!(pcmu.is_silent(&loud, PT_G722));
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse_ulaw_wav(&bytes, Path::new("fuzz.wav"));
        }
    }
}
