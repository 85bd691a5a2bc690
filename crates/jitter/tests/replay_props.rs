//! Property tests of the replay model: its accounting is consistent, it agrees with a direct
//! transcription of the definition, and the trace parser never panics.

use std::collections::BTreeMap;
use std::time::Duration;

use ontime_jitter::{
    parse_trace, replay_adaptive, replay_fixed, JitterConfig, PacketOutcome, TraceKind,
};
use proptest::prelude::*;

/// The fixed-depth definition written as plainly as possible, independent of the library:
/// per-index loop over the expected range, RFC 3611 A.2 counters inline, f64-free times (µs).
#[derive(Debug, PartialEq)]
struct Naive {
    expected: u64,
    played: u64,
    discarded: u64,
    lost: u64,
    max_run: u64,
    rfc3611_discard: u8,
    c: [u64; 6], // c11 c13 c14 c22 c23 c33
}

fn naive(depth_us: u64, arrivals: &[(u64, u64)]) -> Naive {
    let mut first: BTreeMap<u64, u64> = BTreeMap::new();
    for &(s, a) in arrivals {
        let e = first.entry(s).or_insert(a);
        *e = (*e).min(a);
    }
    let (&lo, &a0) = first.iter().next().unwrap();
    let hi = *first.keys().last().unwrap();
    let (mut played, mut discarded, mut lost, mut run, mut max_run) = (0, 0, 0, 0, 0);
    let (mut pkt, mut lostc) = (0u64, 0u64);
    let mut c = [0u64; 6];
    for seq in lo..=hi {
        let received_and_played = match first.get(&seq) {
            None => {
                lost += 1;
                false
            }
            Some(&a) => {
                let play_at = a0 + depth_us + (seq - lo) * 20_000;
                if a > play_at {
                    discarded += 1;
                    run += 1;
                    max_run = max_run.max(run);
                    false
                } else {
                    played += 1;
                    run = 0;
                    true
                }
            }
        };
        // RFC 3611 Appendix A.2, per packet.
        if received_and_played {
            pkt += 1;
        } else {
            if pkt >= 16 {
                if lostc == 1 {
                    c[2] += 1;
                } else {
                    c[1] += 1;
                }
                lostc = 1;
                c[0] += pkt;
            } else {
                lostc += 1;
                if pkt == 0 {
                    c[5] += 1;
                } else {
                    c[4] += 1;
                    c[3] += pkt - 1;
                }
            }
            pkt = 0;
        }
    }
    let expected = hi - lo + 1;
    Naive {
        expected,
        played,
        discarded,
        lost,
        max_run,
        rfc3611_discard: (discarded * 256 / expected).min(255) as u8,
        c,
    }
}

/// Metrics from A.2 counters as in the RFC's compute step (c13 = 0 taken as 1, no loss = 0).
fn naive_metrics(c: [u64; 6], loss_events: u64) -> (f64, f64, f64, f64) {
    let [c11, c13, c14, c22, c23, c33] = c.map(|v| v as f64);
    if loss_events == 0 {
        return (0.0, 0.0, 0.0, f64::NAN);
    }
    let (c31, c32) = (c13, c23);
    let p32 = if c31 + c32 + c33 > 0.0 {
        c32 / (c31 + c32 + c33)
    } else {
        0.0
    };
    let p23 = if c22 + c23 < 1.0 {
        1.0
    } else {
        1.0 - c22 / (c22 + c23)
    };
    let burst = if p23 + p32 > 0.0 {
        p23 / (p23 + p32)
    } else {
        0.0
    };
    let gap = if c11 + c14 > 0.0 {
        c14 / (c11 + c14)
    } else {
        0.0
    };
    let (c13, ctotal) = if c13 == 0.0 {
        (1.0, c11 + c14 + c22 + c23 + c32 + c33 + 1.0)
    } else {
        (c13, c11 + c14 + c13 + c22 + c23 + c31 + c32 + c33)
    };
    let gap_ms = (c11 + c14 + c13) * 20.0 / c13;
    (burst, gap, (ctotal * 20.0 / c13 - gap_ms).max(0.0), gap_ms)
}

fn trace() -> impl Strategy<Value = Vec<(u64, u64)>> {
    // (seq, arrival µs): a base schedule with lateness bursts, gaps, duplicates and reordering.
    (
        0u64..100_000,
        prop::collection::vec((0u8..10, 0u64..200_000, any::<bool>()), 1..400),
    )
        .prop_map(|(start, steps)| {
            let mut out = Vec::new();
            let mut seq = start;
            for (k, (kind, late_us, dup)) in steps.into_iter().enumerate() {
                match kind {
                    0 => seq += 3, // a gap of lost packets
                    1 => seq += 1,
                    _ => {}
                }
                let arrival =
                    (seq - start) * 20_000 + if kind < 5 { late_us } else { late_us / 50 };
                out.push((seq, arrival));
                if dup {
                    out.push((seq, arrival + (k as u64 % 7) * 1000));
                }
                seq += 1;
            }
            // Reorder a little: rotate pairs.
            for i in (0..out.len().saturating_sub(1)).step_by(5) {
                out.swap(i, i + 1);
            }
            out
        })
}

fn to_durations(t: &[(u64, u64)]) -> Vec<(u64, Duration)> {
    t.iter()
        .map(|&(s, a)| (s, Duration::from_micros(a)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn fixed_replay_matches_the_definition(depth_ms in 0u64..200, t in trace()) {
        let r = replay_fixed(Duration::from_millis(depth_ms), &to_durations(&t));
        let n = naive(depth_ms * 1000, &t);
        prop_assert_eq!(r.expected, n.expected);
        prop_assert_eq!(r.played, n.played);
        prop_assert_eq!(r.discarded, n.discarded);
        prop_assert_eq!(r.lost, n.lost);
        prop_assert_eq!(r.max_discard_run, n.max_run);
        prop_assert_eq!(r.discard_rate_rfc3611(), n.rfc3611_discard);
        let (burst, gap, burst_ms, gap_ms) = naive_metrics(n.c, n.lost + n.discarded);
        let bg = r.burst_gap;
        prop_assert!((bg.burst_density - burst).abs() < 1e-9, "{:?} vs {}", bg, burst);
        prop_assert!((bg.gap_density - gap).abs() < 1e-9);
        prop_assert!((bg.burst_duration_ms - burst_ms).abs() < 1e-6);
        if !gap_ms.is_nan() {
            prop_assert!((bg.gap_duration_ms - gap_ms).abs() < 1e-6);
        }
    }

    #[test]
    fn fixed_replay_is_consistent(depth_ms in 0u64..200, t in trace()) {
        let r = replay_fixed(Duration::from_millis(depth_ms), &to_durations(&t));
        let unique = r.packets - r.duplicates;
        prop_assert_eq!(r.played + r.discarded, unique);
        prop_assert_eq!(r.received_unique(), unique);
        prop_assert_eq!(r.played + r.discarded + r.lost, r.expected);
        prop_assert_eq!(r.outcomes.len() as u64, unique);
        prop_assert!(r.max_discard_run <= r.discarded);
        prop_assert_eq!(u64::from(r.discard_rate_rfc3611()), (r.discarded * 256 / r.expected).min(255));
        prop_assert!(r.burst_gap.burst_density >= 0.0 && r.burst_gap.burst_density <= 1.0);
        prop_assert!(r.burst_gap.gap_density >= 0.0 && r.burst_gap.gap_density <= 1.0);
        // Deeper buffers never discard more.
        let deeper = replay_fixed(Duration::from_millis(depth_ms + 20), &to_durations(&t));
        prop_assert!(deeper.discarded <= r.discarded);
    }

    #[test]
    fn adaptive_replay_is_consistent(t in trace()) {
        let r = replay_adaptive(JitterConfig::default(), &to_durations(&t)).unwrap();
        let unique = r.packets - r.duplicates;
        prop_assert_eq!(r.played + r.discarded, unique);
        prop_assert_eq!(r.played + r.discarded + r.lost, r.expected);
        prop_assert!(r.max_playout_delay >= r.mean_playout_delay);
    }

    #[test]
    fn trace_parser_never_panics(text in "\\PC{0,400}") {
        let _ = parse_trace(&text, TraceKind::Lateness);
        let _ = parse_trace(&text, TraceKind::Arrivals);
    }

    #[test]
    fn trace_parser_round_trips(start in 0u64..50_000,
                                steps in prop::collection::vec((0u64..50, 0u32..1_000_000), 0..200)) {
        // Sequence numbers within 16 bits that never step by half the space come back unchanged.
        let mut seq = start;
        let rows: Vec<(u64, u32)> = steps.into_iter().map(|(d, us)| { seq += d; (seq, us) }).collect();
        let mut text = String::from("seq,lateness_ms\n");
        for (s, us) in &rows {
            text.push_str(&format!("{s},{}.{:03}\n", us / 1000, us % 1000));
        }
        let parsed = parse_trace(&text, TraceKind::Arrivals).unwrap();
        prop_assert_eq!(parsed.len(), rows.len());
        for ((s, us), (ps, pa)) in rows.iter().zip(parsed.iter()) {
            prop_assert_eq!(s, ps);
            prop_assert!((pa.as_secs_f64() * 1e6 - f64::from(*us)).abs() < 1.0);
        }
    }
}

#[test]
fn outcomes_are_reported_per_packet() {
    let r = replay_fixed(
        Duration::from_millis(40),
        &[(0, Duration::ZERO), (1, Duration::from_millis(61))],
    );
    assert_eq!(
        r.outcomes,
        vec![(0, PacketOutcome::Played), (1, PacketOutcome::Discarded)]
    );
}
