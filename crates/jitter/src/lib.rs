//! # ontime-jitter
//!
//! Owns the receiver side of a call, sans-IO: the **replay model** that turns a sender's tick
//! lateness into what a caller's jitter buffer plays and discards (with RFC 3611 burst/gap metrics),
//! and the **live inbound buffer** the gateway uses for the caller's audio (reorder, duplicates,
//! wrap, talkspurts, concealment, adaptive depth). Time is always an argument; there are no threads
//! and no clocks here.
