//! Call detail records: one structured log line per ended call.

use serde::Serialize;

/// Why a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndCause {
    /// The caller sent BYE.
    CallerBye,
    /// The gateway sent BYE (agent or operator).
    GatewayBye,
    /// The caller cancelled before answer.
    Cancelled,
    /// No RTP arrived for the configured timeout.
    RtpTimeout,
    /// The call reached the maximum length.
    MaxDuration,
    /// Drain timeout passed at shutdown.
    Drained,
    /// The session timer expired without a refresh (RFC 4028).
    SessionExpired,
    /// The ACK never came (timer H) or the transaction failed.
    SignallingFailure,
}

impl EndCause {
    /// The `result` label of `ontime_calls_total`.
    pub fn result_label(self) -> &'static str {
        match self {
            EndCause::Cancelled => "cancelled",
            EndCause::SignallingFailure => "failed",
            _ => "completed",
        }
    }
}

/// The record written when a call ends.
#[derive(Debug, Clone, Serialize)]
pub struct CallDetailRecord {
    /// SIP Call-ID.
    pub call_id: String,
    /// From URI.
    pub from: String,
    /// To URI.
    pub to: String,
    /// Unix time of the INVITE, ms.
    pub start_unix_ms: u64,
    /// Unix time of the answer, ms (None if never answered).
    pub answer_unix_ms: Option<u64>,
    /// Unix time of the end, ms.
    pub end_unix_ms: u64,
    /// Why it ended.
    pub cause: EndCause,
    /// RTP packets received from the caller.
    pub packets_in: u64,
    /// RTP packets sent to the caller.
    pub packets_out: u64,
    /// Sender ticks of this call later than one frame.
    pub late_ticks: u64,
    /// Underruns mid-utterance.
    pub underruns: u64,
    /// Caller packets discarded by the inbound jitter buffer.
    pub discards: u64,
    /// Caller packets lost.
    pub lost: u64,
    /// Turns detected.
    pub turns: u64,
    /// Barge-ins.
    pub barge_ins: u64,
    /// DTMF digits received.
    pub dtmf: String,
}

/// Unix time now in ms (for CDR fields).
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl CallDetailRecord {
    /// The record of a call that never got media (cancelled while ringing, failed to answer).
    pub fn unanswered(info: &crate::agent::CallInfo, start_unix_ms: u64, cause: EndCause) -> Self {
        CallDetailRecord {
            call_id: info.call_id.clone(),
            from: info.from.clone(),
            to: info.to.clone(),
            start_unix_ms,
            answer_unix_ms: None,
            end_unix_ms: unix_ms_now(),
            cause,
            packets_in: 0,
            packets_out: 0,
            late_ticks: 0,
            underruns: 0,
            discards: 0,
            lost: 0,
            turns: 0,
            barge_ins: 0,
            dtmf: String::new(),
        }
    }

    /// Write the record as one log line (target `cdr`, field `cdr` holding the JSON).
    pub fn log(&self) {
        match serde_json::to_string(self) {
            Ok(json) => tracing::info!(target: "cdr", cdr = %json, "call ended"),
            Err(e) => {
                tracing::warn!(target: "cdr", error = %e, call_id = %self.call_id, "CDR not serialisable")
            }
        }
    }
}
