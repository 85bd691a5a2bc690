//! Lateness accounting: atomics written by the tick, snapshots read by anyone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::{LATENESS_BUCKET_BOUNDS, LATE_TICK_THRESHOLD};

/// Index of the histogram bucket holding `lateness` (inclusive upper bounds).
pub(crate) fn bucket_index(lateness: Duration) -> usize {
    LATENESS_BUCKET_BOUNDS
        .iter()
        .position(|bound| lateness <= *bound)
        .unwrap_or(LATENESS_BUCKET_BOUNDS.len())
}

/// Bucket counts of tick lateness over [`LATENESS_BUCKET_BOUNDS`]; `counts[11]` holds ticks later
/// than the last bound (200 ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatenessHistogram {
    /// Ticks per bucket.
    pub counts: [u64; LATENESS_BUCKET_BOUNDS.len() + 1],
}

impl LatenessHistogram {
    /// Total ticks counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Upper bound of the bucket holding quantile `q` (0..=1) of the counted ticks: the true
    /// quantile is at most this. `None` when nothing was counted or the quantile falls in the
    /// open-ended last bucket (above 200 ms).
    pub fn quantile_upper_bound(&self, q: f64) -> Option<Duration> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return LATENESS_BUCKET_BOUNDS.get(i).copied();
            }
        }
        None
    }
}

/// Lock-free counters of one clock (the whole sender, or one stream).
#[derive(Debug, Default)]
pub(crate) struct TickCounters {
    pub(crate) ticks: AtomicU64,
    pub(crate) late_ticks: AtomicU64,
    pub(crate) catchup_packets: AtomicU64,
    pub(crate) underruns: AtomicU64,
    pub(crate) packets_sent: AtomicU64,
    pub(crate) send_errors: AtomicU64,
    pub(crate) worst_lateness_ns: AtomicU64,
}

impl TickCounters {
    /// Count one slot served `lateness` after its time. Relaxed: these are statistics, each
    /// counter is read on its own.
    pub(crate) fn record_tick(&self, lateness: Duration) {
        self.ticks.fetch_add(1, Relaxed);
        if lateness > LATE_TICK_THRESHOLD {
            self.late_ticks.fetch_add(1, Relaxed);
        }
        let ns = u64::try_from(lateness.as_nanos()).unwrap_or(u64::MAX);
        self.worst_lateness_ns.fetch_max(ns, Relaxed);
    }
}

/// The sender-wide counters plus the histogram.
#[derive(Debug, Default)]
pub(crate) struct SenderCounters {
    pub(crate) clock: TickCounters,
    pub(crate) histogram: [AtomicU64; LATENESS_BUCKET_BOUNDS.len() + 1],
    pub(crate) silence_packets: AtomicU64,
    pub(crate) trace_dropped: AtomicU64,
    pub(crate) events_dropped: AtomicU64,
    pub(crate) dtmf_digits_sent: AtomicU64,
    pub(crate) streams: AtomicU64,
    pub(crate) realtime: AtomicBool,
}

impl SenderCounters {
    pub(crate) fn record_tick(&self, lateness: Duration) {
        self.clock.record_tick(lateness);
        self.histogram[bucket_index(lateness)].fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> SenderStats {
        let mut histogram = LatenessHistogram::default();
        for (dst, src) in histogram.counts.iter_mut().zip(&self.histogram) {
            *dst = src.load(Relaxed);
        }
        let c = &self.clock;
        SenderStats {
            realtime: self.realtime.load(Relaxed),
            streams: self.streams.load(Relaxed),
            ticks: c.ticks.load(Relaxed),
            late_ticks: c.late_ticks.load(Relaxed),
            catchup_packets: c.catchup_packets.load(Relaxed),
            underruns: c.underruns.load(Relaxed),
            packets_sent: c.packets_sent.load(Relaxed),
            silence_packets: self.silence_packets.load(Relaxed),
            send_errors: c.send_errors.load(Relaxed),
            worst_lateness: Duration::from_nanos(c.worst_lateness_ns.load(Relaxed)),
            histogram,
            tick_trace_dropped: self.trace_dropped.load(Relaxed),
            events_dropped: self.events_dropped.load(Relaxed),
            dtmf_digits_sent: self.dtmf_digits_sent.load(Relaxed),
        }
    }
}

/// A snapshot of the whole sender's accounting since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SenderStats {
    /// The sender thread runs SCHED_FIFO.
    pub realtime: bool,
    /// Streams being served.
    pub streams: u64,
    /// Slots served (one per 20 ms since start, each exactly once).
    pub ticks: u64,
    /// Slots served more than [`LATE_TICK_THRESHOLD`] after their time.
    pub late_ticks: u64,
    /// Packets sent for a slot that had already passed when a later slot was due (after a late
    /// wake), summed over streams.
    pub catchup_packets: u64,
    /// Frames that ran short mid-utterance (filled with silence), summed over streams.
    pub underruns: u64,
    /// Packets handed to a socket or sink successfully.
    pub packets_sent: u64,
    /// Packets whose whole payload was silence (between utterances or on an underrun).
    pub silence_packets: u64,
    /// Sends that failed (socket buffer full, unreachable peer, sink error).
    pub send_errors: u64,
    /// The latest any slot was served.
    pub worst_lateness: Duration,
    /// Lateness histogram over [`crate::LATENESS_BUCKET_BOUNDS`].
    pub histogram: LatenessHistogram,
    /// Tick samples lost because nobody drained the tick trace in time.
    pub tick_trace_dropped: u64,
    /// Stream events (marks) lost because a producer did not read its events in time.
    pub events_dropped: u64,
    /// DTMF digits played out, summed over streams (see [`crate::StreamStats::dtmf_digits_sent`]).
    pub dtmf_digits_sent: u64,
}

impl SenderStats {
    /// Upper bound of the 99th percentile of lateness (from the histogram).
    pub fn p99_upper_bound(&self) -> Option<Duration> {
        self.histogram.quantile_upper_bound(0.99)
    }
}

/// One served slot, as recorded in the tick trace (see [`crate::Sender::drain_ticks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickSample {
    /// Slot number since the sender started (slot 0 is one frame after start).
    pub slot: u64,
    /// The slot's time since the sender's origin.
    pub scheduled: Duration,
    /// How long after its time the slot was served.
    pub lateness: Duration,
    /// Served as catch-up: a later slot was already due.
    pub catch_up: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_inclusive_upper_bounds() {
        assert_eq!(bucket_index(Duration::ZERO), 0);
        assert_eq!(bucket_index(Duration::from_micros(100)), 0);
        assert_eq!(bucket_index(Duration::from_micros(101)), 1);
        assert_eq!(bucket_index(Duration::from_millis(20)), 7);
        assert_eq!(bucket_index(Duration::from_millis(200)), 10);
        assert_eq!(bucket_index(Duration::from_millis(201)), 11);
    }

    #[test]
    fn late_means_strictly_more_than_one_frame() {
        let c = TickCounters::default();
        c.record_tick(LATE_TICK_THRESHOLD);
        assert_eq!(c.late_ticks.load(Relaxed), 0);
        c.record_tick(LATE_TICK_THRESHOLD + Duration::from_nanos(1));
        assert_eq!(c.late_ticks.load(Relaxed), 1);
        assert_eq!(c.ticks.load(Relaxed), 2);
        assert_eq!(
            c.worst_lateness_ns.load(Relaxed),
            LATE_TICK_THRESHOLD.as_nanos() as u64 + 1
        );
    }

    #[test]
    fn p99_of_a_known_histogram() {
        let mut h = LatenessHistogram::default();
        h.counts[0] = 99;
        h.counts[9] = 1;
        assert_eq!(
            h.quantile_upper_bound(0.99),
            Some(Duration::from_micros(100))
        );
        assert_eq!(
            h.quantile_upper_bound(1.0),
            Some(Duration::from_millis(100))
        );
        h.counts[11] = 5;
        assert_eq!(
            h.quantile_upper_bound(0.99),
            None,
            "falls in the open bucket"
        );
        assert_eq!(LatenessHistogram::default().quantile_upper_bound(0.5), None);
    }

    proptest! {
        #[test]
        fn every_tick_is_counted_once(lateness_us in proptest::collection::vec(0u64..500_000, 0..200)) {
            let c = SenderCounters::default();
            for us in &lateness_us {
                c.record_tick(Duration::from_micros(*us));
            }
            let s = c.snapshot();
            prop_assert_eq!(s.histogram.total(), lateness_us.len() as u64);
            prop_assert_eq!(s.ticks, lateness_us.len() as u64);
            let late = lateness_us.iter().filter(|us| **us > 20_000).count() as u64;
            prop_assert_eq!(s.late_ticks, late);
            let worst = lateness_us.iter().copied().max().unwrap_or(0);
            prop_assert_eq!(s.worst_lateness, Duration::from_micros(worst));
            if let Some(p99) = s.p99_upper_bound() {
                let mut sorted = lateness_us.clone();
                sorted.sort_unstable();
                let rank = ((0.99 * sorted.len() as f64).ceil() as usize).max(1);
                prop_assert!(Duration::from_micros(sorted[rank - 1]) <= p99);
            }
        }
    }
}
