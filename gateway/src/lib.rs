//! # ontime-gateway
//!
//! The composition: configuration, the SIP endpoint, per-call media (RTP in through the jitter
//! buffer to the inference pool; agent audio out through the sender), agents, the metrics
//! endpoint, admission and drain. A library with a thin `main`, so a Rust voice stack can embed it.

pub mod agent;
pub mod app;
pub mod call;
pub mod cdr;
pub mod cgroup_watch;
pub mod config;
pub mod http;
pub mod inbound;
pub mod metrics;
pub mod ports;
pub mod recording;
pub mod rtcp;
pub mod server;
pub mod ws_agent;
