//! Names of the WebSocket agent's metrics, their label values and buckets, and their
//! descriptions: owned here with the gateway's other metric names, used by `agent::ws`.

use metrics::{counter, describe_counter, describe_histogram, histogram, Unit};

/// Messages sent to bots, by `event` (`ontime_ws_messages_sent_total{event}`).
pub const WS_MESSAGES_SENT_TOTAL: &str = "ontime_ws_messages_sent_total";
/// Messages received from bots, by `event` (`ontime_ws_messages_received_total{event}`).
pub const WS_MESSAGES_RECEIVED_TOTAL: &str = "ontime_ws_messages_received_total";
/// Bot messages ignored, by reason (`malformed`, `unknown_event`, `oversize`, `binary`).
pub const WS_MESSAGES_INVALID_TOTAL: &str = "ontime_ws_messages_invalid_total";
/// Caller frames not sent to a bot because its per-call send queue was full.
pub const WS_SEND_QUEUE_DROPPED_TOTAL: &str = "ontime_ws_send_queue_dropped_total";
/// Time to open a bot's WebSocket (TCP, TLS, HTTP upgrade).
pub const WS_CONNECT_SECONDS: &str = "ontime_ws_connect_seconds";
/// Failed connection attempts, by reason (`timeout`, `error`).
pub const WS_CONNECT_FAILURES_TOTAL: &str = "ontime_ws_connect_failures_total";
/// Bots that closed or lost their connection while the call was up, by how (`normal`: a close
/// with code 1000; `abnormal`: any other close; `lost`: no close frame).
pub const WS_DISCONNECTS_TOTAL: &str = "ontime_ws_disconnects_total";
/// Calls answered with the fallback message because the bot was unreachable.
pub const WS_FALLBACK_CALLS_TOTAL: &str = "ontime_ws_fallback_calls_total";

/// Event names from the bot (label values of [`WS_MESSAGES_RECEIVED_TOTAL`]).
pub const RECEIVED_EVENTS: &[&str] = &["media", "mark", "clear", "transcript"];
/// Reasons a bot message is ignored (label values of [`WS_MESSAGES_INVALID_TOTAL`]).
pub const INVALID_REASONS: &[&str] = &["malformed", "unknown_event", "oversize", "binary"];
/// Bucket bounds of [`WS_CONNECT_SECONDS`].
pub const CONNECT_BUCKETS_SECONDS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
];

/// Describe every WebSocket-agent metric and register it at zero.
pub(crate) fn describe_ws_metrics(sent_events: &[&'static str]) {
    describe_counter!(
        WS_MESSAGES_SENT_TOTAL,
        Unit::Count,
        "Messages sent to WebSocket bots, by event."
    );
    for e in sent_events {
        counter!(WS_MESSAGES_SENT_TOTAL, "event" => *e).absolute(0);
    }
    describe_counter!(
        WS_MESSAGES_RECEIVED_TOTAL,
        Unit::Count,
        "Messages received from WebSocket bots, by event."
    );
    for e in RECEIVED_EVENTS {
        counter!(WS_MESSAGES_RECEIVED_TOTAL, "event" => *e).absolute(0);
    }
    describe_counter!(
        WS_MESSAGES_INVALID_TOTAL,
        Unit::Count,
        "Bot messages ignored, by reason."
    );
    for r in INVALID_REASONS {
        counter!(WS_MESSAGES_INVALID_TOTAL, "reason" => *r).absolute(0);
    }
    describe_counter!(
        WS_SEND_QUEUE_DROPPED_TOTAL,
        Unit::Count,
        "Caller frames dropped because a bot's send queue was full."
    );
    counter!(WS_SEND_QUEUE_DROPPED_TOTAL).absolute(0);
    describe_histogram!(
        WS_CONNECT_SECONDS,
        Unit::Seconds,
        "Time to open a bot's WebSocket."
    );
    let _ = histogram!(WS_CONNECT_SECONDS);
    describe_counter!(
        WS_CONNECT_FAILURES_TOTAL,
        Unit::Count,
        "Failed bot connection attempts, by reason."
    );
    for r in ["timeout", "error"] {
        counter!(WS_CONNECT_FAILURES_TOTAL, "reason" => r).absolute(0);
    }
    describe_counter!(
        WS_DISCONNECTS_TOTAL,
        Unit::Count,
        "Bots that went away mid-call (the call got a BYE with a Reason header)."
    );
    for how in ["normal", "abnormal", "lost"] {
        counter!(WS_DISCONNECTS_TOTAL, "how" => how).absolute(0);
    }
    describe_counter!(
        WS_FALLBACK_CALLS_TOTAL,
        Unit::Count,
        "Calls answered with the fallback message (bot unreachable)."
    );
    counter!(WS_FALLBACK_CALLS_TOTAL).absolute(0);
}
