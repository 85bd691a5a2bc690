//! The replay model: what a receiver's jitter buffer would play and discard for a given arrival
//! trace, with a perfect network, so any discard is the sender's lateness and nothing else.
//!
//! Fixed depth `D`: packet `i` (its sequence index minus the lowest one in the trace) plays at
//! `A0 + D + i·20 ms`, where `A0` is the arrival of packet 0 (the lowest sequence number; the
//! earliest copy if it was duplicated). A packet arriving later than its playout time is
//! discarded; one arriving exactly at it plays. Missing sequence numbers are lost; repeated ones
//! are duplicates, and only their earliest copy counts.

use std::collections::BTreeMap;
use std::time::Duration;

use ontime_rtp::{FRAME, FRAME_MS};

use crate::burst_gap::{rfc3611_fraction, BurstGapCounter, BurstGapMetrics, GMIN_DEFAULT};

pub use crate::live::DEFAULT_REPLAY_DEPTH;

/// What happened to one received (unique) packet in a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketOutcome {
    /// Arrived by its playout time and was played.
    Played,
    /// Arrived after its playout time and was thrown away.
    Discarded,
}

/// Which buffer a report describes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReplayModel {
    /// Fixed depth.
    Fixed {
        /// The buffer depth `D`.
        depth: Duration,
    },
    /// The adaptive buffer of [`crate::live`] with this configuration.
    Adaptive(crate::live::JitterConfig),
}

/// Results of replaying one trace.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// The buffer replayed against.
    pub model: ReplayModel,
    /// Rows received, duplicates included.
    pub packets: u64,
    /// Rows whose sequence number was already seen.
    pub duplicates: u64,
    /// Highest minus lowest sequence index, plus one (RFC 3550 A.3).
    pub expected: u64,
    /// Unique packets played.
    pub played: u64,
    /// Unique packets that arrived too late and were discarded.
    pub discarded: u64,
    /// Sequence numbers never received.
    pub lost: u64,
    /// Longest run of consecutive discards in sequence order; missing packets neither break nor
    /// extend a run.
    pub max_discard_run: u64,
    /// RFC 3611 burst/gap metrics over the expected packets (lost and discarded alike), Gmin 16.
    pub burst_gap: BurstGapMetrics,
    /// Mean playout delay of played packets: playout time minus `A0 + i·20 ms`. Equals `D` for a
    /// fixed buffer; for the adaptive one it is the delay the buffer added on average.
    pub mean_playout_delay: Duration,
    /// Largest playout delay of a played packet.
    pub max_playout_delay: Duration,
    /// Concealment frames an adaptive buffer inserted to grow its delay (0 for a fixed buffer).
    pub stretch_frames: u64,
    /// Outcome of every unique received packet, by sequence index, in ascending order.
    pub outcomes: Vec<(u64, PacketOutcome)>,
}

impl ReplayReport {
    /// Unique packets received (`played + discarded`).
    pub fn received_unique(&self) -> u64 {
        self.played + self.discarded
    }
    /// Discarded packets over expected packets (duplicates excluded, RFC 3611 §4.7.1).
    pub fn discard_rate(&self) -> f64 {
        ratio(self.discarded, self.expected)
    }
    /// [`Self::discard_rate`] ×256, capped at 255 (RFC 3611 §4.7.1).
    pub fn discard_rate_rfc3611(&self) -> u8 {
        rfc3611_fraction(self.discarded, self.expected)
    }
    /// Lost packets over expected packets.
    pub fn loss_rate(&self) -> f64 {
        ratio(self.lost, self.expected)
    }
    /// [`Self::loss_rate`] ×256, capped at 255 (RFC 3611 §4.7.1).
    pub fn loss_rate_rfc3611(&self) -> u8 {
        rfc3611_fraction(self.lost, self.expected)
    }
}

fn ratio(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

/// `n` frames of 20 ms as a duration (saturating far beyond any real trace).
pub(crate) fn frames(n: u64) -> Duration {
    duration_from_nanos(FRAME.as_nanos().saturating_mul(u128::from(n)))
}

pub(crate) fn duration_from_nanos(ns: u128) -> Duration {
    let secs = u64::try_from(ns / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (ns % 1_000_000_000) as u32)
}

/// Sender lateness to arrival times on a perfect network: packet `seq` left (and arrived) at
/// `seq·20 ms + lateness`.
pub fn arrivals_from_lateness(lateness: &[(u64, Duration)]) -> Vec<(u64, Duration)> {
    lateness
        .iter()
        .map(|&(seq, late)| (seq, frames(seq).saturating_add(late)))
        .collect()
}

/// Earliest arrival per sequence index, plus the number of duplicate rows.
fn unique_arrivals(arrivals: &[(u64, Duration)]) -> (BTreeMap<u64, Duration>, u64) {
    let mut first: BTreeMap<u64, Duration> = BTreeMap::new();
    let mut duplicates = 0;
    for &(seq, at) in arrivals {
        match first.entry(seq) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(at);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                duplicates += 1;
                if at < *o.get() {
                    o.insert(at);
                }
            }
        }
    }
    (first, duplicates)
}

/// Replays `arrivals` (`(sequence index, arrival time)`, any order, duplicates allowed) against
/// a fixed buffer of `depth`. Sequence indices must already be extended past 16-bit wrap (see
/// [`crate::seq::extend_sequence_numbers`]).
pub fn replay_fixed(depth: Duration, arrivals: &[(u64, Duration)]) -> ReplayReport {
    let (unique, duplicates) = unique_arrivals(arrivals);
    let model = ReplayModel::Fixed { depth };
    let Some((&first_seq, &a0)) = unique.iter().next() else {
        return summarize(model, 0, 0, Vec::new(), &[], 0);
    };
    let base = a0.saturating_add(depth).as_nanos();
    let frame_ns = FRAME.as_nanos();
    let outcomes: Vec<(u64, PacketOutcome)> = unique
        .iter()
        .map(|(&seq, &at)| {
            let play_at = base.saturating_add(frame_ns.saturating_mul(u128::from(seq - first_seq)));
            let outcome = if at.as_nanos() > play_at {
                PacketOutcome::Discarded
            } else {
                PacketOutcome::Played
            };
            (seq, outcome)
        })
        .collect();
    let delays = vec![
        depth;
        outcomes
            .iter()
            .filter(|o| o.1 == PacketOutcome::Played)
            .count()
    ];
    summarize(
        model,
        arrivals.len() as u64,
        duplicates,
        outcomes,
        &delays,
        0,
    )
}

/// [`replay_fixed`] on sender lateness values (`(sequence index, lateness)`), via
/// [`arrivals_from_lateness`].
pub fn replay_fixed_lateness(depth: Duration, lateness: &[(u64, Duration)]) -> ReplayReport {
    replay_fixed(depth, &arrivals_from_lateness(lateness))
}

/// Replays `arrivals` through the live adaptive [`JitterBuffer`](crate::live::JitterBuffer) with
/// `cfg`, popping exactly at each deadline the buffer announces, as a caller's phone would.
///
/// Packets are fed in arrival order (ties in row order) as 20 ms PCMU frames with timestamps
/// `seq·160`, so the report is the same definition as [`replay_fixed`] with the buffer's own
/// decisions: `played` counts frames it played, `discarded` the unique packets it did not, and
/// the playout delays are measured against the same `A0 + i·20 ms` schedule.
pub fn replay_adaptive(
    cfg: crate::live::JitterConfig,
    arrivals: &[(u64, Duration)],
) -> crate::Result<ReplayReport> {
    use crate::live::{JitterBuffer, Playout, PushOutcome, RtpPacketInfo};
    use ontime_rtp::{FRAME_BYTES, PT_PCMU, TIMESTAMP_STEP};

    let mut jb = JitterBuffer::new(cfg)?;
    let (unique, duplicates) = unique_arrivals(arrivals);
    let model = ReplayModel::Adaptive(cfg);
    let Some((&first_seq, &a0)) = unique.iter().next() else {
        return Ok(summarize(model, 0, 0, Vec::new(), &[], 0));
    };
    let mut order: Vec<usize> = (0..arrivals.len()).collect();
    order.sort_by_key(|&k| (arrivals[k].1, k));

    let payload = [0xFFu8; FRAME_BYTES];
    let mut seq_of_index: std::collections::HashMap<u64, u64> = Default::default();
    let mut played: std::collections::HashSet<u64> = Default::default();
    let mut delays = Vec::new();
    let mut next = 0usize;
    let a0_ns = a0.as_nanos();
    loop {
        let deadline = jb.poll_timeout();
        let arrival = order.get(next).map(|&k| arrivals[k]);
        // An arrival at the very deadline is in time (the fixed model's rule), so it goes first.
        if let Some((seq, at)) = arrival.filter(|&(_, at)| deadline.is_none_or(|d| at <= d)) {
            let pkt = RtpPacketInfo {
                sequence_number: seq as u16,
                timestamp: (seq as u32).wrapping_mul(TIMESTAMP_STEP),
                marker: next == 0,
                ssrc: 1,
                payload_type: PT_PCMU,
                payload: &payload,
            };
            if let PushOutcome::Buffered { index } = jb.push(&pkt, at)? {
                seq_of_index.insert(index, seq);
            }
            next += 1;
            continue;
        }
        let Some(d) = deadline else { break };
        if arrival.is_none() && jb.buffered() == 0 {
            break;
        }
        loop {
            match jb.pop(d) {
                Playout::Nothing => break,
                Playout::Frame(f) => {
                    if let Some(&seq) = seq_of_index.get(&f.index) {
                        played.insert(seq);
                        let nominal = a0_ns + FRAME.as_nanos() * u128::from(seq - first_seq);
                        delays.push(duration_from_nanos(d.as_nanos().saturating_sub(nominal)));
                    }
                }
                Playout::Conceal(_) | Playout::Silence => {}
            }
        }
    }
    let outcomes = unique
        .keys()
        .map(|&seq| {
            let o = if played.contains(&seq) {
                PacketOutcome::Played
            } else {
                PacketOutcome::Discarded
            };
            (seq, o)
        })
        .collect();
    let stretch = jb.counters().stretch_frames;
    Ok(summarize(
        model,
        arrivals.len() as u64,
        duplicates,
        outcomes,
        &delays,
        stretch,
    ))
}

/// [`replay_adaptive`] on sender lateness values, via [`arrivals_from_lateness`].
pub fn replay_adaptive_lateness(
    cfg: crate::live::JitterConfig,
    lateness: &[(u64, Duration)],
) -> crate::Result<ReplayReport> {
    replay_adaptive(cfg, &arrivals_from_lateness(lateness))
}

/// Builds a report from per-packet outcomes (ascending unique sequence indices) and the playout
/// delays of played packets.
pub(crate) fn summarize(
    model: ReplayModel,
    packets: u64,
    duplicates: u64,
    outcomes: Vec<(u64, PacketOutcome)>,
    playout_delays: &[Duration],
    stretch_frames: u64,
) -> ReplayReport {
    let mut counter = BurstGapCounter::new(GMIN_DEFAULT);
    let (mut played, mut discarded, mut run, mut max_run) = (0u64, 0u64, 0u64, 0u64);
    let mut prev: Option<u64> = None;
    for &(seq, outcome) in &outcomes {
        if let Some(p) = prev {
            counter.record_losses(seq - p - 1);
        }
        prev = Some(seq);
        match outcome {
            PacketOutcome::Played => {
                played += 1;
                run = 0;
                counter.record(true);
            }
            PacketOutcome::Discarded => {
                discarded += 1;
                run += 1;
                max_run = max_run.max(run);
                counter.record(false);
            }
        }
    }
    let expected = match (outcomes.first(), outcomes.last()) {
        (Some(f), Some(l)) => l.0 - f.0 + 1,
        _ => 0,
    };
    let (mean, max) = if playout_delays.is_empty() {
        (Duration::ZERO, Duration::ZERO)
    } else {
        let total: u128 = playout_delays.iter().map(Duration::as_nanos).sum();
        let mean = duration_from_nanos(total / playout_delays.len() as u128);
        (
            mean,
            playout_delays.iter().copied().max().unwrap_or_default(),
        )
    };
    ReplayReport {
        model,
        packets,
        duplicates,
        expected,
        played,
        discarded,
        lost: expected - played - discarded,
        max_discard_run: max_run,
        burst_gap: counter.metrics_for_frame_ms(FRAME_MS),
        mean_playout_delay: mean,
        max_playout_delay: max,
        stretch_frames,
        outcomes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn on_time_trace_plays_everything() {
        let lateness: Vec<_> = (0..100).map(|s| (s, ms(1))).collect();
        let r = replay_fixed_lateness(DEFAULT_REPLAY_DEPTH, &lateness);
        assert_eq!(
            (r.played, r.discarded, r.lost, r.expected),
            (100, 0, 0, 100)
        );
        assert_eq!(r.mean_playout_delay, DEFAULT_REPLAY_DEPTH);
    }

    #[test]
    fn exactly_at_playout_time_plays() {
        // Packet 1 plays at 0 + 40 + 20 = 60 ms; arriving at 60 plays, at 60.001 is discarded.
        let r = replay_fixed(ms(40), &[(0, ms(0)), (1, ms(60))]);
        assert_eq!(r.discarded, 0);
        let r = replay_fixed(
            ms(40),
            &[(0, ms(0)), (1, ms(60) + Duration::from_micros(1))],
        );
        assert_eq!(r.discarded, 1);
    }

    #[test]
    fn duplicates_and_missing() {
        let r = replay_fixed(ms(40), &[(5, ms(0)), (5, ms(1)), (8, ms(60))]);
        assert_eq!((r.packets, r.duplicates, r.expected, r.lost), (3, 1, 4, 2));
        assert_eq!((r.played, r.discarded), (2, 0));
    }
}
