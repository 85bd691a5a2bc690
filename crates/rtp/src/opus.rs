//! Opus (RFC 6716) on the trunk, as RFC 7587 carries it: libopus through the `opus` crate, at
//! 16 kHz mono inside ontime, 20 ms per packet on the 48000 Hz RTP clock.
//!
//! What ontime sends is shaped for its sender: **every 20 ms packet is exactly [`FRAME_BYTES`]
//! bytes**, like G.711 and G.722, so the sender's rings, barge-in positions and tick stay
//! byte-for-byte the same for every codec, and the tick still only copies prepared bytes. The
//! encoder runs constrained VBR at [`TARGET_BITRATE_BPS`] into at most [`MAX_ENCODED_BYTES`],
//! and the packet is padded to its size with Opus's own padding (RFC 6716 §3.2.5, code 3): any
//! decoder drops the padding. Why not libopus's hard CBR at 64 kbit/s, which gives the size
//! directly: its rate control re-encodes to hit the size and costs 3–4 times the CPU (375 µs
//! per frame against 95 µs, measured on this project's 2 vCPU VM, release build), for nothing
//! SILK can use. The encoder is told the signal is voice and that the line loses packets, which
//! makes it use SILK with in-band forward error correction (LBRR): a receiver that lost a
//! packet recovers a coarse copy of it from the next one.
//!
//! What ontime receives may be any 20 ms Opus packet (any bitrate, VBR or not, SILK, CELT or
//! hybrid). A packet of another duration, or one libopus cannot parse, is an error for the
//! caller to count and drop; a lost packet is concealed from the next packet's FEC when it is
//! already buffered, or by libopus's packet-loss concealment.

use std::sync::OnceLock;

use ::opus::{Application, Bandwidth, Bitrate, Channels, Signal};

use crate::{Error, Result, FRAME_BYTES, WIDEBAND_RATE_HZ, WIDEBAND_SAMPLES_PER_FRAME};

/// The bitrate the encoder aims at: wideband SILK's sweet spot for speech, FEC included.
pub const TARGET_BITRATE_BPS: i32 = 32_000;

/// The most an encoded frame may take before padding: room for the code 3 header that padding
/// adds (RFC 6716 §3.2.5) inside [`FRAME_BYTES`].
pub const MAX_ENCODED_BYTES: usize = FRAME_BYTES - 8;

/// The loss rate the encoder plans its FEC for. Any value above zero turns LBRR on for voice;
/// 10 % spends a little more of the frame on redundancy than the 5 % a poor trunk has.
const PLANNED_LOSS_PERCENT: i32 = 10;

/// libopus's complexity (0..=10). Measured per 20 ms frame of speech at 32 kbit/s VBR (release
/// build, this project's 2 vCPU VM): 31 µs at 1, 70 µs at 3, 95 µs at 5. A gateway carries
/// tens of calls on one core and a bot talks half the time: at 5 the encoder alone took a
/// third of the core at 57 Opus calls (docs/capacity.md). 1 keeps SILK's pitch analysis and
/// noise shaping in their simpler forms, which a telephone voice does not miss.
const COMPLEXITY: i32 = 1;

fn opus_err(e: ::opus::Error) -> Error {
    Error::Opus(e.code().description())
}

/// Encodes 20 ms frames of 16 kHz audio into constant-size Opus packets.
pub struct Encoder {
    inner: ::opus::Encoder,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("opus::Encoder").finish_non_exhaustive()
    }
}

impl Encoder {
    /// A fresh encoder with ontime's settings (module docs).
    pub fn new() -> Result<Encoder> {
        Encoder::with_complexity(COMPLEXITY)
    }

    /// The same at another libopus complexity (0..=10): a phone's encoder in tests and the load
    /// harness (libopus's own default is 9), where the cost does not matter and the models
    /// should hear what a phone sends.
    pub fn with_complexity(complexity: i32) -> Result<Encoder> {
        let mut inner = ::opus::Encoder::new(WIDEBAND_RATE_HZ, Channels::Mono, Application::Voip)
            .map_err(opus_err)?;
        inner
            .set_bitrate(Bitrate::Bits(TARGET_BITRATE_BPS))
            .map_err(opus_err)?;
        inner.set_vbr(true).map_err(opus_err)?;
        inner.set_vbr_constraint(true).map_err(opus_err)?;
        inner.set_signal(Signal::Voice).map_err(opus_err)?;
        inner
            .set_max_bandwidth(Bandwidth::Wideband)
            .map_err(opus_err)?;
        inner.set_inband_fec(true).map_err(opus_err)?;
        inner
            .set_packet_loss_perc(PLANNED_LOSS_PERCENT)
            .map_err(opus_err)?;
        inner.set_complexity(complexity).map_err(opus_err)?;
        Ok(Encoder { inner })
    }

    /// Encodes one 20 ms frame into `out`: always [`FRAME_BYTES`] bytes, padded.
    pub fn encode(
        &mut self,
        pcm: &[i16; WIDEBAND_SAMPLES_PER_FRAME],
        out: &mut [u8; FRAME_BYTES],
    ) -> Result<()> {
        let n = self
            .inner
            .encode(pcm, &mut out[..MAX_ENCODED_BYTES])
            .map_err(opus_err)?;
        // A packet of another size would desync the byte ring from the frames, so a padding
        // libopus refuses is an error rather than a silent misframe. On success the packet
        // fills `out`.
        ::opus::packet::pad(out, n).map_err(opus_err)?;
        Ok(())
    }

    /// Forgets the audio encoded so far (a new utterance after the sender filled silence).
    pub fn reset(&mut self) -> Result<()> {
        self.inner.reset_state().map_err(opus_err)
    }
}

/// Decodes 20 ms Opus packets to 16 kHz audio and conceals lost ones.
pub struct Decoder {
    inner: ::opus::Decoder,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("opus::Decoder").finish_non_exhaustive()
    }
}

impl Decoder {
    /// A fresh decoder at 16 kHz mono (libopus folds a stereo packet down).
    pub fn new() -> Result<Decoder> {
        Ok(Decoder {
            inner: ::opus::Decoder::new(WIDEBAND_RATE_HZ, Channels::Mono).map_err(opus_err)?,
        })
    }

    /// Decodes one packet into `out`. A packet that is not exactly 20 ms, or that libopus
    /// cannot parse, is an error and leaves the decoder as it was.
    pub fn decode(
        &mut self,
        payload: &[u8],
        out: &mut [i16; WIDEBAND_SAMPLES_PER_FRAME],
    ) -> Result<()> {
        check_packet(payload)?;
        let n = self.inner.decode(payload, out, false).map_err(opus_err)?;
        if n != WIDEBAND_SAMPLES_PER_FRAME {
            return Err(Error::Opus("packet decoded to other than 20 ms"));
        }
        Ok(())
    }

    /// Conceals one lost 20 ms packet into `out`: from the forward error correction carried
    /// in `next` (the packet after the lost one) when it is at hand and carries any, otherwise
    /// by libopus's packet-loss concealment. Returns whether FEC recovered it.
    pub fn conceal(
        &mut self,
        next: Option<&[u8]>,
        out: &mut [i16; WIDEBAND_SAMPLES_PER_FRAME],
    ) -> Result<bool> {
        if let Some(next) = next.filter(|p| check_packet(p).is_ok()) {
            // With `fec`, libopus decodes the LBRR copy of the previous frame that `next`
            // carries, or conceals when it carries none; either way 20 ms come out.
            if self.inner.decode(next, out, true).map_err(opus_err)? == out.len() {
                return Ok(has_fec(next));
            }
        }
        let n = self.inner.decode(&[], out, false).map_err(opus_err)?;
        if n != WIDEBAND_SAMPLES_PER_FRAME {
            return Err(Error::Opus("concealment came out other than 20 ms"));
        }
        Ok(false)
    }
}

/// Checks a received packet without decoding it: its TOC and frame lengths parse (RFC 6716
/// §3) and it carries exactly 20 ms. What the gateway counts and drops on arrival otherwise.
pub fn check_packet(payload: &[u8]) -> Result<()> {
    if payload.is_empty() {
        return Err(Error::Opus("empty packet"));
    }
    ::opus::packet::parse(payload).map_err(opus_err)?;
    let samples = ::opus::packet::get_nb_samples(payload, WIDEBAND_RATE_HZ).map_err(opus_err)?;
    if samples != WIDEBAND_SAMPLES_PER_FRAME {
        return Err(Error::Opus("packet is not 20 ms"));
    }
    Ok(())
}

/// Whether a packet's first frame is SILK or hybrid (the modes that carry LBRR), so that FEC
/// decoding of it can recover the frame before. RFC 6716 §3.1: configurations 0..=15 are
/// SILK-only and 12..=15 hybrid; CELT-only packets carry no FEC.
fn has_fec(packet: &[u8]) -> bool {
    packet.first().is_some_and(|toc| toc >> 3 < 16)
}

/// One 20 ms packet of silence, for the sender to fill gaps between utterances with: a valid
/// Opus packet of [`FRAME_BYTES`] bytes that any decoder decodes to digital silence whatever
/// state it is in (after the frame that carries the last audio's overlap). It is a CELT frame
/// (libopus's low-delay mode) with CELT's silence flag, padded: a SILK frame of zeros decodes
/// to a faint noise floor (about −63 dBFS) instead. Encoded once per process.
pub fn silence_frame() -> [u8; FRAME_BYTES] {
    static SILENCE: OnceLock<[u8; FRAME_BYTES]> = OnceLock::new();
    *SILENCE.get_or_init(|| {
        let mut out = [0u8; FRAME_BYTES];
        let encoded = ::opus::Encoder::new(WIDEBAND_RATE_HZ, Channels::Mono, Application::LowDelay)
            .and_then(|mut e| e.encode(&[0; WIDEBAND_SAMPLES_PER_FRAME], &mut out))
            .and_then(|n| ::opus::packet::pad(&mut out, n));
        // libopus with fixed, valid settings does not fail; if it ever did, a packet of the
        // right size whose TOC says "SILK WB 20 ms, one frame" and whose payload is zeros still
        // decodes (to near silence) rather than leaving the caller's decoder an invalid packet.
        if encoded.is_err() {
            out = [0; FRAME_BYTES];
            out[0] = 9 << 3;
        }
        out
    })
}

/// The version of the libopus linked in.
pub fn libopus_version() -> &'static str {
    ::opus::version()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(hz: f64, frames: usize) -> Vec<i16> {
        (0..frames * WIDEBAND_SAMPLES_PER_FRAME)
            .map(|i| {
                (8000.0 * (2.0 * std::f64::consts::PI * hz * i as f64 / 16_000.0).sin()) as i16
            })
            .collect()
    }

    fn rms(s: &[i16]) -> f64 {
        (s.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / s.len().max(1) as f64).sqrt()
    }

    #[test]
    fn every_packet_is_one_frame_of_bytes_and_decodes_back() {
        let pcm = tone(440.0, 25);
        let (mut enc, mut dec) = (Encoder::new().unwrap(), Decoder::new().unwrap());
        let mut decoded = Vec::new();
        for frame in pcm.chunks_exact(WIDEBAND_SAMPLES_PER_FRAME) {
            let mut packet = [0u8; FRAME_BYTES];
            enc.encode(frame.try_into().unwrap(), &mut packet).unwrap();
            let mut out = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
            dec.decode(&packet, &mut out).unwrap();
            decoded.extend_from_slice(&out);
        }
        // After the codec's warm-up the tone comes back at its level (within 3 dB).
        let level = rms(&decoded[WIDEBAND_SAMPLES_PER_FRAME * 5..]) / rms(&pcm);
        assert!((0.7..1.42).contains(&level), "level ratio {level}");
    }

    #[test]
    fn a_lost_packet_is_recovered_from_the_next_ones_fec() {
        let pcm = tone(300.0, 20);
        let mut enc = Encoder::new().unwrap();
        let packets: Vec<[u8; FRAME_BYTES]> = pcm
            .chunks_exact(WIDEBAND_SAMPLES_PER_FRAME)
            .map(|f| {
                let mut p = [0u8; FRAME_BYTES];
                enc.encode(f.try_into().unwrap(), &mut p).unwrap();
                p
            })
            .collect();
        let mut dec = Decoder::new().unwrap();
        let mut out = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        for p in &packets[..10] {
            dec.decode(p, &mut out).unwrap();
        }
        // Packet 10 is lost; packet 11 is at hand.
        assert!(dec.conceal(Some(&packets[11]), &mut out).unwrap());
        assert!(rms(&out) > 1000.0, "recovered frame is near silence");
        dec.decode(&packets[11], &mut out).unwrap();
        // Nothing at hand: libopus's concealment still gives 20 ms.
        assert!(!dec.conceal(None, &mut out).unwrap());
    }

    #[test]
    fn malformed_and_long_packets_are_errors() {
        let mut dec = Decoder::new().unwrap();
        let mut out = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        assert_eq!(dec.decode(&[], &mut out), Err(Error::Opus("empty packet")));
        // TOC: config 3 is SILK NB 60 ms.
        assert_eq!(
            dec.decode(&[3 << 3, 0, 0], &mut out),
            Err(Error::Opus("packet is not 20 ms"))
        );
        // Code 3 (arbitrary frame count) with a frame count of 0 is invalid (RFC 6716 §3.2.5).
        assert!(matches!(
            dec.decode(&[(9 << 3) | 3, 0], &mut out),
            Err(Error::Opus(_))
        ));
        // A code 2 packet whose first frame's length runs past the end.
        assert!(matches!(
            dec.decode(&[(9 << 3) | 2, 200, 1, 2], &mut out),
            Err(Error::Opus(_))
        ));
        assert!(check_packet(&[(9 << 3) | 2, 200, 1, 2]).is_err());
        assert_eq!(check_packet(&silence_frame()), Ok(()));
    }

    #[test]
    fn the_silence_frame_is_a_full_frame_that_decodes_to_silence() {
        let silence = silence_frame();
        let mut dec = Decoder::new().unwrap();
        let mut out = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        dec.decode(&silence, &mut out).unwrap();
        assert_eq!(rms(&out), 0.0);
        // After speech too, from the second frame on.
        let mut enc = Encoder::new().unwrap();
        let mut packet = [0u8; FRAME_BYTES];
        for frame in tone(300.0, 10).chunks_exact(WIDEBAND_SAMPLES_PER_FRAME) {
            enc.encode(frame.try_into().unwrap(), &mut packet).unwrap();
            dec.decode(&packet, &mut out).unwrap();
        }
        dec.decode(&silence, &mut out).unwrap();
        dec.decode(&silence, &mut out).unwrap();
        assert_eq!(rms(&out), 0.0);
        assert!(libopus_version().starts_with("libopus"));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder() {
        let mut dec = Decoder::new().unwrap();
        let mut out = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        let mut x: u32 = 1;
        for len in 0..400 {
            let bytes: Vec<u8> = (0..len % 97)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = dec.decode(&bytes, &mut out);
            let _ = dec.conceal(Some(&bytes), &mut out);
        }
    }
}
