//! The crate's error types: every malformed input says what was wrong. All of them live here,
//! a module that imports no other, so that `packet` and `rtcp` can return [`Error`] while it
//! wraps their [`RtpError`] and [`RtcpError`] without a module cycle (`tests/module_cycles.rs`
//! at the workspace root); both modules re-export their own.

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
    /// libopus refused a packet or a setting (a malformed Opus packet: bad TOC, wrong
    /// lengths; or one of a duration ontime does not take).
    #[error("opus: {0}")]
    Opus(&'static str),
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
            Error::Opus(_) => "opus",
        }
    }
}

/// Why an RTP packet was rejected. [`RtpError::reason`] gives a fixed metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtpError {
    /// Shorter than the 12-byte fixed header.
    #[error("RTP packet of {len} bytes is shorter than the 12-byte fixed header")]
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// Version field is not 2.
    #[error("RTP version {version}, expected 2")]
    Version {
        /// Version found.
        version: u8,
    },
    /// The CSRC list runs past the end of the packet.
    #[error("RTP CSRC count {count} needs {needed} header bytes, packet has {len}")]
    Csrc {
        /// CSRC count (CC field).
        count: u8,
        /// Bytes the fixed header and CSRC list need.
        needed: usize,
        /// Bytes received.
        len: usize,
    },
    /// The header extension runs past the end of the packet.
    #[error("RTP header extension needs {needed} bytes, packet has {len}")]
    Extension {
        /// Bytes the header and extension need.
        needed: usize,
        /// Bytes received.
        len: usize,
    },
    /// The padding count is zero or larger than the bytes after the header.
    #[error("RTP padding count {padding} invalid with {available} bytes after the header")]
    Padding {
        /// Padding count from the last byte.
        padding: u8,
        /// Bytes after the header (payload and padding).
        available: usize,
    },
}

impl RtpError {
    /// Every label [`RtpError::reason`] can return (to register the metric's series at zero).
    pub const REASONS: &'static [&'static str] =
        &["too_short", "version", "csrc", "extension", "padding"];

    /// A short, fixed label for `rtp_invalid_packets_total{reason}`.
    pub fn reason(&self) -> &'static str {
        match self {
            RtpError::TooShort { .. } => "too_short",
            RtpError::Version { .. } => "version",
            RtpError::Csrc { .. } => "csrc",
            RtpError::Extension { .. } => "extension",
            RtpError::Padding { .. } => "padding",
        }
    }
}

/// Why an RTCP packet was rejected. [`RtcpError::reason`] gives a fixed metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtcpError {
    /// Shorter than the 4-byte common header, or than the packet type's fixed part.
    #[error("RTCP packet of {len} bytes is shorter than the {needed} bytes its type needs")]
    TooShort {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        len: usize,
    },
    /// Version field is not 2.
    #[error("RTCP version {version}, expected 2")]
    Version {
        /// Version found.
        version: u8,
    },
    /// The length field points past the end of the datagram.
    #[error("RTCP length field says {declared} bytes, {available} remain in the datagram")]
    Length {
        /// Bytes the length field declares ((length + 1) × 4).
        declared: usize,
        /// Bytes left in the datagram.
        available: usize,
    },
    /// The padding count is zero or larger than the packet.
    #[error("RTCP padding count {padding} invalid in a {len}-byte packet")]
    Padding {
        /// Padding count.
        padding: u8,
        /// Packet length.
        len: usize,
    },
    /// The report count needs more bytes than the packet has.
    #[error("RTCP report count {count} needs {needed} bytes, packet has {len}")]
    ReportCount {
        /// Report (or source) count.
        count: u8,
        /// Bytes needed.
        needed: usize,
        /// Packet length.
        len: usize,
    },
    /// An SDES chunk or item runs past its packet or is not terminated.
    #[error("RTCP SDES chunk malformed at byte {offset}")]
    Sdes {
        /// Offset of the problem inside the packet.
        offset: usize,
    },
    /// A BYE reason runs past its packet.
    #[error("RTCP BYE reason of {reason_len} bytes overruns the packet")]
    Bye {
        /// Declared reason length.
        reason_len: u8,
    },
    /// An XR report block runs past its packet or has the wrong length for its type.
    #[error("RTCP XR block type {block_type} malformed: {detail}")]
    Xr {
        /// Block type (BT).
        block_type: u8,
        /// What was wrong.
        detail: &'static str,
    },
    /// A compound packet does not start with SR or RR (RFC 3550 §6.1).
    #[error("RTCP compound packet starts with packet type {packet_type}, not SR or RR")]
    CompoundStart {
        /// First packet type.
        packet_type: u8,
    },
}

impl RtcpError {
    /// A short, fixed label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            RtcpError::TooShort { .. } => "rtcp_too_short",
            RtcpError::Version { .. } => "rtcp_version",
            RtcpError::Length { .. } => "rtcp_length",
            RtcpError::Padding { .. } => "rtcp_padding",
            RtcpError::ReportCount { .. } => "rtcp_report_count",
            RtcpError::Sdes { .. } => "rtcp_sdes",
            RtcpError::Bye { .. } => "rtcp_bye",
            RtcpError::Xr { .. } => "rtcp_xr",
            RtcpError::CompoundStart { .. } => "rtcp_compound",
        }
    }
}

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
