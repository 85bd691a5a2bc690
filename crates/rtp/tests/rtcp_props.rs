//! Property tests for RTCP: arbitrary bytes never panic the parser, and built packets parse back
//! to what was built.

use ontime_rtp::rtcp::{
    parse_compound, parse_rtcp, write_compound, ExtendedReport, Goodbye, NtpTimestamp,
    ReceiverReport, ReportBlock, RtcpPacket, SdesChunk, SdesItem, SenderInfo, SenderReport,
    SourceDescription, VoipMetrics, XrBlock,
};
use proptest::prelude::*;

fn block() -> impl Strategy<Value = ReportBlock> {
    (
        any::<u32>(),
        any::<u8>(),
        -0x80_0000i32..=0x7F_FFFF,
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(ssrc, fraction_lost, cumulative_lost, ext, jitter, lsr, dlsr)| ReportBlock {
                ssrc,
                fraction_lost,
                cumulative_lost,
                extended_highest_sequence: ext,
                jitter,
                last_sr: lsr,
                delay_since_last_sr: dlsr,
            },
        )
}

fn voip_metrics() -> impl Strategy<Value = VoipMetrics> {
    (any::<u32>(), any::<[u8; 12]>(), any::<[u16; 7]>()).prop_map(|(ssrc, b, w)| VoipMetrics {
        ssrc,
        loss_rate: b[0],
        discard_rate: b[1],
        burst_density: b[2],
        gap_density: b[3],
        burst_duration_ms: w[0],
        gap_duration_ms: w[1],
        round_trip_delay_ms: w[2],
        end_system_delay_ms: w[3],
        signal_level: b[4] as i8,
        noise_level: b[5] as i8,
        rerl: b[6],
        gmin: b[7],
        r_factor: b[8],
        ext_r_factor: b[9],
        mos_lq: b[10],
        mos_cq: b[11],
        rx_config: b[0] ^ b[1],
        jb_nominal_ms: w[4],
        jb_maximum_ms: w[5],
        jb_abs_max_ms: w[6],
    })
}

fn packet() -> impl Strategy<Value = RtcpPacket> {
    prop_oneof![
        (
            any::<u32>(),
            any::<u64>(),
            any::<[u32; 3]>(),
            proptest::collection::vec(block(), 0..31)
        )
            .prop_map(|(ssrc, ntp, c, reports)| {
                RtcpPacket::SenderReport(SenderReport {
                    ssrc,
                    info: SenderInfo {
                        ntp: NtpTimestamp(ntp),
                        rtp_timestamp: c[0],
                        packet_count: c[1],
                        octet_count: c[2],
                    },
                    reports,
                })
            }),
        (any::<u32>(), proptest::collection::vec(block(), 0..31)).prop_map(|(ssrc, reports)| {
            RtcpPacket::ReceiverReport(ReceiverReport { ssrc, reports })
        }),
        proptest::collection::vec(
            (
                any::<u32>(),
                proptest::collection::vec(
                    (1u8..=8, proptest::collection::vec(any::<u8>(), 0..40)),
                    0..4
                )
            ),
            0..5
        )
        .prop_map(|chunks| RtcpPacket::SourceDescription(SourceDescription {
            chunks: chunks
                .into_iter()
                .map(|(ssrc, items)| SdesChunk {
                    ssrc,
                    items: items
                        .into_iter()
                        .map(|(kind, text)| SdesItem { kind, text })
                        .collect()
                })
                .collect()
        })),
        (
            proptest::collection::vec(any::<u32>(), 0..31),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..255))
        )
            .prop_map(|(sources, reason)| RtcpPacket::Goodbye(Goodbye { sources, reason })),
        (
            any::<u32>(),
            proptest::collection::vec(voip_metrics(), 0..3)
        )
            .prop_map(|(ssrc, m)| {
                RtcpPacket::ExtendedReport(ExtendedReport {
                    ssrc,
                    blocks: m.into_iter().map(XrBlock::VoipMetrics).collect(),
                })
            }),
        (
            205u8..=206,
            0u8..32,
            proptest::collection::vec(any::<u8>(), 0..16).prop_map(|mut v| {
                v.truncate(v.len() / 4 * 4);
                v
            })
        )
            .prop_map(|(packet_type, count, body)| RtcpPacket::Unknown {
                packet_type,
                count,
                body
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_rtcp(&bytes);
        let _ = parse_compound(&bytes);
    }

    #[test]
    fn v2_headers_with_plausible_lengths_never_panic(
        first in 0x80u8..=0xBF,
        pt in 200u8..=207,
        words in 0u16..20,
        body in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        let mut bytes = vec![first, pt];
        bytes.extend_from_slice(&words.to_be_bytes());
        bytes.extend(body);
        if let Err(e) = parse_rtcp(&bytes) {
            prop_assert!(e.reason().starts_with("rtcp_"));
        }
    }

    #[test]
    fn build_then_parse_round_trips(first in prop_oneof![
            (any::<u32>(), proptest::collection::vec(block(), 0..3))
                .prop_map(|(ssrc, reports)| RtcpPacket::ReceiverReport(ReceiverReport { ssrc, reports }))
        ],
        rest in proptest::collection::vec(packet(), 0..4)) {
        let mut packets = vec![first];
        packets.extend(rest);
        let mut buf = vec![0u8; 16_384];
        let n = write_compound(&packets, &mut buf).unwrap();
        prop_assert_eq!(n % 4, 0);
        prop_assert_eq!(parse_compound(&buf[..n]).unwrap(), packets);
    }
}
