//! Caller speech fixtures (8 kHz mono µ-law WAV) and the silence test for received frames.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
/// Other payload types count as silence: the harness offers only PCMU and PCMA.
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
        assert!(all.len() >= 4);
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

    proptest::proptest! {
        #[test]
        fn parser_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse_ulaw_wav(&bytes, Path::new("fuzz.wav"));
        }
    }
}
