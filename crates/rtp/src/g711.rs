//! G.711 µ-law and A-law, bit-exact to the ITU-T G.191 Software Tool Library (`g711.c`).
//!
//! The STL is the reference, not CPython's `audioop`: for 508 negative inputs (four just below
//! each µ-law decision boundary) the STL takes the one's complement of the sample before
//! companding and so lands one code higher than `audioop`. The core tests pin digests of the full
//! tables; `tests/g711_itu_vectors.rs` compares every value with the ITU sweep files.
//!
//! Written by hand because the companding is a dozen lines and no well-kept crate states
//! bit-exactness to G.191 for both laws.

/// Encodes one 16-bit linear sample to a µ-law code (G.191 `ulaw_compress`).
#[inline]
pub const fn ulaw_encode(sample: i16) -> u8 {
    // G.191: 14-bit magnitude with one's complement for negatives, biased by 33.
    let magnitude = if sample < 0 {
        ((!sample) >> 2) as i32 + 33
    } else {
        (sample >> 2) as i32 + 33
    };
    let absno = if magnitude > 0x1FFF {
        0x1FFF
    } else {
        magnitude
    };
    // segment number = position of the highest set bit of absno >> 6, plus one.
    let segno = (32 - ((absno >> 6) as u32).leading_zeros()) as i32 + 1;
    let high_nibble = 0x08 - segno;
    let low_nibble = 0x0F - ((absno >> segno) & 0x0F);
    let code = ((high_nibble << 4) | low_nibble) as u8;
    if sample >= 0 {
        code | 0x80
    } else {
        code
    }
}

/// Decodes one µ-law code to a 16-bit linear sample (G.191 `ulaw_expand`).
#[inline]
pub const fn ulaw_decode(code: u8) -> i16 {
    ULAW_DECODE[code as usize]
}

/// Encodes one 16-bit linear sample to an A-law code, even bits inverted (G.191 `alaw_compress`).
#[inline]
pub const fn alaw_encode(sample: i16) -> u8 {
    // G.191: 12-bit magnitude with one's complement for negatives.
    let mut ix: i32 = if sample < 0 {
        ((!sample) >> 4) as i32
    } else {
        (sample >> 4) as i32
    };
    if ix > 15 {
        // exponent = 1 + number of halvings until the mantissa fits 5 bits (16..31).
        let halvings = (32 - (ix as u32 >> 5).leading_zeros()) as i32;
        ix >>= halvings;
        ix = ix - 16 + ((halvings + 1) << 4);
    }
    if sample >= 0 {
        ix |= 0x80;
    }
    (ix ^ 0x55) as u8
}

/// Decodes one A-law code to a 16-bit linear sample (G.191 `alaw_expand`).
#[inline]
pub const fn alaw_decode(code: u8) -> i16 {
    ALAW_DECODE[code as usize]
}

const fn ulaw_expand(code: u8) -> i16 {
    let negative = code < 0x80;
    let mantissa_all = !code;
    let exponent = ((mantissa_all >> 4) & 0x07) as i32;
    let segment = exponent + 1;
    let mantissa = (mantissa_all & 0x0F) as i32;
    let step = 4 << segment;
    let value = (0x80 << exponent) + step * mantissa + step / 2 - 4 * 33;
    if negative {
        -value as i16
    } else {
        value as i16
    }
}

const fn alaw_expand(code: u8) -> i16 {
    let ix = ((code ^ 0x55) & 0x7F) as i32;
    let exponent = ix >> 4;
    let mut mantissa = ix & 0x0F;
    if exponent > 0 {
        mantissa += 16;
    }
    mantissa = (mantissa << 4) + 0x08;
    if exponent > 1 {
        mantissa <<= exponent - 1;
    }
    if code > 127 {
        mantissa as i16
    } else {
        -mantissa as i16
    }
}

const fn build_decode_table(law: Law) -> [i16; 256] {
    let mut table = [0i16; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = match law {
            Law::Ulaw => ulaw_expand(code as u8),
            Law::Alaw => alaw_expand(code as u8),
        };
        code += 1;
    }
    table
}

/// µ-law code → linear sample, all 256 codes (G.191 values).
pub static ULAW_DECODE: [i16; 256] = build_decode_table(Law::Ulaw);
/// A-law code → linear sample, all 256 codes (G.191 values).
pub static ALAW_DECODE: [i16; 256] = build_decode_table(Law::Alaw);

/// A G.711 law, chosen by payload type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Law {
    /// µ-law, payload type [`crate::PT_PCMU`].
    Ulaw,
    /// A-law, payload type [`crate::PT_PCMA`].
    Alaw,
}

impl Law {
    /// The law of a static payload type (0 → µ-law, 8 → A-law), `None` otherwise.
    pub const fn from_payload_type(payload_type: u8) -> Option<Law> {
        match payload_type {
            crate::PT_PCMU => Some(Law::Ulaw),
            crate::PT_PCMA => Some(Law::Alaw),
            _ => None,
        }
    }

    /// The static payload type of this law.
    pub const fn payload_type(self) -> u8 {
        match self {
            Law::Ulaw => crate::PT_PCMU,
            Law::Alaw => crate::PT_PCMA,
        }
    }

    /// Encodes one sample.
    #[inline]
    pub const fn encode(self, sample: i16) -> u8 {
        match self {
            Law::Ulaw => ulaw_encode(sample),
            Law::Alaw => alaw_encode(sample),
        }
    }

    /// Decodes one code.
    #[inline]
    pub const fn decode(self, code: u8) -> i16 {
        match self {
            Law::Ulaw => ulaw_decode(code),
            Law::Alaw => alaw_decode(code),
        }
    }

    /// The code of digital silence (µ-law 0xFF, A-law 0xD5).
    pub const fn silence(self) -> u8 {
        match self {
            Law::Ulaw => 0xFF,
            Law::Alaw => 0xD5,
        }
    }

    /// Encodes `samples` into `codes` without allocating; returns the number written
    /// (`min(samples.len(), codes.len())`).
    pub fn encode_slice(self, samples: &[i16], codes: &mut [u8]) -> usize {
        let n = samples.len().min(codes.len());
        match self {
            Law::Ulaw => codes[..n]
                .iter_mut()
                .zip(samples)
                .for_each(|(c, &s)| *c = ulaw_encode(s)),
            Law::Alaw => codes[..n]
                .iter_mut()
                .zip(samples)
                .for_each(|(c, &s)| *c = alaw_encode(s)),
        }
        n
    }

    /// Decodes `codes` into `samples` without allocating; returns the number written
    /// (`min(codes.len(), samples.len())`).
    pub fn decode_slice(self, codes: &[u8], samples: &mut [i16]) -> usize {
        let table = match self {
            Law::Ulaw => &ULAW_DECODE,
            Law::Alaw => &ALAW_DECODE,
        };
        let n = codes.len().min(samples.len());
        samples[..n]
            .iter_mut()
            .zip(codes)
            .for_each(|(s, &c)| *s = table[c as usize]);
        n
    }
}

/// Encodes linear samples to µ-law into a caller buffer; returns the count written.
pub fn ulaw_encode_slice(samples: &[i16], codes: &mut [u8]) -> usize {
    Law::Ulaw.encode_slice(samples, codes)
}

/// Decodes µ-law codes into a caller buffer; returns the count written.
pub fn ulaw_decode_slice(codes: &[u8], samples: &mut [i16]) -> usize {
    Law::Ulaw.decode_slice(codes, samples)
}

/// Encodes linear samples to A-law into a caller buffer; returns the count written.
pub fn alaw_encode_slice(samples: &[i16], codes: &mut [u8]) -> usize {
    Law::Alaw.encode_slice(samples, codes)
}

/// Decodes A-law codes into a caller buffer; returns the count written.
pub fn alaw_decode_slice(codes: &[u8], samples: &mut [i16]) -> usize {
    Law::Alaw.decode_slice(codes, samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn encode_table(encode: fn(i16) -> u8) -> Vec<u8> {
        (i16::MIN..=i16::MAX).map(encode).collect()
    }

    fn decode_table(decode: fn(u8) -> i16) -> Vec<u8> {
        (0..=255u8).flat_map(|c| decode(c).to_le_bytes()).collect()
    }

    // SHA-256 of the ITU-T G.191 STL tables (the 65,536-entry encode tables as bytes, and the
    // 256-entry decode tables as little-endian i16); tests/g711_itu_vectors.rs compares every
    // vector when the ITU files are present.
    #[test]
    fn encode_tables_match_g191_digest() {
        assert_eq!(
            hex(&Sha256::digest(encode_table(ulaw_encode))),
            "90c29de505fb68e766118303bd552a16005dcf810873698bee1d8f3b247ce28c"
        );
        assert_eq!(
            hex(&Sha256::digest(encode_table(alaw_encode))),
            "38488f6fd710f4686360edc4d38639f96c491595ef93f8eb8d62d5e07ca6ce7b"
        );
    }

    #[test]
    fn decode_tables_match_g191_digest() {
        assert_eq!(
            hex(&Sha256::digest(decode_table(ulaw_decode))),
            "3dab54339e520bb2c924826e3b72a917a2b612e9fd12fc867500f1d983a75827"
        );
        assert_eq!(
            hex(&Sha256::digest(decode_table(alaw_decode))),
            "e04788d110e58ff8c70c93b8480190d973e3b67876b6119abbaec766cc75c174"
        );
    }

    // (sample, µ-law code, A-law code), 242 values taken from the G.191 STL sweep files.
    const SAMPLED: &[(i16, u8, u8)] = &[
        (-32768, 0x00, 0x2A),
        (-32359, 0x00, 0x2A),
        (-31950, 0x00, 0x2A),
        (-31614, 0x00, 0x2B),
        (-31613, 0x00, 0x2B),
        (-31612, 0x01, 0x2B),
        (-31611, 0x01, 0x2B),
        (-31610, 0x01, 0x2B),
        (-31609, 0x01, 0x2B),
        (-31608, 0x01, 0x2B),
        (-31607, 0x01, 0x2B),
        (-31541, 0x01, 0x2B),
        (-31132, 0x01, 0x2B),
        (-30723, 0x01, 0x2B),
        (-30314, 0x02, 0x28),
        (-29905, 0x02, 0x28),
        (-29496, 0x03, 0x29),
        (-29087, 0x03, 0x29),
        (-28678, 0x03, 0x29),
        (-28269, 0x04, 0x2E),
        (-27860, 0x04, 0x2E),
        (-27451, 0x05, 0x2F),
        (-27042, 0x05, 0x2F),
        (-26633, 0x05, 0x2F),
        (-26224, 0x06, 0x2C),
        (-25815, 0x06, 0x2C),
        (-25406, 0x07, 0x2D),
        (-24997, 0x07, 0x2D),
        (-24588, 0x07, 0x2D),
        (-24179, 0x08, 0x22),
        (-23770, 0x08, 0x22),
        (-23361, 0x09, 0x23),
        (-22952, 0x09, 0x23),
        (-22543, 0x09, 0x23),
        (-22134, 0x0A, 0x20),
        (-21725, 0x0A, 0x20),
        (-21316, 0x0B, 0x21),
        (-20907, 0x0B, 0x21),
        (-20498, 0x0B, 0x21),
        (-20089, 0x0C, 0x26),
        (-19680, 0x0C, 0x26),
        (-19271, 0x0D, 0x27),
        (-18862, 0x0D, 0x27),
        (-18453, 0x0D, 0x27),
        (-18044, 0x0E, 0x24),
        (-17635, 0x0E, 0x24),
        (-17226, 0x0F, 0x25),
        (-16817, 0x0F, 0x25),
        (-16408, 0x0F, 0x25),
        (-15999, 0x10, 0x3A),
        (-15998, 0x10, 0x3A),
        (-15997, 0x10, 0x3A),
        (-15996, 0x10, 0x3A),
        (-15995, 0x10, 0x3A),
        (-15994, 0x10, 0x3A),
        (-15993, 0x10, 0x3A),
        (-15992, 0x10, 0x3A),
        (-15991, 0x10, 0x3A),
        (-15590, 0x11, 0x3B),
        (-15181, 0x12, 0x38),
        (-14772, 0x12, 0x39),
        (-14363, 0x13, 0x39),
        (-13954, 0x14, 0x3E),
        (-13545, 0x15, 0x3F),
        (-13136, 0x16, 0x3C),
        (-12727, 0x16, 0x3D),
        (-12318, 0x17, 0x3D),
        (-11909, 0x18, 0x32),
        (-11500, 0x19, 0x33),
        (-11091, 0x1A, 0x30),
        (-10682, 0x1A, 0x31),
        (-10273, 0x1B, 0x31),
        (-9864, 0x1C, 0x36),
        (-9455, 0x1D, 0x37),
        (-9046, 0x1E, 0x34),
        (-8637, 0x1E, 0x35),
        (-8228, 0x1F, 0x35),
        (-8062, 0x1F, 0x0A),
        (-8061, 0x1F, 0x0A),
        (-8060, 0x20, 0x0A),
        (-8059, 0x20, 0x0A),
        (-8058, 0x20, 0x0A),
        (-8057, 0x20, 0x0A),
        (-8056, 0x20, 0x0A),
        (-8055, 0x20, 0x0A),
        (-7819, 0x20, 0x0B),
        (-7410, 0x22, 0x09),
        (-7001, 0x24, 0x0E),
        (-6592, 0x25, 0x0C),
        (-6183, 0x27, 0x0D),
        (-5774, 0x28, 0x03),
        (-5365, 0x2A, 0x01),
        (-4956, 0x2C, 0x06),
        (-4547, 0x2D, 0x04),
        (-4138, 0x2F, 0x05),
        (-3729, 0x31, 0x18),
        (-3320, 0x35, 0x1C),
        (-2911, 0x38, 0x13),
        (-2502, 0x3B, 0x16),
        (-2093, 0x3E, 0x15),
        (-1684, 0x43, 0x6F),
        (-1275, 0x4A, 0x66),
        (-1022, 0x4D, 0x7A),
        (-1021, 0x4D, 0x7A),
        (-1020, 0x4E, 0x7A),
        (-1019, 0x4E, 0x7A),
        (-1018, 0x4E, 0x7A),
        (-1017, 0x4E, 0x7A),
        (-1016, 0x4E, 0x7A),
        (-1015, 0x4E, 0x7A),
        (-866, 0x50, 0x7E),
        (-457, 0x5D, 0x49),
        (-254, 0x67, 0x5A),
        (-253, 0x67, 0x5A),
        (-252, 0x68, 0x5A),
        (-251, 0x68, 0x5A),
        (-250, 0x68, 0x5A),
        (-249, 0x68, 0x5A),
        (-248, 0x68, 0x5A),
        (-247, 0x68, 0x5A),
        (-126, 0x6F, 0x52),
        (-125, 0x6F, 0x52),
        (-124, 0x70, 0x52),
        (-123, 0x70, 0x52),
        (-122, 0x70, 0x52),
        (-121, 0x70, 0x52),
        (-120, 0x70, 0x52),
        (-119, 0x70, 0x52),
        (-48, 0x79, 0x57),
        (-16, 0x7D, 0x55),
        (-15, 0x7D, 0x55),
        (-14, 0x7D, 0x55),
        (-13, 0x7D, 0x55),
        (-12, 0x7E, 0x55),
        (-11, 0x7E, 0x55),
        (-10, 0x7E, 0x55),
        (-9, 0x7E, 0x55),
        (-8, 0x7E, 0x55),
        (-7, 0x7E, 0x55),
        (-6, 0x7E, 0x55),
        (-5, 0x7E, 0x55),
        (-4, 0x7F, 0x55),
        (-3, 0x7F, 0x55),
        (-2, 0x7F, 0x55),
        (-1, 0x7F, 0x55),
        (0, 0xFF, 0xD5),
        (1, 0xFF, 0xD5),
        (2, 0xFF, 0xD5),
        (3, 0xFF, 0xD5),
        (4, 0xFE, 0xD5),
        (5, 0xFE, 0xD5),
        (6, 0xFE, 0xD5),
        (7, 0xFE, 0xD5),
        (8, 0xFE, 0xD5),
        (9, 0xFE, 0xD5),
        (10, 0xFE, 0xD5),
        (11, 0xFE, 0xD5),
        (12, 0xFD, 0xD5),
        (13, 0xFD, 0xD5),
        (14, 0xFD, 0xD5),
        (15, 0xFD, 0xD5),
        (361, 0xE1, 0xC3),
        (770, 0xD3, 0xFD),
        (1179, 0xCB, 0xE7),
        (1588, 0xC5, 0xED),
        (1997, 0xBF, 0xEA),
        (2406, 0xBC, 0x97),
        (2815, 0xB8, 0x90),
        (3224, 0xB5, 0x9C),
        (3633, 0xB2, 0x99),
        (4042, 0xAF, 0x9A),
        (4451, 0xAE, 0x84),
        (4860, 0xAC, 0x87),
        (5269, 0xAA, 0x81),
        (5678, 0xA9, 0x83),
        (6087, 0xA7, 0x82),
        (6496, 0xA6, 0x8C),
        (6905, 0xA4, 0x8F),
        (7314, 0xA2, 0x89),
        (7723, 0xA1, 0x8B),
        (8132, 0x9F, 0x8A),
        (8541, 0x9F, 0xB5),
        (8950, 0x9E, 0xB4),
        (9359, 0x9D, 0xB7),
        (9768, 0x9C, 0xB6),
        (10177, 0x9B, 0xB6),
        (10586, 0x9B, 0xB1),
        (10995, 0x9A, 0xB0),
        (11404, 0x99, 0xB3),
        (11813, 0x98, 0xB2),
        (12222, 0x97, 0xB2),
        (12631, 0x97, 0xBD),
        (13040, 0x96, 0xBC),
        (13449, 0x95, 0xBF),
        (13858, 0x94, 0xBE),
        (14267, 0x93, 0xBE),
        (14676, 0x93, 0xB9),
        (15085, 0x92, 0xB8),
        (15494, 0x91, 0xBB),
        (15903, 0x90, 0xBA),
        (16312, 0x8F, 0xBA),
        (16721, 0x8F, 0xA5),
        (17130, 0x8F, 0xA5),
        (17539, 0x8E, 0xA4),
        (17948, 0x8E, 0xA4),
        (18357, 0x8D, 0xA4),
        (18766, 0x8D, 0xA7),
        (19175, 0x8D, 0xA7),
        (19584, 0x8C, 0xA6),
        (19993, 0x8C, 0xA6),
        (20402, 0x8B, 0xA6),
        (20811, 0x8B, 0xA1),
        (21220, 0x8B, 0xA1),
        (21629, 0x8A, 0xA0),
        (22038, 0x8A, 0xA0),
        (22447, 0x89, 0xA0),
        (22856, 0x89, 0xA3),
        (23265, 0x89, 0xA3),
        (23674, 0x88, 0xA2),
        (24083, 0x88, 0xA2),
        (24492, 0x87, 0xA2),
        (24901, 0x87, 0xAD),
        (25310, 0x87, 0xAD),
        (25719, 0x86, 0xAC),
        (26128, 0x86, 0xAC),
        (26537, 0x85, 0xAC),
        (26946, 0x85, 0xAF),
        (27355, 0x85, 0xAF),
        (27764, 0x84, 0xAE),
        (28173, 0x84, 0xAE),
        (28582, 0x83, 0xAE),
        (28991, 0x83, 0xA9),
        (29400, 0x83, 0xA9),
        (29809, 0x82, 0xA8),
        (30218, 0x82, 0xA8),
        (30627, 0x81, 0xA8),
        (31036, 0x81, 0xAB),
        (31445, 0x81, 0xAB),
        (31854, 0x80, 0xAA),
        (32263, 0x80, 0xAA),
        (32672, 0x80, 0xAA),
        (32767, 0x80, 0xAA),
    ];

    #[test]
    fn sampled_values_match_g191() {
        for &(sample, ulaw, alaw) in SAMPLED {
            assert_eq!(ulaw_encode(sample), ulaw, "µ-law encode of {sample}");
            assert_eq!(alaw_encode(sample), alaw, "A-law encode of {sample}");
        }
    }

    #[test]
    fn spot_decodes_and_silence() {
        assert_eq!(ulaw_decode(0x00), -32124);
        assert_eq!(ulaw_decode(0x80), 32124);
        assert_eq!(ulaw_decode(0x7F), 0);
        assert_eq!(ulaw_decode(0xFF), 0);
        assert_eq!(alaw_decode(0x55), -8);
        assert_eq!(alaw_decode(0xD5), 8);
        assert_eq!(alaw_decode(0x2A), -32256);
        assert_eq!(alaw_decode(0xAA), 32256);
        // ITU, not audioop: -4..-1 encode to 0x7F (decodes to 0).
        assert_eq!(ulaw_encode(-1), 0x7F);
        for law in [Law::Ulaw, Law::Alaw] {
            assert_eq!(Some(law.silence()), crate::silence_byte(law.payload_type()));
            assert_eq!(law.encode(0), law.silence());
        }
    }

    #[test]
    fn slices_encode_and_decode_in_place() {
        let samples: Vec<i16> = (0..crate::SAMPLES_PER_FRAME as i16)
            .map(|i| i * 200 - 16000)
            .collect();
        for law in [Law::Ulaw, Law::Alaw] {
            let mut codes = [0u8; crate::FRAME_BYTES];
            assert_eq!(law.encode_slice(&samples, &mut codes), crate::FRAME_BYTES);
            let mut back = [0i16; crate::SAMPLES_PER_FRAME];
            assert_eq!(
                law.decode_slice(&codes, &mut back),
                crate::SAMPLES_PER_FRAME
            );
            for (i, (&s, &c)) in samples.iter().zip(&codes).enumerate() {
                assert_eq!(c, law.encode(s), "sample {i}");
                assert_eq!(back[i], law.decode(c));
            }
            // Shorter output buffer: writes what fits.
            let mut short = [0u8; 10];
            assert_eq!(law.encode_slice(&samples, &mut short), 10);
        }
    }

    #[test]
    fn decode_then_encode_is_identity_on_codes() {
        for code in 0..=255u8 {
            // µ-law 0x7F (negative zero) re-encodes as 0xFF (positive zero).
            let expected_u = if code == 0x7F { 0xFF } else { code };
            assert_eq!(
                ulaw_encode(ulaw_decode(code)),
                expected_u,
                "µ-law {code:#04x}"
            );
            assert_eq!(alaw_encode(alaw_decode(code)), code, "A-law {code:#04x}");
        }
    }
}
