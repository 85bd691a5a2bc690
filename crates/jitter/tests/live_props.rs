//! Property tests of the live buffer: whatever arrives, in whatever order and timing, every
//! accepted packet is accounted exactly once and nothing panics.

use std::time::Duration;

use ontime_jitter::live::{JitterBuffer, JitterConfig, Playout, RtpPacketInfo, MAX_PAYLOAD_BYTES};
use ontime_rtp::{PT_CN, PT_PCMA, PT_PCMU, TIMESTAMP_STEP};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// Next packet of the stream, with network delay and optional perturbations.
    Packet {
        delay_ms: u16,
        skip: u8,
        back: u8,
        marker: bool,
        cn: bool,
        len: u16,
    },
    /// Resend the previous packet.
    Duplicate,
    /// Jump the sequence number arbitrarily (wrap, dropout, re-sync).
    SeqJump(u16),
    /// Jump the timestamp (silence gap).
    TsJump(u32),
    /// New source.
    NewSsrc(u32),
    /// Let time pass, popping on the way.
    Wait(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u16..300, 0u8..3, 0u8..4, any::<bool>(), prop::bool::weighted(0.05), 0u16..400)
            .prop_map(|(delay_ms, skip, back, marker, cn, len)| Op::Packet {
                delay_ms,
                skip: if skip == 2 { 1 } else { 0 },
                back: if back == 3 { 2 } else { 0 },
                marker: marker && delay_ms % 7 == 0,
                cn,
                len,
            }),
        1 => Just(Op::Duplicate),
        1 => any::<u16>().prop_map(Op::SeqJump),
        1 => any::<u32>().prop_map(Op::TsJump),
        1 => any::<u32>().prop_map(Op::NewSsrc),
        2 => (0u16..1000).prop_map(Op::Wait),
    ]
}

fn config() -> impl Strategy<Value = JitterConfig> {
    (0u64..3, 2usize..40, 1usize..300, 50u8..=100).prop_map(|(min_frames, cap, window, pct)| {
        let min = Duration::from_millis(20 * min_frames);
        JitterConfig {
            min_depth: min,
            initial_depth: min.max(Duration::from_millis(40)),
            max_depth: Duration::from_millis(200),
            capacity_packets: cap,
            window_packets: window,
            percentile: pct,
            ..JitterConfig::default()
        }
    })
}

fn drain(jb: &mut JitterBuffer, until: Duration) {
    while let Some(d) = jb.poll_timeout() {
        if d > until {
            break;
        }
        let mut guard = 0;
        while jb.pop(d) != Playout::Nothing {
            guard += 1;
            assert!(guard < 100_000, "pop never returned Nothing at {d:?}");
        }
    }
}

fn check(jb: &JitterBuffer) {
    let c = jb.counters();
    assert_eq!(
        c.pushed,
        c.played
            + c.late
            + c.overflow
            + c.flushed
            + c.out_of_range
            + c.duplicates
            + jb.buffered() as u64,
        "every accepted packet is played, discarded, duplicate or still buffered: {c:?}"
    );
    assert_eq!(
        c.discarded(),
        c.late + c.overflow + c.flushed + c.out_of_range
    );
    assert!(jb.buffered() <= jb.config().capacity_packets);
    let m = jb.voip_metrics();
    assert!(
        m.jb_abs_max_ms == 200 && m.jb_maximum_ms <= 200 + 20,
        "{m:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_packet_accounted_once(cfg in config(), start_seq: u16, start_ts: u32,
                                   ops in prop::collection::vec(op(), 0..400)) {
        let mut jb = JitterBuffer::new(cfg).unwrap();
        let payload = [0x55u8; MAX_PAYLOAD_BYTES + 80];
        let (mut seq, mut ts, mut ssrc) = (start_seq, start_ts, 1u32);
        let mut now = Duration::ZERO;
        let mut last: Option<(u16, u32, u8, usize, Duration)> = None;
        let mut rejected = 0u64;
        for (k, op) in ops.into_iter().enumerate() {
            let slot = Duration::from_millis(20 * k as u64);
            match op {
                Op::Packet { delay_ms, skip, back, marker, cn, len } => {
                    seq = seq.wrapping_add(u16::from(skip));
                    ts = ts.wrapping_add(u32::from(skip) * TIMESTAMP_STEP);
                    let s = seq.wrapping_sub(u16::from(back));
                    let t = ts.wrapping_sub(u32::from(back) * TIMESTAMP_STEP);
                    let at = (slot + Duration::from_millis(u64::from(delay_ms))).max(now);
                    drain(&mut jb, at);
                    now = at;
                    let pt = if cn { PT_CN } else if k % 2 == 0 { PT_PCMU } else { PT_PCMA };
                    let len = usize::from(len);
                    let pkt = RtpPacketInfo { sequence_number: s, timestamp: t, marker, ssrc,
                                              payload_type: pt, payload: &payload[..len] };
                    match jb.push(&pkt, at) {
                        Ok(_) => {}
                        Err(_) => { prop_assert!(len > MAX_PAYLOAD_BYTES); rejected += 1; }
                    }
                    last = Some((s, t, pt, len.min(MAX_PAYLOAD_BYTES), at));
                    seq = seq.wrapping_add(1);
                    ts = ts.wrapping_add(TIMESTAMP_STEP);
                }
                Op::Duplicate => {
                    if let Some((s, t, pt, len, _)) = last {
                        let pkt = RtpPacketInfo { sequence_number: s, timestamp: t, marker: false,
                                                  ssrc, payload_type: pt, payload: &payload[..len] };
                        jb.push(&pkt, now).unwrap();
                    }
                }
                Op::SeqJump(j) => seq = seq.wrapping_add(j),
                Op::TsJump(j) => ts = ts.wrapping_add(j),
                Op::NewSsrc(s) => ssrc = s,
                Op::Wait(w) => {
                    now += Duration::from_millis(u64::from(w));
                    drain(&mut jb, now);
                }
            }
            check(&jb);
            let target = jb.target_depth();
            prop_assert!(target >= cfg.min_depth && target <= cfg.max_depth);
        }
        // Drain everything: buffered packets must all resolve.
        drain(&mut jb, now + Duration::from_secs(60));
        check(&jb);
        prop_assert_eq!(jb.buffered(), 0);
        let _ = rejected;
    }

    #[test]
    fn pop_at_arbitrary_times_never_panics(times in prop::collection::vec(0u64..5_000, 1..200),
                                           seqs in prop::collection::vec(any::<u16>(), 1..200)) {
        let mut jb = JitterBuffer::new(JitterConfig::default()).unwrap();
        let payload = [0u8; 160];
        for (i, (&t, &s)) in times.iter().zip(seqs.iter()).enumerate() {
            let pkt = RtpPacketInfo { sequence_number: s, timestamp: u32::from(s) * 160,
                                      marker: i % 13 == 0, ssrc: 9, payload_type: PT_PCMU,
                                      payload: &payload };
            jb.push(&pkt, Duration::from_millis(t)).unwrap();
            let _ = jb.pop(Duration::from_millis(t / 2));
            let _ = jb.pop(Duration::from_millis(t));
            check(&jb);
        }
    }
}
