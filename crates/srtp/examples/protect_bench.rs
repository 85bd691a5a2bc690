//! Micro-benchmark of SRTP per packet: `protect` and `unprotect` of one 20 ms G.711 packet
//! (12-byte header + 160 bytes) for each suite, against a plain copy of the same packet as the
//! baseline. The figure behind "SRTP CPU per call": one call sends and receives 50 packets a
//! second, so per-call CPU = 50 x (protect + unprotect).
//!
//! Run: `cargo run --release -p ontime-srtp --example protect_bench [packets]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use ontime_srtp::{SrtpContext, Suite, MAX_SRTP_TAG_LEN};

const PACKET: usize = 12 + 160;

fn header(buf: &mut [u8], seq: u16) {
    buf[0] = 0x80;
    buf[2..4].copy_from_slice(&seq.to_be_bytes());
    buf[8..12].copy_from_slice(&0x1234_5678u32.to_be_bytes());
}

fn per_packet(elapsed: Duration, packets: u32) -> f64 {
    elapsed.as_nanos() as f64 / f64::from(packets)
}

fn main() {
    let packets: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    println!("{packets} packets of {PACKET} bytes each; ns per packet");
    let mut buf = [0xD5u8; PACKET + MAX_SRTP_TAG_LEN];

    // Baseline: writing the header and copying the packet out, as a plain RTP send would.
    let mut sink = [0u8; PACKET];
    let start = Instant::now();
    for n in 0..packets {
        header(&mut buf, n as u16);
        sink.copy_from_slice(&buf[..PACKET]);
        black_box(&sink);
    }
    println!(
        "plain RTP (header + copy):       {:>7.1}",
        per_packet(start.elapsed(), packets)
    );

    for suite in Suite::ALL {
        let key = [0x42u8; 16];
        let salt = [0x24u8; 14];
        let mut tx = SrtpContext::new(suite, &key, &salt).expect("key");
        let mut rx = SrtpContext::new(suite, &key, &salt).expect("key");
        let mut protect_time = Duration::ZERO;
        let mut unprotect_time = Duration::ZERO;
        // Sequence numbers run past 65535: the rollover counter moves as in a long call.
        for n in 0..packets {
            buf[12..PACKET].fill(0xD5);
            header(&mut buf, n as u16);
            let t0 = Instant::now();
            let len = tx.protect(black_box(&mut buf), PACKET).expect("protect");
            let t1 = Instant::now();
            let plain = rx.unprotect(black_box(&mut buf[..len])).expect("unprotect");
            let t2 = Instant::now();
            assert_eq!(plain, PACKET);
            protect_time += t1 - t0;
            unprotect_time += t2 - t1;
        }
        let p = per_packet(protect_time, packets);
        let u = per_packet(unprotect_time, packets);
        println!("{suite} protect:   {p:>7.1}");
        println!("{suite} unprotect: {u:>7.1}");
        println!(
            "{suite} per call (50 pkt/s each way): {:.1} µs CPU per second = {:.4} % of a core",
            50.0 * (p + u) / 1000.0,
            50.0 * (p + u) / 1e9 * 100.0
        );
    }
}
