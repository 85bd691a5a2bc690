//! Scenario tests of the live buffer on injected time: one test per case the gateway relies on.

use std::time::Duration;

use ontime_jitter::live::{
    ConcealReason, JitterBuffer, JitterConfig, Playout, PushOutcome, RtpPacketInfo,
    MAX_PAYLOAD_BYTES,
};
use ontime_rtp::{FRAME_BYTES, PT_CN, PT_PCMU, TIMESTAMP_STEP};

const PAYLOAD: [u8; FRAME_BYTES] = [0xFF; FRAME_BYTES];

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// What one pop produced, compactly.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    F(u16),
    C(ConcealReason),
    S,
}

struct Sim {
    jb: JitterBuffer,
    ssrc: u32,
    pt: u8,
    /// (time in ms, output) of everything played so far.
    log: Vec<(u64, Out)>,
    /// (sequence number, `inserted_before`) of every packet played after inserted frames.
    inserted: Vec<(u16, u32)>,
}

impl Sim {
    fn new(cfg: JitterConfig) -> Self {
        Self {
            jb: JitterBuffer::new(cfg).unwrap(),
            ssrc: 0xC0FFEE,
            pt: PT_PCMU,
            log: Vec::new(),
            inserted: Vec::new(),
        }
    }

    fn push_full(&mut self, seq: u16, ts: u32, marker: bool, at_ms: u64) -> PushOutcome {
        self.run_until(at_ms);
        let pkt = RtpPacketInfo {
            sequence_number: seq,
            timestamp: ts,
            marker,
            ssrc: self.ssrc,
            payload_type: self.pt,
            payload: &PAYLOAD,
        };
        self.jb.push(&pkt, ms(at_ms)).unwrap()
    }

    /// Pushes seq with timestamp `seq·160` (relative to `ts0`) at `at_ms`, popping at every
    /// deadline before it first.
    fn push(&mut self, seq: u16, at_ms: u64) -> PushOutcome {
        self.push_full(
            seq,
            u32::from(seq).wrapping_mul(TIMESTAMP_STEP),
            false,
            at_ms,
        )
    }

    /// Pops at every deadline up to and including `t_ms`.
    fn run_until(&mut self, t_ms: u64) {
        while let Some(d) = self.jb.poll_timeout() {
            if d > ms(t_ms) {
                break;
            }
            loop {
                let out = match self.jb.pop(d) {
                    Playout::Nothing => break,
                    Playout::Frame(f) => {
                        if f.inserted_before > 0 {
                            self.inserted.push((f.sequence_number, f.inserted_before));
                        }
                        Out::F(f.sequence_number)
                    }
                    Playout::Conceal(r) => Out::C(r),
                    Playout::Silence => Out::S,
                };
                self.log.push((d.as_millis() as u64, out));
            }
        }
    }

    fn frames(&self) -> Vec<u16> {
        self.log
            .iter()
            .filter_map(|(_, o)| match o {
                Out::F(s) => Some(*s),
                _ => None,
            })
            .collect()
    }

    fn count(&self, want: &Out) -> usize {
        self.log.iter().filter(|(_, o)| o == want).count()
    }

    fn assert_accounted(&self) {
        let c = self.jb.counters();
        assert_eq!(
            c.pushed,
            c.played
                + c.late
                + c.overflow
                + c.flushed
                + c.out_of_range
                + c.duplicates
                + self.jb.buffered() as u64,
            "{c:?}"
        );
    }
}

#[test]
fn nothing_before_first_packet() {
    let mut jb = JitterBuffer::new(JitterConfig::default()).unwrap();
    assert_eq!(jb.pop(ms(1000)), Playout::Nothing);
    assert_eq!(jb.poll_timeout(), None);
    assert_eq!(jb.depth(), Duration::ZERO);
}

#[test]
fn in_order_stream_plays_at_initial_depth() {
    let mut s = Sim::new(JitterConfig::default());
    for seq in 0..10 {
        s.push(seq, u64::from(seq) * 20);
    }
    s.run_until(400);
    assert_eq!(s.frames(), (0..10).collect::<Vec<_>>());
    // First packet at 0 ms plays at 0 + 40 ms initial depth, then every 20 ms (no early shrink).
    assert_eq!(s.log[0], (40, Out::F(0)));
    assert_eq!(s.log[1], (60, Out::F(1)));
    let c = s.jb.counters();
    assert_eq!((c.played, c.lost, c.late, c.duplicates), (10, 0, 0, 0));
    s.assert_accounted();
}

#[test]
fn reordering_within_depth_is_repaired() {
    let mut s = Sim::new(JitterConfig::default());
    s.push(0, 0);
    s.push(2, 40);
    s.push(1, 45); // due at 60: in time despite arriving after 2
    s.push(3, 60);
    s.run_until(200);
    assert_eq!(s.frames(), vec![0, 1, 2, 3]);
    assert_eq!(s.jb.counters().lost, 0);
    s.assert_accounted();
}

#[test]
fn duplicates_are_counted_not_discarded() {
    let mut s = Sim::new(JitterConfig::default());
    s.push(0, 0);
    assert_eq!(s.push(0, 5), PushOutcome::Duplicate); // while buffered
    s.push(1, 20);
    s.run_until(100);
    assert_eq!(s.push(0, 101), PushOutcome::Duplicate); // after it played
    let c = s.jb.counters();
    assert_eq!((c.duplicates, c.late, c.discarded()), (2, 0, 0));
    assert_eq!(s.frames(), vec![0, 1]);
    s.assert_accounted();
}

#[test]
fn missing_packet_is_concealed_and_counted_lost() {
    let mut s = Sim::new(JitterConfig::default());
    for seq in [0u16, 1, 3, 4] {
        s.push(seq, u64::from(seq) * 20);
    }
    s.run_until(200);
    assert_eq!(s.frames(), vec![0, 1, 3, 4]);
    assert_eq!(s.log[2], (80, Out::C(ConcealReason::Missing)));
    let m = s.jb.voip_metrics();
    assert_eq!((m.lost, m.discarded, m.expected), (1, 0, 5));
    // 1/5 × 256 = 51.2
    assert_eq!(m.loss_rate_rfc3611, 51);
    s.assert_accounted();
}

#[test]
fn late_packet_is_discarded_and_moves_from_lost_to_late() {
    let mut s = Sim::new(JitterConfig::default());
    s.push(0, 0);
    s.push(2, 40);
    s.push(3, 60);
    // Packet 1 was due at 60 ms; 2 was buffered, so 1 is declared missing at 60.
    assert_eq!(s.push(1, 75), PushOutcome::Late);
    s.run_until(200);
    assert_eq!(s.frames(), vec![0, 2, 3]);
    let c = s.jb.counters();
    assert_eq!((c.lost, c.late, c.discarded()), (0, 1, 1));
    let m = s.jb.voip_metrics();
    assert_eq!(m.discard_rate_rfc3611, 64); // 1/4 × 256
    assert_eq!(m.loss_rate_rfc3611, 0);
    s.assert_accounted();
}

#[test]
fn sequence_and_timestamp_wrap() {
    let mut s = Sim::new(JitterConfig::default());
    let ts0 = u32::MAX - 200; // the timestamp wraps between the 2nd and 3rd packet
    for (k, seq) in [65534u16, 65535, 0, 1, 2].into_iter().enumerate() {
        let ts = ts0.wrapping_add(k as u32 * TIMESTAMP_STEP);
        s.push_full(seq, ts, k == 0, k as u64 * 20);
    }
    s.run_until(300);
    assert_eq!(s.frames(), vec![65534, 65535, 0, 1, 2]);
    let c = s.jb.counters();
    assert_eq!((c.lost, c.late, c.out_of_range), (0, 0, 0));
    assert_eq!(s.jb.expected(), 5);
    s.assert_accounted();
}

#[test]
fn comfort_noise_gap_is_silence_not_loss() {
    let mut s = Sim::new(JitterConfig::default());
    for seq in 0..5u16 {
        s.push(seq, u64::from(seq) * 20);
    }
    s.pt = PT_CN;
    s.push(5, 100); // CN: the caller stopped talking
    s.pt = PT_PCMU;
    // Next talkspurt 1 s later: seq continues, timestamp jumps, marker set.
    let ts = 6 * TIMESTAMP_STEP + 8000;
    s.push_full(6, ts, true, 1100);
    s.push_full(7, ts + TIMESTAMP_STEP, false, 1120);
    s.run_until(1400);
    assert_eq!(s.frames(), vec![0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(
        s.count(&Out::S) > 30,
        "silence through the gap: {:?}",
        s.log
    );
    // Nothing but frames and silence until the new talkspurt has played.
    let (t7, _) = s.log.iter().find(|(_, o)| *o == Out::F(7)).unwrap();
    assert!(
        s.log
            .iter()
            .all(|(t, o)| t > t7 || matches!(o, Out::F(_) | Out::S)),
        "{:?}",
        s.log
    );
    assert_eq!(s.jb.counters().lost, 0);
    // The talkspurt re-anchors: packet 6 plays within the target of its arrival, not 1 s late.
    let (t6, _) = s.log.iter().find(|(_, o)| *o == Out::F(6)).unwrap();
    assert!((1100..=1100 + 200).contains(t6), "played at {t6}");
    s.assert_accounted();
}

#[test]
fn dtx_without_comfort_noise_stops_concealing() {
    let mut s = Sim::new(JitterConfig::default());
    for seq in 0..5u16 {
        s.push(seq, u64::from(seq) * 20);
    }
    let ts = 5 * TIMESTAMP_STEP + 16000; // 2 s of silence, no CN sent
    s.push_full(5, ts, true, 2100);
    s.run_until(2100);
    assert_eq!(s.frames(), vec![0, 1, 2, 3, 4]);
    let concealed = s.log.iter().filter(|(_, o)| matches!(o, Out::C(_))).count();
    // Grows to max depth (200 ms) and a few frames more, then silence: not 2 s of concealment.
    assert!(concealed <= 10 + 5, "{concealed} concealments: {:?}", s.log);
    assert!(s.count(&Out::S) > 50);
    s.run_until(2400);
    assert_eq!(s.frames(), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(s.jb.counters().lost, 0);
    s.assert_accounted();
}

#[test]
fn marker_with_timestamp_jump_starts_new_talkspurt_at_target() {
    let mut s = Sim::new(JitterConfig::default());
    for seq in 0..50u16 {
        s.push(seq, u64::from(seq) * 20);
    }
    s.run_until(1040);
    // On-time packets: the target is the margin, 20 ms, so the next talkspurt plays at +20 ms.
    assert_eq!(s.jb.target_depth(), ms(20));
    let ts = 50 * TIMESTAMP_STEP + 4000;
    s.push_full(50, ts, true, 1500);
    s.run_until(1600);
    let (t50, _) = s.log.iter().find(|(_, o)| *o == Out::F(50)).unwrap();
    assert_eq!(*t50, 1520);
    s.assert_accounted();
}

#[test]
fn ssrc_change_resets_stream() {
    let mut s = Sim::new(JitterConfig::default());
    s.push(100, 0);
    s.push(101, 20);
    s.push(102, 30);
    s.run_until(45);
    s.ssrc = 0xBEEF;
    s.push_full(7, 123_456, true, 50);
    s.push_full(8, 123_456 + TIMESTAMP_STEP, false, 70);
    s.run_until(300);
    assert_eq!(s.frames(), vec![100, 7, 8]);
    let c = s.jb.counters();
    assert_eq!((c.ssrc_resets, c.flushed), (1, 2));
    assert_eq!(s.jb.expected(), 3 + 2);
    s.assert_accounted();
}

#[test]
fn overflow_drops_oldest() {
    let cfg = JitterConfig {
        capacity_packets: 4,
        ..JitterConfig::default()
    };
    let mut s = Sim::new(cfg);
    for seq in 0..10u16 {
        s.push(seq, 0); // a burst of 10 at once, nothing popped yet (first due at 40 ms)
    }
    let c = s.jb.counters();
    assert_eq!((c.overflow, s.jb.buffered()), (6, 4));
    s.run_until(500);
    assert_eq!(s.frames(), vec![6, 7, 8, 9]);
    assert_eq!(s.jb.voip_metrics().discarded, 6);
    s.assert_accounted();
}

#[test]
fn late_burst_grows_depth_then_shrinks_slowly() {
    let cfg = JitterConfig::default();
    let mut s = Sim::new(cfg);
    // 10 s of 20 ms packets; ticks 100..=105 stall: all sent at once 126 ms after slot 100.
    let mut max_depth_seen = Duration::ZERO;
    for seq in 0..500u16 {
        let slot = u64::from(seq) * 20;
        let at = if (100..=106).contains(&seq) {
            100 * 20 + 126
        } else {
            slot
        };
        s.push(seq, at);
        max_depth_seen = max_depth_seen.max(s.jb.depth());
        assert!(s.jb.depth() <= cfg.max_depth, "depth {:?}", s.jb.depth());
    }
    // Measured while the stream still flows (after it ends, an underrun grows the depth again).
    let depth_at_end = s.jb.depth();
    s.run_until(10_000);
    let c = s.jb.counters();
    // The underrun is absorbed by growing, not by discarding.
    assert_eq!((c.late, c.lost, c.played), (0, 0, 500), "{c:?}");
    // The burst's 126 ms gap is played as stretch, one frame per tick that found nothing, and
    // the depth grows to hold it: 126 ms rounded up to whole 20 ms frames, plus the one frame
    // that was already buffered.
    assert_eq!(c.stretch_frames, 6, "{c:?}");
    assert_eq!(max_depth_seen, ms(140), "grew to {max_depth_seen:?}");
    // 8 s after the burst (window 250 packets = 5 s), it has shrunk back to the floor, one
    // frame at a time: 140 ms down to 20.
    assert_eq!(c.shrink_frames, 7, "{c:?}");
    assert_eq!(depth_at_end, cfg.min_depth, "still {depth_at_end:?} deep");
    let m = s.jb.voip_metrics();
    assert_eq!(m.jb_maximum_ms, 140, "{m:?}");
    assert_eq!(m.jb_abs_max_ms, 200);
    s.assert_accounted();
}

/// A path that grows 30 ms longer mid-talkspurt: the buffer conceals while it grows to wait
/// for the next packet, and that packet, when it plays, says how many frames were inserted for
/// it: none of the sender's time passed in them.
#[test]
fn a_packet_played_after_the_buffer_grew_for_it_counts_the_inserted_frames() {
    let mut s = Sim::new(JitterConfig::default());
    for seq in 0..100u16 {
        let at = u64::from(seq) * 20 + if seq >= 50 { 30 } else { 0 };
        s.push(seq, at);
    }
    s.run_until(1900);
    let c = s.jb.counters();
    assert_eq!((c.lost, c.late, c.stretch_frames), (0, 0, 2), "{c:?}");
    assert_eq!(s.count(&Out::C(ConcealReason::Stretch)), 2);
    // One frame waiting for packet 50 (an underrun: 20 ms of the 30 covered, it arrives
    // within the next), and one before 51 to bring the depth up to the new target.
    assert_eq!(s.inserted, vec![(50, 1), (51, 1)]);
}

/// A caller that stops sending without comfort noise and starts a new talkspurt 300 ms later:
/// the frames played while the buffer grew were the caller's time, so the next talkspurt's
/// first packet counts none.
#[test]
fn a_new_talkspurt_after_the_buffer_grew_counts_nothing_inserted() {
    let mut s = Sim::new(JitterConfig::default());
    for seq in 0..50u16 {
        s.push(seq, u64::from(seq) * 20);
    }
    // The next talkspurt: the timestamp jumps by the 300 ms of the pause, with the marker.
    let resume = 49 * 20 + 300;
    for k in 0..10u16 {
        let seq = 50 + k;
        let ts = (u32::from(seq) + 15) * TIMESTAMP_STEP;
        s.push_full(seq, ts, k == 0, resume + u64::from(k) * 20);
    }
    s.run_until(resume + 400);
    // The pause and the wait for the next talkspurt are played as stretch (counted exactly:
    // a change in how the buffer fills a pause shows here), none of it as loss.
    let c = s.jb.counters();
    assert_eq!((c.stretch_frames, c.lost, c.late), (17, 0, 0), "{c:?}");
    assert_eq!(s.frames(), (0..60).collect::<Vec<_>>());
    assert_eq!(s.inserted, vec![]);
}

#[test]
fn stall_beyond_max_depth_discards_and_respects_max() {
    let cfg = JitterConfig::default();
    let mut s = Sim::new(cfg);
    for seq in 0..200u16 {
        let slot = u64::from(seq) * 20;
        // A 500 ms stall: packets 50..=75 all leave at 1500 ms.
        let at = if (50..=75).contains(&seq) { 1500 } else { slot };
        s.push(seq, at);
        assert!(s.jb.depth() <= cfg.max_depth);
    }
    s.run_until(5000);
    let c = s.jb.counters();
    // 26 packets leave together 500 ms late; the buffer grows to its 200 ms maximum and the
    // 15 the growth cannot cover arrive after their slot: late, the rest played.
    assert_eq!((c.played, c.late), (185, 15), "{c:?}");
    assert_eq!(s.jb.voip_metrics().jb_maximum_ms, 200);
    s.assert_accounted();
}

#[test]
fn oversized_payload_is_a_typed_error() {
    let mut jb = JitterBuffer::new(JitterConfig::default()).unwrap();
    let big = [0u8; MAX_PAYLOAD_BYTES + 1];
    let pkt = RtpPacketInfo {
        sequence_number: 1,
        timestamp: 0,
        marker: false,
        ssrc: 1,
        payload_type: PT_PCMU,
        payload: &big,
    };
    let err = jb.push(&pkt, ms(0)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "RTP payload of 641 bytes exceeds the jitter buffer slot size of 640 bytes"
    );
    assert_eq!(jb.counters().pushed, 0);
}

#[test]
fn sequence_jump_needs_confirmation() {
    let mut s = Sim::new(JitterConfig::default());
    s.push(10, 0);
    s.push(11, 20);
    assert_eq!(s.push(9000, 40), PushOutcome::OutOfRange);
    assert_eq!(s.push(12, 40), PushOutcome::Buffered { index: 65536 + 12 });
    // Two in a row: re-sync onto the new numbering.
    assert_eq!(s.push(20000, 60), PushOutcome::OutOfRange);
    assert!(matches!(s.push(20001, 80), PushOutcome::Buffered { .. }));
    let c = s.jb.counters();
    assert_eq!((c.out_of_range, c.resyncs), (2, 1));
    s.run_until(400);
    assert!(s.frames().contains(&20001));
    s.assert_accounted();
}

#[test]
fn invalid_config_is_rejected() {
    let cfg = JitterConfig {
        min_depth: ms(100),
        max_depth: ms(50),
        ..JitterConfig::default()
    };
    assert!(JitterBuffer::new(cfg).is_err());
}

#[test]
fn sender_clock_jump_resyncs_the_delay_history() {
    let cfg = JitterConfig::default();
    let mut s = Sim::new(cfg);
    for seq in 0..50u16 {
        s.push(seq, u64::from(seq) * 20);
    }
    // The sender's timestamp clock jumps back by 100 s while arrivals continue every 20 ms.
    let back = 100 * 8000u32;
    for seq in 50..100u16 {
        let ts = (u32::from(seq) * TIMESTAMP_STEP).wrapping_sub(back);
        s.push_full(seq, ts, false, u64::from(seq) * 20);
        assert!(s.jb.depth() <= cfg.max_depth, "depth {:?}", s.jb.depth());
    }
    s.run_until(2000);
    assert_eq!(s.frames(), (0..100).collect::<Vec<_>>());
    let c = s.jb.counters();
    assert_eq!((c.late, c.lost), (0, 0), "{c:?}");
    // After re-anchoring, the target reflects the steady stream again, not a 100 s "jitter".
    assert_eq!(s.jb.target_depth(), cfg.min_depth.max(ms(20)));
    s.assert_accounted();
}

/// Pops everything due by `at`, compactly.
fn pop_all(jb: &mut JitterBuffer, at: Duration) -> Vec<Out> {
    let mut out = Vec::new();
    loop {
        match jb.pop(at) {
            Playout::Nothing => return out,
            Playout::Frame(f) => out.push(Out::F(f.sequence_number)),
            Playout::Conceal(r) => out.push(Out::C(r)),
            Playout::Silence => out.push(Out::S),
        }
    }
}

/// A consumer that pops late decides as one that pops at every due time: packet 1 (due 60 ms)
/// arrives at 70 ms and packet 2 at 75, and the consumer pops again only at 110. Popping at
/// 60 it would have found nothing and grown a frame to wait, and packet 1 would have played at
/// 80; so it does, late.
#[test]
fn a_consumer_popping_late_decides_as_one_popping_on_time() {
    // `Sim::push` pops at every due time before it pushes.
    let mut on_time = Sim::new(JitterConfig::default());
    on_time.push(0, 0);
    on_time.push(1, 70);
    on_time.push(2, 75);
    on_time.run_until(110);
    let on_time_outs: Vec<Out> = on_time.log.iter().map(|(_, o)| o.clone()).collect();
    let mut late = Sim::new(JitterConfig::default());
    late.push(0, 0);
    late.run_until(40);
    for (seq, arrival) in [(1u16, 70u64), (2, 75)] {
        let pkt = RtpPacketInfo {
            sequence_number: seq,
            timestamp: u32::from(seq) * TIMESTAMP_STEP,
            marker: false,
            ssrc: late.ssrc,
            payload_type: PT_PCMU,
            payload: &PAYLOAD,
        };
        late.jb.push(&pkt, ms(arrival)).unwrap();
    }
    let mut late_outs: Vec<Out> = late.log.iter().map(|(_, o)| o.clone()).collect();
    late_outs.extend(pop_all(&mut late.jb, ms(110)));
    assert_eq!(
        on_time_outs,
        vec![
            Out::F(0),
            Out::C(ConcealReason::Stretch),
            Out::F(1),
            Out::F(2)
        ]
    );
    assert_eq!(late_outs, on_time_outs);
    assert_eq!(late.jb.counters(), on_time.jb.counters());
}

/// A packet that comes after its due time when a later one had come by then is late whenever
/// the consumer pops: the later one's arrival had declared it lost. Then nothing for 10 s: one
/// pop does not return 500 frames of backlog.
#[test]
fn consumer_popping_late_gets_late_packets_concealed_and_skips_backlog() {
    let mut s = Sim::new(JitterConfig::default());
    s.push(0, 0);
    s.run_until(40);
    // Packet 2 arrives at 55 ms, packet 1 (due 60 ms) at 70 ms; the consumer pops at 100 ms.
    // Packet 1's 50 ms lateness raises the target (p97 + 20 ms = 70 ms): the buffer inserts a
    // frame before packet 2, which arrived in time and plays.
    let two = RtpPacketInfo {
        sequence_number: 2,
        timestamp: 2 * TIMESTAMP_STEP,
        marker: false,
        ssrc: s.ssrc,
        payload_type: PT_PCMU,
        payload: &PAYLOAD,
    };
    let one = RtpPacketInfo {
        sequence_number: 1,
        timestamp: TIMESTAMP_STEP,
        ..two
    };
    s.jb.push(&two, ms(55)).unwrap();
    s.jb.push(&one, ms(70)).unwrap();
    assert_eq!(
        pop_all(&mut s.jb, ms(100)),
        vec![
            Out::C(ConcealReason::Late),
            Out::C(ConcealReason::Stretch),
            Out::F(2)
        ]
    );
    assert_eq!(s.jb.counters().late, 1);
    let mut outputs = 0;
    while s.jb.pop(ms(10_100)) != Playout::Nothing {
        outputs += 1;
        assert!(outputs < 100, "backlog was not skipped");
    }
    // One skip over the 10 s of backlog: the pops at 10.1 s get the one frame due then.
    assert_eq!(outputs, 1);
    assert_eq!(s.jb.counters().timeline_skips, 1);
    s.assert_accounted();
}

/// Opus runs a 48 kHz RTP clock: 960 units per 20 ms frame. The buffer plays it on the same
/// 20 ms grid as G.711 and conceals a missing packet in its slot, when configured for the
/// clock; the payload (not G.711) is taken as one frame whatever its length.
#[test]
fn opus_on_its_48k_clock_plays_every_20_ms_and_conceals_a_gap() {
    let cfg = JitterConfig {
        clock_rate_hz: ontime_rtp::OPUS_CLOCK_HZ,
        ..JitterConfig::default()
    };
    let mut s = Sim::new(cfg);
    s.pt = ontime_rtp::PT_OPUS_OFFER;
    let step = ontime_rtp::Codec::Opus.timestamp_step();
    for seq in [0u16, 1, 2, 4, 5] {
        s.push_full(seq, u32::from(seq) * step, seq == 0, u64::from(seq) * 20);
    }
    s.run_until(300);
    assert_eq!(s.frames(), vec![0, 1, 2, 4, 5]);
    assert_eq!(s.log[0], (40, Out::F(0)));
    assert_eq!(s.log[3], (100, Out::C(ConcealReason::Missing)));
    assert_eq!(s.log[4], (120, Out::F(4)));
    let m = s.jb.voip_metrics();
    assert_eq!((m.lost, m.discarded, m.expected), (1, 0, 6));
    s.assert_accounted();
    // A clock that is not a whole number of kHz is refused.
    let odd = JitterConfig {
        clock_rate_hz: 44_100,
        ..JitterConfig::default()
    };
    assert!(JitterBuffer::new(odd).is_err());
}

/// The smallest buffer the property test found these in: one packet of delay history, two
/// slots, so a single wrong transit in the history or a single overflow decides the depth.
fn tight() -> JitterConfig {
    JitterConfig {
        min_depth: Duration::ZERO,
        capacity_packets: 2,
        window_packets: 1,
        percentile: 50,
        ..JitterConfig::default()
    }
}

/// Half the RTP timestamp range: a jump this far reads as a jump backwards.
const HALF_RANGE: u32 = 1 << 31;

#[test]
fn a_duplicate_carrying_a_jumped_timestamp_does_not_hide_the_jump() {
    let mut s = Sim::new(tight());
    s.push_full(0, 0, false, 0);
    s.run_until(40);
    // Sequence 0 again, played already, now carrying a timestamp half the range away.
    assert_eq!(
        s.push_full(0, HALF_RANGE, false, 40),
        PushOutcome::Duplicate
    );
    // The stream goes on with that timestamp: the jump is the next stored packet's to flag.
    s.push_full(3, HALF_RANGE + 3 * TIMESTAMP_STEP, false, 60);
    s.run_until(60_000);
    assert_eq!(s.frames(), vec![0, 3]);
    // After the last packet the buffer grows to its maximum (10 stretches from 0 to 200 ms),
    // then conceals and falls silent: the stream's end, not a buffer waiting on its own clock.
    let c = s.jb.counters();
    assert_eq!(
        (c.duplicates, c.lost, c.stretch_frames, s.jb.buffered()),
        (1, 2, 10, 0),
        "{c:?}"
    );
    s.assert_accounted();
}

#[test]
fn a_jump_dropped_by_overflow_passes_to_the_packet_that_dropped_it() {
    let mut s = Sim::new(tight());
    s.push_full(0, 0, false, 276);
    // A timestamp half the range away, then the same timeline: with two slots, sequence 3
    // pushes out 0 and the jumped 1, and must carry the jump 1 would have re-anchored on.
    let jumped = HALF_RANGE;
    s.push_full(1, jumped, false, 276);
    for seq in 3..8u16 {
        s.push_full(
            seq,
            jumped + u32::from(seq - 1) * TIMESTAMP_STEP,
            false,
            276,
        );
    }
    s.run_until(60_000);
    assert_eq!(s.frames(), vec![6, 7]);
    // As above: 9 stretches to the maximum depth after the last packet, then silence.
    let c = s.jb.counters();
    assert_eq!(
        (c.overflow, c.lost, c.stretch_frames, s.jb.buffered()),
        (5, 1, 9, 0),
        "{c:?}"
    );
    s.assert_accounted();
}

#[test]
fn a_packet_reordered_across_a_timestamp_jump_leaves_the_history_on_the_played_timeline() {
    let mut s = Sim::new(JitterConfig {
        capacity_packets: 5,
        ..tight()
    });
    s.push_full(0, 0, false, 0);
    s.push_full(2, 2 * TIMESTAMP_STEP, false, 200);
    // Sequence 1 comes after 2, already on a timeline half the range away; then 4 on that one.
    // The playout follows 2's timeline when 1 has played, so 4 is a jump against the history
    // even though it is none against 1, the packet stored before it.
    s.push_full(1, HALF_RANGE + 2 * TIMESTAMP_STEP, false, 200);
    s.push_full(4, HALF_RANGE + 5 * TIMESTAMP_STEP, false, 240);
    s.run_until(60_000);
    assert_eq!(s.frames(), vec![0, 1, 2, 4]);
    // 8 stretches while nothing came (60 to 200 ms), 10 to the maximum after the last packet.
    let c = s.jb.counters();
    assert_eq!(
        (c.lost, c.stretch_frames, s.jb.buffered()),
        (1, 18, 0),
        "{c:?}"
    );
    s.assert_accounted();
}
