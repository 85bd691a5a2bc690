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
//! Per-call logic is sans-IO: [`call::CallCore`] is fed datagrams, dialog events, inference
//! events, agent actions and `Instant`s and returns what to do; the tokio task around it only
//! carries that out. See `docs/architecture.md` for the layout.

mod admission;
mod agent;
mod api;
pub mod call;
mod call_driver;
mod config;
mod gateway;
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
    AgentKind, AgentUnreachable, Args, BargeIn, Config, ConfigError, LogFormat, SrtpMode,
    UntrustedSip,
};
pub use gateway::{Bound, Error, Gateway, GatewayBuilder, MetricsRenderer, DEFAULT_MODELS_DIR};
pub use records::cdr::{CallDetailRecord, EndCause, RecordKind};
pub use records::recording::Track;
pub use resolve::ResolveError;
pub use tls::TlsError;

/// The Twilio-compatible surface the gateway serves (TwiML, the Calls resource, `CallControl`,
/// signatures): [`Gateway::call_control`] and [`CallInfo::direction`] speak its types.
pub use ontime_twilio as twilio;

/// Metric names the gateway emits and bucket layouts for its histograms.
pub mod metrics {
    pub use crate::ops::metrics::*;
    pub use crate::ops::ws_metrics::*;
}
