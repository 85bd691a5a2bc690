//! DTMF on simulated time: the exact RFC 4733 packets the tick sends for `"1w#"`, the audio that
//! waits for them and resumes on the clock, and the digit counter.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ontime_rtp::{
    parse_rtp, DtmfTracker, Packetizer, TelephoneEvent, FRAME, FRAME_BYTES, PT_PCMU, TIMESTAMP_STEP,
};
use ontime_sender::{
    Controller, EngineConfig, Error, PacketInfo, PacketSink, StreamConfig, StreamOutput,
    StreamProducer, TickEngine, DTMF_GAP, DTMF_PAUSE, DTMF_TONE, MAX_DTMF_SYMBOLS,
};

const PT_EVENT: u8 = 101;
const SSRC: u32 = 0x0D7F_0001;

type Log = Arc<Mutex<Vec<(Vec<u8>, PacketInfo)>>>;

struct RecordingSink(Log);

impl PacketSink for RecordingSink {
    fn send_packet(&mut self, packet: &[u8], info: PacketInfo) -> io::Result<()> {
        self.0
            .lock()
            .expect("test lock")
            .push((packet.to_vec(), info));
        Ok(())
    }
}

struct Call {
    engine: TickEngine,
    controller: Controller,
    producer: StreamProducer,
    log: Log,
    now: Duration,
}

impl Call {
    /// A stream whose sequence and timestamp wrap during the test.
    fn new() -> Self {
        let (mut engine, controller) = TickEngine::new(EngineConfig {
            metrics: false,
            ..EngineConfig::default()
        });
        let log = Log::default();
        let producer = controller
            .add_stream(StreamConfig::new(
                Packetizer::with_initial(PT_PCMU, SSRC, 65_530, u32::MAX - 1000),
                StreamOutput::Sink(Box::new(RecordingSink(Arc::clone(&log)))),
            ))
            .expect("add");
        let now = Duration::ZERO;
        engine.run_due(&mut || now);
        Self {
            engine,
            controller,
            producer,
            log,
            now,
        }
    }

    /// Serve `n` slots, one per wake.
    fn ticks(&mut self, n: usize) {
        for _ in 0..n {
            self.now += FRAME;
            let now = self.now;
            self.engine.run_due(&mut || now);
        }
    }

    fn take(&self) -> Vec<(Vec<u8>, PacketInfo)> {
        std::mem::take(&mut *self.log.lock().expect("test lock"))
    }
}

fn frames(span: Duration) -> usize {
    (span.as_millis() / FRAME.as_millis()) as usize
}

/// Frame `i` of the agent's audio: every byte `i + 1` (never µ-law silence 0xFF).
fn frame(i: u8) -> [u8; FRAME_BYTES] {
    [i + 1; FRAME_BYTES]
}

#[test]
fn digits_pause_and_audio_on_one_clock() {
    let mut call = Call::new();
    for i in 0..10 {
        call.producer.push(&frame(i));
    }
    // Three frames of audio, then the digits; the rest of the audio waits for them.
    call.ticks(3);
    let played = call
        .controller
        .send_dtmf(call.producer.id(), PT_EVENT, "1w#")
        .expect("valid digits");
    let tone = frames(DTMF_TONE);
    let per_digit = tone + frames(DTMF_GAP);
    let total = 2 * per_digit + frames(DTMF_PAUSE);
    assert_eq!((tone, per_digit, total), (5, 10, 45));
    assert_eq!(played, FRAME * total as u32);
    let queued = call.producer.queued_bytes();
    call.ticks(total);
    assert_eq!(
        call.producer.queued_bytes(),
        queued,
        "audio waits while DTMF plays"
    );
    call.ticks(7);
    let packets = call.take();
    assert_eq!(packets.len(), 3 + total + 7, "one packet per slot");

    // Every packet on one SSRC and one sequence space, consecutive across the wrap.
    let views: Vec<_> = packets
        .iter()
        .map(|(p, _)| parse_rtp(p).expect("valid RTP"))
        .collect();
    for (k, v) in views.iter().enumerate() {
        assert_eq!(v.ssrc, SSRC);
        assert_eq!(
            v.sequence_number,
            65_530u16.wrapping_add(k as u16),
            "packet {k}"
        );
    }
    // The media clock: slot k of the call is at this timestamp, whatever it carried.
    let clock = |k: usize| (u32::MAX - 1000).wrapping_add(k as u32 * TIMESTAMP_STEP);

    let mut expected_audio = 0u8;
    let mut tracker = DtmfTracker::new();
    let mut digits = String::new();
    for (k, (v, (_, info))) in views.iter().zip(&packets).enumerate() {
        // Where slot k falls: before the digits, in digit 1, in the pause, in `#`, after.
        let in_seq = k.checked_sub(3).filter(|j| *j < total);
        let digit_frame = in_seq.and_then(|j| match j {
            j if j < per_digit => Some((1u8, j, 3)),
            j if j >= per_digit + frames(DTMF_PAUSE) => Some((
                11,
                j - per_digit - frames(DTMF_PAUSE),
                3 + total - per_digit,
            )),
            _ => None,
        });
        match (in_seq, digit_frame) {
            (None, _) => {
                // Audio, in order, resumed exactly where it stopped, on the clock.
                assert_eq!(v.payload_type, PT_PCMU, "slot {k}");
                assert_eq!(v.payload, &frame(expected_audio)[..], "slot {k}");
                assert_eq!(v.timestamp, clock(k), "slot {k}");
                assert_eq!(
                    v.marker,
                    k == 0,
                    "slot {k}: marker only on the stream's first"
                );
                assert!(!info.telephone_event && !info.silence);
                expected_audio += 1;
            }
            (Some(_), Some((event, f, start))) if f < tone + 2 => {
                // Tone packets, then the end packet twice more.
                assert_eq!(v.payload_type, PT_EVENT, "slot {k}");
                assert_eq!(
                    v.marker,
                    f == 0,
                    "slot {k}: marker on the event's first only"
                );
                assert_eq!(v.timestamp, clock(start), "slot {k}: the event's start");
                let e = TelephoneEvent::parse(v.payload).expect("4 bytes");
                assert_eq!(v.payload.len(), 4);
                let duration = 160 * (f.min(tone - 1) as u16 + 1);
                assert_eq!(
                    (e.event, e.volume, e.duration, e.end),
                    (event, 10, duration, f >= tone - 1),
                    "slot {k}"
                );
                assert!(info.telephone_event && !info.silence);
                for d in tracker.on_packet(v.timestamp, v.payload).expect("event") {
                    digits.extend(d.map(|d| d.digit));
                }
            }
            (Some(_), _) => {
                // The rest of each digit's gap, and the pause: G.711 silence on the clock.
                assert_eq!(v.payload_type, PT_PCMU, "slot {k}");
                assert_eq!(v.payload, &[0xFF; FRAME_BYTES][..], "slot {k}");
                assert_eq!(v.timestamp, clock(k), "slot {k}");
                assert!(!v.marker);
                assert!(info.silence && !info.telephone_event);
            }
        }
    }
    assert_eq!(digits, "1#", "each digit decoded once");
    assert_eq!(expected_audio, 10);
    let end_packets = views
        .iter()
        .filter(|v| v.payload_type == PT_EVENT)
        .filter(|v| TelephoneEvent::parse(v.payload).is_ok_and(|e| e.end && e.duration == 800))
        .count();
    assert_eq!(end_packets, 6, "three end packets per digit");

    let stats = call.producer.stats();
    assert_eq!(stats.dtmf_digits_sent, 2);
    assert_eq!(stats.dtmf_packets_sent, 14);
    assert_eq!(stats.dtmf_dropped, 0);
    assert_eq!(stats.underruns, 0, "waiting for DTMF is not an underrun");
    assert_eq!(stats.packets_sent, packets.len() as u64);
    assert_eq!(call.controller.stats().dtmf_digits_sent, 2);
}

#[test]
fn a_digit_counts_at_its_third_end_packet() {
    let mut call = Call::new();
    call.controller
        .send_dtmf(call.producer.id(), PT_EVENT, "D")
        .expect("valid");
    call.ticks(frames(DTMF_TONE) + 1);
    assert_eq!(call.producer.stats().dtmf_digits_sent, 0);
    call.ticks(1);
    assert_eq!(call.producer.stats().dtmf_digits_sent, 1);
    call.ticks(5);
    assert_eq!(call.producer.stats().dtmf_packets_sent, 7);
}

#[test]
fn sequences_queue_behind_each_other_and_overflow_is_counted() {
    let mut call = Call::new();
    let id = call.producer.id();
    call.controller
        .send_dtmf(id, PT_EVENT, "12")
        .expect("valid");
    call.ticks(1);
    call.controller.send_dtmf(id, PT_EVENT, "3").expect("valid");
    let full = "9".repeat(MAX_DTMF_SYMBOLS);
    call.controller
        .send_dtmf(id, PT_EVENT, &full)
        .expect("valid");
    call.ticks(3 * 10);
    let mut tracker = DtmfTracker::new();
    let mut digits = String::new();
    for (p, _) in call.take() {
        let v = parse_rtp(&p).expect("valid RTP");
        if v.payload_type == PT_EVENT {
            for d in tracker.on_packet(v.timestamp, v.payload).expect("event") {
                digits.extend(d.map(|d| d.digit));
            }
        }
    }
    assert_eq!(digits, "123");
    let stats = call.producer.stats();
    assert_eq!((stats.dtmf_digits_sent, stats.dtmf_dropped), (3, 1));
}

#[test]
fn clear_drops_audio_but_not_digits() {
    let mut call = Call::new();
    call.producer.push(&frame(0));
    call.controller
        .send_dtmf(call.producer.id(), PT_EVENT, "5")
        .expect("valid");
    call.ticks(2);
    call.producer.clear();
    call.ticks(10);
    let packets = call.take();
    let events = packets.iter().filter(|(_, i)| i.telephone_event).count();
    assert_eq!(events, 7, "the digit plays out");
    assert!(packets
        .iter()
        .all(|(p, _)| parse_rtp(p).expect("RTP").payload != &frame(0)[..]));
    assert_eq!(call.producer.stats().dtmf_digits_sent, 1);
}

#[test]
fn invalid_digits_are_errors_naming_the_character() {
    let call = Call::new();
    let id = call.producer.id();
    let err = call.controller.send_dtmf(id, PT_EVENT, "12x").unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidDtmfDigit {
            digit: 'x',
            position: 2
        }
    ));
    assert!(err.to_string().contains("'x'"), "{err}");
    assert!(matches!(
        call.controller.send_dtmf(id, PT_EVENT, ""),
        Err(Error::DtmfLength { len: 0, .. })
    ));
    let long = "1".repeat(MAX_DTMF_SYMBOLS + 1);
    assert!(matches!(
        call.controller.send_dtmf(id, PT_EVENT, &long),
        Err(Error::DtmfLength { .. })
    ));
    assert!(matches!(
        call.controller.send_dtmf(id, PT_PCMU, "1"),
        Err(Error::DtmfPayloadType(PT_PCMU))
    ));
    let played = call
        .controller
        .send_dtmf(id, PT_EVENT, "aBcD*#0w")
        .expect("letters in either case");
    assert_eq!(played, FRAME * (7 * 10 + 25));
}
