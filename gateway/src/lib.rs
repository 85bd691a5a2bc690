//! # ontime-gateway
//!
//! A SIP/RTP media gateway for AI voice bots, as a library: answer calls from your SIP trunk,
//! run the caller's audio through a jitter buffer into VAD and Smart Turn, hand turns to an
//! [`Agent`], and send the agent's audio on time from a real-time thread.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ontime_gateway::{Args, Config, Gateway, StubAgent};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::resolve(Args::default())?;
//! let gateway = Gateway::builder(config)
//!     .agent(Arc::new(StubAgent::built_in()?))
//!     .bind()
//!     .await?;
//! println!("SIP on {}", gateway.local_addrs().sip);
//! gateway.run(async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # Ok(())
//! # }
//! ```
//!
//! ## What the library is
//!
//! The public surface is what a host program needs to run the gateway in its own process:
//! [`Gateway`] and its builder, the [`Agent`] trait and the two agents that come with it
//! ([`StubAgent`], [`WsAgent`]), the configuration ([`Args`], the one schema of flags,
//! environment and TOML keys, resolved to a [`Config`]), the call records ([`CallDetailRecord`]),
//! the typed errors, the metric names ([`metrics`]) and the Twilio-compatible types
//! ([`twilio`]). The machinery under it (the sans-IO call core and switchboard, the SIP and HTTP
//! drivers) is crate-private, so it can change without breaking an embedder.
//!
//! ## Features
//!
//! - `cli` (default): the `ontime-gateway` binary's own stack: `clap` (the derive on [`Args`],
//!   `Args::parse_with_ranges`), `tracing-subscriber` and the Prometheus exporter. A host turns
//!   it off (`default-features = false`) and brings its own: it fills [`Args`] in code or from a
//!   TOML file, installs its own `tracing` subscriber and `metrics` recorder, and hands the
//!   gateway a [`MetricsRenderer`] for `/metrics` ([`GatewayBuilder::metrics_renderer`]).
//!
//! Per-call logic is sans-IO: the call core is fed datagrams, dialog events, inference events,
//! agent actions and `Instant`s and returns what to do; the tokio task around it only carries
//! that out. See `docs/architecture.md` for the layout.

mod admission;
mod agent;
mod api;
mod call;
mod call_driver;
mod config;
mod gateway;
mod media_socket;
mod ops;
mod records;
mod registry;
mod resolve;
mod routing;
mod sip_driver;
mod switchboard;
mod tls;
mod transport;

pub use admission::RejectReason;
pub use agent::{
    Admission, AdmissionFuture, Agent, AgentAction, AgentCall, AgentEvent, AgentOutput, CallInfo,
    StubAgent, StubReplyError, TransferResult, WsAgent, WsAgentConfig, WsAgentError,
};
pub use config::{
    AgentKind, AgentUnreachable, Args, BargeIn, Config, ConfigError, LogFormat, PortRange, Secret,
    SrtpMode, TrunkUri, UntrustedSip,
};
pub use gateway::{Bound, Error, Gateway, GatewayBuilder, MetricsRenderer, DEFAULT_MODELS_DIR};
pub use records::cdr::{CallDetailRecord, EndCause, RecordKind};
pub use records::recording::Track;
pub use resolve::ResolveError;
pub use tls::TlsError;

/// The Twilio-compatible surface the gateway serves (TwiML, the Calls resource, `CallControl`,
/// signatures): [`Gateway::call_control`] and [`CallInfo::direction`] speak its types.
pub use ontime_twilio as twilio;

/// Metric names the gateway emits, their label sets, and bucket layouts for its histograms (for
/// the host's recorder: [`metrics::histogram_buckets`]).
pub mod metrics {
    pub use crate::ops::metrics::*;
    pub use crate::ops::ws_metrics::*;
}
