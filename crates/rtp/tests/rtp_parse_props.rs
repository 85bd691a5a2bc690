//! Property tests for the RTP parser: arbitrary bytes never panic, and packets the packetizer
//! builds parse back to what went in.

use ontime_rtp::{classify, parse_rtp, PacketKind, Packetizer, RtpError, TIMESTAMP_STEP};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        match parse_rtp(&bytes) {
            Ok(v) => {
                // Everything the view borrows lies inside the input, in order.
                let used = 12 + v.csrc_bytes.len()
                    + v.extension.map_or(0, |e| 4 + e.data.len())
                    + v.payload.len()
                    + usize::from(v.padding_len);
                prop_assert_eq!(used, bytes.len());
                prop_assert_eq!(classify(&bytes) == PacketKind::Rtcp, (192..=223).contains(&bytes[1]));
            }
            Err(e) => prop_assert!(!e.reason().is_empty()),
        }
        let _ = classify(&bytes);
    }

    #[test]
    fn v2_headers_with_random_flags_never_panic(
        b0 in 0x80u8..=0xBF,
        rest in proptest::collection::vec(any::<u8>(), 11..80),
    ) {
        let mut bytes = vec![b0];
        bytes.extend(rest);
        if let Err(e) = parse_rtp(&bytes) {
            let structural = matches!(
                e,
                RtpError::Csrc { .. } | RtpError::Extension { .. } | RtpError::Padding { .. }
            );
            prop_assert!(structural, "unexpected {:?}", e);
        }
    }

    #[test]
    fn build_then_parse_round_trips(
        pt in 0u8..128,
        ssrc in any::<u32>(),
        seq in any::<u16>(),
        ts in any::<u32>(),
        frames in 1usize..40,
        skip in 0u32..4,
        payload in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut p = Packetizer::with_initial(pt, ssrc, seq, ts);
        let mut buf = vec![0u8; 12 + payload.len()];
        let mut expected_ts = ts;
        for i in 0..frames {
            let n = p.write_frame(&payload, &mut buf).unwrap();
            let v = parse_rtp(&buf[..n]).unwrap();
            prop_assert_eq!(v.payload_type, pt);
            prop_assert_eq!(v.ssrc, ssrc);
            prop_assert_eq!(v.sequence_number, seq.wrapping_add(i as u16));
            prop_assert_eq!(v.timestamp, expected_ts);
            prop_assert_eq!(v.marker, i == 0);
            prop_assert_eq!(v.payload, &payload[..]);
            expected_ts = expected_ts.wrapping_add(TIMESTAMP_STEP);
            p.skip_frames(skip);
            expected_ts = expected_ts.wrapping_add(skip * TIMESTAMP_STEP);
        }
    }
}
