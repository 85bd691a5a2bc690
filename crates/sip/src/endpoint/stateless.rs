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
    let extra: Vec<(String, String)> = user_agent.map(|ua| h("Server", ua)).into_iter().collect();
    Some(build::response_to(&msg, status, Some(&tag), &extra, b""))
}
