//! Optional per-call recording (`--record DIR`): the caller's audio as decoded after the jitter
//! buffer, and the agent's audio as queued to the sender, each a 16-bit 8 kHz mono WAV streamed to
//! disk through a buffer and finalised at hang-up.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use hound::{SampleFormat, WavSpec, WavWriter};
use ontime_rtp::{CHANNELS, SAMPLE_RATE_HZ};

type Writer = WavWriter<BufWriter<File>>;

/// The two WAV files of one call.
pub struct CallRecording {
    caller: Option<Writer>,
    agent: Option<Writer>,
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
    /// Create `<dir>/<call-id>.caller.wav` and `<dir>/<call-id>.agent.wav`.
    pub fn create(dir: &Path, call_id: &str) -> std::io::Result<CallRecording> {
        std::fs::create_dir_all(dir)?;
        let base = safe_name(call_id);
        let caller_path = dir.join(format!("{base}.caller.wav"));
        let agent_path = dir.join(format!("{base}.agent.wav"));
        let open = |p: &Path| -> std::io::Result<Writer> {
            WavWriter::new(BufWriter::new(File::create(p)?), spec()).map_err(std::io::Error::other)
        };
        Ok(CallRecording {
            caller: Some(open(&caller_path)?),
            agent: Some(open(&agent_path)?),
            paths: [caller_path, agent_path],
        })
    }

    fn write(w: &mut Option<Writer>, pcm: &[i16]) {
        if let Some(writer) = w {
            for &s in pcm {
                if writer.write_sample(s).is_err() {
                    // A full disk must not end the call: stop recording this side.
                    *w = None;
                    return;
                }
            }
        }
    }

    /// Append caller audio.
    pub fn caller(&mut self, pcm: &[i16]) {
        Self::write(&mut self.caller, pcm);
    }

    /// Append agent audio.
    pub fn agent(&mut self, pcm: &[i16]) {
        Self::write(&mut self.agent, pcm);
    }

    /// Flush and finalise both files; returns their paths.
    pub fn finish(mut self) -> std::io::Result<[PathBuf; 2]> {
        for w in [self.caller.take(), self.agent.take()]
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
        r.caller(&[1, 2, 3]);
        r.agent(&[4; 160]);
        let [c, a] = r.finish().unwrap();
        assert!(c.starts_with(&dir) && a.starts_with(&dir));
        assert_eq!(hound::WavReader::open(&c).unwrap().len(), 3);
        assert_eq!(hound::WavReader::open(&a).unwrap().len(), 160);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
