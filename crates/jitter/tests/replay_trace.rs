//! The replay model on bursty lateness traces, checked against values computed by hand.

use std::time::Duration;

use ontime_jitter::{
    parse_trace, replay_adaptive_lateness, replay_fixed, replay_fixed_lateness, JitterConfig,
    PacketOutcome, TraceKind,
};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// 40 packets, sender lateness 0 except two stalls with catch-up (after a late wake the sender
/// sends every packet whose slot has passed, so their lateness falls by 20 ms each):
/// - tick 10 wakes 126 ms late (at 326 ms) and sends packets 10..=16: lateness 326 − 20k =
///   126, 106, 86, 66, 46, 26, 6 ms;
/// - tick 30 wakes 50 ms late (at 650 ms) and sends 30..=32: lateness 50, 30, 10 ms;
/// - packet 12 never arrives (lost).
fn bursty_trace() -> Vec<(u64, Duration)> {
    let mut t = Vec::new();
    for seq in 0..40u64 {
        let late = match seq {
            10..=16 => 326 - 20 * seq,
            30..=32 => 650 - 20 * seq,
            _ => 0,
        };
        if seq != 12 {
            t.push((seq, ms(late)));
        }
    }
    t
}

#[test]
fn bursty_trace_at_40_ms_matches_hand_computation() {
    let r = replay_fixed_lateness(ms(40), &bursty_trace());
    // A0 = 0, so packet i plays at 40 + 20 i and is discarded iff its lateness exceeds 40 ms:
    // 10 (126), 11 (106), 13 (66), 14 (46) and 30 (50). 12 is lost, 15 (26) plays.
    assert_eq!(
        (r.packets, r.expected, r.lost, r.duplicates),
        (39, 40, 1, 0)
    );
    assert_eq!((r.played, r.discarded), (34, 5));
    let discarded: Vec<u64> = r
        .outcomes
        .iter()
        .filter(|o| o.1 == PacketOutcome::Discarded)
        .map(|o| o.0)
        .collect();
    assert_eq!(discarded, vec![10, 11, 13, 14, 30]);
    // The lost packet 12 neither breaks nor extends the run 10, 11, 13, 14.
    assert_eq!(r.max_discard_run, 4);
    // RFC 3611: 5 × 256 / 40 = 32; loss 1 × 256 / 40 = 6.4 -> 6.
    assert_eq!((r.discard_rate_rfc3611(), r.loss_rate_rfc3611()), (32, 6));
    assert_eq!(r.discard_rate(), 5.0 / 40.0);
    // RFC 3611 A.2 with Gmin 16 over received(.)/lost-or-discarded(X) in sequence order:
    // 10 ., XXXXX (10..14), 15 ., X (30), 9 .
    // X10: pkt 10 < 16 -> lost 1, c23 1, c22 9; X11..X14: c33 4; X30: pkt 15 < 16 -> c23 2,
    // c22 9 + 14 = 23. So c11 = c13 = c14 = 0, c31 = 0, c32 = 2, ctotal = 23 + 2 + 2 + 4 = 31.
    // p32 = 2/6, p23 = 1 - 23/25 = 2/25: burst density = (2/25) / (2/25 + 1/3) = 6/31.
    let bg = r.burst_gap;
    assert!((bg.burst_density - 6.0 / 31.0).abs() < 1e-12, "{bg:?}");
    assert_eq!(bg.burst_density_rfc3611(), 49); // 256 × 6/31 = 49.5
    assert_eq!(bg.gap_density, 0.0); // c11 + c14 = 0
                                     // c13 = 0 is taken as 1 (and ctotal 32): gap = (0 + 0 + 1) × 20 = 20 ms, burst = 640 − 20.
    assert_eq!((bg.gap_duration_ms, bg.burst_duration_ms), (20.0, 620.0));
}

#[test]
fn bursty_trace_across_depths() {
    let t = bursty_trace();
    // Lateness of the received packets above 0: 10:126 11:106 13:66 14:46 15:26 16:6 30:50
    // 31:30 32:10. Discarded iff lateness > depth; runs skip the lost packet 12.
    let expect = [
        (20, 7, 5),  // 10 11 13 14 15 | 30 31
        (40, 5, 4),  // 10 11 13 14 | 30
        (60, 3, 3),  // 10 11 13
        (80, 2, 2),  // 10 11
        (130, 0, 0), // nothing is later than 126 ms
    ];
    for (depth, discarded, run) in expect {
        let r = replay_fixed_lateness(ms(depth), &t);
        assert_eq!(
            (r.discarded, r.max_discard_run),
            (discarded, run),
            "depth {depth}"
        );
        assert_eq!(r.played + r.discarded + r.lost, r.expected);
    }
}

#[test]
fn late_first_packet_shifts_the_anchor() {
    // A0 is packet 0's arrival: when it is itself 30 ms late, the whole schedule moves with it.
    let t = [(0, ms(30)), (1, ms(60)), (2, ms(75))];
    let r = replay_fixed_lateness(ms(40), &t);
    // Packet 1 plays at 30 + 40 + 20 = 90, arrives at 20 + 60 = 80: played.
    // Packet 2 plays at 110, arrives at 40 + 75 = 115: discarded.
    assert_eq!((r.played, r.discarded), (2, 1));
}

#[test]
fn arrivals_with_duplicates_and_reordering() {
    let t = [
        (5, ms(0)),
        (7, ms(35)),
        (6, ms(61)), // due at 0 + 40 + 20 = 60: one ms late
        (6, ms(10)), // an earlier copy arrived later in the file: the earliest copy counts
        (8, ms(101)),
    ];
    let r = replay_fixed(ms(40), &t);
    assert_eq!((r.packets, r.duplicates, r.expected), (5, 1, 4));
    // 8 is due at 100 and arrives at 101.
    assert_eq!((r.played, r.discarded, r.lost), (3, 1, 0));
}

#[test]
fn adaptive_buffer_trades_discards_for_delay_on_the_bursty_trace() {
    let t = bursty_trace();
    let fixed = replay_fixed_lateness(ms(40), &t);
    let adaptive = replay_adaptive_lateness(JitterConfig::default(), &t).unwrap();
    assert_eq!(adaptive.expected, fixed.expected);
    assert_eq!(
        adaptive.played + adaptive.discarded + adaptive.lost,
        adaptive.expected
    );
    // The fixed 40 ms buffer discards the five late packets of the two bursts; the adaptive
    // one grows to 140 ms (five stretched frames) and plays them all.
    assert_eq!(
        (fixed.discarded, adaptive.discarded),
        (5, 0),
        "{adaptive:?}"
    );
    assert_eq!(fixed.max_playout_delay, ms(40));
    assert_eq!(adaptive.max_playout_delay, ms(140));
    assert_eq!(adaptive.stretch_frames, 5);
}

/// The committed fixture (fixtures/traces/, generated by gen_cfs_burst_trace.py) replayed at the
/// depths docs/jitter.md reports. Expected values were computed independently by a direct
/// Python transcription of the definition (the loop in docs/jitter.md).
#[test]
fn committed_fixture_trace() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/traces/cfs_burst_4workers_seed7.csv"
    );
    let text = std::fs::read_to_string(path).expect("fixture trace is committed");
    let arrivals = parse_trace(&text, TraceKind::Lateness).unwrap();
    for (depth, discarded, run) in [(20, 340, 6), (40, 221, 5), (60, 123, 4), (80, 52, 3)] {
        let r = replay_fixed(ms(depth), &arrivals);
        assert_eq!((r.expected, r.lost), (3000, 0));
        assert_eq!(
            (r.discarded, r.max_discard_run),
            (discarded, run),
            "{depth} ms"
        );
    }
}
