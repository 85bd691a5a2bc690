//! The crate's one error type.

/// What was wrong with an input to the jitter crate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pushed RTP payload does not fit a preallocated slot.
    #[error("RTP payload of {len} bytes exceeds the jitter buffer slot size of {max} bytes")]
    PayloadTooLarge {
        /// Payload length that was pushed.
        len: usize,
        /// Slot size ([`crate::MAX_PAYLOAD_BYTES`]).
        max: usize,
    },
    /// A buffer configuration that cannot work.
    #[error("invalid jitter buffer configuration: {0}")]
    InvalidConfig(&'static str),
    /// A trace line that could not be read.
    #[error("trace line {line}: {reason}")]
    Trace {
        /// 1-based line number in the trace file.
        line: usize,
        /// What was wrong with it.
        reason: String,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
