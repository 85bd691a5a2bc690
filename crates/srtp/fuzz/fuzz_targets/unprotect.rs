//! SRTP and SRTCP receive on a stream of arbitrary datagrams: no panic (arithmetic overflow
//! included), and a datagram is accepted only if it is one the fuzzer's own sender protected
//! (forging an 80-bit tag is out of a fuzzer's reach, so arbitrary bytes must all be refused).
//!
//! Input: records of `[kind][length][length bytes]`, the last one possibly short. Kind bit 0:
//! RTCP rather than RTP; bit 1: protect the record with the shared key first (so the receive
//! side also sees genuine packets, reordered and replayed as the input says); bit 2: the _32
//! suite's context.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ontime_srtp::{SrtpContext, Suite, MAX_SRTP_TAG_LEN, SRTCP_TRAILER_LEN};

const KEY: [u8; 16] = [0x5A; 16];
const SALT: [u8; 14] = [0xA5; 14];

fuzz_target!(|data: &[u8]| {
    let ctx = |suite| SrtpContext::new(suite, &KEY, &SALT).expect("valid key");
    let mut tx = [ctx(Suite::AesCm128HmacSha1_80), ctx(Suite::AesCm128HmacSha1_32)];
    let mut rx = [ctx(Suite::AesCm128HmacSha1_80), ctx(Suite::AesCm128HmacSha1_32)];
    let mut rest = data;
    while let [kind, len, tail @ ..] = rest {
        let take = usize::from(*len).min(tail.len());
        let (datagram, next) = tail.split_at(take);
        rest = next;
        let rtcp = kind & 1 != 0;
        let genuine = kind & 2 != 0;
        let which = usize::from(kind >> 2 & 1);
        let mut buf = [0u8; 256 + SRTCP_TRAILER_LEN];
        buf[..take].copy_from_slice(datagram);
        let mut len = take;
        if genuine {
            let protected = if rtcp {
                tx[which].protect_rtcp(&mut buf, take)
            } else {
                tx[which].protect(&mut buf, take)
            };
            match protected {
                Ok(n) => {
                    assert!(n == take + SRTCP_TRAILER_LEN || n <= take + MAX_SRTP_TAG_LEN);
                    len = n;
                }
                Err(_) => continue,
            }
        }
        let result = if rtcp {
            rx[which].unprotect_rtcp(&mut buf[..len])
        } else {
            rx[which].unprotect(&mut buf[..len])
        };
        match result {
            // A 32-bit tag is forged by chance once in 2^32 tries, which a long run may reach;
            // an 80-bit one never is.
            Ok(_) if !genuine => assert_eq!(which, 1, "an unprotected datagram authenticated"),
            Ok(n) => {
                // The plaintext came back exactly.
                assert_eq!(n, take);
                assert_eq!(&buf[..n], datagram);
            }
            Err(e) => {
                let _ = e.reason();
            }
        }
    }
});
