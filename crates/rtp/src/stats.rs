//! RFC 3550 receiver statistics, sans-IO: A.1 sequence validation, A.3 cumulative and fractional
//! loss, A.8 interarrival jitter — the numbers an RTCP receiver report block carries.
//!
//! Also [`StreamAnalysis`], which reproduces the per-stream figures of Wireshark's RTP stream
//! analysis (`tshark -z rtp,streams`: packets, lost, max delta, mean and max jitter) so captures
//! can be compared with the tool operators already trust.

use std::time::Duration;

use crate::packet::timestamp_delta;
use crate::rtcp::ReceptionReport;

/// RFC 3550 A.1: a forward jump of at least this many sequence numbers is not accepted at once.
pub const MAX_DROPOUT: u16 = 3000;
/// RFC 3550 A.1: packets at most this many sequence numbers behind are late, not a restart.
pub const MAX_MISORDER: u16 = 100;
/// RFC 3550 A.1: sequential packets needed before a source is valid.
pub const MIN_SEQUENTIAL: u16 = 2;
/// RTP sequence number space.
const RTP_SEQ_MOD: u32 = 1 << 16;
/// Probation packets remembered so they can be counted once the source is valid. Probation
/// normally lasts two packets (a few more when the first ones are reordered); a source that stays
/// on probation longer is mostly noise, and only its latest packets are kept.
const PROBATION_KEPT: usize = 16;

/// What A.1 made of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceVerdict {
    /// Counted as received (in order, late, or duplicate).
    Valid,
    /// The source is still on probation (fewer than [`MIN_SEQUENTIAL`] in-order packets); the
    /// packet is counted when the source becomes valid, if it belongs to the validated stream.
    Probation,
    /// A large jump: held until the next packet confirms it (then the stats restart).
    BadSequence,
    /// The jump was confirmed: statistics restarted (A.1 `init_seq`) at the packet that announced
    /// it, and this one is counted after it.
    Restarted,
}

/// RFC 3550 receiver statistics of one source (SSRC), fed packet by packet.
///
/// Arrival times are a `Duration` since any fixed origin (e.g. the call's start); the RTP clock
/// rate converts them to timestamp units for A.8.
///
/// Counts follow A.3's definitions: the base is the first sequence number received, expected is
/// the extended highest sequence − base + 1, and every packet is received, duplicates and late
/// ones included (so the cumulative loss can be negative). A.1's probation and jump rules decide
/// which packets belong to the stream; the packets of the probation are counted once it ends
/// (A.1's code restarts the counts at its last packet instead, and misses a loss or a late packet
/// just before it).
#[derive(Debug, Clone)]
pub struct ReceiverStats {
    clock_rate_hz: u32,
    seen_any: bool,
    max_seq: u16,
    cycles: u32,
    base_seq: u32,
    bad_seq: u32,
    probation: u16,
    // Sequence numbers seen on probation, in arrival order (the latest PROBATION_KEPT).
    probation_seqs: [u16; PROBATION_KEPT],
    probation_len: usize,
    received: u64,
    expected_prior: u64,
    received_prior: u64,
    // A.8 state: previous packet's arrival (timestamp units) and RTP timestamp.
    last_arrival_units: Option<(i128, u32)>,
    jitter_units: f64,
    last_sr: Option<(u32, Duration)>,
}

impl ReceiverStats {
    /// Statistics for a source whose RTP clock runs at `clock_rate_hz` (8000 for G.711).
    pub fn new(clock_rate_hz: u32) -> Self {
        ReceiverStats {
            clock_rate_hz: clock_rate_hz.max(1),
            seen_any: false,
            max_seq: 0,
            cycles: 0,
            base_seq: 0,
            bad_seq: RTP_SEQ_MOD + 1,
            probation: MIN_SEQUENTIAL,
            probation_seqs: [0; PROBATION_KEPT],
            probation_len: 0,
            received: 0,
            expected_prior: 0,
            received_prior: 0,
            last_arrival_units: None,
            jitter_units: 0.0,
            last_sr: None,
        }
    }

    /// Feeds one RTP packet: sequence number, RTP timestamp, and when it arrived.
    pub fn on_packet(
        &mut self,
        sequence: u16,
        rtp_timestamp: u32,
        arrival: Duration,
    ) -> SequenceVerdict {
        self.update_jitter(rtp_timestamp, arrival);
        if !self.seen_any {
            // A.1: a new source starts on probation with max_seq = seq - 1.
            self.seen_any = true;
            self.init_seq(sequence);
            self.max_seq = sequence.wrapping_sub(1);
            self.probation = MIN_SEQUENTIAL;
            self.probation_len = 0;
        }
        self.update_seq(sequence)
    }

    fn init_seq(&mut self, sequence: u16) {
        self.base_seq = u32::from(sequence);
        self.max_seq = sequence;
        self.bad_seq = RTP_SEQ_MOD + 1;
        self.cycles = 0;
        self.received = 0;
        self.received_prior = 0;
        self.expected_prior = 0;
    }

    // RFC 3550 A.1 `update_seq`, except that the packets seen on probation are counted once the
    // source is valid (see `end_probation`) and a confirmed restart counts the packet that
    // announced it.
    fn update_seq(&mut self, sequence: u16) -> SequenceVerdict {
        if self.probation > 0 {
            if sequence == self.max_seq.wrapping_add(1) {
                self.probation -= 1;
                self.max_seq = sequence;
                if self.probation == 0 {
                    return self.end_probation(sequence);
                }
            } else {
                self.probation = MIN_SEQUENTIAL - 1;
                self.max_seq = sequence;
            }
            self.remember_probation(sequence);
            return SequenceVerdict::Probation;
        }
        self.count(sequence)
    }

    // A.1's rules for a valid source.
    fn count(&mut self, sequence: u16) -> SequenceVerdict {
        let mut udelta = sequence.wrapping_sub(self.max_seq);
        let mut verdict = SequenceVerdict::Valid;
        if udelta >= MAX_DROPOUT && u32::from(udelta) <= RTP_SEQ_MOD - u32::from(MAX_MISORDER) {
            // A very large jump: accept only if the next packet follows it (the sender restarted).
            if u32::from(sequence) != self.bad_seq {
                self.bad_seq = (u32::from(sequence) + 1) & (RTP_SEQ_MOD - 1);
                return SequenceVerdict::BadSequence;
            }
            // A.1 restarts at this packet, leaving out the one that announced the jump; A.3's
            // base is the first sequence received, so the new statistics start at that one, and
            // this packet follows it in order.
            self.init_seq(sequence.wrapping_sub(1));
            self.received = 1;
            udelta = 1;
            verdict = SequenceVerdict::Restarted;
        }
        if udelta < MAX_DROPOUT {
            // In order, with a permissible gap; count a wrap.
            if sequence < self.max_seq {
                self.cycles += RTP_SEQ_MOD;
            }
            self.max_seq = sequence;
        }
        // else: duplicate or reordered packet — counted as received (A.3).
        self.received += 1;
        verdict
    }

    fn remember_probation(&mut self, sequence: u16) {
        if self.probation_len == PROBATION_KEPT {
            self.probation_seqs.copy_within(1.., 0);
            self.probation_len -= 1;
        }
        self.probation_seqs[self.probation_len] = sequence;
        self.probation_len += 1;
    }

    // The source just became valid at `sequence`. A.1 would restart the statistics here, so a
    // packet lost between the first packet and this one went uncounted, and a packet from before
    // this one arriving late counted as one more received than expected: the cumulative loss came
    // out one short. A.3's base is the first sequence number received, so the statistics start at
    // the first probation packet that belongs to this stream (within A.1's limits of this packet)
    // and count it and every later one, in arrival order, by A.1's rules for a valid source.
    // Earlier probation packets were noise and stay uncounted.
    fn end_probation(&mut self, sequence: u16) -> SequenceVerdict {
        let kept = self.probation_seqs;
        let kept = &kept[..self.probation_len];
        self.probation_len = 0;
        let belongs = |p: &u16| {
            sequence.wrapping_sub(*p) < MAX_DROPOUT || p.wrapping_sub(sequence) <= MAX_MISORDER
        };
        let Some(first) = kept.iter().position(belongs) else {
            self.init_seq(sequence);
            self.received = 1;
            return SequenceVerdict::Valid;
        };
        self.init_seq(kept[first]);
        self.received = 1;
        for p in kept[first + 1..].iter().filter(|p| belongs(p)) {
            self.count(*p);
        }
        self.count(sequence)
    }

    // RFC 3550 A.8, with arrival converted to timestamp units. Computed for every data packet in
    // order of arrival (§6.4.1), probation included.
    fn update_jitter(&mut self, rtp_timestamp: u32, arrival: Duration) {
        let arrival_units =
            arrival.as_nanos() as i128 * i128::from(self.clock_rate_hz) / 1_000_000_000;
        if let Some((last_arrival, last_ts)) = self.last_arrival_units {
            // D(i-1,i) = (Rj - Ri) - (Sj - Si), RTP timestamps compared across the wrap.
            let d = (arrival_units - last_arrival)
                - i128::from(timestamp_delta(last_ts, rtp_timestamp));
            let d = d.unsigned_abs() as f64;
            self.jitter_units += (d - self.jitter_units) / 16.0;
        }
        self.last_arrival_units = Some((arrival_units, rtp_timestamp));
    }

    /// Whether the source passed probation (A.1).
    pub fn is_valid(&self) -> bool {
        self.seen_any && self.probation == 0
    }

    /// Packets counted as received since the (last) start, duplicates and late ones included; 0
    /// before the source is valid.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Extended highest sequence number received (cycles × 65536 + max seq).
    pub fn extended_max_sequence(&self) -> u32 {
        self.cycles.wrapping_add(u32::from(self.max_seq))
    }

    /// Packets expected (A.3): extended max − base + 1, the base being the first sequence number
    /// received; 0 before the source is valid.
    pub fn expected(&self) -> u64 {
        if !self.is_valid() {
            return 0;
        }
        (u64::from(self.cycles) + u64::from(self.max_seq) + 1)
            .saturating_sub(u64::from(self.base_seq))
    }

    /// Cumulative packets lost (A.3): expected − received; negative when duplicates arrived.
    pub fn cumulative_lost(&self) -> i64 {
        self.expected() as i64 - self.received as i64
    }

    /// Interarrival jitter in RTP timestamp units (A.8, floating-point form).
    pub fn jitter_units(&self) -> f64 {
        self.jitter_units
    }

    /// Interarrival jitter in milliseconds.
    pub fn jitter_ms(&self) -> f64 {
        self.jitter_units * 1000.0 / f64::from(self.clock_rate_hz)
    }

    /// The loss and jitter fields of an RTCP report block, and starts a new reporting interval
    /// (A.3 `expected_prior`/`received_prior`).
    pub fn report(&mut self) -> ReceptionReport {
        let expected = self.expected();
        let expected_interval = expected.saturating_sub(self.expected_prior);
        self.expected_prior = expected;
        let received_interval = self.received.saturating_sub(self.received_prior);
        self.received_prior = self.received;
        let lost_interval = expected_interval as i64 - received_interval as i64;
        let fraction_lost = if expected_interval == 0 || lost_interval <= 0 {
            0
        } else {
            ((lost_interval << 8) / expected_interval as i64).min(255) as u8
        };
        ReceptionReport {
            fraction_lost,
            // A.3: clamp to the signed 24-bit field.
            cumulative_lost: self.cumulative_lost().clamp(-0x80_0000, 0x7F_FFFF) as i32,
            extended_highest_sequence: self.extended_max_sequence(),
            jitter: self.jitter_units as u32,
        }
    }
}

impl ReceiverStats {
    /// Records a sender report from this source: the middle 32 bits of its NTP timestamp and
    /// when it arrived, for the LSR/DLSR fields of the next report block (RFC 3550 §6.4.1).
    pub fn on_sender_report(&mut self, ntp_middle_32: u32, arrival: Duration) {
        self.last_sr = Some((ntp_middle_32, arrival));
    }

    /// A complete report block for this source at time `now` (same origin as packet arrivals):
    /// [`report`](Self::report) plus LSR and DLSR (0 when no SR was received). Starts a new
    /// reporting interval.
    pub fn report_block(&mut self, ssrc: u32, now: Duration) -> crate::rtcp::ReportBlock {
        let reception = self.report();
        let (last_sr, dlsr) = match self.last_sr {
            Some((lsr, at)) => (lsr, crate::rtcp::to_dlsr_units(now.saturating_sub(at))),
            None => (0, 0),
        };
        crate::rtcp::ReportBlock::from_reception(ssrc, reception, last_sr, dlsr)
    }
}

/// RTP clock rate of a static payload type (RFC 3551 §6 table), `None` for dynamic or unknown.
pub const fn static_clock_rate(payload_type: u8) -> Option<u32> {
    match payload_type {
        0 | 3 | 4 | 5 | 7 | 8 | 9 | 12 | 13 | 15 | 18 | 19 => Some(8000),
        6 => Some(16000),
        10 | 11 => Some(44100),
        16 => Some(11025),
        17 => Some(22050),
        14 | 25 | 26 | 28 | 31 | 32 | 33 | 34 => Some(90000),
        _ => None,
    }
}

const fn is_comfort_noise(payload_type: u8) -> bool {
    // 13 (RFC 3389) and the old value 19.
    matches!(payload_type, 13 | 19)
}

/// Per-stream figures as Wireshark's RTP stream analysis reports them (`tshark -z rtp,streams`).
///
/// Written to agree with tshark 4.0 (checked against it on captures, see
/// `tests/rtp_stats_vs_tshark.rs`), whose rules differ from a plain RFC 3550 receiver:
/// - jitter is the RFC 3550 §6.4.1 estimator in milliseconds at the payload's static clock rate;
///   the arrival reference is the previous packet, the media-time reference the previous packet
///   *with a known clock* — dynamic payload types (telephone-event) have none, so the audio
///   packet after a DTMF event sees a jump;
/// - a packet is "in time order" when its timestamp is not before the stream's first one;
/// - max delta and mean/max jitter count "regular" packets only: not the first, not marked, not
///   comfort noise, not right after comfort noise, in time order;
/// - the mean is Wireshark's running mean weighted by the packet count so far;
/// - lost = last sequence (extended by the wraps seen) − first sequence + 1 − packets.
#[derive(Debug, Clone, Default)]
pub struct StreamAnalysis {
    packets: u64,
    start_seq: u16,
    stop_seq: u16,
    seq_cycles: u32,
    under: bool,
    first_ts: u32,
    // Extended timestamp of the last packet (wrap tracking) and the media-time reference.
    last_ext_ts: i64,
    ref_ext_ts: Option<i64>,
    ref_time_ms: f64,
    previous_pt: u8,
    delta_ms: f64,
    jitter_ms: f64,
    max_delta_ms: f64,
    mean_delta_ms: f64,
    max_jitter_ms: f64,
    mean_jitter_ms: f64,
}

impl StreamAnalysis {
    /// An empty analysis.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one packet of the stream in capture order.
    pub fn on_packet(
        &mut self,
        sequence: u16,
        rtp_timestamp: u32,
        marker: bool,
        payload_type: u8,
        arrival: Duration,
    ) {
        let time_ms = arrival.as_secs_f64() * 1000.0;
        let clock_rate = if payload_type < 96 {
            static_clock_rate(payload_type)
        } else {
            None
        };
        if self.packets == 0 {
            self.start_seq = sequence;
            self.stop_seq = sequence;
            self.first_ts = rtp_timestamp;
            self.last_ext_ts = i64::from(rtp_timestamp);
            self.ref_ext_ts = clock_rate.map(|_| self.last_ext_ts);
            self.ref_time_ms = time_ms;
            self.previous_pt = payload_type;
            self.packets = 1;
            return;
        }
        // Extend the timestamp across wraps relative to the previous packet.
        let ext_ts =
            self.last_ext_ts + i64::from(timestamp_delta(self.last_ext_ts as u32, rtp_timestamp));
        self.last_ext_ts = ext_ts;
        let in_time_order = timestamp_delta(self.first_ts, rtp_timestamp) >= 0;

        // Sequence cycles: a number below the first one while in time order starts a cycle;
        // rising above it again ends the "under" state.
        if in_time_order
            && !self.under
            && (sequence < self.start_seq || (sequence == 0 && self.stop_seq == 65535))
        {
            self.seq_cycles += 1;
            self.under = true;
        } else if in_time_order && self.under && sequence > self.start_seq {
            self.under = false;
        }

        let comfort_noise = is_comfort_noise(payload_type);
        let follows_comfort_noise = is_comfort_noise(self.previous_pt);
        self.previous_pt = payload_type;

        let mut current_jitter = 0.0;
        if in_time_order {
            self.delta_ms = time_ms - self.ref_time_ms;
            if let Some(rate) = clock_rate {
                if let Some(ref_ts) = self.ref_ext_ts {
                    // Wireshark divides by the integer kHz rate.
                    let nominal_ms = (ext_ts - ref_ts) as f64 / f64::from(rate / 1000);
                    let diff = (time_ms - (self.ref_time_ms + nominal_ms)).abs();
                    current_jitter = (15.0 * self.jitter_ms + diff) / 16.0;
                    self.jitter_ms = current_jitter;
                }
                self.ref_ext_ts = Some(ext_ts);
            }
        }

        let regular = !marker && !comfort_noise && !follows_comfort_noise && in_time_order;
        if regular {
            let n = self.packets as f64;
            self.max_delta_ms = self.max_delta_ms.max(self.delta_ms);
            self.mean_delta_ms = (self.mean_delta_ms * (n - 1.0) + self.delta_ms) / n;
            if clock_rate.is_some() {
                self.max_jitter_ms = self.max_jitter_ms.max(self.jitter_ms);
                self.mean_jitter_ms = (self.mean_jitter_ms * (n - 1.0) + current_jitter) / n;
            }
        }
        if in_time_order {
            self.ref_time_ms = time_ms;
        }
        self.stop_seq = sequence;
        self.packets += 1;
    }

    /// Packets seen.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Lost as Wireshark counts it (negative with duplicates).
    pub fn lost(&self) -> i64 {
        if self.packets == 0 {
            return 0;
        }
        let expected = i64::from(self.stop_seq) + i64::from(self.seq_cycles) * 65536
            - i64::from(self.start_seq)
            + 1;
        expected - self.packets as i64
    }

    /// Largest arrival gap between regular consecutive packets, ms.
    pub fn max_delta_ms(&self) -> f64 {
        self.max_delta_ms
    }

    /// Mean arrival gap, ms (Wireshark's running mean).
    pub fn mean_delta_ms(&self) -> f64 {
        self.mean_delta_ms
    }

    /// Latest jitter estimate, ms.
    pub fn jitter_ms(&self) -> f64 {
        self.jitter_ms
    }

    /// Largest jitter estimate over regular packets, ms.
    pub fn max_jitter_ms(&self) -> f64 {
        self.max_jitter_ms
    }

    /// Mean jitter, ms (Wireshark's running mean).
    pub fn mean_jitter_ms(&self) -> f64 {
        self.mean_jitter_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn probation_then_valid_and_loss() {
        let mut s = ReceiverStats::new(8000);
        assert_eq!(s.on_packet(100, 0, ms(0)), SequenceVerdict::Probation);
        assert_eq!(s.on_packet(101, 160, ms(20)), SequenceVerdict::Valid);
        assert!(s.is_valid());
        // 102 lost.
        assert_eq!(s.on_packet(103, 480, ms(60)), SequenceVerdict::Valid);
        // The base is the first packet received (100), probation included.
        assert_eq!(s.expected(), 4);
        assert_eq!(s.received(), 3);
        assert_eq!(s.cumulative_lost(), 1);
        let r = s.report();
        assert_eq!(r.fraction_lost, 64); // 1/4 × 256
        assert_eq!(r.extended_highest_sequence, 103);
        // Next interval without loss: fraction 0, cumulative stays.
        s.on_packet(104, 640, ms(80));
        let r = s.report();
        assert_eq!((r.fraction_lost, r.cumulative_lost), (0, 1));
    }

    #[test]
    fn report_block_carries_lsr_and_dlsr() {
        let mut s = ReceiverStats::new(8000);
        s.on_packet(1, 0, ms(0));
        s.on_packet(2, 160, ms(20));
        let none = s.report_block(7, ms(30));
        assert_eq!((none.last_sr, none.delay_since_last_sr), (0, 0));
        s.on_sender_report(0xb705_2000, ms(1000));
        let b = s.report_block(7, ms(6250));
        assert_eq!(b.ssrc, 7);
        assert_eq!(b.last_sr, 0xb705_2000);
        assert_eq!(b.delay_since_last_sr, 0x0005_4000); // 5.25 s
        assert_eq!(b.extended_highest_sequence, 2);
    }

    #[test]
    fn duplicates_make_loss_negative() {
        let mut s = ReceiverStats::new(8000);
        for (i, seq) in [1u16, 2, 3, 3, 3, 4].iter().enumerate() {
            s.on_packet(*seq, u32::from(*seq) * 160, ms(20 * i as u64));
        }
        assert_eq!(s.expected(), 4); // base 1 .. 4
        assert_eq!(s.received(), 6);
        assert_eq!(s.cumulative_lost(), -2);
        assert_eq!(s.report().fraction_lost, 0);
    }

    #[test]
    fn wrap_counts_a_cycle() {
        let mut s = ReceiverStats::new(8000);
        let mut seq = 65533u16;
        for i in 0..6u64 {
            s.on_packet(seq, i as u32 * 160, ms(20 * i));
            seq = seq.wrapping_add(1);
        }
        assert_eq!(s.extended_max_sequence(), 65536 + 2);
        assert_eq!(s.cumulative_lost(), 0);
    }

    #[test]
    fn big_jump_needs_confirmation_then_restarts() {
        let mut s = ReceiverStats::new(8000);
        s.on_packet(10, 0, ms(0));
        s.on_packet(11, 160, ms(20));
        assert_eq!(
            s.on_packet(20000, 320, ms(40)),
            SequenceVerdict::BadSequence
        );
        assert_eq!(s.on_packet(20001, 480, ms(60)), SequenceVerdict::Restarted);
        // The new statistics start at the packet that announced the jump.
        assert_eq!(s.expected(), 2);
        assert_eq!(s.received(), 2);
        assert_eq!(s.extended_max_sequence(), 20001);
        // A late packet within MAX_MISORDER is counted, not a restart.
        assert_eq!(s.on_packet(19990, 0, ms(80)), SequenceVerdict::Valid);
    }

    #[test]
    fn restart_onto_the_wrap_counts_a_cycle() {
        let mut s = ReceiverStats::new(8000);
        s.on_packet(30000, 0, ms(0));
        s.on_packet(30001, 160, ms(20));
        assert_eq!(
            s.on_packet(65535, 320, ms(40)),
            SequenceVerdict::BadSequence
        );
        assert_eq!(s.on_packet(0, 480, ms(60)), SequenceVerdict::Restarted);
        assert_eq!(s.extended_max_sequence(), 65536);
        assert_eq!((s.expected(), s.received(), s.cumulative_lost()), (2, 2, 0));
    }

    #[test]
    fn noise_before_the_stream_is_not_counted() {
        let mut s = ReceiverStats::new(8000);
        // A stray packet far from the stream that follows: not part of it.
        assert_eq!(s.on_packet(40000, 0, ms(0)), SequenceVerdict::Probation);
        assert_eq!(s.on_packet(500, 160, ms(20)), SequenceVerdict::Probation);
        assert_eq!(s.on_packet(501, 320, ms(40)), SequenceVerdict::Valid);
        assert_eq!((s.expected(), s.received(), s.cumulative_lost()), (2, 2, 0));
        assert_eq!(s.extended_max_sequence(), 501);
    }

    #[test]
    fn jitter_of_a_perfect_stream_is_zero_and_grows_with_variation() {
        let mut s = ReceiverStats::new(8000);
        for i in 0..50u64 {
            s.on_packet(i as u16, i as u32 * 160, ms(20 * i));
        }
        assert_eq!(s.jitter_units(), 0.0);
        // One packet 10 ms late: D = 80 units, J = 80/16 = 5 units = 0.625 ms.
        s.on_packet(50, 50 * 160, ms(1010));
        assert!((s.jitter_units() - 5.0).abs() < 1e-9);
        assert!((s.jitter_ms() - 0.625).abs() < 1e-9);
        assert_eq!(s.report().jitter, 5);
    }

    #[test]
    fn jitter_handles_timestamp_wrap() {
        let mut s = ReceiverStats::new(8000);
        let start = u32::MAX - 200;
        for i in 0..10u32 {
            s.on_packet(i as u16, start.wrapping_add(i * 160), ms(20 * u64::from(i)));
        }
        assert_eq!(s.jitter_units(), 0.0);
    }

    #[test]
    fn analysis_matches_hand_computed_figures() {
        let mut a = StreamAnalysis::new();
        // 20 ms cadence, one packet 5 ms late, then on time again.
        let arrivals = [0u64, 20, 40, 65, 80, 100];
        for (i, t) in arrivals.iter().enumerate() {
            a.on_packet(i as u16, i as u32 * 160, i == 0, 8, ms(*t));
        }
        assert_eq!(a.packets(), 6);
        assert_eq!(a.lost(), 0);
        assert!((a.max_delta_ms() - 25.0).abs() < 1e-9);
        // diffs: 0, 0, 5, 5, 0 → jitter 0, 0, 5/16, (15·5/16 + 5)/16, 15·that/16
        let j3 = 5.0 / 16.0;
        let j4 = (15.0 * j3 + 5.0) / 16.0;
        let j5 = 15.0 * j4 / 16.0;
        assert!((a.max_jitter_ms() - j4).abs() < 1e-9);
        let mean = (0.0 + 0.0 + j3 + j4 + j5) / 5.0;
        assert!((a.mean_jitter_ms() - mean).abs() < 1e-9);
    }
}
