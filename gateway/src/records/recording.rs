//! Optional per-call recording (`--record DIR`): the caller's audio as decoded after the jitter
//! buffer, and the agent's audio as the real-time sender sent it (silence included), each a
//! 16-bit mono WAV streamed to disk through a buffer and finalised at hang-up, at the rate of the
//! codec the call was answered on: 8 kHz for G.711, 16 kHz for G.722 (each side's own wideband
//! audio as decoded; a frame that only exists at 8 kHz, such as concealment, upsampled).
//!
//! Both tracks share one timeline: sample `n` of either file is `n / rate` s after the call was
//! answered. Audio is written at the position the call core gives ([`Track`] + sample index);
//! a gap is filled with silence and both files end at the same sample, so they line up when
//! played side by side or mixed.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use hound::{SampleFormat, WavSpec, WavWriter};
use ontime_rtp::resample::Upsampler;
use ontime_rtp::{CHANNELS, SAMPLE_RATE_HZ, WIDEBAND_RATE_HZ, WIDEBAND_SAMPLES_PER_FRAME};

type Writer = WavWriter<BufWriter<File>>;

/// Which side of the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    /// What the caller said (after the jitter buffer).
    Caller,
    /// What the gateway sent to the caller.
    Agent,
}

/// Seconds between header checkpoints: a crash loses at most the last second of a recording,
/// and the file stays readable (hound's `flush` rewrites the RIFF and data sizes).
const CHECKPOINT_SECONDS: u64 = 1;

/// One WAV and how many samples it holds.
struct TrackWriter {
    writer: Option<Writer>,
    written: u64,
    checkpointed: u64,
    /// A 16 kHz track's upsampler for the frames that only exist at 8 kHz.
    up: Upsampler,
}

impl TrackWriter {
    fn rate_hz(&self) -> u64 {
        self.writer.as_ref().map_or(u64::from(SAMPLE_RATE_HZ), |w| {
            u64::from(w.spec().sample_rate)
        })
    }

    /// One 20 ms frame at sample `at` of the 8 kHz timeline: `narrow` on an 8 kHz track; on a
    /// 16 kHz track `wide`, or `narrow` upsampled (placed back by the filter's delay).
    fn frame(&mut self, wideband: bool, at: u64, narrow: &[i16], wide: Option<&[i16]>) {
        match (wideband, wide) {
            (false, _) => self.write_at(at, narrow),
            (true, Some(wide)) => self.write_at(2 * at, wide),
            (true, None) => {
                let mut up = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                let n = self.up.process(narrow, &mut up);
                let at = (2 * at).saturating_sub(Upsampler::DELAY_16K as u64);
                self.write_at(at, &up[..n]);
            }
        }
    }

    fn samples(&mut self, pcm: impl IntoIterator<Item = i16>) {
        let checkpoint = CHECKPOINT_SECONDS * self.rate_hz();
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
        if self.written >= self.checkpointed + checkpoint {
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
    /// The files are at 16 kHz.
    wideband: bool,
}

fn spec(sample_rate: u32) -> WavSpec {
    WavSpec {
        channels: CHANNELS,
        sample_rate,
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

    /// Create `<dir>/<call-id>.caller.wav` and `<dir>/<call-id>.agent.wav`, at 16 kHz when
    /// `wideband` (the call's codec carries 16 kHz), else 8 kHz.
    pub fn create(dir: &Path, call_id: &str, wideband: bool) -> std::io::Result<CallRecording> {
        let rate = if wideband {
            WIDEBAND_RATE_HZ
        } else {
            SAMPLE_RATE_HZ
        };
        std::fs::create_dir_all(dir)?;
        let base = safe_name(call_id);
        let caller_path = dir.join(format!("{base}.caller.wav"));
        let agent_path = dir.join(format!("{base}.agent.wav"));
        let open = |p: &Path| -> std::io::Result<Writer> {
            WavWriter::new(BufWriter::new(File::create(p)?), spec(rate))
                .map_err(std::io::Error::other)
        };
        let track = |p: &Path| -> std::io::Result<TrackWriter> {
            Ok(TrackWriter {
                writer: Some(open(p)?),
                written: 0,
                checkpointed: 0,
                up: Upsampler::new(),
            })
        };
        Ok(CallRecording {
            caller: track(&caller_path)?,
            agent: track(&agent_path)?,
            paths: [caller_path, agent_path],
            wideband,
        })
    }

    /// Write `pcm` to `track` starting at sample `at` of the files (at their rate).
    #[cfg(test)]
    pub fn write_at(&mut self, track: Track, at: u64, pcm: &[i16]) {
        match track {
            Track::Caller => self.caller.write_at(at, pcm),
            Track::Agent => self.agent.write_at(at, pcm),
        }
    }

    /// Write one 20 ms frame to `track` at sample `at` of the call's 8 kHz timeline: `narrow`
    /// (8 kHz) and, on a wideband codec, the same frame at 16 kHz.
    pub fn write_frame(&mut self, track: Track, at: u64, narrow: &[i16], wide: Option<&[i16]>) {
        let wideband = self.wideband;
        match track {
            Track::Caller => self.caller.frame(wideband, at, narrow, wide),
            Track::Agent => self.agent.frame(wideband, at, narrow, wide),
        }
    }

    /// Pad both tracks with silence to `end` samples of the call's 8 kHz timeline (or to the
    /// longer one), then flush and finalise both files; returns their paths.
    pub fn finish(mut self, end: u64) -> std::io::Result<[PathBuf; 2]> {
        let end = if self.wideband { 2 * end } else { end };
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
        let mut r = CallRecording::create(&dir, "abc@127.0.0.1/../x", false).unwrap();
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
        let mut r = CallRecording::create(&dir, "crash", false).unwrap();
        r.write_at(Track::Caller, 0, &vec![7; 8000 * 2 + 100]);
        let caller = r.paths[0].clone();
        std::mem::forget(r); // what SIGKILL does: no finalize, no drop
        let reader = hound::WavReader::open(&caller).expect("a readable WAV");
        assert_eq!(reader.len(), 8000 * 2 + 100);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A G.722 call's recording is at 16 kHz: wide frames as they are, 8 kHz-only frames
    /// upsampled into place, and the end scaled from the 8 kHz timeline.
    #[test]
    fn a_wideband_recording_is_at_16k() {
        let dir = std::env::temp_dir().join(format!("ontime-rec-wide-{}", std::process::id()));
        let mut r = CallRecording::create(&dir, "wide", true).unwrap();
        r.write_frame(Track::Caller, 0, &[0; 160], Some(&[9; 320]));
        r.write_frame(Track::Agent, 160, &[1000; 160], None);
        r.write_frame(Track::Agent, 320, &[1000; 160], None);
        let [c, a] = r.finish(800).unwrap();
        let read = |p: &Path| -> (u32, Vec<i16>) {
            let r = hound::WavReader::open(p).unwrap();
            let rate = r.spec().sample_rate;
            (rate, r.into_samples().map(Result::unwrap).collect())
        };
        let (rate, caller) = read(&c);
        let (_, agent) = read(&a);
        assert_eq!((rate, caller.len(), agent.len()), (16000, 1600, 1600));
        assert!(caller[..320].iter().all(|s| *s == 9));
        // The upsampled constant lands on the timeline: 2 × 160 less the filter's delay, then
        // settles to the constant.
        assert!(agent[..256].iter().all(|s| *s == 0));
        assert!(
            agent[400..640].iter().all(|s| *s == 1000),
            "{:?}",
            &agent[380..420]
        );
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
