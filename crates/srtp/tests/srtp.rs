//! SRTP and SRTCP behaviour through the public API: round trips, tampering, replays, reordering,
//! rollover, SSRC changes and malformed input.

use ontime_srtp::{Error, SrtpContext, Suite, MAX_SRTP_TAG_LEN, REPLAY_WINDOW, SRTCP_TRAILER_LEN};
use proptest::prelude::*;

const KEY: [u8; 16] = [
    0xE1, 0xF9, 0x7A, 0x0D, 0x3E, 0x01, 0x8B, 0xE0, 0xD6, 0x4F, 0xA3, 0x2C, 0x06, 0xDE, 0x41, 0x39,
];
const SALT: [u8; 14] = [
    0x0E, 0xC6, 0x75, 0xAD, 0x49, 0x8A, 0xFE, 0xEB, 0xB6, 0x96, 0x0B, 0x3A, 0xAB, 0xE6,
];

fn pair(suite: Suite) -> (SrtpContext, SrtpContext) {
    (
        SrtpContext::new(suite, &KEY, &SALT).expect("key"),
        SrtpContext::new(suite, &KEY, &SALT).expect("key"),
    )
}

/// A PCMU packet: 12-byte header and a 160-byte payload that depends on `seq`.
fn rtp(seq: u16, ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq).wrapping_mul(160)).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend((0..160u32).map(|i| (i as u8) ^ (seq as u8)));
    p
}

fn protect(ctx: &mut SrtpContext, plain: &[u8]) -> Vec<u8> {
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + MAX_SRTP_TAG_LEN, 0);
    let n = ctx.protect(&mut buf, plain.len()).expect("protect");
    buf.truncate(n);
    buf
}

fn unprotect(ctx: &mut SrtpContext, packet: &[u8]) -> Result<Vec<u8>, Error> {
    let mut buf = packet.to_vec();
    let n = ctx.unprotect(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

#[test]
fn round_trip_both_suites() {
    for suite in Suite::ALL {
        let (mut tx, mut rx) = pair(suite);
        for seq in [0u16, 1, 2, 1000] {
            let plain = rtp(seq, 0xDEAD_BEEF);
            let srtp = protect(&mut tx, &plain);
            assert_eq!(srtp.len(), plain.len() + suite.srtp_tag_len());
            assert_eq!(srtp[..12], plain[..12], "the header stays in the clear");
            assert_ne!(srtp[12..172], plain[12..], "the payload is encrypted");
            assert_eq!(unprotect(&mut rx, &srtp).expect("genuine"), plain);
        }
    }
}

/// A known answer: the first packet under the RFC 3711 B.3 master key, so a change in key
/// derivation, IV layout or tag computation shows up here even if both sides change alike.
/// The value was checked against webrtc-srtp (tests/cross_check.rs checks every packet so).
#[test]
fn known_answer() {
    let (mut tx, _) = pair(Suite::AesCm128HmacSha1_80);
    let mut plain = vec![
        0x80, 0x00, 0x12, 0x34, 0, 0, 0, 0xA0, 0xCA, 0xFE, 0xBA, 0xBE,
    ];
    plain.extend_from_slice(&[0xFF; 16]);
    let srtp = protect(&mut tx, &plain);
    let hex: String = srtp.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, KNOWN_ANSWER);
}

const KNOWN_ANSWER: &str = concat!(
    "80001234000000a0cafebabe",         // header, in the clear
    "1a018818b3cd2c8cd8f08641c0c97056", // 16 payload bytes, encrypted
    "535e3639f58f410bc0d2"              // 80-bit tag
);

#[test]
fn tampering_anywhere_is_refused_and_harmless() {
    for suite in Suite::ALL {
        let (mut tx, mut rx) = pair(suite);
        let plain = rtp(7, 42);
        let srtp = protect(&mut tx, &plain);
        // One bit flipped in the header, the payload and the tag in turn.
        for byte in [1, 3, 11, 12, 100, 171, srtp.len() - 1] {
            let mut bad = srtp.clone();
            bad[byte] ^= 0x01;
            assert_eq!(
                unprotect(&mut rx, &bad),
                Err(Error::AuthFailed),
                "byte {byte}"
            );
        }
        // A truncated tag or an extra byte also fails.
        assert!(unprotect(&mut rx, &srtp[..srtp.len() - 1]).is_err());
        let mut longer = srtp.clone();
        longer.push(0);
        assert!(unprotect(&mut rx, &longer).is_err());
        // The failures changed nothing: the genuine packet is still accepted, once.
        assert_eq!(unprotect(&mut rx, &srtp).expect("genuine"), plain);
        assert_eq!(unprotect(&mut rx, &srtp), Err(Error::Replayed));
    }
}

#[test]
fn another_key_fails_authentication() {
    let mut tx = SrtpContext::new(Suite::AesCm128HmacSha1_80, &KEY, &SALT).expect("key");
    let mut other_salt = SALT;
    other_salt[13] ^= 1;
    let mut rx = SrtpContext::new(Suite::AesCm128HmacSha1_80, &KEY, &other_salt).expect("key");
    let srtp = protect(&mut tx, &rtp(1, 1));
    assert_eq!(unprotect(&mut rx, &srtp), Err(Error::AuthFailed));
    // A 32-bit tag receiver reads an 80-bit tag packet as a longer payload: refused.
    let (_, mut rx32) = pair(Suite::AesCm128HmacSha1_32);
    assert_eq!(unprotect(&mut rx32, &srtp), Err(Error::AuthFailed));
}

#[test]
fn replays_refused_reordering_within_the_window_accepted() {
    let (mut tx, mut rx) = pair(Suite::AesCm128HmacSha1_80);
    let packets: Vec<_> = (0..300u16)
        .map(|s| protect(&mut tx, &rtp(s + 10, 5)))
        .collect();
    // In order up to 200, then 150..199 again: replays.
    for p in &packets[..200] {
        unprotect(&mut rx, p).expect("in order");
    }
    for p in &packets[150..200] {
        assert_eq!(unprotect(&mut rx, p), Err(Error::Replayed));
    }
    // Reordered: 250 before 201..249, all inside the window.
    unprotect(&mut rx, &packets[250]).expect("ahead");
    for p in packets[201..250].iter().rev() {
        unprotect(&mut rx, p).expect("late but inside the window");
    }
    // 200 was never delivered; it is 50 behind the highest (250): still accepted.
    unprotect(&mut rx, &packets[200]).expect("late");
    // Beyond the window: too old to tell from a replay.
    let far = protect(&mut tx, &rtp(10 + 250 + REPLAY_WINDOW as u16 + 5, 5));
    unprotect(&mut rx, &far).expect("far ahead");
    assert_eq!(unprotect(&mut rx, &packets[251]), Err(Error::TooOld));
}

#[test]
fn rollover_across_65535() {
    for suite in Suite::ALL {
        let (mut tx, mut rx) = pair(suite);
        let seqs: Vec<u16> = (65_500u32..65_536 + 100).map(|s| s as u16).collect();
        let packets: Vec<_> = seqs.iter().map(|&s| protect(&mut tx, &rtp(s, 9))).collect();
        // Delivered with a few swaps around the wrap: 65535 after 0 and 1.
        let wrap = seqs.iter().position(|&s| s == 0).expect("wraps");
        let mut order: Vec<usize> = (0..packets.len()).collect();
        order.swap(wrap - 1, wrap + 1);
        for i in order {
            let plain = unprotect(&mut rx, &packets[i]).expect("across the rollover");
            assert_eq!(plain, rtp(seqs[i], 9));
        }
        // A packet of the second cycle protected with ROC 0 would not authenticate: the tag
        // covers the rollover counter. Shown by a fresh sender (ROC 0) at seq 200.
        let (mut fresh, _) = pair(suite);
        let wrong_roc = protect(&mut fresh, &rtp(200, 9));
        assert_eq!(unprotect(&mut rx, &wrong_roc), Err(Error::AuthFailed));
    }
}

#[test]
fn protect_refuses_keystream_reuse_and_small_buffers() {
    let (mut tx, _) = pair(Suite::AesCm128HmacSha1_80);
    protect(&mut tx, &rtp(100, 1));
    let mut buf = rtp(100, 1);
    buf.resize(172 + 10, 0);
    assert_eq!(tx.protect(&mut buf, 172), Err(Error::Replayed));
    let mut small = rtp(101, 1);
    small.resize(172 + 9, 0);
    assert_eq!(
        tx.protect(&mut small, 172),
        Err(Error::BufferTooSmall {
            needed: 182,
            capacity: 181
        })
    );
    assert!(matches!(
        tx.protect(&mut small, 1000),
        Err(Error::BufferTooSmall { .. })
    ));
    // Another SSRC is another stream: its own sequence space.
    protect(&mut tx, &rtp(100, 2));
}

#[test]
fn csrcs_extension_and_padding() {
    let (mut tx, mut rx) = pair(Suite::AesCm128HmacSha1_80);
    // V=2, P=1, X=1, CC=2; two CSRCs; a one-word extension; 4 payload bytes + 4 padding.
    let mut plain = vec![0xB2, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 7];
    plain.extend_from_slice(&[1, 1, 1, 1, 2, 2, 2, 2]);
    plain.extend_from_slice(&[0xBE, 0xDE, 0x00, 0x01, 0x10, 0xAA, 0, 0]);
    plain.extend_from_slice(&[9, 9, 9, 9, 0, 0, 0, 4]);
    let srtp = protect(&mut tx, &plain);
    assert_eq!(srtp[..28], plain[..28], "CSRCs and extension in the clear");
    assert_ne!(srtp[28..36], plain[28..], "payload and padding encrypted");
    assert_eq!(unprotect(&mut rx, &srtp).expect("genuine"), plain);
    // An extension length running past the packet is malformed, not a panic.
    let mut bad = plain.clone();
    bad[22..24].copy_from_slice(&[0xFF, 0xFF]);
    bad.resize(bad.len() + 10, 0);
    assert_eq!(tx.protect(&mut bad, plain.len()), Err(Error::Malformed));
}

#[test]
fn short_and_malformed_packets() {
    let (_, mut rx) = pair(Suite::AesCm128HmacSha1_80);
    for len in 0..22 {
        let mut p = vec![0x80; len];
        assert!(
            matches!(rx.unprotect(&mut p), Err(Error::TooShort { .. })),
            "{len}"
        );
    }
    let mut v1 = protect(&mut pair(Suite::AesCm128HmacSha1_80).0, &rtp(1, 1));
    v1[0] = 0x40;
    assert_eq!(rx.unprotect(&mut v1), Err(Error::Malformed));
    assert!(matches!(
        SrtpContext::new(Suite::AesCm128HmacSha1_80, &KEY[..15], &SALT),
        Err(Error::BadKey {
            key_len: 15,
            salt_len: 14
        })
    ));
    assert!(SrtpContext::new(Suite::AesCm128HmacSha1_80, &KEY, &[0; 16]).is_err());
}

#[test]
fn ssrc_change_keeps_working() {
    let (mut tx, mut rx) = pair(Suite::AesCm128HmacSha1_80);
    for ssrc in 1..=6u32 {
        for seq in [1000u16, 1001] {
            let p = protect(&mut tx, &rtp(seq, ssrc));
            unprotect(&mut rx, &p).expect("new SSRC accepted");
            assert_eq!(unprotect(&mut rx, &p), Err(Error::Replayed));
        }
    }
}

/// A sender report with the given SSRC (28 bytes), then an SDES chunk (compound packet).
fn rtcp(ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, 200, 0x00, 0x06];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[0x11; 20]);
    p.extend_from_slice(&[0x81, 202, 0x00, 0x02]);
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[1, 1, b'x', 0]);
    p
}

fn protect_rtcp(ctx: &mut SrtpContext, plain: &[u8]) -> Vec<u8> {
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + SRTCP_TRAILER_LEN, 0);
    let n = ctx
        .protect_rtcp(&mut buf, plain.len())
        .expect("protect_rtcp");
    buf.truncate(n);
    buf
}

fn unprotect_rtcp(ctx: &mut SrtpContext, packet: &[u8]) -> Result<Vec<u8>, Error> {
    let mut buf = packet.to_vec();
    let n = ctx.unprotect_rtcp(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

#[test]
fn srtcp_round_trip_tamper_and_replay() {
    for suite in Suite::ALL {
        let (mut tx, mut rx) = pair(suite);
        let plain = rtcp(0x1234_5678);
        let first = protect_rtcp(&mut tx, &plain);
        // 80-bit tag whatever the suite, E flag set, index 0 then 1.
        assert_eq!(first.len(), plain.len() + 14);
        assert_eq!(first[..8], plain[..8]);
        assert_ne!(first[8..plain.len()], plain[8..]);
        assert_eq!(first[plain.len()..plain.len() + 4], [0x80, 0, 0, 0]);
        let second = protect_rtcp(&mut tx, &plain);
        assert_eq!(second[plain.len()..plain.len() + 4], [0x80, 0, 0, 1]);
        for byte in [
            1,
            5,
            8,
            plain.len() - 1,
            plain.len(),
            plain.len() + 3,
            second.len() - 1,
        ] {
            let mut bad = second.clone();
            bad[byte] ^= 0x80;
            assert_eq!(
                unprotect_rtcp(&mut rx, &bad),
                Err(Error::AuthFailed),
                "byte {byte}"
            );
        }
        assert_eq!(unprotect_rtcp(&mut rx, &second).expect("genuine"), plain);
        assert_eq!(unprotect_rtcp(&mut rx, &first).expect("reordered"), plain);
        assert_eq!(unprotect_rtcp(&mut rx, &first), Err(Error::Replayed));
        assert!(matches!(
            rx.unprotect_rtcp(&mut [0x80; 21]),
            Err(Error::TooShort { len: 21 })
        ));
    }
}

proptest! {
    /// Arbitrary bytes never panic either unprotect, and never authenticate.
    #[test]
    fn arbitrary_bytes_are_refused(mut data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let (_, mut rx) = pair(Suite::AesCm128HmacSha1_32);
        let mut copy = data.clone();
        prop_assert!(rx.unprotect(&mut data).is_err());
        prop_assert!(rx.unprotect_rtcp(&mut copy).is_err());
    }

    /// Any RTP packet survives a round trip, whatever its header flags say, or is refused by
    /// protect as malformed.
    #[test]
    fn round_trip_any_packet(
        mut plain in proptest::collection::vec(any::<u8>(), 12..300),
        suite in prop_oneof![Just(Suite::AesCm128HmacSha1_80), Just(Suite::AesCm128HmacSha1_32)],
    ) {
        plain[0] = 0x80 | (plain[0] & 0x3F);
        let (mut tx, mut rx) = pair(suite);
        let mut buf = plain.clone();
        buf.resize(plain.len() + 10, 0);
        match tx.protect(&mut buf, plain.len()) {
            Ok(n) => {
                let n = rx.unprotect(&mut buf[..n]).expect("round trip");
                prop_assert_eq!(&buf[..n], &plain[..]);
            }
            Err(e) => prop_assert_eq!(e, Error::Malformed),
        }
    }
}
