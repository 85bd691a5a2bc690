//! Our packets against an independent implementation, webrtc-rs's `webrtc-srtp` (a
//! dev-dependency only): byte-identical SRTP for the same key and packet, each side decrypting
//! the other's SRTP and SRTCP, across a sequence-number rollover, for both suites.

use ontime_srtp::{SrtpContext, Suite, MAX_SRTP_TAG_LEN, SRTCP_TRAILER_LEN};
use webrtc_srtp::context::Context;
use webrtc_srtp::protection_profile::ProtectionProfile;

const KEY: [u8; 16] = *b"0123456789abcdef";
const SALT: [u8; 14] = *b"saltsaltsaltsa";

fn theirs(suite: Suite) -> Context {
    let profile = match suite {
        Suite::AesCm128HmacSha1_80 => ProtectionProfile::Aes128CmHmacSha1_80,
        Suite::AesCm128HmacSha1_32 => ProtectionProfile::Aes128CmHmacSha1_32,
    };
    Context::new(&KEY, &SALT, profile, None, None).expect("webrtc-srtp context")
}

fn ours(suite: Suite) -> SrtpContext {
    SrtpContext::new(suite, &KEY, &SALT).expect("key")
}

fn rtp(seq: u16, ssrc: u32, payload_len: usize) -> Vec<u8> {
    let mut p = vec![0x80, 0x00];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq).wrapping_mul(160)).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend((0..payload_len).map(|i| (i as u8).wrapping_mul(7) ^ (seq as u8)));
    p
}

#[test]
fn srtp_is_byte_identical_and_interoperable() {
    for suite in Suite::ALL {
        let mut our_tx = ours(suite);
        let mut our_rx = ours(suite);
        let mut their_tx = theirs(suite);
        let mut their_rx = theirs(suite);
        // 65 530 → 65 535 → 0 → 200: the rollover counter goes to 1 on both sides.
        for n in 0..206u32 {
            let seq = (65_530 + n) as u16;
            let plain = rtp(seq, 0x5EED_0001, 160 + (n as usize % 3));
            let mut buf = plain.clone();
            buf.resize(plain.len() + MAX_SRTP_TAG_LEN, 0);
            let len = our_tx.protect(&mut buf, plain.len()).expect("protect");
            let ours_srtp = &buf[..len];
            let theirs_srtp = their_tx.encrypt_rtp(&plain).expect("webrtc-srtp encrypt");
            assert_eq!(ours_srtp, &theirs_srtp[..], "{suite} seq {seq}: same bytes");
            let decrypted = their_rx
                .decrypt_rtp(ours_srtp)
                .expect("webrtc-srtp decrypts ours");
            assert_eq!(&decrypted[..], &plain[..]);
            let mut theirs_copy = theirs_srtp.to_vec();
            let n = our_rx
                .unprotect(&mut theirs_copy)
                .expect("we decrypt theirs");
            assert_eq!(&theirs_copy[..n], &plain[..]);
        }
    }
}

/// A sender report (28 bytes) and a receiver report (8 bytes) in one compound packet.
fn rtcp(ssrc: u32, n: u8) -> Vec<u8> {
    let mut p = vec![0x80, 200, 0x00, 0x06];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[n; 20]);
    p.extend_from_slice(&[0x80, 201, 0x00, 0x01]);
    p.extend_from_slice(&ssrc.to_be_bytes());
    p
}

#[test]
fn srtcp_interoperates() {
    for suite in Suite::ALL {
        let mut our_tx = ours(suite);
        let mut our_rx = ours(suite);
        let mut their_tx = theirs(suite);
        let mut their_rx = theirs(suite);
        for n in 0..20u8 {
            let plain = rtcp(0xABCD_0002, n);
            let mut buf = plain.clone();
            buf.resize(plain.len() + SRTCP_TRAILER_LEN, 0);
            let len = our_tx.protect_rtcp(&mut buf, plain.len()).expect("protect");
            let decrypted = their_rx
                .decrypt_rtcp(&buf[..len])
                .expect("webrtc-srtp decrypts ours");
            assert_eq!(&decrypted[..], &plain[..]);
            let mut theirs_srtcp = their_tx.encrypt_rtcp(&plain).expect("encrypt").to_vec();
            assert_eq!(
                theirs_srtcp.len(),
                len,
                "same trailer: E||index and an 80-bit tag"
            );
            let n = our_rx
                .unprotect_rtcp(&mut theirs_srtcp)
                .expect("we decrypt theirs");
            assert_eq!(&theirs_srtcp[..n], &plain[..]);
        }
    }
}
