//! Property tests for the receiver statistics' accounting (RFC 3550 A.1/A.3) and the DTMF
//! tracker: whatever the network does within A.1's limits, the books balance.

use std::time::Duration;

use ontime_rtp::dtmf::TelephoneEvent;
use ontime_rtp::{DtmfTracker, ReceiverStats, SequenceVerdict};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// A stream with drops, duplicates and local reordering (never more than MAX_MISORDER back,
    /// never a MAX_DROPOUT jump): received counts every packet, expected spans base..=max, lost = expected − received, and the extended max is the true highest.
    #[test]
    fn loss_accounting_balances(
        start in any::<u16>(),
        len in 3usize..600,
        drops in proptest::collection::vec(any::<bool>(), 600),
        dups in proptest::collection::vec(0u8..8, 600),
        swaps in proptest::collection::vec(any::<bool>(), 600),
    ) {
        // Sequence offsets sent: 0..len, with the first two always present (probation).
        let mut offsets: Vec<u32> = (0..len as u32)
            .filter(|&i| i < 2 || !drops[i as usize] || i + 1 == len as u32)
            .collect();
        for i in (2..offsets.len().saturating_sub(1)).rev() {
            if dups[i] == 0 {
                offsets.insert(i, offsets[i]);
            }
        }
        let swap_at: Vec<usize> = (2..offsets.len().saturating_sub(1)).filter(|&i| swaps[i]).collect();
        for i in swap_at {
            offsets.swap(i, i + 1);
        }
        let mut stats = ReceiverStats::new(8000);
        for (n, off) in offsets.iter().enumerate() {
            let seq = start.wrapping_add(*off as u16);
            let verdict = stats.on_packet(seq, off * 160, Duration::from_millis(20 * n as u64));
            prop_assert_ne!(verdict, SequenceVerdict::BadSequence);
        }
        let max_off = *offsets.iter().max().unwrap();
        // A.3's base is the first sequence received (offset 0; the first two are never dropped,
        // duplicated or swapped), and the probation packets count. Expected = max − base + 1.
        let expected = u64::from(max_off) + 1;
        prop_assert_eq!(stats.expected(), expected);
        prop_assert_eq!(stats.received(), offsets.len() as u64);
        prop_assert_eq!(stats.cumulative_lost(), expected as i64 - offsets.len() as i64);
        prop_assert_eq!(stats.extended_max_sequence(), u32::from(start) + max_off);
        let report = stats.report();
        prop_assert_eq!(i64::from(report.cumulative_lost), stats.cumulative_lost());
    }

    /// Each event is reported exactly once however often its end packet repeats, and lost end
    /// packets still yield the digit when the next event starts or at flush.
    #[test]
    fn dtmf_digits_once(
        events in proptest::collection::vec((0u8..16, 0usize..4, 1u16..10), 1..20),
    ) {
        let mut tracker = DtmfTracker::new();
        let mut seen = String::new();
        let mut expected = String::new();
        let mut ts = 1000u32;
        for (event, end_repeats, steps) in &events {
            expected.push(ontime_rtp::dtmf::event_digit(*event).unwrap());
            for k in 0..*steps {
                let p = payload(*event, false, k * 160);
                seen.extend(tracker.on_packet(ts, &p).unwrap().into_iter().flatten().map(|d| d.digit));
            }
            for _ in 0..*end_repeats {
                let p = payload(*event, true, steps * 160);
                seen.extend(tracker.on_packet(ts, &p).unwrap().into_iter().flatten().map(|d| d.digit));
            }
            ts = ts.wrapping_add(u32::from(*steps) * 160 + 800);
        }
        seen.extend(tracker.flush().map(|d| d.digit));
        prop_assert_eq!(seen, expected);
    }
}

fn payload(event: u8, end: bool, duration: u16) -> [u8; 4] {
    let mut b = [0u8; 4];
    TelephoneEvent {
        event,
        end,
        volume: 10,
        duration,
    }
    .write(&mut b)
    .unwrap();
    b
}
