//! The trunk codecs ontime speaks, and what each means for the media path: its static payload
//! type, its `a=rtpmap` name, its RTP clock and the rate of the audio it carries.

use crate::{PT_G722, PT_PCMA, PT_PCMU, SAMPLE_RATE_HZ, WIDEBAND_RATE_HZ};

/// A codec on the trunk side of a call. Every one sends [`crate::FRAME_BYTES`] bytes per 20 ms
/// frame and steps the RTP timestamp by [`crate::TIMESTAMP_STEP`], so the sender's rings and
/// packetizer are the same for all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// G.711 µ-law, static payload type 0.
    Pcmu,
    /// G.711 A-law, static payload type 8.
    Pcma,
    /// G.722 at 64 kbit/s, static payload type 9: 16 kHz audio.
    G722,
}

impl Codec {
    /// Every codec, in ontime's default order of preference: G.711 first, for the trunks and
    /// SBCs that transcode anything else.
    pub const ALL: [Codec; 3] = [Codec::Pcmu, Codec::Pcma, Codec::G722];

    /// The static payload type (RFC 3551).
    pub const fn payload_type(self) -> u8 {
        match self {
            Codec::Pcmu => PT_PCMU,
            Codec::Pcma => PT_PCMA,
            Codec::G722 => PT_G722,
        }
    }

    /// The `a=rtpmap` encoding name (RFC 3551), also the name `--codecs` takes.
    pub const fn encoding_name(self) -> &'static str {
        match self {
            Codec::Pcmu => "PCMU",
            Codec::Pcma => "PCMA",
            Codec::G722 => "G722",
        }
    }

    /// The codec an `a=rtpmap` encoding name stands for (any case).
    pub fn from_name(name: &str) -> Option<Codec> {
        Codec::ALL
            .into_iter()
            .find(|c| c.encoding_name().eq_ignore_ascii_case(name))
    }

    /// The RTP clock rate: 8000 Hz for all three (G.722's is 8000 by a historical error that
    /// RFC 3551 §4.5.2 keeps for compatibility, although it samples at 16 kHz).
    pub const fn rtp_clock_hz(self) -> u32 {
        SAMPLE_RATE_HZ
    }

    /// The sample rate of the audio it carries.
    pub const fn audio_rate_hz(self) -> u32 {
        match self {
            Codec::Pcmu | Codec::Pcma => SAMPLE_RATE_HZ,
            Codec::G722 => WIDEBAND_RATE_HZ,
        }
    }

    /// Whether it carries 16 kHz audio.
    pub const fn is_wideband(self) -> bool {
        matches!(self, Codec::G722)
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.encoding_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_any_case() {
        for c in Codec::ALL {
            assert_eq!(Codec::from_name(c.encoding_name()), Some(c));
            assert_eq!(
                Codec::from_name(&c.encoding_name().to_ascii_lowercase()),
                Some(c)
            );
        }
        assert_eq!(Codec::from_name("opus"), None);
    }

    #[test]
    fn g722_samples_at_16k_on_an_8k_clock() {
        assert_eq!(
            (Codec::G722.rtp_clock_hz(), Codec::G722.audio_rate_hz()),
            (8000, 16000)
        );
        assert_eq!(Codec::Pcma.audio_rate_hz(), 8000);
    }
}
