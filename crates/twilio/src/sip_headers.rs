//! SIP `X-` headers between a trunk and a bot, as Twilio carries them: an inbound INVITE's
//! `X-` headers reach the voice webhook as `SipHeader_X-Name=value` parameters, and headers a
//! bot writes into a SIP URI (`sip:bob@example.com?X-Campaign=7&X-Account=a1`, RFC 3261
//! §19.1.1 URI headers, percent-encoded) go onto the request the stack sends for it.
//!
//! Only `X-` headers pass either way: a URI header naming anything else (`Route`, `Via`,
//! `Call-ID`, `Contact`, `body`, ...) could re-route or rewrite the stack's own request, so
//! it is refused, never sent. Names are RFC 3261 tokens of at most [`MAX_NAME_BYTES`], values
//! at most [`MAX_VALUE_BYTES`] with no control characters (a CR or LF would start a header of
//! the sender's choosing), and a call carries at most [`MAX_HEADERS`]: one call's headers then
//! cost a few kilobytes at most, in the webhook's form, the bot's `start` message and on the
//! wire.

use std::fmt::Write as _;

/// Most `X-` headers one call carries (inbound: the rest are dropped; outbound: refused).
pub const MAX_HEADERS: usize = 16;
/// Longest header name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// Longest header value, in bytes (after percent-decoding).
pub const MAX_VALUE_BYTES: usize = 256;
/// What Twilio puts before a header's name in a webhook's parameters (`SipHeader_X-Campaign`).
pub const PARAM_PREFIX: &str = "SipHeader_";

/// Why a URI's headers were refused. Each message names the header at fault; header values are
/// never quoted, since they may be secrets and the message goes back into logs and API errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// A header other than an `X-` header (only those can be set).
    #[error("only X- headers can be set in a SIP URI, not '{0}'")]
    NotSettable(String),
    /// A name that is not an RFC 3261 token, or is `X-` alone.
    #[error("'{0}' is not a valid SIP header name")]
    BadName(String),
    /// A name longer than [`MAX_NAME_BYTES`].
    #[error("header name '{0}…' is longer than {MAX_NAME_BYTES} bytes")]
    NameTooLong(String),
    /// A value longer than [`MAX_VALUE_BYTES`].
    #[error("the value of header '{0}' is longer than {MAX_VALUE_BYTES} bytes")]
    ValueTooLong(String),
    /// A value with a control character (CR, LF, NUL, ...; a tab is allowed).
    #[error("the value of header '{0}' contains a control character")]
    ControlCharacter(String),
    /// More than [`MAX_HEADERS`] headers.
    #[error("{0} headers in one SIP URI; at most {MAX_HEADERS}")]
    TooMany(usize),
    /// A `name=value` pair without `=`, a `%` not followed by two hex digits, or an escape
    /// that does not decode to UTF-8.
    #[error("malformed SIP URI header '{0}'")]
    Malformed(String),
}

/// `X-` headers, checked against the bounds above; in order, a name may repeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XHeaders(Vec<(String, String)>);

impl XHeaders {
    /// The headers as (name, value), in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.0
    }

    /// No header.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The names, comma-separated: what a log line may show of them (values may be secrets).
    pub fn names(&self) -> String {
        let names: Vec<&str> = self.0.iter().map(|(n, _)| n.as_str()).collect();
        names.join(",")
    }

    /// The webhook parameters Twilio sends for them: `SipHeader_<name>` = value.
    pub fn webhook_params(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.0
            .iter()
            .map(|(n, v)| (format!("{PARAM_PREFIX}{n}"), v.clone()))
    }

    /// The headers as a URI's header part (after its `?`), percent-encoded: the inverse of
    /// [`SipTarget::parse`].
    pub fn to_uri_query(&self) -> String {
        let mut out = String::new();
        for (i, (n, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push('&');
            }
            escape_into(&mut out, n);
            out.push('=');
            escape_into(&mut out, v);
        }
        out
    }

    /// Keep the `X-` headers among an inbound request's `headers` that are within the bounds,
    /// at most [`MAX_HEADERS`] of them; the rest are dropped. Returns them and how many `X-`
    /// headers were dropped (for the caller to count: a trunk sending more than expected is
    /// worth knowing about, never worth failing a call for).
    pub fn from_inbound(headers: &[(String, String)]) -> (XHeaders, usize) {
        let mut kept = Vec::new();
        let mut dropped = 0;
        for (name, value) in headers.iter().filter(|(n, _)| is_x_name(n)) {
            if kept.len() < MAX_HEADERS && check(name, value).is_ok() {
                kept.push((name.clone(), value.clone()));
            } else {
                dropped += 1;
            }
        }
        (XHeaders(kept), dropped)
    }
}

/// A SIP URI split into the URI itself and the `X-` headers its header part carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SipTarget {
    /// The URI without its header part (`sip:bob@example.com;transport=tcp`): a Request-URI or
    /// a To. RFC 3261 §19.1.5: headers of a URI are not part of the request sent to it.
    pub uri: String,
    /// Its headers, decoded and checked.
    pub headers: XHeaders,
}

impl SipTarget {
    /// Split `uri` at the start of its header part: the first `?` after the user part (a
    /// user part may hold `?`, a host may not; a `@` in a header value must be written `%40`,
    /// as RFC 3261 asks). A URI without headers comes back whole; `sip:bob@host?` loses the
    /// empty `?`. Names and values are percent-decoded (a `+` stays a `+`: this is a URI, not
    /// a form) and checked.
    pub fn parse(uri: &str) -> Result<SipTarget, HeaderError> {
        let host_from = uri.find('@').map_or(0, |at| at + 1);
        let Some(q) = uri[host_from..].find('?').map(|i| host_from + i) else {
            return Ok(SipTarget {
                uri: uri.to_string(),
                headers: XHeaders::default(),
            });
        };
        let (base, query) = (&uri[..q], &uri[q + 1..]);
        let mut headers = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            if headers.len() == MAX_HEADERS {
                let total = query.split('&').filter(|p| !p.is_empty()).count();
                return Err(HeaderError::TooMany(total));
            }
            let Some((raw_name, raw_value)) = pair.split_once('=') else {
                return Err(HeaderError::Malformed(shorten(pair)));
            };
            let name =
                unescape(raw_name).ok_or_else(|| HeaderError::Malformed(shorten(raw_name)))?;
            let value =
                unescape(raw_value).ok_or_else(|| HeaderError::Malformed(shorten(&name)))?;
            check(&name, &value)?;
            headers.push((name, value));
        }
        Ok(SipTarget {
            uri: base.to_string(),
            headers: XHeaders(headers),
        })
    }

    /// The URI with its headers written back canonically escaped (what a REFER's Refer-To
    /// carries, RFC 3515 §2.1: the referee puts them on the INVITE it sends).
    pub fn with_headers(&self) -> String {
        if self.headers.is_empty() {
            self.uri.clone()
        } else {
            format!("{}?{}", self.uri, self.headers.to_uri_query())
        }
    }
}

/// An `X-` header's name (case-insensitive, as SIP header names are).
fn is_x_name(name: &str) -> bool {
    name.get(..2).is_some_and(|p| p.eq_ignore_ascii_case("x-"))
}

/// RFC 3261 §25.1 `token` characters.
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&b)
}

/// One header against the rules: an `X-` token name within its bound, a value within its bound
/// with no control character but tab.
fn check(name: &str, value: &str) -> Result<(), HeaderError> {
    if name.len() > MAX_NAME_BYTES {
        return Err(HeaderError::NameTooLong(shorten(name)));
    }
    if !name.bytes().all(is_token_char) || name.is_empty() {
        return Err(HeaderError::BadName(shorten(name)));
    }
    if !is_x_name(name) {
        return Err(HeaderError::NotSettable(name.to_string()));
    }
    if name.len() == 2 {
        return Err(HeaderError::BadName(name.to_string()));
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(HeaderError::ValueTooLong(name.to_string()));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(HeaderError::ControlCharacter(name.to_string()));
    }
    Ok(())
}

/// At most [`MAX_NAME_BYTES`] of a name for an error message, cut at a character boundary and
/// with control characters shown escaped, so the message stays one short line.
fn shorten(s: &str) -> String {
    let mut end = s.len().min(MAX_NAME_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].escape_debug().to_string()
}

/// Percent-decode (RFC 3986 §2.1); `None` for a `%` without two hex digits or bytes that are
/// not UTF-8.
fn unescape(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encode all but RFC 3261's `unreserved` characters and the `hnv-unreserved` ones that
/// cannot end a header early (`/`, `:`, `+`, `$`): safe in a URI between angle brackets.
fn escape_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()/:+$".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pairs;

    #[test]
    fn uri_headers_are_split_off_and_percent_decoded() {
        let t =
            SipTarget::parse("sip:bob@host.example:5080;transport=tcp?X-Campaign=7&X-Account=a1")
                .unwrap();
        assert_eq!(t.uri, "sip:bob@host.example:5080;transport=tcp");
        assert_eq!(
            t.headers.pairs(),
            pairs(&[("X-Campaign", "7"), ("X-Account", "a1")])
        );
        // Escapes decode; `+` is a plus in a URI (not a space, as in a form); `=` may be in a
        // value; an empty value is a value.
        let t = SipTarget::parse("sips:+15551234567@h?X-Note=a%20b%26c+d%40e=f&x-empty=").unwrap();
        assert_eq!(t.uri, "sips:+15551234567@h");
        assert_eq!(
            t.headers.pairs(),
            pairs(&[("X-Note", "a b&c+d@e=f"), ("x-empty", "")])
        );
        // A `?` in the user part is the user's; the header part starts after the host.
        let t = SipTarget::parse("sip:a?b@h?X-A=1").unwrap();
        assert_eq!((t.uri.as_str(), t.headers.len()), ("sip:a?b@h", 1));
        // No headers, or an empty header part: the URI as it was (less the `?`).
        for (uri, base) in [("sip:h:5060", "sip:h:5060"), ("sip:u@h?", "sip:u@h")] {
            let t = SipTarget::parse(uri).unwrap();
            assert_eq!((t.uri.as_str(), t.headers.is_empty()), (base, true));
        }
    }

    #[test]
    fn headers_are_written_back_escaped() {
        let t = SipTarget::parse("sip:bob@h?X-Note=a%20b%26c+d%40e&X-A=1").unwrap();
        assert_eq!(t.with_headers(), "sip:bob@h?X-Note=a%20b%26c+d%40e&X-A=1");
        assert_eq!(
            SipTarget::parse(&t.with_headers()).unwrap(),
            t,
            "parse ∘ write is the identity"
        );
        let t = SipTarget::parse("sip:bob@h?X-Q=%3C%3E%22%3B%3F").unwrap();
        assert_eq!(t.with_headers(), "sip:bob@h?X-Q=%3C%3E%22%3B%3F");
        assert_eq!(
            SipTarget::parse("sip:bob@h").unwrap().with_headers(),
            "sip:bob@h"
        );
        assert_eq!(
            t.headers.webhook_params().collect::<Vec<_>>(),
            pairs(&[("SipHeader_X-Q", "<>\";?")])
        );
    }

    #[test]
    fn only_bounded_x_headers_are_settable() {
        let err = |uri: &str| SipTarget::parse(uri).unwrap_err();
        for name in [
            "Route", "Via", "Call-ID", "Contact", "body", "To", "Replaces",
        ] {
            assert_eq!(
                err(&format!("sip:b@h?X-A=1&{name}=x")),
                HeaderError::NotSettable(name.into()),
                "{name}"
            );
        }
        assert_eq!(
            err("sip:b@h?Route=%3Csip:evil%3E").to_string(),
            "only X- headers can be set in a SIP URI, not 'Route'"
        );
        assert_eq!(err("sip:b@h?X-=1"), HeaderError::BadName("X-".into()));
        assert_eq!(
            err("sip:b@h?X-A%20B=1"),
            HeaderError::BadName("X-A B".into())
        );
        assert_eq!(err("sip:b@h?X-A"), HeaderError::Malformed("X-A".into()));
        assert_eq!(err("sip:b@h?X-A=%zz"), HeaderError::Malformed("X-A".into()));
        assert_eq!(err("sip:b@h?X-A=%FF"), HeaderError::Malformed("X-A".into()));
        // CR, LF (a header injection) and other controls; a tab is allowed.
        for v in ["a%0D%0AVia:%20x", "a%0Ab", "%00"] {
            assert_eq!(
                err(&format!("sip:b@h?X-A={v}")),
                HeaderError::ControlCharacter("X-A".into())
            );
        }
        assert!(SipTarget::parse("sip:b@h?X-A=a%09b").is_ok());
        // Bounds: 64-byte names and 256-byte values pass, one more byte does not.
        let name = format!("X-{}", "n".repeat(MAX_NAME_BYTES - 2));
        let value = "v".repeat(MAX_VALUE_BYTES);
        assert!(SipTarget::parse(&format!("sip:b@h?{name}={value}")).is_ok());
        assert_eq!(
            err(&format!("sip:b@h?{name}n=1")),
            HeaderError::NameTooLong(name.clone())
        );
        assert_eq!(
            err(&format!("sip:b@h?X-A={value}v")),
            HeaderError::ValueTooLong("X-A".into())
        );
        let sixteen: Vec<String> = (0..MAX_HEADERS).map(|i| format!("X-H{i}={i}")).collect();
        assert_eq!(
            SipTarget::parse(&format!("sip:b@h?{}", sixteen.join("&")))
                .unwrap()
                .headers
                .len(),
            16
        );
        assert_eq!(
            err(&format!("sip:b@h?{}&X-More=1", sixteen.join("&"))),
            HeaderError::TooMany(17)
        );
        // A value never appears in an error's message.
        let e = err("sip:b@h?X-Token=s3cret%0A");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn inbound_keeps_bounded_x_headers_and_counts_the_rest() {
        let mut headers = pairs(&[
            ("Via", "SIP/2.0/UDP 10.0.0.1"),
            ("X-Campaign", "7"),
            ("P-Asserted-Identity", "<sip:alice@trunk>"),
            ("x-account", "a1"),
            ("X-Campaign", "8"),
            ("X-Bad\u{1}", "1"),
            ("X-Long", &"v".repeat(MAX_VALUE_BYTES + 1)),
            ("X-Ctl", "a\rb"),
        ]);
        let (kept, dropped) = XHeaders::from_inbound(&headers);
        assert_eq!(
            kept.pairs(),
            pairs(&[
                ("X-Campaign", "7"),
                ("x-account", "a1"),
                ("X-Campaign", "8")
            ])
        );
        assert_eq!(dropped, 3);
        assert_eq!(kept.names(), "X-Campaign,x-account,X-Campaign");
        assert_eq!(
            kept.webhook_params().collect::<Vec<_>>(),
            pairs(&[
                ("SipHeader_X-Campaign", "7"),
                ("SipHeader_x-account", "a1"),
                ("SipHeader_X-Campaign", "8")
            ])
        );
        // Past sixteen, the rest are dropped and counted.
        headers = (0..20)
            .map(|i| (format!("X-H{i}"), i.to_string()))
            .collect();
        let (kept, dropped) = XHeaders::from_inbound(&headers);
        assert_eq!((kept.len(), dropped), (16, 4));
        assert_eq!(kept.pairs()[15], ("X-H15".to_string(), "15".to_string()));
    }
}
