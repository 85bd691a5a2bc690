//! The TwiML parser (ontime-twilio's twiml.rs), which reads what bots send (`Twiml=`, `Url=`
//! answers, the voice URL's answer), on arbitrary text: no panic (arithmetic overflow included),
//! the same answer twice, and every verb it accepts within the documented bounds: a document of
//! at most `MAX_TWIML_BYTES`, at most `MAX_ELEMENTS` verbs, pauses of whole seconds up to
//! `MAX_PAUSE_SECS`, 1 to 256 digits of `0-9 * # A-D w`, `sip:`/`sips:` URIs without spaces,
//! E.164 numbers, `ws://`/`wss://` stream URLs. What parses is written back as TwiML (values
//! escaped) that parses to the same verbs.
//!
//! Input: the bytes as one document (UTF-8 text, lossily when not valid).
#![no_main]

use std::fmt::Write as _;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;

use ontime_twilio::twiml::{
    parse, DialTarget, LegTwiml, TwimlError, Verb, DIAL_TIME_LIMIT_MAX, MAX_DIAL_NOUNS,
    MAX_PAUSE_SECS, MAX_TWIML_BYTES,
};

/// `MAX_ELEMENTS` and `MAX_DIGITS` of twiml.rs (private there): elements per document, digits
/// per `<Play>`.
const MAX_ELEMENTS: usize = 1024;
const MAX_DIGITS: usize = 256;

/// XML-escape `s` for an attribute value or text: the five predefined entities, and tab, line
/// feed and carriage return as character references (attribute-value normalization and
/// line-end handling would otherwise turn them into spaces and line feeds).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => {
                let _ = write!(out, "&#{};", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// A `<Dial>` or `<Refer>` target as its noun, with the leg's TwiML URL if any.
fn noun(target: &DialTarget, whisper: Option<&LegTwiml>) -> String {
    let attrs = whisper.map_or(String::new(), |w| {
        format!(
            " url=\"{}\" method=\"{}\"",
            esc(&w.url),
            if w.get { "GET" } else { "POST" }
        )
    });
    match target {
        DialTarget::Sip(uri) => format!("<Sip{attrs}>{}</Sip>", esc(uri)),
        DialTarget::Number(n) => format!("<Number{attrs}>{}</Number>", esc(n)),
    }
}

/// The verbs as TwiML, and how many elements that is.
fn write(verbs: &[Verb]) -> (String, usize) {
    let mut xml = String::from("<Response>");
    let mut elements = 1;
    for v in verbs {
        match v {
            Verb::Hangup => xml.push_str("<Hangup/>"),
            Verb::Pause(d) => {
                let _ = write!(xml, "<Pause length=\"{}\"/>", d.as_secs());
            }
            Verb::PlayDigits(d) => {
                let _ = write!(xml, "<Play digits=\"{}\"/>", esc(d));
            }
            Verb::Transfer(target) => {
                let _ = write!(xml, "<Refer>{}</Refer>", noun(target, None));
                elements += 1;
            }
            Verb::Dial(d) => {
                let _ = write!(
                    xml,
                    "<Dial timeout=\"{}\" timeLimit=\"{}\" method=\"{}\"",
                    d.timeout.as_secs(),
                    d.time_limit.as_secs(),
                    if d.action_get { "GET" } else { "POST" }
                );
                if d.answer_on_bridge {
                    xml.push_str(" answerOnBridge=\"true\"");
                }
                if let Some(c) = &d.caller_id {
                    let _ = write!(xml, " callerId=\"{}\"", esc(c));
                }
                if let Some(a) = &d.action {
                    let _ = write!(xml, " action=\"{}\"", esc(a));
                }
                xml.push('>');
                for n in &d.nouns {
                    xml.push_str(&noun(&n.target, n.whisper.as_ref()));
                    elements += 1;
                }
                xml.push_str("</Dial>");
            }
            Verb::ConnectStream {
                url,
                parameters,
                audio,
            } => {
                // The content type only when not the default: the canonical form of both.
                let content_type = match audio {
                    ontime_twilio::StreamAudio::Mulaw8k => String::new(),
                    other => format!(" contentType=\"{}\"", other.content_type()),
                };
                let _ = write!(xml, "<Connect><Stream url=\"{}\"{content_type}>", esc(url));
                for (name, value) in parameters {
                    let _ = write!(
                        xml,
                        "<Parameter name=\"{}\" value=\"{}\"/>",
                        esc(name),
                        esc(value)
                    );
                }
                xml.push_str("</Stream></Connect>");
                elements += 1 + parameters.len();
            }
            Verb::Reject { busy: true } => xml.push_str("<Reject reason=\"busy\"/>"),
            Verb::Reject { busy: false } => xml.push_str("<Reject/>"),
        }
        elements += 1;
    }
    xml.push_str("</Response>");
    (xml, elements)
}

fn check_verb(v: &Verb) {
    match v {
        Verb::Hangup | Verb::Reject { .. } => {}
        Verb::Pause(d) => {
            assert!(*d <= Duration::from_secs(MAX_PAUSE_SECS), "pause {d:?}");
            assert_eq!(d.subsec_nanos(), 0, "whole seconds: {d:?}");
        }
        Verb::PlayDigits(d) => {
            assert!((1..=MAX_DIGITS).contains(&d.len()), "digits {d:?}");
            assert!(
                d.chars()
                    .all(|c| c.is_ascii_digit() || matches!(c, '*' | '#' | 'A'..='D' | 'w')),
                "digits {d:?}"
            );
        }
        Verb::Transfer(target) => check_target(target),
        Verb::Dial(d) => {
            assert!(
                (5..=600).contains(&d.timeout.as_secs()) && d.timeout.subsec_nanos() == 0,
                "dial timeout {:?}",
                d.timeout
            );
            assert!(
                (1..=DIAL_TIME_LIMIT_MAX.as_secs()).contains(&d.time_limit.as_secs())
                    && d.time_limit.subsec_nanos() == 0,
                "dial timeLimit {:?}",
                d.time_limit
            );
            if let Some(a) = &d.action {
                assert!(
                    a.starts_with("http://") || a.starts_with("https://"),
                    "dial action {a:?}"
                );
            }
            assert!(
                (1..=MAX_DIAL_NOUNS).contains(&d.nouns.len()),
                "dial nouns {}",
                d.nouns.len()
            );
            for n in &d.nouns {
                check_target(&n.target);
                if let Some(w) = &n.whisper {
                    assert!(
                        w.url.starts_with("http://") || w.url.starts_with("https://"),
                        "dial leg url {:?}",
                        w.url
                    );
                }
            }
        }
        Verb::ConnectStream {
            url,
            parameters,
            audio,
        } => {
            assert!(
                ontime_twilio::StreamAudio::ALL.contains(audio),
                "stream audio {audio:?}"
            );
            assert!(
                (url.starts_with("ws://") || url.starts_with("wss://")) && url.len() >= 7,
                "stream URL {url:?}"
            );
            assert_eq!(url.trim(), url, "stream URL trimmed");
            assert!(
                parameters.len() < MAX_ELEMENTS,
                "{} parameters",
                parameters.len()
            );
        }
    }
}

fn check_target(target: &DialTarget) {
    match target {
        DialTarget::Sip(uri) => {
            let lower = uri.to_ascii_lowercase();
            let rest = lower
                .strip_prefix("sip:")
                .or_else(|| lower.strip_prefix("sips:"));
            assert!(rest.is_some_and(|r| !r.is_empty()), "SIP URI {uri:?}");
            assert!(
                !uri.chars().any(|c| c.is_whitespace() || c.is_control()),
                "SIP URI {uri:?}"
            );
        }
        DialTarget::Number(n) => {
            let digits = n.strip_prefix('+').unwrap_or_else(|| panic!("E.164 {n:?}"));
            assert!(
                (1..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()),
                "E.164 {n:?}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let xml = String::from_utf8_lossy(data);
    let parsed = parse(&xml);
    assert_eq!(parse(&xml), parsed, "parsing is deterministic");
    match &parsed {
        Ok(verbs) => {
            assert!(xml.len() <= MAX_TWIML_BYTES, "{} bytes accepted", xml.len());
            assert!(verbs.len() < MAX_ELEMENTS, "{} verbs", verbs.len());
            verbs.iter().for_each(check_verb);
            let (again, elements) = write(verbs);
            if again.len() <= MAX_TWIML_BYTES && elements <= MAX_ELEMENTS {
                assert_eq!(
                    parse(&again).as_ref(),
                    Ok(verbs),
                    "written back as {again:?}"
                );
            }
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert_eq!(
                matches!(e, TwimlError::TooLarge(_)),
                xml.len() > MAX_TWIML_BYTES,
                "TooLarge iff over the limit"
            );
        }
    }
});
