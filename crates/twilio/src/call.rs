//! The Calls resource and the contract behind it: what a call looks like to the API
//! ([`CallView`], [`CallStatus`], [`Direction`]), what can be asked of calls ([`NewCall`],
//! [`CallUpdate`], [`CallFilter`]), and [`CallControl`], which whatever owns the calls
//! implements. An HTTP layer parses and authenticates Twilio-shaped requests
//! ([`crate::request`]) and renders Twilio-shaped answers ([`crate::json`]); the
//! [`CallControl`] implementation acts on calls. Nothing here blocks: every method returns at
//! once (work on a call is handed to whatever runs it).

use std::time::{Duration, SystemTime};

use crate::sip_headers::XHeaders;
use crate::twiml::Verb;

/// A call's status, as Twilio names them (`Status` of the Call resource).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallStatus {
    /// Created, not yet sent (outbound calls before the INVITE leaves).
    Queued,
    /// INVITE sent (outbound) or received (inbound), no answer yet.
    Ringing,
    /// Answered.
    InProgress,
    /// Ended after an answer.
    Completed,
    /// The callee was busy (486/600).
    Busy,
    /// No answer before the timeout (408/480/timeout).
    NoAnswer,
    /// The call could not be made (any other failure).
    Failed,
    /// Cancelled before it was answered.
    Canceled,
}

impl CallStatus {
    /// Twilio's spelling (`in-progress`, `no-answer`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Queued => "queued",
            CallStatus::Ringing => "ringing",
            CallStatus::InProgress => "in-progress",
            CallStatus::Completed => "completed",
            CallStatus::Busy => "busy",
            CallStatus::NoAnswer => "no-answer",
            CallStatus::Failed => "failed",
            CallStatus::Canceled => "canceled",
        }
    }

    /// Parse Twilio's spelling.
    pub fn parse(s: &str) -> Option<CallStatus> {
        Some(match s {
            "queued" => CallStatus::Queued,
            "ringing" => CallStatus::Ringing,
            "in-progress" => CallStatus::InProgress,
            "completed" => CallStatus::Completed,
            "busy" => CallStatus::Busy,
            "no-answer" => CallStatus::NoAnswer,
            "failed" => CallStatus::Failed,
            "canceled" => CallStatus::Canceled,
            _ => return None,
        })
    }

    /// Whether the call is over.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            CallStatus::Completed
                | CallStatus::Busy
                | CallStatus::NoAnswer
                | CallStatus::Failed
                | CallStatus::Canceled
        )
    }
}

/// Which way a call goes (Twilio's `direction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the trunk to us (`inbound`).
    Inbound,
    /// Placed through the API (`outbound-api`).
    OutboundApi,
    /// Placed by a call's `<Dial>` (`outbound-dial`).
    OutboundDial,
}

impl Direction {
    /// Twilio's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Inbound => "inbound",
            Direction::OutboundApi => "outbound-api",
            Direction::OutboundDial => "outbound-dial",
        }
    }
}

/// A call as the API shows it (rendered as Twilio's Call resource by [`crate::json::call`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CallView {
    /// `CA` + 32 hex digits.
    pub sid: String,
    /// The configured account SID.
    pub account_sid: String,
    /// The caller (a number or SIP URI, as Twilio shows it).
    pub from: String,
    /// The called party.
    pub to: String,
    /// Now.
    pub status: CallStatus,
    /// Which way.
    pub direction: Direction,
    /// When the call resource was created.
    pub date_created: SystemTime,
    /// When it last changed.
    pub date_updated: SystemTime,
    /// When it was answered.
    pub start_time: Option<SystemTime>,
    /// When it ended.
    pub end_time: Option<SystemTime>,
    /// Whole seconds from answer to end, once ended.
    pub duration_secs: Option<u64>,
    /// The SIP Call-ID (an ontime extension field, `sip_call_id`).
    pub sip_call_id: String,
    /// Answering-machine detection's verdict (`answered_by`: `human`, `machine_start`, …),
    /// once given on a call placed with `MachineDetection`.
    pub answered_by: Option<String>,
    /// The call whose `<Dial>` placed this one.
    pub parent_call_sid: Option<String>,
}

/// What `POST .../Calls/{CallSid}.json` asks.
#[derive(Debug, Clone, PartialEq)]
pub enum CallUpdate {
    /// `Status=completed`: hang up an answered call (BYE with Q.850 cause 16), or end a
    /// ringing one.
    Complete,
    /// `Status=canceled`: cancel an outbound call still ringing (CANCEL).
    Cancel,
    /// `Twiml=` (or `Url=`, fetched by the HTTP layer): run these verbs now, replacing whatever
    /// TwiML the call was running.
    Run(Vec<Verb>),
}

/// Which status callbacks a call sends (`StatusCallbackEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusCallbackEvent {
    /// The INVITE is about to leave.
    Initiated,
    /// 180/183.
    Ringing,
    /// 200.
    Answered,
    /// Any end.
    Completed,
}

impl StatusCallbackEvent {
    /// Twilio's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusCallbackEvent::Initiated => "initiated",
            StatusCallbackEvent::Ringing => "ringing",
            StatusCallbackEvent::Answered => "answered",
            StatusCallbackEvent::Completed => "completed",
        }
    }
}

/// Where and when a call reports its progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCallback {
    /// `StatusCallback`: the URL.
    pub url: String,
    /// `StatusCallbackMethod`: `POST` (default) or `GET`.
    pub method_get: bool,
    /// `StatusCallbackEvent`: Twilio's default is `completed` only.
    pub events: Vec<StatusCallbackEvent>,
}

/// Where an answering-machine verdict is posted when detection is asynchronous
/// (`AsyncAmdStatusCallback`, `AsyncAmdStatusCallbackMethod`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdStatusCallback {
    /// The URL.
    pub url: String,
    /// `GET` instead of the default `POST`.
    pub method_get: bool,
}

/// `MachineDetection` and its settings on `POST .../Calls.json`: answering-machine detection
/// from the answer on. Each duration is within Twilio's range (checked when the form is read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineDetection {
    /// `MachineDetection=DetectMessageEnd` (a machine's verdict waits for its greeting to end)
    /// rather than `Enable`.
    pub detect_message_end: bool,
    /// `MachineDetectionTimeout` (3–59 s, default 30 s).
    pub timeout: Duration,
    /// `MachineDetectionSpeechThreshold` (1000–6000 ms, default 2400 ms).
    pub speech_threshold: Duration,
    /// `MachineDetectionSpeechEndThreshold` (500–5000 ms, default 1200 ms).
    pub speech_end_threshold: Duration,
    /// `MachineDetectionSilenceTimeout` (2000–10000 ms, default 5000 ms).
    pub silence_timeout: Duration,
    /// `AsyncAmd=true`: the call's TwiML runs at once and the verdict goes to
    /// [`MachineDetection::status_callback`]; otherwise the TwiML waits for the verdict and its
    /// fetch carries it (`AnsweredBy`, `MachineDetectionDuration`).
    pub asynchronous: bool,
    /// `AsyncAmdStatusCallback`, if given.
    pub status_callback: Option<AmdStatusCallback>,
}

/// What `POST .../Calls.json` asks: dial out.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCall {
    /// `To`: a number (`+15551234567`) or a SIP URI, without the header part it may have had.
    pub to: String,
    /// The `X-` headers of `To`'s header part (`sip:bob@host?X-Campaign=7`): they go onto the
    /// INVITE.
    pub sip_headers: XHeaders,
    /// `From`: our number or SIP URI.
    pub from: String,
    /// What to run once answered (`Twiml=`, or `Url=` fetched by the HTTP layer).
    pub twiml: Vec<Verb>,
    /// `Url=` (and `Method=GET`) when its fetch must wait for the call: answering-machine
    /// detection that is not asynchronous fetches it once the verdict is in, with the verdict
    /// among its parameters. `twiml` is empty then.
    pub twiml_url: Option<(String, bool)>,
    /// Answering-machine detection, if asked for.
    pub machine_detection: Option<MachineDetection>,
    /// `Timeout`: how long to ring (Twilio's default 60 s).
    pub timeout: Duration,
    /// Status callbacks, if asked for.
    pub status_callback: Option<StatusCallback>,
}

/// Filters of `GET .../Calls.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallFilter {
    /// `Status`.
    pub status: Option<CallStatus>,
    /// `To`.
    pub to: Option<String>,
    /// `From`.
    pub from: Option<String>,
}

/// Why a control request failed ([`crate::Error::control`] maps each to Twilio's status and code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// No such call (404, code 20404).
    #[error("The requested resource {0} was not found")]
    NotFound(String),
    /// The call is not in a state this update applies to, e.g. TwiML for an ended call
    /// (400, code 21220 "Call is not in-progress").
    #[error("Call is not in-progress. Cannot redirect.")]
    NotInProgress,
    /// Dial-out asked for but no trunk to dial through is configured (400, code 21210; the
    /// text names ontime's `--trunk-uri`).
    #[error("no trunk is configured for outbound calls (--trunk-uri)")]
    NoTrunk,
    /// No room for another call, e.g. a call limit reached or the stack draining (429, code
    /// 20429).
    #[error("the gateway is at capacity; retry later")]
    AtCapacity,
    /// A parameter is invalid (400, code 21205 for URLs, 21201 otherwise); the text names it.
    #[error("{0}")]
    Invalid(String),
}

/// What the API acts on: implemented by whatever owns the calls (ontime's gateway implements it
/// with its call registry). It names only this crate's types, so any voice stack can serve
/// Twilio's Calls resource over its own calls.
pub trait CallControl: Send + Sync + 'static {
    /// The account SID calls belong to (`AC` + 32 hex); requests for another account get 404.
    fn account_sid(&self) -> &str;
    /// One call, live or recently ended.
    fn get(&self, sid: &str) -> Option<CallView>;
    /// Calls matching the filter, newest first.
    fn list(&self, filter: &CallFilter) -> Vec<CallView>;
    /// Act on a call.
    fn update(&self, sid: &str, update: CallUpdate) -> Result<CallView, ControlError>;
    /// Dial out.
    fn create(&self, call: NewCall) -> Result<CallView, ControlError>;
}
