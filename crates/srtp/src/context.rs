//! [`SrtpContext`]: protect and unprotect SRTP and SRTCP packets in place.

use std::fmt;

use aes::cipher::KeyInit;
use aes::Aes128;
use hmac::Mac;

use crate::keys::SessionKeys;
use crate::replay::{estimate_index, ReplayWindow, SsrcTable};
use crate::{Error, Suite, MASTER_KEY_LEN, MASTER_SALT_LEN, SRTCP_TAG_LEN, SRTCP_TRAILER_LEN};

/// Fixed RTP header length (RFC 3550 §5.1).
const RTP_HEADER_LEN: usize = 12;
/// The RTCP header SRTCP leaves in the clear: the first 8 bytes, up to the sender's SSRC
/// (RFC 3711 §3.4).
const RTCP_HEADER_LEN: usize = 8;
/// The E flag of the SRTCP index word: the packet's payload is encrypted.
const SRTCP_E_FLAG: u32 = 1 << 31;
/// SRTCP indexes are 31 bits.
const SRTCP_INDEX_LIMIT: u32 = 1 << 31;

/// What one context remembers of each SSRC it sends.
#[derive(Debug, Clone, Copy, Default)]
struct SendState {
    /// Indexes already protected: a second packet under one index would reuse keystream.
    rtp: Option<ReplayWindow>,
    /// The next SRTCP index.
    rtcp_next: u32,
}

/// What one context remembers of each SSRC it receives.
#[derive(Debug, Clone, Copy, Default)]
struct RecvState {
    rtp: Option<ReplayWindow>,
    rtcp: Option<ReplayWindow>,
}

/// The SRTP and SRTCP cryptographic context of one master key (RFC 3711 §3.2), for packets of
/// any SSRC (up to [`crate::MAX_SSRCS`] followed at once).
///
/// With SDES each side sends under its own key: use one context with the local key for
/// `protect`/`protect_rtcp` and another with the peer's key for `unprotect`/`unprotect_rtcp`.
/// A context keeps what it sends and what it receives apart, so one context may do both (a
/// loopback test does).
///
/// Nothing here allocates after [`SrtpContext::new`]: packets are transformed in the caller's
/// buffer and every error is `Copy`.
///
/// Keystream is unique per (key, SSRC, packet index), and a context only knows the indexes it
/// has protected itself: two contexts under one key must never protect RTP of the same SSRC
/// (give each new stream a fresh random SSRC), nor SRTCP of the same SSRC.
pub struct SrtpContext {
    suite: Suite,
    rtp: SessionKeys,
    rtcp: SessionKeys,
    send: SsrcTable<SendState>,
    recv: SsrcTable<RecvState>,
}

impl fmt::Debug for SrtpContext {
    /// The suite only: the keys never reach a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrtpContext")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

impl SrtpContext {
    /// A context for `suite` with a 16-byte master key and a 14-byte master salt; the session
    /// keys are derived here (key derivation rate 0), once.
    pub fn new(suite: Suite, master_key: &[u8], master_salt: &[u8]) -> Result<Self, Error> {
        let bad = Error::BadKey {
            key_len: master_key.len(),
            salt_len: master_salt.len(),
        };
        let key: &[u8; MASTER_KEY_LEN] = master_key.try_into().map_err(|_| bad)?;
        let salt: &[u8; MASTER_SALT_LEN] = master_salt.try_into().map_err(|_| bad)?;
        Ok(Self::from_arrays(suite, key, salt))
    }

    pub(crate) fn from_arrays(
        suite: Suite,
        key: &[u8; MASTER_KEY_LEN],
        salt: &[u8; MASTER_SALT_LEN],
    ) -> Self {
        let master = Aes128::new(key.into());
        Self {
            suite,
            rtp: SessionKeys::derive(&master, salt, false),
            rtcp: SessionKeys::derive(&master, salt, true),
            send: SsrcTable::default(),
            recv: SsrcTable::default(),
        }
    }

    /// The context's suite.
    pub fn suite(&self) -> Suite {
        self.suite
    }

    /// Bytes `protect` appends to an RTP packet (the tag: 10 or 4).
    pub fn srtp_overhead(&self) -> usize {
        self.suite.srtp_tag_len()
    }

    /// Protect the RTP packet `buf[..len]` in place: encrypt its payload and append the
    /// authentication tag, so `buf` needs [`Self::srtp_overhead`] bytes of room after `len`
    /// (at most [`crate::MAX_SRTP_TAG_LEN`]). Returns the SRTP packet's length.
    ///
    /// The rollover counter follows the sequence numbers (a wrap from 65535 to 0 increments
    /// it). Protecting the same sequence number twice in one rollover cycle is refused with
    /// [`Error::Replayed`]: the two packets would share keystream.
    ///
    /// Allocation-free, lock-free: fit for a real-time thread.
    pub fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let tag_len = self.suite.srtp_tag_len();
        let needed = len.saturating_add(tag_len);
        if needed > buf.len() {
            return Err(Error::BufferTooSmall {
                needed,
                capacity: buf.len(),
            });
        }
        let header_len = rtp_header_len(&buf[..len])?;
        let (seq, ssrc) = rtp_seq_ssrc(buf);
        let state = self.send.get_or_insert(ssrc);
        let index = match &state.rtp {
            Some(window) => {
                let index = estimate_index(window.highest(), seq)?;
                window.check(index)?;
                index
            }
            None => u64::from(seq),
        };
        match &mut state.rtp {
            Some(window) => window.accept(index),
            None => state.rtp = Some(ReplayWindow::new(index)),
        }
        self.rtp
            .apply_keystream(ssrc, index, &mut buf[header_len..len]);
        let roc = (index >> 16) as u32;
        let tag = self
            .rtp
            .mac()
            .chain_update(&buf[..len])
            .chain_update(roc.to_be_bytes())
            .finalize()
            .into_bytes();
        buf[len..needed].copy_from_slice(&tag[..tag_len]);
        Ok(needed)
    }

    /// Unprotect the SRTP packet `packet` in place: check the replay window, authenticate,
    /// then decrypt. Returns the RTP packet's length (`packet[..n]`; the tag is left behind).
    ///
    /// On error the packet is to be dropped and counted ([`Error::reason`]); the context is
    /// unchanged by a packet that fails, so forged packets cannot move the rollover counter or
    /// the replay window.
    pub fn unprotect(&mut self, packet: &mut [u8]) -> Result<usize, Error> {
        let tag_len = self.suite.srtp_tag_len();
        let Some(body_len) = packet
            .len()
            .checked_sub(tag_len)
            .filter(|&n| n >= RTP_HEADER_LEN)
        else {
            return Err(Error::TooShort { len: packet.len() });
        };
        let header_len = rtp_header_len(&packet[..body_len])?;
        let (seq, ssrc) = rtp_seq_ssrc(packet);
        let window = self.recv.get(ssrc).and_then(|s| s.rtp);
        let index = match &window {
            Some(window) => {
                let index = estimate_index(window.highest(), seq)?;
                window.check(index)?;
                index
            }
            // The first packet of an SSRC: a sender's rollover counter starts at 0 with a new
            // key (RFC 3711 §3.3.1), and SDES gives every call new keys.
            None => u64::from(seq),
        };
        let roc = (index >> 16) as u32;
        let (body, tag) = packet.split_at_mut(body_len);
        self.rtp
            .mac()
            .chain_update(&*body)
            .chain_update(roc.to_be_bytes())
            .verify_truncated_left(tag)
            .map_err(|_| Error::AuthFailed)?;
        self.rtp
            .apply_keystream(ssrc, index, &mut body[header_len..]);
        let state = self.recv.get_or_insert(ssrc);
        match &mut state.rtp {
            Some(window) => window.accept(index),
            None => state.rtp = Some(ReplayWindow::new(index)),
        }
        Ok(body_len)
    }

    /// Protect the RTCP (compound) packet `buf[..len]` in place: encrypt everything after the
    /// first 8 bytes, append the E flag with the SRTCP index, then the 80-bit tag; `buf` needs
    /// [`crate::SRTCP_TRAILER_LEN`] (14) bytes of room after `len`. Returns the SRTCP packet's
    /// length. Allocation-free.
    pub fn protect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        let needed = len.saturating_add(SRTCP_TRAILER_LEN);
        if needed > buf.len() {
            return Err(Error::BufferTooSmall {
                needed,
                capacity: buf.len(),
            });
        }
        let ssrc = rtcp_ssrc(&buf[..len])?;
        let state = self.send.get_or_insert(ssrc);
        let index = state.rtcp_next;
        if index >= SRTCP_INDEX_LIMIT {
            return Err(Error::IndexExhausted);
        }
        state.rtcp_next += 1;
        self.rtcp
            .apply_keystream(ssrc, u64::from(index), &mut buf[RTCP_HEADER_LEN..len]);
        let index_end = len + 4;
        buf[len..index_end].copy_from_slice(&(SRTCP_E_FLAG | index).to_be_bytes());
        let tag = self
            .rtcp
            .mac()
            .chain_update(&buf[..index_end])
            .finalize()
            .into_bytes();
        buf[index_end..needed].copy_from_slice(&tag[..SRTCP_TAG_LEN]);
        Ok(needed)
    }

    /// Unprotect the SRTCP packet `packet` in place: check the replay window on its SRTCP
    /// index, authenticate, then decrypt when its E flag is set. Returns the RTCP packet's
    /// length. The context is unchanged by a packet that fails.
    pub fn unprotect_rtcp(&mut self, packet: &mut [u8]) -> Result<usize, Error> {
        let Some(rtcp_len) = packet
            .len()
            .checked_sub(SRTCP_TRAILER_LEN)
            .filter(|&n| n >= RTCP_HEADER_LEN)
        else {
            return Err(Error::TooShort { len: packet.len() });
        };
        let ssrc = rtcp_ssrc(&packet[..rtcp_len])?;
        let index_end = rtcp_len + 4;
        let mut word = [0u8; 4];
        word.copy_from_slice(&packet[rtcp_len..index_end]);
        let word = u32::from_be_bytes(word);
        let encrypted = word & SRTCP_E_FLAG != 0;
        let index = u64::from(word & !SRTCP_E_FLAG);
        let window = self.recv.get(ssrc).and_then(|s| s.rtcp);
        if let Some(window) = &window {
            window.check(index)?;
        }
        let (authenticated, tag) = packet.split_at_mut(index_end);
        self.rtcp
            .mac()
            .chain_update(&*authenticated)
            .verify_truncated_left(tag)
            .map_err(|_| Error::AuthFailed)?;
        if encrypted {
            self.rtcp
                .apply_keystream(ssrc, index, &mut authenticated[RTCP_HEADER_LEN..rtcp_len]);
        }
        let state = self.recv.get_or_insert(ssrc);
        match &mut state.rtcp {
            Some(window) => window.accept(index),
            None => state.rtcp = Some(ReplayWindow::new(index)),
        }
        Ok(rtcp_len)
    }
}

/// The RTP header's length (fixed part, CSRCs and header extension): what SRTP leaves in the
/// clear. Checks the version and that the header fits.
fn rtp_header_len(packet: &[u8]) -> Result<usize, Error> {
    if packet.len() < RTP_HEADER_LEN {
        return Err(Error::TooShort { len: packet.len() });
    }
    if packet[0] >> 6 != 2 {
        return Err(Error::Malformed);
    }
    let csrc_count = usize::from(packet[0] & 0x0F);
    let mut len = RTP_HEADER_LEN + 4 * csrc_count;
    if packet[0] & 0x10 != 0 {
        // Extension: 16-bit profile, 16-bit length in 32-bit words, then the words.
        let words = packet
            .get(len + 2..len + 4)
            .ok_or(Error::Malformed)
            .map(|w| usize::from(u16::from_be_bytes([w[0], w[1]])))?;
        len += 4 + 4 * words;
    }
    if len > packet.len() {
        return Err(Error::Malformed);
    }
    Ok(len)
}

/// Sequence number and SSRC of a packet already checked by [`rtp_header_len`].
fn rtp_seq_ssrc(packet: &[u8]) -> (u16, u32) {
    let seq = u16::from_be_bytes([packet[2], packet[3]]);
    let ssrc = u32::from_be_bytes([packet[8], packet[9], packet[10], packet[11]]);
    (seq, ssrc)
}

/// The sender SSRC of an RTCP packet, after checking its version.
fn rtcp_ssrc(packet: &[u8]) -> Result<u32, Error> {
    if packet.len() < RTCP_HEADER_LEN {
        return Err(Error::TooShort { len: packet.len() });
    }
    if packet[0] >> 6 != 2 {
        return Err(Error::Malformed);
    }
    Ok(u32::from_be_bytes([
        packet[4], packet[5], packet[6], packet[7],
    ]))
}
