//! RTCP (RFC 3550 §6): SR, RR, SDES CNAME, BYE, compound packets, and XR with the VoIP Metrics
//! report block (RFC 3611 §4.7), plus NTP timestamps and round-trip time from LSR/DLSR.
//!
//! Written here rather than on webrtc-rs `rtcp`: that crate returns `Box<dyn Packet>` trait objects
//! to downcast and a stringly `util::Error`, while the receive path wants plain enums, a typed
//! error whose [`RtcpError::reason`] labels a metric, and a proptest-backed promise of no panic.
//! RTCP is sent every few seconds, so building into a `Vec` is fine; [`write_compound`] also
//! writes into a caller buffer.

use std::time::Duration;

// The error types live in `error`, a leaf every module may use; the re-export keeps the
// `rtcp::RtcpError` path.
pub use crate::error::RtcpError;
use crate::{Error, Result};

/// Reception figures for one RTCP report block (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceptionReport {
    /// Fraction lost since the previous report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative lost, clamped to 24 bits signed.
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub extended_highest_sequence: u32,
    /// Interarrival jitter in timestamp units.
    pub jitter: u32,
}

/// Packet type of a sender report (RFC 3550 §6.4.1).
pub const PT_SR: u8 = 200;
/// Packet type of a receiver report (RFC 3550 §6.4.2).
pub const PT_RR: u8 = 201;
/// Packet type of source description (RFC 3550 §6.5).
pub const PT_SDES: u8 = 202;
/// Packet type of goodbye (RFC 3550 §6.6).
pub const PT_BYE: u8 = 203;
/// Packet type of application-defined (RFC 3550 §6.7).
pub const PT_APP: u8 = 204;
/// Packet type of extended reports (RFC 3611 §2).
pub const PT_XR: u8 = 207;
/// SDES item type CNAME (RFC 3550 §6.5.1).
pub const SDES_CNAME: u8 = 1;
/// XR block type of VoIP Metrics (RFC 3611 §4.7).
pub const XR_VOIP_METRICS: u8 = 7;
/// Bytes of a VoIP Metrics block, header included (block length field 8).
pub const XR_VOIP_METRICS_BYTES: usize = 36;
/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
pub const NTP_UNIX_OFFSET_SECS: u64 = 2_208_988_800;
/// Most report blocks or sources one packet can count (5-bit field).
pub const MAX_COUNT: usize = 31;

// ------------------------------------------------------------------ NTP and round-trip time

/// A 64-bit NTP timestamp (RFC 3550 §4): seconds since 1900 in the high 32 bits, fraction low.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NtpTimestamp(pub u64);

impl NtpTimestamp {
    /// From a wall-clock time given as a `Duration` since the Unix epoch (the caller reads the
    /// clock, e.g. `SystemTime::now().duration_since(UNIX_EPOCH)`).
    pub fn from_unix(since_unix_epoch: Duration) -> Self {
        let secs = since_unix_epoch
            .as_secs()
            .wrapping_add(NTP_UNIX_OFFSET_SECS);
        let frac = (u64::from(since_unix_epoch.subsec_nanos()) << 32) / 1_000_000_000;
        NtpTimestamp((secs << 32) | frac)
    }

    /// Back to a `Duration` since the Unix epoch (saturating at the epoch).
    pub fn to_unix(self) -> Duration {
        let secs = (self.0 >> 32).saturating_sub(NTP_UNIX_OFFSET_SECS);
        let nanos = ((self.0 & 0xFFFF_FFFF) * 1_000_000_000) >> 32;
        Duration::new(secs, nanos as u32)
    }

    /// The middle 32 bits, as carried in LSR and used for round-trip time (§6.4.1).
    pub fn middle_32(self) -> u32 {
        (self.0 >> 16) as u32
    }
}

/// Converts a `Duration` to the 1/65536-second units of DLSR.
pub fn to_dlsr_units(delay: Duration) -> u32 {
    ((delay.as_nanos() << 16) / 1_000_000_000).min(u128::from(u32::MAX)) as u32
}

/// Round-trip time from a report block (RFC 3550 §6.4.1): `arrival − LSR − DLSR`, all in
/// 1/65536 s, where `arrival` is when the RR/SR carrying the block arrived. `None` when LSR is
/// 0 (no SR received yet) or the result would be negative (clocks disagree).
pub fn round_trip_time(
    arrival: NtpTimestamp,
    last_sr: u32,
    delay_since_last_sr: u32,
) -> Option<Duration> {
    if last_sr == 0 {
        return None;
    }
    let rtt_units = arrival
        .middle_32()
        .wrapping_sub(last_sr)
        .wrapping_sub(delay_since_last_sr);
    // Middle-32 arithmetic wraps every 18 h; a "negative" RTT shows up as a huge value.
    if rtt_units > 0x8000_0000 {
        return None;
    }
    Some(Duration::from_nanos(
        (u64::from(rtt_units) * 1_000_000_000) >> 16,
    ))
}

// ------------------------------------------------------------------ packet types

/// One reception report block (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportBlock {
    /// Source this block reports on.
    pub ssrc: u32,
    /// Fraction lost since the previous report, 1/256.
    pub fraction_lost: u8,
    /// Cumulative packets lost, signed 24 bits (−8,388,608 ..= 8,388,607).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub extended_highest_sequence: u32,
    /// Interarrival jitter, timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the last SR's NTP timestamp from this source (0: none).
    pub last_sr: u32,
    /// Delay since that SR, 1/65536 s.
    pub delay_since_last_sr: u32,
}

impl ReportBlock {
    /// A block from receiver statistics plus the LSR/DLSR the caller tracked.
    pub fn from_reception(
        ssrc: u32,
        reception: ReceptionReport,
        last_sr: u32,
        delay_since_last_sr: u32,
    ) -> Self {
        ReportBlock {
            ssrc,
            fraction_lost: reception.fraction_lost,
            cumulative_lost: reception.cumulative_lost,
            extended_highest_sequence: reception.extended_highest_sequence,
            jitter: reception.jitter,
            last_sr,
            delay_since_last_sr,
        }
    }
}

/// Sender information of an SR (RFC 3550 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SenderInfo {
    /// Wall clock when the report was sent.
    pub ntp: NtpTimestamp,
    /// The same instant on the RTP clock.
    pub rtp_timestamp: u32,
    /// Packets sent since the start.
    pub packet_count: u32,
    /// Payload octets sent since the start.
    pub octet_count: u32,
}

/// Sender report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SenderReport {
    /// Sender's SSRC.
    pub ssrc: u32,
    /// Sender information.
    pub info: SenderInfo,
    /// Reception reports (at most 31).
    pub reports: Vec<ReportBlock>,
}

/// Receiver report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReceiverReport {
    /// Reporter's SSRC.
    pub ssrc: u32,
    /// Reception reports (at most 31).
    pub reports: Vec<ReportBlock>,
}

/// One SDES item (RFC 3550 §6.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdesItem {
    /// Item type (1 CNAME, 2 NAME, …).
    pub kind: u8,
    /// Item text (UTF-8 by the RFC, kept as bytes; at most 255).
    pub text: Vec<u8>,
}

/// One SDES chunk: a source and its items.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SdesChunk {
    /// Source described.
    pub ssrc: u32,
    /// Items in order.
    pub items: Vec<SdesItem>,
}

impl SdesChunk {
    /// A chunk with just a CNAME.
    pub fn cname(ssrc: u32, cname: &str) -> Self {
        SdesChunk {
            ssrc,
            items: vec![SdesItem {
                kind: SDES_CNAME,
                text: cname.as_bytes().to_vec(),
            }],
        }
    }

    /// The CNAME item's text, if present and UTF-8.
    pub fn cname_text(&self) -> Option<&str> {
        self.items
            .iter()
            .find(|i| i.kind == SDES_CNAME)
            // Some gateways count a trailing NUL into the item (seen in rtp-protocol.pcap).
            .and_then(|i| std::str::from_utf8(&i.text).ok())
            .map(|t| t.trim_end_matches('\0'))
    }
}

/// Source description.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceDescription {
    /// Chunks (at most 31).
    pub chunks: Vec<SdesChunk>,
}

/// Goodbye.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Goodbye {
    /// Sources leaving (at most 31).
    pub sources: Vec<u32>,
    /// Optional reason (at most 255 bytes).
    pub reason: Option<Vec<u8>>,
}

/// The VoIP Metrics report block (RFC 3611 §4.7). Unavailable values use the RFC's markers
/// (127 for levels, 0 for delays, 127 for R factors and MOS, …); this type carries the raw fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VoipMetrics {
    /// Source the metrics describe.
    pub ssrc: u32,
    /// Fraction of packets lost, 1/256 (§4.7.1).
    pub loss_rate: u8,
    /// Fraction of packets discarded by the jitter buffer, 1/256.
    pub discard_rate: u8,
    /// Loss+discard density within bursts, 1/256 (§4.7.2).
    pub burst_density: u8,
    /// Loss+discard density within gaps, 1/256.
    pub gap_density: u8,
    /// Mean burst duration, ms.
    pub burst_duration_ms: u16,
    /// Mean gap duration, ms.
    pub gap_duration_ms: u16,
    /// Most recent round-trip delay, ms (§4.7.3).
    pub round_trip_delay_ms: u16,
    /// End-system delay, ms.
    pub end_system_delay_ms: u16,
    /// Signal level, dBm0 (signed; 127 unavailable) (§4.7.4).
    pub signal_level: i8,
    /// Noise level, dBm0 (signed; 127 unavailable).
    pub noise_level: i8,
    /// Residual echo return loss, dB (127 unavailable).
    pub rerl: u8,
    /// Gap threshold (Gmin; 16 recommended).
    pub gmin: u8,
    /// R factor (§4.7.5; 127 unavailable).
    pub r_factor: u8,
    /// External R factor (127 unavailable).
    pub ext_r_factor: u8,
    /// MOS listening quality ×10 (127 unavailable).
    pub mos_lq: u8,
    /// MOS conversational quality ×10 (127 unavailable).
    pub mos_cq: u8,
    /// Receiver configuration byte (§4.7.6: PLC, jitter buffer adaptive/rate).
    pub rx_config: u8,
    /// Jitter buffer nominal delay, ms (§4.7.7).
    pub jb_nominal_ms: u16,
    /// Jitter buffer maximum delay, ms.
    pub jb_maximum_ms: u16,
    /// Jitter buffer absolute maximum delay, ms.
    pub jb_abs_max_ms: u16,
}

/// One XR report block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum XrBlock {
    /// VoIP Metrics (BT = 7).
    VoipMetrics(VoipMetrics),
    /// Any other block type, kept raw.
    Other {
        /// Block type.
        block_type: u8,
        /// Type-specific byte.
        type_specific: u8,
        /// Block body (multiple of 4 bytes).
        body: Vec<u8>,
    },
}

/// Extended report (RFC 3611).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExtendedReport {
    /// Reporter's SSRC.
    pub ssrc: u32,
    /// Report blocks.
    pub blocks: Vec<XrBlock>,
}

/// One RTCP packet of a compound datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtcpPacket {
    /// SR.
    SenderReport(SenderReport),
    /// RR.
    ReceiverReport(ReceiverReport),
    /// SDES.
    SourceDescription(SourceDescription),
    /// BYE.
    Goodbye(Goodbye),
    /// XR.
    ExtendedReport(ExtendedReport),
    /// A type not interpreted here (APP, feedback, …), kept raw.
    Unknown {
        /// Packet type.
        packet_type: u8,
        /// The 5-bit count/subtype field.
        count: u8,
        /// Body after the 4-byte header, padding removed.
        body: Vec<u8>,
    },
}

// ------------------------------------------------------------------ writing

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        let end = self.at + bytes.len();
        let Some(dst) = self.out.get_mut(self.at..end) else {
            return Err(Error::BufferTooSmall {
                needed: end,
                available: self.out.len(),
            });
        };
        dst.copy_from_slice(bytes);
        self.at = end;
        Ok(())
    }
    fn u8(&mut self, v: u8) -> Result<()> {
        self.put(&[v])
    }
    fn u16(&mut self, v: u16) -> Result<()> {
        self.put(&v.to_be_bytes())
    }
    fn u32(&mut self, v: u32) -> Result<()> {
        self.put(&v.to_be_bytes())
    }
    fn pad4(&mut self) -> Result<()> {
        while !self.at.is_multiple_of(4) {
            self.u8(0)?;
        }
        Ok(())
    }
}

fn check_count(field: &'static str, n: usize) -> Result<u8> {
    if n > MAX_COUNT {
        return Err(Error::FieldOverflow {
            field,
            value: n as u64,
        });
    }
    Ok(n as u8)
}

fn write_block(w: &mut Writer<'_>, b: &ReportBlock) -> Result<()> {
    if !(-0x80_0000..=0x7F_FFFF).contains(&b.cumulative_lost) {
        return Err(Error::FieldOverflow {
            field: "cumulative lost",
            value: i64::from(b.cumulative_lost).unsigned_abs(),
        });
    }
    w.u32(b.ssrc)?;
    let lost = (b.cumulative_lost as u32) & 0x00FF_FFFF;
    w.u32((u32::from(b.fraction_lost) << 24) | lost)?;
    w.u32(b.extended_highest_sequence)?;
    w.u32(b.jitter)?;
    w.u32(b.last_sr)?;
    w.u32(b.delay_since_last_sr)
}

impl RtcpPacket {
    /// Packet type byte.
    pub fn packet_type(&self) -> u8 {
        match self {
            RtcpPacket::SenderReport(_) => PT_SR,
            RtcpPacket::ReceiverReport(_) => PT_RR,
            RtcpPacket::SourceDescription(_) => PT_SDES,
            RtcpPacket::Goodbye(_) => PT_BYE,
            RtcpPacket::ExtendedReport(_) => PT_XR,
            RtcpPacket::Unknown { packet_type, .. } => *packet_type,
        }
    }

    /// Writes this packet (no padding) into `out`; returns its length (a multiple of 4).
    pub fn write_to(&self, out: &mut [u8]) -> Result<usize> {
        let mut w = Writer { out, at: 0 };
        // Header with a placeholder length, patched at the end.
        let count = match self {
            RtcpPacket::SenderReport(sr) => check_count("SR report count", sr.reports.len())?,
            RtcpPacket::ReceiverReport(rr) => check_count("RR report count", rr.reports.len())?,
            RtcpPacket::SourceDescription(sd) => check_count("SDES chunk count", sd.chunks.len())?,
            RtcpPacket::Goodbye(bye) => check_count("BYE source count", bye.sources.len())?,
            RtcpPacket::ExtendedReport(_) => 0,
            RtcpPacket::Unknown { count, .. } => count & 0x1F,
        };
        w.u8(0x80 | count)?;
        w.u8(self.packet_type())?;
        w.u16(0)?;
        match self {
            RtcpPacket::SenderReport(sr) => {
                w.u32(sr.ssrc)?;
                w.u32((sr.info.ntp.0 >> 32) as u32)?;
                w.u32(sr.info.ntp.0 as u32)?;
                w.u32(sr.info.rtp_timestamp)?;
                w.u32(sr.info.packet_count)?;
                w.u32(sr.info.octet_count)?;
                for b in &sr.reports {
                    write_block(&mut w, b)?;
                }
            }
            RtcpPacket::ReceiverReport(rr) => {
                w.u32(rr.ssrc)?;
                for b in &rr.reports {
                    write_block(&mut w, b)?;
                }
            }
            RtcpPacket::SourceDescription(sd) => {
                for chunk in &sd.chunks {
                    w.u32(chunk.ssrc)?;
                    for item in &chunk.items {
                        if item.kind == 0 {
                            return Err(Error::FieldOverflow {
                                field: "SDES item type 0 (reserved for the end)",
                                value: 0,
                            });
                        }
                        let len =
                            u8::try_from(item.text.len()).map_err(|_| Error::FieldOverflow {
                                field: "SDES item length",
                                value: item.text.len() as u64,
                            })?;
                        w.u8(item.kind)?;
                        w.u8(len)?;
                        w.put(&item.text)?;
                    }
                    // RFC 3550 §6.5: a null item ends the list, then pad to 32 bits (at least one 0).
                    w.u8(0)?;
                    w.pad4()?;
                }
            }
            RtcpPacket::Goodbye(bye) => {
                for s in &bye.sources {
                    w.u32(*s)?;
                }
                if let Some(reason) = &bye.reason {
                    let len = u8::try_from(reason.len()).map_err(|_| Error::FieldOverflow {
                        field: "BYE reason length",
                        value: reason.len() as u64,
                    })?;
                    w.u8(len)?;
                    w.put(reason)?;
                    w.pad4()?;
                }
            }
            RtcpPacket::ExtendedReport(xr) => {
                w.u32(xr.ssrc)?;
                for block in &xr.blocks {
                    match block {
                        XrBlock::VoipMetrics(m) => {
                            w.put(&[XR_VOIP_METRICS, 0])?;
                            w.u16(8)?;
                            w.u32(m.ssrc)?;
                            w.put(&[m.loss_rate, m.discard_rate, m.burst_density, m.gap_density])?;
                            w.u16(m.burst_duration_ms)?;
                            w.u16(m.gap_duration_ms)?;
                            w.u16(m.round_trip_delay_ms)?;
                            w.u16(m.end_system_delay_ms)?;
                            w.put(&[m.signal_level as u8, m.noise_level as u8, m.rerl, m.gmin])?;
                            w.put(&[m.r_factor, m.ext_r_factor, m.mos_lq, m.mos_cq])?;
                            w.put(&[m.rx_config, 0])?;
                            w.u16(m.jb_nominal_ms)?;
                            w.u16(m.jb_maximum_ms)?;
                            w.u16(m.jb_abs_max_ms)?;
                        }
                        XrBlock::Other {
                            block_type,
                            type_specific,
                            body,
                        } => {
                            if !body.len().is_multiple_of(4)
                                || body.len() / 4 > usize::from(u16::MAX)
                            {
                                return Err(Error::FieldOverflow {
                                    field: "XR block body length",
                                    value: body.len() as u64,
                                });
                            }
                            w.put(&[*block_type, *type_specific])?;
                            w.u16((body.len() / 4) as u16)?;
                            w.put(body)?;
                        }
                    }
                }
            }
            RtcpPacket::Unknown { body, .. } => {
                w.put(body)?;
                w.pad4()?;
            }
        }
        let len = w.at;
        let words = len / 4 - 1;
        let words = u16::try_from(words).map_err(|_| Error::FieldOverflow {
            field: "RTCP length",
            value: words as u64,
        })?;
        w.out[2..4].copy_from_slice(&words.to_be_bytes());
        Ok(len)
    }

    /// This packet as a new `Vec`.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 65_536];
        let n = self.write_to(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// Writes packets back to back as one compound datagram; returns its length. RFC 3550 §6.1 wants
/// an SR or RR first and an SDES CNAME in it; building one that does not is an error.
pub fn write_compound(packets: &[RtcpPacket], out: &mut [u8]) -> Result<usize> {
    match packets.first() {
        Some(RtcpPacket::SenderReport(_) | RtcpPacket::ReceiverReport(_)) => {}
        Some(p) => {
            return Err(RtcpError::CompoundStart {
                packet_type: p.packet_type(),
            }
            .into())
        }
        None => return Err(RtcpError::TooShort { needed: 8, len: 0 }.into()),
    }
    let mut at = 0;
    for p in packets {
        let Some(rest) = out.get_mut(at..) else {
            return Err(Error::BufferTooSmall {
                needed: at,
                available: out.len(),
            });
        };
        at += p.write_to(rest)?;
    }
    Ok(at)
}

// ------------------------------------------------------------------ parsing

fn be32(b: &[u8], at: usize) -> u32 {
    // Callers check lengths first; `get` keeps this panic-free regardless.
    b.get(at..at + 4)
        .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

fn be16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |w| u16::from_be_bytes([w[0], w[1]]))
}

fn parse_blocks(body: &[u8], count: u8) -> Result<Vec<ReportBlock>, RtcpError> {
    let needed = usize::from(count) * 24;
    if body.len() < needed {
        return Err(RtcpError::ReportCount {
            count,
            needed: needed + 4,
            len: body.len() + 4,
        });
    }
    Ok(body[..needed]
        .chunks_exact(24)
        .map(|b| {
            let word = be32(b, 4);
            // Sign-extend the 24-bit cumulative loss.
            let lost = ((word << 8) as i32) >> 8;
            ReportBlock {
                ssrc: be32(b, 0),
                fraction_lost: (word >> 24) as u8,
                cumulative_lost: lost,
                extended_highest_sequence: be32(b, 8),
                jitter: be32(b, 12),
                last_sr: be32(b, 16),
                delay_since_last_sr: be32(b, 20),
            }
        })
        .collect())
}

fn parse_sdes(body: &[u8], count: u8) -> Result<SourceDescription, RtcpError> {
    let mut chunks = Vec::with_capacity(usize::from(count));
    let mut at = 0;
    for _ in 0..count {
        if body.len() < at + 4 {
            return Err(RtcpError::Sdes { offset: at + 4 });
        }
        let ssrc = be32(body, at);
        at += 4;
        let mut items = Vec::new();
        loop {
            let Some(&kind) = body.get(at) else {
                return Err(RtcpError::Sdes { offset: at + 4 });
            };
            if kind == 0 {
                // End of list: skip to the next 32-bit boundary.
                at += 1;
                at = at.div_ceil(4) * 4;
                break;
            }
            let Some(&len) = body.get(at + 1) else {
                return Err(RtcpError::Sdes { offset: at + 5 });
            };
            let start = at + 2;
            let end = start + usize::from(len);
            let Some(text) = body.get(start..end) else {
                return Err(RtcpError::Sdes { offset: start + 4 });
            };
            items.push(SdesItem {
                kind,
                text: text.to_vec(),
            });
            at = end;
        }
        if at > body.len() {
            return Err(RtcpError::Sdes { offset: at + 4 });
        }
        chunks.push(SdesChunk { ssrc, items });
    }
    Ok(SourceDescription { chunks })
}

fn parse_bye(body: &[u8], count: u8) -> Result<Goodbye, RtcpError> {
    let needed = usize::from(count) * 4;
    if body.len() < needed {
        return Err(RtcpError::ReportCount {
            count,
            needed: needed + 4,
            len: body.len() + 4,
        });
    }
    let sources = body[..needed].chunks_exact(4).map(|w| be32(w, 0)).collect();
    let reason = match body.get(needed) {
        None => None,
        Some(&reason_len) => {
            let text = body
                .get(needed + 1..needed + 1 + usize::from(reason_len))
                .ok_or(RtcpError::Bye { reason_len })?;
            Some(text.to_vec())
        }
    };
    Ok(Goodbye { sources, reason })
}

fn parse_xr(body: &[u8]) -> Result<ExtendedReport, RtcpError> {
    if body.len() < 4 {
        return Err(RtcpError::TooShort {
            needed: 8,
            len: body.len() + 4,
        });
    }
    let ssrc = be32(body, 0);
    let mut blocks = Vec::new();
    let mut at = 4;
    while at < body.len() {
        let header = body.get(at..at + 4).ok_or(RtcpError::Xr {
            block_type: body[at],
            detail: "block header truncated",
        })?;
        let (block_type, type_specific) = (header[0], header[1]);
        let words = usize::from(be16(header, 2));
        let block_body = body.get(at + 4..at + 4 + words * 4).ok_or(RtcpError::Xr {
            block_type,
            detail: "block length runs past the packet",
        })?;
        if block_type == XR_VOIP_METRICS {
            if words != 8 {
                return Err(RtcpError::Xr {
                    block_type,
                    detail: "VoIP Metrics block length must be 8",
                });
            }
            let b = block_body;
            blocks.push(XrBlock::VoipMetrics(VoipMetrics {
                ssrc: be32(b, 0),
                loss_rate: b[4],
                discard_rate: b[5],
                burst_density: b[6],
                gap_density: b[7],
                burst_duration_ms: be16(b, 8),
                gap_duration_ms: be16(b, 10),
                round_trip_delay_ms: be16(b, 12),
                end_system_delay_ms: be16(b, 14),
                signal_level: b[16] as i8,
                noise_level: b[17] as i8,
                rerl: b[18],
                gmin: b[19],
                r_factor: b[20],
                ext_r_factor: b[21],
                mos_lq: b[22],
                mos_cq: b[23],
                rx_config: b[24],
                jb_nominal_ms: be16(b, 26),
                jb_maximum_ms: be16(b, 28),
                jb_abs_max_ms: be16(b, 30),
            }));
        } else {
            blocks.push(XrBlock::Other {
                block_type,
                type_specific,
                body: block_body.to_vec(),
            });
        }
        at += 4 + words * 4;
    }
    Ok(ExtendedReport { ssrc, blocks })
}

/// Parses every RTCP packet in a datagram (RFC 3550 §6.1, A.2 checks: version 2, lengths that
/// add up to the datagram, padding only where its count fits). Does not require SR/RR first;
/// see [`parse_compound`]. Never panics.
pub fn parse_rtcp(bytes: &[u8]) -> Result<Vec<RtcpPacket>, RtcpError> {
    if bytes.len() < 4 {
        return Err(RtcpError::TooShort {
            needed: 4,
            len: bytes.len(),
        });
    }
    let mut packets = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        // Tolerate up to 3 zero bytes after the last packet: a relay in SIP_CALL_RTP_G711 appends
        // two, and Wireshark's length check accepts the compound too.
        if rest.len() < 4 && !packets.is_empty() && rest.iter().all(|&b| b == 0) {
            break;
        }
        if rest.len() < 4 {
            return Err(RtcpError::TooShort {
                needed: 4,
                len: rest.len(),
            });
        }
        let version = rest[0] >> 6;
        if version != 2 {
            return Err(RtcpError::Version { version });
        }
        let padded = rest[0] & 0x20 != 0;
        let count = rest[0] & 0x1F;
        let packet_type = rest[1];
        let declared = (usize::from(be16(rest, 2)) + 1) * 4;
        if declared > rest.len() {
            return Err(RtcpError::Length {
                declared,
                available: rest.len(),
            });
        }
        let (packet, tail) = rest.split_at(declared);
        rest = tail;
        let mut body = &packet[4..];
        if padded {
            let padding = packet[declared - 1];
            if padding == 0 || usize::from(padding) > body.len() {
                return Err(RtcpError::Padding {
                    padding,
                    len: declared,
                });
            }
            body = &body[..body.len() - usize::from(padding)];
        }
        let parsed = match packet_type {
            PT_SR => {
                if body.len() < 24 {
                    return Err(RtcpError::TooShort {
                        needed: 28,
                        len: body.len() + 4,
                    });
                }
                RtcpPacket::SenderReport(SenderReport {
                    ssrc: be32(body, 0),
                    info: SenderInfo {
                        ntp: NtpTimestamp(
                            (u64::from(be32(body, 4)) << 32) | u64::from(be32(body, 8)),
                        ),
                        rtp_timestamp: be32(body, 12),
                        packet_count: be32(body, 16),
                        octet_count: be32(body, 20),
                    },
                    reports: parse_blocks(&body[24..], count)?,
                })
            }
            PT_RR => {
                if body.len() < 4 {
                    return Err(RtcpError::TooShort {
                        needed: 8,
                        len: body.len() + 4,
                    });
                }
                RtcpPacket::ReceiverReport(ReceiverReport {
                    ssrc: be32(body, 0),
                    reports: parse_blocks(&body[4..], count)?,
                })
            }
            PT_SDES => RtcpPacket::SourceDescription(parse_sdes(body, count)?),
            PT_BYE => RtcpPacket::Goodbye(parse_bye(body, count)?),
            PT_XR => RtcpPacket::ExtendedReport(parse_xr(body)?),
            _ => RtcpPacket::Unknown {
                packet_type,
                count,
                body: body.to_vec(),
            },
        };
        packets.push(parsed);
    }
    Ok(packets)
}

/// Parses a compound RTCP datagram and checks RFC 3550 §6.1: the first packet is SR or RR.
pub fn parse_compound(bytes: &[u8]) -> Result<Vec<RtcpPacket>, RtcpError> {
    let packets = parse_rtcp(bytes)?;
    match packets.first() {
        Some(RtcpPacket::SenderReport(_) | RtcpPacket::ReceiverReport(_)) => Ok(packets),
        Some(p) => Err(RtcpError::CompoundStart {
            packet_type: p.packet_type(),
        }),
        None => Err(RtcpError::TooShort {
            needed: 8,
            len: bytes.len(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // webrtc-rs rtc-rtcp sender_report_test "valid" (STANDARDS-NOTES.md). Its length field says 7
    // words (32 bytes) while the report block makes it 13 (52 bytes).
    const SR_VALID: &str = "81c80007 902f9e2e da8bd1fc dddda05a aaf4edd5 00000001 00000002 bc5e9a40 00000000 000046e1 00000111 09f36432 00024a79";

    #[test]
    fn sender_report_vector() {
        let mut bytes = hex(SR_VALID);
        // As published, RFC 3550's length rule rejects it: the block does not fit 7 words.
        assert_eq!(
            parse_rtcp(&bytes).unwrap_err(),
            RtcpError::ReportCount {
                count: 1,
                needed: 28,
                len: 8
            }
        );
        // With the length the RFC requires, the fields are those of the vector's description.
        bytes[3] = 12;
        let packets = parse_compound(&bytes).unwrap();
        let RtcpPacket::SenderReport(sr) = &packets[0] else {
            panic!("not an SR")
        };
        assert_eq!(sr.ssrc, 0x902f9e2e);
        assert_eq!(sr.info.ntp, NtpTimestamp(0xda8bd1fcdddda05a));
        assert_eq!(sr.info.rtp_timestamp, 0xaaf4edd5);
        assert_eq!((sr.info.packet_count, sr.info.octet_count), (1, 2));
        assert_eq!(
            sr.reports,
            vec![ReportBlock {
                ssrc: 0xbc5e9a40,
                fraction_lost: 0,
                cumulative_lost: 0,
                extended_highest_sequence: 0x46e1,
                jitter: 273,
                last_sr: 0x9f36432,
                delay_since_last_sr: 150137,
            }]
        );
        assert_eq!(
            packets[0].to_vec().unwrap(),
            bytes,
            "build reproduces the bytes"
        );
    }

    #[test]
    fn receiver_report_vectors() {
        // webrtc-rs rtc-rtcp receiver_report_test "valid" and "valid with extension data".
        let rr = hex("81c90007 902f9e2e bc5e9a40 00000000 000046e1 00000111 09f36432 00024a79");
        let packets = parse_compound(&rr).unwrap();
        assert_eq!(packets[0].to_vec().unwrap(), rr);
        let with_ext = hex("81c90009 902f9e2e bc5e9a40 00000000 000046e1 00000111 09f36432 00024a79 54455354 44415441");
        let RtcpPacket::ReceiverReport(r) = &parse_rtcp(&with_ext).unwrap()[0] else {
            panic!()
        };
        assert_eq!(r.reports.len(), 1, "profile extension bytes are skipped");
        // "bad count in header": RC = 2 with one block.
        let bad = hex("82c90007 902f9e2e bc5e9a40 00000000 000046e1 00000111 09f36432 00024a79");
        assert_eq!(parse_rtcp(&bad).unwrap_err().reason(), "rtcp_report_count");
        // "short report": length says 13 words, 8 bytes present.
        let short = hex("81c9000c 902f9e2e 00000000");
        assert!(matches!(
            parse_rtcp(&short).unwrap_err(),
            RtcpError::Length {
                declared: 52,
                available: 12
            }
        ));
        assert_eq!(parse_rtcp(&[]).unwrap_err().reason(), "rtcp_too_short");
    }

    #[test]
    fn captured_compounds_parse_and_rebuild() {
        // rtp-protocol.pcap (AudioCodes): SR with no blocks + SDES CNAME "c0".
        let ac = hex("80c80006 44c61afb 001cd3b3 da1cab0c 32a1053c 00000001 000000a0 81ca0003 44c61afb 01036330 00000000");
        let packets = parse_compound(&ac).unwrap();
        assert_eq!(packets.len(), 2);
        let RtcpPacket::SourceDescription(sd) = &packets[1] else {
            panic!()
        };
        assert_eq!(sd.chunks[0].cname_text(), Some("c0"));
        let mut out = [0u8; 128];
        let n = write_compound(&packets, &mut out).unwrap();
        assert_eq!(&out[..n], &ac[..]);

        // SIP_CALL_RTP_G711 frame 504: SR with one block + RR, NTP 2005-01-14 17:58:44.902 UTC.
        let x = hex("81c8000c d2bd4e3e c59286d4 e6e978d5 00000140 00000002 00000140 d2bd4e3e 00000000 00020002 00000000 86d4e6e9 00000001 81c90007 d2bd4e3e 00000000 00000000 00000000 00000000 86d4e6e9 00000001");
        let packets = parse_compound(&x).unwrap();
        let RtcpPacket::SenderReport(sr) = &packets[0] else {
            panic!()
        };
        assert_eq!(
            sr.info.ntp.to_unix(),
            Duration::new(1_105_725_524, 902_000_000)
        );
        assert_eq!(sr.reports[0].extended_highest_sequence, 131074);
        assert!(matches!(packets[1], RtcpPacket::ReceiverReport(_)));
        let n = write_compound(&packets, &mut out).unwrap();
        assert_eq!(&out[..n], &x[..]);

        // SIP_CALL_RTP_G711 frame 521: SDES CNAME of 22 bytes.
        let sdes =
            hex("81ca0008 58f33dea 0116 41434c5450204368616e6e656c48616e646c65203330 00000000");
        let RtcpPacket::SourceDescription(sd) = &parse_rtcp(&sdes).unwrap()[0] else {
            panic!()
        };
        assert_eq!(sd.chunks[0].cname_text(), Some("ACLTP ChannelHandle 30"));
        assert_eq!(
            RtcpPacket::SourceDescription(sd.clone()).to_vec().unwrap(),
            sdes
        );
    }

    #[test]
    fn bye_and_xr_voip_metrics_round_trip() {
        let bye = RtcpPacket::Goodbye(Goodbye {
            sources: vec![1, 2],
            reason: Some(b"hangup".to_vec()),
        });
        let bytes = bye.to_vec().unwrap();
        assert_eq!(bytes.len(), 4 + 8 + 1 + 6 + 1);
        assert_eq!(parse_rtcp(&bytes).unwrap(), vec![bye]);

        let metrics = VoipMetrics {
            ssrc: 0x1234_5678,
            loss_rate: 12,
            discard_rate: 3,
            burst_density: 200,
            gap_density: 1,
            burst_duration_ms: 120,
            gap_duration_ms: 15_000,
            round_trip_delay_ms: 42,
            end_system_delay_ms: 60,
            signal_level: -20,
            noise_level: -60,
            rerl: 127,
            gmin: 16,
            r_factor: 80,
            ext_r_factor: 127,
            mos_lq: 41,
            mos_cq: 40,
            rx_config: 0b1010_0000,
            jb_nominal_ms: 40,
            jb_maximum_ms: 120,
            jb_abs_max_ms: 200,
        };
        let xr = RtcpPacket::ExtendedReport(ExtendedReport {
            ssrc: 9,
            blocks: vec![XrBlock::VoipMetrics(metrics)],
        });
        let bytes = xr.to_vec().unwrap();
        assert_eq!(bytes.len(), 8 + XR_VOIP_METRICS_BYTES);
        // Header: V=2, PT=207, length 10 words; block: BT=7, reserved, length 8.
        assert_eq!(&bytes[..4], &[0x80, 207, 0, 10]);
        assert_eq!(&bytes[8..12], &[7, 0, 0, 8]);
        assert_eq!(
            bytes[8 + 4 + 16],
            (-20i8) as u8,
            "signal level at byte 16 of the block body"
        );
        assert_eq!(parse_rtcp(&bytes).unwrap(), vec![xr]);
        // A VoIP Metrics block with the wrong length is an error, not a misparse.
        let mut bad = bytes.clone();
        bad[11] = 7;
        assert_eq!(parse_rtcp(&bad).unwrap_err().reason(), "rtcp_xr");
    }

    #[test]
    fn compound_must_start_with_a_report() {
        let sdes = RtcpPacket::SourceDescription(SourceDescription {
            chunks: vec![SdesChunk::cname(1, "x")],
        });
        let bytes = sdes.to_vec().unwrap();
        assert!(parse_rtcp(&bytes).is_ok());
        assert_eq!(
            parse_compound(&bytes).unwrap_err(),
            RtcpError::CompoundStart {
                packet_type: PT_SDES
            }
        );
        assert!(write_compound(&[sdes], &mut [0u8; 64]).is_err());
    }

    #[test]
    fn padding_and_negative_loss() {
        let rr = RtcpPacket::ReceiverReport(ReceiverReport {
            ssrc: 5,
            reports: vec![ReportBlock {
                ssrc: 6,
                cumulative_lost: -3,
                ..ReportBlock::default()
            }],
        });
        let mut bytes = rr.to_vec().unwrap();
        // Add 4 bytes of padding with the P bit.
        bytes[0] |= 0x20;
        let words = u16::from_be_bytes([bytes[2], bytes[3]]) + 1;
        bytes[2..4].copy_from_slice(&words.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 4]);
        assert_eq!(parse_rtcp(&bytes).unwrap(), vec![rr]);
        let n = bytes.len();
        bytes[n - 1] = 0;
        assert_eq!(parse_rtcp(&bytes).unwrap_err().reason(), "rtcp_padding");
        let too_big = RtcpPacket::ReceiverReport(ReceiverReport {
            ssrc: 5,
            reports: vec![ReportBlock {
                cumulative_lost: 0x80_0000,
                ..ReportBlock::default()
            }],
        });
        assert!(too_big.to_vec().is_err());
    }

    #[test]
    fn ntp_and_rtt() {
        let t = Duration::new(1_105_725_524, 902_000_000);
        let ntp = NtpTimestamp::from_unix(t);
        assert_eq!(ntp.0 >> 32, 0xc59286d4);
        assert!(ntp.to_unix().abs_diff(t) < Duration::from_nanos(2));
        // RFC 3550 §6.4.1 example: A = 0xb710:8000, LSR = 0xb705:2000, DLSR = 0x0005:4000
        // → 0x0006:2000 = 6.125 s.
        let arrival = NtpTimestamp(0xb710_8000u64 << 16);
        assert_eq!(arrival.middle_32(), 0xb710_8000);
        assert_eq!(
            round_trip_time(arrival, 0xb705_2000, 0x0005_4000),
            Some(Duration::from_millis(6125))
        );
        assert_eq!(round_trip_time(arrival, 0, 0), None);
        assert_eq!(
            round_trip_time(arrival, 0xb710_9000, 0),
            None,
            "negative RTT"
        );
        assert_eq!(to_dlsr_units(Duration::from_millis(5250)), 0x0005_4000);
    }
}
