//! RTCP for one call on RTP port + 1 (RFC 3550 §11): a compound report every ~5 s — SR while we
//! send (RR on hold) with a reception block from the RFC 3550 statistics, SDES CNAME, and an
//! RFC 3611 XR VoIP-metrics block filled from the live jitter buffer — and the caller's SR/RR
//! parsed: LSR/DLSR for our next block, and round-trip time, loss and jitter of our stream
//! exported as metrics. Sans-IO: NTP timestamps come from the wall time given at creation plus
//! the `Instant`s fed in, so simulated time gives consistent reports.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ontime_rtp::rtcp::{
    parse_compound, round_trip_time, to_dlsr_units, ExtendedReport, NtpTimestamp, ReceiverReport,
    ReportBlock, RtcpPacket, SdesChunk, SenderInfo, SenderReport, SourceDescription, VoipMetrics,
    XrBlock,
};
use ontime_rtp::{FRAME_BYTES, SAMPLE_RATE_HZ};

use super::inbound::InboundMedia;
use super::stats::{CallStats, PeerReport};

/// RFC 3550 §6.2: with one sender and one receiver at 64 kbit/s the computed interval is below
/// the 5 s minimum, so reports go every 5 s.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// A report to send.
pub struct RtcpOut {
    /// Where.
    pub destination: SocketAddr,
    /// The compound packet.
    pub bytes: Vec<u8>,
}

/// What we know of our outgoing stream for the SR.
#[derive(Debug, Clone, Copy)]
pub struct OutgoingStream {
    /// Our SSRC.
    pub ssrc: u32,
    /// RTP timestamp of the first packet.
    pub first_timestamp: u32,
    /// When the stream started.
    pub started: Instant,
    /// Its RTP clock (8000 Hz, 48000 for Opus): SR timestamps and the peer's jitter count in it.
    pub clock_hz: u32,
}

/// What the caller last told us about our stream.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PeerView {
    /// Round-trip time from their last report block on us.
    pub rtt: Option<Duration>,
    /// Fraction of our packets they lost (0..1).
    pub fraction_lost: f64,
    /// Interarrival jitter they measured on our stream.
    pub jitter: Duration,
    /// Reports received.
    pub reports: u64,
}

/// One call's RTCP state.
pub struct RtcpSession {
    remote: Option<SocketAddr>,
    next_report: Instant,
    our_ssrc: u32,
    outgoing: Option<OutgoingStream>,
    cname: String,
    /// LSR (middle 32 bits of the caller's last SR NTP time) and when it arrived.
    last_sr: Option<(u32, Instant)>,
    peer: PeerView,
    /// One instant and the wall time at it, to turn `Instant`s into NTP timestamps.
    clock: (Instant, Duration),
    /// Symmetric RTP: reports go where the caller's RTCP comes from, once it has come.
    follow_source: bool,
    /// `remote` is the source of the caller's RTCP (not its RTP port + 1).
    source_latched: bool,
}

impl RtcpSession {
    /// A session sending to `remote` (the caller's RTP port + 1), reporting as `our_ssrc`;
    /// `wall` is the wall-clock time at `now`.
    pub fn new(
        remote: Option<SocketAddr>,
        our_ssrc: u32,
        cname: String,
        now: Instant,
        wall: SystemTime,
    ) -> RtcpSession {
        RtcpSession {
            clock: (now, wall.duration_since(UNIX_EPOCH).unwrap_or_default()),
            remote,
            next_report: now + REPORT_INTERVAL,
            our_ssrc,
            outgoing: None,
            cname,
            last_sr: None,
            peer: PeerView::default(),
            follow_source: false,
            source_latched: false,
        }
    }

    /// Symmetric RTP: send reports to the address the caller's first valid RTCP came from
    /// (behind a NAT its RTCP port is mapped apart from its RTP port, so RTP port + 1 may not
    /// reach it); until then, and after each new RTP latch, to the RTP source's port + 1.
    pub fn use_symmetric_rtp(&mut self) {
        self.follow_source = true;
    }

    fn ntp(&self, at: Instant) -> NtpTimestamp {
        let (origin, unix) = self.clock;
        NtpTimestamp::from_unix(unix + at.saturating_duration_since(origin))
    }

    /// The caller's RTCP address changed (latching).
    pub fn set_remote(&mut self, remote: SocketAddr) {
        self.remote = Some(remote);
        self.source_latched = false;
    }

    /// Our outgoing stream (None on hold: we send RR, not SR).
    pub fn set_outgoing(&mut self, outgoing: Option<OutgoingStream>) {
        if let Some(o) = outgoing {
            self.our_ssrc = o.ssrc;
        }
        self.outgoing = outgoing;
    }

    /// What the caller reported about our stream (its round trip places a barge-in's onset
    /// on the caller's side).
    pub fn peer(&self) -> PeerView {
        self.peer
    }

    /// Take a datagram from the RTCP port; only the caller's IP is listened to.
    pub fn handle_packet(
        &mut self,
        bytes: &[u8],
        src: SocketAddr,
        now: Instant,
        caller_ip: Option<IpAddr>,
        stats: &mut CallStats,
    ) {
        if Some(src.ip()) != caller_ip {
            stats.rtp_invalid.add("wrong_source", 1);
            return;
        }
        let packets = match parse_compound(bytes) {
            Ok(p) => p,
            Err(e) => {
                stats.rtp_invalid.add(e.reason(), 1);
                return;
            }
        };
        if self.follow_source && !self.source_latched {
            self.remote = Some(src);
            self.source_latched = true;
        }
        let arrival = self.ntp(now);
        for p in &packets {
            let blocks = match p {
                RtcpPacket::SenderReport(sr) => {
                    self.last_sr = Some((sr.info.ntp.middle_32(), now));
                    &sr.reports
                }
                RtcpPacket::ReceiverReport(rr) => &rr.reports,
                _ => continue,
            };
            for b in blocks.iter().filter(|b| b.ssrc == self.our_ssrc) {
                self.peer.reports += 1;
                stats.rtcp_reports_received += 1;
                self.peer.fraction_lost = f64::from(b.fraction_lost) / 256.0;
                let clock = self.outgoing.map_or(SAMPLE_RATE_HZ, |o| o.clock_hz);
                self.peer.jitter = Duration::from_secs_f64(f64::from(b.jitter) / f64::from(clock));
                let rtt = round_trip_time(arrival, b.last_sr, b.delay_since_last_sr);
                if rtt.is_some() {
                    self.peer.rtt = rtt;
                }
                stats.peer_report = Some(PeerReport {
                    rtt,
                    fraction_lost: self.peer.fraction_lost,
                    jitter: self.peer.jitter,
                });
            }
        }
    }

    /// The next compound report, when due.
    pub fn poll_report(
        &mut self,
        now: Instant,
        inbound: &mut InboundMedia,
        packets_sent: Option<u64>,
    ) -> Option<RtcpOut> {
        if now < self.next_report {
            return None;
        }
        self.next_report = now + REPORT_INTERVAL;
        let destination = self.remote?;
        let bytes = self.build(now, inbound, packets_sent)?;
        Some(RtcpOut { destination, bytes })
    }

    /// Build SR/RR + SDES + XR for `now`; `packets_sent` of our stream (None: not sending).
    pub fn build(
        &mut self,
        now: Instant,
        inbound: &mut InboundMedia,
        packets_sent: Option<u64>,
    ) -> Option<Vec<u8>> {
        let ntp = self.ntp(now);
        let (last_sr, dlsr) = match self.last_sr {
            Some((lsr, at)) => (lsr, to_dlsr_units(now.saturating_duration_since(at))),
            None => (0, 0),
        };
        let mut reports = Vec::new();
        if let Some((ssrc, stats)) = inbound.receiver_stats() {
            reports.push(ReportBlock::from_reception(
                ssrc,
                stats.report(),
                last_sr,
                dlsr,
            ));
        }
        let first = match (self.outgoing, packets_sent) {
            (Some(o), Some(sent)) => {
                let elapsed = now.saturating_duration_since(o.started);
                let rtp_timestamp = o.first_timestamp.wrapping_add(
                    (elapsed.as_micros() * u128::from(o.clock_hz) / 1_000_000) as u32,
                );
                RtcpPacket::SenderReport(SenderReport {
                    ssrc: self.our_ssrc,
                    info: SenderInfo {
                        ntp,
                        rtp_timestamp,
                        packet_count: sent as u32,
                        octet_count: (sent as usize * FRAME_BYTES) as u32,
                    },
                    reports,
                })
            }
            _ => RtcpPacket::ReceiverReport(ReceiverReport {
                ssrc: self.our_ssrc,
                reports,
            }),
        };
        let mut packets = vec![
            first,
            RtcpPacket::SourceDescription(SourceDescription {
                chunks: vec![SdesChunk::cname(self.our_ssrc, &self.cname)],
            }),
        ];
        if let Some((ssrc, _)) = inbound.receiver_stats() {
            let v = inbound.jitter().voip_metrics();
            let rtt_ms = self
                .peer
                .rtt
                .map_or(0, |d| d.as_millis().min(u128::from(u16::MAX)) as u16);
            packets.push(RtcpPacket::ExtendedReport(ExtendedReport {
                ssrc: self.our_ssrc,
                blocks: vec![XrBlock::VoipMetrics(VoipMetrics {
                    ssrc,
                    loss_rate: v.loss_rate_rfc3611,
                    discard_rate: v.discard_rate_rfc3611,
                    burst_density: v.burst_gap.burst_density_rfc3611(),
                    gap_density: v.burst_gap.gap_density_rfc3611(),
                    burst_duration_ms: v.burst_gap.burst_duration_ms_rfc3611(),
                    gap_duration_ms: v.burst_gap.gap_duration_ms_rfc3611(),
                    round_trip_delay_ms: rtt_ms,
                    end_system_delay_ms: v.jb_nominal_ms,
                    // RFC 3611 §4.7.5/4.7.6: 127 means "unavailable"; we do not measure levels,
                    // echo return loss, R-factor or MOS.
                    signal_level: 127,
                    noise_level: 127,
                    rerl: 127,
                    gmin: v.gmin,
                    r_factor: 127,
                    ext_r_factor: 127,
                    mos_lq: 127,
                    mos_cq: 127,
                    // §4.7.7 RX config: PLC unspecified (00), JBA adaptive (11), JB rate 0.
                    rx_config: if v.adaptive { 0b0000_1100 } else { 0b0000_0100 },
                    jb_nominal_ms: v.jb_nominal_ms,
                    jb_maximum_ms: v.jb_maximum_ms,
                    jb_abs_max_ms: v.jb_abs_max_ms,
                })],
            }));
        }
        let mut buf = vec![0u8; 1500];
        let n = ontime_rtp::rtcp::write_compound(&packets, &mut buf).ok()?;
        buf.truncate(n);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_rtp::{Packetizer, PT_PCMU};
    use ontime_sip::{Codec, Direction, NegotiatedMedia};

    #[test]
    fn report_carries_sr_reception_sdes_and_xr_and_peer_rr_gives_rtt() {
        let caller: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let media = NegotiatedMedia {
            remote_rtp: Some(caller),
            codec: Codec::Pcmu,
            payload_type: PT_PCMU,
            telephone_event_pt: None,
            remote_ptime_ms: None,
            remote_maxptime_ms: None,
            local_direction: Direction::SendRecv,
            srtp: false,
        };
        let t0 = Instant::now();
        let mut inbound = InboundMedia::new(media, Some(caller.ip()), t0);
        let mut p = Packetizer::with_initial(PT_PCMU, 0xCA11, 1, 0);
        let mut buf = [0u8; 200];
        for i in 0..50u32 {
            if i == 20 {
                let _ = p.write_frame(&[0xFF; 160], &mut buf).unwrap(); // built, never delivered: lost
                continue;
            }
            let n = p.write_frame(&[0xFF; 160], &mut buf).unwrap();
            inbound.handle_datagram(&buf[..n], caller, t0 + ontime_rtp::FRAME * i);
            inbound.pop(t0 + ontime_rtp::FRAME * i, |_, _, _| {});
        }
        let mut stats = CallStats::default();
        let mut s = RtcpSession::new(
            Some("127.0.0.1:40001".parse().unwrap()),
            0x5E0D,
            "ontime@test".into(),
            t0,
            SystemTime::now(),
        );
        s.set_outgoing(Some(OutgoingStream {
            ssrc: 0x5E0D,
            first_timestamp: 1000,
            started: t0,
            clock_hz: SAMPLE_RATE_HZ,
        }));
        let bytes = s
            .build(t0 + Duration::from_secs(1), &mut inbound, Some(50))
            .unwrap();
        let packets = parse_compound(&bytes).unwrap();
        let RtcpPacket::SenderReport(sr) = &packets[0] else {
            panic!("first is not SR: {packets:?}")
        };
        assert_eq!(sr.ssrc, 0x5E0D);
        assert_eq!(sr.info.packet_count, 50);
        assert_eq!(sr.reports.len(), 1);
        assert_eq!(sr.reports[0].ssrc, 0xCA11);
        assert_eq!(sr.reports[0].cumulative_lost, 1);
        assert!(
            matches!(&packets[1], RtcpPacket::SourceDescription(d) if d.chunks[0].cname_text() == Some("ontime@test"))
        );
        let RtcpPacket::ExtendedReport(xr) = &packets[2] else {
            panic!("no XR")
        };
        let XrBlock::VoipMetrics(v) = &xr.blocks[0] else {
            panic!("no VoIP metrics block")
        };
        assert_eq!(v.ssrc, 0xCA11);
        // One of 50 lost: 1/50 in RFC 3611's 1/256 units, rounded down.
        assert_eq!(
            v.loss_rate,
            5,
            "one of 50 lost shows in the loss rate: {v:?} {:?}",
            inbound.jitter_counters()
        );
        // The buffer's floor, its deepest in this call and its configured ceiling.
        assert_eq!(
            (v.jb_nominal_ms, v.jb_maximum_ms, v.jb_abs_max_ms),
            (20, 40, 200)
        );

        // The caller's RR on our stream, with LSR = our SR's NTP middle bits: an RTT comes out.
        let rr = RtcpPacket::ReceiverReport(ReceiverReport {
            ssrc: 0xCA11,
            reports: vec![ReportBlock {
                ssrc: 0x5E0D,
                fraction_lost: 64,
                cumulative_lost: 3,
                extended_highest_sequence: 100,
                jitter: 80,
                last_sr: sr.info.ntp.middle_32(),
                delay_since_last_sr: 0,
            }],
        });
        let mut out = [0u8; 200];
        let n = ontime_rtp::rtcp::write_compound(&[rr], &mut out).unwrap();
        // The RR arrives 30 ms (simulated) after our SR left.
        let rr_at = t0 + Duration::from_millis(1030);
        s.handle_packet(
            &out[..n],
            "127.0.0.1:40001".parse().unwrap(),
            rr_at,
            Some(caller.ip()),
            &mut stats,
        );
        let peer = s.peer();
        assert_eq!(stats.rtcp_reports_received, 1);
        assert_eq!(stats.peer_report.map(|p| p.rtt), Some(peer.rtt));
        assert_eq!(peer.reports, 1);
        assert!((peer.fraction_lost - 0.25).abs() < 1e-9);
        assert_eq!(peer.jitter, Duration::from_millis(10));
        let rtt = peer.rtt.expect("an RTT from the RR");
        // NTP short format resolves 1/65536 s.
        assert!(
            rtt.abs_diff(Duration::from_millis(30)) < Duration::from_micros(50),
            "{rtt:?}"
        );
        // From a stranger: ignored.
        s.handle_packet(
            &out[..n],
            "127.0.0.9:40001".parse().unwrap(),
            rr_at,
            Some(caller.ip()),
            &mut stats,
        );
        assert_eq!(s.peer().reports, 1);
        assert_eq!(stats.rtp_invalid.get("wrong_source"), 1);
    }
}
