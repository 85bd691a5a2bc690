//! The RTP parser, the RFC 5761 classifier, the RFC 3550 receiver statistics, the stream analysis
//! and the RFC 4733 DTMF tracker on a stream of arbitrary datagrams: no panic (arithmetic overflow
//! included), and what parses describes the datagram exactly.
//!
//! Input: records of `[arrival step in ms][length][length bytes]`, the last one possibly short.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use ontime_rtp::{
    classify, parse_rtp, DtmfTracker, PacketKind, ReceiverStats, StreamAnalysis, RTP_HEADER_BYTES,
};

fuzz_target!(|data: &[u8]| {
    let mut stats = ReceiverStats::new(8000);
    let mut analysis = StreamAnalysis::new();
    let mut dtmf = DtmfTracker::new();
    let mut now = Duration::ZERO;
    let mut rest = data;
    while let [step, len, tail @ ..] = rest {
        let take = usize::from(*len).min(tail.len());
        let (datagram, next) = tail.split_at(take);
        rest = next;
        now += Duration::from_millis(u64::from(*step));
        let kind = classify(datagram);
        let Ok(p) = parse_rtp(datagram) else {
            continue;
        };
        // The view covers the datagram: header, CSRCs, extension, payload and padding.
        let ext = p.extension.map_or(0, |e| 4 + e.data.len());
        assert_eq!(
            RTP_HEADER_BYTES
                + p.csrc_count() * 4
                + ext
                + p.payload.len()
                + usize::from(p.padding_len),
            datagram.len()
        );
        assert_eq!(p.csrcs().count(), p.csrc_count());
        assert_eq!(kind == PacketKind::Rtcp, (192..=223).contains(&datagram[1]));
        let _ = p.to_rtp_packet();
        let _ = stats.on_packet(p.sequence_number, p.timestamp, now);
        analysis.on_packet(
            p.sequence_number,
            p.timestamp,
            p.marker,
            p.payload_type,
            now,
        );
        if p.payload_type == 101 {
            let _ = dtmf.on_packet(p.timestamp, p.payload);
        }
        if p.sequence_number % 50 == 0 {
            let _ = stats.report_block(p.ssrc, now);
        }
    }
    let _ = stats.report();
    let _ = (stats.expected(), stats.cumulative_lost(), stats.jitter_ms());
    let _ = (
        analysis.packets(),
        analysis.lost(),
        analysis.max_delta_ms(),
        analysis.max_jitter_ms(),
    );
    let _ = dtmf.flush();
});
