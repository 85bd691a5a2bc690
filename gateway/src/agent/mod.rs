//! Agents: what answers the caller. The gateway turns a call into [`AgentEvent`]s and plays the
//! [`AgentAction`]s it gets back through the real-time sender. Built in: [`StubAgent`], which
//! plays a fixed reply after each completed turn (like a test harness's stub STT/LLM/TTS), and
//! [`WsAgent`], which bridges each call to a bot over a Twilio-compatible WebSocket.

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

pub(crate) mod bridge;
mod stub;
pub(crate) mod ws;

pub use stub::{StubAgent, StubReplyError};
pub use ws::{WsAgent, WsAgentConfig, WsAgentError};

/// Facts about a call an agent may want.
#[derive(Debug, Clone)]
pub struct CallInfo {
    /// SIP Call-ID.
    pub call_id: String,
    /// The call's SID in the call-control API (`CA` + 32 hex digits; the WebSocket `callSid`).
    pub call_sid: String,
    /// The account SID (the WebSocket `accountSid`).
    pub account_sid: String,
    /// Which way the call goes.
    pub direction: ontime_twilio::Direction,
    /// The SIP transport of its dialog.
    pub transport: ontime_sip::Transport,
    /// From URI.
    pub from: String,
    /// To URI.
    pub to: String,
    /// Every header of the INVITE (name, value), for agents that forward some (the WebSocket
    /// agent's `ws_forward_headers`).
    pub sip_headers: Vec<(String, String)>,
    /// The INVITE's `X-` headers within bounds (at most 16, names ≤ 64 bytes, values ≤ 256
    /// bytes without control characters; `ontime_twilio::sip_headers`): what the voice webhook
    /// gets as `SipHeader_X-…` and a WebSocket bot in `customParameters`. Empty for outbound
    /// calls.
    pub x_headers: ontime_twilio::XHeaders,
}

/// What happens on a call, as the agent sees it.
#[derive(Debug)]
#[non_exhaustive]
pub enum AgentEvent<'a> {
    /// Caller audio after the jitter buffer, 8 kHz PCM, one 20 ms frame at a time.
    CallerAudio(&'a [i16]),
    /// Caller audio at 16 kHz, one 20 ms frame (320 samples) at a time, instead of
    /// [`AgentEvent::CallerAudio`] once the agent asked with
    /// [`AgentAction::ReceiveWideband`]: a G.722 call's own wideband audio, a G.711 call's
    /// upsampled once in the gateway.
    CallerAudioWide(&'a [i16]),
    /// Local VAD heard the caller start speaking.
    SpeechStarted,
    /// Local VAD heard the caller stop.
    SpeechStopped,
    /// The caller's turn ended (Smart Turn said complete, or the stop timeout passed).
    TurnEnded {
        /// Smart Turn's probability of completion (None when the timeout decided).
        probability: Option<f32>,
    },
    /// The caller spoke over the agent's audio for less than `barge_in_min_speech` (a
    /// backchannel: "mm-hmm", "yeah"); the reply plays on.
    Backchannel {
        /// How long the caller spoke.
        speech_ms: u64,
    },
    /// The caller went on speaking after [`AgentEvent::TurnEnded`] before the reply was heard
    /// (a mid-sentence pause): the reply queued so far was dropped unheard, and audio the bot
    /// still sends for it is dropped until the next `TurnEnded` or its `Clear`. The bot should
    /// cancel the reply it is preparing.
    TurnResumed {
        /// From the end of the caller's speech to their resumption.
        pause_ms: u64,
        /// Reply audio dropped unheard.
        dropped_ms: u64,
    },
    /// The caller's speech cleared queued agent audio (local barge-in).
    BargeIn {
        /// Milliseconds of the current reply played out to the caller before their speech
        /// began, from the sender's position (less half the RTCP round trip when known). The
        /// current reply is the audio since the first `Play` after the queue ran dry or after
        /// [`AgentAction::EndOfUtterance`] (or a pause of the agent's audio).
        heard_ms: u64,
        /// The last mark of the current reply played before the barge-in, if any.
        last_mark: Option<&'a str>,
    },
    /// A DTMF digit.
    Dtmf(char),
    /// A mark the agent queued has been played (its last frame sent).
    MarkPlayed(&'a str),
    /// A transfer ([`AgentAction::Transfer`], TwiML `<Dial>`/`<Refer>`) has an outcome. On
    /// [`TransferResult::Completed`] the gateway hangs up its leg next; otherwise the call stays.
    Transfer {
        /// The Refer-To URI.
        target: &'a str,
        /// What happened.
        result: TransferResult,
        /// The SIP status that decided it (REFER response or NOTIFY sipfrag), if any.
        sip_status: Option<u16>,
    },
    /// Answering-machine detection (`MachineDetection` on `Calls.json`) gave its verdict.
    Amd {
        /// Twilio's `AnsweredBy`: `human`, `machine_start`, `machine_end_beep`,
        /// `machine_end_silence`, `machine_end_other`, `fax` or `unknown`.
        answered_by: &'a str,
        /// Milliseconds from the answer to the verdict (`MachineDetectionDuration`).
        duration_ms: u64,
    },
    /// The call ended.
    Ended,
}

/// How a blind transfer by REFER ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferResult {
    /// The trunk reported the new call answered (a final 2xx NOTIFY); our leg is hung up.
    Completed,
    /// The trunk refused the REFER.
    Rejected,
    /// The trunk accepted the REFER but the new call failed (a non-2xx final NOTIFY), or no
    /// outcome came in time.
    Failed,
}

impl TransferResult {
    /// The name used in metrics, events and records.
    pub fn as_str(self) -> &'static str {
        match self {
            TransferResult::Completed => "completed",
            TransferResult::Rejected => "rejected",
            TransferResult::Failed => "failed",
        }
    }
}

/// What an agent asks the gateway to do.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AgentAction {
    /// Queue 8 kHz PCM to play, paced by the sender.
    Play(Arc<[i16]>),
    /// Queue 16 kHz PCM to play: encoded as it is on a G.722 call, halved on a G.711 call.
    PlayWide(Arc<[i16]>),
    /// Take the caller's audio at 16 kHz ([`AgentEvent::CallerAudioWide`]) from now on, or
    /// (`false`) at 8 kHz again.
    ReceiveWideband(bool),
    /// Queue 8 kHz G.711 audio (one byte a sample) as the agent has it, e.g. a bot's µ-law:
    /// sent as it is when the call uses the same law, transcoded otherwise.
    PlayG711 {
        /// Its law.
        law: ontime_rtp::g711::Law,
        /// The bytes.
        audio: Arc<[u8]>,
    },
    /// The current utterance is complete (an empty queue after this is not an underrun).
    EndOfUtterance,
    /// Report back when everything queued so far has been played.
    Mark(String),
    /// Drop everything queued, at once.
    Clear,
    /// Whether the caller's speech may clear what is queued from now on (local barge-in;
    /// allowed by default). Forbid it for what must be heard whole — a legal notice, a goodbye
    /// before hanging up — and allow it again after.
    AllowBargeIn(bool),
    /// Hang up.
    Hangup,
    /// Hang up with this RFC 3326 `Reason` header value on the BYE (e.g.
    /// `Q.850;cause=41;text="agent disconnected"`).
    HangupWithReason(String),
    /// Hang up as soon as everything queued so far has been played (a goodbye): the BYE
    /// follows the last packet within one 20 ms tick, with this RFC 3326 `Reason` header value
    /// if any. What is queued ends the utterance; audio sent after this is not waited for.
    HangupWhenPlayed(Option<String>),
    /// Send DTMF to the caller, in `<Play digits>` syntax (`0-9 * # A-D`, `w` = 0.5 s pause):
    /// RFC 4733 events from the real-time sender, or SIP INFO when the caller offered no
    /// telephone-event.
    SendDigits(String),
    /// The bot's speech recogniser's words for the caller's turn so far (interim or final):
    /// the reply hold-back's transcript cue. Words that cannot end a sentence ("… to", "um")
    /// hold the reply to the turn; words that end one release it (docs/agents.md,
    /// *Transcripts*). Only the last words are judged; the text is never logged or recorded.
    Transcript(String),
    /// Blind transfer by SIP REFER to a SIP URI (`sip:agent@pbx.example`) or a number
    /// (`+15551234567`, routed by the trunk). The outcome arrives as [`AgentEvent::Transfer`].
    Transfer(String),
}

/// An agent's verdict on a call before it is answered (see [`Agent::prepare_call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Answer the call; [`Agent::start_call`] follows.
    Answer,
    /// Refuse it with 503 (the agent cannot serve it, e.g. a remote bot is unreachable).
    Reject,
    /// Refuse it as the voice route says (`<Reject>`): 486 when `busy`, else 603.
    Refuse {
        /// `reason="busy"`.
        busy: bool,
    },
}

/// What [`Agent::prepare_call`] returns: resolves once the agent is ready (or not).
pub type AdmissionFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Admission> + Send + 'static>>;

/// Where an agent sends its actions for one call. Cheap to clone; usable from any thread or
/// task (an agent may answer from its own runtime), and never blocks.
#[derive(Debug, Clone)]
pub struct AgentOutput(UnboundedSender<AgentAction>);

impl AgentOutput {
    pub(crate) fn new(tx: UnboundedSender<AgentAction>) -> AgentOutput {
        AgentOutput(tx)
    }

    /// Send an action; a call that has ended drops it.
    pub fn send(&self, action: AgentAction) {
        let _ = self.0.send(action);
    }
}

/// An agent: makes one [`AgentCall`] per call.
pub trait Agent: Send + Sync + 'static {
    /// Start serving a call.
    fn start_call(&self, info: &CallInfo, output: AgentOutput) -> Box<dyn AgentCall>;

    /// Get ready for a call before it is answered (e.g. connect to a remote bot). The gateway
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
    ///
    /// Contract: this runs on the call's own tokio task, in order, once per event — caller
    /// audio arrives every 20 ms — so it must return at once: it must not block, sleep, wait
    /// on a lock another thread holds long, or do model work. Hand slow work to another task
    /// or thread and answer through the [`AgentOutput`] given to [`Agent::start_call`]. The
    /// outgoing audio stays on time whatever this does (the real-time sender has its own
    /// thread), but a slow `on_event` delays the caller's audio to the VAD and the agent.
    fn on_event(&mut self, event: AgentEvent<'_>);
}
