//! Property tests of the tick's accounting on simulated time (the sans-IO `TickEngine`): every
//! slot served once, every byte either sent or cleared, every mark reported once and in order,
//! underruns only mid-utterance.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ontime_rtp::{Packetizer, FRAME, FRAME_BYTES, PT_PCMU, TIMESTAMP_STEP};
use ontime_sender::{
    EngineConfig, PacketInfo, PacketSink, StreamConfig, StreamEvent, StreamOutput, TickEngine,
    LATE_TICK_THRESHOLD,
};
use proptest::prelude::*;

#[derive(Default)]
struct Log {
    packets: Vec<(Vec<u8>, PacketInfo)>,
}

struct RecordingSink(Arc<Mutex<Log>>);

impl PacketSink for RecordingSink {
    fn send_packet(&mut self, packet: &[u8], info: PacketInfo) -> io::Result<()> {
        self.0
            .lock()
            .expect("test lock")
            .packets
            .push((packet.to_vec(), info));
        Ok(())
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Push this many frames' worth plus a remainder of bytes.
    Push(u16),
    Mark,
    EndUtterance,
    Clear,
    /// Advance the clock to the next slot plus this many ms of lateness.
    Tick(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u16..2000).prop_map(Op::Push),
        1 => Just(Op::Mark),
        1 => Just(Op::EndUtterance),
        1 => Just(Op::Clear),
        5 => prop_oneof![4 => Just(0u16), 1 => 0u16..150].prop_map(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn every_slot_byte_and_mark_is_accounted_for(ops in proptest::collection::vec(op(), 1..120)) {
        let (mut engine, controller) = TickEngine::new(EngineConfig { metrics: false, ..EngineConfig::default() });
        let log = Arc::new(Mutex::new(Log::default()));
        let mut config = StreamConfig::new(
            Packetizer::with_initial(PT_PCMU, 1, 65_530, u32::MAX - 500),
            StreamOutput::Sink(Box::new(RecordingSink(Arc::clone(&log)))),
        );
        config.ring_capacity_bytes = 16_000;
        let mut producer = controller.add_stream(config).expect("add");
        let mut now = Duration::ZERO;
        engine.run_due(&mut || now); // the stream joins
        // Every pushed byte is numbered by position (mod 250, never the µ-law silence 0xFF).
        let mut pushed = 0u64;
        // The model: what each slot must carry, from positions alone.
        let mut model_popped = 0u64;
        let mut model_clear_to = 0u64;
        let mut expected: Vec<Vec<u8>> = Vec::new();
        let serve = |pushed: u64, clear_to: u64, popped: &mut u64, expected: &mut Vec<Vec<u8>>| {
            *popped = (*popped).max(clear_to);
            let take = (pushed - *popped).min(FRAME_BYTES as u64);
            let mut frame: Vec<u8> = (*popped..*popped + take).map(|p| (p % 250) as u8).collect();
            frame.resize(FRAME_BYTES, 0xFF);
            *popped += take;
            expected.push(frame);
        };
        let mut marks = Vec::new();
        let mut events = Vec::new();
        for op in &ops {
            match op {
                Op::Push(n) => {
                    let bytes: Vec<u8> = (pushed..pushed + u64::from(*n)).map(|p| (p % 250) as u8).collect();
                    pushed += producer.push(&bytes) as u64;
                }
                Op::Mark => {
                    if producer.mark(marks.len() as u64).is_ok() {
                        marks.push(marks.len() as u64);
                    }
                }
                Op::EndUtterance => producer.end_utterance(),
                Op::Clear => {
                    producer.clear();
                    model_clear_to = pushed;
                }
                Op::Tick(late_ms) => {
                    now = engine.poll_timeout() + Duration::from_millis(u64::from(*late_ms));
                    engine.run_due(&mut || now);
                    for _ in 0..=(u64::from(*late_ms) / FRAME.as_millis() as u64) {
                        serve(pushed, model_clear_to, &mut model_popped, &mut expected);
                    }
                }
            }
            while let Some(e) = producer.try_event() {
                events.push(e);
            }
        }
        // Finish: end the utterance and tick until everything queued has gone out.
        producer.end_utterance();
        for _ in 0..200 {
            now = engine.poll_timeout();
            engine.run_due(&mut || now);
            serve(pushed, model_clear_to, &mut model_popped, &mut expected);
        }
        while let Some(e) = producer.try_event() {
            events.push(e);
        }

        let log = log.lock().expect("test lock");
        let stats = controller.stats();
        let stream = producer.stats();
        // One packet per slot, numbered continuously.
        prop_assert_eq!(log.packets.len() as u64, stats.ticks);
        prop_assert_eq!(stream.packets_sent, stats.ticks);
        for (i, (packet, info)) in log.packets.iter().enumerate() {
            prop_assert_eq!(info.slot, i as u64);
            let seq = u16::from_be_bytes([packet[2], packet[3]]);
            let ts = u32::from_be_bytes([packet[4], packet[5], packet[6], packet[7]]);
            prop_assert_eq!(seq, 65_530u16.wrapping_add(i as u16));
            prop_assert_eq!(ts, (u32::MAX - 500).wrapping_add(TIMESTAMP_STEP * i as u32));
            prop_assert_eq!(packet.len(), 12 + FRAME_BYTES);
        }
        // Each slot carried exactly the bytes the position model says (clears cut, silence pads).
        prop_assert_eq!(expected.len(), log.packets.len());
        for (i, ((packet, info), frame)) in log.packets.iter().zip(&expected).enumerate() {
            prop_assert_eq!(&packet[12..], &frame[..], "slot {}", i);
            prop_assert_eq!(info.silence, frame.iter().all(|b| *b == 0xFF));
        }
        prop_assert_eq!(stream.queued_bytes, 0);
        // Every mark reported exactly once, in order.
        let ids: Vec<u64> = events.iter().map(|e| match e { StreamEvent::Mark { id, .. } => *id, _ => u64::MAX }).collect();
        prop_assert_eq!(ids, marks);
        // Lateness accounting matches the injected clock.
        prop_assert!(stats.late_ticks <= stats.ticks);
        prop_assert_eq!(stats.histogram.total(), stats.ticks);
        let max_late = ops.iter().filter_map(|o| match o { Op::Tick(ms) => Some(u64::from(*ms)), _ => None }).max().unwrap_or(0);
        prop_assert!(stats.worst_lateness <= Duration::from_millis(max_late));
        if stats.late_ticks > 0 {
            prop_assert!(stats.worst_lateness > LATE_TICK_THRESHOLD);
        }
        // A wake L ms late serves floor(L / 20) earlier slots as catch-up.
        let expected_catchup: u64 = ops.iter().filter_map(|o| match o { Op::Tick(ms) => Some(u64::from(*ms) / FRAME.as_millis() as u64), _ => None }).sum();
        prop_assert_eq!(stats.catchup_packets, expected_catchup);
    }
}

#[test]
fn underruns_only_mid_utterance() {
    let (mut engine, controller) = TickEngine::new(EngineConfig {
        metrics: false,
        ..EngineConfig::default()
    });
    let log = Arc::new(Mutex::new(Log::default()));
    let mut producer = controller
        .add_stream(StreamConfig::new(
            Packetizer::with_initial(PT_PCMU, 1, 0, 0),
            StreamOutput::Sink(Box::new(RecordingSink(Arc::clone(&log)))),
        ))
        .expect("add");
    let tick = |engine: &mut TickEngine, n: usize| {
        for _ in 0..n {
            let now = engine.poll_timeout();
            engine.run_due(&mut || now);
        }
    };
    tick(&mut engine, 5); // idle: silence, no underruns
    assert_eq!(producer.stats().underruns, 0);
    producer.push(&[1; FRAME_BYTES * 2 + 80]);
    tick(&mut engine, 5); // 2 full frames, a short one, then dry: 3 short frames so far...
    assert_eq!(
        producer.stats().underruns,
        0,
        "not known yet: a pause or a hole?"
    );
    producer.push(&[2; FRAME_BYTES + 80]);
    producer.end_utterance();
    tick(&mut engine, 5); // ...the utterance resumed: they were holes; its padded tail is not
    assert_eq!(producer.stats().underruns, 3);
    // A gap the utterance ends in is a pause: a streaming agent marks the end late.
    producer.push(&[3; FRAME_BYTES]);
    tick(&mut engine, 4); // one frame, then 3 dry ticks
    producer.end_utterance();
    tick(&mut engine, 1);
    producer.push(&[4; FRAME_BYTES]);
    tick(&mut engine, 2);
    assert_eq!(producer.stats().underruns, 3);
    let stats = controller.stats();
    assert_eq!(stats.ticks, 22);
    assert_eq!(stats.underruns, 3);
    assert_eq!(stats.late_ticks, 0);
}
