//! The TwiML verbs ontime runs, and their parser.
//!
//! TwiML reaches ontime from bots (`Twiml=` and `Url=` of the API, the gateway's voice URL).
//! It is parsed whole before anything runs, so that a verb or attribute ontime does not honour
//! is refused in the API's answer, naming it, instead of being skipped in the middle of a call.

use std::time::Duration;

use crate::sip_headers::SipTarget;

/// Who `<Dial>` calls, or where `<Refer>` sends the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialTarget {
    /// `<Sip>sip:...</Sip>`: a SIP URI, as written.
    Sip(String),
    /// `<Number>+1...</Number>` or bare text in `<Dial>`: an E.164 number.
    Number(String),
}

/// One TwiML verb.
#[derive(Debug, Clone, PartialEq)]
pub enum Verb {
    /// `<Hangup/>`.
    Hangup,
    /// `<Pause length="N"/>` (Twilio's default 1 s).
    Pause(Duration),
    /// `<Play digits="w159#"/>`: the digits as written (`0-9 * # A-D`, `w` = 0.5 s pause).
    PlayDigits(String),
    /// `<Refer><Sip>...</Sip></Refer>`: blind transfer by SIP REFER.
    Transfer(DialTarget),
    /// `<Dial>...</Dial>`: call someone and bridge the caller to them (Twilio's semantics).
    Dial(Dial),
    /// `<Connect><Stream url="...">` with its `<Parameter>`s: bridge the call to this bot.
    ConnectStream {
        /// `ws://` or `wss://`.
        url: String,
        /// `<Parameter name value>`, in order (they go into `customParameters`).
        parameters: Vec<(String, String)>,
        /// The audio both ways (`contentType`, an ontime extension; Twilio's µ-law by default).
        audio: StreamAudio,
    },
    /// `<Reject reason="busy|rejected"/>` (only before the call is answered: 486 or 603).
    Reject {
        /// `reason="busy"` (486); otherwise 603.
        busy: bool,
    },
}

/// The audio of a `<Stream>`, both ways: Twilio's µ-law at 8 kHz, or 16-bit linear PCM at 16 kHz
/// as the carriers that stream wideband to bots send it. Chosen by `<Stream contentType="...">`
/// (an ontime extension, with the MIME types Vonage's WebSocket endpoints take).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamAudio {
    /// `audio/x-mulaw;rate=8000`: 160 bytes per 20 ms (Twilio's Media Streams).
    #[default]
    Mulaw8k,
    /// `audio/l16;rate=16000`: 320 samples per 20 ms, 16-bit little-endian.
    L16At16k,
}

impl StreamAudio {
    /// Every format, default first.
    pub const ALL: [StreamAudio; 2] = [StreamAudio::Mulaw8k, StreamAudio::L16At16k];

    /// The MIME type, as `contentType` takes it.
    pub const fn content_type(self) -> &'static str {
        match self {
            StreamAudio::Mulaw8k => "audio/x-mulaw;rate=8000",
            StreamAudio::L16At16k => "audio/l16;rate=16000",
        }
    }

    /// The `mediaFormat.encoding` of the stream's `start` message.
    pub const fn encoding(self) -> &'static str {
        match self {
            StreamAudio::Mulaw8k => "audio/x-mulaw",
            StreamAudio::L16At16k => "audio/l16",
        }
    }

    /// The sample rate.
    pub const fn sample_rate_hz(self) -> u32 {
        match self {
            StreamAudio::Mulaw8k => 8000,
            StreamAudio::L16At16k => 16_000,
        }
    }

    /// The format a MIME type names (case and spaces around `;` ignored), if ontime speaks it.
    pub fn from_content_type(value: &str) -> Option<StreamAudio> {
        let normal: String = value
            .split(';')
            .map(|p| p.trim().to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(";");
        StreamAudio::ALL
            .into_iter()
            .find(|a| a.content_type() == normal)
    }
}

/// `<Dial>`: the second leg the gateway places and bridges to the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dial {
    /// Whom to call: the `<Number>`s and `<Sip>`s (or the bare number), 1 to
    /// [`MAX_DIAL_NOUNS`], all at once; the first to answer is bridged, the others hung up.
    pub nouns: Vec<DialNoun>,
    /// `timeout`: how long it may ring (Twilio's default 30 s; 5 to 600).
    pub timeout: Duration,
    /// `callerId`: the `From` of the dialled leg (default: the caller's).
    pub caller_id: Option<String>,
    /// `action`: where to fetch the TwiML that runs once the dialled leg is over, with
    /// `DialCallStatus` and friends (without one, the next verb runs).
    pub action: Option<String>,
    /// `method="GET"` for the action (Twilio's default is POST).
    pub action_get: bool,
    /// `timeLimit`: the longest the bridge may last (Twilio's default 4 h).
    pub time_limit: Duration,
    /// `answerOnBridge="true"`: a call not answered yet when the `<Dial>` runs stays ringing
    /// until a leg is bridged (answered then), instead of being answered before the TwiML.
    pub answer_on_bridge: bool,
}

/// One party a `<Dial>` calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialNoun {
    /// The number or SIP URI.
    pub target: DialTarget,
    /// `<Number url>` / `<Sip url>`: TwiML run on this party's leg once it answers and
    /// before the two are bridged (a whisper, or a bot briefing the person: a warm transfer).
    pub whisper: Option<LegTwiml>,
}

/// Most parties one `<Dial>` calls at once (Twilio's limit).
pub const MAX_DIAL_NOUNS: usize = 10;

/// Where the TwiML of a dialled leg is fetched (`url` and `method` of `<Number>`/`<Sip>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegTwiml {
    /// An absolute `http://` or `https://` URL.
    pub url: String,
    /// `method="GET"` (Twilio's default is POST).
    pub get: bool,
}

/// `<Dial timeout>`'s default, as Twilio's.
pub const DIAL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// `<Dial timeLimit>`'s default and upper bound, as Twilio's (4 hours).
pub const DIAL_TIME_LIMIT_MAX: Duration = Duration::from_secs(4 * 3600);

/// Largest TwiML document accepted (Twilio's own limit is 64 KB).
pub const MAX_TWIML_BYTES: usize = 64 * 1024;
/// Deepest element nesting accepted: `<Response><Connect><Stream><Parameter>` is 4; the bound
/// keeps hostile documents from costing more than a few allocations per level.
const MAX_DEPTH: usize = 8;
/// Most elements in one document (verbs, nouns and parameters together).
const MAX_ELEMENTS: usize = 1024;
/// Longest `<Pause length>` accepted, in seconds (a pause longer than this is surely a mistake).
pub const MAX_PAUSE_SECS: u64 = 600;
/// Longest `<Play digits>` string.
const MAX_DIGITS: usize = 256;

/// Why a TwiML document was refused. Each message names the verb or attribute at fault, since
/// it goes back to the bot's author in a Twilio-shaped 400 (code 12100).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TwimlError {
    /// Larger than [`MAX_TWIML_BYTES`].
    #[error("TwiML document is {0} bytes; the limit is {MAX_TWIML_BYTES}")]
    TooLarge(usize),
    /// Not well-formed XML, or XML ontime will not read (DOCTYPE, entities, nesting too deep).
    #[error("TwiML is not well-formed: {0}")]
    Malformed(String),
    /// The root element is not `<Response>`.
    #[error("TwiML root element must be <Response>, found <{0}>")]
    Root(String),
    /// A verb ontime does not run (`<Say>`, `<Gather>`, ...), or a noun in the wrong place.
    #[error("<{0}> is not supported{1}")]
    Unsupported(String, &'static str),
    /// An attribute ontime does not honour.
    #[error("attribute '{attribute}' of <{element}> is not supported")]
    Attribute {
        /// The element carrying it.
        element: String,
        /// The attribute's name.
        attribute: String,
    },
    /// A supported verb with a bad value or shape; the text says which.
    #[error("<{element}>: {reason}")]
    Invalid {
        /// The element at fault.
        element: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// One parsed element: the generic tree the verbs are read from. Parsing to a tree first keeps
/// the XML event handling (entities, nesting, bounds) apart from the TwiML rules.
#[derive(Debug, Default)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Element>,
    text: String,
}

impl Element {
    /// Refuse any attribute not in `allowed`, naming the first one found.
    fn only_attrs(&self, allowed: &[&str]) -> Result<(), TwimlError> {
        match self
            .attrs
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            Some((k, _)) => Err(TwimlError::Attribute {
                element: self.name.clone(),
                attribute: k.clone(),
            }),
            None => Ok(()),
        }
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn invalid(&self, reason: impl Into<String>) -> TwimlError {
        TwimlError::Invalid {
            element: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// Refuse child elements (verbs like `<Hangup>` take none).
    fn no_children(&self) -> Result<(), TwimlError> {
        match self.children.first() {
            Some(c) => Err(TwimlError::Unsupported(
                c.name.clone(),
                match self.name.as_str() {
                    "Response" => "",
                    _ => " inside this verb",
                },
            )),
            None => Ok(()),
        }
    }

    /// Refuse text content (whitespace aside).
    fn no_text(&self) -> Result<(), TwimlError> {
        if self.text.trim().is_empty() {
            Ok(())
        } else {
            Err(self.invalid("text content is not supported here"))
        }
    }

    /// The only child, or an error naming what is there instead.
    fn single_child(&self, what: &str) -> Result<&Element, TwimlError> {
        self.no_text()?;
        match self.children.as_slice() {
            [one] => Ok(one),
            [] => Err(self.invalid(format!("needs one {what}"))),
            _ => Err(self.invalid(format!("only one {what} is supported"))),
        }
    }
}

fn xml_err(e: impl std::fmt::Display) -> TwimlError {
    TwimlError::Malformed(e.to_string())
}

/// Read `xml` into an element tree, refusing DOCTYPEs, unknown entities, deep nesting and
/// more than [`MAX_ELEMENTS`] elements.
fn parse_tree(xml: &str) -> Result<Element, TwimlError> {
    use quick_xml::events::{BytesStart, Event};
    use quick_xml::XmlVersion;

    fn open(e: &BytesStart<'_>) -> Result<Element, TwimlError> {
        let name = e.name().as_ref().to_string();
        let mut attrs = Vec::new();
        // `attributes()` checks for duplicates, so `<Pause length="1" length="2">` is refused.
        for a in e.attributes() {
            let a = a.map_err(xml_err)?;
            let key = a.key.as_ref().to_string();
            // Only the five predefined entities and character references resolve; anything
            // else (which would need a DTD) is an error.
            let value = a
                .normalized_value(XmlVersion::Implicit1_0)
                .map_err(xml_err)?;
            attrs.push((key, value.into_owned()));
        }
        Ok(Element {
            name,
            attrs,
            ..Element::default()
        })
    }

    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut count = 0usize;
    loop {
        let event = reader.read_event().map_err(xml_err)?;
        // Text outside the root is allowed only as whitespace; a second root is an error.
        let closed = match event {
            Event::Start(e) | Event::Empty(e) if root.is_some() => {
                return Err(TwimlError::Malformed(format!(
                    "content after the root element: <{}>",
                    e.name().as_ref()
                )));
            }
            Event::Start(e) => {
                count += 1;
                if stack.len() >= MAX_DEPTH || count > MAX_ELEMENTS {
                    return Err(TwimlError::Malformed(
                        "too deeply nested or too long".into(),
                    ));
                }
                stack.push(open(&e)?);
                None
            }
            Event::Empty(e) => {
                count += 1;
                if stack.len() >= MAX_DEPTH || count > MAX_ELEMENTS {
                    return Err(TwimlError::Malformed(
                        "too deeply nested or too long".into(),
                    ));
                }
                Some(open(&e)?)
            }
            // The reader checks that end names match their start.
            Event::End(_) => match stack.pop() {
                Some(el) => Some(el),
                None => return Err(TwimlError::Malformed("unmatched end tag".into())),
            },
            Event::Text(t) => {
                let text = t.xml10_content();
                match stack.last_mut() {
                    Some(el) => el.text.push_str(&text),
                    None if text.trim().is_empty() => {}
                    None => return Err(TwimlError::Malformed("text outside <Response>".into())),
                }
                None
            }
            Event::CData(t) => {
                let text = t.into_inner().into_owned();
                match stack.last_mut() {
                    Some(el) => el.text.push_str(&text),
                    None => return Err(TwimlError::Malformed("CDATA outside <Response>".into())),
                }
                None
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref().map_err(xml_err)? {
                    Some(c) => c.to_string(),
                    None => match quick_xml::escape::resolve_predefined_entity(&r) {
                        Some(s) => s.to_string(),
                        None => {
                            return Err(TwimlError::Malformed(format!(
                                "entity &{}; is not allowed",
                                &*r
                            )))
                        }
                    },
                };
                match stack.last_mut() {
                    Some(el) => el.text.push_str(&resolved),
                    None => return Err(TwimlError::Malformed("text outside <Response>".into())),
                }
                None
            }
            // A DTD could define entities (billion laughs) or fetch external ones: never read.
            Event::DocType(_) => {
                return Err(TwimlError::Malformed("a DOCTYPE is not allowed".into()))
            }
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => None,
            Event::Eof => break,
        };
        if let Some(el) = closed {
            match stack.last_mut() {
                Some(parent) => parent.children.push(el),
                None => root = Some(el),
            }
        }
    }
    if let Some(open) = stack.last() {
        return Err(TwimlError::Malformed(format!(
            "<{}> is not closed",
            open.name
        )));
    }
    root.ok_or_else(|| TwimlError::Malformed("no root element".into()))
}

/// Parse a TwiML document into the verbs ontime runs, in order.
///
/// The root must be `<Response>`. Every verb, noun and attribute ontime does not honour is an
/// error naming it, rather than being skipped: a bot that asks for `<Say>` or a `<Dial
/// callerId>` would otherwise believe it happened.
pub fn parse(xml: &str) -> Result<Vec<Verb>, TwimlError> {
    if xml.len() > MAX_TWIML_BYTES {
        return Err(TwimlError::TooLarge(xml.len()));
    }
    let root = parse_tree(xml)?;
    if root.name != "Response" {
        return Err(TwimlError::Root(root.name));
    }
    root.only_attrs(&[])?;
    root.no_text()?;
    root.children.iter().map(verb).collect()
}

fn verb(el: &Element) -> Result<Verb, TwimlError> {
    match el.name.as_str() {
        "Hangup" => {
            el.only_attrs(&[])?;
            el.no_children()?;
            el.no_text()?;
            Ok(Verb::Hangup)
        }
        "Pause" => {
            el.only_attrs(&["length"])?;
            el.no_children()?;
            el.no_text()?;
            let secs = match el.attr("length") {
                None => 1,
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n <= MAX_PAUSE_SECS => n,
                    _ => {
                        return Err(el.invalid(format!(
                            "length must be a whole number of seconds from 0 to {MAX_PAUSE_SECS}, got {v:?}"
                        )))
                    }
                },
            };
            Ok(Verb::Pause(Duration::from_secs(secs)))
        }
        "Play" => {
            el.only_attrs(&["digits"])?;
            el.no_children()?;
            let Some(digits) = el.attr("digits") else {
                return Err(el.invalid(
                    "only the digits form (<Play digits=\"...\"/>) is supported, not audio URLs",
                ));
            };
            if !el.text.trim().is_empty() {
                return Err(el.invalid("audio URLs are not supported, only digits"));
            }
            if digits.is_empty()
                || digits.len() > MAX_DIGITS
                || !digits
                    .chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '*' | '#' | 'A'..='D' | 'w'))
            {
                return Err(el.invalid(format!(
                    "digits must be 1 to {MAX_DIGITS} of 0-9 * # A-D w, got {digits:?}"
                )));
            }
            Ok(Verb::PlayDigits(digits.to_string()))
        }
        "Dial" => dial(el),
        "Refer" => {
            el.only_attrs(&[])?;
            let target = el.single_child("<Sip>")?;
            match target.name.as_str() {
                "Sip" => Ok(Verb::Transfer(sip_target(target, &[])?)),
                other => Err(TwimlError::Unsupported(other.into(), " inside <Refer>")),
            }
        }
        "Connect" => {
            el.only_attrs(&[])?;
            let stream = el.single_child("<Stream>")?;
            if stream.name != "Stream" {
                return Err(TwimlError::Unsupported(
                    stream.name.clone(),
                    " inside <Connect>",
                ));
            }
            stream.only_attrs(&["url", "contentType"])?;
            stream.no_text()?;
            let url = stream.attr("url").unwrap_or_default().trim();
            if !(url.starts_with("ws://") || url.starts_with("wss://")) || url.len() < 7 {
                return Err(stream.invalid(format!("url must be ws:// or wss://, got {url:?}")));
            }
            let audio = match stream.attr("contentType") {
                None => StreamAudio::default(),
                Some(v) => StreamAudio::from_content_type(v).ok_or_else(|| {
                    stream.invalid(format!(
                        "contentType must be {} or {}, got {v:?}",
                        StreamAudio::Mulaw8k.content_type(),
                        StreamAudio::L16At16k.content_type()
                    ))
                })?,
            };
            let mut parameters = Vec::with_capacity(stream.children.len());
            for p in &stream.children {
                if p.name != "Parameter" {
                    return Err(TwimlError::Unsupported(p.name.clone(), " inside <Stream>"));
                }
                p.only_attrs(&["name", "value"])?;
                p.no_children()?;
                p.no_text()?;
                let (Some(name), Some(value)) = (p.attr("name"), p.attr("value")) else {
                    return Err(p.invalid("needs both name and value"));
                };
                parameters.push((name.to_string(), value.to_string()));
            }
            Ok(Verb::ConnectStream {
                url: url.to_string(),
                parameters,
                audio,
            })
        }
        "Reject" => {
            el.only_attrs(&["reason"])?;
            el.no_children()?;
            el.no_text()?;
            match el.attr("reason") {
                None | Some("rejected") => Ok(Verb::Reject { busy: false }),
                Some("busy") => Ok(Verb::Reject { busy: true }),
                Some(other) => {
                    Err(el.invalid(format!("reason must be busy or rejected, got {other:?}")))
                }
            }
        }
        other => Err(TwimlError::Unsupported(other.into(), "")),
    }
}

/// `<Dial>` and its attributes. The attributes ontime does not honour (`record`,
/// `hangupOnStar`, `ringTone`, ...) refuse the document, naming them.
fn dial(el: &Element) -> Result<Verb, TwimlError> {
    el.only_attrs(&[
        "timeout",
        "callerId",
        "action",
        "method",
        "timeLimit",
        "answerOnBridge",
    ])?;
    let answer_on_bridge = match el.attr("answerOnBridge").map(str::trim) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(el.invalid(format!(
                "answerOnBridge must be true or false, got {other:?}"
            )))
        }
    };
    let secs =
        |name: &str, default: Duration, range: std::ops::RangeInclusive<u64>| match el.attr(name) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if range.contains(&n) => Ok(Duration::from_secs(n)),
                _ => Err(el.invalid(format!(
                    "{name} must be a whole number of seconds from {} to {}, got {v:?}",
                    range.start(),
                    range.end()
                ))),
            },
        };
    let timeout = secs("timeout", DIAL_TIMEOUT_DEFAULT, 5..=600)?;
    let time_limit = secs(
        "timeLimit",
        DIAL_TIME_LIMIT_MAX,
        1..=DIAL_TIME_LIMIT_MAX.as_secs(),
    )?;
    let action_get = match el.attr("method") {
        None | Some("POST") => false,
        Some("GET") => true,
        Some(other) => return Err(el.invalid(format!("method must be GET or POST, got {other:?}"))),
    };
    let action = match el.attr("action").map(str::trim) {
        None => None,
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            Some(url.to_string())
        }
        Some(url) => {
            return Err(el.invalid(format!(
                "action must be an absolute http:// or https:// URL, got {url:?}"
            )))
        }
    };
    let caller_id = el.attr("callerId").map(|c| c.trim().to_string());
    let nouns = if el.children.is_empty() {
        let number = el.text.trim();
        if number.is_empty() {
            return Err(el.invalid("needs a <Sip>, a <Number> or a number"));
        }
        vec![DialNoun {
            target: DialTarget::Number(e164(el, number)?),
            whisper: None,
        }]
    } else {
        if !el.text.trim().is_empty() {
            return Err(el.invalid("has both a number and nouns"));
        }
        if el.children.len() > MAX_DIAL_NOUNS {
            return Err(el.invalid(format!(
                "calls at most {MAX_DIAL_NOUNS} parties at once, got {}",
                el.children.len()
            )));
        }
        let mut nouns = Vec::with_capacity(el.children.len());
        for noun in &el.children {
            let target = match noun.name.as_str() {
                "Sip" => sip_target(noun, LEG_ATTRS)?,
                "Number" => {
                    noun.only_attrs(LEG_ATTRS)?;
                    noun.no_children()?;
                    DialTarget::Number(e164(noun, noun.text.trim())?)
                }
                other => return Err(TwimlError::Unsupported(other.into(), " inside <Dial>")),
            };
            nouns.push(DialNoun {
                target,
                whisper: leg_twiml(noun)?,
            });
        }
        nouns
    };
    Ok(Verb::Dial(Dial {
        nouns,
        answer_on_bridge,
        timeout,
        caller_id,
        action,
        action_get,
        time_limit,
    }))
}

/// The attributes of `<Number>` and `<Sip>` in a `<Dial>` that ontime honours.
const LEG_ATTRS: &[&str] = &["url", "method"];

/// `url` and `method` of a `<Dial>`'s noun: the TwiML its leg runs before the bridge.
fn leg_twiml(el: &Element) -> Result<Option<LegTwiml>, TwimlError> {
    let get = match el.attr("method") {
        None | Some("POST") => false,
        Some("GET") => true,
        Some(other) => return Err(el.invalid(format!("method must be GET or POST, got {other:?}"))),
    };
    match el.attr("url").map(str::trim) {
        None if el.attr("method").is_some() => Err(el.invalid("method needs a url")),
        None => Ok(None),
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            Ok(Some(LegTwiml {
                url: url.to_string(),
                get,
            }))
        }
        Some(url) => Err(el.invalid(format!(
            "url must be an absolute http:// or https:// URL, got {url:?}"
        ))),
    }
}

/// `<Sip>sip:...</Sip>` (in `<Dial>` or `<Refer>`); attributes other than `attrs` (username,
/// password, statusCallback, ...; `url` and `method` in a `<Dial>`) are not honoured and refuse
/// the document. Headers in the URI
/// (`?X-Campaign=7`, [`crate::sip_headers`]) are checked here, so that a header that may not be
/// set refuses the document (400 naming it on the API) before anything runs, as any other
/// TwiML ontime does not honour; the URI keeps them, written back canonically escaped.
fn sip_target(el: &Element, attrs: &[&str]) -> Result<DialTarget, TwimlError> {
    el.only_attrs(attrs)?;
    el.no_children()?;
    let uri = el.text.trim();
    let lower = uri.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("sip:")
        .or_else(|| lower.strip_prefix("sips:"));
    match rest {
        Some(r) if !r.is_empty() && !uri.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            let target = SipTarget::parse(uri).map_err(|e| el.invalid(e.to_string()))?;
            Ok(DialTarget::Sip(target.with_headers()))
        }
        _ => Err(el.invalid(format!("a sip: or sips: URI is needed, got {uri:?}"))),
    }
}

/// An E.164 number: `+` then 1 to 15 digits. National forms (`415-123-4567`) are refused
/// rather than guessed at: the trunk would route them by its own dial plan.
fn e164(el: &Element, number: &str) -> Result<String, TwimlError> {
    match number.strip_prefix('+') {
        Some(d) if !d.is_empty() && d.len() <= 15 && d.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(number.to_string())
        }
        _ => Err(el.invalid(format!(
            "an E.164 number (+ and up to 15 digits) is needed, got {number:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(xml: &str) -> Vec<Verb> {
        match parse(xml) {
            Ok(v) => v,
            Err(e) => panic!("{xml}: {e}"),
        }
    }

    /// `<Dial>` with every attribute at its default.
    fn dial_to(target: DialTarget) -> Verb {
        Verb::Dial(Dial {
            nouns: vec![DialNoun {
                target,
                whisper: None,
            }],
            timeout: DIAL_TIMEOUT_DEFAULT,
            answer_on_bridge: false,
            caller_id: None,
            action: None,
            action_get: false,
            time_limit: DIAL_TIME_LIMIT_MAX,
        })
    }

    #[test]
    fn dial_attributes_are_read_and_bounded() {
        assert_eq!(
            ok(
                r#"<Response><Dial timeout="12" callerId="+15550001111" action="https://bot.example/after?x=1" method="GET" timeLimit="600"><Sip>sip:desk@pbx</Sip></Dial></Response>"#
            ),
            vec![Verb::Dial(Dial {
                nouns: vec![DialNoun {
                    target: DialTarget::Sip("sip:desk@pbx".into()),
                    whisper: None,
                }],
                timeout: Duration::from_secs(12),
                caller_id: Some("+15550001111".into()),
                action: Some("https://bot.example/after?x=1".into()),
                action_get: true,
                time_limit: Duration::from_secs(600),
                answer_on_bridge: false,
            })]
        );
        let eleven = format!("<Dial>{}</Dial>", "<Number>+1555</Number>".repeat(11));
        match ok(r#"<Response><Dial answerOnBridge="true">+15551234567</Dial></Response>"#).pop() {
            Some(Verb::Dial(d)) => assert!(d.answer_on_bridge),
            other => panic!("{other:?}"),
        }
        // Several parties at once, each with its own TwiML or none.
        match ok(r#"<Response><Dial><Number>+15551230001</Number><Sip url="https://bot.example/w">sip:desk@pbx</Sip></Dial></Response>"#).pop() {
            Some(Verb::Dial(d)) => assert_eq!(
                d.nouns,
                vec![
                    DialNoun {
                        target: DialTarget::Number("+15551230001".into()),
                        whisper: None
                    },
                    DialNoun {
                        target: DialTarget::Sip("sip:desk@pbx".into()),
                        whisper: Some(LegTwiml {
                            url: "https://bot.example/w".into(),
                            get: false
                        })
                    }
                ]
            ),
            other => panic!("{other:?}"),
        }
        // The leg's own TwiML, on either noun.
        let with_url = |xml: &str| match ok(xml).pop() {
            Some(Verb::Dial(d)) => d.nouns[0].whisper.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            with_url(
                r#"<Response><Dial><Number url="https://bot.example/brief">+15551234567</Number></Dial></Response>"#
            ),
            Some(LegTwiml {
                url: "https://bot.example/brief".into(),
                get: false
            })
        );
        assert_eq!(
            with_url(
                r#"<Response><Dial><Sip url="http://bot.example/w" method="GET">sip:desk@pbx</Sip></Dial></Response>"#
            ),
            Some(LegTwiml {
                url: "http://bot.example/w".into(),
                get: true
            })
        );
        for (xml, says) in [
            (
                r#"<Dial><Number url="/brief">+15551234567</Number></Dial>"#,
                "url must be",
            ),
            (
                r#"<Dial><Number method="GET">+15551234567</Number></Dial>"#,
                "method needs a url",
            ),
            (
                r#"<Dial><Sip url="https://x" method="PUT">sip:a@b</Sip></Dial>"#,
                "method must be",
            ),
            (
                r#"<Dial><Number sendDigits="1">+15551234567</Number></Dial>"#,
                "sendDigits",
            ),
            (
                r#"<Refer><Sip url="https://x">sip:a@b</Sip></Refer>"#,
                "url",
            ),
            (
                r#"<Dial timeout="4">+15551234567</Dial>"#,
                "timeout must be",
            ),
            (
                r#"<Dial timeout="soon">+15551234567</Dial>"#,
                "timeout must be",
            ),
            (
                r#"<Dial timeLimit="0">+15551234567</Dial>"#,
                "timeLimit must be",
            ),
            (
                r#"<Dial timeLimit="14401">+15551234567</Dial>"#,
                "timeLimit must be",
            ),
            (
                r#"<Dial method="PUT">+15551234567</Dial>"#,
                "method must be",
            ),
            (
                r#"<Dial answerOnBridge="yes">+15551234567</Dial>"#,
                "answerOnBridge must be",
            ),
            (
                r#"<Dial action="/relative">+15551234567</Dial>"#,
                "action must be",
            ),
            (eleven.as_str(), "at most 10 parties"),
            (
                r#"<Dial>+1555<Number>+1556</Number></Dial>"#,
                "both a number and nouns",
            ),
        ] {
            let e = err(&format!("<Response>{xml}</Response>"));
            assert!(e.contains(says), "{xml}: {e}");
        }
    }

    fn err(xml: &str) -> String {
        match parse(xml) {
            Ok(v) => panic!("{xml} parsed as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn every_supported_verb() {
        let verbs = ok(r#"<?xml version="1.0" encoding="UTF-8"?>
            <!-- a bot's answer -->
            <Response>
              <Play digits="w12#"/>
              <Pause length="2"/>
              <Pause/>
              <Dial><Sip>sip:alice@example.com</Sip></Dial>
              <Dial><Number>+15551234567</Number></Dial>
              <Dial> +15557654321 </Dial>
              <Refer><Sip>sips:desk@example.com;transport=tls</Sip></Refer>
              <Connect><Stream url="wss://bot.example/ws?a=1&amp;b=2">
                <Parameter name="lang" value="en &lt;US&gt;"/>
                <Parameter name="n" value="&#49;"/>
              </Stream></Connect>
              <Reject reason="busy"/>
              <Reject/>
              <Hangup/>
            </Response>"#);
        assert_eq!(
            verbs,
            vec![
                Verb::PlayDigits("w12#".into()),
                Verb::Pause(Duration::from_secs(2)),
                Verb::Pause(Duration::from_secs(1)),
                dial_to(DialTarget::Sip("sip:alice@example.com".into())),
                dial_to(DialTarget::Number("+15551234567".into())),
                dial_to(DialTarget::Number("+15557654321".into())),
                Verb::Transfer(DialTarget::Sip(
                    "sips:desk@example.com;transport=tls".into()
                )),
                Verb::ConnectStream {
                    url: "wss://bot.example/ws?a=1&b=2".into(),
                    parameters: vec![("lang".into(), "en <US>".into()), ("n".into(), "1".into())],
                    audio: StreamAudio::Mulaw8k,
                },
                Verb::Reject { busy: true },
                Verb::Reject { busy: false },
                Verb::Hangup,
            ]
        );
    }

    #[test]
    fn empty_response_is_no_verbs() {
        assert_eq!(ok("<Response/>"), vec![]);
        assert_eq!(ok("<Response></Response>"), vec![]);
    }

    #[test]
    fn entities_in_text_are_resolved() {
        assert_eq!(
            ok("<Response><Dial><Sip>sip:a@b;x=1&amp;y=2</Sip></Dial></Response>"),
            vec![dial_to(DialTarget::Sip("sip:a@b;x=1&y=2".into()))]
        );
    }

    #[test]
    fn sip_uri_headers_are_checked_and_kept_escaped() {
        assert_eq!(
            ok("<Response><Dial><Sip>sip:bob@pbx?X-Campaign=7&amp;X-Note=a%20b</Sip></Dial></Response>"),
            vec![dial_to(DialTarget::Sip(
                "sip:bob@pbx?X-Campaign=7&X-Note=a%20b".into()
            ))]
        );
        // Written back canonically: an escape a URI does not need is undone.
        assert_eq!(
            ok("<Response><Refer><Sip>sip:bob@pbx?X-%41=%31</Sip></Refer></Response>"),
            vec![Verb::Transfer(DialTarget::Sip("sip:bob@pbx?X-A=1".into()))]
        );
        assert_eq!(
            err("<Response><Refer><Sip>sip:bob@pbx?X-A=1&amp;Route=%3Csip:x%3E</Sip></Refer></Response>"),
            "<Sip>: only X- headers can be set in a SIP URI, not 'Route'"
        );
        assert_eq!(
            err("<Response><Dial><Sip>sip:bob@pbx?X-A=%0D%0AVia:1</Sip></Dial></Response>"),
            "<Sip>: the value of header 'X-A' contains a control character"
        );
    }

    #[test]
    fn a_stream_may_ask_for_16k_linear_audio() {
        let xml = |ct: &str| {
            format!(
                r#"<Response><Connect><Stream url="wss://a" contentType="{ct}"/></Connect></Response>"#
            )
        };
        for (ct, want) in [
            ("audio/l16;rate=16000", StreamAudio::L16At16k),
            ("Audio/L16; rate=16000", StreamAudio::L16At16k),
            ("audio/x-mulaw;rate=8000", StreamAudio::Mulaw8k),
        ] {
            match &parse(&xml(ct)).unwrap()[..] {
                [Verb::ConnectStream { audio, .. }] => assert_eq!(*audio, want, "{ct}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            err(&xml("audio/l16;rate=8000")),
            "<Stream>: contentType must be audio/x-mulaw;rate=8000 or audio/l16;rate=16000, got \"audio/l16;rate=8000\""
        );
    }

    #[test]
    fn unsupported_verbs_are_named() {
        for v in [
            "Say", "Gather", "Record", "Redirect", "Enqueue", "Leave", "Sms",
        ] {
            let m = err(&format!("<Response><{v}>hi</{v}></Response>"));
            assert!(m.contains(&format!("<{v}>")), "{m}");
        }
        let m = err("<Response><Connect><Room>r</Room></Connect></Response>");
        assert!(m.contains("<Room>"), "{m}");
        let m = err("<Response><Dial><Client>c</Client></Dial></Response>");
        assert!(m.contains("<Client>"), "{m}");
        let m = err("<Response><Hangup><Say>x</Say></Hangup></Response>");
        assert!(m.contains("<Say>"), "{m}");
    }

    #[test]
    fn unhonoured_attributes_are_named() {
        for (xml, attr) in [
            (
                r#"<Response><Dial record="record-from-answer">+15551234567</Dial></Response>"#,
                "record",
            ),
            (
                r#"<Response><Dial><Number statusCallback="https://a/cb">+15551234567</Number></Dial></Response>"#,
                "statusCallback",
            ),
            (
                r#"<Response><Play loop="2" digits="1"/></Response>"#,
                "loop",
            ),
            (r#"<Response><Hangup foo="1"/></Response>"#, "foo"),
            (
                r#"<Response><Dial><Sip username="u">sip:a@b</Sip></Dial></Response>"#,
                "username",
            ),
            (
                r#"<Response><Connect><Stream url="wss://a" track="both_tracks"/></Connect></Response>"#,
                "track",
            ),
            (r#"<Response voice="alice"/>"#, "voice"),
        ] {
            let m = err(xml);
            assert!(m.contains(&format!("'{attr}'")), "{xml}: {m}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        for xml in [
            r#"<Response><Pause length="601"/></Response>"#,
            r#"<Response><Pause length="-1"/></Response>"#,
            r#"<Response><Pause length="1.5"/></Response>"#,
            r#"<Response><Play>https://a/b.mp3</Play></Response>"#,
            r#"<Response><Play digits="12x"/></Response>"#,
            r#"<Response><Play digits=""/></Response>"#,
            r#"<Response><Dial></Dial></Response>"#,
            r#"<Response><Dial>415-123-4567</Dial></Response>"#,
            r#"<Response><Dial><Sip>tel:+1555</Sip></Dial></Response>"#,
            r#"<Response><Dial><Sip>sip:a@b</Sip><Sip>tel:+1</Sip></Dial></Response>"#,
            r#"<Response><Refer><Number>+15551234567</Number></Refer></Response>"#,
            r#"<Response><Connect><Stream url="https://a"/></Connect></Response>"#,
            r#"<Response><Connect><Stream/></Connect></Response>"#,
            r#"<Response><Connect><Stream url="wss://a"><Parameter name="x"/></Stream></Connect></Response>"#,
            r#"<Response><Reject reason="later"/></Response>"#,
            r#"<Response>hello</Response>"#,
        ] {
            let _ = err(xml);
        }
    }

    #[test]
    fn bad_documents_are_errors_not_panics() {
        for xml in [
            "",
            "not xml",
            "<Say>hi</Say>",
            "<Response>",
            "<Response></Hangup>",
            "<Response><Hangup/></Response><Response/>",
            "</Response>",
            "<Response><Pause length=1/></Response>",
            r#"<Response><Pause length="1" length="2"/></Response>"#,
            "<Response>&foo;</Response>",
            r#"<Response><Connect><Stream url="wss://a&bogus;"/></Connect></Response>"#,
            "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY a \"aaaa\"><!ENTITY b \"&a;&a;\">]><Response>&b;</Response>",
            "\u{0}<Response/>",
            "<Response><![CDATA[x]]></Response>",
        ] {
            let _ = err(xml);
        }
        let m = err("<!DOCTYPE Response><Response/>");
        assert!(m.contains("DOCTYPE"), "{m}");
        assert!(err("<Say/>").contains("<Say>"));
    }

    #[test]
    fn size_and_depth_are_bounded() {
        let big = format!(
            "<Response>{}</Response>",
            "<Hangup/>".repeat(MAX_TWIML_BYTES / 9)
        );
        assert!(matches!(parse(&big), Err(TwimlError::TooLarge(_))));
        let deep = format!(
            "<Response>{}{}</Response>",
            "<a>".repeat(50),
            "</a>".repeat(50)
        );
        assert!(err(&deep).contains("nested"));
        let many = format!(
            "<Response>{}</Response>",
            "<Pause/>".repeat(MAX_ELEMENTS + 1)
        );
        assert!(err(&many).contains("too long"));
    }
}
