//! RTP packets (RFC 3550 §5.1): a per-stream [`Packetizer`] that writes 20 ms packets into a
//! caller buffer without allocating, a validating zero-copy parser [`parse_rtp`], the RTP/RTCP
//! demultiplexing rule of RFC 5761 §4, and wrap-aware sequence/timestamp arithmetic.
//!
//! The header is marshalled by the `rtp` crate (`Header` + webrtc-util `Marshal`). Parsing is
//! written here because `rtp`'s `Unmarshal` allocates (CSRC and extension vectors) and can panic
//! on a truncated RFC 8285 extension element; the receive path must do neither.

use rtp::header::Header;
use webrtc_util::marshal::Marshal;

// The error types live in `error`, a leaf every module may use; the re-export keeps the
// `packet::RtpError` path.
pub use crate::error::RtpError;
use crate::{Error, Result, RTP_HEADER_BYTES, TIMESTAMP_STEP};

/// RTP version carried in every packet (RFC 3550 §5.1).
pub const RTP_VERSION: u8 = 2;

/// An RTP header extension (RFC 3550 §5.3.1): profile word and raw data, not interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpExtension<'a> {
    /// The 16-bit profile-defined field (0xBEDE: RFC 8285 one-byte elements).
    pub profile: u16,
    /// The extension data (length field × 4 bytes).
    pub data: &'a [u8],
}

/// A validated RTP packet borrowing the received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RtpPacketView<'a> {
    /// Marker bit (first packet of a talkspurt for audio, RFC 3551 §4.1).
    pub marker: bool,
    /// Payload type (7 bits).
    pub payload_type: u8,
    /// Sequence number.
    pub sequence_number: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// Synchronisation source.
    pub ssrc: u32,
    /// CSRC list as raw big-endian words (`csrc_count() * 4` bytes).
    pub csrc_bytes: &'a [u8],
    /// Header extension, when the X bit is set.
    pub extension: Option<RtpExtension<'a>>,
    /// Payload, without header and padding.
    pub payload: &'a [u8],
    /// Padding bytes removed from the end (0 when the P bit is clear).
    pub padding_len: u8,
}

impl RtpPacketView<'_> {
    /// Number of CSRCs.
    pub fn csrc_count(&self) -> usize {
        self.csrc_bytes.len() / 4
    }

    /// The CSRC identifiers.
    pub fn csrcs(&self) -> impl Iterator<Item = u32> + '_ {
        self.csrc_bytes
            .chunks_exact(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    }

    /// Converts to the `rtp` crate's owned packet (allocates; not for the tick path). The
    /// extension, if any, is kept as one raw element of its profile (id 0).
    pub fn to_rtp_packet(&self) -> rtp::packet::Packet {
        let header = Header {
            version: RTP_VERSION,
            padding: false,
            extension: self.extension.is_some(),
            marker: self.marker,
            payload_type: self.payload_type,
            sequence_number: self.sequence_number,
            timestamp: self.timestamp,
            ssrc: self.ssrc,
            csrc: self.csrcs().collect(),
            extension_profile: self.extension.map_or(0, |e| e.profile),
            extensions: self
                .extension
                .map(|e| {
                    vec![rtp::header::Extension {
                        id: 0,
                        payload: bytes::Bytes::copy_from_slice(e.data),
                    }]
                })
                .unwrap_or_default(),
            extensions_padding: 0,
        };
        rtp::packet::Packet {
            header,
            payload: bytes::Bytes::copy_from_slice(self.payload),
        }
    }
}

/// Parses and validates an RTP packet (RFC 3550 §5.1, §5.3.1) without allocating.
///
/// Checks the fixed header length, version 2, that the CSRC list and header extension fit, and
/// that a padding count is non-zero and no larger than what follows the header. Never panics.
pub fn parse_rtp(bytes: &[u8]) -> Result<RtpPacketView<'_>, RtpError> {
    let len = bytes.len();
    if len < RTP_HEADER_BYTES {
        return Err(RtpError::TooShort { len });
    }
    let b0 = bytes[0];
    let version = b0 >> 6;
    if version != RTP_VERSION {
        return Err(RtpError::Version { version });
    }
    let has_padding = b0 & 0x20 != 0;
    let has_extension = b0 & 0x10 != 0;
    let count = b0 & 0x0F;
    let csrc_end = RTP_HEADER_BYTES + 4 * usize::from(count);
    if len < csrc_end {
        return Err(RtpError::Csrc {
            count,
            needed: csrc_end,
            len,
        });
    }
    let mut header_end = csrc_end;
    let extension = if has_extension {
        let data_start = csrc_end + 4;
        if len < data_start {
            return Err(RtpError::Extension {
                needed: data_start,
                len,
            });
        }
        let profile = u16::from_be_bytes([bytes[csrc_end], bytes[csrc_end + 1]]);
        let words = u16::from_be_bytes([bytes[csrc_end + 2], bytes[csrc_end + 3]]);
        let data_end = data_start + 4 * usize::from(words);
        if len < data_end {
            return Err(RtpError::Extension {
                needed: data_end,
                len,
            });
        }
        header_end = data_end;
        Some(RtpExtension {
            profile,
            data: &bytes[data_start..data_end],
        })
    } else {
        None
    };
    let available = len - header_end;
    let padding_len = if has_padding {
        // RFC 3550 §5.1: the last octet counts the padding, itself included.
        let padding = bytes[len - 1];
        if padding == 0 || usize::from(padding) > available {
            return Err(RtpError::Padding { padding, available });
        }
        padding
    } else {
        0
    };
    Ok(RtpPacketView {
        marker: bytes[1] & 0x80 != 0,
        payload_type: bytes[1] & 0x7F,
        sequence_number: u16::from_be_bytes([bytes[2], bytes[3]]),
        timestamp: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        ssrc: u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
        csrc_bytes: &bytes[RTP_HEADER_BYTES..csrc_end],
        extension,
        payload: &bytes[header_end..len - usize::from(padding_len)],
        padding_len,
    })
}

/// What a datagram on a shared RTP/RTCP port is (RFC 5761 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// RTP: version 2, at least a fixed header, second octet outside 192..=223.
    Rtp,
    /// RTCP: version 2, at least 8 bytes, second octet (packet type) in 192..=223.
    Rtcp,
    /// Neither (STUN, DTLS, garbage, or too short).
    Other,
}

/// Classifies a datagram as RTP or RTCP by RFC 5761 §4: RTCP packet types 192–223 would be
/// RTP payload types 64–95 with the marker set, which RTP must not use on a shared port.
pub fn classify(bytes: &[u8]) -> PacketKind {
    if bytes.len() < 8 || bytes[0] >> 6 != RTP_VERSION {
        return PacketKind::Other;
    }
    match bytes[1] {
        192..=223 => PacketKind::Rtcp,
        _ if bytes.len() >= RTP_HEADER_BYTES => PacketKind::Rtp,
        _ => PacketKind::Other,
    }
}

/// Signed distance from sequence number `from` to `to`, across the 16-bit wrap
/// (`sequence_delta(65535, 0) == 1`).
pub const fn sequence_delta(from: u16, to: u16) -> i16 {
    to.wrapping_sub(from) as i16
}

/// Signed distance from RTP timestamp `from` to `to`, across the 32-bit wrap.
pub const fn timestamp_delta(from: u32, to: u32) -> i32 {
    to.wrapping_sub(from) as i32
}

/// Builds the RTP packets of one outgoing stream: fixed SSRC, sequence +1 per packet (wrapping at
/// 65535), timestamp +[`TIMESTAMP_STEP`] per 20 ms frame (or the codec's step, see
/// [`Packetizer::with_timestamp_step`]), marker on the first packet of each talkspurt. Writes
/// into caller buffers and allocates nothing.
#[derive(Debug, Clone)]
pub struct Packetizer {
    header: Header,
    timestamp_step: u32,
    marker_pending: bool,
    packets_sent: u32,
    octets_sent: u32,
}

impl Packetizer {
    /// A stream with random SSRC, initial sequence number and initial timestamp
    /// (RFC 3550 §5.1 asks for random initial values).
    pub fn new(payload_type: u8) -> Self {
        Self::with_initial(payload_type, rand::random(), rand::random(), rand::random())
    }

    /// A stream with explicit SSRC, first sequence number and first timestamp (tests, replays).
    pub fn with_initial(payload_type: u8, ssrc: u32, sequence: u16, timestamp: u32) -> Self {
        Packetizer {
            header: Header {
                version: RTP_VERSION,
                payload_type: payload_type & 0x7F,
                sequence_number: sequence,
                timestamp,
                ssrc,
                ..Header::default()
            },
            timestamp_step: TIMESTAMP_STEP,
            marker_pending: true,
            packets_sent: 0,
            octets_sent: 0,
        }
    }

    /// The same stream on a codec whose RTP clock is not 8000 Hz: `step` timestamp units per
    /// 20 ms frame (960 for Opus; see `Codec::timestamp_step`).
    pub fn with_timestamp_step(mut self, step: u32) -> Self {
        self.timestamp_step = step;
        self
    }

    /// RTP timestamp units per 20 ms frame.
    pub fn timestamp_step(&self) -> u32 {
        self.timestamp_step
    }

    /// Packets written so far, wrapping like the SR sender's packet count (RFC 3550 §6.4.1).
    pub fn packets_sent(&self) -> u32 {
        self.packets_sent
    }

    /// Payload octets written so far, wrapping like the SR sender's octet count.
    pub fn octets_sent(&self) -> u32 {
        self.octets_sent
    }

    /// The stream's SSRC.
    pub fn ssrc(&self) -> u32 {
        self.header.ssrc
    }

    /// The media payload type.
    pub fn payload_type(&self) -> u8 {
        self.header.payload_type
    }

    /// Changes the media payload type (e.g. after an SDP answer).
    pub fn set_payload_type(&mut self, payload_type: u8) {
        self.header.payload_type = payload_type & 0x7F;
    }

    /// Sequence number the next packet will carry.
    pub fn next_sequence(&self) -> u16 {
        self.header.sequence_number
    }

    /// RTP timestamp the next frame will carry.
    pub fn next_timestamp(&self) -> u32 {
        self.header.timestamp
    }

    /// Whether the next frame carries the marker bit.
    pub fn marker_pending(&self) -> bool {
        self.marker_pending
    }

    /// Marks the next frame as the first of a talkspurt (after silence that was not sent).
    pub fn start_talkspurt(&mut self) {
        self.marker_pending = true;
    }

    /// Advances the timestamp by `frames` × 20 ms without sending, keeping the timestamp on the
    /// media clock when frames are dropped (catch-up after a stall). Sequence numbers are not
    /// consumed: RFC 3550 §5.1 counts packets sent, so the receiver sees no loss.
    pub fn skip_frames(&mut self, frames: u32) {
        self.header.timestamp = self
            .header
            .timestamp
            .wrapping_add(frames.wrapping_mul(self.timestamp_step));
    }

    /// Writes one 20 ms media packet (header + `payload`) into `out` and returns its length.
    /// Advances the sequence by one and the timestamp by one frame's step. Allocates nothing.
    pub fn write_frame(&mut self, payload: &[u8], out: &mut [u8]) -> Result<usize> {
        let marker = self.marker_pending;
        let len = self.write(
            self.header.payload_type,
            marker,
            self.header.timestamp,
            payload,
            out,
        )?;
        self.marker_pending = false;
        self.header.timestamp = self.header.timestamp.wrapping_add(self.timestamp_step);
        Ok(len)
    }

    /// Writes a packet that shares the stream's SSRC and sequence space but carries its own
    /// payload type, marker and timestamp — an RFC 4733 telephone-event packet, whose timestamp
    /// is the event's start. Does not advance the media timestamp: call
    /// [`skip_frames`](Self::skip_frames) for each 20 ms the event replaces.
    pub fn write_event(
        &mut self,
        payload_type: u8,
        marker: bool,
        timestamp: u32,
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<usize> {
        self.write(payload_type & 0x7F, marker, timestamp, payload, out)
    }

    fn write(
        &mut self,
        payload_type: u8,
        marker: bool,
        timestamp: u32,
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<usize> {
        let needed = RTP_HEADER_BYTES + payload.len();
        if out.len() < needed {
            return Err(Error::BufferTooSmall {
                needed,
                available: out.len(),
            });
        }
        let media_payload_type = self.header.payload_type;
        let media_timestamp = self.header.timestamp;
        self.header.payload_type = payload_type;
        self.header.marker = marker;
        self.header.timestamp = timestamp;
        let written = self.header.marshal_to(&mut out[..RTP_HEADER_BYTES]);
        self.header.payload_type = media_payload_type;
        self.header.timestamp = media_timestamp;
        self.header.marker = false;
        // The header has no CSRCs or extension, so it is exactly 12 bytes and fits (checked above).
        if written.ok() != Some(RTP_HEADER_BYTES) {
            return Err(Error::BufferTooSmall {
                needed,
                available: out.len(),
            });
        }
        out[RTP_HEADER_BYTES..needed].copy_from_slice(payload);
        self.header.sequence_number = self.header.sequence_number.wrapping_add(1);
        self.packets_sent = self.packets_sent.wrapping_add(1);
        self.octets_sent = self.octets_sent.wrapping_add(payload.len() as u32);
        Ok(needed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FRAME_BYTES, MAX_FRAME_PACKET_BYTES, PT_PCMU};

    #[test]
    fn packetizer_wraps_sequence_and_steps_timestamp() {
        let mut p = Packetizer::with_initial(PT_PCMU, 0x1234_5678, 65534, u32::MAX - 100);
        let mut buf = [0u8; MAX_FRAME_PACKET_BYTES];
        let frame = [0xFFu8; FRAME_BYTES];
        let mut seen = Vec::new();
        for _ in 0..3 {
            let n = p.write_frame(&frame, &mut buf).unwrap();
            assert_eq!(n, MAX_FRAME_PACKET_BYTES);
            let v = parse_rtp(&buf[..n]).unwrap();
            assert_eq!(v.ssrc, 0x1234_5678);
            assert_eq!(v.payload, &frame[..]);
            seen.push((v.sequence_number, v.timestamp, v.marker));
        }
        assert_eq!(
            seen,
            vec![
                (65534, u32::MAX - 100, true),
                (65535, (u32::MAX - 100).wrapping_add(160), false),
                (0, (u32::MAX - 100).wrapping_add(320), false),
            ]
        );
        p.start_talkspurt();
        p.skip_frames(5);
        let n = p.write_frame(&frame, &mut buf).unwrap();
        let v = parse_rtp(&buf[..n]).unwrap();
        assert_eq!(v.sequence_number, 1);
        assert!(v.marker);
        assert_eq!(v.timestamp, (u32::MAX - 100).wrapping_add(160 * 8));
        assert_eq!(
            (p.packets_sent(), p.octets_sent()),
            (4, 4 * FRAME_BYTES as u32)
        );
    }

    #[test]
    fn event_packets_share_sequence_not_timestamp() {
        let mut p = Packetizer::with_initial(PT_PCMU, 7, 10, 1000);
        let mut buf = [0u8; 64];
        let n = p
            .write_event(101, true, 1000, &[1, 0x0A, 0, 0], &mut buf)
            .unwrap();
        let v = parse_rtp(&buf[..n]).unwrap();
        assert_eq!(
            (v.payload_type, v.marker, v.sequence_number, v.timestamp),
            (101, true, 10, 1000)
        );
        assert_eq!(p.next_sequence(), 11);
        assert_eq!(p.next_timestamp(), 1000);
        assert_eq!(p.payload_type(), PT_PCMU);
        assert!(
            p.marker_pending(),
            "the media talkspurt still starts with a marker"
        );
    }

    #[test]
    fn small_buffer_is_an_error_and_consumes_nothing() {
        let mut p = Packetizer::with_initial(PT_PCMU, 7, 10, 1000);
        let mut buf = [0u8; 20];
        let err = p.write_frame(&[0u8; FRAME_BYTES], &mut buf).unwrap_err();
        assert_eq!(
            err,
            Error::BufferTooSmall {
                needed: 172,
                available: 20
            }
        );
        assert_eq!((p.next_sequence(), p.next_timestamp()), (10, 1000));
    }

    #[test]
    fn parser_rejects_each_malformation() {
        let ok = [0x80, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0xAA];
        assert!(parse_rtp(&ok).is_ok());
        assert_eq!(parse_rtp(&ok[..11]).unwrap_err().reason(), "too_short");
        let mut v1 = ok;
        v1[0] = 0x40;
        assert_eq!(
            parse_rtp(&v1).unwrap_err(),
            RtpError::Version { version: 1 }
        );
        let mut cc = ok;
        cc[0] = 0x81;
        assert_eq!(parse_rtp(&cc).unwrap_err().reason(), "csrc");
        let mut x = ok;
        x[0] = 0x90;
        assert_eq!(parse_rtp(&x).unwrap_err().reason(), "extension");
        let mut p0 = ok;
        p0[0] = 0xA0;
        p0[12] = 0;
        assert_eq!(parse_rtp(&p0).unwrap_err().reason(), "padding");
        p0[12] = 2;
        assert_eq!(
            parse_rtp(&p0).unwrap_err(),
            RtpError::Padding {
                padding: 2,
                available: 1
            }
        );
        p0[12] = 1;
        let v = parse_rtp(&p0).unwrap();
        assert_eq!((v.payload.len(), v.padding_len), (0, 1));
    }

    #[test]
    fn parser_reads_csrc_and_extension() {
        let bytes = [
            0x92, 0xE0, 0x12, 0x34, 0, 0, 0, 9, 0xDE, 0xAD, 0xBE, 0xEF, // header, CC=2, X, M
            0, 0, 0, 1, 0, 0, 0, 2, // CSRCs
            0xBE, 0xDE, 0, 1, 0x10, 0xAB, 0, 0, // one-byte extension, 1 word
            1, 2, 3,
        ];
        let v = parse_rtp(&bytes).unwrap();
        assert!(v.marker);
        assert_eq!(v.payload_type, 0x60);
        assert_eq!(v.csrcs().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(v.extension.unwrap().profile, 0xBEDE);
        assert_eq!(v.extension.unwrap().data, &[0x10, 0xAB, 0, 0]);
        assert_eq!(v.payload, &[1, 2, 3]);
        let owned = v.to_rtp_packet();
        assert_eq!(owned.header.csrc, vec![1, 2]);
        assert_eq!(&owned.payload[..], &[1, 2, 3]);
    }

    #[test]
    fn classify_follows_rfc_5761() {
        let rtp_pkt = [0x80, 0x00, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        let rr = [0x80, 201, 0, 1, 0, 0, 0, 3];
        assert_eq!(classify(&rtp_pkt), PacketKind::Rtp);
        assert_eq!(classify(&rr), PacketKind::Rtcp);
        assert_eq!(
            classify(&[0x00, 0x01, 0, 0, 0x21, 0x12, 0xA4, 0x42]),
            PacketKind::Other
        );
        assert_eq!(classify(&[0x80, 0x00, 0, 1]), PacketKind::Other);
        // PT 96 with marker = 0xE0 = 224: outside 192..=223, so RTP.
        let mut dyn_marker = rtp_pkt;
        dyn_marker[1] = 0xE0;
        assert_eq!(classify(&dyn_marker), PacketKind::Rtp);
    }

    #[test]
    fn wrap_helpers() {
        assert_eq!(sequence_delta(65535, 0), 1);
        assert_eq!(sequence_delta(0, 65535), -1);
        assert_eq!(sequence_delta(100, 90), -10);
        assert_eq!(timestamp_delta(u32::MAX - 79, 80), 160);
        assert_eq!(timestamp_delta(80, u32::MAX - 79), -160);
    }

    #[test]
    fn random_packetizers_differ() {
        let a = Packetizer::new(PT_PCMU);
        let b = Packetizer::new(PT_PCMU);
        // 2^-32 chance of a false failure per field pair; both equal is 2^-80.
        assert!(
            (a.ssrc(), a.next_sequence(), a.next_timestamp())
                != (b.ssrc(), b.next_sequence(), b.next_timestamp())
        );
        assert!(a.marker_pending());
    }
}
