//! The RTCP parser (SR, RR, SDES, BYE, XR, unknown types) on an arbitrary datagram: no panic, and
//! what parses writes back to bytes that parse again and write back identically.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ontime_rtp::{parse_compound, parse_rtcp, write_compound, RtcpPacket};

fuzz_target!(|data: &[u8]| {
    let _ = parse_compound(data);
    let Ok(packets) = parse_rtcp(data) else {
        return;
    };
    for p in &packets {
        let _ = p.packet_type();
        if let RtcpPacket::SourceDescription(sd) = p {
            for chunk in &sd.chunks {
                let _ = chunk.cname_text();
            }
        }
        // A parsed packet may not be writable (a count the writer refuses), but once written
        // its bytes are canonical: parse, write again, same bytes.
        if let Ok(written) = p.to_vec() {
            let again = parse_rtcp(&written).expect("a written packet parses");
            assert_eq!(again.len(), 1);
            assert_eq!(
                again[0].to_vec().expect("a re-parsed packet writes"),
                written
            );
        }
    }
    let mut out = vec![0u8; data.len() * 2 + 64];
    let _ = write_compound(&packets, &mut out);
});
