//! The crate's error type: every malformed input says what was wrong.

use crate::packet::RtpError;
use crate::rtcp::RtcpError;

/// Errors of `ontime-rtp`: malformed packets and buffers too small for what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An RTP packet failed validation.
    #[error(transparent)]
    Rtp(#[from] RtpError),
    /// An RTCP packet failed validation.
    #[error(transparent)]
    Rtcp(#[from] RtcpError),
    /// An RFC 4733 telephone-event payload was not 4 bytes long.
    #[error("telephone-event payload is {len} bytes, RFC 4733 §2.3 needs at least 4")]
    TelephoneEventLength {
        /// Bytes received.
        len: usize,
    },
    /// The output buffer cannot hold what is being written.
    #[error("output buffer of {available} bytes cannot hold {needed} bytes")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// A value does not fit the field it is written into.
    #[error("{field} = {value} does not fit its wire field")]
    FieldOverflow {
        /// Name of the field.
        field: &'static str,
        /// The value that did not fit.
        value: u64,
    },
}

impl Error {
    /// A short, fixed label for metrics (`rtp_invalid_packets_total{reason}`).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Rtp(e) => e.reason(),
            Error::Rtcp(e) => e.reason(),
            Error::TelephoneEventLength { .. } => "telephone_event",
            Error::BufferTooSmall { .. } => "buffer_too_small",
            Error::FieldOverflow { .. } => "field_overflow",
        }
    }
}

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
