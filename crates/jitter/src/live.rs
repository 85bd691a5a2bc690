//! The live inbound jitter buffer (see the crate docs). Work in progress: configuration only.

use std::time::Duration;

use crate::error::{Error, Result};

/// Configuration of the adaptive jitter buffer (live, and the replay's adaptive model).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JitterConfig {
    /// Smallest playout depth the buffer adapts down to.
    pub min_depth: Duration,
    /// Largest playout depth the buffer grows to (RFC 3611 "JB abs max").
    pub max_depth: Duration,
    /// Depth used for the first talkspurt, before any delay history exists.
    pub initial_depth: Duration,
    /// Added on top of the delay percentile to form the target depth.
    pub margin: Duration,
    /// Packets of delay history the target is computed over.
    pub window_packets: usize,
    /// Percentile of the delay history (0..=100) the target covers.
    pub percentile: u8,
    /// Least time between two one-frame shrinks inside a talkspurt.
    pub shrink_interval: Duration,
    /// Preallocated packet slots (bounds the buffered span; overflow drops the oldest).
    pub capacity_packets: usize,
}

impl Default for JitterConfig {
    fn default() -> Self {
        Self {
            min_depth: Duration::from_millis(20),
            max_depth: Duration::from_millis(200),
            initial_depth: crate::replay::DEFAULT_REPLAY_DEPTH,
            margin: Duration::from_millis(20),
            window_packets: 250,
            percentile: 97,
            shrink_interval: Duration::from_millis(500),
            capacity_packets: 32,
        }
    }
}

impl JitterConfig {
    /// Checks that the configuration can work.
    pub fn validate(&self) -> Result<()> {
        if self.min_depth > self.max_depth {
            return Err(Error::InvalidConfig("min_depth exceeds max_depth"));
        }
        if self.initial_depth < self.min_depth || self.initial_depth > self.max_depth {
            return Err(Error::InvalidConfig(
                "initial_depth outside [min_depth, max_depth]",
            ));
        }
        if self.window_packets == 0 {
            return Err(Error::InvalidConfig("window_packets must be at least 1"));
        }
        if self.percentile > 100 {
            return Err(Error::InvalidConfig("percentile must be within 0..=100"));
        }
        if self.capacity_packets < 2 {
            return Err(Error::InvalidConfig("capacity_packets must be at least 2"));
        }
        Ok(())
    }
}
