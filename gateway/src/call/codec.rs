//! The trunk codec at the edges of a call's audio. Inside, a call's line runs at 8 kHz in
//! 20 ms frames (the echo canceller, the VAD's feed, the recording and the bots all take it);
//! here that line becomes the negotiated codec's payload and back. G.711 is a table lookup;
//! G.722 carries 16 kHz, so its frames are decoded and halved on the way in, doubled and
//! encoded on the way out, with `ontime-rtp`'s half-band filters.

use ontime_rtp::g711::Law;
use ontime_rtp::resample::{Downsampler, Upsampler};
use ontime_rtp::{g722, Codec, FRAME_BYTES, SAMPLES_PER_FRAME, WIDEBAND_SAMPLES_PER_FRAME};

/// Line audio (8 kHz PCM) to the call's trunk payload, before the sender's ring.
#[derive(Debug, Clone)]
pub(crate) enum LineEncoder {
    G711(Law),
    G722 {
        encoder: Box<g722::Encoder>,
        up: Box<Upsampler>,
    },
}

impl LineEncoder {
    pub(crate) fn new(codec: Codec) -> LineEncoder {
        match codec {
            Codec::Pcmu => LineEncoder::G711(Law::Ulaw),
            Codec::Pcma => LineEncoder::G711(Law::Alaw),
            Codec::G722 => LineEncoder::G722 {
                encoder: Box::new(g722::Encoder::after_silence()),
                up: Box::new(Upsampler::new()),
            },
        }
    }

    /// The G.711 law whose bytes go out as they are (a bot's µ-law on a PCMU call).
    pub(crate) fn law(&self) -> Option<Law> {
        match self {
            LineEncoder::G711(law) => Some(*law),
            LineEncoder::G722 { .. } => None,
        }
    }

    /// The sender has been filling silence (nothing was queued): the caller's decoder has
    /// decoded a run of the silence byte after our last bytes, so the encoder runs the same
    /// fill on its own state before the next utterance. G.722 is backward-adaptive ADPCM: an
    /// encoder that does not follow the caller's decoder garbles the first 100-300 ms of each
    /// reply. Exact when every byte encoded was sent; after a barge-in cleared queued bytes
    /// the two differ for a moment and converge.
    pub(crate) fn restart(&mut self) {
        if let LineEncoder::G722 { encoder, up } = self {
            encoder.settle_into_silence();
            up.reset();
        }
    }

    /// Appends the payload bytes of `pcm` (8 kHz) to `out`: one byte per sample for every
    /// codec (64 kbit/s), so queue positions count the same whatever the codec.
    pub(crate) fn encode(&mut self, pcm: &[i16], out: &mut Vec<u8>) {
        match self {
            LineEncoder::G711(law) => {
                let start = out.len();
                out.resize(start + pcm.len(), 0);
                law.encode_slice(pcm, &mut out[start..]);
            }
            LineEncoder::G722 { encoder, up } => {
                let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                for chunk in pcm.chunks(SAMPLES_PER_FRAME) {
                    let n = up.process(chunk, &mut wide);
                    encode_wide(encoder, &wide[..n], out);
                }
            }
        }
    }

    /// The end of an utterance: appends what the resampler still holds (4 ms of G.722), so
    /// the utterance's tail is not lost.
    pub(crate) fn flush(&mut self, out: &mut Vec<u8>) {
        if let LineEncoder::G722 { encoder, up } = self {
            let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
            let n = up.flush(&mut wide);
            encode_wide(encoder, &wide[..n], out);
        }
    }
}

fn encode_wide(encoder: &mut g722::Encoder, wide: &[i16], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + wide.len() / 2, 0);
    let n = encoder.encode(wide, &mut out[start..]);
    out.truncate(start + n);
}

/// The caller's trunk payload to line audio (8 kHz PCM), one 20 ms frame at a time.
#[derive(Debug, Clone)]
pub(crate) enum LineDecoder {
    G711(Law),
    G722 {
        decoder: Box<g722::Decoder>,
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
        }
    }

    /// Decodes one frame's payload into `out`; a short payload leaves the rest silent, bytes
    /// beyond one frame are ignored.
    pub(crate) fn decode(&mut self, payload: &[u8], out: &mut [i16; SAMPLES_PER_FRAME]) {
        out.fill(0);
        let payload = &payload[..payload.len().min(FRAME_BYTES)];
        match self {
            LineDecoder::G711(law) => {
                law.decode_slice(payload, out);
            }
            LineDecoder::G722 { decoder, down } => {
                let mut wide = [0i16; WIDEBAND_SAMPLES_PER_FRAME];
                let n = decoder.decode(payload, &mut wide);
                down.process(&wide[..n], out);
            }
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
            dec.decode(frame, &mut pcm);
            back.extend_from_slice(&pcm[..frame.len().min(SAMPLES_PER_FRAME)]);
        }
        let (corr, lag) = best_correlation(&speechlike[800..7000], &back[800..], 100);
        assert!(corr > 0.99, "correlation {corr} at lag {lag}");
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
}
