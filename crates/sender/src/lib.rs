//! # ontime-sender
//!
//! Owns the media clock: one real-time thread (SCHED_FIFO when permitted, pinned to one core) that
//! serves every call's outgoing audio on absolute 20 ms deadlines, pops 160 bytes per stream per
//! tick from lock-free SPSC rings, and counts its own late ticks. The late-tick threshold
//! ([`LATE_TICK_THRESHOLD`]) and the lateness histogram's buckets ([`LATENESS_BUCKET_BOUNDS`]) are
//! defined here.
//!
//! ```no_run
//! use ontime_sender::{Sender, SenderConfig, StreamConfig, StreamOutput};
//! use std::sync::Arc;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let sender = Sender::start(SenderConfig::default())?;
//! let socket = Arc::new(std::net::UdpSocket::bind("127.0.0.1:0")?);
//! let output = StreamOutput::Udp { socket, remote: "127.0.0.1:40000".parse()? };
//! // Random SSRC, sequence and timestamp (RFC 3550 §5.1):
//! let packetizer = ontime_rtp::Packetizer::new(ontime_rtp::PT_PCMU);
//! let mut producer = sender.add_stream(StreamConfig::new(packetizer, output))?;
//! producer.push(&[0xFF; 800]); // 100 ms of µ-law audio
//! producer.mark(7)?; // reported as StreamEvent::Mark once its last byte was sent
//! producer.end_utterance();
//! // Twilio's <Play digits>: RFC 4733 telephone-events at the call's negotiated payload type;
//! // the queued audio waits and resumes after the returned 0.9 s.
//! let played = sender.send_dtmf(producer.id(), 101, "1w#")?;
//! assert_eq!(played, std::time::Duration::from_millis(900));
//! // ...barge-in:
//! producer.clear();
//! println!("{:?}", producer.stats());
//! sender.publish_metrics(); // once a second from any non-tick thread
//! # Ok(()) }
//! ```
//!
//! ## DTMF
//! [`Sender::send_dtmf`] (or [`Controller::send_dtmf`]) plays digits on a stream as RFC 4733
//! telephone-events: each digit is a [`DTMF_TONE`] event, one packet per 20 ms slot on the
//! stream's SSRC and sequence numbers, all with the event's start timestamp, the marker on the
//! first, the duration growing by 160 and the E bit on the last, which is sent three times
//! (RFC 4733 §2.5.1.4); then silence to the end of a [`DTMF_GAP`]. A `w` is [`DTMF_PAUSE`] of
//! silence. The media timestamp moves on one frame per slot throughout, so the stream's queued
//! audio, which waits meanwhile, resumes on the clock. Digits played out are counted in
//! [`StreamStats::dtmf_digits_sent`] and [`SenderStats::dtmf_digits_sent`].
//!
//! ## How the tick path stays free of locks and allocation
//! - Audio and marks travel producer → tick in `ringbuf` SPSC rings (atomic head/tail, no lock);
//!   events (marks played) travel back in another SPSC ring per stream.
//! - `clear()` and `end_utterance()` publish a byte position in an `AtomicU64`; the tick compares
//!   positions, so a clear needs no lock and takes effect on the next tick.
//! - Streams are added/removed, and DTMF queued (as an inline array, so dropping it on the tick
//!   frees nothing), through a bounded `crossbeam-channel` the tick drains with `try_recv`
//!   (array flavour: no allocation; it only takes its waker lock when a thread is *blocked* on
//!   the channel, and no one ever blocks: the tick never waits on it and the controller only
//!   uses `try_send`). Removed streams go back to the controller through a second
//!   bounded channel so their memory is freed off the real-time thread.
//! - Counters are atomics; the `metrics` facade is fed from them by [`Sender::publish_metrics`]
//!   outside the tick (the Prometheus recorder's histogram allocates on record).
//! - Packets are built into a fixed buffer; UDP sends use `sendto(MSG_DONTWAIT)`.
//!
//! `tests/no_alloc_tick.rs` proves it with a counting global allocator (allocations and frees,
//! DTMF included).

// The README's examples are compiled and run with the doctests, so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod dtmf;
mod engine;
mod error;
mod metrics_names;
mod os;
mod sender;
mod stats;
mod stream;
mod witness;

pub use dtmf::{DTMF_GAP, DTMF_PAUSE, DTMF_TONE, MAX_DTMF_SYMBOLS};
pub use engine::{Controller, EngineConfig, TickEngine};
pub use error::{Error, Result};
pub use metrics_names::describe_metrics;
pub use sender::{Sender, SenderConfig};
pub use stats::{LatenessHistogram, SenderStats, TickSample};
pub use stream::{
    PacketInfo, PacketSink, SentFrame, StreamConfig, StreamEvent, StreamId, StreamOutput,
    StreamProducer, StreamStats,
};
pub use witness::core_steal;

use std::time::Duration;

/// A tick is late when it fires more than one frame (20 ms) after its slot: by then a whole
/// packet's slot has passed, and a caller's jitter buffer starts discarding. Defined here, the
/// crate that owns the clock; others import it.
pub const LATE_TICK_THRESHOLD: Duration = ontime_rtp::FRAME;

/// Upper bounds of the lateness histogram's buckets (the last bucket holds everything above
/// 200 ms). Bucket `i` counts lateness `<= LATENESS_BUCKET_BOUNDS[i]` and above the previous bound,
/// matching Prometheus' inclusive `le` buckets.
pub const LATENESS_BUCKET_BOUNDS: [Duration; 11] = [
    Duration::from_micros(100),
    Duration::from_micros(250),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_millis(2),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(20),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(200),
];

/// [`LATENESS_BUCKET_BOUNDS`] in seconds, for configuring a Prometheus histogram of
/// `ontime_sender_tick_lateness_seconds` with the same buckets.
pub const LATENESS_BUCKET_BOUNDS_SECONDS: [f64; 11] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    #[test]
    fn handles_cross_threads() {
        // The gateway shares the controller across tasks and moves producers into them.
        send_sync::<Sender>();
        send_sync::<Controller>();
        send::<StreamProducer>();
        send::<TickEngine>();
    }

    #[test]
    fn bucket_bounds_agree() {
        for (d, s) in LATENESS_BUCKET_BOUNDS
            .iter()
            .zip(LATENESS_BUCKET_BOUNDS_SECONDS)
        {
            assert!((d.as_secs_f64() - s).abs() < 1e-12);
        }
        assert!(LATENESS_BUCKET_BOUNDS.windows(2).all(|w| w[0] < w[1]));
    }
}
