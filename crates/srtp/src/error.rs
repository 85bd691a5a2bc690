//! Why a packet, a key or a crypto line was refused.

/// A packet that could not be protected or unprotected, or master key material of the wrong size.
///
/// Every variant is `Copy` and carries no heap data: errors are built on the media path, which
/// must not allocate. Each one is a drop the caller counts, by [`Error::reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The packet is shorter than its header plus the SRTP trailer (tag, and for SRTCP the
    /// E flag and index).
    #[error("packet of {len} bytes is too short for SRTP/SRTCP")]
    TooShort {
        /// The packet's length.
        len: usize,
    },
    /// Not an RTP/RTCP version 2 packet, or its CSRC list or header extension runs past its end.
    #[error("malformed RTP/RTCP header")]
    Malformed,
    /// `protect`'s buffer has no room for the authentication tag (and SRTCP index), or `len`
    /// exceeds the buffer.
    #[error("buffer of {capacity} bytes cannot hold the protected packet of {needed} bytes")]
    BufferTooSmall {
        /// Bytes the protected packet needs.
        needed: usize,
        /// The buffer's length.
        capacity: usize,
    },
    /// The authentication tag does not match: tampered, corrupted, or keyed differently.
    #[error("SRTP authentication failed")]
    AuthFailed,
    /// The packet's index has already been received (or, for `protect`, already protected: a
    /// second packet under the same index would reuse keystream).
    #[error("SRTP packet replayed")]
    Replayed,
    /// The packet's index is older than the replay window (or would need a rollover counter
    /// below zero), so it cannot be told apart from a replay.
    #[error("SRTP packet older than the replay window")]
    TooOld,
    /// The master key has protected as many packets as its index can count (2^48 SRTP,
    /// 2^31 SRTCP): a new key must be negotiated.
    #[error("SRTP/SRTCP index exhausted: the master key must be renewed")]
    IndexExhausted,
    /// Master key or salt of the wrong length for the suite.
    #[error("master key of {key_len} bytes and salt of {salt_len} bytes; expected 16 and 14")]
    BadKey {
        /// The key's length.
        key_len: usize,
        /// The salt's length.
        salt_len: usize,
    },
}

impl Error {
    /// A short `snake_case` label for metrics (e.g. a `reason` label on a drop counter).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::TooShort { .. } => "too_short",
            Self::Malformed => "malformed",
            Self::BufferTooSmall { .. } => "buffer_too_small",
            Self::AuthFailed => "auth_failed",
            Self::Replayed => "replayed",
            Self::TooOld => "too_old",
            Self::IndexExhausted => "index_exhausted",
            Self::BadKey { .. } => "bad_key",
        }
    }
}

/// A crypto attribute (RFC 4568 `a=crypto:` line) that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdesError {
    /// The line does not have the shape `<tag> <crypto-suite> <key-params> [<session-params>]`.
    #[error("crypto attribute: {0}")]
    Syntax(&'static str),
    /// The tag is not 1 to 9 decimal digits.
    #[error("crypto attribute: tag {0:?} is not 1 to 9 digits")]
    BadTag(String),
    /// A crypto-suite other than AES_CM_128_HMAC_SHA1_80 and AES_CM_128_HMAC_SHA1_32.
    #[error("crypto attribute: unsupported crypto-suite {0:?}")]
    UnknownSuite(String),
    /// A key method other than `inline`.
    #[error("crypto attribute: unsupported key method {0:?} (only inline)")]
    UnknownKeyMethod(String),
    /// The key is not valid base64. The key itself is never quoted in the message.
    #[error("crypto attribute: the inline key is not valid base64")]
    BadBase64,
    /// The key decodes to the wrong number of bytes.
    #[error(
        "crypto attribute: the inline key is {0} bytes; the suite needs 30 (16 key + 14 salt)"
    )]
    BadKeyLength(usize),
    /// The lifetime is neither a decimal number nor `2^n`, or is outside 1..=2^48.
    #[error("crypto attribute: bad key lifetime {0:?}")]
    BadLifetime(String),
    /// The key carries an MKI (`|<mki>:<length>`), or the line more than one key. Not supported:
    /// every packet would have to carry the MKI and the keys be switched on it.
    #[error("crypto attribute: MKI and multiple keys are not supported")]
    MkiUnsupported,
    /// A session parameter we do not implement (KDR, UNENCRYPTED_SRTP, UNENCRYPTED_SRTCP,
    /// UNAUTHENTICATED_SRTP, FEC_ORDER, FEC_KEY or an unknown mandatory one). RFC 4568 §6.3.7:
    /// a line with an unknown parameter not prefixed by `-` is invalid.
    #[error("crypto attribute: unsupported session parameter {0:?}")]
    UnsupportedSessionParam(String),
    /// No crypto line of an offer is usable; holds the first line's refusal, if there was a
    /// line at all.
    #[error("no supported crypto attribute in the offer{}", .0.as_ref().map(|e| format!(" (first refused: {e})")).unwrap_or_default())]
    NoSupportedOffer(Option<Box<SdesError>>),
    /// The answer's crypto line has a tag we did not offer, or another suite than the offered
    /// line with that tag.
    #[error("the answer's crypto attribute (tag {tag}) does not match an offered one")]
    AnswerMismatch {
        /// The answer's tag.
        tag: u32,
    },
    /// The operating system's random source failed while making a key.
    #[error("no randomness for a master key: {0}")]
    Random(String),
}

impl SdesError {
    /// A short `snake_case` label for metrics and `Warning` headers.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Syntax(_) => "syntax",
            Self::BadTag(_) => "bad_tag",
            Self::UnknownSuite(_) => "unknown_suite",
            Self::UnknownKeyMethod(_) => "unknown_key_method",
            Self::BadBase64 => "bad_base64",
            Self::BadKeyLength(_) => "bad_key_length",
            Self::BadLifetime(_) => "bad_lifetime",
            Self::MkiUnsupported => "mki_unsupported",
            Self::UnsupportedSessionParam(_) => "unsupported_session_param",
            Self::NoSupportedOffer(_) => "no_supported_offer",
            Self::AnswerMismatch { .. } => "answer_mismatch",
            Self::Random(_) => "random",
        }
    }
}
