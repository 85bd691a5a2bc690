//! The sender's errors.

use std::io;

/// Everything that can go wrong starting the sender or managing its streams.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The sender thread could not be spawned.
    #[error("could not spawn the sender thread: {0}")]
    Spawn(#[source] io::Error),
    /// The sender thread exited before it reported ready (it panicked during set-up).
    #[error("the sender thread exited during set-up")]
    ThreadExited,
    /// The configured core is not in the process's CPU affinity mask.
    #[error("core {core} is not in the process's CPU affinity mask {allowed:?}")]
    CoreNotAllowed {
        /// The configured core.
        core: usize,
        /// The cores the process may run on.
        allowed: Vec<usize>,
    },
    /// The sender already serves its configured maximum number of streams.
    #[error("the sender already serves its maximum of {max_streams} streams")]
    TooManyStreams {
        /// [`crate::EngineConfig::max_streams`].
        max_streams: usize,
    },
    /// The control channel to the tick is full (more than its capacity of adds/removes queued
    /// within one tick).
    #[error("the sender's control queue is full ({capacity} requests pending); retry after 20 ms")]
    ControlQueueFull {
        /// Capacity of the control channel.
        capacity: usize,
    },
    /// The sender thread has stopped.
    #[error("the sender thread has stopped")]
    Stopped,
    /// A stream's payload type has no silence byte (only PCMU 0, PCMA 8 and G.722 9 are sent).
    #[error("payload type {0} is not one the sender fills silence for (PCMU 0, PCMA 8, G722 9)")]
    UnsupportedPayloadType(u8),
    /// A stream's ring capacity is smaller than one frame.
    #[error("ring capacity {bytes} bytes is smaller than one 20 ms frame")]
    RingTooSmall {
        /// The configured capacity.
        bytes: usize,
    },
    /// The stream's mark queue is full (too many marks whose audio has not been played yet).
    #[error("stream {stream} has {capacity} marks pending; the mark queue is full")]
    MarkQueueFull {
        /// The stream.
        stream: u64,
        /// Capacity of the mark queue.
        capacity: usize,
    },
    /// A DTMF digit string holds a character other than `0`–`9`, `*`, `#`, `A`–`D` or `w`.
    #[error("DTMF digits: {digit:?} at position {position} is not 0-9, *, #, A-D or w")]
    InvalidDtmfDigit {
        /// The offending character.
        digit: char,
        /// Its index in the string, in characters.
        position: usize,
    },
    /// A DTMF digit string is empty or longer than [`crate::MAX_DTMF_SYMBOLS`].
    #[error("DTMF digits: {len} symbols, expected 1 to {max}")]
    DtmfLength {
        /// Symbols given.
        len: usize,
        /// [`crate::MAX_DTMF_SYMBOLS`].
        max: usize,
    },
    /// A telephone-event payload type outside the dynamic range 96–127.
    #[error("telephone-event payload type {0} is not a dynamic payload type (96-127)")]
    DtmfPayloadType(u8),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
