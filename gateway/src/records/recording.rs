//! Optional per-call recording (`--record DIR`): the caller's audio as decoded after the jitter
//! buffer, and the agent's audio as the real-time sender sent it (silence included), each a
//! 16-bit 8 kHz mono WAV streamed to disk through a buffer and finalised at hang-up.
//!
//! Both tracks share one timeline: sample `n` of either file is `n / 8000` s after the call was
//! answered. Audio is written at the position the call core gives ([`Track`] + sample index);
//! a gap is filled with silence and both files end at the same sample, so they line up when
//! played side by side or mixed.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use hound::{SampleFormat, WavSpec, WavWriter};
use ontime_rtp::{CHANNELS, SAMPLE_RATE_HZ};

type Writer = WavWriter<BufWriter<File>>;

/// Which side of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// What the caller said (after the jitter buffer).
    Caller,
    /// What the gateway sent to the caller.
    Agent,
}

/// Samples between header checkpoints: a crash loses at most the last second of a recording,
/// and the file stays readable (hound's `flush` rewrites the RIFF and data sizes).
const CHECKPOINT_SAMPLES: u64 = SAMPLE_RATE_HZ as u64;

/// One WAV and how many samples it holds.
struct TrackWriter {
    writer: Option<Writer>,
    written: u64,
    checkpointed: u64,
}

impl TrackWriter {
    fn samples(&mut self, pcm: impl IntoIterator<Item = i16>) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        for s in pcm {
            if w.write_sample(s).is_err() {
                // A full disk must not end the call: stop recording this side.
                self.writer = None;
                return;
            }
            self.written += 1;
        }
        if self.written >= self.checkpointed + CHECKPOINT_SAMPLES {
            self.checkpointed = self.written;
            if w.flush().is_err() {
                self.writer = None;
            }
        }
    }

    /// Write `pcm` so that its first sample lands at `at`: silence fills a gap; samples before
    /// what is already written are skipped (a stream cannot be rewritten).
    fn write_at(&mut self, at: u64, pcm: &[i16]) {
        if at > self.written {
            self.samples(std::iter::repeat_n(0, (at - self.written) as usize));
        }
        let skip = usize::try_from(self.written.saturating_sub(at))
            .unwrap_or(usize::MAX)
            .min(pcm.len());
        self.samples(pcm[skip..].iter().copied());
    }
}

/// The two WAV files of one call.
pub struct CallRecording {
    caller: TrackWriter,
    agent: TrackWriter,
    paths: [PathBuf; 2],
}

fn spec() -> WavSpec {
    WavSpec {
        channels: CHANNELS,
        sample_rate: SAMPLE_RATE_HZ,
        bits_per_sample: 16,
        sample_format: SampleFormat::Int,
    }
}

/// Keep a file name to what a call id may safely become on disk.
fn safe_name(call_id: &str) -> String {
    call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(96)
        .collect()
}

impl CallRecording {
    /// Whether recordings can be written into `dir` (created if missing): checked once at
    /// start-up, so an unwritable folder is a configuration error, not a warning per call.
    pub fn check_dir(dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let probe = dir.join(format!(".ontime-write-check-{}", std::process::id()));
        File::create(&probe)?;
        std::fs::remove_file(&probe)
    }

    /// Create `<dir>/<call-id>.caller.wav` and `<dir>/<call-id>.agent.wav`.
    pub fn create(dir: &Path, call_id: &str) -> std::io::Result<CallRecording> {
        std::fs::create_dir_all(dir)?;
        let base = safe_name(call_id);
        let caller_path = dir.join(format!("{base}.caller.wav"));
        let agent_path = dir.join(format!("{base}.agent.wav"));
        let open = |p: &Path| -> std::io::Result<Writer> {
            WavWriter::new(BufWriter::new(File::create(p)?), spec()).map_err(std::io::Error::other)
        };
        let track = |p: &Path| -> std::io::Result<TrackWriter> {
            Ok(TrackWriter {
                writer: Some(open(p)?),
                written: 0,
                checkpointed: 0,
            })
        };
        Ok(CallRecording {
            caller: track(&caller_path)?,
            agent: track(&agent_path)?,
            paths: [caller_path, agent_path],
        })
    }

    /// Write `pcm` to `track` starting at sample `at` of the call's timeline.
    pub fn write_at(&mut self, track: Track, at: u64, pcm: &[i16]) {
        match track {
            Track::Caller => self.caller.write_at(at, pcm),
            Track::Agent => self.agent.write_at(at, pcm),
        }
    }

    /// Pad both tracks with silence to `end` samples (or to the longer one), then flush and
    /// finalise both files; returns their paths.
    pub fn finish(mut self, end: u64) -> std::io::Result<[PathBuf; 2]> {
        let end = end.max(self.caller.written).max(self.agent.written);
        for t in [&mut self.caller, &mut self.agent] {
            t.write_at(end, &[]);
        }
        for w in [self.caller.writer.take(), self.agent.writer.take()]
            .into_iter()
            .flatten()
        {
            w.finalize().map_err(std::io::Error::other)?;
        }
        Ok(self.paths.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_two_readable_wavs() {
        let dir = std::env::temp_dir().join(format!("ontime-rec-{}", std::process::id()));
        let mut r = CallRecording::create(&dir, "abc@127.0.0.1/../x").unwrap();
        r.write_at(Track::Caller, 0, &[1, 2, 3]);
        r.write_at(Track::Agent, 100, &[4; 160]);
        // Overlapping the written part: only the new samples are kept.
        r.write_at(Track::Agent, 200, &[5; 160]);
        let [c, a] = r.finish(300).unwrap();
        assert!(c.starts_with(&dir) && a.starts_with(&dir));
        let caller: Vec<i16> = hound::WavReader::open(&c)
            .unwrap()
            .into_samples()
            .map(Result::unwrap)
            .collect();
        let agent: Vec<i16> = hound::WavReader::open(&a)
            .unwrap()
            .into_samples()
            .map(Result::unwrap)
            .collect();
        assert_eq!(caller.len(), 360, "padded to the longer track");
        assert_eq!(agent.len(), 360);
        assert_eq!(&caller[..4], &[1, 2, 3, 0]);
        assert!(agent[..100].iter().all(|s| *s == 0));
        assert!(agent[100..260].iter().all(|s| *s == 4));
        assert!(agent[260..360].iter().all(|s| *s == 5));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A recording whose writer is never finalised (the process was killed) is still a readable
    /// WAV up to its last checkpoint.
    #[test]
    fn unfinished_recording_is_readable_to_its_last_checkpoint() {
        let dir = std::env::temp_dir().join(format!("ontime-rec-crash-{}", std::process::id()));
        let mut r = CallRecording::create(&dir, "crash").unwrap();
        r.write_at(Track::Caller, 0, &vec![7; 8000 * 2 + 100]);
        let caller = r.paths[0].clone();
        std::mem::forget(r); // what SIGKILL does: no finalize, no drop
        let reader = hound::WavReader::open(&caller).expect("a readable WAV");
        assert_eq!(reader.len(), 8000 * 2 + 100);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_folder_is_refused() {
        assert!(CallRecording::check_dir(Path::new("/proc/ontime-cannot-write-here")).is_err());
        let dir = std::env::temp_dir().join(format!("ontime-rec-check-{}", std::process::id()));
        CallRecording::check_dir(&dir).unwrap();
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "no probe left behind"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
