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
    /// The caller was transferred by REFER and our leg hung up.
    Transferred,
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

/// Which record of a call a [`CallDetailRecord`] is. A call gets a `start` record when it is
/// admitted, an `interim` record on a fixed interval while it is up (with its counters so far),
/// and an `end` record: after a crash, the last start or interim record of a call still says it
/// existed and what it had done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// The call was admitted.
    Start,
    /// The call is up (counters so far).
    Interim,
    /// The call ended (final counters and cause).
    End,
}

/// A call's record: one structured log line (target `cdr`), written when the call is admitted,
/// while it is up, and when it ends.
#[derive(Debug, Clone, Serialize)]
pub struct CallDetailRecord {
    /// Which record this is.
    pub record: RecordKind,
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
    /// Unix time of the end, ms (None until the end record).
    pub end_unix_ms: Option<u64>,
    /// Why it ended (None until the end record).
    pub cause: Option<EndCause>,
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
    /// The line's echo of the reply: its delay as the gateway hears it (network round trip and
    /// jitter buffer included), once the echo canceller found it.
    pub echo_delay_ms: Option<u64>,
    /// Echo return loss (dB): how far below the reply its echo came back.
    pub echo_erl_db: Option<f32>,
    /// Echo return loss enhancement (dB): how much further the canceller took it down.
    pub echo_erle_db: Option<f32>,
    /// Runs of audible echo kept from the barge-in VAD (barge-ins on the bot's own voice
    /// avoided, as a VAD would likely have started them).
    pub echo_bursts_gated: u64,
    /// Lost Opus packets rebuilt from the next packet's in-band FEC (0 on other codecs).
    pub fec_recovered: u64,
    /// DTMF digits received.
    pub dtmf: String,
    /// `inbound` or `outbound-api`.
    pub direction: &'static str,
    /// The SIP transport: `udp`, `tcp` or `tls`.
    pub transport: &'static str,
    /// The media was SRTP (encrypted and authenticated).
    pub srtp: bool,
    /// The trunk codec as the SDP names it (`PCMU`, `PCMA`, `G722`), the last one negotiated;
    /// absent before media.
    pub codec: Option<&'static str>,
    /// The call's SID in the call-control API.
    pub call_sid: String,
    /// The Refer-To of the call's last transfer, if any.
    pub transfer_target: Option<String>,
    /// Its result (`completed`, `rejected`, `failed`).
    pub transfer_result: Option<&'static str>,
    /// Answering-machine detection's verdict, Twilio's `AnsweredBy` (`human`, `machine_start`,
    /// …), on an outbound call placed with `MachineDetection` once it was given.
    pub answered_by: Option<&'static str>,
}

/// Unix time now in ms (for CDR fields).
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl CallDetailRecord {
    /// The start record of a call just admitted.
    pub fn start(info: &crate::agent::CallInfo, start_unix_ms: u64) -> Self {
        CallDetailRecord {
            record: RecordKind::Start,
            end_unix_ms: None,
            cause: None,
            ..Self::unanswered(info, start_unix_ms, EndCause::SignallingFailure)
        }
    }

    /// The record of a call that never got media (cancelled while ringing, failed to answer).
    pub fn unanswered(info: &crate::agent::CallInfo, start_unix_ms: u64, cause: EndCause) -> Self {
        CallDetailRecord {
            record: RecordKind::End,
            call_id: info.call_id.clone(),
            from: info.from.clone(),
            to: info.to.clone(),
            start_unix_ms,
            answer_unix_ms: None,
            end_unix_ms: Some(unix_ms_now()),
            cause: Some(cause),
            packets_in: 0,
            packets_out: 0,
            late_ticks: 0,
            underruns: 0,
            discards: 0,
            lost: 0,
            turns: 0,
            barge_ins: 0,
            echo_delay_ms: None,
            echo_erl_db: None,
            echo_erle_db: None,
            echo_bursts_gated: 0,
            fec_recovered: 0,
            dtmf: String::new(),
            direction: info.direction.as_str(),
            transport: info.transport.name(),
            srtp: false,
            codec: None,
            call_sid: info.call_sid.clone(),
            transfer_target: None,
            transfer_result: None,
            answered_by: None,
        }
    }

    /// Write the record as one log line (target `cdr`, field `cdr` holding the JSON).
    pub fn log(&self) {
        match serde_json::to_string(self) {
            Ok(json) => match self.record {
                RecordKind::Start => tracing::info!(target: "cdr", cdr = %json, "call started"),
                RecordKind::Interim => {
                    tracing::info!(target: "cdr", cdr = %json, "call in progress")
                }
                RecordKind::End => tracing::info!(target: "cdr", cdr = %json, "call ended"),
            },
            Err(e) => {
                tracing::warn!(target: "cdr", error = %e, call_id = %self.call_id, "CDR not serialisable")
            }
        }
    }
}
