// Also compiled on its own by the fuzz target gateway/fuzz (`bot_message`, through `#[path]`): keep
// this file to std, serde, serde_json, base64, rand and ontime_rtp, with no `crate::` or `super::`.

use std::collections::VecDeque;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};

use ontime_rtp::FRAME_MS;
use ontime_twilio::StreamAudio;

/// ontime event: local VAD heard the caller start speaking.
pub const EVENT_SPEECH_STARTED: &str = "ontime.speech_started";
/// ontime event: local VAD heard the caller stop.
pub const EVENT_SPEECH_STOPPED: &str = "ontime.speech_stopped";
/// ontime event: the caller's turn ended (`turn.probability`, null when the timeout decided).
pub const EVENT_TURN_ENDED: &str = "ontime.turn_ended";
/// ontime event: the caller went on speaking after `ontime.turn_ended` before the reply was
/// heard (`turnResumed.pauseMs`, `turnResumed.droppedMs`): the end was a pause; the reply queued
/// so far was dropped unheard, and media the bot still sends before its `clear` or the next
/// `ontime.turn_ended` is dropped. The bot should cancel the reply it is preparing.
pub const EVENT_TURN_RESUMED: &str = "ontime.turn_resumed";
/// ontime bot message: the bot's speech recogniser's words for the caller's turn so far
/// (`transcript.text`, interim or final), for the reply hold-back.
pub const MESSAGE_TRANSCRIPT: &str = "ontime.transcript";
/// Of a transcript, only this many characters at its end are kept: the hold-back judges the
/// last words.
pub const TRANSCRIPT_TAIL_CHARS: usize = 200;
/// ontime event: the caller's speech cleared the bot's queued audio.
pub const EVENT_BARGE_IN: &str = "ontime.barge_in";
/// ontime event: a transfer of the call has an outcome (`transfer.target`, `transfer.result`:
/// `completed`, `rejected` or `failed`, `transfer.sipStatus`). Always sent: a bot that asked
/// for a transfer needs to know it did not happen.
pub const EVENT_TRANSFER: &str = "ontime.transfer";
/// Caller speech over the reply too short to barge in: the reply plays on.
pub const EVENT_BACKCHANNEL: &str = "ontime.backchannel";
/// ontime event: answering-machine detection's verdict (`amd.answeredBy`, Twilio's values;
/// `amd.machineDetectionDurationMs`). Always sent: a bot on a call placed with
/// `MachineDetection` asked for it.
pub const EVENT_AMD: &str = "ontime.amd";

/// The identifiers of one stream, in Twilio's shapes (`MZ…`, `CA…`, `AC…` + 32 hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamIds {
    /// `streamSid`.
    pub stream_sid: String,
    /// `callSid`.
    pub call_sid: String,
    /// `accountSid`.
    pub account_sid: String,
}

impl StreamIds {
    /// A fresh stream of this call: the call and account SIDs are the ones the call-control
    /// API knows, so a bot can act on its own call.
    pub fn for_call(call_sid: &str, account_sid: &str) -> StreamIds {
        StreamIds {
            stream_sid: format!("MZ{:032x}", rand::random::<u128>()),
            call_sid: call_sid.to_string(),
            account_sid: account_sid.to_string(),
        }
    }
}

/// Builds the messages to the bot, numbering them as Twilio does (`sequenceNumber` from 1
/// on every message after `connected`; `chunk` from 1 and `timestamp` in ms on media).
#[derive(Debug, Clone)]
pub struct TwilioEncoder {
    ids: StreamIds,
    custom: Vec<(String, String)>,
    sequence: u64,
    chunk: u64,
    audio: StreamAudio,
}

impl TwilioEncoder {
    /// An encoder for one stream.
    pub fn new(ids: StreamIds, custom_parameters: Vec<(String, String)>) -> TwilioEncoder {
        TwilioEncoder {
            ids,
            custom: custom_parameters,
            sequence: 0,
            chunk: 0,
            audio: StreamAudio::Mulaw8k,
        }
    }

    /// The same, streaming `audio` (named in `start`'s `mediaFormat`).
    pub fn with_audio(mut self, audio: StreamAudio) -> TwilioEncoder {
        self.audio = audio;
        self
    }

    /// The stream's identifiers.
    pub fn ids(&self) -> &StreamIds {
        &self.ids
    }

    fn next_sequence(&mut self) -> String {
        self.sequence += 1;
        self.sequence.to_string()
    }

    /// `connected`.
    pub fn connected(&self) -> String {
        json!({"event": "connected", "protocol": "Call", "version": "1.0.0"}).to_string()
    }

    /// `start`, with the media format and `customParameters`.
    pub fn start(&mut self) -> String {
        let custom: serde_json::Map<String, Value> = self
            .custom
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({
            "event": "start",
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "start": {
                "streamSid": self.ids.stream_sid,
                "accountSid": self.ids.account_sid,
                "callSid": self.ids.call_sid,
                "tracks": ["inbound"],
                "customParameters": custom,
                "mediaFormat": {
                    "encoding": self.audio.encoding(),
                    "sampleRate": self.audio.sample_rate_hz(),
                    "channels": 1
                }
            }
        })
        .to_string()
    }

    /// `media`: one 20 ms frame in the stream's format (160 bytes of µ-law, or 640 of 16-bit
    /// PCM at 16 kHz), `timestamp` in ms of media time since the start.
    pub fn media(&mut self, ulaw: &[u8]) -> String {
        let timestamp = self.chunk * u64::from(FRAME_MS);
        self.chunk += 1;
        json!({
            "event": "media",
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "media": {
                "track": "inbound",
                "chunk": self.chunk.to_string(),
                "timestamp": timestamp.to_string(),
                "payload": base64::engine::general_purpose::STANDARD.encode(ulaw)
            }
        })
        .to_string()
    }

    /// `dtmf`.
    pub fn dtmf(&mut self, digit: char) -> String {
        json!({
            "event": "dtmf",
            "streamSid": self.ids.stream_sid,
            "sequenceNumber": self.next_sequence(),
            "dtmf": {"track": "inbound_track", "digit": digit.to_string()}
        })
        .to_string()
    }

    /// `mark`: the bot's mark has been played (or cleared).
    pub fn mark(&mut self, name: &str) -> String {
        json!({
            "event": "mark",
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "mark": {"name": name}
        })
        .to_string()
    }

    /// `stop`.
    pub fn stop(&mut self) -> String {
        json!({
            "event": "stop",
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "stop": {"accountSid": self.ids.account_sid, "callSid": self.ids.call_sid}
        })
        .to_string()
    }

    /// One of ontime's own events; `turn_probability` is `Some` for `ontime.turn_ended`.
    pub fn ontime(&mut self, event: &str, turn_probability: Option<Option<f32>>) -> String {
        let mut v = json!({
            "event": event,
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
        });
        if let Some(p) = turn_probability {
            v["turn"] = json!({"probability": p});
        }
        v.to_string()
    }

    /// `ontime.barge_in`: the caller's speech cleared the reply after `heard_ms` of it had
    /// played out to them, the last of its marks played being `last_mark`.
    pub fn barge_in(&mut self, heard_ms: u64, last_mark: Option<&str>) -> String {
        json!({
            "event": EVENT_BARGE_IN,
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "bargeIn": {"heardMs": heard_ms, "lastMark": last_mark},
        })
        .to_string()
    }

    /// `ontime.turn_resumed`: the caller resumed `pause_ms` after their speech ended, and
    /// `dropped_ms` of the reply were dropped unheard.
    pub fn turn_resumed(&mut self, pause_ms: u64, dropped_ms: u64) -> String {
        json!({
            "event": EVENT_TURN_RESUMED,
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "turnResumed": {"pauseMs": pause_ms, "droppedMs": dropped_ms},
        })
        .to_string()
    }

    /// `ontime.backchannel`: the caller spoke `speech_ms` over the reply, too briefly to cut it.
    pub fn backchannel(&mut self, speech_ms: u64) -> String {
        json!({
            "event": EVENT_BACKCHANNEL,
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "backchannel": {"speechMs": speech_ms},
        })
        .to_string()
    }

    /// `ontime.amd`: who answered, and how long detection took.
    pub fn amd(&mut self, answered_by: &str, duration_ms: u64) -> String {
        json!({
            "event": EVENT_AMD,
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "amd": {"answeredBy": answered_by, "machineDetectionDurationMs": duration_ms},
        })
        .to_string()
    }

    /// `ontime.transfer`: the outcome of a transfer.
    pub fn transfer(&mut self, target: &str, result: &str, sip_status: Option<u16>) -> String {
        json!({
            "event": EVENT_TRANSFER,
            "sequenceNumber": self.next_sequence(),
            "streamSid": self.ids.stream_sid,
            "transfer": {"target": target, "result": result, "sipStatus": sip_status},
        })
        .to_string()
    }
}

/// A message from the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BotMessage {
    /// Audio to play: µ-law bytes, any length.
    Media(Vec<u8>),
    /// Report back when everything sent before it has been played.
    Mark(String),
    /// Drop everything queued.
    Clear,
    /// `ontime.transcript`: the end of the caller's words so far, as the bot's recogniser
    /// wrote them (at most [`TRANSCRIPT_TAIL_CHARS`]).
    Transcript(String),
}

/// Why a bot message was ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BotMessageError {
    /// Not a JSON object with a string `event`.
    NotJson(String),
    /// A known event without the field it needs.
    MissingField {
        /// The event.
        event: &'static str,
        /// The field, as a JSON path.
        field: &'static str,
    },
    /// The media payload is not base64.
    BadBase64(String),
    /// An event ontime does not know.
    UnknownEvent(String),
}

// By hand rather than with thiserror, which the fuzz crate does not have.
impl std::fmt::Display for BotMessageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BotMessageError::NotJson(e) => {
                write!(f, "not a JSON object with a string `event`: {e}")
            }
            BotMessageError::MissingField { event, field } => {
                write!(f, "`{event}` message without a string `{field}`")
            }
            BotMessageError::BadBase64(e) => write!(f, "`media.payload` is not base64: {e}"),
            BotMessageError::UnknownEvent(e) => write!(f, "unknown event `{e}`"),
        }
    }
}

impl std::error::Error for BotMessageError {}

impl BotMessageError {
    /// The label of `ontime_ws_messages_invalid_total`.
    pub fn label(&self) -> &'static str {
        match self {
            BotMessageError::UnknownEvent(_) => "unknown_event",
            _ => "malformed",
        }
    }
}

#[derive(Deserialize)]
struct Envelope {
    event: String,
    #[serde(default)]
    media: Option<Value>,
    #[serde(default)]
    mark: Option<Value>,
    #[serde(default)]
    transcript: Option<Value>,
}

/// Parse one text message from the bot. `streamSid` is not checked: there is one stream per
/// connection.
/// Reads a bot's 16-bit little-endian PCM media into samples: a byte left over from a message of
/// odd length starts the next one's first sample (WebSocket messages need not end on a sample).
#[derive(Debug, Default, Clone)]
pub struct L16Reader {
    carry: Option<u8>,
}

impl L16Reader {
    /// The whole samples in `bytes` after any carried byte; an odd last byte is kept.
    pub fn samples(&mut self, bytes: &[u8]) -> Vec<i16> {
        let mut out = Vec::with_capacity(bytes.len() / 2 + 1);
        let mut rest = bytes;
        if let (Some(low), Some((&high, tail))) = (self.carry, rest.split_first()) {
            out.push(i16::from_le_bytes([low, high]));
            self.carry = None;
            rest = tail;
        }
        let mut pairs = rest.chunks_exact(2);
        out.extend(pairs.by_ref().map(|p| i16::from_le_bytes([p[0], p[1]])));
        if let [odd] = pairs.remainder() {
            self.carry = Some(*odd);
        }
        out
    }
}

pub fn parse_bot_message(text: &str) -> Result<BotMessage, BotMessageError> {
    let env: Envelope =
        serde_json::from_str(text).map_err(|e| BotMessageError::NotJson(e.to_string()))?;
    match env.event.as_str() {
        "media" => {
            let payload = env
                .media
                .as_ref()
                .and_then(|m| m.get("payload"))
                .and_then(Value::as_str)
                .ok_or(BotMessageError::MissingField {
                    event: "media",
                    field: "media.payload",
                })?;
            base64::engine::general_purpose::STANDARD
                .decode(payload)
                .map(BotMessage::Media)
                .map_err(|e| BotMessageError::BadBase64(e.to_string()))
        }
        "mark" => env
            .mark
            .as_ref()
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .map(|n| BotMessage::Mark(n.to_string()))
            .ok_or(BotMessageError::MissingField {
                event: "mark",
                field: "mark.name",
            }),
        "clear" => Ok(BotMessage::Clear),
        MESSAGE_TRANSCRIPT => env
            .transcript
            .as_ref()
            .and_then(|t| t.get("text"))
            .and_then(Value::as_str)
            .map(|text| {
                let skip = text.chars().count().saturating_sub(TRANSCRIPT_TAIL_CHARS);
                BotMessage::Transcript(text.chars().skip(skip).collect())
            })
            .ok_or(BotMessageError::MissingField {
                event: MESSAGE_TRANSCRIPT,
                field: "transcript.text",
            }),
        other => Err(BotMessageError::UnknownEvent(
            other.chars().take(64).collect(),
        )),
    }
}

/// The bot's marks handed to the call but not yet reported back, in order.
#[derive(Debug, Default, Clone)]
pub struct PendingMarks {
    names: VecDeque<String>,
}

impl PendingMarks {
    /// The bot sent a mark (queued behind its audio).
    pub fn queued(&mut self, name: String) {
        self.names.push_back(name);
    }

    /// The call played a mark: true when it was pending (report it), false when a clear or
    /// barge-in already returned it.
    pub fn played(&mut self, name: &str) -> bool {
        match self.names.iter().position(|n| n == name) {
            Some(i) => {
                self.names.remove(i);
                true
            }
            None => false,
        }
    }

    /// Everything pending, oldest first (after a clear or barge-in), leaving none.
    pub fn take_all(&mut self) -> Vec<String> {
        self.names.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_rtp::FRAME_BYTES;

    #[test]
    fn l16_media_reads_across_odd_message_boundaries() {
        let pcm: Vec<i16> = vec![1, -2, 300, -32768, 32767, 0x1234];
        let bytes: Vec<u8> = pcm.iter().flat_map(|s| s.to_le_bytes()).collect();
        let mut r = L16Reader::default();
        let mut got = r.samples(&bytes[..3]);
        got.extend(r.samples(&bytes[3..8]));
        got.extend(r.samples(&bytes[8..]));
        assert_eq!(got, pcm);
        let mut e = TwilioEncoder::new(StreamIds::for_call("CA1", "AC1"), Vec::new())
            .with_audio(StreamAudio::L16At16k);
        let start: Value = serde_json::from_str(&e.start()).unwrap();
        assert_eq!(
            start["start"]["mediaFormat"],
            json!({"encoding":"audio/l16","sampleRate":16000,"channels":1})
        );
    }
    use proptest::prelude::*;

    fn ids() -> StreamIds {
        StreamIds {
            stream_sid: "MZ1".into(),
            call_sid: "CA1".into(),
            account_sid: "AC1".into(),
        }
    }

    #[test]
    fn messages_have_twilio_shapes() {
        let mut e = TwilioEncoder::new(ids(), vec![("From".into(), "sip:a@b".into())]);
        let c: Value = serde_json::from_str(&e.connected()).unwrap();
        assert_eq!(
            c,
            json!({"event":"connected","protocol":"Call","version":"1.0.0"})
        );
        let s: Value = serde_json::from_str(&e.start()).unwrap();
        assert_eq!(s["sequenceNumber"], "1");
        assert_eq!(s["streamSid"], "MZ1");
        assert_eq!(s["start"]["callSid"], "CA1");
        assert_eq!(s["start"]["tracks"], json!(["inbound"]));
        assert_eq!(s["start"]["customParameters"]["From"], "sip:a@b");
        assert_eq!(
            s["start"]["mediaFormat"],
            json!({"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1})
        );
        let m: Value = serde_json::from_str(&e.media(&[0xFF; FRAME_BYTES])).unwrap();
        assert_eq!(m["sequenceNumber"], "2");
        assert_eq!(m["media"]["chunk"], "1");
        assert_eq!(m["media"]["timestamp"], "0");
        assert_eq!(m["media"]["track"], "inbound");
        let payload = base64::engine::general_purpose::STANDARD
            .decode(m["media"]["payload"].as_str().unwrap())
            .unwrap();
        assert_eq!(payload, vec![0xFF; FRAME_BYTES]);
        let m2: Value = serde_json::from_str(&e.media(&[0; FRAME_BYTES])).unwrap();
        assert_eq!(m2["media"]["chunk"], "2");
        assert_eq!(m2["media"]["timestamp"], "20");
        let d: Value = serde_json::from_str(&e.dtmf('5')).unwrap();
        assert_eq!(d["dtmf"], json!({"track":"inbound_track","digit":"5"}));
        let k: Value = serde_json::from_str(&e.mark("end")).unwrap();
        assert_eq!(k["mark"]["name"], "end");
        let t: Value = serde_json::from_str(&e.ontime(EVENT_TURN_ENDED, Some(Some(0.5)))).unwrap();
        assert_eq!(t["turn"]["probability"], 0.5);
        let t: Value = serde_json::from_str(&e.ontime(EVENT_TURN_ENDED, Some(None))).unwrap();
        assert_eq!(t["turn"]["probability"], Value::Null);
        // `ontime.barge_in` keeps its fields and adds what the caller heard.
        let b: Value = serde_json::from_str(&e.barge_in(1180, Some("sentence-2"))).unwrap();
        assert_eq!(
            b,
            json!({"event":"ontime.barge_in","sequenceNumber":"8","streamSid":"MZ1",
                "bargeIn":{"heardMs":1180,"lastMark":"sentence-2"}})
        );
        let b: Value = serde_json::from_str(&e.barge_in(0, None)).unwrap();
        assert_eq!(b["bargeIn"]["lastMark"], Value::Null);
        let b: Value = serde_json::from_str(&e.backchannel(300)).unwrap();
        assert_eq!(
            b,
            json!({"event":"ontime.backchannel","sequenceNumber":"10","streamSid":"MZ1",
                "backchannel":{"speechMs":300}})
        );
        let st: Value = serde_json::from_str(&e.stop()).unwrap();
        assert_eq!(st["stop"], json!({"accountSid":"AC1","callSid":"CA1"}));
        assert_eq!(st["sequenceNumber"], "11");
        let a: Value = serde_json::from_str(&e.amd("machine_end_beep", 4660)).unwrap();
        assert_eq!(
            a,
            json!({"event":"ontime.amd","sequenceNumber":"12","streamSid":"MZ1",
                "amd":{"answeredBy":"machine_end_beep","machineDetectionDurationMs":4660}})
        );
        let r: Value = serde_json::from_str(&e.turn_resumed(820, 5232)).unwrap();
        assert_eq!(
            r,
            json!({"event":"ontime.turn_resumed","sequenceNumber":"13","streamSid":"MZ1",
                "turnResumed":{"pauseMs":820,"droppedMs":5232}})
        );
    }

    #[test]
    fn bot_messages_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_bot_message(r#"{"event":"media","streamSid":"MZ1","media":{"payload":"/38="}}"#),
            Ok(BotMessage::Media(vec![0xFF, 0x7F]))
        );
        assert_eq!(
            parse_bot_message(r#"{"event":"mark","streamSid":"x","mark":{"name":"m1"}}"#),
            Ok(BotMessage::Mark("m1".into()))
        );
        assert_eq!(
            parse_bot_message(r#"{"event":"clear","streamSid":"x"}"#),
            Ok(BotMessage::Clear)
        );
        assert_eq!(
            parse_bot_message(
                r#"{"event":"ontime.transcript","streamSid":"x","transcript":{"text":"move it to","final":false}}"#
            ),
            Ok(BotMessage::Transcript("move it to".into()))
        );
        let long = format!(
            r#"{{"event":"ontime.transcript","transcript":{{"text":"{}é to"}}}}"#,
            "a ".repeat(500)
        );
        let Ok(BotMessage::Transcript(tail)) = parse_bot_message(&long) else {
            panic!("a long transcript parses");
        };
        assert_eq!(tail.chars().count(), TRANSCRIPT_TAIL_CHARS);
        assert!(tail.ends_with("a é to"), "{tail}");
        let e = parse_bot_message(r#"{"event":"hello"}"#).unwrap_err();
        assert_eq!(e.label(), "unknown_event");
        for bad in [
            "not json",
            "[]",
            r#"{"event":5}"#,
            r#"{"event":"media"}"#,
            r#"{"event":"media","media":{"payload":"***"}}"#,
            r#"{"event":"mark","mark":{}}"#,
            r#"{"event":"ontime.transcript","transcript":{"text":5}}"#,
            r#"{"event":"ontime.transcript","text":"to"}"#,
        ] {
            let e = parse_bot_message(bad).unwrap_err();
            assert_eq!(e.label(), "malformed", "{bad}: {e}");
        }
    }

    #[test]
    fn marks_return_once_whether_played_or_cleared() {
        let mut p = PendingMarks::default();
        p.queued("a".into());
        p.queued("b".into());
        assert!(p.played("a"));
        assert!(!p.played("a"));
        p.queued("c".into());
        assert_eq!(p.take_all(), vec!["b".to_string(), "c".to_string()]);
        assert!(!p.played("b"), "a cleared mark is not reported twice");
        assert!(p.names.is_empty());
    }

    proptest! {
        #[test]
        fn parser_never_panics(s in ".{0,400}") {
            let _ = parse_bot_message(&s);
        }

        #[test]
        fn media_of_any_length_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..4000)) {
            let text = json!({"event":"media","streamSid":"MZ1","media":{"payload":
                base64::engine::general_purpose::STANDARD.encode(&bytes)}}).to_string();
            prop_assert_eq!(parse_bot_message(&text), Ok(BotMessage::Media(bytes)));
        }

        #[test]
        fn every_mark_is_reported_exactly_once(
            ops in proptest::collection::vec((0u8..3, 0u8..6), 0..60)
        ) {
            // 0: bot queues mark n; 1: call plays mark n; 2: clear.
            let mut p = PendingMarks::default();
            let mut queued = 0usize;
            let mut reported = 0usize;
            for (op, n) in ops {
                match op {
                    0 => { p.queued(n.to_string()); queued += 1; }
                    1 => if p.played(&n.to_string()) { reported += 1 },
                    _ => reported += p.take_all().len(),
                }
                prop_assert_eq!(queued, reported + p.names.len());
            }
        }
    }
}
