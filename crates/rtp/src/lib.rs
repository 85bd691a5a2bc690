//! # ontime-rtp
//!
//! Owns the media facts of a phone call and every byte format on the RTP path, sans-IO:
//! G.711 µ-law/A-law (bit-exact to ITU-T G.191), RTP packetization and validated parsing (on the
//! `rtp` crate), RTCP SR/RR/SDES/BYE and XR VoIP metrics (RFC 3611 §4.7), RFC 4733 telephone
//! events, and RFC 3550 receiver statistics. The 8 kHz clock, the 20 ms frame and the payload types
//! are defined here once and imported by every other crate.
//!
//! Nothing here reads a clock or opens a socket: callers pass bytes and arrival times in.

pub mod consts;
pub use consts::*;
