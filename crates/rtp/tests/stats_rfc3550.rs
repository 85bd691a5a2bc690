//! `ReceiverStats` against RFC 3550 A.3 computed independently from what was sent: cumulative
//! lost = expected − received, expected = extended highest sequence − base + 1 with the base the
//! first sequence number received, every arrival (duplicates and late packets included) counted
//! as received; and, at each report, the interval's fraction lost
//! (`(lost_interval << 8) / expected_interval`, 0 when nothing or less than nothing was lost).
//!
//! The streams are deterministic: 2 % loss, adjacent swaps, one duplicate, started at sequence
//! numbers that put the 16-bit wrap at the start, in the middle or nowhere, plus hand-written
//! cases for the packets around the end of A.1's probation, where the counts went wrong (a loss
//! or a late packet before the second packet of the stream was not counted).

use std::time::Duration;

use ontime_rtp::{ReceiverStats, SequenceVerdict};

/// One arrival: the packet's index in the sent stream (its sequence is `start + index`).
type Arrivals = Vec<u32>;

/// RFC 3550 A.3 from the arrivals alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reference {
    expected: u64,
    received: u64,
    lost: i64,
    extended_highest: u32,
}

fn reference(start: u16, arrivals: &[u32]) -> Reference {
    let first = arrivals[0];
    let highest = *arrivals.iter().max().expect("some arrivals");
    // The base is the first sequence received; the extended highest counts cycles from the
    // base's own cycle, so it is the base's 16-bit value plus the distance to the highest.
    let base_seq = u32::from(start.wrapping_add(first as u16));
    let expected = u64::from(highest) + 1 - u64::from(first.min(highest));
    let received = arrivals.len() as u64;
    Reference {
        expected,
        received,
        lost: expected as i64 - received as i64,
        extended_highest: base_seq + (highest - first),
    }
}

/// The interval figures of RFC 3550 A.3 between two cumulative references.
fn fraction(prior: Option<Reference>, now: Reference) -> u8 {
    let (e0, r0) = prior.map_or((0, 0), |p| (p.expected, p.received));
    let expected_interval = now.expected as i64 - e0 as i64;
    let lost_interval = expected_interval - (now.received as i64 - r0 as i64);
    if expected_interval <= 0 || lost_interval <= 0 {
        0
    } else {
        ((lost_interval << 8) / expected_interval).min(255) as u8
    }
}

/// Feeds the arrivals, reporting after every `report_every` of them, and checks counts and every
/// report against the reference. Returns the final reference (for the callers' own asserts).
fn check(name: &str, start: u16, arrivals: &[u32], report_every: usize) -> Reference {
    let mut stats = ReceiverStats::new(8000);
    let mut prior: Option<Reference> = None;
    for (n, idx) in arrivals.iter().enumerate() {
        let seq = start.wrapping_add(*idx as u16);
        let verdict = stats.on_packet(seq, idx * 160, Duration::from_millis(20 * n as u64));
        assert_ne!(verdict, SequenceVerdict::BadSequence, "{name}: packet {n}");
        assert_ne!(verdict, SequenceVerdict::Restarted, "{name}: packet {n}");
        let so_far = &arrivals[..=n];
        if (n + 1) % report_every == 0 && stats.is_valid() {
            let want = reference(start, so_far);
            let report = stats.report();
            assert_eq!(
                (report.cumulative_lost, report.extended_highest_sequence),
                (want.lost as i32, want.extended_highest),
                "{name}: report after {} arrivals",
                n + 1
            );
            assert_eq!(
                report.fraction_lost,
                fraction(prior, want),
                "{name}: fraction lost after {} arrivals (prior {prior:?}, now {want:?})",
                n + 1
            );
            prior = Some(want);
        }
    }
    let want = reference(start, arrivals);
    assert!(stats.is_valid(), "{name}: source never validated");
    assert_eq!(
        (stats.expected(), stats.received(), stats.cumulative_lost()),
        (want.expected, want.received, want.lost),
        "{name}: expected, received, lost (arrivals start {:?})",
        &arrivals[..arrivals.len().min(8)]
    );
    assert_eq!(
        stats.extended_max_sequence(),
        want.extended_highest,
        "{name}"
    );
    // The last, partial interval too.
    let report = stats.report();
    assert_eq!(
        report.fraction_lost,
        fraction(prior, want),
        "{name}: last interval"
    );
    assert_eq!(i64::from(report.cumulative_lost), want.lost, "{name}");
    want
}

/// SplitMix64: a fixed, seedable sequence, so every run generates the same streams.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `per_mille`/1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

/// `len` packets with 2 % loss (the last always kept), 3 % adjacent swaps and one duplicate
/// arriving within 5 packets of its original.
fn impaired(seed: u64, len: u32) -> Arrivals {
    let mut rng = Rng(seed);
    let mut arrivals: Arrivals = (0..len)
        .filter(|&i| i + 1 == len || !rng.chance(20))
        .collect();
    for i in 0..arrivals.len() - 1 {
        if rng.chance(30) {
            arrivals.swap(i, i + 1);
        }
    }
    let from = (rng.next() % arrivals.len() as u64) as usize;
    let to = (from + 1 + (rng.next() % 5) as usize).min(arrivals.len());
    arrivals.insert(to, arrivals[from]);
    arrivals
}

#[test]
fn loss_before_the_second_packet_is_counted() {
    // Packet 1 lost: A.1's probation ends at packet 3, but the stream began at 0.
    let want = check("loss at start", 1000, &[0, 2, 3, 4, 5], 100);
    assert_eq!((want.expected, want.received, want.lost), (6, 5, 1));
}

#[test]
fn late_packet_from_before_the_end_of_probation_is_not_a_duplicate() {
    // 1 arrives after 3 (the packet that ends probation): it was expected, not extra.
    let want = check("late into probation", 7, &[0, 2, 3, 1, 4, 5], 100);
    assert_eq!((want.expected, want.received, want.lost), (6, 6, 0));
}

#[test]
fn reorder_at_the_start() {
    // The first packet received is 1; 0 arrives after it: counted as received, not expected
    // (A.3's base is the first sequence number received), so lost is −1 as with a duplicate.
    let want = check("swap at start", 500, &[1, 0, 2, 3, 4, 5], 100);
    assert_eq!((want.expected, want.received, want.lost), (5, 6, -1));
    // The second and third swapped, and a loss right after.
    let want = check("swap 1-2, loss 4", 500, &[0, 2, 1, 3, 5, 6], 100);
    assert_eq!((want.expected, want.received, want.lost), (7, 6, 1));
    // A duplicate of the first packet.
    let want = check("duplicate first", 500, &[0, 0, 1, 2, 3], 100);
    assert_eq!((want.expected, want.received, want.lost), (4, 5, -1));
}

#[test]
fn reorder_and_loss_across_the_wrap() {
    // Sequence 65534, 65535, 0, 1, …: swaps and a loss right at the wrap, and at the start.
    let start = 65534;
    let want = check("wrap mid", start, &[0, 1, 3, 2, 5, 6, 7], 100);
    assert_eq!((want.expected, want.received, want.lost), (8, 7, 1));
    assert_eq!(want.extended_highest, 65536 + 5);
    let want = check("wrap at start", start, &[1, 0, 3, 2, 4, 6, 7], 100);
    assert_eq!((want.expected, want.received, want.lost), (7, 7, 0));
    assert_eq!(want.extended_highest, 65535 + 6);
    let want = check("loss at wrap at start", 65535, &[0, 2, 3, 4], 100);
    assert_eq!((want.expected, want.received, want.lost), (5, 4, 1));
    assert_eq!(want.extended_highest, 65536 + 3);
}

#[test]
fn generated_streams_with_loss_reorder_and_a_duplicate() {
    // Starts: no wrap, wrap in the middle, wrap within the first packets.
    let starts = [1000u16, 65_300, 65_534];
    let mut streams = 0;
    let mut lost_total = 0i64;
    // Streams that exercise the start: a loss among the first three packets, or a first arrival
    // that is not the first packet sent.
    let (mut early_loss, mut reordered_start) = (0, 0);
    for seed in 0..300u64 {
        let arrivals = impaired(seed, 500);
        early_loss += usize::from((0..3).any(|i| !arrivals[..6].contains(&i)));
        reordered_start += usize::from(arrivals[0] != 0);
        for start in starts {
            let want = check(&format!("seed {seed} start {start}"), start, &arrivals, 50);
            lost_total += want.lost;
            streams += 1;
        }
    }
    assert_eq!(streams, 900);
    // The generator is fixed, so these are too: 2 % of 500 lost, less the duplicate.
    assert_eq!(lost_total, 8115);
    assert_eq!((early_loss, reordered_start), (15, 13));
}
