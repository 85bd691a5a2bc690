//! DTMF digits sent as RFC 4733 telephone-events on a stream's own RTP clock.
//!
//! [`DtmfSequence`] is parsed off the tick (Twilio's `<Play digits>` syntax) into a fixed-size
//! array, so the command that carries it to the tick owns no heap memory and dropping it there
//! frees nothing. [`DtmfPlayer`] lives in the stream's tick-side state and says, slot by slot,
//! whether the stream sends a telephone-event packet, G.711 silence, or its queued audio.
//!
//! The payload bytes are written by `ontime_rtp::TelephoneEvent` and the header by the stream's
//! `Packetizer::write_event`: this module only decides what each 20 ms slot carries.

use std::time::Duration;

use ontime_rtp::dtmf::digit_event;
use ontime_rtp::{TelephoneEvent, FRAME};

use crate::{Error, Result};

/// Most symbols (digits and `w` pauses) in one [`crate::Sender::send_dtmf`] call, and in what a
/// stream holds queued at once. Fixed so the command and the stream's queue are inline arrays.
pub const MAX_DTMF_SYMBOLS: usize = 64;

/// How long each digit's tone lasts. ITU-T Q.24's minimum tone and pause durations are lower
/// (around 40 ms), but the far end may regenerate audio tones from these events after its own
/// jitter buffer, and the IVR behind it may be older or stricter than Q.24; 100 ms tone plus
/// 100 ms gap leaves margin on both and still plays 5 digits a second.
pub const DTMF_TONE: Duration = Duration::from_millis(100);

/// Silence after each digit's tone (see [`DTMF_TONE`]). Also long enough for the end packet's
/// two retransmissions (one per 20 ms), so one digit's packets never interleave with the next's.
pub const DTMF_GAP: Duration = Duration::from_millis(100);

/// How long a `w` in the digits pauses (Twilio's `<Play digits>` meaning).
pub const DTMF_PAUSE: Duration = Duration::from_millis(500);

/// Telephone-event volume field, in −dBm0 (RFC 4733 §2.3.4): −10 dBm0, an ordinary DTMF send
/// level, for a far end that regenerates the tone from the event.
const VOLUME: u8 = 10;

/// Slots (20 ms each) of a span.
const fn frames(span: Duration) -> u16 {
    (span.as_millis() / FRAME.as_millis()) as u16
}

const TONE_FRAMES: u16 = frames(DTMF_TONE);
const GAP_FRAMES: u16 = frames(DTMF_GAP);
const PAUSE_FRAMES: u16 = frames(DTMF_PAUSE);
/// RFC 4733 §2.5.1.4: the final packet of an event is sent a total of three times, at the
/// interval used for updates (here one per slot), so one lost copy does not lose the digit's end.
const END_PACKETS: u16 = 3;
// The retransmissions are sent during the gap; a shorter gap would overlap the next digit.
const _: () = assert!(END_PACKETS - 1 <= GAP_FRAMES && TONE_FRAMES > 0);

/// One symbol of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Symbol {
    /// A digit's tone: its RFC 4733 event code and the telephone-event payload type.
    Tone { event: u8, payload_type: u8 },
    /// A `w`: silence.
    Pause,
}

impl Symbol {
    const fn frames(self) -> u16 {
        match self {
            Symbol::Tone { .. } => TONE_FRAMES + GAP_FRAMES,
            Symbol::Pause => PAUSE_FRAMES,
        }
    }
}

/// A parsed, validated digit sequence, inline (no heap): what [`crate::Sender::send_dtmf`] sends
/// to the tick.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DtmfSequence {
    symbols: [Symbol; MAX_DTMF_SYMBOLS],
    len: usize,
}

impl DtmfSequence {
    /// Parses Twilio's `<Play digits>` syntax: `0`–`9`, `*`, `#`, `A`–`D` (either case) and `w`
    /// (a 0.5 s pause). `payload_type` is the telephone-event payload type negotiated for the
    /// call, which is dynamic (RFC 4733 registers no static one; RFC 3551's dynamic range is
    /// 96–127).
    pub(crate) fn parse(payload_type: u8, digits: &str) -> Result<Self> {
        if !(96..=127).contains(&payload_type) {
            return Err(Error::DtmfPayloadType(payload_type));
        }
        let len = digits.chars().count();
        if len == 0 || len > MAX_DTMF_SYMBOLS {
            return Err(Error::DtmfLength {
                len,
                max: MAX_DTMF_SYMBOLS,
            });
        }
        let mut symbols = [Symbol::Pause; MAX_DTMF_SYMBOLS];
        for ((position, digit), slot) in digits.chars().enumerate().zip(symbols.iter_mut()) {
            *slot = match digit {
                'w' | 'W' => Symbol::Pause,
                _ => match digit_event(digit) {
                    Some(event) => Symbol::Tone {
                        event,
                        payload_type,
                    },
                    None => return Err(Error::InvalidDtmfDigit { digit, position }),
                },
            };
        }
        Ok(Self { symbols, len })
    }

    /// How long the sequence takes to play, gaps and pauses included.
    pub(crate) fn duration(&self) -> Duration {
        let frames: u32 = self.symbols[..self.len]
            .iter()
            .map(|s| u32::from(s.frames()))
            .sum();
        FRAME * frames
    }
}

/// What one slot of a stream carries while DTMF is playing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DtmfSlot {
    /// No DTMF: the stream sends its audio as usual.
    Audio,
    /// A digit's gap or a pause: G.711 silence; the queued audio waits.
    Silence,
    /// A telephone-event packet instead of audio.
    Event(EventPacket),
}

/// One telephone-event packet to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventPacket {
    pub(crate) payload_type: u8,
    pub(crate) marker: bool,
    /// The event's start, the same for all its packets.
    pub(crate) timestamp: u32,
    pub(crate) payload: TelephoneEvent,
    /// This is the digit's last end packet: the digit has been sent.
    pub(crate) completes_digit: bool,
}

/// A stream's DTMF queue and where it is, on the tick. Inline arrays only.
#[derive(Debug, Clone)]
pub(crate) struct DtmfPlayer {
    queue: [Symbol; MAX_DTMF_SYMBOLS],
    len: usize,
    /// Index of the symbol playing.
    pos: usize,
    /// Slots of that symbol already served.
    frame: u16,
    /// RTP timestamp of the playing tone's first packet.
    start_timestamp: u32,
}

impl Default for DtmfPlayer {
    fn default() -> Self {
        Self {
            queue: [Symbol::Pause; MAX_DTMF_SYMBOLS],
            len: 0,
            pos: 0,
            frame: 0,
            start_timestamp: 0,
        }
    }
}

impl DtmfPlayer {
    /// Queue a sequence after whatever is still playing. Returns false (nothing queued) when
    /// both do not fit in [`MAX_DTMF_SYMBOLS`]: a sequence is never cut, so no digit is half-sent.
    pub(crate) fn enqueue(&mut self, sequence: &DtmfSequence) -> bool {
        // Forget what has been played so the room is at the end.
        self.queue.copy_within(self.pos..self.len, 0);
        self.len -= self.pos;
        self.pos = 0;
        let room = MAX_DTMF_SYMBOLS - self.len;
        if sequence.len > room {
            return false;
        }
        self.queue[self.len..self.len + sequence.len]
            .copy_from_slice(&sequence.symbols[..sequence.len]);
        self.len += sequence.len;
        true
    }

    /// What this slot carries, given the RTP timestamp the stream's next audio frame would have.
    /// The caller advances the media timestamp by one frame for every slot, events included
    /// (`Packetizer::skip_frames(1)`), so audio resumes on the clock after the sequence.
    /// `timestamp_step`: the stream's RTP timestamp units per 20 ms slot (160, or 960 for
    /// Opus's 48 kHz clock), which event durations count in.
    pub(crate) fn next_slot(&mut self, media_timestamp: u32, timestamp_step: u32) -> DtmfSlot {
        if self.pos >= self.len {
            return DtmfSlot::Audio;
        }
        let Some(&symbol) = self.queue.get(self.pos) else {
            return DtmfSlot::Audio;
        };
        let frame = self.frame;
        self.frame += 1;
        if self.frame >= symbol.frames() {
            self.frame = 0;
            self.pos += 1;
        }
        let Symbol::Tone {
            event,
            payload_type,
        } = symbol
        else {
            return DtmfSlot::Silence;
        };
        if frame == 0 {
            // RFC 4733 §2.2.1: every packet of an event carries the event's start timestamp.
            self.start_timestamp = media_timestamp;
        }
        // RFC 4733 §2.5.1.4: after the packet that ends the tone (E bit, full duration), the
        // same final packet again in each of the next two slots. Each copy is a new RTP packet
        // with the next sequence number (RFC 3550 §5.1: the sequence number counts packets
        // sent); receivers recognise the repeats by their timestamp, event and E bit.
        if frame >= TONE_FRAMES + END_PACKETS - 1 {
            return DtmfSlot::Silence;
        }
        let played = frame.min(TONE_FRAMES - 1) + 1;
        DtmfSlot::Event(EventPacket {
            payload_type,
            // RFC 4733 §2.2.2: the marker is set on the first packet of an event only.
            marker: frame == 0,
            timestamp: self.start_timestamp,
            payload: TelephoneEvent {
                event,
                end: played == TONE_FRAMES,
                volume: VOLUME,
                // RFC 4733 §2.3.5: duration so far in timestamp units, one step per slot up to
                // the tone's 800 (4800 at 48 kHz).
                duration: (u32::from(played) * timestamp_step) as u16,
            },
            completes_digit: frame == TONE_FRAMES + END_PACKETS - 2,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_rtp::TIMESTAMP_STEP;

    #[test]
    fn parses_twilio_digits() {
        let s = DtmfSequence::parse(101, "0123456789*#ABCDabcdw").expect("valid");
        assert_eq!(s.len, 21);
        assert_eq!(
            s.symbols[15],
            Symbol::Tone {
                event: 15,
                payload_type: 101
            }
        );
        assert_eq!(s.symbols[16], s.symbols[12]);
        assert_eq!(s.symbols[20], Symbol::Pause);
        assert_eq!(
            DtmfSequence::parse(101, "1w#").expect("valid").duration(),
            Duration::from_millis(900)
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(
            DtmfSequence::parse(101, "12x3"),
            Err(Error::InvalidDtmfDigit {
                digit: 'x',
                position: 2
            })
        ));
        assert!(matches!(
            DtmfSequence::parse(101, "1 2"),
            Err(Error::InvalidDtmfDigit { digit: ' ', .. })
        ));
        assert!(matches!(
            DtmfSequence::parse(101, ""),
            Err(Error::DtmfLength { len: 0, max: 64 })
        ));
        let long = "1".repeat(MAX_DTMF_SYMBOLS + 1);
        assert!(matches!(
            DtmfSequence::parse(101, &long),
            Err(Error::DtmfLength { len: 65, .. })
        ));
        assert!(DtmfSequence::parse(101, &long[1..]).is_ok());
        assert!(matches!(
            DtmfSequence::parse(0, "1"),
            Err(Error::DtmfPayloadType(0))
        ));
    }

    #[test]
    fn appends_whole_sequences_only() {
        let mut p = DtmfPlayer::default();
        let full = DtmfSequence::parse(101, &"5".repeat(MAX_DTMF_SYMBOLS)).expect("valid");
        assert!(p.enqueue(&full));
        let one = DtmfSequence::parse(101, "1").expect("valid");
        assert!(!p.enqueue(&one), "no room");
        // Play the first digit out: its room is given back.
        for _ in 0..TONE_FRAMES + GAP_FRAMES {
            assert_ne!(p.next_slot(0, TIMESTAMP_STEP), DtmfSlot::Audio);
        }
        assert!(p.enqueue(&one));
        assert!(!p.enqueue(&one));
    }
}
