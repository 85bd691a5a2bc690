//! RTCP (RFC 3550 §6): SR, RR, SDES CNAME, BYE, compound packets, and XR with the VoIP Metrics
//! report block (RFC 3611 §4.7), plus NTP timestamps and round-trip time from LSR/DLSR.

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
