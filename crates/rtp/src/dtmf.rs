//! RFC 4733 telephone-events (DTMF): the 4-byte payload, and a [`DtmfTracker`] that turns a
//! stream of event packets into digits, each reported once.
//!
//! Senders repeat packets of one event (same RTP timestamp, growing duration) and send the end
//! packet up to three times (RFC 4733 §2.5.1.4); some send it once. The tracker keys an event by
//! its RTP timestamp and reports it at the first end packet, or when a new event starts without
//! an end packet having arrived (the end was lost).

use crate::{Error, Result};

/// Bytes of one telephone-event payload (RFC 4733 §2.3).
pub const TELEPHONE_EVENT_BYTES: usize = 4;

/// One RFC 4733 telephone-event payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TelephoneEvent {
    /// Event code: 0–9 digits, 10 `*`, 11 `#`, 12–15 `A`–`D`, 16 flash.
    pub event: u8,
    /// End bit: this packet ends the event.
    pub end: bool,
    /// Volume, 0–63 (−dBm0).
    pub volume: u8,
    /// Duration so far, in RTP timestamp units.
    pub duration: u16,
}

impl TelephoneEvent {
    /// Parses the first 4 bytes of a payload (§2.3); extra bytes are ignored.
    pub fn parse(payload: &[u8]) -> Result<Self> {
        let [event, flags, d0, d1, ..] = *payload else {
            return Err(Error::TelephoneEventLength { len: payload.len() });
        };
        Ok(TelephoneEvent {
            event,
            end: flags & 0x80 != 0,
            volume: flags & 0x3F,
            duration: u16::from_be_bytes([d0, d1]),
        })
    }

    /// Writes the payload into `out` and returns 4. The reserved bit is written as 0.
    pub fn write(&self, out: &mut [u8]) -> Result<usize> {
        let Some(dst) = out.get_mut(..TELEPHONE_EVENT_BYTES) else {
            return Err(Error::BufferTooSmall {
                needed: TELEPHONE_EVENT_BYTES,
                available: out.len(),
            });
        };
        if self.volume > 0x3F {
            return Err(Error::FieldOverflow {
                field: "telephone-event volume",
                value: u64::from(self.volume),
            });
        }
        let [d0, d1] = self.duration.to_be_bytes();
        dst.copy_from_slice(&[
            self.event,
            (if self.end { 0x80 } else { 0 }) | self.volume,
            d0,
            d1,
        ]);
        Ok(TELEPHONE_EVENT_BYTES)
    }

    /// The DTMF character of this event, if it is a DTMF event.
    pub fn digit(&self) -> Option<char> {
        event_digit(self.event)
    }
}

/// DTMF character of an event code: `0`–`9`, `*`, `#`, `A`–`D` (RFC 4733 §3.2).
pub const fn event_digit(event: u8) -> Option<char> {
    match event {
        0..=9 => Some((b'0' + event) as char),
        10 => Some('*'),
        11 => Some('#'),
        12..=15 => Some((b'A' + event - 12) as char),
        _ => None,
    }
}

/// Event code of a DTMF character (inverse of [`event_digit`]).
pub const fn digit_event(digit: char) -> Option<u8> {
    match digit {
        '0'..='9' => Some(digit as u8 - b'0'),
        '*' => Some(10),
        '#' => Some(11),
        'A'..='D' => Some(digit as u8 - b'A' + 12),
        'a'..='d' => Some(digit as u8 - b'a' + 12),
        _ => None,
    }
}

/// A digit the tracker reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtmfDigit {
    /// The DTMF character.
    pub digit: char,
    /// Event code.
    pub event: u8,
    /// RTP timestamp of the event (its start).
    pub rtp_timestamp: u32,
    /// Longest duration seen, RTP timestamp units.
    pub duration: u16,
    /// Whether an end packet was seen (false: reported because a later event began).
    pub ended: bool,
}

#[derive(Debug, Clone, Copy)]
struct OpenEvent {
    rtp_timestamp: u32,
    event: u8,
    duration: u16,
    reported: bool,
}

/// Turns telephone-event packets into digits, each reported exactly once.
#[derive(Debug, Clone, Default)]
pub struct DtmfTracker {
    current: Option<OpenEvent>,
}

impl DtmfTracker {
    /// A tracker with no event open.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the RTP timestamp and payload of one telephone-event packet. Returns up to two
    /// digits: one whose end was never seen (when this packet starts a new event) and this
    /// event's digit if this is its first end packet. Non-DTMF events (flash) are not reported.
    pub fn on_packet(
        &mut self,
        rtp_timestamp: u32,
        payload: &[u8],
    ) -> Result<[Option<DtmfDigit>; 2]> {
        let event = TelephoneEvent::parse(payload)?;
        let mut out = [None, None];
        let same_event = matches!(self.current, Some(open) if open.rtp_timestamp == rtp_timestamp && open.event == event.event);
        if !same_event {
            out[0] = self.flush();
            self.current = Some(OpenEvent {
                rtp_timestamp,
                event: event.event,
                duration: event.duration,
                reported: false,
            });
        }
        if let Some(open) = self.current.as_mut() {
            open.duration = open.duration.max(event.duration);
            if event.end && !open.reported {
                open.reported = true;
                out[1] = event_digit(open.event).map(|digit| DtmfDigit {
                    digit,
                    event: open.event,
                    rtp_timestamp,
                    duration: open.duration,
                    ended: true,
                });
            }
        }
        Ok(out)
    }

    /// Reports the open event if its end packet never came (call at stream end).
    pub fn flush(&mut self) -> Option<DtmfDigit> {
        let open = self.current.take()?;
        if open.reported {
            return None;
        }
        event_digit(open.event).map(|digit| DtmfDigit {
            digit,
            event: open.event,
            rtp_timestamp: open.rtp_timestamp,
            duration: open.duration,
            ended: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(event: u8, end: bool, duration: u16) -> [u8; 4] {
        let mut b = [0u8; 4];
        TelephoneEvent {
            event,
            end,
            volume: 10,
            duration,
        }
        .write(&mut b)
        .unwrap();
        b
    }

    fn digits(tracker: &mut DtmfTracker, packets: &[(u32, [u8; 4])]) -> String {
        let mut s = String::new();
        for (ts, p) in packets {
            for d in tracker.on_packet(*ts, p).unwrap().into_iter().flatten() {
                s.push(d.digit);
            }
        }
        if let Some(d) = tracker.flush() {
            s.push(d.digit);
        }
        s
    }

    #[test]
    fn round_trip_and_layout() {
        let e = TelephoneEvent {
            event: 11,
            end: true,
            volume: 10,
            duration: 2240,
        };
        let mut b = [0u8; 4];
        assert_eq!(e.write(&mut b).unwrap(), 4);
        assert_eq!(b, [0x0B, 0x8A, 0x08, 0xC0]);
        assert_eq!(TelephoneEvent::parse(&b).unwrap(), e);
        assert_eq!(e.digit(), Some('#'));
        assert_eq!(
            TelephoneEvent::parse(&b[..3]).unwrap_err().reason(),
            "telephone_event"
        );
        assert!(e.write(&mut [0u8; 3]).is_err());
    }

    #[test]
    fn digit_mapping_round_trips() {
        for code in 0..=15u8 {
            let d = event_digit(code).unwrap();
            assert_eq!(digit_event(d), Some(code));
        }
        assert_eq!(event_digit(16), None);
    }

    #[test]
    fn triple_end_reports_once() {
        let mut t = DtmfTracker::new();
        let pkts = [
            (100, payload(1, false, 0)),
            (100, payload(1, false, 320)),
            (100, payload(1, true, 2240)),
            (100, payload(1, true, 2240)),
            (100, payload(1, true, 2240)),
        ];
        assert_eq!(digits(&mut t, &pkts), "1");
    }

    #[test]
    fn single_end_and_lost_end() {
        let mut t = DtmfTracker::new();
        let pkts = [
            (100, payload(6, false, 0)),
            (100, payload(6, true, 960)),
            (2000, payload(7, false, 0)), // end of 7 lost
            (4000, payload(7, false, 0)), // same digit again, a new event (new timestamp)
            (4000, payload(7, true, 480)),
        ];
        assert_eq!(digits(&mut t, &pkts), "677");
    }
}
