//! Stateless responses (RFC 3261 §8.2.7) for requests an application will not give to an
//! endpoint, e.g. from sources it does not trust: one response per request, nothing kept, never
//! retransmitted.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::build::{self, h};
use crate::message::{parse_message, Framing, Limits, Method};

/// A stateless response to `request` with `status` (100..=699): the Via, From, To, Call-ID and
/// CSeq copied, a To tag added when the To has none (derived from the request, so a
/// retransmission gets the same tag, RFC 3261 §8.2.6.2), `Server: <user_agent>` when given, and
/// `Content-Length: 0`. The response goes to the request's source (RFC 3581) or to the source IP
/// and the Via port; the caller decides and sends it once.
///
/// `None` for an ACK (never answered), a response, a status outside 100..=699, or input that does
/// not parse as a request within the default [`Limits`].
pub fn stateless_response(
    request: &[u8],
    status: u16,
    user_agent: Option<&str>,
) -> Option<Vec<u8>> {
    stateless_response_with_headers(request, status, user_agent, &[])
}

/// [`stateless_response`] with extra headers, e.g. a [`warning_header`] saying why (a 488 or 606
/// with `Warning: 305 ... "SRTP required"`, a 403 with `399 ... "source not allowed"`).
pub fn stateless_response_with_headers(
    request: &[u8],
    status: u16,
    user_agent: Option<&str>,
    headers: &[(String, String)],
) -> Option<Vec<u8>> {
    if !(100..=699).contains(&status) {
        return None;
    }
    let msg = parse_message(request, &Limits::default(), Framing::Datagram).ok()?;
    match msg.method()? {
        Method::Ack => return None,
        _ if msg.top_via().is_none() => return None,
        _ => {}
    }
    let mut hasher = DefaultHasher::new();
    for name in ["Call-ID", "From", "To", "CSeq"] {
        msg.header(name).hash(&mut hasher);
    }
    msg.top_via()
        .and_then(|v| v.branch().map(str::to_string))
        .hash(&mut hasher);
    let tag = format!("{:016x}", hasher.finish());
    let mut extra: Vec<(String, String)> =
        user_agent.map(|ua| h("Server", ua)).into_iter().collect();
    extra.extend(headers.iter().cloned());
    Some(build::response_to(&msg, status, Some(&tag), &extra, b""))
}

/// A `Warning` header (RFC 3261 §20.43): `Warning: <code> <agent> "<text>"`. `code` is a 3xx
/// warning code (300..=399, e.g. 304 media type not available, 305 incompatible media format,
/// 381 SIPS required; anything else becomes 399, miscellaneous); `agent` is the host (and port)
/// of whoever adds it ([`crate::Endpoint::warning_header`] puts ours); `text` is quoted with `"`
/// and `\` escaped and control characters left out, so it cannot end the header.
pub fn warning_header(code: u16, agent: &str, text: &str) -> (String, String) {
    let code = if (300..=399).contains(&code) {
        code
    } else {
        399
    };
    let agent: String = agent
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .collect();
    let agent = if agent.is_empty() { "-".into() } else { agent };
    h(
        "Warning",
        format!("{code} {agent} {}", crate::digest::quote(text)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_quoted_safely() {
        assert_eq!(
            warning_header(305, "192.0.2.1:5060", "SRTP required").1,
            "305 192.0.2.1:5060 \"SRTP required\""
        );
        assert_eq!(
            warning_header(200, "a b\r\n", "say \"hi\" \\ \r\nX-Evil: 1").1,
            "399 ab \"say \\\"hi\\\" \\\\ X-Evil: 1\""
        );
    }
}
