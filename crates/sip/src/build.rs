//! Outgoing messages, built as `rsip` requests and responses and serialised by `rsip`.

use std::net::{IpAddr, SocketAddr};

use rsip::{Header, Headers};

use crate::error::{Error, Result};
use crate::message::{Message, Method};

/// Header fields as (name, value).
pub(crate) type HeaderList = Vec<(String, String)>;

fn to_rsip_headers(headers: &[(String, String)], body_len: usize) -> Headers {
    let mut out: Vec<Header> = headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("Content-Length"))
        .map(|(n, v)| Header::Other(n.clone(), v.clone()))
        .collect();
    out.push(Header::Other("Content-Length".into(), body_len.to_string()));
    out.into()
}

pub(crate) fn rsip_method(method: &Method) -> Option<rsip::Method> {
    Some(match method {
        Method::Invite => rsip::Method::Invite,
        Method::Ack => rsip::Method::Ack,
        Method::Bye => rsip::Method::Bye,
        Method::Cancel => rsip::Method::Cancel,
        Method::Options => rsip::Method::Options,
        Method::Update => rsip::Method::Update,
        Method::Info => rsip::Method::Info,
        Method::Register => rsip::Method::Register,
        Method::Prack => rsip::Method::PRack,
        Method::Subscribe => rsip::Method::Subscribe,
        Method::Notify => rsip::Method::Notify,
        Method::Publish => rsip::Method::Publish,
        Method::Message => rsip::Method::Message,
        Method::Refer => rsip::Method::Refer,
        Method::Extension(_) => return None,
    })
}

/// A request to `uri`. The request line is written here with the URI verbatim: `rsip` 0.4
/// cannot read bracketed IPv6 hosts and rewrites parameters (`transport=tcp` → `TCP`); the
/// headers and body are serialised by `rsip`.
pub(crate) fn request(
    method: &Method,
    uri: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Vec<u8>> {
    if !crate::message::is_valid_sip_uri(uri) {
        return Err(Error::InvalidUri(uri.to_string()));
    }
    let method = rsip_method(method)
        .ok_or_else(|| Error::Message(format!("cannot send method {method}")))?;
    let text = format!(
        "{method} {uri} SIP/2.0\r\n{}\r\n",
        to_rsip_headers(headers, body.len())
    );
    let mut out = text.into_bytes();
    out.extend_from_slice(body);
    Ok(out)
}

/// `rsip` prints the body lossily as text; put the exact bytes back.
fn bytes_of(text: String, body: &[u8]) -> Vec<u8> {
    let mut out = text.into_bytes();
    let head = out
        .len()
        .saturating_sub(String::from_utf8_lossy(body).len());
    out.truncate(head);
    out.extend_from_slice(body);
    out
}

/// A response to `req` (RFC 3261 §8.2.6.2): Via, From, Call-ID, CSeq copied, To copied with our
/// tag added when it has none, then `extra` headers and the body.
pub(crate) fn response(
    req_headers: &[(String, String)],
    code: u16,
    to_tag: Option<&str>,
    extra: &[(String, String)],
    body: &[u8],
) -> Vec<u8> {
    let mut headers: HeaderList = Vec::new();
    for (n, v) in req_headers {
        match n.as_str() {
            "Via" | "From" | "Call-ID" | "CSeq" => headers.push((n.clone(), v.clone())),
            "To" => {
                let has_tag = crate::message::parse_name_addr(v)
                    .map(|a| a.tag().is_some())
                    .unwrap_or(true);
                match to_tag {
                    Some(tag) if !has_tag && code > 100 => {
                        headers.push((n.clone(), format!("{v};tag={tag}")))
                    }
                    _ => headers.push((n.clone(), v.clone())),
                }
            }
            _ => {}
        }
    }
    headers.extend(extra.iter().cloned());
    let resp = rsip::Response {
        // rsip 0.4 prints some reason phrases run together ("RequestTerminated"): use RFC 3261's.
        status_code: rsip::StatusCode::Other(code, reason_phrase(code).into()),
        version: rsip::Version::V2,
        headers: to_rsip_headers(&headers, body.len()),
        body: body.to_vec(),
    };
    bytes_of(resp.to_string(), body)
}

/// A response to a parsed request.
pub(crate) fn response_to(
    req: &Message,
    code: u16,
    to_tag: Option<&str>,
    extra: &[(String, String)],
    body: &[u8],
) -> Vec<u8> {
    response(&req.headers, code, to_tag, extra, body)
}

/// RFC 3261 §18.2.1 and RFC 3581 §4: marks the top Via of a received request with where it
/// really came from, so the responses built from these headers carry it: `received=<source IP>`
/// when the sent-by host is not that IP, and when the Via has an empty `rport`, `rport=<source
/// port>` and `received` in every case. Other Via values are left as written.
pub(crate) fn stamp_top_via(headers: &mut [(String, String)], source: SocketAddr) {
    let Some((_, value)) = headers.iter_mut().find(|(n, _)| n == "Via") else {
        return;
    };
    let items = crate::message::split_list(value);
    let Some(top) = items.first() else { return };
    let Some(via) = crate::message::parse_via(top)
        .ok()
        .and_then(|v| v.into_iter().next())
    else {
        return;
    };
    let empty_rport = via.params.iter().any(|(n, v)| n == "rport" && v.is_none());
    let host_ip = via
        .host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    let add_received = empty_rport || host_ip != Some(source.ip());
    if !add_received {
        return;
    }
    let mut parts = top.split(';');
    let mut out = parts.next().unwrap_or_default().to_string();
    for p in parts {
        let name = p.split('=').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("received") {
            continue;
        }
        out.push(';');
        if name.eq_ignore_ascii_case("rport") && !p.contains('=') {
            out.push_str(&format!("rport={}", source.port()));
        } else {
            out.push_str(p);
        }
    }
    out.push_str(&format!(";received={}", source.ip()));
    let rest: Vec<&str> = items[1..].to_vec();
    let new = if rest.is_empty() {
        out
    } else {
        format!("{out}, {}", rest.join(", "))
    };
    *value = new;
}

/// (name, value) shorthand.
pub(crate) fn h(name: &str, value: impl Into<String>) -> (String, String) {
    (name.to_string(), value.into())
}

/// RFC 3261 §21 (and RFC 4028, RFC 3311, RFC 6665) reason phrases.
pub(crate) fn reason_phrase(code: u16) -> &'static str {
    match code {
        100 => "Trying",
        180 => "Ringing",
        181 => "Call Is Being Forwarded",
        182 => "Queued",
        183 => "Session Progress",
        200 => "OK",
        202 => "Accepted",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Moved Temporarily",
        380 => "Alternative Service",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        410 => "Gone",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Unsupported URI Scheme",
        420 => "Bad Extension",
        421 => "Extension Required",
        422 => "Session Interval Too Small",
        423 => "Interval Too Brief",
        480 => "Temporarily Unavailable",
        481 => "Call/Transaction Does Not Exist",
        482 => "Loop Detected",
        483 => "Too Many Hops",
        484 => "Address Incomplete",
        485 => "Ambiguous",
        486 => "Busy Here",
        487 => "Request Terminated",
        488 => "Not Acceptable Here",
        489 => "Bad Event",
        491 => "Request Pending",
        493 => "Undecipherable",
        500 => "Server Internal Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Server Time-out",
        505 => "Version Not Supported",
        513 => "Message Too Large",
        600 => "Busy Everywhere",
        603 => "Decline",
        604 => "Does Not Exist Anywhere",
        606 => "Not Acceptable",
        _ => match code / 100 {
            1 => "Progress",
            2 => "Success",
            3 => "Redirection",
            4 => "Client Error",
            5 => "Server Error",
            _ => "Global Failure",
        },
    }
}
