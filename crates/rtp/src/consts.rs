//! The media facts every crate agrees on (8 kHz mono, 20 ms frames, payload types; G.722's
//! 16 kHz). Defined here
//! once; import, never restate.

use std::time::Duration;

/// G.711 sample rate, which is also the RTP clock rate of PCMU/PCMA.
pub const SAMPLE_RATE_HZ: u32 = 8000;
/// Channels of telephone audio.
pub const CHANNELS: u16 = 1;
/// Packet time of every frame ontime sends: 20 ms.
pub const FRAME: Duration = Duration::from_millis(20);
/// [`FRAME`] in milliseconds, for arithmetic on traces and JSON.
pub const FRAME_MS: u32 = 20;
/// Samples in one 20 ms frame at 8 kHz.
pub const SAMPLES_PER_FRAME: usize = 160;
/// Bytes of one 20 ms G.711 frame (one byte per sample).
pub const FRAME_BYTES: usize = SAMPLES_PER_FRAME;
/// RTP timestamp increment per 20 ms frame.
pub const TIMESTAMP_STEP: u32 = SAMPLES_PER_FRAME as u32;
/// Static payload type of G.711 µ-law (RFC 3551).
pub const PT_PCMU: u8 = 0;
/// Static payload type of G.711 A-law (RFC 3551).
pub const PT_PCMA: u8 = 8;
/// Static payload type of G.722 (RFC 3551 §4.5.2): 16 kHz audio on an 8000 Hz RTP clock.
pub const PT_G722: u8 = 9;
/// G.722's audio sample rate (its RTP clock stays [`SAMPLE_RATE_HZ`], RFC 3551 §4.5.2).
pub const WIDEBAND_RATE_HZ: u32 = 16_000;
/// Samples in one 20 ms frame at 16 kHz.
pub const WIDEBAND_SAMPLES_PER_FRAME: usize = 2 * SAMPLES_PER_FRAME;
/// Opus's RTP clock (RFC 7587 §4.1): 48000 Hz whatever the audio's bandwidth.
pub const OPUS_CLOCK_HZ: u32 = 48_000;
/// Dynamic payload type ontime offers for Opus; answers use the peer's.
pub const PT_OPUS_OFFER: u8 = 111;
/// Dynamic payload type ontime offers for telephone-event on Opus's 48000 Hz clock (RFC 4733
/// events run on the clock of the audio they replace); answers use the peer's.
pub const PT_TELEPHONE_EVENT_48K_OFFER: u8 = 110;
/// Static payload type of comfort noise (RFC 3389).
pub const PT_CN: u8 = 13;
/// Dynamic payload type ontime offers for telephone-event (RFC 4733); answers use the peer's.
pub const PT_TELEPHONE_EVENT_OFFER: u8 = 101;
/// Size of a fixed RTP header without CSRCs or extension.
pub const RTP_HEADER_BYTES: usize = 12;
/// Largest RTP packet ontime builds: header plus one 20 ms frame (G.711, G.722 at 64 kbit/s,
/// or Opus padded to the same size).
pub const MAX_FRAME_PACKET_BYTES: usize = RTP_HEADER_BYTES + FRAME_BYTES;

/// The silence byte for a payload type (µ-law 0xFF, A-law 0xD5, G.722
/// [`crate::g722::SILENCE_BYTE`]), `None` for other types. At 64 kbit/s a 20 ms frame is
/// [`FRAME_BYTES`] bytes for all three. Opus has no silence byte: its silence is a whole
/// encoded frame ([`crate::opus::silence_frame`]).
pub const fn silence_byte(payload_type: u8) -> Option<u8> {
    match payload_type {
        PT_PCMU => Some(0xFF),
        PT_PCMA => Some(0xD5),
        PT_G722 => Some(crate::g722::SILENCE_BYTE),
        _ => None,
    }
}
