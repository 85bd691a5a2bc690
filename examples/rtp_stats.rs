//! RTP stream statistics from a packet capture, one row per stream (SSRC on a UDP port pair),
//! with the figures Wireshark's RTP stream analysis reports.
//!
//! ```text
//! cargo run --example rtp_stats -- FILE.pcap [--json]
//! ```
//!
//! Reads pcap or pcapng (Ethernet with VLAN tags, Linux cooked v1/v2, raw IP, BSD loopback),
//! IPv4 and IPv6, UDP. A datagram is RTP the way Wireshark's heuristic decides (version 2, even
//! destination port, or a port an SDP body in the capture announced), minus RTCP by the RFC 5761
//! packet-type rule and minus anything `ontime_rtp::parse_rtp` rejects. RFC 4733 events are
//! payload types an SDP maps to `telephone-event`, or, without SDP, dynamic types carrying
//! 4-byte payloads.
//!
//! `--json` prints `{"streams":[{"ssrc","payload_type","packets","lost","max_delta_ms",
//! "mean_jitter_ms","max_jitter_ms","dtmf"}]}`: `lost` is RFC 3550 A.3 expected − received,
//! jitter RFC 3550 A.8 in ms at the payload's clock rate (Wireshark's reference rules, see
//! `ontime_rtp::StreamAnalysis`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufReader, Read};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use ontime_rtp::dtmf::DtmfTracker;
use ontime_rtp::stats::static_clock_rate;
use ontime_rtp::{classify, parse_rtp, PacketKind, ReceiverStats, StreamAnalysis, SAMPLE_RATE_HZ};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;
use serde::Serialize;

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "Per-SSRC RTP statistics of a capture, comparable with tshark -z rtp,streams")]
pub struct Args {
    /// Capture file (pcap or pcapng).
    pub file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One stream's figures; the JSON object of `--json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamRow {
    /// Synchronisation source.
    pub ssrc: u32,
    /// Payload type of the stream's first packet.
    pub payload_type: u8,
    /// Packets seen.
    pub packets: u64,
    /// RFC 3550 A.3 expected − received (negative with duplicates).
    pub lost: i64,
    /// Largest arrival gap between consecutive regular packets, ms.
    pub max_delta_ms: f64,
    /// Mean RFC 3550 jitter, ms.
    pub mean_jitter_ms: f64,
    /// Largest RFC 3550 jitter, ms.
    pub max_jitter_ms: f64,
    /// RFC 4733 digits, in order.
    pub dtmf: String,
    /// Source address and port (table only).
    #[serde(skip)]
    pub src: String,
    /// Destination address and port (table only).
    #[serde(skip)]
    pub dst: String,
    /// Arrival of the first packet since the capture's first frame (table order).
    #[serde(skip)]
    pub start: Duration,
}

/// `--json` output.
#[derive(Debug, Serialize)]
pub struct Report {
    /// One entry per stream.
    pub streams: Vec<StreamRow>,
}

/// A UDP datagram found in a frame.
struct Udp<'a> {
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
    payload: &'a [u8],
}

type StreamKey = (IpAddr, u16, IpAddr, u16, u32);

struct StreamState {
    first_pt: u8,
    start: Duration,
    analysis: StreamAnalysis,
    rfc3550: ReceiverStats,
    dtmf: DtmfTracker,
    digits: String,
}

/// Reads every frame of a pcap or pcapng file as (timestamp, link type, bytes).
fn read_frames(path: &Path) -> anyhow::Result<Vec<(Duration, DataLink, Vec<u8>)>> {
    let mut magic = [0u8; 4];
    File::open(path)
        .with_context(|| format!("open {}", path.display()))?
        .read_exact(&mut magic)
        .with_context(|| format!("{} is too short to be a capture", path.display()))?;
    let file = BufReader::new(File::open(path)?);
    let mut frames = Vec::new();
    if magic == [0x0A, 0x0D, 0x0D, 0x0A] {
        let mut reader = PcapNgReader::new(file)
            .with_context(|| format!("pcapng header of {}", path.display()))?;
        let mut links = Vec::new();
        while let Some(block) = reader.next_block() {
            match block.with_context(|| format!("pcapng block in {}", path.display()))? {
                Block::InterfaceDescription(idb) => links.push(idb.linktype),
                Block::EnhancedPacket(epb) => {
                    let link = links
                        .get(epb.interface_id as usize)
                        .copied()
                        .unwrap_or(DataLink::ETHERNET);
                    frames.push((epb.timestamp, link, epb.data.into_owned()));
                }
                Block::SimplePacket(spb) => {
                    let link = links.first().copied().unwrap_or(DataLink::ETHERNET);
                    frames.push((Duration::ZERO, link, spb.data.into_owned()));
                }
                _ => {}
            }
        }
    } else {
        let mut reader =
            PcapReader::new(file).with_context(|| format!("pcap header of {}", path.display()))?;
        let link = reader.header().datalink;
        while let Some(packet) = reader.next_packet() {
            let packet = packet.with_context(|| format!("pcap record in {}", path.display()))?;
            frames.push((packet.timestamp, link, packet.data.into_owned()));
        }
    }
    Ok(frames)
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Finds the IP packet inside a link-layer frame and returns (ethertype-like family, bytes).
fn link_payload(link: DataLink, frame: &[u8]) -> Option<&[u8]> {
    match link {
        DataLink::ETHERNET => {
            let mut ethertype = be16(frame, 12)?;
            let mut offset = 14;
            // 802.1Q / 802.1ad tags.
            while ethertype == 0x8100 || ethertype == 0x88A8 {
                ethertype = be16(frame, offset + 2)?;
                offset += 4;
            }
            matches!(ethertype, 0x0800 | 0x86DD).then(|| frame.get(offset..))?
        }
        // Linux cooked v1: 16-byte header, protocol in the last two bytes.
        DataLink::LINUX_SLL => {
            matches!(be16(frame, 14)?, 0x0800 | 0x86DD).then(|| frame.get(16..))?
        }
        // Linux cooked v2: 20-byte header, protocol first.
        DataLink::LINUX_SLL2 => {
            matches!(be16(frame, 0)?, 0x0800 | 0x86DD).then(|| frame.get(20..))?
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(frame),
        // BSD loopback: 4-byte address family, then IP.
        DataLink::NULL | DataLink::LOOP => frame.get(4..),
        _ => None,
    }
}

/// Parses IPv4/IPv6 + UDP. Fragments other than whole datagrams are skipped.
fn udp_of(ip: &[u8]) -> Option<Udp<'_>> {
    let version = ip.first()? >> 4;
    let (src, dst, mut next, mut offset, end) = match version {
        4 => {
            let ihl = usize::from(ip[0] & 0x0F) * 4;
            let total = usize::from(be16(ip, 2)?).min(ip.len());
            let flags_frag = be16(ip, 6)?;
            if flags_frag & 0x3FFF != 0 {
                return None; // a fragment
            }
            let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            (
                IpAddr::from(src),
                IpAddr::from(dst),
                *ip.get(9)?,
                ihl,
                total,
            )
        }
        6 => {
            let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            let end = (40 + usize::from(be16(ip, 4)?)).min(ip.len());
            (IpAddr::from(src), IpAddr::from(dst), *ip.get(6)?, 40, end)
        }
        _ => return None,
    };
    // IPv6 extension headers that may precede UDP: hop-by-hop, routing, destination options.
    while version == 6 && matches!(next, 0 | 43 | 60) {
        next = *ip.get(offset)?;
        offset += (usize::from(*ip.get(offset + 1)?) + 1) * 8;
    }
    if next != 17 || end < offset + 8 {
        return None;
    }
    let udp = ip.get(offset..end)?;
    let udp_len = usize::from(be16(udp, 4)?).clamp(8, udp.len());
    Some(Udp {
        src,
        dst,
        src_port: be16(udp, 0)?,
        dst_port: be16(udp, 2)?,
        payload: udp.get(8..udp_len)?,
    })
}

/// SDP facts gathered from SIP bodies: announced media ports and telephone-event payload types.
#[derive(Default)]
struct SdpFacts {
    media_ports: BTreeSet<u16>,
    telephone_event_pts: BTreeSet<u8>,
}

fn scan_sip(payload: &[u8], facts: &mut SdpFacts) {
    const STARTS: [&[u8]; 12] = [
        b"SIP/2.0 ",
        b"INVITE ",
        b"ACK ",
        b"BYE ",
        b"CANCEL ",
        b"OPTIONS ",
        b"PRACK ",
        b"UPDATE ",
        b"REGISTER ",
        b"NOTIFY ",
        b"INFO ",
        b"MESSAGE ",
    ];
    if !STARTS.iter().any(|s| payload.starts_with(s)) {
        return;
    }
    let text = String::from_utf8_lossy(payload);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("m=audio ") {
            if let Some(port) = rest.split_whitespace().next().and_then(|p| p.parse().ok()) {
                facts.media_ports.insert(port);
            }
        } else if let Some(rest) = line.strip_prefix("a=rtpmap:") {
            let mut parts = rest.split_whitespace();
            if let (Some(pt), Some(encoding)) = (parts.next(), parts.next()) {
                if encoding.to_ascii_lowercase().starts_with("telephone-event") {
                    if let Ok(pt) = pt.parse() {
                        facts.telephone_event_pts.insert(pt);
                    }
                }
            }
        }
    }
}

/// Analyses every RTP stream in a capture file.
pub fn analyze_capture(path: &Path) -> anyhow::Result<Vec<StreamRow>> {
    let frames = read_frames(path)?;
    let mut datagrams = Vec::new();
    let mut sdp = SdpFacts::default();
    for (time, link, frame) in &frames {
        let Some(udp) = link_payload(*link, frame).and_then(udp_of) else {
            continue;
        };
        scan_sip(udp.payload, &mut sdp);
        datagrams.push((*time, udp));
    }
    let origin = frames.first().map(|f| f.0).unwrap_or_default();

    let mut streams: HashMap<StreamKey, StreamState> = HashMap::new();
    for (time, udp) in &datagrams {
        let rtp_port = udp.dst_port % 2 == 0 || sdp.media_ports.contains(&udp.dst_port);
        if !rtp_port || classify(udp.payload) != PacketKind::Rtp {
            continue;
        }
        let Ok(packet) = parse_rtp(udp.payload) else {
            continue;
        };
        let arrival = time.saturating_sub(origin);
        let key = (udp.src, udp.src_port, udp.dst, udp.dst_port, packet.ssrc);
        let state = streams.entry(key).or_insert_with(|| StreamState {
            first_pt: packet.payload_type,
            start: arrival,
            analysis: StreamAnalysis::new(),
            rfc3550: ReceiverStats::new(
                static_clock_rate(packet.payload_type).unwrap_or(SAMPLE_RATE_HZ),
            ),
            dtmf: DtmfTracker::new(),
            digits: String::new(),
        });
        state.analysis.on_packet(
            packet.sequence_number,
            packet.timestamp,
            packet.marker,
            packet.payload_type,
            arrival,
        );
        state
            .rfc3550
            .on_packet(packet.sequence_number, packet.timestamp, arrival);
        let pt = packet.payload_type;
        let is_event = if sdp.telephone_event_pts.is_empty() {
            pt >= 96 && packet.payload.len() == 4
        } else {
            sdp.telephone_event_pts.contains(&pt)
        };
        if is_event {
            if let Ok(digits) = state.dtmf.on_packet(packet.timestamp, packet.payload) {
                state
                    .digits
                    .extend(digits.into_iter().flatten().map(|d| d.digit));
            }
        }
    }

    let mut rows: Vec<StreamRow> = streams
        .into_iter()
        .map(|((src, src_port, dst, dst_port, ssrc), mut s)| {
            if let Some(d) = s.dtmf.flush() {
                s.digits.push(d.digit);
            }
            StreamRow {
                ssrc,
                payload_type: s.first_pt,
                packets: s.analysis.packets(),
                lost: if s.rfc3550.is_valid() {
                    s.rfc3550.cumulative_lost()
                } else {
                    s.analysis.lost()
                },
                max_delta_ms: s.analysis.max_delta_ms(),
                mean_jitter_ms: s.analysis.mean_jitter_ms(),
                max_jitter_ms: s.analysis.max_jitter_ms(),
                dtmf: s.digits,
                src: format!("{src}:{src_port}"),
                dst: format!("{dst}:{dst_port}"),
                start: s.start,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.start.cmp(&b.start).then(a.ssrc.cmp(&b.ssrc)));
    Ok(rows)
}

/// Prints rows as a table.
fn print_table(rows: &[StreamRow]) {
    println!(
        "{:>22} {:>22} {:>10} {:>3} {:>6} {:>6} {:>13} {:>15} {:>14}  dtmf",
        "source",
        "destination",
        "SSRC",
        "PT",
        "pkts",
        "lost",
        "max delta ms",
        "mean jitter ms",
        "max jitter ms"
    );
    for r in rows {
        println!(
            "{:>22} {:>22} 0x{:08X} {:>3} {:>6} {:>6} {:>13.3} {:>15.3} {:>14.3}  {}",
            r.src,
            r.dst,
            r.ssrc,
            r.payload_type,
            r.packets,
            r.lost,
            r.max_delta_ms,
            r.mean_jitter_ms,
            r.max_jitter_ms,
            r.dtmf
        );
    }
    // Per-SSRC totals when one SSRC appears on several port pairs (a relayed call).
    let mut per_ssrc: BTreeMap<u32, usize> = BTreeMap::new();
    for r in rows {
        *per_ssrc.entry(r.ssrc).or_default() += 1;
    }
    for (ssrc, legs) in per_ssrc.iter().filter(|(_, n)| **n > 1) {
        println!("note: SSRC 0x{ssrc:08X} appears on {legs} port pairs (relayed legs are listed separately)");
    }
}

#[allow(dead_code)] // the comparison test includes this file as a module and calls `analyze_capture`
fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let rows = analyze_capture(&args.file)?;
    if args.json {
        println!("{}", serde_json::to_string(&Report { streams: rows })?);
    } else if rows.is_empty() {
        bail!("no RTP streams found in {}", args.file.display());
    } else {
        print_table(&rows);
    }
    Ok(())
}
