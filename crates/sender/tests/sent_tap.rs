//! The sent tap returns exactly what the tick sent, silence fill included, with each slot's
//! scheduled time: what a call recording needs to line the agent's audio up with the caller's.

use std::io;
use std::time::Duration;

use ontime_rtp::{Packetizer, FRAME_BYTES, PT_PCMU};
use ontime_sender::{EngineConfig, PacketInfo, PacketSink, StreamConfig, StreamOutput, TickEngine};

struct Discard;

impl PacketSink for Discard {
    fn send_packet(&mut self, _packet: &[u8], _info: PacketInfo) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn tap_holds_each_sent_frame_with_its_slot_time() {
    let (mut engine, controller) = TickEngine::new(EngineConfig {
        metrics: false,
        ..EngineConfig::default()
    });
    let mut config = StreamConfig::new(
        Packetizer::with_initial(PT_PCMU, 1, 0, 0),
        StreamOutput::Sink(Box::new(Discard)),
    );
    config.sent_tap_frames = 4;
    let mut producer = controller.add_stream(config).unwrap();
    // Two and a half frames of audio: the third frame is padded with µ-law silence.
    producer.push(&[0x55; FRAME_BYTES * 5 / 2]);
    producer.end_utterance();
    let mut now = Duration::ZERO;
    for _ in 0..6 {
        now += Duration::from_millis(20);
        engine.run_due(&mut || now);
    }
    let mut frames = Vec::new();
    while let Some(f) = producer.try_sent_frame() {
        frames.push(f);
    }
    // Six slots served, the tap holds four: the last two are counted as dropped.
    assert_eq!(frames.len(), 4);
    assert_eq!(producer.stats().tap_dropped, 2);
    assert_eq!(producer.stats().packets_sent, 6);
    let times: Vec<u128> = frames.iter().map(|f| f.scheduled.as_millis()).collect();
    assert_eq!(times, vec![20, 40, 60, 80]);
    assert!(frames[0].payload.iter().all(|b| *b == 0x55));
    assert!(frames[1].payload.iter().all(|b| *b == 0x55));
    assert!(frames[2].payload[..FRAME_BYTES / 2]
        .iter()
        .all(|b| *b == 0x55));
    assert!(frames[2].payload[FRAME_BYTES / 2..]
        .iter()
        .all(|b| *b == 0xFF));
    assert!(frames[3].payload.iter().all(|b| *b == 0xFF));
}
