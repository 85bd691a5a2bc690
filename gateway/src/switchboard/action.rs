//! What the switchboard asks of its driver: values the driver carries out, in the order they
//! were produced. Nothing here does I/O; the driver turns each into a task, a channel send, a log
//! line or a metric.

use std::fmt;

use ontime_sip::{CallHandle, NegotiatedMedia};

use crate::admission::{AdmittedCall, RejectReason};
use crate::agent::CallInfo;
use crate::call::{CallSettings, DialogEvent};
use crate::records::cdr::CallDetailRecord;
use ontime_twilio::{CallStatus, Verb};

/// One thing for the driver to do.
pub(crate) enum Action {
    /// An answered call (either way): start its task. The driver makes its dialog and control
    /// channels and tells the registry the call is up.
    StartCall(Box<CallStart>),
    /// Tell a running call's task something.
    ToCall(CallHandle, DialogEvent),
    /// A ringing inbound call needs its route's verdict (voice webhook, TwiML, the agent's
    /// preparation). The driver asks the route and answers with
    /// [`Switchboard::routed`](super::Switchboard::routed), at once when the route has nothing
    /// to wait for, or after [`Switchboard::routing`](super::Switchboard::routing) when it has.
    Route(CallHandle, CallInfo),
    /// The call is gone before it was answered: the agent releases what it prepared.
    Abandon(CallInfo),
    /// A change the call-control API must see.
    Registry(RegistryNote),
    /// A call detail record to write.
    Record(Box<CallDetailRecord>),
    /// Something to count (the driver owns the metrics; the switchboard only reports).
    Count(Counted),
    /// What the SIP endpoint counted since the last of these.
    SipStats(Box<ontime_sip::EndpointStats>),
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::StartCall(s) => write!(f, "StartCall({:?}, {})", s.call, s.info.call_sid),
            Action::ToCall(c, e) => write!(f, "ToCall({c:?}, {e:?})"),
            Action::Route(c, i) => write!(f, "Route({c:?}, {})", i.call_sid),
            Action::Abandon(i) => write!(f, "Abandon({})", i.call_sid),
            Action::Registry(n) => write!(f, "Registry({n:?})"),
            Action::Record(r) => write!(f, "Record({:?})", r.record),
            Action::Count(c) => write!(f, "Count({c:?})"),
            Action::SipStats(_) => write!(f, "SipStats"),
        }
    }
}

/// A change of a call's state for the registry (the API's view of calls).
#[derive(Debug, Clone)]
pub(crate) enum RegistryNote {
    /// An inbound call is ringing.
    Inbound(CallInfo),
    /// Our INVITE for this API call went out, with this SIP Call-ID.
    Initiated {
        /// The CallSid.
        sid: String,
        /// The SIP Call-ID.
        call_id: String,
    },
    /// A call started unanswered (`<Dial answerOnBridge>`) was answered now.
    Answered {
        /// The CallSid.
        sid: String,
    },
    /// Our call rings (the first 18x).
    Ringing {
        /// The CallSid.
        sid: String,
        /// The 18x status.
        status: u16,
    },
    /// The call ended before it was answered, with this Twilio status.
    Ended {
        /// The CallSid.
        sid: String,
        /// Twilio's status.
        status: CallStatus,
        /// The SIP status that decided it, if one did.
        sip_status: Option<u16>,
    },
}

/// A counted occurrence; the driver maps each to its metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Counted {
    /// An INVITE refused, and why.
    Rejected(RejectReason),
    /// A stateless 403 to a source outside the trunk networks.
    Untrusted,
    /// `X-` headers of an inbound INVITE dropped (past the 16th, or out of bounds).
    XHeadersDropped(u64),
    /// A datagram dropped before the endpoint, and why.
    Dropped(&'static str),
    /// A call answered, over this SIP transport, with RTP or SRTP.
    Answered {
        /// `udp`, `tcp`, `tls`.
        transport: &'static str,
        /// `rtp` or `srtp`.
        media: &'static str,
    },
    /// An outbound API call's outcome (`answered`, or a Twilio status).
    Outbound(&'static str),
    /// A call ended unanswered, by result label.
    EndedUnanswered(&'static str),
    /// A registration is (or is not) up.
    Registration {
        /// The address of record.
        aor: String,
        /// Up or not.
        up: bool,
    },
}

/// What the switchboard hands a new call.
pub(crate) struct CallStart {
    /// The dialog.
    pub call: CallHandle,
    /// Facts for the agent and the CDR.
    pub info: CallInfo,
    /// The admitted slot and its sockets (released when the call task ends).
    pub admitted: AdmittedCall,
    /// The negotiated media.
    pub negotiated: NegotiatedMedia,
    /// Unix ms of the INVITE.
    pub start_unix_ms: u64,
    /// Settings of the call core.
    pub settings: CallSettings,
    /// TwiML the call runs from the start.
    pub program: Vec<Verb>,
    /// SDES keys when the media is SRTP.
    pub srtp: Option<ontime_srtp::SdesKeys>,
    /// The call's span (`call_id`), which its task runs in.
    pub span: tracing::Span,
}
