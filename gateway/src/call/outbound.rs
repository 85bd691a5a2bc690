//! The agent's side of the outgoing audio: encoded (G.711, G.722 or Opus, one byte per 8 kHz
//! sample in every case; Opus in whole 160-byte packets) and queued in order with utterance
//! ends and marks,
//! handed to the real-time sender's ring a bounded horizon ahead, with the oldest audio dropped
//! beyond `max_buffered_seconds`. Streams come and go with hold, resume and codec changes; the
//! call's counts add up across all of them.

use std::collections::VecDeque;

use ontime_rtp::g711::Law;
use ontime_rtp::{Codec, FRAME_BYTES};
use ontime_sender::{StreamProducer, StreamStats};

use super::codec::LineEncoder;

/// Counts of a call's outgoing streams, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamTotals {
    /// Packets sent.
    pub packets_sent: u64,
    /// Slots served late.
    pub late_ticks: u64,
    /// Underruns mid-utterance.
    pub underruns: u64,
}

impl StreamTotals {
    fn add(&mut self, s: StreamStats) {
        self.packets_sent += s.packets_sent;
        self.late_ticks += s.late_ticks;
        self.underruns += s.underruns;
    }
}

/// Agent audio waiting for room in the sender's ring, in order with marks and utterance ends.
enum Queued {
    Audio(Vec<u8>, usize),
    EndOfUtterance,
    Mark(u64),
}

pub(crate) struct Outbound {
    producer: Option<StreamProducer>,
    queue: VecDeque<Queued>,
    encoder: LineEncoder,
    /// Each pending mark's id, name and position (see [`Outbound::end_position`]).
    mark_names: Vec<(u64, String, u64)>,
    next_mark: u64,
    /// Audio bytes handed to the sender's rings so far, over every stream of the call.
    ring_pushed: u64,
    /// `max_buffered_seconds` in G.711 bytes: more queued agent audio than this drops the oldest.
    max_buffered_bytes: usize,
    /// Counts of the streams this call already retired (hold, codec change).
    retired: StreamTotals,
    /// Audio waits here instead of entering the ring (the start of an utterance prebuffers).
    held: bool,
}

/// How far ahead agent audio is handed to the sender's ring. The rest waits in the call's
/// queue, where the oldest can still be dropped when a bot sends more than
/// `max_buffered_seconds`; two seconds absorb any tokio delay in refilling (every 20 ms).
const RING_HORIZON_BYTES: usize = 100 * FRAME_BYTES;

impl Outbound {
    pub(crate) fn new(codec: Codec, max_buffered_bytes: usize) -> Outbound {
        Outbound {
            producer: None,
            queue: VecDeque::new(),
            encoder: LineEncoder::new(codec),
            mark_names: Vec::new(),
            next_mark: 1,
            ring_pushed: 0,
            max_buffered_bytes,
            retired: StreamTotals::default(),
            held: false,
        }
    }

    /// Start sending through `producer` (a new stream: first, after hold, after a codec change).
    pub(crate) fn attach(&mut self, producer: StreamProducer) {
        self.retire();
        self.producer = Some(producer);
    }

    /// Stop the current stream (hold, codec change, end of call): its counts are kept, its
    /// queued audio dropped; dropping the producer removes it from the tick.
    pub(crate) fn retire(&mut self) {
        if let Some(p) = self.producer.take() {
            self.retired.add(p.stats());
        }
        self.queue.clear();
    }

    /// The current stream, if sending.
    pub(crate) fn producer(&self) -> Option<&StreamProducer> {
        self.producer.as_ref()
    }

    /// The current stream, mutably.
    pub(crate) fn producer_mut(&mut self) -> Option<&mut StreamProducer> {
        self.producer.as_mut()
    }

    /// Counts of every stream of the call, the current one included.
    pub(crate) fn totals(&self) -> StreamTotals {
        let mut t = self.retired;
        if let Some(p) = self.producer.as_ref() {
            t.add(p.stats());
        }
        t
    }

    /// Encode and queue agent PCM; returns the bytes dropped beyond `max_buffered_bytes`.
    /// Nothing enters the ring until [`Outbound::feed`]: the core feeds once per action.
    pub(crate) fn play(&mut self, samples: &[i16]) -> usize {
        if self.is_dry() {
            // The sender has been filling silence: encode from where that leaves the caller.
            self.encoder.restart();
        }
        let mut bytes = Vec::with_capacity(samples.len());
        self.encoder.encode(samples, &mut bytes);
        self.queue.push_back(Queued::Audio(bytes, 0));
        self.drop_oldest_beyond_max()
    }

    /// Encode and queue agent PCM at 16 kHz; returns the bytes dropped beyond
    /// `max_buffered_bytes`.
    pub(crate) fn play_wide(&mut self, samples: &[i16]) -> usize {
        if self.is_dry() {
            self.encoder.restart();
        }
        let mut bytes = Vec::with_capacity(samples.len() / 2 + 1);
        self.encoder.encode_wide(samples, &mut bytes);
        self.queue.push_back(Queued::Audio(bytes, 0));
        self.drop_oldest_beyond_max()
    }

    /// Queue agent audio that is already G.711 in `law`: taken as it is when the call sends
    /// the same law (a Twilio-protocol bot's µ-law on a PCMU call: no decode and re-encode),
    /// else transcoded through PCM. Returns the bytes dropped beyond `max_buffered_bytes`.
    pub(crate) fn play_g711(&mut self, law: Law, audio: &[u8]) -> usize {
        if Some(law) == self.encoder.law() {
            // A bot's 16 kHz audio before it leaves its tail first.
            let mut bytes = Vec::with_capacity(audio.len());
            self.encoder.flush(&mut bytes);
            bytes.extend_from_slice(audio);
            self.queue.push_back(Queued::Audio(bytes, 0));
            return self.drop_oldest_beyond_max();
        }
        let mut pcm = vec![0i16; audio.len()];
        law.decode_slice(audio, &mut pcm);
        self.play(&pcm)
    }

    /// The current utterance is complete (its last audio, held in a resampler, goes first).
    pub(crate) fn end_utterance(&mut self) {
        let mut tail = Vec::new();
        self.encoder.flush(&mut tail);
        if !tail.is_empty() {
            self.queue.push_back(Queued::Audio(tail, 0));
        }
        self.queue.push_back(Queued::EndOfUtterance);
    }

    /// Queue a mark; its name comes back from [`Outbound::take_mark`] when played or cleared.
    pub(crate) fn mark(&mut self, name: String) {
        let id = self.next_mark;
        self.next_mark += 1;
        self.mark_names.push((id, name, self.end_position()));
        self.queue.push_back(Queued::Mark(id));
    }

    /// The name of a mark the sender reported, and its position when it was queued.
    pub(crate) fn take_mark(&mut self, id: u64) -> Option<(String, u64)> {
        let i = self.mark_names.iter().position(|(m, _, _)| *m == id)?;
        let (_, name, at) = self.mark_names.swap_remove(i);
        Some((name, at))
    }

    /// The position, in bytes of agent audio since the call began, of the sender's playout:
    /// everything before it has been sent (or cleared: a barge-in's discarded audio counts as
    /// gone, and a retired stream's as well).
    pub(crate) fn sent_position(&self) -> u64 {
        let ring = self.producer.as_ref().map_or(0, |p| p.queued_bytes());
        self.ring_pushed.saturating_sub(ring as u64)
    }

    /// The position the next queued audio will have (see [`Outbound::sent_position`]).
    pub(crate) fn end_position(&self) -> u64 {
        self.ring_pushed + self.waiting_bytes() as u64
    }

    /// Audio bytes queued here, not yet in the ring.
    fn waiting_bytes(&self) -> usize {
        self.queue
            .iter()
            .map(|q| match q {
                Queued::Audio(bytes, offset) => bytes.len() - *offset,
                _ => 0,
            })
            .sum()
    }

    /// Change the codec of audio queued from now on.
    pub(crate) fn set_codec(&mut self, codec: Codec) {
        self.encoder = LineEncoder::new(codec);
    }

    pub(crate) fn queued(&self) -> bool {
        !self.queue.is_empty() || self.producer.as_ref().is_some_and(|p| p.queued_bytes() > 0)
    }

    /// Hold queued audio back from the ring (or let it go at the next [`Outbound::feed`]).
    pub(crate) fn hold(&mut self, held: bool) {
        self.held = held;
    }

    /// Whether audio is being held back.
    pub(crate) fn is_held(&self) -> bool {
        self.held
    }

    /// Nothing queued here or in the ring: the next audio starts afresh.
    pub(crate) fn is_dry(&self) -> bool {
        !self.queued()
    }

    /// Move queued items into the ring as far as it has room.
    pub(crate) fn feed(&mut self) {
        if self.held {
            return;
        }
        let Some(p) = self.producer.as_mut() else {
            return;
        };
        while let Some(front) = self.queue.front_mut() {
            match front {
                Queued::Audio(bytes, offset) => {
                    let horizon = RING_HORIZON_BYTES.min(self.max_buffered_bytes);
                    let mut room = horizon.saturating_sub(p.queued_bytes());
                    if self.encoder.is_framed() {
                        // Whole packets only: the tick sends what it takes as one packet.
                        room = room.min(p.vacant_bytes()) / FRAME_BYTES * FRAME_BYTES;
                    }
                    let end = bytes.len().min(*offset + room);
                    let pushed = p.push(&bytes[*offset..end]);
                    *offset += pushed;
                    self.ring_pushed += pushed as u64;
                    if *offset < bytes.len() {
                        return;
                    }
                }
                Queued::EndOfUtterance => p.end_utterance(),
                Queued::Mark(id) => {
                    if p.mark(*id).is_err() {
                        return; // mark ring full: retry next tick
                    }
                }
            }
            self.queue.pop_front();
        }
    }

    /// Agent audio queued here and in the sender's ring, in G.711 bytes (= samples).
    pub(crate) fn queued_bytes(&self) -> usize {
        let ring = self.producer.as_ref().map_or(0, |p| p.queued_bytes());
        ring + self.waiting_bytes()
    }

    /// Drop the oldest queued audio (not yet in the ring) beyond `max_buffered_bytes`; returns
    /// the bytes dropped. Marks and utterance ends stay in order.
    fn drop_oldest_beyond_max(&mut self) -> usize {
        let mut excess = self.queued_bytes().saturating_sub(self.max_buffered_bytes);
        let mut dropped = 0;
        for item in self.queue.iter_mut() {
            if excess == 0 {
                break;
            }
            if let Queued::Audio(bytes, offset) = item {
                let mut n = (bytes.len() - *offset).min(excess);
                if self.encoder.is_framed() {
                    // Whole packets only (chunks hold whole packets, so this stays inside).
                    n = n.div_ceil(FRAME_BYTES) * FRAME_BYTES;
                    n = n.min(bytes.len() - *offset);
                }
                *offset += n;
                excess = excess.saturating_sub(n);
                dropped += n;
            }
        }
        dropped
    }

    pub(crate) fn clear(&mut self) {
        self.held = false;
        self.queue.clear();
        if let Some(p) = self.producer.as_mut() {
            p.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn outbound(max_buffered_bytes: usize) -> Outbound {
        Outbound::new(Codec::Pcmu, max_buffered_bytes)
    }

    proptest! {
        /// `max_buffered_seconds`: after every chunk the queue holds at most the limit, the
        /// bytes dropped plus the bytes kept are the bytes pushed, the oldest go first, and
        /// marks keep their order.
        #[test]
        fn overflow_drops_the_oldest_and_accounts_for_every_byte(
            max in 1usize..20_000,
            chunks in proptest::collection::vec((1usize..8_000, any::<bool>()), 1..40),
        ) {
            let mut out = outbound(max);
            let mut pushed = 0usize;
            let mut dropped = 0usize;
            let mut next = 0u8;
            for (len, mark) in chunks {
                // Each chunk's bytes count up so the survivors show which were dropped.
                let bytes: Vec<u8> = (0..len).map(|_| { next = next.wrapping_add(1); next }).collect();
                out.queue.push_back(Queued::Audio(bytes, 0));
                pushed += len;
                dropped += out.drop_oldest_beyond_max();
                if mark {
                    out.queue.push_back(Queued::Mark(out.next_mark));
                    out.next_mark += 1;
                }
                prop_assert!(out.queued_bytes() <= max);
                prop_assert_eq!(out.queued_bytes() + dropped, pushed);
            }
            // What is left is the newest audio, in order.
            let kept: Vec<u8> = out.queue.iter().flat_map(|q| match q {
                Queued::Audio(b, o) => b[*o..].to_vec(),
                _ => Vec::new(),
            }).collect();
            let expected: Vec<u8> = (0..pushed)
                .map(|i| (i + 1) as u8)
                .skip(dropped)
                .collect();
            prop_assert_eq!(kept, expected);
            let marks: Vec<u64> = out.queue.iter().filter_map(|q| match q {
                Queued::Mark(id) => Some(*id),
                _ => None,
            }).collect();
            prop_assert!(marks.windows(2).all(|w| w[0] < w[1]));
        }
    }

    fn queued_audio(out: &Outbound) -> Vec<u8> {
        out.queue
            .iter()
            .flat_map(|q| match q {
                Queued::Audio(b, o) => b[*o..].to_vec(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// A bot's µ-law on a µ-law call is queued byte for byte: 0x7F (negative zero) would come
    /// back as 0xFF through PCM, so the bytes show which path they took.
    #[test]
    fn g711_of_the_calls_law_passes_through_and_other_laws_are_transcoded() {
        let bot = [0x7Fu8, 0x00, 0x80, 0x7F];
        let mut same = outbound(1000);
        assert_eq!(same.play_g711(Law::Ulaw, &bot), 0);
        assert_eq!(queued_audio(&same), bot);

        let mut alaw_call = Outbound::new(Codec::Pcma, 1000);
        alaw_call.play_g711(Law::Ulaw, &bot);
        let mut pcm = [0i16; 4];
        Law::Ulaw.decode_slice(&bot, &mut pcm);
        let mut expected = [0u8; 4];
        Law::Alaw.encode_slice(&pcm, &mut expected);
        assert_eq!(queued_audio(&alaw_call), expected);

        // PCM in takes the encoder, as before.
        let mut pcm_in = outbound(1000);
        pcm_in.play(&pcm);
        let mut ulaw = [0u8; 4];
        Law::Ulaw.encode_slice(&pcm, &mut ulaw);
        assert_eq!(queued_audio(&pcm_in), ulaw);
        assert_ne!(ulaw, bot, "the round trip through PCM changes 0x7F");
    }
}
