//! The crate's error type.

/// What went wrong in a command or a parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An SDP body could not be read: the text says which line and why.
    #[error("invalid SDP: {0}")]
    Sdp(String),
    /// The offer has no audio codec we speak (answer 488).
    #[error("no common codec in the offer (none of the offered codecs is one of ours: PCMU, PCMA, G722 or opus, as configured)")]
    NoCommonCodec,
    /// Codecs were in common, but the SRTP policy refused every stream (answer 488 with a
    /// Warning carrying this text).
    #[error("{0}")]
    Srtp(&'static str),
    /// A SIP message could not be read.
    #[error("invalid SIP message: {0}")]
    Message(String),
    /// A URI we were asked to send to is not a `sip:`/`sips:` URI `rsip` can read.
    #[error("URI {0:?} is not a usable sip: URI")]
    InvalidUri(String),
    /// A header we were asked to add is not one a request may carry from the application:
    /// its name is not a token, its value holds a CR, LF or NUL, or the endpoint writes that
    /// header itself (Via, From, To, Call-ID, CSeq, Contact, ...). The name only: values may
    /// be secrets.
    #[error("header {0:?} cannot be added to the request")]
    InvalidHeader(String),
    /// The call handle is unknown (never existed, or the call has ended).
    #[error("no call with handle {0}")]
    UnknownCall(u64),
    /// The registration handle is unknown (never existed, or unregistered).
    #[error("no registration with handle {0}")]
    UnknownRegistration(u64),
    /// The command does not fit the call's state (e.g. answering a call twice).
    #[error("cannot {action} a call that is {state}")]
    InvalidState {
        /// What was asked.
        action: &'static str,
        /// The call's state.
        state: &'static str,
    },
    /// A status code outside the range the command allows.
    #[error("status code {code} not allowed here ({allowed})")]
    InvalidStatus {
        /// The code given.
        code: u16,
        /// The range allowed.
        allowed: &'static str,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
