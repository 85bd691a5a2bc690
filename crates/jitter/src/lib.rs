//! # ontime-jitter
//!
//! Owns the receiver side of a call, sans-IO: the **replay model** that turns a sender's tick
//! lateness into what a caller's jitter buffer plays and discards (with RFC 3611 burst/gap metrics),
//! and the **live inbound buffer** the gateway uses for the caller's audio (reorder, duplicates,
//! wrap, talkspurts, concealment, adaptive depth). Time is always an argument; there are no threads
//! and no clocks here.
//!
//! ```
//! use std::time::Duration;
//! use ontime_jitter::{replay_fixed_lateness, DEFAULT_REPLAY_DEPTH};
//!
//! // Packet 3 left 70 ms late: at 40 ms depth it misses its slot, everything else plays.
//! let ms = Duration::from_millis;
//! let lateness = [(0, ms(0)), (1, ms(0)), (2, ms(0)), (3, ms(70)), (4, ms(50))];
//! let report = replay_fixed_lateness(DEFAULT_REPLAY_DEPTH, &lateness);
//! assert_eq!((report.played, report.discarded, report.max_discard_run), (3, 2, 2));
//! ```

// The README's examples are compiled and run with the doctests, so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod burst_gap;
pub mod error;
pub mod live;
pub mod replay;
pub mod seq;
pub mod trace;

pub use burst_gap::{rfc3611_fraction, BurstGapCounter, BurstGapMetrics, GMIN_DEFAULT};
pub use error::{Error, Result};
pub use live::{
    ConcealReason, JitterBuffer, JitterConfig, JitterCounters, PlayedFrame, Playout, PushOutcome,
    RtpPacketInfo, VoipMetricsSnapshot, MAX_PAYLOAD_BYTES,
};
pub use replay::{
    arrivals_from_lateness, replay_adaptive, replay_adaptive_lateness, replay_fixed,
    replay_fixed_lateness, PacketOutcome, ReplayModel, ReplayReport, DEFAULT_REPLAY_DEPTH,
};
pub use seq::{extend_sequence_numbers, SeqExtender};
pub use trace::{parse_trace, TraceKind};
