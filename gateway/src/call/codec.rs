//! The trunk codec at the edges of a call's audio. Inside, a call's line runs at 8 kHz in
//! 20 ms frames (the echo canceller, the VAD's feed, the recording and the bots all take it);
//! here that line becomes the negotiated codec's payload and back. G.711 is a table lookup;
//! G.722 carries 16 kHz, so its frames are decoded and halved on the way in, doubled and
//! encoded on the way out, with `ontime-rtp`'s half-band filters. Opus is handled at 16 kHz
//! the same way, in whole 20 ms packets of constant size (see `ontime_rtp::opus`).

use ontime_rtp::g711::Law;
use ontime_rtp::resample::{Downsampler, Upsampler};
use ontime_rtp::{g722, opus, Codec, FRAME_BYTES, SAMPLES_PER_FRAME, WIDEBAND_SAMPLES_PER_FRAME};

/// Line audio (8 kHz PCM) to the call's trunk payload, before the sender's ring.
#[derive(Debug)]
pub(crate) enum LineEncoder {
    G711 {
        law: Law,
        /// Halves a bot's 16 kHz audio.
        down: Box<Downsampler>,
        /// `down` holds the tail of 16 kHz audio (fed since it was last flushed).
        down_fed: bool,
    },
    G722 {
        encoder: Box<g722::Encoder>,
        up: Box<Upsampler>,
        /// `up` holds the tail of 8 kHz audio (fed since it was last flushed).
        up_fed: bool,
        /// The odd last sample of 16 kHz audio, waiting for its pair.
        odd: Option<i16>,
    },
    Opus {
        /// `None` when libopus could not start one (never seen): the call then sends the
        /// silence frame, and says so once in the log.
        encoder: Option<Box<opus::Encoder>>,
        up: Box<Upsampler>,
        up_fed: bool,
        /// 16 kHz audio waiting for a whole 20 ms packet.
        pending: Box<[i16; WIDEBAND_SAMPLES_PER_FRAME]>,
        filled: usize,
    },
}

impl LineEncoder {
    pub(crate) fn new(codec: Codec) -> LineEncoder {
        match codec {
            Codec::Pcmu | Codec::Pcma => LineEncoder::G711 {
                law: if codec == Codec::Pcmu {
                    Law::Ulaw
                } else {
                    Law::Alaw
                },
                down: Box::default(),
                down_fed: false,
            },
            Codec::G722 => LineEncoder::G722 {
                encoder: Box::new(g722::Encoder::after_silence()),
                up: Box::new(Upsampler::new()),
                up_fed: false,
                odd: None,
            },
            Codec::Opus => LineEncoder::Opus {
                encoder: match opus::Encoder::new() {
                    Ok(e) => Some(Box::new(e)),
                    Err(e) => {
                        tracing::error!(error = %e, "no Opus encoder: the call sends silence");
                        None
                    }
                },
                up: Box::new(Upsampler::new()),
                up_fed: false,
                pending: Box::new([0; WIDEBAND_SAMPLES_PER_FRAME]),
                filled: 0,
            },
        }
    }

    /// Whether every payload is whole 20 ms packets of [`FRAME_BYTES`] (Opus): the queue
    /// before the sender's ring must then cut and drop only at frame boundaries.
    pub(crate) fn is_framed(&self) -> bool {
        matches!(self, LineEncoder::Opus { .. })
    }

    /// The G.711 law whose bytes go out as they are (a bot's µ-law on a PCMU call).
    pub(crate) fn law(&self) -> Option<Law> {
        match self {
            LineEncoder::G711 { law, .. } => Some(*law),
            LineEncoder::G722 { .. } | LineEncoder::Opus { .. } => None,
        }
    }

    /// The sender has been filling silence (nothing was queued): the caller's decoder has
    /// decoded a run of the silence byte after our last bytes, so the encoder runs the same
    /// fill on its own state before the next utterance. G.722 is backward-adaptive ADPCM: an
    /// encoder that does not follow the caller's decoder garbles the first 100-300 ms of each
    /// reply. Exact when every byte encoded was sent; after a barge-in cleared queued bytes
    /// the two differ for a moment and converge.
    pub(crate) fn restart(&mut self) {
        match self {
            LineEncoder::G711 { down, down_fed, .. } => {
                down.reset();
                *down_fed = false;
            }
            LineEncoder::G722 {
                encoder,
                up,
                up_fed,
                odd,
            } => {
                encoder.settle_into_silence();
                up.reset();
                *up_fed = false;
                *odd = None;
            }
            // Opus packets decode on their own: the encoder keeps its state (no restart
            // transient), only what was half-way through is dropped.
            LineEncoder::Opus {
                up, up_fed, filled, ..
            } => {
                up.reset();
                *up_fed = false;
                *filled = 0;
            }
        }
    }

    /// Appends the payload bytes of `pcm` (8 kHz) to `out`: one byte per sample for every
    /// codec (64 kbit/s), so queue positions count the same whatever the codec.
    pub(crate) fn encode(&mut self, pcm: &[i16], out: &mut Vec<u8>) {
        // On G.711, 16 kHz audio before it leaves the downsampler's tail first.
        if matches!(self, LineEncoder::G711 { .. }) {
            self.flush(out);
        }
        match self {
            LineEncoder::G711 { law, .. } => {
                let start = out.len();
                out.resize(start + pcm.len(), 0);
                law.encode_slice(pcm, &mut out[start..]);
            }
            LineEncoder::G722 {
                encoder,
                up,
                up_fed,
                ..
            } => {
                *up_fed = true;
                let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                for chunk in pcm.chunks(SAMPLES_PER_FRAME) {
                    let n = up.process(chunk, &mut wide);
                    encode_wide(encoder, &wide[..n], out);
                }
            }
            LineEncoder::Opus {
                encoder,
                up,
                up_fed,
                pending,
                filled,
            } => {
                *up_fed = true;
                let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                for chunk in pcm.chunks(SAMPLES_PER_FRAME) {
                    let n = up.process(chunk, &mut wide);
                    encode_opus(encoder, pending, filled, &wide[..n], out);
                }
            }
        }
    }

    /// Appends the payload bytes of `pcm` at 16 kHz (a wideband bot's audio) to `out`: encoded
    /// as it is for G.722, halved for G.711.
    pub(crate) fn encode_wide(&mut self, pcm: &[i16], out: &mut Vec<u8>) {
        // On G.722 and Opus, 8 kHz audio before it leaves the upsampler's tail first.
        match self {
            LineEncoder::G722 { .. } => self.flush(out),
            LineEncoder::Opus { .. } => self.drain_upsampler(out),
            LineEncoder::G711 { .. } => {}
        }
        match self {
            LineEncoder::G711 {
                law,
                down,
                down_fed,
            } => {
                *down_fed = true;
                let mut narrow = [0i16; SAMPLES_PER_FRAME];
                for chunk in pcm.chunks(WIDEBAND_SAMPLES_PER_FRAME) {
                    let n = down.process(chunk, &mut narrow);
                    let start = out.len();
                    out.resize(start + n, 0);
                    law.encode_slice(&narrow[..n], &mut out[start..]);
                }
            }
            LineEncoder::G722 { encoder, odd, .. } => {
                let mut pcm = pcm;
                if let (Some(first), Some((&second, rest))) = (*odd, pcm.split_first()) {
                    encode_wide(encoder, &[first, second], out);
                    *odd = None;
                    pcm = rest;
                }
                let even = pcm.len() & !1;
                encode_wide(encoder, &pcm[..even], out);
                if even < pcm.len() {
                    *odd = Some(pcm[even]);
                }
            }
            LineEncoder::Opus {
                encoder,
                pending,
                filled,
                ..
            } => encode_opus(encoder, pending, filled, pcm, out),
        }
    }

    /// Opus: moves what the upsampler holds of 8 kHz audio into the pending packet, without
    /// ending the packet (the audio goes on at 16 kHz).
    fn drain_upsampler(&mut self, out: &mut Vec<u8>) {
        if let LineEncoder::Opus {
            encoder,
            up,
            up_fed,
            pending,
            filled,
        } = self
        {
            if *up_fed {
                *up_fed = false;
                let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                let n = up.flush(&mut wide);
                encode_opus(encoder, pending, filled, &wide[..n], out);
            }
        }
    }

    /// The end of an utterance, or of audio at the rate that needs the resampler before audio
    /// that does not: appends what the resampler still holds (4 ms), so the audio's tail is not
    /// lost and goes before what follows. Nothing when the resampler holds nothing.
    pub(crate) fn flush(&mut self, out: &mut Vec<u8>) {
        match self {
            LineEncoder::G711 {
                law,
                down,
                down_fed,
            } if *down_fed => {
                *down_fed = false;
                let mut narrow = [0i16; SAMPLES_PER_FRAME];
                let n = down.flush(&mut narrow);
                let start = out.len();
                out.resize(start + n, 0);
                law.encode_slice(&narrow[..n], &mut out[start..]);
            }
            LineEncoder::G722 {
                encoder,
                up,
                up_fed,
                ..
            } if *up_fed => {
                *up_fed = false;
                let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                let n = up.flush(&mut wide);
                encode_wide(encoder, &wide[..n], out);
            }
            LineEncoder::Opus { .. } => {
                self.drain_upsampler(out);
                // The utterance's last packet, padded with silence to its 20 ms.
                if let LineEncoder::Opus {
                    encoder,
                    pending,
                    filled,
                    ..
                } = self
                {
                    if *filled > 0 {
                        let rest = WIDEBAND_SAMPLES_PER_FRAME - *filled;
                        let zeros = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                        encode_opus(encoder, pending, filled, &zeros[..rest], out);
                    }
                }
            }
            _ => {}
        }
    }
}

fn encode_wide(encoder: &mut g722::Encoder, wide: &[i16], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + wide.len() / 2, 0);
    let n = encoder.encode(wide, &mut out[start..]);
    out.truncate(start + n);
}

/// Appends 16 kHz `pcm` to the pending Opus packet, and every packet it completes to `out`.
fn encode_opus(
    encoder: &mut Option<Box<opus::Encoder>>,
    pending: &mut [i16; WIDEBAND_SAMPLES_PER_FRAME],
    filled: &mut usize,
    mut pcm: &[i16],
    out: &mut Vec<u8>,
) {
    while !pcm.is_empty() {
        let n = pcm.len().min(WIDEBAND_SAMPLES_PER_FRAME - *filled);
        pending[*filled..*filled + n].copy_from_slice(&pcm[..n]);
        *filled += n;
        pcm = &pcm[n..];
        if *filled == WIDEBAND_SAMPLES_PER_FRAME {
            *filled = 0;
            let mut packet = opus::silence_frame();
            if let Some(e) = encoder.as_mut() {
                if let Err(err) = e.encode(pending, &mut packet) {
                    // A packet libopus refused goes out as silence: the frame count, and so
                    // every position in the queue, stays right.
                    tracing::warn!(error = %err, "Opus encoding failed: 20 ms of silence sent");
                    packet = opus::silence_frame();
                }
            }
            out.extend_from_slice(&packet);
        }
    }
}

/// The caller's trunk payload to line audio (8 kHz PCM), one 20 ms frame at a time.
#[derive(Debug)]
pub(crate) enum LineDecoder {
    G711(Law),
    G722 {
        decoder: Box<g722::Decoder>,
        down: Box<Downsampler>,
    },
    Opus {
        /// `None` when libopus could not start one (never seen): the call hears silence.
        decoder: Option<Box<opus::Decoder>>,
        down: Box<Downsampler>,
    },
}

impl LineDecoder {
    pub(crate) fn new(codec: Codec) -> LineDecoder {
        match codec {
            Codec::Pcmu => LineDecoder::G711(Law::Ulaw),
            Codec::Pcma => LineDecoder::G711(Law::Alaw),
            Codec::G722 => LineDecoder::G722 {
                decoder: Box::default(),
                down: Box::default(),
            },
            Codec::Opus => LineDecoder::Opus {
                decoder: match opus::Decoder::new() {
                    Ok(d) => Some(Box::new(d)),
                    Err(e) => {
                        tracing::error!(error = %e, "no Opus decoder: the caller is not heard");
                        None
                    }
                },
                down: Box::default(),
            },
        }
    }

    /// Whether `payload` is the sender's silence fill for this codec (every byte its silence
    /// byte).
    pub(crate) fn is_fill(&self, payload: &[u8]) -> bool {
        let silence = match self {
            LineDecoder::G711(law) => law.silence(),
            LineDecoder::G722 { .. } => g722::SILENCE_BYTE,
            LineDecoder::Opus { .. } => return payload == opus::silence_frame(),
        };
        payload.iter().all(|b| *b == silence)
    }

    /// Whether its silence fill decodes to silence from any state, so that a decoder of what
    /// was sent may skip it (Opus; G.722's ADPCM must decode every byte to stay in step).
    pub(crate) fn fill_is_silence(&self) -> bool {
        matches!(self, LineDecoder::Opus { .. })
    }

    /// Whether it decodes 16 kHz audio.
    pub(crate) fn is_wideband(&self) -> bool {
        !matches!(self, LineDecoder::G711(_))
    }

    /// Whether what it decodes depends on every earlier payload (G.722's ADPCM), so a payload
    /// skipped puts it out of step with the caller's encoder.
    pub(crate) fn is_stateful(&self) -> bool {
        matches!(self, LineDecoder::G722 { .. })
    }

    /// Decodes one frame's payload into `out`; a short payload leaves the rest silent, bytes
    /// beyond one frame are ignored. On a wideband codec the 16 kHz frame is left in `wide`,
    /// and the answer is `true`.
    pub(crate) fn decode(
        &mut self,
        payload: &[u8],
        out: &mut [i16; SAMPLES_PER_FRAME],
        wide: &mut [i16; WIDEBAND_SAMPLES_PER_FRAME],
    ) -> bool {
        out.fill(0);
        // One frame of the byte-per-sample codecs (an Opus packet is whole at any length).
        let frame = &payload[..payload.len().min(FRAME_BYTES)];
        match self {
            LineDecoder::G711(law) => {
                law.decode_slice(frame, out);
                false
            }
            LineDecoder::G722 { decoder, down } => {
                wide.fill(0);
                let n = decoder.decode(frame, wide);
                down.process(&wide[..n], out);
                true
            }
            LineDecoder::Opus { decoder, down } => {
                // Packets were checked on arrival; one libopus still refuses is concealed.
                let decoded = decoder
                    .as_mut()
                    .is_some_and(|d| d.decode(payload, wide).is_ok());
                if !decoded {
                    wide.fill(0);
                    if let Some(d) = decoder.as_mut() {
                        let _ = d.conceal(None, wide);
                    }
                }
                down.process(&wide[..], out);
                true
            }
        }
    }

    /// Conceals a lost frame where the codec can (Opus: from the next packet's in-band FEC
    /// when `next` is at hand, else libopus's concealment), into `out` and `wide` like
    /// [`LineDecoder::decode`]. `None` for codecs without their own concealment: the caller
    /// conceals. `Some(true)` when FEC rebuilt the frame.
    pub(crate) fn conceal(
        &mut self,
        next: Option<&[u8]>,
        out: &mut [i16; SAMPLES_PER_FRAME],
        wide: &mut [i16; WIDEBAND_SAMPLES_PER_FRAME],
    ) -> Option<bool> {
        let LineDecoder::Opus { decoder, down } = self else {
            return None;
        };
        wide.fill(0);
        let recovered = decoder
            .as_mut()
            .and_then(|d| d.conceal(next, wide).ok())
            .unwrap_or(false);
        down.process(&wide[..], out);
        Some(recovered)
    }
}

/// A wideband call's 16 kHz audio for Smart Turn (a 16 kHz model), frame by frame. The echo
/// canceller works on the 8 kHz line: where it changed a frame (silenced the echo, or took its
/// estimate out), the frame goes to the model as it left the canceller, upsampled; elsewhere
/// as the codec decoded it. The decoded audio is held back by the upsampler's 4 ms so the two
/// line up, and a frame without 16 kHz audio (concealment, a change to G.711) is upsampled too.
#[derive(Debug, Clone)]
pub(crate) struct WideForModels {
    up: Upsampler,
    /// The decoded audio's last 4 ms, due in the next frame.
    held: [i16; Upsampler::DELAY_16K],
}

impl WideForModels {
    pub(crate) fn new() -> WideForModels {
        WideForModels {
            up: Upsampler::new(),
            held: [0; Upsampler::DELAY_16K],
        }
    }

    /// The 16 kHz frame for the models: `decoded` the codec's 16 kHz audio (if any), `line` the
    /// 8 kHz frame as decoded, `heard` as the echo canceller left it.
    pub(crate) fn frame(
        &mut self,
        decoded: Option<&[i16; WIDEBAND_SAMPLES_PER_FRAME]>,
        line: &[i16; SAMPLES_PER_FRAME],
        heard: &[i16; SAMPLES_PER_FRAME],
    ) -> [i16; WIDEBAND_SAMPLES_PER_FRAME] {
        const HELD: usize = Upsampler::DELAY_16K;
        let mut upsampled = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        self.up.process(heard, &mut upsampled);
        let Some(decoded) = decoded else {
            // What the next decoded frame continues from is lost: the nearest there is.
            self.held
                .copy_from_slice(&upsampled[WIDEBAND_SAMPLES_PER_FRAME - HELD..]);
            return upsampled;
        };
        let mut native = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        native[..HELD].copy_from_slice(&self.held);
        native[HELD..].copy_from_slice(&decoded[..WIDEBAND_SAMPLES_PER_FRAME - HELD]);
        self.held
            .copy_from_slice(&decoded[WIDEBAND_SAMPLES_PER_FRAME - HELD..]);
        if heard == line {
            native
        } else {
            upsampled
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::tests::best_correlation;

    fn tone(hz: f32, samples: usize) -> Vec<i16> {
        (0..samples)
            .map(|n| (8000.0 * (2.0 * std::f32::consts::PI * hz * n as f32 / 8000.0).sin()) as i16)
            .collect()
    }

    /// 8 kHz line audio through G.722 and back, frame by frame as the call does it.
    #[test]
    fn g722_line_audio_comes_back_as_it_went() {
        let speechlike: Vec<i16> = tone(440.0, 8000)
            .iter()
            .zip(tone(1230.0, 8000))
            .map(|(a, b)| a / 2 + b / 3)
            .collect();
        let mut enc = LineEncoder::new(Codec::G722);
        let mut dec = LineDecoder::new(Codec::G722);
        let mut payload = Vec::new();
        enc.encode(&speechlike, &mut payload);
        enc.flush(&mut payload);
        assert_eq!(payload.len(), speechlike.len() + Upsampler::DELAY_16K / 2);
        let mut back = Vec::new();
        for frame in payload.chunks(FRAME_BYTES) {
            let mut pcm = [0i16; SAMPLES_PER_FRAME];
            let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
            assert!(dec.decode(frame, &mut pcm, &mut wide));
            back.extend_from_slice(&pcm[..frame.len().min(SAMPLES_PER_FRAME)]);
        }
        let (corr, lag) = best_correlation(&speechlike[800..7000], &back[800..], 100);
        assert!(corr > 0.99, "correlation {corr} at lag {lag}");
    }

    /// A bot's 16 kHz audio: encoded as it is on G.722 (odd chunk lengths carried over), halved
    /// on G.711; one byte per 8 kHz sample either way.
    #[test]
    fn wideband_bot_audio_is_encoded_at_its_rate() {
        let wide: Vec<i16> = (0..16000)
            .map(|n| {
                (6000.0 * (2.0 * std::f32::consts::PI * 700.0 * n as f32 / 16000.0).sin()) as i16
            })
            .collect();
        let mut g722 = LineEncoder::new(Codec::G722);
        let mut payload = Vec::new();
        for chunk in wide.chunks(333) {
            g722.encode_wide(chunk, &mut payload);
        }
        assert_eq!(payload.len(), 8000);
        let mut dec = LineDecoder::new(Codec::G722);
        let mut back = Vec::new();
        for frame in payload.chunks(FRAME_BYTES) {
            let (mut pcm, mut w) = (
                [0i16; SAMPLES_PER_FRAME],
                [0i16; WIDEBAND_SAMPLES_PER_FRAME],
            );
            dec.decode(frame, &mut pcm, &mut w);
            back.extend_from_slice(&w);
        }
        let (corr, lag) = best_correlation(&wide[1600..14000], &back[1600..], 100);
        assert!(corr > 0.99, "G.722: {corr} at {lag}");
        let mut pcmu = LineEncoder::new(Codec::Pcmu);
        let mut bytes = Vec::new();
        for chunk in wide.chunks(320) {
            pcmu.encode_wide(chunk, &mut bytes);
        }
        assert_eq!(bytes.len(), 8000);
        let mut narrow = vec![0i16; 8000];
        Law::Ulaw.decode_slice(&bytes, &mut narrow);
        let half: Vec<i16> = wide.iter().step_by(2).copied().collect();
        let (corr, lag) = best_correlation(&half[800..7000], &narrow[800..], 100);
        assert!(corr > 0.99, "PCMU: {corr} at {lag}");
    }

    /// A bot mixing 8 kHz and 16 kHz audio in one reply: what a resampler holds of the first
    /// goes out before the second, on G.722 (the 8 kHz audio's last 4 ms) and on G.711 (the
    /// 16 kHz audio's).
    #[test]
    fn audio_at_two_rates_goes_out_in_order() {
        let mut g722 = LineEncoder::new(Codec::G722);
        let mut payload = Vec::new();
        g722.encode(&tone(1000.0, 1600), &mut payload);
        g722.encode_wide(&[0; 3200], &mut payload);
        g722.flush(&mut payload);
        // More of the reply after the flush, for whatever a flush emits to be heard.
        g722.encode_wide(&[0; 1600], &mut payload);
        let tail = Upsampler::DELAY_16K / 2;
        assert_eq!(payload.len(), 1600 + tail + 1600 + 800);
        let mut dec = LineDecoder::new(Codec::G722);
        let mut back = Vec::new();
        for frame in payload.chunks(FRAME_BYTES) {
            let mut pcm = [0i16; SAMPLES_PER_FRAME];
            let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
            dec.decode(frame, &mut pcm, &mut wide);
            back.extend_from_slice(&pcm[..frame.len().min(SAMPLES_PER_FRAME)]);
        }
        let peak = |x: &[i16]| x.iter().map(|s| s.unsigned_abs()).max().unwrap_or(0);
        // The silence after the tone (and the codec's delays) stays silent to the end: the
        // tone's last 4 ms used to go out at the flush, 200 ms after the tone.
        assert!(peak(&back[1500..1600]) > 2000, "the tone");
        assert!(peak(&back[2400..]) < 100, "silence after it");

        let mut pcmu = LineEncoder::new(Codec::Pcmu);
        let wide: Vec<i16> = (0..3200)
            .map(|n| {
                (8000.0 * (2.0 * std::f32::consts::PI * 1000.0 * n as f32 / 16000.0).sin()) as i16
            })
            .collect();
        let mut bytes = Vec::new();
        pcmu.encode_wide(&wide, &mut bytes);
        pcmu.encode(&[0; 1600], &mut bytes);
        pcmu.flush(&mut bytes);
        let tail = Downsampler::DELAY_8K;
        assert_eq!(
            bytes.len(),
            1600 + tail + 1600,
            "the 16 kHz tail is not lost"
        );
        let mut narrow = vec![0i16; bytes.len()];
        Law::Ulaw.decode_slice(&bytes, &mut narrow);
        assert!(peak(&narrow[1600..1600 + tail]) > 2000, "tail in place");
        assert_eq!(peak(&narrow[1600 + tail..]), 0, "then the 8 kHz silence");
    }

    /// The sender's fill is told from audio: on G.722 it decodes to what the last reply left
    /// in the ADPCM state, a DC offset (here 26; up to 52 after speech-like replies, over the
    /// echo canceller's reply floor at about 33), which is no reply to echo.
    #[test]
    fn the_senders_silence_fill_is_told_from_audio() {
        let mut enc = LineEncoder::new(Codec::G722);
        let mut dec = LineDecoder::new(Codec::G722);
        let reply: Vec<i16> = (0..8000)
            .map(|n| {
                (12000.0 * (2.0 * std::f32::consts::PI * 300.0 * n as f32 / 8000.0).sin()) as i16
            })
            .collect();
        let mut bytes = Vec::new();
        enc.encode(&reply, &mut bytes);
        let (mut pcm, mut wide) = (
            [0i16; SAMPLES_PER_FRAME],
            [0i16; WIDEBAND_SAMPLES_PER_FRAME],
        );
        for frame in bytes.chunks(FRAME_BYTES) {
            assert!(!dec.is_fill(frame));
            dec.decode(frame, &mut pcm, &mut wide);
        }
        let fill = [g722::SILENCE_BYTE; FRAME_BYTES];
        assert!(dec.is_fill(&fill));
        for _ in 0..50 {
            dec.decode(&fill, &mut pcm, &mut wide);
        }
        let peak = pcm.iter().map(|s| s.unsigned_abs()).max().unwrap();
        assert_eq!(peak, 26, "the fill decodes to a DC offset");
        let pcmu = LineDecoder::new(Codec::Pcmu);
        assert!(pcmu.is_fill(&[0xFF; FRAME_BYTES]) && !pcmu.is_fill(&[0xFE; FRAME_BYTES]));
    }

    #[test]
    fn g711_encodes_byte_for_sample() {
        let pcm = tone(1000.0, 320);
        let mut enc = LineEncoder::new(Codec::Pcma);
        let mut out = Vec::new();
        enc.encode(&pcm, &mut out);
        enc.flush(&mut out);
        let mut want = vec![0u8; 320];
        Law::Alaw.encode_slice(&pcm, &mut want);
        assert_eq!(out, want);
        assert_eq!(enc.law(), Some(Law::Alaw));
        assert_eq!(LineEncoder::new(Codec::G722).law(), None);
    }

    #[test]
    fn models_get_the_decoded_16k_audio_unless_the_canceller_changed_the_frame() {
        const HELD: usize = Upsampler::DELAY_16K;
        let ramp = |from: i16| std::array::from_fn(|i| from + i as i16);
        let (first, second): ([i16; WIDEBAND_SAMPLES_PER_FRAME], _) = (ramp(0), ramp(1000));
        let line = [100i16; SAMPLES_PER_FRAME];
        let mut wide = WideForModels::new();
        // Untouched: the decoded audio, 4 ms late (silence before the first frame).
        let out = wide.frame(Some(&first), &line, &line);
        assert_eq!(out[..HELD], [0; HELD]);
        assert_eq!(out[HELD..], first[..WIDEBAND_SAMPLES_PER_FRAME - HELD]);
        let out = wide.frame(Some(&second), &line, &line);
        assert_eq!(out[..HELD], first[WIDEBAND_SAMPLES_PER_FRAME - HELD..]);
        assert_eq!(out[HELD..], second[..WIDEBAND_SAMPLES_PER_FRAME - HELD]);
        // Silenced as echo: what the canceller left (silence), upsampled on the same stream.
        let mut twin = Upsampler::new();
        let mut want = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
        for heard in [&line, &line, &[0i16; SAMPLES_PER_FRAME]] {
            twin.process(heard, &mut want);
        }
        let silenced = wide.frame(Some(&first), &line, &[0; SAMPLES_PER_FRAME]);
        assert_eq!(silenced, want);
        // No 16 kHz audio (concealment): upsampled too.
        twin.process(&line, &mut want);
        assert_eq!(wide.frame(None, &line, &line), want);
    }
}
