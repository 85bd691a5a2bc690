//! SDES (RFC 4568): the `a=crypto:` attribute that carries SRTP master keys in SDP, and the
//! offer/answer choice. Sans-IO: strings in, strings and [`SrtpContext`]s out.
//!
//! Supported: the `inline` key method, the two AES_CM_128_HMAC_SHA1 suites, an optional key
//! lifetime (parsed and kept, not enforced), the `WSH` session parameter (a hint; our window is
//! [`crate::REPLAY_WINDOW`]) and ignorable `-` parameters. Refused with a clear error: MKIs and
//! several keys on one line, the KDR, UNENCRYPTED_*, UNAUTHENTICATED_SRTP and FEC_* session
//! parameters, unknown mandatory ones, other suites and key methods.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::{SdesError, SrtpContext, Suite, MASTER_KEY_LEN, MASTER_SALT_LEN};

/// Longest input quoted back in an error, so a hostile line cannot bloat a log.
const QUOTE_MAX: usize = 64;
/// The largest key lifetime AES-CM allows: 2^48 packets (RFC 4568 §6.2.1).
const MAX_LIFETIME_LOG2: u32 = 48;

fn quote(s: &str) -> String {
    s.chars().take(QUOTE_MAX).collect()
}

/// One SDES crypto attribute: `<tag> <suite> inline:<base64(key || salt)>[|<lifetime>]`
/// with an optional `WSH=<n>` session parameter.
///
/// [`fmt::Display`] writes the attribute's value (what follows `a=crypto:`), **key included**:
/// for the SDP only, never for a log. [`fmt::Debug`] leaves the key out.
#[derive(Clone, PartialEq, Eq)]
pub struct CryptoAttribute {
    /// The tag (1 to 9 digits) that pairs an answer's line with the offer's.
    pub tag: u32,
    /// The crypto suite.
    pub suite: Suite,
    key: [u8; MASTER_KEY_LEN],
    salt: [u8; MASTER_SALT_LEN],
    /// The key lifetime in packets, when given. Not enforced: a call ends long before
    /// the default 2^31 SRTCP / 2^48 SRTP packets, and a re-key needs a re-INVITE.
    pub lifetime: Option<u64>,
    /// The `WSH` (window size hint) session parameter, when given.
    pub window_size_hint: Option<u64>,
}

impl fmt::Debug for CryptoAttribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CryptoAttribute")
            .field("tag", &self.tag)
            .field("suite", &self.suite)
            .field("key", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .field("window_size_hint", &self.window_size_hint)
            .finish()
    }
}

impl CryptoAttribute {
    /// An attribute with the given master key and salt.
    pub fn new(
        tag: u32,
        suite: Suite,
        master_key: [u8; MASTER_KEY_LEN],
        master_salt: [u8; MASTER_SALT_LEN],
    ) -> Self {
        Self {
            tag,
            suite,
            key: master_key,
            salt: master_salt,
            lifetime: None,
            window_size_hint: None,
        }
    }

    /// An attribute with a fresh master key and salt from the operating system's random source.
    pub fn generate(tag: u32, suite: Suite) -> Result<Self, SdesError> {
        let mut material = [0u8; MASTER_KEY_LEN + MASTER_SALT_LEN];
        getrandom::fill(&mut material).map_err(|e| SdesError::Random(e.to_string()))?;
        let (key, salt) = split_material(&material);
        material.fill(0);
        Ok(Self::new(tag, suite, key, salt))
    }

    /// Parse a crypto attribute: the value (`1 AES_CM_128_HMAC_SHA1_80 inline:…`), optionally
    /// preceded by `crypto:` or `a=crypto:`, surrounding whitespace and line ends ignored.
    /// Never panics; every refusal is an [`SdesError`] that names the reason and never quotes
    /// the key.
    pub fn parse(line: &str) -> Result<Self, SdesError> {
        let line = line.trim();
        let line = line.strip_prefix("a=").unwrap_or(line);
        let line = line.strip_prefix("crypto:").unwrap_or(line);
        let mut fields = line.split_ascii_whitespace();
        let tag = fields.next().ok_or(SdesError::Syntax("empty line"))?;
        if tag.is_empty() || tag.len() > 9 || !tag.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SdesError::BadTag(quote(tag)));
        }
        let tag: u32 = tag.parse().map_err(|_| SdesError::BadTag(quote(tag)))?;
        let suite: Suite = fields
            .next()
            .ok_or(SdesError::Syntax("no crypto-suite"))?
            .parse()?;
        let key_params = fields.next().ok_or(SdesError::Syntax("no key-params"))?;
        // Several keys (`;`-separated) are told apart by their MKI.
        if key_params.contains(';') {
            return Err(SdesError::MkiUnsupported);
        }
        let (method, info) = key_params
            .split_once(':')
            .ok_or(SdesError::Syntax("key-params without a key method"))?;
        if method != "inline" {
            return Err(SdesError::UnknownKeyMethod(quote(method)));
        }
        let mut parts = info.split('|');
        let key_salt = parts.next().unwrap_or_default();
        let mut lifetime = None;
        for (i, part) in parts.enumerate() {
            if part.contains(':') {
                return Err(SdesError::MkiUnsupported);
            }
            if i > 0 {
                return Err(SdesError::Syntax("more than one lifetime"));
            }
            lifetime = Some(parse_lifetime(part)?);
        }
        // 30 bytes are 40 base64 characters: anything much longer is refused before decoding.
        if key_salt.len() > 64 {
            return Err(SdesError::BadKeyLength(key_salt.len() / 4 * 3));
        }
        let material = BASE64.decode(key_salt).map_err(|_| SdesError::BadBase64)?;
        if material.len() != MASTER_KEY_LEN + MASTER_SALT_LEN {
            return Err(SdesError::BadKeyLength(material.len()));
        }
        let (key, salt) = split_material(&material);
        let mut window_size_hint = None;
        for param in fields {
            if let Some(n) = param.strip_prefix("WSH=") {
                let n = n
                    .parse::<u64>()
                    .map_err(|_| SdesError::UnsupportedSessionParam(quote(param)))?;
                window_size_hint = Some(n);
            } else if param.starts_with('-') {
                // RFC 4568 §6.3.7: a parameter prefixed with a dash is optional: ignore it.
            } else {
                let name = param.split('=').next().unwrap_or(param);
                return Err(SdesError::UnsupportedSessionParam(quote(name)));
            }
        }
        Ok(Self {
            tag,
            suite,
            key,
            salt,
            lifetime,
            window_size_hint,
        })
    }

    /// The 16-byte master key.
    pub fn master_key(&self) -> &[u8; MASTER_KEY_LEN] {
        &self.key
    }

    /// The 14-byte master salt.
    pub fn master_salt(&self) -> &[u8; MASTER_SALT_LEN] {
        &self.salt
    }

    /// A new SRTP context keyed by this attribute.
    pub fn context(&self) -> SrtpContext {
        SrtpContext::from_arrays(self.suite, &self.key, &self.salt)
    }

    /// The whole SDP line, `a=crypto:<value>` (no line end). Contains the key.
    pub fn to_sdp_line(&self) -> String {
        format!("a=crypto:{self}")
    }
}

impl fmt::Display for CryptoAttribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut material = [0u8; MASTER_KEY_LEN + MASTER_SALT_LEN];
        material[..MASTER_KEY_LEN].copy_from_slice(&self.key);
        material[MASTER_KEY_LEN..].copy_from_slice(&self.salt);
        let mut encoded = [0u8; 40];
        // 30 bytes always encode to exactly 40 characters.
        let n = BASE64
            .encode_slice(material, &mut encoded)
            .map_err(|_| fmt::Error)?;
        material.fill(0);
        let encoded = std::str::from_utf8(&encoded[..n]).map_err(|_| fmt::Error)?;
        write!(f, "{} {} inline:{encoded}", self.tag, self.suite)?;
        match self.lifetime {
            Some(l) if l.is_power_of_two() => write!(f, "|2^{}", l.trailing_zeros())?,
            Some(l) => write!(f, "|{l}")?,
            None => {}
        }
        if let Some(w) = self.window_size_hint {
            write!(f, " WSH={w}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for CryptoAttribute {
    type Err = SdesError;

    fn from_str(s: &str) -> Result<Self, SdesError> {
        Self::parse(s)
    }
}

fn split_material(material: &[u8]) -> ([u8; MASTER_KEY_LEN], [u8; MASTER_SALT_LEN]) {
    let mut key = [0u8; MASTER_KEY_LEN];
    let mut salt = [0u8; MASTER_SALT_LEN];
    key.copy_from_slice(&material[..MASTER_KEY_LEN]);
    salt.copy_from_slice(&material[MASTER_KEY_LEN..MASTER_KEY_LEN + MASTER_SALT_LEN]);
    (key, salt)
}

/// `2^n` or a decimal count of packets, 1 to 2^48.
fn parse_lifetime(s: &str) -> Result<u64, SdesError> {
    let bad = || SdesError::BadLifetime(quote(s));
    let digits = |d: &str| !d.is_empty() && d.len() <= 15 && d.bytes().all(|b| b.is_ascii_digit());
    let value = if let Some(exp) = s.strip_prefix("2^") {
        if !digits(exp) {
            return Err(bad());
        }
        let exp: u32 = exp.parse().map_err(|_| bad())?;
        if exp > MAX_LIFETIME_LOG2 {
            return Err(bad());
        }
        1u64 << exp
    } else {
        if !digits(s) {
            return Err(bad());
        }
        s.parse::<u64>().map_err(|_| bad())?
    };
    if value == 0 || value > 1 << MAX_LIFETIME_LOG2 {
        return Err(bad());
    }
    Ok(value)
}

/// The keys of one call after SDES: ours (for what we send) and the peer's (for what we receive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdesKeys {
    /// Our attribute: its key protects what we send. In an answer, this is the line to put in it.
    pub local: CryptoAttribute,
    /// The peer's attribute: its key unprotects what we receive.
    pub remote: CryptoAttribute,
}

impl SdesKeys {
    /// A context for what we send (`protect`, `protect_rtcp`), keyed by [`Self::local`].
    pub fn outbound(&self) -> SrtpContext {
        self.local.context()
    }

    /// A context for what we receive (`unprotect`, `unprotect_rtcp`), keyed by
    /// [`Self::remote`].
    pub fn inbound(&self) -> SrtpContext {
        self.remote.context()
    }
}

/// Answer an offer's crypto lines (RFC 4568 §7.1.2): the first line we can use, in the
/// offerer's order of preference, gets an answer with the same tag and suite and a fresh
/// random key of ours. Lines we cannot use are skipped; if none is usable the error carries
/// the first one's refusal.
pub fn answer_offer<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<SdesKeys, SdesError> {
    let mut first_error = None;
    for line in lines {
        match CryptoAttribute::parse(line) {
            Ok(remote) => {
                let local = CryptoAttribute::generate(remote.tag, remote.suite)?;
                return Ok(SdesKeys { local, remote });
            }
            Err(e) => {
                first_error.get_or_insert(Box::new(e));
            }
        }
    }
    Err(SdesError::NoSupportedOffer(first_error))
}

/// Crypto lines for an offer of ours: one per supported suite, preferred first, tags 1, 2, …,
/// each with a fresh random key.
pub fn offer() -> Result<Vec<CryptoAttribute>, SdesError> {
    Suite::ALL
        .into_iter()
        .zip(1..)
        .map(|(suite, tag)| CryptoAttribute::generate(tag, suite))
        .collect()
}

/// Our offer's keys once the answer's crypto line arrived: the answer must name a tag we
/// offered, with the same suite (RFC 4568 §7.1.3).
pub fn accept_answer(
    offered: &[CryptoAttribute],
    answer_line: &str,
) -> Result<SdesKeys, SdesError> {
    let remote = CryptoAttribute::parse(answer_line)?;
    let local = offered
        .iter()
        .find(|o| o.tag == remote.tag && o.suite == remote.suite)
        .ok_or(SdesError::AnswerMismatch { tag: remote.tag })?;
    Ok(SdesKeys {
        local: local.clone(),
        remote,
    })
}
