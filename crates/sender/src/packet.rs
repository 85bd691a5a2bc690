//! Building one 20 ms RTP packet per stream per tick into a fixed buffer.
//!
//! The header is written by the `rtp` crate (through `ontime-rtp`'s packetizer once it lands);
//! this module only keeps the stream's sequence number and timestamp running.

use ontime_rtp::{FRAME_BYTES, MAX_FRAME_PACKET_BYTES, TIMESTAMP_STEP};
use webrtc_util::marshal::Marshal;

/// The running RTP state of one outgoing stream.
pub(crate) struct FramePacketizer {
    header: rtp::header::Header,
}

impl FramePacketizer {
    pub(crate) fn new(
        payload_type: u8,
        ssrc: u32,
        first_sequence: u16,
        first_timestamp: u32,
    ) -> Self {
        Self {
            header: rtp::header::Header {
                version: 2,
                // RFC 3551 §4.1: the marker flags the first packet of a talkspurt; a stream that
                // sends continuously (silence between utterances) has exactly one, its first.
                marker: true,
                payload_type,
                sequence_number: first_sequence,
                timestamp: first_timestamp,
                ssrc,
                ..Default::default()
            },
        }
    }

    /// Write the next packet carrying `payload` (one frame) into `out`; returns its length.
    /// Advances the sequence number by one and the timestamp by one frame.
    pub(crate) fn write_next(
        &mut self,
        payload: &[u8; FRAME_BYTES],
        out: &mut [u8; MAX_FRAME_PACKET_BYTES],
    ) -> usize {
        // ok: a header with no CSRC and no extension is always 12 bytes and `out` holds
        // MAX_FRAME_PACKET_BYTES = 12 + FRAME_BYTES, so marshalling cannot fail.
        let header_len = self
            .header
            .marshal_to(&mut out[..])
            .expect("a 12-byte header fits the frame packet buffer");
        out[header_len..header_len + FRAME_BYTES].copy_from_slice(payload);
        self.header.marker = false;
        self.header.sequence_number = self.header.sequence_number.wrapping_add(1);
        self.header.timestamp = self.header.timestamp.wrapping_add(TIMESTAMP_STEP);
        header_len + FRAME_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_and_timestamp_run_on_and_wrap() {
        let mut p = FramePacketizer::new(0, 0xDEAD_BEEF, u16::MAX, u32::MAX - 100);
        let mut out = [0u8; MAX_FRAME_PACKET_BYTES];
        let payload = [0x55u8; FRAME_BYTES];
        let n = p.write_next(&payload, &mut out);
        assert_eq!(n, MAX_FRAME_PACKET_BYTES);
        assert_eq!(out[0], 0x80);
        assert_eq!(out[1], 0x80, "marker on the first packet, PT 0");
        assert_eq!(u16::from_be_bytes([out[2], out[3]]), u16::MAX);
        assert_eq!(&out[12..], &payload[..]);
        p.write_next(&payload, &mut out);
        assert_eq!(out[1], 0x00, "no marker afterwards");
        assert_eq!(u16::from_be_bytes([out[2], out[3]]), 0);
        assert_eq!(
            u32::from_be_bytes([out[4], out[5], out[6], out[7]]),
            (u32::MAX - 100).wrapping_add(TIMESTAMP_STEP)
        );
        assert_eq!(
            u32::from_be_bytes([out[8], out[9], out[10], out[11]]),
            0xDEAD_BEEF
        );
    }
}
