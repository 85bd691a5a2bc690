//! The built-in agent: a fixed reply after every completed turn.

use std::sync::Arc;

use super::{Agent, AgentAction, AgentCall, AgentEvent, AgentOutput, CallInfo};

/// The built-in reply: an espeak-ng sentence at 8 kHz (made as `fixtures/README.md` says), embedded so the
/// default gateway needs no files.
const BUILT_IN_REPLY_WAV: &[u8] = include_bytes!("../../assets/stub_reply.wav");

/// Plays a fixed reply after every completed turn.
#[derive(Debug, Clone)]
pub struct StubAgent {
    reply: Arc<[i16]>,
}

/// Errors loading the stub's reply.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StubReplyError {
    /// Not a readable WAV.
    #[error("stub reply WAV: {0}")]
    Wav(#[from] hound::Error),
    /// Not 8 kHz mono 16-bit.
    #[error("stub reply WAV must be 8000 Hz mono 16-bit PCM, got {rate} Hz, {channels} channel(s), {bits} bits")]
    Format {
        /// Sample rate found.
        rate: u32,
        /// Channels found.
        channels: u16,
        /// Bits per sample found.
        bits: u16,
    },
}

impl StubAgent {
    /// The stub with the built-in reply.
    pub fn built_in() -> Result<StubAgent, StubReplyError> {
        Self::from_wav_reader(hound::WavReader::new(std::io::Cursor::new(
            BUILT_IN_REPLY_WAV,
        ))?)
    }

    /// The stub with a reply from a WAV file (8 kHz mono 16-bit).
    pub fn from_file(path: &std::path::Path) -> Result<StubAgent, StubReplyError> {
        Self::from_wav_reader(hound::WavReader::open(path)?)
    }

    fn from_wav_reader<R: std::io::Read>(
        r: hound::WavReader<R>,
    ) -> Result<StubAgent, StubReplyError> {
        let s = r.spec();
        if s.sample_rate != ontime_rtp::SAMPLE_RATE_HZ
            || s.channels != 1
            || s.bits_per_sample != 16
            || s.sample_format != hound::SampleFormat::Int
        {
            return Err(StubReplyError::Format {
                rate: s.sample_rate,
                channels: s.channels,
                bits: s.bits_per_sample,
            });
        }
        let pcm = r.into_samples::<i16>().collect::<Result<Vec<_>, _>>()?;
        Ok(StubAgent { reply: pcm.into() })
    }

    /// Length of the reply in samples.
    pub fn reply_samples(&self) -> usize {
        self.reply.len()
    }

    /// The reply (for tests that check what the caller got).
    #[cfg(test)]
    pub(crate) fn reply(&self) -> Arc<[i16]> {
        self.reply.clone()
    }
}

struct StubCall {
    reply: Arc<[i16]>,
    output: AgentOutput,
    replies: u64,
}

impl Agent for StubAgent {
    fn start_call(&self, _info: &CallInfo, output: AgentOutput) -> Box<dyn AgentCall> {
        Box::new(StubCall {
            reply: self.reply.clone(),
            output,
            replies: 0,
        })
    }
}

impl AgentCall for StubCall {
    fn on_event(&mut self, event: AgentEvent<'_>) {
        if let AgentEvent::TurnEnded { .. } = event {
            self.replies += 1;
            self.output.send(AgentAction::Play(self.reply.clone()));
            self.output.send(AgentAction::EndOfUtterance);
            self.output
                .send(AgentAction::Mark(format!("reply-{}", self.replies)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_replies_once_per_turn_with_the_built_in_sentence() {
        let stub = StubAgent::built_in().unwrap();
        assert!(
            stub.reply_samples() > 8000 * 3,
            "reply should be a sentence of seconds"
        );
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let info = CallInfo {
            call_sid: crate::call::new_call_sid(),
            account_sid: crate::config::DEFAULT_ACCOUNT_SID.into(),
            direction: ontime_twilio::Direction::Inbound,
            transport: ontime_sip::Transport::Udp,
            call_id: "c".into(),
            from: "a".into(),
            to: "b".into(),
            sip_headers: Vec::new(),
            x_headers: Default::default(),
        };
        let mut call = stub.start_call(&info, AgentOutput::new(tx));
        call.on_event(AgentEvent::SpeechStarted);
        call.on_event(AgentEvent::SpeechStopped);
        assert!(rx.try_recv().is_err(), "no reply before the turn ends");
        call.on_event(AgentEvent::TurnEnded {
            probability: Some(0.9),
        });
        assert!(
            matches!(rx.try_recv(), Ok(AgentAction::Play(p)) if p.len() == stub.reply_samples())
        );
        assert!(matches!(rx.try_recv(), Ok(AgentAction::EndOfUtterance)));
        assert!(matches!(rx.try_recv(), Ok(AgentAction::Mark(m)) if m == "reply-1"));
    }
}
