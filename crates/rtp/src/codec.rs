//! The trunk codecs ontime speaks, and what each means for the media path: its static payload
//! type, its `a=rtpmap` name, its RTP clock and the rate of the audio it carries.

use crate::{
    FRAME_MS, OPUS_CLOCK_HZ, PT_G722, PT_OPUS_OFFER, PT_PCMA, PT_PCMU, SAMPLE_RATE_HZ,
    WIDEBAND_RATE_HZ,
};

/// A codec on the trunk side of a call. Every one sends [`crate::FRAME_BYTES`] bytes per 20 ms
/// frame (Opus padded to that size, `crate::opus`), so the sender's rings are the same for all; the RTP
/// timestamp steps by [`Codec::timestamp_step`] per frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// G.711 µ-law, static payload type 0.
    Pcmu,
    /// G.711 A-law, static payload type 8.
    Pcma,
    /// G.722 at 64 kbit/s, static payload type 9: 16 kHz audio.
    G722,
    /// Opus (RFC 7587), a dynamic payload type, on a 48000 Hz RTP clock: ontime encodes and
    /// decodes it at 16 kHz (wideband), mono.
    Opus,
}

impl Codec {
    /// Every codec, in ontime's default order of preference: G.711 first, for the trunks and
    /// SBCs that transcode anything else.
    pub const ALL: [Codec; 4] = [Codec::Pcmu, Codec::Pcma, Codec::G722, Codec::Opus];

    /// The static payload type (RFC 3551), or for Opus the dynamic one ontime offers (an
    /// answer takes the offer's).
    pub const fn payload_type(self) -> u8 {
        match self {
            Codec::Pcmu => PT_PCMU,
            Codec::Pcma => PT_PCMA,
            Codec::G722 => PT_G722,
            Codec::Opus => PT_OPUS_OFFER,
        }
    }

    /// Whether its payload type is static (RFC 3551), so an offer may omit its `a=rtpmap`.
    pub const fn has_static_payload_type(self) -> bool {
        !matches!(self, Codec::Opus)
    }

    /// The `a=rtpmap` encoding name (RFC 3551, RFC 7587), also the name `--codecs` takes.
    pub const fn encoding_name(self) -> &'static str {
        match self {
            Codec::Pcmu => "PCMU",
            Codec::Pcma => "PCMA",
            Codec::G722 => "G722",
            Codec::Opus => "opus",
        }
    }

    /// The `a=rtpmap` channel count, when the name carries one: Opus is always `opus/48000/2`
    /// (RFC 7587 §7), even for mono.
    pub const fn rtpmap_channels(self) -> Option<u16> {
        match self {
            Codec::Opus => Some(2),
            _ => None,
        }
    }

    /// The codec an `a=rtpmap` encoding name stands for (any case).
    pub fn from_name(name: &str) -> Option<Codec> {
        Codec::ALL
            .into_iter()
            .find(|c| c.encoding_name().eq_ignore_ascii_case(name))
    }

    /// The RTP clock rate: 8000 Hz for G.711 and G.722 (G.722's is 8000 by a historical error
    /// that RFC 3551 §4.5.2 keeps for compatibility, although it samples at 16 kHz), 48000 Hz
    /// for Opus (RFC 7587 §4.1, whatever the audio's bandwidth).
    pub const fn rtp_clock_hz(self) -> u32 {
        match self {
            Codec::Opus => OPUS_CLOCK_HZ,
            _ => SAMPLE_RATE_HZ,
        }
    }

    /// RTP timestamp units in one 20 ms frame: 160, or 960 for Opus.
    pub const fn timestamp_step(self) -> u32 {
        self.rtp_clock_hz() / 1000 * FRAME_MS
    }

    /// The sample rate of the audio ontime encodes and decodes it at.
    pub const fn audio_rate_hz(self) -> u32 {
        match self {
            Codec::Pcmu | Codec::Pcma => SAMPLE_RATE_HZ,
            Codec::G722 | Codec::Opus => WIDEBAND_RATE_HZ,
        }
    }

    /// Whether it carries 16 kHz audio.
    pub const fn is_wideband(self) -> bool {
        matches!(self, Codec::G722 | Codec::Opus)
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
        assert_eq!(Codec::from_name("OPUS"), Some(Codec::Opus));
        assert_eq!(Codec::from_name("speex"), None);
    }

    #[test]
    fn opus_runs_a_48k_clock_with_960_per_frame() {
        assert_eq!(
            (Codec::Opus.rtp_clock_hz(), Codec::Opus.timestamp_step()),
            (48_000, 960)
        );
        assert_eq!(Codec::G722.timestamp_step(), crate::TIMESTAMP_STEP);
        assert_eq!(Codec::Opus.rtpmap_channels(), Some(2));
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
