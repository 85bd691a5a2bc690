//! # ontime-sender
//!
//! Owns the media clock: one real-time thread (SCHED_FIFO when permitted, pinned to one core) that
//! serves every call's outgoing audio on absolute 20 ms deadlines, pops 160 bytes per stream per
//! tick from lock-free SPSC rings, and counts its own late ticks. The late-tick threshold is
//! defined here.
