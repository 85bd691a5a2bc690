//! Key derivation (RFC 3711 §4.3) and the AES counter-mode keystream (§4.1.1).

use aes::cipher::{InnerIvInit, KeyInit, StreamCipher, StreamCipherCoreWrapper};
use aes::Aes128;
use hmac::Hmac;
use sha1::Sha1;

use crate::{MASTER_KEY_LEN, MASTER_SALT_LEN};

/// AES-128 in counter mode with a 128-bit big-endian counter. SRTP's counter is the low 16 bits
/// of the IV (§4.1.1), which start at zero: a packet would need 2^16 blocks (1 MiB) to carry
/// into the bits above, so incrementing all 128 bits is the same thing.
type Aes128Ctr = ctr::Ctr128BE<Aes128>;
type Aes128CtrCore = ctr::CtrCore<Aes128, ctr::flavors::Ctr128BE>;

/// AES-CM over an already expanded key (a copy of the key schedule, no allocation).
fn aes_ctr(cipher: &Aes128, iv: [u8; 16]) -> Aes128Ctr {
    StreamCipherCoreWrapper::from_core(Aes128CtrCore::inner_iv_init(cipher.clone(), &iv.into()))
}

/// An HMAC-SHA1 keyed with `key`. HMAC pads a key shorter than SHA-1's 64-byte block with
/// zeros (RFC 2104 §2), so padding it here is the same key, and keying cannot fail.
fn hmac_sha1(key: &[u8; SESSION_AUTH_KEY_LEN]) -> HmacSha1 {
    let mut block = [0u8; 64];
    block[..SESSION_AUTH_KEY_LEN].copy_from_slice(key);
    let mac = <HmacSha1 as KeyInit>::new(&block.into());
    block.fill(0);
    mac
}

pub(crate) type HmacSha1 = Hmac<Sha1>;

/// Session salt length: 112 bits for AES-CM (§4.3.3).
pub(crate) const SESSION_SALT_LEN: usize = 14;
/// Session authentication key length: 160 bits for HMAC-SHA1 (§4.3.3 / §8.2).
pub(crate) const SESSION_AUTH_KEY_LEN: usize = 20;

/// The key derivation labels (§4.3.2): RTP's three session keys, then RTCP's.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Label {
    RtpEncryption = 0,
    RtpAuthentication = 1,
    RtpSalt = 2,
    RtcpEncryption = 3,
    RtcpAuthentication = 4,
    RtcpSalt = 5,
}

/// One direction's session keys for RTP or for RTCP, expanded once: the AES key schedule and the
/// HMAC's inner and outer pads are cloned per packet (plain copies, no allocation) instead of
/// being recomputed.
#[derive(Clone)]
pub(crate) struct SessionKeys {
    cipher: Aes128,
    salt: [u8; SESSION_SALT_LEN],
    mac: HmacSha1,
}

impl SessionKeys {
    /// Derive the session keys with the key derivation rate 0 SDES uses (§4.3.1: r = 0, so
    /// the keys are derived once).
    pub(crate) fn derive(master: &Aes128, master_salt: &[u8; MASTER_SALT_LEN], rtcp: bool) -> Self {
        let (enc, auth, salt) = if rtcp {
            (
                Label::RtcpEncryption,
                Label::RtcpAuthentication,
                Label::RtcpSalt,
            )
        } else {
            (
                Label::RtpEncryption,
                Label::RtpAuthentication,
                Label::RtpSalt,
            )
        };
        let mut key = [0u8; MASTER_KEY_LEN];
        derive(master, master_salt, enc, &mut key);
        let mut auth_key = [0u8; SESSION_AUTH_KEY_LEN];
        derive(master, master_salt, auth, &mut auth_key);
        let mut session_salt = [0u8; SESSION_SALT_LEN];
        derive(master, master_salt, salt, &mut session_salt);
        let keys = Self {
            cipher: Aes128::new(&key.into()),
            salt: session_salt,
            // HMAC takes a key of any length: this cannot fail.
            mac: hmac_sha1(&auth_key),
        };
        key.fill(0);
        auth_key.fill(0);
        keys
    }

    /// XOR the keystream of packet `index` of `ssrc` into `data` (encrypts and decrypts).
    pub(crate) fn apply_keystream(&self, ssrc: u32, index: u64, data: &mut [u8]) {
        let iv = packet_iv(&self.salt, ssrc, index);
        aes_ctr(&self.cipher, iv).apply_keystream(data);
    }

    /// A fresh HMAC-SHA1 keyed with the session authentication key.
    pub(crate) fn mac(&self) -> HmacSha1 {
        self.mac.clone()
    }
}

/// The counter block of a packet (§4.1.1):
/// `IV = (k_s * 2^16) XOR (SSRC * 2^64) XOR (i * 2^16)`.
pub(crate) fn packet_iv(salt: &[u8; SESSION_SALT_LEN], ssrc: u32, index: u64) -> [u8; 16] {
    let mut iv = [0u8; 16];
    iv[..SESSION_SALT_LEN].copy_from_slice(salt);
    for (b, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
        *b ^= s;
    }
    // The 48-bit index: the low six bytes of the u64.
    for (b, i) in iv[8..14].iter_mut().zip(&index.to_be_bytes()[2..]) {
        *b ^= i;
    }
    iv
}

/// The key derivation PRF (§4.3.1, §4.3.3) with r = 0: AES-CM under the master key, with
/// `x = (label || r) XOR master_salt` as the IV's top 112 bits. `label || r` is 56 bits aligned
/// to the right of the salt, so with r = 0 only the salt's byte 7 changes.
pub(crate) fn derive(
    master: &Aes128,
    master_salt: &[u8; MASTER_SALT_LEN],
    label: Label,
    out: &mut [u8],
) {
    let mut iv = [0u8; 16];
    iv[..MASTER_SALT_LEN].copy_from_slice(master_salt);
    iv[7] ^= label as u8;
    out.fill(0);
    aes_ctr(master, iv).apply_keystream(out);
}

/// The session keys as bytes, for the RFC 3711 Appendix B.3 test.
#[cfg(test)]
pub(crate) fn derive_bytes(
    master_key: &[u8; MASTER_KEY_LEN],
    master_salt: &[u8; MASTER_SALT_LEN],
) -> ([u8; 16], [u8; SESSION_AUTH_KEY_LEN], [u8; SESSION_SALT_LEN]) {
    let master = Aes128::new(&(*master_key).into());
    let mut k = [0u8; 16];
    let mut a = [0u8; SESSION_AUTH_KEY_LEN];
    let mut s = [0u8; SESSION_SALT_LEN];
    derive(&master, master_salt, Label::RtpEncryption, &mut k);
    derive(&master, master_salt, Label::RtpAuthentication, &mut a);
    derive(&master, master_salt, Label::RtpSalt, &mut s);
    (k, a, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// RFC 3711 Appendix B.2: the AES-CM keystream of session key 2B7E…, session salt F0…FD,
    /// SSRC 0, index 0 (counter blocks 0000, 0001, 0002 and FEFF, FF00, FF01).
    #[test]
    fn appendix_b2_keystream() {
        let key: [u8; 16] = hex("2B7E151628AED2A6ABF7158809CF4F3C")
            .try_into()
            .expect("16");
        let salt: [u8; 14] = hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD").try_into().expect("14");
        let keys = SessionKeys {
            cipher: Aes128::new(&key.into()),
            salt,
            mac: hmac_sha1(&[0u8; 20]),
        };
        let mut stream = vec![0u8; 16 * 0xFF02];
        keys.apply_keystream(0, 0, &mut stream);
        let block = |n: usize| stream[n * 16..n * 16 + 16].to_vec();
        assert_eq!(block(0), hex("E03EAD0935C95E80E166B16DD92B4EB4"));
        assert_eq!(block(1), hex("D23513162B02D0F72A43A2FE4A5F97AB"));
        assert_eq!(block(2), hex("41E95B3BB0A2E8DD477901E4FCA894C0"));
        assert_eq!(block(0xFEFF), hex("EC8CDF7398607CB0F2D21675EA9EA1E4"));
        assert_eq!(block(0xFF00), hex("362B7C3C6773516318A077D7FC5073AE"));
        assert_eq!(block(0xFF01), hex("6A2CC3787889374FBEB4C81B17BA6C44"));
    }

    /// RFC 3711 Appendix B.3: the session keys of master key E1F9… and master salt 0EC6….
    #[test]
    fn appendix_b3_key_derivation() {
        let key: [u8; 16] = hex("E1F97A0D3E018BE0D64FA32C06DE4139")
            .try_into()
            .expect("16");
        let salt: [u8; 14] = hex("0EC675AD498AFEEBB6960B3AABE6").try_into().expect("14");
        let (k, a, s) = derive_bytes(&key, &salt);
        assert_eq!(k.to_vec(), hex("C61E7A93744F39EE10734AFE3FF7A087"));
        assert_eq!(s.to_vec(), hex("30CBBC08863D8C85D49DB34A9AE1"));
        assert_eq!(a.to_vec(), hex("CEBE321F6FF7716B6FD4AB49AF256A156D38BAA4"));
        // The appendix lists 94 bytes of the authentication keystream; its first 20 are the
        // HMAC-SHA1 key, and a longer derivation must start with them.
        let master = Aes128::new(&key.into());
        let mut long = [0u8; 94];
        derive(&master, &salt, Label::RtpAuthentication, &mut long);
        assert_eq!(
            long.to_vec(),
            hex(concat!(
                "CEBE321F6FF7716B6FD4AB49AF256A15",
                "6D38BAA48F0A0ACF3C34E2359E6CDBCE",
                "E049646C43D9327AD175578EF7227098",
                "6371C10C9A369AC2F94A8C5FBCDDDC25",
                "6D6E919A48B610EF17C2041E47403576",
                "6B68642C59BBFC2F34DB60DBDFB2"
            ))
        );
    }
}
