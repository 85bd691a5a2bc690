//! The sender's metrics (`ontime_sender_*`), described and registered with zero values at start-up
//! so a dashboard or an alert sees 0 late ticks rather than a missing series.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

pub(crate) const TICKS_TOTAL: &str = "ontime_sender_ticks_total";
pub(crate) const LATE_TICKS_TOTAL: &str = "ontime_sender_late_ticks_total";
pub(crate) const TICK_LATENESS_SECONDS: &str = "ontime_sender_tick_lateness_seconds";
pub(crate) const CATCHUP_PACKETS_TOTAL: &str = "ontime_sender_catchup_packets_total";
pub(crate) const UNDERRUNS_TOTAL: &str = "ontime_sender_underruns_total";
pub(crate) const REALTIME: &str = "ontime_sender_realtime";
pub(crate) const RTP_PACKETS_SENT_TOTAL: &str = "ontime_rtp_packets_sent_total";

/// Describe the sender's metrics and register them at zero, so dashboards see `0 late ticks`
/// rather than an absent series. [`crate::Sender::start`] calls it when metrics are on; calling it
/// again is harmless.
pub fn describe_metrics() {
    describe_counter!(TICKS_TOTAL, "Sender slots served (one per 20 ms)");
    describe_counter!(
        LATE_TICKS_TOTAL,
        "Sender slots served more than one frame (20 ms) after their time"
    );
    describe_histogram!(
        TICK_LATENESS_SECONDS,
        Unit::Seconds,
        "How long after its slot each sender tick was served"
    );
    describe_counter!(
        CATCHUP_PACKETS_TOTAL,
        "Packets sent for an already-passed slot after a late wake"
    );
    describe_counter!(
        UNDERRUNS_TOTAL,
        "Frames that ran short mid-utterance and were filled with silence"
    );
    describe_gauge!(REALTIME, "1 if the sender thread runs SCHED_FIFO, else 0");
    describe_counter!(RTP_PACKETS_SENT_TOTAL, "RTP packets sent");
    for name in [
        TICKS_TOTAL,
        LATE_TICKS_TOTAL,
        CATCHUP_PACKETS_TOTAL,
        UNDERRUNS_TOTAL,
        RTP_PACKETS_SENT_TOTAL,
    ] {
        counter!(name).absolute(0);
    }
    gauge!(REALTIME).set(0.0);
}
