//! The WebSocket agent's parser of bot messages (Twilio Media Streams JSON) and the encoder of the
//! gateway's own messages, on arbitrary text: no panic (arithmetic overflow included), an ignored
//! message carries one of the documented metric labels, what parses survives a round trip through
//! the encoder, and the bot's marks come back exactly once.
//!
//! Input: the bytes as one message (UTF-8 text, lossily when not valid); when it has several lines,
//! each line is also one message of a session (marks queued, played by the media after them, and
//! returned by a clear).
#![no_main]

use std::collections::VecDeque;

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

// The file itself, not the gateway crate: building the whole gateway with coverage is too heavy.
#[allow(dead_code)]
#[path = "../../src/agent/ws/protocol.rs"]
mod protocol;

use ontime_rtp::{FRAME_BYTES, FRAME_MS};
use protocol::{
    parse_bot_message, BotMessage, BotMessageError, PendingMarks, StreamIds, TwilioEncoder,
    EVENT_TURN_ENDED, MESSAGE_TRANSCRIPT, TRANSCRIPT_TAIL_CHARS,
};

/// `INVALID_REASONS` of gateway/src/ops/ws_metrics.rs (not compiled here): the label values of
/// `ontime_ws_messages_invalid_total`. The parser gives the first two; the connection task counts
/// `oversize` and `binary` itself.
const INVALID_REASONS: &[&str] = &["malformed", "unknown_event", "oversize", "binary"];

/// Media frames re-encoded per message, at most (a 4 KiB input decodes to about 19).
const MAX_FRAMES: usize = 64;

fn encoder(custom: Vec<(String, String)>) -> TwilioEncoder {
    TwilioEncoder::new(
        StreamIds {
            stream_sid: "MZ00000000000000000000000000000001".into(),
            call_sid: "CA00000000000000000000000000000001".into(),
            account_sid: "AC00000000000000000000000000000000".into(),
        },
        custom,
    )
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("the encoder writes valid JSON")
}

/// Parse one message and check what can be checked about it alone.
fn check_one(text: &str) -> Result<BotMessage, BotMessageError> {
    let parsed = parse_bot_message(text);
    assert_eq!(parse_bot_message(text), parsed, "parsing is deterministic");
    match &parsed {
        Err(e) => {
            let label = e.label();
            assert!(
                INVALID_REASONS.contains(&label),
                "undocumented label {label}"
            );
            assert!(matches!(label, "malformed" | "unknown_event"), "{label}");
            assert_eq!(
                label == "unknown_event",
                matches!(e, BotMessageError::UnknownEvent(_))
            );
            match e {
                BotMessageError::UnknownEvent(event) => {
                    assert!(event.chars().count() <= 64, "event name not cut: {event:?}");
                    assert!(!matches!(
                        event.as_str(),
                        "media" | "mark" | "clear" | MESSAGE_TRANSCRIPT
                    ));
                }
                BotMessageError::MissingField { event, field } => assert!(
                    matches!(
                        (*event, *field),
                        ("media", "media.payload")
                            | ("mark", "mark.name")
                            | (MESSAGE_TRANSCRIPT, "transcript.text")
                    ),
                    "{event} {field}"
                ),
                _ => {}
            }
            assert!(!e.to_string().is_empty());
        }
        Ok(BotMessage::Media(bytes)) => {
            assert!(
                bytes.len() <= text.len(),
                "base64 decodes to less than its text"
            );
            // As 16-bit PCM, split anywhere: every byte is read once, in order.
            let mut l16 = protocol::L16Reader::default();
            let cut = bytes.len() / 3 * 2 + 1;
            let (a, b) = bytes.split_at(cut.min(bytes.len()));
            let samples = [l16.samples(a), l16.samples(b)].concat();
            assert_eq!(samples.len(), bytes.len() / 2);
            for (s, pair) in samples.iter().zip(bytes.chunks_exact(2)) {
                assert_eq!(s.to_le_bytes(), [pair[0], pair[1]]);
            }
            // The canonical form parses back to the same bytes.
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            let canonical = serde_json::json!({"event": "media", "media": {"payload": b64}});
            assert_eq!(
                parse_bot_message(&canonical.to_string()).as_ref(),
                parsed.as_ref()
            );
            // The gateway's own media messages, 20 ms frames of these bytes (the last padded with
            // µ-law silence), are media a bot could send back: the same frame, Twilio's numbering.
            let mut enc = encoder(Vec::new());
            for (i, chunk) in bytes.chunks(FRAME_BYTES).take(MAX_FRAMES).enumerate() {
                let mut frame = [0xFF; FRAME_BYTES];
                frame[..chunk.len()].copy_from_slice(chunk);
                let out = enc.media(&frame);
                assert_eq!(
                    parse_bot_message(&out),
                    Ok(BotMessage::Media(frame.to_vec()))
                );
                let v = json(&out);
                let n = i as u64 + 1;
                assert_eq!(v["sequenceNumber"], n.to_string());
                assert_eq!(v["media"]["chunk"], n.to_string());
                assert_eq!(
                    v["media"]["timestamp"],
                    (i as u64 * u64::from(FRAME_MS)).to_string()
                );
            }
        }
        Ok(BotMessage::Mark(name)) => {
            // The gateway's `mark` echo of that name is a mark of the same name.
            let mut enc = encoder(Vec::new());
            assert_eq!(parse_bot_message(&enc.mark(name)).as_ref(), parsed.as_ref());
        }
        Ok(BotMessage::Clear) => {
            assert_eq!(
                parse_bot_message(r#"{"event":"clear"}"#),
                Ok(BotMessage::Clear)
            );
        }
        Ok(BotMessage::Transcript(tail)) => {
            // Only the end is kept, and the canonical form of it parses back to itself.
            assert!(tail.chars().count() <= TRANSCRIPT_TAIL_CHARS);
            let canonical =
                serde_json::json!({"event": MESSAGE_TRANSCRIPT, "transcript": {"text": tail}});
            assert_eq!(
                parse_bot_message(&canonical.to_string()).as_ref(),
                parsed.as_ref()
            );
        }
    }
    parsed
}

/// Any text survives the encoder's JSON: as a mark name, a custom parameter, an event name.
fn check_encoder(text: &str) {
    let mut enc = encoder(vec![(text.to_string(), text.to_string())]);
    let connected = json(&enc.connected());
    assert_eq!(connected["event"], "connected");
    let start = json(&enc.start());
    assert_eq!(start["sequenceNumber"], "1");
    assert_eq!(start["start"]["customParameters"][text], text);
    assert_eq!(
        parse_bot_message(&enc.mark(text)),
        Ok(BotMessage::Mark(text.to_string()))
    );
    let digit = text.chars().next().unwrap_or('1');
    let dtmf = json(&enc.dtmf(digit));
    assert_eq!(dtmf["dtmf"]["digit"], digit.to_string());
    assert_eq!(dtmf["sequenceNumber"], "3");
    let p = text.len() as f32 / 4096.0;
    let ev = json(&enc.ontime(EVENT_TURN_ENDED, Some(Some(p))));
    assert_eq!(ev["event"], EVENT_TURN_ENDED);
    assert!(ev["turn"]["probability"].is_number());
    let ev = json(&enc.ontime(text, None));
    assert_eq!(ev["event"], text);
    assert!(ev.get("turn").is_none());
    let stop = enc.stop();
    assert_eq!(json(&stop)["sequenceNumber"], "6");
    // The gateway's other messages are not bot messages.
    assert_eq!(
        parse_bot_message(&stop),
        Err(BotMessageError::UnknownEvent("stop".into()))
    );
}

/// One message per line: the bot's marks are returned exactly once and in order, whether played
/// (the media after a mark plays it) or cleared.
fn check_session(text: &str) {
    let mut pending = PendingMarks::default();
    let mut model: VecDeque<String> = VecDeque::new();
    for line in text.split('\n') {
        match check_one(line) {
            Ok(BotMessage::Mark(name)) => {
                pending.queued(name.clone());
                model.push_back(name);
            }
            Ok(BotMessage::Media(_)) => {
                if let Some(name) = model.pop_front() {
                    assert!(pending.played(&name), "pending mark {name:?} not played");
                    if !model.contains(&name) {
                        assert!(!pending.played(&name), "mark {name:?} played twice");
                    }
                }
            }
            Ok(BotMessage::Clear) => {
                assert_eq!(pending.take_all(), Vec::from(std::mem::take(&mut model)));
            }
            // Transcripts touch no mark.
            Ok(BotMessage::Transcript(_)) | Err(_) => {}
        }
    }
    assert_eq!(pending.take_all(), Vec::from(model));
    assert!(pending.take_all().is_empty());
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = check_one(&text);
    check_encoder(&text);
    if text.contains('\n') {
        check_session(&text);
    }
});
