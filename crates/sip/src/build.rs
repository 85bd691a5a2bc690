//! Outgoing messages, built as `rsip` requests and responses and serialised by `rsip`.

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

/// A request to `uri` (which `rsip` must be able to read: we only send to `sip:` URIs).
pub(crate) fn request(
    method: &Method,
    uri: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Vec<u8>> {
    let uri_parsed = rsip::Uri::try_from(uri).map_err(|_| Error::InvalidUri(uri.to_string()))?;
    let method = rsip_method(method)
        .ok_or_else(|| Error::Message(format!("cannot send method {method}")))?;
    let req = rsip::Request {
        method,
        uri: uri_parsed,
        version: rsip::Version::V2,
        headers: to_rsip_headers(headers, body.len()),
        body: body.to_vec(),
    };
    Ok(bytes_of(req.to_string(), body))
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
        status_code: rsip::StatusCode::from(code),
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

/// (name, value) shorthand.
pub(crate) fn h(name: &str, value: impl Into<String>) -> (String, String) {
    (name.to_string(), value.into())
}
