//! The crypto suites (RFC 4568 §6.2).

use std::fmt;
use std::str::FromStr;

use crate::SdesError;

/// Master key length of both suites, in bytes.
pub const MASTER_KEY_LEN: usize = 16;
/// Master salt length of both suites, in bytes.
pub const MASTER_SALT_LEN: usize = 14;
/// The longest SRTP authentication tag (the `_80` suite): the room `protect` needs after the
/// RTP packet.
pub const MAX_SRTP_TAG_LEN: usize = 10;
/// SRTCP's authentication tag: 80 bits for both suites (RFC 4568 §6.2.2: the `_32` suite
/// shortens the SRTP tag only).
pub const SRTCP_TAG_LEN: usize = 10;
/// What `protect_rtcp` appends: the E flag and SRTCP index (4 bytes), then the tag.
pub const SRTCP_TRAILER_LEN: usize = 4 + SRTCP_TAG_LEN;

/// An SRTP crypto suite. Both use AES-128 in counter mode, HMAC-SHA1 and a key derivation rate
/// of 0; they differ in the SRTP tag length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    /// `AES_CM_128_HMAC_SHA1_80`: 80-bit SRTP tags. The default, and what to offer first.
    AesCm128HmacSha1_80,
    /// `AES_CM_128_HMAC_SHA1_32`: 32-bit SRTP tags (6 bytes less per packet, weaker
    /// authentication); SRTCP keeps 80-bit tags.
    AesCm128HmacSha1_32,
}

impl Suite {
    /// Every supported suite, in order of preference.
    pub const ALL: [Suite; 2] = [Suite::AesCm128HmacSha1_80, Suite::AesCm128HmacSha1_32];

    /// The suite's name in SDP.
    pub fn name(self) -> &'static str {
        match self {
            Self::AesCm128HmacSha1_80 => "AES_CM_128_HMAC_SHA1_80",
            Self::AesCm128HmacSha1_32 => "AES_CM_128_HMAC_SHA1_32",
        }
    }

    /// Length of the tag appended to each SRTP packet, in bytes.
    pub fn srtp_tag_len(self) -> usize {
        match self {
            Self::AesCm128HmacSha1_80 => 10,
            Self::AesCm128HmacSha1_32 => 4,
        }
    }
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Suite {
    type Err = SdesError;

    /// Suite names are case-sensitive tokens (RFC 4568 §9.2).
    fn from_str(s: &str) -> Result<Self, SdesError> {
        Suite::ALL
            .into_iter()
            .find(|suite| suite.name() == s)
            .ok_or_else(|| SdesError::UnknownSuite(s.chars().take(64).collect()))
    }
}
