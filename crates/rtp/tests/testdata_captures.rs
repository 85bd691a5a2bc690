//! The parsers on real captures in `../shared/testdata/pcaps`: every RTCP datagram parses as a
//! valid compound packet, every RTP datagram parses, and the sipp RFC 4733 captures (end packet
//! sent three times) and SIP_DTMF2.cap (end packet sent once) yield each digit exactly once.
//! Skips with a printed reason when the test data is absent.

use std::fs::File;
use std::path::PathBuf;

use ontime_rtp::rtcp::{parse_compound, RtcpPacket};
use ontime_rtp::{classify, parse_rtp, DtmfTracker, PacketKind};
use pcap_file::pcap::PcapReader;

fn pcaps() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/pcaps");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "skipped: {} not found (test data lives beside the workspace)",
            dir.display()
        );
        None
    }
}

/// UDP payloads (dst port, bytes) of an Ethernet/IPv4 capture (all the shared ones are).
fn udp_payloads(path: &PathBuf) -> Vec<(u16, Vec<u8>)> {
    let mut reader = PcapReader::new(File::open(path).expect("open pcap")).expect("pcap header");
    let mut out = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let data = packet.expect("pcap record").data.into_owned();
        if data.len() < 14 + 20 + 8 || data[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &data[14..];
        let ihl = usize::from(ip[0] & 0x0F) * 4;
        if ip[9] != 17 || ip.len() < ihl + 8 {
            continue;
        }
        let udp = &ip[ihl..];
        let len = usize::from(u16::from_be_bytes([udp[4], udp[5]])).min(udp.len());
        if len < 8 {
            continue;
        }
        out.push((u16::from_be_bytes([udp[2], udp[3]]), udp[8..len].to_vec()));
    }
    out
}

#[test]
fn rtcp_in_captures_parses() {
    let Some(dir) = pcaps() else { return };
    let mut compounds = 0;
    let mut reports = 0;
    for name in [
        "wireshark-samples-via-sipnab/SIP_CALL_RTP_G711",
        "wireshark-samples-via-sipnab/rtp-protocol.pcap",
    ] {
        for (_, payload) in udp_payloads(&dir.join(name)) {
            if classify(&payload) != PacketKind::Rtcp {
                continue;
            }
            let packets = parse_compound(&payload).unwrap_or_else(|e| panic!("{name}: {e}"));
            compounds += 1;
            reports += packets
                .iter()
                .filter(|p| {
                    matches!(
                        p,
                        RtcpPacket::SenderReport(_) | RtcpPacket::ReceiverReport(_)
                    )
                })
                .count();
        }
    }
    // STANDARDS-NOTES/SUMMARY: 28 compound packets in SIP_CALL_RTP_G711 (SR 28, RR 16) + 2 in
    // rtp-protocol.pcap (SR 2).
    assert_eq!(compounds, 30);
    assert_eq!(reports, 28 + 16 + 2);
}

#[test]
fn rtp_in_captures_parses() {
    let Some(dir) = pcaps() else { return };
    let path = dir.join("wireshark-samples-via-sipnab/sip-rtp-g711.pcap");
    let rtp: Vec<_> = udp_payloads(&path)
        .into_iter()
        .filter(|(port, p)| *port == 6000 && classify(p) == PacketKind::Rtp)
        .collect();
    assert_eq!(rtp.len(), 425 + 414, "RTP packets to the media port");
    for (_, p) in &rtp {
        let v = parse_rtp(p).expect("captured RTP parses");
        assert_eq!(v.payload.len(), 160);
    }
}

fn digits_of(path: &PathBuf, event_pt: u8) -> String {
    let mut tracker = DtmfTracker::new();
    let mut digits = String::new();
    for (_, payload) in udp_payloads(path) {
        let Ok(v) = parse_rtp(&payload) else { continue };
        if v.payload_type != event_pt {
            continue;
        }
        let reported = tracker
            .on_packet(v.timestamp, v.payload)
            .expect("4-byte event payload");
        digits.extend(reported.into_iter().flatten().map(|d| d.digit));
    }
    digits.extend(tracker.flush().map(|d| d.digit));
    digits
}

#[test]
fn dtmf_digits_reported_once() {
    let Some(dir) = pcaps() else { return };
    for (file, digit) in [
        ("0", "0"),
        ("1", "1"),
        ("2", "2"),
        ("3", "3"),
        ("4", "4"),
        ("5", "5"),
        ("6", "6"),
        ("7", "7"),
        ("8", "8"),
        ("9", "9"),
        ("star", "*"),
        ("pound", "#"),
    ] {
        let path = dir.join(format!("sipp/dtmf_2833_{file}.pcap"));
        assert_eq!(digits_of(&path, 101), digit, "{}", path.display());
    }
    let path = dir.join("wireshark-samples-via-sipnab/SIP_DTMF2.cap");
    assert_eq!(digits_of(&path, 96), "6789123");
}
