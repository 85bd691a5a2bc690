//! The SIP front parser: framing, limits, normalisation and strict validation of what the UA
//! relies on.
//!
//! Why not hand the bytes straight to `rsip`: on the 49 RFC 4475 messages `rsip` 0.4.0 rejects
//! 15, valid ones among them (folded and unusual whitespace, extension methods, escaping, long
//! requests, an unknown URI scheme that must reach the application for a 416), and accepts most
//! of the invalid ones; it has no extension-method variant, no size limits and cannot read
//! bracketed IPv6 hosts (`sip:[2001:db8::10]:5070`). So this module frames the message
//! (Content-Length, limits), unfolds continuation lines and the LWS the RFC allows, expands
//! compact header names, and checks the grammar of every header field the transaction and dialog
//! layers read (RFC 3261 §25). `rsip` serialises what we send (the request and response builders) and reads `sip:`
//! URIs for applications that want its typed form ([`parse_sip_uri`]). The torture table in
//! `tests/torture.rs` is the judge.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Size and count limits applied before anything else looks at a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest datagram or framed message, header section and body together.
    pub max_message_bytes: usize,
    /// Most header fields (after unfolding) in one message.
    pub max_headers: usize,
    /// Largest body.
    pub max_body_bytes: usize,
    /// Budget of server transactions for requests outside a live dialog (new INVITEs, OPTIONS,
    /// CANCELs that match no INVITE transaction, requests for unknown dialogs...). New requests
    /// beyond it get a stateless 503 with Retry-After, so a flood cannot grow memory without
    /// bound; they never take from [`Limits::max_in_dialog_transactions`].
    pub max_transactions: usize,
    /// Budget reserved for server transactions of live dialogs: requests that match a dialog's
    /// Call-ID and both tags and come from a source it trusts (BYE, re-INVITE, UPDATE, INFO,
    /// OPTIONS, NOTIFY), and CANCELs of INVITE transactions we hold. No out-of-dialog flood can make the endpoint
    /// refuse these; beyond this budget they get a stateless 503 too.
    pub max_in_dialog_transactions: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 65_535,
            max_headers: 128,
            max_body_bytes: 16 * 1024,
            max_transactions: 10_000,
            max_in_dialog_transactions: 10_000,
        }
    }
}

/// A request method: the ones RFC 3261 and its extensions name, or any other token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    /// INVITE.
    Invite,
    /// ACK.
    Ack,
    /// BYE.
    Bye,
    /// CANCEL.
    Cancel,
    /// OPTIONS.
    Options,
    /// UPDATE (RFC 3311).
    Update,
    /// INFO (RFC 6086).
    Info,
    /// REGISTER.
    Register,
    /// PRACK (RFC 3262).
    Prack,
    /// SUBSCRIBE (RFC 6665).
    Subscribe,
    /// NOTIFY (RFC 6665).
    Notify,
    /// PUBLISH (RFC 3903).
    Publish,
    /// MESSAGE (RFC 3428).
    Message,
    /// REFER (RFC 3515).
    Refer,
    /// Any other token (RFC 3261 §25.1 `extension-method`); method names are case-sensitive.
    Extension(String),
}

impl Method {
    /// Reads a method token (case-sensitive, RFC 3261 §7.1).
    pub fn from_token(token: &str) -> Method {
        match token {
            "INVITE" => Method::Invite,
            "ACK" => Method::Ack,
            "BYE" => Method::Bye,
            "CANCEL" => Method::Cancel,
            "OPTIONS" => Method::Options,
            "UPDATE" => Method::Update,
            "INFO" => Method::Info,
            "REGISTER" => Method::Register,
            "PRACK" => Method::Prack,
            "SUBSCRIBE" => Method::Subscribe,
            "NOTIFY" => Method::Notify,
            "PUBLISH" => Method::Publish,
            "MESSAGE" => Method::Message,
            "REFER" => Method::Refer,
            other => Method::Extension(other.to_string()),
        }
    }
    /// The token as written on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Invite => "INVITE",
            Method::Ack => "ACK",
            Method::Bye => "BYE",
            Method::Cancel => "CANCEL",
            Method::Options => "OPTIONS",
            Method::Update => "UPDATE",
            Method::Info => "INFO",
            Method::Register => "REGISTER",
            Method::Prack => "PRACK",
            Method::Subscribe => "SUBSCRIBE",
            Method::Notify => "NOTIFY",
            Method::Publish => "PUBLISH",
            Method::Message => "MESSAGE",
            Method::Refer => "REFER",
            Method::Extension(s) => s,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first line of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartLine {
    /// `Method SP Request-URI SP SIP/2.0`.
    Request {
        /// The method.
        method: Method,
        /// The Request-URI, verbatim.
        uri: String,
    },
    /// `SIP/2.0 SP Status-Code SP Reason-Phrase`.
    Response {
        /// Status code, 100..=699.
        code: u16,
        /// Reason phrase (may be empty, may be UTF-8).
        reason: String,
    },
}

/// A framed, normalised and validated SIP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Request or status line.
    pub start: StartLine,
    /// Header fields in order: canonical name (compact forms expanded) and unfolded value.
    pub headers: Vec<(String, String)>,
    /// The body, exactly Content-Length bytes.
    pub body: Vec<u8>,
}

/// What a receiver should do with bytes that are not an acceptable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The status to answer a request with (400, 505, ...), or `None` to drop silently
    /// (responses, keep-alives, garbage without a readable request line).
    pub status: Option<u16>,
    /// What was wrong, for the Warning header and the logs.
    pub reason: String,
    /// The header fields read before the fault, to build the error response from.
    pub headers: Vec<(String, String)>,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Headers that may appear at most once (RFC 3261 §20; a second one makes the request invalid).
const SINGLE_HEADERS: [&str; 6] = [
    "Call-ID",
    "CSeq",
    "From",
    "To",
    "Max-Forwards",
    "Content-Type",
];

/// Canonical spelling of well-known header names, and RFC 3261 §7.3.3 compact forms.
fn canonical_name(name: &str) -> String {
    const KNOWN: [&str; 40] = [
        "Accept",
        "Accept-Encoding",
        "Accept-Language",
        "Alert-Info",
        "Allow",
        "Authorization",
        "Call-ID",
        "Call-Info",
        "Contact",
        "Content-Disposition",
        "Content-Encoding",
        "Content-Language",
        "Content-Length",
        "Content-Type",
        "CSeq",
        "Date",
        "Error-Info",
        "Expires",
        "From",
        "In-Reply-To",
        "Max-Forwards",
        "Min-Expires",
        "Min-SE",
        "MIME-Version",
        "Organization",
        "Priority",
        "Proxy-Authorization",
        "Proxy-Require",
        "Record-Route",
        "Reply-To",
        "Require",
        "Retry-After",
        "Route",
        "Server",
        "Session-Expires",
        "Subject",
        "Supported",
        "To",
        "User-Agent",
        "Via",
    ];
    let compact = match name {
        "i" | "I" => Some("Call-ID"),
        "m" | "M" => Some("Contact"),
        "e" | "E" => Some("Content-Encoding"),
        "l" | "L" => Some("Content-Length"),
        "c" | "C" => Some("Content-Type"),
        "f" | "F" => Some("From"),
        "s" | "S" => Some("Subject"),
        "k" | "K" => Some("Supported"),
        "t" | "T" => Some("To"),
        "v" | "V" => Some("Via"),
        "o" | "O" => Some("Event"),
        "u" | "U" => Some("Allow-Events"),
        "x" | "X" => Some("Session-Expires"),
        "r" | "R" => Some("Refer-To"),
        "b" | "B" => Some("Referred-By"),
        _ => None,
    };
    if let Some(c) = compact {
        return c.to_string();
    }
    KNOWN
        .iter()
        .find(|k| k.eq_ignore_ascii_case(name))
        .map(|k| k.to_string())
        .unwrap_or_else(|| name.to_string())
}

/// RFC 3261 §25.1 `token` characters.
pub(crate) fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-.!%*_+`'~".contains(c)
}

pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_token_char)
}

fn reject(status: u16, reason: impl Into<String>, headers: &[(String, String)]) -> ParseError {
    ParseError {
        status: Some(status),
        reason: reason.into(),
        headers: headers.to_vec(),
    }
}

fn drop_msg(reason: impl Into<String>) -> ParseError {
    ParseError {
        status: None,
        reason: reason.into(),
        headers: Vec::new(),
    }
}

/// How a message arrived, which decides what a missing Content-Length means (RFC 3261 §18.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One datagram: the body runs to its end when Content-Length is absent; bytes past
    /// Content-Length are discarded.
    Datagram,
    /// One message cut from a stream by [`StreamFramer`]: Content-Length
    /// was already applied.
    Stream,
}

/// Parses one message from a datagram (or a framed stream message): limits, framing,
/// normalisation, then [`Message::validate`].
pub fn parse_message(
    bytes: &[u8],
    limits: &Limits,
    framing: Framing,
) -> Result<Message, ParseError> {
    if bytes.len() > limits.max_message_bytes {
        return Err(drop_msg(format!(
            "message of {} bytes exceeds the limit of {}",
            bytes.len(),
            limits.max_message_bytes
        )));
    }
    // RFC 3261 §7.5: CRLFs before the start line are ignored (keep-alives are all CRLF).
    let start = bytes
        .iter()
        .position(|b| *b != b'\r' && *b != b'\n')
        .ok_or_else(|| drop_msg("keep-alive (only CRLF)"))?;
    let bytes = &bytes[start..];
    let (head, rest) = split_head(bytes);
    let head = std::str::from_utf8(head).map_err(|_| drop_msg("header section is not UTF-8"))?;
    let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let first = lines.next().unwrap_or_default();
    let start_line = parse_start_line(first);
    let is_request = !first.starts_with("SIP/");
    // Unfold (RFC 3261 §7.3.1): a line starting with SP/HT continues the previous field.
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut bad_line: Option<String> = None;
    for line in lines {
        if line.is_empty() {
            // Only possible as the last line of a header section with no blank line after it.
            continue;
        }
        if line.starts_with([' ', '\t']) {
            match headers.last_mut() {
                Some((_, v)) => {
                    let cont = line.trim_matches([' ', '\t']);
                    if !cont.is_empty() {
                        if !v.is_empty() {
                            v.push(' ');
                        }
                        v.push_str(cont);
                    }
                }
                None => {
                    bad_line.get_or_insert_with(|| "continuation line before any header".into());
                }
            }
            continue;
        }
        if headers.len() >= limits.max_headers {
            return Err(status_for(
                is_request,
                400,
                format!("more than {} header fields", limits.max_headers),
                &headers,
            ));
        }
        let Some((name, value)) = line.split_once(':') else {
            bad_line
                .get_or_insert_with(|| format!("header line {:?} has no colon", truncate(line)));
            continue;
        };
        let name = name.trim_end_matches([' ', '\t']);
        if !is_token(name) {
            bad_line
                .get_or_insert_with(|| format!("header name {:?} is not a token", truncate(name)));
            continue;
        }
        headers.push((
            canonical_name(name),
            value.trim_matches([' ', '\t']).to_string(),
        ));
    }
    let start_line = match start_line {
        Ok(s) => s,
        Err((status, reason)) => return Err(status_for(is_request, status, reason, &headers)),
    };
    if let Some(reason) = bad_line {
        return Err(status_for(is_request, 400, reason, &headers));
    }
    // Content-Length: every copy must agree (RFC 4475 §3.3.9) and be a plain number.
    let mut content_length: Option<usize> = None;
    for (_, v) in headers.iter().filter(|(n, _)| n == "Content-Length") {
        let n = parse_digits(v)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                status_for(
                    is_request,
                    400,
                    format!("Content-Length {v:?} is not a number"),
                    &headers,
                )
            })?;
        if content_length.is_some_and(|c| c != n) {
            return Err(status_for(
                is_request,
                400,
                "Content-Length headers disagree",
                &headers,
            ));
        }
        content_length = Some(n);
    }
    let body = match (content_length, framing) {
        (Some(n), _) if n > rest.len() => {
            return Err(status_for(
                is_request,
                400,
                format!(
                    "Content-Length {n} exceeds the {} body bytes received",
                    rest.len()
                ),
                &headers,
            ))
        }
        (Some(n), _) => &rest[..n],
        (None, _) => rest,
    };
    if body.len() > limits.max_body_bytes {
        return Err(status_for(
            is_request,
            413,
            format!(
                "body of {} bytes exceeds the limit of {}",
                body.len(),
                limits.max_body_bytes
            ),
            &headers,
        ));
    }
    let msg = Message {
        start: start_line,
        headers,
        body: body.to_vec(),
    };
    msg.validate()?;
    Ok(msg)
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn status_for(
    is_request: bool,
    status: u16,
    reason: impl Into<String>,
    headers: &[(String, String)],
) -> ParseError {
    if is_request {
        reject(status, reason, headers)
    } else {
        drop_msg(reason)
    }
}

/// Splits at the blank line ending the header section (CRLFCRLF, or bare LF LF as RFC 5118's
/// archive writes); with no blank line at all, everything is header section.
fn split_head(bytes: &[u8]) -> (&[u8], &[u8]) {
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' {
            let next = &bytes[i + 1..];
            if next.starts_with(b"\r\n") {
                return (&bytes[..i], &next[2..]);
            }
            if next.starts_with(b"\n") {
                return (&bytes[..i], &next[1..]);
            }
        }
        i += 1;
    }
    (bytes, &[])
}

fn parse_digits(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_start_line(line: &str) -> Result<StartLine, (u16, String)> {
    if let Some(rest) = line.strip_prefix("SIP/") {
        let mut parts = rest.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        if version != "2.0" {
            return Err((505, format!("SIP version {version:?} not supported")));
        }
        let code = parts.next().unwrap_or_default();
        if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
            return Err((
                400,
                format!("status code {:?} is not 3 digits", truncate(code)),
            ));
        }
        let code: u16 = code
            .parse()
            .map_err(|_| (400, "bad status code".to_string()))?;
        if !(100..=699).contains(&code) {
            return Err((400, format!("status code {code} out of range")));
        }
        return Ok(StartLine::Response {
            code,
            reason: parts.next().unwrap_or_default().to_string(),
        });
    }
    // RFC 3261 §7.1: exactly one SP between the three elements, none around them.
    let parts: Vec<&str> = line.split(' ').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty()) {
        return Err((
            400,
            format!(
                "request line {:?} is not METHOD SP URI SP VERSION",
                truncate(line)
            ),
        ));
    }
    if !is_token(parts[0]) {
        return Err((
            400,
            format!("method {:?} is not a token", truncate(parts[0])),
        ));
    }
    let version = parts[2];
    if !version
        .get(..4)
        .is_some_and(|p| p.eq_ignore_ascii_case("SIP/"))
    {
        return Err((
            400,
            format!("version {:?} is not SIP/x.y", truncate(version)),
        ));
    }
    if &version[4..] != "2.0" {
        return Err((505, format!("SIP version {version:?} not supported")));
    }
    let uri = parts[1];
    if uri.contains(['<', '>', '"', '\t']) {
        return Err((
            400,
            format!("Request-URI {:?} has characters not allowed", truncate(uri)),
        ));
    }
    if uri_scheme(uri).is_none() {
        return Err((
            400,
            format!("Request-URI {:?} has no scheme", truncate(uri)),
        ));
    }
    Ok(StartLine::Request {
        method: Method::from_token(parts[0]),
        uri: uri.to_string(),
    })
}

/// The status code of a `message/sipfrag` body (RFC 3420) that starts with a status line, as the
/// NOTIFYs of a REFER subscription carry (RFC 3515 §2.4.5): `SIP/2.0 180 Ringing`, perhaps
/// followed by header fields. The line is read by the rules of a response's status line, so a
/// fragment and a response agree on what a status line is; `None` when the body does not start
/// with one.
pub(crate) fn sipfrag_status(body: &[u8]) -> Option<u16> {
    let line = body.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match parse_start_line(std::str::from_utf8(line).ok()?) {
        Ok(StartLine::Response { code, .. }) => Some(code),
        _ => None,
    }
}

/// A header value of the form `token *( SEMI generic-param )`, as Event and Subscription-State
/// are (RFC 6665 §8.4): the token and the parameters (names lower-cased). `None` when the token
/// or a parameter is malformed.
pub(crate) fn parse_token_params(value: &str) -> Option<(&str, Params)> {
    let (token, params) = value.split_at(value.find(';').unwrap_or(value.len()));
    let token = token.trim();
    if !is_token(token) {
        return None;
    }
    Some((token, parse_params(params).ok()?))
}

/// The scheme of an absolute URI (`ALPHA *(ALPHA / DIGIT / "+" / "-" / ".") ":"`).
pub fn uri_scheme(uri: &str) -> Option<&str> {
    let (scheme, rest) = uri.split_once(':')?;
    let mut chars = scheme.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && !rest.is_empty();
    ok.then_some(scheme)
}

/// What follows the userinfo of a `sip:` URI: hostport, params, headers. The user part may
/// hold `;`, `?` and `/` (RFC 3261 §25.1 user-unreserved), so the host starts after the last `@`.
fn sip_host_part(uri: &str) -> &str {
    let rest = uri.split_once(':').map(|(_, r)| r).unwrap_or(uri);
    match rest.rfind('@') {
        Some(i) => &rest[i + 1..],
        None => rest,
    }
}

/// Whether a URI is `sip:` or `sips:` (schemes are case-insensitive).
pub fn is_sip_uri(uri: &str) -> bool {
    uri_scheme(uri).is_some_and(|s| s.eq_ignore_ascii_case("sip") || s.eq_ignore_ascii_case("sips"))
}

/// Reads a `sip`/`sips` URI with `rsip`: user and host:port for routing. `None` for other
/// schemes or what `rsip` cannot read.
pub fn parse_sip_uri(uri: &str) -> Option<rsip::Uri> {
    if !is_sip_uri(uri) {
        return None;
    }
    rsip::Uri::try_from(uri).ok()
}

/// Whether `uri` is a `sip:`/`sips:` URI with a readable `host[:port]` (IPv6 in brackets), no
/// whitespace and no angle brackets: what we accept as a target to send to.
pub fn is_valid_sip_uri(uri: &str) -> bool {
    is_sip_uri(uri)
        && !uri.contains([' ', '\t', '\r', '\n', '<', '>', '"'])
        && parse_host_port(
            sip_host_part(uri)
                .split([';', '?'])
                .next()
                .unwrap_or_default(),
        )
        .is_some()
}

/// The IP address and port a `sip` URI names when its host is an IP literal (default port 5060).
/// Read here rather than with `rsip`, which does not take bracketed IPv6 hosts (RFC 5118 §4.4).
pub fn uri_socket_addr(uri: &str) -> Option<SocketAddr> {
    if !is_sip_uri(uri) {
        return None;
    }
    let hostport = sip_host_part(uri)
        .split([';', '?'])
        .next()
        .unwrap_or_default();
    let (host, port) = parse_host_port(hostport)?;
    let ip: IpAddr = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()?;
    Some(SocketAddr::new(ip, port.unwrap_or(5060)))
}

/// One `Via` value (RFC 3261 §20.42).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via {
    /// Transport token (`UDP`, `TCP`, ...), upper-cased.
    pub transport: String,
    /// sent-by host (IPv6 with brackets).
    pub host: String,
    /// sent-by port.
    pub port: Option<u16>,
    /// Parameters, names lower-cased.
    pub params: Vec<(String, Option<String>)>,
}

impl Via {
    /// The `branch` parameter.
    pub fn branch(&self) -> Option<&str> {
        param(&self.params, "branch")
    }
    /// Whether the branch carries the RFC 3261 magic cookie (and something after it).
    pub fn has_rfc3261_branch(&self) -> bool {
        self.branch()
            .is_some_and(|b| b.starts_with(MAGIC_COOKIE) && b.len() > MAGIC_COOKIE.len())
    }
    /// sent-by as written: `host[:port]`.
    pub fn sent_by(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }
    /// Whether an `rport` parameter (RFC 3581) is present.
    pub fn has_rport(&self) -> bool {
        self.params.iter().any(|(n, _)| n == "rport")
    }
}

/// RFC 3261 §8.1.1.7 branch prefix.
pub const MAGIC_COOKIE: &str = "z9hG4bK";

fn param<'a>(params: &'a [(String, Option<String>)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.as_deref())
}

/// Splits a header value at commas outside quotes and angle brackets.
pub(crate) fn split_list(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut quoted, mut escaped, mut angle) = (false, false, false);
    let mut start = 0;
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
            '<' => angle = true,
            '>' => angle = false,
            ',' if !angle => {
                out.push(value[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(value[start..].trim());
    out
}

/// Header parameters: names lower-cased, values as written (`None` for a bare name).
pub(crate) type Params = Vec<(String, Option<String>)>;

/// `*( SEMI generic-param )` with LWS allowed around `;` and `=` (RFC 3261 §25.1 SEMI, EQUAL).
fn parse_params(s: &str) -> Result<Params, String> {
    let mut out = Vec::new();
    let s = s.trim();
    if s.is_empty() {
        return Ok(out);
    }
    let Some(s) = s.strip_prefix(';') else {
        return Err(format!("unexpected {:?} before parameters", truncate(s)));
    };
    for p in s.split(';') {
        let (name, value) = match p.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim())),
            None => (p.trim(), None),
        };
        if !is_token(name) {
            return Err(format!(
                "parameter name {:?} is not a token",
                truncate(name)
            ));
        }
        if let Some(v) = value {
            let ok = if let Some(inner) = v.strip_prefix('"') {
                inner.ends_with('"')
            } else if v.starts_with('[') {
                v.ends_with(']')
            } else {
                is_token(v) || v.chars().all(|c| is_token_char(c) || c == ':')
            };
            if !ok {
                return Err(format!(
                    "parameter {name} has a bad value {:?}",
                    truncate(v)
                ));
            }
        }
        out.push((name.to_ascii_lowercase(), value.map(str::to_string)));
    }
    Ok(out)
}

/// Parses a `Via` header value (possibly a comma list).
pub fn parse_via(value: &str) -> Result<Vec<Via>, String> {
    let mut out = Vec::new();
    for item in split_list(value) {
        // sent-protocol = "SIP" SLASH "2.0" SLASH transport, LWS allowed around SLASH.
        let mut parts = item.splitn(3, '/');
        let name = parts.next().unwrap_or_default().trim();
        let version = parts.next().unwrap_or_default().trim();
        let rest = parts.next().unwrap_or_default().trim_start();
        if !name.eq_ignore_ascii_case("SIP") || version != "2.0" {
            return Err(format!("Via {:?} is not SIP/2.0", truncate(item)));
        }
        let tend = rest.find([' ', '\t']).unwrap_or(rest.len());
        let transport = &rest[..tend];
        if !is_token(transport) {
            return Err(format!(
                "Via transport {:?} is not a token",
                truncate(transport)
            ));
        }
        let after = rest[tend..].trim_start();
        let pstart = after.find(';').unwrap_or(after.len());
        let sent_by = after[..pstart].trim();
        let (host, port) = parse_host_port(sent_by)
            .ok_or_else(|| format!("Via sent-by {:?} is not host[:port]", truncate(sent_by)))?;
        let params = parse_params(&after[pstart..])?;
        out.push(Via {
            transport: transport.to_ascii_uppercase(),
            host,
            port,
            params,
        });
    }
    Ok(out)
}

fn parse_host_port(s: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &s[..end + 2];
        // Hex, colons and dots only: RFC 5118 §4.10 asks us to tolerate the 3-colon form.
        let inner = &host[1..host.len() - 1];
        if inner.is_empty()
            || !inner
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return None;
        }
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return None,
        };
        (host, port)
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty()
        || !(host.starts_with('[')
            || host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'))
    {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.trim().parse::<u16>().ok()?),
        None => None,
    };
    Some((host.to_string(), port))
}

/// A `name-addr` or `addr-spec` header value (From, To, Contact, Route, Record-Route).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameAddr {
    /// Display name, unquoted (escapes kept as written).
    pub display_name: Option<String>,
    /// The URI.
    pub uri: String,
    /// Header parameters (`tag`, `expires`, ...), names lower-cased.
    pub params: Vec<(String, Option<String>)>,
}

impl NameAddr {
    /// The `tag` parameter.
    pub fn tag(&self) -> Option<&str> {
        param(&self.params, "tag")
    }
}

/// Parses `( name-addr / addr-spec ) *( SEMI param )` (RFC 3261 §20.10, §25.1).
pub fn parse_name_addr(value: &str) -> Result<NameAddr, String> {
    let v = value.trim();
    let (display_name, rest) = if let Some(q) = v.strip_prefix('"') {
        let mut escaped = false;
        let mut end = None;
        for (i, c) in q.char_indices() {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                end = Some(i);
                break;
            }
        }
        let end = end.ok_or_else(|| format!("unbalanced quote in {:?}", truncate(v)))?;
        let rest = q[end + 1..].trim_start();
        if !rest.starts_with('<') {
            return Err(format!(
                "quoted display name not followed by <URI> in {:?}",
                truncate(v)
            ));
        }
        (Some(q[..end].to_string()), rest)
    } else if let Some(lt) = v.find('<') {
        let dn = v[..lt].trim();
        // Unquoted display names are tokens separated by LWS (RFC 3261 §25.1).
        if !dn
            .split([' ', '\t'])
            .filter(|t| !t.is_empty())
            .all(is_token)
        {
            return Err(format!("display name {:?} must be quoted", truncate(dn)));
        }
        ((!dn.is_empty()).then(|| dn.to_string()), &v[lt..])
    } else {
        // addr-spec: the URI ends at the first ';', and may hold no ',', '?' (§20.10).
        let end = v.find(';').unwrap_or(v.len());
        let uri = v[..end].trim();
        if uri.contains([',', '?', ' ', '\t', '>', '"']) || uri_scheme(uri).is_none() {
            return Err(format!(
                "address {:?} must be enclosed in <>",
                truncate(uri)
            ));
        }
        return Ok(NameAddr {
            display_name: None,
            uri: uri.to_string(),
            params: parse_params(&v[end..])?,
        });
    };
    let inner = rest
        .strip_prefix('<')
        .and_then(|r| r.split_once('>'))
        .ok_or_else(|| format!("no closing > in {:?}", truncate(v)))?;
    let uri = inner.0;
    if uri.is_empty() || uri.contains([' ', '\t', '<']) || uri_scheme(uri).is_none() {
        return Err(format!(
            "URI {:?} in <> is not an absolute URI without spaces",
            truncate(uri)
        ));
    }
    Ok(NameAddr {
        display_name,
        uri: uri.to_string(),
        params: parse_params(inner.1)?,
    })
}

/// Parses `CSeq: 1*DIGIT LWS Method`; the number must be below 2^31 (RFC 3261 §8.1.1.5).
pub fn parse_cseq(value: &str) -> Result<(u32, Method), String> {
    let mut parts = value.split([' ', '\t']).filter(|s| !s.is_empty());
    let (Some(n), Some(m), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!(
            "CSeq {:?} is not <number> <method>",
            truncate(value)
        ));
    };
    let n = parse_digits(n)
        .filter(|n| *n < 1 << 31)
        .ok_or_else(|| format!("CSeq number {:?} is not below 2^31", truncate(n)))?;
    if !is_token(m) {
        return Err(format!("CSeq method {:?} is not a token", truncate(m)));
    }
    Ok((n as u32, Method::from_token(m)))
}

fn valid_date(v: &str) -> bool {
    // rfc1123-date = wkday "," SP date1 SP time SP "GMT" (RFC 3261 §20.17).
    let f: Vec<&str> = v.split(' ').collect();
    f.len() == 6
        && f[0].len() == 4
        && f[0].ends_with(',')
        && ["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"].contains(&f[0])
        && f[1].len() == 2
        && f[1].bytes().all(|b| b.is_ascii_digit())
        && [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ]
        .contains(&f[2])
        && f[3].len() == 4
        && f[3].bytes().all(|b| b.is_ascii_digit())
        && f[4].len() == 8
        && f[5] == "GMT"
}

impl Message {
    /// The method of a request.
    pub fn method(&self) -> Option<&Method> {
        match &self.start {
            StartLine::Request { method, .. } => Some(method),
            StartLine::Response { .. } => None,
        }
    }
    /// The Request-URI of a request.
    pub fn request_uri(&self) -> Option<&str> {
        match &self.start {
            StartLine::Request { uri, .. } => Some(uri),
            StartLine::Response { .. } => None,
        }
    }
    /// The status code of a response.
    pub fn status(&self) -> Option<u16> {
        match &self.start {
            StartLine::Response { code, .. } => Some(*code),
            StartLine::Request { .. } => None,
        }
    }
    /// The first value of a header (canonical name, case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// Every value of a header, in order.
    pub fn headers_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// All values of a list header, split at commas (e.g. Via, Record-Route, Require).
    pub fn list_values<'a>(&'a self, name: &'a str) -> Vec<&'a str> {
        self.headers_named(name)
            .flat_map(split_list)
            .filter(|s| !s.is_empty())
            .collect()
    }
    /// The Call-ID.
    pub fn call_id(&self) -> &str {
        self.header("Call-ID").unwrap_or_default()
    }
    /// CSeq number and method (validated at parse time).
    pub fn cseq(&self) -> (u32, Method) {
        self.header("CSeq")
            .and_then(|v| parse_cseq(v).ok())
            .unwrap_or((0, Method::Extension(String::new())))
    }
    /// The From header (validated at parse time).
    pub fn from(&self) -> Option<NameAddr> {
        self.header("From").and_then(|v| parse_name_addr(v).ok())
    }
    /// The To header (validated at parse time).
    pub fn to(&self) -> Option<NameAddr> {
        self.header("To").and_then(|v| parse_name_addr(v).ok())
    }
    /// The Via values, topmost first.
    pub fn vias(&self) -> Vec<Via> {
        self.headers_named("Via")
            .filter_map(|v| parse_via(v).ok())
            .flatten()
            .collect()
    }
    /// The topmost Via.
    pub fn top_via(&self) -> Option<Via> {
        self.header("Via")
            .and_then(|v| parse_via(v).ok())
            .and_then(|v| v.into_iter().next())
    }
    /// The first Contact.
    pub fn contact(&self) -> Option<NameAddr> {
        self.list_values("Contact")
            .into_iter()
            .find_map(|v| parse_name_addr(v).ok())
    }
    /// Content-Type media type, lower-cased, without parameters.
    pub fn content_type(&self) -> Option<String> {
        self.header("Content-Type").map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
    }
    /// Option tags of a list header (Require, Supported, Proxy-Require).
    pub fn option_tags(&self, name: &str) -> Vec<String> {
        self.list_values(name)
            .into_iter()
            .map(|s| s.to_ascii_lowercase())
            .collect()
    }

    /// Checks the fields the UA relies on (RFC 3261 §8.1.1, §8.2, §20): mandatory headers
    /// present once, CSeq, Via, From/To/Contact syntax, Max-Forwards, Date.
    pub fn validate(&self) -> Result<(), ParseError> {
        let is_request = matches!(self.start, StartLine::Request { .. });
        let fail = |reason: String| Err(status_for(is_request, 400, reason, &self.headers));
        for name in ["Via", "From", "To", "Call-ID", "CSeq"] {
            if self.header(name).is_none() {
                return fail(format!("missing {name} header"));
            }
        }
        for name in SINGLE_HEADERS {
            if self.headers_named(name).count() > 1 {
                return fail(format!("more than one {name} header"));
            }
        }
        if self.call_id().is_empty() || self.call_id().contains([' ', '\t']) {
            return fail("Call-ID is empty or has whitespace".into());
        }
        let (_, cseq_method) = match parse_cseq(self.header("CSeq").unwrap_or_default()) {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
        if let StartLine::Request { method, uri } = &self.start {
            if *method != cseq_method {
                return fail(format!("CSeq method {cseq_method} does not match {method}"));
            }
            if is_sip_uri(uri) {
                let host_part = sip_host_part(uri);
                // RFC 3261 §19.1.5: header components are not allowed in a Request-URI.
                if host_part.contains('?') {
                    return fail("Request-URI carries headers".into());
                }
                let hostport = host_part.split([';', '?']).next().unwrap_or_default();
                if parse_host_port(hostport).is_none() {
                    return fail(format!(
                        "Request-URI host {:?} is not host[:port]",
                        truncate(hostport)
                    ));
                }
            }
        }
        for v in self.headers_named("Via") {
            if let Err(e) = parse_via(v) {
                return fail(e);
            }
        }
        for name in ["From", "To"] {
            if let Err(e) = parse_name_addr(self.header(name).unwrap_or_default()) {
                return fail(format!("{name}: {e}"));
            }
        }
        for name in ["Contact", "Record-Route", "Route"] {
            for v in self.list_values(name) {
                if name == "Contact" && v == "*" {
                    continue;
                }
                if let Err(e) = parse_name_addr(v) {
                    return fail(format!("{name}: {e}"));
                }
            }
        }
        if let Some(mf) = self.header("Max-Forwards") {
            if parse_digits(mf).is_none_or(|n| n > 255) {
                return fail(format!("Max-Forwards {:?} is not 0..=255", truncate(mf)));
            }
        }
        if let Some(d) = self.header("Date") {
            if !valid_date(d) {
                return fail(format!(
                    "Date {:?} is not an RFC 1123 GMT date",
                    truncate(d)
                ));
            }
        }
        Ok(())
    }
}

/// Cuts whole messages out of a stream transport (TCP) by Content-Length (RFC 3261 §18.3).
#[derive(Debug, Default)]
pub struct StreamFramer {
    buffer: Vec<u8>,
}

/// A stream that can no longer be framed: the connection should be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SIP stream framing failed: {0}")]
pub struct StreamError(pub String);

impl StreamFramer {
    /// An empty framer.
    pub fn new() -> StreamFramer {
        StreamFramer::default()
    }
    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }
    /// Bytes held that do not yet form a whole message.
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.len()
    }
    /// The next whole message's bytes, `Ok(None)` when more bytes are needed. Keep-alive CRLFs
    /// are skipped. An error (header section or body over the limits, unreadable
    /// Content-Length) means the stream cannot be resynchronised.
    pub fn next_message(&mut self, limits: &Limits) -> Result<Option<Vec<u8>>, StreamError> {
        let skip = self
            .buffer
            .iter()
            .position(|b| *b != b'\r' && *b != b'\n')
            .unwrap_or(self.buffer.len());
        self.buffer.drain(..skip);
        let Some(end) = find(&self.buffer, b"\r\n\r\n") else {
            if self.buffer.len() > limits.max_message_bytes {
                return Err(StreamError(format!(
                    "no end of headers within {} bytes",
                    limits.max_message_bytes
                )));
            }
            return Ok(None);
        };
        let head = &self.buffer[..end];
        let mut content_length = 0usize;
        for line in head.split(|b| *b == b'\n') {
            let line = std::str::from_utf8(line)
                .unwrap_or_default()
                .trim_end_matches('\r');
            if let Some((name, value)) = line.split_once(':') {
                let name = name.trim_end();
                if name.eq_ignore_ascii_case("Content-Length") || name.eq_ignore_ascii_case("l") {
                    content_length = parse_digits(value.trim())
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| {
                            StreamError(format!(
                                "Content-Length {:?} is not a number",
                                value.trim()
                            ))
                        })?;
                }
            }
        }
        if content_length > limits.max_body_bytes {
            return Err(StreamError(format!(
                "Content-Length {content_length} exceeds the body limit {}",
                limits.max_body_bytes
            )));
        }
        let total = end + 4 + content_length;
        if self.buffer.len() < total {
            return Ok(None);
        }
        Ok(Some(self.buffer.drain(..total).collect()))
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTIONS: &str = "OPTIONS sip:a@192.0.2.1 SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.2:5062;branch=z9hG4bKx;rport\r\n\
From: <sip:b@192.0.2.2>;tag=1\r\nTo: sip:a@192.0.2.1\r\nCall-ID: c1\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n";

    #[test]
    fn parses_and_reads_fields() {
        let m = parse_message(OPTIONS.as_bytes(), &Limits::default(), Framing::Datagram).unwrap();
        assert_eq!(m.method(), Some(&Method::Options));
        let via = m.top_via().unwrap();
        assert_eq!(
            (via.host.as_str(), via.port, via.branch()),
            ("192.0.2.2", Some(5062), Some("z9hG4bKx"))
        );
        assert!(via.has_rport());
        assert_eq!(m.from().unwrap().tag(), Some("1"));
        assert_eq!(m.cseq(), (1, Method::Options));
    }

    #[test]
    fn limits_apply() {
        let limits = Limits {
            max_message_bytes: 100,
            ..Limits::default()
        };
        assert_eq!(
            parse_message(OPTIONS.as_bytes(), &limits, Framing::Datagram)
                .unwrap_err()
                .status,
            None
        );
        let limits = Limits {
            max_headers: 3,
            ..Limits::default()
        };
        assert_eq!(
            parse_message(OPTIONS.as_bytes(), &limits, Framing::Datagram)
                .unwrap_err()
                .status,
            Some(400)
        );
    }

    #[test]
    fn stream_framer_cuts_by_content_length() {
        let mut f = StreamFramer::new();
        let msg = "OPTIONS sip:a@b SIP/2.0\r\nl: 3\r\n\r\nabc";
        f.push(b"\r\n\r\n");
        f.push(&msg.as_bytes()[..10]);
        assert_eq!(f.next_message(&Limits::default()).unwrap(), None);
        f.push(&msg.as_bytes()[10..]);
        f.push(msg.as_bytes());
        assert_eq!(
            f.next_message(&Limits::default()).unwrap().unwrap(),
            msg.as_bytes()
        );
        assert_eq!(
            f.next_message(&Limits::default()).unwrap().unwrap(),
            msg.as_bytes()
        );
        assert_eq!(f.next_message(&Limits::default()).unwrap(), None);
        f.push(b"INVITE x SIP/2.0\r\nContent-Length: -1\r\n\r\n");
        assert!(f.next_message(&Limits::default()).is_err());
    }

    #[test]
    fn uri_helpers() {
        assert_eq!(
            uri_socket_addr("sip:x@192.0.2.1:5070;transport=udp"),
            Some("192.0.2.1:5070".parse().unwrap())
        );
        assert_eq!(
            uri_socket_addr("sip:192.0.2.1"),
            Some("192.0.2.1:5060".parse().unwrap())
        );
        assert_eq!(uri_socket_addr("sip:example.com"), None);
        assert_eq!(
            uri_scheme("nobodyknowsthisscheme:x"),
            Some("nobodyknowsthisscheme")
        );
        assert!(!is_sip_uri("tel:+1"));
    }

    #[test]
    fn sipfrag_status_lines() {
        assert_eq!(sipfrag_status(b"SIP/2.0 100 Trying\r\n"), Some(100));
        assert_eq!(sipfrag_status(b"SIP/2.0 200 OK"), Some(200));
        let with_headers = b"SIP/2.0 603 Declined\r\nCSeq: 1 INVITE\r\n\r\n";
        assert_eq!(sipfrag_status(with_headers), Some(603));
        for bad in [
            &b""[..],
            b"garbage",
            b"SIP/2.0 2000 OK",
            b"SIP/2.0 099 Low",
            b"SIP/3.0 200 OK",
            b"INVITE sip:a@b SIP/2.0",
            b"\r\nSIP/2.0 200 OK",
            b"SIP/2.0 \xff\xfe OK",
        ] {
            assert_eq!(sipfrag_status(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn token_and_params() {
        let (token, params) = parse_token_params("refer ; id=93").unwrap();
        assert_eq!(token, "refer");
        assert_eq!(params, [("id".to_string(), Some("93".to_string()))]);
        let (token, params) = parse_token_params("terminated;reason=noresource").unwrap();
        assert_eq!((token, params.len()), ("terminated", 1));
        assert!(parse_token_params("active").unwrap().1.is_empty());
        assert!(parse_token_params("").is_none());
        assert!(parse_token_params("a b;id=1").is_none());
        assert!(parse_token_params("refer;id=<x>").is_none());
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..800)) {
            let _ = parse_message(&bytes, &Limits::default(), Framing::Datagram);
            let mut f = StreamFramer::new();
            f.push(&bytes);
            while let Ok(Some(_)) = f.next_message(&Limits::default()) {}
        }
        #[test]
        fn never_panics_on_mutated_message(pos in 0usize..300, byte in proptest::num::u8::ANY, cut in 0usize..320) {
            let mut b = OPTIONS.as_bytes().to_vec();
            let p = pos % b.len();
            b[p] = byte;
            b.truncate(cut.max(1));
            if let Ok(m) = parse_message(&b, &Limits::default(), Framing::Datagram) {
                let _ = (m.vias(), m.from(), m.to(), m.contact(), m.cseq());
            }
        }
    }
}
