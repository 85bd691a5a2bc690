//! # ontime-loadgen
//!
//! Owns the capacity harness (`ontime-load`): N SIP callers that speak recorded speech in real
//! time, listen to the agent through a 60 ms playout model, and report per step what callers heard
//! (underruns, turn latency) next to the gateway's own counters. A step is ok when every call is
//! answered or refused with 503 (counted apart: the rule judges the admitted calls) and none
//! fails, every turn gets a reply, callers hear at most one underrun per minute of agent audio,
//! p95 turn latency stays within 300 ms of the first step's median and no sender tick is more than
//! 20 ms late; capacity is the most calls admitted in a step with every step up to it ok
//! ([`stats`]).
//!
//! - [`audio`]: the callers' µ-law fixtures, the same speech G.722-encoded for `--codec G722`,
//!   and the silence test for received frames (G.722 through one decoder per stream);
//! - [`listen`]: sans-IO, what one caller hears (agent utterances, underruns) — unit- and
//!   property-tested on simulated time;
//! - [`sip`], [`caller`]: the callers (one `ontime-sip` endpoint, RTP paced by `ontime-sender`);
//! - [`run`], [`stats`]: steps, windows, figures and the ok rule;
//! - [`gateway`], [`procstat`], [`prom`], [`http`]: placing and observing the gateway;
//! - [`report`]: table, JSON and plot;
//! - [`soak`]: soak and churn — N calls kept up for hours, the gateway's memory, fds, sockets,
//!   threads and late ticks sampled at intervals.
//!
//! ```
//! use ontime_loadgen::listen::{AgentListener, Heard};
//! use std::time::Duration;
//!
//! let mut ear = AgentListener::new();
//! let at = |ms| Duration::from_millis(ms);
//! assert_eq!(ear.on_packet(7, false, at(1000)), Some(Heard::AgentStarted { arrival: at(1000) }));
//! // The next packet is 150 ms late: longer than the 60 ms playout buffer, one underrun.
//! ear.on_packet(8, false, at(1170));
//! let heard = ear.finish(at(2000)).unwrap();
//! assert_eq!((heard.frames, heard.underruns), (2, 1));
//! ```

// The README's examples are compiled and run with the doctests, so they stay true to the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::time::Duration;

pub mod audio;
pub mod caller;
mod error;
pub mod gateway;
pub mod http;
pub mod listen;
pub mod os;
pub mod procstat;
pub mod prom;
pub mod report;
pub mod run;
pub mod sip;
pub mod soak;
pub mod stats;

pub use error::{Error, Result};

/// The caller's playout buffer, 60 ms (three frames): a frame not there 60 ms after its schedule
/// (anchored on the utterance's first packet) is a gap the caller hears. Defined here, in the
/// only crate that models the caller.
pub const CALLER_PLAYOUT_DEPTH: Duration = Duration::from_millis(60);
