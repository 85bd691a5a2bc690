//! What goes between the endpoint and the application: handles, events, messages to send, and
//! the parameters of a call we place.

use std::net::SocketAddr;
use std::time::Duration;

use crate::message::{Method, NameAddr};
use crate::sdp::SessionDescription;

use super::config::Transport;
#[cfg(doc)]
use super::Endpoint;

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it.
    pub destination: SocketAddr,
    /// On which transport.
    pub transport: Transport,
    /// The bytes.
    pub payload: Vec<u8>,
}

/// Names one call (dialog) inside an [`Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallHandle(pub u64);

/// Names one out-of-dialog request we sent (OPTIONS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestHandle(pub u64);

/// Names one registration ([`Endpoint::register`]) inside an [`Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegistrationHandle(pub u64);

/// Why a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndReason {
    /// The peer sent BYE.
    RemoteHangup,
    /// We sent BYE (the field says whether a final response came; `false` is a timeout).
    LocalHangup {
        /// A final response to our BYE arrived.
        confirmed: bool,
    },
    /// The caller cancelled before the answer (we sent 487), or we cancelled our call.
    Cancelled,
    /// We rejected the incoming call with this status.
    Rejected {
        /// The status sent.
        status: u16,
    },
    /// Our call was refused with this final status.
    Refused {
        /// The status received.
        status: u16,
        /// Its reason phrase.
        reason: String,
    },
    /// No final response to our INVITE within 64·T1 (timer B).
    Timeout,
    /// Our 2xx was never acknowledged (RFC 3261 §13.3.1.4); we sent BYE.
    NoAck,
    /// The session timer expired without a refresh (RFC 4028 §10); we sent BYE.
    SessionExpired,
    /// A request inside the dialog got 481/408 (RFC 3261 §12.2.1.2).
    DialogGone {
        /// The status received.
        status: u16,
    },
    /// We answered an INVITE without SDP with our offer and the ACK brought no usable answer
    /// (none, or unreadable SDP); we sent BYE (RFC 3261 §13.3.1.4).
    AckWithoutAnswer,
}

/// A new call to us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingCall {
    /// The call.
    pub call: CallHandle,
    /// Call-ID.
    pub call_id: String,
    /// The caller (From).
    pub from: NameAddr,
    /// The called party (To).
    pub to: NameAddr,
    /// Request-URI.
    pub request_uri: String,
    /// Where the INVITE came from.
    pub source: SocketAddr,
    /// The transport it came on.
    pub transport: Transport,
    /// The SDP offer, if the INVITE had one.
    pub offer: Option<SessionDescription>,
    /// Every header of the INVITE (canonical names, unfolded values), for what the application
    /// reads itself (P-Asserted-Identity, X- headers, Authorization...).
    pub headers: Vec<(String, String)>,
}

/// What the endpoint tells the application.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A new INVITE: answer with [`Endpoint::answer`], [`Endpoint::ring`], [`Endpoint::reject`].
    IncomingCall(Box<IncomingCall>),
    /// Our call got a provisional response (180, 183, ...).
    Progress {
        /// The call.
        call: CallHandle,
        /// Status code.
        status: u16,
        /// Early media SDP, if any.
        sdp: Option<SessionDescription>,
    },
    /// Our call was answered (we already sent the ACK).
    Answered {
        /// The call.
        call: CallHandle,
        /// The answer SDP.
        answer: Option<SessionDescription>,
    },
    /// The caller's answer to the offer we put in our 2xx, from the ACK (late offer: the
    /// INVITE had no SDP, RFC 3261 §13.2.1, RFC 3264). Comes just before
    /// [`Event::Established`]. An ACK without a usable answer ends the call instead
    /// ([`EndReason::AckWithoutAnswer`]).
    AckAnswer {
        /// The call.
        call: CallHandle,
        /// The answer SDP.
        answer: SessionDescription,
    },
    /// The caller acknowledged our 2xx: media may flow both ways.
    Established {
        /// The call.
        call: CallHandle,
    },
    /// The peer sent a re-INVITE or UPDATE with a new offer (hold, resume, media change):
    /// reply with [`Endpoint::answer_update`] or [`Endpoint::reject_update`].
    OfferReceived {
        /// The call.
        call: CallHandle,
        /// `Invite` (re-INVITE) or `Update`.
        method: Method,
        /// The new offer.
        offer: SessionDescription,
    },
    /// Our re-INVITE was answered.
    UpdateAnswered {
        /// The call.
        call: CallHandle,
        /// The answer SDP.
        answer: Option<SessionDescription>,
    },
    /// Our re-INVITE failed with this status; the previous session stays.
    UpdateFailed {
        /// The call.
        call: CallHandle,
        /// Status received (408 on timeout).
        status: u16,
    },
    /// A DTMF digit sent with SIP INFO (`application/dtmf-relay` or `application/dtmf`).
    Dtmf {
        /// The call.
        call: CallHandle,
        /// The digit (`0`-`9`, `*`, `#`, `A`-`D`, or `!` for flash).
        digit: char,
        /// Duration, if given.
        duration_ms: Option<u32>,
    },
    /// The call is over; the handle is no longer valid.
    Ended {
        /// The call.
        call: CallHandle,
        /// Why.
        reason: EndReason,
    },
    /// The final response (or 408 on timeout) to an OPTIONS we sent.
    OptionsResponse {
        /// The request.
        request: RequestHandle,
        /// Status.
        status: u16,
    },
    /// The final response to our REFER ([`Endpoint::refer`], RFC 3515): 2xx (normally 202
    /// Accepted) means the peer will try the transfer and reports how it goes with
    /// [`Event::ReferProgress`]; 300 and above mean it will not (408: no response came). After a
    /// 481 or 408 the dialog is gone as well: [`Event::Ended`] with [`EndReason::DialogGone`]
    /// follows, as for any request inside the dialog (RFC 3261 §12.2.1.2).
    ReferResponse {
        /// The call.
        call: CallHandle,
        /// Status received (408 on timeout).
        status: u16,
    },
    /// A registration succeeded or was refreshed (a 2xx to our REGISTER); the endpoint
    /// refreshes it at half of `expires`.
    Registered {
        /// The registration.
        handle: RegistrationHandle,
        /// The expiry the registrar granted our contact.
        expires: Duration,
    },
    /// A REGISTER failed (`status` 408 when no response came, 401/407 when our credentials
    /// were refused or missing); the endpoint tries again in `retry_in` (doubling with each
    /// failure in a row, up to 30 minutes).
    RegistrationFailed {
        /// The registration.
        handle: RegistrationHandle,
        /// The final status.
        status: u16,
        /// When the endpoint tries again.
        retry_in: Duration,
    },
    /// [`Endpoint::unregister`] is done (the registrar answered, or failed to: the binding
    /// then expires on its own); the handle is no longer valid.
    Unregistered {
        /// The registration.
        handle: RegistrationHandle,
    },
    /// The peer reported the progress of the transfer we asked for with a NOTIFY (RFC 3515
    /// §2.4.5), already answered 200. It may come before [`Event::ReferResponse`].
    ReferProgress {
        /// The call.
        call: CallHandle,
        /// The status of the transferred call, from the NOTIFY's `message/sipfrag` body: 1xx
        /// while it is being tried, 2xx once answered, 300 and above when it failed.
        status: u16,
        /// `Subscription-State: terminated`: the last report for this transfer.
        terminated: bool,
    },
}

/// Parameters of a call we place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallParams {
    /// Request-URI and To (e.g. `sip:bot@192.0.2.10:5060`).
    pub target: String,
    /// Our From URI (`None`: `sip:<user>@<local_addr>`).
    pub from: Option<String>,
    /// Where to send the INVITE.
    pub destination: SocketAddr,
    /// Transport.
    pub transport: Transport,
    /// The SDP offer.
    pub offer: SessionDescription,
    /// Header fields added to the INVITE after the endpoint's own, as (name, value): e.g. a
    /// trunk's `X-` headers. A name must be a token and not one the endpoint writes itself, a
    /// value free of CR, LF and NUL ([`crate::Error::InvalidHeader`]).
    pub headers: Vec<(String, String)>,
}
