//! # ontime-loadgen
//!
//! Owns the capacity harness (`ontime-load`): N SIP callers that speak recorded speech in real
//! time, listen to the agent through a 60 ms playout model, and report per step what callers heard
//! (underruns, turn latency) next to the gateway's own counters.
