//! HTTP digest authentication as SIP uses it (RFC 3261 §22, RFC 7616, compatible with RFC 2617
//! and RFC 2069): challenges (`WWW-Authenticate`, `Proxy-Authenticate`) read and written,
//! credentials (`Authorization`, `Proxy-Authorization`) computed and verified.
//!
//! Algorithms: `MD5`, `MD5-sess`, `SHA-256`, `SHA-256-sess`; `qop=auth`, or no qop at all (RFC
//! 2069). `qop=auth-int` (a digest of the body) is not supported: a challenge that offers only
//! `auth-int` is [`DigestError::UnsupportedQop`]. `SHA-512-256` is not supported either
//! ([`DigestError::UnsupportedAlgorithm`]).
//!
//! Nothing here keeps state: the nonce count (`nc`) and the client nonce (`cnonce`) are the
//! caller's, so that the endpoint counts per nonce and draws cnonces from its own generator.

use std::fmt;

use md5::Md5;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

/// A password. Its `Debug` prints nothing of it, so a configuration or an error that holds one
/// can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Password {
        Password(password.into())
    }

    /// The secret itself, for the digest computation only.
    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl From<&str> for Password {
    fn from(s: &str) -> Password {
        Password::new(s)
    }
}

impl From<String> for Password {
    fn from(s: String) -> Password {
        Password::new(s)
    }
}

/// A user name and password for digest authentication.
///
/// As a client ([`crate::Config::credentials`]): `realm`, when set, restricts the credentials to
/// challenges of that realm, so they are not handed to whoever challenges. As a server
/// ([`crate::Config::trunk_auth`]): the realm we announce (`None`: our address's IP).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    /// The password (its `Debug` is redacted).
    pub password: Password,
    /// The realm these credentials belong to, if restricted to one.
    pub realm: Option<String>,
}

impl Credentials {
    /// Credentials for any realm.
    pub fn new(username: impl Into<String>, password: impl Into<Password>) -> Credentials {
        Credentials {
            username: username.into(),
            password: password.into(),
            realm: None,
        }
    }

    /// The same credentials, only for `realm`.
    pub fn for_realm(mut self, realm: impl Into<String>) -> Credentials {
        self.realm = Some(realm.into());
        self
    }

    /// Whether these credentials may answer a challenge of `realm`.
    pub fn fits_realm(&self, realm: &str) -> bool {
        self.realm.as_deref().is_none_or(|r| r == realm)
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password)
            .field("realm", &self.realm)
            .finish()
    }
}

/// Why a challenge or a credential could not be read or answered. The text names the
/// offending parameter, never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// The header's scheme is not `Digest` (e.g. `Basic`, which SIP forbids).
    #[error("not a Digest challenge or credential")]
    NotDigest,
    /// The header could not be read.
    #[error("malformed digest header: {0}")]
    Malformed(String),
    /// A required parameter is missing.
    #[error("digest header without {0}")]
    Missing(&'static str),
    /// An algorithm we do not implement.
    #[error("unsupported digest algorithm {0:?}")]
    UnsupportedAlgorithm(String),
    /// Only qop values we do not implement (`auth-int`).
    #[error("unsupported qop {0:?} (only auth is supported)")]
    UnsupportedQop(String),
}

/// A digest algorithm (RFC 7616 §3.3, §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `MD5` (the default when a challenge names none).
    Md5,
    /// `MD5-sess`.
    Md5Sess,
    /// `SHA-256`.
    Sha256,
    /// `SHA-256-sess`.
    Sha256Sess,
}

impl Algorithm {
    /// Reads an `algorithm` value (case-insensitive).
    pub fn parse(s: &str) -> Option<Algorithm> {
        [
            Algorithm::Md5,
            Algorithm::Md5Sess,
            Algorithm::Sha256,
            Algorithm::Sha256Sess,
        ]
        .into_iter()
        .find(|a| a.as_str().eq_ignore_ascii_case(s))
    }

    /// The token as written in headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Md5 => "MD5",
            Algorithm::Md5Sess => "MD5-sess",
            Algorithm::Sha256 => "SHA-256",
            Algorithm::Sha256Sess => "SHA-256-sess",
        }
    }

    fn is_sess(self) -> bool {
        matches!(self, Algorithm::Md5Sess | Algorithm::Sha256Sess)
    }

    /// Preference when a server offers several (RFC 7616 §3.7: the strongest first).
    fn strength(self) -> u8 {
        match self {
            Algorithm::Md5 | Algorithm::Md5Sess => 1,
            Algorithm::Sha256 | Algorithm::Sha256Sess => 2,
        }
    }

    /// `H(data)` as lower-case hex.
    fn hash(self, parts: &[&str]) -> String {
        let data = parts.join(":");
        match self {
            Algorithm::Md5 | Algorithm::Md5Sess => hex(&Md5::digest(data.as_bytes())),
            Algorithm::Sha256 | Algorithm::Sha256Sess => hex(&Sha256::digest(data.as_bytes())),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// A digest challenge (RFC 7616 §3.3), from `WWW-Authenticate` (401) or `Proxy-Authenticate`
/// (407).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// `realm`.
    pub realm: String,
    /// `nonce`.
    pub nonce: String,
    /// `opaque`, returned as given.
    pub opaque: Option<String>,
    /// `algorithm` (`MD5` when absent).
    pub algorithm: Algorithm,
    /// `qop` options offered, lower-cased (empty: RFC 2069 mode, no qop).
    pub qop: Vec<String>,
    /// `stale=true`: our credentials were right but the nonce expired; answer the new one.
    pub stale: bool,
    /// `userhash=true` (RFC 7616 §3.4.4): send `H(username:realm)` rather than the name.
    pub userhash: bool,
}

/// Quality of protection we use for a challenge: `auth`, or none (RFC 2069).
fn pick_qop(qop: &[String]) -> Result<Option<&'static str>, DigestError> {
    if qop.is_empty() {
        Ok(None)
    } else if qop.iter().any(|q| q == "auth") {
        Ok(Some("auth"))
    } else {
        Err(DigestError::UnsupportedQop(qop.join(",")))
    }
}

/// Writes `"value"` with `"` and `\` escaped (RFC 3261 §25.1 quoted-pair) and control
/// characters left out, so no value can end the quoted string or the header.
pub(crate) fn quote(value: &str) -> String {
    let mut s = String::with_capacity(value.len() + 2);
    s.push('"');
    for c in value.chars().filter(|c| !c.is_control()) {
        if c == '"' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s
}

impl Challenge {
    /// Reads one `Digest` challenge (a header value holding one challenge).
    pub fn parse(value: &str) -> Result<Challenge, DigestError> {
        let (scheme, params) = parse_auth(value)?;
        if !scheme.eq_ignore_ascii_case("digest") {
            return Err(DigestError::NotDigest);
        }
        Challenge::from_params(&params)
    }

    fn from_params(params: &[(String, String)]) -> Result<Challenge, DigestError> {
        let get = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let algorithm = match get("algorithm") {
            None => Algorithm::Md5,
            Some(a) => Algorithm::parse(&a).ok_or(DigestError::UnsupportedAlgorithm(a))?,
        };
        let qop: Vec<String> = get("qop")
            .map(|q| {
                q.split(',')
                    .map(|t| t.trim().to_ascii_lowercase())
                    .filter(|t| !t.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Challenge {
            realm: get("realm").ok_or(DigestError::Missing("realm"))?,
            nonce: get("nonce").ok_or(DigestError::Missing("nonce"))?,
            opaque: get("opaque"),
            algorithm,
            qop,
            stale: get("stale").is_some_and(|s| s.eq_ignore_ascii_case("true")),
            userhash: get("userhash").is_some_and(|s| s.eq_ignore_ascii_case("true")),
        })
    }

    /// Whether we can answer this challenge: `Ok` unless it offers only `auth-int`.
    pub fn answerable(&self) -> Result<(), DigestError> {
        pick_qop(&self.qop).map(|_| ())
    }

    /// The `Authorization`/`Proxy-Authorization` value answering this challenge for a request
    /// with `method` and Request-URI `uri`: `cnonce` is the client's random nonce, `nc` how many
    /// times this nonce has been used, this time included (1 the first time).
    pub fn authorization(
        &self,
        credentials: &Credentials,
        method: &str,
        uri: &str,
        cnonce: &str,
        nc: u32,
    ) -> Result<String, DigestError> {
        let qop = pick_qop(&self.qop)?;
        // Without qop, only the -sess algorithms need a cnonce (RFC 2617 §3.2.2.2).
        let cnonce = (qop.is_some() || self.algorithm.is_sess()).then_some(cnonce);
        let nc = qop.map(|_| nc);
        let response = compute(
            self.algorithm,
            &credentials.username,
            &self.realm,
            credentials.password.expose(),
            &self.nonce,
            cnonce,
            nc,
            qop,
            method,
            uri,
        );
        let username = if self.userhash {
            self.algorithm.hash(&[&credentials.username, &self.realm])
        } else {
            credentials.username.clone()
        };
        let mut v = format!(
            "Digest username={}, realm={}, nonce={}, uri={}, response=\"{response}\", algorithm={}",
            quote(&username),
            quote(&self.realm),
            quote(&self.nonce),
            quote(uri),
            self.algorithm.as_str()
        );
        if let Some(c) = cnonce {
            v.push_str(&format!(", cnonce={}", quote(c)));
        }
        if let Some(o) = &self.opaque {
            v.push_str(&format!(", opaque={}", quote(o)));
        }
        if let (Some(q), Some(nc)) = (qop, nc) {
            v.push_str(&format!(", qop={q}, nc={nc:08x}"));
        }
        if self.userhash {
            v.push_str(", userhash=true");
        }
        Ok(v)
    }

    /// The challenge as a `WWW-Authenticate`/`Proxy-Authenticate` value.
    pub fn to_header_value(&self) -> String {
        let mut v = format!(
            "Digest realm={}, nonce={}",
            quote(&self.realm),
            quote(&self.nonce)
        );
        if let Some(o) = &self.opaque {
            v.push_str(&format!(", opaque={}", quote(o)));
        }
        v.push_str(&format!(", algorithm={}", self.algorithm.as_str()));
        if !self.qop.is_empty() {
            v.push_str(&format!(", qop={}", quote(&self.qop.join(","))));
        }
        if self.stale {
            v.push_str(", stale=true");
        }
        if self.userhash {
            v.push_str(", userhash=true");
        }
        v
    }

    /// How much we prefer answering this challenge over another of the same realm.
    pub(crate) fn preference(&self) -> u8 {
        self.algorithm.strength()
    }
}

/// Reads every challenge of a header value: one, or several separated by commas (RFC 7235
/// §4.1 allows `Digest ..., Digest ...` in one field). Each is read on its own, so a challenge
/// we cannot read does not hide one we can.
pub fn parse_challenges(value: &str) -> Vec<Result<Challenge, DigestError>> {
    split_challenges(value)
        .into_iter()
        .map(Challenge::parse)
        .collect()
}

/// A parsed `Authorization`/`Proxy-Authorization` digest credential (RFC 7616 §3.4), as a
/// server verifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestResponse {
    /// `username` (or its hash with `userhash=true`).
    pub username: String,
    /// `realm`.
    pub realm: String,
    /// `nonce`.
    pub nonce: String,
    /// `uri` (the Request-URI the client signed).
    pub uri: String,
    /// `response`, the digest.
    pub response: String,
    /// `algorithm` (`MD5` when absent).
    pub algorithm: Algorithm,
    /// `cnonce`.
    pub cnonce: Option<String>,
    /// `nc`, the nonce count.
    pub nc: Option<u32>,
    /// `qop`, lower-cased.
    pub qop: Option<String>,
    /// `opaque`.
    pub opaque: Option<String>,
    /// `userhash=true`.
    pub userhash: bool,
}

impl DigestResponse {
    /// Reads a digest credential.
    pub fn parse(value: &str) -> Result<DigestResponse, DigestError> {
        let (scheme, params) = parse_auth(value)?;
        if !scheme.eq_ignore_ascii_case("digest") {
            return Err(DigestError::NotDigest);
        }
        let get = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let algorithm = match get("algorithm") {
            None => Algorithm::Md5,
            Some(a) => Algorithm::parse(&a).ok_or(DigestError::UnsupportedAlgorithm(a))?,
        };
        let nc = match get("nc") {
            None => None,
            Some(n) => Some(
                u32::from_str_radix(&n, 16)
                    .ok()
                    .filter(|_| n.len() == 8)
                    .ok_or_else(|| DigestError::Malformed("nc is not 8 hex digits".into()))?,
            ),
        };
        Ok(DigestResponse {
            username: get("username").ok_or(DigestError::Missing("username"))?,
            realm: get("realm").ok_or(DigestError::Missing("realm"))?,
            nonce: get("nonce").ok_or(DigestError::Missing("nonce"))?,
            uri: get("uri").ok_or(DigestError::Missing("uri"))?,
            response: get("response").ok_or(DigestError::Missing("response"))?,
            algorithm,
            cnonce: get("cnonce"),
            nc,
            qop: get("qop").map(|q| q.to_ascii_lowercase()),
            opaque: get("opaque"),
            userhash: get("userhash").is_some_and(|s| s.eq_ignore_ascii_case("true")),
        })
    }

    /// Whether this credential names `username` (hashed when `userhash=true`).
    pub fn names_user(&self, username: &str) -> bool {
        let expected = if self.userhash {
            self.algorithm.hash(&[username, &self.realm])
        } else {
            username.to_string()
        };
        bool::from(expected.as_bytes().ct_eq(self.username.as_bytes()))
    }

    /// Whether the digest is right for `method` and `password` (compared in constant time).
    /// The caller checks the rest: that the nonce is its own and fresh, the realm its own, the
    /// user the expected one ([`DigestResponse::names_user`]) and the uri the Request-URI.
    /// `false` for qop values other than `auth`, and for `qop=auth` without cnonce or nc.
    pub fn verify(&self, method: &str, username: &str, password: &Password) -> bool {
        let qop = match self.qop.as_deref() {
            None => None,
            Some("auth") => Some("auth"),
            Some(_) => return false,
        };
        if qop.is_some() && (self.cnonce.is_none() || self.nc.is_none()) {
            return false;
        }
        if self.algorithm.is_sess() && self.cnonce.is_none() {
            return false;
        }
        let expected = compute(
            self.algorithm,
            username,
            &self.realm,
            password.expose(),
            &self.nonce,
            self.cnonce.as_deref(),
            self.nc,
            qop,
            method,
            &self.uri,
        );
        let given = self.response.to_ascii_lowercase();
        bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
    }
}

/// The request-digest (RFC 7616 §3.4.1, RFC 2617 §3.2.2.1, RFC 2069 without qop).
#[allow(clippy::too_many_arguments)]
fn compute(
    algorithm: Algorithm,
    username: &str,
    realm: &str,
    password: &str,
    nonce: &str,
    cnonce: Option<&str>,
    nc: Option<u32>,
    qop: Option<&str>,
    method: &str,
    uri: &str,
) -> String {
    let mut ha1 = algorithm.hash(&[username, realm, password]);
    if algorithm.is_sess() {
        ha1 = algorithm.hash(&[&ha1, nonce, cnonce.unwrap_or_default()]);
    }
    let ha2 = algorithm.hash(&[method, uri]);
    match (qop, nc) {
        (Some(qop), Some(nc)) => {
            let nc = format!("{nc:08x}");
            algorithm.hash(&[&ha1, nonce, &nc, cnonce.unwrap_or_default(), qop, &ha2])
        }
        _ => algorithm.hash(&[&ha1, nonce, &ha2]),
    }
}

/// Splits a header value into its challenges: a new one starts at an item of the form
/// `scheme name=...` (a token, whitespace, then a parameter) or a bare `scheme`.
fn split_challenges(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in value.char_indices() {
        if quoted {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = false;
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            ',' => {
                let rest = value[i + 1..].trim_start();
                let word_end = rest
                    .find(|c: char| !crate::message::is_token_char(c))
                    .unwrap_or(rest.len());
                let after = rest[word_end..].trim_start();
                let starts_scheme = word_end > 0 && !after.starts_with('=');
                if starts_scheme {
                    out.push(value[start..i].trim());
                    start = i + 1;
                }
            }
            _ => {}
        }
    }
    out.push(value[start..].trim());
    out.retain(|s| !s.is_empty());
    out
}

/// Reads `scheme name=value, name="quoted", ...` (RFC 7235 §2.1 auth-param, RFC 3261 §25.1
/// LWS): the scheme and the parameters with lower-cased names and unquoted values.
fn parse_auth(value: &str) -> Result<(String, Vec<(String, String)>), DigestError> {
    let value = value.trim();
    let scheme_end = value
        .find(|c: char| !crate::message::is_token_char(c))
        .unwrap_or(value.len());
    if scheme_end == 0 {
        return Err(DigestError::Malformed("no scheme".into()));
    }
    let scheme = value[..scheme_end].to_string();
    let mut rest = value[scheme_end..].chars().peekable();
    let mut params = Vec::new();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
    };
    loop {
        skip_ws(&mut rest);
        // Empty list elements are allowed (RFC 7230 §7).
        while rest.peek() == Some(&',') {
            rest.next();
            skip_ws(&mut rest);
        }
        if rest.peek().is_none() {
            break;
        }
        let mut name = String::new();
        while let Some(&c) = rest.peek() {
            if !crate::message::is_token_char(c) {
                break;
            }
            name.push(c);
            rest.next();
        }
        if name.is_empty() {
            return Err(DigestError::Malformed("parameter name expected".into()));
        }
        skip_ws(&mut rest);
        if rest.next() != Some('=') {
            return Err(DigestError::Malformed(format!(
                "parameter {:?} without a value",
                truncated(&name)
            )));
        }
        skip_ws(&mut rest);
        let mut v = String::new();
        if rest.peek() == Some(&'"') {
            rest.next();
            let mut closed = false;
            while let Some(c) = rest.next() {
                match c {
                    '\\' => match rest.next() {
                        Some(e) => v.push(e),
                        None => break,
                    },
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => v.push(c),
                }
            }
            if !closed {
                return Err(DigestError::Malformed("unterminated quoted string".into()));
            }
        } else {
            while let Some(&c) = rest.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                v.push(c);
                rest.next();
            }
            if v.is_empty() {
                return Err(DigestError::Malformed(format!(
                    "parameter {:?} with an empty value",
                    truncated(&name)
                )));
            }
        }
        let name = name.to_ascii_lowercase();
        // The first of a repeated parameter counts; a second one cannot override it.
        if !params.iter().any(|(n, _): &(String, String)| *n == name) {
            params.push((name, v));
        }
        skip_ws(&mut rest);
        match rest.next() {
            None => break,
            Some(',') => {}
            Some(c) => {
                return Err(DigestError::Malformed(format!(
                    "unexpected {c:?} after a parameter"
                )))
            }
        }
    }
    Ok((scheme, params))
}

fn truncated(s: &str) -> String {
    s.chars().take(32).collect()
}

/// Picks, among `challenges`, those to answer with `credentials`: per realm the credentials
/// fit, the strongest algorithm we can answer. Empty when none fits.
pub(crate) fn choose<'a>(
    challenges: impl IntoIterator<Item = &'a Challenge>,
    credentials: &Credentials,
) -> Vec<Challenge> {
    let mut out: Vec<Challenge> = Vec::new();
    for c in challenges {
        if !credentials.fits_realm(&c.realm) || c.answerable().is_err() {
            continue;
        }
        match out.iter_mut().find(|o| o.realm == c.realm) {
            Some(o) if o.preference() < c.preference() => *o = c.clone(),
            Some(_) => {}
            None => out.push(c.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mufasa(password: &str) -> Credentials {
        Credentials::new("Mufasa", password)
    }

    /// RFC 2617 §3.5.
    #[test]
    fn rfc2617_example() {
        let c = Challenge::parse(
            "Digest realm=\"testrealm@host.com\", qop=\"auth,auth-int\", \
             nonce=\"dcd98b7102dd2f0e8b11d0f600bfb0c093\", \
             opaque=\"5ccc069c403ebaf9f0171e9517f40e41\"",
        )
        .unwrap();
        assert_eq!(c.algorithm, Algorithm::Md5);
        assert_eq!(c.qop, ["auth", "auth-int"]);
        let v = c
            .authorization(
                &mufasa("Circle Of Life"),
                "GET",
                "/dir/index.html",
                "0a4f113b",
                1,
            )
            .unwrap();
        assert!(
            v.contains("response=\"6629fae49393a05397450978507c4ef1\""),
            "{v}"
        );
        assert!(v.contains("nc=00000001") && v.contains("qop=auth,"), "{v}");
        assert!(v.contains("opaque=\"5ccc069c403ebaf9f0171e9517f40e41\""));
        let r = DigestResponse::parse(&v).unwrap();
        assert!(r.verify("GET", "Mufasa", &Password::new("Circle Of Life")));
        assert!(!r.verify("GET", "Mufasa", &Password::new("circle of life")));
        assert!(!r.verify("POST", "Mufasa", &Password::new("Circle Of Life")));
    }

    /// RFC 7616 §3.9.1, MD5 and SHA-256.
    #[test]
    fn rfc7616_examples() {
        let nonce = "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v";
        let opaque = "FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS";
        let cnonce = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ";
        for (alg, expected) in [
            ("MD5", "8ca523f5e9506fed4657c9700eebdbec"),
            (
                "SHA-256",
                "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1",
            ),
        ] {
            let c = Challenge::parse(&format!(
                "Digest\r\n realm=\"http-auth@example.org\",\r\n qop=\"auth, auth-int\",\r\n \
                 algorithm={alg},\r\n nonce=\"{nonce}\",\r\n opaque=\"{opaque}\""
            ))
            .unwrap();
            let v = c
                .authorization(
                    &mufasa("Circle of Life"),
                    "GET",
                    "/dir/index.html",
                    cnonce,
                    1,
                )
                .unwrap();
            assert!(
                v.contains(&format!("response=\"{expected}\"")),
                "{alg}: {v}"
            );
            let r = DigestResponse::parse(&v).unwrap();
            assert_eq!(r.algorithm.as_str(), alg);
            assert!(r.verify("GET", "Mufasa", &Password::new("Circle of Life")));
            assert!(r.names_user("Mufasa"));
        }
    }

    #[test]
    fn sess_userhash_and_rfc2069_round_trip() {
        let pw = Password::new("secret");
        let creds = Credentials::new("bob", pw.clone());
        for alg in [
            Algorithm::Md5,
            Algorithm::Md5Sess,
            Algorithm::Sha256,
            Algorithm::Sha256Sess,
        ] {
            for qop in [vec![], vec!["auth".to_string()]] {
                let c = Challenge {
                    realm: "example.com".into(),
                    nonce: "n\"1".into(),
                    opaque: None,
                    algorithm: alg,
                    qop: qop.clone(),
                    stale: false,
                    userhash: alg == Algorithm::Sha256,
                };
                let parsed = Challenge::parse(&c.to_header_value()).unwrap();
                assert_eq!(parsed, c);
                let v = c
                    .authorization(&creds, "INVITE", "sip:x@y", "abc", 7)
                    .unwrap();
                let r = DigestResponse::parse(&v).unwrap();
                assert_eq!(r.nonce, "n\"1");
                assert_eq!(r.nc, (!qop.is_empty()).then_some(7));
                assert!(r.verify("INVITE", "bob", &pw), "{alg:?} {qop:?}");
                assert!(r.names_user("bob"));
                assert!(!r.names_user("alice"));
                assert!(!r.verify("INVITE", "bob", &Password::new("other")));
            }
        }
    }

    #[test]
    fn unsupported_and_malformed() {
        let c = Challenge::parse("Digest realm=\"r\", nonce=\"n\", qop=\"auth-int\"").unwrap();
        assert_eq!(
            c.answerable(),
            Err(DigestError::UnsupportedQop("auth-int".into()))
        );
        assert!(matches!(
            Challenge::parse("Digest realm=\"r\", nonce=\"n\", algorithm=SHA-512-256"),
            Err(DigestError::UnsupportedAlgorithm(_))
        ));
        assert_eq!(
            Challenge::parse("Basic realm=\"r\""),
            Err(DigestError::NotDigest)
        );
        assert_eq!(
            Challenge::parse("Digest nonce=\"n\""),
            Err(DigestError::Missing("realm"))
        );
        for bad in [
            "",
            "Digest realm=\"r",
            "Digest realm",
            "Digest realm=",
            "Digest =x",
            "Digest realm=\"a\" nonce=\"b\"",
            "Digest realm=\"a\\",
            "\"Digest\"",
        ] {
            assert!(Challenge::parse(bad).is_err(), "{bad:?}");
        }
        assert!(DigestResponse::parse(
            "Digest username=\"a\", realm=\"r\", nonce=\"n\", uri=\"u\", response=\"x\", nc=1"
        )
        .is_err());
        // Repeated parameters: the first one counts.
        let c = Challenge::parse("Digest realm=a, nonce=b, realm=c,, stale=TRUE").unwrap();
        assert_eq!((c.realm.as_str(), c.stale), ("a", true));
    }

    #[test]
    fn several_challenges_in_one_value() {
        let all = parse_challenges(
            "Digest realm=\"a,b\", nonce=\"1\", algorithm=SHA-256, qop=\"auth, auth-int\", \
             Digest realm=\"a,b\", nonce=\"2\", Basic realm=\"x\"",
        );
        assert_eq!(all.len(), 3);
        let ok: Vec<Challenge> = all.into_iter().filter_map(|c| c.ok()).collect();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].qop, ["auth", "auth-int"]);
        let chosen = choose(&ok, &Credentials::new("u", "p"));
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].nonce, "1", "SHA-256 is preferred");
        assert!(choose(&ok, &Credentials::new("u", "p").for_realm("other")).is_empty());
    }

    #[test]
    fn debug_hides_password() {
        let c = Credentials::new("alice", "hunter2").for_realm("r");
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2") && d.contains("alice"), "{d}");
    }

    #[test]
    fn quoting_is_safe() {
        assert_eq!(quote("a\"b\\c\r\nd"), "\"a\\\"b\\\\cd\"");
    }
}
