//! Agents: what answers the caller. The gateway turns a call into [`AgentEvent`]s and plays the
//! [`AgentAction`]s it gets back through the real-time sender. Built in: [`StubAgent`], which
//! plays a fixed reply after each completed turn (like a test harness's stub STT/LLM/TTS).

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

/// The built-in reply: an espeak-ng sentence at 8 kHz (see `fixtures/README.md`), embedded so the
/// default gateway needs no files.
const BUILT_IN_REPLY_WAV: &[u8] = include_bytes!("../../fixtures/agent/stub_reply.wav");

/// Facts about a call an agent may want.
#[derive(Debug, Clone)]
pub struct CallInfo {
    /// SIP Call-ID.
    pub call_id: String,
    /// From URI.
    pub from: String,
    /// To URI.
    pub to: String,
    /// Every header of the INVITE (name, value), for agents that forward some (the WebSocket
    /// agent's `ws_forward_headers`).
    pub sip_headers: Vec<(String, String)>,
}

/// What happens on a call, as the agent sees it.
#[derive(Debug)]
pub enum AgentEvent<'a> {
    /// Caller audio after the jitter buffer, 8 kHz PCM, one 20 ms frame at a time.
    CallerAudio(&'a [i16]),
    /// Local VAD heard the caller start speaking.
    SpeechStarted,
    /// Local VAD heard the caller stop.
    SpeechStopped,
    /// The caller's turn ended (Smart Turn said complete, or the stop timeout passed).
    TurnEnded {
        /// Smart Turn's probability of completion (None when the timeout decided).
        probability: Option<f32>,
    },
    /// The caller's speech cleared queued agent audio (local barge-in).
    BargeIn,
    /// A DTMF digit.
    Dtmf(char),
    /// A mark the agent queued has been played (its last frame sent).
    MarkPlayed(&'a str),
    /// The call ended.
    Ended,
}

/// What an agent asks the gateway to do.
#[derive(Debug, Clone)]
pub enum AgentAction {
    /// Queue 8 kHz PCM to play, paced by the sender.
    Play(Arc<[i16]>),
    /// The current utterance is complete (an empty queue after this is not an underrun).
    EndOfUtterance,
    /// Report back when everything queued so far has been played.
    Mark(String),
    /// Drop everything queued, at once.
    Clear,
    /// Hang up.
    Hangup,
    /// Hang up with this RFC 3326 `Reason` header value on the BYE (e.g.
    /// `Q.850;cause=41;text="agent disconnected"`).
    HangupWithReason(String),
}

/// An agent's verdict on a call before it is answered (see [`Agent::prepare_call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Answer the call; [`Agent::start_call`] follows.
    Answer,
    /// Refuse it with 503 (the agent cannot serve it, e.g. a remote bot is unreachable).
    Reject,
}

/// What [`Agent::prepare_call`] returns: resolves once the agent is ready (or not).
pub type AdmissionFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Admission> + Send + 'static>>;

/// Where an agent sends its actions for one call.
#[derive(Debug, Clone)]
pub struct AgentOutput(pub UnboundedSender<AgentAction>);

impl AgentOutput {
    /// Send an action; a call that has ended drops it.
    pub fn send(&self, action: AgentAction) {
        let _ = self.0.send(action);
    }
}

/// An agent: makes one [`AgentCall`] per call.
pub trait Agent: Send + Sync + 'static {
    /// Start serving a call.
    fn start_call(&self, info: &CallInfo, output: AgentOutput) -> Box<dyn AgentCall>;

    /// Get ready for a call before it is answered (e.g. connect to a remote bot). The SIP loop
    /// rings (180) while the future runs, then answers or rejects as it says; it runs on tokio
    /// and must be bounded in time. `None` (the default): nothing to prepare, answer at once.
    fn prepare_call(&self, _info: &CallInfo) -> Option<AdmissionFuture> {
        None
    }

    /// A call [`Agent::prepare_call`] was run for will not start (the caller cancelled while
    /// it ran): release what was prepared.
    fn abandon_call(&self, _info: &CallInfo) {}
}

/// One call's conversation with an agent.
pub trait AgentCall: Send {
    /// Something happened on the call.
    fn on_event(&mut self, event: AgentEvent<'_>);
}

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
            call_id: "c".into(),
            from: "a".into(),
            to: "b".into(),
            sip_headers: Vec::new(),
        };
        let mut call = stub.start_call(&info, AgentOutput(tx));
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
