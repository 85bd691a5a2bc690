//! The gateway's own metric names (calls, RTP, jitter, cgroup, RTCP, agents), described and
//! registered at zero at start-up so dashboards see 0, not an absent series. The sender's and the
//! inference pool's names live in their crates.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

/// Calls in progress.
pub const CALLS_ACTIVE: &str = "ontime_calls_active";
/// Calls ended, by result (`completed`, `cancelled`, `failed`).
pub const CALLS_TOTAL: &str = "ontime_calls_total";
/// Answered calls ended, by the trunk codec they ended on (`PCMU`, `PCMA`, `G722`).
pub const CALLS_BY_CODEC_TOTAL: &str = "ontime_calls_by_codec_total";
/// INVITEs refused, by reason.
pub const CALLS_REJECTED_TOTAL: &str = "ontime_calls_rejected_total";
/// Barge-ins: caller speech that cleared the agent's queued audio.
pub const BARGE_INS_TOTAL: &str = "ontime_barge_ins_total";
/// Backchannels: caller speech over the reply too short to barge in, which left it playing.
pub const BACKCHANNELS_TOTAL: &str = "ontime_backchannels_total";
/// Replies held back after a turn end, by `reason` (`doubt`: Smart Turn unsure; `habit`: the
/// caller paused mid-sentence before; `words`: the bot's transcript ends where no sentence ends).
pub const REPLIES_HELD_TOTAL: &str = "ontime_replies_held_total";
/// Habit or doubt waits lifted at a turn's verdict, by `cue`: `fall` (the caller's voice fell
/// to a statement's end), `words` (the bot's transcript ends a sentence).
pub const REPLY_HOLDS_LIFTED_TOTAL: &str = "ontime_reply_holds_lifted_total";
/// Transcripts bots sent (`ontime.transcript`), by what their last words say (`incomplete`,
/// `complete`, `unknown`).
pub const TRANSCRIPTS_TOTAL: &str = "ontime_transcripts_total";
/// Turn ends the caller resumed after before the reply was heard (ends in a pause).
pub const TURNS_RESUMED_TOTAL: &str = "ontime_turns_resumed_total";
/// Of those, ends whose reply had arrived and was dropped unheard: false ends the hold-back caught.
pub const HELD_REPLIES_DROPPED_TOTAL: &str = "ontime_held_replies_dropped_total";
/// Caller frames the echo canceller silenced as the line's echo of the reply.
pub const ECHO_FRAMES_GATED_TOTAL: &str = "ontime_echo_frames_gated_total";
/// Runs of audible echo kept from the barge-in VAD (barge-ins on the bot's own voice avoided).
pub const ECHO_BURSTS_GATED_TOTAL: &str = "ontime_echo_bursts_gated_total";
/// Per call whose line echoed: the echo's delay as the gateway hears it.
pub const ECHO_DELAY_SECONDS: &str = "ontime_echo_delay_seconds";
/// Per call whose line echoed: echo return loss enhancement (dB) the canceller reached.
pub const ECHO_ERLE_DB: &str = "ontime_echo_erle_db";
/// Valid RTP packets received from callers.
pub const RTP_PACKETS_RECEIVED_TOTAL: &str = "ontime_rtp_packets_received_total";
/// RTP packets sent to callers (published from the sender's counters).
pub const RTP_PACKETS_SENT_TOTAL: &str = "ontime_rtp_packets_sent_total";
/// Datagrams dropped on the RTP port, by reason.
pub const RTP_INVALID_PACKETS_TOTAL: &str = "ontime_rtp_invalid_packets_total";
/// Caller packets the inbound jitter buffer discarded as late.
pub const JITTER_DISCARDED_TOTAL: &str = "ontime_jitter_discarded_total";
/// Caller packets never received (sequence gaps).
pub const JITTER_LOST_TOTAL: &str = "ontime_jitter_lost_total";
/// Current inbound jitter-buffer depth, averaged over calls.
pub const JITTER_DEPTH_SECONDS: &str = "ontime_jitter_depth_seconds";
/// CFS periods elapsed in the gateway's cgroup.
pub const CGROUP_PERIODS_TOTAL: &str = "ontime_cgroup_periods_total";
/// CFS periods in which the cgroup was throttled.
pub const CGROUP_THROTTLED_PERIODS_TOTAL: &str = "ontime_cgroup_throttled_periods_total";
/// The cgroup's CPU quota in cores (0 when unlimited).
pub const CGROUP_QUOTA_CORES: &str = "ontime_cgroup_quota_cores";
/// SIP messages, by method (or status class for responses) and direction.
pub const SIP_MESSAGES_TOTAL: &str = "ontime_sip_messages_total";
/// Agent audio dropped because it belonged to a reply the caller had cut by barge-in (a bot
/// streaming in real time keeps sending it), in 20 ms frames.
pub const AGENT_AUDIO_CUT_FRAMES_TOTAL: &str = "ontime_agent_audio_cut_frames_total";
/// SIP datagrams dropped before the endpoint, by reason (`untrusted`: from outside the trunk
/// networks; `rate_limited`: a trusted source over `sip_rate_limit`).
pub const SIP_DROPPED_TOTAL: &str = "ontime_sip_dropped_total";
/// Stateless 403s sent to sources outside the trunk networks (`untrusted_sip = reject`).
pub const SIP_UNTRUSTED_REJECTED_TOTAL: &str = "ontime_sip_untrusted_rejected_total";
/// `X-` headers of inbound INVITEs not passed on to the voice webhook and the bot: past the
/// 16th, or out of bounds (`ontime_twilio::sip_headers`).
pub const SIP_X_HEADERS_DROPPED_TOTAL: &str = "ontime_sip_x_headers_dropped_total";
/// Reasons of [`SIP_DROPPED_TOTAL`] (`slow_message`: a TCP/TLS message not complete within
/// its time, the connection closed).
pub const SIP_DROP_REASONS: &[&str] = &["untrusted", "rate_limited", "slow_message"];
/// SIP TCP/TLS connections open, by transport.
pub const SIP_CONNECTIONS: &str = "ontime_sip_connections";
/// SRTP/SRTCP packets from callers dropped, by reason (`auth_failed`, `replayed`, ...), and
/// our own packets that could not be protected.
pub const SRTP_DROPPED_TOTAL: &str = "ontime_srtp_dropped_total";
/// Calls answered, by SIP transport and media (`rtp`, `srtp`).
pub const CALLS_ANSWERED_TOTAL: &str = "ontime_calls_answered_total";
/// 1 while a registration (`--register`) is up, by address of record; 0 before the first
/// success, after a failure and after the unregister.
pub const REGISTRATION_UP: &str = "ontime_registration_up";
/// More calls that fit now by measurement (inference CPU and queue wait, sender lateness, CFS
/// throttling), within `max_calls`; new calls are refused below `admission_reserve`.
pub const ADMISSION_HEADROOM_CALLS: &str = "ontime_admission_headroom_calls";
/// SIP connections refused at the per-source or total bound.
pub const SIP_CONNECTIONS_REFUSED_TOTAL: &str = "ontime_sip_connections_refused_total";
/// TLS handshakes that failed or timed out, by side (`server`: a peer connecting to us;
/// `client`: our connection to a peer).
pub const SIP_TLS_HANDSHAKE_FAILURES_TOTAL: &str = "ontime_sip_tls_handshake_failures_total";
/// SIP messages dropped because their connection's send queue was full.
pub const SIP_STREAM_SEND_DROPPED_TOTAL: &str = "ontime_sip_stream_send_dropped_total";
/// SIP datagrams that could not be parsed (dropped or answered 400).
pub const SIP_INVALID_MESSAGES_TOTAL: &str = "ontime_sip_invalid_messages_total";
/// RTCP reports from callers that carried a block on our stream.
pub const RTCP_REPORTS_RECEIVED_TOTAL: &str = "ontime_rtcp_reports_received_total";
/// Round-trip time reported by RTCP, last value over calls.
pub const RTCP_RTT_SECONDS: &str = "ontime_rtcp_rtt_seconds";
/// Fraction lost the peers report for our stream (RTCP RR), last value.
pub const RTCP_PEER_FRACTION_LOST: &str = "ontime_rtcp_peer_fraction_lost";
/// Interarrival jitter the peers report for our stream (RTCP RR), last value.
pub const RTCP_PEER_JITTER_SECONDS: &str = "ontime_rtcp_peer_jitter_seconds";
/// Turns the gateway detected (Smart Turn complete or stop timeout).
pub const TURNS_TOTAL: &str = "ontime_turns_total";
/// DTMF digits received.
pub const DTMF_DIGITS_TOTAL: &str = "ontime_dtmf_digits_total";
/// Calls ended because no RTP arrived for the timeout.
pub const RTP_TIMEOUTS_TOTAL: &str = "ontime_rtp_timeouts_total";

/// Agent audio frames dropped (oldest first) because more than `max_buffered_seconds` was queued.
pub const AGENT_AUDIO_DROPPED_FRAMES_TOTAL: &str = "ontime_agent_audio_dropped_frames_total";
/// Agent audio queued for a call (call queue plus the sender's ring) after each chunk arrives.
pub const AGENT_BUFFERED_AUDIO_SECONDS: &str = "ontime_agent_buffered_audio_seconds";
/// Bucket bounds of [`AGENT_BUFFERED_AUDIO_SECONDS`].
pub const AGENT_BUFFERED_AUDIO_BUCKETS_SECONDS: &[f64] =
    &[0.02, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0];

/// Call-control API requests, by route (`call_get`, `call_update`, `calls_list`, `calls_create`,
/// `unknown`) and HTTP status.
pub const API_REQUESTS_TOTAL: &str = "ontime_api_requests_total";
/// Routes of [`API_REQUESTS_TOTAL`].
pub const API_ROUTES: &[&str] = &[
    "call_get",
    "call_update",
    "calls_list",
    "calls_create",
    "unknown",
];
/// HTTP statuses of [`API_REQUESTS_TOTAL`] registered at zero (others appear when first used).
pub const API_STATUSES: &[&str] = &["200", "201", "400", "401", "404", "405", "429"];
/// Blind transfers by REFER, by result.
pub const TRANSFERS_TOTAL: &str = "ontime_transfers_total";
/// Results of [`TRANSFERS_TOTAL`]: `completed` (final 2xx NOTIFY, our leg hung up), `rejected`
/// (the REFER was refused), `failed` (a non-2xx final NOTIFY, or no outcome in time).
pub const TRANSFER_RESULTS: &[&str] = &["completed", "rejected", "failed"];
/// DTMF digits sent to callers (RFC 4733 events or SIP INFO).
pub const DTMF_SENT_TOTAL: &str = "ontime_dtmf_sent_total";
/// Calls placed through the API, by result (Twilio's final statuses plus `answered`).
pub const OUTBOUND_CALLS_TOTAL: &str = "ontime_outbound_calls_total";
/// Results of [`OUTBOUND_CALLS_TOTAL`].
pub const OUTBOUND_RESULTS: &[&str] = &["answered", "busy", "no-answer", "failed", "canceled"];

/// Answering-machine detection's verdicts on calls placed with `MachineDetection`, by
/// `answered_by` (Twilio's `AnsweredBy` values, [`ontime_amd::AnsweredBy::ALL`]).
pub const AMD_VERDICTS_TOTAL: &str = "ontime_amd_verdicts_total";

/// Results of ended calls (label values of [`CALLS_TOTAL`]).
pub const CALL_RESULTS: &[&str] = &["completed", "cancelled", "failed"];
/// Reasons a datagram on an RTP port is dropped besides the parser's own.
pub const RTP_DROP_REASONS: &[&str] = &[
    "wrong_source",
    "latch_pending",
    "unknown_payload_type",
    "rate_limit",
    "stun",
    "opus",
];
const SIP_METHODS: &[&str] = &[
    "INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "INFO", "UPDATE", "REFER", "NOTIFY", "1xx", "2xx",
    "3xx", "4xx", "5xx", "6xx",
];

/// Describe every gateway metric and register it at zero.
pub(crate) fn describe_and_zero(rtp_parse_reasons: &[&'static str]) {
    describe_gauge!(CALLS_ACTIVE, Unit::Count, "Calls in progress.");
    gauge!(CALLS_ACTIVE).set(0.0);
    describe_counter!(CALLS_TOTAL, Unit::Count, "Calls ended, by result.");
    for r in CALL_RESULTS {
        counter!(CALLS_TOTAL, "result" => *r).absolute(0);
    }
    describe_counter!(
        CALLS_BY_CODEC_TOTAL,
        Unit::Count,
        "Answered calls ended, by the trunk codec they ended on."
    );
    for c in ontime_rtp::Codec::ALL {
        counter!(CALLS_BY_CODEC_TOTAL, "codec" => c.encoding_name()).absolute(0);
    }
    describe_counter!(
        CALLS_REJECTED_TOTAL,
        Unit::Count,
        "INVITEs refused, by reason."
    );
    for r in crate::admission::RejectReason::ALL {
        counter!(CALLS_REJECTED_TOTAL, "reason" => r.label()).absolute(0);
    }
    describe_counter!(
        BARGE_INS_TOTAL,
        Unit::Count,
        "Caller speech that cleared queued agent audio."
    );
    counter!(BARGE_INS_TOTAL).absolute(0);
    describe_counter!(
        BACKCHANNELS_TOTAL,
        Unit::Count,
        "Caller speech over the reply shorter than barge_in_min_speech: the reply played on."
    );
    counter!(BACKCHANNELS_TOTAL).absolute(0);
    describe_counter!(
        REPLIES_HELD_TOTAL,
        Unit::Count,
        "Replies held back after a turn end, by reason (doubt, habit, words)."
    );
    for reason in ["doubt", "habit", "words"] {
        counter!(REPLIES_HELD_TOTAL, "reason" => reason).absolute(0);
    }
    describe_counter!(
        REPLY_HOLDS_LIFTED_TOTAL,
        Unit::Count,
        "Habit or doubt waits lifted at a turn's verdict, by cue (fall, words)."
    );
    for cue in ["fall", "words"] {
        counter!(REPLY_HOLDS_LIFTED_TOTAL, "cue" => cue).absolute(0);
    }
    describe_counter!(
        TRANSCRIPTS_TOTAL,
        Unit::Count,
        "Transcripts bots sent, by what their last words say (incomplete, complete, unknown)."
    );
    for cue in ["incomplete", "complete", "unknown"] {
        counter!(TRANSCRIPTS_TOTAL, "cue" => cue).absolute(0);
    }
    describe_counter!(
        TURNS_RESUMED_TOTAL,
        Unit::Count,
        "Turn ends the caller resumed after before the reply was heard."
    );
    counter!(TURNS_RESUMED_TOTAL).absolute(0);
    describe_counter!(
        HELD_REPLIES_DROPPED_TOTAL,
        Unit::Count,
        "Replies dropped unheard because the caller resumed: false ends of turn caught."
    );
    counter!(HELD_REPLIES_DROPPED_TOTAL).absolute(0);
    describe_counter!(
        ECHO_FRAMES_GATED_TOTAL,
        Unit::Count,
        "Caller frames silenced as the line's echo of the reply before the barge-in VAD."
    );
    counter!(ECHO_FRAMES_GATED_TOTAL).absolute(0);
    describe_counter!(
        ECHO_BURSTS_GATED_TOTAL,
        Unit::Count,
        "Runs of audible echo of the reply kept from the barge-in VAD (false barge-ins avoided)."
    );
    counter!(ECHO_BURSTS_GATED_TOTAL).absolute(0);
    describe_histogram!(
        ECHO_DELAY_SECONDS,
        Unit::Seconds,
        "Per call whose line echoed: the echo's delay (round trip and jitter buffer included)."
    );
    describe_histogram!(
        ECHO_ERLE_DB,
        "Per call whose line echoed: echo return loss enhancement reached, in dB."
    );
    describe_counter!(
        RTP_PACKETS_RECEIVED_TOTAL,
        Unit::Count,
        "Valid RTP packets received."
    );
    counter!(RTP_PACKETS_RECEIVED_TOTAL).absolute(0);
    describe_counter!(
        RTP_PACKETS_SENT_TOTAL,
        Unit::Count,
        "RTP packets sent by the sender thread."
    );
    counter!(RTP_PACKETS_SENT_TOTAL).absolute(0);
    describe_counter!(
        RTP_INVALID_PACKETS_TOTAL,
        Unit::Count,
        "Datagrams dropped on RTP ports, by reason."
    );
    for r in rtp_parse_reasons.iter().chain(RTP_DROP_REASONS) {
        counter!(RTP_INVALID_PACKETS_TOTAL, "reason" => *r).absolute(0);
    }
    describe_counter!(
        JITTER_DISCARDED_TOTAL,
        Unit::Count,
        "Caller packets discarded as late."
    );
    counter!(JITTER_DISCARDED_TOTAL).absolute(0);
    describe_counter!(
        JITTER_LOST_TOTAL,
        Unit::Count,
        "Caller packets never received."
    );
    counter!(JITTER_LOST_TOTAL).absolute(0);
    describe_gauge!(
        JITTER_DEPTH_SECONDS,
        Unit::Seconds,
        "Inbound jitter-buffer depth (mean over calls)."
    );
    gauge!(JITTER_DEPTH_SECONDS).set(0.0);
    describe_counter!(
        CGROUP_PERIODS_TOTAL,
        Unit::Count,
        "CFS periods of the gateway's cgroup."
    );
    counter!(CGROUP_PERIODS_TOTAL).absolute(0);
    describe_counter!(
        CGROUP_THROTTLED_PERIODS_TOTAL,
        Unit::Count,
        "Throttled CFS periods."
    );
    counter!(CGROUP_THROTTLED_PERIODS_TOTAL).absolute(0);
    describe_gauge!(
        CGROUP_QUOTA_CORES,
        Unit::Count,
        "CPU quota in cores (0 = unlimited)."
    );
    gauge!(CGROUP_QUOTA_CORES).set(0.0);
    describe_counter!(
        SIP_MESSAGES_TOTAL,
        Unit::Count,
        "SIP messages by method/status class and direction."
    );
    for m in SIP_METHODS {
        for d in ["in", "out"] {
            counter!(SIP_MESSAGES_TOTAL, "method" => *m, "direction" => d).absolute(0);
        }
    }
    describe_counter!(
        AGENT_AUDIO_CUT_FRAMES_TOTAL,
        Unit::Count,
        "Agent audio frames dropped after a barge-in because they belonged to the cut reply."
    );
    counter!(AGENT_AUDIO_CUT_FRAMES_TOTAL).absolute(0);
    describe_counter!(
        SIP_DROPPED_TOTAL,
        Unit::Count,
        "SIP datagrams dropped before the endpoint, by reason."
    );
    for r in SIP_DROP_REASONS {
        counter!(SIP_DROPPED_TOTAL, "reason" => *r).absolute(0);
    }
    describe_counter!(
        SIP_UNTRUSTED_REJECTED_TOTAL,
        Unit::Count,
        "Stateless 403s sent to sources outside the trunk networks."
    );
    counter!(SIP_UNTRUSTED_REJECTED_TOTAL).absolute(0);
    describe_counter!(
        SIP_X_HEADERS_DROPPED_TOTAL,
        Unit::Count,
        "X- headers of inbound INVITEs dropped: past 16 per call, or out of bounds."
    );
    counter!(SIP_X_HEADERS_DROPPED_TOTAL).absolute(0);
    describe_counter!(
        SIP_INVALID_MESSAGES_TOTAL,
        Unit::Count,
        "Unparseable SIP datagrams."
    );
    counter!(SIP_INVALID_MESSAGES_TOTAL).absolute(0);
    describe_gauge!(
        RTCP_RTT_SECONDS,
        Unit::Seconds,
        "RTCP round-trip time (last report)."
    );
    gauge!(RTCP_RTT_SECONDS).set(0.0);
    describe_counter!(
        RTCP_REPORTS_RECEIVED_TOTAL,
        Unit::Count,
        "RTCP reports from callers with a block on our stream."
    );
    counter!(RTCP_REPORTS_RECEIVED_TOTAL).absolute(0);
    describe_gauge!(
        RTCP_PEER_FRACTION_LOST,
        Unit::Count,
        "Fraction lost reported by peers (0..1)."
    );
    gauge!(RTCP_PEER_FRACTION_LOST).set(0.0);
    describe_gauge!(
        RTCP_PEER_JITTER_SECONDS,
        Unit::Seconds,
        "Interarrival jitter reported by peers."
    );
    gauge!(RTCP_PEER_JITTER_SECONDS).set(0.0);
    describe_counter!(
        API_REQUESTS_TOTAL,
        Unit::Count,
        "Call-control API requests, by route and HTTP status."
    );
    for route in API_ROUTES {
        for status in API_STATUSES {
            counter!(API_REQUESTS_TOTAL, "route" => *route, "status" => *status).absolute(0);
        }
    }
    describe_counter!(
        TRANSFERS_TOTAL,
        Unit::Count,
        "Blind transfers by SIP REFER, by result."
    );
    for r in TRANSFER_RESULTS {
        counter!(TRANSFERS_TOTAL, "result" => *r).absolute(0);
    }
    describe_counter!(DTMF_SENT_TOTAL, Unit::Count, "DTMF digits sent to callers.");
    counter!(DTMF_SENT_TOTAL).absolute(0);
    describe_counter!(
        OUTBOUND_CALLS_TOTAL,
        Unit::Count,
        "Calls placed through the API, by result."
    );
    for r in OUTBOUND_RESULTS {
        counter!(OUTBOUND_CALLS_TOTAL, "result" => *r).absolute(0);
    }
    describe_counter!(
        AMD_VERDICTS_TOTAL,
        Unit::Count,
        "Answering-machine detection verdicts on outbound calls, by AnsweredBy."
    );
    for answered_by in ontime_amd::AnsweredBy::ALL {
        counter!(AMD_VERDICTS_TOTAL, "answered_by" => answered_by.as_str()).absolute(0);
    }
    for t in ["tcp", "tls"] {
        gauge!(SIP_CONNECTIONS, "transport" => t).set(0.0);
    }
    describe_gauge!(
        SIP_CONNECTIONS,
        Unit::Count,
        "SIP TCP/TLS connections open."
    );
    describe_counter!(
        SIP_CONNECTIONS_REFUSED_TOTAL,
        Unit::Count,
        "SIP connections refused at the per-source or total bound."
    );
    counter!(SIP_CONNECTIONS_REFUSED_TOTAL).absolute(0);
    describe_counter!(
        SIP_TLS_HANDSHAKE_FAILURES_TOTAL,
        Unit::Count,
        "TLS handshakes that failed or timed out, by side."
    );
    for side in ["server", "client"] {
        counter!(SIP_TLS_HANDSHAKE_FAILURES_TOTAL, "side" => side).absolute(0);
    }
    describe_counter!(
        SIP_STREAM_SEND_DROPPED_TOTAL,
        Unit::Count,
        "SIP messages dropped because their connection's send queue was full."
    );
    counter!(SIP_STREAM_SEND_DROPPED_TOTAL).absolute(0);
    describe_gauge!(
        ADMISSION_HEADROOM_CALLS,
        Unit::Count,
        "More calls that fit now by measurement, within max_calls."
    );
    describe_gauge!(
        REGISTRATION_UP,
        Unit::Count,
        "1 while a registration is up, by address of record."
    );
    describe_counter!(
        SRTP_DROPPED_TOTAL,
        Unit::Count,
        "SRTP/SRTCP packets dropped, by reason."
    );
    for r in [
        "auth_failed",
        "replayed",
        "too_old",
        "too_short",
        "malformed",
    ] {
        counter!(SRTP_DROPPED_TOTAL, "reason" => r).absolute(0);
    }
    describe_counter!(
        CALLS_ANSWERED_TOTAL,
        Unit::Count,
        "Calls answered, by SIP transport and media."
    );
    for t in ["udp", "tcp", "tls"] {
        for media in ["rtp", "srtp"] {
            counter!(CALLS_ANSWERED_TOTAL, "transport" => t, "media" => media).absolute(0);
        }
    }
    describe_counter!(TURNS_TOTAL, Unit::Count, "Caller turns detected.");
    counter!(TURNS_TOTAL).absolute(0);
    describe_counter!(
        DTMF_DIGITS_TOTAL,
        Unit::Count,
        "DTMF digits received (RFC 4733 or SIP INFO)."
    );
    counter!(DTMF_DIGITS_TOTAL).absolute(0);
    describe_counter!(
        RTP_TIMEOUTS_TOTAL,
        Unit::Count,
        "Calls ended for want of RTP."
    );
    counter!(RTP_TIMEOUTS_TOTAL).absolute(0);
    describe_counter!(
        AGENT_AUDIO_DROPPED_FRAMES_TOTAL,
        Unit::Count,
        "Agent audio frames dropped, oldest first, beyond max_buffered_seconds."
    );
    counter!(AGENT_AUDIO_DROPPED_FRAMES_TOTAL).absolute(0);
    describe_histogram!(
        AGENT_BUFFERED_AUDIO_SECONDS,
        Unit::Seconds,
        "Agent audio queued for a call after each chunk arrives."
    );
    let _ = metrics::histogram!(AGENT_BUFFERED_AUDIO_SECONDS);
}

/// `ontime_jitter_depth_seconds`: each call adds its inbound jitter-buffer depth through a
/// [`JitterDepthShare`]; [`JitterDepthGauge::publish`] sets the gauge to the mean over calls.
#[derive(Debug, Default)]
pub(crate) struct JitterDepthGauge {
    sum_us: std::sync::atomic::AtomicI64,
    calls: std::sync::atomic::AtomicI64,
}

impl JitterDepthGauge {
    /// A share for one call (counted until dropped).
    pub fn share(self: &std::sync::Arc<Self>) -> JitterDepthShare {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        JitterDepthShare {
            gauge: std::sync::Arc::clone(self),
            us: 0,
        }
    }

    /// The mean depth over the calls holding a share (zero without calls).
    pub fn mean(&self) -> std::time::Duration {
        use std::sync::atomic::Ordering::Relaxed;
        let calls = self.calls.load(Relaxed);
        let sum = self.sum_us.load(Relaxed);
        if calls <= 0 || sum <= 0 {
            return std::time::Duration::ZERO;
        }
        std::time::Duration::from_micros((sum / calls) as u64)
    }

    /// Set the gauge to the mean.
    pub fn publish(&self) {
        gauge!(JITTER_DEPTH_SECONDS).set(self.mean().as_secs_f64());
    }
}

/// One call's part of [`JitterDepthGauge`].
#[derive(Debug)]
pub(crate) struct JitterDepthShare {
    gauge: std::sync::Arc<JitterDepthGauge>,
    us: i64,
}

impl JitterDepthShare {
    /// This call's depth now.
    pub fn set(&mut self, depth: std::time::Duration) {
        let us = i64::try_from(depth.as_micros()).unwrap_or(i64::MAX);
        self.gauge
            .sum_us
            .fetch_add(us - self.us, std::sync::atomic::Ordering::Relaxed);
        self.us = us;
    }
}

impl Drop for JitterDepthShare {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.gauge.sum_us.fetch_sub(self.us, Relaxed);
        self.gauge.calls.fetch_sub(1, Relaxed);
    }
}

/// Which histograms a bucket layout is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HistogramMatch {
    /// The histogram with exactly this name.
    Full(&'static str),
    /// Every histogram whose name starts with this.
    Prefix(&'static str),
}

/// Bucket bounds (seconds) that fit the gateway's histograms, for a host's Prometheus recorder:
/// the sender's lateness around the 20 ms threshold, inference work in ms, queued agent audio
/// and bot connection times in seconds.
pub fn histogram_buckets() -> Vec<(HistogramMatch, Vec<f64>)> {
    vec![
        (
            HistogramMatch::Full("ontime_sender_tick_lateness_seconds"),
            ontime_sender::LATENESS_BUCKET_BOUNDS
                .iter()
                .map(|d| d.as_secs_f64())
                .collect(),
        ),
        (
            HistogramMatch::Prefix("ontime_inference_"),
            vec![
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
            ],
        ),
        (
            HistogramMatch::Full(AGENT_BUFFERED_AUDIO_SECONDS),
            AGENT_BUFFERED_AUDIO_BUCKETS_SECONDS.to_vec(),
        ),
        (
            HistogramMatch::Full(super::ws_metrics::WS_CONNECT_SECONDS),
            super::ws_metrics::CONNECT_BUCKETS_SECONDS.to_vec(),
        ),
    ]
}
