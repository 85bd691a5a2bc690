//! # ontime-srtp
//!
//! SRTP and SRTCP (RFC 3711) with the AES_CM_128_HMAC_SHA1_80 and _32 suites, keyed by SDES
//! (RFC 4568 `a=crypto:` lines). Sans-IO: bytes in, bytes out, no clock, no socket.
//!
//! ```
//! use ontime_srtp::{CryptoAttribute, MAX_SRTP_TAG_LEN};
//!
//! // The offer's line (from the peer's SDP), and our answer with a fresh key of ours.
//! let keys = ontime_srtp::answer_offer([
//!     "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR",
//! ])?;
//! let answer_line = keys.local.to_sdp_line(); // goes into our SDP answer
//! assert!(answer_line.starts_with("a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:"));
//!
//! // What we send is protected under our key, in place, with room for the tag.
//! let mut outbound = keys.outbound();
//! let mut buf = [0u8; 12 + 160 + MAX_SRTP_TAG_LEN];
//! buf[0] = 0x80; // RTP version 2, PCMU, sequence 0, timestamp 0, SSRC 0
//! let len = outbound.protect(&mut buf, 12 + 160)?;
//! assert_eq!(len, 12 + 160 + 10);
//!
//! // The peer unprotects with the same (our) key; so does our own inbound side with theirs.
//! let mut peer = CryptoAttribute::parse(&answer_line)?.context();
//! assert_eq!(peer.unprotect(&mut buf[..len])?, 12 + 160);
//! assert_eq!(buf[12..172], [0u8; 160]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## What is protected
//! SRTP encrypts the RTP payload (padding included) and authenticates the whole packet, header
//! too, with the rollover counter; SRTCP encrypts everything after the first 8 bytes of the
//! compound packet and authenticates all of it with the SRTCP index. On receive a packet is
//! checked against the replay window, then authenticated, and only then decrypted; a packet
//! that fails changes nothing in the context. See the repository's `docs/srtp.md`.
//!
//! ## Why not webrtc-rs's `webrtc-srtp`
//! Its `Context::encrypt_rtp` takes `&[u8]` and returns a newly allocated `Bytes` per packet (and
//! parses the header into an `rtp::Packet` with its own allocations first), so it cannot run on
//! the sender's 20 ms tick, which must not allocate or free. This crate builds SRTP on the
//! RustCrypto primitives (`aes` + `ctr` for AES-CM, `hmac` + `sha1` for the tag), which work on
//! caller buffers: `protect` and `unprotect` transform the packet in place and allocate nothing
//! (`tests/no_alloc.rs` counts). `webrtc-srtp` stays a dev-dependency to cross-check against.

// The README's example is compiled and run with the doctests, so it stays true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod context;
mod error;
mod keys;
mod replay;
mod sdes;
mod suite;

pub use context::SrtpContext;
pub use error::{Error, SdesError};
pub use replay::{MAX_SSRCS, REPLAY_WINDOW};
pub use sdes::{accept_answer, answer_offer, offer, CryptoAttribute, SdesKeys};
pub use suite::{
    Suite, MASTER_KEY_LEN, MASTER_SALT_LEN, MAX_SRTP_TAG_LEN, SRTCP_TAG_LEN, SRTCP_TRAILER_LEN,
};
