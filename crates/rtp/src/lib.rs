//! # ontime-rtp
//!
//! Owns the media facts of a phone call and every byte format on the RTP path, sans-IO:
//! G.711 µ-law/A-law (bit-exact to ITU-T G.191), RTP packetization and validated parsing (on the
//! `rtp` crate), RTCP SR/RR/SDES/BYE and XR VoIP metrics (RFC 3611 §4.7), RFC 4733 telephone
//! events, and RFC 3550 receiver statistics. The 8 kHz clock, the 20 ms frame and the payload types
//! are defined here once and imported by every other crate.
//!
//! Nothing here reads a clock or opens a socket: callers pass bytes and arrival times in.
//!
//! ```
//! use ontime_rtp::{g711::Law, parse_rtp, Packetizer, FRAME_BYTES, MAX_FRAME_PACKET_BYTES, PT_PCMU};
//!
//! let samples = [0i16; FRAME_BYTES];
//! let mut frame = [0u8; FRAME_BYTES];
//! Law::Ulaw.encode_slice(&samples, &mut frame);
//!
//! let mut packetizer = Packetizer::with_initial(PT_PCMU, 0x1234_5678, 65535, 0);
//! let mut buf = [0u8; MAX_FRAME_PACKET_BYTES];
//! let len = packetizer.write_frame(&frame, &mut buf)?;
//! let packet = parse_rtp(&buf[..len])?;
//! assert_eq!((packet.sequence_number, packet.marker), (65535, true));
//! assert_eq!(packetizer.next_sequence(), 0);
//! # Ok::<(), ontime_rtp::Error>(())
//! ```

// The README's examples are compiled and run with the doctests, so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod codec;
pub mod consts;
pub mod dtmf;
pub mod error;
pub mod g711;
pub mod g722;
pub mod opus;
pub mod packet;
pub mod resample;
pub mod rtcp;
pub mod stats;

pub use codec::Codec;
pub use consts::*;
pub use dtmf::{DtmfDigit, DtmfTracker, TelephoneEvent};
pub use error::{Error, Result};
pub use packet::{
    classify, parse_rtp, sequence_delta, timestamp_delta, PacketKind, Packetizer, RtpError,
    RtpExtension, RtpPacketView,
};
pub use rtcp::ReceptionReport;
pub use rtcp::{
    parse_compound, parse_rtcp, round_trip_time, write_compound, NtpTimestamp, ReportBlock,
    RtcpError, RtcpPacket,
};
pub use stats::{ReceiverStats, SequenceVerdict, StreamAnalysis};
