//! What goes into a [`CallCore`](super::CallCore) beside datagrams and time, and what comes out:
//! the call's fixed settings, the dialog's events, the commands of the API and TwiML, and the
//! outputs (SIP requests, notices to the agent, frames for the models, the record).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ontime_rtp::{Packetizer, FRAME_BYTES, SAMPLES_PER_FRAME, WIDEBAND_SAMPLES_PER_FRAME};
use ontime_sender::StreamId;
use ontime_sip::NegotiatedMedia;
use ontime_srtp::SrtpContext;
use ontime_twilio::{Dial, Verb};

use super::dial::DialEnd;
use super::hold_back::HoldBackConfig;
use super::program::TransferOutcome;
use crate::agent::AgentEvent;
use crate::config::BargeIn;
use crate::records::cdr::{CallDetailRecord, EndCause};
use crate::records::recording::Track;

/// What a call needs to know that does not change during the call.
#[derive(Debug, Clone)]
pub struct CallSettings {
    /// Seed of the call's RNG (its RTP and RTCP SSRC, first sequence number and timestamp):
    /// given by the switchboard's seeded RNG, so a run on simulated time repeats.
    pub rng_seed: u64,
    /// Hang up after this long without caller RTP while the caller should be sending (`None`:
    /// never).
    pub rtp_timeout: Option<Duration>,
    /// Hang up after this long.
    pub max_call_duration: Duration,
    /// Emit an interim record this often while the call is up (None: never).
    pub interim_record_interval: Option<Duration>,
    /// Who clears the reply when the caller talks over it.
    pub barge_in: BargeIn,
    /// Local barge-in: caller speech over the reply shorter than this is a backchannel that
    /// leaves the reply playing (zero: barge in at the onset).
    pub barge_in_min_speech: Duration,
    /// Cancel the line's echo of the reply in the caller's audio the VAD hears
    /// ([`ontime_echo`]; the agent and the recording get the caller's audio as it came).
    pub echo_canceller: bool,
    /// How long the VAD takes to confirm that speech stopped (its stop time): a backchannel is
    /// known to be one only this long after it ended.
    pub speech_stop_lag: Duration,
    /// Queued agent audio beyond this is dropped, oldest first.
    pub max_buffered: Duration,
    /// RTCP SDES CNAME.
    pub cname: String,
    /// Emit [`CallOutput::Record`] for both sides.
    pub record: bool,
    /// The sender's schedule origin (`ontime_sender::Sender::origin`): sent frames carry their
    /// slot time from it, which places them on the recording's timeline.
    pub sender_origin: Instant,
    /// `host[:port]` numbers are transferred to (`sip:+1555...@host`): the trunk's.
    pub transfer_domain: String,
    /// `<Dial>` transfers by REFER instead of bridging a second leg (`--dial-by-refer`).
    pub dial_by_refer: bool,
    /// Reply hold-back after a turn end ([`super::hold_back`]).
    pub hold_back: HoldBackConfig,
    /// The INVITE is not answered yet: the call runs a `<Dial answerOnBridge>` and answers
    /// ([`SipRequest::Answer`]) only once a leg is bridged, or when other TwiML runs after
    /// it; meanwhile it sends no media (the caller's phone rings back on our 180) and expects
    /// none.
    pub unanswered: bool,
}

/// What the SIP side tells a call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DialogEvent {
    /// The ACK arrived.
    Established,
    /// New negotiated media after a re-INVITE/UPDATE (hold, resume, new address, new codec).
    Media(NegotiatedMedia),
    /// A DTMF digit from SIP INFO.
    Dtmf(char),
    /// The dialog ended (BYE, CANCEL, session timer, failure).
    Ended(EndCause),
    /// Hang up now with this cause (drain timeout, operator).
    Hangup(EndCause),
    /// The final response to our REFER (408 on timeout).
    ReferResponse(u16),
    /// A NOTIFY about our REFER: the new call's status so far (RFC 3515 sipfrag).
    ReferProgress {
        /// The sipfrag's status code.
        status: u16,
        /// The subscription is over (no more NOTIFYs).
        terminated: bool,
    },
}

/// What the call-control API asks of a call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum CallCommand {
    /// `Status=completed`: BYE with Q.850 cause 16.
    Complete,
    /// Run this TwiML now, instead of whatever ran.
    Run(Vec<Verb>),
    /// The `<Dial>`'s leg ([`CallOutput::Dial`]) was placed as this CallSid.
    DialPlaced(String),
    /// This `<Dial>` leg answered first: the two are bridged (its audio arrives as the
    /// agent's).
    DialAnswered(String),
    /// The `<Dial>`'s leg is over (or could not be placed).
    DialEnded(DialEnd),
    /// The `<Dial>`'s `action` answered with this TwiML (empty if it failed: the call ends).
    DialAction(Vec<Verb>),
    /// This call is a `<Dial>`'s leg whose `<Number url>` answered with this TwiML: run it on
    /// this leg before the bridge; [`CallOutput::WhisperDone`] follows when it is over (its
    /// verbs ran out, or the bot it connected closed normally and was heard out). A hang-up in
    /// it declines the call.
    Whisper(Vec<Verb>),
}

/// What the call asks of the SIP side.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SipRequest {
    /// Send BYE.
    Hangup,
    /// Send BYE with this RFC 3326 `Reason` header value.
    HangupWithReason(String),
    /// Blind transfer: send REFER with this Refer-To URI.
    Refer(String),
    /// Send this DTMF digit by SIP INFO, with this tone length.
    InfoDtmf(char, Duration),
    /// Answer the INVITE now (200 with our SDP): a call started unanswered
    /// ([`CallSettings::unanswered`]).
    Answer,
    /// Refuse the INVITE with this final status: a call started unanswered whose `<Dial>`
    /// bridged no one and that has nothing else to run.
    Reject(u16),
}

/// An agent event the call produced, owned (the driver lends it as [`AgentEvent`]).
#[derive(Debug, Clone, PartialEq)]
pub enum AgentNotice {
    /// A 20 ms frame of caller audio.
    CallerAudio(Box<[i16; SAMPLES_PER_FRAME]>),
    /// The caller's audio at 16 kHz, for an agent that asked for it.
    CallerAudioWide(Box<[i16; WIDEBAND_SAMPLES_PER_FRAME]>),
    /// Local VAD heard the caller start.
    SpeechStarted,
    /// Local VAD heard the caller stop.
    SpeechStopped,
    /// The caller's turn ended.
    TurnEnded {
        /// Smart Turn's probability (None when the stop timeout decided).
        probability: Option<f32>,
    },
    /// The caller spoke over the reply too briefly to barge in; the reply plays on.
    Backchannel {
        /// How long the caller spoke.
        speech_ms: u64,
    },
    /// The caller went on speaking after their turn ended, before its reply was heard: the
    /// end was a pause; the held reply (if any) was dropped.
    TurnResumed {
        /// From the end of the caller's speech to their resumption.
        pause_ms: u64,
        /// Reply audio dropped unheard.
        dropped_ms: u64,
    },
    /// Local barge-in cleared the reply.
    BargeIn {
        /// Milliseconds of the current reply the caller heard before the onset.
        heard_ms: u64,
        /// The last of the reply's marks played before the barge-in.
        last_mark: Option<String>,
    },
    /// A DTMF digit.
    Dtmf(char),
    /// A mark was played.
    MarkPlayed(String),
    /// A transfer has an outcome.
    Transfer(TransferOutcome),
    /// The call ended.
    Ended,
}

impl AgentNotice {
    /// The event as [`crate::AgentCall::on_event`] takes it.
    pub fn as_event(&self) -> AgentEvent<'_> {
        match self {
            AgentNotice::CallerAudio(pcm) => AgentEvent::CallerAudio(&pcm[..]),
            AgentNotice::CallerAudioWide(pcm) => AgentEvent::CallerAudioWide(&pcm[..]),
            AgentNotice::SpeechStarted => AgentEvent::SpeechStarted,
            AgentNotice::SpeechStopped => AgentEvent::SpeechStopped,
            AgentNotice::TurnEnded { probability } => AgentEvent::TurnEnded {
                probability: *probability,
            },
            AgentNotice::Backchannel { speech_ms } => AgentEvent::Backchannel {
                speech_ms: *speech_ms,
            },
            AgentNotice::TurnResumed {
                pause_ms,
                dropped_ms,
            } => AgentEvent::TurnResumed {
                pause_ms: *pause_ms,
                dropped_ms: *dropped_ms,
            },
            AgentNotice::BargeIn {
                heard_ms,
                last_mark,
            } => AgentEvent::BargeIn {
                heard_ms: *heard_ms,
                last_mark: last_mark.as_deref(),
            },
            AgentNotice::Dtmf(d) => AgentEvent::Dtmf(*d),
            AgentNotice::MarkPlayed(name) => AgentEvent::MarkPlayed(name),
            AgentNotice::Transfer(t) => AgentEvent::Transfer {
                target: &t.target,
                result: t.result,
                sip_status: t.sip_status,
            },
            AgentNotice::Ended => AgentEvent::Ended,
        }
    }
}

/// A frame of the caller's audio for the models: 8 kHz for the VAD, and on a wideband call the
/// same 20 ms at 16 kHz for Smart Turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFrame {
    /// The 8 kHz frame, as the echo canceller left it.
    pub narrow: [i16; SAMPLES_PER_FRAME],
    /// Its 16 kHz twin on a wideband call.
    pub wide: Option<[i16; WIDEBAND_SAMPLES_PER_FRAME]>,
}

/// Something for the driver to do.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallOutput {
    /// Start an outgoing stream with this packetizer to `remote`, then hand the producer to
    /// [`CallCore::attach_stream`](super::CallCore::attach_stream).
    StartStream {
        /// The stream's RTP state (random SSRC, sequence and timestamp).
        packetizer: Packetizer,
        /// Where to send.
        remote: SocketAddr,
        /// The SRTP context the sender protects the stream's packets with (None: plain RTP).
        srtp: Option<Box<SrtpContext>>,
        /// The codec's silent frame, when it has no silence byte (Opus): the sender's fill
        /// (`StreamConfig::silence_frame`).
        silence_frame: Option<[u8; FRAME_BYTES]>,
    },
    /// Send the stream's packets to a new address (latching, re-INVITE).
    SetStreamRemote {
        /// The stream.
        stream: StreamId,
        /// The new address.
        remote: SocketAddr,
    },
    /// Send an RTCP compound packet from the RTCP socket.
    Rtcp {
        /// The packet.
        bytes: Vec<u8>,
        /// Where.
        destination: SocketAddr,
    },
    /// A frame of caller audio for the VAD and Smart Turn.
    Inference(Box<ModelFrame>),
    /// An event for the agent.
    Agent(AgentNotice),
    /// Audio for the recording, at a sample position of the call's timeline (0 = answer).
    Record {
        /// Which side.
        track: Track,
        /// Sample index of the first sample.
        at: u64,
        /// One frame.
        pcm: Box<[i16; SAMPLES_PER_FRAME]>,
        /// The same frame at 16 kHz, when the codec is wideband.
        wide: Option<Box<[i16; WIDEBAND_SAMPLES_PER_FRAME]>>,
    },
    /// Ask SIP to do something.
    Sip(SipRequest),
    /// Log this interim record (the call is up; its counters so far).
    Interim(Box<CallDetailRecord>),
    /// Queue these digits as RFC 4733 events on the stream at this payload type, then tell
    /// [`CallCore::digits_queued`](super::CallCore::digits_queued) how long they play.
    SendDigits {
        /// The stream.
        stream: StreamId,
        /// The negotiated telephone-event payload type.
        payload_type: u8,
        /// `<Play digits>` syntax.
        digits: String,
    },
    /// Bridge the call to this bot, replacing the current agent.
    ConnectStream {
        /// `ws://` or `wss://`.
        url: String,
        /// Extra `customParameters`.
        parameters: Vec<(String, String)>,
        /// The bot's audio format.
        audio: ontime_twilio::StreamAudio,
    },
    /// A transfer has an outcome (for the status callback).
    Transfer(TransferOutcome),
    /// Answering-machine detection gave its verdict (for the metrics, the callbacks, the held
    /// TwiML and the agent).
    Amd(ontime_amd::Verdict),
    /// Place the `<Dial>`'s leg and bridge it to this call once it answers (its agent is let
    /// go of: the leg's audio comes in as the agent's); answer with
    /// [`CallCommand::DialPlaced`], then [`CallCommand::DialAnswered`] and
    /// [`CallCommand::DialEnded`].
    Dial(Dial),
    /// End the `<Dial>`'s leg (this call is over, or the bridge reached its `timeLimit`).
    EndDial(String),
    /// Fetch TwiML for the call (a `<Dial>`'s `action`) and answer with
    /// [`CallCommand::DialAction`].
    FetchTwiml {
        /// The URL.
        url: String,
        /// `GET` (else `POST`).
        method_get: bool,
        /// Twilio's form parameters.
        params: Vec<(String, String)>,
    },
    /// The leg's own TwiML ([`CallCommand::Whisper`]) is over: bridge it now.
    WhisperDone,
    /// The call is over: log the record, close the recording at `recording_end` samples and
    /// give the resources back. Nothing follows.
    Ended {
        /// The call detail record.
        cdr: Box<CallDetailRecord>,
        /// The timeline's length in samples (both recording tracks end here).
        recording_end: u64,
    },
}
